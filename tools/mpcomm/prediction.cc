#include "prediction.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "bootstrap/env.h"
#include "mpcomm/error.h"
#include "tuning/profile.h"

namespace mpcomm::cli {
namespace {

// The shape of the group of these world ranks: its size and the emulated hosts it spans (0: spread unevenly,
// which the model has no shape for).
tuning::CommShape group_shape(const std::vector<int>& members, int ranks, int hosts, const tuning::Profile& p) {
  std::vector<int> per_host(static_cast<size_t>(hosts), 0);
  for (int r : members) ++per_host[static_cast<size_t>(emulated_host_of_rank(r, ranks, hosts))];
  int spanned = 0, each = 0;
  for (int n : per_host) {
    if (n == 0) continue;
    if (each != 0 && n != each) return tuning::CommShape{static_cast<int>(members.size()), 0};
    each = n, ++spanned;
  }
  return tuning::CommShape{static_cast<int>(members.size()), spanned, p.cores_per_host, p.emulated_hosts};
}

// calls × the time of one call of the mean size, its ranks having waited for the last of them what the ops took
// beyond that (`took_s` over the calls); an all-reduce with ZeRO or sequence parallelism is a reduce-scatter and an
// all-gather of the same size, which the ring model times alike. Sets *wait_s.
double predicted(const tuning::BackendCosts& costs, const std::string& op, double calls, double bytes, double took_s,
                 const tuning::CommShape& shape, double* wait_s) {
  *wait_s = 0;
  if (calls <= 0 || shape.ranks < 2) return 0;
  const double warm = tuning::predict(costs, op, bytes / calls, shape).seconds;
  *wait_s = std::max(0.0, took_s / calls - warm);
  return calls * tuning::after_wait(costs, op, shape, warm, *wait_s);
}

}  // namespace

void print_prediction(const StepTraffic& t, const parallel::ParallelDims& d, int ranks, int hosts) {
  tuning::Profile p;
  if (!std::ifstream(tuning::this_machine_profile_path())) {
    std::printf("# %s: no prediction (no profile of this machine: mpcomm plan --calibrate writes one)\n",
                t.backend.c_str());
    return;
  }
  try {
    p = tuning::load_profile("this-machine");
  } catch (const InvalidArgument& e) {
    std::printf("# %s: no prediction (%s)\n", t.backend.c_str(), e.what());
    return;
  }
  if (!p.backends.count(t.backend)) {
    std::printf("# %s: no prediction (this machine's profile has no constants for %s)\n", t.backend.c_str(),
                t.backend.c_str());
    return;
  }
  const auto& costs = p.backends.at(t.backend);
  // Rank 0's groups (world rank = tp + tp·(dp + dp·pp)); every group of a kind has the same shape when the
  // hosts hold equal runs of ranks.
  std::vector<int> tp, dp, pp;
  for (int i = 0; i < d.tp; ++i) tp.push_back(i);
  for (int i = 0; i < d.dp; ++i) dp.push_back(d.tp * i);
  for (int i = 0; i < d.pp; ++i) pp.push_back(d.tp * d.dp * i);
  const auto tps = group_shape(tp, ranks, hosts, p), dps = group_shape(dp, ranks, hosts, p);
  // A pipeline send goes to the next stage: across hosts when the first two stages are on different ones.
  const auto pps = d.pp > 1 ? group_shape({pp[0], pp[1]}, ranks, hosts, p) : tuning::CommShape{1, 1};
  // The tied embedding's gradients go between the first stage and the last.
  const auto ends = d.pp > 1 ? group_shape({pp.front(), pp.back()}, ranks, hosts, p) : tuning::CommShape{1, 1};
  if (tps.hosts == 0 || dps.hosts == 0 || pps.hosts == 0 || ends.hosts == 0) {
    std::printf("# %s: no prediction (a group is spread unevenly over the %d hosts)\n", t.backend.c_str(), hosts);
    return;
  }
  // Sequence parallelism and ZeRO make reduce-scatters and all-gathers (timed alike by the ring); the pipeline's
  // calls are its sends and its receives, a message each pair, and its time the sends' (the receives, posted
  // as the step begins, would count its compute). What an op took beyond the transfer is its wait for the last
  // rank, which the op's cold cost depends on.
  double tp_w = 0, pp_w = 0, dp_w = 0, emb_w = 0;
  const double tp_p = predicted(costs, t.sequence_parallel ? "reduce_scatter" : "allreduce", t.tp_calls, t.tp_bytes,
                                t.tp_s, tps, &tp_w);
  // The pipeline's traffic: its messages and the tied embedding's exchange (one sendrecv a step, whose send the
  // pipeline communicator's time already holds).
  const double pp_p = predicted(costs, "sendrecv", t.pp_calls / 2, t.pp_bytes / 2, t.pp_s,
                                tuning::CommShape{2, pps.hosts, p.cores_per_host, p.emulated_hosts}, &pp_w) +
                      predicted(costs, "sendrecv", t.emb_calls, t.emb_bytes, t.emb_s,
                                tuning::CommShape{2, ends.hosts, p.cores_per_host, p.emulated_hosts}, &emb_w);
  const double pp_s = t.pp_s;
  const double dp_p =
      predicted(costs, t.zero ? "reduce_scatter" : "allreduce", t.dp_calls, t.dp_bytes, t.dp_s, dps, &dp_w);
  auto pct = [](double pred, double meas) { return meas > 0 ? (pred - meas) / meas * 100 : 0.0; };
  std::printf(
      "# %s: the cost model's transfer time (this machine's profile%s) / what the ops took here, waiting for their "
      "peers included, per step: tensor-parallel %.2f / %.2f ms (%+.0f%%), pipeline (with the tied embedding's "
      "exchange) %.2f / %.2f ms "
      "(%+.0f%%), data-parallel %.2f / %.2f ms (%+.0f%%); a call's wait for its last rank %.2f / %.2f / %.2f ms\n",
      t.backend.c_str(), costs.cold.empty() ? ", without costs for ops entered from compute" : "", tp_p * 1e3,
      t.tp_s * 1e3, pct(tp_p, t.tp_s), pp_p * 1e3, pp_s * 1e3, pct(pp_p, pp_s), dp_p * 1e3, t.dp_s * 1e3,
      pct(dp_p, t.dp_s), tp_w * 1e3, pp_w * 1e3, dp_w * 1e3);
}

std::vector<bench::Row> predicted_rows(const std::vector<bench::Row>& rows) {
  std::vector<bench::Row> out;
  tuning::Profile p;
  try {
    p = tuning::load_profile("this-machine");
  } catch (const InvalidArgument&) {
    return out;
  }
  for (const auto& r : rows) {
    if (r.inplace || !p.backends.count(r.backend) || tuning::algorithms_for(r.op, tuning::CommShape{}).empty() ||
        r.ranks < 1 || r.hosts < 1 || r.ranks % r.hosts)
      continue;
    bench::Row q = r;
    q.backend = r.backend + " (predicted)";
    const tuning::CommShape shape{r.ranks, r.hosts, p.cores_per_host, p.emulated_hosts};
    const auto& costs = p.backends.at(r.backend);
    double t = tuning::predict(costs, r.op, static_cast<double>(r.bytes), shape).seconds;
    if (r.compute_us > 0) t = tuning::after_wait(costs, r.op, shape, t, r.wait_us * 1e-6);  // from compute
    q.time_us = t * 1e6;
    q.p50_us = q.time_us;
    q.algbw_gbs = q.time_us > 0 ? static_cast<double>(r.bytes) / q.time_us / 1e3 : 0;
    q.busbw_gbs = q.algbw_gbs * tuning::bus_factor(r.op, r.ranks);
    out.push_back(q);
  }
  return out;
}

}  // namespace mpcomm::cli
