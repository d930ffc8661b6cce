#include "plan_measure.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "bench.h"
#include "mpcomm/error.h"

namespace mpcomm::cli {
namespace {

const std::vector<std::string> kOps = {"allreduce", "broadcast", "allgather", "reduce_scatter", "sendrecv"};

struct Set {
  std::vector<std::pair<int, int>> shapes;  // ranks, hosts
  size_t min_bytes, max_bytes;
  double factor;
  std::vector<double> compute_us = {0};  // each shape measured once per gap (0: back to back)
};

const Set kCalibration = {{{2, 1}, {3, 1}, {4, 1}, {6, 1}, {2, 2}, {4, 2}}, 3 << 10, 48 << 20, 2};
const Set kValidation = {
    {{2, 1}, {4, 1}, {6, 1}, {8, 1}, {4, 2}, {6, 2}, {8, 2}, {6, 3}, {4, 4}, {8, 4}}, 64 << 10, 64 << 20, 4};
// The ops as a trainer meets them, after compute (bench --compute-us): from a layer's compute to a step's.
// Validated at other computes and sizes than calibrated.
// Only shapes with a core per rank: ranks that share a core share its compute, and when they arrive is the
// scheduler's doing (calibration leaves such rows out).
const Set kColdCalibration = {{{2, 1}, {2, 2}}, 16 << 10, 4 << 20, 4, {300, 1000, 3000, 10000, 30000, 100000}};
const Set kColdValidation = {{{2, 1}, {2, 2}}, 32 << 10, 2 << 20, 4, {600, 5000, 20000, 60000}};

tuning::Measurement from_row(const bench::Row& r) {
  tuning::Measurement m;
  m.backend = r.backend, m.op = r.op, m.bytes = static_cast<double>(r.bytes), m.ranks = r.ranks, m.hosts = r.hosts;
  m.seconds = (r.p50_us > 0 ? r.p50_us : r.time_us) * 1e-6;
  m.compute_s = r.compute_us * 1e-6, m.wait_s = r.wait_us * 1e-6;
  return m;
}

// Measures the set with bench, each shape one bench run over every backend; rows are also appended to `keep`.
std::vector<tuning::Measurement> measure(const Set& set, const std::string& backends, const std::string& keep) {
  std::vector<tuning::Measurement> out;
  std::ofstream k(keep, std::ios::app);
  for (auto [ranks, hosts] : set.shapes)
    for (double compute_us : set.compute_us) {
      bench::Config c;
      c.ranks = ranks, c.hosts = hosts;
      c.backends = bench::split_list(backends);
      c.ops = kOps;
      c.min_bytes = set.min_bytes, c.max_bytes = set.max_bytes, c.factor = set.factor;
      c.compute_us = compute_us;
      std::fprintf(
          stderr, "mpcomm plan: measuring %d ranks over %d hosts%s\n", ranks, hosts,
          compute_us > 0
              ? (", each call after " + std::to_string(static_cast<int>(compute_us)) + " us of compute").c_str()
              : "");
      int status = 0;
      const auto rows = bench::run_bench(c, bench::self_exe_path(), false, &status);
      if (status != 0)
        throw InvalidArgument("mpcomm plan: bench of " + std::to_string(ranks) + " ranks over " +
                              std::to_string(hosts) + " hosts failed (exit " + std::to_string(status) + ")");
      for (const auto& r : rows) {
        if (k) k << bench::to_json(r) << "\n";
        if (!r.inplace) out.push_back(from_row(r));
      }
    }
  return out;
}

int cores() { return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)); }

}  // namespace

std::vector<tuning::Measurement> read_measurements(const std::vector<std::string>& files) {
  std::vector<tuning::Measurement> out;
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) throw InvalidArgument("mpcomm plan: cannot read " + f);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.empty()) continue;
      bench::Row r;
      try {
        r = bench::row_from_json(line);
      } catch (const std::exception& e) {
        throw InvalidArgument("mpcomm plan: " + f + ": line " + std::to_string(n) + " is not a bench row (" + e.what() +
                              ")");
      }
      if (!r.inplace) out.push_back(from_row(r));
    }
  }
  if (out.empty()) throw InvalidArgument("mpcomm plan: no rows in the --from files");
  return out;
}

