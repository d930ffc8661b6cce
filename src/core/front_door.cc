// The front door (front_door.h): construction, the checked entry points of blocking calls, running an op
// on the backend with its bookkeeping, failures and the abort fan-out, and the observers. The stream
// (non-blocking calls, the progress thread) is stream.cc, argument checks argument_checks.cc, split
// split.cc.
#include "core/front_door.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/argument_checks.h"
#include "core/device_staging.h"
#include "core/heartbeat.h"
#include "core/op_clock.h"
#include "core/request.h"
#include "settings/settings.h"

namespace mpcomm::detail {

// ---- construction -----------------------------------------------------------------------------------

FrontDoor::FrontDoor(std::unique_ptr<Backend> backend, BackendFactory recreate)
    : backend_(std::move(backend)),
      recreate_(recreate),
      may_stage_(backend_->may_stage()),
      cheap_test_(backend_->cheap_test()),
      check_(backend_->options().check > 0 && backend_->size() > 1),
      check_counts_(backend_->size() > 1 && (check_ || !backend_->checks_sizes())),
      reproducible_(backend_->options().reproducible > 0),
      recorder_([this] {
        OpClock::init();
        const long entries = param_int(backend_->options(), "MPCOMM_TRACE_ENTRIES");
        return entries > 0 ? static_cast<size_t>(entries) : size_t{0};
      }()) {
  static std::atomic<uint64_t> created{0};
  const Backend& b = *backend_;
  const std::string pid = std::to_string(::getpid());
  const std::string name(b.name());
  recorder_who_ = "rank " + std::to_string(b.rank()) + " of " + std::to_string(b.size()) + " [" + name + "], host " +
                  b.options().host_id + ", pid " + pid;
  recorder_tag_ = name + "-r" + std::to_string(b.rank()) + "of" + std::to_string(b.size()) + "-pid" + pid + "-c" +
                  std::to_string(created.fetch_add(1));
  // Elastic: where this rank's process runs, for shrink() to tell a dead rank of this host at once, and the
  // process's heartbeat, for shrink() on another host to tell it cut off or stopped (shrink.cc).
  if (b.options().elastic > 0 && b.size() > 1 && b.store() != nullptr) {
    b.store()->set_string(shrink_process_key(b.rank()), b.options().host_id + "\n" + pid);
    heartbeat_ = keep_beating(root_store(b.store()), heartbeat_key(b.options().host_id, pid));
  }
}

FrontDoor::~FrontDoor() {
  // A failed child dropped before its parent's shrink() still makes the parent's family a failed one.
  if (auto parent = parent_.lock(); parent != nullptr && failed_in_family())
    parent->child_failed_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void FrontDoor::attach_timeline(std::shared_ptr<Timeline> t, uint16_t track, std::string env_file) {
  track_ = track;
  backend_name_ = intern(backend_->name());
  env_trace_file_ = std::move(env_file);
  timeline_ = std::move(t);
  timeline_raw_.store(timeline_.get(), std::memory_order_release);
}

void FrontDoor::close() {
  if (has_worker_) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;  // the progress thread ends once the queue is empty
    }
    cv_.notify_all();
    worker_cv_.notify_all();
    worker_.join();
    has_worker_ = false;
  }
  // Sends and receives nobody waited for: the sends are driven to completion (bounded, like any wait), so
  // that a peer gets what was sent; receives are dropped (their Requests may still finish them).
  std::vector<std::shared_ptr<OpRequest>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(inflight_);
  }
  for (auto& r : left)
    if (!r->ended() && r->op.kind == OpKind::send) progress_now(*r, /*wait=*/true);
  if (!env_trace_file_.empty()) write_trace_part(*this, env_trace_file_);
  backend_->close();
}

std::unique_ptr<Communicator> make_communicator(std::unique_ptr<Backend> backend, BackendFactory recreate) {
  return FrontDoor::wrap(std::make_shared<FrontDoor>(std::move(backend), recreate));
}

std::unique_ptr<Communicator> FrontDoor::wrap(std::shared_ptr<FrontDoor> core) {
  return std::unique_ptr<Communicator>(new Communicator(std::move(core)));
}

// ---- aborts -----------------------------------------------------------------------------------------

std::string FrontDoor::aborted_message(const Op& op) const {
  std::lock_guard<std::mutex> g(abort_mu_);
  return "mpcomm: " + backend_->describe(op) + ": communicator was " +
         (revoked_.load(std::memory_order_acquire) ? "revoked by shrink()" : "aborted") + ": " + abort_reason_;
}

