// barrier, board — one host, every rank with a CPU of its own.
//
// Needs: the board (host-local shared memory: the small slots).
//
// Steps: every rank writes its tag (the op's fingerprint and 1 + its sequence number) into its small
// slot of the op's parity, wakes any sleeper, and waits until every other rank's slot holds the same
// stamp (board_meet, allreduce_board.cc). A rank leaves as soon as it sees the last tag written: the
// ranks leave within a cache line's transfer of each other, where the dissemination barrier's last
// message leaves one rank a frame behind.
//
// Bytes: one cache line written per rank, one read from every other.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void barrier_board(AlgoCtx& c) {
  board_meet(c, nullptr, 0);
  board_finished(c);
}

}  // namespace mpcomm::native
