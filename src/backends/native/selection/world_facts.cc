// Agreeing on a native communicator's facts at its creation (world_facts.h).
#include "backends/native/selection/world_facts.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <vector>

#include "bootstrap/peer_directory.h"
#include "log/log.h"
#include "backends/native/selection/call_facts.h"

namespace mpcomm::native {

namespace {

// The round trip at creation uses echo words of this stamp, which no op's (1 + sequence number) reaches.
constexpr uint64_t kCreationStamp = (uint64_t{1} << 47) - 1;

tuning::Placement placement_of(CpuDistance d) {
  return d == CpuDistance::far ? tuning::Placement::far : d == CpuDistance::near ? tuning::Placement::near : tuning::Placement::unknown;
}

}  // namespace

WorldFacts agree_world_facts(Store& store, Engine& engine, const Topology& topo, long cpus, double far_ns,
                             net::Deadline deadline, const std::string& who) {
  const int rank = engine.rank(), size = engine.size();
  // 1. What this rank finds: whether it reaches every local rank's memory, and (ranks 0 and 1, on one
  //    host) where their CPUs are.
  HostLocal* host = engine.host();
  bool reach = false;
  double rt = std::numeric_limits<double>::quiet_NaN();
  if (host != nullptr) {
    reach = engine.settings().single_copy && host->probe_single_copy(deadline);
    if (rank <= 1) rt = host->round_trip_ns(1 - rank, 16, kCreationStamp, deadline);
  }

  // 2. The shape, from the topology and every host's CPUs.
  WorldFacts f;
  tuning::Shape& s = f.shape;
  s.ranks = size;
  s.hosts = topo.num_hosts();
  std::vector<int> per(static_cast<size_t>(s.hosts), 0);
  for (int h : topo.host_of_rank) ++per[static_cast<size_t>(h)];
  s.per_host = *std::max_element(per.begin(), per.end());
  s.even_hosts = std::all_of(per.begin(), per.end(), [&](int k) { return k == per.front(); });

  // 3. Rank 0 gathers every rank's findings and CPUs, decides, and tells the others.
  char text[128];
  if (size == 1) {
    s.cpus_per_rank = static_cast<double>(cpus);
  } else if (rank != 0) {
    std::snprintf(text, sizeof text, "%d %ld", reach ? 1 : 0, cpus);
    store.set_string("facts/" + std::to_string(rank), text);
  } else {
    bool all_reach = reach;
    std::vector<long> host_cpus(static_cast<size_t>(s.hosts), cpus);
    for (int r = 1; r < size; ++r) {
      int theirs_reach = 0;
      long theirs_cpus = 0;
      const std::string got = get_before(store, "facts/" + std::to_string(r), deadline, who, "rank " + std::to_string(r));
      if (std::sscanf(got.c_str(), "%d %ld", &theirs_reach, &theirs_cpus) != 2)
        throw Internal("mpcomm: " + who + ": rank " + std::to_string(r) + " published facts '" + got + "'");
      all_reach = all_reach && theirs_reach != 0;
      long& hc = host_cpus[static_cast<size_t>(topo.host_of_rank[static_cast<size_t>(r)])];
      hc = std::min(hc, theirs_cpus);
    }
    double least = std::numeric_limits<double>::infinity();
    for (int h = 0; h < s.hosts; ++h)
      least = std::min(least, static_cast<double>(host_cpus[static_cast<size_t>(h)]) / per[static_cast<size_t>(h)]);
    const CpuDistance d = host != nullptr ? cpu_distance(rt, far_ns) : CpuDistance::unknown;
    std::snprintf(text, sizeof text, "%d %.17g %d %.17g", host != nullptr && all_reach ? 1 : 0, least, static_cast<int>(d), rt);
    store.set_string("facts", text);
  }
  if (size > 1) {
    const std::string got = rank == 0 ? std::string(text) : get_before(store, "facts", deadline, who, "rank 0");
    int sc = 0, distance = 0;
    if (std::sscanf(got.c_str(), "%d %lg %d %lg", &sc, &s.cpus_per_rank, &distance, &f.round_trip_ns) != 4)
      throw Internal("mpcomm: " + who + ": rank 0 published facts '" + got + "'");
    s.single_copy = sc != 0;
    s.placement = placement_of(static_cast<CpuDistance>(distance));
  }
  if (host != nullptr) host->agreed(s.single_copy);
  if (rank == 0)
    MPCOMM_LOG(info, "native: %d ranks on %d host(s) (at most %d per host), %.3g CPUs per rank, single copy %s, CPUs of ranks 0 and 1 %s (round trip %.0f ns)",
               s.ranks, s.hosts, s.per_host, s.cpus_per_rank, s.single_copy ? "yes" : "no",
               std::string(tuning::to_string(s.placement)).c_str(), f.round_trip_ns);
  return f;
}

}  // namespace mpcomm::native
