// Megatron-style tensor-parallel layers: each layer's forward and backward, with the collective each one
// needs written next to it. Activations entering and leaving a layer are replicated on every
// tensor-parallel rank; weights are cut as in layout.h.
//
//   ColumnParallelLinear   y_l = x @ W_l + b_l          forward: none        backward: all-reduce dx
//   RowParallelLinear      y = Σ_t (x_l @ W_l) + b      forward: all-reduce  backward: none
//   VocabParallelEmbedding x = Σ_t wte_l[id] + wpe[pos] forward: all-reduce  backward: none
//   ParallelLMHead         logits_l = x @ wte_l^T        forward: none        backward: all-reduce dx
//   VocabParallelCrossEntropy over logits_l              forward: all-reduce max, target logit, Σexp
// With one tensor-parallel rank every collective is skipped.
//
// Sequence parallelism (Megatron's): between the layers the activations are cut by rows (the micro-batch's
// tokens) across the tensor-parallel ranks, and LayerNorm, biases after a row-parallel layer, residuals and
// dropout work on the rank's rows only. A column-parallel layer's input is then all-gathered (its backward
// reduce-scatters the input gradient) and a row-parallel layer's output reduce-scattered (its backward
// all-gathers the output gradient): the all-reduce becomes its two halves, and the rows in between are
// computed once instead of tp times. The *_sp functions below; `rows` = N / tp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "parallel/groups.h"
#include "parallel/wire.h"

namespace mpcomm::parallel {

// The tensor-parallel group as the layers use it: sum/max all-reduces, timed into `meter`.
class TensorParallel {
 public:
  explicit TensorParallel(Communicator* comm) : comm_(comm) {}
  int size() const { return comm_ == nullptr ? 1 : comm_->size(); }
  int rank() const { return comm_ == nullptr ? 0 : comm_->rank(); }
  // Activations and gradients: on the wire as `wire` says (wire.h).
  void allreduce_sum(float* x, size_t n);
  // Statistics that stay float32 whatever the wire (the cross-entropy's row max, target logit, Σexp).
  void allreduce_max(float* x, size_t n);
  void allreduce_sum_exact(float* x, size_t n);
  // Sequence parallelism: out[n·tp] = the ranks' in[n] in rank order; out[n] = Σ_ranks the rank's block of in[n·tp].
  void allgather(const float* in, float* out, size_t n);
  void reduce_scatter_sum(const float* in, float* out, size_t n);
  CommMeter meter;
  Wire wire;
  // Sums (all-reduce, reduce-scatter) reproducible (mpcomm/reproducible.h): the same bits on any backend.
  bool reproducible = false;

 private:
  void allreduce(float* x, size_t n, ReduceOp op);
  Communicator* comm_;
};

struct ColumnParallelLinear {
  // out[N,Ol] = in[N,I] @ w[I,Ol] + b[Ol]
  static void forward(float* out, const float* in, const float* w, const float* b, size_t N, size_t I, size_t Ol);
  // din[N,I] = all-reduce(dout @ w^T); dw, db accumulate.
  static void backward(TensorParallel& tp, float* din, float* dw, float* db, const float* dout, const float* in,
                       const float* w, size_t N, size_t I, size_t Ol);
};

// Sequence parallelism: full[N,C] = all-gather of this rank's rows in[rows,C] (a column-parallel layer's input).
inline void gather_rows(TensorParallel& tp, const float* in, float* full, size_t rows, size_t C) {
  tp.allgather(in, full, rows * C);
}

struct ColumnParallelLinearSP {
  // din[rows,I] = reduce-scatter(dout @ w^T) over the rows; dw, db accumulate. scratch: N*I floats.
  static void backward(TensorParallel& tp, float* din, float* dw, float* db, const float* dout, const float* in_full,
                       const float* w, size_t N, size_t I, size_t Ol, float* scratch);
};

struct RowParallelLinearSP {
  // out[rows,O] = reduce-scatter(in[N,Il] @ w[Il,O]) + b[O]. scratch: N*O floats.
  static void forward(TensorParallel& tp, float* out, const float* in, const float* w, const float* b, size_t N,
                      size_t Il, size_t O, float* scratch);
  // din[N,Il] = all-gather(dout[rows,O]) @ w^T; dw accumulates from every row, db from this rank's rows (b is
  // added to them only: the trainer sums db over the tensor-parallel ranks). scratch: N*O floats.
  static void backward(TensorParallel& tp, float* din, float* dw, float* db, const float* dout, const float* in,
                       const float* w, size_t N, size_t Il, size_t O, float* scratch);
};

struct RowParallelLinear {
  // out[N,O] = all-reduce(in[N,Il] @ w[Il,O]) + b[O]
  static void forward(TensorParallel& tp, float* out, const float* in, const float* w, const float* b, size_t N,
                      size_t Il, size_t O);
  // din[N,Il] = dout @ w^T; dw, db accumulate (db is the same on every rank: b is replicated).
  static void backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                       size_t N, size_t Il, size_t O);
};

