// Reproducible sums without communication: the accumulator's result depends only on the multiset of vectors
// added (any order, any grouping), special values follow IEEE, and on a million values of mixed magnitude and
// sign the error is no worse than a float32 sum's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mpcomm/error.h"
#include "mpcomm/reproducible.h"
#include "reproducible/inputs.h"

namespace mpcomm {
namespace {

using testing::mixed_values;

std::vector<float> sum_of(const std::vector<std::vector<float>>& vs, const std::vector<size_t>& order) {
  ReproducibleSum acc(DataType::float32, vs[0].size());
  for (size_t k : order) acc.add(vs[k].data());
  std::vector<float> out(vs[0].size());
  acc.result(out.data());
  return out;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

TEST(ReproducibleSum, AnyOrderOfTheSameVectorsGivesTheSameBits) {
  std::vector<std::vector<float>> vs;
  for (int v = 0; v < 8; ++v) vs.push_back(mixed_values<float>(v, 5000));
  std::vector<size_t> order{0, 1, 2, 3, 4, 5, 6, 7};
  const auto first = sum_of(vs, order);
  std::mt19937 rng(3);
  for (int k = 0; k < 10; ++k) {
    std::shuffle(order.begin(), order.end(), rng);
    const auto again = sum_of(vs, order);
    ASSERT_TRUE(same_bits(first.data(), again.data(), first.size() * 4)) << "order " << k;
  }
  // and a plain float32 sum does depend on the order (else this test would prove nothing)
  bool differs = false;
  for (size_t i = 0; i < first.size() && !differs; ++i) {
    float a = 0, b = 0;
    for (size_t k = 0; k < 8; ++k) a += vs[k][i], b += vs[7 - k][i];
    differs = a != b;
  }
  EXPECT_TRUE(differs);
}

// A value added before a larger one (the window rises, bins drop out) is cut as if the larger one had come first.
TEST(ReproducibleSum, ASmallValueBeforeALargeOneIsCutAsAfterIt) {
  for (float tiny : {-1e-30f, 1e-30f, -3.0e-6f, 3.0e-6f, -1.5f}) {
    const float big = 6.0e12f;
    ReproducibleSum a(DataType::float32, 1), b(DataType::float32, 1);
    a.add(&tiny), a.add(&big), a.add(&tiny);
    b.add(&big), b.add(&tiny), b.add(&tiny);
    float x, y;
    a.result(&x), b.result(&y);
    EXPECT_EQ(std::memcmp(&x, &y, 4), 0) << tiny << ": " << x << " vs " << y;
  }
}

TEST(ReproducibleSum, SpecialValuesFollowIeee) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto sum = [](std::vector<float> xs) {
    ReproducibleSum acc(DataType::float32, 1);
    for (float x : xs) acc.add(&x);
    float out;
    acc.result(&out);
    return out;
  };
  EXPECT_EQ(sum({1.0f, inf, -3.0f}), inf);
  EXPECT_EQ(sum({-inf, 2.0f}), -inf);
  EXPECT_TRUE(std::isnan(sum({inf, -inf})));
  EXPECT_TRUE(std::isnan(sum({1.0f, nan})));
  const float zero = sum({-0.0f, -0.0f});
  EXPECT_EQ(zero, 0.0f);
  EXPECT_FALSE(std::signbit(zero)) << "a zero sum is +0";
  const float sub = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(sum({sub, sub, 3 * sub}), 5 * sub) << "subnormals add exactly";
  EXPECT_EQ(sum({3e38f, 3e38f}), inf) << "overflow";
  const float small = std::ldexp(1.0f + std::ldexp(1.0f, -10), -30);  // its bits reach 2^-40: inside the window
  EXPECT_EQ(sum({1.0f, small, -1.0f}), small) << "cancellation keeps what a float32 sum loses";
  EXPECT_NE(1.0f + small - 1.0f, small);
}

TEST(ReproducibleSum, EveryFloatingTypeAndOnlyThose) {
  for (DataType dt : {DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64}) {
    ReproducibleSum acc(dt, 3);
    std::vector<char> x(3 * dtype_size(dt), 0), out(x.size());
    acc.add(x.data());
    acc.result(out.data());
    EXPECT_EQ(acc.vectors(), 1u);
  }
  EXPECT_THROW(ReproducibleSum(DataType::int32, 3), InvalidArgument);
  double one = 1.0, third = 1.0 / 3, out;
  ReproducibleSum d(DataType::float64, 1);
  d.add(&one), d.add(&third), d.add(&third), d.add(&third);
  d.result(&out);
  EXPECT_EQ(out, 2.0) << "float64 keeps far more than its 53 bits in the window";
}

// The error against a long double reference, worst over a million elements of 8 vectors of mixed magnitude and
// sign, relative to the exact sum and to the element's largest addend (the scale of any floating-point sum's
// error): the reproducible sum against the float32 sum a ring all-reduce makes (in rank order from the element's
// chunk owner).
TEST(ReproducibleSum, AMillionValuesNoLessAccurateThanAFloat32RingSum) {
  const size_t n = 1000000, ranks = 8;
  std::vector<std::vector<float>> vs;
  for (size_t v = 0; v < ranks; ++v) vs.push_back(mixed_values<float>(static_cast<int>(v), n));
  std::vector<size_t> order(ranks);
  for (size_t k = 0; k < ranks; ++k) order[k] = k;
  const auto ours = sum_of(vs, order);
  double rel_ours = 0, rel_ring = 0, scaled_ours = 0, scaled_ring = 0;
  const size_t chunk = (n + ranks - 1) / ranks;
  for (size_t i = 0; i < n; ++i) {
    long double exact = 0, scale = 0;
    for (size_t k = 0; k < ranks; ++k) exact += vs[k][i], scale = std::max<long double>(scale, std::fabs(vs[k][i]));
    float ring = 0;
    const size_t start = (i / chunk + 1) % ranks;
    for (size_t k = 0; k < ranks; ++k) ring += vs[(start + k) % ranks][i];
    const auto e_ours = std::fabs(ours[i] - exact), e_ring = std::fabs(ring - exact);
    scaled_ours = std::max(scaled_ours, static_cast<double>(e_ours / scale));
    scaled_ring = std::max(scaled_ring, static_cast<double>(e_ring / scale));
    if (exact == 0) continue;
    rel_ours = std::max(rel_ours, static_cast<double>(e_ours / std::fabs(exact)));
    rel_ring = std::max(rel_ring, static_cast<double>(e_ring / std::fabs(exact)));
  }
  std::printf(
      "worst relative error over %zu elements: reproducible %.3g, float32 ring %.3g; relative to the largest "
      "addend: %.3g, %.3g\n",
      n, rel_ours, rel_ring, scaled_ours, scaled_ring);
  EXPECT_LE(rel_ours, rel_ring);
  EXPECT_LE(scaled_ours, scaled_ring);
  EXPECT_GT(rel_ring, 0.0);
}

}  // namespace
}  // namespace mpcomm
