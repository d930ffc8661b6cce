// From tune's measured rows to a selection table (tune.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "bootstrap/env.h"
#include "mpcomm/error.h"
#include "tune.h"
#include "backends/native/algorithms/algorithms.h"
#include "backends/native/selection/selection.h"
#include "tuning/selection_table.h"

namespace mpcomm::tune {

namespace {

constexpr double kInPlaceRowsFrom = 1 << 20;

// One (op, dtype class, bytes per rank, placement)'s candidates: median µs per algorithm that ran right
// (over the rounds: every row's median, then their median), and those that could not run.
struct Point {
  std::map<std::string, double> us;
  std::map<std::string, std::vector<double>> rounds;
  std::vector<std::string> skipped;
  void add(const std::string& alg, double p50) {
    std::vector<double>& v = rounds[alg];
    v.push_back(p50);
    us[alg] = median(v);
  }
  std::string best() const {
    std::string b;
    for (const auto& [alg, t] : us)
      if (b.empty() || t < us.at(b)) b = alg;
    return b;
  }
};

std::string us_note(const Point& p) {
  std::string s;
  for (const auto& [alg, t] : p.us) {
    char buf[64];
    std::snprintf(buf, sizeof buf, t < 10 ? "%s:%.2f" : t < 1000 ? "%s:%.1f" : "%s:%.0f", alg.c_str(), t);
    s += (s.empty() ? "" : ",") + std::string(buf);
  }
  return s;
}

// [lo, hi), or (lo, hi) with lo_open.
tuning::Range range(double lo, double hi, bool lo_open = false) {
  tuning::Range r;
  r.lo = lo;
  r.hi = hi;
  r.lo_open = lo_open;
  r.hi_open = true;
  return r;
}

tuning::Range exactly(double v) {
  tuning::Range r;
  r.lo = r.hi = v;
  return r;
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

OpKind op_kind(const std::string& op) {
  if (op == "sendrecv") return OpKind::send;
  for (int k = 0; k < kNumOpKinds; ++k)
    if (op == to_string(static_cast<OpKind>(k))) return static_cast<OpKind>(k);
  throw InvalidArgument("mpcomm tune: unknown op '" + op + "'");
}

Plan plan_of(const std::string& backend, const std::string& what) {
  Plan p;
  p.subject = p.op = what;
  const auto& measurable = bench::all_ops();
  const bool bench_op = std::find(measurable.begin(), measurable.end(), what) != measurable.end();
  if (backend == "mpi") {
    if (!bench_op || what == "sendrecv")
      throw InvalidArgument("mpcomm tune --backend mpi: --ops: '" + what + "' is not a collective that mpcomm bench measures");
    p.candidates = {"blocking", "nonblocking"};
    p.force = Plan::mpi_calls;
    return p;
  }
  if (backend == "auto") {
    if (!bench_op)
      throw InvalidArgument("mpcomm tune --backends: --ops: '" + what + "' is not an op that mpcomm bench measures");
    p.candidates = auto_candidates();
    p.force = Plan::backend_choice;
    return p;
  }
  if (backend != "native")
    throw InvalidArgument("mpcomm tune: --backend " + backend +
                          ": tune writes tables for native, mpi and auto (--backends)");
  if (what == "sendrecv" || what == "send.path" || what == "collective.path") {
    p.per_message = true;
    p.force = Plan::table_row;
    p.candidates = {"ring", "single_copy"};
    p.subject = what == "collective.path" ? what : "send.path";
    p.op = what == "collective.path" ? "allgather" : "sendrecv";
    if (what == "collective.path") p.algorithm = "ring";
    return p;
  }
  for (const native::ChoicePoint& c : native::choice_points())
    if (what == c.name) {
      p.op = std::string(to_string(c.op));
      p.algorithm = c.algorithm;
      p.candidates = c.choices;
      p.force = Plan::table_row;
      return p;
    }
  if (bench_op) p.candidates = native::algorithm_names(op_kind(what));
  if (p.candidates.empty()) {
    std::string subjects = "send.path, collective.path";
    for (const native::ChoicePoint& c : native::choice_points()) subjects += std::string(", ") + c.name;
    throw InvalidArgument("mpcomm tune: --ops: '" + what + "' is neither an op that mpcomm bench measures with native "
                          "algorithms to choose from (allreduce, broadcast, reduce, allgather, reduce_scatter, gather, "
                          "scatter, alltoall) nor sendrecv or a protocol choice of the native table (" + subjects + ")");
  }
  return p;
}

std::string default_ops(const std::string& backend, int hosts) {
  if (backend == "auto") return "allreduce,broadcast,allgather,reduce_scatter,sendrecv";
  if (backend == "mpi") return "allreduce,broadcast,reduce,allgather,reduce_scatter,gather,scatter,alltoall";
  std::string ops = "allreduce,broadcast,reduce,allgather,reduce_scatter";
  if (hosts > 1) return ops + ",broadcast.hierarchical.local";
  ops += ",sendrecv,collective.path";
  for (const native::ChoicePoint& c : native::choice_points())
    if (c.id != native::Choice::broadcast_hierarchical_local) ops += std::string(",") + c.name;
  return ops;
}

Shape shape_of(int ranks, int hosts, long cpus) {
  Shape s{ranks, hosts, 0, cpus};
  std::vector<int> per(static_cast<size_t>(hosts), 0);
  for (int r = 0; r < ranks; ++r) ++per[static_cast<size_t>(emulated_host_of_rank(r, ranks, hosts))];
  s.per_host = *std::max_element(per.begin(), per.end());
  return s;
}

std::string table_text(const std::string& backend, const Shape& s, const std::vector<bench::Row>& rows,
                       const std::vector<std::string>& comment, const std::string& machine) {
  // (subject, dtype class) -> bytes per rank (per message) -> [out of place, in place]
  std::map<std::pair<std::string, tuning::DtypeClass>, std::map<double, Point[2]>> points;
  std::set<std::string> reasons;
  int message_class = -1;  // a message's path has no data type: the first class measured decides
  for (const bench::Row& r : rows) {
    const Plan plan = plan_of(backend, r.op);
    const OpKind op = op_kind(plan.op);
    const DataType dt = parse_dtype(r.dtype);
    if (plan.per_message) {
      const int k = static_cast<int>(tuning::dtype_class(dt));
      if (message_class < 0) message_class = k;
      if (k != message_class) continue;
    }
    const bool blocks = op == OpKind::allgather || op == OpKind::reduce_scatter || op == OpKind::gather ||
                        op == OpKind::scatter || op == OpKind::alltoall;
    const double per_rank = static_cast<double>(r.bytes) / (blocks ? s.ranks : 1);
    Point& p = points[{plan.subject, tuning::dtype_class(dt)}][per_rank][r.inplace ? 1 : 0];
    if (!r.refused.empty()) {
      if (std::find(p.skipped.begin(), p.skipped.end(), r.algorithm) == p.skipped.end())
        p.skipped.push_back(r.algorithm);
      // "...: MPCOMM_ALGO forces OP=ALG, which cannot run here: WHY (the call's shape)": WHY.
      std::string why = r.refused;
      if (const size_t at = why.find("cannot run here: "); at != std::string::npos) why = why.substr(at + 17);
      if (const size_t shape = why.rfind(" ("); shape != std::string::npos && why.ends_with("bytes per rank)")) why.resize(shape);
      reasons.insert(plan.subject + " " + r.algorithm + ": " + why);
    } else if (r.wrong == 0) {
      p.add(r.algorithm, r.p50_us);
    } else {
      reasons.insert(plan.subject + " " + r.algorithm + ": wrong results at " + tuning::format_size(per_rank) +
                     " per rank (left out)");
    }
  }
  std::string out = tuning::format_header(backend, machine) + "\n";
  for (const auto& line : comment) out += "# " + line + "\n";
  out += "# Rows: per subject and measured size (bytes per rank; for send.path and collective.path per message) the\n"
         "# fastest candidate by its median time, from that size to the next one measured; us= every candidate's\n"
         "# median in microseconds, skipped= those that cannot run there:\n";
  for (const auto& why : reasons) out += "#   " + why + "\n";
  // The shape: its ranks and hosts, and whether ranks outnumber the CPUs of a host.
  tuning::Row base;
  base.ranks = exactly(s.ranks);
  base.hosts = exactly(s.hosts);
  base.per_host = exactly(s.per_host);
  base.cpus_per_rank = s.cpus >= s.per_host ? range(1, std::numeric_limits<double>::infinity()) : range(0, 1, true);
  // auto's rows hold for every data type when one class was measured: which backend is fastest follows
  // the size, and a call of another class should not fall back to native for want of a row.
  std::set<tuning::DtypeClass> measured;
  for (const auto& kv : points) measured.insert(kv.first.second);
  const size_t classes = measured.size();
  for (const auto& [key, by_size] : points) {
    const Plan plan = plan_of(backend, key.first);
    // Only a native op's rows may ask whether the call is in place (agreed at the call).
    const bool in_place_rows = backend == "native" && plan.force == Plan::algorithm_setting;
    out += "\n";
    for (auto it = by_size.begin(); it != by_size.end(); ++it) {
      const double lo = it == by_size.begin() ? 0 : it->first;
      const auto next = std::next(it);
      const double hi = next == by_size.end() ? std::numeric_limits<double>::infinity() : next->first;
      const Point* pl = it->second;
      tuning::Row row = base;
      row.op = op_kind(plan.op);
      row.subject_name = plan.subject;
      if (plan.per_message) {
        row.placement = s.placement;  // which path is faster depends on where the CPUs are
      } else if (backend != "auto" || classes > 1) {
        row.dtypes = 1 << static_cast<int>(key.second);
      }
      // auto's two ranks of one host: which backend wins depends on where their CPUs are (agreed at
      // creation).
      if (backend == "auto" && s.ranks == 2 && s.hosts == 1) row.placement = s.placement;
      row.bytes = range(lo, hi);
      const std::string out_best = pl[0].best(), in_best = pl[1].best();
      auto emit = [&](const Point& p, const std::string& best, tuning::Want in_place) {
        if (best.empty()) return;  // nothing ran right there
        tuning::Row r = row;
        r.in_place = in_place;
        r.choice = best;
        r.notes = "at=" + tuning::format_size(it->first) + " us=" + us_note(p);
        std::string skipped;
        for (const auto& a : p.skipped) skipped += (skipped.empty() ? "" : ",") + a;
        if (!skipped.empty()) r.notes += " skipped=" + skipped;
        out += tuning::format_row(r) + "\n";
      };
      if (in_place_rows && !in_best.empty() && in_best != out_best && it->first >= kInPlaceRowsFrom) {
        emit(pl[0], out_best, tuning::Want::no);
        emit(pl[1], in_best, tuning::Want::yes);
      } else {
        emit(pl[0], out_best, tuning::Want::any);
      }
    }
  }
  return out;
}

std::string merged_table(const std::string& old, const std::string& backend, const std::string& text) {
  // Sections start at their header lines; what comes before the first belongs to none and is dropped.
  std::string out;
  std::istringstream lines(old);
  bool keep = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("mpcomm-tuning ", 0) == 0) {
      std::istringstream words(line);
      std::string word, of;
      while (words >> word)
        if (word.rfind("backend=", 0) == 0) of = word.substr(8);
      keep = of != backend;
    }
    if (keep) out += line + "\n";
  }
  if (!out.empty() && !out.ends_with("\n\n")) out += "\n";
  return out + text;
}

}  // namespace mpcomm::tune
