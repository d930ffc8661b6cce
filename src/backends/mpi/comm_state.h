// One mpi communicator's MPI state: its MPI_Comm, its abort reason and its view of the job's abort record,
// shared with its point-to-point requests (a request may outlive its communicator); and the bounded
// completion of non-blocking calls: bursts of MPI_Testall, back to back (yielding the core between bursts,
// as Open MPI's own blocking calls do when ranks outnumber cores) for MPCOMM_MPI_SPIN_MS, then with sleeps
// of 50 µs growing to 1 ms between bursts, watching the job's abort record and the deadline. Open MPI moves
// a non-blocking collective on only inside those calls, one round at a time, so the sleeps are for long
// waits only (a straggler, a dead peer, a pipeline bubble).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/mpi/mpi_runtime.h"
#include "bootstrap/abort_record.h"
#include "core/backend.h"
#include "core/wait.h"
#include "log/log.h"
#include "settings/settings.h"

namespace mpcomm::mpi {

using detail::ErrorSubject;
using Clock = std::chrono::steady_clock;

// How long bursts go back to back (sched_yield between): MPCOMM_MPI_SPIN_MS, at most an hour.
inline std::chrono::milliseconds spin_setting(const Options& o) {
  return std::chrono::milliseconds(std::clamp<int64_t>(param_int(o, "MPCOMM_MPI_SPIN_MS"), 0, int64_t{3600} * 1000));
}
// MPI_Testall calls per burst. Open MPI progresses its non-blocking collectives (coll/libnbc) from a
// low-priority callback that runs on every 8th opal_progress() only, and each MPI_Test makes one: with
// one test per wake-up a collective round would take 8 sleeps.
constexpr int kTestsPerBurst = 16;
// The job's abort record is looked up at most this often while a call is waited for.
constexpr auto kStoreEvery = std::chrono::milliseconds(500);

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

}  // namespace mpcomm::mpi
