// The mpi backend (see mpi_communicator.h).
//
// Shape: a process-wide Runtime owns MPI's lifetime (initialised once, finalised at a successful exit
// after the last communicator) and the user-defined reduction ops for float16/bfloat16. Each
// communicator holds a CommState — its MPI_Comm, its abort reason and its view of the job's abort record
// — that its point-to-point Requests share, so a Request may outlive its Communicator.
//
// Two kinds of calls, chosen per op by a table of measurements (kCallsTable; MPCOMM_MPI_CALLS forces one):
//  - blocking (MPI_Allreduce ...): Open MPI's tuned algorithms on the calling thread, what an Open MPI
//    program gets. MPI cannot cancel or interrupt such a call, so each is watched by the watchdog
//    (core/watchdog.h): past the timeout, or when the job's abort record appears during it, the watchdog
//    prints our error naming the op, its sequence number and the rank, and ends the job (MPI_Abort).
//  - non-blocking (MPI_Iallreduce ...), completed in CommState::wait(): bursts of MPI_Testall, back to
//    back (yielding the core between bursts, as Open MPI's own blocking calls do when ranks outnumber
//    cores) for MPCOMM_MPI_SPIN_MS (1 s), then with sleeps of 50 µs growing to 1 ms between bursts; all
//    along it watches the job's abort record every 500 ms and checks the deadline. Open MPI moves a
//    non-blocking collective on only inside those calls, one round at a time: with sleeps after the first
//    50 µs a 2-rank 2 MiB MPI_Ireduce took 290 ms instead of 2 ms, and a 4-rank 256 KiB allreduce 2.0 ms
//    instead of 0.33 ms. The sleeps are for long waits only: a straggler, a dead peer, a pipeline bubble.
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

// The C API only: mpi.h would otherwise pull in the deprecated C++ bindings, which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "bootstrap/env.h"
#include "bootstrap/abort_record.h"
#include "device/device.h"
#include "log/log.h"
#include "core/op.h"
#include "settings/settings.h"
#include "kernels/reduce.h"
#include "core/topology.h"
#include "core/wait.h"
#include "backends/mpi/watchdog.h"

namespace mpcomm::mpi {

namespace {

using Clock = std::chrono::steady_clock;
using detail::Op;
using detail::ErrorSubject;

// How long bursts go back to back (sched_yield between): MPCOMM_MPI_SPIN_MS, at most an hour.
std::chrono::milliseconds spin_setting(const Options& o) {
  return std::chrono::milliseconds(std::clamp<int64_t>(param_int(o, "MPCOMM_MPI_SPIN_MS"), 0, int64_t{3600} * 1000));
}
// MPI_Testall calls per burst. Open MPI progresses its non-blocking collectives (coll/libnbc) from a
// low-priority callback that runs on every 8th opal_progress() only, and each MPI_Test makes one: with
// one test per wake-up a collective round took 8 sleeps, and a 2-rank barrier 2.8 ms instead of 20 µs.
constexpr int kTestsPerBurst = 16;
constexpr auto kStoreEvery = std::chrono::milliseconds(500);
// One MPI call carries at most this many bytes (and at most INT_MAX elements): well inside what every
// Open MPI code path computes in int.
constexpr size_t kChunkBytes = size_t{1} << 30;


std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(std::max(len, 0)));
}

int mpi_error_class(int rc) {
  int cls = rc;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) return rc;
  return cls;
}

// "mpcomm: <what>: MPI_Xxx failed: <MPI_Error_string>"
[[noreturn]] void throw_mpi(ErrorCode code, const std::string& what, const std::string& call, int rc,
                            const std::string& detail = "") {
  throw_error(code, "mpcomm: " + what + ": " + call + " failed: " + mpi_error_text(rc) + detail);
}

// ---- MPI's lifetime -------------------------------------------------------------------------------

template <DataType D, ReduceOp R>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  // MPI wants inout = in op inout; every op here is commutative, so inout op= in is the same.
  reduce_inplace(inout, in, static_cast<size_t>(*len), D, R);
}

class Runtime {
 public:
  // Initialises MPI on the first call.
  static Runtime& get();

  // Serialises MPI calls when MPI gave us less than MPI_THREAD_MULTIPLE (several communicators may
  // run on several threads); a no-op lock otherwise.
  std::unique_lock<std::mutex> guard() {
    return serialize_ ? std::unique_lock<std::mutex>(call_mu_) : std::unique_lock<std::mutex>();
  }

