// The backends of this build, one table (registry.cc) that says of each what it declares about itself:
// its factory, whether it needs a GPU or a store, and what it needs from `mpcomm launch` (LaunchNeeds,
// bootstrap/launcher.h: whether its ranks are started by mpirun, and whether they may be pinned to a
// CPU). The launcher knows no backend by name; whoever fills LaunchOptions asks here:
// o.needs = launch_needs(o.backend).
#pragma once

#include <memory>
#include <string_view>

#include "bootstrap/launcher.h"
#include "core/backend.h"
#include "mpcomm/communicator.h"

namespace mpcomm {

// The launch needs of `backend`. Throws InvalidArgument, before anything starts, for a backend this
// build does not have (saying what was missing when it was configured, and how to get it) or does not
// know at all.
LaunchNeeds launch_needs(std::string_view backend);

// This process's place in its job, read from the environment as init_from_env() reads it: rank, size,
// the options resolved, and the job's rendezvous store (served here when this rank must serve it). For
// tools that create several communicators in one job, each on a PrefixStore of its own.
struct EnvWorld {
  int rank = 0, size = 1;
  Options opts;
  std::shared_ptr<Store> store;
};
EnvWorld env_world(const Options& opts);

namespace detail {
// The factory of `backend` in this build (null: not built, or unknown), for backends made of backends.
BackendFactory backend_factory(std::string_view backend);
}  // namespace detail

}  // namespace mpcomm
