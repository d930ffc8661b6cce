// The auto backend: a Backend made of Backends. It holds one communicator's backend per backend usable
// on every rank (native always; gloo when built; mpi when the ranks are MPI_COMM_WORLD, i.e. started by
// mpirun; nccl when the buffers are on a GPU), each bootstrapped on its own store prefix ("native/",
// "gloo/", ...), and runs every call on the one its table chooses (router.h, route_table.h).
//
// Rules:
//  - Every rank routes alike: the table is rank 0's (its text goes to every rank through the store at
//    creation), the backends are those usable on every rank, and a decision depends only on facts all
//    ranks share.
//  - Order: the front door hands this backend one op at a time and a collective runs to its end before
//    run() returns, so a call routed to one backend has completed before a later collective starts on
//    another, blocking or not (non-blocking ones are queued in issue order). Sends and receives are
//    started in issue order and complete as their peers allow, as on any backend: making a send wait
//    for an earlier one on another backend to complete could deadlock a pairwise exchange.
//  - A failure of any child aborts them all (abort() goes to every child, so peers blocked in any of
//    them fail soon), with the child's error: its message names the child ("... [gloo]").
//  - Device buffers (Options::device cuda) all go to nccl when a GPU is usable; without nccl the CPU
//    backends stage them as they would on their own.
//  - op.algorithm reads "BACKEND/ALGORITHM" (the flight record's column).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace mpcomm::autosel {

std::unique_ptr<detail::Backend> create_auto(std::shared_ptr<Store> store, int rank, int size, const Options& opts);

// MPCOMM_AUTO_BACKENDS of `opts` (its environment's value unless opts set it), checked: the backends
// auto may route to (empty: every usable one). InvalidArgument naming a name auto does not know.
std::vector<std::string> wanted_backends(const Options& opts);

// The backends auto would use on this rank of `size` (before the ranks agree; MPCOMM_AUTO_BACKENDS
// applied), and for each one left out why.
struct Usable {
  std::vector<std::string> names;
  std::vector<std::string> left_out;  // "mpi (the ranks are not MPI_COMM_WORLD: start them with mpirun)"
};
Usable usable_here(const Options& opts, int rank, int size);

}  // namespace mpcomm::autosel
