// mpcomm compare: the traffic of today's training modes at the model's sizes — sequence parallelism's
// reduce-scatter and all-gather per layer, ZeRO-1's reduce-scatter and all-gather per gradient bucket, and a
// mixture-of-experts layer's all-to-all of routed tokens — measured on every backend (experiment 5) and
// added up per layer, per bucket and per MoE layer in the report.
#include "compare_modern.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace mpcomm::cli {

namespace {

const bench::Row* row_of(const std::vector<bench::Row>& rows, const std::string& backend, const std::string& op,
                         size_t bytes) {
  for (const auto& r : rows)
    if (r.backend == backend && r.op == op && r.bytes == bytes && !r.inplace) return &r;
  return nullptr;
}

std::string ms(double us) {
  char s[32];
  if (us < 1000)
    std::snprintf(s, sizeof s, "%.1f µs", us);
  else
    std::snprintf(s, sizeof s, "%.2f ms", us / 1000);
  return s;
}

}  // namespace

bench::Config modern_experiment(const bench::Config& base, const ModernShape& s) {
  bench::Config c = base;
  c.ops = {"allreduce", "reduce_scatter", "allgather", "alltoallv"};
  c.dtypes = {"float"};
  c.min_bytes = c.max_bytes = s.act;
  c.factor = 2;
  c.extra_sizes = {s.act, s.bucket, s.moe_bytes()};
  c.moe_hidden = s.token_elems_float();
  c.imbalance = 1.0;
  return c;
}

std::string modern_section(const std::vector<bench::Row>& rows, const ModernShape& s, int ranks) {
  std::ostringstream md;
  const std::string act = bench::human_bytes(s.act), bucket = bench::human_bytes(s.bucket),
                    moe = bench::human_bytes(s.moe_bytes());
  md << "## Today's training modes at this model's sizes\n\n"
     << "Measured on " << ranks << " ranks (experiment 5: `mpcomm bench --ops allreduce,reduce_scatter,allgather,"
     << "alltoallv` at these sizes; alltoallv with a Zipf-skewed router, `--imbalance 1`):\n\n"
     << "- **sequence parallelism** (`mpcomm train --sequence-parallel`): each layer's four all-reduces of the " << act
     << " activation become four reduce-scatters and four all-gathers of it (per micro-batch, forward and "
     << "backward);\n"
     << "- **ZeRO-1** (`--zero 1`): each gradient bucket of " << bucket
     << " is reduce-scattered and the updated parameters all-gathered, instead of one all-reduce;\n"
     << "- **mixture of experts** (" << s.experts << " experts, top-" << s.top_k
     << "): each MoE layer sends every token "
     << "to its " << s.top_k << " experts and back, forward and backward: four all-to-alls of " << moe
     << " per rank (tokens × top-k × hidden), uneven as the router makes them.\n\n"
     << "| backend | TP per layer: 4 all-reduces | SP per layer: 4 RS + 4 AG | bucket: all-reduce | ZeRO bucket: RS + "
        "AG "
        "| MoE layer: 4 all-to-alls (busiest rank vs mean) |\n|---|---:|---:|---:|---:|---:|\n";
  std::vector<std::string> backends;
  for (const auto& r : rows)
    if (std::find(backends.begin(), backends.end(), r.backend) == backends.end()) backends.push_back(r.backend);
  for (const auto& b : backends) {
    auto t = [&](const std::string& op, size_t bytes) {
      const bench::Row* r = row_of(rows, b, op, bytes);
      return r == nullptr ? -1.0 : r->time_us;
    };
    auto cell = [&](double us) { return us < 0 ? std::string("-") : ms(us); };
    const double ar = t("allreduce", s.act), rs = t("reduce_scatter", s.act), ag = t("allgather", s.act);
    const double bar = t("allreduce", s.bucket), brs = t("reduce_scatter", s.bucket), bag = t("allgather", s.bucket);
    const double a2a = t("alltoallv", s.moe_bytes());
    const bench::Row* a2a_row = row_of(rows, b, "alltoallv", s.moe_bytes());
    char skew[32] = "";
    if (a2a_row != nullptr) std::snprintf(skew, sizeof skew, " (%.2f×)", a2a_row->imbalance);
    md << "| " << b << " | " << cell(ar < 0 ? ar : 4 * ar) << " | " << cell(rs < 0 || ag < 0 ? -1 : 4 * (rs + ag))
       << " | " << cell(bar) << " | " << cell(brs < 0 || bag < 0 ? -1 : brs + bag) << " | "
       << cell(a2a < 0 ? a2a : 4 * a2a) << skew << " |\n";
  }
  md << "\nA reduce-scatter plus an all-gather moves what one all-reduce moves; what differs is each backend's "
        "algorithms for the halves.\n\n";
  return md.str();
}

}  // namespace mpcomm::cli
