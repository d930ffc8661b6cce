// broadcast, direct — for large buffers on one host where every rank has a CPU of its own: the root
// does not sit idle while the others copy from it. Each
// receiver reads the first (n-1)/n of the buffer straight out of the root's, and the root meanwhile
// writes the last 1/n straight into every receiver's buffer, so that every CPU copies (n-1)/n·B instead
// of the receivers copying B each while the root waits (at 2 ranks: both halves at once).
// Needs: single copy (HostLocal::read/write: every rank on this host, each reaching the others' memory).
//
//   1. the root and each receiver swap buffer addresses (one round of small frames);
//   2. the copies: receivers read their head, the root writes every receiver's tail;
//   3. the root and each receiver tell each other they are done (one round of small frames): the
//      receiver's buffer is complete, and the root's may be reused.
// Bytes: B into every non-root rank, (n-1)/n·B of it copied by the receiver and B/n by the root.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_direct(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, root = op.root;
  const size_t bytes = op.bytes();
  char* buf = static_cast<char*>(op.recv);
  // The root's share of every receiver, in whole cache lines.
  const size_t tail = bytes / static_cast<size_t>(n) / 64 * 64, head = bytes - tail;
  HostLocal& host = c.host();
  std::vector<int> peers;
  if (c.rank == root) {
    for (int k = 1; k < n; ++k) peers.push_back(mod(root + k, n));
  } else {
    peers.push_back(root);
  }
  const std::vector<DirectDesc> got = direct_exchange(c, peers, {0, reinterpret_cast<uint64_t>(buf)});
  if (c.rank != root) {
    host.read(root, buf, got[static_cast<size_t>(root)].out, head);
  } else if (tail > 0) {
    for (int q : peers) host.write(q, got[static_cast<size_t>(q)].out + head, buf + head, tail);
  }
  direct_done(c, peers);
}

}  // namespace mpcomm::native
