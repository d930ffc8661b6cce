// Run-time choice between the baseline and the AVX2/F16C kernels.
#define KERNEL_NS generic
#include "core/reduce_kernels.inc"
#undef KERNEL_NS

#include <cpuid.h>
#include <emmintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/reduce.h"
#include "mpcomm/error.h"

namespace mpcomm {
namespace kernels::avx2 {
void reduce_into(void*, const void* const*, int, size_t, DataType, ReduceOp);
void divide_by(void*, size_t, DataType, int);
}  // namespace kernels::avx2

// F16C through cpuid (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
static bool have_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}

static bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
  return yes;
}

void reduce_into(void* dst, const void* const* srcs, int nsrc, size_t count, DataType dt, ReduceOp op) {
  if (nsrc < 1) throw Internal("mpcomm: reduce_into needs at least one source");
  if (have_avx2())
    kernels::avx2::reduce_into(dst, srcs, nsrc, count, dt, op);
  else
    kernels::generic::reduce_into(dst, srcs, nsrc, count, dt, op);
}

void divide_by(void* buf, size_t count, DataType dt, int n) {
  if (have_avx2())
    kernels::avx2::divide_by(buf, count, dt, n);
  else
    kernels::generic::divide_by(buf, count, dt, n);
}

void copy_streaming(void* dst_v, const void* src_v, size_t bytes) {
  if (bytes == 0) return;
  auto* dst = static_cast<char*>(dst_v);
  const auto* src = static_cast<const char*>(src_v);
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {  // one cache line per step: the write-combining buffer fills whole
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();  // the streamed stores are weakly ordered: they land before whatever we do next
}

const char* reduce_kernel_isa() { return have_avx2() ? "avx2+f16c" : "generic"; }

}  // namespace mpcomm
