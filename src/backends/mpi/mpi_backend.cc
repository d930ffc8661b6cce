// The mpi backend (see mpi_communicator.h): the Backend over Open MPI, its setup, and how it runs an op.
//
// A process-wide Runtime owns MPI's lifetime (mpi_runtime.h); each communicator holds a CommState
// (comm_state.h) that its point-to-point requests share (p2p_request.h). An op makes the MPI calls of
// mpi_calls.h, of the kind its calls table chooses (calls_table.h; MPCOMM_MPI_CALLS forces one):
//  - blocking (MPI_Allreduce ...): Open MPI's tuned algorithms on the calling thread, what an Open MPI
//    program gets. MPI cannot cancel or interrupt such a call, so each is watched by the watchdog
//    (watchdog.h): past the timeout, or when the job's abort record appears during it, the watchdog prints
//    our error naming the op, its sequence number and the rank, and ends the job (MPI_Abort).
//  - non-blocking (MPI_Iallreduce ...), completed in CommState::wait() (bounded, watched).
// Sends and receives are always non-blocking (MPI_Isend / MPI_Irecv).
//
// What is guaranteed: no non-blocking call waits past Options::timeout, no blocking one outlives it by
// more than the watchdog's look (50 ms), and MPI_Comm_split (which has no non-blocking form) is only
// entered once the front door's bounded allgather has shown that every rank called split. MPI cannot
// cancel a collective: when a communicator is aborted with MPI calls still in flight (a timeout, a peer's
// failure), their buffers may still be written if the late rank arrives, the MPI_Comm is left alone
// rather than freed under them, and MPI_Finalize is skipped at exit (it would wait for ranks that may
// never come). An abort with nothing in flight (a mismatch found by MPCOMM_CHECK, an unsupported count)
// leaves MPI in order.
//
// MPI_Finalize is collective in practice (Open MPI fences every rank in it), so a rank that exits with a
// failure status skips it: otherwise it would sit in MPI_Finalize until every other rank got there too,
// and mpirun — which ends the job as soon as one rank exits non-zero — would not hear of the failure
// until the others had timed out. on_exit() (glibc) is what lets the exit handler see the status.
#include "backends/mpi/mpi_communicator.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "backends/mpi/calls_table.h"
#include "backends/mpi/comm_state.h"
#include "backends/mpi/mpi_calls.h"
#include "backends/mpi/p2p_request.h"
#include "backends/mpi/watchdog.h"
#include "core/topology.h"
#include "device/device.h"
#include "kernels/reduce.h"

namespace mpcomm::mpi {

namespace {

// The shape of a communicator of `topo` (all but cpus_per_rank, which the ranks agree).
tuning::Shape shape_of(const Topology& topo) {
  tuning::Shape s;
  s.ranks = static_cast<int>(topo.host_of_rank.size());
  s.hosts = topo.num_hosts();
  std::vector<int> per(static_cast<size_t>(s.hosts), 0);
  for (int h : topo.host_of_rank) ++per[static_cast<size_t>(h)];
  s.per_host = *std::max_element(per.begin(), per.end());
  s.even_hosts = std::all_of(per.begin(), per.end(), [&](int k) { return k == per.front(); });
  return s;
}

tuning::Shape agree_shape(CommState& st, const Topology& topo, const ErrorSubject& what);

// ---- the backend ----------------------------------------------------------------------------------

class MpiBackend final : public detail::Backend {
 public:
  // Open MPI 4 has no ULFM: a communicator with a dead rank cannot be shrunk.
  bool shrinks() const override { return false; }
  // `calls`: fitted to the communicator's shape (the same on every rank: agreed at setup).
  MpiBackend(std::shared_ptr<CommState> st, Topology topo, Options opts, std::shared_ptr<Store> store, CallsSelection calls)
      : Backend("mpi", st->rank(), st->size(), std::move(topo), std::move(opts), std::move(store)),
        st_(std::move(st)),
        calls_(std::move(calls)),
        // A blocking call holds the MPI call lock for as long as it lasts: with less than
        // MPI_THREAD_MULTIPLE, a second communicator's calls on another thread would wait behind it.
        may_block_(Runtime::get().provided() >= MPI_THREAD_MULTIPLE) {
    // A blocking call cannot time out by itself: the watchdog ends the job when one lasts past the
    // timeout, or when the job's abort record appears while one is in progress.
    slot_ = Watchdog::watch(options().timeout, &st_->abort_watch(),
                            [this](ErrorCode code, const std::string& why, uint64_t armed) {
                              blocked_too_long(code, why, armed);
                            });
  }
  ~MpiBackend() override { slot_->detach(); }

