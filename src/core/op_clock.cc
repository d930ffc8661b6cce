#include "core/op_clock.h"

#include <fstream>
#include <mutex>
#include <string>

namespace mpcomm::detail {

namespace {

bool cpu_has_invariant_tsc() {
#if defined(__x86_64__)
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0)
      return line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
#endif
  return false;
}

std::once_flag g_once;

// TSC ticks per second, measured against steady_clock over 2 ms; 0 when the TSC cannot be used.
double tsc_seconds_per_tick() {
#if defined(__x86_64__)
  if (!cpu_has_invariant_tsc()) return 0;
  using C = std::chrono::steady_clock;
  const auto t0 = C::now();
  const uint64_t c0 = __rdtsc();
  C::time_point t1;
  uint64_t c1;
  do {
    t1 = C::now();
    c1 = __rdtsc();
  } while (t1 - t0 < std::chrono::milliseconds(2));
  if (c1 <= c0) return 0;
  return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(c1 - c0);
#else
  return 0;
#endif
}

}  // namespace

void OpClock::init() {
  std::call_once(g_once, [] {
    // Unless the TSC is used, ticks are steady_clock's (libstdc++: nanoseconds): the default 1e-9.
    if (double s = tsc_seconds_per_tick(); s > 0) {
      seconds_per_tick_ = s;
      use_tsc_ = true;
    }
  });
}

bool OpClock::tsc() {
  init();
  return use_tsc_;
}


}  // namespace mpcomm::detail
