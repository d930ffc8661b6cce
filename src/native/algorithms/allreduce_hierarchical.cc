// allreduce, hierarchical — for ranks on several hosts: the slow links (TCP between hosts) carry one
// message per host instead of one per rank.
//
// Each host's leader is its lowest rank.
//   1. inside each host: every other rank sends its buffer to the leader, which reduces them into its
//      own as they arrive, in rank order (shared memory; straight from the ring);
//   2. among the leaders: recursive doubling over the hosts (TCP), lower host's partial first;
//   3. inside each host: the leader sends the result to every other rank.
// avg divides once, on the leaders, so every rank gets the leaders' bits.
// Bytes: per non-leader B out and B in (shared memory); per leader (l-1)·B in and out inside the host
// and log2(h)·B each way between hosts (h hosts, l ranks on the host). Rounds: 2 + log2(h).
#include <cstring>

#include "core/reduce.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

void allreduce_hierarchical(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  char* buf = static_cast<char*>(op.recv);
  if (bytes > 0 && op.send != op.recv) std::memcpy(buf, op.send, bytes);
  if (c.size == 1 || bytes == 0) {
    if (op.redop == ReduceOp::avg) divide_by(buf, op.count, op.dtype, c.size);
    return;
  }
  const HostGroups g = host_groups(c);
  const std::vector<int>& local = g.local;
  const int leader = g.leader();
  if (c.rank != leader) {
    c.e.wait(c.e.send(leader, buf, bytes));
    c.e.wait(c.e.recv(leader, buf, bytes));
    return;
  }
  for (size_t i = 1; i < local.size(); ++i) c.e.wait(c.e.recv_reduce(local[i], buf, buf, bytes, op.dtype, op.redop));
  recursive_doubling_over(c, g.leaders, buf);
  if (op.redop == ReduceOp::avg) divide_by(buf, op.count, op.dtype, c.size);
  std::vector<Handle> hs;
  for (size_t i = 1; i < local.size(); ++i) hs.push_back(c.e.send(local[i], buf, bytes));
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
