// Backend registry: the one table of backends (registry.h), create() by name, available_backends(), and
// init_from_env().
#include "backends/registry.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "backends/auto/auto_backend.h"
#include "backends/native/backend.h"
#include "backends/native/selection/selection.h"
#include "bootstrap/bind_address.h"
#include "core/timeline.h"
#ifdef MPCOMM_HAVE_GLOO
#include "backends/gloo/gloo_communicator.h"
#endif
#ifdef MPCOMM_HAVE_MPI
#include "backends/mpi/calls_table.h"
#include "backends/mpi/mpi_communicator.h"
#endif
#ifdef MPCOMM_HAVE_NCCL
#include "backends/nccl/nccl_communicator.h"
#endif
#include "bootstrap/env.h"
#include "core/front_door.h"
#include "core/timeline.h"
#include "device/device.h"
#include "log/log.h"
#include "mpcomm/communicator.h"
#include "net/munge.h"
#include "net/socket.h"
#include "settings/settings.h"

namespace mpcomm {

namespace {

#ifdef MPCOMM_HAVE_GLOO
constexpr detail::BackendFactory kGloo = gloo::create_gloo;
#else
constexpr detail::BackendFactory kGloo = nullptr;
#endif
#ifdef MPCOMM_HAVE_MPI
constexpr detail::BackendFactory kMpi = mpi::create_mpi;
constexpr bool kHaveMpi = true;
#else
constexpr detail::BackendFactory kMpi = nullptr;
constexpr bool kHaveMpi = false;
#endif
#ifdef MPCOMM_HAVE_NCCL
constexpr detail::BackendFactory kNccl = nccl::create_nccl;
#else
constexpr detail::BackendFactory kNccl = nullptr;
#endif

// Every backend mpcomm knows, and what each declares about itself.
struct BackendEntry {
  const char* name;
  detail::BackendFactory make;  // null: not in this build
  const char* missing;          // when it is not: why, and what to do about it
  bool needs_gpu = false;       // compiled in, but usable only where a GPU is
  bool needs_store = true;      // bootstraps from the store (mpi: from MPI_COMM_WORLD; a store only for aborts)
  LaunchNeeds launch;           // how `mpcomm launch` starts its ranks
};

const BackendEntry kBackends[] = {
    {"native", native::create_native, "", false, true, LaunchNeeds{}},
    // Never pinned: each gloo rank has a transport thread that polls its sockets (epoll,
    // level-triggered) and keeps spinning while data waits for a receive the caller has not posted yet;
    // on the caller's CPU it holds that CPU until the scheduler's tick, so every step of a collective
    // would wait out a tick (docs/performance.md, "How numbers are taken here").
    {"gloo", kGloo, "Gloo was not found when it was configured; install libgloo-dev, then reconfigure and rebuild",
     false, true, LaunchNeeds{.via_mpirun = false, .may_pin = false}},
    // Started by one `mpirun -n N` child (bootstrap/launch/mpirun.cc): the backend's world is
    // MPI_COMM_WORLD, which only mpirun makes (a rank started on its own is rank 0 of a world of one,
    // which the backend refuses), and MPI then uses its own transports between the ranks, as any MPI
    // user gets. mpirun pins them itself (--bind-to core) unless LaunchOptions::bind is off.
    {"mpi", kMpi,
     "Open MPI was not found when it was configured; install libopenmpi-dev and openmpi-bin, then reconfigure "
     "and rebuild",
     false, false, LaunchNeeds{.via_mpirun = true, .may_pin = true}},
    {"nccl", kNccl,
     "the CUDA toolkit or NCCL was not found when it was configured; install them, then reconfigure and rebuild", true,
     true, LaunchNeeds{}},
    // Every call on the fastest of the others (backends/auto): started by mpirun where this build has
    // MPI, so that mpi is among them, and pinned as native and mpi are (where it routes calls).
    {"auto", autosel::create_auto, "", false, true, LaunchNeeds{.via_mpirun = kHaveMpi, .may_pin = true}},
};

std::string built_names() {
  std::string known;
  for (const auto& b : kBackends)
    if (b.make != nullptr) known += (known.empty() ? "" : ", ") + std::string(b.name);
  return known;
}

// The entry of `backend`; InvalidArgument (prefixed by `who`) when this build lacks it or nobody knows it.
const BackendEntry& entry(std::string_view backend, const std::string& who) {
  const std::string name(backend);
  for (const auto& b : kBackends) {
    if (backend != b.name) continue;
    if (b.make == nullptr)
      throw InvalidArgument("mpcomm: " + who + name + ": this build of mpcomm has no " + name + " backend (" +
                            b.missing + ")");
    return b;
  }
  throw InvalidArgument("mpcomm: " + who + name + ": no such backend (this build has: " + built_names() + ")");
}

}  // namespace

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names;
  for (const auto& b : kBackends)
    if (b.make != nullptr) names.emplace_back(b.name);
  return names;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const auto& b : kBackends)
    if (b.make != nullptr && (!b.needs_gpu || device::cuda_devices() > 0)) names.emplace_back(b.name);
  return names;
}

