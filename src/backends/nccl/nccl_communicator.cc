// The nccl backend (see nccl_communicator.h).
//
// Shape: a CommState holds what NCCL and CUDA need: the ncclComm_t, the GPU, two streams, scratch
// memory, the point-to-point operations posted and not yet handed to NCCL, the abort reason and the store
// polled for the job's abort key. The Communicator and its Requests share it, so a Request may outlive its
// Communicator; the NCCL communicator is finalized when the last of them lets go.
//
// Non-blocking NCCL: with config.blocking = 0 an NCCL call may return ncclInProgress while a thread of
// NCCL's finishes it (connection setup on first use may need the peers), and the communicator must not be
// used again until ncclCommGetAsyncError says it is no longer in progress (ncclCommEnsureReady, init.cc).
// settle() polls for that after every call, bounded like every other wait. ncclCommAbort and
// ncclCommDestroy are blocking in NCCL whatever the config (group.cc: a destroyFlag forces a blocking
// group), so the destructor and abort() need no polling for them.
//
// Two streams: `stream` carries the NCCL operations and the device-to-device copies between them;
// `copy_stream` carries the copies that stage host buffers and the scratch allocations. cudaMemcpyAsync from
// pageable memory first synchronises its stream, and a copy into pageable memory returns only when it is
// done: on the NCCL stream either could wait, unbounded, behind a receive whose sender never comes. The
// copy stream never waits on the NCCL stream (the NCCL stream waits on it through an event, and the
// scratch memory it frees is idle by then), so a staging copy only ever waits for itself.
//
// Memory: scratch and staging buffers come from cudaMallocAsync on the copy stream and go back with
// cudaFreeAsync on the copy stream once idle; buffers whose last use is still queued (a request dropped
// before completing) are freed at teardown, after the NCCL stream's work.
#include "backends/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bootstrap/peer_directory.h"
#include "bootstrap/abort_record.h"
#include "core/device_staging.h"
#include "core/wait.h"
#include "log/log.h"
#include "net/socket.h"
#include "core/op.h"

namespace mpcomm::nccl {

namespace {

using Clock = std::chrono::steady_clock;
using detail::Op;

constexpr auto kSpinFor = std::chrono::microseconds(1000);  // poll back to back (sched_yield between) this long,
constexpr auto kNap = std::chrono::microseconds(50);        // then sleep this long between polls
constexpr auto kStoreEvery = std::chrono::milliseconds(10);  // look at the job's abort key this often
constexpr Millis kFinalizeFor{10000};  // most the destructor waits for ncclCommFinalize before aborting
constexpr size_t kAlign = 256;          // the barrier's scratch word

bool ok(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// The error string of `r`, and NCCL's last message on this thread when it has one (ncclGetLastError reads
// a thread-local buffer and ignores its argument, so it is safe after the communicator is gone).
std::string nccl_text(ncclResult_t r) {
  std::string s = std::string(ncclGetErrorString(r)) + " (ncclResult_t " + std::to_string(static_cast<int>(r)) + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += "; last NCCL error: " + std::string(last);
  return s;
}

// A peer that died or a broken connection surfaces as ncclRemoteError or ncclSystemError; the other codes
// are faults of this rank (CUDA, NCCL internals, misuse).
ErrorCode code_of(ncclResult_t r) {
  return r == ncclRemoteError || r == ncclSystemError ? ErrorCode::peer_failure : ErrorCode::internal;
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::int8: return ncclInt8;
    case DataType::uint8: return ncclUint8;
    case DataType::int32: return ncclInt32;
    case DataType::int64: return ncclInt64;
    case DataType::float16: return ncclFloat16;
    case DataType::bfloat16: return ncclBfloat16;
    case DataType::float32: return ncclFloat32;
    case DataType::float64: return ncclFloat64;
  }
  throw InvalidArgument("mpcomm: nccl: unknown DataType value " + std::to_string(static_cast<int>(t)));
}

// avg is NCCL's own ncclAvg: sum then divide for integers, pre-multiplied by 1/size for floating types.
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor: break;  // refused by NcclBackend::run
  }
  throw InvalidArgument("mpcomm: nccl: unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
}

// What each collective runs, for the flight recorder.
const char* nccl_call(OpKind k) {
  switch (k) {
    case OpKind::allreduce: return "ncclAllReduce";
    case OpKind::broadcast: return "ncclBroadcast";
    case OpKind::reduce: return "ncclReduce";
    case OpKind::allgather: return "ncclAllGather";
    case OpKind::reduce_scatter: return "ncclReduceScatter";
    case OpKind::gather: return "grouped ncclRecv (root) / ncclSend";
    case OpKind::scatter: return "grouped ncclSend (root) / ncclRecv";
    case OpKind::alltoall: return "grouped ncclSend/ncclRecv";
    case OpKind::barrier: return "ncclAllReduce of one int32";
    case OpKind::alltoallv:
    case OpKind::allgatherv: return "grouped ncclSend/ncclRecv";
    default: return "nccl";
  }
}

using detail::ErrorSubject;

// One posted send or receive. `done` is set when it is handed to NCCL, and completes with its batch.
struct P2PSlot {
  bool send = false;
  void* buf = nullptr;  // device memory NCCL reads or writes: the caller's buffer or its staged copy
  size_t count = 0;
  ncclDataType_t dt = ncclUint8;
  int peer = -1;
  std::shared_ptr<CUevent_st> done;
};

// ---- one communicator's NCCL and CUDA state ------------------------------------------------------------

class CommState {
 public:
  CommState(int rank, int size, int device, Millis timeout, const std::shared_ptr<Store>& store)
      : rank(rank), size(size), device(device), timeout(timeout),
        abort_watch_(store, kStoreEvery, "nccl rank " + std::to_string(rank)) {}
  ~CommState();
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  const int rank;
  const int size;
  const int device;
  const Millis timeout;
  cudaStream_t stream = nullptr;       // NCCL operations and device-to-device copies
  cudaStream_t copy_stream = nullptr;  // host staging copies and scratch allocations

