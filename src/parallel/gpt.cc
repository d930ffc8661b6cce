#include "parallel/gpt.h"

#include <algorithm>

#include "mpcomm/error.h"
#include "parallel/kernels.h"

namespace mpcomm::parallel {

// The parameters of one block, as pointers into the flat buffers (d* into the gradients).
struct GPTStage::Block {
  const float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  float *dln1_w, *dln1_b, *dattn_w, *dattn_b, *dproj_w, *dproj_b, *dln2_w, *dln2_b, *dfc_w, *dfc_b, *dfcproj_w,
      *dfcproj_b;
};

// What the backward of one micro-batch needs from its forward.
struct GPTStage::Activations {
  std::vector<int32_t> tokens, targets;
  std::vector<float> input;  // [R,C] the stage's input (the embedding on the first stage)
  struct Layer {
    std::vector<float> ln1, ln1_mean, ln1_rstd;  // [R,C], [R], [R] (R: rows(), N or N/tp)
    std::vector<float> ln1_full, ln2_full;       // sequence parallelism: ln1, ln2 gathered, [N,C]
    std::vector<float> qkv;                      // [N,3Cl]
    std::vector<float> att;                      // [B,Hl,T,T]
    std::vector<float> atty;                     // [N,Cl]
    std::vector<float> res2;                     // [R,C] x + attn
    std::vector<float> ln2, ln2_mean, ln2_rstd;  // [R,C], [R], [R]
    std::vector<float> fch, fch_gelu;            // [N,4Cl]
    std::vector<float> res3;                     // [R,C] the block's output
    MoELayer::Saved moe;                         // mixture of experts, in place of fch
  };
  std::vector<Layer> layers;
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // last stage, [R,C], [R], [R]
  std::vector<float> lnf_full;                 // sequence parallelism: lnf gathered, [N,C]
  std::vector<float> logits, maxv, sumexp;     // [N,Vl], [N], [N]
};

size_t GPTStage::activation_floats() const {
  size_t n = 0;
  for (const auto& [micro, a] : acts_) {
    n += a->input.size() + a->lnf.size() + a->lnf_mean.size() + a->lnf_rstd.size() + a->lnf_full.size() +
         a->logits.size() + a->maxv.size() + a->sumexp.size();
    for (const auto& l : a->layers)
      n += l.ln1.size() + l.ln1_mean.size() + l.ln1_rstd.size() + l.ln1_full.size() + l.ln2_full.size() + l.qkv.size() +
           l.att.size() + l.atty.size() + l.res2.size() + l.ln2.size() + l.ln2_mean.size() + l.ln2_rstd.size() +
           l.fch.size() + l.fch_gelu.size() + l.res3.size();
  }
  return n;
}

GPTStage::GPTStage(const ShardLayout& layout, TensorParallel& tp, const float* params, float* grads, size_t B, size_t T,
                   bool sequence_parallel, const MoEConfig& moe)
    : layout_(layout),
      tp_(tp),
      B_(B),
      T_(T),
      N_(B * T),
      sp_(sequence_parallel && tp.size() > 1),
      R_(sp_ ? N_ / static_cast<size_t>(tp.size()) : N_),
      row0_(sp_ ? R_ * static_cast<size_t>(tp.rank()) : 0) {
  if (sp_ && N_ % static_cast<size_t>(tp.size()) != 0)
    throw Internal("GPT stage: " + std::to_string(N_) + " rows do not split over " + std::to_string(tp.size()) +
                   " tensor-parallel ranks");
  const auto& cfg = layout.config();
  C_ = static_cast<size_t>(cfg.hidden);
  Hl_ = static_cast<size_t>(cfg.heads / layout.tp());
  hd_ = static_cast<size_t>(cfg.head_dim());
  Cl_ = Hl_ * hd_;
  const auto& st = layout.stage();
  auto p = [&](const std::string& n) { return params + layout.at(n).offset; };
  auto g = [&](const std::string& n) { return grads + layout.at(n).offset; };
  for (int i = st.first_layer; i < st.end_layer; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    if (cfg.is_moe(i)) {
      std::vector<ExpertWeights> experts;
      for (int e = layout.first_expert(); e < layout.first_expert() + layout.local_experts(); ++e) {
        const std::string x = expert_prefix(i, e);
        experts.push_back({p(x + "c_fc.weight"), p(x + "c_fc.bias"), p(x + "c_proj.weight"), p(x + "c_proj.bias"),
                           g(x + "c_fc.weight"), g(x + "c_fc.bias"), g(x + "c_proj.weight"), g(x + "c_proj.bias")});
      }
      MoEConfig mc = moe;
      mc.rows_tp = sp_ ? &tp_ : nullptr;
      moe_.push_back(std::make_unique<MoELayer>(mc, C_, p(router_name(i)), g(router_name(i)), std::move(experts)));
      Block b{p(h + "ln_1.weight"),
              p(h + "ln_1.bias"),
              p(h + "attn.c_attn.weight"),
              p(h + "attn.c_attn.bias"),
              p(h + "attn.c_proj.weight"),
              p(h + "attn.c_proj.bias"),
              p(h + "ln_2.weight"),
              p(h + "ln_2.bias"),
              nullptr,
              nullptr,
              nullptr,
              nullptr,
              g(h + "ln_1.weight"),
              g(h + "ln_1.bias"),
              g(h + "attn.c_attn.weight"),
              g(h + "attn.c_attn.bias"),
              g(h + "attn.c_proj.weight"),
              g(h + "attn.c_proj.bias"),
              g(h + "ln_2.weight"),
              g(h + "ln_2.bias"),
              nullptr,
              nullptr,
              nullptr,
              nullptr};
      blocks_.push_back(b);
      continue;
    }
    moe_.push_back(nullptr);
    Block b{p(h + "ln_1.weight"), p(h + "ln_1.bias"), p(h + "attn.c_attn.weight"), p(h + "attn.c_attn.bias"),
            p(h + "attn.c_proj.weight"), p(h + "attn.c_proj.bias"), p(h + "ln_2.weight"), p(h + "ln_2.bias"),
            p(h + "mlp.c_fc.weight"), p(h + "mlp.c_fc.bias"), p(h + "mlp.c_proj.weight"), p(h + "mlp.c_proj.bias"),
            g(h + "ln_1.weight"), g(h + "ln_1.bias"), g(h + "attn.c_attn.weight"), g(h + "attn.c_attn.bias"),
            g(h + "attn.c_proj.weight"), g(h + "attn.c_proj.bias"), g(h + "ln_2.weight"), g(h + "ln_2.bias"),
            g(h + "mlp.c_fc.weight"), g(h + "mlp.c_fc.bias"), g(h + "mlp.c_proj.weight"), g(h + "mlp.c_proj.bias")};
    blocks_.push_back(b);
  }
  if (st.first || st.last) {
    wte_ = p("wte.weight");
    dwte_ = g("wte.weight");
    vocab_.rows = static_cast<int>(layout.at("wte.weight").local_shape[0]);
    vocab_.begin = layout.tp_rank() * vocab_.rows;
    vocab_.vocab = cfg.vocab;
  }
  if (st.first) {
    wpe_ = p("wpe.weight");
    dwpe_ = g("wpe.weight");
  }
  if (st.last) {
    lnf_w_ = p("ln_f.weight");
    lnf_b_ = p("ln_f.bias");
    dlnf_w_ = g("ln_f.weight");
    dlnf_b_ = g("ln_f.bias");
    dlogits_.resize(N_ * static_cast<size_t>(vocab_.rows));
  }
  dx_.resize(N_ * C_);
  dbuf_nc_.resize(N_ * C_);
  dbuf_n4c_.resize(N_ * 4 * Cl_);
  dbuf_n4c2_.resize(N_ * 4 * Cl_);
  dbuf_qkv_.resize(N_ * 3 * Cl_);
  dbuf_ncl_.resize(N_ * Cl_);
  dbuf_att_.resize(B_ * Hl_ * T_ * T_);
  if (sp_) scratch_nc_.resize(N_ * C_);
}

std::vector<std::string> GPTStage::partial_gradient_params() const {
  if (!sp_) return {};
  std::vector<std::string> out;
  const auto& st = layout_.stage();
  for (int i = st.first_layer; i < st.end_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias"})
      out.push_back(h + n);
    if (!layout_.config().is_moe(i)) {
      out.push_back(h + "mlp.c_proj.bias");
      continue;
    }
    // a mixture of experts works on the rank's rows only: every one of its gradients is partial
    out.push_back(router_name(i));
    for (int e = layout_.first_expert(); e < layout_.first_expert() + layout_.local_experts(); ++e)
      for (const char* n : {"c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"})
        out.push_back(expert_prefix(i, e) + n);
  }
  if (st.last) out.insert(out.end(), {"ln_f.weight", "ln_f.bias"});
  return out;
}

// ---------------------------------------------------------------------------------------------------
// the layers that sequence parallelism changes

const float* GPTStage::column_input(const std::vector<float>& rows_in, std::vector<float>& full) {
  if (!sp_) return rows_in.data();
  full.resize(N_ * C_);
  gather_rows(tp_, rows_in.data(), full.data(), R_, C_);
  return full.data();
}

void GPTStage::row_forward(float* out, const float* in, const float* w, const float* b, size_t Il) {
  if (sp_)
    RowParallelLinearSP::forward(tp_, out, in, w, b, N_, Il, C_, scratch_nc_.data());
  else
    RowParallelLinear::forward(tp_, out, in, w, b, N_, Il, C_);
}

void GPTStage::row_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                            size_t Il) {
  if (sp_)
    RowParallelLinearSP::backward(tp_, din, dw, db, dout, in, w, N_, Il, C_, scratch_nc_.data());
  else
    RowParallelLinear::backward(din, dw, db, dout, in, w, N_, Il, C_);
}

