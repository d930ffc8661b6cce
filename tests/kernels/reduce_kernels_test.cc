// The streaming kernels against the plain ones: reduce_into_streamed must give the bits of reduce_into
// in its cached and its streamed destination, for every dtype and reduce op, with NaNs, 2, 3 and 9
// sources, for counts around the vector and block sizes and destinations at every alignment, writing
// nothing around them; every kernel set the bits of the generic one; copy_streamed the bytes of memcpy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "mpcomm/error.h"
#include "mpcomm/types.h"

namespace mpcomm {
namespace {

// Random bytes, with a few NaNs and infinities for the floating-point types.
std::vector<unsigned char> random_elements(DataType dt, size_t count, std::mt19937& rng) {
  const size_t es = dtype_size(dt);
  std::vector<unsigned char> v(count * es);
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 40);
  for (auto& b : v) b = static_cast<unsigned char>(byte(rng));
  for (size_t i = 0; i < count; ++i) {
    unsigned char* p = v.data() + i * es;
    const int special = pick(rng);
    if (dt == DataType::float32) {
      float f = std::uniform_real_distribution<float>(-100, 100)(rng);
      if (special == 0) f = std::numeric_limits<float>::quiet_NaN();
      if (special == 1) f = std::numeric_limits<float>::infinity();
      std::memcpy(p, &f, 4);
    } else if (dt == DataType::float64) {
      double d = std::uniform_real_distribution<double>(-100, 100)(rng);
      if (special == 0) d = std::numeric_limits<double>::quiet_NaN();
      std::memcpy(p, &d, 8);
    } else if (dt == DataType::bfloat16 || dt == DataType::float16) {
      // Keep the exponent moderate (no overflow to infinity on sums of a few), now and then a NaN.
      uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
      if (dt == DataType::bfloat16) h = static_cast<uint16_t>((h & 0x807f) | 0x3f00);
      else h = static_cast<uint16_t>((h & 0x83ff) | 0x3800);
      if (special == 0) h = dt == DataType::bfloat16 ? 0x7fc1 : 0x7e01;
      std::memcpy(p, &h, 2);
    }
  }
  return v;
}

TEST(ReduceKernels, StreamedGivesTheBitsOfReduceInto) {
  std::mt19937 rng(12345);
  const DataType dtypes[] = {DataType::int8,    DataType::uint8,   DataType::int32,   DataType::int64,
                             DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg,
                          ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};
  for (DataType dt : dtypes)
    for (ReduceOp op : ops)
      for (int nsrc : {2, 3, 9})
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{255}, size_t{1000}, size_t{4099}})
          for (size_t shift : {size_t{0}, size_t{1}, size_t{3}, size_t{8}})  // elements, plus one byte below
            for (bool byte_off : {false, true})
              for (bool cached : {true, false}) {
                const size_t es = dtype_size(dt);
                if (byte_off && es == 1) continue;
                if (is_bitwise(op) && is_floating(dt)) continue;
                const std::string what = std::string(to_string(dt)) + " " + std::string(to_string(op)) + " nsrc " + std::to_string(nsrc) +
                                         " count " + std::to_string(count) + " shift " + std::to_string(shift) +
                                         (byte_off ? " +1 byte" : "") + (cached ? "" : " no cached copy");
                std::vector<std::vector<unsigned char>> src;
                std::vector<const void*> srcs;
                for (int k = 0; k < nsrc; ++k) src.push_back(random_elements(dt, count, rng));
                for (const auto& s : src) srcs.push_back(s.data());
                std::vector<unsigned char> want(count * es + 1);
                reduce_into(want.data(), srcs.data(), nsrc, count, dt, op);
                // The streamed destination at `shift` elements (and one byte) past a 64-byte boundary.
                std::vector<unsigned char> streamed_buf(count * es + 128, 0xab), cached_buf(count * es + 1, 0xcd);  // +1: guard
                const size_t base = (64 - reinterpret_cast<uintptr_t>(streamed_buf.data()) % 64) % 64;
                unsigned char* streamed = streamed_buf.data() + base + shift * es + (byte_off ? 1 : 0);
                reduce_into_streamed(cached ? cached_buf.data() : nullptr, streamed, srcs.data(), nsrc, count, dt, op);
                EXPECT_EQ(std::memcmp(streamed, want.data(), count * es), 0) << what;
                if (cached) {
                  EXPECT_EQ(std::memcmp(cached_buf.data(), want.data(), count * es), 0) << what;
                  EXPECT_EQ(cached_buf[count * es], 0xcd) << what;
                }
                // Nothing written around the destination.
                for (unsigned char* p = streamed_buf.data(); p < streamed; ++p) ASSERT_EQ(*p, 0xab) << what;
                for (unsigned char* p = streamed + count * es; p < streamed_buf.data() + streamed_buf.size(); ++p)
                  ASSERT_EQ(*p, 0xab) << what;
              }
}

