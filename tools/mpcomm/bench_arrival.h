// mpcomm bench --compute-us: calls timed as a trainer meets them. Before each call every rank computes (sweeps
// a buffer larger than its caches) for a while, each rank for a different time, so that ranks come to the call
// apart, with cold caches, the early ones waiting; a call is timed from its last rank's arrival to each rank's
// return. That is the transfer a trainer's timeline shows (scripts/train-comm-check), and what the cost model's
// cold term (tuning/cost_model.h, ColdCost) is fitted to. Arrivals are compared on one clock, so the ranks must
// share one machine's kernel (emulated hosts do; the call refuses ranks whose boot ids differ).
#pragma once

#include <functional>
#include <vector>

#include "bench.h"

namespace mpcomm::bench {

// Per call, in the timestamps' unit: from its last rank's arrival to each rank's return, and how long the ranks
// waited for the last one (last arrival − own arrival), each a mean over the ranks.
struct ArrivalTimes {
  std::vector<double> after_last, waited;
};

// c.iters calls of `call`, each after compute of about c.compute_us on average (between half and one and a half
// times it, by rank and call), in microseconds, the same on every rank. `control` exchanges the timestamps.
ArrivalTimes time_after_compute(Communicator& control, const Config& c, const std::function<void()>& call);

// The pure part, for tests: arrive and end hold every rank's timestamps of every call, rank-major (rank r's
// call i at r·iters + i).
ArrivalTimes times_after_last_arrival(const std::vector<double>& arrive, const std::vector<double>& end, int ranks,
                                      int iters);

}  // namespace mpcomm::bench
