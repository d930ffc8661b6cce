// reduce, binomial tree (the broadcast tree run backwards).
//
// With v = (rank - root) mod n, for 2^k = 1, 2, 4, ...: if bit k of v is set, send the partial result
// to v - 2^k and stop; otherwise receive the partial result of v + 2^k (if it exists) and reduce it
// into ours as it arrives (straight from the shared-memory ring). The root ends with the reduction of
// all n buffers; avg divides there.
// Bytes: each non-root sends B once; a rank receives B per child (the root: ceil(log2 n)·B).
// Scratch: B for the partial result (non-root).
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void reduce_binomial_over(AlgoCtx& c, const std::vector<int>& group, int root, char* acc) {
  const auto& op = c.op;
  const int n = static_cast<int>(group.size());
  const size_t bytes = op.bytes();
  auto rank_of = [&](int v) { return group[static_cast<size_t>(mod(v + root, n))]; };
  const int v = mod(index_in(group, c.rank) - root, n);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      c.e.wait(c.e.send(rank_of(v - mask), acc, bytes));
      return;
    }
    if (v + mask < n) c.e.wait(c.e.recv_reduce(rank_of(v + mask), acc, acc, bytes, op.dtype, op.redop));
  }
}

void reduce_binomial(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  char* acc = c.rank == op.root ? static_cast<char*>(op.recv) : c.scratch(bytes);
  if (acc != op.send) std::memcpy(acc, op.send, bytes);
  reduce_binomial_over(c, all_ranks(c), op.root, acc);
}

}  // namespace mpcomm::native
