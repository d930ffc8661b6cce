// The auto backend's routing (router.h).
#include "backends/auto/router.h"

#include <algorithm>
#include <bit>

#include "backends/auto/route_table.h"
#include "log/log.h"

namespace mpcomm::autosel {

Router::Router(std::shared_ptr<const tuning::Table> table, const tuning::Shape& shape,
               std::vector<std::string> children, int forced, int rank)
    : table_(std::move(table)),
      shape_(shape),
      children_(std::move(children)),
      rows_({table_.get()}, shape_, vocabulary().size()),
      forced_(forced),
      rank_(rank) {}

int Router::route_anew(const detail::Op& op) {
  const OpKind subject_op = op.kind == OpKind::recv ? OpKind::send : op.kind;
  // The count every rank of the call shares: allgatherv's total's share per rank (rounded up), none for
  // alltoallv (as native's table sees them).
  size_t count = op.count;
  if (op.kind == OpKind::allgatherv) {
    const size_t n = static_cast<size_t>(shape_.ranks);
    count = (detail::recv_total(op) + n - 1) / n;
  } else if (op.kind == OpKind::alltoallv) {
    count = 0;
  }
  const tuning::Call call = tuning::make_call(subject_op, op.dtype, count, shape_.ranks);
  const auto usable = [&](const tuning::Row& r) {
    return std::find(children_.begin(), children_.end(), r.choice) != children_.end();
  };
  const tuning::ShapeRows::Entry* e = rows_.find(
      subject_of(op.kind), call, [] { return tuning::CallFacts{}; }, usable);
  // No row: native, which every auto communicator holds (its first child).
  const int child =
      e != nullptr ? static_cast<int>(std::find(children_.begin(), children_.end(), e->row->choice) - children_.begin())
                   : 0;
  if (!op.uneven()) memo_[static_cast<size_t>(op.kind)] = {child, op.count, op.dtype};
  if (log_enabled(LogLevel::info)) log_decision(op, call.bytes, child, e != nullptr ? e->row : nullptr);
  return child;
}

void Router::log_decision(const detail::Op& op, double bytes, int child, const tuning::Row* row) {
  const bool p2p = op.kind == OpKind::send || op.kind == OpKind::recv;
  if (rank_ < 0 || (!p2p && rank_ != 0)) return;
  const auto b = static_cast<uint64_t>(bytes);
  const int bucket = std::bit_width(b);
  const size_t k = static_cast<size_t>(subject_of(op.kind));
  if (logged_[k][static_cast<size_t>(bucket)]) return;
  logged_[k][static_cast<size_t>(bucket)] = true;
  const std::string name = vocabulary()[k].name;
  const std::string lo = bucket == 0 ? "0" : tuning::format_size(static_cast<double>(uint64_t{1} << (bucket - 1)));
  const std::string hi = tuning::format_size(bucket == 0 ? 1.0 : static_cast<double>(uint64_t{1} << (bucket - 1)) * 2);
  const std::string why =
      row != nullptr ? "line " + std::to_string(row->line) + " of " + table_->source + ": " + tuning::format_row(*row)
                     : "no row of " + table_->source + " matches: native, the default";
  MPCOMM_LOG(info, "auto rank %d: %s of %s bytes in [%s,%s) on %d ranks, %d hosts -> %s (%s)", rank_, name.c_str(),
             std::to_string(b).c_str(), lo.c_str(), hi.c_str(), shape_.ranks, shape_.hosts,
             children_[static_cast<size_t>(child)].c_str(), why.c_str());
}

}  // namespace mpcomm::autosel