void FrontDoor::throw_if_aborted(const Op& op) const {
  if (!aborted_.load(std::memory_order_acquire)) return;
  if (revoked_.load(std::memory_order_acquire)) throw Revoked(aborted_message(op));
  throw PeerFailure(aborted_message(op));
}

// ---- running an op ----------------------------------------------------------------------------------

void FrontDoor::run_on_backend(const Op& op, const BufferSpans& spans) {
  if (may_stage_) {
    Backend& b = *backend_;
    StageWhich which;
    which.send = spans.send_n > 0 && b.memory_type(op.send) != b.runs_on();
    which.recv = spans.recv_n > 0 && b.memory_type(op.recv) != b.runs_on();
    if (which.any()) return run_staged(op, spans, b.rank(), which, b.staging(), [&](const Op& o) { b.run(o); });
  }
  backend_->run(op);
}

// MPCOMM_CHECK: every rank contributes its op's fingerprint to an allgather run by the backend itself;
// any difference is a Mismatch naming this rank's call and the other rank's.
void FrontDoor::verify_fingerprints(const Op& op) {
  const Fingerprint mine = fingerprint(op);
  const int n = backend_->size();
  std::vector<Fingerprint> all(static_cast<size_t>(n));
  Op probe{.kind = OpKind::allgather, .seq = op.seq, .send = &mine, .recv = all.data(), .count = sizeof mine,
           .dtype = DataType::uint8, .fingerprint_probe = true};
  run_on_backend(probe, buffer_spans(probe, backend_->rank(), n));
  for (int r = 0; r < n; ++r)
    if (!(all[static_cast<size_t>(r)] == mine))
      throw Mismatch("mpcomm: " + backend_->describe(op) + ": rank " + std::to_string(r) + " called " +
                     describe(all[static_cast<size_t>(r)]) + " (found by MPCOMM_CHECK)");
}

// The counts of alltoallv and allgatherv against every other rank's, through an allgather the backend
// runs (a probe, like MPCOMM_CHECK's, sharing the op's sequence number). Every rank gets every rank's
// counts and finds the same first disagreement, so all fail alike with a Mismatch naming both ranks:
// alltoallv, rank p's send_counts[q] against rank q's recv_counts[p]; allgatherv, every rank's
// recv_counts[p] against what p sends (its own recv_counts[p], which validate() held to its send_count).
void FrontDoor::verify_counts(const Op& op) {
  const VCounts& v = *op.v;
  const bool a2a = op.kind == OpKind::alltoallv;
  const int n = backend_->size();
  const auto nn = static_cast<size_t>(n);
  const size_t row = a2a ? 2 * nn : nn;
  std::vector<uint64_t> mine(row), all(row * nn);
  for (size_t p = 0; p < nn; ++p) {
    mine[p] = a2a ? v.send_counts[p] : v.recv_counts[p];
    if (a2a) mine[nn + p] = v.recv_counts[p];
  }
  Op probe{.kind = OpKind::allgather, .seq = op.seq, .send = mine.data(), .recv = all.data(),
           .count = row * sizeof(uint64_t), .dtype = DataType::uint8, .fingerprint_probe = true};
  run_on_backend(probe, buffer_spans(probe, backend_->rank(), n));
  for (size_t p = 0; p < nn; ++p)
    for (size_t q = 0; q < nn; ++q) {
      const uint64_t sent = a2a ? all[p * row + q] : all[p * row + p];
      const uint64_t expected = a2a ? all[q * row + nn + p] : all[q * row + p];
      if (sent == expected) continue;
      const std::string ps = std::to_string(p), qs = std::to_string(q);
      throw Mismatch("mpcomm: " + backend_->describe(op) + ": rank " + ps + " sends " + std::to_string(sent) +
                     " elements to rank " + qs + ", which expects " + std::to_string(expected) + " (" +
                     (a2a ? "send_counts[" + qs + "] on rank " + ps + ", recv_counts[" + ps + "] on rank " + qs
                          : "recv_counts[" + ps + "] on rank " + ps + " and on rank " + qs) +
                     ")");
    }
}

void FrontDoor::execute(const Op& op, const BufferSpans& spans, uint64_t ticket, uint64_t t0) {
  try {
    if (check_) verify_fingerprints(op);
    if (op.v != nullptr && check_counts_) verify_counts(op);
    if (op.reproducible && !backend_sums(op))
      run_reproducible(op);
    else
      run_on_backend(op, spans);
  } catch (const Error& e) {
    failed(op, ticket, e);
    throw;
  }
  finished(op, ticket, t0, OpClock::now(), /*add_call=*/true);
}

