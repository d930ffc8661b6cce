// A mixture-of-experts MLP on one rank: a learned router sends each token to its top-k experts, the experts
// (spread over the expert-parallel ranks) run GPT-2's MLP on the tokens they got, and the outputs come back
// weighted by the router's probabilities.
//
//   p[t,:]   = softmax(x[t] @ W_router)                   router, float32, no bias
//   e_1..e_k = the k largest p[t,:] (ties: the lower expert)
//   y[t]     = Σ_j p[t,e_j] · MLP_{e_j}(x[t])             gates are the probabilities themselves (Switch's form;
//                                                            not renormalized over the k chosen)
// No capacity limit: every token reaches its experts (dropless), so the result does not depend on how the
// tokens are split over ranks or micro-batches.
//
// Load balancing: Switch Transformer's loss α·E·Σ_e f_e·P_e (f_e the fraction of the k·T assignments that went
// to expert e, P_e the mean router probability of e), computed per sequence of T tokens and averaged over the
// global batch's sequences (the sequence-wise form of DeepSeek-V3): a sequence is the one unit every split keeps
// whole, so the loss is the same whatever the data-parallel degree or the micro-batch count. f carries no
// gradient; the loss is added to the objective, not to the reported (cross-entropy) loss.
//
// Traffic, per layer and micro-batch, inside the expert-parallel group (none with one rank):
//   forward:  all-to-all of the per-expert token counts, alltoallv of the tokens to their experts, alltoallv of
//             the outputs back;
//   backward: alltoallv of the output gradients to the experts, alltoallv of the input gradients back.
// The rows travel as the wire says (float32, or bfloat16: see MoEConfig::wire).
// The rows a rank sends to rank d are its tokens for d's experts, expert by expert, each in token order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpcomm/communicator.h"
#include "parallel/groups.h"
#include "parallel/wire.h"

namespace mpcomm::parallel {

class TensorParallel;

// One expert's parameters (and their gradients).
struct ExpertWeights {
  const float *fc_w, *fc_b, *proj_w, *proj_b;
  float *dfc_w, *dfc_b, *dproj_w, *dproj_b;
};

struct MoEConfig {
  int experts = 0, top_k = 1;
  float aux_loss_coef = 0;
  Communicator* ep = nullptr;  // the expert-parallel group; null: one rank holds every expert
  CommMeter* meter = nullptr;  // the all-to-alls' exposed time, bytes and calls
  // bfloat16: every row dispatched to an expert and every row coming back (outputs forward, gradients backward)
  // is rounded to bfloat16, the rows a rank keeps for its own experts too, so the result does not depend on
  // where the experts are.
  Wire wire;
  // Sequence parallelism: the tensor-parallel group whose ranks hold the other rows of the micro-batch (the
  // per-sequence load statistics are summed over it); null otherwise.
  TensorParallel* rows_tp = nullptr;
};

class MoELayer {
 public:
  // experts: this rank's, the expert-parallel rank's share [first, first + experts.size()) of cfg.experts.
  MoELayer(const MoEConfig& cfg, size_t C, const float* router, float* drouter, std::vector<ExpertWeights> experts);

  // What the backward of one micro-batch needs.
  struct Saved {
    size_t R = 0, row0 = 0, T = 0;
    std::vector<float> probs;                     // [R,E]
    std::vector<int32_t> choice;                  // [R,K] experts
    std::vector<size_t> position;                 // [R,K] where (t,j) sits in the dispatch order
    std::vector<size_t> send_rows, recv_rows;     // per expert-parallel rank
    std::vector<int64_t> recv_counts;             // [ranks, local experts] rows from each rank for each expert
    std::vector<std::vector<float>> in, h, gelu;  // per local expert: its rows [n,C], [n,4C], [n,4C]
    std::vector<float> out;                       // [R·K, C] in dispatch order: the experts' outputs
    std::vector<float> load;                      // per sequence of the rows [S,E]: f (assignment fraction)
    std::vector<int64_t> expert_tokens;           // [E] assignments of this rank's rows to each expert
  };

  // y[R,C] = the layer's output for x[R,C]: rows row0.. of a micro-batch of sequences of T tokens.
  // Returns the micro-batch's load-balancing loss: α·E·Σ f·P summed over its sequences (all of them, also under
  // sequence parallelism).
  double forward(Saved& s, float* y, const float* x, size_t R, size_t row0, size_t T);
  // dx[R,C] = the input gradient (overwritten) for the output gradient dy; gradients of the router and of this
  // rank's experts accumulate. loss_scale: 1 / tokens of the global batch (the load-balancing loss of a sequence
  // counts 1/sequences, i.e. T·loss_scale).
  void backward(Saved& s, float* dx, const float* dy, const float* x, float loss_scale);

 private:
  // alltoallv of rows of C floats inside the expert-parallel group (a copy with one rank).
  void exchange(const float* send, const std::vector<size_t>& send_rows, float* recv,
                const std::vector<size_t>& recv_rows);
  // The received rows (rank-major, expert by expert) as each local expert's contiguous block, or back.
  void to_experts(const Saved& s, const float* by_rank, std::vector<std::vector<float>>& by_expert, size_t width);
  void from_experts(const Saved& s, const std::vector<std::vector<float>>& by_expert, float* by_rank, size_t width);

  MoEConfig cfg_;
  size_t C_, E_, K_, El_;
  int ranks_, rank_;
  const float* router_;
  float* drouter_;
  std::vector<ExpertWeights> experts_;
};

}  // namespace mpcomm::parallel
