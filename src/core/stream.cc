// The front door's stream (front_door.h): ops in issue order, the progress thread, and the requests of
// non-blocking calls — issuing, starting, waiting, testing and ending them.
#include <algorithm>
#include <chrono>
#include <utility>

#include "core/argument_checks.h"
#include "core/device_staging.h"
#include "core/op_clock.h"
#include "core/request.h"
#include "core/wait.h"

namespace mpcomm::detail {

using Clock = std::chrono::steady_clock;

namespace {

// How long past the op's own timeout a waiter waits for the progress thread to end something.
constexpr auto kWaiterGrace = std::chrono::seconds(5);
// The progress thread's naps between tests of sends and receives nobody waits for.
constexpr auto kFirstNap = std::chrono::microseconds(50);
constexpr auto kMaxNap = std::chrono::microseconds(1000);
// An op just queued with nobody asking for a callback is left this long to its caller, who may be about to
// wait on it (and then runs it itself): a synchronous use (issue, then wait) costs no hand-over between
// threads. Then the progress thread starts it.
constexpr auto kLeaveToCaller = std::chrono::microseconds(100);
// Within kActive of the last non-blocking call the idle progress thread looks at the queue every kPoll by
// itself (up to kMaxBusyPoll apart while a caller drives), so that queuing an op needs no wake-up (a
// wake-up costs a context switch, tens of microseconds when ranks outnumber CPUs); after that it sleeps
// until woken.
constexpr auto kPoll = std::chrono::microseconds(200);
constexpr auto kActive = std::chrono::milliseconds(10);
constexpr auto kMaxBusyPoll = std::chrono::microseconds(2000);

}  // namespace

// ---- sends and receives -----------------------------------------------------------------------------

void FrontDoor::start_now(OpRequest& r) {
  r.t0 = r.op.started = OpClock::now();
  if (r.op.issued == 0) r.op.issued = r.t0;
  stats_.add_call(r.op.kind, r.op.bytes());
  Backend& b = *backend_;
  if (may_stage_ && r.op.bytes() > 0 &&
      b.memory_type(r.op.kind == OpKind::send ? r.op.send : r.op.recv) != b.runs_on())
    r.inner = start_staged(r.op, b.staging(), [&](const Op& o) { return b.start(o); });
  else
    r.inner = b.start(r.op);
}

bool FrontDoor::progress_now(OpRequest& r, bool wait) {
  std::exception_ptr error;
  try {
    if (wait)
      r.inner->wait();
    else if (!r.inner->test())
      return false;
  } catch (...) {
    error = std::current_exception();
  }
  if (!error) finished(r.op, r.ticket, r.t0, OpClock::now(), /*add_call=*/false);
  end(r, error);
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      failed(r.op, r.ticket, e);  // after end(): an abort fails the others, not this one
    } catch (...) {
      recorder_.finish(r.ticket, FlightRecorder::State::failed, OpClock::now(), r.op.algorithm, "not an mpcomm error");
    }
  }
  return true;
}

void FrontDoor::end(OpRequest& r, std::exception_ptr error) {
  bool worker = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!r.ended()) {
      r.error = std::move(error);
      r.phase = r.error ? OpRequest::Phase::failed : OpRequest::Phase::done;
      ++endings_;
    }
    inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(), [&](auto& p) { return p.get() == &r; }),
                    inflight_.end());
    worker = worker_must_wake_locked();
  }
  cv_.notify_all();
  if (worker) worker_cv_.notify_all();
  notify_callback(r);
}

// ---- the stream -------------------------------------------------------------------------------------

void FrontDoor::ensure_worker() {
  if (has_worker_) return;
  has_worker_ = true;
  worker_ = std::thread(&FrontDoor::worker_loop, this);
}

