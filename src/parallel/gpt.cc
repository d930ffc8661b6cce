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
  std::vector<float> input;  // [N,C] the stage's input (the embedding on the first stage)
  struct Layer {
    std::vector<float> ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
    std::vector<float> qkv;                      // [N,3Cl]
    std::vector<float> att;                      // [B,Hl,T,T]
    std::vector<float> atty;                     // [N,Cl]
    std::vector<float> res2;                     // [N,C] x + attn
    std::vector<float> ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
    std::vector<float> fch, fch_gelu;            // [N,4Cl]
    std::vector<float> res3;                     // [N,C] the block's output
  };
  std::vector<Layer> layers;
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // last stage
  std::vector<float> logits, maxv, sumexp;     // [N,Vl], [N], [N]
};

GPTStage::GPTStage(const ShardLayout& layout, TensorParallel& tp, const float* params, float* grads, size_t B,
                   size_t T)
    : layout_(layout), tp_(tp), B_(B), T_(T), N_(B * T) {
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
}

GPTStage::~GPTStage() = default;

// ---------------------------------------------------------------------------------------------------
// one block

void GPTStage::block_forward(const Block& b, Activations& a, size_t l, const float* x) {
  auto& L = a.layers[l];
  const size_t N = N_, C = C_, Cl = Cl_;
  L.ln1.resize(N * C), L.ln1_mean.resize(N), L.ln1_rstd.resize(N);
  L.qkv.resize(N * 3 * Cl), L.att.resize(B_ * Hl_ * T_ * T_), L.atty.resize(N * Cl), L.res2.resize(N * C);
  L.ln2.resize(N * C), L.ln2_mean.resize(N), L.ln2_rstd.resize(N);
  L.fch.resize(N * 4 * Cl), L.fch_gelu.resize(N * 4 * Cl), L.res3.resize(N * C);
  // attention
  layernorm_forward(L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), x, b.ln1_w, b.ln1_b, N, C);
  ColumnParallelLinear::forward(L.qkv.data(), L.ln1.data(), b.attn_w, b.attn_b, N, C, 3 * Cl);
  attention_forward(L.atty.data(), L.att.data(), L.qkv.data(), B_, T_, Hl_, hd_);
  RowParallelLinear::forward(tp_, L.res2.data(), L.atty.data(), b.proj_w, b.proj_b, N, Cl, C);
  accumulate(L.res2.data(), x, N * C);
  // MLP
  layernorm_forward(L.ln2.data(), L.ln2_mean.data(), L.ln2_rstd.data(), L.res2.data(), b.ln2_w, b.ln2_b, N, C);
  ColumnParallelLinear::forward(L.fch.data(), L.ln2.data(), b.fc_w, b.fc_b, N, C, 4 * Cl);
  gelu_forward(L.fch_gelu.data(), L.fch.data(), N * 4 * Cl);
  RowParallelLinear::forward(tp_, L.res3.data(), L.fch_gelu.data(), b.fcproj_w, b.fcproj_b, N, 4 * Cl, C);
  accumulate(L.res3.data(), L.res2.data(), N * C);
}

