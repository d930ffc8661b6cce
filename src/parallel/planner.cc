#include "parallel/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "mpcomm/error.h"

namespace mpcomm::parallel {
namespace {

ModelSpec gpt(const char* name, int layers, int hidden, int heads, int seq) {
  ModelSpec m;
  m.name = name, m.layers = layers, m.hidden = hidden, m.heads = heads, m.vocab = 50257, m.seq = seq;
  return m;
}

ModelSpec llama(const char* name, int layers, int hidden, int heads, int kv, int ffn) {
  ModelSpec m;
  m.name = name, m.layers = layers, m.hidden = hidden, m.heads = heads, m.kv_heads = kv, m.ffn = ffn;
  m.vocab = 32000, m.seq = 4096;
  m.gated_mlp = true, m.biases = false, m.learned_positions = false, m.tied_embeddings = false;
  return m;
}

const std::map<std::string, ModelSpec>& models() {
  static const std::map<std::string, ModelSpec> m = {
      {"gpt2", gpt("gpt2", 12, 768, 12, 1024)},
      {"gpt2-medium", gpt("gpt2-medium", 24, 1024, 16, 1024)},
      {"gpt2-large", gpt("gpt2-large", 36, 1280, 20, 1024)},
      {"gpt2-xl", gpt("gpt2-xl", 48, 1600, 25, 1024)},
      {"gpt3-175b", gpt("gpt3-175b", 96, 12288, 96, 2048)},
      {"llama2-7b", llama("llama2-7b", 32, 4096, 32, 32, 11008)},
      {"llama2-13b", llama("llama2-13b", 40, 5120, 40, 40, 13824)},
      {"llama2-70b", llama("llama2-70b", 80, 8192, 64, 8, 28672)},
  };
  return m;
}

// One transformer layer's parameters on one tensor-parallel rank: matrices and column biases cut by t,
// row biases and norms whole.
double layer_params(const ModelSpec& m, int t) {
  const double h = m.hidden, f = m.inner(), kvh = h * m.kv() / m.heads;
  const double qkv = h * (h + 2 * kvh), proj = h * h, mlp = (m.gated_mlp ? 3 : 2) * h * f;
  double p = (qkv + proj + mlp) / t;
  if (m.biases) p += (h + 2 * kvh) / t + h + f / t + h;  // qkv and fc biases cut, the two projections' whole
  p += m.biases ? 4 * h : 2 * h;                         // two LayerNorms (weight, bias) or RMSNorms
  return p;
}

double ceil_div(double a, double b) { return std::ceil(a / b); }

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [k, v] : models()) n.push_back(k);
    return n;
  }();
  return names;
}

ModelSpec model_by_name(const std::string& name) {
  auto it = models().find(name);
  if (it != models().end()) return it->second;
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument("unknown model '" + name + "' (known: " + known +
                        "; or give --layers --hidden --heads --seq --vocab)");
}

double total_params(const ModelSpec& m) {
  const double h = m.hidden;
  double p = m.layers * layer_params(m, 1) + m.vocab * h + (m.biases ? 2 * h : h);
  if (m.learned_positions) p += static_cast<double>(m.seq) * h;
  if (!m.tied_embeddings) p += m.vocab * h;
  return p;
}

double params_on_rank(const ModelSpec& m, int tp, int pp, int pp_rank) {
  const StageRange st = stage_range(m.layers, pp, pp_rank);
  const double h = m.hidden, vocab_rows = ceil_div(m.vocab, tp);
  double p = (st.end_layer - st.first_layer) * layer_params(m, tp);
  if (st.first) p += vocab_rows * h + (m.learned_positions ? static_cast<double>(m.seq) * h : 0);
  // The output layer: a copy of the embedding when tied (held twice only when the stages differ), else its own.
  if (st.last && (!m.tied_embeddings || !st.first)) p += vocab_rows * h;
  if (st.last) p += m.biases ? 2 * h : h;
  return p;
}

size_t trainer_params(const GPTConfig& cfg, int tp, int pp, int pp_rank) {
  ModelSpec m;
  m.layers = cfg.layers, m.hidden = cfg.hidden, m.heads = cfg.heads, m.vocab = cfg.vocab, m.seq = cfg.positions;
  return static_cast<size_t>(params_on_rank(m, tp, pp, pp_rank));
}

size_t trainer_activation_floats(const GPTConfig& cfg, int tp, int pp, int pp_rank, size_t B, size_t T) {
  const StageRange st = stage_range(cfg.layers, pp, pp_rank);
  const size_t N = B * T, C = static_cast<size_t>(cfg.hidden), Cl = C / static_cast<size_t>(tp);
  const size_t Hl = static_cast<size_t>(cfg.heads / tp);
  // Per layer: ln1, res2, ln2, res3 [N,C]; two LayerNorms' mean and rstd [N]; qkv [N,3Cl], atty [N,Cl],
  // fch and fch_gelu [N,4Cl]; the attention probabilities [B,Hl,T,T].
  const size_t layer = 4 * N * C + 4 * N + 12 * N * Cl + B * Hl * T * T;
  size_t floats = N * C + static_cast<size_t>(st.end_layer - st.first_layer) * layer;  // + the stage's input
  const size_t Vl = static_cast<size_t>(padded_vocab(cfg.vocab, tp) / tp);
  if (st.last) floats += N * C + 2 * N + N * Vl + 2 * N;  // ln_f, its mean and rstd; logits, max, sum of exp
  return floats;
}

