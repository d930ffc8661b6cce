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
#pragma once

#include <cstddef>
#include <cstdint>

#include "parallel/groups.h"

namespace mpcomm::parallel {

// The tensor-parallel group as the layers use it: sum/max all-reduces, timed into `meter`.
class TensorParallel {
 public:
  explicit TensorParallel(Communicator* comm) : comm_(comm) {}
  int size() const { return comm_ == nullptr ? 1 : comm_->size(); }
  int rank() const { return comm_ == nullptr ? 0 : comm_->rank(); }
  void allreduce_sum(float* x, size_t n);
  void allreduce_max(float* x, size_t n);
  CommMeter meter;

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

struct ParallelLMHead {
  // logits[N,Vl] = x[N,C] @ wte_l^T (the output layer tied to the token embedding)
  static void forward(float* logits, const float* x, const float* wte_l, size_t N, size_t C, size_t Vl);
  // dx = all-reduce(dlogits @ wte_l); dwte_l += dlogits^T @ x
  static void backward(TensorParallel& tp, float* dx, float* dwte_l, const float* dlogits, const float* x,
                       const float* wte_l, size_t N, size_t C, size_t Vl);
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
