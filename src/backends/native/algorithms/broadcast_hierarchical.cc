// broadcast, hierarchical — for ranks on several hosts: the slow links (TCP between hosts) carry the
// buffer once per host instead of once per rank.
//
// The root leads its own host; every other host is led by its lowest rank.
//   1. among the leaders: binomial broadcast from the root (TCP);
//   2. inside each host: from the leader (shared memory), binomial, or flat (broadcast.hierarchical.local:
//      large buffers, which the host's ranks read straight out of the leader's by single copy).
// Bytes: B into every non-root rank; between hosts h-1 copies of B over ceil(log2 h) rounds (h hosts);
// inside a host of l ranks, l-1 copies over ceil(log2 l) rounds.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_hierarchical(AlgoCtx& c) {
  const auto& op = c.op;
  const HostGroups g = host_groups(c, op.root);
  if (c.rank == g.leader()) broadcast_binomial_over(c, g.leaders, index_in(g.leaders, op.root), op.recv, op.bytes());
  if (c.pick(Choice::broadcast_hierarchical_local) == 1)
    broadcast_flat_over(c, g.local, 0, op.recv, op.bytes());
  else
    broadcast_binomial_over(c, g.local, 0, op.recv, op.bytes());
}

}  // namespace mpcomm::native
