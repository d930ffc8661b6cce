// One pipeline stage of GPT-2 on one rank: its layers' forward and backward for a micro-batch, with the
// activations of every micro-batch between its forward and its backward kept here.
//
//   first stage:  x = VocabParallelEmbedding(tokens)
//   every stage:  for each of its blocks:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
//                   attn = RowParallel(c_proj, attention(ColumnParallel(c_attn, ·)))
//                   mlp  = RowParallel(c_proj, gelu(ColumnParallel(c_fc, ·)))
//                          or, in a mixture-of-experts layer, MoELayer (moe.h) on the rows this rank holds
//   last stage:   loss = VocabParallelCrossEntropy(ParallelLMHead(ln_f(x)), targets)
// B is the micro-batch (sequences), T the sequence length, N = B*T rows.
// With sequence parallelism (tp_layers.h) the stage's input and output, the LayerNorms and the residual
// stream hold rows() = N/tp rows: this tensor-parallel rank's contiguous piece of the micro-batch's tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/layout.h"
#include "parallel/moe.h"
#include "parallel/tp_layers.h"

namespace mpcomm::parallel {

class GPTStage {
 public:
  // params and grads are this rank's flat buffers (layout.total() floats each); the stage reads and
  // accumulates into them but does not own them.
  GPTStage(const ShardLayout& layout, TensorParallel& tp, const float* params, float* grads, size_t B, size_t T,
           bool sequence_parallel = false, const MoEConfig& moe = {});
  ~GPTStage();

  // Forward of micro-batch `micro`. `input` is the previous stage's output [N,C] (ignored on the first
  // stage, which embeds `tokens`); `targets` are read on the last stage. Returns this stage's output
  // [N,C] (valid until backward of the micro-batch), or nullptr on the last stage, which instead adds
  // the sum of the micro-batch's per-token losses to *loss_sum.
  const float* forward(int micro, const float* input, const int32_t* tokens, const int32_t* targets,
                       double* loss_sum);
  // Backward of micro-batch `micro`. `dout` is the gradient of this stage's output (ignored on the last
  // stage, which starts from the loss scaled by `loss_scale`: 1 / tokens of the global batch).
  // Accumulates parameter gradients; returns the gradient of the stage's input [N,C] (valid until the
  // next backward), or nullptr on the first stage. Frees the micro-batch's activations.
  // `final`, when not null, is told as the micro-batch's backward goes which gradients no later work changes:
  // final(f) means every parameter from flat-buffer offset f on (the buffer is in Hugging Face order: wte,
  // wpe, blocks, ln_f) — called after the output layer, after each block and, on the first stage, with 0
  // after the embedding. The trainer passes it for the step's last backward, to start reducing early.
  const float* backward(int micro, const float* dout, float loss_scale,
                        const std::function<void(size_t)>* final = nullptr);

  // Micro-batches whose forward has run and backward not yet.
  size_t in_flight() const { return acts_.size(); }
  // The floats their activations hold (what the planner's memory accounting counts).
  size_t activation_floats() const;
  // Rows of the stage's input and output (and of the gradients the pipeline passes): N, or N/tp with
  // sequence parallelism.
  size_t rows() const { return R_; }
  // Parameters replicated across the tensor-parallel ranks whose gradient, under sequence parallelism, each
  // rank has from its own rows only: the trainer sums them over the tensor-parallel group.
  std::vector<std::string> partial_gradient_params() const;
  // Mixture of experts: the load-balancing loss of the forwards so far (this rank's sequences), and for each
  // MoE layer's forward, in the order they ran, how many of this rank's token assignments went to each expert.
  double aux_loss() const { return aux_loss_; }
  const std::vector<std::vector<int64_t>>& routing() const { return routing_; }

 private:
  struct Activations;
  struct Block;
  void block_forward(const Block& blk, Activations& a, size_t l, const float* x);
  void block_backward(const Block& blk, Activations& a, size_t l, const float* x, float* dx);
  // The layers that differ under sequence parallelism.
  const float* column_input(const std::vector<float>& rows_in, std::vector<float>& full);
  void row_forward(float* out, const float* in, const float* w, const float* b, size_t Il);
  void row_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w, size_t Il);
  void column_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w, size_t Ol);

  const ShardLayout& layout_;
  TensorParallel& tp_;
  size_t B_, T_, N_, C_, Cl_, Hl_, hd_;
  bool sp_;
  size_t R_, row0_;  // rows this rank holds between layers, and the first of them
  VocabShard vocab_;
  std::vector<Block> blocks_;
  std::vector<std::unique_ptr<MoELayer>> moe_;  // per block: its mixture of experts, or null
  double aux_loss_ = 0;
  float moe_loss_scale_ = 0;  // the running backward's
  std::vector<std::vector<int64_t>> routing_;
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  float *dwte_ = nullptr, *dwpe_ = nullptr, *dlnf_w_ = nullptr, *dlnf_b_ = nullptr;
  std::map<int, std::unique_ptr<Activations>> acts_;
  // backward scratch, reused across micro-batches
  std::vector<float> dx_, dbuf_n4c_, dbuf_n4c2_, dbuf_qkv_, dbuf_ncl_, dbuf_att_, dbuf_nc_, dlogits_;
  std::vector<float> scratch_nc_;  // sequence parallelism: a full [N,C] before a reduce-scatter or after a gather
};

}  // namespace mpcomm::parallel
