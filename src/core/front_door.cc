#include "core/front_door.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <utility>

#include "device/device.h"
#include "core/op_clock.h"
#include "settings/settings.h"
#include "core/device_staging.h"
#include "core/topology.h"
#include "core/wait.h"

namespace mpcomm::detail {

using Clock = std::chrono::steady_clock;

// A request of the front door: an op issued through the stream (queued, or started), and how it ended.
class OpRequest final : public RequestState {
 public:
  enum class Phase : uint8_t { queued, started, done, failed };
  OpRequest(std::shared_ptr<Core> core, const Op& op, const BufferSpans& spans)
      : core_(std::move(core)), op(op), spans(spans) {}
  void wait() override { core_->wait(*this); }
  bool test() override { return core_->test(*this); }
  void on_complete(std::function<void(std::exception_ptr)> fn) override { core_->on_complete(*this, std::move(fn)); }
  bool ended() const { return phase == Phase::done || phase == Phase::failed; }
  bool is_p2p() const { return op.kind == OpKind::send || op.kind == OpKind::recv; }
  // An uneven op's counts and displacements, copied from the caller's arrays (which may go away once the
  // call returns); op.v points at the copies from now on.
  void own_counts() {
    const VCounts& v = *op.v;
    counts_.reserve(v.send_counts.size() + v.send_displs.size() + v.recv_counts.size() + v.recv_displs.size());
    auto keep = [&](std::span<const size_t> s) {
      const size_t at = counts_.size();
      counts_.insert(counts_.end(), s.begin(), s.end());
      return std::span<const size_t>(counts_.data() + at, s.size());
    };
    vcounts_.send_counts = keep(v.send_counts);
    vcounts_.send_displs = keep(v.send_displs);
    vcounts_.recv_counts = keep(v.recv_counts);
    vcounts_.recv_displs = keep(v.recv_displs);
    op.v = &vcounts_;
  }

  std::shared_ptr<Core> core_;
  Op op;
  BufferSpans spans;
  uint64_t ticket = 0;  // flight recorder
  uint64_t t0 = 0;      // OpClock reading when it started
  std::chrono::steady_clock::time_point queued_at{};  // when it joined the queue
  // Written under Core::mu_ once the request is visible to the progress thread; read anywhere.
  std::atomic<Phase> phase{Phase::queued};
  std::shared_ptr<RequestState> inner;  // the backend's request of a started send or receive
  std::exception_ptr error;
  // Request::on_complete's function, until it is called (under Core::mu_).
  std::function<void(std::exception_ptr)> callback;
  std::atomic<bool> callback_given{false};  // read by the progress thread without mu_

 private:
  std::vector<size_t> counts_;  // own_counts(): every span of vcounts_ points into it (reserved up front)
  VCounts vcounts_;
};

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

[[noreturn]] void bad(const Op& op, const Backend& b, const std::string& why) {
  throw InvalidArgument("mpcomm: " + b.describe(op) + ": " + why);
}

bool overlap(const char* a, size_t an, const char* b, size_t bn) { return an > 0 && bn > 0 && a < b + bn && b < a + an; }

// One non-empty block of an uneven op: bytes [lo, hi) of the address space, and whose block it is.
struct Block {
  uintptr_t lo, hi;
  size_t rank;
};

std::vector<Block> blocks_of(const void* base, std::span<const size_t> counts, std::span<const size_t> displs, size_t es) {
  std::vector<Block> out;
  const auto b = reinterpret_cast<uintptr_t>(base);
  for (size_t p = 0; p < counts.size(); ++p)
    if (counts[p] > 0) out.push_back({b + displs[p] * es, b + (displs[p] + counts[p]) * es, p});
  std::sort(out.begin(), out.end(), [](const Block& x, const Block& y) { return x.lo < y.lo; });
  return out;
}

// The first pair of blocks, one of each sorted list, that share a byte (null when none do).
std::pair<const Block*, const Block*> first_overlap(const std::vector<Block>& a, const std::vector<Block>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].lo < b[j].hi && b[j].lo < a[i].hi) return {&a[i], &b[j]};
    if (a[i].hi <= b[j].hi)
      ++i;
    else
      ++j;
  }
  return {nullptr, nullptr};
}