void GPTStage::column_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                               size_t Ol) {
  if (sp_)
    ColumnParallelLinearSP::backward(tp_, din, dw, db, dout, in, w, N_, C_, Ol, scratch_nc_.data());
  else
    ColumnParallelLinear::backward(tp_, din, dw, db, dout, in, w, N_, C_, Ol);
}

GPTStage::~GPTStage() = default;

// ---------------------------------------------------------------------------------------------------
// one block

void GPTStage::block_forward(const Block& b, Activations& a, size_t l, const float* x) {
  auto& L = a.layers[l];
  const size_t N = N_, R = R_, C = C_, Cl = Cl_;
  L.ln1.resize(R * C), L.ln1_mean.resize(R), L.ln1_rstd.resize(R);
  L.qkv.resize(N * 3 * Cl), L.att.resize(B_ * Hl_ * T_ * T_), L.atty.resize(N * Cl), L.res2.resize(R * C);
  L.ln2.resize(R * C), L.ln2_mean.resize(R), L.ln2_rstd.resize(R);
  L.fch.resize(N * 4 * Cl), L.fch_gelu.resize(N * 4 * Cl), L.res3.resize(R * C);
  // attention
  layernorm_forward(L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), x, b.ln1_w, b.ln1_b, R, C);
  ColumnParallelLinear::forward(L.qkv.data(), column_input(L.ln1, L.ln1_full), b.attn_w, b.attn_b, N, C, 3 * Cl);
  attention_forward(L.atty.data(), L.att.data(), L.qkv.data(), B_, T_, Hl_, hd_);
  row_forward(L.res2.data(), L.atty.data(), b.proj_w, b.proj_b, Cl);
  accumulate(L.res2.data(), x, R * C);
  // MLP
  layernorm_forward(L.ln2.data(), L.ln2_mean.data(), L.ln2_rstd.data(), L.res2.data(), b.ln2_w, b.ln2_b, R, C);
  if (moe_[l]) {  // on the rows this rank holds: no tensor-parallel traffic
    const double aux = moe_[l]->forward(L.moe, L.res3.data(), L.ln2.data(), R, row0_, T_);
    if (tp_.rank() == 0) aux_loss_ += aux;  // the same on every tensor-parallel rank
    routing_.push_back(L.moe.expert_tokens);
    L.fch.clear(), L.fch_gelu.clear();
    accumulate(L.res3.data(), L.res2.data(), R * C);
    return;
  }
  ColumnParallelLinear::forward(L.fch.data(), column_input(L.ln2, L.ln2_full), b.fc_w, b.fc_b, N, C, 4 * Cl);
  gelu_forward(L.fch_gelu.data(), L.fch.data(), N * 4 * Cl);
  row_forward(L.res3.data(), L.fch_gelu.data(), b.fcproj_w, b.fcproj_b, 4 * Cl);
  accumulate(L.res3.data(), L.res2.data(), R * C);
}

