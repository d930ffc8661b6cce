// CommState's methods (nccl_state.h): streams and NCCL communicator setup, scratch memory, asynchronous
// error polling, abort and orderly release, the point-to-point batches, split.
#include "backends/nccl/nccl_state.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "log/log.h"

namespace mpcomm::nccl {

using Clock = std::chrono::steady_clock;

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
  (void)cudaSetDevice(device);
#if MPCOMM_NCCL_SHRINKS
  if (elastic) {  // stopped, not freed: shrink() makes the next communicator from it
    if (!comm_revoked_) {
      comm_revoked_ = true;
      if (ncclResult_t rc = ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT); rc != ncclSuccess && rc != ncclInProgress)
        MPCOMM_LOG(warn, "nccl rank %d: ncclCommRevoke: %s", rank, nccl_text(rc).c_str());
    }
    return;
  }
#endif
  comm_gone_ = true;
  if (ncclResult_t rc = ncclCommAbort(comm_); rc != ncclSuccess)
    MPCOMM_LOG(warn, "nccl rank %d: ncclCommAbort: %s", rank, nccl_text(rc).c_str());
  if (ncclComm_t orphan = __atomic_exchange_n(&split_out_, nullptr, __ATOMIC_ACQ_REL); orphan != nullptr)
    (void)ncclCommAbort(orphan);  // a split that finished (or failed) as it was aborted
}

// Orderly release: ncclCommFinalize (non-blocking) flushes what was issued, polled for a bounded time, then
// ncclCommDestroy frees the rest locally. If finalizing fails or does not finish in time, ncclCommAbort.
void CommState::release_comm() noexcept {
  ncclComm_t c = nullptr;
  bool revoked = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (comm_ == nullptr || comm_gone_) return;
    c = comm_;
    comm_gone_ = true;
    revoked = comm_revoked_;
  }
  bool clean = false;
  if (!revoked && ok(ncclCommFinalize(c))) {  // finalizing a revoked communicator is invalid
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

#if MPCOMM_NCCL_SHRINKS
ncclComm_t CommState::shrink(std::vector<int> exclude, bool after_failure, const ErrorSubject& what,
                             net::Deadline deadline) {
  // The communicator's asynchronous state, until it leaves ncclInProgress (a revoke quiescing, a shrink running).
  const auto settled = [&](const char* call) {
    for (;;) {
      ncclResult_t state = ncclInProgress;
      std::optional<ncclResult_t> rc = locked([&](ncclComm_t c) { return ncclCommGetAsyncError(c, &state); });
      if (!rc) throw_gone(what);
      if (*rc != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
        throw PeerFailure("mpcomm: " + what.str() + ": " + call + ": NCCL reports " +
                          nccl_text(*rc != ncclSuccess ? *rc : state));
      if (state == ncclSuccess) return;
      if (Clock::now() >= deadline)
        throw Timeout("mpcomm: " + what.str() + ": " + call + " did not finish within the timeout");
      std::this_thread::sleep_for(kNap);
    }
  };
  if (after_failure) settled("ncclCommRevoke");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  __atomic_store_n(&split_out_, nullptr, __ATOMIC_RELEASE);
  std::optional<ncclResult_t> rc = locked([&](ncclComm_t c) {
    return ncclCommShrink(c, exclude.data(), static_cast<int>(exclude.size()), &split_out_, &config,
                          after_failure ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT);
  });
  if (!rc) throw_gone(what);
  if (!ok(*rc)) throw PeerFailure("mpcomm: " + what.str() + ": ncclCommShrink failed: " + nccl_text(*rc));
  settled("ncclCommShrink");
  return __atomic_exchange_n(&split_out_, nullptr, __ATOMIC_ACQ_REL);
}
#endif

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

}  // namespace mpcomm::nccl
