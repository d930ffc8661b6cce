// One nccl communicator's NCCL and CUDA state: CommState (setup, init, calls and bounded waits, async error
// polling, abort, split; its methods are in nccl_state.cc) and P2PSlot, one posted send or receive.
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
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/nccl/nccl_runtime.h"
#include "bootstrap/abort_record.h"
#include "core/backend.h"
#include "core/wait.h"
#include "net/socket.h"

// ncclCommShrink came with NCCL 2.27, ncclCommRevoke (what lets a failed communicator be shrunk) with 2.28.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define MPCOMM_NCCL_SHRINKS 1
#else
#define MPCOMM_NCCL_SHRINKS 0
#endif

namespace mpcomm::nccl {

using detail::ErrorSubject;
using detail::Op;

inline constexpr auto kSpinFor = std::chrono::microseconds(1000);  // poll back to back (sched_yield between) this long,
inline constexpr auto kNap = std::chrono::microseconds(50);        // then sleep this long between polls
inline constexpr auto kStoreEvery = std::chrono::milliseconds(10);  // look at the job's abort key this often
inline constexpr Millis kFinalizeFor{10000};  // most the destructor waits for ncclCommFinalize before aborting

// One posted send or receive. `done` is set when it is handed to NCCL, and completes with its batch.
struct P2PSlot {
  bool send = false;
  void* buf = nullptr;  // device memory NCCL reads or writes: the caller's buffer or its staged copy
  size_t count = 0;
  ncclDataType_t dt = ncclUint8;
  int peer = -1;
  std::shared_ptr<CUevent_st> done;
};

class CommState {
 public:
  // elastic (Options::elastic): a failure revokes the NCCL communicator (ncclCommRevoke) instead of aborting it,
  // so that shrink() can still make a new one from it, and is published as this communicator's, not the job's.
  CommState(int rank, int size, int device, Millis timeout, const std::shared_ptr<Store>& store, bool elastic)
      : rank(rank),
        size(size),
        device(device),
        timeout(timeout),
        elastic(elastic),
        abort_watch_(store, kStoreEvery, "nccl rank " + std::to_string(rank), /*job_wide=*/!elastic) {}
  ~CommState();
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  const int rank;
  const int size;
  const int device;
  const Millis timeout;
  const bool elastic;
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
  void poll(const ErrorSubject& what, const char* waiting_for, const char* call, net::Deadline deadline,
            Ready&& ready) {
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
#if MPCOMM_NCCL_SHRINKS
  // ncclCommShrink without the `exclude` ranks (non-blocking, polled to completion). `after_failure`: the
  // communicator was revoked; NCCL must see it quiescent first, and shrinks it with NCCL_SHRINK_ABORT. Waits
  // without the abort record, which the failure set.
  ncclComm_t shrink(std::vector<int> exclude, bool after_failure, const ErrorSubject& what, net::Deadline deadline);
#endif

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
  bool comm_revoked_ = false;       // ncclCommRevoke done: no ncclCommFinalize, only shrink and abort
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

}  // namespace mpcomm::nccl