// dx holds the gradient of the block's output on entry and of its input x on return ([R,C] each).
void GPTStage::block_backward(const Block& b, Activations& a, size_t l, const float* x, float* dx) {
  auto& L = a.layers[l];
  const size_t N = N_, R = R_, C = C_, Cl = Cl_;
  float* dfch_gelu = dbuf_n4c_.data();
  float* dfch = dbuf_n4c2_.data();
  float* dln = dbuf_nc_.data();
  const float* ln1_in = sp_ ? L.ln1_full.data() : L.ln1.data();
  const float* ln2_in = sp_ ? L.ln2_full.data() : L.ln2.data();
  // MLP: res3 = res2 + mlp(ln_2(res2)); the residual passes dx through unchanged
  if (moe_[l]) {
    moe_[l]->backward(L.moe, dln, dx, L.ln2.data(), moe_loss_scale_);
  } else {
    row_backward(dfch_gelu, b.dfcproj_w, b.dfcproj_b, dx, L.fch_gelu.data(), b.fcproj_w, 4 * Cl);
    gelu_backward(dfch, L.fch.data(), dfch_gelu, N * 4 * Cl);
    column_backward(dln, b.dfc_w, b.dfc_b, dfch, ln2_in, b.fc_w, 4 * Cl);
  }
  layernorm_backward(dx, b.dln2_w, b.dln2_b, dln, L.res2.data(), b.ln2_w, L.ln2_mean.data(), L.ln2_rstd.data(), R, C);
  // attention: res2 = x + attn(ln_1(x))
  float* datty = dbuf_ncl_.data();
  float* dqkv = dbuf_qkv_.data();
  row_backward(datty, b.dproj_w, b.dproj_b, dx, L.atty.data(), b.proj_w, Cl);
  attention_backward(dqkv, dbuf_att_.data(), datty, L.qkv.data(), L.att.data(), B_, T_, Hl_, hd_);
  column_backward(dln, b.dattn_w, b.dattn_b, dqkv, ln1_in, b.attn_w, 3 * Cl);
  layernorm_backward(dx, b.dln1_w, b.dln1_b, dln, x, b.ln1_w, L.ln1_mean.data(), L.ln1_rstd.data(), R, C);
}

