// Frames that arrive before their receive is posted ("unexpected"), and the buffers that hold them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backends/native/engine/frame.h"

namespace mpcomm::native {

// A frame that arrived before its receive was posted, buffered. A receive posted while its payload is
// still arriving takes what came so far and the rest straight from the link (reducing receives, which
// cannot, claim it and take it whole at the end).
struct Unexpected {
  FrameHeader hdr{};
  uint64_t arrival = 0;          // the engine's count of frames kept so far: a receive from any rank takes the earliest
  std::unique_ptr<char[]> data;  // not value-initialized: the payload overwrites it
  size_t capacity = 0;           // of data (a reused buffer may be larger than the payload)
  bool complete = false;
  Handle claimant;  // a reducing receive posted while the payload was still arriving, or a lazy frame's
  // A single-copy p2p frame: only its descriptor came; the payload stays in the sender's buffer until the
  // receive is posted, or until kLazyLimit passed (then it is read into a buffer, so that a program whose
  // ranks all block in sends still ends).
  bool lazy = false;
  uint64_t remote = 0;  // the sender's buffer
  int32_t token = 0;    // the ack's
  std::chrono::steady_clock::time_point since{};
};

// The buffers of unexpected payloads. Large ones are kept for the next (kSpareBuffers at most, the
// larger ones): a fresh buffer of many MiB costs a page fault and a cleared page for every 4 KiB it
// receives, every time.
class UnexpectedBuffers {
 public:
  static constexpr size_t kSpareFrom = size_t{64} << 10;       // smaller ones are not kept
  static constexpr size_t kSpareBuffers = 2;
  static constexpr size_t kSpareMaxBytes = size_t{256} << 20;  // nor larger ones
  // A buffer of at least `bytes` into u.data (the smallest spare that holds it, else a new one).
  void take(Unexpected& u, size_t bytes);
  // u's buffer, kept or freed.
  void give_back(Unexpected& u);

 private:
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> spare_;
};

}  // namespace mpcomm::native