void FrontDoor::finished(const Op& op, uint64_t ticket, uint64_t t0, uint64_t t1, bool add_call) {
  recorder_.finish(ticket, FlightRecorder::State::done, t1, op.algorithm);
  if (Timeline* t = timeline()) t->op(track_, op, backend_name_, t1, /*failed=*/false);
  if (add_call) stats_.add_call(op.kind, op.bytes());
  stats_.add_time(op.kind, t1 - t0);
  if (op.algorithm != nullptr) stats_.set_algorithm(op.kind, op.algorithm);
}

// A failed op: recorded; unless it was only refused (bad argument, unsupported), the record is written
// out and the communicator aborted — peers are told, and every later call fails at once.
void FrontDoor::failed(const Op& op, uint64_t ticket, const Error& e) {
  const uint64_t t1 = OpClock::now();
  recorder_.finish(ticket, FlightRecorder::State::failed, t1, op.algorithm, e.what());
  if (Timeline* t = timeline()) t->op(track_, op, backend_name_, t1, /*failed=*/true);
  if (e.code() == ErrorCode::invalid_argument || e.code() == ErrorCode::unsupported) return;
  recorder_.write_once(recorder_who_, recorder_tag_);
  abort(e.code(), e.what());
}

void FrontDoor::abort(ErrorCode code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(abort_mu_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
  backend_->abort(code, reason);
  fail_pending();
}

void FrontDoor::fail_pending() {
  std::vector<std::shared_ptr<OpRequest>> victims;
  {
    std::lock_guard<std::mutex> lk(mu_);
    victims.assign(queue_.begin(), queue_.end());
    queue_.clear();
    victims.insert(victims.end(), inflight_.begin(), inflight_.end());
    inflight_.clear();
  }
  if (victims.empty()) return;
  for (auto& r : victims) {
    const std::string msg = aborted_message(r->op);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (r->ended()) continue;
      r->error = revoked_.load(std::memory_order_acquire) ? std::make_exception_ptr(Revoked(msg))
                                                          : std::make_exception_ptr(PeerFailure(msg));
      r->phase = OpRequest::Phase::failed;
      ++endings_;
    }
    recorder_.finish(r->ticket, FlightRecorder::State::failed, OpClock::now(), r->op.algorithm, msg);
    notify_callback(*r);
  }
  cv_.notify_all();
}

void FrontDoor::notify_callback(OpRequest& r) {
  std::function<void(std::exception_ptr)> fn;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn.swap(r.callback);
    error = r.error;
  }
  if (!fn) return;
  try {
    fn(error);
  } catch (...) {  // the rule: it must not throw; the thread that ends ops must go on
  }
}

void FrontDoor::on_complete(OpRequest& r, std::function<void(std::exception_ptr)> fn) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (r.callback_given.load())
      throw InvalidArgument("mpcomm: " + backend_->describe(r.op) + ": on_complete() was called twice on its request");
    r.callback_given.store(true);
    if (!r.ended()) {
      r.callback = std::move(fn);
      worker_cv_.notify_all();  // the progress thread now tests it even where tests are not cheap
      return;
    }
    error = r.error;
  }
  fn(error);
}

// ---- blocking calls: on the caller's thread (after the ops issued before them, with a progress thread) --

void FrontDoor::collective(Op& op) {
  op.seq = seq_;  // a refusal names the number the op would have had
  throw_if_aborted(op);
  const BufferSpans spans = check_arguments(op, *backend_);
  op.reproducible = reproducible(op);
  seq_ += sequence_numbers(op);
  Driving driving(*this, op);
  const uint64_t t0 = OpClock::now();
  op.issued = op.started = t0;
  execute(op, spans, recorder_.start(op, t0), t0);
}

int FrontDoor::p2p(Op& op) {
  op.seq = p2p_seq_;  // a refusal names the number the op would have had
  throw_if_aborted(op);
  const BufferSpans spans = check_arguments(op, *backend_);
  ++p2p_seq_;
  OpRequest r(nullptr, op, spans);
  {
    Driving driving(*this, op);
    start_inline(r);
    progress_now(r, /*wait=*/true);
  }
  if (r.phase == OpRequest::Phase::failed) std::rethrow_exception(r.error);
  return r.source();
}

// ---- observers --------------------------------------------------------------------------------------

std::array<OpStats, kNumOpKinds> FrontDoor::stats() const { return stats_.snapshot(); }

std::string FrontDoor::flight_record() { return recorder_.dump(recorder_who_); }

}  // namespace mpcomm::detail
