// Moving bytes (engine.h): one progress pass reads what every link offers (headers, payloads, reducing
// receives, single-copy descriptors) and writes what its send queue holds, then reads the lazy frames
// whose receives are posted; a wait makes passes until it is done — spinning a few, then yielding the CPU
// between them (MPCOMM_SPIN_US in all) — and leaves the rest (sleeping, health, the deadline) to
// waiting.cc.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backends/native/engine/engine.h"
#include "kernels/reduce.h"

namespace mpcomm::native {

static const char kZeros[64] = {};

void combine(Xfer& x, size_t off, const char* src, size_t len) {
  const void* srcs[2] = {x.own + off, src};
  if (!x.own_first) std::swap(srcs[0], srcs[1]);
  if (x.stream_to != nullptr)
    reduce_into_streamed(x.rdata + off, x.stream_to + off, srcs, 2, len / dtype_size(x.dtype), x.dtype, x.redop);
  else
    reduce_into(x.rdata + off, srcs, 2, len / dtype_size(x.dtype), x.dtype, x.redop);
}

bool Engine::progress_send(int peer, Peer& p) {
  bool moved = false;
  while (!p.sendq.empty()) {
    Xfer& x = *p.sendq.front();
    if (x.single_copy) {
      // The sender's buffer, and for p2p the token its ack will carry (collective acks come in order).
      const uint64_t desc[2] = {reinterpret_cast<uint64_t>(x.sdata),
                                x.kind == kFrameP2P ? static_cast<uint64_t>(x.token) : static_cast<uint64_t>(::getpid())};
      const size_t total = sizeof(FrameHeader) + sizeof desc;
      while (x.done_bytes < total) {
        size_t n = x.done_bytes < sizeof(FrameHeader)
                       ? p.link->write_some(reinterpret_cast<const char*>(&x.hdr) + x.done_bytes, sizeof(FrameHeader) - x.done_bytes)
                       : p.link->write_some(reinterpret_cast<const char*>(desc) + (x.done_bytes - sizeof(FrameHeader)),
                                            total - x.done_bytes);
        if (n == 0) return moved;
        moved = true;
        x.done_bytes += n;
      }
      // Done when the receiver has read it.
      if (x.kind == kFrameP2P)
        p.p2p_awaiting.push_back(p.sendq.front());
      else
        p.awaiting_ack.push_back(p.sendq.front());
      p.sendq.pop_front();
      continue;
    }
    if (x.done_bytes == 0 && x.bytes >= kAlignFrom) {
      int at = p.link->write_offset();
      if (at >= 0) {
        const size_t want = reinterpret_cast<uintptr_t>(x.sdata) & 63, after_hdr = (at + sizeof(FrameHeader)) & 63;
        x.hdr.skip = static_cast<uint32_t>((want - after_hdr) & 63);
      }
    }
    const size_t hsz = sizeof(FrameHeader) + x.hdr.skip, total = hsz + x.bytes;
    while (x.done_bytes < total) {
      size_t n;
      if (x.done_bytes < sizeof(FrameHeader))
        n = p.link->write_some(reinterpret_cast<const char*>(&x.hdr) + x.done_bytes, sizeof(FrameHeader) - x.done_bytes);
      else if (x.done_bytes < hsz)
        n = p.link->write_some(kZeros, hsz - x.done_bytes);
      else
        n = p.link->write_some(x.sdata + (x.done_bytes - hsz), total - x.done_bytes);
      if (n == 0) return moved;
      moved = true;
      x.done_bytes += n;
    }
    x.done = true;
    p.sendq.pop_front();
  }
  return moved;
}

bool Engine::progress_recv(int peer, Peer& p) {
  bool moved = false;
  while (true) {
    if (p.rx_stalled) {
      if (p.coll_recvs.empty()) return moved;
      p.rx_stalled = false;
      on_header(peer, p);  // its receive is posted now
    }
    if (!p.rx_in_payload) {
      size_t n = p.link->read_some(reinterpret_cast<char*>(&p.rx_hdr) + p.rx_hdr_got, sizeof(FrameHeader) - p.rx_hdr_got);
      if (n == 0) return moved;
      moved = true;
      p.rx_hdr_got += n;
      if (p.rx_hdr_got < sizeof(FrameHeader)) return moved;
      p.rx_hdr_got = 0;
      on_header(peer, p);
      if (p.rx_stalled) return moved;
      if (p.rx_hdr.kind == kFrameAck) continue;
    }
    if (p.rx_single) {
      while (p.rx_desc_got < sizeof p.rx_desc) {
        size_t n = p.link->read_some(reinterpret_cast<char*>(p.rx_desc) + p.rx_desc_got, sizeof p.rx_desc - p.rx_desc_got);
        if (n == 0) return moved;
        moved = true;
        p.rx_desc_got += n;
      }
      receive_single_copy(peer, p);
      moved = true;
      continue;
    }
    while (p.rx_skip > 0) {
      char sink[64];
      size_t n = p.link->read_some(sink, p.rx_skip);
      if (n == 0) return moved;
      moved = true;
      p.rx_skip -= n;
    }
    if (p.rx_target && p.rx_target->reduce) {
      size_t before = p.rx_got;
      bool complete = progress_reduce_payload(p);
      moved = moved || p.rx_got != before;
      if (!complete) return moved;
      finish_payload(p);
      continue;
    }
    const size_t total = p.rx_hdr.bytes;
    char* dst = p.rx_target ? p.rx_target->rdata : p.rx_unexp->data.get();
    while (p.rx_got < total) {
      size_t n = p.link->read_some(dst + p.rx_got, total - p.rx_got);
      if (n == 0) return moved;
      moved = true;
      p.rx_got += n;
      if (p.rx_target) p.rx_target->done_bytes = p.rx_got;
    }
    finish_payload(p);
  }
}

// The payload of a reducing receive: straight from the link's memory in whole elements where it can
// (shared memory), else through a bounce buffer. Returns true when every byte has been combined.
bool Engine::progress_reduce_payload(Peer& p) {
  Xfer& x = *p.rx_target;
  const size_t total = p.rx_hdr.bytes, es = dtype_size(x.dtype);
  while (p.rx_got < total) {
    const char* src = nullptr;
    size_t n = x.carry_len == 0 ? p.link->peek(&src, total - p.rx_got) : 0;
    n = std::min(n, total - p.rx_got) / es * es;
    if (n > 0) {
      // Small frames follow their header wherever it ended, so their elements may sit at any address in
      // the ring; the kernels load typed elements, so a misaligned view is first copied out (large
      // payloads are placed aligned, see Link::write_offset, and never take this copy).
      if (reinterpret_cast<uintptr_t>(src) % es != 0) {
        if (bounce_.size() < (64u << 10)) bounce_.resize(64u << 10);
        n = std::min(n, bounce_.size());
        std::memcpy(bounce_.data(), src, n);
        src = bounce_.data();
      }
      combine(x, x.combined, src, n);
      p.link->consume(n);
      p.rx_got += n, x.combined += n;
      continue;
    }
    // No zero-copy view (TCP), or an element split by the end of the ring.
    if (bounce_.size() < (64u << 10)) bounce_.resize(64u << 10);
    std::memcpy(bounce_.data(), x.carry, x.carry_len);
    size_t got = p.link->read_some(bounce_.data() + x.carry_len, std::min(bounce_.size() - 16, total - p.rx_got));
    if (got == 0) return false;
    p.rx_got += got;
    size_t have = x.carry_len + got, whole = have / es * es;
    if (whole > 0) combine(x, x.combined, bounce_.data(), whole);
    x.combined += whole;
    x.carry_len = have - whole;
    std::memcpy(x.carry, bounce_.data() + whole, x.carry_len);
  }
  x.done_bytes = p.rx_got;
  return true;
}

// A link threw: the peer is gone. Only an error if something still needed that peer.
void Engine::link_failed(Peer& p, const PeerFailure& e) {
  p.closed = true;
  p.closed_why = e.what();
  if (p.busy()) fail(ErrorCode::peer_failure, e.what() + failures_.first_reported());
}

bool Engine::progress() {
  bool any = false;
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[r];
    if (!p.link) continue;
    if (p.closed) continue;
    bool moved = false;
    try {
      moved = progress_recv(r, p);
      if (!p.sendq.empty()) moved = progress_send(r, p) || moved;
    } catch (const PeerFailure& e) {
      link_failed(p, e);
      continue;
    }
    if (moved) {
      p.link->notify();
      any = true;
    }
  }
  // After the sends above: a receiver of ours can start reading while we read.
  if (lazy_frames_ > 0 && read_lazy_frames()) {
    any = true;
    for (auto& p : peers_)
      if (p.link && !p.closed && !p.sendq.empty()) p.link->notify();
  }
  return any;
}

