// allreduce, recursive doubling — for small messages when ranks share cores, where the number of
// messages (and of wake-ups) matters more than their size.
//
// p = the largest power of two <= n; the n - p "extra" ranks r >= p first fold their buffer into rank
// r - p and wait. Then for k = 1, 2, 4, ... < p: rank r exchanges its partial result with r ^ k and
// combines the two, the lower rank's partial first, so that both compute the same bits. At the end the
// folded ranks get the result from r - p.
// Messages per rank: log2(p) (+1 or 2 for folding); bytes per rank: log2(p)·B out and in. Scratch: B.
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void recursive_doubling_over(AlgoCtx& c, const std::vector<int>& group, char* buf, size_t count) {
  const auto& op = c.op;
  const size_t bytes = count * c.elem();
  const int n = static_cast<int>(group.size());
  if (n <= 1 || bytes == 0) return;
  const int r = static_cast<int>(std::find(group.begin(), group.end(), c.rank) - group.begin());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  char* tmp = c.scratch(bytes);
  auto combine = [&](int peer) {  // buf = lower member's partial op higher member's partial
    const void* srcs[2] = {peer < r ? tmp : buf, peer < r ? buf : tmp};
    reduce_into(buf, srcs, 2, count, op.dtype, op.redop);
  };
  auto rank_of = [&](int member) { return group[static_cast<size_t>(member)]; };
  if (r >= p) {  // fold into r - p, then wait for the result
    c.e.wait(c.e.send(rank_of(r - p), buf, bytes));
    c.e.wait(c.e.recv(rank_of(r - p), buf, bytes));
    return;
  }
  if (r + p < n) {
    c.e.wait(c.e.recv(rank_of(r + p), tmp, bytes));
    combine(r + p);
  }
  for (int k = 1; k < p; k <<= 1) {
    const int peer = r ^ k;
    Handle rh = c.e.recv(rank_of(peer), tmp, bytes);
    Handle sh = c.e.send(rank_of(peer), buf, bytes);
    c.e.wait_all({rh, sh});
    combine(peer);
  }
  if (r + p < n) c.e.wait(c.e.send(rank_of(r + p), buf, bytes));
}

void allreduce_recursive_doubling(AlgoCtx& c) {
  const auto& op = c.op;
  char* buf = static_cast<char*>(op.recv);
  if (op.send != op.recv) std::memcpy(buf, op.send, op.bytes());
  recursive_doubling_over(c, all_ranks(c), buf, op.count);
}

}  // namespace mpcomm::native