// dx holds the gradient of the block's output on entry and of its input x on return.
void GPTStage::block_backward(const Block& b, Activations& a, size_t l, const float* x, float* dx) {
  auto& L = a.layers[l];
  const size_t N = N_, C = C_, Cl = Cl_;
  float* dfch_gelu = dbuf_n4c_.data();
  float* dfch = dbuf_n4c2_.data();
  float* dln = dbuf_nc_.data();
  // MLP: res3 = res2 + mlp(ln_2(res2)); the residual passes dx through unchanged
  RowParallelLinear::backward(dfch_gelu, b.dfcproj_w, b.dfcproj_b, dx, L.fch_gelu.data(), b.fcproj_w, N, 4 * Cl, C);
  gelu_backward(dfch, L.fch.data(), dfch_gelu, N * 4 * Cl);
  ColumnParallelLinear::backward(tp_, dln, b.dfc_w, b.dfc_b, dfch, L.ln2.data(), b.fc_w, N, C, 4 * Cl);
  layernorm_backward(dx, b.dln2_w, b.dln2_b, dln, L.res2.data(), b.ln2_w, L.ln2_mean.data(), L.ln2_rstd.data(), N, C);
  // attention: res2 = x + attn(ln_1(x))
  float* datty = dbuf_ncl_.data();
  float* dqkv = dbuf_qkv_.data();
  RowParallelLinear::backward(datty, b.dproj_w, b.dproj_b, dx, L.atty.data(), b.proj_w, N, Cl, C);
  attention_backward(dqkv, dbuf_att_.data(), datty, L.qkv.data(), L.att.data(), B_, T_, Hl_, hd_);
  ColumnParallelLinear::backward(tp_, dln, b.dattn_w, b.dattn_b, dqkv, L.ln1.data(), b.attn_w, N, C, 3 * Cl);
  layernorm_backward(dx, b.dln1_w, b.dln1_b, dln, x, b.ln1_w, L.ln1_mean.data(), L.ln1_rstd.data(), N, C);
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
  const size_t N = N_, C = C_;
  a.input.resize(N * C);
  if (st.first) {
    a.tokens.assign(tokens, tokens + N);
    VocabParallelEmbedding::forward(tp_, a.input.data(), a.tokens.data(), wte_, wpe_, vocab_, B_, T_, C);
  } else {
    std::copy_n(input, N * C, a.input.data());
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
  a.lnf.resize(N * C), a.lnf_mean.resize(N), a.lnf_rstd.resize(N);
  a.logits.resize(N * Vl), a.maxv.resize(N), a.sumexp.resize(N);
  layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, lnf_w_, lnf_b_, N, C);
  ParallelLMHead::forward(a.logits.data(), a.lnf.data(), wte_, N, C, Vl);
  std::vector<float> losses(N);
  VocabParallelCrossEntropy::forward(tp_, losses.data(), a.maxv.data(), a.sumexp.data(), a.logits.data(),
                                     a.targets.data(), vocab_, N);
  double sum = 0;
  for (float l : losses) sum += l;
  *loss_sum += sum;
  return nullptr;
}

const float* GPTStage::backward(int micro, const float* dout, float loss_scale) {
  const auto& st = layout_.stage();
  auto it = acts_.find(micro);
  if (it == acts_.end())
    throw Internal("GPT stage: backward of micro-batch " + std::to_string(micro) + " before its forward");
  Activations& a = *it->second;
  const size_t N = N_, C = C_;
  float* dx = dx_.data();
  const float* stage_out = a.layers.empty() ? a.input.data() : a.layers.back().res3.data();
  if (st.last) {
    const size_t Vl = static_cast<size_t>(vocab_.rows);
    VocabParallelCrossEntropy::backward(dlogits_.data(), a.logits.data(), a.maxv.data(), a.sumexp.data(),
                                        a.targets.data(), vocab_, N, loss_scale);
    float* dlnf = dbuf_nc_.data();
    ParallelLMHead::backward(tp_, dlnf, dwte_, dlogits_.data(), a.lnf.data(), wte_, N, C, Vl);
    std::fill(dx, dx + N * C, 0.0f);
    layernorm_backward(dx, dlnf_w_, dlnf_b_, dlnf, stage_out, lnf_w_, a.lnf_mean.data(), a.lnf_rstd.data(), N, C);
  } else {
    std::copy_n(dout, N * C, dx);
  }
  for (size_t l = blocks_.size(); l-- > 0;) {
    const float* x = l == 0 ? a.input.data() : a.layers[l - 1].res3.data();
    block_backward(blocks_[l], a, l, x, dx);
  }
  if (st.first) VocabParallelEmbedding::backward(dwte_, dwpe_, dx, a.tokens.data(), vocab_, B_, T_, C);
  acts_.erase(it);
  return st.first ? nullptr : dx;
}

}  // namespace mpcomm::parallel