  // float16/bfloat16 ops, accumulating in float32 through mpcomm's kernels. avg reduces as sum.
  MPI_Op half_op(DataType dt, ReduceOp op) const {
    if (is_bitwise(op)) throw Internal("mpcomm: mpi: no " + std::string(to_string(op)) + " for " + std::string(to_string(dt)));
    return half_ops_[dt == DataType::bfloat16 ? 1 : 0][op == ReduceOp::avg ? 0 : static_cast<int>(op)];
  }

  void acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    ++live_;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--live_ == 0 && exiting_) finalize_locked();
  }
  // A communicator was aborted with MPI calls in flight: MPI_Finalize would wait for ranks that may
  // never arrive.
  void note_stuck() {
    std::lock_guard<std::mutex> lock(mu_);
    stuck_ = true;
  }
  bool finalized() {
    std::lock_guard<std::mutex> lock(mu_);
    return finalized_;
  }
  int provided() const { return provided_; }

 private:
  Runtime() = default;
  static void at_exit(int status, void*);
  void finalize_locked();

  std::mutex mu_;  // guards the lifetime fields below
  int live_ = 0;   // CommStates alive
  bool initialized_here_ = false;
  bool exiting_ = false;
  bool stuck_ = false;
  bool finalized_ = false;
  int exit_status_ = 0;

  int provided_ = MPI_THREAD_SINGLE;
  bool serialize_ = false;
  std::mutex call_mu_;
  MPI_Op half_ops_[2][4] = {};
};

std::mutex g_init_mu;
// Never deleted: it must outlive every static destructor and atexit handler.
std::atomic<Runtime*> g_runtime{nullptr};

Runtime& Runtime::get() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) return *rt;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) return *rt;
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) throw Internal("mpcomm: mpi: MPI was already finalized in this process and cannot be initialised again");
  auto* rt = new Runtime();
  if (!inited) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &rt->provided_);
    if (rc != MPI_SUCCESS) {
      delete rt;
      throw_mpi(ErrorCode::internal, "mpi backend initialisation", "MPI_Init_thread", rc);
    }
    rt->initialized_here_ = true;
    ::on_exit(&Runtime::at_exit, nullptr);
  } else {
    MPI_Query_thread(&rt->provided_);
  }
  rt->serialize_ = rt->provided_ < MPI_THREAD_MULTIPLE;
  if (rt->serialize_)
    MPCOMM_LOG(warn,
               "mpi: MPI provides thread level %d, not MPI_THREAD_MULTIPLE (%d); mpcomm serialises its MPI "
               "calls%s",
               rt->provided_, MPI_THREAD_MULTIPLE,
               rt->provided_ < MPI_THREAD_SERIALIZED ? ", but only the main thread may use mpi communicators" : "");
  using D = DataType;
  using R = ReduceOp;
  MPI_User_function* fns[2][4] = {{half_reduce<D::float16, R::sum>, half_reduce<D::float16, R::prod>,
                                   half_reduce<D::float16, R::min>, half_reduce<D::float16, R::max>},
                                  {half_reduce<D::bfloat16, R::sum>, half_reduce<D::bfloat16, R::prod>,
                                   half_reduce<D::bfloat16, R::min>, half_reduce<D::bfloat16, R::max>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 4; ++o) {
      int rc = MPI_Op_create(fns[t][o], /*commute=*/1, &rt->half_ops_[t][o]);
      if (rc != MPI_SUCCESS) throw_mpi(ErrorCode::internal, "mpi backend initialisation", "MPI_Op_create", rc);
    }
  g_runtime.store(rt, std::memory_order_release);
  return *rt;
}

void Runtime::at_exit(int status, void*) {
  Runtime& rt = *g_runtime.load();
  std::lock_guard<std::mutex> lock(rt.mu_);
  rt.exiting_ = true;
  rt.exit_status_ = status;
  if (rt.live_ == 0) rt.finalize_locked();
  // Otherwise the last communicator to go (a static, destroyed after this handler) finalises.
}

void Runtime::finalize_locked() {
  if (!initialized_here_ || finalized_) return;
  finalized_ = true;
  if (stuck_) {
    MPCOMM_LOG(info, "mpi: not calling MPI_Finalize: a communicator was aborted with MPI calls in flight");
    return;
  }
  if (exit_status_ != 0) {
    MPCOMM_LOG(info, "mpi: exit status %d: not calling MPI_Finalize, which would wait for every other rank",
               exit_status_);
    return;
  }
  for (auto& row : half_ops_)
    for (MPI_Op& op : row) MPI_Op_free(&op);
  if (int rc = MPI_Finalize(); rc != MPI_SUCCESS)
    MPCOMM_LOG(warn, "mpi: MPI_Finalize failed: %s", mpi_error_text(rc).c_str());
}

