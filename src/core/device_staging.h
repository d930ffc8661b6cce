// Staging: an op's buffers that live in other memory than the backend runs on are copied through
// memory of the backend's kind — device buffers through page-locked host memory for the CPU backends,
// host buffers through GPU memory for nccl. The layout rules live here once; a backend only says how to
// get and copy its kind of memory (StagingMemory).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/op.h"

namespace mpcomm::detail {

// Memory of one kind, and copies between it and the caller's buffers.
class StagingMemory {
 public:
  virtual ~StagingMemory() = default;
  // At least `bytes` of staging memory for one collective at a time, reused across calls.
  virtual char* area(size_t bytes) = 0;
  // Caller's buffer → staging. May be asynchronous until ready().
  virtual void copy_in(char* staged, const void* user, size_t n) = 0;
  // Every copy_in of an op issued: what the backend runs next must see them.
  virtual void ready() {}
  // Staging → caller's buffer; complete on return.
  virtual void copy_out(void* user, const char* staged, size_t n) = 0;
  // Memory of its own for one send or receive (several may be in flight); release() takes it back.
  // `maybe_in_use`: the operation may still read or write it (a request dropped before completing).
  virtual char* alloc(size_t n) = 0;
  virtual void release(char* p, bool maybe_in_use) noexcept = 0;
};

// Page-locked host memory (plain host memory without CUDA), copied with device::copy.
std::unique_ptr<StagingMemory> host_staging();

// Which of an op's buffers go through staging memory.
struct StageWhich {
  bool send = false, recv = false;
  bool any() const { return send || recv; }
};

// Runs `run` on a copy of `op` whose `which` buffers are replaced by staging memory: buffers that overlap
// (the in-place layouts) share one staged region, so the backend sees the same layout; the receive
// buffer is copied in too when it holds input (in place, or the broadcast root's buffer); results are
// copied back after run (alltoallv, allgatherv: each receive block, not the bytes between them).
// `spans`: the bytes of each buffer that matter on this rank.
void run_staged(const Op& op, const BufferSpans& spans, int rank, StageWhich which, StagingMemory& mem,
                const std::function<void(const Op&)>& run);

// A send or receive on staging memory: a send's data is copied in before `start` posts it; a receive's
// is copied out once it completes. Returns the request to wait on.
std::shared_ptr<RequestState> start_staged(const Op& op, StagingMemory& mem,
                                           const std::function<std::shared_ptr<RequestState>(const Op&)>& start);

}  // namespace mpcomm::detail
