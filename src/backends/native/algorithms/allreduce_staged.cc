// allreduce, staged — for large buffers on one host whose ranks outnumber its CPUs.
// There the ring's 2(n-1) steps each make a rank wait for one that may not hold a CPU (4 ranks on 2
// CPUs, 16 MiB: some 2000 context switches per call), and the direct allreduce's single copies
// (process_vm_readv/writev) cost about three times a memcpy each (build/benchmarks/cross_process_copy).
// Here every byte crosses between ranks through their stages in shared memory (memcpy, streaming
// stores), and no rank waits for a particular other one while it could do anything else: the staged
// broadcast's and allgather's way (staged_flow.cc), for a reduce-scatter and an all-gather at once.
//
// Needs: shared memory (HostLocal: the stages, two sets of their words, and the board's tags).
// The n ranks own n blocks of the buffer (block j: elements [j·blk, (j+1)·blk), blk a whole number of
// cache lines; the last blocks shorter or empty), each cut into m pieces of kPiece bytes. A stage's
// first half holds D pieces of input for the others to reduce (words of set 0), its second half D
// results for the others to copy (set 1). In one loop, each rank does whatever it can of:
//   1. copy piece i of every other rank's block j of its input into its stage, in the order i = 0, 1,
//      ..., and within each i the blocks j = 0, 1, ... but its own: its k-th such piece into input slot
//      k mod D, once the owner of the block of the piece that used the slot before has consumed it
//      (streaming stores); it publishes how many it has copied;
//   2. once every other rank has published its piece i of our block and the others have copied our
//      result i - D out of its slot: reduce the n pieces in rank order (ours straight from our input) into a cached piece,
//      copy that into result slot i mod D and into our output (streaming stores), publish it, and tell
//      each other rank that its piece is consumed;
//   3. copy every result another rank has published out of its stage into our output, and say so.
// Before the first piece of another rank's it reads (2 or 3), a rank checks that every other rank's board
// tag holds the same call (a Mismatch otherwise).
// A rank that can do none of them waits (HostLocal::wait: bounded, watching the ranks it waits for). It
// returns once it has reduced its block, copied every other block, and every other rank has copied its
// results (and so reduced its block: every piece of ours is consumed), so its stage is free for its next
// call. Only the block's owner reduces it, so every rank gets the same bits.
// Bytes per rank (B the buffer, n ranks): (n-1)/n·B into our stage, n·B/n read to reduce, B/n into our
// stage and output, (n-1)/n·B out of the others' stages; no process_vm_readv/writev, no frames.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "mpcomm/error.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

namespace {

// 32 KiB: half a stage holds 8, with 4 ranks between two and three pieces of each other block.
constexpr size_t kPiece = size_t{32} << 10;
constexpr size_t kSlots = HostLocal::kStageBytes / 2 / kPiece;
static_assert(HostLocal::kStageBytes % (2 * kPiece) == 0 && kSlots >= 2);
constexpr int kInputs = 0, kResults = 1;  // the two sets of stage words

}  // namespace

