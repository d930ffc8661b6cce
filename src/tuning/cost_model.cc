// The algorithms' phases (cost_model.h). With n ranks over h hosts, k = n / h per host, S the op's size:
//
//   allreduce ring          2(n-1) steps, of which 2(h-1) cross hosts; each rank sends 2(n-1)/n·S, and so does
//                           each host over its network (one crossing per ring channel and host)
//   allreduce tree          a chain within the host and a binary tree among hosts, up and down:
//                           2(k-1) + 2·ceil(log2 h) steps; each rank and each host moves 2S
//   allreduce hierarchical  reduce-scatter within hosts, allreduce among hosts of S/k per rank (k at once,
//                           2(h-1)/h·S per host), allgather within hosts
//   broadcast ring          a pipelined chain: n-1 steps (h-1 crossing), S per rank and per host
//   broadcast tree          binomial: ceil(log2 n) rounds of the whole buffer
//   allgather / reduce_scatter ring: n-1 steps (h-1 crossing), (n-1)/n·S per rank and per host
//   alltoall direct         n-1 steps (1 step crossing per peer host); (n-1)/n·S per rank, k·(n-k)/n·S per host
//   sendrecv direct         every rank sends S to the next and receives S from the one before (nccl-tests'
//                           sendrecv, bench's): 1 step (crossing when h > 1); S per rank, S per host
#include "tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mpcomm/error.h"

namespace mpcomm::tuning {
namespace {

double ceil_log2(int n) { return n <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(n))); }

void check_shape(const CommShape& s) {
  if (s.ranks < 1 || s.hosts < 1)
    throw InvalidArgument("cost model: " + std::to_string(s.ranks) + " ranks over " + std::to_string(s.hosts) +
                          " hosts: both must be at least 1");
  if (s.ranks % s.hosts != 0)
    throw InvalidArgument("cost model: " + std::to_string(s.ranks) + " ranks do not spread evenly over " +
                          std::to_string(s.hosts) + " hosts");
}

// A ring over every rank: `passes` times around (2 for allreduce), `share` of S per rank per pass.
Phase ring(double passes, double bytes, const CommShape& s) {
  const double n = s.ranks, h = s.hosts;
  Phase p;
  p.steps_inter = passes * (h - 1);
  p.steps_intra = passes * (n - 1) - p.steps_inter;
  p.bytes_rank = passes * (n - 1) / n * bytes;
  p.bytes_host = s.hosts > 1 ? p.bytes_rank : 0;
  return p;
}

}  // namespace

const std::vector<std::string>& model_ops() {
  static const std::vector<std::string> ops = {"allreduce",      "broadcast", "allgather",
                                               "reduce_scatter", "alltoall",  "sendrecv"};
  return ops;
}

std::vector<std::string> algorithms_for(const std::string& op, const CommShape& shape) {
  if (op == "allreduce") {
    std::vector<std::string> a = {"ring", "tree"};
    if (shape.hosts > 1 && shape.per_host() > 1) a.push_back("hierarchical");
    return a;
  }
  if (op == "broadcast") return {"ring", "tree"};
  if (op == "allgather" || op == "reduce_scatter") return {"ring"};
  if (op == "alltoall" || op == "sendrecv") return {"direct"};
  return {};
}

