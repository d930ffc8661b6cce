// alltoall, pairwise exchange.
//
// Own block copied locally; then for k = 1..n-1 rank r sends block (r+k) mod n to rank r+k and
// receives block (r-k) mod n from rank r-k. In place, the input is first copied to scratch.
// Bytes per rank: (n-1)·B out and in (B = one block); n-1 rounds.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void alltoall_pairwise(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  const size_t b = op.bytes();
  const char* in = static_cast<const char*>(op.send);
  char* out = static_cast<char*>(op.recv);
  if (in == out && b > 0) {
    char* copy = c.scratch(static_cast<size_t>(n) * b);
    std::memcpy(copy, in, static_cast<size_t>(n) * b);
    in = copy;
  }
  if (b > 0 && in != out) std::memcpy(out + static_cast<size_t>(r) * b, in + static_cast<size_t>(r) * b, b);
  for (int k = 1; k < n; ++k) {
    int to = mod(r + k, n), from = mod(r - k, n);
    Handle rh = c.e.recv(from, out + static_cast<size_t>(from) * b, b);
    Handle sh = c.e.send(to, in + static_cast<size_t>(to) * b, b);
    c.e.wait_all({rh, sh});
  }
}

}  // namespace mpcomm::native
