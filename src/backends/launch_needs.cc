// The launch needs of each backend (launch_needs.h): one table, with why each entry is what it is, and
// the refusal of a backend this build has not got.
#include "backends/launch_needs.h"

#include <string>

#include "mpcomm/error.h"

namespace mpcomm {

namespace {

#ifdef MPCOMM_HAVE_GLOO
constexpr bool kHaveGloo = true;
#else
constexpr bool kHaveGloo = false;
#endif
#ifdef MPCOMM_HAVE_MPI
constexpr bool kHaveMpi = true;
#else
constexpr bool kHaveMpi = false;
#endif
#ifdef MPCOMM_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

struct Entry {
  const char* name;
  bool built;           // this build has the backend
  const char* missing;  // when it does not: why, and what to do about it
  LaunchNeeds needs;
};

const Entry kBackends[] = {
    {"native", true, "", LaunchNeeds{}},
    // Never pinned: each gloo rank has a transport thread that polls its sockets (epoll,
    // level-triggered) and keeps spinning while data waits for a receive the caller has not posted yet;
    // on the caller's CPU it holds that CPU until the scheduler's tick, so every step of a collective
    // took 4 ms (2 ranks, 64 B-2 MiB allreduce: 4.0 ms pinned, against about 0.2-0.4 ms unpinned).
    {"gloo", kHaveGloo,
     "Gloo was not found when it was configured; install libgloo-dev, then reconfigure and rebuild",
     LaunchNeeds{.via_mpirun = false, .may_pin = false}},
    // Started by one `mpirun -n N` child (bootstrap/launch/mpirun.cc): the backend's world is
    // MPI_COMM_WORLD, which only mpirun makes (a rank started on its own is rank 0 of a world of one,
    // which the backend refuses), and MPI then uses its own transports between the ranks, as any MPI
    // user gets. mpirun pins them itself (--bind-to core) unless LaunchOptions::bind is off.
    {"mpi", kHaveMpi,
     "Open MPI was not found when it was configured; install libopenmpi-dev and openmpi-bin, then reconfigure "
     "and rebuild",
     LaunchNeeds{.via_mpirun = true, .may_pin = true}},
    {"nccl", kHaveNccl,
     "the CUDA toolkit or NCCL was not found when it was configured; install them, then reconfigure and rebuild",
     LaunchNeeds{}},
};

}  // namespace

LaunchNeeds launch_needs(std::string_view backend) {
  const std::string name(backend);
  for (const Entry& e : kBackends) {
    if (backend != e.name) continue;
    if (!e.built)
      throw InvalidArgument("mpcomm: launch: --backend " + name + ": this build of mpcomm has no " + name +
                            " backend (" + e.missing + ")");
    return e.needs;
  }
  std::string known;
  for (const Entry& e : kBackends)
    if (e.built) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw InvalidArgument("mpcomm: launch: --backend " + name + ": no such backend (this build has: " + known + ")");
}

}  // namespace mpcomm
