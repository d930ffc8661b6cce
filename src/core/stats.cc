// Time and bytes per op kind (stats.h).
#include "core/stats.h"

#include "core/op_clock.h"

namespace mpcomm::detail {

std::array<OpStats, kNumOpKinds> OpStatsTable::snapshot() const {
  std::array<OpStats, kNumOpKinds> out{};
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].calls = stats_[k].calls.load(std::memory_order_relaxed);
    out[k].bytes = stats_[k].bytes.load(std::memory_order_relaxed);
    out[k].seconds = OpClock::seconds(stats_[k].ticks.load(std::memory_order_relaxed));
    out[k].algorithm = stats_[k].algorithm.load(std::memory_order_relaxed);
  }
  return out;
}

}  // namespace mpcomm::detail
