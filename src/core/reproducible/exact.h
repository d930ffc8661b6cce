// Reproducible sums: floating-point values turned into integers whose sum is exact, so the result depends
// only on the multiset of values added — not on the algorithm, the backend, the chunking, the order of the
// ranks or how many ranks the values are spread over. Integer addition is associative; every collective of
// every backend adds int64 exactly.
//
// The encoding (one element; binned summation in the manner of ReproBLAS, with integers):
//   - A value x = ±M·2^(e−bias−p) (M its significand with the hidden bit, e its biased exponent, e ≥ 1 for
//     subnormals and zero) lies in bin floor(e/16). The bins of all the values summed (on every rank) give the
//     element's top bin B: its max. Infinities and NaNs put the element in the special bin 255.
//   - The element's window is 48·W bits (W = words(): one for float16, bfloat16 and float32, two for float64)
//     ending just above bin B: unit u = 2^(16B + 16 − bias − 48W). Every value contributes trunc(x / u) (toward
//     zero), an integer below 2^(48W) in magnitude (u ≤ 2^(−32)·max|x|, 2^(−80)·max|x| for float64), cut into W
//     words of 48 bits carrying its sign. Words are summed as int64: room for 2^15 values per element.
//   - The sum S of the words, put together, is the exact sum of the trunc(x / u); the result is S·u in double
//     (exact while |S| < 2^53: fewer than 32 values at the top of the window) rounded once to the type (to
//     nearest even; the 16-bit types through float32); float64: S rounded to double, then scaled (exact unless
//     subnormal). avg: S·u / n in double, rounded to the type. Every step depends on S alone.
//   - Each value loses less than one unit u: the error of n values is below n·u plus the final rounding — a
//     float32 sum of n values adds up to n−1 roundings of up to 2^(−24) of its partial sums each.
//   - Special values: the element's word counts +inf, −inf and NaN addends (21 bits each); the result is NaN if
//     any addend is NaN or both infinities occur, else the infinity that occurs. Finite addends do not matter
//     then, as in IEEE arithmetic. Signed zeros: a sum that is zero is +0 (also −0 + −0).
// Truncation at the unit composes: trunc(trunc(x/u)/2^16) = trunc(x/(2^16·u)). So an accumulator
// (ReproducibleSum) keeps per-bin sums of each value's 16-bit pieces, signed like the value, and drops whole bins
// when the top bin rises: a value added before a larger one is cut exactly as if the top bin had been known.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpcomm/types.h"

namespace mpcomm::detail::repro {

constexpr uint8_t kSpecialBin = 255;
constexpr int kBinBits = 16;
constexpr int kWordBits = 48;
constexpr int kBinsPerWord = kWordBits / kBinBits;
// The most values one element may sum: the headroom of an int64 word over 48 bits.
constexpr uint64_t kMaxValues = uint64_t{1} << 15;

// int64 words per element (throws InvalidArgument for a type that is not floating).
int words(DataType dt);

// bins[i] = the bin of x[i] (kSpecialBin for inf or NaN).
void bins_of(const void* x, size_t n, DataType dt, uint8_t* bins);

// out[i·W ..] = the words of x[i] in the window of top bin top[i] (top[i] ≥ bins_of(x[i]) required), or its
// special count when top[i] is kSpecialBin. add: add into out instead of overwriting it.
void encode(const void* x, size_t n, DataType dt, const uint8_t* top, int64_t* out, bool add = false);

// out[i] = the summed words of element i as a value of dt (avg: divided by `divisor`).
void decode(const int64_t* words, size_t n, DataType dt, const uint8_t* top, void* out, bool average = false,
            uint64_t divisor = 1);

// out[i] = the sum of srcs[0][i], ..., srcs[nsrc-1][i] (avg: divided by `divisor`) with the bits of the path
// above — bins, encode under their max, words added, decode — in one pass over blocks that stay in L1
// (fused.cc). out may alias srcs[0]. At most kMaxValues sources.
void sum_values(const void* const* srcs, int nsrc, size_t n, DataType dt, void* out, bool average = false,
                uint64_t divisor = 1);

// One element's per-bin sums in an accumulator: 3·W bins below and at `top` (bins[3W−1] is bin `top`).
// Adds x (of its element) to them, raising top (and dropping the bins below the new window) where x is in a
// higher bin; specials counts inf and NaN addends.
void accumulate(const void* x, size_t n, DataType dt, uint8_t* top, int64_t* bins, int64_t* specials);
// The words of each element's window of top bin `top` (≥ the accumulator's own), from its per-bin sums.
void window_words(const uint8_t* mine, const int64_t* bins, const int64_t* specials, size_t n, DataType dt,
                  const uint8_t* top, int64_t* out);

}  // namespace mpcomm::detail::repro