std::vector<Phase> phases(const std::string& op, const std::string& algorithm, double bytes, const CommShape& s) {
  check_shape(s);
  const auto known = algorithms_for(op, s);
  if (known.empty()) throw InvalidArgument("cost model: unknown op '" + op + "'");
  if (std::find(known.begin(), known.end(), algorithm) == known.end())
    throw InvalidArgument("cost model: " + op + " has no algorithm '" + algorithm + "' on " + std::to_string(s.ranks) +
                          " ranks over " + std::to_string(s.hosts) + " hosts");
  const double n = s.ranks, h = s.hosts, k = s.per_host();
  if (s.ranks == 1) return {};
  if (op == "allreduce" && algorithm == "ring") return {ring(2, bytes, s)};
  if (op == "allreduce" && algorithm == "tree") {
    Phase p;
    p.steps_intra = 2 * (k - 1);
    p.steps_inter = 2 * ceil_log2(s.hosts);
    p.bytes_rank = 2 * bytes;
    p.bytes_host = s.hosts > 1 ? 2 * bytes : 0;
    return {p};
  }
  if (op == "allreduce" && algorithm == "hierarchical") {
    Phase within{k - 1, 0, (k - 1) / k * bytes, 0};
    Phase among{0, 2 * (h - 1), 0, 2 * (h - 1) / h * bytes};
    return {within, among, within};
  }
  if (op == "broadcast" && algorithm == "ring") {
    Phase p{n - 1 - (h - 1), h - 1, bytes, s.hosts > 1 ? bytes : 0};
    return {p};
  }
  if (op == "broadcast" && algorithm == "tree") {
    Phase p;
    const double rounds = ceil_log2(s.ranks), rounds_inter = ceil_log2(s.hosts);
    p.steps_inter = rounds_inter;
    p.steps_intra = rounds - rounds_inter;
    p.bytes_rank = rounds * bytes;
    p.bytes_host = rounds_inter * bytes;
    return {p};
  }
  if (op == "allgather" || op == "reduce_scatter") return {ring(1, bytes, s)};
  if (op == "alltoall") {
    Phase p;
    p.steps_inter = h - 1;
    p.steps_intra = n - 1 - p.steps_inter;
    p.bytes_rank = (n - 1) / n * bytes;
    p.bytes_host = k * (n - k) / n * bytes;
    return {p};
  }
  // sendrecv: a shift along the ranks; across hosts one rank of each host sends out.
  Phase p;
  (s.hosts > 1 ? p.steps_inter : p.steps_intra) = 1;
  p.bytes_rank = bytes;
  p.bytes_host = s.hosts > 1 ? bytes : 0;
  return {p};
}

double phase_seconds(const Phase& p, const LinkCost& intra, const LinkCost& inter) {
  auto over = [](double bytes, double bw) {
    if (bytes <= 0) return 0.0;
    return bw > 0 ? bytes / bw : std::numeric_limits<double>::infinity();
  };
  return p.steps_intra * intra.alpha_s + p.steps_inter * inter.alpha_s +
         std::max(over(p.bytes_rank, intra.bw_Bps), over(p.bytes_host, inter.bw_Bps));
}

double CommShape::crowding() const {
  if (cores_per_host <= 0) return 1;
  return std::max(1.0, static_cast<double>(emulated ? ranks : per_host()) / cores_per_host);
}

const BackendCosts::OpCosts* BackendCosts::op_costs(const std::string& op, double bytes, int ranks) const {
  auto it = ops.find(op);
  if (it == ops.end() || it->second.empty()) return nullptr;
  bool pairs = ranks == 2;
  if (std::none_of(it->second.begin(), it->second.end(), [&](const OpCosts& b) { return b.pairs == pairs; }))
    pairs = !pairs;
  const OpCosts* last = nullptr;
  for (const auto& band : it->second) {
    if (band.pairs != pairs) continue;
    last = &band;
    if (bytes < band.below_bytes) break;
  }
  return last;
}

namespace {

// A band's constants where it has them, else the backend's.
OpConstants band_constants(const BackendCosts& costs, const BackendCosts::OpCosts* band) {
  OpConstants c{costs.overhead_s, costs.intra, costs.inter};
  if (band) {
    c.overhead_s = band->overhead_s;
    if (band->has_intra) c.intra = band->intra;
    if (band->has_inter) c.inter = band->inter;
  }
  return c;
}

}  // namespace

OpConstants constants(const BackendCosts& costs, const std::string& op, double bytes, int ranks) {
  return band_constants(costs, costs.op_costs(op, bytes, ranks));
}