  // Creates the streams and the staging event (throws, after aborting, on a CUDA error).
  void setup(const ErrorSubject& what);
  // Takes an ncclComm_t made elsewhere (ncclCommSplit); from now on this state owns it.
  void adopt(ncclComm_t c) {
    std::lock_guard<std::mutex> g(mu_);
    comm_ = c;
  }
  // ncclCommInitRankConfig (non-blocking), polled until every rank joined.
  void init(const ncclUniqueId& id, const ErrorSubject& what, net::Deadline deadline);

  void make_current(const ErrorSubject& what) {
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) cuda(e, what, "cudaSetDevice");
  }

  // Throws Internal (after aborting) unless `e` is cudaSuccess.
  void cuda(cudaError_t e, const ErrorSubject& what, const char* call) {
    if (e == cudaSuccess) return;
    fail(ErrorCode::internal, "mpcomm: " + what.str() + ": " + call + " failed on cuda:" + std::to_string(device) +
                                  ": " + cudaGetErrorString(e));
  }
  // For cudaStreamQuery/cudaEventQuery: true when done, false when not yet, throws on an error.
  bool query(cudaError_t e, const ErrorSubject& what, const char* call) {
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    cuda(e, what, call);
    return false;
  }

  // Whether NCCL can use `p` as it is: device memory on this communicator's GPU, or managed memory. Host
  // memory (registered or not) is staged. Device memory on another GPU is an InvalidArgument.
  bool on_device(const void* p, const ErrorSubject& what);

  // Device memory for staging, allocated on the copy stream; free_staging() takes it back once idle,
  // defer_free() at teardown when it may still be in use.
  void* alloc_staging(size_t bytes, const ErrorSubject& what) {
    void* p = nullptr;
    cuda(cudaMallocAsync(&p, bytes > 0 ? bytes : 1, copy_stream), what, "cudaMallocAsync");
    return p;
  }
  void free_staging(void* p) noexcept { (void)cudaFreeAsync(p, copy_stream); }
  void defer_free(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    deferred_.push_back(p);
  }
  // The communicator's scratch buffer, at least `bytes` long, for one collective at a time.
  char* scratch(size_t bytes, const ErrorSubject& what);
  // Makes the NCCL stream wait (on the device, not the host) for everything queued on the copy stream.
  void order_after_copies(const ErrorSubject& what) {
    cuda(cudaEventRecord(staged_ev_, copy_stream), what, "cudaEventRecord");
    cuda(cudaStreamWaitEvent(stream, staged_ev_, 0), what, "cudaStreamWaitEvent");
  }

