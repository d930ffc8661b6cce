// How far apart two CPUs are right now: the round trip of one cache line between a thread on each, and
// how fast one reads a buffer the other has just written (what every shared-memory transfer between two
// ranks does). On a virtual machine the hypervisor may move its virtual CPUs between host cores that
// share a cache, that do not, or that are hyperthreads of one core, and the answer changes within
// minutes (docs/performance.md, "Why runs differ").
//
//   build/benchmarks/cpu_placement [CPU_A CPU_B] [--repeat N] [--every S]
//
// CPU_A and CPU_B index its affinity mask (the CPU numbers, unless it runs restricted).
//
// Prints one line per measurement: round trip in ns, and the written-then-read speed of 64 KiB, 1 MiB
// and 8 MiB, once with plain stores and once with streaming stores (which leave the lines in memory,
// not in the writer's cache). Defaults: CPUs 0 and 1, one measurement.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu_pair.h"
#include "kernels/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "cpu_placement: cannot pin a thread to CPU %d\n", cpu);
    std::exit(1);
  }
}

// GB/s of "b writes `bytes` into a shared buffer, then a copies it out", taking turns (the time of both).
double written_then_read_gbs(int a, int b, size_t bytes, bool streamed) {
  std::vector<char> src(bytes, 1), shared(bytes, 2), dst(bytes, 3);
  const int rounds = static_cast<int>(std::max<size_t>(20, (size_t{256} << 20) / bytes));
  std::atomic<int> phase{0};
  std::thread writer([&] {
    pin(b);
    for (int k = 0; k < rounds; ++k) {
      while (phase.load(std::memory_order_acquire) != 2 * k) {
      }
      if (streamed)
        mpcomm::copy_streamed(shared.data(), src.data(), bytes);
      else
        std::memcpy(shared.data(), src.data(), bytes);
      phase.store(2 * k + 1, std::memory_order_release);
    }
  });
  pin(a);
  const auto t0 = Clock::now();
  for (int k = 0; k < rounds; ++k) {
    while (phase.load(std::memory_order_acquire) != 2 * k + 1) {
    }
    std::memcpy(dst.data(), shared.data(), bytes);
    phase.store(2 * k + 2, std::memory_order_release);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  writer.join();
  return static_cast<double>(rounds) * static_cast<double>(bytes) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int a = 0, b = 1, repeat = 1;
  double every_s = 0;
  std::vector<int> cpus;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (s == "--every" && i + 1 < argc) {
      every_s = std::atof(argv[++i]);
    } else if (!s.empty() && s[0] != '-') {
      cpus.push_back(std::atoi(s.c_str()));
    } else {
      std::fprintf(stderr, "usage: cpu_placement [CPU_A CPU_B] [--repeat N] [--every S]\n");
      return 2;
    }
  }
  if (cpus.size() == 2) {
    a = cpus[0];
    b = cpus[1];
  }
  // The round trip takes indexes into the affinity mask; the copies below pin to CPU numbers.
  const int cpu_a = mpcomm::cpu_of_index(a), cpu_b = mpcomm::cpu_of_index(b);
  if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) {
    std::fprintf(stderr, "cpu_placement: this process may not use CPUs %d and %d of its affinity mask\n", a, b);
    return 1;
  }
  for (int r = 0; r < repeat; ++r) {
    if (r > 0 && every_s > 0) ::usleep(static_cast<useconds_t>(every_s * 1e6));
    const double rt = mpcomm::cpu_round_trip_ns(a, b, 100000);
    std::printf("CPUs %d,%d: round trip %4.0f ns | written on %d, read on %d:", cpu_a, cpu_b, rt, cpu_b, cpu_a);
    for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{8} << 20})
      std::printf("  %5zu KiB %5.1f (streamed %5.1f) GB/s", bytes >> 10, written_then_read_gbs(cpu_a, cpu_b, bytes, false),
                  written_then_read_gbs(cpu_a, cpu_b, bytes, true));
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
