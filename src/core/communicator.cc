// The checked entry point every backend shares: argument validation before any traffic, sequence
// numbers, fingerprints, timing, abort-on-error and split. Backends only see validated Ops.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <numeric>

#include <unistd.h>

#include "core/device.h"
#include "core/flight_recorder.h"
#include "core/op.h"
#include "core/params.h"
#include "mpcomm/communicator.h"

namespace mpcomm {
namespace detail {

BufferSpans buffer_spans(const Op& op, int rank, int size) {
  const size_t one = op.bytes();
  size_t all = one;
  switch (op.kind) {
    case OpKind::allgather:
    case OpKind::reduce_scatter:
    case OpKind::gather:
    case OpKind::scatter:
    case OpKind::alltoall: all = one * static_cast<size_t>(size); break;
    default: break;
  }
  const bool is_root = op.rooted() && op.root == rank;
  switch (op.kind) {
    case OpKind::allreduce: return {one, one};
    case OpKind::broadcast: return {0, one};
    case OpKind::reduce: return {one, is_root ? one : 0};
    case OpKind::allgather: return {one, all};
    case OpKind::reduce_scatter: return {all, one};
    case OpKind::gather: return {one, is_root ? all : 0};
    case OpKind::scatter: return {is_root ? all : 0, one};
    case OpKind::alltoall: return {all, all};
    case OpKind::send: return {one, 0};
    case OpKind::recv: return {0, one};
    case OpKind::barrier:
    case OpKind::split: break;
  }
  return {0, 0};
}

Fingerprint fingerprint(const Op& op) {
  Fingerprint f;
  f.kind = static_cast<uint8_t>(op.kind);
  f.dtype = static_cast<uint8_t>(op.dtype);
  f.redop = op.reduces() ? static_cast<uint8_t>(op.redop) : 0xff;
  f.root = op.rooted() ? op.root : -1;
  f.seq = op.seq;
  f.count = op.count;
  return f;
}

std::string describe(const Fingerprint& f) {
  auto kind = static_cast<OpKind>(f.kind);
  std::string s = std::string(to_string(kind)) + " #" + std::to_string(f.seq);
  if (kind == OpKind::barrier) return s;
  s += " (count " + std::to_string(f.count) + ", " + std::string(to_string(static_cast<DataType>(f.dtype)));
  if (f.redop != 0xff) s += ", " + std::string(to_string(static_cast<ReduceOp>(f.redop)));
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  return s + ")";
}

std::string describe(const Op& op, const Communicator& c) {
  std::string s;
  if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    s = std::string(to_string(op.kind)) + " #" + std::to_string(op.seq) + " (count " + std::to_string(op.count) +
        ", " + std::string(to_string(op.dtype)) + (op.kind == OpKind::send ? ", to rank " : ", from rank ") +
        std::to_string(op.peer) + ", tag " + std::to_string(op.tag) + ")";
  } else {
    s = describe(fingerprint(op));
  }
  return s + " on rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + " [" +
         std::string(c.backend()) + "]";
}

}  // namespace detail

using detail::Op;

Options Options::resolved() const {
  Options o = *this;
  if (o.timeout.count() <= 0) {
    double s = param_double("MPCOMM_TIMEOUT");
    if (s <= 0) throw InvalidArgument("mpcomm: MPCOMM_TIMEOUT must be a positive number of seconds");
    o.timeout = Millis(static_cast<int64_t>(s * 1000));
  }
  if (o.host_id.empty()) {
    o.host_id = param_string("MPCOMM_HOST_ID");
    if (o.host_id.empty()) {
      char buf[256] = {};
      ::gethostname(buf, sizeof buf - 1);
      o.host_id = buf;
    }
  }
  if (o.check < 0) o.check = param_int("MPCOMM_CHECK") != 0 ? 1 : 0;
  if (o.staging < 0) o.staging = param_int("MPCOMM_STAGING") != 0 ? 1 : 0;
  if (o.token.empty()) o.token = param_string("MPCOMM_TOKEN");
  if (o.bind_addr.empty()) o.bind_addr = param_string("MPCOMM_ADDR");
  if (o.device.kind == Device::cpu) o.device = parse_device(param_string("MPCOMM_DEVICE"));
  return o;
}

void Request::wait() {
  if (!state_) throw InvalidArgument("mpcomm: wait() on an empty Request");
  state_->wait();
}

bool Request::test() {
  if (!state_) throw InvalidArgument("mpcomm: test() on an empty Request");
  return state_->test();
}

Communicator::Communicator(std::string backend, int rank, int size, Topology topo, Options opts)
    : backend_(std::move(backend)), rank_(rank), size_(size), topology_(std::move(topo)), options_(std::move(opts)) {
  static std::atomic<uint64_t> created{0};
  const long entries = param_int("MPCOMM_TRACE_ENTRIES");
  recorder_ = std::make_shared<detail::FlightRecorder>(entries > 0 ? static_cast<size_t>(entries) : 0);
  const std::string pid = std::to_string(::getpid());
  recorder_who_ = "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " [" + backend_ + "], host " +
                  options_.host_id + ", pid " + pid;
  recorder_tag_ = backend_ + "-r" + std::to_string(rank_) + "of" + std::to_string(size_) + "-pid" + pid + "-c" +
                  std::to_string(created.fetch_add(1));
}

std::string Communicator::flight_record() const { return recorder_->dump(recorder_who_); }

Communicator::~Communicator() = default;

// ---- argument checks ------------------------------------------------------------------------------

namespace {

[[noreturn]] void bad(const Op& op, const Communicator& c, const std::string& why) {
  throw InvalidArgument("mpcomm: " + detail::describe(op, c) + ": " + why);
}

struct Range {
  const char* p;
  size_t n;
};

bool overlap(Range a, Range b) { return a.n > 0 && b.n > 0 && a.p < b.p + b.n && b.p < a.p + a.n; }

using Spans = detail::BufferSpans;

Spans validate(const Op& op, const Communicator& c) {
  if (static_cast<unsigned>(op.dtype) >= kNumDataTypes)
    bad(op, c, "unknown data type value " + std::to_string(static_cast<int>(op.dtype)));
  if (op.reduces() && static_cast<unsigned>(op.redop) >= kNumReduceOps)
    bad(op, c, "unknown reduce op value " + std::to_string(static_cast<int>(op.redop)));
  if (op.rooted() && (op.root < 0 || op.root >= c.size()))
    bad(op, c, "root " + std::to_string(op.root) + " is out of range [0, " + std::to_string(c.size()) + ")");
  if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    if (op.peer < 0 || op.peer >= c.size())
      bad(op, c, "peer " + std::to_string(op.peer) + " is out of range [0, " + std::to_string(c.size()) + ")");
    if (op.peer == c.rank()) bad(op, c, "sending to or receiving from oneself is not supported");
    if (op.tag < 0) bad(op, c, "tag " + std::to_string(op.tag) + " is negative");
  }
  if (c.options().device.kind == Device::cuda) device::require_cuda(detail::describe(op, c) + " on " + to_string(c.options().device));

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
  const auto [send_n, recv_n] = detail::buffer_spans(op, c.rank(), c.size());
  if (send_n > 0 && op.send == nullptr) bad(op, c, "send buffer is null but count is " + std::to_string(op.count));
  if (recv_n > 0 && op.recv == nullptr) bad(op, c, "recv buffer is null but count is " + std::to_string(op.count));

