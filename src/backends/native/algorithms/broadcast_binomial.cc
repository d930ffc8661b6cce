// broadcast, binomial tree.
//
// With v = (rank - root) mod n: a rank receives the whole buffer once from v - lowbit(v), then sends
// it to v + 2^k for every 2^k below lowbit(v) (the root: every 2^k < n), largest first.
// Bytes: B into every non-root rank; the root sends ceil(log2 n)·B. Rounds: ceil(log2 n).
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_binomial_over(AlgoCtx& c, const std::vector<int>& group, int root, void* buf, size_t bytes) {
  const int n = static_cast<int>(group.size());
  if (n <= 1) return;
  auto rank_of = [&](int v) { return group[static_cast<size_t>(mod(v + root, n))]; };
  const int v = mod(index_in(group, c.rank) - root, n);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      c.e.wait(c.e.recv(rank_of(v - mask), buf, bytes));
      break;
    }
    mask <<= 1;
  }
  std::vector<Handle> hs;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) hs.push_back(c.e.send(rank_of(v + mask), buf, bytes));
  c.e.wait_all(hs);
}

void broadcast_binomial(AlgoCtx& c) {
  broadcast_binomial_over(c, all_ranks(c), c.op.root, c.op.recv, c.op.bytes());
}

}  // namespace mpcomm::native
