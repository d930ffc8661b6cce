// The native backend: mpcomm's own, shared memory between the ranks of a host and TCP between hosts.
// What lives where (docs/native.md has the design, docs/architecture.md a call walked through it):
//   backend.cc        NativeBackend: setup (the links, the segment, the facts agreed at creation), and
//                     run(): choose the algorithm, do what no algorithm does itself (one rank, no
//                     elements, avg's division), run it
//   constants.cc      the fixed numbers that are not choices, listed by `mpcomm info`
//   selection/        what runs: the built-in table (builtin_table.cc), the communicator's facts
//                     (world_facts: agreed once at creation), a call's facts (call_facts: from its
//                     arguments, and in_place / placement_now only where a row asks), Selection (the
//                     algorithm per call, the protocol choices, the message paths)
//   algorithms/       one file per algorithm (<op>_<name>.cc), the registry and their needs (algorithms.h)
//   engine/           frames between ranks: posting (engine.cc), matching, progress, single copy,
//                     waiting, failures, unexpected buffers, the path policy, host-local capabilities
//   transport/        the links: shm/ (the segment, its rings and board) and tcp/
// Calls go one way: backend -> selection -> algorithms -> engine -> transport.
#pragma once

#include <memory>

#include "core/backend.h"
#include "tuning/selection_table.h"

namespace mpcomm::native {

std::unique_ptr<detail::Backend> create_native(std::shared_ptr<Store> store, int rank, int size, const Options& opts);
// The facts a native backend's ranks agreed at its creation (ranks, hosts, CPUs per rank, single copy,
// placement): what other backends' tables key on (auto). Null when `b` is not a native backend.
const tuning::Shape* agreed_shape(const detail::Backend& b);

}  // namespace mpcomm::native