std::string elements_text(const Block& x, uintptr_t base, size_t es) {
  return "[" + std::to_string((x.lo - base) / es) + ", " + std::to_string((x.hi - base) / es) + ")";
}

}  // namespace

// ---- construction -----------------------------------------------------------------------------------

Core::Core(std::unique_ptr<Backend> backend, BackendFactory recreate)
    : backend_(std::move(backend)),
      recreate_(recreate),
      may_stage_(backend_->may_stage()),
      cheap_test_(backend_->cheap_test()),
      check_(backend_->options().check > 0 && backend_->size() > 1),
      check_counts_(backend_->size() > 1 && (check_ || !backend_->checks_sizes())),
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
}

Core::~Core() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Core::close() {
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
  backend_->close();
}

std::unique_ptr<Communicator> make_communicator(std::unique_ptr<Backend> backend, BackendFactory recreate) {
  return Core::wrap(std::make_shared<Core>(std::move(backend), recreate));
}

std::unique_ptr<Communicator> Core::wrap(std::shared_ptr<Core> core) {
  return std::unique_ptr<Communicator>(new Communicator(std::move(core)));
}

// ---- argument checks --------------------------------------------------------------------------------

std::string Core::aborted_message(const Op& op) const {
  std::lock_guard<std::mutex> g(abort_mu_);
  return "mpcomm: " + backend_->describe(op) + ": communicator was aborted: " + abort_reason_;
}

void Core::throw_if_aborted(const Op& op) const {
  if (aborted_.load(std::memory_order_acquire)) throw PeerFailure(aborted_message(op));
}

BufferSpans Core::validate(const Op& op) const {
  const Backend& c = *backend_;
  if (static_cast<unsigned>(op.dtype) >= kNumDataTypes)
    bad(op, c, "unknown data type value " + std::to_string(static_cast<int>(op.dtype)));
  if (op.v != nullptr) return validate_uneven(op);
  if (op.reduces() && static_cast<unsigned>(op.redop) >= kNumReduceOps)
    bad(op, c, "unknown reduce op value " + std::to_string(static_cast<int>(op.redop)));
  if (op.reduces() && is_bitwise(op.redop) && is_floating(op.dtype))
    bad(op, c, std::string(to_string(op.redop)) + " needs an integer data type (int8, uint8, int32, int64), not " +
                   std::string(to_string(op.dtype)));
  if (op.rooted() && (op.root < 0 || op.root >= c.size()))
    bad(op, c, "root " + std::to_string(op.root) + " is out of range [0, " + std::to_string(c.size()) + ")");
  if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    if (op.peer < 0 || op.peer >= c.size())
      bad(op, c, "peer " + std::to_string(op.peer) + " is out of range [0, " + std::to_string(c.size()) + ")");
    if (op.peer == c.rank()) bad(op, c, "sending to or receiving from oneself is not supported");
    if (op.tag < 0) bad(op, c, "tag " + std::to_string(op.tag) + " is negative");
  }
  if (c.options().device.kind == Device::cuda)
    device::require_cuda(c.describe(op) + " on " + to_string(c.options().device));

  // Sizes: count × element size × (ranks, for the per-rank collectives) must fit.
  const size_t es = dtype_size(op.dtype);
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
  size_t blocks = 1;
  switch (op.kind) {
    case OpKind::allgather:
    case OpKind::reduce_scatter:
    case OpKind::gather:
    case OpKind::scatter:
    case OpKind::alltoall: blocks = static_cast<size_t>(c.size()); break;
    default: break;
  }
  if (op.count > limit / es / blocks)
    bad(op, c, "count " + std::to_string(op.count) + " × " + std::to_string(es) + " bytes × " +
                   std::to_string(blocks) + " overflows the address space");
  const size_t one = op.count * es;

  // Which buffers matter on this rank, and how big they are.
  const BufferSpans spans = buffer_spans(op, c.rank(), c.size());
  if (spans.send_n > 0 && op.send == nullptr) bad(op, c, "send buffer is null but count is " + std::to_string(op.count));
  if (spans.recv_n > 0 && op.recv == nullptr) bad(op, c, "recv buffer is null but count is " + std::to_string(op.count));

  // Overlapping buffers must be exactly the documented in-place layout.
  const char* sp = static_cast<const char*>(op.send);
  const char* rp = static_cast<const char*>(op.recv);
  if (!overlap(sp, spans.send_n, rp, spans.recv_n)) return spans;
  bool in_place = false;
  switch (op.kind) {
    case OpKind::allreduce:
    case OpKind::reduce:
    case OpKind::alltoall: in_place = sp == rp; break;
    case OpKind::allgather: in_place = sp == rp + static_cast<size_t>(c.rank()) * one; break;
    case OpKind::reduce_scatter: in_place = rp == sp + static_cast<size_t>(c.rank()) * one; break;
    case OpKind::gather: in_place = sp == rp + static_cast<size_t>(op.root) * one; break;
    case OpKind::scatter: in_place = rp == sp + static_cast<size_t>(op.root) * one; break;
    default: break;
  }
  if (!in_place) bad(op, c, "send and recv buffers overlap but are not the in-place layout");
  return spans;
}

