// broadcast, flat — for large buffers on one host, where every receiver can copy straight out of the
// root's buffer (single copy, process_vm_readv): the root offers its buffer to all n-1 ranks at once,
// and they read it in parallel. No rank waits for another's copy to finish, and there is no extra copy
// through a ring: n-1 copies of B in one round, the least work a broadcast can do. (Without single
// copy the root writes B into n-1 rings one after the other: the hierarchical broadcast uses it within
// hosts only from the single-copy size; the built-in table does not choose it on its own.)
// Bytes: B into every non-root rank, all read from the root's buffer. Rounds: 1.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_flat_over(AlgoCtx& c, const std::vector<int>& group, int root, void* buf, size_t bytes) {
  const int n = static_cast<int>(group.size());
  if (n <= 1) return;
  const int root_rank = group[static_cast<size_t>(root)];
  if (c.rank != root_rank) {
    c.e.wait(c.e.recv(root_rank, buf, bytes));
    return;
  }
  std::vector<Handle> hs;
  hs.reserve(static_cast<size_t>(n - 1));
  // From the root's right neighbour on, so that successive roots do not all serve rank 0 first.
  for (int k = 1; k < n; ++k) hs.push_back(c.e.send(group[static_cast<size_t>(mod(root + k, n))], buf, bytes));
  c.e.wait_all(hs);
}

void broadcast_flat(AlgoCtx& c) {
  broadcast_flat_over(c, all_ranks(c), c.op.root, c.op.recv, c.op.bytes());
}

}  // namespace mpcomm::native
