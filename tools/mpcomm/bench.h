// mpcomm bench: nccl-tests-style measurements of every backend side by side.
//
// The driver (`mpcomm bench`) starts the ranks of every backend through launch(), each rank running
// the worker (`mpcomm bench-worker`), which measures every op × size and writes one JSON line per
// measured row. With several backends they all run at once and take turns row by row (bench_turns.h),
// unless --sequential. The driver then prints each backend's table, the side-by-side comparison and
// the JSON file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "device/device.h"
#include "mpcomm/communicator.h"

namespace CLI {
class App;
}

namespace mpcomm::bench {

// What to measure; the same on the driver and in every worker.
struct Config {
  int ranks = 4;
  int hosts = 1;
  std::vector<std::string> backends = {"native"};
  std::vector<std::string> ops = {"allreduce"};
  size_t min_bytes = 8;
  size_t max_bytes = 64 << 20;
  double factor = 2;
  std::vector<size_t> extra_sizes;  // measured too (e.g. a model's all-reduce size), in order
  int iters = 20;
  int warmup = 5;
  int check = 1;
  std::vector<std::string> dtypes = {"float"};  // each measured in turn, in this one run
  std::string redop = "sum";
  int root = 0;
  // alltoallv and allgatherv rows (bench_moe.h): elements per token, and the router's skew.
  size_t moe_hidden = 1024;
  double imbalance = 1.0;
  // > 0: every rank computes (sweeps memory, evicting its caches) for about this long before each call, ranks
  // for different times, and a call is timed from its last rank's arrival (bench_arrival.h): what an op costs
  // a trainer, whose ranks come to it from compute. 0: back-to-back calls, nccl-tests' way.
  double compute_us = 0;
  double timeout_s = 120;
  std::string device = "cpu";  // where the buffers live: cpu or cuda (each rank its local GPU)
  bool sequential = false;     // several backends: one after the other instead of in turns
  // Set by the driver for each backend's workers when backends take turns: the board's path and this
  // backend's slot on it ("" = measure without waiting).
  std::string turns;
  int turn_slot = 0, turn_backends = 0;
  // The driver's, not sent to the workers: the subcommand each rank runs (`mpcomm tune` runs its own),
  // and, for the progress, how many rows each size and data type yields per op of `ops` (empty: bench's
  // own, 2 for an op with an in-place layout, else 1; tune: one per candidate and layout).
  std::string worker = "bench-worker";
  std::vector<int> rows_per_size;
  // `mpcomm tune`: for each op of `ops`, the table subject it is measured for (tune.h, Plan); empty: the ops.
  std::vector<std::string> subjects;
  // `mpcomm tune`: how many times each size's candidates are measured, in an order that turns with every
  // round and size (a candidate that always came first or last would carry the turn's bias).
  int rounds = 1;
  // Run as one rank of the job that started this process (--launcher): each backend's communicator
  // over the job's store, rows on rank 0 only; ranks and hosts are the job's.
  bool as_rank = false;
};

// A backend measured with reproducible sums (mpcomm bench --reproducible): "<backend>+repro".
inline constexpr const char* kReproducibleSuffix = "+repro";
inline bool reproducible_backend(const std::string& b) {
  return b.size() > 6 && b.compare(b.size() - 6, 6, kReproducibleSuffix) == 0;
}
inline std::string base_backend(const std::string& b) {
  return reproducible_backend(b) ? b.substr(0, b.size() - 6) : b;
}

// One measured row (one backend, op, size and placement).
struct Row {
  std::string backend, op, dtype, redop;
  std::string device = "cpu";  // where the buffers were: cpu or cuda
  std::string transport;       // what carried the bytes, when it is not the backend's usual path
  int ranks = 0, hosts = 0, root = -1;
  size_t bytes = 0, count = 0;
  bool inplace = false;
  double time_us = 0;      // mean over the timed iterations, slowest rank
  double algbw_gbs = 0;    // bytes / time
  double busbw_gbs = 0;    // algbw × the nccl-tests factor of the op
  uint64_t wrong = 0;      // wrong elements in the checked run (-c 1), summed over ranks
  double p50_us = 0, p99_us = 0;  // per-iteration latency percentiles (slowest rank per iteration)
  // When rank 0's timed calls began and ended, in seconds of CLOCK_MONOTONIC (one clock for every
  // process of the machine): which rows of which backends were measured when.
  double start_s = 0, end_s = 0;
  // Backends taking turns: a cache line's round trip between the first two CPUs, measured by the driver
  // just before the row's turn (core/cpu_pair.h; NaN or absent: not measured).
  double cpus_round_trip_ns = std::numeric_limits<double>::quiet_NaN();
  // `mpcomm tune`: the candidate forced for the row (an algorithm, a protocol's choice, an MPI call
  // kind), and why it could not run ("": it ran).
  std::string algorithm, refused;
  // What the backend ran at the row's last call (OpStats::algorithm): for auto, the backend it chose
  // and that backend's algorithm ("mpi/MPI_Allreduce").
  std::string ran;
  // The compute between calls (Config::compute_us; 0: back to back), and then time_us is the mean, p50/p99 the
  // percentiles, of a call's time from its last rank's arrival to each rank's return (the mean over ranks), and
  // wait_us how long the ranks waited for the last one (the mean over calls and ranks).
  double compute_us = 0, wait_us = 0;
  // alltoallv, allgatherv: the busiest rank's tokens over the mean (0: not such a row).
  double imbalance = 0;
};

// All ops bench knows, in nccl-tests order.
const std::vector<std::string>& all_ops();
// nccl-tests' bus-bandwidth factor of op on n ranks.
double busbw_factor(const std::string& op, int n);
// The sizes from min to max by factor (nccl-tests -b -e -f).
std::vector<size_t> sizes(const Config& c);
// "64M" -> 67108864; K, M, G suffixes (powers of 1024).
size_t parse_bytes(const std::string& s);
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& s);
// "1.5 KiB"-style human size.
std::string human_bytes(size_t b);