// alltoallv and allgatherv: one count and displacement per rank, every block inside the address space,
// buffers of non-empty blocks not null, what this rank sends itself (alltoallv) or the others
// (allgatherv) fitting its own receive block, and the receive blocks apart from each other and from the
// send region, but allgatherv's in-place layout.
BufferSpans Core::validate_uneven(const Op& op) const {
  const Backend& c = *backend_;
  if (c.options().device.kind == Device::cuda)
    device::require_cuda(c.describe(op) + " on " + to_string(c.options().device));
  const VCounts& v = *op.v;
  const bool a2a = op.kind == OpKind::alltoallv;
  const size_t n = static_cast<size_t>(c.size()), me = static_cast<size_t>(c.rank()), es = dtype_size(op.dtype);
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max()) / es;  // elements
  auto at = [](const char* name, size_t p) { return std::string(name) + "[" + std::to_string(p) + "]"; };
  auto one_per_rank = [&](std::span<const size_t> s, const char* name) {
    if (s.size() != n)
      bad(op, c, std::string(name) + " has " + std::to_string(s.size()) + " entries, expected one per rank (" +
                     std::to_string(n) + ")");
  };
  auto inside = [&](std::span<const size_t> counts, std::span<const size_t> displs, const char* cn, const char* dn) {
    for (size_t p = 0; p < n; ++p)
      if (counts[p] > limit || displs[p] > limit - counts[p])
        bad(op, c, at(dn, p) + " " + std::to_string(displs[p]) + " + " + at(cn, p) + " " + std::to_string(counts[p]) +
                       " elements × " + std::to_string(es) + " bytes overflows the address space");
  };
  if (a2a) {
    one_per_rank(v.send_counts, "send_counts");
    one_per_rank(v.send_displs, "send_displs");
  }
  one_per_rank(v.recv_counts, "recv_counts");
  one_per_rank(v.recv_displs, "recv_displs");
  if (a2a) inside(v.send_counts, v.send_displs, "send_counts", "send_displs");
  inside(v.recv_counts, v.recv_displs, "recv_counts", "recv_displs");
  if (op.count > limit)
    bad(op, c, (a2a ? "the send counts add up to " : "send_count ") + std::to_string(op.count) + " elements × " +
                   std::to_string(es) + " bytes, which overflows the address space");
  if (a2a && v.send_counts[me] != v.recv_counts[me])
    bad(op, c, at("send_counts", me) + " is " + std::to_string(v.send_counts[me]) + " but " + at("recv_counts", me) +
                   " is " + std::to_string(v.recv_counts[me]) + ": what this rank sends itself must fill its own block");
  if (!a2a && v.recv_counts[me] != op.count)
    bad(op, c, "send_count is " + std::to_string(op.count) + " but " + at("recv_counts", me) + " (this rank's block) is " +
                   std::to_string(v.recv_counts[me]));
  if (op.count > 0 && op.send == nullptr)
    bad(op, c, "send buffer is null but " + std::to_string(op.count) + " elements go out");
  const std::vector<Block> recv = blocks_of(op.recv, v.recv_counts, v.recv_displs, es);
  if (!recv.empty() && op.recv == nullptr)
    bad(op, c, "recv buffer is null but " + at("recv_counts", recv.front().rank) + " is " +
                   std::to_string(v.recv_counts[recv.front().rank]));

  // Receive blocks apart (sorted: only neighbours can share a byte), and apart from the send region.
  const auto rbase = reinterpret_cast<uintptr_t>(op.recv);
  for (size_t i = 1; i < recv.size(); ++i)
    if (recv[i].lo < recv[i - 1].hi)
      bad(op, c, "the receive blocks of ranks " + std::to_string(recv[i - 1].rank) + " and " + std::to_string(recv[i].rank) +
                     " overlap (elements " + elements_text(recv[i - 1], rbase, es) + " and " +
                     elements_text(recv[i], rbase, es) + " of recv)");
  const auto sbase = reinterpret_cast<uintptr_t>(op.send);
  if (a2a) {
    const std::vector<Block> send = blocks_of(op.send, v.send_counts, v.send_displs, es);
    if (auto [s, r] = first_overlap(send, recv); s != nullptr)
      bad(op, c, "the send block for rank " + std::to_string(s->rank) + " (elements " + elements_text(*s, sbase, es) +
                     " of send) overlaps the receive block of rank " + std::to_string(r->rank) + " (elements " +
                     elements_text(*r, rbase, es) + " of recv); alltoallv has no in-place form");
  } else if (op.count > 0) {
    const std::vector<Block> send = {{sbase, sbase + op.count * es, me}};
    const bool in_place = op.send == static_cast<const char*>(op.recv) + v.recv_displs[me] * es;
    if (auto [s, r] = first_overlap(send, recv); s != nullptr && !in_place)
      bad(op, c, "the send buffer overlaps the receive block of rank " + std::to_string(r->rank) + " (elements " +
                     elements_text(*r, rbase, es) + " of recv) but is not the in-place layout (send == recv + " +
                     at("recv_displs", me) + ")");
  }
  return buffer_spans(op, c.rank(), c.size());
}

