// Inline float16 / bfloat16 <-> float32 conversions for the kernels (round to nearest even).
// The out-of-line versions in mpcomm/types.h call these.
#pragma once

#include <cstdint>
#include <cstring>

namespace mpcomm::detail {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float bf16_to_f32(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// Branch-free so that loops over it vectorize.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x = float_to_bits(f);
  uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  uint32_t quiet = x | 0x400000u;
  bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>((nan ? quiet : rounded) >> 16);
}

}  // namespace mpcomm::detail
