// mpcomm bench (the driver) and mpcomm bench-worker (what each rank runs).
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "progress.h"

#include "as_rank.h"

#include "bench.h"
#include "bench_turns.h"
#include "backends/registry.h"
#include "bootstrap/launcher.h"
#include "device/cpu_pair.h"
#include "device/device.h"
#include "cli_checks.h"
#include "commands.h"
#include "mpcomm/mpcomm.h"

namespace mpcomm::bench {

namespace {

nlohmann::json config_to_json(const Config& c) {
  return {{"ranks", c.ranks},
          {"hosts", c.hosts},
          {"backends", c.backends},
          {"ops", c.ops},
          {"min_bytes", c.min_bytes},
          {"max_bytes", c.max_bytes},
          {"factor", c.factor},
          {"extra_sizes", c.extra_sizes},
          {"moe_hidden", c.moe_hidden},
          {"imbalance", c.imbalance},
          {"compute_us", c.compute_us},
          {"iters", c.iters},
          {"warmup", c.warmup},
          {"check", c.check},
          {"dtypes", c.dtypes},
          {"redop", c.redop},
          {"root", c.root},
          {"timeout_s", c.timeout_s},
          {"device", c.device},
          {"turns", c.turns},
          {"turn_slot", c.turn_slot},
          {"turn_backends", c.turn_backends},
          {"subjects", c.subjects},
          {"rounds", c.rounds}};
}

size_t count_lines(const std::string& path) {
  std::ifstream f(path);
  size_t n = 0;
  std::string line;
  while (std::getline(f, line)) ++n;
  return n;
}

size_t expected_rows(const Config& c) {
  size_t rows = 0;
  for (size_t i = 0; i < c.ops.size(); ++i)
    rows += i < c.rows_per_size.size() ? static_cast<size_t>(c.rows_per_size[i]) : has_inplace(c.ops[i]) ? 2 : 1;
  return rows * sizes(c).size() * c.dtypes.size();
}

void validate(const Config& c) {
  if (c.ranks < 1) throw InvalidArgument("mpcomm bench: --ranks must be at least 1");
  if (c.hosts < 1 || c.hosts > c.ranks) throw InvalidArgument("mpcomm bench: --hosts must be between 1 and --ranks");
  if (c.min_bytes > c.max_bytes) throw InvalidArgument("mpcomm bench: -b is larger than -e");
  if (c.factor <= 1.0) throw InvalidArgument("mpcomm bench: -f must be greater than 1");
  if (c.iters < 1 || c.warmup < 0) throw InvalidArgument("mpcomm bench: -n must be >= 1 and -w >= 0");
  if (c.root < 0 || c.root >= c.ranks) throw InvalidArgument("mpcomm bench: -r root must be in [0, --ranks)");
  if (c.dtypes.empty()) throw InvalidArgument("mpcomm bench: -d names no data type");
  for (const auto& d : c.dtypes) parse_dtype(d);
  parse_reduce_op(c.redop);
  if (parse_device(c.device).kind == Device::cuda) device::require_cuda("mpcomm bench --device " + c.device);
  for (const auto& op : c.ops)
    if (std::find(all_ops().begin(), all_ops().end(), op) == all_ops().end())
      throw InvalidArgument("mpcomm bench: unknown op '" + op + "' (allreduce, broadcast, reduce, allgather, "
                            "reduce_scatter, gather, scatter, alltoall, sendrecv or all)");
  auto have = available_backends();
  for (const auto& b : c.backends)
    if (std::find(have.begin(), have.end(), base_backend(b)) == have.end())
      throw InvalidArgument("mpcomm bench: backend '" + b + "' is not available here (mpcomm info lists them)");
  for (const auto& b : c.backends)
    if (b == "nccl" && parse_device(c.device).kind != Device::cuda)
      throw InvalidArgument("mpcomm bench: backend nccl needs --device cuda");
}

// NCCL refuses two ranks on one GPU of one host. When a host would hold more ranks than there are GPUs,
// every rank gets its own emulated host (and NCCL_HOSTID, set by the nccl backend), so the ranks share
// the GPU over NCCL's network transport.
int nccl_hosts(const Config& c, const std::string& backend) {
  if (backend != "nccl") return c.hosts;
  const int per_host = (c.ranks + c.hosts - 1) / c.hosts;
  if (per_host <= device::cuda_devices()) return c.hosts;
  std::fprintf(stderr,
               "mpcomm bench: nccl: %d rank(s) per host but %d GPU(s): each rank runs as its own emulated host, so "
               "NCCL moves the bytes over its network transport (sockets through the host), not NVLink or P2P\n",
               per_host, device::cuda_devices());
  return c.ranks;
}

}  // namespace

Config config_from_json(const std::string& s) {
  auto j = nlohmann::json::parse(s);
  Config c;
  c.ranks = j.at("ranks");
  c.hosts = j.at("hosts");
  c.backends = j.at("backends").get<std::vector<std::string>>();
  c.ops = j.at("ops").get<std::vector<std::string>>();
  c.min_bytes = j.at("min_bytes");
  c.max_bytes = j.at("max_bytes");
  c.factor = j.at("factor");
  c.extra_sizes = j.at("extra_sizes").get<std::vector<size_t>>();
  c.moe_hidden = j.at("moe_hidden");
  c.imbalance = j.at("imbalance");
  c.compute_us = j.value("compute_us", 0.0);
  c.iters = j.at("iters");
  c.warmup = j.at("warmup");
  c.check = j.at("check");
  c.dtypes = j.at("dtypes").get<std::vector<std::string>>();
  c.redop = j.at("redop");
  c.root = j.at("root");
  c.timeout_s = j.at("timeout_s");
  c.device = j.value("device", "cpu");
  c.turns = j.value("turns", "");
  c.turn_slot = j.value("turn_slot", 0);
  c.turn_backends = j.value("turn_backends", 0);
  c.subjects = j.value("subjects", std::vector<std::string>{});
  c.rounds = j.value("rounds", 1);
  return c;
}

std::string self_exe_path() {
  char buf[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Internal("mpcomm bench: cannot find its own executable");
  return std::string(buf, static_cast<size_t>(n));
}

std::string make_temp_file(const std::string& what) {
  std::string path = "/tmp/mpcomm-" + what + "-XXXXXX";
  int fd = ::mkstemp(path.data());
  if (fd < 0) throw Internal("mpcomm " + what + ": cannot create a temporary file in /tmp");
  ::close(fd);
  return path;
}

namespace {

// One backend's run: its workers' configuration and launch options, and where its rank 0 writes.
struct Job {
  std::string backend;
  LaunchOptions lo;
  std::string json_tmp;  // the rows, one JSON line each
  std::string out_tmp;   // taking turns: the tables rank 0 prints (shown when every backend is done)
  pid_t pid = -1;        // taking turns: the child process that runs launch()
  bool ended = false, finished = false;
  int status = 0;
  std::vector<double> round_trips;  // taking turns: the CPUs' round trip before each of its turns
};

Job make_job(const Config& c, const std::string& exe, size_t slot, const std::string& turns) {
  Job j;
  j.backend = c.backends[slot];
  j.json_tmp = make_temp_file("bench");
  Config one = c;
  one.backends = {j.backend};
  one.turns = turns;
  one.turn_slot = static_cast<int>(slot);
  one.turn_backends = turns.empty() ? 0 : static_cast<int>(c.backends.size());
  j.lo.nranks = c.ranks;
  j.lo.hosts = nccl_hosts(c, base_backend(j.backend));
  one.hosts = j.lo.hosts;
  j.lo.timeout_s = c.timeout_s;
  j.lo.backend = base_backend(j.backend);
  j.lo.needs = launch_needs(j.lo.backend);
  j.lo.grace_s = 5;
  j.lo.prefix_output = false;  // only rank 0 prints: its lines are the table
  j.lo.argv = {exe, c.worker, "--config", config_to_json(one).dump(), "--json-out", j.json_tmp};
  return j;
}

// The job's rows; removes its files. Reports a failed job.
void collect(Job& j, std::vector<Row>* rows, int* status) {
  std::ifstream f(j.json_tmp);
  std::string line;
  for (size_t turn = 0; std::getline(f, line);) {  // row k was measured in turn k
    if (line.empty()) continue;
    rows->push_back(row_from_json(line));
    if (turn < j.round_trips.size()) rows->back().cpus_round_trip_ns = j.round_trips[turn];
    ++turn;
  }
  ::unlink(j.json_tmp.c_str());
  if (!j.out_tmp.empty()) ::unlink(j.out_tmp.c_str());
  if (j.status != 0) {
    std::fprintf(stderr, "mpcomm bench: backend %s failed (status %d)\n", j.backend.c_str(), j.status);
    if (*status == 0) *status = j.status;
  }
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// launch(j.lo) in a child process (launch() owns its process's signals and ranks), its stdout into
// j.out_tmp; the child dies with the driver.
pid_t start_job(const Job& j) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t driver = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Internal("mpcomm bench: cannot fork the launcher of backend " + j.backend + ": " + std::strerror(errno));
  if (pid > 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != driver) ::_exit(128 + SIGTERM);
  int fd = ::open(j.out_tmp.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0) ::_exit(127);
  ::close(fd);
  int st = 1;
  try {
    st = launch(j.lo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcomm bench: backend %s: %s\n", j.backend.c_str(), e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(st & 0xff);
}

// Whether the job's child has ended (waiting up to wait_s for it); records its status.
bool reap(Job& j, double wait_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (!j.ended) {
    int ws = 0;
    const pid_t r = ::waitpid(j.pid, &ws, WNOHANG);
    if (r == j.pid || (r < 0 && errno == ECHILD)) {
      j.ended = true;
      j.status = r != j.pid ? 1 : WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
      break;
    }
    if (std::chrono::steady_clock::now() >= until) break;
    ::usleep(2000);
  }
  return j.ended;
}

// Ends the job: SIGTERM to its launcher (which ends its ranks), and waits for it.
void end_job(Job& j, const std::string& why) {
  if (j.ended) return;
  std::fprintf(stderr, "mpcomm bench: ending backend %s: %s\n", j.backend.c_str(), why.c_str());
  ::kill(j.pid, SIGTERM);
  if (!reap(j, 15)) {
    ::kill(j.pid, SIGKILL);
    reap(j, 1e9);
  }
  if (j.status == 0) j.status = 1;
}

std::vector<Row> run_sequential(const Config& c, const std::string& exe, bool keep_going, int* status) {
  std::vector<Row> rows;
  for (size_t b = 0; b < c.backends.size(); ++b) {
    Job j = make_job(c, exe, b, "");
    {
      cli::ProgressBar progress(j.backend, expected_rows(c), [&] { return std::make_pair(count_lines(j.json_tmp), std::string(" rows")); });
      j.status = launch(j.lo);
    }
    collect(j, &rows, status);
    if (j.status != 0 && !keep_going) break;
  }
  return rows;
}

// Every backend's ranks at once, measuring in turns: row k of each backend (in backend order for odd
// k, reversed for even k, so that no backend always follows the same other), and only then row k+1.
std::vector<Row> run_in_turns(const Config& c, const std::string& exe, bool keep_going, int* status) {
  const size_t nb = c.backends.size();
  const std::string board_path = make_temp_file("turns");
  struct Unlink {  // on every way out; once every rank has mapped the board, its name goes
    const std::string& path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_board{board_path};
  TurnBoard board = TurnBoard::create(board_path, static_cast<int>(nb));
  std::vector<Job> jobs;
  for (size_t b = 0; b < nb; ++b) {
    jobs.push_back(make_job(c, exe, b, board_path));
    jobs.back().out_tmp = make_temp_file("bench-out");
  }
  for (auto& j : jobs) j.pid = start_job(j);
  bool stop = false;  // a backend failed and !keep_going: end the others
  auto ended = [&](Job& j) {
    if (j.status != 0 && !keep_going && !stop) {
      stop = true;
      for (auto& o : jobs) end_job(o, "backend " + j.backend + " failed (status " + std::to_string(j.status) + ")");
    }
  };
  cpu_set_t cpus;
  const bool two_cpus = pthread_getaffinity_np(pthread_self(), sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) >= 2;
  // A row is at most check + warm-up + timed calls, each bounded by the ranks' timeout.
  const double row_bound_s = c.timeout_s * (c.iters + c.warmup + 3);
  {
    cli::ProgressBar progress(joined(c.backends), expected_rows(c) * nb, [&] {
      size_t n = 0;
      for (const auto& j : jobs) n += count_lines(j.json_tmp);
      return std::make_pair(n, std::string(" rows"));
    });
    // 1. Every backend's ranks set up (communicator, buffers) before anyone measures.
    const auto setup_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(c.timeout_s + 60);
    for (bool waiting = true; waiting && !stop;) {
      waiting = false;
      for (size_t b = 0; b < nb; ++b) {
        Job& j = jobs[b];
        if (j.ended || board.ready_count(static_cast<int>(b)) >= static_cast<uint32_t>(c.ranks)) continue;
        if (reap(j, 0)) {
          ended(j);
        } else if (std::chrono::steady_clock::now() > setup_until) {
          end_job(j, "its ranks were not set up after " + std::to_string(static_cast<int>(c.timeout_s + 60)) + " s");
          ended(j);
        } else {
          waiting = true;
        }
      }
      if (waiting) ::usleep(10000);
    }
    ::unlink(board_path.c_str());  // every rank that will map it has
    // 2. The turns.
    for (uint32_t k = 1; !stop; ++k) {
      bool any = false;
      for (size_t i = 0; i < nb && !stop; ++i) {
        const size_t b = k % 2 == 1 ? i : nb - 1 - i;
        Job& j = jobs[b];
        if (j.ended || j.finished) continue;
        any = true;
        // Nobody measures now: how far apart the first two CPUs are for this turn (about 0.5 ms).
        if (two_cpus) j.round_trips.push_back(cpu_round_trip_ns(0, 1, 1000));
        board.give_turn(static_cast<int>(b), k);
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(row_bound_s);
        for (;;) {
          const uint32_t d = board.done(static_cast<int>(b));
          if (d == TurnBoard::kAllDone) {  // its last turn: it exits now; the next turn waits for that
            j.finished = true;
            if (!reap(j, c.timeout_s + 30)) end_job(j, "it did not exit after its last row");
            break;
          }
          if (d >= k || reap(j, 0)) break;
          if (std::chrono::steady_clock::now() > until) {
            end_job(j, "row " + std::to_string(k) + " took longer than " + std::to_string(static_cast<int>(row_bound_s)) + " s");
            break;
          }
          board.wait_done_change(static_cast<int>(b), d, 100);
        }
        if (j.ended) ended(j);
      }
      if (!any) break;
    }
  }
  for (auto& j : jobs) reap(j, 1e9);
  std::vector<Row> rows;
  for (auto& j : jobs) {
    std::ifstream out(j.out_tmp);
    std::string line;
    while (std::getline(out, line)) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    collect(j, &rows, status);
  }
  return rows;
}

// As one rank of someone else's job: each backend in turn, over the job's store, in this process.
std::vector<Row> run_in_this_job(const Config& in, bool keep_going, int* status) {
  if (in.worker != "bench-worker")
    throw InvalidArgument("mpcomm: " + in.worker.substr(0, in.worker.find('-')) +
                          " does not run as a rank of a launcher's job; run it on one machine (--launcher local)");
  std::vector<Row> rows;
  for (const auto& backend : in.backends) {
    Config one = in;
    one.backends = {backend};
    const std::string json_tmp = cli::prints_results() ? make_temp_file("bench") : "";
    Job j;
    j.backend = backend;
    j.json_tmp = json_tmp;
    try {
      if (reproducible_backend(backend)) ::setenv("MPCOMM_REPRODUCIBLE", "1", 1);
      auto comm = cli::rank_communicator(base_backend(backend), in.device);
      ::unsetenv("MPCOMM_REPRODUCIBLE");
      one.ranks = comm->size();
      one.hosts = comm->topology().num_hosts();
      validate(one);
      j.status = run_worker(*comm, one, json_tmp);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mpcomm bench: backend %s: %s\n", backend.c_str(), e.what());
      j.status = 1;
    }
    if (!json_tmp.empty()) collect(j, &rows, status);
    else if (j.status != 0 && *status == 0) *status = j.status;
    // A failed backend has announced the job's abort in its store, which every later communicator of
    // the job (and, under mpcomm launch --nnodes, every node's launcher) reads: no going on.
    if (j.status != 0) {
      if (keep_going && cli::prints_results())
        std::fprintf(stderr, "mpcomm bench: as a rank of a launcher's job, the first failed backend ends the run "
                             "(--keep-going applies on one machine)\n");
      break;
    }
  }
  return rows;
}

}  // namespace

std::vector<Row> run_bench(const Config& c, const std::string& exe, bool keep_going, int* status) {
  if (c.as_rank) {
    *status = 0;
    return run_in_this_job(c, keep_going, status);
  }
  validate(c);
  *status = 0;
  ::setenv("MPCOMM_DEVICE", c.device.c_str(), 1);  // the ranks' Options::device
  return c.sequential || c.backends.size() < 2 ? run_sequential(c, exe, keep_going, status)
                                               : run_in_turns(c, exe, keep_going, status);
}

void print_side_by_side(const std::vector<Row>& rows, FILE* out) {
  std::vector<std::string> backends;
  std::vector<std::pair<std::string, std::string>> tables;  // (op, dtype), in the order measured
  for (const auto& r : rows) {
    if (std::find(backends.begin(), backends.end(), r.backend) == backends.end()) backends.push_back(r.backend);
    if (std::find(tables.begin(), tables.end(), std::make_pair(r.op, r.dtype)) == tables.end()) tables.emplace_back(r.op, r.dtype);
  }
  if (rows.empty()) return;
  for (const auto& [op, dtype] : tables) {
    std::map<size_t, std::map<std::string, const Row*>> table;
    const Row* any = nullptr;
    for (const auto& r : rows)
      if (r.op == op && r.dtype == dtype && !r.inplace) {
        table[r.bytes][r.backend] = &r;
        any = &r;
      }
    if (any == nullptr) continue;
    std::fprintf(out, "#\n# side by side: %s, %s %s, %d ranks on %d host(s); out-of-place time in us, (×) = ratio to the fastest\n",
                 op.c_str(), any->dtype.c_str(), any->redop.c_str(), any->ranks, any->hosts);
    std::fprintf(out, "# %10s", "size");
    for (const auto& b : backends) std::fprintf(out, " %20s", b.c_str());
    std::fprintf(out, "   fastest\n");
    for (const auto& [bytes, by] : table) {
      double best = 0;
      std::string best_name;
      for (const auto& [b, r] : by)
        if (best == 0 || r->time_us < best) {
          best = r->time_us;
          best_name = b;
        }
      std::fprintf(out, "  %10s", human_bytes(bytes).c_str());
      for (const auto& b : backends) {
        auto it = by.find(b);
        if (it == by.end()) {
          std::fprintf(out, " %20s", "-");
          continue;
        }
        char cell[64];
        std::snprintf(cell, sizeof cell, "%.2f (%.2f×)", it->second->time_us, it->second->time_us / best);
        std::fprintf(out, " %21s", cell);
      }
      std::fprintf(out, "   %s\n", best_name.c_str());
    }
  }
}

}  // namespace mpcomm::bench

namespace mpcomm::bench {

void add_sweep_options(CLI::App& app, Config& c, std::string* min_bytes, std::string* max_bytes) {
  app.add_option("-b,--minbytes", *min_bytes, "smallest size, the whole buffer (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", *max_bytes, "largest size");
  app.add_option("-f,--stepfactor", c.factor, "size multiplier between rows");
  app.add_option("-n,--iters", c.iters, "timed iterations per row")->check(cli::whole_at_least(1));
  app.add_option("-w,--warmup_iters", c.warmup, "untimed warm-up iterations per row")->check(cli::whole_at_least(0));
  app.add_option("-c,--check", c.check, "check results (0 or 1)")->check(cli::whole_between(0, 1));
}

}  // namespace mpcomm::bench

namespace mpcomm::cli {

namespace {

struct BenchCli {
  bench::Config c;
  std::string backends = "native", ops = "allreduce", b = "8", e = "64M", json, launcher = "auto";
  bool keep_going = false, reproducible = false;
};

}  // namespace

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchCli>();
  auto* ranks_opt = app.add_option("--ranks", o->c.ranks, "ranks (default 4)")->check(whole_at_least(1));
  auto* hosts_opt = app.add_option("--hosts", o->c.hosts, "emulated hosts (default 1)")->check(whole_at_least(1));
  cli::add_launcher_option(app, &o->launcher);
  app.add_option("--backends", o->backends, "comma list of backends, or all");
  app.add_option("--ops", o->ops,
                 "comma list: allreduce,broadcast,reduce,allgather,reduce_scatter,gather,scatter,alltoall,sendrecv,"
                 "alltoallv,allgatherv (mixture-of-experts dispatch shapes), or all");
  app.add_option("--imbalance", o->c.imbalance,
                 "alltoallv/allgatherv: the router's skew, a Zipf exponent over the ranks (0: even)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--moe-hidden", o->c.moe_hidden, "alltoallv/allgatherv: elements per token")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  bench::add_sweep_options(app, o->c, &o->b, &o->e);
  app.add_option("-d,--datatype", o->c.dtypes,
                 "float, half, bfloat16, double, int32, int64, uint8, int8; a comma list measures each in turn, in one run")
      ->delimiter(',');
  app.add_option("-o,--op", o->c.redop, "sum, prod, min, max, avg; band, bor, bxor with an integer -d");
  app.add_option("-r,--root", o->c.root, "root rank of rooted ops");
  auto* timeout = app.add_option("--timeout", o->c.timeout_s, "MPCOMM_TIMEOUT of the ranks, seconds (default: the environment's, else 120)")
                     ->check(positive_number());
  app.add_option("--json", o->json, "write one JSON object per measured row to this file");
  app.add_option("--device", o->c.device, "where the buffers live: cpu, or cuda (each rank its local GPU; the CPU "
                                          "backends stage through pinned host memory)");
  app.add_flag("--reproducible", o->reproducible,
               "also measure each backend with reproducible sums (MPCOMM_REPRODUCIBLE=1), as <backend>+repro, in turns "
               "with the plain one");
  app.add_option("--compute-us", o->c.compute_us,
                 "before each call every rank computes (sweeps memory) for about this long, ranks for different "
                 "times, and a call is timed from its last rank's arrival: an op as a trainer meets it (0: back to "
                 "back; the ranks must share one machine's clock)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--keep-going", o->keep_going, "go on with the other backends when one fails");
  app.add_flag("--sequential", o->c.sequential,
               "run the backends one after the other, each its whole sweep (default: all at once, taking turns "
               "row by row, so that every row of every backend sees the machine in the same state)");
  return [o, ranks_opt, hosts_opt, timeout] {
    auto& c = o->c;
    c.timeout_s = setting_or(timeout, c.timeout_s, "MPCOMM_TIMEOUT", 120);
    c.as_rank = run_as_rank("mpcomm bench", o->launcher, {{"--ranks", ranks_opt->count() > 0}, {"--hosts", hosts_opt->count() > 0}});
    c.backends = o->backends == "all" ? bench::all_backends_for(o->c.device) : bench::split_list(o->backends);
    if (c.as_rank && o->backends == "all") c.backends = startable_backends(c.backends);
    if (o->reproducible) {
      std::vector<std::string> both;
      for (const auto& b : c.backends) both.insert(both.end(), {b, b + bench::kReproducibleSuffix});
      c.backends = both;
    }
    c.ops = o->ops == "all" ? bench::all_ops() : bench::split_list(o->ops);
    c.min_bytes = bench::parse_bytes(o->b);
    c.max_bytes = bench::parse_bytes(o->e);
    int status = 0;
    auto rows = bench::run_bench(c, bench::self_exe_path(), o->keep_going, &status);
    bench::print_side_by_side(rows, stdout);
    if (!o->json.empty() && prints_results()) {
      std::ofstream f(o->json);
      if (!f) throw InvalidArgument("mpcomm bench: cannot write " + o->json);
      for (const auto& r : rows) f << bench::to_json(r) << "\n";
    }
    uint64_t wrong = 0;
    for (const auto& r : rows) wrong += r.wrong;
    if (wrong > 0) std::fprintf(stderr, "mpcomm bench: %llu wrong elements\n", static_cast<unsigned long long>(wrong));
    return status != 0 ? status : (wrong > 0 ? 1 : 0);
  };
}

Runner add_bench_worker(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  app.add_option("--config", *config, "the bench configuration, as JSON")->required();
  app.add_option("--json-out", *json_out, "where rank 0 appends its rows");
  app.group("");  // internal: started by mpcomm bench
  return [config, json_out] {
    bench::Config c = bench::config_from_json(*config);
    if (bench::reproducible_backend(c.backends.at(0))) ::setenv("MPCOMM_REPRODUCIBLE", "1", 1);
    auto comm = init_from_env();
    return bench::run_worker(*comm, c, *json_out);
  };
}

}  // namespace mpcomm::cli