// ---- types ----------------------------------------------------------------------------------------

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::int8:
      return MPI_INT8_T;
    case DataType::uint8:
      return MPI_UINT8_T;
    case DataType::int32:
      return MPI_INT32_T;
    case DataType::int64:
      return MPI_INT64_T;
    case DataType::float16:
    case DataType::bfloat16:
      return MPI_UINT16_T;  // reduced by the user-defined ops above
    case DataType::float32:
      return MPI_FLOAT;
    case DataType::float64:
      return MPI_DOUBLE;
  }
  throw InvalidArgument("mpcomm: mpi: unknown DataType value " + std::to_string(static_cast<int>(t)));
}

// Integer sum/prod of MPI's built-in ops wrap like ours (two's complement arithmetic on the type).
MPI_Op mpi_op(DataType t, ReduceOp op) {
  if (t == DataType::float16 || t == DataType::bfloat16) return Runtime::get().half_op(t, op);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;  // avg: sum, then divide_by() where the result lives
    case ReduceOp::prod:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::band:
      return MPI_BAND;
    case ReduceOp::bor:
      return MPI_BOR;
    case ReduceOp::bxor:
      return MPI_BXOR;
  }
  throw InvalidArgument("mpcomm: mpi: unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
}

// Elements per MPI call: MPCOMM_MPI_CHUNK_ELEMENTS when set (tests cross chunk boundaries with small
// counts), else as many as kChunkBytes and INT_MAX allow.
size_t chunk_elements(size_t elem_size, size_t forced) {
  if (forced > 0) return forced;
  return std::min(kChunkBytes / elem_size, static_cast<size_t>(INT_MAX));
}

// ---- one communicator's MPI state -----------------------------------------------------------------

class CommState {
 public:
  CommState(int rank, int size, const Options& opts, const std::shared_ptr<Store>& store)
      : rank_(rank), size_(size), timeout_(opts.timeout), spin_(spin_setting(opts)),
        chunk_(static_cast<size_t>(std::clamp<int64_t>(param_int(opts, "MPCOMM_MPI_CHUNK_ELEMENTS"), 0, INT_MAX))),
        abort_watch_(store, kStoreEvery, "mpi rank " + std::to_string(rank)) {
    Runtime::get().acquire();
  }
  ~CommState() {
    // Calls still in flight (MPI cannot cancel a collective): leave the MPI_Comm alone rather than free it
    // under them.
    int mpi_finalized = 0;
    MPI_Finalized(&mpi_finalized);  // also by the program itself, when it initialised MPI
    if (comm != MPI_COMM_NULL && in_flight_.load() == 0 && !mpi_finalized && !Runtime::get().finalized()) {
      auto g = Runtime::get().guard();
      if (int rc = MPI_Comm_free(&comm); rc != MPI_SUCCESS)
        MPCOMM_LOG(warn, "mpi rank %d: MPI_Comm_free failed: %s", rank_, mpi_error_text(rc).c_str());
    }
    Runtime::get().release();
  }
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  MPI_Comm comm = MPI_COMM_NULL;
  int tag_ub = INT_MAX;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t chunk_elements(size_t elem_size) const { return mpi::chunk_elements(elem_size, chunk_); }

  // Throws Internal (or `code`) in the format every MPI failure has.
  void check(int rc, const ErrorSubject& what, const char* call, ErrorCode code = ErrorCode::internal) const {
    if (rc != MPI_SUCCESS) throw_mpi(code, what.str(), call, rc);
  }

  // Starts one non-blocking MPI call (`post` fills the request) and appends its request to `reqs`.
  template <class Post>
  void post(std::vector<MPI_Request>& reqs, const ErrorSubject& what, const char* call, Post&& post_call) {
    MPI_Request r = MPI_REQUEST_NULL;
    int rc;
    {
      auto g = Runtime::get().guard();
      rc = post_call(&r);
    }
    check(rc, what, call);
    reqs.push_back(r);
    in_flight_.fetch_add(1);
  }

