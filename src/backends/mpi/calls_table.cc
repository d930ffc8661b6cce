// Which MPI calls an op makes (calls_table.h): the built-in table and the choice from it.
#include "backends/mpi/calls_table.h"

#include "mpcomm/error.h"
#include "settings/settings.h"

namespace mpcomm::mpi {

namespace {

constexpr std::string_view kCalls = R"(mpcomm-tuning 1 backend=mpi
# Which MPI calls an op makes: blocking (Open MPI's tuned collectives on the calling thread; the watchdog
# ends the job when one outlasts the timeout) or nonblocking (libnbc's schedules, polled against the
# deadline). Measured: docs/performance.md, "The mpi backend's calls".
# A CPU per rank: blocking, but for the largest allreduces.
allreduce cpus_per_rank=[1,inf) bytes=[32M,inf) -> nonblocking
# Ranks outnumbering the CPUs: allreduce from 8 KiB and broadcast from 128 KiB non-blocking.
allreduce cpus_per_rank=(0,1) bytes=[8K,inf) -> nonblocking
broadcast cpus_per_rank=(0,1) bytes=[128K,inf) -> nonblocking
allreduce -> blocking
broadcast -> blocking
reduce -> blocking
allgather -> blocking
reduce_scatter -> blocking
gather -> blocking
scatter -> blocking
alltoall -> blocking
barrier -> blocking
alltoallv -> blocking
allgatherv -> blocking
)";

}  // namespace

const tuning::Vocabulary& calls_vocabulary() {
  static const tuning::Vocabulary v = [] {
    tuning::Vocabulary out(static_cast<size_t>(kNumOpKinds));
    for (int k = 0; k < kNumOpKinds; ++k) {
      const OpKind op = static_cast<OpKind>(k);
      tuning::Subject& s = out[static_cast<size_t>(k)];
      s.op = op;
      if (op == OpKind::send || op == OpKind::recv || op == OpKind::split) continue;
      s.name = std::string(to_string(op));
      s.choices = {"blocking", "nonblocking"};
      s.doc = "which MPI call every " + s.name + " makes";
    }
    return out;
  }();
  return v;
}

std::string_view builtin_calls_text() { return kCalls; }

const tuning::Table& builtin_calls_table() {
  static const tuning::Table t = tuning::parse_table(kCalls, "the built-in table", "mpi", calls_vocabulary());
  return t;
}

CallsSelection::CallsSelection(const Options& opts) {
  const std::string v = param_string(opts, "MPCOMM_MPI_CALLS");
  if (v == "blocking")
    forced_ = MpiCalls::blocking;
  else if (v == "nonblocking")
    forced_ = MpiCalls::nonblocking;
  else if (v != "auto")
    throw InvalidArgument("mpcomm: MPCOMM_MPI_CALLS='" + v + "': expected auto, blocking or nonblocking");
  if (const std::string path = param_string(opts, "MPCOMM_TUNING"); !path.empty())
    file_ = std::make_unique<tuning::Table>(tuning::load_table(path, "mpi", calls_vocabulary()));
}

void CallsSelection::fit(const tuning::Shape& shape) {
  std::vector<const tuning::Table*> tables;
  if (file_) tables.push_back(file_.get());
  tables.push_back(&builtin_calls_table());
  rows_ = tuning::ShapeRows(tables, shape, calls_vocabulary().size());
  ranks_ = shape.ranks;
}

MpiCalls CallsSelection::calls_for(const detail::Op& op) const {
  if (forced_) return *forced_;
  // The uneven ops' ranks share no size but allgatherv's total (its share per rank, rounded up).
  const auto n = static_cast<size_t>(ranks_);
  const size_t count = op.kind == OpKind::allgatherv ? (detail::recv_total(op) + n - 1) / n
                       : op.kind == OpKind::alltoallv ? 0
                                                      : op.count;
  const tuning::ShapeRows::Entry* e = rows_.find(static_cast<int>(op.kind), tuning::make_call(op.kind, op.dtype, count, ranks_));
  return e != nullptr && e->row->choice == "nonblocking" ? MpiCalls::nonblocking : MpiCalls::blocking;
}

std::string CallsSelection::describe() const {
  std::string s = file_ ? file_->source + (file_->has_section() ? "" : " (no section for backend mpi)") + ", then the built-in table"
                        : std::string("the built-in table");
  if (forced_) s += std::string("; MPCOMM_MPI_CALLS forces ") + (*forced_ == MpiCalls::blocking ? "blocking" : "nonblocking");
  return s;
}

}  // namespace mpcomm::mpi
