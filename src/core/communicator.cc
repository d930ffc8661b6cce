// The public Communicator: each call fills an Op and hands it to the front door (core/core.h), which
// checks, numbers, records and runs it on the backend. Also the Op helpers every layer uses.
#include <unistd.h>

#include <algorithm>

#include "core/front_door.h"
#include "core/op.h"
#include "log/log.h"
#include "net/socket.h"
#include "settings/settings.h"
#include "mpcomm/store.h"
#include "mpcomm/communicator.h"

namespace mpcomm {
namespace detail {

namespace {

// Bytes from the buffer's start to the end of its last non-empty block.
size_t extent(std::span<const size_t> counts, std::span<const size_t> displs, size_t es) {
  size_t end = 0;
  for (size_t p = 0; p < counts.size(); ++p)
    if (counts[p] > 0) end = std::max(end, (displs[p] + counts[p]) * es);
  return end;
}

}  // namespace

size_t recv_total(const Op& op) {
  size_t total = 0;
  if (op.v != nullptr)
    for (size_t c : op.v->recv_counts) total += c;
  return total;
}

BufferSpans buffer_spans(const Op& op, int rank, int size) {
  if (op.v != nullptr) {
    const size_t es = dtype_size(op.dtype);
    const VCounts& v = *op.v;
    return {op.kind == OpKind::alltoallv ? extent(v.send_counts, v.send_displs, es) : op.count * es,
            extent(v.recv_counts, v.recv_displs, es)};
  }
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
    case OpKind::split:
    case OpKind::alltoallv:
    case OpKind::allgatherv: break;
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
  f.count = op.kind == OpKind::alltoallv ? 0 : op.kind == OpKind::allgatherv ? recv_total(op) : op.count;
  return f;
}

std::string describe(const Fingerprint& f) {
  auto kind = static_cast<OpKind>(f.kind);
  std::string s = std::string(to_string(kind)) + " #" + std::to_string(f.seq);
  if (kind == OpKind::barrier) return s;
  const std::string dtype(to_string(static_cast<DataType>(f.dtype)));
  if (kind == OpKind::alltoallv) return s + " (" + dtype + ")";
  if (kind == OpKind::allgatherv) return s + " (total " + std::to_string(f.count) + ", " + dtype + ")";
  s += " (count " + std::to_string(f.count) + ", " + dtype;
  if (f.redop != 0xff) s += ", " + std::string(to_string(static_cast<ReduceOp>(f.redop)));
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  return s + ")";
}

std::string describe(const Op& op, int rank, int size, std::string_view backend) {
  std::string s;
  if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    s = std::string(to_string(op.kind)) + " #" + std::to_string(op.seq) + " (count " + std::to_string(op.count) +
        ", " + std::string(to_string(op.dtype)) + (op.kind == OpKind::send ? ", to rank " : ", from rank ") +
        std::to_string(op.peer) + ", tag " + std::to_string(op.tag) + ")";
  } else if (op.v != nullptr) {
    s = describe(fingerprint(op));
    s.insert(s.size() - 1, "; " + std::to_string(op.count) + " elements out, " + std::to_string(recv_total(op)) + " in");
  } else {
    s = describe(fingerprint(op));
  }
  return s + " on rank " + std::to_string(rank) + " of " + std::to_string(size) + " [" + std::string(backend) + "]";
}

}  // namespace detail

using detail::Op;

std::string detail::choose_bind_address(const Options& opts, const Store* store) {
  std::string addr = param_string(opts, "MPCOMM_ADDR");
  if (!addr.empty()) return addr;
  const std::string ifname = param_string(opts, "MPCOMM_IFNAME");
  if (!ifname.empty()) {
    addr = net::interface_address(ifname);
    MPCOMM_LOG(info, "advertising %s (MPCOMM_IFNAME=%s)", addr.c_str(), ifname.c_str());
    return addr;
  }
  // The store's host, else MASTER_ADDR: the host every rank reaches, so the route there leaves by the
  // interface the other hosts reach this one on.
  std::string toward, why;
  while (const auto* p = dynamic_cast<const PrefixStore*>(store)) store = p->base().get();
  if (const auto* tcp = dynamic_cast<const TcpStore*>(store)) {
    toward = tcp->host();
    why = "the store's host";
  } else if (const char* m = std::getenv("MASTER_ADDR"); m != nullptr && *m != '\0') {
    toward = m;
    why = "MASTER_ADDR";
  }
  if (!toward.empty() && !net::is_loopback_literal(toward) && net::is_loopback(toward)) {
    // A name for this machine that resolves to loopback here only (Debian's "127.0.1.1 <hostname>"):
    // the other machines reach this one on its network interface.
    try {
      addr = net::interface_address("^lo");
      MPCOMM_LOG(warn, "%s %s resolves to a loopback address on this machine; advertising %s, the first address of "
                 "an interface other than lo (set MPCOMM_IFNAME or MPCOMM_ADDR to choose)", why.c_str(), toward.c_str(),
                 addr.c_str());
      return addr;
    } catch (const Error&) {
      return "127.0.0.1";  // no other interface: a job of this machine only
    }
  }
  if (!toward.empty() && !net::is_loopback(toward)) {
    try {
      addr = net::address_toward(toward);
      MPCOMM_LOG(info, "advertising %s: the address that routes to %s %s", addr.c_str(), why.c_str(), toward.c_str());
      return addr;
    } catch (const Error& e) {
      MPCOMM_LOG(warn, "no local address routes to %s %s (%s); advertising 127.0.0.1 (set MPCOMM_IFNAME or MPCOMM_ADDR)",
                 why.c_str(), toward.c_str(), e.what());
    }
  }
  return "127.0.0.1";
}

