// The native backend's algorithm choice (native_selection.h).
#include "backends/native/selection/selection.h"

#include <bit>

#include "log/log.h"
#include "settings/settings.h"
#include "mpcomm/error.h"
#include "backends/native/selection/call_facts.h"

namespace mpcomm::native {

const tuning::Table& builtin_table() {
  static const tuning::Table t =
      tuning::parse_table(builtin_table_text(), "the built-in table", "native", algorithm_names);
  return t;
}

namespace {

std::string list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// MPCOMM_ALGO="op=alg,op=alg".
std::array<const Algorithm*, kNumOpKinds> parse_forced(const std::string& spec) {
  std::array<const Algorithm*, kNumOpKinds> forced{};
  for (size_t pos = 0; pos < spec.size();) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string op = item.substr(0, eq), name = eq == std::string::npos ? "" : item.substr(eq + 1);
    int kind = -1;
    for (int k = 0; k < kNumOpKinds; ++k)
      if (op == to_string(static_cast<OpKind>(k)) && !algorithm_names(static_cast<OpKind>(k)).empty()) kind = k;
    if (eq == std::string::npos || kind < 0)
      throw InvalidArgument("mpcomm: MPCOMM_ALGO entry '" + item +
                            "': expected OP=ALGORITHM with OP one of allreduce, broadcast, reduce, allgather, reduce_scatter, "
                            "gather, scatter, alltoall, barrier, alltoallv, allgatherv");
    const OpKind k = static_cast<OpKind>(kind);
    const Algorithm* a = find_algorithm(k, name);
    if (a == nullptr)
      throw InvalidArgument("mpcomm: MPCOMM_ALGO entry '" + item + "': " + op + " has no native algorithm '" + name +
                            "' (expected one of " + list(algorithm_names(k)) + ")");
    if (forced[static_cast<size_t>(kind)] != nullptr)
      throw InvalidArgument("mpcomm: MPCOMM_ALGO entry '" + item + "': " + op + " is forced twice");
    forced[static_cast<size_t>(kind)] = a;
  }
  return forced;
}

// Whether this rank runs the op in place (the layouts of communicator.h).
bool runs_in_place(const detail::Op& op, int rank) {
  const char* s = static_cast<const char*>(op.send);
  const char* r = static_cast<const char*>(op.recv);
  const size_t b = op.bytes();
  switch (op.kind) {
    case OpKind::allgather: return s == r + static_cast<size_t>(rank) * b;
    case OpKind::reduce_scatter: return r == s + static_cast<size_t>(rank) * b;
    case OpKind::allgatherv: return s == r + op.v->recv_displs[static_cast<size_t>(rank)] * dtype_size(op.dtype);
    case OpKind::alltoallv: return false;
    case OpKind::broadcast:
    case OpKind::barrier: return false;
    default: return s == r;
  }
}

std::string reason_of(const tuning::ShapeRows::Entry& e) {
  return e.table->source + ", line " + std::to_string(e.row->line);
}

}  // namespace

Selection::Selection(const Options& opts)
    : forced_(parse_forced(param_string(opts, "MPCOMM_ALGO"))), far_ns_(param_double(opts, "MPCOMM_FAR_NS")) {
  if (const std::string path = param_string(opts, "MPCOMM_TUNING"); !path.empty())
    file_ = std::make_unique<tuning::Table>(tuning::load_table(path, "native", algorithm_names));
}

void Selection::fit(const tuning::Shape& shape) {
  std::vector<const tuning::Table*> tables;
  if (file_) tables.push_back(file_.get());
  tables.push_back(&builtin_table());
  rows_ = tuning::ShapeRows(tables, shape);
  for (const tuning::Table* t : tables)
    for (const tuning::Row& r : t->rows)
      if (r.matches(shape)) {
        asks_in_place_[static_cast<size_t>(r.op)] |= r.in_place != tuning::Want::any;
        asks_placement_[static_cast<size_t>(r.op)] |= r.placement_now != tuning::Placement::unknown;
      }
}

std::string Selection::describe() const {
  return file_ ? file_->source + ", then the built-in table" : std::string("the built-in table");
}

