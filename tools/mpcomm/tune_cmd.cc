// mpcomm tune (the driver) and mpcomm tune-worker (what each rank runs): tune.h.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "backends/registry.h"
#include "cli_checks.h"
#include "commands.h"
#include "backends/native/algorithms/algorithms.h"
#include "tune.h"
#include "bootstrap/env.h"
#include "device/cpu_pair.h"
#include "settings/settings.h"
#include "tuning/selection_table.h"

namespace mpcomm::tune {

namespace {

// A row for an algorithm that cannot run at that size (every rank got the same Unsupported).
bench::Row refused_row(const Communicator& control, const std::string& op, DataType dt, size_t count, bool inplace,
                       const std::string& why) {
  bench::Row r;
  const bool blocks = op == "allgather" || op == "reduce_scatter" || op == "gather" || op == "scatter" || op == "alltoall";
  r.backend = "native";
  r.op = op;
  r.dtype = std::string(to_string(dt));
  r.ranks = control.size();
  r.hosts = control.topology().num_hosts();
  r.count = count * (blocks ? static_cast<size_t>(control.size()) : 1);
  r.bytes = r.count * dtype_size(dt);
  r.inplace = inplace;
  r.refused = why;
  return r;
}

}  // namespace

int run_worker(const bench::Config& c, const std::string& json_path) {
  const EnvWorld w = env_world({});
  auto control = create("native", std::make_shared<PrefixStore>("tune/control", w.store), w.rank, w.size, w.opts);
  const bool lead = w.rank == 0;
  FILE* json = nullptr;
  if (lead) {
    json = std::fopen(json_path.c_str(), "a");
    if (json == nullptr) throw InvalidArgument("mpcomm tune: cannot open " + json_path + " for writing");
  }
  bench::Buffers b = bench::make_buffers(*control, c);
  for (const auto& op : c.ops) {
    // A communicator per algorithm, forced; every size measured with each in turn, so that each size's
    // candidates meet the machine in about the same state (on a virtual machine it changes within
    // minutes: docs/performance.md, "Why runs differ").
    const std::vector<std::string> names = candidates(op);
    std::vector<std::unique_ptr<Communicator>> comms;
    for (const std::string& name : names) {
      Options o = w.opts;
      std::string table;  // a send path: a one-row table of this rank's, read when the communicator is made
      if (op == "sendrecv") {
        table = "/tmp/mpcomm-tune-" + std::to_string(::getpid()) + "-" + name + ".txt";
        std::ofstream(table) << tuning::format_header("native") << "\nsend.path -> " << name << "\n";
        o.params["MPCOMM_TUNING"] = table;
        o.params["MPCOMM_SINGLE_COPY"] = "1";
      } else {
        o.params["MPCOMM_ALGO"] = op + "=" + name;
      }
      comms.push_back(create("native", std::make_shared<PrefixStore>("tune/" + op + "=" + name, w.store), w.rank, w.size, o));
      if (!table.empty()) std::remove(table.c_str());
    }
    for (const auto& dname : c.dtypes)
      for (size_t bytes : bench::sizes(c)) {
        const DataType dt = parse_dtype(dname);
        const size_t count = bench::elements_per_rank(op, bytes, dtype_size(dt), w.size);
        if (count == 0) continue;
        for (int ip = 0; ip < (bench::has_inplace(op) ? 2 : 1); ++ip)
          for (size_t a = 0; a < names.size(); ++a) {
            bench::Row row;
            try {
              row = bench::measure(*comms[a], *control, c, op, dt, count, ip == 1, b);
            } catch (const Unsupported& e) {
              row = refused_row(*control, op, dt, count, ip == 1, e.what());
            }
            row.algorithm = names[a];
            if (json != nullptr) {
              std::fprintf(json, "%s\n", bench::to_json(row).c_str());
              std::fflush(json);
            }
          }
      }
  }
  if (json != nullptr) std::fclose(json);
  control->barrier();
  return 0;
}

}  // namespace mpcomm::tune