  // Runs one NCCL enqueue call, throws if it failed, then settles.
  template <class F>
  void enqueue(const ErrorSubject& what, const char* call, net::Deadline deadline, F&& f) {
    check_enqueued(locked(f), what, call);
    settle(what, call, deadline);
  }
  // ncclGroupStart, body(comm, &call) (returns the first failing result and names its call), ncclGroupEnd.
  template <class Body>
  void enqueue_group(const ErrorSubject& what, net::Deadline deadline, Body&& body) {
    const char* call = "ncclGroupStart";
    std::optional<ncclResult_t> rc = locked([&](ncclComm_t c) {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      r = body(c, call);
      if (!ok(r)) {
        (void)ncclGroupEnd();  // NCCL's group depth is per thread: leave it balanced
        return r;
      }
      call = "ncclGroupEnd";
      return ncclGroupEnd();
    });
    check_enqueued(rc, what, call);
    settle(what, call, deadline);
  }

  // Waits until NCCL has finished the last call (its asynchronous state left ncclInProgress).
  void settle(const ErrorSubject& what, const char* call, net::Deadline deadline) {
    poll(what, "NCCL to finish the call", call, deadline, [](ncclResult_t s) { return s != ncclInProgress; });
  }
  // Waits until `s` has drained.
  void wait_stream(cudaStream_t s, const ErrorSubject& what, const char* waiting_for, net::Deadline deadline) {
    poll(what, waiting_for, nullptr, deadline,
         [&](ncclResult_t) { return query(cudaStreamQuery(s), what, "cudaStreamQuery"); });
  }

  // Polls `ready(state)` (state: ncclSuccess or ncclInProgress; an asynchronous error throws) until it
  // returns true, bounded by the deadline and watching the job's abort record. Failures abort.
  template <class Ready>
  void poll(const ErrorSubject& what, const char* waiting_for, const char* call, net::Deadline deadline, Ready&& ready) {
    const PollPace pace{.spin_for = kSpinFor, .first_nap = kNap, .max_nap = kNap};
    try {
      poll_until([&] { return ready(async_state(what)); }, pace, deadline, timeout, &abort_watch_,
                 [&] { return what.str(); },
                 std::string(waiting_for) + (call ? std::string(" (") + call + ")" : "") +
                     ": a rank did not make the matching call, or is stuck; the NCCL communicator was aborted");
    } catch (const Error& e) {
      abort(e.code(), e.what());
      throw;
    }
  }

  // ncclCommGetAsyncError: ncclSuccess or ncclInProgress; an error is thrown (after aborting).
  ncclResult_t async_state(const ErrorSubject& what);
  // The job's abort record, at most every 10 ms (for Request::test(), which does not loop).
  void maybe_poll_abort_key(const ErrorSubject& what) {
    if (std::string msg = abort_watch_.poll(); !msg.empty())
      fail(ErrorCode::peer_failure, "mpcomm: " + what.str() + ": aborted because another rank failed: " + msg);
  }

  // Point to point: post() queues an operation; flush() hands every queued one to NCCL as one group.
  void post(std::shared_ptr<P2PSlot> slot) {
    std::lock_guard<std::mutex> g(mu_);
    pending_.push_back(std::move(slot));
  }
  void flush(const ErrorSubject& what, net::Deadline deadline);

  // ncclCommSplit (non-blocking) polled to completion; nullptr for NCCL_SPLIT_NOCOLOR.
  ncclComm_t split(int color, int key, const ErrorSubject& what, net::Deadline deadline);
  // ncclCommUserRank and ncclCommCount of the (settled) communicator.
  std::pair<int, int> rank_and_count(const ErrorSubject& what);

  // Records the first failure, aborts the NCCL communicator (once) and tells the job, unless it is a
  // mismatch (every rank finds that one itself; announcing it would turn a peer's Mismatch into a
  // PeerFailure).
  void abort(ErrorCode code, const std::string& reason);
  [[noreturn]] void fail(ErrorCode code, const std::string& msg) {
    abort(code, msg);
    throw_error(code, msg);
  }
  std::string abort_reason() const {
    std::lock_guard<std::mutex> g(mu_);
    return abort_reason_;
  }
  void throw_if_aborted(const ErrorSubject& what) const {
    std::string why = abort_reason();
    if (!why.empty()) throw PeerFailure("mpcomm: " + what.str() + ": communicator was aborted: " + why);
  }

