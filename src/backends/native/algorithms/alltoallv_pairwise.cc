// alltoallv, pairwise exchange: alltoall_pairwise with a size per pair.
//
// Own block copied locally (send_counts[r] == recv_counts[r], held by the front door); then for
// k = 1..n-1 rank r sends its block for rank r+k and receives rank (r-k)'s block straight into its place
// in recv. Every pair exchanges a frame, empty blocks included: a frame carries its size, so a sender and
// a receiver that disagree on a count fail with a Mismatch at the receiver (naming the sender) instead of
// waiting for a frame that never comes or writing bytes the receiver did not expect.
// Send and receive blocks never overlap (no in-place form), so no scratch.
// Bytes per rank: the sum of its send counts out, of its receive counts in; n-1 rounds.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void alltoallv_pairwise(AlgoCtx& c) {
  const auto& op = c.op;
  const detail::VCounts& v = *op.v;
  const int n = c.size, r = c.rank;
  const size_t es = c.elem();
  const char* in = static_cast<const char*>(op.send);
  char* out = static_cast<char*>(op.recv);
  auto u = [](int i) { return static_cast<size_t>(i); };
  // An empty block is the buffer's start: its displacement may point anywhere (and the buffer be null).
  auto src = [&](int q) { return v.send_counts[u(q)] > 0 ? in + v.send_displs[u(q)] * es : in; };
  auto dst = [&](int q) { return v.recv_counts[u(q)] > 0 ? out + v.recv_displs[u(q)] * es : out; };
  if (const size_t own = v.send_counts[u(r)] * es; own > 0) std::memcpy(dst(r), src(r), own);
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    Handle rh = c.e.recv(from, dst(from), v.recv_counts[u(from)] * es);
    Handle sh = c.e.send(to, src(to), v.send_counts[u(to)] * es);
    c.e.wait_all({rh, sh});
  }
}

}  // namespace mpcomm::native
