// The planner: for a transformer and a cluster, every TP × PP × DP split that can exist, the memory each
// GPU needs under it, and the predicted time of one training step — compute, the tensor-parallel all-reduces,
// the pipeline's sends, the data-parallel gradient all-reduce (and how much of it hides behind the last
// backward), the pipeline bubble — from a machine profile's cost model (tuning/profile.h).
//
// The split is laid out the Megatron way: tensor-parallel ranks innermost (within a node), then data-parallel,
// then pipeline stages outermost. The schedule is 1F1B with m = global batch / (dp × micro batch) micro-batches.
//
// Memory per GPU (the stage that holds the most), mixed precision with Adam as Megatron keeps it: 16-bit
// weights, 32-bit gradients, 32-bit master weights and two moments (2 + 4 + 12 bytes a parameter; the 12 split
// over dp with a distributed optimizer, --zero 1). Activations per layer and micro-batch as Korthikanti et al.
// (2022) count them for 16-bit training with sequence parallelism: s·b·h·(34 + 5·a·s/h) / t bytes without
// recomputation, s·b·h·34/t with selective recomputation (attention recomputed), 2·s·b·h/t with full; the
// first stage holds min(pp, m) micro-batches of its layers under 1F1B (scaled by dtype_bytes / 2 for other
// activation widths). Of the device memory, 90% is usable (the CUDA context, the allocator's slack). The
// data-parallel all-reduce moves the 32-bit gradients the memory counts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "parallel/layout.h"
#include "tuning/profile.h"

namespace mpcomm::parallel {

struct ModelSpec {
  std::string name;
  int layers = 0, hidden = 0, heads = 0;
  int kv_heads = 0;  // grouped-query attention; 0: as many as heads
  int ffn = 0;       // the MLP's inner size; 0: 4 × hidden
  int vocab = 0, seq = 0;
  bool gated_mlp = false;         // SwiGLU: three matrices instead of two
  bool biases = true;             // GPT's linear biases and LayerNorm biases
  bool learned_positions = true;  // GPT's wpe
  bool tied_embeddings = true;    // the output layer is wte (the last stage holds a copy when pp > 1)
  int dtype_bytes = 2;
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int inner() const { return ffn > 0 ? ffn : 4 * hidden; }
};

// Known models: gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-175b, llama2-7b, llama2-13b, llama2-70b.
const std::vector<std::string>& model_names();
ModelSpec model_by_name(const std::string& name);  // throws InvalidArgument listing the names

// Every parameter of the model.
double total_params(const ModelSpec& m);
// Parameters on one GPU of pipeline stage `pp_rank` of `pp` with `tp` tensor-parallel ranks (stages as the
// trainer cuts them: the earlier ones take the extra layers).
double params_on_rank(const ModelSpec& m, int tp, int pp, int pp_rank);
// The same count in the trainer's own terms (GPT-2 layout, the vocabulary padded to a multiple of tp): equal to
// ShardLayout(cfg, tp, any, pp, pp_rank).total() — the tests hold it to that.
size_t trainer_params(const GPTConfig& cfg, int tp, int pp, int pp_rank);
// The floats GPTStage keeps for one micro-batch of B sequences of T tokens between its forward and backward
// (32-bit, no sequence parallelism, no experts) — the tests hold it to what a stage holds.
size_t trainer_activation_floats(const GPTConfig& cfg, int tp, int pp, int pp_rank, size_t B, size_t T);

struct PlanRequest {
  ModelSpec model;
  int gpus = 0, gpus_per_node = 0;
  int global_batch = 0, micro_batch = 1;  // sequences
  std::string backend;                    // "": the profile's default
  double mfu = 0;                         // 0: the profile's
  std::string recompute = "selective";    // none | selective | full
  int zero = 1;                           // 1: the optimizer's state split over dp (distributed optimizer)
};

struct Memory {
  double params = 0;                                              // on the GPU that holds the most
  double weights = 0, grads = 0, optimizer = 0, activations = 0;  // bytes
  double total() const { return weights + grads + optimizer + activations; }
};

struct Candidate {
  int tp = 1, pp = 1, dp = 1, micro_batches = 1;
  Memory memory;
  bool fits = true;
  std::string why_not;  // when it does not fit or cannot run
  // Seconds per step. tp and pp are on the critical path; dp_exposed is what the last backward did not hide.
  double compute = 0, tp_comm = 0, pp_comm = 0, dp_comm = 0, dp_exposed = 0, bubble = 0, step = 0;
  double tokens_per_s = 0;
  std::string tp_algorithm, dp_algorithm;
};

struct Plan {
  std::vector<Candidate> ranked;    // fit, fastest first
  std::vector<Candidate> rejected;  // cannot exist or do not fit, with why
  std::string why_best;             // a sentence: what the best wins by against the next
};

// Throws InvalidArgument for a request that cannot be planned (no GPUs, more GPUs per node than GPUs, a
// profile without flops or memory, an unknown recompute mode), naming what is wrong.
Plan plan(const PlanRequest& req, const tuning::Profile& profile);

}  // namespace mpcomm::parallel
