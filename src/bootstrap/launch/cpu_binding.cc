// mpcomm launch, CPU binding: which CPUs the launcher may use, how many cores they make, and which CPU
// each rank is pinned to (LaunchOptions::bind, where LaunchNeeds::may_pin).
//
// Guarantees: only CPUs in the launcher's own affinity mask are ever named; bind_slot() gives ranks that
// fit one CPU each, in rank order, and otherwise deals every emulated host's ranks round-robin from a CPU
// that moves on with the host, so the hosts' leaders do not all share one (launcher.h). usable_cores() is
// at least 1.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/env.h"
#include "bootstrap/launch/launch_internal.h"

namespace mpcomm {

namespace launch_detail {

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Cores this process may run on (distinct (package, core) pairs of the CPUs in its affinity mask): what
// mpirun counts as slots by default, so more ranks than this need --oversubscribe.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    auto read_id = [&](const char* what) {
      std::string path = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + what;
      long v = -1;
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fscanf(f, "%ld", &v) != 1) v = -1;
        std::fclose(f);
      }
      return v;
    };
    long package = read_id("physical_package_id"), core = read_id("core_id");
    cores.emplace(core < 0 ? -1 - cpu : package, core < 0 ? cpu : core);  // unknown topology: one core per CPU
  }
  return std::max(1, static_cast<int>(cores.size()));
}

}  // namespace launch_detail

int bind_slot(int rank, int nranks, int hosts, int ncpus) {
  if (nranks <= ncpus) return rank;
  const int h = emulated_host_of_rank(rank, nranks, hosts);
  const int first = static_cast<int>(static_cast<long>(h) * nranks / hosts);
  return (rank - first + h) % ncpus;
}

}  // namespace mpcomm
