// The GPT-2 model's parameters, as one rank holds them under tensor and pipeline parallelism.
//
// Shape legend used throughout src/parallel (llm.c's):
//   L layers, C hidden, H heads, hd = C/H, V vocabulary, Vp = V padded to a multiple of tp, P positions;
//   tp-local sizes carry an `l`: Hl = H/tp, Cl = C/tp, Vl = Vp/tp.
//
// Names and full shapes are Hugging Face GPT-2's (Conv1D weights stored [in, out], y = x @ W + b), so a
// checkpoint maps onto the model one tensor at a time. A rank holds the tensors of its pipeline stage,
// each cut for its tensor-parallel rank the Megatron way:
//   wte [V, C]              vocab rows       rank t: rows [t*Vl, (t+1)*Vl) of the padded table (first and last stage)
//   wpe [P, C]              replicated       (first stage)
//   h.i.attn.c_attn [C, 3C] q, k and v columns, each cut by heads (column-parallel)
//   h.i.attn.c_proj [C, C]  rows (row-parallel); its bias is replicated
//   h.i.mlp.c_fc [C, 4C]    columns (column-parallel)
//   h.i.mlp.c_proj [4C, C]  rows (row-parallel); its bias is replicated
//   ln_1, ln_2, ln_f        replicated       (ln_f on the last stage)
//   h.i.mlp.router, h.i.mlp.experts.e.*  mixture-of-experts layers instead of h.i.mlp.c_fc/c_proj (see below)
// All of a rank's parameters live in one flat float buffer in this order, so gradients, optimizer
// state and data-parallel buckets are slices of equally laid-out buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpcomm::parallel {

struct GPTConfig {
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int vocab = 256;
  int positions = 64;  // rows of wpe: the longest sequence the model takes
  // Mixture of experts: 0, or the experts of every `moe_every`-th layer (layers moe_every-1, 2·moe_every-1, ...),
  // whose MLP is then a router and `experts` MLPs (moe.h).
  int experts = 0;
  int moe_every = 1;
  int head_dim() const { return hidden / heads; }
  bool is_moe(int layer) const { return experts > 0 && (layer + 1) % moe_every == 0; }
};

// How a tensor is cut across the tensor-parallel ranks.
enum class Split { replicated, rows, cols, qkv_cols, vocab_rows };

struct ParamSpec {
  std::string name;                  // Hugging Face name, e.g. "h.3.mlp.c_fc.weight"
  std::vector<int64_t> full_shape;   // shape in a checkpoint
  std::vector<int64_t> local_shape;  // shape on this rank
  Split split = Split::replicated;
  size_t offset = 0;                 // into the rank's flat buffer
  size_t numel = 0;                  // local elements
  bool expert = false;               // one expert's tensor: held by one expert-parallel rank, summed over the others
};

// One contiguous run shared by a full tensor and a rank's shard of it.
struct Segment {
  size_t full_offset, local_offset, len;
};

// The stage of pipeline rank `pp_rank`: layers [first_layer, end_layer). Stages differ by at most one layer,
// the earlier stages taking the extra ones.
struct StageRange {
  int first_layer = 0, end_layer = 0;
  bool first = true, last = true;
};
StageRange stage_range(int layers, int pp, int pp_rank);

// Vocabulary padded to a multiple of tp (the padded logits are masked out of the loss).
int padded_vocab(int vocab, int tp);

// Mixture of experts: expert e of a layer is held by expert-parallel rank e / (experts / ep), whole (experts are
// not cut by tensor parallelism). A rank's experts come after all its other parameters, from dense_total() on, so
// that the data-parallel buckets (summed over every data-parallel rank) and the experts (summed over the ranks
// holding the same experts) are apart.
class ShardLayout {
 public:
  ShardLayout(const GPTConfig& cfg, int tp, int tp_rank, int pp, int pp_rank, int ep = 1, int ep_rank = 0);

  const GPTConfig& config() const { return cfg_; }
  const StageRange& stage() const { return stage_; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  const std::vector<ParamSpec>& params() const { return params_; }
  size_t total() const { return total_; }
  size_t dense_total() const { return dense_total_; }  // where the rank's experts begin
  int ep() const { return ep_; }
  int ep_rank() const { return ep_rank_; }
  // The experts this rank holds: [first_expert(), first_expert() + local_experts()).
  int local_experts() const { return cfg_.experts / ep_; }
  int first_expert() const { return ep_rank_ * local_experts(); }
  // The parameter named `name`; throws Internal if this rank does not hold it.
  const ParamSpec& at(const std::string& name) const;
  bool has(const std::string& name) const;
  // Where this rank's shard of `p` sits in the full tensor (both ways: load and save use it).
  std::vector<Segment> segments(const ParamSpec& p) const;

 private:
  void add(const std::string& name, std::vector<int64_t> full, Split split);
  GPTConfig cfg_;
  int tp_, tp_rank_, ep_, ep_rank_;
  StageRange stage_;
  std::vector<ParamSpec> params_;
  size_t total_ = 0, dense_total_ = 0;
};

// Hugging Face-style names of layer i's mixture-of-experts tensors: "h.<i>.mlp.router.weight" [C, E] and
// "h.<i>.mlp.experts.<e>.{c_fc,c_proj}.{weight,bias}" (GPT-2's MLP shapes, Conv1D layout).
std::string router_name(int layer);
std::string expert_prefix(int layer, int expert);

// Every tensor of the whole model in Hugging Face order, with its full shape.
std::vector<std::pair<std::string, std::vector<int64_t>>> full_model_tensors(const GPTConfig& cfg);

// GPT-2's initialization, reproducible whatever the sharding: each full tensor is drawn from its own
// stream (seed, tensor index) and then cut. Weights N(0, 0.02), residual projections (c_proj) N(0,
// 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 and bias 0, padded vocabulary rows 0.
void init_params(const ShardLayout& layout, uint64_t seed, float* params);

}  // namespace mpcomm::parallel
