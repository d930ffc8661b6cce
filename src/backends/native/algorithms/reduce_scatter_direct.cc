// reduce_scatter, direct — for large blocks on one host: rank r reads block r of every other rank's
// input straight out of its memory, piece by piece, and reduces the pieces into its output.
// Needs: single copy (HostLocal::read: every rank on this host, each reaching the others' memory).
//
//   1. every rank sends every other its input address (one round of small frames);
//   2. block r, in pieces that stay in the cache: read the piece of every other rank's input into a
//      bounce buffer, reduce the n pieces (ours first, then r+1, r+2, ...) into our output, divide for
//      avg;
//   3. every rank tells every other that it is done (one round of small frames): no rank returns while
//      another still reads its input.
//
// Rank r writes only its output and reads only block r of the others' inputs; in place, its output is
// its own block r, which nobody else reads, so in place is safe.
// Bytes per rank: (n-1)·B read from the others, B of our own input read, B written (B = one block).
// The ring copies all n blocks to scratch first and moves partials n-1 times. Scratch: (n-1) pieces.
#include <algorithm>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void reduce_scatter_direct(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  const size_t b = op.bytes(), es = c.elem();
  const char* in = static_cast<const char*>(op.send);
  char* out = static_cast<char*>(op.recv);
  HostLocal& host = c.host();

  // 1. Addresses.
  const std::vector<int> others = others_of(c);
  const std::vector<DirectDesc> peer = direct_exchange(c, others, {reinterpret_cast<uint64_t>(in), reinterpret_cast<uint64_t>(out)});

  // 2. Block r, piece by piece (n pieces in flight stay in a core's L2).
  const size_t piece = direct_piece_bytes(n, es);
  char* bounce = c.scratch(piece * static_cast<size_t>(n - 1));
  const size_t first = static_cast<size_t>(r) * b;
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t at = 0; at < b; at += piece) {
    const size_t len = std::min(piece, b - at);
    srcs[0] = in + first + at;  // first: the output may alias it (in place)
    for (int k = 1; k < n; ++k) {
      const int q = others[static_cast<size_t>(k - 1)];
      char* into = bounce + static_cast<size_t>(k - 1) * piece;
      host.read(q, into, peer[static_cast<size_t>(q)].in + first + at, len);
      srcs[static_cast<size_t>(k)] = into;
    }
    c.reduce_piece(out + at, srcs.data(), n, len / es);
  }

  // 3. Done: nobody returns while its input is still being read.
  direct_done(c, others);
}

}  // namespace mpcomm::native
