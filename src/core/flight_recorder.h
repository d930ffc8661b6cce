// The flight recorder: each communicator keeps its last N operations (op, count, dtype, reduce op,
// root, peer, tag, sequence number, state, start time and duration). When an operation fails with a
// timeout or a peer failure, the record is written out (stderr, or a file in MPCOMM_TRACE_DIR), so that
// the records of all ranks side by side show which rank was behind and where (NCCL's flight recorder and
// PyTorch's TORCH_NCCL_TRACE_BUFFER_SIZE idea). MPCOMM_TRACE_ENTRIES sets N (0 turns it off).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/op.h"

namespace mpcomm::detail {

class FlightRecorder {
 public:
  enum class State : uint8_t { running, done, failed };
  struct Entry {
    Op op;                 // buffers are not kept: only what describes the call
    State state = State::running;
    double start_ms = 0;   // since the communicator was created
    double took_ms = -1;   // -1 while running
    std::string error;     // first line of the failure
  };

  explicit FlightRecorder(size_t capacity);
  size_t capacity() const { return ring_.size(); }

  using Time = std::chrono::steady_clock::time_point;
  // Records the start of op at `at` (the caller's clock reading, which it also uses for its own
  // statistics: one clock read per end of an op); returns a ticket for finish().
  uint64_t start(const Op& op, Time at);
  // Marks the op of `ticket` done or failed at `at` (no-op when the ring has moved past it).
  void finish(uint64_t ticket, State state, Time at, const std::string& error = "");

  // The record as text, oldest first; `who` heads it (rank, size, backend, host, pid).
  std::string dump(const std::string& who) const;
  // Writes dump() once per recorder: to MPCOMM_TRACE_DIR/mpcomm-trace-<tag>.txt when that is set, else to
  // stderr. Returns where it went. Later calls do nothing and return "".
  std::string write_once(const std::string& who, const std::string& file_tag);

 private:
  mutable std::mutex mu_;  // p2p requests may complete on another thread than the one that started them
  std::vector<Entry> ring_;
  uint64_t next_ = 0;      // tickets handed out so far
  bool written_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace mpcomm::detail
