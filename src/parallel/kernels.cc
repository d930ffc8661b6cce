#include "parallel/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace mpcomm::parallel {

void blas_single_thread() { openblas_set_num_threads(1); }

// ---------------------------------------------------------------------------------------------------
// matmul (Conv1D: w is [in, out])

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, size_t N, size_t I, size_t O) {
  const int n = static_cast<int>(N), i = static_cast<int>(I), o = static_cast<int>(O);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, o, i, 1.0f, inp, i, w, o, 0.0f, out, o);
  if (bias != nullptr) add_bias(out, bias, N, O);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     size_t N, size_t I, size_t O) {
  const int n = static_cast<int>(N), i = static_cast<int>(I), o = static_cast<int>(O);
  if (dinp != nullptr) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, i, o, 1.0f, dout, o, w, o, 0.0f, dinp, i);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i, o, n, 1.0f, inp, i, dout, o, 1.0f, dw, o);
  if (dbias != nullptr) bias_backward(dbias, dout, N, O);
}

// ---------------------------------------------------------------------------------------------------
// layernorm

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       size_t N, size_t C) {
  for (size_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float m = 0;
    for (size_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<float>(C);
    float v = 0;
    for (size_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= static_cast<float>(C);
    float s = 1.0f / std::sqrt(v + 1e-5f);
    float* y = out + n * C;
    for (size_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, size_t N, size_t C) {
  for (size_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    const float* x = inp + n * C;
    float m = mean[n], s = rstd[n];
    // dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (size_t c = 0; c < C; ++c) {
      float norm = (x[c] - m) * s, dnorm = dy[c] * w[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    float* dx = dinp + n * C;
    for (size_t c = 0; c < C; ++c) {
      float norm = (x[c] - m) * s, dnorm = dy[c] * w[c];
      db[c] += dy[c];
      dw[c] += norm * dy[c];
      dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// attention

void attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t Hl, size_t hd) {
  const size_t Cl = Hl * hd, row = 3 * Cl;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (size_t b = 0; b < B; ++b)
    for (size_t h = 0; h < Hl; ++h)
      for (size_t t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * row + h * hd;
        float* a = att + ((b * Hl + h) * T + t) * T;
        float maxv = -INFINITY;
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (b * T + t2) * row + Cl + h * hd;
          float s = 0;
          for (size_t i = 0; i < hd; ++i) s += q[i] * k[i];
          a[t2] = s * scale;
          maxv = std::max(maxv, a[t2]);
        }
        float sum = 0;
        for (size_t t2 = 0; t2 <= t; ++t2) sum += (a[t2] = std::exp(a[t2] - maxv));
        for (size_t t2 = 0; t2 <= t; ++t2) a[t2] /= sum;
        for (size_t t2 = t + 1; t2 < T; ++t2) a[t2] = 0;
        float* o = out + (b * T + t) * Cl + h * hd;
        for (size_t i = 0; i < hd; ++i) o[i] = 0;
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (b * T + t2) * row + 2 * Cl + h * hd;
          for (size_t i = 0; i < hd; ++i) o[i] += a[t2] * v[i];
        }
      }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, size_t B,
                        size_t T, size_t Hl, size_t hd) {
  const size_t Cl = Hl * hd, row = 3 * Cl;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::fill(dqkv, dqkv + B * T * row, 0.0f);
  for (size_t b = 0; b < B; ++b)
    for (size_t h = 0; h < Hl; ++h)
      for (size_t t = 0; t < T; ++t) {
        const float* a = att + ((b * Hl + h) * T + t) * T;
        float* da = datt + ((b * Hl + h) * T + t) * T;
        const float* dy = dout + (b * T + t) * Cl + h * hd;
        // out = sum_t2 a[t2] v[t2]
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (b * T + t2) * row + 2 * Cl + h * hd;
          float* dv = dqkv + (b * T + t2) * row + 2 * Cl + h * hd;
          float s = 0;
          for (size_t i = 0; i < hd; ++i) {
            s += dy[i] * v[i];
            dv[i] += a[t2] * dy[i];
          }
          da[t2] = s;
        }
        // softmax: dscore = a * (da - sum(a * da))
        float dot = 0;
        for (size_t t2 = 0; t2 <= t; ++t2) dot += a[t2] * da[t2];
        const float* q = qkv + (b * T + t) * row + h * hd;
        float* dq = dqkv + (b * T + t) * row + h * hd;
        for (size_t t2 = 0; t2 <= t; ++t2) {
          float ds = a[t2] * (da[t2] - dot) * scale;
          const float* k = qkv + (b * T + t2) * row + Cl + h * hd;
          float* dk = dqkv + (b * T + t2) * row + Cl + h * hd;
          for (size_t i = 0; i < hd; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
}

// ---------------------------------------------------------------------------------------------------
// gelu (tanh approximation)

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
}

void gelu_forward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + 0.044715f * x * x * x);
    float th = std::tanh(u);
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

// ---------------------------------------------------------------------------------------------------
// elementwise

void add(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* out, const float* a, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += a[i];
}

void add_bias(float* out, const float* bias, size_t N, size_t C) {
  for (size_t n = 0; n < N; ++n)
    for (size_t c = 0; c < C; ++c) out[n * C + c] += bias[c];
}

void bias_backward(float* dbias, const float* dout, size_t N, size_t C) {
  for (size_t n = 0; n < N; ++n)
    for (size_t c = 0; c < C; ++c) dbias[c] += dout[n * C + c];
}

}  // namespace mpcomm::parallel
