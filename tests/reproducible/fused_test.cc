// The one-pass sum of vectors in memory (sum_values, the native backend's fused path) gives the bits of the
// collectives' path: top bins agreed as their max, every vector encoded under them, the words added, decoded —
// for every floating type, numbers of vectors, counts across its blocks, special values, avg, and in place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/reproducible/exact.h"
#include "reproducible/inputs.h"

namespace mpcomm {
namespace {

namespace r = detail::repro;

// The collectives' path on one machine: bins, their max, words added, decoded.
std::vector<char> by_the_collectives_path(const std::vector<std::vector<char>>& xs, size_t n, DataType dt, bool avg) {
  const size_t W = static_cast<size_t>(r::words(dt));
  std::vector<uint8_t> top(n, 0), bins(n);
  for (const auto& x : xs) {
    r::bins_of(x.data(), n, dt, bins.data());
    for (size_t i = 0; i < n; ++i) top[i] = std::max(top[i], bins[i]);
  }
  std::vector<int64_t> words(n * W, 0);
  for (const auto& x : xs) r::encode(x.data(), n, dt, top.data(), words.data(), /*add=*/true);
  std::vector<char> out(n * dtype_size(dt));
  r::decode(words.data(), n, dt, top.data(), out.data(), avg, xs.size());
  return out;
}

// Puts value v (as a double, converted to dt) at element i.
void put(std::vector<char>& x, size_t i, DataType dt, double v) {
  const auto f = static_cast<float>(v);
  const uint16_t h = dt == DataType::float16 ? float_to_half(f) : float_to_bf16(f);
  if (dt == DataType::float64) std::memcpy(x.data() + i * 8, &v, 8);
  if (dt == DataType::float32) std::memcpy(x.data() + i * 4, &f, 4);
  if (dtype_size(dt) == 2) std::memcpy(x.data() + i * 2, &h, 2);
}

TEST(ReproducibleFused, OnePassGivesTheBitsOfTheCollectivesPath) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DataType dt : {DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64})
    for (int nsrc : {1, 2, 3, 8})
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{3 * 512 + 5}}) {
        SCOPED_TRACE(std::string(to_string(dt)) + ", " + std::to_string(nsrc) + " vectors of " + std::to_string(n));
        std::vector<std::vector<char>> xs;
        for (int k = 0; k < nsrc; ++k) xs.push_back(testing::mixed_bytes(k, n, dt));
        // a value far above the others in one vector only (the element's top bin is not the first vector's),
        // and special values, in the second block
        if (n > 600) {
          put(xs.back(), 520, dt, 3.0e4);
          put(xs[0], 530, dt, inf);
          put(xs.back(), 531, dt, -inf);
          put(xs[0], 532, dt, nan);
          put(xs[0], 533, dt, -0.0);
          put(xs[0], 534, dt, 1e-40);
        }
        std::vector<const void*> srcs;
        for (const auto& x : xs) srcs.push_back(x.data());
        for (bool avg : {false, true}) {
          const std::vector<char> want = by_the_collectives_path(xs, n, dt, avg);
          std::vector<char> got(want.size() + 1, 'x');
          r::sum_values(srcs.data(), nsrc, n, dt, got.data(), avg, static_cast<uint64_t>(nsrc));
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size()));
          EXPECT_EQ(got.back(), 'x');  // nothing written past the n elements
          // in place: the output is the first vector
          std::vector<std::vector<char>> copy = xs;
          srcs[0] = copy[0].data();
          r::sum_values(srcs.data(), nsrc, n, dt, copy[0].data(), avg, static_cast<uint64_t>(nsrc));
          srcs[0] = xs[0].data();
          EXPECT_EQ(0, std::memcmp(copy[0].data(), want.data(), want.size()));
        }
      }
}

}  // namespace
}  // namespace mpcomm
