// allgather, ring.
//
// Rank r places its block at r, then for s = 0..n-2 sends block (r-s) mod n to r+1 and receives
// block (r-s-1) mod n from r-1 straight into the result.
// Bytes per rank: (n-1)·B out and in (B = one block); n-1 rounds; no scratch.
#include <cstring>

#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

void allgather_ring(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  const size_t b = op.bytes();
  char* out = static_cast<char*>(op.recv);
  if (b > 0 && op.send != out + static_cast<size_t>(r) * b) std::memcpy(out + static_cast<size_t>(r) * b, op.send, b);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    int sb = mod(r - s, n), rb = mod(r - s - 1, n);
    Handle rh = c.e.recv(left, out + static_cast<size_t>(rb) * b, b);
    Handle sh = c.e.send(right, out + static_cast<size_t>(sb) * b, b);
    c.e.wait_all({rh, sh});
  }
}

}  // namespace mpcomm::native
