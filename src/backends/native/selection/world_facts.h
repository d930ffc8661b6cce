// The facts of a native communicator that its algorithm choice depends on, agreed by every rank when it
// is created, so that every rank chooses alike: the shape of the selection tables' key (ranks, hosts,
// ranks per host, CPUs per rank), whether every rank reaches every other's memory (single copy, probed
// pair by pair), and where the CPUs of ranks 0 and 1 are (rank 0's measure of a cache line's round trip
// to rank 1 against its MPCOMM_FAR_NS).
#pragma once

#include <string>

#include "net/socket.h"
#include "mpcomm/communicator.h"
#include "backends/native/engine/engine.h"
#include "tuning/selection_table.h"

namespace mpcomm::native {

struct WorldFacts {
  tuning::Shape shape;
  double round_trip_ns = 0;  // rank 0's measure (NaN: not measured, not on one host)
};

// Collective over the ranks of `store` (each rank publishes what it found, rank 0 decides and
// publishes, the others read): bounded by `deadline`, errors name `who`.
WorldFacts agree_world_facts(Store& store, Engine& engine, const Topology& topo, long cpus, double far_ns,
                             net::Deadline deadline, const std::string& who);

}  // namespace mpcomm::native
