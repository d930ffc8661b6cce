// From tune's measured rows to a selection table (tune.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "bootstrap/env.h"
#include "mpcomm/error.h"
#include "tune.h"
#include "backends/native/algorithms/algorithms.h"
#include "backends/native/selection/selection.h"
#include "tuning/selection_table.h"

namespace mpcomm::tune {

namespace {

constexpr double kInPlaceRowsFrom = 1 << 20;

// One (op, dtype class, bytes per rank, placement)'s candidates: median µs per algorithm that ran right,
// and those that could not run.
struct Point {
  std::map<std::string, double> us;
  std::vector<std::string> skipped;
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

std::vector<std::string> candidates(const std::string& op) {
  if (op == "sendrecv") return {"ring", "single_copy"};
  return native::algorithm_names(op_kind(op));
}

OpKind op_kind(const std::string& op) {
  if (op == "sendrecv") return OpKind::send;
  for (int k = 0; k < kNumOpKinds; ++k)
    if (op == to_string(static_cast<OpKind>(k))) return static_cast<OpKind>(k);
  throw InvalidArgument("mpcomm tune: unknown op '" + op + "'");
}

Shape shape_of(int ranks, int hosts, long cpus) {
  Shape s{ranks, hosts, 0, cpus};
  std::vector<int> per(static_cast<size_t>(hosts), 0);
  for (int r = 0; r < ranks; ++r) ++per[static_cast<size_t>(emulated_host_of_rank(r, ranks, hosts))];
  s.per_host = *std::max_element(per.begin(), per.end());
  return s;
}

std::string table_text(const Shape& s, const std::vector<bench::Row>& rows, const std::vector<std::string>& comment) {
  // (op, dtype class) -> bytes per rank -> [out of place, in place]
  std::map<std::pair<OpKind, tuning::DtypeClass>, std::map<double, Point[2]>> points;
  std::set<std::string> reasons;
  int send_class = -1;  // a send's path has no data type: the first class measured decides
  for (const bench::Row& r : rows) {
    const OpKind op = op_kind(r.op);
    const DataType dt = parse_dtype(r.dtype);
    if (op == OpKind::send) {
      const int k = static_cast<int>(tuning::dtype_class(dt));
      if (send_class < 0) send_class = k;
      if (k != send_class) continue;
    }
    const bool blocks = op == OpKind::allgather || op == OpKind::reduce_scatter || op == OpKind::gather ||
                        op == OpKind::scatter || op == OpKind::alltoall;
    const double per_rank = static_cast<double>(r.bytes) / (blocks ? s.ranks : 1);
    Point& p = points[{op, tuning::dtype_class(dt)}][per_rank][r.inplace ? 1 : 0];
    if (!r.refused.empty()) {
      p.skipped.push_back(r.algorithm);
      // "...: MPCOMM_ALGO forces OP=ALG, which cannot run here: WHY (the call's shape)": WHY.
      std::string why = r.refused;
      if (const size_t at = why.find("cannot run here: "); at != std::string::npos) why = why.substr(at + 17);
      if (const size_t shape = why.rfind(" ("); shape != std::string::npos && why.ends_with("bytes per rank)")) why.resize(shape);
      reasons.insert(r.op + " " + r.algorithm + ": " + why);
    } else if (r.wrong == 0) {
      p.us[r.algorithm] = r.p50_us;
    } else {
      reasons.insert(r.op + " " + r.algorithm + ": wrong results at " + tuning::format_size(per_rank) + " per rank (left out)");
    }
  }
  std::string out = tuning::format_header("native") + "\n";
  for (const auto& line : comment) out += "# " + line + "\n";
  out += "# Rows: per op and measured size (bytes per rank) the fastest algorithm by its median time, from that\n"
         "# size to the next one measured; us= every candidate's median in microseconds, skipped= those that\n"
         "# cannot run there:\n";
  for (const auto& why : reasons) out += "#   " + why + "\n";
  // The shape: its ranks and hosts, and whether ranks outnumber the CPUs of a host.
  tuning::Row base;
  base.ranks = exactly(s.ranks);
  base.hosts = exactly(s.hosts);
  base.per_host = exactly(s.per_host);
  base.cpus_per_rank = s.cpus >= s.per_host ? range(1, std::numeric_limits<double>::infinity()) : range(0, 1, true);
  for (const auto& [key, by_size] : points) {
    out += "\n";
    for (auto it = by_size.begin(); it != by_size.end(); ++it) {
      const double lo = it == by_size.begin() ? 0 : it->first;
      const auto next = std::next(it);
      const double hi = next == by_size.end() ? std::numeric_limits<double>::infinity() : next->first;
      const Point* pl = it->second;
      tuning::Row row = base;
      row.op = key.first;
      if (key.first == OpKind::send) {  // a send's path: per message, by its size, where the CPUs were
        row.subject = native::subject_of(native::PathPolicy::p2p);
        row.subject_name = "send.path";
        row.placement = s.placement;
      } else {
        row.subject = static_cast<int>(key.first);
        row.subject_name = std::string(to_string(key.first));
        row.dtypes = 1 << static_cast<int>(key.second);
      }
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
      if (!in_best.empty() && in_best != out_best && it->first >= kInPlaceRowsFrom) {
        emit(pl[0], out_best, tuning::Want::no);
        emit(pl[1], in_best, tuning::Want::yes);
      } else {
        emit(pl[0], out_best, tuning::Want::any);
      }
    }
  }
  return out;
}

}  // namespace mpcomm::tune