  // Overlapping buffers must be exactly the documented in-place layout.
  Range s{static_cast<const char*>(op.send), send_n}, r{static_cast<const char*>(op.recv), recv_n};
  if (!overlap(s, r)) return {send_n, recv_n};
  const char* sp = s.p;
  const char* rp = r.p;
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
  return {send_n, recv_n};
}

}  // namespace

// ---- the one entry point --------------------------------------------------------------------------

void Communicator::checked(Op& op) {
  std::string aborted = abort_reason();
  if (!aborted.empty())
    throw PeerFailure("mpcomm: " + detail::describe(op, *this) + ": communicator was aborted: " + aborted);
  const Spans spans = validate(op, *this);
  op.seq = seq_++;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const uint64_t ticket = recorder_->start(op, t0);
  auto failed = [&](const Error& e) { recorder_->finish(ticket, detail::FlightRecorder::State::failed, Clock::now(), e.what()); };
  try {
    if (options_.check > 0 && size_ > 1) verify_fingerprints(op);
    if (staged() && !takes_device_buffers())
      run_staged(op, spans.send_n, spans.recv_n);
    else
      run(op);
  } catch (const InvalidArgument& e) {
    failed(e);
    throw;  // rejected before any traffic: the communicator stays usable
  } catch (const Unsupported& e) {
    failed(e);
    throw;
  } catch (const Error& e) {
    failed(e);
    recorder_->write_once(recorder_who_, recorder_tag_);
    on_abort(e.code(), e.what());
    throw;
  }
  const auto t1 = Clock::now();
  recorder_->finish(ticket, detail::FlightRecorder::State::done, t1);
  OpStats& st = stats_[static_cast<size_t>(op.kind)];
  st.calls++;
  st.bytes += op.bytes();
  st.seconds += std::chrono::duration<double>(t1 - t0).count();
}

