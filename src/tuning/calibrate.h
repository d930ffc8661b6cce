// Calibration: the cost model's constants fitted to measured times (`mpcomm bench --json` rows), and the
// model's error against measurements it was not fitted to.
//
// Per backend, op and size band (bands a factor of 4 apart from 16 KiB to 64 MiB: within a few such steps the
// native backend changes algorithms and a message leaves the CPU's caches), apart for two ranks and for more,
// from the rows on one host: the call's overhead, the step
// latency and the bandwidth within a host, by least squares on relative error, for each algorithm structure the
// model has for the op; the structure that explains the rows best is kept. A band with rows of one size fits
// the bandwidth alone, the latencies the band below's. Then, from the rows over several hosts, with the
// within-host constants held: the step latency and bandwidth between hosts. Rows whose ranks outnumber the
// host's cores are divided by the crowding first (cost_model.h). The backend's own constants (for ops it
// has no rows of) are its allreduce's, else its first op's. Last, per op, level (one host, across hosts) and
// bench run of rows measured after compute, what those rows took beyond the back-to-back prediction, at the
// mean wait they measured: scale·warm + wake, least squares on relative error, both at least 0 (rows with more ranks
// than cores are left out: ranks sharing a core share its compute, and when they arrive is the scheduler's doing).
#pragma once

#include <string>
#include <vector>

#include "tuning/profile.h"

namespace mpcomm::tuning {

struct Measurement {
  std::string backend, op;
  double bytes = 0;
  int ranks = 0, hosts = 1;
  double seconds = 0;
  // > 0: measured after this much compute on every rank, from the last rank's arrival (`mpcomm bench
  // --compute-us`), the ranks having waited wait_s for the last on average: fitted into the backend's cold costs
  // (cost_model.h, ColdCost), predicted with them.
  double compute_s = 0, wait_s = 0;
};

struct CalibrationReport {
  struct Fit {
    std::string backend, op, band, level, algorithm;  // band: the sizes, "[64K,1M)"; level: intra or inter
    int rows = 0;
    double median_rel_error = 0;  // of the fitted rows themselves
  };
  std::vector<Fit> fits;
  std::vector<std::string> skipped;  // rows the model cannot use, with why
};

// Fits `rows`; the profile is named `name`, its hosts have `cores_per_host` cores (0: not crowded) and run
// `ranks_per_host` ranks; with `emulated_hosts` the rows' hosts were emulated on one machine of that many cores.
// Throws InvalidArgument when no backend has rows of two sizes on one host (α and β cannot be told apart). With
// one rank count only (a band of two ranks always), a step's latency cannot be told from the call's overhead:
// the overhead carries both.
Profile calibrate(const std::vector<Measurement>& rows, const std::string& name, int ranks_per_host, int cores_per_host,
                  bool emulated_hosts, CalibrationReport* report = nullptr);

// Least squares with every coefficient at least 0: minimizes Σ w_i² (Σ_j x_ij c_j − y_i)². Exposed for tests.
std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                                              const std::vector<double>& w);

struct Validation {
  struct Row {
    Measurement m;
    double predicted = 0, rel_error = 0;  // (predicted − measured) / measured
    std::string algorithm;
  };
  std::vector<Row> rows;
  double median_abs_error = 0, max_abs_error = 0;
};

// The profile's predictions for every row (rows of a backend or op the profile cannot predict are skipped).
Validation validate(const Profile& p, const std::vector<Measurement>& rows);

}  // namespace mpcomm::tuning