 private:
  // Runs f(comm) under the lock, so that an abort from another thread never frees the communicator under
  // a call; nullopt when the communicator is gone.
  template <class F>
  std::optional<ncclResult_t> locked(F&& f) {
    std::lock_guard<std::mutex> g(mu_);
    if (comm_ == nullptr || comm_gone_) return std::nullopt;
    return f(comm_);
  }
  void check_enqueued(std::optional<ncclResult_t> rc, const ErrorSubject& what, const char* call) {
    if (!rc) throw_gone(what);
    if (!ok(*rc))
      fail(code_of(*rc), "mpcomm: " + what.str() + ": " + call + " failed: " + nccl_text(*rc));
  }
  [[noreturn]] void throw_gone(const ErrorSubject& what) const {
    std::string why = abort_reason();
    throw PeerFailure("mpcomm: " + what.str() + ": communicator was aborted: " +
                      (why.empty() ? std::string("its NCCL communicator is gone") : why));
  }
  void abort_comm_locked() noexcept;
  void release_comm() noexcept;
  std::shared_ptr<CUevent_st> acquire_event(const ErrorSubject& what);

  mutable std::mutex mu_;  // comm_ and its calls, comm_gone_, abort_reason_, lists below
  ncclComm_t comm_ = nullptr;
  bool comm_gone_ = false;  // ncclCommAbort/ncclCommDestroy done: never touch comm_ again
  ncclComm_t split_out_ = nullptr;  // where a non-blocking ncclCommSplit stores the new communicator
  std::string abort_reason_;
  AbortWatch abort_watch_;
  cudaEvent_t staged_ev_ = nullptr;
  std::vector<cudaEvent_t> events_;  // idle events for point-to-point batches
  std::vector<std::shared_ptr<P2PSlot>> pending_;
  std::vector<void*> deferred_;  // staging buffers to free at teardown
  char* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

void CommState::setup(const ErrorSubject& what) {
  make_current(what);
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), what, "cudaStreamCreateWithFlags");
  cuda(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking), what, "cudaStreamCreateWithFlags");
  cuda(cudaEventCreateWithFlags(&staged_ev_, cudaEventDisableTiming), what, "cudaEventCreateWithFlags");
}

void CommState::init(const ncclUniqueId& id, const ErrorSubject& what, net::Deadline deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&c, size, id, rank, &config);
  adopt(c);  // non-blocking: the handle is valid at once (and must be aborted if init fails)
  if (!ok(rc)) fail(code_of(rc), "mpcomm: " + what.str() + ": ncclCommInitRankConfig failed: " + nccl_text(rc));
  if (c == nullptr)
    fail(ErrorCode::internal, "mpcomm: " + what.str() + ": ncclCommInitRankConfig returned no communicator");
  poll(what, "every rank to join the NCCL communicator", "ncclCommInitRankConfig", deadline,
       [](ncclResult_t s) { return s != ncclInProgress; });
}

bool CommState::on_device(const void* p, const ErrorSubject& what) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // runtimes before CUDA 11 report unregistered host memory as an error
    return false;
  }
  if (a.type == cudaMemoryTypeManaged) return true;
  if (a.type != cudaMemoryTypeDevice) return false;
  if (a.device != device) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "%p", p);
    throw InvalidArgument("mpcomm: " + what.str() + ": buffer " + addr + " is on cuda:" + std::to_string(a.device) +
                          " but this communicator runs on cuda:" + std::to_string(device));
  }
  return true;
}

char* CommState::scratch(size_t bytes, const ErrorSubject& what) {
  if (bytes <= scratch_bytes_) return scratch_;
  const size_t want = std::max(bytes, scratch_bytes_ * 2);
  void* p = alloc_staging(want, what);
  // The old block is idle: collectives complete before they return, and only collectives use it.
  if (scratch_ != nullptr) free_staging(scratch_);
  scratch_ = static_cast<char*>(p);
  scratch_bytes_ = want;
  return scratch_;
}

ncclResult_t CommState::async_state(const ErrorSubject& what) {
  ncclResult_t state = ncclSuccess;
  std::optional<ncclResult_t> rc = locked([&](ncclComm_t c) { return ncclCommGetAsyncError(c, &state); });
  if (!rc) throw_gone(what);
  if (*rc != ncclSuccess)
    fail(ErrorCode::internal, "mpcomm: " + what.str() + ": ncclCommGetAsyncError failed: " + nccl_text(*rc));
  if (state != ncclSuccess && state != ncclInProgress)
    fail(code_of(state), "mpcomm: " + what.str() + ": NCCL reported an asynchronous error on rank " +
                             std::to_string(rank) + ": " + nccl_text(state));
  return state;
}

void CommState::abort(ErrorCode code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!abort_reason_.empty()) return;
    abort_reason_ = reason;
    abort_comm_locked();
  }
  if (code != ErrorCode::mismatch) abort_watch_.publish(reason);
}

