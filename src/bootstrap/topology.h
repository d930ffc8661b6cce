// Who is where: every rank publishes its host id and pid in the store and reads everybody else's.
// Shared by the backends that bootstrap from a store (native, gloo).
#pragma once

#include <string>
#include <vector>

#include "core/net.h"
#include "core/topology.h"
#include "mpcomm/communicator.h"

namespace mpcomm {

struct PeerDirectory {
  Topology topology;
  std::vector<int> pids;  // process id of every rank
};

// Blocks until all `size` ranks published (or the deadline: a Timeout naming the missing rank).
PeerDirectory exchange_peers(Store& store, int rank, int size, const std::string& host_id, net::Deadline deadline,
                             const std::string& who);

// Store get bounded by a deadline; a Timeout says which rank (`missing`) never showed up.
std::string get_before(Store& store, const std::string& key, net::Deadline deadline, const std::string& who,
                       const std::string& missing);

}  // namespace mpcomm