  // One MPI_Testall over `reqs` (posted with post()): true when all completed. An MPI error is a
  // PeerFailure (Mismatch for a truncated receive).
  bool test(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>* statuses, const ErrorSubject& what, const char* call) {
    int flag = 0, rc;
    {
      auto g = Runtime::get().guard();
      rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag,
                       statuses != nullptr ? statuses->data() : MPI_STATUSES_IGNORE);
    }
    if (rc == MPI_SUCCESS) {
      if (flag == 0) return false;
      in_flight_.fetch_sub(static_cast<int>(reqs.size()));
      reqs.clear();
      return true;
    }
    if (rc == MPI_ERR_IN_STATUS && statuses != nullptr)
      for (const MPI_Status& s : *statuses)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) {
          rc = s.MPI_ERROR;
          break;
        }
    const std::string waiting = std::string(" (completing ") + call + ")";
    if (mpi_error_class(rc) == MPI_ERR_TRUNCATE)
      throw_mpi(ErrorCode::mismatch, what.str(), "MPI_Testall", rc, waiting + ": the peer sent more than was received");
    throw_mpi(ErrorCode::peer_failure, what.str(), "MPI_Testall", rc, waiting);
  }

  // Completes `reqs` or throws: Timeout past the deadline, PeerFailure when the job's abort key appears
  // (how mpcomm launch reports a dead rank) or MPI reports an error.
  void wait(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>* statuses, const ErrorSubject& what, const char* call) {
    const PollPace pace{.spin_for = spin_, .first_nap = std::chrono::microseconds(50),
                        .max_nap = std::chrono::microseconds(1000), .polls_per_round = kTestsPerBurst};
    poll_until([&] { return test(reqs, statuses, what, call); }, pace, Clock::now() + timeout_, timeout_, &abort_watch_,
               [&] { return what.str(); },
               std::string(call) + " to complete (a rank did not make the matching call, or is stuck)");
  }

  // Records the first failure; publishes it to the job (mpcomm/abort) unless someone did already.
  void abort(const std::string& reason, bool announce = true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!abort_reason_.empty()) return;
      abort_reason_ = reason;
    }
    if (in_flight_.load() > 0) Runtime::get().note_stuck();
    if (announce) abort_watch_.publish(reason);
  }

  std::string abort_reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return abort_reason_;
  }

  AbortWatch& abort_watch() { return abort_watch_; }

 private:
  const int rank_;
  const int size_;
  const Millis timeout_;
  const std::chrono::milliseconds spin_;
  const size_t chunk_;  // MPCOMM_MPI_CHUNK_ELEMENTS (0: unset)
  std::atomic<int> in_flight_{0};  // requests posted and not completed
  mutable std::mutex mu_;          // abort_reason_: abort() may come from another thread
  std::string abort_reason_;
  AbortWatch abort_watch_;
};

// ---- point to point -------------------------------------------------------------------------------

class MpiRequest : public detail::RequestState {
 public:
  MpiRequest(std::shared_ptr<CommState> st, const Op& op, ErrorSubject what)
      : st_(std::move(st)),
        op_(op),
        what_(std::move(what)),
        call_(op.kind == OpKind::send ? "MPI_Isend" : "MPI_Irecv") {}

  // Posts every chunk; on failure the communicator is aborted.
  void start() {
    const MPI_Datatype type = mpi_type(op_.dtype);
    const size_t es = dtype_size(op_.dtype), chunk = st_->chunk_elements(es);
    size_t off = 0;
    try {
      do {
        const size_t n = std::min(chunk, op_.count - off);
        st_->post(reqs_, what_, call_, [&](MPI_Request* r) {
          return op_.kind == OpKind::send ? MPI_Isend(static_cast<const char*>(op_.send) + off * es,
                                                      static_cast<int>(n), type, op_.peer, op_.tag, st_->comm, r)
                                          : MPI_Irecv(static_cast<char*>(op_.recv) + off * es, static_cast<int>(n),
                                                      type, op_.peer, op_.tag, st_->comm, r);
        });
        expected_.push_back(static_cast<int>(n));
        off += n;
      } while (off < op_.count);
    } catch (const Error& e) {
      st_->abort(e.what());
      throw;
    }
    statuses_.resize(reqs_.size());
  }

