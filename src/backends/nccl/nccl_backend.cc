// The nccl backend (see nccl_communicator.h): NcclBackend (run, start, abort, split, the memory it takes) and
// create_nccl, which picks the GPU, sets NCCL's host identity and brings up the first NCCL communicator.
#include "backends/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backends/nccl/nccl_calls.h"
#include "backends/nccl/nccl_runtime.h"
#include "backends/nccl/nccl_state.h"
#include "bootstrap/peer_directory.h"
#include "core/backend.h"
#include "core/op.h"
#include "log/log.h"
#include "net/socket.h"

namespace mpcomm::nccl {

namespace {

constexpr size_t kAlign = 256;  // the barrier's scratch word

class NcclBackend final : public detail::Backend {
 public:
  NcclBackend(std::shared_ptr<CommState> st, Topology topo, Options opts, std::shared_ptr<Store> store)
      : Backend("nccl", st->rank, st->size, std::move(topo), std::move(opts), std::move(store)),
        st_(std::move(st)),
        staging_(*st_) {}

  void run(const Op& op) override;

  std::shared_ptr<detail::RequestState> start(const Op& op) override {
    op.algorithm = op.kind == OpKind::send ? "ncclSend" : "ncclRecv";
    auto req = std::make_shared<P2PRequest>(st_, op, describe(op));
    req->start();
    return req;
  }

  std::unique_ptr<detail::Backend> split(const detail::SplitPlan& plan) override;

  void abort(ErrorCode code, const std::string& reason) override { st_->abort(code, reason); }

  // A test() hands every posted send and receive to NCCL as one group, and an exchange needs both of a
  // pair's operations in one group: the progress thread must not test them one at a time.
  bool cheap_test() const override { return false; }
  // ncclCommShrink and ncclCommRevoke (NCCL 2.28+). Written against nccl.h; no GPU has run it yet.
  bool shrinks() const override { return MPCOMM_NCCL_SHRINKS != 0; }
#if MPCOMM_NCCL_SHRINKS
  std::unique_ptr<detail::Backend> shrunk(const detail::SplitPlan& plan, bool after_failure) override;
#endif
  // ncclRecv names its peer.
  bool receives_from_any_source() const override { return false; }

  detail::MemoryType runs_on() const override { return detail::MemoryType::device; }
  // Device memory on this communicator's GPU, or managed memory, is used as it is; host memory (registered
  // or not) is staged. Device memory on another GPU is an InvalidArgument.
  detail::MemoryType memory_type(const void* buf) const override {
    const ErrorSubject what("nccl on rank " + std::to_string(rank()) + " of " + std::to_string(size()));
    return st_->on_device(buf, what) ? detail::MemoryType::device : detail::MemoryType::host;
  }
  bool may_stage() const override { return true; }
  detail::StagingMemory& staging() override { return staging_; }