// Every kernel set this CPU runs (the AVX2 one, the AVX-512 one with its 16-lane 16-bit floats) gives
// the generic kernels' bits, plain and streamed: every dtype and reduce op, with NaNs, 2 and 3 sources,
// counts around 8, 16 and 32 lanes and the 1 KiB blocks, and misaligned sources.
TEST(ReduceKernels, EveryKernelSetGivesTheGenericBits) {
  std::mt19937 rng(2026);
  const DataType dtypes[] = {DataType::int8,    DataType::uint8,   DataType::int32,   DataType::int64,
                             DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                          ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};
  int sets = 0;
  for (Kernels k : {Kernels::avx2, Kernels::avx512}) {
    if (!kernels_supported(k)) continue;
    ++sets;
    for (DataType dt : dtypes)
      for (ReduceOp op : ops)
        for (int nsrc : {2, 3})
          for (size_t count : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{31}, size_t{32}, size_t{47},
                               size_t{513}, size_t{4099}})
            for (size_t offset : {size_t{0}, size_t{1}}) {  // elements: the sources off the vectors' alignment
              if (is_bitwise(op) && is_floating(dt)) continue;
              const size_t es = dtype_size(dt);
              const std::string what = std::string(kernels_name(k)) + " " + std::string(to_string(dt)) + " " +
                                       std::string(to_string(op)) + " nsrc " + std::to_string(nsrc) + " count " +
                                       std::to_string(count) + " offset " + std::to_string(offset);
              std::vector<std::vector<unsigned char>> src;
              std::vector<const void*> srcs;
              for (int j = 0; j < nsrc; ++j) src.push_back(random_elements(dt, count + offset, rng));
              for (const auto& v : src) srcs.push_back(v.data() + offset * es);
              std::vector<unsigned char> want(count * es), got(count * es, 0x11), streamed(count * es + 64, 0x22);
              reduce_into(Kernels::generic, want.data(), srcs.data(), nsrc, count, dt, op);
              reduce_into(k, got.data(), srcs.data(), nsrc, count, dt, op);
              EXPECT_EQ(std::memcmp(got.data(), want.data(), count * es), 0) << what;
              std::vector<unsigned char> cached(count * es, 0x33);
              const size_t base = (64 - reinterpret_cast<uintptr_t>(streamed.data()) % 64) % 64;
              reduce_into_streamed(k, cached.data(), streamed.data() + base, srcs.data(), nsrc, count, dt, op);
              EXPECT_EQ(std::memcmp(streamed.data() + base, want.data(), count * es), 0) << what << " streamed";
              EXPECT_EQ(std::memcmp(cached.data(), want.data(), count * es), 0) << what << " cached";
            }
  }
  if (sets == 0) GTEST_SKIP() << "this CPU runs only the generic kernels";
}