namespace {

// The fastest of the candidate algorithms under one set of constants (the band's own algorithm when it has one).
Prediction evaluate(const BackendCosts& costs, const BackendCosts::OpCosts* band, const std::string& op, double bytes,
                    const CommShape& shape, const std::string& algorithm) {
  const OpConstants k = band_constants(costs, band);
  std::string chosen = algorithm;
  if (chosen.empty() && band && !band->algorithm.empty()) {
    const auto known = algorithms_for(op, shape);
    if (std::find(known.begin(), known.end(), band->algorithm) != known.end()) chosen = band->algorithm;
  }
  std::vector<std::string> candidates;
  if (!chosen.empty()) {
    candidates = {chosen};
  } else {
    for (const auto& a : algorithms_for(op, shape))
      if (std::find(costs.algorithms.begin(), costs.algorithms.end(), a) != costs.algorithms.end() || a == "direct")
        candidates.push_back(a);
    if (candidates.empty()) candidates = {algorithms_for(op, shape).front()};
  }
  Prediction best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (const auto& a : candidates) {
    Prediction p;
    p.algorithm = a;
    p.phases = phases(op, a, bytes, shape);
    p.seconds = shape.ranks > 1 ? k.overhead_s : 0;
    for (const auto& ph : p.phases) p.seconds += phase_seconds(ph, k.intra, k.inter);
    p.seconds *= shape.crowding();
    if (p.seconds < best.seconds) best = std::move(p);
  }
  return best;
}

}  // namespace

Prediction predict(const BackendCosts& costs, const std::string& op, double bytes, const CommShape& shape,
                   const std::string& algorithm) {
  check_shape(shape);
  if (algorithms_for(op, shape).empty()) throw InvalidArgument("cost model: unknown op '" + op + "'");
  if (bytes < 0) throw InvalidArgument("cost model: a negative size");
  const BackendCosts::OpCosts* band = costs.op_costs(op, bytes, shape.ranks);
  if (!band || band->at_bytes <= 0 || bytes <= 0 || shape.ranks < 2)
    return evaluate(costs, band, op, bytes, shape, algorithm);
  // Between the sizes two bands were fitted at, each band's prediction is blended in log size, so that a
  // size between them is not left to one band's straight line (a CPU's bandwidth falls smoothly as messages
  // outgrow its caches).
  const BackendCosts::OpCosts *lo = nullptr, *hi = nullptr;
  for (const auto& b : costs.ops.at(op)) {
    if (b.pairs != band->pairs || b.at_bytes <= 0) continue;
    if (b.at_bytes <= bytes) lo = &b;
    if (b.at_bytes > bytes && !hi) hi = &b;
  }
  if (!lo || !hi) return evaluate(costs, lo ? lo : hi ? hi : band, op, bytes, shape, algorithm);
  const double w = std::log(bytes / lo->at_bytes) / std::log(hi->at_bytes / lo->at_bytes);
  Prediction a = evaluate(costs, lo, op, bytes, shape, algorithm), b = evaluate(costs, hi, op, bytes, shape, algorithm);
  if (!(a.seconds > 0 && b.seconds > 0 && std::isfinite(a.seconds) && std::isfinite(b.seconds))) return w < 0.5 ? a : b;
  Prediction out = w < 0.5 ? a : b;
  out.seconds = std::exp((1 - w) * std::log(a.seconds) + w * std::log(b.seconds));
  return out;
}

double after_wait(const BackendCosts& costs, const std::string& op, const CommShape& shape, double warm_s,
                  double wait_s) {
  const auto it = costs.cold.find(op);
  if (it == costs.cold.end() || !(wait_s > 0)) return warm_s;
  std::vector<BackendCosts::ColdCost> c;
  for (bool across : {shape.hosts > 1, shape.hosts <= 1}) {
    for (const auto& k : it->second)
      if (k.across_hosts == across) c.push_back(k);
    if (!c.empty()) break;
  }
  if (c.empty()) return warm_s;
  auto at = [&](double scale, double wake) { return warm_s * (1 + scale) + wake; };
  if (wait_s <= c.front().wait_s) {
    const double f = wait_s / c.front().wait_s;
    return at(f * c.front().scale, f * c.front().wake_s);
  }
  for (size_t i = 1; i < c.size(); ++i) {
    if (wait_s > c[i].wait_s) continue;
    const double w = std::log(wait_s / c[i - 1].wait_s) / std::log(c[i].wait_s / c[i - 1].wait_s);
    return at((1 - w) * c[i - 1].scale + w * c[i].scale, (1 - w) * c[i - 1].wake_s + w * c[i].wake_s);
  }
  return at(c.back().scale, c.back().wake_s);
}

double bus_factor(const std::string& op, int ranks) {
  const double n = ranks;
  if (ranks <= 1) return 1;
  if (op == "allreduce") return 2 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") return (n - 1) / n;
  return 1;
}

}  // namespace mpcomm::tuning
