// Run-time choice between the baseline and the AVX2/F16C kernels.
#define KERNEL_NS generic
#include "core/reduce_kernels.inc"
#undef KERNEL_NS

#include <cpuid.h>

#include "core/reduce.h"
#include "mpcomm/error.h"

namespace mpcomm {
namespace kernels::avx2 {
void reduce_into(void*, const void* const*, int, size_t, DataType, ReduceOp);
void divide_by(void*, size_t, DataType, int);
void reduce_into_streamed(void*, void*, const void* const*, int, size_t, DataType, ReduceOp);
void copy_streamed(void*, const void*, size_t);
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

void reduce_into_streamed(void* cached, void* streamed, const void* const* srcs, int nsrc, size_t count, DataType dt,
                          ReduceOp op) {
  if (nsrc < 1) throw Internal("mpcomm: reduce_into_streamed needs at least one source");
  if (have_avx2())
    kernels::avx2::reduce_into_streamed(cached, streamed, srcs, nsrc, count, dt, op);
  else
    kernels::generic::reduce_into_streamed(cached, streamed, srcs, nsrc, count, dt, op);
}

void copy_streamed(void* dst, const void* src, size_t bytes) {
  if (have_avx2())
    kernels::avx2::copy_streamed(dst, src, bytes);
  else
    kernels::generic::copy_streamed(dst, src, bytes);
}

void divide_by(void* buf, size_t count, DataType dt, int n) {
  if (have_avx2())
    kernels::avx2::divide_by(buf, count, dt, n);
  else
    kernels::generic::divide_by(buf, count, dt, n);
}

const char* reduce_kernel_isa() { return have_avx2() ? "avx2+f16c" : "generic"; }

}  // namespace mpcomm