void FrontDoor::take_driver(std::unique_lock<std::mutex>& lk, const Op& for_op) {
  // Only the issuing thread queues ops, so once the queue is empty it stays empty while we wait here.
  auto deadline = Clock::now() + backend_->options().timeout + kWaiterGrace;
  uint64_t seen = endings_;
  while (!queue_.empty() || driver_ != Driver::none) {
    ++waiters_;
    cv_.wait_until(lk, deadline);
    --waiters_;
    if (endings_ != seen) {
      seen = endings_;
      deadline = Clock::now() + backend_->options().timeout + kWaiterGrace;
    } else if (Clock::now() >= deadline) {
      const std::string msg = "mpcomm: " + backend_->describe(for_op) + ": timed out after " +
                              seconds_text(backend_->options().timeout) + " s waiting for the ops issued before it to end";
      lk.unlock();
      abort(ErrorCode::timeout, msg);  // later calls fail at once; this one never ran
      throw Timeout(msg);
    }
  }
  driver_ = Driver::caller;
}

void FrontDoor::release_driver() {
  bool worker;
  {
    std::lock_guard<std::mutex> lk(mu_);
    driver_ = Driver::none;
    worker = worker_must_wake_locked();
  }
  cv_.notify_all();
  if (worker) worker_cv_.notify_all();
}

void FrontDoor::notify_locked() {
  cv_.notify_all();
  if (worker_must_wake_locked()) worker_cv_.notify_all();
}

bool FrontDoor::callback_in_flight_locked() const {
  return std::any_of(inflight_.begin(), inflight_.end(), [](auto& r) { return static_cast<bool>(r->callback); });
}

bool FrontDoor::worker_must_wake_locked() const { return stop_ || !queue_.empty() || callback_in_flight_locked(); }

// Whether the progress thread tests the sends and receives in flight: always where a test is cheap, else
// those with a completion callback (nobody else would end them).
bool FrontDoor::worth_testing_locked() const { return cheap_test_ || callback_in_flight_locked(); }

void FrontDoor::add_inflight(const std::shared_ptr<OpRequest>& r) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!r->ended()) {
      inflight_.push_back(r);
      wake = worker_asleep_;  // asleep until woken (no op for kActive): it would not look at this one
    }
  }
  if (wake) worker_cv_.notify_all();
}

void FrontDoor::process(OpRequest& r) {
  if (aborted_.load(std::memory_order_acquire)) {
    const std::string msg = aborted_message(r.op);
    recorder_.finish(r.ticket, FlightRecorder::State::failed, OpClock::now(), nullptr, msg);
    end(r, std::make_exception_ptr(PeerFailure(msg)));
    return;
  }
  const uint64_t t0 = OpClock::now();
  recorder_.running(r.ticket, t0);
  if (r.is_p2p()) {
    try {
      start_now(r);
    } catch (const Error& e) {
      end(r, std::current_exception());
      failed(r.op, r.ticket, e);
      return;
    } catch (...) {  // not an mpcomm error (out of memory): the request carries it
      end(r, std::current_exception());
      return;
    }
    std::lock_guard<std::mutex> lk(mu_);
    r.phase = OpRequest::Phase::started;  // the progress thread adds it to inflight_
    return;
  }
  std::exception_ptr error;
  r.op.started = t0;
  try {
    execute(r.op, r.spans, r.ticket, t0);
  } catch (...) {  // execute() handled an mpcomm error already; anything else the request carries too
    error = std::current_exception();
  }
  end(r, error);
}

