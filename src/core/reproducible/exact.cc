#include "core/reproducible/exact.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "mpcomm/error.h"

namespace mpcomm::detail::repro {

namespace {

using i128 = __int128;

// A binary floating-point format: storage, exponent and fraction bits, bias, words per element; Wide is the
// integer a value's window fits in.
template <class U, int ExpBits, int Frac, int W>
struct Format {
  using Bits = U;
  using Wide = std::conditional_t<W == 1, int64_t, i128>;
  static constexpr int kBits = 8 * sizeof(U), kExpBits = ExpBits, kFrac = Frac, kWords = W;
  static constexpr int kBias = (1 << (ExpBits - 1)) - 1, kExpMax = (1 << ExpBits) - 1;
  static constexpr int kBins = kBinsPerWord * W;
};
using F16 = Format<uint16_t, 5, 10, 1>;
using BF16 = Format<uint16_t, 8, 7, 1>;
using F32 = Format<uint32_t, 8, 23, 1>;
using F64 = Format<uint64_t, 11, 52, 2>;

constexpr int64_t kPosInf = 1, kNegInf = int64_t{1} << 21, kNaN = int64_t{1} << 42;
constexpr int64_t kCountMask = (int64_t{1} << 21) - 1;
constexpr int64_t kLow48 = (int64_t{1} << kWordBits) - 1;

struct Parts {
  bool neg, special, nan;
  int e;       // biased exponent, 1 for subnormals and zero
  uint64_t m;  // significand with its hidden bit
};

template <class F>
Parts parts(const void* x, size_t i) {
  typename F::Bits r;
  std::memcpy(&r, static_cast<const char*>(x) + i * sizeof r, sizeof r);
  const uint64_t raw = r;
  const int e = static_cast<int>((raw >> F::kFrac) & static_cast<uint64_t>(F::kExpMax));
  const uint64_t frac = raw & ((uint64_t{1} << F::kFrac) - 1);
  Parts p;
  p.neg = ((raw >> (F::kBits - 1)) & 1) != 0;
  p.special = e == F::kExpMax;
  p.nan = p.special && frac != 0;
  p.e = e == 0 ? 1 : e;
  p.m = e == 0 ? frac : frac | (uint64_t{1} << F::kFrac);
  return p;
}

// The value as a double (exactly).
template <class F>
double value_of(typename F::Bits r) {
  if constexpr (std::is_same_v<F, F32>) {
    float f;
    std::memcpy(&f, &r, 4);
    return f;
  } else if constexpr (std::is_same_v<F, F16>) {
    return half_to_float(r);
  } else {
    return bf16_to_float(r);
  }
}

int64_t special_code(const Parts& p) { return !p.special ? 0 : p.nan ? kNaN : p.neg ? kNegInf : kPosInf; }

// trunc(±m · 2^sh): toward zero, exactly.
template <class Wide>
Wide scaled(const Parts& p, int sh) {
  Wide v = 0;
  if (sh >= 0)
    v = static_cast<Wide>(p.m) << sh;
  else if (-sh < 64)
    v = static_cast<Wide>(p.m >> -sh);
  return p.neg ? -v : v;
}

// The shift that puts a value of biased exponent e in units of its window under top bin `top`.
template <class F>
int shift(int e, int top) {
  return e - F::kFrac - kBinBits * top - kBinBits + kWordBits * F::kWords;
}

// The unit's exponent: value = S · 2^unit_exp.
template <class F>
int unit_exp(int top) {
  return kBinBits * top + kBinBits - F::kBias - kWordBits * F::kWords;
}

// 2^−unit_exp (inverse) or 2^unit_exp of every top bin, made once per type (0 or inf where a type has no such bin).
template <class F>
const double* scales(bool inverse) {
  static const auto table = [] {
    std::array<double, 512> t{};
    for (int b = 0; b < 256; ++b) t[b] = std::ldexp(1.0, -unit_exp<F>(b)), t[256 + b] = std::ldexp(1.0, unit_exp<F>(b));
    return t;
  }();
  return table.data() + (inverse ? 0 : 256);
}

// The caller's values read through a type that may alias them (so that the loops vectorize).
template <class U>
using Aliased __attribute__((may_alias, aligned(1))) = U;

template <class F>
void bins_t(const void* x, size_t n, uint8_t* __restrict bins) {
  const auto* in = static_cast<const Aliased<typename F::Bits>*>(x);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t e = static_cast<uint32_t>(in[i] >> F::kFrac) & F::kExpMax;
    // a subnormal's (and zero's) exponent counts as 1: bin 0 all the same
    bins[i] = static_cast<uint8_t>(e == F::kExpMax ? kSpecialBin : e / kBinBits);
  }
}

template <class F>
void put_words(typename F::Wide q, int64_t* w, bool add) {
  if constexpr (F::kWords == 1) {
    w[0] = add ? w[0] + q : q;
  } else {  // sign and magnitude: each word carries the value's sign (the words' sum is what counts)
    const bool neg = q < 0;
    const i128 mag = neg ? -q : q;
    auto hi = static_cast<int64_t>(mag >> kWordBits), lo = static_cast<int64_t>(mag & kLow48);
    if (neg) hi = -hi, lo = -lo;
    w[0] = add ? w[0] + hi : hi;
    w[1] = add ? w[1] + lo : lo;
  }
}

// One word per element (float16, bfloat16, float32): trunc(x · 2^−unit) in double — a power-of-two scaling, exact,
// of a value whose window integer is below 2^48 — then truncated to int64; the special bin apart.
template <class F>
void encode_narrow(const void* x, size_t n, const uint8_t* top, int64_t* out, bool add) {
  using U = typename F::Bits;
  const double* scale = scales<F>(true);
  const auto* in = static_cast<const Aliased<U>*>(x);
  for (size_t i = 0; i < n; ++i) {
    const U r = in[i];
    int64_t v;
    if (top[i] != kSpecialBin) {
      v = static_cast<int64_t>(value_of<F>(r) * scale[top[i]]);  // the conversion truncates toward zero
    } else {
      const int e = static_cast<int>((r >> F::kFrac) & F::kExpMax);
      const bool neg = (r >> (F::kBits - 1)) != 0, nan = (r & ((U{1} << F::kFrac) - 1)) != 0;
      v = e != F::kExpMax ? 0 : nan ? kNaN : neg ? kNegInf : kPosInf;
    }
    out[i] = add ? out[i] + v : v;
  }
}

template <class F>
void encode_t(const void* x, size_t n, const uint8_t* top, int64_t* out, bool add) {
  constexpr int W = F::kWords;
  if constexpr (W == 1) {
    encode_narrow<F>(x, n, top, out, add);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const Parts p = parts<F>(x, i);
      int64_t* w = out + i * W;
      if (top[i] == kSpecialBin) {
        put_words<F>(special_code(p), w, add);
        continue;
      }
      put_words<F>(scaled<typename F::Wide>(p, shift<F>(p.e, top[i])), w, add);
    }
  }
}