  void wait() override {
    if (done_) return;
    throw_if_aborted();
    try {
      st_->wait(reqs_, &statuses_, what_, call_);
      finish();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::timeout) cancel_receives();
      st_->abort(e.what());
      throw;
    }
  }

  bool test() override {
    if (done_) return true;
    throw_if_aborted();
    try {
      if (!st_->test(reqs_, &statuses_, what_, call_)) return false;
      finish();
      return true;
    } catch (const Error& e) {
      st_->abort(e.what());
      throw;
    }
  }

 private:
  void throw_if_aborted() {
    std::string why = st_->abort_reason();
    if (!why.empty()) throw PeerFailure("mpcomm: " + what_.str() + ": communicator was aborted: " + why);
  }

  // A receive must get exactly the count it named (MPI itself only catches a longer message).
  void finish() {
    if (op_.kind == OpKind::recv) {
      const MPI_Datatype type = mpi_type(op_.dtype);
      for (size_t i = 0; i < statuses_.size(); ++i) {
        int got = 0;
        st_->check(MPI_Get_count(&statuses_[i], type, &got), what_, "MPI_Get_count");
        if (got != expected_[i])
          throw Mismatch("mpcomm: " + what_.str() + ": rank " + std::to_string(op_.peer) + " sent " + std::to_string(got) +
                         " elements where " + std::to_string(expected_[i]) + " were expected");
      }
    }
    done_ = true;
  }

  // After a timeout, keep MPI from writing into the caller's buffer later (best effort: a receive that
  // already matched a message cannot be cancelled).
  void cancel_receives() {
    if (op_.kind != OpKind::recv) return;
    {
      auto g = Runtime::get().guard();
      for (MPI_Request& r : reqs_)
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    }
    try {
      for (int i = 0; i < 1000 && !st_->test(reqs_, nullptr, what_, call_); ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    } catch (const Error&) {
    }
  }

  std::shared_ptr<CommState> st_;
  Op op_;
  ErrorSubject what_;
  const char* call_;
  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> statuses_;
  std::vector<int> expected_;  // elements per chunk
  bool done_ = false;
};

// ---- which MPI calls an op makes ------------------------------------------------------------------

// Blocking MPI collectives run Open MPI's tuned algorithms (coll/tuned) on the calling thread, as an Open
// MPI user's MPI_Allreduce does; the non-blocking ones (MPI_Iallreduce ...) run libnbc's schedules, which
// are slower for most sizes on few ranks but faster for some, and they let the wait yield the CPU. Which
// is faster was measured (docs/performance.md, "The mpi backend's calls"); the rows below are those
// measurements as data: the first row matching (op, whether ranks outnumber cores, bytes) wins.
enum class MpiCalls : uint8_t { blocking, nonblocking };

struct CallsRow {
  OpKind op;            // OpKind::split: any op
  int crowded;          // 1: only when ranks outnumber this host's cores; 0: only when they do not; -1: either
  size_t from_bytes;    // the op's buffer size (Op::bytes()) from which the row applies ...
  size_t below_bytes;   // ... up to here (exclusive)
  MpiCalls calls;
};

constexpr size_t KiB = size_t{1} << 10, MiB = size_t{1} << 20, kAny = SIZE_MAX;
constexpr CallsRow kCallsTable[] = {
    // One rank per core: blocking, but for the largest allreduces (2 ranks, 32 MiB: 15.4 against 19.7 ms).
    {OpKind::allreduce, 0, 32 * MiB, kAny, MpiCalls::nonblocking},
    {OpKind::split, 0, 0, kAny, MpiCalls::blocking},
    // Ranks outnumbering cores: allreduce from 8 KiB and broadcast from 128 KiB non-blocking (4 ranks on 2
    // cores, allreduce 32 KiB: 49 against 78 us; broadcast 2 MiB: 0.54 against 2.2 ms).
    {OpKind::allreduce, 1, 8 * KiB, kAny, MpiCalls::nonblocking},
    {OpKind::broadcast, 1, 128 * KiB, kAny, MpiCalls::nonblocking},
    {OpKind::split, 1, 0, kAny, MpiCalls::blocking},
};

MpiCalls table_calls(const Op& op, bool crowded) {
  const size_t b = op.v != nullptr ? 0 : op.bytes();  // the uneven ops' ranks share no size: read at 0 bytes
  for (const CallsRow& r : kCallsTable)
    if ((r.op == OpKind::split || r.op == op.kind) && (r.crowded < 0 || r.crowded == (crowded ? 1 : 0)) &&
        b >= r.from_bytes && b < r.below_bytes)
      return r.calls;
  return MpiCalls::blocking;
}

// The counts and displacements of an uneven op as MPI takes them (int), checked to fit before any call.
struct UnevenInts {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};

