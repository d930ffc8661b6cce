#include "as_rank.h"

#include <optional>

#include "backends/registry.h"
#include "bootstrap/env.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm::cli {

namespace {

std::optional<EnvWorld> g_world;
int g_created = 0;

}  // namespace

void add_launcher_option(CLI::App& app, std::string* mode) {
  app.add_option("--launcher", *mode,
                 "auto: run as one rank when started by srun, mpirun, torchrun or mpcomm launch, else start the "
                 "ranks here; local: start the ranks here; env: run as one rank of the launcher's job")
      ->check(CLI::IsMember({"auto", "local", "env"}))
      ->capture_default_str();
}

bool run_as_rank(const std::string& tool, const std::string& mode,
                 const std::vector<std::pair<std::string, bool>>& local_flags) {
  if (mode == "local") return false;
  if (mode == "auto" && !launched_as_rank()) return false;
  for (const auto& [flag, given] : local_flags)
    if (given)
      throw InvalidArgument(tool + ": " + flag + " is for runs that start their ranks on this machine; started by a " +
                            "launcher (srun, mpirun, torchrun, mpcomm launch), each process is one rank and the " +
                            "launcher decides how many and where (drop " + flag + ", or pass --launcher local)");
  if (!g_world) g_world = env_world(Options{});  // throws naming the variables when no launcher is found
  return true;
}

std::unique_ptr<Communicator> rank_communicator(const std::string& backend, const std::string& device) {
  if (!g_world) throw Internal("mpcomm: rank_communicator() before run_as_rank()");
  Options opts = g_world->opts;
  if (!device.empty()) opts.device = parse_device(device);
  auto store = std::make_shared<PrefixStore>("tool/" + std::to_string(g_created++) + "/" + backend, g_world->store);
  return create(backend, std::move(store), g_world->rank, g_world->size, opts);
}

bool prints_results() { return !g_world || g_world->rank == 0; }

}  // namespace mpcomm::cli
