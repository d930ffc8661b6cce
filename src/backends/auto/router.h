// Which of the auto backend's children runs a call: a pure function of the call (op, data type class,
// bytes per rank), the communicator's facts agreed at its creation (tuning::Shape: ranks, hosts, ranks per
// host, CPUs per rank, single copy, placement) and the table every rank took from rank 0 — so that every
// rank of a collective, and both ends of a send, route alike. No per-call fact is asked (no in_place, no
// placement_now): asking would cost a round of frames on every call.
//
// A call costs a compare against a one-entry memo per op kind (count and data type); the uneven ops,
// whose count differs between ranks, look the rows up each time. With MPCOMM_DEBUG=INFO each decision
// is logged once per (op, size bucket) with the row that made it.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/op.h"
#include "tuning/profile.h"
#include "tuning/selection_table.h"

namespace mpcomm::autosel {

class Router {
 public:
  // `children`: the backends in use, in child order (the table's choices name them). `forced` >= 0: every
  // call goes to that child (device buffers with nccl present). `rank` logs the decisions (rank 0 the
  // collectives', every rank its sends' and receives'; negative: none, for tools that ask).
  // `profile` (may be null): the cost model's constants every rank took from rank 0 (this machine's profile,
  // `mpcomm plan --calibrate`); a call no row matches goes to the child it predicts fastest, among the children
  // it has constants for, instead of native.
  Router(std::shared_ptr<const tuning::Table> table, const tuning::Shape& shape, std::vector<std::string> children,
         int forced, int rank, std::shared_ptr<const tuning::Profile> profile = nullptr);

  // The child for `op` (validated by the front door).
  int route(const detail::Op& op) {
    if (forced_ >= 0) return forced_;
    if (op.uneven()) return route_anew(op);
    const Memo& m = memo_[static_cast<size_t>(op.kind)];
    if (m.child >= 0 && m.count == op.count && m.dtype == op.dtype) return m.child;
    return route_anew(op);
  }

  const std::shared_ptr<const tuning::Table>& table() const { return table_; }
  const std::shared_ptr<const tuning::Profile>& profile() const { return profile_; }

 private:
  int route_anew(const detail::Op& op);
  // The child the profile predicts fastest for a call no row matches (-1: it predicts none of them); `why`
  // says so for the log.
  int model_choice(const detail::Op& op, const tuning::Call& call, std::string* why) const;
  void log_decision(const detail::Op& op, double bytes, int child, const tuning::Row* row, const std::string& why);

  std::shared_ptr<const tuning::Table> table_;
  std::shared_ptr<const tuning::Profile> profile_;
  tuning::Shape shape_;
  std::vector<std::string> children_;
  tuning::ShapeRows rows_;
  int forced_ = -1;
  int rank_ = 0;
  struct Memo {
    int child = -1;
    size_t count = 0;
    DataType dtype = DataType::uint8;
  };
  std::array<Memo, kNumOpKinds> memo_{};
  // Per op kind, the size buckets (bit width of the byte count) already logged.
  std::array<std::array<bool, 65>, kNumOpKinds> logged_{};
};

}  // namespace mpcomm::autosel
