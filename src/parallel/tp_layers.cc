#include "parallel/tp_layers.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "mpcomm/reproducible.h"
#include "parallel/kernels.h"

namespace mpcomm::parallel {

// ---------------------------------------------------------------------------------------------------
// the tensor-parallel group

namespace {

template <typename F>
void timed(CommMeter& meter, size_t bytes, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  meter.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  meter.bytes += bytes;
  meter.calls += 1;
}

}  // namespace

void TensorParallel::allreduce(float* x, size_t n, ReduceOp op) {
  if (size() == 1) return;
  timed(meter, n * sizeof(float), [&] {
    if (reproducible && op == ReduceOp::sum) {
      ReproducibleSum acc(DataType::float32, n);
      acc.add(x);
      acc.allreduce(*comm_, x);
    } else {
      comm_->allreduce(x, x, n, DataType::float32, op);
    }
  });
}

void TensorParallel::allreduce_sum(float* x, size_t n) {
  if (size() == 1) return;
  if (reproducible && !wire.bf16()) return allreduce(x, n, ReduceOp::sum);
  timed(meter, wire.bytes(n), [&] { wire.allreduce_sum(*comm_, x, n); });
}

void TensorParallel::allreduce_max(float* x, size_t n) { allreduce(x, n, ReduceOp::max); }
void TensorParallel::allreduce_sum_exact(float* x, size_t n) { allreduce(x, n, ReduceOp::sum); }

void TensorParallel::allgather(const float* in, float* out, size_t n) {
  if (size() == 1) {
    std::copy_n(in, n, out);
    return;
  }
  timed(meter, wire.bytes(n * static_cast<size_t>(size())), [&] { wire.allgather(*comm_, in, out, n); });
}

void TensorParallel::reduce_scatter_sum(const float* in, float* out, size_t n) {
  if (size() == 1) {
    std::copy_n(in, n, out);
    return;
  }
  timed(meter, wire.bytes(n * static_cast<size_t>(size())), [&] {
    if (reproducible && !wire.bf16()) {
      ReproducibleSum acc(DataType::float32, n * static_cast<size_t>(size()));
      acc.add(in);
      acc.reduce_scatter(*comm_, out);
    } else {
      wire.reduce_scatter_sum(*comm_, in, out, n);
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// linear layers

void ColumnParallelLinear::forward(float* out, const float* in, const float* w, const float* b, size_t N, size_t I,
                                   size_t Ol) {
  matmul_forward(out, in, w, b, N, I, Ol);
}

void ColumnParallelLinear::backward(TensorParallel& tp, float* din, float* dw, float* db, const float* dout,
                                    const float* in, const float* w, size_t N, size_t I, size_t Ol) {
  matmul_backward(din, dw, db, dout, in, w, N, I, Ol);
  tp.allreduce_sum(din, N * I);  // each rank saw only its columns' share of dx
}

void RowParallelLinear::forward(TensorParallel& tp, float* out, const float* in, const float* w, const float* b,
                                size_t N, size_t Il, size_t O) {
  matmul_forward(out, in, w, nullptr, N, Il, O);
  tp.allreduce_sum(out, N * O);  // partial sums over this rank's rows of w
  add_bias(out, b, N, O);
}

void RowParallelLinear::backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                                 size_t N, size_t Il, size_t O) {
  matmul_backward(din, dw, db, dout, in, w, N, Il, O);
}

// ---------------------------------------------------------------------------------------------------
// linear layers under sequence parallelism

void ColumnParallelLinearSP::backward(TensorParallel& tp, float* din, float* dw, float* db, const float* dout,
                                      const float* in_full, const float* w, size_t N, size_t I, size_t Ol,
                                      float* scratch) {
  matmul_backward(scratch, dw, db, dout, in_full, w, N, I, Ol);
  tp.reduce_scatter_sum(scratch, din, N / static_cast<size_t>(tp.size()) * I);
}

void RowParallelLinearSP::forward(TensorParallel& tp, float* out, const float* in, const float* w, const float* b,
                                  size_t N, size_t Il, size_t O, float* scratch) {
  const size_t rows = N / static_cast<size_t>(tp.size());
  matmul_forward(scratch, in, w, nullptr, N, Il, O);
  tp.reduce_scatter_sum(scratch, out, rows * O);
  add_bias(out, b, rows, O);
}

void RowParallelLinearSP::backward(TensorParallel& tp, float* din, float* dw, float* db, const float* dout,
                                   const float* in, const float* w, size_t N, size_t Il, size_t O, float* scratch) {
  const size_t rows = N / static_cast<size_t>(tp.size());
  tp.allgather(dout, scratch, rows * O);
  matmul_backward(din, dw, nullptr, scratch, in, w, N, Il, O);
  bias_backward(db, dout, rows, O);
}

// ---------------------------------------------------------------------------------------------------
// embedding and output layer

namespace {

// out[n] = this rank's row of wte for tokens[n], or zeros when another rank holds it.
void lookup_rows(float* out, const int32_t* tokens, const float* wte_l, const VocabShard& v, size_t N, size_t C) {
  for (size_t n = 0; n < N; ++n) {
    int id = tokens[n] - v.begin;
    float* o = out + n * C;
    if (id >= 0 && id < v.rows)
      std::copy_n(wte_l + static_cast<size_t>(id) * C, C, o);
    else
      std::fill_n(o, C, 0.0f);
  }
}

}  // namespace

void VocabParallelEmbedding::forward(TensorParallel& tp, float* out, const int32_t* tokens, const float* wte_l,
                                     const float* wpe, const VocabShard& v, size_t B, size_t T, size_t C) {
  lookup_rows(out, tokens, wte_l, v, B * T, C);
  tp.allreduce_sum(out, B * T * C);  // exactly one rank contributed each row
  for (size_t n = 0; n < B * T; ++n) accumulate(out + n * C, wpe + (n % T) * C, C);
}

void VocabParallelEmbedding::backward(float* dwte_l, float* dwpe, const float* dout, const int32_t* tokens,
                                      const VocabShard& v, size_t B, size_t T, size_t C) {
  for (size_t n = 0; n < B * T; ++n) {
    int id = tokens[n] - v.begin;
    if (id >= 0 && id < v.rows) accumulate(dwte_l + static_cast<size_t>(id) * C, dout + n * C, C);
    accumulate(dwpe + (n % T) * C, dout + n * C, C);
  }
}

void VocabParallelEmbeddingSP::forward(TensorParallel& tp, float* out, const int32_t* tokens, const float* wte_l,
                                       const float* wpe, const VocabShard& v, size_t B, size_t T, size_t C, size_t row0,
                                       float* scratch) {
  const size_t rows = B * T / static_cast<size_t>(tp.size());
  lookup_rows(scratch, tokens, wte_l, v, B * T, C);
  tp.reduce_scatter_sum(scratch, out, rows * C);  // exactly one rank contributed each row
  for (size_t i = 0; i < rows; ++i) accumulate(out + i * C, wpe + ((row0 + i) % T) * C, C);
}

void VocabParallelEmbeddingSP::backward(TensorParallel& tp, float* dwte_l, float* dwpe, const float* dout,
                                        const int32_t* tokens, const VocabShard& v, size_t B, size_t T, size_t C,
                                        float* scratch) {
  tp.allgather(dout, scratch, B * T / static_cast<size_t>(tp.size()) * C);
  VocabParallelEmbedding::backward(dwte_l, dwpe, scratch, tokens, v, B, T, C);
}

void ParallelLMHead::backward_sp(TensorParallel& tp, float* dx, float* dwte_l, const float* dlogits, const float* x,
                                 const float* wte_l, size_t N, size_t C, size_t Vl, float* scratch) {
  const int n = static_cast<int>(N), c = static_cast<int>(C), vl = static_cast<int>(Vl);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, vl, 1.0f, dlogits, vl, wte_l, c, 0.0f, scratch, c);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, vl, c, n, 1.0f, dlogits, vl, x, c, 1.0f, dwte_l, c);
  tp.reduce_scatter_sum(scratch, dx, N / static_cast<size_t>(tp.size()) * C);
}

void ParallelLMHead::forward(float* logits, const float* x, const float* wte_l, size_t N, size_t C, size_t Vl) {
  const int n = static_cast<int>(N), c = static_cast<int>(C), vl = static_cast<int>(Vl);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, vl, c, 1.0f, x, c, wte_l, c, 0.0f, logits, vl);
}

void ParallelLMHead::backward(TensorParallel& tp, float* dx, float* dwte_l, const float* dlogits, const float* x,
                              const float* wte_l, size_t N, size_t C, size_t Vl) {
  const int n = static_cast<int>(N), c = static_cast<int>(C), vl = static_cast<int>(Vl);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, vl, 1.0f, dlogits, vl, wte_l, c, 0.0f, dx, c);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, vl, c, n, 1.0f, dlogits, vl, x, c, 1.0f, dwte_l, c);
  tp.allreduce_sum(dx, N * C);
}

