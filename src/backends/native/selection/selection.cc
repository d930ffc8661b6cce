// The native backend's choices from its table (selection.h).
#include "backends/native/selection/selection.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "log/log.h"
#include "settings/settings.h"
#include "mpcomm/error.h"
#include "backends/native/selection/call_facts.h"

namespace mpcomm::native {

const tuning::Vocabulary& vocabulary() {
  static const tuning::Vocabulary v = [] {
    tuning::Vocabulary out(static_cast<size_t>(kNumOpKinds + kNumChoices + 2));
    for (int k = 0; k < kNumOpKinds; ++k) {
      const OpKind op = static_cast<OpKind>(k);
      tuning::Subject& s = out[static_cast<size_t>(subject_of(op))];
      s.op = op;
      s.choices = algorithm_names(op);
      if (s.choices.empty()) continue;  // no algorithms: no rows
      s.name = std::string(to_string(op));
      s.call_facts = true;
      s.doc = "the algorithm of every " + s.name;
    }
    for (const ChoicePoint& c : choice_points()) {
      tuning::Subject& s = out[static_cast<size_t>(subject_of(c.id))];
      s.name = c.name;
      s.op = c.op;
      s.choices = c.choices;
      s.doc = c.doc;
    }
    const std::vector<std::string> paths = {"ring", "single_copy"};
    out[static_cast<size_t>(subject_of(PathPolicy::p2p))] = {
        "send.path", OpKind::send, paths, true, false,
        "how a send to a rank of this host travels: through the shared-memory ring, or read by the receiver "
        "straight out of the sender's buffer (single copy); bytes is the message's size"};
    out[static_cast<size_t>(subject_of(PathPolicy::collective))] = {
        "collective.path", OpKind::allreduce, paths, true, false,
        "how a message of a collective travels to a rank of this host (algorithms that route through the ring "
        "always do: ring_shm, two_copy); bytes is the message's size"};
    return out;
  }();
  return v;
}

const tuning::Table& builtin_table() {
  static const tuning::Table t = tuning::parse_table(builtin_table_text(), "the built-in table", "native", vocabulary());
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

// A row's size range as whole bytes [lo, hi]; false when it holds none.
bool whole_bytes(const tuning::Range& r, size_t* lo, size_t* hi) {
  const double l = std::isinf(r.lo) ? 0 : r.lo_open ? std::floor(r.lo) + 1 : std::ceil(r.lo);
  const double h = std::isinf(r.hi) ? static_cast<double>(SIZE_MAX) : r.hi_open ? std::ceil(r.hi) - 1 : std::floor(r.hi);
  if (h < 0 || h < l) return false;
  *lo = l <= 0 ? 0 : static_cast<size_t>(l);
  *hi = h >= static_cast<double>(SIZE_MAX) ? SIZE_MAX : static_cast<size_t>(h);
  return true;
}

// The message sizes that rows of one path (first match wins; sizes that no row matches: the ring) send by
// single copy, as spans: between two consecutive ends of the rows' ranges the first matching row is the
// same, so one size of each stretch decides it.
std::vector<PathPolicy::Span> single_copy_spans(const std::vector<tuning::ShapeRows::Entry>& rows, OpKind op) {
  std::vector<size_t> starts = {0};
  for (const auto& e : rows) {
    size_t lo = 0, hi = 0;
    if (!whole_bytes(e.row->bytes, &lo, &hi)) continue;
    starts.push_back(lo);
    if (hi != SIZE_MAX) starts.push_back(hi + 1);
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  std::vector<PathPolicy::Span> out;
  for (size_t i = 0; i < starts.size(); ++i) {
    tuning::Call c = tuning::make_call(op, DataType::uint8, starts[i], 1);
    bool single = false;
    for (const auto& e : rows)
      if (e.row->matches(c)) {
        single = e.row->choice == "single_copy";
        break;
      }
    if (!single) continue;
    const size_t end = i + 1 < starts.size() ? starts[i + 1] - 1 : SIZE_MAX;
    if (!out.empty() && out.back().hi + 1 == starts[i])
      out.back().hi = end;
    else
      out.push_back({starts[i], end});
  }
  return out;
}

}  // namespace

Selection::Selection(const Options& opts)
    : forced_(parse_forced(param_string(opts, "MPCOMM_ALGO"))), far_ns_(param_double(opts, "MPCOMM_FAR_NS")) {
  if (const std::string path = param_string(opts, "MPCOMM_TUNING"); !path.empty())
    file_ = std::make_unique<tuning::Table>(tuning::load_table(path, "native", vocabulary()));
}

void Selection::fit(const tuning::Shape& shape) {
  std::vector<const tuning::Table*> tables;
  if (file_) tables.push_back(file_.get());
  tables.push_back(&builtin_table());
  rows_ = tuning::ShapeRows(tables, shape, vocabulary().size());
  ranks_ = shape.ranks;
  for (const tuning::Table* t : tables)
    for (const tuning::Row& r : t->rows)
      if (r.subject < kNumOpKinds && r.matches(shape)) {
        asks_in_place_[static_cast<size_t>(r.op)] |= r.in_place != tuning::Want::any;
        asks_placement_[static_cast<size_t>(r.op)] |= r.placement_now != tuning::Placement::unknown;
      }
}

int Selection::pick(Choice which, const detail::Op& op) const {
  const tuning::ShapeRows::Entry* e = rows_.find(subject_of(which), tuning::make_call(op.kind, op.dtype, op.count, ranks_));
  if (e == nullptr) return 0;
  const auto& choices = vocabulary()[static_cast<size_t>(subject_of(which))].choices;
  return static_cast<int>(std::find(choices.begin(), choices.end(), e->row->choice) - choices.begin());
}

PathPolicy Selection::paths() const {
  PathPolicy p;
  p.set(PathPolicy::p2p, single_copy_spans(rows_.rows(subject_of(PathPolicy::p2p)), OpKind::send));
  p.set(PathPolicy::collective, single_copy_spans(rows_.rows(subject_of(PathPolicy::collective)), OpKind::allreduce));
  return p;
}

std::string Selection::describe() const {
  if (!file_) return "the built-in table";
  std::string others;
  for (const auto& s : file_->sections) others += (others.empty() ? "" : ", ") + s;
  return file_->source + (file_->has_section() ? "" : " (no section for backend native; it has: " + others + ")") +
         ", then the built-in table";
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
  const tuning::ShapeRows::Entry* e = rows_.find(subject_of(op.kind), call, facts, usable);
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
