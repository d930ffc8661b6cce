// allreduce, flat exchange — for small messages, where latency (one round) beats bandwidth.
//
// Steps (n ranks, B bytes per rank):
//   1. every rank sends its B bytes to each of the n-1 others and receives theirs into scratch;
//   2. every rank reduces the n buffers locally, in rank order 0..n-1, so all ranks get the same bits;
//   3. avg: divide by n.
// Bytes per rank: (n-1)·B out, (n-1)·B in; one round of latency. Scratch: (n-1)·B.
#include <cstring>

#include "core/reduce.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

void allreduce_flat(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  if (c.size == 1 || bytes == 0) {
    if (bytes > 0 && op.send != op.recv) std::memcpy(op.recv, op.send, bytes);
    if (op.redop == ReduceOp::avg) divide_by(op.recv, op.count, op.dtype, c.size);
    return;
  }
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
  if (op.redop == ReduceOp::avg) divide_by(op.recv, op.count, op.dtype, c.size);
}

}  // namespace mpcomm::native
