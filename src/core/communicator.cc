// The public Communicator: each call fills an Op and hands it to the front door (core/front_door.h), which
// checks, numbers, records and runs it on the backend. Also the public Request.
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

using detail::Op;

void Request::wait() {
  if (!state_) throw InvalidArgument("mpcomm: wait() on an empty Request");
  state_->wait();
}

bool Request::test() {
  if (!state_) throw InvalidArgument("mpcomm: test() on an empty Request");
  return state_->test();
}

int Request::source() const { return state_ ? state_->source() : -1; }

void Request::on_complete(std::function<void(std::exception_ptr)> fn) {
  if (!state_) throw InvalidArgument("mpcomm: on_complete() on an empty Request");
  if (!fn) throw InvalidArgument("mpcomm: on_complete() with an empty function");
  state_->on_complete(std::move(fn));
}

void detail::RequestState::on_complete(std::function<void(std::exception_ptr)>) {
  throw Unsupported("mpcomm: on_complete() is not available on this request");
}

Communicator::Communicator(std::shared_ptr<detail::FrontDoor> core)
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

int Communicator::recv(void* buf, size_t count, DataType dt, int peer, int tag) {
  Op o{.kind = OpKind::recv, .recv = buf, .count = count, .dtype = dt, .peer = peer, .tag = tag};
  return core_->p2p(o);
}

void Communicator::abort(const std::string& reason) {
  core_->abort(ErrorCode::peer_failure, "rank " + std::to_string(rank_) + " aborted: " + reason);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) { return core_->split(color, key); }

std::unique_ptr<Communicator> Communicator::grow(int n) { return core_->grow(n); }

std::unique_ptr<Communicator> Communicator::shrink(const std::vector<int>& exclude) { return core_->shrink(exclude); }

}  // namespace mpcomm
