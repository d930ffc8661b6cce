#include "bootstrap/peer_directory.h"

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

namespace {

std::string machine_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// Fields of a "peer/<rank>" value: host id, pid, advertised address, machine name, one a line.
std::vector<std::string> fields(const std::string& v) {
  std::vector<std::string> f;
  for (size_t i = 0; i <= v.size();) {
    size_t j = v.find('\n', i);
    if (j == std::string::npos) j = v.size();
    f.push_back(v.substr(i, j - i));
    i = j + 1;
  }
  f.resize(4);
  return f;
}

}  // namespace

PeerDirectory exchange_peers(Store& store, int rank, int size, const std::string& host_id,
                             const std::string& advertised, net::Deadline deadline, const std::string& who) {
  // A rank number may join a group once: a second init of the same rank (or two processes handed the
  // same RANK) fails here, at once, instead of crossing wires with the first.
  if (store.add("join/" + std::to_string(rank), 1) > 1)
    throw InvalidArgument(who + ": rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          " joined this group a second time (a second init of the same rank, or two processes "
                          "given the same rank)");
  const std::string machine = machine_name();
  store.set_string("peer/" + std::to_string(rank),
                   host_id + "\n" + std::to_string(getpid()) + "\n" + advertised + "\n" + machine);
  const bool my_loopback = !advertised.empty() && net::is_loopback(advertised);
  PeerDirectory dir;
  dir.pids.resize(static_cast<size_t>(size));
  dir.machines.resize(static_cast<size_t>(size));
  dir.addresses.resize(static_cast<size_t>(size));
  std::vector<std::string> host_of(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto f = fields(get_before(store, "peer/" + std::to_string(r), deadline, who, "rank " + std::to_string(r)));
    host_of[r] = f[0];
    dir.pids[r] = std::atoi(f[1].c_str());
    dir.addresses[r] = f[2];
    dir.machines[r] = f[3];
    const std::string& addr = f[2];
    if (f[0] == host_id || advertised.empty() || addr.empty() || f[3] == machine) continue;
    if (my_loopback || net::is_loopback(addr))
      throw InvalidArgument(who + ": rank " + std::to_string(r) + " on " + f[3] + " advertises " + addr + " and rank " +
                            std::to_string(rank) + " on " + machine + " advertises " + advertised +
                            ": a loopback address does not reach another machine; set MPCOMM_IFNAME to the interface "
                            "the hosts reach each other on (MPCOMM_IFNAME=eth0, or ^lo,docker) or MPCOMM_ADDR to "
                            "this host's address, on every host");
  }
  dir.topology = topology_from_hosts(host_of, rank);
  return dir;
}

}  // namespace mpcomm
