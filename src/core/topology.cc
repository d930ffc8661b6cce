#include "core/topology.h"

#include <algorithm>

namespace mpcomm {

Topology topology_from_hosts(const std::vector<std::string>& host_of, int rank) {
  Topology topo;
  topo.host_of_rank.resize(host_of.size());
  for (size_t r = 0; r < host_of.size(); ++r) {
    auto it = std::find(topo.host_names.begin(), topo.host_names.end(), host_of[r]);
    if (it == topo.host_names.end()) it = topo.host_names.insert(topo.host_names.end(), host_of[r]);
    topo.host_of_rank[r] = static_cast<int>(it - topo.host_names.begin());
  }
  topo.host = topo.host_of_rank[static_cast<size_t>(rank)];
  topo.local_size = 0;
  for (size_t r = 0; r < host_of.size(); ++r) {
    if (topo.host_of_rank[r] != topo.host) continue;
    if (static_cast<int>(r) == rank) topo.local_rank = topo.local_size;
    ++topo.local_size;
  }
  return topo;
}

}  // namespace mpcomm
