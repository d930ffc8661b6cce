// mpcomm compare: the article's three experiments, scaled to the machine at hand, with every backend
// in this build, plus the message sizes a model's tensor and pipeline parallelism produce.
//
//   1. all-reduce latency, 8 ranks on one host        (article: 8 GPUs, NCCL 1.2 ms vs Gloo 3.5 ms)
//   2. broadcast bandwidth, 8 ranks on one host       (article: NCCL 80 GB/s vs Gloo 50 GB/s)
//   3. all-reduce across 4 hosts × 2 ranks (emulated) (article: 4×8 GPUs, NCCL 5.8 ms vs Gloo 15.2 ms)
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "as_rank.h"
#include "bench.h"
#include "cli_checks.h"
#include "commands.h"
#include "compare_modern.h"
#include "device/device.h"
#include "mpcomm/mpcomm.h"
#include "prediction.h"

namespace mpcomm::cli {

namespace {

struct Model {
  std::string name = "GPT-3 175B";
  size_t hidden = 12288, seq = 2048, micro_batch = 1;
  std::string dtype = "bfloat16";
  int tp = 8, pp = 4;
  // Megatron: each transformer layer all-reduces its [seq, micro-batch, hidden] activations twice in
  // the forward pass (attention and MLP row-parallel outputs) and twice in the backward pass; pipeline
  // stages exchange the same activation tensor (forward) and its gradient (backward) per micro-batch.
  size_t activation_bytes() const { return seq * micro_batch * hidden * dtype_size(parse_dtype(dtype)); }
};

// Presets for --model; --hidden/--seq/--micro-batch/--model-dtype override their fields.
struct ModelPreset {
  const char* key;
  const char* name;
  size_t hidden, seq;
};
const ModelPreset kPresets[] = {
    {"gpt3-175b", "GPT-3 175B", 12288, 2048},
    {"gpt2-xl", "GPT-2 XL", 1600, 1024},
    {"llama2-7b", "Llama 2 7B", 4096, 4096},
    {"llama2-70b", "Llama 2 70B", 8192, 4096},
};

struct CompareCli {
  std::string preset = "gpt3-175b";
  int ranks = 8, hosts = 4, iters = 20, warmup = 5;  // nccl-tests defaults; about 3 minutes on 2 cores
  std::string backends = "all", report, json, launcher = "auto";
  std::string device = "auto";
  std::string max_latency = "2M", max_bcast = "32M";
  bool model_sizes = true;
  int experts = 8, top_k = 2;
  double bucket_mb = 25;
  bool torch = false;
  Model model;
};

// Section 5 (--torch): scripts/torch-bench, installed beside this executable, run with the same ranks and
// sizes: torch.distributed on gloo and on mpcomm (and nccl with a GPU), and the same ops from C++. Returns
// its table for the report, or why it could not run.
std::string torch_section(const CompareCli& o, const std::string& max_bytes, const std::string& json_path) {
  std::string exe = bench::self_exe_path();
  const std::string script = exe.substr(0, exe.rfind('/')) + "/torch-bench";
  if (::access(script.c_str(), X_OK) != 0) return "(not run: " + script + " is missing)\n";
  if (std::system("/usr/bin/python3 -c 'import torch.distributed, mpcomm.torch' >/dev/null 2>&1") != 0 &&
      std::system(("PYTHONPATH='" + exe.substr(0, exe.rfind('/')) + "/python' /usr/bin/python3 -c 'import mpcomm.torch' "
                   ">/dev/null 2>&1").c_str()) != 0)
    return "(not run: PyTorch or the mpcomm python package is not importable by /usr/bin/python3; the package is built "
           "when PyTorch's C++ headers are found, see README)\n";
  std::string cmd = "/usr/bin/python3 '" + script + "' -n " + std::to_string(o.ranks) + " -b 8 -e " + max_bytes +
                    " -f 8 --iters " + std::to_string(o.iters) + " --warmup " + std::to_string(o.warmup) +
                    (json_path.empty() ? "" : " --json '" + json_path + "'") + " 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) {
      out.append(buf, n);
      std::fwrite(buf, 1, n, stdout);
      std::fflush(stdout);
    }
    if (::pclose(p) != 0) return "(torch-bench failed: " + cmd + ")\n\n```\n" + out + "```\n";
  }
  return "```\n" + out + "```\n";
}

struct Experiment {
  std::string title, article;
  bench::Config config;
  std::vector<bench::Row> rows;
};