// ncclCommAbort stops whatever still runs on the device for this communicator (and joins NCCL's thread for
// an unfinished non-blocking call, such as a split, so nothing writes split_out_ afterwards).
void CommState::abort_comm_locked() noexcept {
  if (comm_ == nullptr || comm_gone_) return;
  comm_gone_ = true;
  (void)cudaSetDevice(device);
  if (ncclResult_t rc = ncclCommAbort(comm_); rc != ncclSuccess)
    MPCOMM_LOG(warn, "nccl rank %d: ncclCommAbort: %s", rank, nccl_text(rc).c_str());
  if (ncclComm_t orphan = __atomic_exchange_n(&split_out_, nullptr, __ATOMIC_ACQ_REL); orphan != nullptr)
    (void)ncclCommAbort(orphan);  // a split that finished (or failed) as it was aborted
}

// Orderly release: ncclCommFinalize (non-blocking) flushes what was issued, polled for a bounded time, then
// ncclCommDestroy frees the rest locally. If finalizing fails or does not finish in time, ncclCommAbort.
void CommState::release_comm() noexcept {
  ncclComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (comm_ == nullptr || comm_gone_) return;
    c = comm_;
    comm_gone_ = true;
  }
  bool clean = false;
  if (ok(ncclCommFinalize(c))) {
    const auto deadline = Clock::now() + std::min(timeout, kFinalizeFor);
    for (;;) {
      ncclResult_t state = ncclInProgress;
      if (ncclCommGetAsyncError(c, &state) != ncclSuccess) break;
      if (state == ncclSuccess) {
        clean = true;
        break;
      }
      if (state != ncclInProgress || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (!clean) MPCOMM_LOG(info, "nccl rank %d: ncclCommFinalize did not finish; aborting the communicator", rank);
  const ncclResult_t rc = clean ? ncclCommDestroy(c) : ncclCommAbort(c);
  if (!ok(rc)) MPCOMM_LOG(warn, "nccl rank %d: releasing the communicator: %s", rank, nccl_text(rc).c_str());
}

CommState::~CommState() {
  (void)cudaSetDevice(device);
  if (!pending_.empty())
    MPCOMM_LOG(info, "nccl rank %d: %zu posted send/recv were never waited for and are dropped", rank,
               pending_.size());
  pending_.clear();
  release_comm();
  // Freed on the NCCL stream: after anything still queued there (the communicator is finalized or
  // aborted, so that work ends).
  cudaStream_t last = stream != nullptr ? stream : copy_stream;
  if (last != nullptr) {
    for (void* p : deferred_) (void)cudaFreeAsync(p, last);
    if (scratch_ != nullptr) (void)cudaFreeAsync(scratch_, last);
  }
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  if (staged_ev_ != nullptr) (void)cudaEventDestroy(staged_ev_);
  if (copy_stream != nullptr) (void)cudaStreamDestroy(copy_stream);
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
}

// Events come from a pool and go back to it when the last request of their batch lets go. The deleter
// holds a plain pointer: every holder of an event (a slot of a Request) also holds the CommState.
std::shared_ptr<CUevent_st> CommState::acquire_event(const ErrorSubject& what) {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!events_.empty()) {
      e = events_.back();
      events_.pop_back();
    }
  }
  if (e == nullptr) cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), what, "cudaEventCreateWithFlags");
  CommState* self = this;
  return std::shared_ptr<CUevent_st>(e, [self](cudaEvent_t ev) {
    std::lock_guard<std::mutex> g(self->mu_);
    self->events_.push_back(ev);
  });
}

// Every posted send and receive in one group: NCCL progresses them together, which an exchange needs
// (a pair's first operations also set up its connection, with both sides' operations in flight).
void CommState::flush(const ErrorSubject& what, net::Deadline deadline) {
  std::vector<std::shared_ptr<P2PSlot>> batch;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (pending_.empty()) return;
    batch.swap(pending_);
  }
  enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
    for (const auto& s : batch) {
      call = s->send ? "ncclSend" : "ncclRecv";
      ncclResult_t r = s->send ? ncclSend(s->buf, s->count, s->dt, s->peer, c, stream)
                               : ncclRecv(s->buf, s->count, s->dt, s->peer, c, stream);
      if (!ok(r)) return r;
    }
    return ncclSuccess;
  });
  std::shared_ptr<CUevent_st> ev = acquire_event(what);
  cuda(cudaEventRecord(ev.get(), stream), what, "cudaEventRecord");
  for (const auto& s : batch) s->done = ev;
}

