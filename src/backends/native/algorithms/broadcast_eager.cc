// broadcast, eager — one host, small buffers, ranks that may share CPUs.
//
// Needs: the board (host-local shared memory: the small slots and, above 32 bytes, the input slots).
//
// On a host whose ranks outnumber its CPUs, a broadcast that waits for anyone costs a switch of the CPU
// per wait. Here only the receivers wait, each for the root alone, and the root leaves at once, as an
// MPI eager send lets it.
//
// Steps (p = the parity of the op's sequence number, s = 1 + that number):
//   root:      claim its slots of parity p (HostLocal::board_claim: every receiver has finished the op
//              that last wrote them — the root runs at most two ops ahead of the slowest receiver), copy
//              the buffer into them (into the small slot up to 32 bytes, else the input slot), write the
//              slot's tag s (release), wake any receiver that sleeps, mark the op done; return.
//   receivers: wait until the root's slot p holds s (then its fingerprint must be ours: a Mismatch
//              otherwise), copy the buffer off the board, mark the op done (the root's next claim of
//              these slots waits for that).
// A receiver that runs another collective at this number is found by its fingerprint, or, while it
// waits for frames, by the engine's check of the board.
//
// Bytes: the root writes B, every receiver reads B.
#include <cstring>

#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_eager(AlgoCtx& c) {
  const auto& op = c.op;
  HostLocal& board = c.host();
  const size_t bytes = op.bytes();
  const uint64_t stamp = op.seq + 1;
  const int par = static_cast<int>(op.seq & 1);
  const detail::Fingerprint fp = detail::fingerprint(op);
  const bool inline_input = bytes <= BoardSlot::kInlineBytes;
  BoardSlot* slot = board.board_slot(par, op.root);
  if (c.rank == op.root) {
    board.board_claim(par, stamp);
    if (!inline_input) std::memcpy(board.board_input(par, op.root), op.recv, bytes);
    slot->write(stamp, &fp, sizeof fp, op.recv, inline_input ? bytes : 0);
    board.wake();
    return board_finished(c);
  }
  auto arrived = [&] { return slot->seq.load(std::memory_order_acquire) == stamp; };
  if (!arrived())
    board.wait(arrived, [&] { return std::vector<int>{op.root}; },
               [&] { return "the root, rank " + std::to_string(op.root) + ", to leave its buffer on the board (eager broadcast)"; });
  board.board_seen(op.root, stamp);
  detail::Fingerprint theirs{};
  slot->read(stamp, &theirs, sizeof theirs);  // the root keeps this slot until we mark the op done
  expect_same_call(c, op.root, theirs, fp);
  if (bytes > 0) std::memcpy(op.recv, inline_input ? slot->data : board.board_input(par, op.root), bytes);
  board_finished(c);
}

}  // namespace mpcomm::native
