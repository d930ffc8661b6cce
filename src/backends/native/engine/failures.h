// The native engine's failures: which op errors name, the first failure recorded (by the driving thread,
// or by an abort from any other), how the peers are told (the host's shared-memory abort record, the
// job store's abort key), and the peers' reports looked up while waiting.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "bootstrap/abort_record.h"
#include "core/op.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm::native {

class ShmSegment;

class Failures {
 public:
  // abort_store: where failures are published and looked up (the job's root store, or with Options::elastic
  // the communicator's own), asked at most every `store_every` by a long wait.
  Failures(int rank, int size, const ShmSegment* seg, std::shared_ptr<Store> abort_store,
           std::chrono::milliseconds store_every);

  // The op whose name errors carry (it must live until the next begin()).
  void begin(const detail::Op* op) { op_ = op; }
  const detail::Op* op() const { return op_; }
  // "allreduce #12 (count 1000, float32, sum) on rank 1 of 4 [native]", or "rank 1" before any op.
  std::string context() const;

  // Fails the current op: "mpcomm: <op on this rank>: msg", published as this communicator's abort
  // reason (so that the other ranks fail too), then thrown as the error of `code`.
  [[noreturn]] void fail(ErrorCode code, const std::string& msg);
  // Records the first failure and tells the peers (shared-memory abort record, store key mpcomm/abort).
  void publish(ErrorCode code, const std::string& msg);
  std::string reason() const;
  // Whether a failure is recorded (any thread); then throw_recorded() throws it for the current op.
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  [[noreturn]] void throw_recorded() const;

  // A failure another rank of this host published in the segment: recorded and thrown as its own kind.
  void check_host_reports();
  // A failure reported through the store (any host; looked up at most every store_every): recorded, kept in
  // the segment for this host's ranks, and thrown.
  void check_store_reports();
  // " (first failure reported: ...)" when a peer reported one, for errors that may only follow from it.
  std::string first_reported();

 private:
  bool record(ErrorCode code, const std::string& msg);  // false when one was recorded before

  int rank_, size_;
  const ShmSegment* seg_;
  AbortWatch watch_;
  const detail::Op* op_ = nullptr;
  mutable std::mutex mu_;
  std::string msg_;
  ErrorCode code_ = ErrorCode::internal;
  std::atomic<bool> aborted_{false};
};

}  // namespace mpcomm::native
