// allgatherv, ring: allgather_ring with a size per block.
//
// Rank r places its block at recv_displs[r] (unless it is there: in place), then for s = 0..n-2 sends
// block (r-s) mod n to r+1 and receives block (r-s-1) mod n from r-1 straight into its place. Empty
// blocks travel as empty frames: every frame carries its size, so ranks whose recv_counts differ fail
// with a Mismatch at the first receiver that expects another size (or, when their totals differ, at the
// first frame: the fingerprint holds the total).
// Bytes per rank: the total less its own block out and in, block by block; n-1 rounds; no scratch.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

char* allgatherv_block(const AlgoCtx& c, int q) {
  const detail::VCounts& v = *c.op.v;
  const auto i = static_cast<size_t>(q);
  char* out = static_cast<char*>(c.op.recv);
  return v.recv_counts[i] > 0 ? out + v.recv_displs[i] * c.elem() : out;
}

void allgatherv_place_own_block(const AlgoCtx& c) {
  char* mine = allgatherv_block(c, c.rank);
  const size_t b = c.op.count * c.elem();
  if (b > 0 && c.op.send != mine) std::memcpy(mine, c.op.send, b);
}

void allgatherv_ring(AlgoCtx& c) {
  const detail::VCounts& v = *c.op.v;
  const int n = c.size, r = c.rank;
  const size_t es = c.elem();
  allgatherv_place_own_block(c);
  auto block = [&](int q) { return allgatherv_block(c, q); };
  auto bytes = [&](int q) { return v.recv_counts[static_cast<size_t>(q)] * es; };
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
    Handle rh = c.e.recv(left, block(rb), bytes(rb));
    Handle sh = c.e.send(right, block(sb), bytes(sb));
    c.e.wait_all({rh, sh});
  }
}

}  // namespace mpcomm::native
