// Predictions beside measurements: the cost model, with this machine's profile (`mpcomm plan --calibrate`),
// asked for what mpcomm train's ranks did per step (each kind's calls and bytes on its group's shape) and for
// each row mpcomm compare measured.
#pragma once

#include <string>
#include <vector>

#include "bench.h"
#include "parallel/groups.h"

namespace mpcomm::cli {

// What one backend's ranks did per step (means over ranks): calls and bytes per kind, and the ops' own time.
struct StepTraffic {
  std::string backend;
  double tp_calls = 0, tp_bytes = 0, tp_s = 0;
  double pp_calls = 0, pp_bytes = 0, pp_s = 0;
  double dp_calls = 0, dp_bytes = 0, dp_s = 0;
  double emb_calls = 0, emb_bytes = 0, emb_s = 0;  // the tied embedding's exchange between the pipeline's ends
  bool zero = false, sequence_parallel = false;
};

// Prints "# <backend>: predicted ... measured ..." (or why there is no prediction: no profile, no constants
// for the backend, a group spread unevenly over the hosts).
void print_prediction(const StepTraffic& t, const parallel::ParallelDims& dims, int ranks, int hosts);

// For every out-of-place row whose backend this machine's profile has constants for, a row of the same op,
// size and shape with the predicted time and bus bandwidth (a row measured after compute: with the cold cost of
// the wait it measured), its backend "<backend> (predicted)"; none without a profile.
std::vector<bench::Row> predicted_rows(const std::vector<bench::Row>& rows);

}  // namespace mpcomm::cli