// ---------------------------------------------------------------------------------------------------
// cross-entropy over a vocabulary split across ranks

void VocabParallelCrossEntropy::forward(TensorParallel& tp, float* losses, float* maxv, float* sumexp,
                                        const float* logits, const int32_t* targets, const VocabShard& v, size_t N) {
  const size_t Vl = static_cast<size_t>(v.rows);
  const size_t real = static_cast<size_t>(std::clamp(v.vocab - v.begin, 0, v.rows));  // columns that are not padding
  // 1. the row max over every rank's columns
  for (size_t n = 0; n < N; ++n) {
    float m = -INFINITY;
    for (size_t j = 0; j < real; ++j) m = std::max(m, logits[n * Vl + j]);
    maxv[n] = m;
  }
  tp.allreduce_max(maxv, N);
  // 2. the target's logit, from the rank that holds it
  std::vector<float> target_logit(N, 0.0f);
  for (size_t n = 0; n < N; ++n) {
    int id = targets[n] - v.begin;
    if (id >= 0 && id < v.rows) target_logit[n] = logits[n * Vl + static_cast<size_t>(id)];
  }
  tp.allreduce_sum_exact(target_logit.data(), N);
  // 3. Σ exp(logit - max)
  for (size_t n = 0; n < N; ++n) {
    float s = 0;
    for (size_t j = 0; j < real; ++j) s += std::exp(logits[n * Vl + j] - maxv[n]);
    sumexp[n] = s;
  }
  tp.allreduce_sum_exact(sumexp, N);
  for (size_t n = 0; n < N; ++n) losses[n] = std::log(sumexp[n]) + maxv[n] - target_logit[n];
}

void VocabParallelCrossEntropy::backward(float* dlogits, const float* logits, const float* maxv, const float* sumexp,
                                         const int32_t* targets, const VocabShard& v, size_t N, float scale) {
  const size_t Vl = static_cast<size_t>(v.rows);
  const size_t real = static_cast<size_t>(std::clamp(v.vocab - v.begin, 0, v.rows));
  for (size_t n = 0; n < N; ++n) {
    float* d = dlogits + n * Vl;
    for (size_t j = 0; j < real; ++j) d[j] = scale * std::exp(logits[n * Vl + j] - maxv[n]) / sumexp[n];
    for (size_t j = real; j < Vl; ++j) d[j] = 0.0f;
    int id = targets[n] - v.begin;
    if (id >= 0 && id < v.rows) d[id] -= scale;
  }
}

}  // namespace mpcomm::parallel