  void run(const Op& op) override;

  std::shared_ptr<detail::RequestState> start(const Op& op) override {
    op.algorithm = op.kind == OpKind::send ? "MPI_Isend" : "MPI_Irecv";
    if (op.tag > st_->tag_ub)
      throw Unsupported("mpcomm: " + describe(op) + ": tag " + std::to_string(op.tag) + " is above this MPI's MPI_TAG_UB " +
                        std::to_string(st_->tag_ub));
    auto req = std::make_shared<MpiRequest>(st_, op, ErrorSubject(describe(op)));
    req->start();
    return req;
  }

  std::unique_ptr<detail::Backend> split(const detail::SplitPlan& plan) override;

  void abort(ErrorCode code, const std::string& reason) override {
    // A mismatch is found by MPCOMM_CHECK's exchange on every rank alike: record it, but do not announce
    // it to the job (a peer still finishing the exchange would report a PeerFailure instead).
    st_->abort(reason, /*announce=*/code != ErrorCode::mismatch);
  }

 private:
  MpiCalls calls_for(const Op& op) const { return may_block_ ? calls_.calls_for(op) : MpiCalls::nonblocking; }
  void run_blocking(const Op& op);
  void run_nonblocking(const Op& op);
  // Fills uneven_ from op.v; a count or displacement past INT_MAX is Unsupported (before any call).
  void prepare_uneven(const Op& op);
  // The watchdog's thread: a blocking call outlasted the timeout, or the job was aborted during one.
  [[noreturn]] void blocked_too_long(ErrorCode code, const std::string& why, uint64_t armed);

