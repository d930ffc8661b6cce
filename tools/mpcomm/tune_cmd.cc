// mpcomm tune (the driver) and mpcomm tune-worker (what each rank runs): tune.h.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "backends/auto/route_table.h"
#include "backends/native/algorithms/algorithms.h"
#include "backends/registry.h"
#include "bootstrap/env.h"
#include "cli_checks.h"
#include "commands.h"
#include "device/cpu_pair.h"
#include "settings/settings.h"
#include "tune.h"
#include "tuning/selection_table.h"

namespace mpcomm::tune {

namespace {

// A row for a candidate that cannot run at that size (every rank got the same Unsupported).
bench::Row refused_row(const Communicator& control, const std::string& backend, const std::string& op, DataType dt,
                       size_t count, bool inplace, const std::string& why) {
  bench::Row r;
  const bool blocks = op == "allgather" || op == "reduce_scatter" || op == "gather" || op == "scatter" || op == "alltoall";
  r.backend = backend;
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

// The options that force `candidate` of `plan`; a one-row table goes to a file of this rank's, named in
// *table (the caller removes it once the communicator is made).
Options forcing(const Options& base, const Plan& plan, const std::string& candidate, std::string* table) {
  Options o = base;
  switch (plan.force) {
    case Plan::algorithm_setting:
      o.params["MPCOMM_ALGO"] = plan.op + "=" + candidate;
      break;
    case Plan::mpi_calls:
      o.params["MPCOMM_MPI_CALLS"] = candidate;
      break;
    case Plan::backend_choice:
      break;
    case Plan::table_row:
      *table = "/tmp/mpcomm-tune-" + std::to_string(::getpid()) + "-" + plan.subject + "-" + candidate + ".txt";
      std::ofstream(*table) << tuning::format_header("native") << "\n" << plan.subject << " -> " << candidate << "\n";
      o.params["MPCOMM_TUNING"] = *table;
      if (!plan.algorithm.empty()) o.params["MPCOMM_ALGO"] = plan.op + "=" + plan.algorithm;
      if (plan.per_message) o.params["MPCOMM_SINGLE_COPY"] = "1";
      break;
  }
  return o;
}

}  // namespace

int run_worker(const bench::Config& c, const std::string& json_path) {
  const EnvWorld w = env_world({});
  const std::string backend = c.backends.at(0);
  auto control = create("native", std::make_shared<PrefixStore>("tune/control", w.store), w.rank, w.size, w.opts);
  const bool lead = w.rank == 0;
  FILE* json = nullptr;
  if (lead) {
    json = std::fopen(json_path.c_str(), "a");
    if (json == nullptr) throw InvalidArgument("mpcomm tune: cannot open " + json_path + " for writing");
  }
  bench::Buffers b = bench::make_buffers(*control, c);
  for (size_t i = 0; i < c.ops.size(); ++i) {
    const Plan plan = plan_of(backend, i < c.subjects.size() ? c.subjects[i] : c.ops[i]);
    const std::string& op = plan.op;
    // A communicator per candidate, forced; every size measured with each in turn, so that each size's
    // candidates meet the machine in about the same state (on a virtual machine it changes within
    // minutes: docs/performance.md, "Why runs differ").
    std::vector<std::unique_ptr<Communicator>> comms;
    for (const std::string& name : plan.candidates) {
      std::string table;
      const Options o = forcing(w.opts, plan, name, &table);
      comms.push_back(create(plan.force == Plan::backend_choice ? name : backend,
                             std::make_shared<PrefixStore>("tune/" + plan.subject + "=" + name, w.store), w.rank,
                             w.size, o));
      if (!table.empty()) std::remove(table.c_str());
    }
    // In place too where a row may ask for it: a native op's algorithms.
    const bool both_layouts = bench::has_inplace(op) && plan.force == Plan::algorithm_setting;
    size_t turn = 0;
    for (const auto& dname : c.dtypes)
      for (size_t bytes : bench::sizes(c)) {
        const DataType dt = parse_dtype(dname);
        const size_t count = bench::elements_per_rank(op, bytes, dtype_size(dt), w.size);
        if (count == 0) continue;
        const size_t nc = plan.candidates.size();
        for (int round = 0; round < c.rounds; ++round, ++turn)
          for (int ip = 0; ip < (both_layouts ? 2 : 1); ++ip)
            for (size_t i = 0; i < nc; ++i) {
              // Every candidate in turn, starting one further each round and size, backwards every other.
              const size_t a = turn % 2 == 0 ? (i + turn) % nc : (nc - 1 - i + turn) % nc;
              bench::Row row;
              try {
                row = bench::measure(*comms[a], *control, c, op, dt, count, ip == 1, b);
              } catch (const Unsupported& e) {
                row = refused_row(*control, backend, op, dt, count, ip == 1, e.what());
              }
              row.op = plan.subject;  // what the row is for (table_text)
              row.algorithm = plan.candidates[a];
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
  std::string backend = "native", backends, ops, b = "8", e = "64M", out;
  bool check = false;
  double limit = 1.2;
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
  app.add_option("--backend", o->backend, "the backend whose table to write: native (algorithms, paths, protocol choices) or mpi (blocking or non-blocking calls); default native");
  app.add_option("--ops", o->ops,
                 "comma list of what to measure: ops (native: their algorithms; mpi: their calls), and for native sendrecv "
                 "(the send paths), collective.path and the protocol choices (mpcomm info --table lists them); default: "
                 "every one of them that can run in the shape");
  bench::add_sweep_options(app, o->c, &o->b, &o->e);  // -c 1: an algorithm with wrong results is left out
  app.add_option("-d,--datatype", o->c.dtypes, "data types, at most one per class (int, float, half), e.g. float,bfloat16")->delimiter(',');
  auto* timeout = app.add_option("--timeout", o->c.timeout_s, "MPCOMM_TIMEOUT of the ranks, seconds (default: the environment's, else 120)")
                     ->check(positive_number());
  app.add_option("--backends", o->backends,
                 "all, or a comma list of backends: write auto's table, which backend runs each op and size (every "
                 "candidate's median with it), stored for this machine where auto finds it (or -o)");
  // -c stays nccl-tests' result check; --check is tune's.
  app.remove_option(app.get_option("--check"));
  app.add_option("-c", o->c.check, "check results (0 or 1)")->check(whole_between(0, 1));
  app.add_flag("--check", o->check,
               "with --backends: measure and compare auto's choices by the table in use with the fastest candidate; "
               "exit status 1 when one takes more than --limit times the fastest; writes nothing");
  app.add_option("--rounds", o->c.rounds,
                 "measure each size's candidates this many times, in turns whose order changes every round and size; "
                 "a row holds the median over the rounds (default 1)")
      ->check(whole_at_least(1));
  app.add_option("--limit", o->limit, "--check's limit, times the fastest candidate (default 1.2)")
      ->check(positive_number());
  app.add_option("-o,--out", o->out,
                 "the table to write (for MPCOMM_TUNING; auto's default: the stored table of this machine); other "
                 "backends' sections already in it are kept");
  return [o, timeout] {
    if (!o->backends.empty()) {
      o->backend = "auto";
      if (o->backends != "all") ::setenv("MPCOMM_AUTO_BACKENDS", o->backends.c_str(), 1);
      (void)tune::auto_candidates();
    }
    if (o->check && o->backend != "auto")
      throw InvalidArgument("mpcomm tune --check: checks auto's table; name the backends (--backends all)");
    if (o->out.empty() && o->backend == "auto") o->out = autosel::cache_path(autosel::machine_fingerprint(o->c.hosts));
    if (o->out.empty()) throw InvalidArgument("mpcomm tune: -o FILE is required (the table to write)");
    o->c.timeout_s = setting_or(timeout, o->c.timeout_s, "MPCOMM_TIMEOUT", 120);
    if (launched_as_rank())
      throw InvalidArgument("mpcomm tune: started as a rank of a launcher's job (srun, mpirun, torchrun, mpcomm "
                            "launch); tune measures one machine and starts its own ranks there: run it once, "
                            "without a launcher, on a node of the kind the table is for");
    bench::Config& c = o->c;
    c.backends = {o->backend};
    if (o->ops.empty()) o->ops = tune::default_ops(o->backend, c.hosts);
    c.min_bytes = bench::parse_bytes(o->b);
    c.max_bytes = bench::parse_bytes(o->e);
    c.sequential = true;
    c.worker = "tune-worker";
    // What bench measures (the ops), what for (the subjects), and how many rows each size yields.
    c.ops.clear();
    for (const auto& what : bench::split_list(o->ops)) {
      const tune::Plan plan = tune::plan_of(o->backend, what);
      c.ops.push_back(plan.op);
      c.subjects.push_back(plan.subject);
      const bool both_layouts = bench::has_inplace(plan.op) && plan.force == tune::Plan::algorithm_setting;
      c.rows_per_size.push_back(static_cast<int>(plan.candidates.size()) * (both_layouts ? 2 : 1) * c.rounds);
    }
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
    if (!std::isnan(rt))
      shape.placement = rt > param_double("MPCOMM_FAR_NS") ? tuning::Placement::far : tuning::Placement::near;
    if (!o->check) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(o->out).parent_path(), ec);
      std::ofstream probe(o->out, std::ios::app);
      if (!probe) throw InvalidArgument("mpcomm tune: cannot write " + o->out);
    }
    int status = 0;
    const auto rows = bench::run_bench(c, bench::self_exe_path(), false, &status);
    if (status != 0) return status;
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string dtypes;
    for (const auto& d : c.dtypes) dtypes += (dtypes.empty() ? "" : ",") + d;
    const std::vector<std::string> comment = {
        "mpcomm tune " + (o->backend == "auto" ? "--backends " + o->backends : "--backend " + o->backend) +
            " --ranks " + std::to_string(c.ranks) + " --hosts " + std::to_string(c.hosts) + " --ops " + o->ops +
            " -b " + o->b + " -e " + o->e + " -n " + std::to_string(c.iters) + " -w " + std::to_string(c.warmup) +
            " -d " + dtypes + " -f " +
            [&] {
              char f[32];
              std::snprintf(f, sizeof f, "%g", c.factor);
              return std::string(f);
            }() +
            (c.rounds > 1 ? " --rounds " + std::to_string(c.rounds) : ""),
        "measured on " + std::string(host) + " (" + std::to_string(cpus) + " CPUs), " + now_text() +
            (std::isnan(rt) ? ""
                            : "; CPUs 0 and 1 " + std::string(tuning::to_string(shape.placement)) +
                                  " before the run (" + std::to_string(static_cast<int>(rt)) + " ns round trip)")};
    if (o->check) {
      const tune::CheckResult r = tune::check_rows(shape, rows, o->limit);
      std::printf("%s", r.report.c_str());
      return r.drifted > 0 ? 1 : 0;
    }
    const std::string machine = o->backend == "auto" ? autosel::machine_fingerprint(c.hosts) : "";
    std::string text = tune::table_text(o->backend, shape, rows, comment, machine);
    std::string before;
    if (std::ifstream old(o->out); old)
      before.assign(std::istreambuf_iterator<char>(old), std::istreambuf_iterator<char>());
    if (o->backend == "auto") text = tune::merged_auto_section(before, text, shape);
    std::ofstream f(o->out, std::ios::trunc);
    f << tune::merged_table(before, o->backend, text);
    if (!f) throw InvalidArgument("mpcomm tune: cannot write " + o->out);
    std::printf("%s", text.c_str());
    if (o->backend == "auto")
      std::printf(
          "# written to %s: auto uses it on this machine (for %d host(s)) unless MPCOMM_TUNING names a table with auto "
          "rows\n",
          o->out.c_str(), c.hosts);
    else
      std::printf("# written to %s: MPCOMM_TUNING=%s puts these rows before the built-in table\n", o->out.c_str(),
                  o->out.c_str());
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