void allreduce_staged(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, me = c.rank;
  HostLocal& host = c.host();
  const size_t es = c.elem();
  const size_t line = 64 / es;
  const size_t blk = ((op.count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n) + line - 1) / line * line;
  const size_t pe = kPiece / es;                        // elements per piece
  const size_t m = (blk + pe - 1) / pe;                 // pieces per block
  const size_t total = m * static_cast<size_t>(n - 1);  // input pieces each rank publishes
  if (total > kStageCountMask)
    throw InvalidArgument("mpcomm: staged allreduce of " + std::to_string(op.bytes()) + " bytes: too many pieces");
  auto start = [&](int j) { return std::min(op.count, static_cast<size_t>(j) * blk); };
  auto length = [&](int j) { return std::min(op.count - start(j), blk); };
  // Piece i of block j: its first element and count (0 past the block's end).
  auto first = [&](int j, size_t i) { return start(j) + i * pe; };
  auto count_of = [&](int j, size_t i) { return i * pe >= length(j) ? size_t{0} : std::min(pe, length(j) - i * pe); };
  // Where piece i of block j is in `owner`'s order of publication, and back.
  auto position = [&](int owner, size_t i, int j) {
    return i * static_cast<size_t>(n - 1) + static_cast<size_t>(j < owner ? j : j - 1);
  };
  auto block_at = [&](int owner, size_t k) {
    const int jj = static_cast<int>(k % static_cast<size_t>(n - 1));
    return jj < owner ? jj : jj + 1;
  };
  auto piece_at = [&](size_t k) { return k / static_cast<size_t>(n - 1); };
  auto input_slot = [&](int owner, size_t k) { return host.stage(owner) + (k % kSlots) * kPiece; };
  auto result_slot = [&](int owner, size_t i) { return host.stage(owner) + HostLocal::kStageBytes / 2 + (i % kSlots) * kPiece; };

  const uint64_t stamp = op.seq + 1;
  const StageCount count(stamp);

  const char* in = static_cast<const char*>(op.send);
  char* out = static_cast<char*>(op.recv);
  // Into our output: streamed once it is too large to stay in the cache (allreduce.staged.stores).
  auto to_output = [&](char* dst, const char* src, size_t bytes) {
    if (c.pick(Choice::allreduce_staged_stores) == kStreamingStores) {
      copy_streamed(dst, src, bytes);
    } else {
      std::memcpy(dst, src, bytes);
    }
  };
  // Pointers to the n sources of a piece, and the cached piece a result is reduced into.
  char* scratch = c.scratch(static_cast<size_t>(n) * sizeof(void*) + 64 + kPiece);
  const void** srcs = reinterpret_cast<const void**>(scratch);
  char* reduced_piece = scratch + (static_cast<size_t>(n) * sizeof(void*) + 63) / 64 * 64;

  const detail::Fingerprint fp = detail::fingerprint(op);
  host.board_tag(me)->write(stamp, &fp, sizeof fp);

  size_t published = 0, reduced = 0;
  std::vector<size_t> got(static_cast<size_t>(n), 0);  // results of each other block copied out
  got[static_cast<size_t>(me)] = m;
  bool checked = false;
  auto can_publish = [&] {
    if (published >= total) return false;
    if (published < kSlots) return true;
    const size_t k = published - kSlots;  // the piece that used the slot before
    return count(host.stage_consumed(me, block_at(me, k), kInputs)) > piece_at(k);
  };
  auto inputs_there = [&] {
    for (int r = 0; r < n; ++r)
      if (r != me && count(host.stage_published(r, kInputs)) <= position(r, reduced, me)) return false;
    return true;
  };
  auto results_copied = [&](size_t upto) {  // every other rank has copied our results [0, upto)
    for (int q = 0; q < n; ++q)
      if (q != me && count(host.stage_consumed(me, q, kResults)) < upto) return false;
    return true;
  };
  auto slot_free = [&] { return reduced < kSlots || results_copied(reduced - kSlots + 1); };
  auto can_reduce = [&] { return reduced < m && inputs_there() && slot_free(); };
  auto can_copy = [&] {
    for (int q = 0; q < n; ++q)
      if (got[static_cast<size_t>(q)] < m && count(host.stage_published(q, kResults)) > got[static_cast<size_t>(q)]) return true;
    return false;
  };
  auto finished = [&] {
    if (reduced < m || published < total) return false;
    for (size_t g : got)
      if (g < m) return false;
    return results_copied(m);
  };
  // Before the first piece of theirs we read. A rank publishes under our stamp after writing its tag,
  // and cannot rewrite it before we are done.
  auto check_once = [&] {
    if (!checked)
      for (int r = 0; r < n; ++r)
        if (r != me) check_board_tag(c, r, stamp, fp);
    checked = true;
  };
  // The ranks this rank waits for now, and (into `what`, when given) what for.
  auto blockers = [&](std::string* what) {
    std::vector<int> who;
    auto add = [&](int r, const std::string& s) {
      if (std::find(who.begin(), who.end(), r) == who.end()) who.push_back(r);
      if (what != nullptr) *what += (what->empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + s;
    };
    const std::string of_m = " of " + std::to_string(m);
    if (reduced < m) {
      for (int r = 0; r < n; ++r)
        if (r != me && count(host.stage_published(r, kInputs)) <= position(r, reduced, me))
          add(r, " to publish its piece " + std::to_string(reduced + 1) + of_m + " of block " + std::to_string(me));
      if (!slot_free())
        for (int q = 0; q < n; ++q)
          if (q != me && count(host.stage_consumed(me, q, kResults)) <= reduced - kSlots)
            add(q, " to copy result piece " + std::to_string(reduced - kSlots + 1) + of_m + " out of this rank's stage");
    }
    if (published < total && !can_publish()) {
      const size_t k = published - kSlots;
      add(block_at(me, k), " to consume piece " + std::to_string(piece_at(k) + 1) + of_m + " of its block from this rank's stage");
    }
    for (int q = 0; q < n; ++q)
      if (got[static_cast<size_t>(q)] < m && count(host.stage_published(q, kResults)) <= got[static_cast<size_t>(q)])
        add(q, " to publish result piece " + std::to_string(got[static_cast<size_t>(q)] + 1) + of_m);
    if (reduced == m)
      for (int q = 0; q < n; ++q)
        if (q != me && count(host.stage_consumed(me, q, kResults)) < m) add(q, " to copy the rest of our results");
    if (what != nullptr) *what += " (staged allreduce)";
    return who;
  };

  while (!finished()) {
    bool moved = false;
    // 1.
    while (can_publish()) {
      const size_t k = published;
      const int j = block_at(me, k);
      const size_t i = piece_at(k);
      const size_t cnt = count_of(j, i);
      if (cnt > 0) copy_streamed(input_slot(me, k), in + first(j, i) * es, cnt * es);
      host.stage_published(me, kInputs)->v.store(count.word(++published), std::memory_order_release);
      moved = true;
    }
    // 2.
    while (can_reduce()) {
      check_once();
      const size_t i = reduced;
      const size_t cnt = count_of(me, i);
      if (cnt > 0) {
        const size_t off = first(me, i) * es;
        for (int r = 0; r < n; ++r) srcs[r] = r == me ? in + off : input_slot(r, position(r, i, me));
        reduce_into(reduced_piece, srcs, n, cnt, op.dtype, op.redop);
        c.divide_avg(reduced_piece, cnt);
        copy_streamed(result_slot(me, i), reduced_piece, cnt * es);
        to_output(out + off, reduced_piece, cnt * es);
      }
      host.stage_published(me, kResults)->v.store(count.word(++reduced), std::memory_order_release);
      for (int r = 0; r < n; ++r)
        if (r != me) host.stage_consumed(r, me, kInputs)->v.store(count.word(reduced), std::memory_order_release);
      moved = true;
    }
    // 3.
    for (int q = 0; q < n; ++q) {
      size_t& g = got[static_cast<size_t>(q)];
      for (const size_t avail = std::min(m, count(host.stage_published(q, kResults))); g < avail; moved = true) {
        check_once();
        const size_t cnt = count_of(q, g);
        if (cnt > 0) to_output(out + first(q, g) * es, result_slot(q, g), cnt * es);
        host.stage_consumed(q, me, kResults)->v.store(count.word(++g), std::memory_order_release);
      }
    }
    if (moved) {
      host.wake();
      continue;
    }
    host.wait([&] { return can_publish() || can_reduce() || can_copy() || finished(); },
              [&] { return blockers(nullptr); },
              [&] {
                std::string s;
                blockers(&s);
                return s;
              });
  }
}

}  // namespace mpcomm::native