template <class F>
typename F::Wide sum_of(const int64_t* w) {
  if constexpr (F::kWords == 1) {
    return w[0];
  } else {
    return static_cast<i128>(w[0]) * (static_cast<i128>(1) << kWordBits) + w[1];
  }
}

// The special count's value: NaN, or the infinity that occurred.
double special_value(int64_t code) {
  const int64_t pos = code & kCountMask, neg = (code >> 21) & kCountMask, nan = code >> 42;
  if (nan > 0 || (pos > 0 && neg > 0)) return std::numeric_limits<double>::quiet_NaN();
  return neg > 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

template <class F>
void store(double d, float f, bool use_double, void* out, size_t i) {
  char* o = static_cast<char*>(out);
  if constexpr (std::is_same_v<F, F64>) {
    std::memcpy(o + i * 8, &d, 8);
  } else if constexpr (std::is_same_v<F, F32>) {
    const float v = use_double ? static_cast<float>(d) : f;
    std::memcpy(o + i * 4, &v, 4);
  } else {
    const float v = use_double ? static_cast<float>(d) : f;
    const uint16_t h = std::is_same_v<F, F16> ? float_to_half(v) : float_to_bf16(v);
    std::memcpy(o + i * 2, &h, 2);
  }
}

template <class F>
void decode_t(const int64_t* words, size_t n, const uint8_t* top, void* out, bool average, uint64_t divisor) {
  constexpr int W = F::kWords;
  const double* scale = scales<F>(false);
  for (size_t i = 0; i < n; ++i) {
    const int64_t* w = words + i * W;
    if (top[i] == kSpecialBin) {
      store<F>(special_value(w[0]), 0, true, out, i);
      continue;
    }
    const auto s = sum_of<F>(w);
    if constexpr (W == 2) {
      // the sum to double (rounded once), then scaled: exact unless the result is subnormal
      const double d = std::ldexp(static_cast<double>(s), unit_exp<F>(top[i]));
      store<F>(average ? d / static_cast<double>(divisor) : d, 0, true, out, i);
    } else {
      // exact in double while |S| < 2^53 (fewer than 32 values at the top of the window), then rounded once
      const double d = static_cast<double>(s) * scale[top[i]];
      store<F>(average ? d / static_cast<double>(divisor) : d, 0, true, out, i);
    }
  }
}

template <class F>
void accumulate_t(const void* x, size_t n, uint8_t* top, int64_t* bins, int64_t* specials) {
  constexpr int K = F::kBins;
  for (size_t i = 0; i < n; ++i) {
    const Parts p = parts<F>(x, i);
    if (p.special) {
      specials[i] += special_code(p);
      continue;
    }
    int64_t* b = bins + i * K;
    const int bin = p.e / kBinBits;
    if (bin > top[i]) {  // the window rises: the bins below it drop out, as they would for every value
      const int d = bin - top[i];
      for (int j = 0; j < K; ++j) b[j] = j + d < K ? b[j + d] : 0;
      top[i] = static_cast<uint8_t>(bin);
    }
    // sign and magnitude: a bin dropped later takes away the value's bits below the new window, toward zero
    auto q = scaled<typename F::Wide>(p, shift<F>(p.e, top[i]));
    if (q < 0) q = -q;
    for (int j = 0; j < K; ++j) {
      const auto chunk = static_cast<int64_t>((q >> (kBinBits * j)) & 0xFFFF);
      b[j] += p.neg ? -chunk : chunk;
    }
  }
}

template <class F>
void window_t(const uint8_t* mine, const int64_t* bins, const int64_t* specials, size_t n, const uint8_t* top,
              int64_t* out) {
  constexpr int K = F::kBins, W = F::kWords;
  for (size_t i = 0; i < n; ++i) {
    int64_t* w = out + i * W;
    for (int k = 0; k < W; ++k) w[k] = 0;
    if (top[i] == kSpecialBin) {
      w[0] = specials[i];
      continue;
    }
    const int64_t* b = bins + i * K;
    for (int j = 0; j < K; ++j) {
      const int d = top[i] - (mine[i] - (K - 1) + j);  // bins below the element's top bin
      if (d >= K || b[j] == 0) continue;               // below the window: dropped
      w[d / kBinsPerWord] += b[j] * (int64_t{1} << (kBinBits * (kBinsPerWord - 1 - d % kBinsPerWord)));
    }
  }
}

template <class Fn>
void dispatch(DataType dt, Fn&& fn) {
  switch (dt) {
    case DataType::float16:
      return fn(F16{});
    case DataType::bfloat16:
      return fn(BF16{});
    case DataType::float32:
      return fn(F32{});
    case DataType::float64:
      return fn(F64{});
    default:
      throw InvalidArgument("mpcomm: reproducible sums are for floating-point types, not " +
                            std::string(to_string(dt)));
  }
}

}  // namespace

