// The handshake of the direct algorithms (allreduce_direct, broadcast_direct, allgather_direct,
// reduce_scatter_direct), which read and write other ranks' buffers themselves (HostLocal::read/write,
// which they need): before, every pair of ranks that will touch each other's memory swaps addresses;
// after, each tells the other that it is done with the other's buffers, so that no rank returns while
// another still reads or writes its memory. Both are one round of small collective frames.
#include <algorithm>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

std::vector<DirectDesc> direct_exchange(AlgoCtx& c, const std::vector<int>& peers, const DirectDesc& mine) {
  std::vector<DirectDesc> got(static_cast<size_t>(c.size));
  std::vector<Handle> hs;
  hs.reserve(2 * peers.size());
  for (int q : peers) {
    hs.push_back(c.e.recv(q, &got[static_cast<size_t>(q)], sizeof(DirectDesc)));
    hs.push_back(c.e.send(q, &mine, sizeof(DirectDesc)));
  }
  c.e.wait_all(hs);
  got[static_cast<size_t>(c.rank)] = mine;
  return got;
}

std::vector<int> others_of(const AlgoCtx& c) {
  std::vector<int> others;
  for (int k = 1; k < c.size; ++k) others.push_back(mod(c.rank + k, c.size));
  return others;
}

size_t direct_piece_bytes(int n, size_t es) {
  const size_t per = std::max<size_t>(size_t{64} << 10, (size_t{512} << 10) / static_cast<size_t>(n - 1));
  return std::max(es, per / es * es);
}

void direct_done(AlgoCtx& c, const std::vector<int>& peers) {
  std::vector<uint64_t> tokens(peers.size());
  const uint64_t token = 1;
  std::vector<Handle> hs;
  hs.reserve(2 * peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    hs.push_back(c.e.recv(peers[i], &tokens[i], sizeof token));
    hs.push_back(c.e.send(peers[i], &token, sizeof token));
  }
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
