#include "bench_arrival.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "mpcomm/error.h"

namespace mpcomm::bench {
namespace {

using clock_type = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for every process of the machine

// Sweeps `mem` until `until`, one float of every cache line read and written: a layer's compute streaming its
// weights and activations, which leaves the collective's buffers out of the caches.
void compute_until(std::vector<float>& mem, clock_type::time_point until) {
  size_t i = 0;
  while (clock_type::now() < until) {
    const size_t stop = std::min(mem.size(), i + (size_t{1} << 14));
    for (; i < stop; i += 16) mem[i] = mem[i] * 0.999f + 1.0f;
    if (i >= mem.size()) i = 0;
  }
}

// A fraction in [0, 1) for (call, rank), the same wherever it is computed (splitmix64).
double spread(int call, int rank) {
  uint64_t z = (static_cast<uint64_t>(call) << 20) + static_cast<uint64_t>(rank) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 53);
}

// This kernel's boot id, hashed (FNV-1a); 0 when it cannot be read.
int64_t boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  if (!std::getline(f, s)) return 0;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

double seconds(clock_type::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

}  // namespace

ArrivalTimes times_after_last_arrival(const std::vector<double>& arrive, const std::vector<double>& end, int ranks,
                                      int iters) {
  ArrivalTimes t;
  for (int i = 0; i < iters; ++i) {
    double last = arrive[static_cast<size_t>(i)];
    for (int r = 1; r < ranks; ++r) last = std::max(last, arrive[static_cast<size_t>(r * iters + i)]);
    double after = 0, waited = 0;
    for (int r = 0; r < ranks; ++r) {
      after += std::max(0.0, end[static_cast<size_t>(r * iters + i)] - last);
      waited += last - arrive[static_cast<size_t>(r * iters + i)];
    }
    t.after_last.push_back(after / ranks);
    t.waited.push_back(waited / ranks);
  }
  return t;
}

ArrivalTimes time_after_compute(Communicator& control, const Config& c, const std::function<void()>& call) {
  const int n = control.size(), me = control.rank();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  const int64_t mine = boot_id();
  control.allgather(&mine, ids.data(), 1, DataType::int64);
  for (int r = 0; r < n; ++r)
    if (ids[static_cast<size_t>(r)] != mine || mine == 0)
      throw InvalidArgument("mpcomm bench --compute-us: rank " + std::to_string(r) +
                            " runs under another kernel than rank " + std::to_string(me) +
                            " (boot ids differ or cannot be read), so their arrivals cannot be "
                            "compared on one clock; measure with the ranks on one machine (emulated hosts)");
  std::vector<float> mem((size_t{16} << 20) / sizeof(float), 1.0f);  // beyond a core's L2
  const size_t iters = static_cast<size_t>(c.iters);
  std::vector<double> arrive(iters), end(iters);
  control.barrier();
  for (size_t i = 0; i < iters; ++i) {
    const double us = c.compute_us * (0.5 + spread(static_cast<int>(i), me));
    compute_until(mem, clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                               std::chrono::duration<double, std::micro>(us)));
    arrive[i] = seconds(clock_type::now());
    call();
    end[i] = seconds(clock_type::now());
  }
  std::vector<double> all_arrive(iters * static_cast<size_t>(n)), all_end(all_arrive.size());
  control.allgather(arrive.data(), all_arrive.data(), iters, DataType::float64);
  control.allgather(end.data(), all_end.data(), iters, DataType::float64);
  auto t = times_after_last_arrival(all_arrive, all_end, n, static_cast<int>(iters));
  for (auto* v : {&t.after_last, &t.waited})
    for (double& x : *v) x *= 1e6;
  return t;
}

}  // namespace mpcomm::bench