ncclComm_t CommState::split(int color, int key, const ErrorSubject& what, net::Deadline deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  __atomic_store_n(&split_out_, nullptr, __ATOMIC_RELEASE);
  // Non-blocking: NCCL stores the new communicator through the pointer when its thread is done, and the
  // parent's asynchronous state stays ncclInProgress until then (init.cc, ncclCommInitRankFunc).
  enqueue(what, "ncclCommSplit", deadline,
          [&](ncclComm_t c) { return ncclCommSplit(c, color, key, &split_out_, &config); });
  return __atomic_exchange_n(&split_out_, nullptr, __ATOMIC_ACQ_REL);
}

std::pair<int, int> CommState::rank_and_count(const ErrorSubject& what) {
  int r = -1, n = -1;
  const char* call = "ncclCommUserRank";
  std::optional<ncclResult_t> rc = locked([&](ncclComm_t c) {
    ncclResult_t x = ncclCommUserRank(c, &r);
    if (x != ncclSuccess) return x;
    call = "ncclCommCount";
    return ncclCommCount(c, &n);
  });
  check_enqueued(rc, what, call);
  return {r, n};
}

// ---- point to point -------------------------------------------------------------------------------

class P2PRequest final : public detail::RequestState {
 public:
  P2PRequest(std::shared_ptr<CommState> st, const Op& op, std::string what)
      : st_(std::move(st)), op_(op), what_(std::move(what)) {}

  void start();
  void wait() override;
  bool test() override;

 private:
  const char* call() const { return op_.kind == OpKind::send ? "ncclSend" : "ncclRecv"; }

  std::shared_ptr<CommState> st_;
  Op op_;
  ErrorSubject what_;
  std::shared_ptr<P2PSlot> slot_;
  bool done_ = false;
};

// Device memory only: host buffers are staged by the front door (DeviceStaging below).
void P2PRequest::start() {
  if (op_.count == 0) {  // nothing to move, on either side: no NCCL call
    done_ = true;
    return;
  }
  CommState& st = *st_;
  st.make_current(what_);
  const bool send = op_.kind == OpKind::send;
  auto slot = std::make_shared<P2PSlot>();
  slot->send = send;
  slot->buf = const_cast<void*>(send ? op_.send : op_.recv);
  slot->count = op_.count;
  slot->dt = nccl_type(op_.dtype);
  slot->peer = op_.peer;
  slot_ = std::move(slot);
  st.post(slot_);
}

void P2PRequest::wait() {
  if (done_) return;
  CommState& st = *st_;
  st.throw_if_aborted(what_);
  st.make_current(what_);
  const auto deadline = net::deadline_after(st.timeout);
  if (!slot_->done) st.flush(what_, deadline);
  cudaEvent_t ev = slot_->done.get();
  st.poll(what_, "the operation to complete on the GPU", call(), deadline,
          [&](ncclResult_t) { return st.query(cudaEventQuery(ev), what_, "cudaEventQuery"); });
  slot_.reset();  // its batch's event goes back to the pool with the batch's last request
  done_ = true;
}

bool P2PRequest::test() {
  if (done_) return true;
  CommState& st = *st_;
  st.throw_if_aborted(what_);
  st.make_current(what_);
  const auto deadline = net::deadline_after(st.timeout);
  if (!slot_->done) st.flush(what_, deadline);
  (void)st.async_state(what_);
  st.maybe_poll_abort_key(what_);
  if (!st.query(cudaEventQuery(slot_->done.get()), what_, "cudaEventQuery")) return false;
  slot_.reset();
  done_ = true;
  return true;
}

// ---- staging: host buffers through GPU memory ----------------------------------------------------------

