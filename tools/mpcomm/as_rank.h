// The tools as ranks of someone else's job: under srun, mpirun, torchrun or `mpcomm launch`, `mpcomm
// bench|compare|train` run as one rank each instead of starting ranks on this machine (`--launcher`).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "mpcomm/communicator.h"

namespace mpcomm::cli {

// --launcher auto|local|env on `app`, into *mode (default auto: env when launched_as_rank()).
void add_launcher_option(CLI::App& app, std::string* mode);

// Whether `tool` runs as one rank of the job that started this process. Under env, each (flag, given)
// of `local_flags` that was given is refused: the launcher decides where the ranks run. Throws
// InvalidArgument naming the flag, or, for --launcher env, when no launcher's variables are there.
bool run_as_rank(const std::string& tool, const std::string& mode,
                 const std::vector<std::pair<std::string, bool>>& local_flags);

// A communicator of `backend` over the job's store (found once per process from the environment: see
// env.h), with `device` ("" = MPCOMM_DEVICE). Every rank must ask for the same backends in the same order:
// the k-th communicator of the process meets the other ranks' k-th.
std::unique_ptr<Communicator> rank_communicator(const std::string& backend, const std::string& device);

// `backends` as a rank of a launcher's job, from "all": without mpi unless mpirun or PMIx started the job
// (under srun without --mpi=pmix, MPI_Init would make a world of one, or abort the process).
std::vector<std::string> startable_backends(std::vector<std::string> backends);

// False on a rank other than 0 of a job the tool runs as a rank of: that rank prints and writes nothing.
bool prints_results();

}  // namespace mpcomm::cli
