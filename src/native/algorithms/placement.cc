// Whether two ranks' CPUs are far apart right now. On a virtual machine the hypervisor places the
// virtual CPUs on host cores and moves them: hyperthreads of one core, cores that share a cache, or
// cores farther apart, each for seconds to minutes. A cache line's round trip between the two CPUs
// then takes about 50, 110, or 270-520 ns, and a buffer written on one CPU is read on the other at
// about 9 GB/s when near and 1.6 GB/s when far (build/benchmarks/cpu_placement). Algorithms that hand
// data from cache to cache through shared memory win when near and lose badly when far, where the
// kernel's single copy (process_vm_readv/writev, through memory) does not care: they ask here, at
// each call, and both ranks of the pair take the same branch.
#include "core/log.h"
#include "core/params.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

bool cpus_far_apart(AlgoCtx& c) {
  static const double limit = static_cast<double>(param_int("MPCOMM_FAR_NS"));
  // Ranks 0 and 1 measure (rank 0's measure; the launcher puts them on different CPUs), rank 0 tells
  // the others.
  uint64_t verdict = 0;
  if (c.rank <= 1) {
    const double rt = c.e.round_trip_ns(1 - c.rank, 16);
    if (c.rank == 0) {
      verdict = limit > 0 && rt > limit ? 1 : 0;
      MPCOMM_LOG(trace, "placement: a cache line's round trip between ranks 0 and 1 took %.0f ns", rt);
    }
  }
  if (c.rank == 0) {
    std::vector<Handle> hs;
    for (int q = 1; q < c.size; ++q) hs.push_back(c.e.send(q, &verdict, sizeof verdict));
    c.e.wait_all(hs);
  } else {
    c.e.wait(c.e.recv(0, &verdict, sizeof verdict));
  }
  return verdict != 0;
}

}  // namespace mpcomm::native