detail::BackendFactory detail::backend_factory(std::string_view backend) {
  for (const auto& b : kBackends)
    if (backend == b.name) return b.make;
  return nullptr;
}

LaunchNeeds launch_needs(std::string_view backend) {
  LaunchNeeds needs = entry(backend, "launch: --backend ").launch;
  // auto without mpi (MPCOMM_AUTO_BACKENDS leaves it out) starts its ranks as native does: mpirun would
  // only bring MPI's fault model (a rank that dies ends the job) for nothing.
  if (backend == "auto" && needs.via_mpirun) {
    const std::vector<std::string> wanted = autosel::wanted_backends(Options{});
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), "mpi") == wanted.end()) needs.via_mpirun = false;
  }
  return needs;
}

std::unique_ptr<Communicator> create(std::string_view backend, std::shared_ptr<Store> store, int rank, int size,
                                     const Options& opts) {
  // Checks every backend needs, once.
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument("mpcomm: " + std::string(backend) + ": rank " + std::to_string(rank) + " / size " +
                          std::to_string(size) + " is not a valid rank of a group");
  const BackendEntry& b = entry(backend, "backend ");
  if (!store && b.needs_store) throw InvalidArgument("mpcomm: " + std::string(backend) + ": a store is required");
  if (b.needs_gpu) device::require_cuda("backend " + std::string(backend));
  Options o = opts;
  check_params(o);  // every setting's value first, so that its error is the one a user sees
  // The backends' own settings too, the created one's first (its errors are the ones its user looks for),
  // so that a bad value fails every run, not only the runs that read it.
  auto check_native = [&] { native::Selection s(o); };
  auto check_mpi = [&] {
#ifdef MPCOMM_HAVE_MPI
    mpi::CallsSelection s(o);
#endif
  };
  if (backend == "mpi") check_mpi();
  check_native();
  if (backend != "mpi") check_mpi();
  if (o.bind_addr.empty()) o.bind_addr = choose_bind_address(o, store.get());
  if (backend != "native" && param_string(o, "MPCOMM_TLS") == "1" && rank == 0) {
    static std::once_flag said;  // once per process: a job creates many groups
    std::call_once(said, [&] {
      MPCOMM_LOG(warn,
                 "MPCOMM_TLS=1 encrypts the store's connections and the native backend's links; the %s "
                 "backend's own connections between hosts stay unencrypted (docs/reliability.md, \"Encrypted links\")",
                 std::string(backend).c_str());
    });
  }
  auto comm = detail::make_communicator(b.make(std::move(store), rank, size, o), b.make);
  if (const std::string trace_file = param_string(o, "MPCOMM_TRACE"); !trace_file.empty())
    detail::trace_from_env(*comm, trace_file);
  if (o.token.empty() && rank == 0 && comm->topology().num_hosts() > 1) {
    static std::once_flag said;
    std::call_once(said, [&] {
      MPCOMM_LOG(warn,
                 "this job spans %d hosts and has no secret: any process that reaches its ports can join it; "
                 "give every rank the same MPCOMM_TOKEN (docs/reliability.md, \"Who gets in\")",
                 comm->topology().num_hosts());
    });
  }
  return comm;
}

