// Single copy between processes of this host: one reads (or writes) the other's buffer with
// process_vm_readv (process_vm_writev), so a message crosses once, not through a shared-memory ring
// twice. Whether the kernel allows it between two processes (its ptrace rules, a container's seccomp
// profile) is probed once per peer: every engine publishes in its doorbell the address of a word of its
// own and that word's value, and a peer reads the word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/native/engine/frame.h"

namespace mpcomm::native {

class ShmSegment;

class SingleCopy {
 public:
  // enabled: MPCOMM_SINGLE_COPY. Publishes this rank's probe word (when it has a doorbell, my_local >= 0).
  SingleCopy(bool enabled, int rank, const std::vector<PeerInfo>& info, const ShmSegment* seg, int my_local);
  bool enabled() const { return enabled_; }
  // Whether this rank may read and write `peer`'s memory: 1 yes, -1 no, 0 not known yet (the peer has
  // not published its probe word). Probed once, when the peer's word is there.
  int probe(int peer);
  bool usable(int peer) { return probe(peer) > 0; }
  // Copies n bytes between `local` and `peer`'s memory at `remote` (write: into the peer's), in as many
  // calls as the kernel needs. Returns 0, or the errno of the call that failed.
  int copy(int peer, char* local, uint64_t remote, size_t n, bool write) const;

 private:
  bool enabled_;
  int rank_;
  const std::vector<PeerInfo>& info_;
  const ShmSegment* seg_;
  std::vector<int8_t> ok_;  // per peer: probe()'s answer once known
};

}  // namespace mpcomm::native
