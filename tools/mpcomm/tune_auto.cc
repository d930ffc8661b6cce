// mpcomm tune for the auto backend (tune.h): its candidates, the stored table that gathers every shape
// tuned, and --check (auto's choices against fresh measurements).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

#include "backends/auto/auto_backend.h"
#include "backends/auto/route_table.h"
#include "backends/auto/router.h"
#include "backends/registry.h"
#include "bench.h"
#include "settings/settings.h"
#include "tune.h"

namespace mpcomm::tune {

std::vector<std::string> auto_candidates() {
  std::vector<std::string> out = {"native"};
  const std::vector<std::string> wanted = autosel::wanted_backends(Options{});
  for (const auto& b : compiled_backends()) {
    if (b == "native" || b == "auto" || b == "nccl") continue;
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), b) != wanted.end()) out.push_back(b);
  }
  return out;
}

namespace {

bool same(const tuning::Range& r, double v) { return r.lo == v && r.hi == v && !r.lo_open && !r.hi_open; }

tuning::Shape routing_shape(const Shape& s) {
  tuning::Shape t;
  t.ranks = s.ranks;
  t.hosts = s.hosts;
  t.per_host = s.per_host;
  t.even_hosts = s.ranks % s.hosts == 0;
  t.cpus_per_rank = static_cast<double>(s.cpus) / s.per_host;
  t.placement = s.placement;
  return t;
}

}  // namespace

std::string merged_auto_section(const std::string& old, const std::string& text, const Shape& s) {
  if (old.empty()) return text;
  const tuning::Table before = tuning::parse_table(old, "the stored table", "auto", autosel::vocabulary());
  std::string kept;
  for (const tuning::Row& r : before.rows) {
    const bool this_shape =
        same(r.ranks, s.ranks) && same(r.hosts, s.hosts) &&
        (r.placement == tuning::Placement::unknown || r.placement == s.placement || !(s.ranks == 2 && s.hosts == 1));
    if (!this_shape) kept += tuning::format_row(r) + "\n";
  }
  return kept.empty() ? text : text + "\n# Rows of other shapes, kept from the table before:\n" + kept;
}

CheckResult check_rows(const Shape& s, const std::vector<bench::Row>& rows, double limit) {
  const autosel::TableChoice choice = autosel::choose_table(param_string("MPCOMM_TUNING"), s.hosts);
  auto table =
      std::make_shared<tuning::Table>(tuning::parse_table(choice.text, choice.source, "auto", autosel::vocabulary()));
  const std::vector<std::string> candidates = auto_candidates();
  autosel::Router router(table, routing_shape(s), candidates, -1, -1);
  // (op, dtype, bytes) -> candidate -> every round's median µs, then their median
  std::map<std::tuple<std::string, std::string, size_t>, std::map<std::string, std::vector<double>>> samples;
  for (const bench::Row& r : rows)
    if (r.refused.empty() && r.wrong == 0 && !r.inplace)
      samples[{r.op, r.dtype, r.bytes}][r.algorithm].push_back(r.p50_us);
  std::map<std::tuple<std::string, std::string, size_t>, std::map<std::string, double>> points;
  for (auto& [key, by] : samples)
    for (auto& [b, v] : by) points[key][b] = median(v);
  CheckResult out;
  out.report = "# auto's choices by " + choice.source + " against the fastest measured (median us), " +
               std::to_string(s.ranks) + " ranks on " + std::to_string(s.hosts) + " host(s):\n";
  for (const std::string& w : choice.warnings) out.report += "#   passed over: " + w + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "#%13s %9s %10s %20s %20s %7s\n", "op", "dtype", "size", "auto chose", "fastest",
                "ratio");
  out.report += line;
  for (const auto& [key, us] : points) {
    const auto& [op, dtype, bytes] = key;
    detail::Op call;
    call.kind = op_kind(op);
    call.dtype = parse_dtype(dtype);
    const bool blocks =
        op == "allgather" || op == "reduce_scatter" || op == "gather" || op == "scatter" || op == "alltoall";
    call.count = bytes / dtype_size(call.dtype) / (blocks ? static_cast<size_t>(s.ranks) : 1);
    const std::string chosen = candidates[static_cast<size_t>(router.route(call))];
    std::string best;
    for (const auto& [b, t] : us)
      if (best.empty() || t < us.at(best)) best = b;
    const auto it = us.find(chosen);
    const double ratio = it != us.end() ? it->second / us.at(best) : std::numeric_limits<double>::infinity();
    ++out.points;
    const bool drifted = ratio > limit;
    out.drifted += drifted ? 1 : 0;
    std::snprintf(line, sizeof line, "%14s %9s %10s %11s %8.2f %11s %8.2f %6.2fx%s\n", op.c_str(), dtype.c_str(),
                  bench::human_bytes(bytes).c_str(), chosen.c_str(), it != us.end() ? it->second : NAN, best.c_str(),
                  us.at(best), ratio, drifted ? "  DRIFT" : "");
    out.report += line;
  }
  std::snprintf(line, sizeof line, "# %d of %d points: auto's choice more than %.2fx the fastest\n", out.drifted,
                out.points, limit);
  out.report += line;
  return out;
}

}  // namespace mpcomm::tune
