// AVX2 + FMA + F16C build of the reduction kernels (compiled with -mavx2 -mfma -mf16c).
#define KERNEL_NS avx2
#include "kernels/reduce_kernels.inc"
