// Who is where: every rank publishes its host id and pid in the store and reads everybody else's.
// Shared by the backends that bootstrap from a store (native, gloo).
#pragma once

#include <string>
#include <vector>

#include "net/socket.h"
#include "core/topology.h"
#include "mpcomm/communicator.h"

namespace mpcomm {

struct PeerDirectory {
  Topology topology;
  std::vector<int> pids;  // process id of every rank
  std::vector<std::string> machines, addresses;  // every rank's hostname and advertised address
};

// Blocks until all `size` ranks published (or the deadline: a Timeout naming the missing rank).
// `advertised` is the address this rank's listeners advertise to other hosts ("" when it has none, as
// nccl). A rank on another host whose machine (gethostname) differs from this one's, when either side
// advertises a loopback address, fails every rank at once with InvalidArgument naming both ranks, their
// machines and addresses, and MPCOMM_IFNAME / MPCOMM_ADDR, instead of a connect that ends in a timeout.
PeerDirectory exchange_peers(Store& store, int rank, int size, const std::string& host_id,
                             const std::string& advertised, net::Deadline deadline, const std::string& who);

// Store get bounded by a deadline; a Timeout says which rank (`missing`) never showed up.
std::string get_before(Store& store, const std::string& key, net::Deadline deadline, const std::string& who,
                       const std::string& missing);

}  // namespace mpcomm
