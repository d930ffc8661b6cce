// allgather, direct — for large blocks on one host: every rank writes its own block straight into
// every other rank's result, piece by piece, each piece read from memory once and written n times
// while it is in cache.
// Needs: single copy (HostLocal::write: every rank on this host, each reaching the others' memory).
//
//   1. every rank sends every other its output address (one round of small frames);
//   2. our block, in pieces: copy the piece into our own slot (out of place; with streaming stores
//      where the table's allgather.direct.stores says: large blocks), then write it into slot r of
//      every other rank's result (ranks r+1, r+2, ...: the n ranks start on n different targets);
//   3. every rank tells every other that it is done (one round of small frames): no rank returns while
//      another still writes its result.
//
// Only rank r writes slot r anywhere, and nobody reads another rank's memory, so in place is safe.
// Bytes per rank: B read (our block, once), n·B written (B = one block). The flat and ring allgathers
// read each block from memory at every receiver: n·B read and n·B written per rank.
// Scratch: none.
#include <algorithm>
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allgather_direct(AlgoCtx& c) {
  const auto& op = c.op;
  const int r = c.rank;
  const size_t b = op.bytes();
  char* out = static_cast<char*>(op.recv);
  char* slot = out + static_cast<size_t>(r) * b;
  HostLocal& host = c.host();

  // 1. Addresses.
  const std::vector<int> others = others_of(c);
  const std::vector<DirectDesc> peer = direct_exchange(c, others, {reinterpret_cast<uint64_t>(op.send), reinterpret_cast<uint64_t>(out)});

  // 2. Our block, piece by piece: once from memory, n times out of the cache.
  const char* src = static_cast<const char*>(op.send);
  const size_t piece = size_t{256} << 10;
  // Streaming stores into our own slot skip reading its lines first, which pays once the block is too
  // large to stay in the cache (docs/performance.md, "Why the defaults are what they are").
  const bool stream = src != slot && c.pick(Choice::allgather_direct_stores) == kStreamingStores;
  for (size_t at = 0; at < b; at += piece) {
    const size_t len = std::min(piece, b - at);
    const char* from = slot + at;  // what we write into the others' results: a piece in our cache
    if (stream) {
      copy_streamed(slot + at, src + at, len);
      from = src + at;  // just read: in the cache; our slot's copy went around it
    } else if (src != slot) {
      std::memcpy(slot + at, src + at, len);
    }
    for (int q : others) host.write(q, peer[static_cast<size_t>(q)].out + static_cast<size_t>(r) * b + at, from, len);
  }

  // 3. Done: nobody returns while its result is still being written.
  direct_done(c, others);
}

}  // namespace mpcomm::native