Options Options::resolved() const {
  Options o = *this;
  check_params(o);
  if (o.timeout.count() <= 0) {
    double s = param_double(*this, "MPCOMM_TIMEOUT");
    if (s <= 0) throw InvalidArgument("mpcomm: MPCOMM_TIMEOUT must be a positive number of seconds");
    o.timeout = Millis(static_cast<int64_t>(s * 1000));
  }
  if (o.host_id.empty()) {
    o.host_id = param_string(*this, "MPCOMM_HOST_ID");
    if (o.host_id.empty()) {
      char buf[256] = {};
      ::gethostname(buf, sizeof buf - 1);
      o.host_id = buf;
    }
  }
  if (o.check < 0) o.check = param_int(*this, "MPCOMM_CHECK") != 0 ? 1 : 0;
  if (o.staging < 0) o.staging = param_int(*this, "MPCOMM_STAGING") != 0 ? 1 : 0;
  if (o.token.empty()) o.token = param_string(*this, "MPCOMM_TOKEN");
  if (o.bind_addr.empty()) o.bind_addr = detail::choose_bind_address(*this, nullptr);
  if (o.device.kind == Device::cpu) o.device = parse_device(param_string(*this, "MPCOMM_DEVICE"));
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

void Request::on_complete(std::function<void(std::exception_ptr)> fn) {
  if (!state_) throw InvalidArgument("mpcomm: on_complete() on an empty Request");
  if (!fn) throw InvalidArgument("mpcomm: on_complete() with an empty function");
  state_->on_complete(std::move(fn));
}

void detail::RequestState::on_complete(std::function<void(std::exception_ptr)>) {
  throw Unsupported("mpcomm: on_complete() is not available on this request");
}

Communicator::Communicator(std::shared_ptr<detail::Core> core)
    : core_(std::move(core)),
      backend_(core_->backend().name()),
      rank_(core_->backend().rank()),
      size_(core_->backend().size()),
      topology_(core_->backend().topology()),
      options_(core_->backend().options()) {}

Communicator::~Communicator() { core_->close(); }

uint64_t Communicator::sequence() const { return core_->sequence(); }
std::array<OpStats, kNumOpKinds> Communicator::stats() const { return core_->stats(); }
std::string Communicator::flight_record() const { return core_->flight_record(); }

// ---- the public calls: each fills an Op for the one checked entry point ---------------------------------

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op) {
  Op o{.kind = OpKind::allreduce, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op};
  core_->collective(o);
}

void Communicator::broadcast(void* buf, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::broadcast, .send = buf, .recv = buf, .count = count, .dtype = dt, .root = root};
  core_->collective(o);
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root) {
  Op o{.kind = OpKind::reduce, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op, .root = root};
  core_->collective(o);
}

void Communicator::allgather(const void* send, void* recv, size_t count, DataType dt) {
  Op o{.kind = OpKind::allgather, .send = send, .recv = recv, .count = count, .dtype = dt};
  core_->collective(o);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DataType dt, ReduceOp op) {
  Op o{.kind = OpKind::reduce_scatter, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op};
  core_->collective(o);
}

void Communicator::gather(const void* send, void* recv, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::gather, .send = send, .recv = recv, .count = count, .dtype = dt, .root = root};
  core_->collective(o);
}

void Communicator::scatter(const void* send, void* recv, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::scatter, .send = send, .recv = recv, .count = count, .dtype = dt, .root = root};
  core_->collective(o);
}

void Communicator::alltoall(const void* send, void* recv, size_t count, DataType dt) {
  Op o{.kind = OpKind::alltoall, .send = send, .recv = recv, .count = count, .dtype = dt};
  core_->collective(o);
}