// ---- running an op ----------------------------------------------------------------------------------

void Core::run_on_backend(const Op& op, const BufferSpans& spans) {
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
void Core::verify_fingerprints(const Op& op) {
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
void Core::verify_counts(const Op& op) {
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

void Core::execute(const Op& op, const BufferSpans& spans, uint64_t ticket, uint64_t t0) {
  try {
    if (check_) verify_fingerprints(op);
    if (op.v != nullptr && check_counts_) verify_counts(op);
    run_on_backend(op, spans);
  } catch (const Error& e) {
    failed(op, ticket, e);
    throw;
  }
  finished(op, ticket, t0, OpClock::now(), /*add_call=*/true);
}

void Core::finished(const Op& op, uint64_t ticket, uint64_t t0, uint64_t t1, bool add_call) {
  recorder_.finish(ticket, FlightRecorder::State::done, t1, op.algorithm);
  // One thread at a time drives (core.h), so plain read-modify-writes of the relaxed atomics suffice.
  Stat& st = stats_[static_cast<size_t>(op.kind)];
  if (add_call) {
    st.calls.store(st.calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    st.bytes.store(st.bytes.load(std::memory_order_relaxed) + op.bytes(), std::memory_order_relaxed);
  }
  st.ticks.store(st.ticks.load(std::memory_order_relaxed) + (t1 - t0), std::memory_order_relaxed);
}

// A failed op: recorded; unless it was only refused (bad argument, unsupported), the record is written
// out and the communicator aborted — peers are told, and every later call fails at once.
void Core::failed(const Op& op, uint64_t ticket, const Error& e) {
  recorder_.finish(ticket, FlightRecorder::State::failed, OpClock::now(), op.algorithm, e.what());
  if (e.code() == ErrorCode::invalid_argument || e.code() == ErrorCode::unsupported) return;
  recorder_.write_once(recorder_who_, recorder_tag_);
  abort(e.code(), e.what());
}

void Core::abort(ErrorCode code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(abort_mu_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
  backend_->abort(code, reason);
  fail_pending();
}

void Core::fail_pending() {
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
      r->error = std::make_exception_ptr(PeerFailure(msg));
      r->phase = OpRequest::Phase::failed;
      ++endings_;
    }
    recorder_.finish(r->ticket, FlightRecorder::State::failed, OpClock::now(), r->op.algorithm, msg);
    notify_callback(*r);
  }
  cv_.notify_all();
}

void Core::notify_callback(OpRequest& r) {
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

void Core::on_complete(OpRequest& r, std::function<void(std::exception_ptr)> fn) {
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

// ---- sends and receives -----------------------------------------------------------------------------

void Core::start_now(OpRequest& r) {
  r.t0 = OpClock::now();
  Stat& st = stats_[static_cast<size_t>(r.op.kind)];
  st.calls.store(st.calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  st.bytes.store(st.bytes.load(std::memory_order_relaxed) + r.op.bytes(), std::memory_order_relaxed);
  Backend& b = *backend_;
  if (may_stage_ && r.op.bytes() > 0 &&
      b.memory_type(r.op.kind == OpKind::send ? r.op.send : r.op.recv) != b.runs_on())
    r.inner = start_staged(r.op, b.staging(), [&](const Op& o) { return b.start(o); });
  else
    r.inner = b.start(r.op);
}

bool Core::progress_now(OpRequest& r, bool wait) {
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

void Core::end(OpRequest& r, std::exception_ptr error) {
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

void Core::ensure_worker() {
  if (has_worker_) return;
  has_worker_ = true;
  worker_ = std::thread(&Core::worker_loop, this);
}

void Core::take_driver(std::unique_lock<std::mutex>& lk, const Op& for_op) {
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

void Core::release_driver() {
  bool worker;
  {
    std::lock_guard<std::mutex> lk(mu_);
    driver_ = Driver::none;
    worker = worker_must_wake_locked();
  }
  cv_.notify_all();
  if (worker) worker_cv_.notify_all();
}

void Core::notify_locked() {
  cv_.notify_all();
  if (worker_must_wake_locked()) worker_cv_.notify_all();
}

bool Core::callback_in_flight_locked() const {
  return std::any_of(inflight_.begin(), inflight_.end(), [](auto& r) { return static_cast<bool>(r->callback); });
}

bool Core::worker_must_wake_locked() const { return stop_ || !queue_.empty() || callback_in_flight_locked(); }

// Whether the progress thread tests the sends and receives in flight: always where a test is cheap, else
// those with a completion callback (nobody else would end them).
bool Core::worth_testing_locked() const { return cheap_test_ || callback_in_flight_locked(); }

void Core::add_inflight(const std::shared_ptr<OpRequest>& r) {
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

void Core::process(OpRequest& r) {
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
  try {
    execute(r.op, r.spans, r.ticket, t0);
  } catch (...) {  // execute() handled an mpcomm error already; anything else the request carries too
    error = std::current_exception();
  }
  end(r, error);
}

void Core::worker_loop() {
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

// ---- the public calls -------------------------------------------------------------------------------

// With a progress thread, the caller waits (take_driver) until the ops issued before have started,
// then runs the op itself: a blocking call never costs a hand-over between threads.
class Core::Driving {
 public:
  Driving(Core& c, const Op& op) : c_(c) {
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
  Core& c_;
  bool held_ = false;
};

void Core::collective(Op& op) {
  throw_if_aborted(op);
  const BufferSpans spans = validate(op);
  op.seq = seq_++;
  Driving driving(*this, op);
  const uint64_t t0 = OpClock::now();
  execute(op, spans, recorder_.start(op, t0), t0);
}

// A non-blocking op: checked, numbered from `counter`, with the progress thread running.
std::shared_ptr<OpRequest> Core::issue(Op& op, uint64_t& counter) {
  throw_if_aborted(op);
  const BufferSpans spans = validate(op);
  op.seq = counter++;
  ensure_worker();
  auto r = std::make_shared<OpRequest>(shared_from_this(), op, spans);
  if (op.v != nullptr) r->own_counts();
  return r;
}

Request Core::enqueue(const std::shared_ptr<OpRequest>& r) {
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

Request Core::icollective(Op& op) { return enqueue(issue(op, seq_)); }

// Starts a send or receive on the caller's thread (the caller drives); the start's failure is thrown.
void Core::start_inline(OpRequest& r) {
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
Request Core::ip2p(Op& op) {
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
    Core* c;
    ~Release() { c->release_driver(); }
  } release{this};
  start_inline(*r);
  add_inflight(r);
  return Request(r);
}

void Core::p2p(Op& op) {
  throw_if_aborted(op);
  const BufferSpans spans = validate(op);
  op.seq = p2p_seq_++;
  OpRequest r(nullptr, op, spans);
  {
    Driving driving(*this, op);
    start_inline(r);
    progress_now(r, /*wait=*/true);
  }
  if (r.phase == OpRequest::Phase::failed) std::rethrow_exception(r.error);
}

void Core::wait(OpRequest& r) {
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
void Core::settle_driver(std::unique_lock<std::mutex>& lk) {
  const auto deadline = Clock::now() + backend_->options().timeout + kWaiterGrace;
  while (driver_ == Driver::worker && Clock::now() < deadline) cv_.wait_until(lk, deadline);
}

bool Core::test(OpRequest& r) {
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

// ---- split ------------------------------------------------------------------------------------------

std::unique_ptr<Communicator> Core::split(int color, int key) {
  Backend& b = *backend_;
  Op split_op{.kind = OpKind::split, .seq = seq_};
  throw_if_aborted(split_op);
  // Every rank learns every (color, key) through this communicator's own allgather; the new group's
  // store is a private prefix named after that allgather's sequence number, so it is unique.
  SplitPlan plan;
  plan.color = color;
  plan.key = key;
  plan.seq = seq_;
  plan.recreate = recreate_;
  const int n = b.size();
  int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  Op gather{.kind = OpKind::allgather, .send = mine, .recv = all.data(), .count = 2, .dtype = DataType::int64};
  collective(gather);
  if (color >= 0) {
    for (int r = 0; r < n; ++r)
      if (all[2 * static_cast<size_t>(r)] == color) plan.members.push_back(r);
    std::stable_sort(plan.members.begin(), plan.members.end(), [&](int x, int y) {
      return all[2 * static_cast<size_t>(x) + 1] < all[2 * static_cast<size_t>(y) + 1];
    });
    plan.new_rank =
        static_cast<int>(std::find(plan.members.begin(), plan.members.end(), b.rank()) - plan.members.begin());
    std::vector<std::string> hosts;
    for (int m : plan.members)
      hosts.push_back(b.topology().host_names[static_cast<size_t>(b.topology().host_of_rank[static_cast<size_t>(m)])]);
    plan.topology = topology_from_hosts(hosts, plan.new_rank);
    if (b.store())
      plan.store = std::make_shared<PrefixStore>("split" + std::to_string(plan.seq) + "/color" + std::to_string(color),
                                                 b.store());
  }
  // The backend's own split is collective over this communicator, in issue order like any collective.
  std::unique_ptr<Backend> child;
  try {
    Driving driving(*this, split_op);
    child = b.split(plan);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument && e.code() != ErrorCode::unsupported) abort(e.code(), e.what());
    throw;
  }
  if (!child) return nullptr;
  return make_communicator(std::move(child), recreate_);
}

// ---- observers --------------------------------------------------------------------------------------

std::array<OpStats, kNumOpKinds> Core::stats() const {
  std::array<OpStats, kNumOpKinds> out{};
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].calls = stats_[k].calls.load(std::memory_order_relaxed);
    out[k].bytes = stats_[k].bytes.load(std::memory_order_relaxed);
    out[k].seconds = OpClock::seconds(stats_[k].ticks.load(std::memory_order_relaxed));
  }
  return out;
}

std::string Core::flight_record() { return recorder_.dump(recorder_who_); }

}  // namespace mpcomm::detail
