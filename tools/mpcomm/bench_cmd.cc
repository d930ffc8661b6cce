// mpcomm bench (the driver) and mpcomm bench-worker (what each rank runs).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "progress.h"

#include "bench.h"
#include "bootstrap/launcher.h"
#include "core/device.h"
#include "commands.h"
#include "mpcomm/mpcomm.h"

namespace mpcomm::bench {

namespace {

nlohmann::json config_to_json(const Config& c) {
  return {{"ranks", c.ranks},   {"hosts", c.hosts},   {"backends", c.backends}, {"ops", c.ops},
          {"min_bytes", c.min_bytes}, {"max_bytes", c.max_bytes}, {"factor", c.factor}, {"extra_sizes", c.extra_sizes}, {"iters", c.iters},
          {"warmup", c.warmup}, {"check", c.check},   {"dtypes", c.dtypes},     {"redop", c.redop},
          {"root", c.root},     {"timeout_s", c.timeout_s}, {"device", c.device}};
}

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
  c.iters = j.at("iters");
  c.warmup = j.at("warmup");
  c.check = j.at("check");
  c.dtypes = j.at("dtypes").get<std::vector<std::string>>();
  c.redop = j.at("redop");
  c.root = j.at("root");
  c.timeout_s = j.at("timeout_s");
  c.device = j.value("device", "cpu");
  return c;
}

size_t count_lines(const std::string& path) {
  std::ifstream f(path);
  size_t n = 0;
  std::string line;
  while (std::getline(f, line)) ++n;
  return n;
}

size_t expected_rows(const Config& c) {
  size_t per_op = sizes(c).size(), rows = 0;
  for (const auto& op : c.ops) rows += per_op * (op == "broadcast" || op == "sendrecv" ? 1 : 2);
  return rows * c.dtypes.size();
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
    if (std::find(have.begin(), have.end(), b) == have.end())
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

std::vector<Row> run_bench(const Config& c, const std::string& exe, bool keep_going, int* status) {
  validate(c);
  std::vector<Row> rows;
  *status = 0;
  for (const auto& backend : c.backends) {
    const std::string tmp = make_temp_file("bench");
    Config one = c;
    one.backends = {backend};
    LaunchOptions lo;
    lo.nranks = c.ranks;
    lo.hosts = nccl_hosts(c, backend);
    one.hosts = lo.hosts;
    lo.timeout_s = c.timeout_s;
    lo.backend = backend;
    lo.grace_s = 5;
    lo.prefix_output = false;  // only rank 0 prints: its lines are the table
    lo.argv = {exe, "bench-worker", "--config", config_to_json(one).dump(), "--json-out", tmp};
    ::setenv("MPCOMM_DEVICE", c.device.c_str(), 1);  // the ranks' Options::device
    int st;
    {
      cli::ProgressBar progress(backend, expected_rows(c), [&] { return std::make_pair(count_lines(tmp), std::string(" rows")); });
      st = launch(lo);
    }
    std::ifstream f(tmp);
    std::string line;
    while (std::getline(f, line))
      if (!line.empty()) rows.push_back(row_from_json(line));
    ::unlink(tmp.c_str());
    if (st != 0) {
      std::fprintf(stderr, "mpcomm bench: backend %s failed (status %d)\n", backend.c_str(), st);
      if (*status == 0) *status = st;
      if (!keep_going) break;
    }
  }
  return rows;
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

namespace mpcomm::cli {

namespace {

struct BenchCli {
  bench::Config c;
  std::string backends = "native", ops = "allreduce", b = "8", e = "64M", json;
  bool keep_going = false;
};

}  // namespace

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchCli>();
  app.add_option("--ranks", o->c.ranks, "ranks (default 4)")->check(CLI::PositiveNumber);
  app.add_option("--hosts", o->c.hosts, "emulated hosts (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--backends", o->backends, "comma list of backends, or all");
  app.add_option("--ops", o->ops, "comma list: allreduce,broadcast,reduce,allgather,reduce_scatter,gather,scatter,alltoall,sendrecv, or all");
  app.add_option("-b,--minbytes", o->b, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", o->e, "largest size");
  app.add_option("-f,--stepfactor", o->c.factor, "size multiplier between rows");
  app.add_option("-n,--iters", o->c.iters, "timed iterations per row");
  app.add_option("-w,--warmup_iters", o->c.warmup, "untimed warm-up iterations per row");
  app.add_option("-c,--check", o->c.check, "check results (0 or 1)")->check(CLI::Range(0, 1));
  app.add_option("-d,--datatype", o->c.dtypes,
                 "float, half, bfloat16, double, int32, int64, uint8, int8; a comma list measures each in turn, in one run")
      ->delimiter(',');
  app.add_option("-o,--op", o->c.redop, "sum, prod, min, max, avg");
  app.add_option("-r,--root", o->c.root, "root rank of rooted ops");
  app.add_option("--timeout", o->c.timeout_s, "MPCOMM_TIMEOUT of the ranks, seconds");
  app.add_option("--json", o->json, "write one JSON object per measured row to this file");
  app.add_option("--device", o->c.device, "where the buffers live: cpu, or cuda (each rank its local GPU; the CPU "
                                          "backends stage through pinned host memory)");
  app.add_flag("--keep-going", o->keep_going, "go on with the next backend when one fails");
  return [o] {
    auto& c = o->c;
    c.backends = o->backends == "all" ? bench::all_backends_for(o->c.device) : bench::split_list(o->backends);
    c.ops = o->ops == "all" ? bench::all_ops() : bench::split_list(o->ops);
    c.min_bytes = bench::parse_bytes(o->b);
    c.max_bytes = bench::parse_bytes(o->e);
    int status = 0;
    auto rows = bench::run_bench(c, bench::self_exe_path(), o->keep_going, &status);
    bench::print_side_by_side(rows, stdout);
    if (!o->json.empty()) {
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
    auto comm = init_from_env();
    return bench::run_worker(*comm, c, *json_out);
  };
}

}  // namespace mpcomm::cli
