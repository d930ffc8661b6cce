// allreduce, arrival — for small messages on one host whose ranks outnumber its CPUs.
//
// There, a rank that waits for a peer yields its CPU, often to the very rank it waits for. Exchanges
// that take turns (recursive doubling's rounds, a frame per pair) cost several such switches per call.
// Here no rank waits for a particular other one: every rank arrives, the result is reduced once every
// input is there, and every rank picks it up. With two ranks per CPU each rank then runs about once per
// call (it picks up call k's result and arrives at call k+1 in one turn).
//
// Needs: shared memory (HostLocal: the board, and waiting for it), B <= HostLocal::kBoardBytes.
// Steps (n ranks, all on this host, B bytes per rank; the board has two sets of slots, used by the
// parity of the op's sequence number):
//   1. copy our B bytes into our input slot on the host's board (shared memory), and our op's
//      fingerprint and sequence number into our tag;
//   2. arrive: add one to the board's count;
//   3. the rank that brings the count to n checks every tag against its own fingerprint (a Mismatch,
//      reported by every rank, otherwise). Up to kChunkBytes it reduces the n input slots in rank order
//      into the result slot (avg: then divides) and publishes: resets the count, stores the op's
//      sequence number, wakes the sleepers. Larger, it opens the result's chunks: every rank that waits
//      claims chunks one at a time and reduces them the same way (ranks on other CPUs in parallel), and
//      whoever completes the last chunk publishes. Every other rank waits for the publication;
//   4. every rank copies the result slot into its output.
// Reuse of the board by the next call is safe without further handshakes: a rank enters the next call
// only once this one's result is published, i.e. once every input slot was read; the result slot is
// overwritten only when every rank has arrived at the next call, i.e. has copied this result out; the
// reset count is published along with the result; chunks are claimed only under this op's sequence
// number, and the result is published only once every claimed chunk is reduced.
//
// Bytes per rank: B in, B out; the ranks that reduce read n·B and write B between them. Scratch: none.
#include <algorithm>
#include <cstring>

#include "kernels/reduce.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

static_assert(sizeof(detail::Fingerprint) <= sizeof(BoardTag::words));

static constexpr size_t kChunkBytes = kArrivalChunkBytes;
static_assert(HostLocal::kBoardBytes / kChunkBytes < (1u << 16));

void allreduce_arrival(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  const int n = c.size;
  HostLocal& board = c.host();
  BoardCtl* ctl = board.board_ctl();
  const uint64_t stamp = op.seq + 1;
  // Slots and result alternate between two sets by the op's parity: one set would be just as safe (see
  // the top), but a call that rewrites the lines the other ranks have just read waits for each one to
  // come back (4 ranks on 2 CPUs, 32 KiB: see docs/performance.md).
  const int par = static_cast<int>(op.seq & 1);
  const detail::Fingerprint fp = detail::fingerprint(op);

  // 1-2. Our input and tag, then arrive (release: they are visible to whoever arrives last). Our input
  // slot of this parity may still be read by a rank of an earlier op on the board (board_claim).
  board.board_claim(par, stamp);
  BoardTag* tag = board.board_tag(c.rank);
  if (bytes > 0) std::memcpy(board.board_input(par, c.rank), op.send, bytes);
  tag->write(stamp, &fp, sizeof fp);
  char* result = board.board_result(par);
  const size_t es = c.elem(), chunk = kChunkBytes / es, chunks = (op.count + chunk - 1) / chunk;
  // The n sources of the elements [first, first + count), in rank order (pointer array in the reused
  // scratch: no allocation per call).
  const void** srcs = reinterpret_cast<const void**>(c.scratch(static_cast<size_t>(n) * sizeof(void*)));
  auto reduce_range = [&](size_t first, size_t count) {
    for (int r = 0; r < n; ++r) srcs[r] = board.board_input(par, r) + first * es;
    reduce_into(result + first * es, srcs, n, count, op.dtype, op.redop);
    c.divide_avg(result + first * es, count);
  };
  auto publish = [&] {
    ctl->arrived.store(0, std::memory_order_relaxed);
    ctl->published.store(stamp, std::memory_order_release);
    board.wake();
  };
  // Claims and reduces chunks of the result while any is left; whoever reduces the last one publishes.
  auto help = [&] {
    uint64_t w = ctl->work.load(std::memory_order_acquire);
    while ((w >> 16) == stamp && (w & 0xffff) < chunks) {
      if (!ctl->work.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      const size_t first = (w & 0xffff) * chunk;
      reduce_range(first, std::min(chunk, op.count - first));
      if (ctl->chunks_done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) publish();
      w = ctl->work.load(std::memory_order_acquire);
    }
  };
  if (ctl->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(n)) {
    // 3. Last to arrive (acquire: every input and tag is visible).
    // Every tag holds this op's stamp now (no rank may go on before we publish), unless a rank runs
    // another op: then its fingerprint, read under a stamp that differs, shows which.
    for (int r = 0; r < n; ++r) check_board_tag(c, r, stamp, fp);
    if (chunks <= 1) {  // (0 bytes: nothing to reduce, but the ranks still meet)
      reduce_range(0, op.count);
      publish();
    } else {
      // Open the chunks to every rank (release: a rank that sees them open sees every input, through
      // our acquire above), and start on them.
      ctl->chunks_done.store(0, std::memory_order_relaxed);
      ctl->work.store(stamp << 16, std::memory_order_release);
      board.wake();  // a rank that already sleeps would help only after its 50 ms slice
      help();
    }
  }
  if (ctl->published.load(std::memory_order_acquire) != stamp) {
    // Ranks not yet arrived (their tag lacks our stamp), or with `all`, every other rank.
    auto others = [&](bool all) {
      std::vector<int> out;
      for (int r = 0; r < n; ++r)
        if (r != c.rank && (all || board.board_tag(r)->seq.load(std::memory_order_relaxed) != stamp))
          out.push_back(r);
      return out;
    };
    // For liveness checks: once all have arrived, those reducing the result are among all the others.
    auto pending = [&] {
      std::vector<int> late = others(false);
      return late.empty() ? others(true) : late;
    };
    auto what = [&] {
      const std::vector<int> late = others(false);
      if (late.empty()) return std::string("the ranks reducing the result to publish it (arrival allreduce)");
      std::string s = late.size() == 1 ? "rank" : "ranks";
      for (size_t i = 0; i < late.size(); ++i) s += (i ? ", " : " ") + std::to_string(late[i]);
      return s + " to leave " + (late.size() == 1 ? "its" : "their") + " input on the board (arrival allreduce)";
    };
    // While we wait, we take a share of the chunks (ranks on other CPUs reduce in parallel).
    board.wait(
        [&] {
          if (chunks > 1) help();
          return ctl->published.load(std::memory_order_acquire) == stamp;
        },
        pending, what);
  }
  // 4. (Published: every input of this op has been read by whoever reduced.)
  if (bytes > 0) std::memcpy(op.recv, result, bytes);
  board_finished(c);
}

}  // namespace mpcomm::native