int calibrate_command(const std::vector<std::string>& from, const std::string& backends, const std::string& out) {
  const std::string path = out.empty() ? tuning::this_machine_profile_path() : out;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string rows_path = path + ".rows.json";
  if (from.empty()) std::filesystem::remove(rows_path, ec);
  auto rows = from.empty() ? measure(kCalibration, backends, rows_path) : read_measurements(from);
  if (from.empty())
    for (const auto& m : measure(kColdCalibration, backends, rows_path)) rows.push_back(m);
  tuning::CalibrationReport report;
  // The hosts of this machine's rows are emulated: every rank shares its cores.
  tuning::Profile p = tuning::calibrate(rows, "this-machine", cores(), cores(), true, &report);
  p.description = "calibrated with mpcomm plan --calibrate" + std::string(from.empty() ? "" : " --from ...") +
                  " (hosts emulated on one machine of " + std::to_string(cores()) + " CPUs)";
  std::ofstream f(path);
  if (!(f << tuning::format_profile(p))) throw InvalidArgument("mpcomm plan: cannot write " + path);
  std::printf("%-8s %-15s %-10s %-6s %-13s %5s %12s\n", "backend", "op", "sizes", "level", "algorithm", "rows",
              "median |err|");
  for (const auto& fit : report.fits)
    std::printf("%-8s %-15s %-10s %-6s %-13s %5d %11.1f%%\n", fit.backend.c_str(), fit.op.c_str(), fit.band.c_str(),
                fit.level.c_str(), fit.algorithm.c_str(), fit.rows, fit.median_rel_error * 100);
  for (const auto& s : report.skipped) std::printf("skipped: %s\n", s.c_str());
  std::printf("profile written to %s%s\n", path.c_str(), from.empty() ? (" (rows: " + rows_path + ")").c_str() : "");
  return 0;
}

int validate_command(const std::vector<std::string>& from, const std::string& backends, const std::string& profile) {
  const tuning::Profile p = tuning::load_profile(profile);
  std::string keep;
  if (from.empty()) {
    keep = bench::make_temp_file("validate");
    std::printf("validation rows: %s\n", keep.c_str());
  }
  auto rows = from.empty() ? measure(kValidation, backends, keep) : read_measurements(from);
  if (from.empty())
    for (const auto& m : measure(kColdValidation, backends, keep)) rows.push_back(m);
  const auto v = tuning::validate(p, rows);
  if (v.rows.empty()) throw InvalidArgument("mpcomm plan --validate: profile " + p.name + " predicts none of the rows");
  std::printf("%-8s %-15s %5s %5s %10s %10s %12s %12s %8s %s\n", "backend", "op", "ranks", "hosts", "bytes",
              "compute us", "measured us", "predicted us", "error", "algorithm");
  // Per op, back-to-back rows and rows after compute apart: they answer different questions.
  std::map<std::string, std::vector<double>> per_op;
  for (const auto& r : v.rows) {
    std::printf("%-8s %-15s %5d %5d %10s %10.0f %12.1f %12.1f %7.1f%% %s\n", r.m.backend.c_str(), r.m.op.c_str(),
                r.m.ranks, r.m.hosts, bench::human_bytes(static_cast<size_t>(r.m.bytes)).c_str(), r.m.compute_s * 1e6,
                r.m.seconds * 1e6, r.predicted * 1e6, r.rel_error * 100, r.algorithm.c_str());
    const std::string kind = r.m.compute_s > 0 ? " after compute" : "";
    per_op[r.m.backend + " " + r.m.op + kind].push_back(std::fabs(r.rel_error));
    per_op["(all ops)" + kind].push_back(std::fabs(r.rel_error));
  }
  for (auto& [k, e] : per_op) {
    std::sort(e.begin(), e.end());
    const size_t m = e.size() / 2;
    const double med = e.size() % 2 ? e[m] : (e[m - 1] + e[m]) / 2;
    std::printf("%-38s %3zu rows: median |error| %.1f%%, max %.1f%%\n", k.c_str(), e.size(), med * 100, e.back() * 100);
  }
  std::printf("profile %s over %zu rows: median |error| %.1f%%, max %.1f%% (targets: 10%%, 25%%)\n", p.name.c_str(),
              v.rows.size(), v.median_abs_error * 100, v.max_abs_error * 100);
  return 0;
}

}  // namespace mpcomm::cli
