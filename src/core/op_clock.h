// The clock of the per-op bookkeeping (statistics, flight recorder): two readings per call, so it must
// be cheap. The TSC where the CPU says it ticks at a constant rate through sleep states (constant_tsc
// and nonstop_tsc: rdtsc, about 10 ns against steady_clock's 24 ns on this project's VMs), else
// steady_clock. Ticks are converted to seconds with a rate measured against steady_clock once per
// process (about 2 ms, at the first communicator).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <chrono>

namespace mpcomm::detail {

struct OpClock {
  // Whether ticks are TSC ticks (else steady_clock nanoseconds); decided once.
  static bool tsc();
  static uint64_t now() {
#if defined(__x86_64__)
    if (use_tsc_) return __rdtsc();
#endif
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  // Seconds per tick (measured once, by init()).
  static double seconds_per_tick() { return seconds_per_tick_; }
  static double seconds(uint64_t ticks) { return static_cast<double>(ticks) * seconds_per_tick_; }
  // Prepares now() and seconds_per_tick() (about 2 ms, once per process); the front door calls it when a
  // communicator is created, before any reading is taken.
  static void init();

 private:
  static inline bool use_tsc_ = false;
  static inline double seconds_per_tick_ = 1e-9;
};

}  // namespace mpcomm::detail