 private:
  // The backend over a communicator ncclCommSplit or ncclCommShrink (`call`) made from this one.
  std::unique_ptr<detail::Backend> adopt_child(ncclComm_t child, const detail::SplitPlan& plan, const char* call,
                                               const ErrorSubject& what, net::Deadline deadline);
  std::shared_ptr<CommState> st_;
  DeviceStaging staging_;
};

// Device pointers only (the front door staged host buffers).
void NcclBackend::run(const Op& op) {
  op.algorithm = nccl_call(op.kind);
  if (op.reduces() && is_bitwise(op.redop))  // refused alike on every rank, before any NCCL call
    throw Unsupported("mpcomm: " + describe(op) + ": NCCL has no bitwise reductions; use a CPU backend for " +
                      std::string(to_string(op.redop)));
  // Nothing to move: no NCCL call on any rank. (An uneven op's count is this rank's only: it may receive.)
  if (op.count == 0 && op.kind != OpKind::barrier && op.v == nullptr) return;
  CommState& st = *st_;
  const ErrorSubject what(op, *this);
  st.make_current(what);
  const auto deadline = net::deadline_after(options().timeout);
  st.flush(what, deadline);  // point-to-point operations posted before this call go first, as called
  // Scratch: the alltoall in-place copy of the input, or the barrier's word.
  char* tmp = nullptr;
  if (op.kind == OpKind::alltoall && op.send == op.recv)
    tmp = st.scratch(op.bytes() * static_cast<size_t>(size()), what);
  else if (op.kind == OpKind::barrier)
    tmp = st.scratch(kAlign, what);
  if (tmp != nullptr) st.order_after_copies(what);  // the scratch came from the copy stream
  enqueue_op(st, op, what, deadline, tmp);
  st.wait_stream(st.stream, what, "the operation to complete on the GPU", deadline);
}

std::unique_ptr<detail::Backend> NcclBackend::split(const detail::SplitPlan& plan) {
  const ErrorSubject what("split #" + std::to_string(plan.seq) + " (color " + std::to_string(plan.color) + ", key " +
                  std::to_string(plan.key) + ") on rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                  " [nccl]");
  CommState& st = *st_;
  st.throw_if_aborted(what);
  st.make_current(what);
  auto deadline = net::deadline_after(options().timeout);
  // NCCL orders the new ranks by (key, old rank), as mpcomm does; ncclCommSplit is collective over this
  // communicator, so a rank that joins no group still takes part, with NCCL_SPLIT_NOCOLOR.
  ncclComm_t child = st.split(plan.color < 0 ? NCCL_SPLIT_NOCOLOR : plan.color, plan.key, what, deadline);
  if (plan.color < 0) {
    if (child != nullptr) (void)ncclCommAbort(child);  // not expected: NCCL returns none for NOCOLOR
    return nullptr;
  }
  if (child == nullptr)
    st.fail(ErrorCode::internal, "mpcomm: " + what.str() + ": ncclCommSplit returned no communicator");

  return adopt_child(child, plan, "ncclCommSplit", what, deadline);
}

// The backend over an NCCL communicator that `call` made from this one for plan's group, once it settled, with
// the rank and size NCCL gave it checked against mpcomm's.
std::unique_ptr<detail::Backend> NcclBackend::adopt_child(ncclComm_t child, const detail::SplitPlan& plan,
                                                          const char* call, const ErrorSubject& what,
                                                          net::Deadline deadline) {
  const CommState& st = *st_;
  const int new_size = static_cast<int>(plan.members.size());
  auto cst = std::make_shared<CommState>(plan.new_rank, new_size, st.device, options().timeout, plan.store, st.elastic);
  cst->adopt(child);  // from here on a failure aborts the child through cst
  cst->setup(what);
  cst->settle(what, call, deadline);
  const auto [nccl_rank, nccl_size] = cst->rank_and_count(what);
  if (nccl_rank != plan.new_rank || nccl_size != new_size)
    cst->fail(ErrorCode::internal, "mpcomm: " + what.str() + ": NCCL made this rank " + std::to_string(nccl_rank) +
                                       " of " + std::to_string(nccl_size) + ", mpcomm expected rank " +
                                       std::to_string(plan.new_rank) + " of " + std::to_string(new_size));
  return std::make_unique<NcclBackend>(std::move(cst), plan.topology, options(), plan.store);
}

#if MPCOMM_NCCL_SHRINKS
std::unique_ptr<detail::Backend> NcclBackend::shrunk(const detail::SplitPlan& plan, bool after_failure) {
  const ErrorSubject what("shrink to " + std::to_string(plan.members.size()) + " ranks on rank " +
                          std::to_string(rank()) + " of " + std::to_string(size()) + " [nccl]");
  CommState& st = *st_;
  st.make_current(what);
  const auto deadline = net::deadline_after(options().timeout);
  std::vector<int> exclude;  // NCCL keeps the others in their order, numbered from 0, as mpcomm does
  for (int r = 0, m = 0; r < size(); ++r) {
    if (m < static_cast<int>(plan.members.size()) && plan.members[static_cast<size_t>(m)] == r)
      ++m;
    else
      exclude.push_back(r);
  }
  ncclComm_t child = st.shrink(std::move(exclude), after_failure, what, deadline);
  if (child == nullptr) throw Internal("mpcomm: " + what.str() + ": ncclCommShrink returned no communicator");
  return adopt_child(child, plan, "ncclCommShrink", what, deadline);
}
#endif

// ---- setup ----------------------------------------------------------------------------------------

// The GPU of this rank: Options::device's index when it names one, else local rank modulo the visible GPUs.
int pick_device(const Device& d, int local_rank, const std::string& who) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw Unsupported("mpcomm: " + who + ": the nccl backend needs a GPU: " +
                      (e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                                        : std::string("the CUDA runtime sees no GPU")));
  }
  const int index = d.kind == Device::cuda && d.index >= 0 ? d.index : local_rank % count;
  if (index >= count)
    throw InvalidArgument("mpcomm: " + who + ": device cuda:" + std::to_string(index) + " does not exist (" +
                          std::to_string(count) + " GPUs visible)");
  return index;
}

// NCCL decides which ranks share a host from a hash of the host's identity, computed once per process
// (std::call_once) on first use: NCCL_HOSTID when it is set, else hostname + boot id (NCCL 2.28,
// src/misc/utils.cc, getHostHashOnce/getHostHash). An emulated host must therefore be in NCCL_HOSTID
// before the process's first NCCL call. Ranks on different emulated hosts then reach each other only
// through NCCL's network transport (sockets, or IB loopback; NCCL_SOCKET_IFNAME=lo on a machine without
// another interface): this measures NCCL's network path, not NVLink, P2P or shared memory. It is also
// what lets several ranks share one GPU, which NCCL refuses for two ranks of one host.
void use_host_id(const std::string& host_id, int rank) {
  static std::mutex mu;
  static bool decided = false;  // NCCL has (or is about to have) fixed this process's host identity
  static std::string chosen;    // the NCCL_HOSTID this process set, if any
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  const bool emulated = !host_id.empty() && host_id != name;
  std::lock_guard<std::mutex> g(mu);
  if (!decided) {
    decided = true;
    if (emulated) {
      ::setenv("NCCL_HOSTID", host_id.c_str(), 1);
      chosen = host_id;
    }
    return;
  }
  if (emulated ? host_id != chosen : !chosen.empty())
    MPCOMM_LOG(warn,
               "nccl rank %d: host id '%s' cannot take effect: NCCL fixes one host identity per process, and this "
               "one is '%s'",
               rank, host_id.c_str(), chosen.empty() ? name : chosen.c_str());
}

}  // namespace

