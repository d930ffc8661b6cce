// The front door behind the public Communicator: argument checks, sequence numbers, fingerprints,
// statistics, the flight recorder, abort fan-out, device staging and the stream that orders blocking and
// non-blocking calls — once, for every backend (NCCL's ncclEnqueueCheck idea). Its parts, a file each:
//   front_door.cc       construction, running an op on the backend with its bookkeeping, failures
//   stream.cc           the stream below: issuing, queuing, the progress thread, waiting and testing
//   argument_checks.cc  every argument, before any traffic
//   split.cc            split(): the groups, worked out once for every backend
//   shrink.cc           shrink(): the survivors' agreement through the store, the revoke, the new group
//   grow.cc             grow() and join(): joiners seated through the job's store, the new group
//   stats.h             time and bytes per op kind
//   device_staging.cc   buffers in other memory than the backend's, copied through its kind
//
// The stream (a CUDA stream's rule): ops run in issue order. Without a progress thread every op runs on
// the caller's thread as it is called. The first non-blocking call starts the communicator's progress
// thread; from then on:
//  - an i-collective is queued and run by the progress thread once everything before it has started;
//  - a send or receive is started (posted) in issue order — by the caller when nothing is queued —
//    and then completes as its peer allows: while nobody waits on it the progress thread tests it between
//    naps (50 us growing to 1 ms), and a caller that waits drives it to completion itself. Nobody wakes
//    the progress thread for it (only for one with a completion callback): it finds it within 1 ms by
//    itself, since a wake-up per send or receive would cost a context switch each;
//  - a blocking call runs on the caller's thread when nothing is queued, else it is queued and waited for.
//  - a thread that waits on the op next in line while nobody drives runs it itself (issue-then-wait costs
//    what a blocking call costs: no hand-over to the progress thread and back).
//    The progress thread leaves a just-queued op (without a completion callback) to its caller for
//    100 us before it starts it, and while non-blocking calls come it polls the queue instead of being
//    woken for each (stream.cc: kLeaveToCaller, kPoll).
// Exactly one thread "drives" the backend at any time (the caller or the progress thread: `driver_`),
// so backends are never entered twice at once; the same rule guards the statistics and the recorder.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/flight_recorder.h"
#include "core/op.h"
#include "core/stats.h"
#include "core/timeline.h"

namespace mpcomm::detail {

// The store key under which an elastic communicator's rank publishes its host and process id (shrink.cc).
std::string shrink_process_key(int rank);

// Wraps a backend in the public front door. `recreate` makes more backends of its kind (split).
std::unique_ptr<Communicator> make_communicator(std::unique_ptr<Backend> backend, BackendFactory recreate);

class OpRequest;

class FrontDoor : public std::enable_shared_from_this<FrontDoor> {
 public:
  FrontDoor(std::unique_ptr<Backend> backend, BackendFactory recreate);
  ~FrontDoor();
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  static std::unique_ptr<Communicator> wrap(std::shared_ptr<FrontDoor> core);
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

  // The public calls (op filled by the caller; checked and numbered here).
  void collective(Op& op);
  Request icollective(Op& op);
  int p2p(Op& op);                                  // blocking send or recv: a receive's sender
  Request ip2p(Op& op);                             // isend or irecv
  std::unique_ptr<Communicator> split(int color, int key);
  // Communicator::shrink (shrink.cc).
  std::unique_ptr<Communicator> shrink(const std::vector<int>& exclude);
  // One round of shrink()'s agreement, waiting up to `timeouts` timeouts for the ranks to check in: the members
  // (old ranks) every caller reads; PeerFailure when counted out.
  std::vector<int> agree(const std::vector<bool>& excluded, bool elastic, const std::string& who, int timeouts);
  // After this rank made shrink()'s new communicator under keys `base`: whether every member made it too (false
  // as soon as one says it did not, or is known lost).
  bool all_made(const std::vector<int>& members, const std::string& base, const std::string& who);
  // Communicator::grow (grow.cc).
  std::unique_ptr<Communicator> grow(int n);
  // Fails pending and later ops with Revoked, here and in the communicators split from this one (shrink.cc);
  // with `tell_peers`, through the backend's abort on theirs too.
  void revoke(const std::string& reason, bool tell_peers);
  // Whether an op of this communicator, or of one split from it, failed (not a revoke).
  bool failed_in_family() const;
  void abort(ErrorCode code, const std::string& reason);
  // The communicator is going away: let issued ops finish, stop the progress thread, close the backend.
  void close();

