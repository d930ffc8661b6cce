// gather, flat: every rank sends its block straight to the root, which receives all n-1 at once.
// Bytes: B out of each non-root; (n-1)·B into the root; one round.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void gather_flat(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t b = op.bytes();
  if (c.rank != op.root) {
    c.e.wait(c.e.send(op.root, op.send, b));
    return;
  }
  char* out = static_cast<char*>(op.recv);
  if (b > 0 && op.send != out + static_cast<size_t>(c.rank) * b) std::memcpy(out + static_cast<size_t>(c.rank) * b, op.send, b);
  std::vector<Handle> hs;
  for (int r = 0; r < c.size; ++r)
    if (r != c.rank) hs.push_back(c.e.recv(r, out + static_cast<size_t>(r) * b, b));
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