std::unique_ptr<detail::Backend> create_nccl(std::shared_ptr<Store> store, int rank, int size, const Options& in) {
  Options opts = in.resolved();
  const auto deadline = net::deadline_after(opts.timeout);
  const std::string who = "nccl communicator setup on rank " + std::to_string(rank) + " of " + std::to_string(size);
  PeerDirectory dir = exchange_peers(*store, rank, size, opts.host_id, "", deadline, who);
  const int device = pick_device(opts.device, dir.topology.local_rank, who);
  use_host_id(opts.host_id, rank);  // before this process's first NCCL call

  const ErrorSubject what(who);
  auto st = std::make_shared<CommState>(rank, size, device, opts.timeout, store, opts.elastic > 0);
  st->setup(what);

  // Rank 0's unique id goes through the store under a key of this creation's own: ranks count themselves
  // in, `size` per creation, so a store that saw an earlier communicator never hands out its stale id.
  // (A creation cannot end on any rank before every rank counted itself in for it.)
  const int64_t generation = (store->add("nccl/joined", 1) - 1) / size;
  const std::string key = "nccl/id/" + std::to_string(generation);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0) {
    if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
      st->fail(code_of(rc), "mpcomm: " + who + ": ncclGetUniqueId failed: " + nccl_text(rc));
    store->set(key, Bytes(reinterpret_cast<const uint8_t*>(id.internal),
                          reinterpret_cast<const uint8_t*>(id.internal) + sizeof id.internal));
  } else {
    const std::string v = get_before(*store, key, deadline, who, "rank 0's NCCL unique id");
    if (v.size() != sizeof id.internal)
      st->fail(ErrorCode::internal, "mpcomm: " + who + ": store key " + key + " holds " + std::to_string(v.size()) +
                                        " bytes, not an NCCL unique id (" + std::to_string(sizeof id.internal) + ")");
    std::memcpy(id.internal, v.data(), sizeof id.internal);
  }
  st->init(id, what, net::deadline_after(opts.timeout));
  int version = 0;
  (void)ncclGetVersion(&version);
  const char* host_env = std::getenv("NCCL_HOSTID");
  MPCOMM_LOG(info, "nccl rank %d of %d: cuda:%d, NCCL %d, host '%s' (NCCL_HOSTID %s)", rank, size, device, version,
             opts.host_id.c_str(), host_env != nullptr ? host_env : "unset");
  return std::make_unique<NcclBackend>(std::move(st), std::move(dir.topology), std::move(opts), std::move(store));
}

}  // namespace mpcomm::nccl