// This rank's slice of the (padded) vocabulary: ids [begin, begin + rows); ids >= vocab are padding.
struct VocabShard {
  int begin = 0, rows = 0, vocab = 0;
};

struct VocabParallelEmbedding {
  // out[B*T,C] = wte[tokens] + wpe[position]
  static void forward(TensorParallel& tp, float* out, const int32_t* tokens, const float* wte_l, const float* wpe,
                      const VocabShard& v, size_t B, size_t T, size_t C);
  static void backward(float* dwte_l, float* dwpe, const float* dout, const int32_t* tokens, const VocabShard& v,
                       size_t B, size_t T, size_t C);
};

struct VocabParallelEmbeddingSP {
  // out[rows,C] = this rank's rows (from row0) of wte[tokens] + wpe[position]: a reduce-scatter. scratch: B*T*C.
  static void forward(TensorParallel& tp, float* out, const int32_t* tokens, const float* wte_l, const float* wpe,
                      const VocabShard& v, size_t B, size_t T, size_t C, size_t row0, float* scratch);
  // The gradient of every row, all-gathered into scratch (B*T*C), then as VocabParallelEmbedding::backward: wpe's
  // gradient is whole on every rank.
  static void backward(TensorParallel& tp, float* dwte_l, float* dwpe, const float* dout, const int32_t* tokens,
                       const VocabShard& v, size_t B, size_t T, size_t C, float* scratch);
};

struct ParallelLMHead {
  // logits[N,Vl] = x[N,C] @ wte_l^T (the output layer tied to the token embedding)
  static void forward(float* logits, const float* x, const float* wte_l, size_t N, size_t C, size_t Vl);
  // dx = all-reduce(dlogits @ wte_l); dwte_l += dlogits^T @ x
  static void backward(TensorParallel& tp, float* dx, float* dwte_l, const float* dlogits, const float* x,
                       const float* wte_l, size_t N, size_t C, size_t Vl);
  // Sequence parallelism: dx[rows,C] = reduce-scatter(dlogits @ wte_l); x is the gathered input [N,C].
  static void backward_sp(TensorParallel& tp, float* dx, float* dwte_l, const float* dlogits, const float* x,
                          const float* wte_l, size_t N, size_t C, size_t Vl, float* scratch);
};

struct VocabParallelCrossEntropy {
  // losses[n] = log Σ_v exp(logit[n,v]) - logit[n,target[n]] over the real vocabulary of all ranks.
  // Keeps the row max and Σexp (global) for the backward.
  static void forward(TensorParallel& tp, float* losses, float* maxv, float* sumexp, const float* logits,
                      const int32_t* targets, const VocabShard& v, size_t N);
  // dlogits[n,v] = scale * (softmax[n,v] - [v == target[n]]), 0 on padded columns.
  static void backward(float* dlogits, const float* logits, const float* maxv, const float* sumexp,
                       const int32_t* targets, const VocabShard& v, size_t N, float scale);
};

}  // namespace mpcomm::parallel