const bench::Row* find_row(const std::vector<bench::Row>& rows, const std::string& backend, size_t bytes) {
  for (const auto& r : rows)
    if (r.backend == backend && r.bytes == bytes && !r.inplace) return &r;
  return nullptr;
}

std::vector<std::string> backends_of(const std::vector<bench::Row>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows)
    if (std::find(out.begin(), out.end(), r.backend) == out.end()) out.push_back(r.backend);
  return out;
}

std::string fmt_time(double us) {
  char b[32];
  if (us >= 1000)
    std::snprintf(b, sizeof b, "%.2f ms", us / 1000);
  else
    std::snprintf(b, sizeof b, "%.1f µs", us);
  return b;
}

std::string fmt_bw(double gbs) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB/s", gbs);
  return b;
}

// A markdown table: one row per backend, one column per chosen size, cells by `cell`.
std::string table(const std::vector<bench::Row>& rows, const std::vector<size_t>& cols,
                  const std::map<size_t, std::string>& labels, std::string (*cell)(const bench::Row&)) {
  std::ostringstream o;
  o << "| backend |";
  for (size_t c : cols) o << " " << (labels.count(c) ? labels.at(c) : bench::human_bytes(c)) << " |";
  o << "\n|---|";
  for (size_t i = 0; i < cols.size(); ++i) o << "---:|";
  o << "\n";
  for (const auto& b : backends_of(rows)) {
    o << "| " << b << " |";
    for (size_t c : cols) {
      const bench::Row* r = find_row(rows, b, c);
      o << " " << (r ? cell(*r) : std::string("-")) << " |";
    }
    o << "\n";
  }
  return o.str();
}

std::string time_cell(const bench::Row& r) { return fmt_time(r.time_us); }
std::string bw_cell(const bench::Row& r) { return fmt_bw(r.busbw_gbs); }

// For each op: the fastest backend per size, merged into size ranges.
std::string recommendation(const std::vector<bench::Row>& rows, const std::string& what) {
  std::map<size_t, std::pair<double, std::string>> best;
  for (const auto& r : rows) {
    if (r.inplace || r.backend == "auto") continue;  // auto runs one of the others: not a choice of its own
    auto it = best.find(r.bytes);
    if (it == best.end() || r.time_us < it->second.first) best[r.bytes] = {r.time_us, r.backend};
  }
  std::ostringstream o;
  o << "- " << what << ": ";
  std::string cur;
  size_t from = 0, to = 0;
  bool first = true;
  auto flush = [&] {
    if (cur.empty()) return;
    if (!first) o << "; ";
    first = false;
    if (from == to)
      o << bench::human_bytes(from) << ": **" << cur << "**";
    else
      o << bench::human_bytes(from) << " – " << bench::human_bytes(to) << ": **" << cur << "**";
  };
  for (const auto& [bytes, p] : best) {
    if (p.second != cur) {
      flush();
      cur = p.second;
      from = bytes;
    }
    to = bytes;
  }
  flush();
  o << "\n";
  return o.str();
}

// What auto chose per size (the backend its rows ran on), merged into size ranges, with its time against
// the fastest single backend's in the same run.
std::string auto_choices(const std::vector<bench::Row>& rows, const std::string& what) {
  std::map<size_t, double> best;
  std::map<size_t, const bench::Row*> chose;
  for (const auto& r : rows) {
    if (r.inplace) continue;
    if (r.backend == "auto") {
      chose[r.bytes] = &r;
    } else if (!best.count(r.bytes) || r.time_us < best[r.bytes]) {
      best[r.bytes] = r.time_us;
    }
  }
  if (chose.empty()) return "";
  std::ostringstream o;
  o << "- " << what << ": ";
  std::string cur;
  size_t from = 0, to = 0;
  double lo = 0, hi = 0;
  bool first = true;
  auto flush = [&] {
    if (cur.empty()) return;
    o << (first ? "" : "; ") << bench::human_bytes(from) << (from == to ? "" : " – " + bench::human_bytes(to)) << ": **"
      << cur << "**";
    char ratio[64];
    std::snprintf(ratio, sizeof ratio, lo == hi ? " (%.2f×)" : " (%.2f–%.2f×)", lo, hi);
    o << ratio;
    first = false;
  };
  for (const auto& [bytes, r] : chose) {
    const std::string backend = r->ran.substr(0, r->ran.find('/'));
    const double x = best.count(bytes) ? r->time_us / best[bytes] : 0;
    if (backend != cur) {
      flush();
      cur = backend;
      from = bytes;
      lo = hi = x;
    }
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    to = bytes;
  }
  flush();
  o << "\n";
  return o.str();
}