void Communicator::barrier() {
  Op o{.kind = OpKind::barrier};
  core_->collective(o);
}

Request Communicator::iallreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op) {
  Op o{.kind = OpKind::allreduce, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op};
  return core_->icollective(o);
}

Request Communicator::ibroadcast(void* buf, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::broadcast, .send = buf, .recv = buf, .count = count, .dtype = dt, .root = root};
  return core_->icollective(o);
}

Request Communicator::ireduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root) {
  Op o{.kind = OpKind::reduce, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op, .root = root};
  return core_->icollective(o);
}

Request Communicator::iallgather(const void* send, void* recv, size_t count, DataType dt) {
  Op o{.kind = OpKind::allgather, .send = send, .recv = recv, .count = count, .dtype = dt};
  return core_->icollective(o);
}

Request Communicator::ireduce_scatter(const void* send, void* recv, size_t count, DataType dt, ReduceOp op) {
  Op o{.kind = OpKind::reduce_scatter, .send = send, .recv = recv, .count = count, .dtype = dt, .redop = op};
  return core_->icollective(o);
}

Request Communicator::igather(const void* send, void* recv, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::gather, .send = send, .recv = recv, .count = count, .dtype = dt, .root = root};
  return core_->icollective(o);
}

Request Communicator::iscatter(const void* send, void* recv, size_t count, DataType dt, int root) {
  Op o{.kind = OpKind::scatter, .send = send, .recv = recv, .count = count, .dtype = dt, .root = root};
  return core_->icollective(o);
}

Request Communicator::ialltoall(const void* send, void* recv, size_t count, DataType dt) {
  Op o{.kind = OpKind::alltoall, .send = send, .recv = recv, .count = count, .dtype = dt};
  return core_->icollective(o);
}

// The uneven collectives: count is what this rank sends (op.h); the sizes are checked by the front door.
namespace {

std::span<const size_t> view(SizeSpan s) { return {s.data(), s.size()}; }

size_t sum_or_zero(SizeSpan counts) {
  size_t total = 0;
  for (size_t c : counts) total = c > SIZE_MAX - total ? SIZE_MAX : total + c;  // an overflow is refused later
  return total;
}

}  // namespace

void Communicator::alltoallv(const void* send, SizeSpan send_counts, SizeSpan send_displs, void* recv,
                             SizeSpan recv_counts, SizeSpan recv_displs, DataType dt) {
  const detail::VCounts v{view(send_counts), view(send_displs), view(recv_counts), view(recv_displs)};
  Op o{.kind = OpKind::alltoallv, .send = send, .recv = recv, .count = sum_or_zero(send_counts), .dtype = dt, .v = &v};
  core_->collective(o);
}

void Communicator::allgatherv(const void* send, size_t send_count, void* recv, SizeSpan recv_counts,
                              SizeSpan recv_displs, DataType dt) {
  const detail::VCounts v{{}, {}, view(recv_counts), view(recv_displs)};
  Op o{.kind = OpKind::allgatherv, .send = send, .recv = recv, .count = send_count, .dtype = dt, .v = &v};
  core_->collective(o);
}

Request Communicator::ialltoallv(const void* send, SizeSpan send_counts, SizeSpan send_displs, void* recv,
                                 SizeSpan recv_counts, SizeSpan recv_displs, DataType dt) {
  const detail::VCounts v{view(send_counts), view(send_displs), view(recv_counts), view(recv_displs)};
  Op o{.kind = OpKind::alltoallv, .send = send, .recv = recv, .count = sum_or_zero(send_counts), .dtype = dt, .v = &v};
  return core_->icollective(o);
}

Request Communicator::iallgatherv(const void* send, size_t send_count, void* recv, SizeSpan recv_counts,
                                  SizeSpan recv_displs, DataType dt) {
  const detail::VCounts v{{}, {}, view(recv_counts), view(recv_displs)};
  Op o{.kind = OpKind::allgatherv, .send = send, .recv = recv, .count = send_count, .dtype = dt, .v = &v};
  return core_->icollective(o);
}

Request Communicator::ibarrier() {
  Op o{.kind = OpKind::barrier};
  return core_->icollective(o);
}

Request Communicator::isend(const void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::send, .send = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  return core_->ip2p(o);
}

Request Communicator::irecv(void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::recv, .recv = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  return core_->ip2p(o);
}

void Communicator::send(const void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::send, .send = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  core_->p2p(o);
}

void Communicator::recv(void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::recv, .recv = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  core_->p2p(o);
}

void Communicator::abort(const std::string& reason) {
  core_->abort(ErrorCode::peer_failure, "rank " + std::to_string(rank_) + " aborted: " + reason);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) { return core_->split(color, key); }

}  // namespace mpcomm