// ---- the backend ----------------------------------------------------------------------------------

class MpiBackend final : public detail::Backend {
 public:
  // `crowded`: some host's ranks outnumber its cores (the same on every rank: agreed at setup).
  MpiBackend(std::shared_ptr<CommState> st, Topology topo, Options opts, std::shared_ptr<Store> store, bool crowded)
      : Backend("mpi", st->rank(), st->size(), std::move(topo), std::move(opts), std::move(store)),
        st_(std::move(st)),
        forced_(forced_calls(options())),
        crowded_(crowded),
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
  // MPCOMM_MPI_CALLS: auto (the table), blocking or nonblocking.
  static std::optional<MpiCalls> forced_calls(const Options& o) {
    const std::string v = param_string(o, "MPCOMM_MPI_CALLS");
    if (v == "auto") return std::nullopt;
    if (v == "blocking") return MpiCalls::blocking;
    if (v == "nonblocking") return MpiCalls::nonblocking;
    throw InvalidArgument("mpcomm: MPCOMM_MPI_CALLS='" + v + "': expected auto, blocking or nonblocking");
  }
  MpiCalls calls_for(const Op& op) const {
    if (!may_block_) return MpiCalls::nonblocking;
    return forced_ ? *forced_ : table_calls(op, crowded_);
  }
  void run_blocking(const Op& op);
  void run_nonblocking(const Op& op);
  // Fills uneven_ from op.v; a count or displacement past INT_MAX is Unsupported (before any call).
  void prepare_uneven(const Op& op);
  // The watchdog's thread: a blocking call outlasted the timeout, or the job was aborted during one.
  [[noreturn]] void blocked_too_long(ErrorCode code, const std::string& why, uint64_t armed);

  std::shared_ptr<CommState> st_;
  const std::optional<MpiCalls> forced_;
  const bool crowded_;
  const bool may_block_;
  std::shared_ptr<Watchdog::Slot> slot_;
  Op blocked_in_{};  // the blocking call in progress (read by the watchdog's thread only while it is armed)
  UnevenInts uneven_;  // the uneven op in progress (prepare_uneven)
};

// The chunks of a call of `count` elements: post(offset in bytes, elements) for each, at least one call
// (count 0 included); every chunk is posted before any is completed (MPI matches collectives in order).
template <class Post>
void for_chunks(const CommState& st, size_t count, size_t es, Post&& post) {
  const size_t chunk = st.chunk_elements(es);
  size_t off = 0;
  do {
    const size_t n = std::min(chunk, count - off);
    post(off * es, static_cast<int>(n));
    off += n;
  } while (off < count);
}

// The other collectives take one count per rank block, which MPI cannot express past INT_MAX.
int one_call_count(const Op& op, const detail::Backend& b) {
  if (op.count > static_cast<size_t>(INT_MAX))
    throw Unsupported("mpcomm: " + b.describe(op) + ": count " + std::to_string(op.count) + " is more than the " +
                      std::to_string(INT_MAX) + " elements one MPI call can carry per rank, and the mpi backend " +
                      "splits only allreduce, broadcast, reduce, send and recv into chunks");
  return static_cast<int>(op.count);
}

// One MPI call of an op, with its arguments as both kinds of calls take them (MPI_IN_PLACE and the
// root's buffers already decided).
struct MpiCall {
  OpKind kind;
  const void* send;
  void* recv;
  int count;
  MPI_Datatype type;
  MPI_Op mop;
  int root;
  MPI_Comm comm;
  const UnevenInts* v = nullptr;  // alltoallv, allgatherv
};

