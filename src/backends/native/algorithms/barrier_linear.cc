// barrier, linear: every other rank sends rank 0 an empty frame and waits for one back; rank 0 waits for
// all of them, then answers each. Rank 0 leaves first: on a crowded host, where the ranks sharing a CPU
// leave one after the other, a rooted call from rank 0 right after the barrier (a broadcast) has its
// data out before most receivers arrive (dissemination lets the ranks leave in the order the CPUs happen
// to run them). 2(n-1) frames, no payload; the frames carry the fingerprint, so a rank that called
// something else is reported.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void barrier_linear(AlgoCtx& c) {
  std::vector<Handle> hs;
  if (c.rank == 0) {
    for (int r = 1; r < c.size; ++r) hs.push_back(c.e.recv(r, nullptr, 0));
    c.e.wait_all(hs);
    hs.clear();
    for (int r = 1; r < c.size; ++r) hs.push_back(c.e.send(r, nullptr, 0));
  } else {
    hs.push_back(c.e.send(0, nullptr, 0));
    hs.push_back(c.e.recv(0, nullptr, 0));
  }
  c.e.wait_all(hs);
}

}  // namespace mpcomm::native
