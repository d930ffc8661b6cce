#include "bootstrap/topology.h"

#include <unistd.h>

#include <algorithm>

#include "mpcomm/error.h"

namespace mpcomm {

std::string get_before(Store& store, const std::string& key, net::Deadline deadline, const std::string& who,
                       const std::string& missing) {
  auto left = std::chrono::duration_cast<Millis>(deadline - net::Clock::now());
  try {
    return store.get_string(key, std::max(left, Millis(1)));
  } catch (const Timeout& e) {
    throw Timeout("mpcomm: " + who + ": " + missing + " never showed up (" + e.what() + ")");
  }
}

PeerDirectory exchange_peers(Store& store, int rank, int size, const std::string& host_id, net::Deadline deadline,
                             const std::string& who) {
  // A rank number may join a group once: a second init of the same rank (or two processes handed the
  // same RANK) fails here, at once, instead of crossing wires with the first.
  if (store.add("join/" + std::to_string(rank), 1) > 1)
    throw InvalidArgument(who + ": rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          " joined this group a second time (a second init of the same rank, or two processes "
                          "given the same rank)");
  store.set_string("peer/" + std::to_string(rank), host_id + "\n" + std::to_string(getpid()));
  PeerDirectory dir;
  dir.pids.resize(static_cast<size_t>(size));
  std::vector<std::string> host_of(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    std::string v = get_before(store, "peer/" + std::to_string(r), deadline, who, "rank " + std::to_string(r));
    auto nl = v.find('\n');
    host_of[r] = v.substr(0, nl);
    dir.pids[r] = nl == std::string::npos ? 0 : std::atoi(v.c_str() + nl + 1);
  }
  dir.topology = topology_from_hosts(host_of, rank);
  return dir;
}

}  // namespace mpcomm
