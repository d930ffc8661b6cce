#include "as_rank.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

std::vector<std::string> startable_backends(std::vector<std::string> backends) {
  if (std::getenv("OMPI_COMM_WORLD_RANK") != nullptr || std::getenv("PMIX_RANK") != nullptr) return backends;
  auto mpi = std::find(backends.begin(), backends.end(), "mpi");
  if (mpi == backends.end()) return backends;
  backends.erase(mpi);
  if (prints_results())
    std::fprintf(stderr, "mpcomm: backend mpi left out: this job was not started by mpirun or with PMIx (srun "
                         "--mpi=pmix), so MPI could not make its world\n");
  return backends;
}

bool prints_results() { return !g_world || g_world->rank == 0; }

}  // namespace mpcomm::cli