void FrontDoor::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  auto nap = kFirstNap;
  std::chrono::microseconds busy_poll = kPoll;
  for (;;) {
    if (!queue_.empty() && driver_ == Driver::none) {
      const OpRequest& front = *queue_.front();
      if (!stop_ && waiters_ == 0 && !front.callback_given.load()) {
        const auto ripe = front.queued_at + kLeaveToCaller;
        if (Clock::now() < ripe) {
          worker_cv_.wait_until(lk, ripe);
          continue;
        }
      }
      std::shared_ptr<OpRequest> r = queue_.front();
      queue_.pop_front();
      driver_ = Driver::worker;
      lk.unlock();
      process(*r);
      if (r->phase == OpRequest::Phase::started) add_inflight(r);
      lk.lock();
      driver_ = Driver::none;
      ++endings_;
      nap = kFirstNap;
      cv_.notify_all();
      continue;
    }
    if (stop_ && queue_.empty()) return;
    // Sends and receives in flight that nobody waits for: test them between naps (a caller that waits
    // drives its own, at full speed).
    if (queue_.empty() && !inflight_.empty() && waiters_ == 0 && driver_ == Driver::none && worth_testing_locked()) {
      worker_cv_.wait_for(lk, nap, [&] { return !queue_.empty() || stop_ || waiters_ > 0 || driver_ != Driver::none; });
      if (!queue_.empty() || stop_ || waiters_ > 0 || driver_ != Driver::none || inflight_.empty()) continue;
      std::vector<std::shared_ptr<OpRequest>> list = inflight_;
      driver_ = Driver::worker;
      lk.unlock();
      bool any = false;
      for (auto& r : list)
        if (!r->ended() && (cheap_test_ || r->callback_given.load())) any = progress_now(*r, /*wait=*/false) || any;
      lk.lock();
      driver_ = Driver::none;
      nap = any ? kFirstNap : std::min(nap * 2, std::chrono::duration_cast<std::chrono::microseconds>(kMaxNap));
      cv_.notify_all();
      continue;
    }
    if (Clock::now() - last_issue_ < kActive) {
      // While a caller drives (a long op, perhaps) the looks thin out, up to kMaxBusyPoll apart: a look
      // costs the caller a context switch when ranks outnumber CPUs.
      worker_polling_ = true;
      worker_cv_.wait_for(lk, driver_ == Driver::none ? kPoll : busy_poll);
      worker_polling_ = false;
      busy_poll = driver_ == Driver::none ? kPoll : std::min(busy_poll * 2, kMaxBusyPoll);
    } else if (!inflight_.empty()) {
      worker_cv_.wait_for(lk, kMaxNap);  // nobody wakes it for them (worker_must_wake_locked)
    } else {
      worker_asleep_ = true;
      worker_cv_.wait(lk);
      worker_asleep_ = false;
    }
  }
}

// ---- the calls that go through the stream -----------------------------------------------------------

// A non-blocking op: checked, numbered from `counter`, with the progress thread running.
std::shared_ptr<OpRequest> FrontDoor::issue(Op& op, uint64_t& counter) {
  op.seq = counter;  // a refusal names the number the op would have had
  throw_if_aborted(op);
  const BufferSpans spans = check_arguments(op, *backend_);
  op.reproducible = reproducible(op);
  counter += sequence_numbers(op);
  ensure_worker();
  op.issued = OpClock::now();
  auto r = std::make_shared<OpRequest>(shared_from_this(), op, spans);
  if (op.v != nullptr) r->own_counts();
  return r;
}

Request FrontDoor::enqueue(const std::shared_ptr<OpRequest>& r) {
  r->ticket = recorder_.start(r->op, OpClock::now(), FlightRecorder::State::queued);
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    r->queued_at = last_issue_ = Clock::now();
    queue_.push_back(r);
    wake = !worker_polling_;
  }
  if (wake) worker_cv_.notify_all();
  return Request(r);
}

Request FrontDoor::icollective(Op& op) { return enqueue(issue(op, seq_)); }

// Starts a send or receive on the caller's thread (the caller drives); the start's failure is thrown.
void FrontDoor::start_inline(OpRequest& r) {
  r.op.issued = 0;  // not queued: issued when it starts
  r.ticket = recorder_.start(r.op, OpClock::now());
  try {
    start_now(r);
  } catch (const Error& e) {
    r.phase = OpRequest::Phase::failed;
    failed(r.op, r.ticket, e);
    throw;
  }
  r.phase = OpRequest::Phase::started;
}