  std::shared_ptr<CommState> st_;
  const CallsSelection calls_;
  const bool may_block_;
  std::shared_ptr<Watchdog::Slot> slot_;
  Op blocked_in_{};  // the blocking call in progress (read by the watchdog's thread only while it is armed)
  UnevenInts uneven_;  // the uneven op in progress (prepare_uneven)
};

void MpiBackend::run(const Op& op) {
  if (op.kind == OpKind::send || op.kind == OpKind::recv || op.kind == OpKind::split)
    throw Internal("mpcomm: " + describe(op) + ": not a collective the mpi backend runs");
  if (op.v != nullptr) prepare_uneven(op);
  if (calls_for(op) == MpiCalls::blocking)
    run_blocking(op);
  else
    run_nonblocking(op);
  if (op.kind == OpKind::reduce_scatter && mpi_in_place(op, rank()) && rank() != 0)
    std::memmove(op.recv, op.send, op.count * dtype_size(op.dtype));
  // avg: MPI's sum, then divided where the result lives.
  const bool has_result = op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter ||
                          (op.kind == OpKind::reduce && op.root == rank());
  if (op.redop == ReduceOp::avg && op.reduces() && has_result) divide_by(op.recv, op.count, op.dtype, size());
}

// Every call on this thread, watched by the watchdog. A count MPI cannot take is refused before the slot
// is armed (Unsupported leaves the communicator usable).
void MpiBackend::run_blocking(const Op& op) {
  const char* call = call_name(op.kind, /*blocking=*/true);
  op.algorithm = call;
  if (op.kind != OpKind::allreduce && op.kind != OpKind::broadcast && op.kind != OpKind::reduce &&
      op.kind != OpKind::barrier && op.v == nullptr)
    one_call_count(op, *this);
  int rc = MPI_SUCCESS;
  blocked_in_ = op;
  struct Armed {
    Watchdog::Slot& slot;
    ~Armed() { slot.disarm(); }
  } armed{*slot_};
  slot_->arm(op.seq + 1);
  for_calls(op, rank(), *st_, *this, uneven_, [&](const MpiCall& c) {
    if (rc == MPI_SUCCESS) rc = make_call(c, nullptr);
  });
  if (rc != MPI_SUCCESS) throw_mpi(ErrorCode::peer_failure, describe(op), call, rc);
}

void MpiBackend::prepare_uneven(const Op& op) {
  const detail::VCounts& v = *op.v;
  auto ints = [&](std::span<const size_t> in, std::vector<int>& out, const char* name) {
    out.resize(in.size());
    for (size_t p = 0; p < in.size(); ++p) {
      if (in[p] > static_cast<size_t>(INT_MAX))
        throw Unsupported("mpcomm: " + describe(op) + ": " + name + "[" + std::to_string(p) + "] is " +
                          std::to_string(in[p]) + ", more than the " + std::to_string(INT_MAX) +
                          " elements MPI's " + call_name(op.kind, true) + " takes (its counts and displacements are int)");
      out[p] = static_cast<int>(in[p]);
    }
  };
  ints(v.send_counts, uneven_.send_counts, "send_counts");
  ints(v.send_displs, uneven_.send_displs, "send_displs");
  ints(v.recv_counts, uneven_.recv_counts, "recv_counts");
  ints(v.recv_displs, uneven_.recv_displs, "recv_displs");
}

void MpiBackend::blocked_too_long(ErrorCode code, const std::string& why, uint64_t) {
  const Op& op = blocked_in_;
  const std::string msg = "mpcomm: " + describe(op) + ": " + why +
                          " in a blocking MPI call (MPI cannot cancel it): the watchdog ends the job with MPI_Abort";
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  if (code == ErrorCode::timeout) st_->abort(msg);  // tells the job, as any failure does
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

// Every call posted, then completed by polling (CommState::wait).
void MpiBackend::run_nonblocking(const Op& op) {
  const ErrorSubject what(op, *this);
  const char* call = call_name(op.kind, /*blocking=*/false);
  op.algorithm = call;
  std::vector<MPI_Request> reqs;
  for_calls(op, rank(), *st_, *this, uneven_, [&](const MpiCall& c) {
    st_->post(reqs, what, call, [&](MPI_Request* r) { return make_call(c, r); });
  });
  st_->wait(reqs, nullptr, what, call);
}

// MPI_Comm_split blocks and cannot time out, so it is only entered once the front door's bounded allgather
// of every rank's (color, key) has shown that every rank is entering it too; the same allgather gave the
// new group's members, hence its topology (SplitPlan).
std::unique_ptr<detail::Backend> MpiBackend::split(const detail::SplitPlan& plan) {
  const ErrorSubject what("split (color " + std::to_string(plan.color) + ", key " + std::to_string(plan.key) + ") on rank " +
                  std::to_string(rank()) + " of " + std::to_string(size()) + " [mpi]");
  MPI_Comm child = MPI_COMM_NULL;
  {
    int rc;
    {
      auto g = Runtime::get().guard();
      rc = MPI_Comm_split(st_->comm, plan.color < 0 ? MPI_UNDEFINED : plan.color, plan.key, &child);
    }
    st_->check(rc, what, "MPI_Comm_split");
  }
  if (plan.color < 0) return nullptr;
  const int new_rank = plan.new_rank;
  const int new_size = static_cast<int>(plan.members.size());
  auto st = std::make_shared<CommState>(new_rank, new_size, options(), store());
  st->comm = child;
  int mpi_rank = -1, mpi_size = -1;
  {
    auto g = Runtime::get().guard();
    st->check(MPI_Comm_rank(child, &mpi_rank), what, "MPI_Comm_rank");
    st->check(MPI_Comm_size(child, &mpi_size), what, "MPI_Comm_size");
    st->check(MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN), what, "MPI_Comm_set_errhandler");
  }
  if (mpi_rank != new_rank || mpi_size != new_size)
    throw Internal("mpcomm: " + what.str() + ": MPI_Comm_split made this rank " + std::to_string(mpi_rank) + " of " +
                   std::to_string(mpi_size) + ", expected " + std::to_string(new_rank) + " of " +
                   std::to_string(new_size));
  st->tag_ub = st_->tag_ub;
  CallsSelection calls(options());
  calls.fit(agree_shape(*st, plan.topology, what));
  return std::make_unique<MpiBackend>(std::move(st), plan.topology, options(), plan.store ? plan.store : store(),
                                      std::move(calls));
}

// Starts one non-blocking call and waits for it (setup has no Op to describe).
template <class Post>
void call_and_wait(CommState& st, const ErrorSubject& what, const char* call, Post&& post) {
  std::vector<MPI_Request> reqs;
  st.post(reqs, what, call, post);
  st.wait(reqs, nullptr, what, call);
}

// Duplicates MPI_COMM_WORLD into st.comm (errors returned, not fatal) and learns every rank's host id.
Topology setup_world(CommState& st, const std::string& host_id, const ErrorSubject& what) {
  call_and_wait(st, what, "MPI_Comm_idup", [&](MPI_Request* r) { return MPI_Comm_idup(MPI_COMM_WORLD, &st.comm, r); });
  {
    auto g = Runtime::get().guard();
    st.check(MPI_Comm_set_errhandler(st.comm, MPI_ERRORS_RETURN), what, "MPI_Comm_set_errhandler");
    int* ub = nullptr;
    int flag = 0;
    st.check(MPI_Comm_get_attr(st.comm, MPI_TAG_UB, &ub, &flag), what, "MPI_Comm_get_attr");
    if (flag && ub != nullptr) st.tag_ub = *ub;
  }

  // Host ids: lengths first, then the characters.
  const auto n = static_cast<size_t>(st.size());
  const int len = static_cast<int>(host_id.size());
  std::vector<int> lens(n), displs(n);
  call_and_wait(st, what, "MPI_Iallgather",
                [&](MPI_Request* r) { return MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, st.comm, r); });
  int total = 0;
  for (size_t r = 0; r < n; ++r) {
    displs[r] = total;
    total += lens[r];
  }
  std::vector<char> chars(static_cast<size_t>(std::max(total, 1)));
  call_and_wait(st, what, "MPI_Iallgatherv", [&](MPI_Request* r) {
    return MPI_Iallgatherv(host_id.data(), len, MPI_CHAR, chars.data(), lens.data(), displs.data(), MPI_CHAR, st.comm,
                           r);
  });
  std::vector<std::string> hosts;
  for (size_t r = 0; r < n; ++r) hosts.emplace_back(chars.data() + displs[r], static_cast<size_t>(lens[r]));
  return topology_from_hosts(hosts, st.rank());
}

// The communicator's shape as the calls table sees it, the same on every rank: ranks, hosts, ranks per
// host, and the fewest CPUs per rank of any host (each host judges its own: hosts may differ in CPUs).
tuning::Shape agree_shape(CommState& st, const Topology& topo, const ErrorSubject& what) {
  tuning::Shape s = shape_of(topo);
  double mine = static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN)) / topo.local_size, least = 0;
  call_and_wait(st, what, "MPI_Iallreduce",
                [&](MPI_Request* r) { return MPI_Iallreduce(&mine, &least, 1, MPI_DOUBLE, MPI_MIN, st.comm, r); });
  s.cpus_per_rank = least;
  return s;
}

}  // namespace

