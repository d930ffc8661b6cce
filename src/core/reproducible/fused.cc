// The one-pass reproducible sum of several vectors held in memory (exact.h: sum_values), for a backend that
// reads every rank's values itself (the native backend's direct algorithms on one host). A block of elements
// at a time, small enough to stay in L1: the block's top bins over all the vectors, every vector's words
// added under them, the sum decoded — the arithmetic and so the bits of the collectives' path, without its
// max all-reduce, its int64 words in memory or its second pass.
//
// float32 is vectorized when the AVX-512 kernels are in use (kernels/reduce.h; DQ for the int64 ↔ double
// conversions): the unit's scales are made from the bins' bits and the special bin's elements redone one by
// one. Its steps are encode's and decode's, each IEEE-exact or rounded as there: float → double, · 2^−unit,
// toward zero; the sum to double (to nearest), · 2^unit, / n for avg, → float (to nearest).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*: GCC bug 105593)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/reproducible/exact.h"
#include "kernels/reduce.h"

namespace mpcomm::detail::repro {

namespace {

constexpr size_t kBlock = 512;

// Any type, through encode/decode: `len` ≤ kBlock elements from `at`.
void block_generic(const void* const* srcs, int nsrc, size_t at, size_t len, DataType dt, void* out, bool average,
                   uint64_t divisor) {
  const size_t W = static_cast<size_t>(words(dt)), es = dtype_size(dt);
  uint8_t top[kBlock], bins[kBlock];
  int64_t w[2 * kBlock];
  auto in = [&](int k) { return static_cast<const char*>(srcs[k]) + at * es; };
  bins_of(in(0), len, dt, top);
  for (int k = 1; k < nsrc; ++k) {
    bins_of(in(k), len, dt, bins);
    for (size_t i = 0; i < len; ++i) top[i] = std::max(top[i], bins[i]);
  }
  std::fill(w, w + len * W, 0);
  for (int k = 0; k < nsrc; ++k) encode(in(k), len, dt, top, w, /*add=*/true);
  // every source is read before the block is written: out may alias srcs[0]
  decode(w, len, dt, top, static_cast<char*>(out) + at * es, average, divisor);
}

// float32's unit exponent under top bin b is 16b + kF32Unit0 (exact.h: 16b + 16 − bias − 48).
constexpr int kF32Unit0 = kBinBits - 127 - kWordBits;

// One half (8 lanes) of a 16-element step: trunc(x · 2^−unit) of every source summed as int64, the sum to
// double, · 2^unit (/ n), to float; `down` and `up` are 2^−unit and 2^unit.
__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))) inline __m256 f32_half(const void* const* srcs, int nsrc,
                                                                                     size_t i, __mmask8 m, __m512d down,
                                                                                     __m512d up, bool average,
                                                                                     __m512d n) {
  __m512i sum = _mm512_setzero_si512();
  for (int k = 0; k < nsrc; ++k) {
    const __m256 x = _mm256_castsi256_ps(_mm256_maskz_loadu_epi32(m, static_cast<const float*>(srcs[k]) + i));
    // exact: a power-of-two scaling to below 2^48; the conversion truncates toward zero
    sum = _mm512_add_epi64(sum, _mm512_cvttpd_epi64(_mm512_mul_pd(_mm512_cvtps_pd(x), down)));
  }
  __m512d d = _mm512_mul_pd(_mm512_cvtepi64_pd(sum), up);
  if (average) d = _mm512_div_pd(d, n);
  return _mm512_cvtpd_ps(d);
}

// 2^(±unit) of 8 lanes from their 32-bit biased exponents (1023 ± unit).
__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))) inline __m512d power_of_two(__m256i biased) {
  return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_cvtepi32_epi64(biased), 52));
}

// Sixteen elements at a time, every source read twice while in L1: the top bin is that of the largest
// magnitude's exponent (bins grow with the exponent; an exponent of 255 — inf or NaN — is the special bin),
// then two halves of eight (f32_half).
__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))) void f32_avx512(const void* const* srcs, int nsrc,
                                                                              size_t n, void* out, bool average,
                                                                              uint64_t divisor) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF), all_ones = _mm512_set1_epi32(0xFF);
  const __m512i bias = _mm512_set1_epi32(1023), unit0 = _mm512_set1_epi32(kF32Unit0);
  const __m512d n_d = _mm512_set1_pd(static_cast<double>(divisor));
  float* o = static_cast<float*>(out);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i largest = _mm512_setzero_si512();
    for (int k = 0; k < nsrc; ++k)
      largest = _mm512_max_epu32(
          largest, _mm512_and_si512(_mm512_maskz_loadu_epi32(m, static_cast<const float*>(srcs[k]) + i), magnitude));
    const __m512i e = _mm512_srli_epi32(largest, 23);
    const __mmask16 sp = _mm512_cmpeq_epi32_mask(e, all_ones);
    // unit = 16·bin + kF32Unit0 (the special lanes as bin 0: their sums are replaced below)
    const __m512i unit =
        _mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(_mm512_maskz_mov_epi32(~sp, e), 4), 4), unit0);
    const __m512i down = _mm512_sub_epi32(bias, unit), up = _mm512_add_epi32(bias, unit);
    const __m256 lo = f32_half(srcs, nsrc, i, static_cast<__mmask8>(m), power_of_two(_mm512_castsi512_si256(down)),
                               power_of_two(_mm512_castsi512_si256(up)), average, n_d);
    const __m256 hi =
        f32_half(srcs, nsrc, i + 8, static_cast<__mmask8>(m >> 8), power_of_two(_mm512_extracti64x4_epi64(down, 1)),
                 power_of_two(_mm512_extracti64x4_epi64(up, 1)), average, n_d);
    __m512 r = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    if (sp != 0) {  // inf and NaN: their counts, lane by lane, before the store (out may alias srcs[0])
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, r);
      const uint8_t sb = kSpecialBin;
      for (int j = 0; j < 16; ++j) {
        if (((sp >> j) & 1) == 0) continue;
        int64_t w = 0;
        for (int k = 0; k < nsrc; ++k)
          encode(static_cast<const float*>(srcs[k]) + i + j, 1, DataType::float32, &sb, &w, /*add=*/true);
        decode(&w, 1, DataType::float32, &sb, &lanes[j], average, divisor);
      }
      r = _mm512_load_ps(lanes);
    }
    _mm512_mask_storeu_ps(o + i, m, r);
  }
}

bool f32_vectorized() {
  static const bool yes = kernels_in_use() == Kernels::avx512 && __builtin_cpu_supports("avx512dq");
  return yes;
}

}  // namespace

void sum_values(const void* const* srcs, int nsrc, size_t n, DataType dt, void* out, bool average, uint64_t divisor) {
  if (dt == DataType::float32 && f32_vectorized()) return f32_avx512(srcs, nsrc, n, out, average, divisor);
  for (size_t at = 0; at < n; at += kBlock)
    block_generic(srcs, nsrc, at, std::min(kBlock, n - at), dt, out, average, divisor);
}

}  // namespace mpcomm::detail::repro
