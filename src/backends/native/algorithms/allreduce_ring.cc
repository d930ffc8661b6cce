// allreduce, ring: reduce-scatter then all-gather — for large messages, bandwidth-optimal.
//
// The buffer is cut into n chunks. Ring: rank r sends to r+1 and receives from r-1.
//   reduce-scatter, steps s = 0..n-2: send chunk (r-s) mod n (from the input at s = 0, else the chunk
//     reduced in the step before), and reduce the incoming chunk (r-s-1) mod n with this rank's input
//     into the result as it arrives (over shared memory straight from the ring: no scratch, no copy);
//     afterwards rank r owns the full reduction of chunk r+1;
//   avg: divide the owned chunk by n (once, so every rank gets the same bits);
//   all-gather, steps s = 0..n-2: send chunk (r+1-s) mod n, receive chunk (r-s) mod n in place.
// Every chunk of the result is written once (reduced, or received), so out of place needs no initial
// copy. Bytes per rank: 2·(n-1)/n·B out and in; 2·(n-1) rounds. Scratch: none.
//
// allreduce, ring_shm: the same ring with every chunk between ranks of one host through the
// shared-memory rings, never by single copy. Where ranks outnumber the CPUs every byte costs CPU time
// that another rank waits for, and a single copy (the kernel pins every page) costs more of it than a
// copy into the ring and a reduction straight out of it; but the rings hand each chunk from one CPU's
// cache to the other's, 4-6 times slower when the CPUs are far apart (docs/performance.md).
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

namespace {

// This rank's place in a ring over `group`, and the op's buffer cut into one chunk per member.
struct Ring {
  Ring(const AlgoCtx& c, const std::vector<int>& group)
      : count(c.op.count), es(c.elem()), n(static_cast<int>(group.size())), r(index_in(group, c.rank)),
        right(group[static_cast<size_t>(mod(r + 1, n))]), left(group[static_cast<size_t>(mod(r - 1, n))]) {}
  size_t off(int i) const { return chunk_offset(count, n, i) * es; }
  size_t len(int i) const { return off(i + 1) - off(i); }
  size_t count, es;
  int n, r, right, left;
};

}  // namespace

void ring_reduce_scatter_over(AlgoCtx& c, const std::vector<int>& group, const char* in, char* buf, Route route) {
  const Ring g(c, group);
  for (int s = 0; s < g.n - 1; ++s) {
    int send_chunk = mod(g.r - s, g.n), recv_chunk = mod(g.r - s - 1, g.n);
    Handle rh = c.e.recv_reduce(g.left, buf + g.off(recv_chunk), in + g.off(recv_chunk), g.len(recv_chunk), c.op.dtype,
                                c.op.redop);
    Handle sh = c.e.send(g.right, (s == 0 ? in : buf) + g.off(send_chunk), g.len(send_chunk), route);
    c.e.wait_all({rh, sh});
  }
}

void ring_allgather_over(AlgoCtx& c, const std::vector<int>& group, char* buf, Route route) {
  const Ring g(c, group);
  for (int s = 0; s < g.n - 1; ++s) {
    int send_chunk = mod(g.r + 1 - s, g.n), recv_chunk = mod(g.r - s, g.n);
    Handle rh = c.e.recv(g.left, buf + g.off(recv_chunk), g.len(recv_chunk));
    Handle sh = c.e.send(g.right, buf + g.off(send_chunk), g.len(send_chunk), route);
    c.e.wait_all({rh, sh});
  }
}

namespace {

void allreduce_ring_routed(AlgoCtx& c, Route route) {
  const auto& op = c.op;
  const int n = c.size;
  char* buf = static_cast<char*>(op.recv);
  const char* in = static_cast<const char*>(op.send);
  const std::vector<int> all = all_ranks(c);
  ring_reduce_scatter_over(c, all, in, buf, route);
  const int owned = mod(c.rank + 1, n);
  const size_t first = chunk_offset(op.count, n, owned);
  c.divide_avg(buf + first * c.elem(), chunk_offset(op.count, n, owned + 1) - first);
  ring_allgather_over(c, all, buf, route);
}

}  // namespace

void allreduce_ring(AlgoCtx& c) { allreduce_ring_routed(c, Route::usual); }
void allreduce_ring_shm(AlgoCtx& c) { allreduce_ring_routed(c, Route::ring); }

}  // namespace mpcomm::native
