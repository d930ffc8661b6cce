#include "device/cpu_pair.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

namespace mpcomm {

namespace {

// The index-th CPU of `mask`, or -1.
int nth_cpu(const cpu_set_t& mask, int index) {
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask) && seen++ == index) return cpu;
  return -1;
}

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace

int cpu_of_index(int index) {
  cpu_set_t mine;
  return pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) == 0 ? nth_cpu(mine, index) : -1;
}

double cpu_round_trip_ns(int a, int b, long trips) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  cpu_set_t mine;
  if (trips < 1 || pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) != 0) return kNaN;
  const int cpu_a = nth_cpu(mine, a), cpu_b = nth_cpu(mine, b);
  if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) return kNaN;
  alignas(64) std::atomic<long> ping{0};
  alignas(64) std::atomic<long> pong{0};
  std::atomic<bool> pinned{false}, failed{false};
  std::thread answer([&] {
    if (!pin(cpu_b)) {
      failed = true;
      return;
    }
    pinned = true;
    for (long i = 1; i <= trips && !failed.load(std::memory_order_relaxed); ++i) {
      while (ping.load(std::memory_order_acquire) != i)
        if (failed.load(std::memory_order_relaxed)) return;
      pong.store(i, std::memory_order_release);
    }
  });
  double ns = kNaN;
  if (pin(cpu_a)) {
    while (!pinned.load() && !failed.load()) std::this_thread::yield();
    if (!failed.load()) {
      const auto t0 = std::chrono::steady_clock::now();
      for (long i = 1; i <= trips; ++i) {
        ping.store(i, std::memory_order_release);
        while (pong.load(std::memory_order_acquire) != i) {
        }
      }
      ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(trips);
    }
  } else {
    failed = true;
  }
  answer.join();
  pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
  return ns;
}

}  // namespace mpcomm