Plan plan(const PlanRequest& r, const tuning::Profile& profile) {
  const ModelSpec& m = r.model;
  auto bad = [](const std::string& s) { throw InvalidArgument("mpcomm plan: " + s); };
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1 || m.vocab < 1 || m.seq < 1)
    bad("the model needs layers, hidden, heads, vocab and seq of at least 1");
  if (m.hidden % m.heads)
    bad("hidden " + std::to_string(m.hidden) + " is not a multiple of heads " + std::to_string(m.heads));
  if (m.heads % m.kv())
    bad("heads " + std::to_string(m.heads) + " is not a multiple of kv heads " + std::to_string(m.kv()));
  if (r.gpus < 1) bad("--gpus must be at least 1");
  if (r.gpus_per_node < 1) bad("--gpus-per-node must be at least 1");
  if (r.gpus_per_node > r.gpus)
    bad("--gpus-per-node " + std::to_string(r.gpus_per_node) + " is more than --gpus " + std::to_string(r.gpus));
  if (r.gpus % r.gpus_per_node)
    bad("--gpus " + std::to_string(r.gpus) + " is not a whole number of nodes of " + std::to_string(r.gpus_per_node));
  if (r.global_batch < 1 || r.micro_batch < 1) bad("--global-batch and --micro-batch must be at least 1");
  if (r.recompute != "none" && r.recompute != "selective" && r.recompute != "full")
    bad("--recompute must be none, selective or full, not '" + r.recompute + "'");
  if (profile.flops <= 0)
    bad("profile " + profile.name + " has no flops (the devices' peak FLOP/s): the planner needs it");
  if (profile.memory_gb <= 0) bad("profile " + profile.name + " has no memory_gb: the planner needs it");
  const std::string backend = r.backend.empty() ? profile.default_backend : r.backend;
  const tuning::BackendCosts& costs = profile.backend(backend);
  const double mfu = r.mfu > 0 ? r.mfu : profile.mfu;
  if (mfu > 1) bad("--mfu must be at most 1");
  const int K = r.gpus_per_node;
  const double s = m.seq, h = m.hidden, a = m.heads, b = r.micro_batch, bytes = m.dtype_bytes;
  const double usable = 0.9 * profile.memory_gb * 1e9;

  Plan out;
  for (int tp = 1; tp <= K; ++tp) {
    if (K % tp) continue;
    for (int pp = 1; pp <= m.layers; ++pp) {
      if (r.gpus % (tp * pp)) continue;
      Candidate c;
      c.tp = tp, c.pp = pp, c.dp = r.gpus / (tp * pp);
      auto reject = [&](const std::string& why) {
        c.fits = false;
        c.why_not = why;
        out.rejected.push_back(c);
      };
      if (m.heads % tp || m.kv() % tp) {
        reject("tp " + std::to_string(tp) + " does not divide the heads (" + std::to_string(m.heads) + ", kv " +
               std::to_string(m.kv()) + ")");
        continue;
      }
      if (m.layers % pp) {
        reject("pp " + std::to_string(pp) + " does not divide the " + std::to_string(m.layers) + " layers");
        continue;
      }
      if (r.global_batch % (c.dp * r.micro_batch)) {
        reject("the global batch " + std::to_string(r.global_batch) + " is not a multiple of dp × micro batch (" +
               std::to_string(c.dp * r.micro_batch) + ")");
        continue;
      }
      const int mb = r.global_batch / (c.dp * r.micro_batch);
      c.micro_batches = mb;
      // Memory: the first and the last stage are the fullest (embeddings, the output layer).
      double worst = 0;
      for (int stage : {0, pp - 1}) {
        Memory mem;
        mem.params = params_on_rank(m, tp, pp, stage);
        mem.weights = mem.params * bytes;
        mem.grads = mem.params * 4;
        mem.optimizer = mem.params * 12 / (r.zero ? c.dp : 1);
        // Korthikanti et al.'s counts are for 16-bit activations: scaled to the model's.
        const double per_layer = (bytes / 2) * (r.recompute == "full"        ? 2 * s * b * h / tp
                                                : r.recompute == "selective" ? s * b * h * 34 / tp
                                                                             : s * b * h * (34 + 5 * a * s / h) / tp);
        const double layers = static_cast<double>(m.layers) / pp;
        mem.activations = (stage == 0 ? std::min(pp, mb) : 1) * layers * per_layer;
        if (stage == pp - 1) mem.activations += s * b * ceil_div(m.vocab, tp) * 4;  // the logits, 32-bit
        if (mem.total() > worst) worst = mem.total(), c.memory = mem;
      }
      // Time. Compute per micro-batch on one stage: 6 FLOPs a parameter and token forward and backward, 12·s·h
      // per layer and token for attention; recomputation adds the forward again (full) or attention (selective).
      const double dense = 6 * total_params(m), attn = 12.0 * m.layers * h * s;
      double flops_per_token = dense + attn;
      if (r.recompute == "full") flops_per_token += dense / 3 + attn / 3;
      if (r.recompute == "selective") flops_per_token += attn / 3;
      const double t_micro = flops_per_token * s * b / pp / (tp * profile.flops * mfu);
      // Tensor parallelism: 4 all-reduces of the micro-batch's [s·b, h] activations per layer (2 forward, 2
      // backward; with sequence parallelism the same bytes as reduce-scatter + allgather), 6 with full recompute.
      double t_tp = 0;
      if (tp > 1) {
        const auto p = tuning::predict(costs, "allreduce", s * b * h * bytes, tuning::CommShape{tp, 1});
        c.tp_algorithm = p.algorithm;
        t_tp = (r.recompute == "full" ? 6 : 4) * (static_cast<double>(m.layers) / pp) * p.seconds;
      }
      // Pipeline: each micro-batch's activation forward and its gradient backward, a 1/tp piece per rank (the
      // tensor-parallel ranks send their pieces at once). The pipeline goes as fast as its slowest boundary,
      // which crosses nodes once the stages do not all fit one node; the ranks of a stage on a node send at once.
      double t_p2p = 0;
      if (pp > 1) {
        const bool across = tp * c.dp * pp > K;
        const double piece = s * b * h * bytes / tp;
        tuning::Phase ph;
        (across ? ph.steps_inter : ph.steps_intra) = 1;
        ph.bytes_rank = piece;
        ph.bytes_host = across ? std::min(K, tp * c.dp) * piece : 0;
        const auto k = tuning::constants(costs, "sendrecv", piece, 2);
        t_p2p = k.overhead_s + tuning::phase_seconds(ph, k.intra, k.inter);
      }
      // Data parallelism: the 32-bit gradients (those the memory counts) reduced over dp ranks spaced tp apart,
      // hidden behind the last micro-batch's backward (two thirds of its compute). A node holds K/tp of them;
      // where dp does not fill the last node evenly, the model takes the fullest node's count on every one.
      double t_dp = 0;
      if (c.dp > 1) {
        const int on_node = std::max(1, std::min(c.dp, K / tp));
        const int nodes = (c.dp + on_node - 1) / on_node, per_node = (c.dp + nodes - 1) / nodes;
        const tuning::CommShape sh{nodes * per_node, nodes};
        const auto p = tuning::predict(costs, "allreduce", c.memory.params * 4, sh);
        c.dp_algorithm = p.algorithm;
        t_dp = p.seconds;
      }
      const double slot = t_micro + t_tp;  // one micro-batch's forward and backward on one stage
      c.compute = mb * t_micro;
      c.tp_comm = mb * t_tp;
      c.pp_comm = pp > 1 ? 2 * (mb + pp - 1) * t_p2p : 0;
      c.bubble = (pp - 1) * slot;
      c.dp_comm = t_dp;
      c.dp_exposed = std::max(0.0, t_dp - 2.0 / 3.0 * t_micro);
      c.step = c.compute + c.tp_comm + c.pp_comm + c.bubble + c.dp_exposed;
      c.tokens_per_s = r.global_batch * s / c.step;
      if (worst > usable) {
        std::ostringstream w;
        w.precision(3);
        w << "needs " << worst / 1e9 << " GB a GPU, " << usable / 1e9 << " GB usable";
        reject(w.str());
        continue;
      }
      out.ranked.push_back(c);
    }
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const Candidate& x, const Candidate& y) { return x.step < y.step; });
  if (out.ranked.size() >= 2) {
    const Candidate &w = out.ranked[0], &n = out.ranked[1];
    const std::vector<std::pair<std::string, double>> parts = {
        {"compute", n.compute - w.compute},
        {"tensor-parallel all-reduce", n.tp_comm - w.tp_comm},
        {"pipeline sends", n.pp_comm - w.pp_comm},
        {"bubble", n.bubble - w.bubble},
        {"exposed data-parallel all-reduce", n.dp_exposed - w.dp_exposed}};
    auto biggest =
        std::max_element(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    auto costliest =
        std::min_element(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    std::ostringstream o;
    o.precision(3);
    o << "tp " << w.tp << " pp " << w.pp << " dp " << w.dp << " wins over tp " << n.tp << " pp " << n.pp << " dp "
      << n.dp << " by " << (n.step - w.step) * 1e3 << " ms a step: its " << biggest->first << " is "
      << biggest->second * 1e3 << " ms shorter";
    if (costliest->second < 0)
      o << ", while its " << costliest->first << " is " << -costliest->second * 1e3 << " ms longer";
    out.why_best = o.str();
  } else if (out.ranked.size() == 1) {
    out.why_best = "only one split fits";
  }
  return out;
}

}  // namespace mpcomm::parallel