// The bitwise reductions of the integer types against a plain loop over the sources' bits, every
// kernel set, plain and streamed; a floating-point type is refused (FrontDoor::validate refuses it first).
template <class T>
void expect_bitwise(Kernels k, ReduceOp op, int nsrc, size_t count, std::mt19937& rng, DataType dt) {
  std::vector<std::vector<T>> src(static_cast<size_t>(nsrc), std::vector<T>(count));
  std::vector<const void*> srcs;
  for (auto& v : src) {
    for (auto& x : v) x = static_cast<T>(rng());
    srcs.push_back(v.data());
  }
  std::vector<T> want(count), got(count), cached(count), streamed(count + 64 / sizeof(T));
  for (size_t i = 0; i < count; ++i) {
    T acc = src[0][i];
    for (int j = 1; j < nsrc; ++j) {
      const T v = src[static_cast<size_t>(j)][i];
      acc = static_cast<T>(op == ReduceOp::band ? (acc & v) : op == ReduceOp::bor ? (acc | v) : (acc ^ v));
    }
    want[i] = acc;
  }
  const std::string what = std::string(kernels_name(k)) + " " + std::string(to_string(dt)) + " " +
                           std::string(to_string(op)) + " nsrc " + std::to_string(nsrc) + " count " + std::to_string(count);
  reduce_into(k, got.data(), srcs.data(), nsrc, count, dt, op);
  EXPECT_EQ(got, want) << what;
  reduce_into_streamed(k, cached.data(), streamed.data() + 1, srcs.data(), nsrc, count, dt, op);
  EXPECT_EQ(cached, want) << what << " cached";
  EXPECT_TRUE(std::equal(want.begin(), want.end(), streamed.begin() + 1)) << what << " streamed";
}

TEST(ReduceKernels, BitwiseOpsOfTheIntegerTypes) {
  std::mt19937 rng(99);
  for (Kernels k : {Kernels::generic, Kernels::avx2, Kernels::avx512}) {
    if (!kernels_supported(k)) continue;
    for (ReduceOp op : {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor})
      for (int nsrc : {2, 3, 9})
        for (size_t count : {size_t{0}, size_t{1}, size_t{33}, size_t{1000}, size_t{4099}}) {
          expect_bitwise<int8_t>(k, op, nsrc, count, rng, DataType::int8);
          expect_bitwise<uint8_t>(k, op, nsrc, count, rng, DataType::uint8);
          expect_bitwise<int32_t>(k, op, nsrc, count, rng, DataType::int32);
          expect_bitwise<int64_t>(k, op, nsrc, count, rng, DataType::int64);
        }
  }
  float a = 1, b = 2, out = 0;
  const void* srcs[2] = {&a, &b};
  EXPECT_THROW(reduce_into(&out, srcs, 2, 1, DataType::float32, ReduceOp::band), Internal);
  EXPECT_THROW(reduce_into_streamed(nullptr, &out, srcs, 2, 1, DataType::float32, ReduceOp::bxor), Internal);
}

TEST(ReduceKernels, CopyStreamedCopiesEveryByteAndNothingElse) {
  std::mt19937 rng(7);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}, size_t{65536 + 5}})
    for (size_t dst_off : {size_t{0}, size_t{1}, size_t{17}, size_t{32}})
      for (size_t src_off : {size_t{0}, size_t{3}}) {
        std::vector<unsigned char> src(bytes + 64), dst(bytes + 128, 0x5a);
        for (auto& b : src) b = static_cast<unsigned char>(rng());
        const size_t base = (64 - reinterpret_cast<uintptr_t>(dst.data()) % 64) % 64;
        unsigned char* to = dst.data() + base + dst_off;
        copy_streamed(to, src.data() + src_off, bytes);
        const std::string what = std::to_string(bytes) + " bytes to +" + std::to_string(dst_off) + " from +" + std::to_string(src_off);
        EXPECT_EQ(std::memcmp(to, src.data() + src_off, bytes), 0) << what;
        for (unsigned char* p = dst.data(); p < to; ++p) ASSERT_EQ(*p, 0x5a) << what;
        for (unsigned char* p = to + bytes; p < dst.data() + dst.size(); ++p) ASSERT_EQ(*p, 0x5a) << what;
      }
}

}  // namespace
}  // namespace mpcomm