int words(DataType dt) {
  int w = 0;
  dispatch(dt, [&](auto f) { w = decltype(f)::kWords; });
  return w;
}

void bins_of(const void* x, size_t n, DataType dt, uint8_t* bins) {
  dispatch(dt, [&](auto f) { bins_t<decltype(f)>(x, n, bins); });
}

void encode(const void* x, size_t n, DataType dt, const uint8_t* top, int64_t* out, bool add) {
  dispatch(dt, [&](auto f) { encode_t<decltype(f)>(x, n, top, out, add); });
}

void decode(const int64_t* words, size_t n, DataType dt, const uint8_t* top, void* out, bool average,
            uint64_t divisor) {
  dispatch(dt, [&](auto f) { decode_t<decltype(f)>(words, n, top, out, average, divisor); });
}

void accumulate(const void* x, size_t n, DataType dt, uint8_t* top, int64_t* bins, int64_t* specials) {
  dispatch(dt, [&](auto f) { accumulate_t<decltype(f)>(x, n, top, bins, specials); });
}

void window_words(const uint8_t* mine, const int64_t* bins, const int64_t* specials, size_t n, DataType dt,
                  const uint8_t* top, int64_t* out) {
  dispatch(dt, [&](auto f) { window_t<decltype(f)>(mine, bins, specials, n, top, out); });
}

}  // namespace mpcomm::detail::repro