// ---------------------------------------------------------------------------------------------------
// the stage

const float* GPTStage::forward(int micro, const float* input, const int32_t* tokens, const int32_t* targets,
                               double* loss_sum) {
  const auto& st = layout_.stage();
  auto& slot = acts_[micro];
  if (slot) throw Internal("GPT stage: forward of micro-batch " + std::to_string(micro) + " ran twice");
  slot = std::make_unique<Activations>();
  Activations& a = *slot;
  const size_t N = N_, R = R_, C = C_;
  a.input.resize(R * C);
  if (st.first) {
    a.tokens.assign(tokens, tokens + N);
    if (sp_)
      VocabParallelEmbeddingSP::forward(tp_, a.input.data(), a.tokens.data(), wte_, wpe_, vocab_, B_, T_, C, row0_,
                                        scratch_nc_.data());
    else
      VocabParallelEmbedding::forward(tp_, a.input.data(), a.tokens.data(), wte_, wpe_, vocab_, B_, T_, C);
  } else {
    std::copy_n(input, R * C, a.input.data());
  }
  a.layers.resize(blocks_.size());
  const float* x = a.input.data();
  for (size_t l = 0; l < blocks_.size(); ++l) {
    block_forward(blocks_[l], a, l, x);
    x = a.layers[l].res3.data();
  }
  if (!st.last) return x;
  // final LayerNorm, tied output layer, loss
  const size_t Vl = static_cast<size_t>(vocab_.rows);
  a.targets.assign(targets, targets + N);
  a.lnf.resize(R * C), a.lnf_mean.resize(R), a.lnf_rstd.resize(R);
  a.logits.resize(N * Vl), a.maxv.resize(N), a.sumexp.resize(N);
  layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, lnf_w_, lnf_b_, R, C);
  ParallelLMHead::forward(a.logits.data(), column_input(a.lnf, a.lnf_full), wte_, N, C, Vl);
  std::vector<float> losses(N);
  VocabParallelCrossEntropy::forward(tp_, losses.data(), a.maxv.data(), a.sumexp.data(), a.logits.data(),
                                     a.targets.data(), vocab_, N);
  double sum = 0;
  for (float l : losses) sum += l;
  *loss_sum += sum;
  return nullptr;
}

