// copy_streaming (core/reduce.h): the non-temporal copy that the direct allreduce writes large results
// with. Every length around the 16-byte and 64-byte steps, at every alignment of dst and src within 16
// bytes: the copy must be exact and must not touch a byte outside dst.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/reduce.h"

namespace mpcomm {
namespace {

TEST(CopyStreaming, EveryLengthAndAlignmentExactAndInBounds) {
  constexpr size_t kGuard = 32;
  std::vector<size_t> lengths = {0, 1, 15, 16, 17, 31, 32, 48, 63, 64, 65, 79, 80, 127, 128, 129, 191, 4096 + 77};
  for (size_t len : lengths)
    for (size_t dst_off = 0; dst_off < 16; ++dst_off)
      for (size_t src_off : {size_t{0}, size_t{1}, size_t{8}, dst_off}) {
        alignas(64) static uint8_t src[4096 + 256], dst[4096 + 256];
        for (size_t i = 0; i < sizeof src; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
        for (size_t i = 0; i < sizeof dst; ++i) dst[i] = 0xA5;
        copy_streaming(dst + kGuard + dst_off, src + src_off, len);
        for (size_t i = 0; i < sizeof dst; ++i) {
          const bool inside = i >= kGuard + dst_off && i < kGuard + dst_off + len;
          const uint8_t want = inside ? src[src_off + i - kGuard - dst_off] : uint8_t{0xA5};
          ASSERT_EQ(dst[i], want) << "length " << len << ", dst offset " << dst_off << ", src offset " << src_off
                                  << ": byte " << i << (inside ? " (inside)" : " (outside)");
        }
      }
}

}  // namespace
}  // namespace mpcomm
