// How a native communicator makes every per-call choice: from its selection table, whose rows are data
// (tuning/selection_table.h), read once at creation. What rows choose (the vocabulary):
//  - an op's algorithm ("allreduce -> ring"): an algorithm MPCOMM_ALGO forces for the op, else the first
//    row that fits of the MPCOMM_TUNING file, then of the built-in table (builtin_table.cc). A row fits
//    when its conditions hold for the communicator's facts (agreed at creation: world_facts.h) and the
//    call, and its algorithm can run here (its needs, algorithms.h);
//  - the algorithms' protocol choices ("allgather.direct.stores -> streaming"; algorithms.h, Choice),
//    from the call's size and the facts;
//  - how messages to ranks of this host travel ("send.path", "collective.path": ring or single_copy),
//    made into the engine's PathPolicy once, at creation.
// Everything is read and checked when the communicator is created: an unknown MPCOMM_ALGO name, a
// malformed tuning file are an InvalidArgument then.
//
// Per call an algorithm choice costs a lookup in a one-entry cache per op kind (size and data type
// class). An algorithm row that asks the per-call facts (in_place, placement_now) costs the round of
// small frames that agrees them (call_facts.h); `mpcomm info --table` marks such rows. With
// MPCOMM_DEBUG=INFO each choice is logged once per (op, size bucket, algorithm) with its reason.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/native/algorithms/algorithms.h"
#include "backends/native/engine/path_policy.h"
#include "tuning/selection_table.h"

namespace mpcomm::native {

// The subjects of the native backend's rows: index k < kNumOpKinds is op k's algorithm (unnamed for an
// op without algorithms), then the algorithms' choice points in Choice order, then the two paths.
const tuning::Vocabulary& vocabulary();
inline int subject_of(OpKind op) { return static_cast<int>(op); }
inline int subject_of(Choice c) { return kNumOpKinds + static_cast<int>(c); }
inline int subject_of(PathPolicy::Kind k) { return kNumOpKinds + kNumChoices + static_cast<int>(k); }
// "send.path" and "collective.path": their choices, in this order.
inline constexpr int kPathRing = 0, kPathSingleCopy = 1;

// The built-in table: its text (builtin_table.cc), and the table read from it once (it is part of the
// program).
std::string_view builtin_table_text();
const tuning::Table& builtin_table();

class Selection final : public Choices {
 public:
  // Reads MPCOMM_ALGO, MPCOMM_FAR_NS and the MPCOMM_TUNING file of `opts` (before the communicator's
  // setup, so that bad input fails at once), ...
  explicit Selection(const Options& opts);
  // ... and keeps the rows that fit the communicator's shape.
  void fit(const tuning::Shape& shape);

  // The algorithm to run c.op with. Every rank of the call calls it; it may agree facts with the others
  // in frames of c.op. Throws Unsupported (on every rank alike) when MPCOMM_ALGO forces an algorithm
  // that cannot run for this call.
  const Algorithm& choose(AlgoCtx& c) {
    if (c.op.reproducible) return reproducible(c.op.kind);
    if (c.op.v != nullptr) return choose_uneven(c);
    Memo& m = memo_[static_cast<size_t>(c.op.kind)];
    if (m.algorithm != nullptr && m.count == c.op.count && m.dtype == c.op.dtype) return *m.algorithm;
    return choose_anew(c, c.op.count);
  }
  // A reproducible sum this backend runs itself (NativeBackend::runs_reproducible): the direct algorithm
  // of its kind, whose owner of each piece reads every rank's values and sums them in one pass.
  static const Algorithm& reproducible(OpKind kind) { return *find_algorithm(kind, "direct"); }
  // Whether MPCOMM_ALGO leaves `kind` free or forces `name` for it.
  bool allows(OpKind kind, std::string_view name) const {
    const Algorithm* a = forced_[static_cast<size_t>(kind)];
    return a == nullptr || name == a->name;
  }
  // Choices: an algorithm's protocol choice for this call (the index of the chosen one).
  int pick(Choice which, const detail::Op& op) const override;
  // Which messages go by single copy, from the send.path and collective.path rows (the engine's).
  PathPolicy paths() const;

  // Which tables answer, for `mpcomm info` and the log: "tuning file PATH, then the built-in table".
  std::string describe() const;
  // MPCOMM_FAR_NS: above this a cache line's round trip between ranks 0 and 1 counts as far.
  double far_ns() const { return far_ns_; }
  // The MPCOMM_TUNING table (null without one).
  const tuning::Table* file() const { return file_.get(); }

 private:
  // `count`: what the table sees as the call's count (the same on every rank).
  const Algorithm& choose_anew(AlgoCtx& c, size_t count);
  // alltoallv and allgatherv: the count every rank shares (allgatherv: its total's share per rank,
  // rounded up; alltoallv: 0), remembered as the others' is.
  const Algorithm& choose_uneven(AlgoCtx& c);
  // Logs a choice once per op, size bucket and algorithm.
  void log_choice(const AlgoCtx& c, const Algorithm& a, const std::string& why);

  std::array<const Algorithm*, kNumOpKinds> forced_{};
  std::unique_ptr<tuning::Table> file_;
  tuning::ShapeRows rows_;
  int ranks_ = 1;
  std::array<bool, kNumOpKinds> asks_in_place_{}, asks_placement_{};
  double far_ns_ = 0;
  // The last choice per op kind that no per-call fact decided.
  struct Memo {
    const Algorithm* algorithm = nullptr;
    size_t count = 0;
    DataType dtype = DataType::uint8;
  };
  std::array<Memo, kNumOpKinds> memo_{};
  // Per op kind and size bucket (bit width of the byte count), the algorithms already logged (bit: index
  // in all_algorithms()).
  std::array<std::array<uint64_t, 65>, kNumOpKinds> logged_{};
};

}  // namespace mpcomm::native
