// broadcast, binomial tree.
//
// With v = (rank - root) mod n: a rank receives the whole buffer once from v - lowbit(v), then sends
// it to v + 2^k for every 2^k below lowbit(v) (the root: every 2^k < n), largest first.
// Bytes: B into every non-root rank; the root sends ceil(log2 n)·B. Rounds: ceil(log2 n).
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_binomial(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size;
  if (n == 1) return;
  const size_t bytes = op.bytes();
  const int v = mod(c.rank - op.root, n);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      c.e.wait(c.e.recv(mod(v - mask + op.root, n), op.recv, bytes));
      break;
    }
    mask <<= 1;
  }
  std::vector<Handle> hs;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) hs.push_back(c.e.send(mod(v + mask + op.root, n), op.recv, bytes));
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
