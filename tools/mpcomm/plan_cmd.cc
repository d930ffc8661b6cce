// mpcomm plan: the cost model (tuning/cost_model.h) and the planner (parallel/planner.h) from the command line.
//
//   mpcomm plan --calibrate [--from FILE...]    fit this machine's profile (measuring its own rows without --from)
//   mpcomm plan --validate [--from FILE...]     the profile against rows it was not fitted to, and its error
//   mpcomm plan --predict OP --bytes S --ranks N --hosts H      one collective's predicted time
//   mpcomm plan --model M --gpus N --gpus-per-node K ...        the TP × PP × DP splits, fastest first
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "commands.h"
#include "mpcomm/error.h"
#include "parallel/planner.h"
#include "plan_measure.h"
#include "tuning/calibrate.h"

namespace mpcomm::cli {
namespace {

struct PlanOptions {
  bool calibrate = false, validate = false;
  std::vector<std::string> from;
  std::string out, profile = "this-machine", backend, backends = "native";
  std::string predict, bytes = "1M", algorithm;
  int ranks = 8, hosts = 1;
  std::string model;
  parallel::ModelSpec spec;
  parallel::PlanRequest req;
  int top = 10;
  std::string json;
};

void print_plan(const parallel::Plan& p, const parallel::PlanRequest& r, const tuning::Profile& prof, int top) {
  std::printf("%s on %d GPUs (%d a node), profile %s, backend %s; global batch %d, micro batch %d, recompute %s%s\n",
              r.model.name.c_str(), r.gpus, r.gpus_per_node, prof.name.c_str(),
              (r.backend.empty() ? prof.default_backend : r.backend).c_str(), r.global_batch, r.micro_batch,
              r.recompute.c_str(), r.zero ? ", optimizer state split over dp" : "");
  std::printf("%d splits fit, %zu rejected\n\n", static_cast<int>(p.ranked.size()), p.rejected.size());
  std::printf("%4s %4s %5s %5s | %7s %7s %7s %7s %7s | %9s %8s %8s %10s %8s %9s | %9s %10s\n", "tp", "pp", "dp", "m",
              "params", "weights", "grads", "optim", "activ", "compute", "tp comm", "pp comm", "dp (exp)", "bubble",
              "step", "tokens/s", "");
  std::printf("%22s | %7s %7s %7s %7s %7s | %9s %8s %8s %10s %8s %9s |\n", "", "(G)", "GB", "GB", "GB", "GB", "s", "s",
              "s", "s", "s", "s");
  int shown = 0;
  for (const auto& c : p.ranked) {
    if (shown++ >= top) break;
    char dp[32];
    std::snprintf(dp, sizeof dp, "%.3f(%.3f)", c.dp_comm, c.dp_exposed);
    std::printf("%4d %4d %5d %5d | %7.2f %7.1f %7.1f %7.1f %7.1f | %9.3f %8.3f %8.3f %10s %8.3f %9.3f | %9.0f\n", c.tp,
                c.pp, c.dp, c.micro_batches, c.memory.params / 1e9, c.memory.weights / 1e9, c.memory.grads / 1e9,
                c.memory.optimizer / 1e9, c.memory.activations / 1e9, c.compute, c.tp_comm, c.pp_comm, dp, c.bubble,
                c.step, c.tokens_per_s);
  }
  if (!p.why_best.empty()) std::printf("\n%s\n", p.why_best.c_str());
  if (p.ranked.empty() && !p.rejected.empty()) {
    std::printf("\nnothing fits; some of the reasons:\n");
    for (size_t i = 0; i < std::min<size_t>(5, p.rejected.size()); ++i)
      std::printf("  tp %d pp %d dp %d: %s\n", p.rejected[i].tp, p.rejected[i].pp, p.rejected[i].dp,
                  p.rejected[i].why_not.c_str());
  }
}

nlohmann::json candidate_json(const parallel::Candidate& c) {
  return {{"tp", c.tp},
          {"pp", c.pp},
          {"dp", c.dp},
          {"micro_batches", c.micro_batches},
          {"params", c.memory.params},
          {"weights_bytes", c.memory.weights},
          {"grads_bytes", c.memory.grads},
          {"optimizer_bytes", c.memory.optimizer},
          {"activation_bytes", c.memory.activations},
          {"fits", c.fits},
          {"why_not", c.why_not},
          {"compute_s", c.compute},
          {"tp_comm_s", c.tp_comm},
          {"pp_comm_s", c.pp_comm},
          {"dp_comm_s", c.dp_comm},
          {"dp_exposed_s", c.dp_exposed},
          {"bubble_s", c.bubble},
          {"step_s", c.step},
          {"tokens_per_s", c.tokens_per_s}};
}

int run_plan(PlanOptions& o) {
  if (o.calibrate) return calibrate_command(o.from, o.backends, o.out);
  if (o.validate) return validate_command(o.from, o.backends, o.profile);
  const tuning::Profile prof = tuning::load_profile(o.profile);
  if (!o.predict.empty()) {
    const auto& costs = prof.backend(o.backend.empty() ? prof.default_backend : o.backend);
    const double bytes = static_cast<double>(bench::parse_bytes(o.bytes));
    const tuning::CommShape shape{o.ranks, o.hosts, prof.cores_per_host, prof.emulated_hosts};
    const auto p = tuning::predict(costs, o.predict, bytes, shape, o.algorithm);
    const double algbw = bytes / p.seconds / 1e9;
    std::printf("%s %s on %d ranks over %d hosts, profile %s: %.3f us (%s), algbw %.2f GB/s, busbw %.2f GB/s\n",
                o.predict.c_str(), bench::human_bytes(static_cast<size_t>(bytes)).c_str(), o.ranks, o.hosts,
                prof.name.c_str(), p.seconds * 1e6, p.algorithm.c_str(), algbw,
                algbw * tuning::bus_factor(o.predict, o.ranks));
    return 0;
  }
  parallel::PlanRequest r = o.req;
  if (!o.model.empty()) {
    if (o.spec.layers || o.spec.hidden || o.spec.heads || o.spec.kv_heads || o.spec.ffn || o.spec.vocab)
      throw InvalidArgument(
          "mpcomm plan: --model names the shape; --layers --hidden --heads --kv-heads --ffn --vocab "
          "describe a model of your own instead (only --seq changes a named model)");
    r.model = parallel::model_by_name(o.model);
    if (o.spec.seq > 0) r.model.seq = o.spec.seq;
  } else {
    if (o.spec.layers == 0)
      throw InvalidArgument("mpcomm plan: give --model, or --layers --hidden --heads --seq --vocab");
    r.model = o.spec;
    r.model.name = "custom";
    for (auto [v, name] : {std::pair{o.spec.hidden, "--hidden"},
                           {o.spec.heads, "--heads"},
                           {o.spec.seq, "--seq"},
                           {o.spec.vocab, "--vocab"}})
      if (v < 1) throw InvalidArgument(std::string("mpcomm plan: a model given by --layers needs ") + name);
  }
  r.model.dtype_bytes = o.spec.dtype_bytes;
  r.backend = o.backend;
  if (r.gpus_per_node == 0) r.gpus_per_node = std::min(r.gpus, prof.ranks_per_host);
  if (r.global_batch == 0) throw InvalidArgument("mpcomm plan: give --global-batch (sequences per step)");
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = parallel::plan(r, prof);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_plan(p, r, prof, o.top);
  std::printf("planned in %.3f s (%zu splits considered)\n", took, p.ranked.size() + p.rejected.size());
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", r.model.name},
                        {"gpus", r.gpus},
                        {"gpus_per_node", r.gpus_per_node},
                        {"profile", prof.name},
                        {"why_best", p.why_best}};
    for (const auto& c : p.ranked) j["ranked"].push_back(candidate_json(c));
    for (const auto& c : p.rejected) j["rejected"].push_back(candidate_json(c));
    std::ofstream f(o.json);
    if (!(f << j.dump(1) << "\n")) throw InvalidArgument("mpcomm plan: cannot write " + o.json);
  }
  return p.ranked.empty() ? 1 : 0;  // nothing fits: no plan
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  app.add_flag("--calibrate", o->calibrate, "fit this machine's profile (this-machine) from measurements");
  app.add_flag("--validate", o->validate, "compare the profile's predictions with measurements it was not fitted to");
  app.add_option("--from", o->from, "mpcomm bench --json files to fit or validate with (default: measure now)");
  app.add_option("--out", o->out, "--calibrate: where to write the profile (default: this-machine's place)");
  app.add_option("--backends", o->backends, "--calibrate/--validate without --from: the backends to measure")
      ->capture_default_str();
  app.add_option("--profile", o->profile,
                 "this-machine, dgx-a100-ib200, dgx-h100-ndr400, h200-ndr400, or a profile file")
      ->capture_default_str();
  app.add_option("--backend", o->backend, "the profile's backend to predict with (default: the profile's own)");
  app.add_option("--predict", o->predict,
                 "predict one op: allreduce, broadcast, allgather, reduce_scatter, alltoall, sendrecv");
  app.add_option("--bytes", o->bytes, "--predict: the op's size (nccl-tests' sense; K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("--ranks", o->ranks, "--predict: ranks")->capture_default_str();
  app.add_option("--hosts", o->hosts, "--predict: hosts the ranks are spread over")->capture_default_str();
  app.add_option("--algorithm", o->algorithm, "--predict: ring, tree, hierarchical or direct (default: the fastest)");
  app.add_option("--model", o->model,
                 "gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-175b, llama2-7b, llama2-13b, llama2-70b");
  app.add_option("--layers", o->spec.layers, "a model of your own: transformer layers");
  app.add_option("--hidden", o->spec.hidden, "hidden size");
  app.add_option("--heads", o->spec.heads, "attention heads");
  app.add_option("--kv-heads", o->spec.kv_heads, "key/value heads (grouped-query attention; default: --heads)");
  app.add_option("--ffn", o->spec.ffn, "MLP inner size (default 4 x hidden)");
  app.add_option("--seq", o->spec.seq, "sequence length (with --model: instead of the model's)");
  app.add_option("--vocab", o->spec.vocab, "vocabulary");
  app.add_option("--dtype-bytes", o->spec.dtype_bytes, "bytes of a weight and an activation")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  app.add_option("--gpus", o->req.gpus, "GPUs in all");
  app.add_option("--gpus-per-node", o->req.gpus_per_node, "GPUs a node (default: the profile's)");
  app.add_option("--global-batch", o->req.global_batch, "sequences a step");
  app.add_option("--micro-batch", o->req.micro_batch, "sequences a micro-batch")->capture_default_str();
  app.add_option("--mfu", o->req.mfu, "fraction of peak FLOP/s the compute reaches (default: the profile's)")
      ->check(CLI::Range(1e-6, 1.0));
  app.add_option("--recompute", o->req.recompute, "none, selective or full")->capture_default_str();
  app.add_option("--zero", o->req.zero, "1: optimizer state split over dp, 0: replicated")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--top", o->top, "splits to print")->capture_default_str();
  app.add_option("--json", o->json, "write every split (ranked and rejected) to this file");
  return [o] { return run_plan(*o); };
}

}  // namespace mpcomm::cli
