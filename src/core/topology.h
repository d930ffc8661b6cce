// Topology from the host id of every rank.
#pragma once

#include <string>
#include <vector>

#include "mpcomm/communicator.h"

namespace mpcomm {

// Hosts numbered in order of their lowest rank, as every backend numbers them; `rank` is this rank.
Topology topology_from_hosts(const std::vector<std::string>& host_of_rank, int rank);

}  // namespace mpcomm
