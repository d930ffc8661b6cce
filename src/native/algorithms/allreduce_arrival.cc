// allreduce, arrival — for small messages on one host whose ranks outnumber its CPUs.
//
// There, a rank that waits for a peer yields its CPU, often to the very rank it waits for. Exchanges
// that take turns (recursive doubling's rounds, a frame per pair) cost several such switches per call.
// Here no rank waits for a particular other one: the last to arrive does the whole reduction, and
// every other rank only arrives and later picks the result up. With two ranks per CPU each rank then
// runs once per call (it picks up call k's result and arrives at call k+1 in one turn).
//
// Steps (n ranks, all on this host, B <= ShmSegment::kBoardBytes bytes per rank):
//   1. copy our B bytes into our input slot on the host's board (shared memory), and our op's
//      fingerprint and sequence number into our tag;
//   2. arrive: add one to the board's count;
//   3. the rank that brings the count to n checks every tag against its own fingerprint (a Mismatch,
//      reported by every rank, otherwise), reduces the n input slots in rank order into the result slot
//      (avg: then divides it), resets the count, publishes the op's sequence number and wakes the
//      sleepers; every other rank waits for that publication;
//   4. every rank copies the result slot into its output.
// Reuse of the board by the next call is safe without further handshakes: a rank enters the next call
// only once this one's result is published, i.e. once every input slot was read; and the result slot
// is overwritten only when every rank has arrived at the next call, i.e. has copied this result out.
// The reset count is published along with the result.
//
// Bytes per rank: B in, B out; the last to arrive also reads n·B and writes B. Scratch: none.
#include <cstring>

#include "core/reduce.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

static_assert(sizeof(detail::Fingerprint) <= sizeof(BoardTag::words));

void allreduce_arrival(AlgoCtx& c) {
  const auto& op = c.op;
  const size_t bytes = op.bytes();
  const ShmSegment* seg = c.e.board();
  // No board (ranks on several hosts), or too large for it: the same answer on every rank.
  if (seg == nullptr || bytes == 0 || bytes > ShmSegment::kBoardBytes) return allreduce_flat(c);
  const int n = c.size;
  BoardCtl* ctl = seg->board_ctl();
  const uint64_t stamp = op.seq + 1;
  // Slots and result alternate between two sets by the op's parity: one set would be just as safe (see
  // the top), but a call that rewrites the lines the other ranks have just read waits for each one to
  // come back (4 ranks on 2 CPUs, 32 KiB: see docs/performance.md).
  const int par = static_cast<int>(op.seq & 1);
  const detail::Fingerprint fp = detail::fingerprint(op);

  // 1-2. Our input and tag, then arrive (release: they are visible to whoever arrives last).
  BoardTag* tag = seg->board_tag(c.e.local_of(c.rank));
  std::memcpy(seg->board_input(par, c.e.local_of(c.rank)), op.send, bytes);
  tag->write(stamp, &fp, sizeof fp);
  char* result = seg->board_result(par);
  if (ctl->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(n)) {
    // 3. Last to arrive (acquire: every input and tag is visible).
    std::vector<const void*> srcs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const int local = c.e.local_of(r);
      detail::Fingerprint theirs{};
      // Every tag holds this op's stamp now (no rank may go on before we publish), unless a rank runs
      // another op: then its fingerprint, read under a stamp that differs, shows which.
      const BoardTag* t = seg->board_tag(local);
      if (!t->read(stamp, &theirs, sizeof theirs)) t->read(t->seq.load(std::memory_order_acquire), &theirs, sizeof theirs);
      if (!(theirs == fp))
        c.e.fail(ErrorCode::mismatch, "rank " + std::to_string(r) + " called " + detail::describe(theirs) +
                                          " but this rank called " + detail::describe(fp));
      srcs[static_cast<size_t>(r)] = seg->board_input(par, local);
    }
    reduce_into(result, srcs.data(), n, op.count, op.dtype, op.redop);
    if (op.redop == ReduceOp::avg) divide_by(result, op.count, op.dtype, n);
    ctl->arrived.store(0, std::memory_order_relaxed);
    ctl->published.store(stamp, std::memory_order_release);
    c.e.wake_local_peers();
  } else {
    // Ranks not yet arrived, for liveness checks and a timeout's message; once all have arrived, the
    // one computing the result is among all the others.
    auto pending = [&] {
      std::vector<int> late, others;
      for (int r = 0; r < n; ++r) {
        if (r == c.rank) continue;
        others.push_back(r);
        if (seg->board_tag(c.e.local_of(r))->seq.load(std::memory_order_relaxed) != stamp) late.push_back(r);
      }
      return late.empty() ? others : late;
    };
    auto what = [&] {
      std::vector<int> late;
      for (int r = 0; r < n; ++r)
        if (r != c.rank && seg->board_tag(c.e.local_of(r))->seq.load(std::memory_order_relaxed) != stamp) late.push_back(r);
      if (late.empty()) return std::string("the last rank to arrive to publish the result (arrival allreduce)");
      std::string s = late.size() == 1 ? "rank" : "ranks";
      for (size_t i = 0; i < late.size(); ++i) s += (i ? ", " : " ") + std::to_string(late[i]);
      return s + " to leave " + (late.size() == 1 ? "its" : "their") + " input on the board (arrival allreduce)";
    };
    c.e.wait_shared([&] { return ctl->published.load(std::memory_order_acquire) == stamp; }, pending, what);
  }
  // 4.
  std::memcpy(op.recv, result, bytes);
}

}  // namespace mpcomm::native
