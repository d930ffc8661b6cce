// The staged flow — how the staged broadcast and allgather move their bytes on one host: every byte is
// copied once into its sender's stage (HostLocal::stage, shared memory) and out of it by every reader.
// No process_vm_readv/writev, whose page pinning costs about as much as the copy itself (2-3 times a
// memcpy: docs/performance.md, "The ceiling: kernels and copies"), and no rank waits for a particular
// other one to take its turn, as in a tree or a ring.
//
// The sender's bytes go in pieces of kStagedPiece through the D = kStageBytes / kStagedPiece slots of
// its stage, piece k in slot k mod D:
//   1. every rank writes its op's fingerprint into its board tag (stamp: 1 + the op's sequence number);
//   2. the sender copies piece k into its slot once every reader has consumed piece k - D, with
//      streaming stores, then publishes: its stage's published word says k + 1 pieces (release), and it
//      wakes the local ranks. Streamed, the piece goes to memory: the sender need not first take the
//      slot's lines back from the readers' caches, and readers on another CPU read it from memory, not
//      out of the sender's cache, which is 4-6 times slower with the CPUs far apart ("Why runs differ"
//      in docs/performance.md), and streaming beats plain stores with the CPUs near too ("What made the
//      difference" there);
//   3. a reader, once the word says piece k is there, checks (on the first piece) that the sender's tag
//      holds the same call as its own (a Mismatch otherwise), copies the piece out (streamed when asked)
//      and says so in its consumed word for that stage;
//   4. a rank that can do neither waits (HostLocal::wait: bounded, watching the ranks it waits for);
//   5. a sender returns only once every reader has consumed every piece, so its stage is free for its
//      next call (only its owner ever writes a stage).
// Every rank publishes and consumes in one loop, so a rank that both sends and reads (the allgather)
// never waits for a slot while it could drain a stage another waits on: there is no cycle of waits.
// Bytes: B copied into the stage by the sender, B out of it by each reader.
#include <cstring>
#include <string>

#include "kernels/reduce.h"
#include "mpcomm/error.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

namespace {

// Pieces of 64, 128 and 256 KiB run even (4 ranks on 2 CPUs, broadcast and allgather, 256 KiB-16 MiB).
constexpr size_t kStagedPiece = size_t{128} << 10;
static_assert(HostLocal::kStageBytes % kStagedPiece == 0 && HostLocal::kStageBytes / kStagedPiece >= 2,
              "a stage holds two pieces or more");
size_t pieces_of(size_t bytes) { return (bytes + kStagedPiece - 1) / kStagedPiece; }


struct Incoming {
  StagedIn in;
  const char* area;
  const StageWord* published;
  StageWord* consumed;
  size_t pieces;
  size_t got = 0;
  bool checked = false;
};



}  // namespace

void staged_flow(AlgoCtx& c, const char* src, size_t bytes, const std::vector<int>& readers,
                 const std::vector<StagedIn>& in, bool stream) {
  HostLocal& host = c.host();
  const uint64_t stamp = c.op.seq + 1;
  const StageCount count(stamp);
  const size_t slots = HostLocal::kStageBytes / kStagedPiece;
  const int me = c.rank;
  char* mine = host.stage(me);
  StageWord* pub = host.stage_published(me);
  const size_t out_pieces = pieces_of(bytes);
  if (out_pieces > kStageCountMask) throw InvalidArgument("mpcomm: staged flow of " + std::to_string(bytes) + " bytes: too many pieces");
  std::vector<StageWord*> reader_words;
  for (int r : readers) reader_words.push_back(host.stage_consumed(me, r));
  std::vector<Incoming> ins;
  ins.reserve(in.size());
  for (const StagedIn& s : in) {
    ins.push_back({s, host.stage(s.from), host.stage_published(s.from), host.stage_consumed(s.from, me), pieces_of(s.bytes)});
  }

  // 1.
  const detail::Fingerprint fp = detail::fingerprint(c.op);
  host.board_tag(me)->write(stamp, &fp, sizeof fp);

  size_t published = 0;
  // The fewest pieces any reader has consumed of ours.
  auto least_consumed = [&] {
    size_t least = out_pieces;
    for (const StageWord* w : reader_words) least = std::min(least, count(w));
    return least;
  };
  auto can_publish = [&] { return published < out_pieces && (published < slots || least_consumed() + slots > published); };
  auto len = [](size_t total, size_t k) { return std::min(kStagedPiece, total - k * kStagedPiece); };
  // It published under our stamp after writing its tag, and cannot rewrite it before we consume.
  auto check_sender = [&](const Incoming& s) { check_board_tag(c, s.in.from, stamp, fp); };
  auto finished = [&] {
    if (published < out_pieces) return false;
    for (const Incoming& s : ins)
      if (s.got < s.pieces) return false;
    return least_consumed() == out_pieces;
  };
  auto can_move = [&] {
    if (can_publish()) return true;
    for (const Incoming& s : ins)
      if (s.got < s.pieces && count(s.published) > s.got) return true;
    return finished();
  };
  // The ranks this rank waits for, and what for.
  auto pending = [&] {
    std::vector<int> who;
    for (size_t i = 0; i < readers.size(); ++i)
      if (count(reader_words[i]) < std::min(out_pieces, published)) who.push_back(readers[i]);
    for (const Incoming& s : ins)
      if (s.got < s.pieces) who.push_back(s.in.from);
    return who;
  };
  auto what = [&] {
    std::string s;
    for (size_t i = 0; i < readers.size(); ++i) {
      const size_t got = count(reader_words[i]);
      if (got < std::min(out_pieces, published))
        s += (s.empty() ? "" : ", ") + std::string("rank ") + std::to_string(readers[i]) + " to copy piece " +
             std::to_string(got + 1) + " of " + std::to_string(out_pieces) + " out of this rank's stage";
    }
    for (const Incoming& in_s : ins)
      if (in_s.got < in_s.pieces)
        s += (s.empty() ? "" : ", ") + std::string("rank ") + std::to_string(in_s.in.from) + " to publish piece " +
             std::to_string(in_s.got + 1) + " of " + std::to_string(in_s.pieces) + " in its stage";
    return s + " (staged " + std::string(to_string(c.op.kind)) + ")";
  };

  while (!finished()) {
    bool moved = false;
    // 2.
    while (can_publish()) {
      const size_t k = published;
      copy_streamed(mine + (k % slots) * kStagedPiece, src + k * kStagedPiece, len(bytes, k));
      pub->v.store(count.word(++published), std::memory_order_release);
      moved = true;
    }
    // 3.
    for (Incoming& s : ins) {
      const size_t avail = count(s.published);
      if (avail > s.got && !s.checked) {
        check_sender(s);
        s.checked = true;
      }
      for (; s.got < avail; moved = true) {
        const size_t k = s.got;
        const char* from = s.area + (k % slots) * kStagedPiece;
        if (stream) {
          copy_streamed(s.in.dst + k * kStagedPiece, from, len(s.in.bytes, k));
        } else {
          std::memcpy(s.in.dst + k * kStagedPiece, from, len(s.in.bytes, k));
        }
        s.consumed->v.store(count.word(++s.got), std::memory_order_release);
      }
    }
    if (moved) {
      host.wake();
      continue;
    }
    // 4.
    host.wait(can_move, pending, what);
  }
}

}  // namespace mpcomm::native
