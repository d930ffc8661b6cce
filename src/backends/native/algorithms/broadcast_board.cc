// broadcast, board — one host, every rank with a CPU of its own, small buffers.
//
// Needs: the board (host-local shared memory: the small slots and, above 32 bytes, the input slots).
//
// Steps: every rank meets on the board (board_meet, allreduce_board.cc): the root leaves its buffer there
// with its tag (in its small slot up to 32 bytes, else in its input slot), the others only their tags;
// once every tag is there, every receiver copies the root's buffer off the board. The root waits for the
// receivers' tags too: that is what lets it rewrite its slots two ops later without an acknowledgment.
//
// Bytes: the root writes B, every receiver reads B.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_board(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  const bool root = c.rank == op.root;
  board_meet(c, root ? op.recv : nullptr, root ? bytes : 0);
  if (!root && bytes > 0) std::memcpy(op.recv, board_input_of(c, op.root, bytes), bytes);
  board_finished(c);
}

}  // namespace mpcomm::native
