// mpcomm plan --calibrate / --validate: the rows they fit and check, read from mpcomm bench --json files or
// measured here by bench itself, in two sets that share no size: calibration at 3 KiB × 2^i (3K ... 48M) on
// 2, 3, 4 and 6 ranks of one host and 2 and 4 ranks over 2 emulated hosts; validation at 64 KiB × 4^i (64K ... 64M)
// on 2 to 8 ranks over 1 to 4 emulated hosts. Ops: allreduce, broadcast, allgather, reduce_scatter, sendrecv.
#pragma once

#include <string>
#include <vector>

#include "tuning/calibrate.h"

namespace mpcomm::cli {

// Rows of bench --json files (out of place; each row's median per-iteration time).
std::vector<tuning::Measurement> read_measurements(const std::vector<std::string>& files);

int calibrate_command(const std::vector<std::string>& from, const std::string& backends, const std::string& out);
int validate_command(const std::vector<std::string>& from, const std::string& backends, const std::string& profile);

}  // namespace mpcomm::cli
