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
#include <cstring>

#include "core/reduce.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

void allreduce_ring(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t es = c.elem();
  const int n = c.size, r = c.rank;
  char* buf = static_cast<char*>(op.recv);
  const char* in = static_cast<const char*>(op.send);
  if (n == 1 || op.count == 0) {
    if (in != buf && op.bytes() > 0) std::memcpy(buf, in, op.bytes());
    if (op.redop == ReduceOp::avg) divide_by(buf, op.count, op.dtype, n);
    return;
  }
  auto off = [&](int i) { return chunk_offset(op.count, n, i) * es; };
  auto len = [&](int i) { return off(i + 1) - off(i); };
  const int right = mod(r + 1, n), left = mod(r - 1, n);

  for (int s = 0; s < n - 1; ++s) {
    int send_chunk = mod(r - s, n), recv_chunk = mod(r - s - 1, n);
    Handle rh = c.e.recv_reduce(left, buf + off(recv_chunk), in + off(recv_chunk), len(recv_chunk), op.dtype, op.redop);
    Handle sh = c.e.send(right, (s == 0 ? in : buf) + off(send_chunk), len(send_chunk));
    c.e.wait_all({rh, sh});
  }
  const int owned = mod(r + 1, n);
  if (op.redop == ReduceOp::avg) divide_by(buf + off(owned), len(owned) / es, op.dtype, n);
  for (int s = 0; s < n - 1; ++s) {
    int send_chunk = mod(r + 1 - s, n), recv_chunk = mod(r - s, n);
    Handle rh = c.e.recv(left, buf + off(recv_chunk), len(recv_chunk));
    Handle sh = c.e.send(right, buf + off(send_chunk), len(send_chunk));
    c.e.wait_all({rh, sh});
  }
}

}  // namespace mpcomm::native