// MPCOMM_CHECK: every rank contributes its op's fingerprint to an allgather run by the backend
// itself; any difference is a Mismatch naming this rank's call and the other rank's.
void Communicator::verify_fingerprints(const Op& op) {
  const detail::Fingerprint mine = detail::fingerprint(op);
  std::vector<detail::Fingerprint> all(static_cast<size_t>(size_));
  Op probe{.kind = OpKind::allgather, .seq = op.seq, .send = &mine, .recv = all.data(), .count = sizeof mine,
           .dtype = DataType::uint8, .fingerprint_probe = true};
  run(probe);
  for (int r = 0; r < size_; ++r)
    if (!(all[static_cast<size_t>(r)] == mine))
      throw Mismatch("mpcomm: " + detail::describe(op, *this) + ": rank " + std::to_string(r) + " called " +
                     detail::describe(all[static_cast<size_t>(r)]) + " (found by MPCOMM_CHECK)");
}

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op) {
  Op o{.kind = OpKind::allreduce, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op};
  checked(o);
}

void Communicator::broadcast(void* buf, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::broadcast, .send = buf, .recv = buf, .count = count, .dtype = dt, .root = root};
  checked(o);
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root) {
  Op o{.kind = OpKind::reduce, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op, .root = root};
  checked(o);
}

void Communicator::allgather(const void* send, void* recv, size_t count, DataType dt) {
  Op o{.kind = OpKind::allgather, .send = send, .recv = recv, .count = count, .dtype = dt};
  checked(o);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DataType dt, ReduceOp op) {
  Op o{.kind = OpKind::reduce_scatter, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op};
  checked(o);
}

void Communicator::gather(const void* send, void* recv, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::gather, .send = send, .recv = recv, .count = count, .dtype = dt, .root = root};
  checked(o);
}

void Communicator::scatter(const void* send, void* recv, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::scatter, .send = send, .recv = recv, .count = count, .dtype = dt, .root = root};
  checked(o);
}

void Communicator::alltoall(const void* send, void* recv, size_t count, DataType dt) {
  Op o{.kind = OpKind::alltoall, .send = send, .recv = recv, .count = count, .dtype = dt};
  checked(o);
}

void Communicator::barrier() {
  Op o{.kind = OpKind::barrier};
  checked(o);
}

bool Communicator::staged() const { return options_.device.kind == Device::cuda || options_.staging > 0; }

