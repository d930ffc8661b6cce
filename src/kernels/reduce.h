// Reduction kernels for every DataType and ReduceOp. float16 and bfloat16 accumulate in float32 and
// round once when they store. Integer sum/prod wrap around (two's complement), as in NCCL and MPI.
// AVX2/F16C and AVX-512 builds of the same kernels are chosen at run time when the CPU has them
// (MPCOMM_KERNELS chooses otherwise); every build gives the same bits.
#pragma once

#include <cstddef>

#include "mpcomm/types.h"

namespace mpcomm {

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined in source order so every rank
// that reduces the same sources gets the same bits. dst may alias srcs[0]. avg reduces as sum; call
// divide_by() once at the end.
void reduce_into(void* dst, const void* const* srcs, int nsrc, size_t count, DataType dt, ReduceOp op);

// dst[i] = dst[i] op src[i].
inline void reduce_inplace(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) {
  const void* srcs[2] = {dst, src};
  reduce_into(dst, srcs, 2, count, dt, op);
}

// As reduce_into, into `streamed` with non-temporal stores (they write whole cache lines without
// reading them first, and leave them out of the cache: for outputs too large to stay cached), and
// also into `cached` unless it is null, to be read again soon. The bits of reduce_into (avg reduces
// as sum). Reduces a block of 1 KiB at a time and streams it while it is in L1; the two-source float32
// and 16-bit float cases in one pass (an 8-lane result stored, then streamed). Used by the two-copy
// allreduce (allreduce_two_copy.cc); what streaming stores gain: docs/performance.md.
void reduce_into_streamed(void* cached, void* streamed, const void* const* srcs, int nsrc, size_t count, DataType dt,
                          ReduceOp op);

// memcpy with non-temporal stores (see reduce_into_streamed).
void copy_streamed(void* dst, const void* src, size_t bytes);

// buf[i] /= n (integer division truncates toward zero), the last step of avg.
void divide_by(void* buf, size_t count, DataType dt, int n);

// Name of the kernel set in use ("avx512bw+avx2+f16c", "avx2+f16c" or "generic").
const char* reduce_kernel_isa();

// The kernel sets, for tests and benchmarks that compare them: whether this CPU runs one, its name (as
// reduce_kernel_isa), its MPCOMM_KERNELS spelling, the one in use (the best this CPU runs, or MPCOMM_KERNELS: generic, avx2 or avx512; read once), and
// reduce_into / reduce_into_streamed with a given set (InvalidArgument if this CPU cannot run it).
enum class Kernels { generic, avx2, avx512 };
bool kernels_supported(Kernels k);
const char* kernels_name(Kernels k);
const char* kernels_option(Kernels k);
Kernels kernels_in_use();
void reduce_into(Kernels k, void* dst, const void* const* srcs, int nsrc, size_t count, DataType dt, ReduceOp op);
void reduce_into_streamed(Kernels k, void* cached, void* streamed, const void* const* srcs, int nsrc, size_t count,
                          DataType dt, ReduceOp op);

}  // namespace mpcomm
