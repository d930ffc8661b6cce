// Backend registry: create() by name, available_backends(), and init_from_env().
#include <cstdlib>

#include "backends/native/native_communicator.h"
#ifdef MPCOMM_HAVE_GLOO
#include "backends/gloo/gloo_communicator.h"
#endif
#ifdef MPCOMM_HAVE_MPI
#include "backends/mpi/mpi_communicator.h"
#endif
#ifdef MPCOMM_HAVE_NCCL
#include "backends/nccl/nccl_communicator.h"
#endif
#include "bootstrap/env.h"
#include "core/core.h"
#include "core/device.h"
#include "core/net.h"
#include "core/params.h"
#include "mpcomm/communicator.h"

namespace mpcomm {

namespace {

struct BackendEntry {
  const char* name;
  detail::BackendFactory make;
};

const std::vector<BackendEntry>& backends() {
  static const std::vector<BackendEntry> list = {
      {"native", native::create_native},
#ifdef MPCOMM_HAVE_GLOO
      {"gloo", gloo::create_gloo},
#endif
#ifdef MPCOMM_HAVE_MPI
      {"mpi", mpi::create_mpi},
#endif
#ifdef MPCOMM_HAVE_NCCL
      {"nccl", nccl::create_nccl},
#endif
  };
  return list;
}

// A backend that needs a GPU is compiled in but not available on a machine without one.
bool needs_gpu(std::string_view name) { return name == "nccl"; }

}  // namespace

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names;
  for (const auto& b : backends()) names.emplace_back(b.name);
  return names;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const auto& b : backends())
    if (!needs_gpu(b.name) || device::cuda_devices() > 0) names.emplace_back(b.name);
  return names;
}

std::unique_ptr<Communicator> create(std::string_view backend, std::shared_ptr<Store> store, int rank, int size,
                                     const Options& opts) {
  // Checks every backend needs, once.
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument("mpcomm: " + std::string(backend) + ": rank " + std::to_string(rank) + " / size " +
                          std::to_string(size) + " is not a valid rank of a group");
  if (!store && backend != "mpi") throw InvalidArgument("mpcomm: " + std::string(backend) + ": a store is required");
  for (const auto& b : backends()) {
    if (backend != b.name) continue;
    if (needs_gpu(b.name)) device::require_cuda("backend " + std::string(backend));
    return detail::make_communicator(b.make(std::move(store), rank, size, opts), b.make);
  }
  std::string known;
  for (const auto& n : compiled_backends()) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument("mpcomm: unknown backend '" + std::string(backend) + "' (this build has: " + known + ")");
}

std::unique_ptr<Communicator> init_from_env(const Options& in) {
  EnvInfo env = discover_env();
  Options with_host = in;
  // Under mpirun the emulated host (mpcomm launch --hosts) follows from the world rank: env.cc knows how.
  if (with_host.host_id.empty()) with_host.host_id = host_id_from_env();
  Options opts = with_host.resolved();
  std::shared_ptr<Store> store;
  if (env.store_url.rfind("tcp://", 0) == 0) {
    auto [host, port] = net::parse_host_port(env.store_url.substr(6));
    store = std::make_shared<TcpStore>(host, port, opts.token, opts.timeout, env.serve_store);
  } else {
    store = open_store(env.store_url, opts.token, opts.timeout);
  }
  std::string backend = param_string("MPCOMM_BACKEND");
  auto prefixed = std::make_shared<PrefixStore>("world/" + backend, store);
  return create(backend, std::move(prefixed), env.rank, env.size, opts);
}

}  // namespace mpcomm
