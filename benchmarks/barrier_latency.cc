// Barrier latency through mpcomm's public API (run under `mpcomm launch`): W barriers, then N timed
// back to back; rank 0 prints one JSON row with the slowest rank's mean per barrier.
//
//   mpcomm launch -n 8 [--backend B] -- build/benchmarks/barrier_latency [-n 5000] [-w 500]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mpcomm/mpcomm.h"

int main(int argc, char** argv) {
  int iters = 5000, warmup = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "-n") == 0) iters = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "-w") == 0) warmup = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: barrier_latency [-n ITERS] [-w WARMUP]\n");
      return 2;
    }
  }
  if (iters < 1 || warmup < 0) {
    std::fprintf(stderr, "barrier_latency: -n must be at least 1 and -w at least 0\n");
    return 2;
  }
  auto comm = mpcomm::init_from_env();
  for (int i = 0; i < warmup; ++i) comm->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm->barrier();
  double mean = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters, slowest = 0;
  comm->allreduce(&mean, &slowest, 1, mpcomm::DataType::float64, mpcomm::ReduceOp::max);
  if (comm->rank() == 0)
    std::printf("{\"program\":\"barrier_latency\",\"backend\":\"%.*s\",\"ranks\":%d,\"iters\":%d,\"mean_us\":%.3f}\n",
                static_cast<int>(comm->backend().size()), comm->backend().data(), comm->size(), iters, slowest);
  return 0;
}
