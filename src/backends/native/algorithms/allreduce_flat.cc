// allreduce, flat exchange — for small messages, where latency (one round) beats bandwidth.
//
// Steps (n ranks, B bytes per rank):
//   1. every rank sends its B bytes to each of the n-1 others and receives theirs into scratch;
//   2. every rank reduces the n buffers locally, in rank order 0..n-1, so all ranks get the same bits;
//   3. avg: divide by n.
// At 2 ranks the other's bytes are reduced as they arrive into the result, in rank order (over shared
// memory straight from the ring), unless in place while our send is not done yet (no room in the
// ring, or a single-copy send, done only on the other's ack): then as above. 2 ranks, 4 KiB: see
// docs/performance.md.
// Bytes per rank: (n-1)·B out, (n-1)·B in; one round of latency. Scratch: (n-1)·B (2 ranks out of
// place or with the send done: none).
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allreduce_flat(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  if (c.size == 2) {
    const int q = 1 - c.rank;
    Handle sh = c.e.send(q, op.send, bytes);
    if (op.send != op.recv || sh->done) {  // our bytes are out of op.send (or it is not the result)
      c.e.wait_all({c.e.recv_reduce(q, op.recv, op.send, bytes, op.dtype, op.redop, nullptr, c.rank < q), sh});
    } else {
      char* other = c.scratch(bytes);
      c.e.wait_all({c.e.recv(q, other, bytes), sh});
      const void* srcs[2] = {c.rank < q ? op.send : other, c.rank < q ? other : op.send};
      reduce_into(op.recv, srcs, 2, op.count, op.dtype, op.redop);
    }
  } else {
    char* scratch = c.scratch(bytes * static_cast<size_t>(c.size - 1));
    std::vector<Handle> hs;
    hs.reserve(2 * static_cast<size_t>(c.size - 1));
    std::vector<const void*> srcs(static_cast<size_t>(c.size));
    for (int r = 0, slot = 0; r < c.size; ++r) {
      if (r == c.rank) {
        srcs[r] = op.send;
        continue;
      }
      char* dst = scratch + static_cast<size_t>(slot++) * bytes;
      srcs[r] = dst;
      hs.push_back(c.e.recv(r, dst, bytes));
    }
    for (int k = 1; k < c.size; ++k) hs.push_back(c.e.send(mod(c.rank + k, c.size), op.send, bytes));
    c.e.wait_all(hs);  // sends done: op.send may now be overwritten (in place)
    reduce_into(op.recv, srcs.data(), c.size, op.count, op.dtype, op.redop);
  }
}

}  // namespace mpcomm::native