// Host staging for the CPU backends on device buffers. Buffers that overlap (the in-place layouts)
// share one host region so the backend sees the same layout; the receive side is copied in too when it
// holds input (in place, or the broadcast root's buffer), and copied back out after the op.
void Communicator::run_staged(const Op& op, size_t send_n, size_t recv_n) {
  const char* s = static_cast<const char*>(op.send);
  char* r = static_cast<char*>(op.recv);
  const bool joint = overlap({s, send_n}, {r, recv_n});
  const bool recv_is_input = joint || (op.kind == OpKind::broadcast && op.root == rank_);
  const char* lo = joint ? std::min<const char*>(s, r) : nullptr;
  const size_t send_at = 0, recv_at = joint ? 0 : (send_n + 63) / 64 * 64;
  const size_t need = joint ? static_cast<size_t>(std::max(s + send_n, static_cast<const char*>(r) + recv_n) - lo)
                            : recv_at + recv_n;
  if (need > staging_bytes_) {
    staging_.reset(static_cast<char*>(device::alloc_pinned(need)), device::release_pinned);
    staging_bytes_ = need;
  }
  char* h = staging_.get();
  Op staged = op;
  if (joint) {
    staged.send = h + (s - lo);
    staged.recv = h + (r - lo);
    device::copy(h, lo, need);
  } else {
    if (send_n > 0) {
      staged.send = h + send_at;
      device::copy(h + send_at, s, send_n);
    }
    if (recv_n > 0) {
      staged.recv = h + recv_at;
      if (recv_is_input) device::copy(h + recv_at, r, recv_n);
    }
    if (op.kind == OpKind::broadcast) staged.send = staged.recv;
  }
  run(staged);
  if (recv_n > 0) device::copy(r, staged.recv, recv_n);
}

namespace {

// A point-to-point op failed (to start, or in its wait): its entry is FAILED, and the record is written
// out unless the call was only rejected.
void record_failure(detail::FlightRecorder& rec, uint64_t ticket, const Error& e, const std::string& who,
                    const std::string& tag) {
  rec.finish(ticket, detail::FlightRecorder::State::failed, std::chrono::steady_clock::now(), e.what());
  if (e.code() != ErrorCode::invalid_argument && e.code() != ErrorCode::unsupported) rec.write_once(who, tag);
}

// A point-to-point request as the flight recorder sees it: done when it completes, failed (and the
// record written out) when its wait throws.
class RecordedRequest : public detail::RequestState {
 public:
  RecordedRequest(std::shared_ptr<detail::RequestState> inner, std::shared_ptr<detail::FlightRecorder> rec,
                  uint64_t ticket, std::string who, std::string tag)
      : inner_(std::move(inner)), rec_(std::move(rec)), ticket_(ticket), who_(std::move(who)), tag_(std::move(tag)) {}
  void wait() override {
    try {
      inner_->wait();
    } catch (const Error& e) {
      failed(e);
      throw;
    }
    rec_->finish(ticket_, detail::FlightRecorder::State::done, std::chrono::steady_clock::now());
  }
  bool test() override {
    bool done = false;
    try {
      done = inner_->test();
    } catch (const Error& e) {
      failed(e);
      throw;
    }
    if (done) rec_->finish(ticket_, detail::FlightRecorder::State::done, std::chrono::steady_clock::now());
    return done;
  }

 private:
  void failed(const Error& e) { record_failure(*rec_, ticket_, e, who_, tag_); }
  std::shared_ptr<detail::RequestState> inner_;
  std::shared_ptr<detail::FlightRecorder> rec_;
  uint64_t ticket_;
  std::string who_, tag_;
};

// A point-to-point request on device memory, run by a CPU backend on a host copy: a send's copy is
// made before it starts; a receive's is copied to the device once it completes.
class StagedRequest : public detail::RequestState {
 public:
  StagedRequest(std::vector<char> host, void* dev_dst) : host_(std::move(host)), dev_dst_(dev_dst) {}
  void start(std::shared_ptr<detail::RequestState> inner) { inner_ = std::move(inner); }
  char* host() { return host_.data(); }
  void wait() override {
    inner_->wait();
    finish();
  }
  bool test() override {
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    if (dev_dst_ != nullptr && !copied_) device::copy(dev_dst_, host_.data(), host_.size());
    copied_ = true;
  }
  std::vector<char> host_;
  void* dev_dst_;
  std::shared_ptr<detail::RequestState> inner_;
  bool copied_ = false;
};

}  // namespace