std::unique_ptr<detail::Backend> create_mpi(std::shared_ptr<Store> store, int rank, int size, const Options& in) {
  Options opts = in.resolved();
  // cuda buffers are staged through host memory by the front door (core/device_staging.h).
  if (opts.device.kind == Device::cuda) device::require_cuda("mpi on " + to_string(opts.device));

  Runtime::get();
  int world_rank = -1, world_size = -1;
  {
    auto g = Runtime::get().guard();
    int rc = MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (rc != MPI_SUCCESS) throw_mpi(ErrorCode::internal, "mpi communicator setup", "MPI_Comm_rank/MPI_Comm_size", rc);
  }
  if (rank != world_rank || size != world_size)
    throw InvalidArgument("mpcomm: mpi: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          " was asked for, but MPI_COMM_WORLD makes this process rank " + std::to_string(world_rank) +
                          " of " + std::to_string(world_size) +
                          " (start the ranks with mpirun, e.g. mpcomm launch --backend mpi)");

  const ErrorSubject what("mpi communicator setup on rank " + std::to_string(rank) + " of " + std::to_string(size));
  CallsSelection calls(opts);  // MPCOMM_MPI_CALLS and MPCOMM_TUNING: bad input fails here, before any traffic
  auto st = std::make_shared<CommState>(rank, size, opts, store);
  try {
    Topology topo = setup_world(*st, opts.host_id, what);
    const tuning::Shape shape = agree_shape(*st, topo, what);
    calls.fit(shape);
    MPCOMM_LOG(info, "mpi rank %d/%d up: host %d of %d, %d local ranks, %.3g CPUs per rank, thread level %d; calls from %s",
               rank, size, topo.host, topo.num_hosts(), topo.local_size, shape.cpus_per_rank, Runtime::get().provided(),
               calls.describe().c_str());
    return std::make_unique<MpiBackend>(std::move(st), std::move(topo), std::move(opts), std::move(store), std::move(calls));
  } catch (const Error& e) {
    st->abort(e.what());
    throw;
  }
}

}  // namespace mpcomm::mpi
