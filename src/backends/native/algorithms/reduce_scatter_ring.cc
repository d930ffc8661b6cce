// reduce_scatter, ring.
//
// The n input blocks are copied to scratch. For s = 0..n-2, rank r sends its partial of block
// (r-s-1) mod n to r+1, receives the partial of block (r-s-2) mod n from r-1 and reduces it into its
// own; after the last step block r holds all n contributions and is copied out (avg divides it).
// Bytes per rank: (n-1)·B out and in (B = one block); n-1 rounds. Scratch: (n+1)·B.
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void reduce_scatter_ring(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  const size_t b = op.bytes();
  char* acc = c.scratch((static_cast<size_t>(n) + 1) * b);
  char* tmp = acc + static_cast<size_t>(n) * b;
  std::memcpy(acc, op.send, static_cast<size_t>(n) * b);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
    Handle rh = c.e.recv(left, tmp, b);
    Handle sh = c.e.send(right, acc + static_cast<size_t>(sb) * b, b);
    c.e.wait_all({rh, sh});
    reduce_inplace(acc + static_cast<size_t>(rb) * b, tmp, op.count, op.dtype, op.redop);
  }
  std::memcpy(op.recv, acc + static_cast<size_t>(r) * b, b);
}

}  // namespace mpcomm::native
