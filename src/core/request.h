// The front door's request: an op issued through its stream (queued, or started), and how it ended.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/front_door.h"
#include "core/op.h"

namespace mpcomm::detail {

class OpRequest final : public RequestState {
 public:
  enum class Phase : uint8_t { queued, started, done, failed };
  OpRequest(std::shared_ptr<FrontDoor> core, const Op& op, const BufferSpans& spans)
      : core_(std::move(core)), op(op), spans(spans) {}
  void wait() override { core_->wait(*this); }
  bool test() override { return core_->test(*this); }
  void on_complete(std::function<void(std::exception_ptr)> fn) override { core_->on_complete(*this, std::move(fn)); }
  bool ended() const { return phase == Phase::done || phase == Phase::failed; }
  // A receive's sender once it ended well: the peer it named, or the backend's answer for kAnySource (inner
  // is set before the end and never changed).
  int source() const override {
    if (op.kind != OpKind::recv || phase.load() != Phase::done) return -1;
    return op.peer != kAnySource ? op.peer : inner ? inner->source() : -1;
  }
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

  std::shared_ptr<FrontDoor> core_;
  Op op;
  BufferSpans spans;
  uint64_t ticket = 0;  // flight recorder
  uint64_t t0 = 0;      // OpClock reading when it started
  std::chrono::steady_clock::time_point queued_at{};  // when it joined the queue
  // Written under FrontDoor::mu_ once the request is visible to the progress thread; read anywhere.
  std::atomic<Phase> phase{Phase::queued};
  std::shared_ptr<RequestState> inner;  // the backend's request of a started send or receive
  std::exception_ptr error;
  // Request::on_complete's function, until it is called (under FrontDoor::mu_).
  std::function<void(std::exception_ptr)> callback;
  std::atomic<bool> callback_given{false};  // read by the progress thread without mu_

 private:
  std::vector<size_t> counts_;  // own_counts(): every span of vcounts_ points into it (reserved up front)
  VCounts vcounts_;
};

}  // namespace mpcomm::detail
