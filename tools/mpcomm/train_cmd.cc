// mpcomm train (the driver) and mpcomm train-worker (what each rank runs).
//
// The driver checks the configuration, launches the ranks once per backend, draws a progress bar from
// the per-step rows rank 0 appends to a temporary file, writes --loss-log, and prints where each
// backend's time went: tensor-parallel all-reduce, pipeline send/recv, data-parallel all-reduce, the
// tied-embedding exchange, and the pipeline bubble.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "as_rank.h"
#include "backends/registry.h"
#include "bench.h"
#include "bootstrap/env.h"
#include "bootstrap/launcher.h"
#include "commands.h"
#include "mpcomm/mpcomm.h"
#include "parallel/elastic.h"
#include "parallel/trainer.h"
#include "prediction.h"
#include "progress.h"
#include "settings/settings.h"

namespace mpcomm::cli {


namespace {

using parallel::TrainConfig;
using nlohmann::json;

json to_json(const TrainConfig& c) {
  return {{"tp", c.dims.tp},
          {"pp", c.dims.pp},
          {"dp", c.dims.dp},
          {"micro_batches", c.micro_batches},
          {"schedule", c.schedule},
          {"layers", c.layers},
          {"hidden", c.hidden},
          {"heads", c.heads},
          {"seq", c.seq},
          {"batch", c.batch},
          {"steps", c.steps},
          {"seed", c.seed},
          {"lr", c.adamw.lr},
          {"beta1", c.adamw.beta1},
          {"beta2", c.adamw.beta2},
          {"eps", c.adamw.eps},
          {"weight_decay", c.adamw.weight_decay},
          {"data", c.data},
          {"tokens", c.tokens},
          {"vocab", c.vocab},
          {"init_from", c.init_from},
          {"save", c.save},
          {"bucket_mb", c.bucket_mb},
          {"trace", c.trace},
          {"zero", c.zero},
          {"sequence_parallel", c.sequence_parallel},
          {"overlap", c.overlap},
          {"comm_dtype", c.comm_dtype},
          {"virtual_stages", c.virtual_stages},
          {"experts", c.experts},
          {"top_k", c.top_k},
          {"ep", c.dims.ep},
          {"moe_every", c.moe_every},
          {"aux_loss_coef", c.aux_loss_coef},
          {"reproducible", c.reproducible},
          {"elastic", c.elastic},
          {"grow_back", c.grow_back}};
}

TrainConfig from_json(const json& j) {
  TrainConfig c;
  c.dims = {j.at("tp"), j.at("pp"), j.at("dp")};
  c.micro_batches = j.at("micro_batches"), c.schedule = j.at("schedule");
  c.layers = j.at("layers"), c.hidden = j.at("hidden"), c.heads = j.at("heads");
  c.seq = j.at("seq"), c.batch = j.at("batch"), c.steps = j.at("steps"), c.seed = j.at("seed");
  c.adamw = {j.at("lr"), j.at("beta1"), j.at("beta2"), j.at("eps"), j.at("weight_decay")};
  c.data = j.at("data"), c.tokens = j.at("tokens"), c.vocab = j.at("vocab");
  c.init_from = j.at("init_from"), c.save = j.at("save"), c.bucket_mb = j.at("bucket_mb");
  c.trace = j.at("trace"), c.zero = j.at("zero");
  c.sequence_parallel = j.at("sequence_parallel");
  c.overlap = j.at("overlap");
  c.comm_dtype = j.at("comm_dtype");
  c.virtual_stages = j.at("virtual_stages");
  c.experts = j.at("experts"), c.top_k = j.at("top_k"), c.dims.ep = j.at("ep"), c.moe_every = j.at("moe_every");
  c.aux_loss_coef = j.at("aux_loss_coef"), c.reproducible = j.at("reproducible");
  c.elastic = j.value("elastic", false), c.grow_back = j.value("grow_back", false);
  return c;
}

// What the progress bar shows: steps done, the last loss and tokens/s, from the rows rank 0 has written.
std::pair<size_t, std::string> train_progress(const std::string& path, double tokens_per_step) {
  std::ifstream f(path);
  std::string line, last;
  size_t done = 0;
  while (std::getline(f, line))
    if (line.find("\"loss\"") != std::string::npos) last = line;
  auto j = json::parse(last, nullptr, false);
  if (last.empty() || j.is_discarded()) return {done, ""};
  done = j.value("step", 0) + 1;  // an elastic run that went back a step writes it again
  char tail[96];
  std::snprintf(tail, sizeof tail, "  loss %.4f  %.0f tok/s", j.value("loss", 0.0),
                tokens_per_step / std::max(1e-9, j.value("seconds", 1.0)));
  return {done, tail};
}

struct BackendRun {
  std::string backend;
  int status = 0;
  std::vector<double> losses;
  std::vector<parallel::RankStats> ranks;
  double seconds = 0, bubble_theory = 0;
  size_t trace_bytes = 0;
};

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", b, unit[u]);
  return s;
}

void print_summary(const std::vector<BackendRun>& runs, const TrainConfig& c, double tokens_per_step) {
  std::printf(
      "\n# where the time went (per rank, mean over ranks; time = the trainer waited for it; bytes = the rank's "
      "buffers per call, summed)\n");
  std::printf("# %-8s %10s %9s | %22s | %22s | %22s | %22s | %s\n", "backend", "time/step", "tok/s", "tensor-parallel",
              "pipeline send/recv", "data-parallel", "tied-embedding sync", "pipeline bubble (measured / theory)");
  for (const auto& r : runs) {
    if (r.ranks.empty() || c.steps == 0) continue;
    const double n = static_cast<double>(r.ranks.size());
    auto mean = [&](auto f) {
      double s = 0;
      for (const auto& x : r.ranks) s += f(x);
      return s / n;
    };
    auto cell = [&](auto meter) {
      double ms = mean([&](const auto& x) { return meter(x).seconds; }) * 1e3 / c.steps;
      double bytes = mean([&](const auto& x) { return double(meter(x).bytes); }) / c.steps;
      char s[64];
      std::snprintf(s, sizeof s, "%8.2f ms %11s", ms, human_bytes(bytes).c_str());
      return std::string(s);
    };
    double step_s = mean([](const auto& x) { return x.step_s; }) / c.steps;
    // Measured bubble: the share of a step a stage spends blocked on pipeline receives, mean over ranks.
    double bubble = c.dims.pp == 1 ? 0 : mean([](const auto& x) { return x.pp_wait_s / std::max(1e-12, x.step_s); });
    std::printf("  %-8s %7.2f ms %9.0f | %s | %s | %s | %s | %5.1f%% / %4.1f%%\n", r.backend.c_str(), step_s * 1e3,
                tokens_per_step / step_s, cell([](const auto& x) { return x.tp; }).c_str(),
                cell([](const auto& x) { return x.pp; }).c_str(), cell([](const auto& x) { return x.dp; }).c_str(),
                cell([](const auto& x) { return x.embedding; }).c_str(), 100 * bubble, 100 * r.bubble_theory);
  }
  std::printf("# per step: time and bytes per rank; the bubble's theory is (pp-1)/(V·micro-batches+pp-1) of a step, "
              "V the virtual stages (1 but for interleaved): (pp-1)/(V·m) of the ideal time\n");
  // Exposed: the trainer waited (the table's times); spent: the ops ran, start to end (the library's own
  // times) — the difference ran behind compute.
  for (const auto& r : runs) {
    if (r.ranks.empty() || c.steps == 0) continue;
    const double n = static_cast<double>(r.ranks.size()) * c.steps / 1e3;
    double e[3] = {0, 0, 0}, sp[3] = {0, 0, 0};
    for (const auto& x : r.ranks) {
      e[0] += x.tp.seconds, e[1] += x.pp.seconds + x.embedding.seconds, e[2] += x.dp.seconds;
      sp[0] += x.tp_spent, sp[1] += x.pp_spent, sp[2] += x.dp_spent;
    }
    std::printf(
        "# %s: per step, exposed / spent (the ops ran, start to end): tensor-parallel %.2f / %.2f ms, "
        "pipeline %.2f / %.2f ms (sends), data-parallel %.2f / %.2f ms\n",
        r.backend.c_str(), e[0] / n, sp[0] / n, e[1] / n, sp[1] / n, e[2] / n, sp[2] / n);
  }
  for (const auto& r : runs) {
    if (r.ranks.empty() || c.experts == 0 || c.steps == 0) continue;
    double ep = 0, bytes = 0, aux = 0;
    for (const auto& x : r.ranks) ep += x.ep.seconds, bytes += double(x.ep.bytes), aux += x.aux_loss;
    const double n = static_cast<double>(r.ranks.size()) * c.steps;
    // aux: per sequence, summed over the MoE layers (tensor-parallel rank 0 of each group counts it)
    std::printf(
        "# %s: mixture of experts (%d experts, top-%d, over %d expert-parallel ranks): all-to-alls %.2f ms and %s per "
        "step per rank; load-balancing loss %.4f per sequence (α × MoE layers when balanced)\n",
        r.backend.c_str(), c.experts, c.top_k, c.dims.ep, ep / n * 1e3, human_bytes(bytes / n).c_str(),
        aux / c.steps / static_cast<double>(c.batch));
  }
  for (const auto& r : runs) {
    if (r.ranks.empty()) continue;
    double state = 0, params = 0;
    for (const auto& x : r.ranks) state += x.optimizer_bytes, params += x.params;
    state /= static_cast<double>(r.ranks.size()), params /= static_cast<double>(r.ranks.size());
    if (c.zero)
      std::printf(
          "# %s: optimizer state (AdamW m and v) per rank %s, %.3g of the %s a replicated optimizer holds "
          "(ZeRO-1 over dp %d)\n",
          r.backend.c_str(), human_bytes(state).c_str(), state / std::max(1.0, 8 * params),
          human_bytes(8 * params).c_str(), c.dims.dp);
    else
      std::printf("# %s: optimizer state (AdamW m and v) per rank %s (replicated on the %d data-parallel ranks)\n",
                  r.backend.c_str(), human_bytes(state).c_str(), c.dims.dp);
  }
}

std::string per_backend_path(const std::string& path, const std::string& backend, size_t nbackends) {
  if (nbackends == 1) return path;
  auto dot = path.rfind('.');
  auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + "." + backend;
  return path.substr(0, dot) + "." + backend + path.substr(dot);
}

// --fail-rank R@K,...: rank R of the starting world kills itself (SIGKILL) as step K begins, for testing and
// measuring an elastic run.
std::vector<std::pair<int, int>> parse_failures(const std::string& spec) {
  std::vector<std::pair<int, int>> out;
  for (const auto& item : bench::split_list(spec)) {
    const auto at = item.find('@');
    size_t used = 0, used2 = 0;
    int r = -1, k = -1;
    try {
      r = std::stoi(item.substr(0, at), &used);
      if (at != std::string::npos) k = std::stoi(item.substr(at + 1), &used2);
    } catch (const std::exception&) {
    }
    if (at == std::string::npos || r < 0 || k < 0 || used != at || used2 != item.size() - at - 1)
      throw InvalidArgument("mpcomm train: --fail-rank '" + item + "': give RANK@STEP, e.g. 2@3");
    out.push_back({r, k});
  }
  return out;
}

void die_if_chosen(const std::vector<std::pair<int, int>>& failures, int start_rank, int step) {
  for (auto [r, k] : failures)
    if (r == start_rank && k == step) {
      std::fprintf(stderr, "mpcomm train: rank %d kills itself as step %d begins (--fail-rank)\n", r, k);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
}

// One rank's training; rank 0 (of the world training runs on: an elastic run's changes) appends the per-step
// rows, the recoveries and the summary to `out`.
// joined_as >= 0: `world` came from join() (MPCOMM_JOIN=1: a restart of that rank).
int train_rank(Communicator& world, const TrainConfig& c, const std::string& out, const std::string& fail_spec,
               int joined_as = -1) {
  std::ofstream rows;
  auto row = [&](const Communicator& now, const json& j) {
    if (now.rank() != 0) return;
    if (!rows.is_open()) rows.open(out, std::ios::app);
    rows << j.dump() << std::endl;
  };
  parallel::TrainResult result;
  if (c.elastic) {
    const auto failures = parse_failures(fail_spec);
    const int start_rank = joined_as >= 0 ? joined_as : world.rank();
    if (joined_as < 0) die_if_chosen(failures, start_rank, 0);
    parallel::ElasticHooks hooks;
    hooks.on_step = [&](int k, double loss, double seconds, const Communicator& now) {
      row(now, {{"step", k}, {"loss", loss}, {"seconds", seconds}});
      die_if_chosen(failures, start_rank, k + 1);
    };
    hooks.on_recovery = [&](const parallel::Recovery& r, const Communicator& now) {
      row(now, {{"event", r.grew ? "grew" : "recovery"},
                {"step", r.step},
                {"dp", r.dp},
                {"lost", r.lost},
                {"left", r.left},
                {"detect_s", r.detect_s},
                {"rebuild_s", r.rebuild_s},
                {"cause", r.cause}});
    };
    parallel::ElasticResult e = parallel::train_elastic(c, world, hooks, joined_as);
    if (e.left) {
      std::fprintf(stderr, "mpcomm train: rank %d leaves: its data-parallel replica lost a rank\n", start_rank);
      return 0;
    }
    result = std::move(e);
  } else {
    if (!fail_spec.empty()) throw InvalidArgument("mpcomm train: --fail-rank needs --elastic");
    result = parallel::train(c, world, [&](int k, double loss, double seconds) {
      row(world, {{"step", k}, {"loss", loss}, {"seconds", seconds}});
    });
  }
  if (!result.ranks.empty()) {  // the world's rank 0
    json ranks = json::array();
    for (const auto& r : result.ranks) ranks.push_back(r.to_vector());
    rows.is_open() || (rows.open(out, std::ios::app), true);
    rows << json{{"ranks", ranks},
                 {"seconds", result.seconds},
                 {"bubble_theory", result.bubble_theory},
                 {"trace_bytes", result.trace_bytes}}
                .dump()
         << std::endl;
  }
  return 0;
}

}  // namespace

Runner add_train(CLI::App& app) {
  struct Opts {
    TrainConfig c;
    int ranks = 0, hosts = 1;
    std::string backends = "native", loss_log, launcher = "auto", fail;
    int max_restarts = 0;
    double timeout_s = 300;
  };
  auto o = std::make_shared<Opts>();
  auto& c = o->c;
  auto* ranks_opt = app.add_option("--ranks,-n", o->ranks, "ranks to start (default tp*pp*dp)");
  app.add_option("--tp", c.dims.tp, "tensor-parallel ranks per group")->capture_default_str();
  app.add_option("--pp", c.dims.pp, "pipeline stages")->capture_default_str();
  auto* dp_opt = app.add_option("--dp", c.dims.dp, "data-parallel replicas (default ranks/(tp*pp))");
  app.add_option("--backend", o->backends, "backend, a comma list to train once on each, or all")->capture_default_str();
  auto* hosts_opt = app.add_option("--hosts", o->hosts, "emulated hosts the ranks are spread over")->capture_default_str();
  app.add_option("--micro-batches", c.micro_batches, "micro-batches per step on each data-parallel rank")->capture_default_str();
  app.add_option("--schedule", c.schedule, "pipeline schedule: 1f1b, gpipe or interleaved (with --virtual-stages)")
      ->capture_default_str();
  app.add_option("--virtual-stages", c.virtual_stages,
                 "interleaved: model chunks per pipeline rank (Megatron's virtual pipeline)")
      ->capture_default_str();
  app.add_option("--layers", c.layers, "transformer blocks (default 4, or the checkpoint's)");
  app.add_option("--hidden", c.hidden, "hidden size C (default 128, or the checkpoint's)");
  app.add_option("--heads", c.heads, "attention heads (default 4, or the checkpoint's n_head)");
  app.add_option("--seq", c.seq, "sequence length T")->capture_default_str();
  app.add_option("--batch", c.batch, "global batch: sequences per step over all data-parallel ranks")->capture_default_str();
  app.add_option("--steps", c.steps, "optimizer steps")->capture_default_str();
  app.add_option("--seed", c.seed, "initialization seed (without --init-from)")->capture_default_str();
  app.add_option("--lr", c.adamw.lr, "AdamW learning rate (constant)")->capture_default_str();
  app.add_option("--beta1", c.adamw.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", c.adamw.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--eps", c.adamw.eps, "AdamW eps")->capture_default_str();
  app.add_option("--weight-decay", c.adamw.weight_decay, "AdamW weight decay (on every parameter, as torch)")->capture_default_str();
  app.add_option("--data", c.data, "training text: its bytes are the tokens (default " + parallel::default_corpus() + ")");
  app.add_option("--tokens", c.tokens, "training tokens: uint16 little-endian ids");
  app.add_option("--vocab", c.vocab, "vocabulary for --tokens (default: largest id + 1)");
  app.add_option("--init-from", c.init_from, "start from this safetensors checkpoint (Hugging Face GPT-2 names)");
  app.add_option("--save", c.save, "write the trained model to this safetensors file");
  app.add_option("--loss-log", o->loss_log, "JSON lines {\"step\": k, \"loss\": x} (with several backends: FILE.<backend>)");
  app.add_option("--trace", c.trace,
                 "write a timeline of every rank's compute and communication here (Chrome trace JSON: "
                 "ui.perfetto.dev; with several backends FILE.<backend>)");
  app.add_flag("!--no-overlap", c.overlap,
               "reduce the data-parallel buckets after the backward instead of while it goes on");
  app.add_option("--comm-dtype", c.comm_dtype,
                 "what activations and gradients travel as: float32, or bfloat16 (float32 compute, master weights and "
                 "accumulation in the reductions)")
      ->capture_default_str();
  app.add_flag("--sequence-parallel", c.sequence_parallel,
               "Megatron's sequence parallelism: reduce-scatter + all-gather instead of the tensor-parallel "
               "all-reduces, LayerNorms and residuals on 1/tp of the tokens");
  app.add_option("--zero", c.zero,
                 "1: ZeRO-1 distributed optimizer (gradients reduce-scattered, AdamW state sharded over dp, parameters "
                 "all-gathered)")
      ->capture_default_str();
  app.add_flag("--reproducible", c.reproducible,
               "reproducible sums: the same losses and saved model, bit for bit, for any --dp (the micro-batch size "
               "--batch / (--dp × --micro-batches), --tp and --pp fixed), backend or host layout");
  app.add_flag("--elastic", c.elastic,
               "survive a lost rank: its data-parallel replica leaves, the others go on at dp - 1 from the step in "
               "flight, with the same global batch (ranks launched elastic: mpcomm launch --elastic, or "
               "MPCOMM_ELASTIC=1 under another launcher)");
  app.add_option("--fail-rank", o->fail,
                 "with --elastic, for testing: RANK@STEP[,...]: that rank kills itself (SIGKILL) as that step begins");
  app.add_option("--max-restarts", o->max_restarts,
                 "with --elastic: a lost rank is started again (up to this many times in all) and its replica grows "
                 "back in at a step boundary, taking the parameters and optimizer state from a live replica")
      ->capture_default_str();
  app.add_option("--experts", c.experts,
                 "mixture of experts: the MLP of every --moe-every-th layer becomes this many experts behind a learned "
                 "router (default 0: none)")
      ->capture_default_str();
  app.add_option("--top-k", c.top_k, "mixture of experts: experts per token")->capture_default_str();
  app.add_option("--expert-parallel", c.dims.ep,
                 "mixture of experts: ranks the experts are spread over (taken from the data-parallel ranks; tokens "
                 "travel by alltoallv)")
      ->capture_default_str();
  app.add_option("--moe-every", c.moe_every, "mixture of experts: every n-th layer (2: Switch's every other)")
      ->capture_default_str();
  app.add_option("--aux-loss-coef", c.aux_loss_coef, "mixture of experts: α of the load-balancing loss")
      ->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "data-parallel all-reduce bucket size in MiB")->capture_default_str();
  auto* timeout_opt = app.add_option("--timeout", o->timeout_s, "seconds any rank may wait for another")->capture_default_str();
  add_launcher_option(app, &o->launcher);
  return [o, dp_opt, ranks_opt, hosts_opt, timeout_opt] {
    TrainConfig& c = o->c;
    // As a rank of a launcher's job: the job's ranks and hosts; the timeout is the job's MPCOMM_TIMEOUT.
    // Under another launcher the job's communicators are made in run_as_rank: elastic from the start.
    if (c.elastic) ::setenv("MPCOMM_ELASTIC", "1", 1);
    const bool as_rank = run_as_rank("mpcomm train", o->launcher,
                                     {{"--ranks", ranks_opt->count() > 0}, {"--hosts", hosts_opt->count() > 0},
                                      {"--timeout", timeout_opt->count() > 0}});
    std::unique_ptr<Communicator> first;  // as a rank: the first backend's, made before anything prints
    std::vector<std::string> backends = o->backends == "all" ? bench::all_backends_for("cpu") : bench::split_list(o->backends);
    if (as_rank && o->backends == "all") backends = startable_backends(backends);
    if (as_rank) {
      first = rank_communicator(backends.at(0), "cpu");
      o->ranks = first->size();
      o->hosts = first->topology().num_hosts();
    }
    const bool lead = prints_results();
    if (o->ranks == 0) o->ranks = c.dims.world();
    if (o->ranks < 1) throw InvalidArgument("mpcomm train: --ranks must be at least 1");
    if (o->max_restarts > 0 && !c.elastic) throw InvalidArgument("mpcomm train: --max-restarts needs --elastic");
    if (dp_opt->count() == 0 && c.dims.tp * c.dims.pp > 0 && o->ranks % (c.dims.tp * c.dims.pp) == 0)
      c.dims.dp = o->ranks / (c.dims.tp * c.dims.pp);
    auto have = bench::all_backends_for("cpu");
    for (const auto& b : backends) {
      if (b == "nccl")
        throw InvalidArgument("mpcomm train: backend nccl: the trainer keeps its tensors in host memory, and nccl "
                              "works on GPU buffers");
      if (std::find(have.begin(), have.end(), b) == have.end())
        throw InvalidArgument("mpcomm train: backend '" + b + "' is not in this build (mpcomm info lists them)");
    }
    // Every rank checks this again; checking here first gives one clear message instead of one per rank.
    parallel::ResolvedRun resolved = parallel::resolve(c, o->ranks);
    const auto& m = resolved.model;
    const double tokens_per_step = double(c.batch) * c.seq;
    if (lead) std::printf("# mpcomm train: GPT-2 %d layers, hidden %d, %d heads, vocab %d, %zu parameters\n", m.layers,
                m.hidden, m.heads, m.vocab, [&] {
                  size_t n = 0;
                  for (auto& [name, shape] : parallel::full_model_tensors(m)) {
                    size_t e = 1;
                    for (auto d : shape) e *= static_cast<size_t>(d);
                    n += e;
                  }
                  return n;
                }());
    if (lead) std::printf("# %d ranks = tp %d × pp %d × dp %d on %d host(s), %s schedule, %d micro-batch(es); batch %d × seq "
                "%d = %.0f tokens/step; data %s; %s\n",
                o->ranks, c.dims.tp, c.dims.pp, c.dims.dp, o->hosts, c.schedule.c_str(), c.micro_batches, c.batch,
                c.seq, tokens_per_step, resolved.data->path().c_str(),
                c.init_from.empty() ? ("seed " + std::to_string(c.seed)).c_str() : ("from " + c.init_from).c_str());
    std::fflush(stdout);
    const std::string exe = bench::self_exe_path();
    std::vector<BackendRun> runs;
    int status = 0;
    for (const auto& backend : backends) {
      const std::string tmp = lead ? bench::make_temp_file("train") : "";
      TrainConfig one = c;
      if (!c.save.empty()) one.save = per_backend_path(c.save, backend, backends.size());
      if (!c.trace.empty()) one.trace = per_backend_path(c.trace, backend, backends.size());
      LaunchOptions lo;
      lo.nranks = o->ranks;
      lo.hosts = o->hosts;
      lo.timeout_s = o->timeout_s;
      lo.backend = backend;
      lo.needs = launch_needs(backend);
      lo.grace_s = 5;
      lo.elastic = c.elastic;
      lo.max_restarts = o->max_restarts;
      one.grow_back = c.elastic && o->max_restarts > 0;
      lo.argv = {exe, "train-worker", "--config", to_json(one).dump(), "--out", tmp, "--fail-rank", o->fail};
      BackendRun run;
      run.backend = backend;
      if (as_rank) {
        auto world = first ? std::move(first) : rank_communicator(backend, "cpu");
        ProgressBar progress(lead ? backend : "", lead ? static_cast<size_t>(c.steps) : 0,
                             [&] { return train_progress(tmp, tokens_per_step); });
        run.status = train_rank(*world, one, tmp, o->fail);
      } else {
        ProgressBar progress(backend, static_cast<size_t>(c.steps), [&] { return train_progress(tmp, tokens_per_step); });
        run.status = launch(lo);
      }
      if (!lead) continue;
      std::ifstream f(tmp);
      std::string line;
      while (std::getline(f, line)) {
        auto j = json::parse(line, nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("event") && j.at("event") == "grew") {  // replicas that came back
          std::printf(
              "# %s: grew back at step %d: dp %d goes on, the joiners' state received %.3f s after the grow "
              "began\n",
              backend.c_str(), j.value("step", 0), j.value("dp", 0), j.value("rebuild_s", 0.0));
          continue;
        }
        if (j.contains("event")) {  // an elastic run's recovery (rank 0 of the world that went on)
          std::printf(
              "# %s: recovered at step %d: ranks %s lost, %s left with their replica; dp %d goes on; "
              "failure seen %.3f s into the step, groups rebuilt %.3f s later\n",
              backend.c_str(), j.value("step", 0), j.at("lost").dump().c_str(), j.at("left").dump().c_str(),
              j.value("dp", 0), j.value("detect_s", 0.0), j.value("rebuild_s", 0.0));
          continue;
        }
        if (j.contains("loss")) {  // by step: an elastic run that went back a step writes it again
          const auto k = j.at("step").get<size_t>();
          run.losses.resize(std::max(run.losses.size(), k + 1));
          run.losses[k] = j.at("loss");
        }
        if (j.contains("ranks")) {
          for (const auto& v : j.at("ranks")) {
            std::vector<double> d = v;
            run.ranks.push_back(parallel::RankStats::from_vector(d.data()));
          }
          run.seconds = j.at("seconds"), run.bubble_theory = j.at("bubble_theory");
          run.trace_bytes = j.value("trace_bytes", size_t{0});
        }
      }
      ::unlink(tmp.c_str());
      if (run.status != 0) {
        std::fprintf(stderr, "mpcomm train: backend %s failed (status %d)\n", backend.c_str(), run.status);
        if (status == 0) status = run.status;
      }
      if (!o->loss_log.empty() && run.status == 0) {
        std::string path = per_backend_path(o->loss_log, backend, backends.size());
        std::ofstream out(path);
        for (size_t k = 0; k < run.losses.size(); ++k) out << nlohmann::ordered_json{{"step", k}, {"loss", run.losses[k]}}.dump() << "\n";
        if (!out) throw InvalidArgument("mpcomm train: cannot write --loss-log " + path);
      }
      if (run.status == 0) {
        std::printf("# %s: %d steps in %.2f s, loss %.4f -> %.4f\n", backend.c_str(), c.steps, run.seconds,
                    run.losses.empty() ? NAN : run.losses.front(), run.losses.empty() ? NAN : run.losses.back());
        if (!one.trace.empty())
          std::printf("# %s: timeline in %s (%s; open it in ui.perfetto.dev)\n", backend.c_str(), one.trace.c_str(),
                      human_bytes(static_cast<double>(run.trace_bytes)).c_str());
        std::fflush(stdout);
      }
      runs.push_back(std::move(run));
    }
    if (!lead) return 0;
    print_summary(runs, resolved.cfg, tokens_per_step);  // resolved: a checkpoint's experts too
    for (const auto& r : runs) {
      if (r.ranks.empty() || c.steps == 0 || r.status != 0) continue;
      const double n = static_cast<double>(r.ranks.size()) * c.steps;
      StepTraffic t;
      t.backend = r.backend, t.zero = c.zero != 0, t.sequence_parallel = c.sequence_parallel;
      for (const auto& x : r.ranks) {
        t.tp_calls += double(x.tp.calls) / n, t.tp_bytes += double(x.tp.bytes) / n, t.tp_s += x.tp_spent / n;
        t.pp_calls += double(x.pp.calls) / n, t.pp_bytes += double(x.pp.bytes) / n, t.pp_s += x.pp_spent / n;
        t.dp_calls += double(x.dp.calls) / n, t.dp_bytes += double(x.dp.bytes) / n, t.dp_s += x.dp_spent / n;
        t.emb_calls += double(x.embedding.calls) / n, t.emb_bytes += double(x.embedding.bytes) / n;
        t.emb_s += x.embedding.seconds / n;
      }
      print_prediction(t, c.dims, o->ranks, o->hosts);
    }
    // The backends must agree: the same model, data and order of operations on every one.
    for (size_t i = 1; i < runs.size(); ++i) {
      if (runs[i].status != 0 || runs[0].status != 0) continue;
      double worst = 0;
      for (size_t k = 0; k < std::min(runs[0].losses.size(), runs[i].losses.size()); ++k)
        worst = std::max(worst, std::fabs(runs[i].losses[k] - runs[0].losses[k]) / std::fabs(runs[0].losses[k]));
      std::printf("# losses of %s vs %s: max relative difference %.2e\n", runs[i].backend.c_str(),
                  runs[0].backend.c_str(), worst);
    }
    return status;
  };
}

Runner add_train_worker(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto fail = std::make_shared<std::string>();
  app.add_option("--config", *config, "the training configuration, as JSON")->required();
  app.add_option("--fail-rank", *fail, "RANK@STEP,...: as mpcomm train's");
  app.add_option("--out", *out, "where rank 0 appends its per-step rows and the summary")->required();
  app.group("");  // internal: started by mpcomm train
  return [config, out, fail] {
    TrainConfig c = from_json(json::parse(*config));
    const bool joined = param_int("MPCOMM_JOIN") != 0;
    std::unique_ptr<Communicator> world;
    try {
      world = init_from_env();
    } catch (const Timeout& e) {  // a restart the run did not take back within the timeout: not the job's failure
      if (!joined) throw;
      std::fprintf(stderr, "mpcomm train: started again to rejoin, but no replica grew back in: %s\n", e.what());
      return 0;
    }
    if (world == nullptr) {  // a joiner the job did not take in before it ended
      std::fprintf(stderr, "mpcomm train: started again to rejoin, but the run had closed its joins: nothing to do\n");
      return 0;
    }
    return train_rank(*world, c, *out, *fail, joined ? discover_env().rank : -1);
  };
}

}  // namespace mpcomm::cli