// The blocking call, or (req != null) the non-blocking one; and their names.
int make_call(const MpiCall& c, MPI_Request* req) {
  switch (c.kind) {
    case OpKind::allreduce:
      return req ? MPI_Iallreduce(c.send, c.recv, c.count, c.type, c.mop, c.comm, req)
                 : MPI_Allreduce(c.send, c.recv, c.count, c.type, c.mop, c.comm);
    case OpKind::broadcast:
      return req ? MPI_Ibcast(c.recv, c.count, c.type, c.root, c.comm, req) : MPI_Bcast(c.recv, c.count, c.type, c.root, c.comm);
    case OpKind::reduce:
      return req ? MPI_Ireduce(c.send, c.recv, c.count, c.type, c.mop, c.root, c.comm, req)
                 : MPI_Reduce(c.send, c.recv, c.count, c.type, c.mop, c.root, c.comm);
    case OpKind::allgather:
      return req ? MPI_Iallgather(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm, req)
                 : MPI_Allgather(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm);
    case OpKind::reduce_scatter:
      return req ? MPI_Ireduce_scatter_block(c.send, c.recv, c.count, c.type, c.mop, c.comm, req)
                 : MPI_Reduce_scatter_block(c.send, c.recv, c.count, c.type, c.mop, c.comm);
    case OpKind::gather:
      return req ? MPI_Igather(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm, req)
                 : MPI_Gather(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm);
    case OpKind::scatter:
      return req ? MPI_Iscatter(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm, req)
                 : MPI_Scatter(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm);
    case OpKind::alltoall:
      return req ? MPI_Ialltoall(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm, req)
                 : MPI_Alltoall(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm);
    case OpKind::barrier: return req ? MPI_Ibarrier(c.comm, req) : MPI_Barrier(c.comm);
    case OpKind::alltoallv: {
      const UnevenInts& v = *c.v;
      return req ? MPI_Ialltoallv(c.send, v.send_counts.data(), v.send_displs.data(), c.type, c.recv,
                                  v.recv_counts.data(), v.recv_displs.data(), c.type, c.comm, req)
                 : MPI_Alltoallv(c.send, v.send_counts.data(), v.send_displs.data(), c.type, c.recv,
                                 v.recv_counts.data(), v.recv_displs.data(), c.type, c.comm);
    }
    case OpKind::allgatherv: {
      const UnevenInts& v = *c.v;
      return req ? MPI_Iallgatherv(c.send, c.count, c.type, c.recv, v.recv_counts.data(), v.recv_displs.data(),
                                   c.type, c.comm, req)
                 : MPI_Allgatherv(c.send, c.count, c.type, c.recv, v.recv_counts.data(), v.recv_displs.data(),
                                  c.type, c.comm);
    }
    default: return MPI_ERR_OP;
  }
}

const char* call_name(OpKind kind, bool blocking) {
  switch (kind) {
    case OpKind::allreduce: return blocking ? "MPI_Allreduce" : "MPI_Iallreduce";
    case OpKind::broadcast: return blocking ? "MPI_Bcast" : "MPI_Ibcast";
    case OpKind::reduce: return blocking ? "MPI_Reduce" : "MPI_Ireduce";
    case OpKind::allgather: return blocking ? "MPI_Allgather" : "MPI_Iallgather";
    case OpKind::reduce_scatter: return blocking ? "MPI_Reduce_scatter_block" : "MPI_Ireduce_scatter_block";
    case OpKind::gather: return blocking ? "MPI_Gather" : "MPI_Igather";
    case OpKind::scatter: return blocking ? "MPI_Scatter" : "MPI_Iscatter";
    case OpKind::alltoall: return blocking ? "MPI_Alltoall" : "MPI_Ialltoall";
    case OpKind::barrier: return blocking ? "MPI_Barrier" : "MPI_Ibarrier";
    case OpKind::alltoallv: return blocking ? "MPI_Alltoallv" : "MPI_Ialltoallv";
    case OpKind::allgatherv: return blocking ? "MPI_Allgatherv" : "MPI_Iallgatherv";
    default: return "MPI";
  }
}

// Whether the op is MPI's in-place layout of itself (communicator.h's rules, translated).
bool mpi_in_place(const Op& op, int rank) {
  const size_t es = dtype_size(op.dtype);
  auto block = [&](const void* base, int r) {
    return static_cast<const char*>(base) + static_cast<size_t>(r) * op.count * es;
  };
  const bool is_root = op.rooted() && op.root == rank;
  switch (op.kind) {
    case OpKind::allreduce: return op.send == op.recv;
    case OpKind::reduce: return is_root && op.send == op.recv;
    case OpKind::allgather: return op.count > 0 && op.send == block(op.recv, rank);
    case OpKind::reduce_scatter: return op.count > 0 && op.recv == block(op.send, rank);
    case OpKind::gather: return is_root && op.count > 0 && op.send == block(op.recv, op.root);
    case OpKind::scatter: return is_root && op.count > 0 && op.recv == block(op.send, op.root);
    case OpKind::alltoall: return op.count > 0 && op.send == op.recv;
    // MPI_IN_PLACE for MPI_Allgatherv: this rank's block is already at recvbuf + rdispls[rank].
    case OpKind::allgatherv:
      return op.count > 0 && op.send == static_cast<const char*>(op.recv) +
                                            op.v->recv_displs[static_cast<size_t>(rank)] * es;
    default: return false;
  }
}