const float* GPTStage::backward(int micro, const float* dout, float loss_scale,
                                const std::function<void(size_t)>* final) {
  const auto& st = layout_.stage();
  auto it = acts_.find(micro);
  if (it == acts_.end())
    throw Internal("GPT stage: backward of micro-batch " + std::to_string(micro) + " before its forward");
  Activations& a = *it->second;
  const size_t N = N_, R = R_, C = C_;
  float* dx = dx_.data();
  moe_loss_scale_ = loss_scale;
  const float* stage_out = a.layers.empty() ? a.input.data() : a.layers.back().res3.data();
  if (st.last) {
    const size_t Vl = static_cast<size_t>(vocab_.rows);
    VocabParallelCrossEntropy::backward(dlogits_.data(), a.logits.data(), a.maxv.data(), a.sumexp.data(),
                                        a.targets.data(), vocab_, N, loss_scale);
    float* dlnf = dbuf_nc_.data();
    if (sp_)
      ParallelLMHead::backward_sp(tp_, dlnf, dwte_, dlogits_.data(), a.lnf_full.data(), wte_, N, C, Vl,
                                  scratch_nc_.data());
    else
      ParallelLMHead::backward(tp_, dlnf, dwte_, dlogits_.data(), a.lnf.data(), wte_, N, C, Vl);
    std::fill(dx, dx + R * C, 0.0f);
    layernorm_backward(dx, dlnf_w_, dlnf_b_, dlnf, stage_out, lnf_w_, a.lnf_mean.data(), a.lnf_rstd.data(), R, C);
    if (final != nullptr) (*final)(layout_.at("ln_f.weight").offset);
  } else {
    std::copy_n(dout, R * C, dx);
  }
  for (size_t l = blocks_.size(); l-- > 0;) {
    const float* x = l == 0 ? a.input.data() : a.layers[l - 1].res3.data();
    block_backward(blocks_[l], a, l, x, dx);
    if (final != nullptr)
      (*final)(
          layout_.at("h." + std::to_string(layout_.stage().first_layer + static_cast<int>(l)) + ".ln_1.weight").offset);
  }
  if (st.first && sp_)
    VocabParallelEmbeddingSP::backward(tp_, dwte_, dwpe_, dx, a.tokens.data(), vocab_, B_, T_, C, scratch_nc_.data());
  else if (st.first)
    VocabParallelEmbedding::backward(dwte_, dwpe_, dx, a.tokens.data(), vocab_, B_, T_, C);
  if (st.first && final != nullptr) (*final)(0);
  acts_.erase(it);
  return st.first ? nullptr : dx;
}

}  // namespace mpcomm::parallel
