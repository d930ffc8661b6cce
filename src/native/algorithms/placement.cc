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

bool cpus_far_apart(AlgoCtx& c, int peer) {
  static const double limit = static_cast<double>(param_int("MPCOMM_FAR_NS"));
  const double rt = c.e.round_trip_ns(peer, 16);  // the lower rank's measure; the other answers (0)
  uint64_t mine = c.rank < peer && limit > 0 && rt > limit ? 1 : 0, theirs = 0;
  if (c.rank < peer) MPCOMM_LOG(trace, "placement: a cache line's round trip to rank %d took %.0f ns", peer, rt);
  c.e.wait_all({c.e.recv(peer, &theirs, sizeof theirs), c.e.send(peer, &mine, sizeof mine)});
  return (c.rank < peer ? mine : theirs) != 0;
}

}  // namespace mpcomm::native
