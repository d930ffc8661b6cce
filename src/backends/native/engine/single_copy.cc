// Single copy between processes of this host (single_copy.h), and the engine's frames that go by it:
// offered as a descriptor of the sender's buffer, read by the receiver, acknowledged.
#include "backends/native/engine/single_copy.h"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backends/native/engine/engine.h"
#include "backends/native/transport/shm/shm_segment.h"
#include "kernels/reduce.h"
#include "log/log.h"

namespace mpcomm::native {

static constexpr uint64_t kProbeMagic = 0x6d70636f6d6d5052ull;

SingleCopy::SingleCopy(bool enabled, int rank, const std::vector<PeerInfo>& info, const ShmSegment* seg, int my_local)
    : enabled_(enabled), rank_(rank), info_(info), seg_(seg), ok_(info.size(), 0) {
  if (seg_ != nullptr && my_local >= 0) {
    Doorbell* me = seg_->doorbell(my_local);
    me->probe_value = kProbeMagic ^ static_cast<uint64_t>(::getpid());
    me->probe_addr.store(reinterpret_cast<uint64_t>(&me->probe_value), std::memory_order_release);
  }
}

int SingleCopy::probe(int peer) {
  int8_t& ok = ok_[static_cast<size_t>(peer)];
  if (ok != 0) return ok;
  const PeerInfo& in = info_[static_cast<size_t>(peer)];
  if (!enabled_ || seg_ == nullptr || !in.same_host || in.local < 0) return ok = -1;
  const Doorbell* d = seg_->doorbell(in.local);
  const uint64_t addr = d->probe_addr.load(std::memory_order_acquire);
  if (addr == 0) return 0;  // not published yet: ask again next time
  uint64_t got = 0;
  iovec local{&got, sizeof got}, remote{reinterpret_cast<void*>(addr), sizeof got};
  const bool yes = ::process_vm_readv(in.pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof got) &&
                   got == d->probe_value;
  if (!yes) MPCOMM_LOG(info, "rank %d: no single-copy transfers with rank %d (%s)", rank_, peer, std::strerror(errno));
  return ok = yes ? 1 : -1;
}

int SingleCopy::copy(int peer, char* local_buf, uint64_t remote, size_t n, bool write) const {
  const pid_t pid = static_cast<pid_t>(info_[static_cast<size_t>(peer)].pid);
  size_t done = 0;
  while (done < n) {
    iovec local{local_buf + done, n - done}, far{reinterpret_cast<void*>(remote + done), n - done};
    ssize_t r = write ? ::process_vm_writev(pid, &local, 1, &far, 1, 0) : ::process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (r <= 0) return r < 0 ? errno : EIO;
    done += static_cast<size_t>(r);
  }
  return 0;
}

// ---- the engine's single-copy frames ------------------------------------------------------------

void Engine::copy_with_peer(int peer, char* local_buf, uint64_t remote, size_t n, bool write) {
  if (const int err = single_copy_.copy(peer, local_buf, remote, n, write); err != 0)
    fail(err == ESRCH ? ErrorCode::peer_failure : ErrorCode::internal,
         std::string(write ? "writing " : "reading ") + std::to_string(n) + " bytes straight " + (write ? "into" : "from") +
             " rank " + std::to_string(peer) + "'s buffer failed: " + std::strerror(err) +
             " (MPCOMM_SINGLE_COPY=0 turns this off)");
}

int Engine::single_copy_state(int rank) { return single_copy_.probe(rank); }

void Engine::ack_p2p(int peer, int32_t token) {
  post_send(peer, kFrameAck, token, detail::Fingerprint{}, nullptr, 0);
}

// Copies (or reduces) a single-copy frame's payload straight out of the sender's buffer, then
// acknowledges it so that the sender's send completes; a p2p descriptor whose receive is not posted yet
// is kept as a lazy frame instead (read_lazy_frames reads it).
void Engine::receive_single_copy(int peer, Peer& p) {
  const size_t total = p.rx_hdr.bytes;
  if (p.rx_hdr.kind == kFrameP2P) {
    const auto token = static_cast<int32_t>(p.rx_desc[1]);
    p.rx_single = false;
    p.rx_in_payload = false;
    if (!p.rx_target) p.rx_target = take_p2p_recv(peer, p, p.rx_hdr);  // posted while the descriptor arrived
    if (!p.rx_target) {
      // Its receive is not posted yet: keep the descriptor (post_recv claims it, progress() reads it).
      auto u = std::make_shared<Unexpected>();
      u->hdr = p.rx_hdr;
      u->lazy = true;
      u->remote = p.rx_desc[0];
      u->token = token;
      u->since = Clock::now();
      keep_unexpected(p, std::move(u));
      ++lazy_frames_;
      return;
    }
    // In one piece: no other reader shares the source.
    Handle x = std::move(p.rx_target);
    copy_with_peer(peer, x->rdata, p.rx_desc[0], total, false);
    x->done_bytes = total;
    x->done = true;
    ack_p2p(peer, token);
    return;
  }
  Xfer& x = *p.rx_target;  // a collective descriptor waits in its link for its receive (on_header)
  if (x.reduce) {
    // In pieces that stay in the cache between the copy and the reduction.
    const size_t es = dtype_size(x.dtype), piece = (256u << 10) / es * es;
    if (bounce_.size() < piece) bounce_.resize(piece);
    for (size_t off = 0; off < total; off += piece) {
      const size_t n = std::min(piece, total - off);
      copy_with_peer(peer, bounce_.data(), p.rx_desc[0] + off, n, false);
      combine(x, off, bounce_.data(), n);
    }
  } else if (total > 0) {
    // When local ranks outnumber CPUs, in pieces with a yield between them: the ranks that share our
    // CPU and read the same source (a flat broadcast's readers) take turns and find the piece still in
    // the cache.
    const size_t piece = crowded_ ? kCrowdedReadPiece : total;
    for (size_t off = 0; off < total; off += piece) {
      copy_with_peer(peer, x.rdata + off, p.rx_desc[0] + off, std::min(piece, total - off), false);
      if (off + piece < total) sched_yield();
    }
  }
  p.rx_got = total;
  x.done_bytes = total;
  p.rx_single = false;
  finish_payload(p);
  post_send(peer, kFrameAck, 0, detail::Fingerprint{}, nullptr, 0);
}

// Reads the payloads of lazy frames whose receive is posted, straight into the receive's buffer, and
// those held kLazyLimit without one into a buffer; acknowledges each. Returns whether it read any.
bool Engine::read_lazy_frames() {
  bool any = false;
  Clock::time_point now{};
  for (int r = 0; r < size_; ++r) {
    auto& list = peers_[static_cast<size_t>(r)].unexpected;
    for (auto it = list.begin(); it != list.end();) {
      Unexpected& u = **it;
      if (!u.lazy) {
        ++it;
        continue;
      }
      if (u.claimant) {
        Xfer& x = *u.claimant;
        copy_with_peer(r, x.rdata, u.remote, x.bytes, false);
        x.done_bytes = x.bytes;
        x.done = true;
      } else {
        if (now == Clock::time_point{}) now = Clock::now();
        if (now - u.since < kLazyLimit) {
          ++it;
          continue;
        }
        buffers_.take(u, u.hdr.bytes);
        copy_with_peer(r, u.data.get(), u.remote, u.hdr.bytes, false);
        u.complete = true;
      }
      u.lazy = false;
      --lazy_frames_;
      any = true;
      ack_p2p(r, u.token);
      it = u.claimant ? list.erase(it) : std::next(it);
    }
  }
  return any;
}

}  // namespace mpcomm::native