// The MPI calls of `op`, in order: call(MpiCall) for each. allreduce, broadcast and reduce go out in chunks
// of at most chunk_elements() (for_chunks); the other collectives take one count per rank block.
template <class Call>
void for_calls(const Op& op, int rank, const CommState& st, const detail::Backend& b, const UnevenInts& uneven,
               Call&& call) {
  const MPI_Datatype type = mpi_type(op.dtype);
  const MPI_Op mop = op.reduces() ? mpi_op(op.dtype, op.redop) : MPI_OP_NULL;
  const bool in_place = mpi_in_place(op, rank);
  const bool is_root = op.rooted() && op.root == rank;
  const size_t es = dtype_size(op.dtype);
  const auto* src = static_cast<const char*>(op.send);
  auto* dst = static_cast<char*>(op.recv);
  MpiCall c{op.kind, nullptr, nullptr, 0, type, mop, op.root, st.comm};
  switch (op.kind) {
    case OpKind::allreduce:
    case OpKind::broadcast:
    case OpKind::reduce:
      for_chunks(st, op.count, es, [&](size_t off, int n) {
        c.send = in_place ? MPI_IN_PLACE : src + off;
        c.recv = op.kind == OpKind::reduce && !is_root ? nullptr : dst + off;
        c.count = n;
        call(c);
      });
      return;
    case OpKind::reduce_scatter:
      // MPI's in-place reduce_scatter takes every block from recvbuf and leaves the result at its start;
      // ours has it at block rank() (MpiBackend::run moves it there; block 0 is scratch then).
      c.count = one_call_count(op, b);
      c.send = in_place ? MPI_IN_PLACE : op.send;
      c.recv = in_place ? const_cast<void*>(op.send) : op.recv;
      return call(c);
    case OpKind::scatter:
      c.count = one_call_count(op, b);
      c.send = is_root ? op.send : nullptr;
      c.recv = in_place ? MPI_IN_PLACE : op.recv;
      return call(c);
    case OpKind::allgather:
    case OpKind::gather:
    case OpKind::alltoall:
      c.count = one_call_count(op, b);
      c.send = in_place ? MPI_IN_PLACE : op.send;
      c.recv = op.kind == OpKind::gather && !is_root ? nullptr : op.recv;
      return call(c);
    case OpKind::barrier: return call(c);
    case OpKind::alltoallv:
    case OpKind::allgatherv:
      // Counts and displacements from `uneven` (prepare_uneven); allgatherv's own count fits, as its
      // recv_counts[rank] does.
      c.v = &uneven;
      c.count = static_cast<int>(op.kind == OpKind::allgatherv ? op.count : 0);
      c.send = in_place ? MPI_IN_PLACE : op.send;
      c.recv = op.recv;
      return call(c);
    default: return;
  }
}

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
  return std::make_unique<MpiBackend>(std::move(st), plan.topology, options(), plan.store ? plan.store : store(),
                                      crowded_);
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

// Whether some host's ranks outnumber its cores, the same answer on every rank (each host judges its own:
// hosts may differ in cores), so that every rank makes the same kind of call for an op (a blocking and a
// non-blocking collective never match).
bool any_host_crowded(CommState& st, const Topology& topo, const ErrorSubject& what) {
  int mine = topo.local_size > static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)) ? 1 : 0, any = 0;
  call_and_wait(st, what, "MPI_Iallreduce",
                [&](MPI_Request* r) { return MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, st.comm, r); });
  return any != 0;
}

}  // namespace


std::unique_ptr<detail::Backend> create_mpi(std::shared_ptr<Store> store, int rank, int size, const Options& in) {
  Options opts = in.resolved();
  // cuda buffers are staged through host memory by the front door (core/staging.h).
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
  auto st = std::make_shared<CommState>(rank, size, opts, store);
  try {
    Topology topo = setup_world(*st, opts.host_id, what);
    const bool crowded = any_host_crowded(*st, topo, what);
    MPCOMM_LOG(info, "mpi rank %d/%d up: host %d of %d, %d local ranks, thread level %d", rank, size, topo.host,
               topo.num_hosts(), topo.local_size, Runtime::get().provided());
    return std::make_unique<MpiBackend>(std::move(st), std::move(topo), std::move(opts), std::move(store), crowded);
  } catch (const Error& e) {
    st->abort(e.what());
    throw;
  }
}

}  // namespace mpcomm::mpi