// Sends and receives are numbered apart from collectives (they need not be called by every rank).
Request FrontDoor::ip2p(Op& op) {
  auto r = issue(op, p2p_seq_);
  bool behind_others;
  {
    std::lock_guard<std::mutex> lk(mu_);
    last_issue_ = Clock::now();  // the progress thread keeps looking by itself (kPoll) while these come
    behind_others = !queue_.empty() || driver_ != Driver::none;
    if (!behind_others) driver_ = Driver::caller;
  }
  if (behind_others) return enqueue(r);
  struct Release {
    FrontDoor* c;
    ~Release() { c->release_driver(); }
  } release{this};
  start_inline(*r);
  add_inflight(r);
  return Request(r);
}


void FrontDoor::wait(OpRequest& r) {
  std::unique_lock<std::mutex> lk(mu_);
  auto deadline = Clock::now() + backend_->options().timeout + kWaiterGrace;
  uint64_t seen = endings_;
  while (!r.ended()) {
    // Next in line and nobody drives: the waiter runs it itself (no hand-over to the progress thread and
    // back: what makes issue-then-wait cost what a blocking call costs).
    if (r.phase == OpRequest::Phase::queued && !queue_.empty() && queue_.front().get() == &r &&
        driver_ == Driver::none) {
      std::shared_ptr<OpRequest> mine = std::move(queue_.front());
      queue_.pop_front();
      driver_ = Driver::caller;
      lk.unlock();
      process(r);
      if (r.phase == OpRequest::Phase::started) add_inflight(mine);
      lk.lock();
      driver_ = Driver::none;
      ++endings_;
      notify_locked();
      continue;
    }
    if (r.phase == OpRequest::Phase::started && queue_.empty() && driver_ == Driver::none) {
      driver_ = Driver::caller;
      lk.unlock();
      progress_now(r, /*wait=*/true);  // never throws: the request carries its error
      lk.lock();
      driver_ = Driver::none;
      notify_locked();
      continue;
    }
    ++waiters_;
    notify_locked();  // a progress thread testing sends and receives leaves them to this waiter
    cv_.wait_until(lk, deadline);
    --waiters_;
    if (endings_ != seen) {
      seen = endings_;
      deadline = Clock::now() + backend_->options().timeout + kWaiterGrace;
    } else if (Clock::now() >= deadline && !r.ended()) {
      const std::string msg = "mpcomm: " + backend_->describe(r.op) + ": timed out after " +
                              seconds_text(backend_->options().timeout) +
                              " s waiting for it to start (the ops issued before it did not end)";
      r.error = std::make_exception_ptr(Timeout(msg));
      r.phase = OpRequest::Phase::failed;
      ++endings_;
      queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](auto& q) { return q.get() == &r; }), queue_.end());
      lk.unlock();
      notify_callback(r);
      abort(ErrorCode::timeout, msg);  // every other pending request fails too
      lk.lock();
    }
  }
  settle_driver(lk);
  if (r.phase == OpRequest::Phase::failed) std::rethrow_exception(r.error);
}

// A request that ended because of an abort may still be in the progress thread's hands (a test of it in
// progress): the caller gets it back, buffers included, only once the progress thread lets go.
void FrontDoor::settle_driver(std::unique_lock<std::mutex>& lk) {
  const auto deadline = Clock::now() + backend_->options().timeout + kWaiterGrace;
  while (driver_ == Driver::worker && Clock::now() < deadline) cv_.wait_until(lk, deadline);
}

bool FrontDoor::test(OpRequest& r) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!r.ended() && r.phase == OpRequest::Phase::started && queue_.empty() && driver_ == Driver::none) {
    driver_ = Driver::caller;
    lk.unlock();
    progress_now(r, /*wait=*/false);  // never throws: the request carries its error
    lk.lock();
    driver_ = Driver::none;
    notify_locked();
  }
  if (!r.ended()) return false;
  settle_driver(lk);
  if (r.phase == OpRequest::Phase::failed) std::rethrow_exception(r.error);
  return true;
}

}  // namespace mpcomm::detail
