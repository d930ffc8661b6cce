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
//
// allreduce, hierarchical sliced — for large buffers when every host has the same number l > 1 of
// ranks: all of them carry the traffic between hosts, each a 1/l slice, at the same time.
// Needs: every host to hold as many ranks (the slices are cut alike everywhere).
//   1. inside each host: ring reduce-scatter; local rank i then holds slice (i+1) mod l reduced over
//      its host;
//   2. the ranks with local index i on every host: recursive doubling on that slice (TCP);
//      avg divides the slice;
//   3. inside each host: ring all-gather of the slices.
// Bytes per rank: 2·(l-1)/l·B in and out inside the host; log2(h)·B/l each way between hosts.
// Rounds: 2·(l-1) + log2(h).
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allreduce_hierarchical(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  char* buf = static_cast<char*>(op.recv);
  if (op.send != op.recv) std::memcpy(buf, op.send, bytes);
  const HostGroups g = host_groups(c);
  const std::vector<int>& local = g.local;
  const int leader = g.leader();
  if (c.rank != leader) {
    c.e.wait(c.e.send(leader, buf, bytes));
    c.e.wait(c.e.recv(leader, buf, bytes));
    return;
  }
  for (size_t i = 1; i < local.size(); ++i) c.e.wait(c.e.recv_reduce(local[i], buf, buf, bytes, op.dtype, op.redop));
  recursive_doubling_over(c, g.leaders, buf, op.count);
  std::vector<Handle> hs;
  for (size_t i = 1; i < local.size(); ++i) hs.push_back(c.e.send(local[i], buf, bytes));
  c.e.wait_all(hs);
}

void allreduce_hierarchical_sliced(AlgoCtx& c) {
  const auto& op = c.op;
  char* buf = static_cast<char*>(op.recv);
  const char* in = static_cast<const char*>(op.send);
  const HostGroups g = host_groups(c);
  const int l = static_cast<int>(g.local.size());
  // One rank per host: one slice, the whole buffer (the ring below moves nothing).
  if (l == 1 && op.bytes() > 0 && in != buf) std::memcpy(buf, in, op.bytes());
  // Local rank rank-order, so that local index i means the same on every host.
  std::vector<int> local = g.local;
  std::sort(local.begin(), local.end());
  const int li = index_in(local, c.rank);
  std::vector<int> peers;  // local index li of every host, in host order
  for (int h = 0, seen = 0; h < c.topo.num_hosts(); ++h, seen = 0)
    for (int r = 0; r < c.size; ++r)
      if (c.topo.host_of_rank[static_cast<size_t>(r)] == h && seen++ == li) peers.push_back(r);
  ring_reduce_scatter_over(c, local, in, buf);
  const int owned = mod(li + 1, l);
  const size_t first = chunk_offset(op.count, l, owned), n = chunk_offset(op.count, l, owned + 1) - first;
  char* slice = buf + first * c.elem();
  recursive_doubling_over(c, peers, slice, n);
  c.divide_avg(slice, n);
  ring_allgather_over(c, local, buf);
}

}  // namespace mpcomm::native
