// reduce, hierarchical — for ranks on several hosts: the slow links (TCP between hosts) carry one
// partial result per host instead of one per rank.
//
// The root leads its own host; every other host is led by its lowest rank.
//   1. inside each host: binomial reduce to the leader (shared memory, reduced straight from the ring);
//   2. among the leaders: binomial reduce to the root (TCP);
// avg divides once, at the root.
// Bytes: each non-root sends B once; between hosts h-1 partials of B (h hosts). Scratch: B (non-root).
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void reduce_hierarchical(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  char* acc = c.rank == op.root ? static_cast<char*>(op.recv) : c.scratch(bytes);
  if (acc != op.send) std::memcpy(acc, op.send, bytes);
  const HostGroups g = host_groups(c, op.root);
  reduce_binomial_over(c, g.local, 0, acc);
  if (c.rank == g.leader()) reduce_binomial_over(c, g.leaders, index_in(g.leaders, op.root), acc);
}

}  // namespace mpcomm::native
