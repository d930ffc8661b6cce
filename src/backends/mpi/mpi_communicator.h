// The mpi backend: every op through Open MPI's collectives — blocking ones where they are faster, watched
// by a watchdog that ends the job past Options::timeout; non-blocking ones completed by a bounded
// MPI_Test loop — and non-blocking point-to-point calls, on a private duplicate of MPI_COMM_WORLD (or of a
// split of it). Ranks are started by mpirun (`mpcomm launch --backend mpi` runs it); rank and size must
// be MPI_COMM_WORLD's.
#pragma once

#include <memory>

#include "core/backend.h"

namespace mpcomm::mpi {

// Initialises MPI on first use (MPI_THREAD_MULTIPLE requested, less accepted) and finalises it at
// process exit when this library initialised it, no communicator is left and none was aborted.
// `store`, when given, is only used for the job-wide abort key (mpcomm/abort).
std::unique_ptr<detail::Backend> create_mpi(std::shared_ptr<Store> store, int rank, int size, const Options& opts);
}  // namespace mpcomm::mpi