  // The timeline (mpcomm/trace.h): this communicator's ops go to `track` of `t` from now on. `env_file`:
  // MPCOMM_TRACE's file, which this communicator's close() writes its rank's part of (trace.cc).
  void attach_timeline(std::shared_ptr<Timeline> t, uint16_t track, std::string env_file = {});
  Timeline* timeline() const { return timeline_raw_.load(std::memory_order_acquire); }
  const std::shared_ptr<Timeline>& timeline_shared() const { return timeline_; }
  uint16_t timeline_track() const { return track_; }
  static FrontDoor& of(const Communicator& c) { return *c.core_; }

  uint64_t sequence() const { return seq_; }
  std::array<OpStats, kNumOpKinds> stats() const;
  std::string flight_record();

  // Request side (OpRequest).
  void wait(OpRequest& r);
  bool test(OpRequest& r);
  void on_complete(OpRequest& r, std::function<void(std::exception_ptr)> fn);

 private:
  enum class Driver : uint8_t { none, caller, worker };
  // With a progress thread, the caller waits (take_driver) until the ops issued before have started,
  // then runs the op itself: a blocking call never costs a hand-over between threads.
  class Driving {
   public:
    Driving(FrontDoor& c, const Op& op) : c_(c) {
      if (!c_.has_worker_) return;
      std::unique_lock<std::mutex> lk(c_.mu_);
      c_.take_driver(lk, op);
      held_ = true;
    }
    ~Driving() {
      if (held_) c_.release_driver();
    }
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;

   private:
    FrontDoor& c_;
    bool held_ = false;
  };

  void throw_if_aborted(const Op& op) const;
  // Runs a collective to completion (the driver only). Throws its error after the failure is handled.
  void execute(const Op& op, const BufferSpans& spans, uint64_t ticket, uint64_t t0);
  void run_on_backend(const Op& op, const BufferSpans& spans);
  void verify_fingerprints(const Op& op);
  void verify_counts(const Op& op);
  // Reproducible sums (core/reproducible/): whether `op` is one, how many sequence numbers it takes, and
  // running it as exact integer collectives on the backend (reproducible_ops.cc).
  bool reproducible(const Op& op) const;
  uint64_t sequence_numbers(const Op& op) const;
  void run_reproducible(const Op& op);
  // Whether the reproducible op is the backend's to run (Backend::runs_reproducible), as one op.
  bool backend_sums(const Op& op) const;
  void run_sub_op(Op sub, uint64_t seq);
  // Starts a send or receive (the driver only); on failure r ends failed (and the error is thrown).
  void start_now(OpRequest& r);
  // One test of a started send/receive, or a wait for it (the driver only); true when it ended.
  bool progress_now(OpRequest& r, bool wait);
  // Runs a queued op (the driver: the progress thread, or a waiter whose op is next in line).
  void process(OpRequest& r);
  // Bookkeeping for an op that ended: recorder, statistics; on failure the abort fan-out.
  void finished(const Op& op, uint64_t ticket, uint64_t t0, uint64_t t1, bool add_call);
  void failed(const Op& op, uint64_t ticket, const Error& e);
  // After an abort: every queued and in-flight request fails at once.
  void fail_pending();
  std::string aborted_message(const Op& op) const;

