// Run-time choice among the baseline, the AVX2/F16C and the AVX-512 kernels.
#define KERNEL_NS generic
#include "kernels/reduce_kernels.inc"
#undef KERNEL_NS

#include <cpuid.h>

#include <iterator>
#include <string>

#include "settings/settings.h"
#include "kernels/reduce.h"
#include "mpcomm/error.h"

namespace mpcomm {
#define MPCOMM_KERNEL_SET(ns)                                                                  \
  namespace kernels::ns {                                                                      \
  void reduce_into(void*, const void* const*, int, size_t, DataType, ReduceOp);                \
  void divide_by(void*, size_t, DataType, int);                                                \
  void reduce_into_streamed(void*, void*, const void* const*, int, size_t, DataType, ReduceOp); \
  void copy_streamed(void*, const void*, size_t);                                              \
  }
MPCOMM_KERNEL_SET(avx2)
MPCOMM_KERNEL_SET(avx512)
#undef MPCOMM_KERNEL_SET

// F16C through cpuid (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
static bool have_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}

bool kernels_supported(Kernels k) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
  // (__builtin_cpu_supports also asks whether the OS saves the AVX-512 registers.)
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl");
  switch (k) {
    case Kernels::generic: return true;
    case Kernels::avx2: return avx2;
    case Kernels::avx512: return avx512;
  }
  return false;
}

namespace {

// A kernel set: its names and its entry points, in the order of enum Kernels.
struct KernelSet {
  const char* name;    // as reduce_kernel_isa() reports it
  const char* option;  // as MPCOMM_KERNELS spells it
  void (*reduce_into)(void*, const void* const*, int, size_t, DataType, ReduceOp);
  void (*reduce_into_streamed)(void*, void*, const void* const*, int, size_t, DataType, ReduceOp);
  void (*copy_streamed)(void*, const void*, size_t);
  void (*divide_by)(void*, size_t, DataType, int);
};

const KernelSet kSets[] = {
    {"generic", "generic", kernels::generic::reduce_into, kernels::generic::reduce_into_streamed,
     kernels::generic::copy_streamed, kernels::generic::divide_by},
    {"avx2+f16c", "avx2", kernels::avx2::reduce_into, kernels::avx2::reduce_into_streamed, kernels::avx2::copy_streamed,
     kernels::avx2::divide_by},
    {"avx512bw+avx2+f16c", "avx512", kernels::avx512::reduce_into, kernels::avx512::reduce_into_streamed,
     kernels::avx512::copy_streamed, kernels::avx512::divide_by},
};
static_assert(std::size(kSets) == static_cast<size_t>(Kernels::avx512) + 1, "one set per Kernels value");

const KernelSet& set_of(Kernels k) { return kSets[static_cast<size_t>(k)]; }

// The set k, which this CPU must run.
const KernelSet& runnable(Kernels k) {
  if (!kernels_supported(k)) throw InvalidArgument(std::string("mpcomm: this CPU cannot run the ") + kernels_name(k) + " kernels");
  return set_of(k);
}

}  // namespace

const char* kernels_name(Kernels k) { return set_of(k).name; }
const char* kernels_option(Kernels k) { return set_of(k).option; }

Kernels kernels_in_use() {
  static const Kernels k = [] {
    const std::string want = param_string("MPCOMM_KERNELS");
    if (want.empty()) {
      for (Kernels best : {Kernels::avx512, Kernels::avx2})
        if (kernels_supported(best)) return best;
      return Kernels::generic;
    }
    for (Kernels c : {Kernels::generic, Kernels::avx2, Kernels::avx512}) {
      if (want != kernels_option(c)) continue;
      if (!kernels_supported(c))
        throw InvalidArgument("mpcomm: MPCOMM_KERNELS=" + want + ": this CPU cannot run the " + kernels_name(c) + " kernels");
      return c;
    }
    throw InvalidArgument("mpcomm: MPCOMM_KERNELS=" + want + " names no kernel set (generic, avx2 or avx512)");
  }();
  return k;
}

void reduce_into(Kernels k, void* dst, const void* const* srcs, int nsrc, size_t count, DataType dt, ReduceOp op) {
  if (nsrc < 1) throw Internal("mpcomm: reduce_into needs at least one source");
  if (is_bitwise(op) && is_floating(dt))
    throw Internal("mpcomm: reduce_into: " + std::string(to_string(op)) + " of " + std::string(to_string(dt)));
  runnable(k).reduce_into(dst, srcs, nsrc, count, dt, op);
}

void reduce_into_streamed(Kernels k, void* cached, void* streamed, const void* const* srcs, int nsrc, size_t count,
                          DataType dt, ReduceOp op) {
  if (nsrc < 1) throw Internal("mpcomm: reduce_into_streamed needs at least one source");
  if (is_bitwise(op) && is_floating(dt))
    throw Internal("mpcomm: reduce_into_streamed: " + std::string(to_string(op)) + " of " + std::string(to_string(dt)));
  runnable(k).reduce_into_streamed(cached, streamed, srcs, nsrc, count, dt, op);
}

void reduce_into(void* dst, const void* const* srcs, int nsrc, size_t count, DataType dt, ReduceOp op) {
  reduce_into(kernels_in_use(), dst, srcs, nsrc, count, dt, op);
}

void reduce_into_streamed(void* cached, void* streamed, const void* const* srcs, int nsrc, size_t count, DataType dt,
                          ReduceOp op) {
  reduce_into_streamed(kernels_in_use(), cached, streamed, srcs, nsrc, count, dt, op);
}

void copy_streamed(void* dst, const void* src, size_t bytes) { set_of(kernels_in_use()).copy_streamed(dst, src, bytes); }

void divide_by(void* buf, size_t count, DataType dt, int n) { set_of(kernels_in_use()).divide_by(buf, count, dt, n); }

const char* reduce_kernel_isa() { return kernels_name(kernels_in_use()); }

}  // namespace mpcomm
