// Inputs for the reproducible-sum tests: vectors of values of mixed magnitude (2^-16 .. 2^16) and sign, each a
// function of (vector, element) only, so that any rank can make any vector.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mpcomm/types.h"

namespace mpcomm::testing {

inline double mixed_value(int vector, size_t i) {
  uint64_t h = (static_cast<uint64_t>(vector) + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xC2B2AE3D27D4EB4Full);
  h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
  const double m = 1.0 + static_cast<double>(h >> 12 & 0xFFFFF) / 1048576.0;
  return ((h & 1) ? -1.0 : 1.0) * std::ldexp(m, static_cast<int>(h >> 40 & 31) - 16);
}

template <class T>
std::vector<T> mixed_values(int vector, size_t n) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(mixed_value(vector, i));
  return out;
}

// The same as raw bytes of dt (float16 and bfloat16 rounded from float32).
inline std::vector<char> mixed_bytes(int vector, size_t n, DataType dt) {
  const size_t es = dtype_size(dt);
  std::vector<char> out(n * es);
  for (size_t i = 0; i < n; ++i) {
    const double v = mixed_value(vector, i);
    const float f = static_cast<float>(v);
    const uint16_t h = dt == DataType::float16 ? float_to_half(f) : float_to_bf16(f);
    if (es == 8) std::memcpy(out.data() + i * 8, &v, 8);
    if (es == 4) std::memcpy(out.data() + i * 4, &f, 4);
    if (es == 2) std::memcpy(out.data() + i * 2, &h, 2);
  }
  return out;
}

}  // namespace mpcomm::testing
