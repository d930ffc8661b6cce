// reduce, binomial tree (the broadcast tree run backwards).
//
// With v = (rank - root) mod n, for 2^k = 1, 2, 4, ...: if bit k of v is set, send the partial result
// to v - 2^k and stop; otherwise receive the partial result of v + 2^k (if it exists) and reduce it
// into ours. The root ends with the reduction of all n buffers; avg divides there.
// Bytes: each non-root sends B once; a rank receives B per child (the root: ceil(log2 n)·B).
// Scratch: B for the partial result (non-root) plus B for a child's partial.
#include <cstring>

#include "core/reduce.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

void reduce_binomial(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size;
  const size_t bytes = op.bytes();
  const bool root = c.rank == op.root;
  char* scratch = c.scratch(2 * bytes);
  char* acc = root ? static_cast<char*>(op.recv) : scratch;
  char* tmp = scratch + bytes;
  if (acc != op.send && bytes > 0) std::memcpy(acc, op.send, bytes);
  const int v = mod(c.rank - op.root, n);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      c.e.wait(c.e.send(mod(v - mask + op.root, n), acc, bytes));
      return;
    }
    if (v + mask < n) {
      c.e.wait(c.e.recv(mod(v + mask + op.root, n), tmp, bytes));
      reduce_inplace(acc, tmp, op.count, op.dtype, op.redop);
    }
  }
  if (op.redop == ReduceOp::avg) divide_by(acc, op.count, op.dtype, n);
}

}  // namespace mpcomm::native
