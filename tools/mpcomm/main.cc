// mpcomm: launch ranks, check and measure collectives, describe this machine.
#include <cstdio>
#include <map>

#include "commands.h"
#include "mpcomm/error.h"

int main(int argc, char** argv) {
  CLI::App app{"mpcomm — collective communication for model-parallel LLM work"};
  app.require_subcommand(1);
  std::map<CLI::App*, mpcomm::cli::Runner> runners;
  auto add = [&](const char* name, const char* help, mpcomm::cli::Runner (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[sub] = fn(*sub);
  };
  add("launch", "start N local ranks of a program (mpcomm launch -n 4 -- PROGRAM ARGS...)", mpcomm::cli::add_launch);
  add("selftest", "run every collective with checked results and timings (run it under launch)", mpcomm::cli::add_selftest);
  add("bench", "nccl-tests-style measurements of every backend side by side", mpcomm::cli::add_bench);
  add("compare", "the article's experiments on this machine, every backend, tables and a report", mpcomm::cli::add_compare);
  add("bench-worker", "(internal) the measuring side of bench, run by each rank", mpcomm::cli::add_bench_worker);
  add("train", "train GPT-2 with tensor, pipeline and data parallelism on any backend", mpcomm::cli::add_train);
  add("train-worker", "(internal) one rank of train", mpcomm::cli::add_train_worker);
  add("tune",
      "measure every candidate of a backend's table (native: algorithms, paths, protocol choices; mpi: calls; "
      "--backends: which backend auto runs each call on) for one shape and write the table (or --check auto's)",
      mpcomm::cli::add_tune);
  add("tune-worker", "(internal) one rank of tune", mpcomm::cli::add_tune_worker);
  add("trace-merge", "join the ranks' MPCOMM_TRACE part files into one timeline (trace-merge OUT PARTS...)",
      mpcomm::cli::add_trace_merge);
  add("plan",
      "the cost model: calibrate it on this machine, validate it, predict a collective, or plan the TP x PP x DP "
      "split of a model on a cluster",
      mpcomm::cli::add_plan);
  add("info", "backends, versions, this host's cores and memory, and the MPCOMM_* variables", mpcomm::cli::add_info);
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto* sub : app.get_subcommands()) return runners.at(sub)();
  } catch (const mpcomm::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
