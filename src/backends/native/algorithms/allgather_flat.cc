// allgather, flat — for large blocks on one host, with single copy (process_vm_readv): every rank
// offers its block to all others at once and reads theirs straight out of their buffers, in parallel.
// The ring needs n-1 rounds, each waiting for the block the left neighbour got in the round before;
// here nothing waits for anything but the one copy it needs.
//
// Rank r places its block at r (out of place), then sends it to every other rank and receives block q
// from rank q into the result, for every q != r, in the order r+1, r+2, ... so that the n ranks start
// on n different sources.
// Bytes per rank: (n-1)·B out and in (B = one block), each copied once; one round; no scratch.
// The built-in table does not choose it (on one host the direct allgather moves each block through
// memory once); MPCOMM_ALGO=allgather=flat or a measured table can. Its frames go as the table's
// collective.path rows say (by single copy from 256 KiB); below, through the rings, where every rank
// writes its block n-1 times.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allgather_flat(AlgoCtx& c) {
  const int n = c.size, r = c.rank;
  const size_t b = c.op.bytes();
  char* out = allgather_place_own_block(c);
  char* mine = out + static_cast<size_t>(r) * b;
  std::vector<Handle> hs;
  hs.reserve(2 * static_cast<size_t>(n - 1));
  for (int k = 1; k < n; ++k) {
    const int q = mod(r + k, n);
    hs.push_back(c.e.recv(q, out + static_cast<size_t>(q) * b, b));
  }
  // Offered from our own slot of the result: readers copy it from there while we fill the others.
  for (int k = 1; k < n; ++k) hs.push_back(c.e.send(mod(r - k, n), mine, b));
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
