// Host groups for the hierarchical algorithms: who shares this rank's host, and one leader per host.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

HostGroups host_groups(const AlgoCtx& c, int prefer) {
  const auto& host = c.topo.host_of_rank;
  const int hosts = c.topo.num_hosts();
  std::vector<int> leader_of(static_cast<size_t>(hosts), -1);
  for (int r = c.size - 1; r >= 0; --r) leader_of[static_cast<size_t>(host[static_cast<size_t>(r)])] = r;
  if (prefer >= 0) leader_of[static_cast<size_t>(host[static_cast<size_t>(prefer)])] = prefer;
  HostGroups g;
  const int mine = host[static_cast<size_t>(c.rank)];
  g.local.push_back(leader_of[static_cast<size_t>(mine)]);
  for (int r = 0; r < c.size; ++r)
    if (host[static_cast<size_t>(r)] == mine && r != g.local.front()) g.local.push_back(r);
  for (int h = 0; h < hosts; ++h)
    if (leader_of[static_cast<size_t>(h)] >= 0) g.leaders.push_back(leader_of[static_cast<size_t>(h)]);
  return g;
}

}  // namespace mpcomm::native
