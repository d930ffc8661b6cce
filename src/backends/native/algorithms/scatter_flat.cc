// scatter, flat: the root sends block r straight to each rank r.
// Bytes: (n-1)·B out of the root; B into each non-root; one round.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void scatter_flat(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t b = op.bytes();
  if (c.rank != op.root) {
    c.e.wait(c.e.recv(op.root, op.recv, b));
    return;
  }
  const char* in = static_cast<const char*>(op.send);
  std::vector<Handle> hs;
  for (int r = 0; r < c.size; ++r)
    if (r != c.rank) hs.push_back(c.e.send(r, in + static_cast<size_t>(r) * b, b));
  if (b > 0 && op.recv != in + static_cast<size_t>(c.rank) * b) std::memcpy(op.recv, in + static_cast<size_t>(c.rank) * b, b);
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
