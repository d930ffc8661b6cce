// How one mpcomm op reaches NCCL: a collective as NCCL calls on the communicator's stream (enqueue_op), a
// send or receive posted and waited for (P2PRequest), host buffers staged through GPU memory (DeviceStaging).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "backends/nccl/nccl_state.h"
#include "core/backend.h"
#include "core/device_staging.h"
#include "core/op.h"
#include "net/socket.h"

namespace mpcomm::nccl {

// ---- collectives ---------------------------------------------------------------------------------

// What each collective runs, for the flight recorder.
const char* nccl_call(OpKind k);

// Enqueues `op` (device pointers only) on the NCCL stream. `tmp`: scratch for the alltoall in-place copy
// or the barrier word.
void enqueue_op(CommState& st, const Op& op, const ErrorSubject& what, net::Deadline deadline, char* tmp);

// ---- point to point -------------------------------------------------------------------------------

// A send or receive: start() posts it on the CommState; the first wait() or test() of any posted operation
// (or the next collective) hands every posted one to NCCL as one group (CommState::flush).
class P2PRequest final : public detail::RequestState {
 public:
  P2PRequest(std::shared_ptr<CommState> st, const Op& op, std::string what)
      : st_(std::move(st)), op_(op), what_(std::move(what)) {}

  void start();
  void wait() override;
  bool test() override;

 private:
  const char* call() const { return op_.kind == OpKind::send ? "ncclSend" : "ncclRecv"; }

  std::shared_ptr<CommState> st_;
  Op op_;
  ErrorSubject what_;
  std::shared_ptr<P2PSlot> slot_;
  bool done_ = false;
};

// ---- staging: host buffers through GPU memory ----------------------------------------------------------

// Copies in go on the copy stream and the NCCL stream waits for them on the device (ready()); copies out
// go on the copy stream once the op has completed, and are waited for, bounded.
class DeviceStaging final : public detail::StagingMemory {
 public:
  explicit DeviceStaging(CommState& st);
  ~DeviceStaging() override;
  char* area(size_t bytes) override;
  void copy_in(char* staged, const void* user, size_t n) override;
  void ready() override;
  void copy_out(void* user, const char* staged, size_t n) override;
  char* alloc(size_t n) override;
  void release(char* p, bool maybe_in_use) noexcept override;

 private:
  CommState& st_;
  ErrorSubject what_;
  char* area_ = nullptr;
  size_t area_bytes_ = 0;
};

}  // namespace mpcomm::nccl