EnvWorld env_world(const Options& in) {
  EnvInfo env = discover_env();
  EnvWorld w;
  w.rank = env.rank;
  w.size = env.size;
  Options with_host = in;
  // Under mpirun the emulated host (mpcomm launch --hosts) follows from the world rank: env.cc knows how.
  if (with_host.host_id.empty()) with_host.host_id = host_id_from_env();
  w.opts = with_host.resolved();
  // Under srun nobody hands out a secret, and whatever the ranks could derive one from (job and step ids,
  // node names) is public: without MPCOMM_TOKEN the ranks prove who they are with MUNGE, and rank 0's
  // store hands them a secret it makes at random (net/handshake.h).
  const bool by_munge = w.opts.token.empty() && env.source == "slurm";
  const std::string munge_hint =
      "slurm: without MPCOMM_TOKEN the ranks of a Slurm job join by MUNGE: run munged where MPCOMM_MUNGE_SOCKET or "
      "slurm.conf's AuthInfo says, or give every rank the same secret in MPCOMM_TOKEN";
  if (std::string why; by_munge && !net::munge::available(&why))  // every rank fails now, not at its timeout
    throw PeerFailure("mpcomm: " + why + " (" + munge_hint + ")");
  if (env.store_url.rfind("tcp://", 0) == 0) {
    auto [host, port] = net::parse_host_port(env.store_url.substr(6));
    try {
      auto tcp = std::make_shared<TcpStore>(host, port, w.opts.token, w.opts.timeout, env.serve_store,
                                            by_munge ? StoreAuth::munge : StoreAuth::secret);
      w.opts.token = tcp->secret();  // the transport's connections prove it
      w.store = std::move(tcp);
    } catch (const Error& e) {
      // Say where the address came from and what to set: a port another process holds (derived from
      // the job id under Slurm, or MASTER_PORT), or a node name that does not resolve here.
      // MUNGE itself failing (not a refusal by the store): say how to do without it.
      const std::string what = e.what();
      const bool munge_failed =
          by_munge && what.find("MUNGE") != std::string::npos && what.find("refused") == std::string::npos;
      if (munge_failed) throw_error(e.code(), std::string(e.what()) + " (" + munge_hint + ")");
      std::string hint = env.serve_store ? "rank 0 serves the job's store at " + env.store_url +
                                               "; set MASTER_PORT, or "
                                               "MPCOMM_STORE, to a free port on every rank"
                                         : "the job's store is at " + env.store_url +
                                               "; set MASTER_ADDR (and MASTER_PORT), or "
                                               "MPCOMM_STORE, to an address every rank reaches";
      throw_error(e.code(), std::string(e.what()) + " (" + env.source + ": " + hint + ")");
    }
  } else {
    w.store = open_store(env.store_url, w.opts.token, w.opts.timeout);
  }
  // The address this rank advertises routes to the store's host (resolved() could not know it).
  if (in.bind_addr.empty()) w.opts.bind_addr = choose_bind_address(w.opts, w.store.get());
  return w;
}

std::unique_ptr<Communicator> init_from_env(const Options& in) {
  EnvWorld w = env_world(in);
  // A process started again in place of a lost rank (mpcomm launch --elastic --max-restarts): it joins the
  // running job, and gets its communicator when the ranks there grow() theirs.
  if (param_int("MPCOMM_JOIN") != 0) return join(w.store, w.opts);
  std::string backend = param_string("MPCOMM_BACKEND");
  auto prefixed = std::make_shared<PrefixStore>("world/" + backend, w.store);
  return create(backend, std::move(prefixed), w.rank, w.size, w.opts);
}

}  // namespace mpcomm
