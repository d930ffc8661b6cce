// The math of one rank, without communication: each layer's forward and backward side by side.
// N rows (micro-batch × sequence) of row-major float32; GEMMs go through BLAS (OpenBLAS, one thread).
//
// Conventions: forward functions overwrite their outputs; backward functions ACCUMULATE (+=) into
// parameter gradients and OVERWRITE input gradients, unless the name says otherwise.
#pragma once

#include <cstddef>

namespace mpcomm::parallel {

// Makes BLAS use one thread per calling rank (the trainer runs one rank per core, or ranks as threads).
void blas_single_thread();

// out[N,O] = inp[N,I] @ w[I,O] (+ bias[O] when not null). Hugging Face's Conv1D layout.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, size_t N, size_t I, size_t O);
// dinp = dout @ w^T (when dinp is not null); dw += inp^T @ dout; dbias += column sums of dout (when not null).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     size_t N, size_t I, size_t O);

// LayerNorm over C, eps 1e-5, biased variance; saves mean and 1/std per row for the backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       size_t N, size_t C);
// dinp += ...; dw, db += ...
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, size_t N, size_t C);

// Causal self-attention of Hl heads on qkv[B,T,3*Cl] (q | k | v, each Cl = Hl*hd wide, head h at h*hd),
// scores scaled by 1/sqrt(hd). att[B,Hl,T,T] keeps the softmax probabilities (0 above the diagonal).
void attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t Hl, size_t hd);
// dqkv = ... (overwritten); datt is scratch of att's size.
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, size_t B,
                        size_t T, size_t Hl, size_t hd);

// GELU, tanh approximation (GPT-2's "gelu_new").
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);  // dinp = ...

// out = a + b
void add(float* out, const float* a, const float* b, size_t n);
// out += a
void accumulate(float* out, const float* a, size_t n);
// out[N,C] += bias[C] on every row
void add_bias(float* out, const float* bias, size_t N, size_t C);
// dbias[C] += column sums of dout[N,C]
void bias_backward(float* dbias, const float* dout, size_t N, size_t C);

}  // namespace mpcomm::parallel