  std::shared_ptr<OpRequest> issue(Op& op, uint64_t& counter);
  Request enqueue(const std::shared_ptr<OpRequest>& r);
  void start_inline(OpRequest& r);
  // Marks r ended (error: failed) unless it already is, drops it from the in-flight list, wakes waiters.
  void end(OpRequest& r, std::exception_ptr error);
  void ensure_worker();
  void worker_loop();
  // Caller side: becomes the driver once nothing is queued and nobody drives (with a progress thread).
  void take_driver(std::unique_lock<std::mutex>& lk, const Op& for_op);
  void release_driver();
  // Waits (bounded) until the progress thread does not drive (stream.cc).
  void settle_driver(std::unique_lock<std::mutex>& lk);
  void add_inflight(const std::shared_ptr<OpRequest>& r);
  bool worth_testing_locked() const;
  bool callback_in_flight_locked() const;  // a send or receive in flight has a completion callback
  // Whether the progress thread must be woken now that the driver changed or an op ended: ops queued for
  // it, a request in flight whose completion callback nobody else would call, or the end. Sends and
  // receives in flight without one it finds by itself, at most kMaxNap later (stream.cc): waking it for
  // each cost a context switch per call, and a caller that waits for them drives them itself.
  bool worker_must_wake_locked() const;
  // Wakes the callers waiting on cv_, and the progress thread when it has work (mu_ held).
  void notify_locked();
  // Calls r's on_complete function, if any, once r has ended (not under mu_).
  void notify_callback(OpRequest& r);

  std::unique_ptr<Backend> backend_;
  const BackendFactory recreate_;
  const bool may_stage_;
  const bool cheap_test_;  // the progress thread tests sends and receives nobody waits for
  const bool check_;  // MPCOMM_CHECK
  const bool check_counts_;  // verify_counts() before every alltoallv and allgatherv
  const bool reproducible_;  // Options::reproducible
  // run_reproducible()'s buffers, kept between calls (the driver's): fresh pages cost more than the encoding.
  struct ReproducibleScratch {
    std::vector<uint8_t> top;
    std::vector<int64_t> words, mine;
    std::vector<char> rounded, all;
    std::vector<const void*> sources;
  } repro_;
  std::string recorder_who_, recorder_tag_;
  FlightRecorder recorder_;
  std::shared_ptr<Timeline> timeline_;  // set once (attach_timeline), read through timeline_raw_
  std::atomic<Timeline*> timeline_raw_{nullptr};
  uint16_t track_ = 0;
  const char* backend_name_ = "";
  std::string env_trace_file_;
  OpStatsTable stats_;
  uint64_t seq_ = 0, p2p_seq_ = 0;  // the issuing thread's

  std::atomic<bool> aborted_{false};
  std::atomic<bool> revoked_{false};  // by shrink(): pending and later ops fail with Revoked
  int shrinks_ = 0;                   // shrink() calls so far (the issuing thread's): names each one's keys
  bool replaced_ = false;             // by its own shrink() (the issuing thread's)
  mutable std::mutex children_mu_;
  std::vector<std::weak_ptr<FrontDoor>> children_;
  std::weak_ptr<FrontDoor> parent_;        // the communicator split() made this one from
  std::shared_ptr<void> heartbeat_;        // elastic: this process beats while the communicator lives (heartbeat.h)
  std::atomic<bool> child_failed_{false};  // a child went away failed: this family still failed (shrink.cc)
  std::vector<std::shared_ptr<FrontDoor>> live_children() const;  // made by split(): revoked with this one
  mutable std::mutex abort_mu_;
  std::string abort_reason_;

  // The stream.
  bool has_worker_ = false;  // the issuing thread's: a progress thread runs
  std::mutex mu_;
  std::condition_variable cv_;         // callers (waiters, the next driver)
  std::condition_variable worker_cv_;  // the progress thread: new work, the driver free again, the end
  std::deque<std::shared_ptr<OpRequest>> queue_;
  std::vector<std::shared_ptr<OpRequest>> inflight_;  // started sends and receives, not ended
  Driver driver_ = Driver::none;
  int waiters_ = 0;
  uint64_t endings_ = 0;  // ops ended by the progress thread (a waiter's deadline restarts on each)
  bool stop_ = false;
  bool worker_polling_ = false;  // the progress thread looks at the queue by itself (kPoll in stream.cc)
  bool worker_asleep_ = false;   // the progress thread sleeps until woken (nothing issued for kActive)
  std::chrono::steady_clock::time_point last_issue_{};  // the last op queued, or send or receive issued
  std::thread worker_;
};

}  // namespace mpcomm::detail