// Copies in go on the copy stream and the NCCL stream waits for them on the device (ready()); copies out
// go on the copy stream once the op has completed, and are waited for, bounded.
class DeviceStaging final : public detail::StagingMemory {
 public:
  explicit DeviceStaging(CommState& st) : st_(st), what_("nccl staging on rank " + std::to_string(st.rank)) {}
  ~DeviceStaging() override {
    if (area_ != nullptr) st_.defer_free(area_);
  }
  char* area(size_t bytes) override {
    if (bytes <= area_bytes_) return area_;
    const size_t want = std::max(bytes, area_bytes_ * 2);
    void* p = st_.alloc_staging(want, what_);
    // The old block is idle: collectives complete before they return, and only collectives use it.
    if (area_ != nullptr) st_.free_staging(area_);
    area_ = static_cast<char*>(p);
    area_bytes_ = want;
    return area_;
  }
  void copy_in(char* staged, const void* user, size_t n) override {
    st_.cuda(cudaMemcpyAsync(staged, user, n, cudaMemcpyHostToDevice, st_.copy_stream), what_,
             "cudaMemcpyAsync (host to device)");
  }
  void ready() override { st_.order_after_copies(what_); }
  void copy_out(void* user, const char* staged, size_t n) override {
    st_.cuda(cudaMemcpyAsync(user, staged, n, cudaMemcpyDeviceToHost, st_.copy_stream), what_,
             "cudaMemcpyAsync (device to host)");
    st_.wait_stream(st_.copy_stream, what_, "the result to reach host memory", net::deadline_after(st_.timeout));
  }
  char* alloc(size_t n) override { return static_cast<char*>(st_.alloc_staging(n, what_)); }
  void release(char* p, bool maybe_in_use) noexcept override {
    // Still queued or in flight: it may yet be used, so it goes at teardown.
    if (maybe_in_use)
      st_.defer_free(p);
    else
      st_.free_staging(p);
  }

 private:
  CommState& st_;
  ErrorSubject what_;
  char* area_ = nullptr;
  size_t area_bytes_ = 0;
};

// ---- the backend ----------------------------------------------------------------------------------

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
  void enqueue_op(const Op& op, const ErrorSubject& what, net::Deadline deadline, char* tmp);

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
  enqueue_op(op, what, deadline, tmp);
  st.wait_stream(st.stream, what, "the operation to complete on the GPU", deadline);
}

