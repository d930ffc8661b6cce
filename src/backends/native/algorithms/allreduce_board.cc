// allreduce, board — for the smallest messages on one host whose ranks each have a CPU. (Steps 1-4,
// board_meet(), are also the board barrier, barrier_board.cc, with no input.)
//
// Needs: the board (host-local shared memory: the small slots and, above 32 bytes, the input slots).
//
// The latency of a small allreduce is the time its bytes take to go from one CPU's cache to another's.
// Frames cost a header, a ring position and a doorbell besides; here each rank writes its input and its
// tag into one cache line of its own, and every other rank reads that line once.
//
// Steps (n ranks, all on this host; p = the parity of the op's sequence number, s = 1 + that number):
//   1. if B > 32 bytes, copy our input into our input slot p on the board;
//   2. write our small slot p: our fingerprint, our input when B <= 32 bytes, then s (release);
//   3. wake any peer that sleeps (one that spins sees the slot anyway);
//   4. wait until every other rank's slot p holds s (spinning on those lines, then the engine's bounded,
//      watched wait), and check every fingerprint against ours (a Mismatch otherwise);
//   5. reduce the n inputs — every one read from the board, ours included, so the output may be our input
//      (in place) — in rank order into the output: every rank gets the same bits; then mark this op
//      done (board_finished).
// Reuse: our slots of parity p are rewritten two or more ops later, once every other rank has finished
// reading them (HostLocal::board_claim: its done word, written when it finished this op, or a later
// tag of its already seen; back to back on the board, the tags of the op between already show it, and
// the claim reads nothing). A rank that runs another collective at this sequence number is found by its
// fingerprint here, or by the engine's check of the board while it waits for frames.
//
// Bytes per rank: B written, (n-1)·B read; one cache line each way when B <= 32.
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

static_assert(sizeof(detail::Fingerprint) <= sizeof(BoardSlot::words));

// How many looks at the peers' slots before the engine's wait takes over (a few microseconds): the
// peers of a small allreduce usually arrive within that, and the engine's wait reacts more slowly.
static constexpr int kSpinLooks = 4096;

void board_meet(AlgoCtx& c, const void* input, size_t bytes) {
  const auto& op = c.op;
  HostLocal& board = c.host();
  const int n = c.size;
  const uint64_t stamp = op.seq + 1;
  const int par = static_cast<int>(op.seq & 1);
  const detail::Fingerprint fp = detail::fingerprint(op);
  const bool inline_input = bytes <= BoardSlot::kInlineBytes;

  // 1-3. (Our slots of this parity were last written two or more ops ago; a rank may still be reading
  // them if the op between did not make us hear from it: board_claim waits for that.)
  board.board_claim(par, stamp);
  if (!inline_input) std::memcpy(board.board_input(par, c.rank), input, bytes);
  board.board_slot(par, c.rank)->write(stamp, &fp, sizeof fp, input, inline_input ? bytes : 0);
  board.wake();

  // 4.
  auto arrived = [&](int r) { return board.board_slot(par, r)->seq.load(std::memory_order_acquire) == stamp; };
  auto all_arrived = [&] {
    for (int r = 0; r < n; ++r)
      if (r != c.rank && !arrived(r)) return false;
    return true;
  };
  bool here = all_arrived();
  for (int i = 0; i < kSpinLooks && !here; ++i) here = all_arrived();
  if (!here) {
    auto late = [&] {
      std::vector<int> out;
      for (int r = 0; r < n; ++r)
        if (r != c.rank && !arrived(r)) out.push_back(r);
      return out;
    };
    auto what = [&] {
      const std::vector<int> l = late();
      std::string s = l.size() == 1 ? "rank" : "ranks";
      for (size_t i = 0; i < l.size(); ++i) s += (i ? ", " : " ") + std::to_string(l[i]);
      return s + " to leave " + (l.size() == 1 ? "its" : "their") + " tag on the board (" + std::string(to_string(op.kind)) +
           ", board)";
    };
    board.wait(all_arrived, late, what);
  }
  for (int r = 0; r < n; ++r) {
    if (r == c.rank) continue;
    board.board_seen(r, stamp);
    detail::Fingerprint theirs{};
    // The slot holds our stamp and keeps it until we are done (see the top): this read cannot fail.
    board.board_slot(par, r)->read(stamp, &theirs, sizeof theirs);
    expect_same_call(c, r, theirs, fp);
  }

}

const void* board_input_of(AlgoCtx& c, int rank, size_t bytes) {
  HostLocal& board = c.host();
  const int par = static_cast<int>(c.op.seq & 1);
  if (bytes <= BoardSlot::kInlineBytes) return board.board_slot(par, rank)->data;
  return board.board_input(par, rank);
}

void board_finished(AlgoCtx& c) { c.host().board_done(c.op.seq + 1); }

void allreduce_board(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  const int n = c.size;
  board_meet(c, op.send, bytes);
  // 5.
  const void** srcs = reinterpret_cast<const void**>(c.scratch(static_cast<size_t>(n) * sizeof(void*)));
  for (int r = 0; r < n; ++r) srcs[r] = board_input_of(c, r, bytes);
  reduce_into(op.recv, srcs, n, op.count, op.dtype, op.redop);
  board_finished(c);
}

}  // namespace mpcomm::native