namespace mpcomm::cli {

namespace {

struct TuneCli {
  bench::Config c;
  std::string ops = "allreduce,broadcast,reduce,allgather,reduce_scatter,sendrecv", b = "8", e = "64M", out;
};

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

}  // namespace

Runner add_tune(CLI::App& app) {
  auto o = std::make_shared<TuneCli>();
  o->c.ranks = 2;
  app.add_option("--ranks", o->c.ranks, "ranks (default 2)")->check(whole_at_least(1));
  app.add_option("--hosts", o->c.hosts, "emulated hosts (default 1)")->check(whole_at_least(1));
  app.add_option("--ops", o->ops, "comma list of ops with native algorithms, and sendrecv for the send paths (default allreduce,broadcast,reduce,allgather,reduce_scatter,sendrecv)");
  bench::add_sweep_options(app, o->c, &o->b, &o->e);  // -c 1: an algorithm with wrong results is left out
  app.add_option("-d,--datatype", o->c.dtypes, "data types, at most one per class (int, float, half), e.g. float,bfloat16")->delimiter(',');
  auto* timeout = app.add_option("--timeout", o->c.timeout_s, "MPCOMM_TIMEOUT of the ranks, seconds (default: the environment's, else 120)")
                     ->check(positive_number());
  app.add_option("-o,--out", o->out, "the table to write (for MPCOMM_TUNING)")->required();
  return [o, timeout] {
    o->c.timeout_s = setting_or(timeout, o->c.timeout_s, "MPCOMM_TIMEOUT", 120);
    if (launched_as_rank())
      throw InvalidArgument("mpcomm tune: started as a rank of a launcher's job (srun, mpirun, torchrun, mpcomm "
                            "launch); tune measures one machine and starts its own ranks there: run it once, "
                            "without a launcher, on a node of the kind the table is for");
    bench::Config& c = o->c;
    c.backends = {"native"};
    c.ops = bench::split_list(o->ops);
    c.min_bytes = bench::parse_bytes(o->b);
    c.max_bytes = bench::parse_bytes(o->e);
    c.sequential = true;
    c.worker = "tune-worker";
    int most = 1;
    for (const auto& op : c.ops) {
      const auto names = tune::candidates(op);
      if (names.empty()) throw InvalidArgument("mpcomm tune: --ops: '" + op + "' has no native algorithms to choose from");
      if (std::find(bench::all_ops().begin(), bench::all_ops().end(), op) == bench::all_ops().end())
        throw InvalidArgument("mpcomm tune: --ops: mpcomm bench does not measure '" + op + "' (alltoallv and allgatherv: not yet)");
      most = std::max(most, static_cast<int>(names.size()));
    }
    c.variants = most;
    std::vector<tuning::DtypeClass> classes;
    for (const auto& d : c.dtypes) {
      const tuning::DtypeClass k = tuning::dtype_class(parse_dtype(d));
      if (std::find(classes.begin(), classes.end(), k) != classes.end())
        throw InvalidArgument("mpcomm tune: -d: two data types of class " + std::string(tuning::to_string(k)) +
                              " (a table row holds for the whole class)");
      classes.push_back(k);
    }
    // Where the first two CPUs are, before the ranks run (the send paths' rows hold only there).
    tune::Shape shape = tune::shape_of(c.ranks, c.hosts, ::sysconf(_SC_NPROCESSORS_ONLN));
    const double rt = c.hosts == 1 && c.ranks >= 2 ? cpu_round_trip_ns(0, 1, 1000) : std::nan("");
    if (!std::isnan(rt)) shape.placement = rt > param_double("MPCOMM_FAR_NS") ? tuning::Placement::far : tuning::Placement::near;
    std::ofstream probe(o->out, std::ios::app);
    if (!probe) throw InvalidArgument("mpcomm tune: cannot write " + o->out);
    int status = 0;
    const auto rows = bench::run_bench(c, bench::self_exe_path(), false, &status);
    if (status != 0) return status;
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string dtypes;
    for (const auto& d : c.dtypes) dtypes += (dtypes.empty() ? "" : ",") + d;
    const std::vector<std::string> comment = {
        "mpcomm tune --ranks " + std::to_string(c.ranks) + " --hosts " + std::to_string(c.hosts) + " --ops " + o->ops + " -b " +
            o->b + " -e " + o->e + " -n " + std::to_string(c.iters) + " -w " + std::to_string(c.warmup) + " -d " + dtypes,
        "measured on " + std::string(host) + " (" + std::to_string(cpus) + " CPUs), " + now_text() +
            (std::isnan(rt) ? "" : "; CPUs 0 and 1 " + std::string(tuning::to_string(shape.placement)) + " before the run (" +
                                       std::to_string(static_cast<int>(rt)) + " ns round trip)")};
    const std::string text = tune::table_text(shape, rows, comment);
    std::ofstream f(o->out, std::ios::trunc);
    f << text;
    if (!f) throw InvalidArgument("mpcomm tune: cannot write " + o->out);
    std::printf("%s", text.c_str());
    std::printf("# written to %s: MPCOMM_TUNING=%s puts these rows before the built-in table\n", o->out.c_str(), o->out.c_str());
    return 0;
  };
}

Runner add_tune_worker(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  app.add_option("--config", *config, "the tune configuration, as JSON")->required();
  app.add_option("--json-out", *json_out, "where rank 0 appends its rows")->required();
  app.group("");  // internal: started by mpcomm tune
  return [config, json_out] { return tune::run_worker(bench::config_from_json(*config), *json_out); };
}

}  // namespace mpcomm::cli