// Enqueues `op` (device pointers only) on the NCCL stream. `tmp`: scratch for the alltoall in-place copy
// or the barrier word.
void NcclBackend::enqueue_op(const Op& op, const ErrorSubject& what, net::Deadline deadline, char* tmp) {
  CommState& st = *st_;
  cudaStream_t stream = st.stream;
  const ncclDataType_t dt = nccl_type(op.dtype);
  const size_t bytes = op.bytes();
  const int n = size(), me = rank();
  const char* s = static_cast<const char*>(op.send);
  char* r = static_cast<char*>(op.recv);
  auto block = [&](const char* base, int i) { return base + static_cast<size_t>(i) * bytes; };
  // This rank's own block of gather/scatter/alltoall: a device-to-device copy on the NCCL stream, none in
  // place.
  auto copy_own = [&](void* dst, const void* src) {
    if (dst == src) return;
    st.cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), what,
            "cudaMemcpyAsync (device to device)");
  };

  switch (op.kind) {
    case OpKind::allreduce:
      return st.enqueue(what, "ncclAllReduce", deadline, [&](ncclComm_t c) {
        return ncclAllReduce(s, r, op.count, dt, nccl_op(op.redop), c, stream);
      });
    case OpKind::broadcast:
      return st.enqueue(what, "ncclBroadcast", deadline,
                        [&](ncclComm_t c) { return ncclBroadcast(r, r, op.count, dt, op.root, c, stream); });
    case OpKind::reduce: {
      // NCCL writes recvbuff at the root only; elsewhere it gets the send buffer, so that every pointer it
      // sees is device memory (recv may be null or host memory there).
      void* out = me == op.root ? static_cast<void*>(r) : const_cast<char*>(s);
      return st.enqueue(what, "ncclReduce", deadline, [&](ncclComm_t c) {
        return ncclReduce(s, out, op.count, dt, nccl_op(op.redop), op.root, c, stream);
      });
    }
    case OpKind::allgather:  // in place (send == recv + rank*count) is NCCL's own in-place layout
      return st.enqueue(what, "ncclAllGather", deadline,
                        [&](ncclComm_t c) { return ncclAllGather(s, r, op.count, dt, c, stream); });
    case OpKind::reduce_scatter:  // in place (recv == send + rank*count) likewise
      return st.enqueue(what, "ncclReduceScatter", deadline, [&](ncclComm_t c) {
        return ncclReduceScatter(s, r, op.count, dt, nccl_op(op.redop), c, stream);
      });
    case OpKind::gather:
      // Point to point in one group (the root receives from every other rank), as NCCL's own docs compose it.
      if (me == op.root) copy_own(r + static_cast<size_t>(me) * bytes, s);
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        if (me != op.root) {
          call = "ncclSend";
          return ncclSend(s, op.count, dt, op.root, c, stream);
        }
        call = "ncclRecv";
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          ncclResult_t x = ncclRecv(r + static_cast<size_t>(p) * bytes, op.count, dt, p, c, stream);
          if (!ok(x)) return x;
        }
        return ncclSuccess;
      });
    case OpKind::scatter:
      if (me == op.root) copy_own(r, block(s, me));
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        if (me != op.root) {
          call = "ncclRecv";
          return ncclRecv(r, op.count, dt, op.root, c, stream);
        }
        call = "ncclSend";
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          ncclResult_t x = ncclSend(block(s, p), op.count, dt, p, c, stream);
          if (!ok(x)) return x;
        }
        return ncclSuccess;
      });
    case OpKind::alltoall: {
      // In place, block p is sent and received at once: send from a copy of the input instead.
      const char* src = s;
      if (op.send == op.recv) {
        st.cuda(cudaMemcpyAsync(tmp, s, bytes * static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream), what,
                "cudaMemcpyAsync (device to device)");
        src = tmp;
      } else {
        copy_own(r + static_cast<size_t>(me) * bytes, block(s, me));
      }
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          call = "ncclSend";
          ncclResult_t x = ncclSend(block(src, p), op.count, dt, p, c, stream);
          if (!ok(x)) return x;
          call = "ncclRecv";
          x = ncclRecv(r + static_cast<size_t>(p) * bytes, op.count, dt, p, c, stream);
          if (!ok(x)) return x;
        }
        return ncclSuccess;
      });
    }
    case OpKind::alltoallv:
    case OpKind::allgatherv: {
      // Every block to its rank and every rank's block from it, in one group; empty blocks are left out
      // on both sides (the front door checked every rank's counts against the others', so both sides
      // agree which are empty). allgatherv sends its one block to every rank.
      const detail::VCounts& v = *op.v;
      const size_t es = dtype_size(op.dtype);
      const bool a2a = op.kind == OpKind::alltoallv;
      const auto me_i = static_cast<size_t>(me);
      auto out = [&](size_t p) { return r + v.recv_displs[p] * es; };
      auto in = [&](size_t p) { return a2a ? s + v.send_displs[p] * es : s; };
      auto sends = [&](size_t p) { return a2a ? v.send_counts[p] : op.count; };
      if (v.recv_counts[me_i] > 0 && out(me_i) != in(me_i))
        st.cuda(cudaMemcpyAsync(out(me_i), in(me_i), v.recv_counts[me_i] * es, cudaMemcpyDeviceToDevice, stream), what,
                "cudaMemcpyAsync (device to device)");
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        for (int q = 0; q < n; ++q) {
          const auto p = static_cast<size_t>(q);
          if (q == me) continue;
          if (sends(p) > 0) {
            call = "ncclSend";
            ncclResult_t x = ncclSend(in(p), sends(p), dt, q, c, stream);
            if (!ok(x)) return x;
          }
          if (v.recv_counts[p] > 0) {
            call = "ncclRecv";
            ncclResult_t x = ncclRecv(out(p), v.recv_counts[p], dt, q, c, stream);
            if (!ok(x)) return x;
          }
        }
        return ncclSuccess;
      });
    }
    case OpKind::barrier:
      // An allreduce of one int32 in the scratch word: every rank must have arrived before any completes.
      return st.enqueue(what, "ncclAllReduce (barrier)", deadline,
                        [&](ncclComm_t c) { return ncclAllReduce(tmp, tmp, 1, ncclInt32, ncclSum, c, stream); });
    default:
      throw Internal("mpcomm: " + what.str() + ": the nccl backend has no collective for this op");
  }
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

  const int new_size = static_cast<int>(plan.members.size());
  auto cst = std::make_shared<CommState>(plan.new_rank, new_size, st.device, options().timeout, plan.store);
  cst->adopt(child);  // from here on a failure aborts the child through cst
  cst->setup(what);
  cst->settle(what, "ncclCommSplit", deadline);
  const auto [nccl_rank, nccl_size] = cst->rank_and_count(what);
  if (nccl_rank != plan.new_rank || nccl_size != new_size)
    cst->fail(ErrorCode::internal, "mpcomm: " + what.str() + ": NCCL made this rank " + std::to_string(nccl_rank) +
                                       " of " + std::to_string(nccl_size) + ", mpcomm expected rank " +
                                       std::to_string(plan.new_rank) + " of " + std::to_string(new_size));
  return std::make_unique<NcclBackend>(std::move(cst), plan.topology, options(), plan.store);
}

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
  auto st = std::make_shared<CommState>(rank, size, device, opts.timeout, store);
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
