// Time and bytes per op kind since a communicator was created (Communicator::stats()).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "mpcomm/communicator.h"

namespace mpcomm::detail {

class OpStatsTable {
 public:
  // One thread at a time adds (the front door's driver, front_door.h), so plain read-modify-writes of
  // relaxed atomics suffice; any thread may read.
  void add_call(OpKind k, uint64_t bytes) {
    Stat& s = stats_[static_cast<size_t>(k)];
    s.calls.store(s.calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    s.bytes.store(s.bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  // `ticks` of OpClock (op_clock.h).
  void add_time(OpKind k, uint64_t ticks) {
    Stat& s = stats_[static_cast<size_t>(k)];
    s.ticks.store(s.ticks.load(std::memory_order_relaxed) + ticks, std::memory_order_relaxed);
  }
  void set_algorithm(OpKind k, const char* algorithm) {
    stats_[static_cast<size_t>(k)].algorithm.store(algorithm, std::memory_order_relaxed);
  }
  std::array<OpStats, kNumOpKinds> snapshot() const;

 private:
  struct Stat {
    std::atomic<uint64_t> calls{0}, bytes{0}, ticks{0};
    std::atomic<const char*> algorithm{nullptr};
  };
  std::array<Stat, kNumOpKinds> stats_;
};

}  // namespace mpcomm::detail