std::string to_json(const Row& r);
Row row_from_json(const std::string& line);
// nccl-tests' sweep options (-b -e -f -n -w -c) on a command: the sizes as text, the rest into c.
void add_sweep_options(CLI::App& app, Config& c, std::string* min_bytes, std::string* max_bytes);
// The configuration a driver hands its workers (--config).
Config config_from_json(const std::string& s);

// Worker side: measure every op × size of c on comm; rank 0 prints the nccl-tests table to stdout and
// appends JSON lines to json_path.
int run_worker(Communicator& comm, const Config& c, const std::string& json_path);
// Buffers sized for the largest message of c, reused for every size, on the communicator's device.
struct Buffers {
  device::Buffer send, recv;
};
Buffers make_buffers(const Communicator& comm, const Config& c);
// Elements per rank (per block for the block ops) of nccl-tests' size `bytes` (the whole buffer).
size_t elements_per_rank(const std::string& op, size_t bytes, size_t es, int n);
// Whether op has an in-place layout to measure.
bool has_inplace(const std::string& op);
// One row: `op` on `count` elements per rank of comm, checked (c.check), warmed up, timed (c.iters
// calls; the slowest rank's mean, and its per-call latencies). The checks' sums, the barrier and the
// timings' maxima go through `control` (comm itself in bench; another communicator in tune, whose
// comm may run only the op measured).
Row measure(Communicator& comm, Communicator& control, const Config& c, const std::string& op, DataType dt, size_t count,
            bool inplace, Buffers& b);
// One alltoallv or allgatherv row of `tokens` tokens per rank with the router's counts (bench_moe.h), checked.
Row measure_moe(Communicator& comm, Communicator& control, const Config& c, const std::string& op, DataType dt,
                size_t tokens);

// Driver side: run every backend of c (each through launch(); several at once, taking turns row by
// row, unless c.sequential) and print each backend's table as its rank 0 prints it; returns all rows.
// A failed backend sets *status and ends the others unless keep_going.
std::vector<Row> run_bench(const Config& c, const std::string& self_exe, bool keep_going, int* status);
void print_side_by_side(const std::vector<Row>& rows, FILE* out);
// The backends `--backends all` means for a device: every available one, nccl only for cuda.
std::vector<std::string> all_backends_for(const std::string& device);
// This executable, to start workers with.
std::string self_exe_path();
// An empty file "/tmp/mpcomm-<what>-XXXXXX" where a driver's rank 0 writes its rows; the caller removes it.
std::string make_temp_file(const std::string& what);

}  // namespace mpcomm::bench
