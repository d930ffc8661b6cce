// allreduce, direct — for large buffers on one host where every rank has a CPU of its own: rank r owns
// chunk r of n, reads that chunk straight out of every other rank's input, reduces, and writes the
// result straight into every other rank's output.
// Needs: single copy (HostLocal::read/write: every rank on this host, each reaching the others' memory).
//
//   1. every rank sends every other its input and output addresses (one round of small frames);
//   2. chunk r, in pieces that stay in the cache: read the piece of every other rank's input into a
//      bounce buffer, reduce the n pieces (ours first, then r+1, r+2, ...) into our output, divide for avg, then write
//      the result piece into every other rank's output while it is still in our cache;
//   3. every rank tells every other that it is done (one round of small frames): no rank returns while
//      another still reads its input or writes its output.
//
// Only rank r touches chunk r of anyone's buffers, and each piece is read everywhere before it is
// written anywhere, so in place (input = output) is safe. Every rank gets the same bits: one rank
// reduces each chunk.
// Bytes per rank: (n-1)·B/n read from the others and (n-1)·B/n written to them, B/n of our own input
// read and our own chunk written: the ring's bytes, but the result is written out of the cache it was
// reduced in, where the ring's all-gather reads it back from memory; 3 rounds, none waiting on another
// rank's copy. At 2 ranks that is 1/5 fewer bytes through memory than the ring (no read-back of the
// other rank's result). Scratch: (n-1) pieces.
#include <cstdint>
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allreduce_direct(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  char* out = static_cast<char*>(op.recv);
  const char* in = static_cast<const char*>(op.send);
  HostLocal& host = c.host();

  // 1. Addresses. (A rank whose chunk is empty, with fewer elements than ranks, only takes part.)
  const std::vector<int> others = others_of(c);
  const std::vector<DirectDesc> peer = direct_exchange(c, others, {reinterpret_cast<uint64_t>(in), reinterpret_cast<uint64_t>(out)});

  // 2. Our chunk, piece by piece.
  const size_t es = c.elem(), first = chunk_offset(op.count, n, r) * es, last = chunk_offset(op.count, n, r + 1) * es;
  const size_t piece = direct_piece_bytes(n, es);
  char* bounce = c.scratch(piece * static_cast<size_t>(n - 1));
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t at = first; at < last; at += piece) {
    const size_t len = std::min(piece, last - at);
    srcs[0] = in + at;  // first: the output may alias it (in place)
    for (int k = 1; k < n; ++k) {
      const int q = others[static_cast<size_t>(k - 1)];
      char* into = bounce + static_cast<size_t>(k - 1) * piece;
      host.read(q, into, peer[static_cast<size_t>(q)].in + at, len);
      srcs[static_cast<size_t>(k)] = into;
    }
    c.reduce_piece(out + at, srcs.data(), n, len / es);
    for (int q : others) host.write(q, peer[static_cast<size_t>(q)].out + at, out + at, len);
  }

  // 3. Done: nobody returns while its buffers are still in use.
  direct_done(c, others);
}

}  // namespace mpcomm::native
