// The auto backend's routing (router.h).
#include "backends/auto/router.h"

#include <algorithm>
#include <bit>

#include "backends/auto/route_table.h"
#include "log/log.h"

namespace mpcomm::autosel {

Router::Router(std::shared_ptr<const tuning::Table> table, const tuning::Shape& shape,
               std::vector<std::string> children, int forced, int rank, std::shared_ptr<const tuning::Profile> profile)
    : table_(std::move(table)),
      profile_(std::move(profile)),
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
  // No row: the child the cost model predicts fastest, else native, which every auto communicator holds (its
  // first child).
  std::string why;
  int child = 0;
  if (e != nullptr) {
    child = static_cast<int>(std::find(children_.begin(), children_.end(), e->row->choice) - children_.begin());
  } else if (int m = model_choice(op, call, &why); m >= 0) {
    child = m;
  }
  if (!op.uneven()) memo_[static_cast<size_t>(op.kind)] = {child, op.count, op.dtype};
  if (log_enabled(LogLevel::info)) log_decision(op, call.bytes, child, e != nullptr ? e->row : nullptr, why);
  return child;
}

int Router::model_choice(const detail::Op& op, const tuning::Call& call, std::string* why) const {
  if (!profile_ || shape_.hosts < 1 || shape_.ranks % shape_.hosts != 0) return -1;
  // The model's ops and sizes (nccl-tests'): the gathered buffer for allgather, the input for reduce_scatter.
  std::string name;
  double bytes = call.bytes;
  switch (op.kind) {
    case OpKind::allreduce:
      name = "allreduce";
      break;
    case OpKind::broadcast:
      name = "broadcast";
      break;
    case OpKind::allgather:
      name = "allgather", bytes = call.total;
      break;
    case OpKind::reduce_scatter:
      name = "reduce_scatter", bytes = call.total;
      break;
    case OpKind::send:
    case OpKind::recv:
      name = "sendrecv";
      break;
    default:
      return -1;
  }
  const tuning::CommShape shape{shape_.ranks, shape_.hosts, profile_->cores_per_host, profile_->emulated_hosts};
  int best = -1;
  double best_s = 0;
  for (size_t k = 0; k < children_.size(); ++k) {
    auto it = profile_->backends.find(children_[k]);
    if (it == profile_->backends.end()) continue;
    const double t = tuning::predict(it->second, name, bytes, shape).seconds;
    if (best < 0 || t < best_s) best = static_cast<int>(k), best_s = t;
  }
  if (best >= 0)
    *why = "no row of " + table_->source + " matches: the cost model of profile " + profile_->name + " predicts " +
           children_[static_cast<size_t>(best)] + " fastest (" + std::to_string(best_s * 1e6) + " us)";
  return best;
}

void Router::log_decision(const detail::Op& op, double bytes, int child, const tuning::Row* row,
                          const std::string& model_why) {
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
      : !model_why.empty() ? model_why
                           : "no row of " + table_->source + " matches: native, the default";
  MPCOMM_LOG(info, "auto rank %d: %s of %s bytes in [%s,%s) on %d ranks, %d hosts -> %s (%s)", rank_, name.c_str(),
             std::to_string(b).c_str(), lo.c_str(), hi.c_str(), shape_.ranks, shape_.hosts,
             children_[static_cast<size_t>(child)].c_str(), why.c_str());
}

}  // namespace mpcomm::autosel
