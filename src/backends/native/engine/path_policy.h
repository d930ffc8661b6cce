// How the engine's messages to a rank of this host travel: through the shared-memory ring (the sender
// copies into it, the receiver out of it), or by single copy (the receiver reads the sender's buffer with
// process_vm_readv, and acknowledges). Decided once, when the communicator is created, from the
// selection table's rows send.path (point-to-point sends) and collective.path (the messages of
// collectives) for the communicator's facts (selection/selection.cc makes it); the engine looks a
// message's size up here. Messages to ranks of other hosts always go through their TCP link.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpcomm::native {

class PathPolicy {
 public:
  enum Kind { p2p = 0, collective = 1 };
  // The sizes [lo, hi] (bytes, both included) that go by single copy.
  struct Span {
    size_t lo, hi;
  };
  void set(Kind k, std::vector<Span> single) {
    single_[k] = std::move(single);
    from_[k] = SIZE_MAX;
    for (const Span& s : single_[k]) from_[k] = std::min(from_[k], s.lo);
  }
  const std::vector<Span>& spans(Kind k) const { return single_[k]; }
  // The smallest size that may go by single copy (SIZE_MAX: none): below it, no span to look through.
  size_t single_copy_from(Kind k) const { return from_[k]; }
  bool single_copy(Kind k, size_t bytes) const {
    for (const Span& s : single_[k])
      if (bytes >= s.lo && bytes <= s.hi) return true;
    return false;
  }

 private:
  std::vector<Span> single_[2];  // none: every message through the ring
  size_t from_[2] = {SIZE_MAX, SIZE_MAX};
};

}  // namespace mpcomm::native