const Algorithm& Selection::choose_uneven(AlgoCtx& c) {
  const auto n = static_cast<size_t>(c.size);
  const size_t count = c.op.kind == OpKind::allgatherv ? (detail::recv_total(c.op) + n - 1) / n : 0;
  Memo& m = memo_[static_cast<size_t>(c.op.kind)];
  if (m.algorithm != nullptr && m.count == count && m.dtype == c.op.dtype) return *m.algorithm;
  return choose_anew(c, count);
}

const Algorithm& Selection::choose_anew(AlgoCtx& c, size_t count) {
  const detail::Op& op = c.op;
  const size_t kind = static_cast<size_t>(op.kind);
  if (const Algorithm* a = forced_[kind]) {
    if (const char* why = cannot_run(*a, c))
      throw Unsupported("mpcomm: " + detail::describe(op, c.rank, c.size, "native") + ": MPCOMM_ALGO forces " +
                        std::string(to_string(op.kind)) + "=" + a->name + ", which cannot run here: " + why + " (" +
                        std::to_string(c.size) + " ranks on " + std::to_string(c.topo.num_hosts()) + " host(s), " +
                        std::to_string(op.bytes()) + " bytes per rank)");
    memo_[kind] = {a, count, op.dtype};
    log_choice(c, *a, "forced by MPCOMM_ALGO");
    return *a;
  }
  const tuning::Call call = tuning::make_call(op.kind, op.dtype, count, c.size);
  bool asked = false;
  native::CallAgreement agreed;
  auto facts = [&] {
    asked = true;
    agreed = agree_at_call(c.e, op.seq, asks_placement_[kind], asks_in_place_[kind], runs_in_place(op, c.rank), far_ns_);
    tuning::CallFacts f;
    f.in_place = agreed.any_in_place;
    f.placement = agreed.distance == CpuDistance::far    ? tuning::Placement::far
                  : agreed.distance == CpuDistance::near ? tuning::Placement::near
                                                         : tuning::Placement::unknown;
    return f;
  };
  auto usable = [&](const tuning::Row& r) { return cannot_run(*find_algorithm(op.kind, r.choice), c) == nullptr; };
  const tuning::ShapeRows::Entry* e = rows_.find(call, facts, usable);
  if (e == nullptr)
    throw Internal("mpcomm: " + detail::describe(op, c.rank, c.size, "native") + ": no row of " + describe() + " fits this call");
  const Algorithm& a = *find_algorithm(op.kind, e->row->choice);
  if (!asked) memo_[kind] = {&a, count, op.dtype};
  if (log_enabled(LogLevel::info)) {
    std::string why = reason_of(*e);
    if (asked && asks_in_place_[kind]) why += agreed.any_in_place ? "; a rank runs in place" : "; no rank runs in place";
    if (asked && asks_placement_[kind])
      why += agreed.distance == CpuDistance::far    ? "; CPUs far apart now"
             : agreed.distance == CpuDistance::near ? "; CPUs near each other now"
                                                    : "; where the CPUs are is not known";
    log_choice(c, a, why);
  }
  return a;
}

void Selection::log_choice(const AlgoCtx& c, const Algorithm& a, const std::string& why) {
  if (c.rank != 0 || !log_enabled(LogLevel::info)) return;
  const size_t bytes = c.op.bytes();
  const int bucket = bytes == 0 ? 0 : std::bit_width(bytes);
  const auto index = static_cast<uint64_t>(&a - all_algorithms().data()) % 64;
  uint64_t& seen = logged_[static_cast<size_t>(c.op.kind)][static_cast<size_t>(bucket)];
  if ((seen >> index & 1) != 0) return;
  seen |= uint64_t{1} << index;
  const size_t lo = bucket == 0 ? 0 : size_t{1} << (bucket - 1), hi = bucket == 0 ? 0 : (size_t{1} << bucket) - 1;
  MPCOMM_LOG(info, "native: %s, %zu-%zu bytes per rank, %d ranks: %s (%s)", std::string(to_string(c.op.kind)).c_str(),
             lo, hi, c.size, a.name, why.c_str());
}

}  // namespace mpcomm::native
