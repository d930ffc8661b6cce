// barrier, dissemination: for 2^k = 1, 2, 4, ... < n, rank r sends an empty frame to r+2^k and waits
// for one from r-2^k. ceil(log2 n) rounds, no payload; the frames still carry the fingerprint, so a
// rank that called something else is reported.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void barrier_dissemination(AlgoCtx& c) {
  for (int k = 1; k < c.size; k <<= 1) {
    Handle rh = c.e.recv(mod(c.rank - k, c.size), nullptr, 0);
    Handle sh = c.e.send(mod(c.rank + k, c.size), nullptr, 0);
    c.e.wait_all({rh, sh});
  }
}

}  // namespace mpcomm::native
