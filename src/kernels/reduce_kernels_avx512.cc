// AVX-512 (F, BW, VL) + AVX2 + FMA + F16C build of the reduction kernels (reduce_kernels.inc): the 16-bit
// floats' two-source kernels run 16 lanes at a time. Compiled with 256-bit vectors preferred, so that
// every other loop is the AVX2 build's.
#define KERNEL_NS avx512
#include "kernels/reduce_kernels.inc"