// ---- waits ------------------------------------------------------------------------------------------

void Engine::wait(const Handle& h) {
  wait_until([&] { return h->done; }, {h});
}

void Engine::wait_all(const std::vector<Handle>& hs) {
  wait_until(
      [&] {
        for (const auto& h : hs)
          if (!h->done) return false;
        return true;
      },
      hs);
}

bool Engine::test(const Handle& h) {
  if (!notify_due_.empty()) notify_deferred();
  if (!h->done) progress();
  return h->done;
}

// Progress passes before the first yield: many while every local rank has a CPU of its own (a peer's
// bytes arrive within microseconds); 2 when local ranks outnumber the CPUs (the peer we wait for may
// need our CPU to run at all) or when there are TCP peers and the machine's ranks outnumber its CPUs (a
// pass costs a recv() per socket, and emulated hosts share the CPUs): Engine::spin_passes_.
void Engine::wait_until(const std::function<bool()>& done, const std::vector<Handle>& hs, const SharedWait* shared) {
  if (!notify_due_.empty()) notify_deferred();
  if (done()) return;
  if (failures_.aborted()) failures_.throw_recorded();
  if (shared != nullptr) check_frames_match_op();
  const auto deadline = Clock::now() + timeout_;
  Clock::time_point spin_until{};
  int idle = 0;
  while (true) {
    if (progress()) {
      idle = 0;
      if (done()) return;
      if (shared != nullptr) check_frames_match_op();
      continue;
    }
    if (done()) return;
    ++idle;
    if (idle < spin_passes_) continue;
    if (idle == spin_passes_) spin_until = Clock::now() + settings_.spin_for;
    if (idle > spin_passes_ && idle < spin_passes_ + kYieldPasses && Clock::now() < spin_until) {
      // Keep polling, yielding between passes: a rank that shares our CPU runs at once, and with nobody
      // else runnable we are back in a microsecond. Sleeping instead lets the CPU halt, and waking a
      // halted virtual CPU costs 100 µs and more.
      sched_yield();
      --idle;
      continue;
    }
    if (idle < spin_passes_ + kYieldPasses) {
      sched_yield();
      continue;
    }
    check_health(hs, shared, done);
    if (Clock::now() >= deadline) time_out(hs, shared);
    sleep_a_little(static_cast<int>(kLongestSleep.count()), hs, done);
  }
}

}  // namespace mpcomm::native
