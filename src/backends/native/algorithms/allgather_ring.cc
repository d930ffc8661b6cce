// allgather, ring.
//
// Rank r places its block at r, then for s = 0..n-2 sends block (r-s) mod n to r+1 and receives
// block (r-s-1) mod n from r-1 straight into the result.
// Bytes per rank: (n-1)·B out and in (B = one block); n-1 rounds; no scratch.
//
// allgather, ring_shm: the same ring with every block between ranks of one host through the
// shared-memory rings, never by single copy: from one CPU's cache to the other's, which wins while the
// CPUs are near each other (2 ranks, blocks of 256 KiB-2 MiB) and loses 4-6 times when they are far
// apart (docs/performance.md, "Why runs differ").
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

char* allgather_place_own_block(const AlgoCtx& c) {
  const size_t b = c.op.bytes();
  char* out = static_cast<char*>(c.op.recv);
  char* mine = out + static_cast<size_t>(c.rank) * b;
  if (b > 0 && c.op.send != mine) std::memcpy(mine, c.op.send, b);
  return out;
}

namespace {

void allgather_ring_routed(AlgoCtx& c, Route route) {
  const int n = c.size, r = c.rank;
  const size_t b = c.op.bytes();
  char* out = allgather_place_own_block(c);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    int sb = mod(r - s, n), rb = mod(r - s - 1, n);
    Handle rh = c.e.recv(left, out + static_cast<size_t>(rb) * b, b);
    Handle sh = c.e.send(right, out + static_cast<size_t>(sb) * b, b, route);
    c.e.wait_all({rh, sh});
  }
}

}  // namespace

void allgather_ring(AlgoCtx& c) { allgather_ring_routed(c, Route::usual); }
void allgather_ring_shm(AlgoCtx& c) { allgather_ring_routed(c, Route::ring); }

}  // namespace mpcomm::native
