#include "backends/registry.h"
#include "bootstrap/launcher.h"
#include "commands.h"

namespace mpcomm::cli {

Runner add_launch(CLI::App& app) {
  auto opts = std::make_shared<LaunchOptions>();
  app.add_option("-n,--nranks", opts->nranks, "number of ranks")->required()->check(CLI::PositiveNumber);
  app.add_option("--hosts", opts->hosts, "emulated hosts; ranks are placed on them in blocks")->check(CLI::PositiveNumber);
  app.add_option("--timeout", opts->timeout_s, "MPCOMM_TIMEOUT for the ranks, seconds")->check(CLI::PositiveNumber);
  app.add_option("--backend", opts->backend, "MPCOMM_BACKEND for the ranks");
  app.add_option("--grace", opts->grace_s, "seconds the other ranks get to end after the first failure");
  app.add_option("--addr", opts->bind_addr, "address the store listens on");
  app.add_flag("!--no-prefix", opts->prefix_output, "do not prefix output lines with the rank");
  app.add_flag("!--no-bind", opts->bind, "do not pin rank r to CPU r mod (number of CPUs)");
  app.add_option("command", opts->argv, "PROGRAM ARGS... (after --)")->required();
  return [opts] {
    opts->needs = launch_needs(opts->backend);
    return launch(*opts);
  };
}

}  // namespace mpcomm::cli
