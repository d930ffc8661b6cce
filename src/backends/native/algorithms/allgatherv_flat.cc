// allgatherv, flat: allgather_flat with a size per block.
//
// Rank r places its block at recv_displs[r] (unless in place), then sends it to every other rank and
// receives block q from rank q into its place, for every q != r, in the order r+1, r+2, ... so that the
// n ranks start on n different sources. Empty blocks travel as empty frames, so a receiver whose
// recv_counts[q] differs from what q sends fails with a Mismatch naming q.
// Bytes per rank: its block (n-1) times out, the total less its block in; one round; no scratch.
// The built-in table does not choose it (no measurements yet); MPCOMM_ALGO=allgatherv=flat or a
// measured table can.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allgatherv_flat(AlgoCtx& c) {
  const detail::VCounts& v = *c.op.v;
  const int n = c.size, r = c.rank;
  const size_t es = c.elem();
  allgatherv_place_own_block(c);
  if (n == 1) return;
  const char* mine = allgatherv_block(c, r);
  std::vector<Handle> hs;
  hs.reserve(2 * static_cast<size_t>(n - 1));
  for (int k = 1; k < n; ++k) {
    const int q = mod(r + k, n);
    hs.push_back(c.e.recv(q, allgatherv_block(c, q), v.recv_counts[static_cast<size_t>(q)] * es));
  }
  // Offered from our own block of the result: readers copy it from there while we fill the others.
  for (int k = 1; k < n; ++k) hs.push_back(c.e.send(mod(r - k, n), mine, c.op.count * es));
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
