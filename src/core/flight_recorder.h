// The flight recorder: each communicator keeps its last N operations (op, count, dtype, reduce op,
// root, peer, tag, sequence number, state, start time, duration and the algorithm the backend ran). When an operation fails with a
// timeout or a peer failure, the record is written out (stderr, or a file in MPCOMM_TRACE_DIR), so that
// the records of all ranks side by side show which rank was behind and where (NCCL's flight recorder and
// PyTorch's TORCH_NCCL_TRACE_BUFFER_SIZE idea). MPCOMM_TRACE_ENTRIES sets N (0 turns it off).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/op.h"

namespace mpcomm::detail {

class FlightRecorder {
 public:
  // queued: a non-blocking op issued behind others, not started yet.
  enum class State : uint8_t { queued, running, done, failed };
  // The driving thread finishes ops that succeed without taking the lock (state, end and algorithm are
  // atomics); everything else is written and read under mu_.
  struct Entry {
    Op op;                 // buffers are not kept: only what describes the call
    std::atomic<State> state{State::running};
    uint64_t start = 0;    // OpClock: when it was issued, then when it started
    std::atomic<uint64_t> end{0};                   // OpClock: when it ended (0 until then)
    std::atomic<const char*> algorithm{nullptr};    // what the backend ran
    std::string error;     // first line of the failure
  };

  explicit FlightRecorder(size_t capacity);
  size_t capacity() const { return ring_.size(); }

  // Times are OpClock readings (the caller's, which it also uses for its own statistics: one clock read
  // per end of an op).
  // Records op at `at` (running, or queued behind other ops); returns a ticket for the calls below.
  uint64_t start(const Op& op, uint64_t at, State state = State::running);
  // A queued op starts running at `at`.
  void running(uint64_t ticket, uint64_t at);
  // Marks the op of `ticket` done or failed at `at`, with the algorithm the backend ran (no-op when the
  // ring has moved past it).
  void finish(uint64_t ticket, State state, uint64_t at, const char* algorithm, const std::string& error = "");

  // The record as text, oldest first; `who` heads it (rank, size, backend, host, pid).
  std::string dump(const std::string& who) const;
  // Writes dump() once per recorder: to MPCOMM_TRACE_DIR/mpcomm-trace-<tag>.txt when that is set, else to
  // stderr. Returns where it went. Later calls do nothing and return "".
  std::string write_once(const std::string& who, const std::string& file_tag);

 private:
  Entry* entry(uint64_t ticket);  // null when the ring has moved past it
  mutable std::mutex mu_;  // ops may end on another thread than the one that issued them
  std::vector<Entry> ring_;
  std::atomic<uint64_t> next_{0};  // tickets handed out so far (advanced under mu_)
  bool written_ = false;
  uint64_t t0_;
};

}  // namespace mpcomm::detail