// For each wanted size, the measured size closest to it (log scale), without repeats.
std::vector<size_t> pick_columns(const std::vector<bench::Row>& rows, const std::vector<size_t>& wanted) {
  std::vector<size_t> measured, out;
  for (const auto& r : rows)
    if (std::find(measured.begin(), measured.end(), r.bytes) == measured.end()) measured.push_back(r.bytes);
  for (size_t w : wanted) {
    size_t best = 0;
    double dist = 1e300;
    for (size_t m : measured) {
      double d = std::fabs(std::log(static_cast<double>(m)) - std::log(static_cast<double>(w)));
      if (d < dist) {
        dist = d;
        best = m;
      }
    }
    if (best != 0 && std::find(out.begin(), out.end(), best) == out.end()) out.push_back(best);
  }
  return out;
}

double max_busbw(const std::vector<bench::Row>& rows, const std::string& backend) {
  double m = 0;
  for (const auto& r : rows)
    if (r.backend == backend && !r.inplace) m = std::max(m, r.busbw_gbs);
  return m;
}

}  // namespace

Runner add_compare(CLI::App& app) {
  auto o = std::make_shared<CompareCli>();
  auto* ranks_opt = app.add_option("--ranks", o->ranks, "ranks of every experiment (the article: 8 GPUs)")->check(whole_between(2, 64));
  auto* hosts_opt = app.add_option("--hosts", o->hosts, "emulated hosts of experiment 3 (the article: 4 nodes)")->check(whole_at_least(1));
  add_launcher_option(app, &o->launcher);
  app.add_option("--backends", o->backends, "comma list, or all");
  app.add_option("-n,--iters", o->iters, "timed iterations per size")->check(whole_at_least(1));
  app.add_option("-w,--warmup", o->warmup, "warm-up iterations per size");
  app.add_option("--max-latency-bytes", o->max_latency, "largest all-reduce of experiments 1 and 3 (K/M/G suffixes)");
  app.add_option("--max-bcast-bytes", o->max_bcast, "largest broadcast of experiment 2 (K/M/G suffixes)");
  app.add_option("--model", o->preset, "gpt3-175b (default), gpt2-xl, llama2-7b, llama2-70b");
  auto* hidden = app.add_option("--hidden", o->model.hidden, "model hidden size (overrides --model)");
  auto* seq = app.add_option("--seq", o->model.seq, "sequence length (overrides --model)");
  app.add_option("--micro-batch", o->model.micro_batch, "micro-batch size (default 1)");
  app.add_option("--model-dtype", o->model.dtype, "activation dtype (default bfloat16)");
  app.add_option("--tp", o->model.tp, "tensor-parallel size the report assumes (default 8)");
  app.add_option("--pp", o->model.pp, "pipeline-parallel size the report assumes (default 4)");
  app.add_flag("!--no-model-sizes", o->model_sizes, "do not measure the model's message sizes");
  app.add_option("--experts", o->experts, "experts of the report's mixture-of-experts layer")->capture_default_str();
  app.add_option("--top-k", o->top_k, "experts each token goes to")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--bucket-mb", o->bucket_mb, "data-parallel gradient bucket (ZeRO rows), MiB")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  app.add_option("--report", o->report, "write report.md, results.jsonl and PNG plots to this folder");
  app.add_option("--json", o->json, "write every measured row as JSON lines");
  app.add_option("--device", o->device, "buffers on cpu or cuda; auto (default): cuda when a GPU is present");
  app.add_flag("--torch", o->torch, "also run the PyTorch section: torch.distributed on gloo vs mpcomm (scripts/torch-bench)");
  return [o, hidden, seq, ranks_opt, hosts_opt] {
    // As a rank of a launcher's job: every experiment on the job's ranks and hosts (experiment 3 is then
    // experiment 1: the hosts are real, not emulated); rank 0 prints and writes.
    const bool as_rank = run_as_rank("mpcomm compare", o->launcher,
                                     {{"--ranks", ranks_opt->count() > 0}, {"--hosts", hosts_opt->count() > 0},
                                      {"--torch", o->torch}});
    int job_hosts = 1;
    if (as_rank) {
      auto probe = rank_communicator("native", "cpu");
      o->ranks = probe->size();
      o->hosts = job_hosts = probe->topology().num_hosts();
    }
    const bool lead = prints_results();
    bool known = false;
    for (const auto& p : kPresets)
      if (o->preset == p.key) {
        known = true;
        o->model.name = p.name;
        if (hidden->count() == 0) o->model.hidden = p.hidden;
        if (seq->count() == 0) o->model.seq = p.seq;
      }
    if (!known) throw InvalidArgument("mpcomm compare: unknown --model '" + o->preset + "' (gpt3-175b, gpt2-xl, llama2-7b, llama2-70b)");
    if (hidden->count() + seq->count() > 0) o->model.name += " (custom shape)";
    const size_t max_latency_bytes = bench::parse_bytes(o->max_latency), max_bcast_bytes = bench::parse_bytes(o->max_bcast);
    bench::Config base;
    base.ranks = o->ranks;
    base.as_rank = as_rank;
    base.iters = o->iters;
    base.warmup = o->warmup;
    base.check = 1;
    base.timeout_s = 300;
    base.device = o->device != "auto" ? o->device : (device::cuda_devices() > 0 ? "cuda" : "cpu");
    base.backends = o->backends == "all" ? bench::all_backends_for(base.device) : bench::split_list(o->backends);
    if (as_rank && o->backends == "all") base.backends = startable_backends(base.backends);
    const size_t act = o->model.activation_bytes();
    std::vector<size_t> model_sizes;
    if (o->model_sizes) model_sizes = {act};

    std::vector<Experiment> ex(3);
    const std::string where = as_rank ? " ranks of this job on " + std::to_string(job_hosts) + " host(s)" : " ranks on one host";
    ex[0].title = "1. all-reduce latency, " + std::to_string(o->ranks) + where;
    ex[0].article = "article: 8 A100 GPUs in one node, NCCL 1.2 ms vs Gloo 3.5 ms";
    ex[0].config = base;
    ex[0].config.ops = {"allreduce"};
    ex[0].config.dtypes = {"float"};
    ex[0].config.min_bytes = 8;
    ex[0].config.max_bytes = max_latency_bytes;
    ex[0].config.factor = 8;
    ex[0].config.extra_sizes = model_sizes;
    ex[1].title = "2. broadcast bandwidth, " + std::to_string(o->ranks) + where;
    ex[1].article = "article: 8 GPUs, NCCL 80 GB/s vs Gloo 50 GB/s";
    ex[1].config = base;
    ex[1].config.ops = {"broadcast"};
    ex[1].config.dtypes = {"float"};
    ex[1].config.min_bytes = 64 << 10;
    ex[1].config.max_bytes = max_bcast_bytes;
    ex[1].config.factor = 8;
    ex[2].title = "3. all-reduce across " + std::to_string(o->hosts) + " emulated hosts × " +
                  std::to_string(o->ranks / std::max(1, o->hosts)) + " ranks";
    ex[2].article = "article: 4 nodes × 8 GPUs over 100 Gb/s InfiniBand, NCCL 5.8 ms / 60 GB/s vs Gloo 15.2 ms / 30 GB/s";
    if (as_rank) ex[2].title = "3. all-reduce across this job's " + std::to_string(job_hosts) + " host(s) (experiment 1's rows)";
    ex[2].config = ex[0].config;
    ex[2].config.hosts = o->hosts;

    ex.emplace_back();
    ex[3].title = "4. pipeline point-to-point, " + std::to_string(o->ranks) + " ranks each sending to the next";
    ex[3].article = "pipeline parallelism passes activations forward and gradients backward between stages";
    ex[3].config = base;
    ex[3].config.ops = {"sendrecv"};
    ex[3].config.dtypes = {"float"};
    ex[3].config.min_bytes = 64 << 10;
    ex[3].config.max_bytes = 1 << 20;
    ex[3].config.factor = 16;
    ex[3].config.extra_sizes = model_sizes;
    ModernShape modern;
    modern.act = act;
    modern.bucket = static_cast<size_t>(o->bucket_mb * 1048576.0);
    modern.hidden = o->model.hidden;
    modern.model_es = dtype_size(parse_dtype(o->model.dtype));
    modern.experts = o->experts, modern.top_k = o->top_k;
    if (o->model_sizes) {
      ex.emplace_back();
      ex[4].title = "5. today's modes at the model's sizes: reduce-scatter, all-gather, all-to-all of routed tokens";
      ex[4].article = "sequence parallelism, ZeRO-1, mixture of experts";
      ex[4].config = modern_experiment(base, modern);
    }

    int status = 0;
    for (auto& e : ex) {
      if (lead) std::printf("\n######## %s (%s)\n", e.title.c_str(), e.article.c_str());
      std::fflush(stdout);
      int st = 0;
      if (as_rank && &e == &ex[2])
        e.rows = ex[0].rows;
      else
        e.rows = bench::run_bench(e.config, bench::self_exe_path(), /*keep_going=*/true, &st);
      if (st != 0 && status == 0) status = st;
      bench::print_side_by_side(e.rows, stdout);
    }
    if (!lead) return status;

    // ---- the article's tables, from our numbers
    std::ostringstream md;
    md << "# mpcomm compare\n\nThe experiments of the NCCL-vs-Gloo article, run on this machine with every backend "
          "in this build. Times are the slowest rank's mean over "
       << o->iters << " back-to-back calls (nccl-tests' method); bandwidths are nccl-tests' bus bandwidth. The "
          "backends run at once and take turns size by size, so that each size of every backend meets the "
          "machine in the same state.\n\n";
    md << "Buffers: " << (base.device == "cpu" ? std::string("host memory (cpu)")
                                              : "GPU memory (" + base.device + "); the CPU backends (native, gloo, mpi) "
                                                "copy it through pinned host memory, as PyTorch's Gloo backend does")
       << ".\n\n";
    std::set<std::string> transports;
    for (const auto& e : ex)
      for (const auto& r : e.rows)
        if (!r.transport.empty()) transports.insert(r.backend + ": " + r.transport);
    for (const auto& t : transports) md << "Transport measured: " << t << ".\n\n";
    std::map<size_t, std::string> labels;
    if (o->model_sizes) labels[act] = "TP all-reduce " + bench::human_bytes(act);
    // Each table also has this machine's profile's prediction of a backend it has constants for.
    auto with_predicted = [](const std::vector<bench::Row>& rows) {
      auto all = rows;
      for (auto& r : predicted_rows(rows)) all.push_back(std::move(r));
      return all;
    };
    auto lat_cols = pick_columns(ex[0].rows, {8, 64 << 10, max_latency_bytes});
    if (o->model_sizes) lat_cols.push_back(act);
    md << "## " << ex[0].title << "\n\n(" << ex[0].article << ")\n\n"
       << table(with_predicted(ex[0].rows), lat_cols, labels, time_cell) << "\n";
    auto bw_cols = pick_columns(ex[1].rows, {64 << 10, 4 << 20, max_bcast_bytes});
    md << "## " << ex[1].title << "\n\n(" << ex[1].article << ")\n\nBus bandwidth:\n\n"
       << table(with_predicted(ex[1].rows), bw_cols, labels, bw_cell);
    md << "\nPeak:";
    for (const auto& b : backends_of(ex[1].rows)) md << " " << b << " " << fmt_bw(max_busbw(ex[1].rows, b)) << ";";
    md << "\n\n## " << ex[2].title << "\n\n(" << ex[2].article << ")\n\n"
       << table(with_predicted(ex[2].rows), lat_cols, labels, time_cell);
    md << "\nPeak bus bandwidth:";
    for (const auto& b : backends_of(ex[2].rows)) md << " " << b << " " << fmt_bw(max_busbw(ex[2].rows, b)) << ";";
    md << "\n\n## The model's traffic\n\n" << o->model.name << " shapes: hidden " << o->model.hidden << ", sequence "
       << o->model.seq << ", micro-batch " << o->model.micro_batch << ", " << o->model.dtype << "; tensor parallel "
       << o->model.tp << ", pipeline parallel " << o->model.pp << ".\n\n"
       << "- tensor parallelism: each layer all-reduces its activations (" << bench::human_bytes(act)
       << ") 2× forward and 2× backward, within the TP group of " << o->model.tp << " ranks;\n"
       << "- pipeline parallelism: each micro-batch sends " << bench::human_bytes(act)
       << " of activations forward and the same of gradients backward between neighbouring stages.\n\n";
    if (o->model_sizes) {
      md << "| backend | one TP all-reduce (" << o->ranks << " ranks) | TP per layer per micro-batch (4×) "
         << "| one PP send/recv | PP per micro-batch per stage boundary (2×) |\n|---|---:|---:|---:|---:|\n";
      for (const auto& b : backends_of(ex[0].rows)) {
        const bench::Row* tp = find_row(ex[0].rows, b, act);
        const bench::Row* pp = find_row(ex[3].rows, b, act);
        md << "| " << b << " | " << (tp ? fmt_time(tp->time_us) : "-") << " | " << (tp ? fmt_time(4 * tp->time_us) : "-")
           << " | " << (pp ? fmt_time(pp->time_us) : "-") << " | " << (pp ? fmt_time(2 * pp->time_us) : "-") << " |\n";
      }
      md << "\n";
    }
    if (ex.size() > 4) md << modern_section(ex[4].rows, modern, o->ranks);
    md << "## Recommendation (fastest backend per size, measured here)\n\n"
       << recommendation(ex[0].rows, "all-reduce, one host") << recommendation(ex[1].rows, "broadcast, one host")
       << recommendation(ex[2].rows, "all-reduce, " + std::to_string(o->hosts) + " hosts")
       << recommendation(ex[3].rows, "send/recv, one host") << "\n";
    const std::string chose = auto_choices(ex[0].rows, "all-reduce, one host") +
                              auto_choices(ex[1].rows, "broadcast, one host") +
                              auto_choices(ex[2].rows, "all-reduce, " + std::to_string(o->hosts) + " hosts") +
                              auto_choices(ex[3].rows, "send/recv, one host");
    if (!chose.empty())
      md << "## What auto chose (the backend it ran each size on; its time × the fastest backend's in this run)\n\n"
         << chose << "\n";
    md << "What this does not measure: "
       << (base.device == "cpu" ? "GPUs (no GPU buffers in this run; NCCL needs a GPU), " : "")
       << "real networks (emulated hosts talk over loopback TCP), and machines larger than this one.\n\n";
    if (o->torch) {
      std::printf("\n######## 5. the same at the PyTorch level (torch.distributed, scripts/torch-bench)\n");
      std::fflush(stdout);
      md << "## 5. The same at the PyTorch level\n\ntorch.distributed's all_reduce, broadcast, all_to_all_single and a "
            "ring of isend/irecv on torch tensors, " << o->ranks << " ranks, the backends in turns; each call after a "
            "barrier, the median of the slowest rank's times (`scripts/torch-bench`). `c++` is the same op made from "
            "C++ on the mpcomm group's communicator; `layer` is what the PyTorch layer adds.\n\n"
         << torch_section(*o, o->max_latency, o->report.empty() ? "" : o->report + "/torch.jsonl") << "\n";
    }
    md << "## Machine\n\n```\n" << info_text() << "```\n";
    std::printf("\n%s", md.str().c_str());

    std::vector<bench::Row> all;
    for (const auto& e : ex) all.insert(all.end(), e.rows.begin(), e.rows.end());
    auto write_rows = [&](const std::string& path) {
      auto parent = std::filesystem::path(path).parent_path();
      std::error_code ec;
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      std::ofstream f(path);
      if (!f) throw InvalidArgument("mpcomm compare: cannot write " + path);
      for (const auto& r : all) f << bench::to_json(r) << "\n";
    };
    if (!o->json.empty()) write_rows(o->json);
    if (!o->report.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o->report, ec);
      if (ec) throw InvalidArgument("mpcomm compare: cannot create " + o->report + ": " + ec.message());
      write_rows(o->report + "/results.jsonl");
      if (!as_rank && base.device == "cpu") md << timeline_section(base.backends, o->report);
      std::ofstream(o->report + "/report.md") << md.str();
      {
        std::ofstream marks(o->report + "/marks.json");
        marks << "{";
        if (o->model_sizes) marks << "\"TP all-reduce / PP send " << bench::human_bytes(act) << "\": " << act;
        marks << "}\n";
      }
      std::fflush(stdout);
      std::string plot = bench::self_exe_path();
      plot = plot.substr(0, plot.rfind('/')) + "/plot_report.py";
      std::string cmd = "/usr/bin/python3 '" + plot + "' '" + o->report + "'";
      if (std::system(cmd.c_str()) != 0)
        std::fprintf(stderr, "mpcomm compare: plotting failed (%s); report.md and results.jsonl are written\n", cmd.c_str());
      else
        std::printf("\nreport: %s/report.md, plots: %s/*.png\n", o->report.c_str(), o->report.c_str());
    }
    return status;
  };
}

}  // namespace mpcomm::cli
