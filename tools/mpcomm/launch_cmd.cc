#include "backends/registry.h"
#include "bootstrap/launcher.h"
#include "cli_checks.h"
#include "commands.h"
#include "mpcomm/error.h"

namespace mpcomm::cli {

Runner add_launch(CLI::App& app) {
  auto opts = std::make_shared<LaunchOptions>();
  auto* nranks = app.add_option("-n,--nranks", opts->nranks, "number of ranks (with --nnodes: on this node)")
                     ->check(whole_at_least(1));
  auto* per_node = app.add_option("--nproc-per-node", opts->nranks, "ranks on this node (torchrun's name for -n)")
                       ->check(whole_at_least(1));
  nranks->excludes(per_node);
  app.add_option("--nnodes", opts->nnodes, "nodes of the job, each running one mpcomm launch (default 1)")
      ->check(whole_at_least(1));
  app.add_option("--node-rank", opts->node_rank, "this node's index, 0 to --nnodes - 1 (node 0 serves the store)")
      ->check(whole_at_least(0));
  app.add_option("--master", opts->master, "with --nnodes: HOST:PORT of node 0, where the job's store listens");
  app.add_option("--token-file", opts->token_file,
                 "with --nnodes: a file (mode 0600, the same on every node) holding the job's secret");
  app.add_flag("--insecure", opts->insecure,
               "with --nnodes and no secret (MPCOMM_TOKEN, --token-file, MUNGE): derive one from --master, so that "
               "any process reaching it can join");
  app.add_option("--hosts", opts->hosts, "emulated hosts; ranks are placed on them in blocks")->check(whole_at_least(1));
  auto* timeout = app.add_option("--timeout", opts->timeout_s, "MPCOMM_TIMEOUT for the ranks, seconds (default: the environment's, else 300)")
                     ->check(positive_number());
  auto* backend = app.add_option("--backend", opts->backend, "MPCOMM_BACKEND for the ranks (default: the environment's, else native)");
  app.add_flag("--elastic", opts->elastic,
               "a rank killed by a signal is lost and the others go on (MPCOMM_ELASTIC=1: they can shrink their "
               "communicators); exit 0 when every other rank ended with 0");
  app.add_option("--max-restarts", opts->max_restarts,
                 "with --elastic: start a lost rank's program again as a joiner (MPCOMM_JOIN=1: init_from_env() "
                 "joins the running job when the others grow()), up to this many times in all")
      ->check(non_negative_number());
  app.add_option("--grace", opts->grace_s, "seconds the other ranks get to end after the first failure")->check(non_negative_number());
  app.add_option("--addr", opts->bind_addr, "address the store listens on");
  app.add_flag("!--no-prefix", opts->prefix_output, "do not prefix output lines with the rank");
  app.add_flag("!--no-bind", opts->bind, "do not pin rank r to CPU r mod (number of CPUs)");
  app.add_option("command", opts->argv, "PROGRAM ARGS... (after --)")->required();
  return [opts, nranks, per_node, timeout, backend] {
    if (nranks->count() + per_node->count() == 0)
      throw InvalidArgument("mpcomm launch: give the number of ranks, -n N (or --nproc-per-node N)");
    // A flag beats the environment, which beats the default: the ranks get what the user set.
    opts->timeout_s = setting_or(timeout, opts->timeout_s, "MPCOMM_TIMEOUT", 300);
    opts->backend = setting_or(backend, opts->backend, "MPCOMM_BACKEND", "native");
    opts->needs = launch_needs(opts->backend);
    return launch(*opts);
  };
}

}  // namespace mpcomm::cli