// Point-to-point ops are checked the same way but numbered apart from collectives (they need not be
// called by every rank) and run through start_p2p().
Request Communicator::start_p2p_checked(Op& o) {
  std::string aborted = abort_reason();
  if (!aborted.empty())
    throw PeerFailure("mpcomm: " + detail::describe(o, *this) + ": communicator was aborted: " + aborted);
  validate(o, *this);
  o.seq = p2p_seq_++;
  stats_[static_cast<size_t>(o.kind)].calls++;
  stats_[static_cast<size_t>(o.kind)].bytes += o.bytes();
  const uint64_t ticket = recorder_->start(o, std::chrono::steady_clock::now());
  try {
    return start_recorded_p2p(o, ticket);
  } catch (const Error& e) {  // the start itself failed: the entry must not stay RUNNING
    record_failure(*recorder_, ticket, e, recorder_who_, recorder_tag_);
    throw;
  }
}

Request Communicator::start_recorded_p2p(Op& o, uint64_t ticket) {
  auto recorded = [&](std::shared_ptr<detail::RequestState> st) {
    return Request(std::make_shared<RecordedRequest>(std::move(st), recorder_, ticket, recorder_who_, recorder_tag_));
  };
  if (!staged() || takes_device_buffers() || o.bytes() == 0) return recorded(start_p2p(o));
  const bool is_send = o.kind == OpKind::send;
  auto staged = std::make_shared<StagedRequest>(std::vector<char>(o.bytes()), is_send ? nullptr : o.recv);
  Op h = o;
  if (is_send) {
    device::copy(staged->host(), o.send, o.bytes());
    h.send = staged->host();
  } else {
    h.recv = staged->host();
  }
  staged->start(start_p2p(h));
  return recorded(staged);
}

Request Communicator::isend(const void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::send, .send = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  return start_p2p_checked(o);
}

Request Communicator::irecv(void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::recv, .recv = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  return start_p2p_checked(o);
}

void Communicator::send(const void* buf, size_t count, DataType dt, int peer, int tag) {
  auto t0 = std::chrono::steady_clock::now();
  isend(buf, count, dt, peer, tag).wait();
  stats_[static_cast<size_t>(OpKind::send)].seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Communicator::recv(void* buf, size_t count, DataType dt, int peer, int tag) {
  auto t0 = std::chrono::steady_clock::now();
  irecv(buf, count, dt, peer, tag).wait();
  stats_[static_cast<size_t>(OpKind::recv)].seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Communicator::abort(const std::string& reason) { on_abort(ErrorCode::peer_failure, "rank " + std::to_string(rank_) + " aborted: " + reason); }

// ---- split ----------------------------------------------------------------------------------------

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  std::string aborted = abort_reason();
  if (!aborted.empty())
    throw PeerFailure("mpcomm: split on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " [" +
                      backend_ + "]: communicator was aborted: " + aborted);
  return split_impl(color, key);
}

std::unique_ptr<Communicator> Communicator::split_impl(int color, int key) {
  // Every rank learns every (color, key) through this communicator's own allgather; the new group's
  // store is a private prefix named after that allgather's sequence number, so it is unique.
  uint64_t seq = seq_;
  int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  allgather(mine, all.data(), 2, DataType::int64);
  if (color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  auto child_store = std::make_shared<PrefixStore>(
      "split" + std::to_string(seq) + "/color" + std::to_string(color), store_);
  return make_child(std::move(child_store), new_rank, members);
}

std::unique_ptr<Communicator> Communicator::make_child(std::shared_ptr<Store> store, int new_rank,
                                                       const std::vector<int>& members) {
  return create(backend_, std::move(store), new_rank, static_cast<int>(members.size()), options_);
}

}  // namespace mpcomm
