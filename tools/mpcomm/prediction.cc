#include "prediction.h"

#include <cstdio>
#include <fstream>
#include <set>

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

// calls × the time of one call of the mean size; an all-reduce with ZeRO or sequence parallelism is a
// reduce-scatter and an all-gather of the same size, which the ring model times alike.
double predicted(const tuning::BackendCosts& costs, const std::string& op, double calls, double bytes,
                 const tuning::CommShape& shape) {
  if (calls <= 0 || shape.ranks < 2) return 0;
  return calls * tuning::predict(costs, op, bytes / calls, shape).seconds;
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
  if (tps.hosts == 0 || dps.hosts == 0 || pps.hosts == 0) {
    std::printf("# %s: no prediction (a group is spread unevenly over the %d hosts)\n", t.backend.c_str(), hosts);
    return;
  }
  // Sequence parallelism and ZeRO make reduce-scatters and all-gathers (timed alike by the ring); the pipeline's
  // calls are its sends and its receives, and the ops' own time counts the sends.
  const double tp_p =
      predicted(costs, t.sequence_parallel ? "reduce_scatter" : "allreduce", t.tp_calls, t.tp_bytes, tps);
  const double pp_p = predicted(costs, "sendrecv", t.pp_calls / 2, t.pp_bytes / 2,
                                tuning::CommShape{2, pps.hosts, p.cores_per_host, p.emulated_hosts});
  const double dp_p = predicted(costs, t.zero ? "reduce_scatter" : "allreduce", t.dp_calls, t.dp_bytes, dps);
  auto pct = [](double pred, double meas) { return meas > 0 ? (pred - meas) / meas * 100 : 0.0; };
  std::printf(
      "# %s: the cost model's transfer time (this machine's profile) / what the ops took here, waiting for their "
      "peers included, per step: tensor-parallel %.2f / %.2f ms (%+.0f%%), pipeline %.2f / %.2f ms (%+.0f%%), "
      "data-parallel %.2f / %.2f ms (%+.0f%%)\n",
      t.backend.c_str(), tp_p * 1e3, t.tp_s * 1e3, pct(tp_p, t.tp_s), pp_p * 1e3, t.pp_s * 1e3, pct(pp_p, t.pp_s),
      dp_p * 1e3, t.dp_s * 1e3, pct(dp_p, t.dp_s));
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
    q.time_us = tuning::predict(p.backends.at(r.backend), r.op, static_cast<double>(r.bytes), shape).seconds * 1e6;
    q.p50_us = q.time_us;
    q.algbw_gbs = q.time_us > 0 ? static_cast<double>(r.bytes) / q.time_us / 1e3 : 0;
    q.busbw_gbs = q.algbw_gbs * tuning::bus_factor(r.op, r.ranks);
    out.push_back(q);
  }
  return out;
}

}  // namespace mpcomm::cli
