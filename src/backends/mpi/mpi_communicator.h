// The mpi backend: every op through Open MPI's non-blocking collectives and point-to-point calls on a
// private duplicate of MPI_COMM_WORLD (or of a split of it), each completed by a bounded MPI_Test loop
// so that nothing waits past Options::timeout. Ranks are started by mpirun (`mpcomm launch --backend
// mpi` runs it); rank and size must be MPI_COMM_WORLD's.
#pragma once

#include <cstddef>
#include <memory>

#include "core/backend.h"

namespace mpcomm::mpi {

// Initialises MPI on first use (MPI_THREAD_MULTIPLE requested, less accepted) and finalises it at
// process exit when this library initialised it, no communicator is left and none was aborted.
// `store`, when given, is only used for the job-wide abort key (mpcomm/abort).
std::unique_ptr<detail::Backend> create_mpi(std::shared_ptr<Store> store, int rank, int size, const Options& opts);

// Test hook: the most elements one MPI call carries for the ops that are split into chunks (allreduce,
// broadcast, reduce, send, recv), so that chunking can be tested without 2^31-element buffers.
// 0 restores the default (1 GiB worth of elements per call).
void set_max_chunk_elements_for_testing(size_t elements);

}  // namespace mpcomm::mpi
