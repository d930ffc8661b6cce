// Waiting (engine.h), once spinning did not finish a wait (progress.cc, wait_until): sleeping on the futex
// doorbell when the wait is only for ranks of this host, in poll() on the sockets when a remote peer is
// involved; and before every sleep the communicator's health: failures other ranks reported, local peers
// that died, frames or board tags of another call (a Mismatch), and the deadline.
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include "backends/native/engine/engine.h"
#include "bootstrap/process_state.h"
#include "core/wait.h"

namespace mpcomm::native {


void Engine::wake_local_peers() const {
  if (seg_ == nullptr) return;
  for (int i = 0; i < seg_->nlocal(); ++i)
    if (i != my_local_) seg_->ring(i);
}

void Engine::wait_shared(const std::function<bool()>& done, const std::function<std::vector<int>()>& pending,
                         const std::function<std::string()>& what) {
  const SharedWait shared{pending, what};
  wait_until(done, {}, &shared);
}

bool Engine::left_in_order(int peer) const {
  const PeerInfo& in = info_[peer];
  return seg_ != nullptr && in.local >= 0 && seg_->doorbell(in.local)->closed.load(std::memory_order_acquire) != 0;
}

bool Engine::peer_alive(int peer) const {
  const PeerInfo& in = info_[peer];
  if (seg_ != nullptr && in.local >= 0 && seg_->doorbell(in.local)->closed.load(std::memory_order_acquire) != 0)
    return false;
  if (!in.same_host || in.pid <= 0 || in.pid == getpid()) return true;
  // A killed child stays a zombie until its parent reaps it; that is dead too.
  if (process_state(in.pid) == ProcessState::gone) return false;
  return true;
}

// On a timeout: which ranks of this host have not even entered the collective we wait in. The rank
// we wait for is often only waiting for someone else; this names the one that is behind.
std::string Engine::who_is_behind() const {
  const detail::Op* op = failures_.op();
  if (seg_ == nullptr || op == nullptr || op->kind == OpKind::send || op->kind == OpKind::recv) return "";
  std::string out;
  for (int r = 0; r < size_; ++r) {
    const PeerInfo& in = info_[r];
    if (r == rank_ || in.local < 0) continue;
    uint64_t e = seg_->doorbell(in.local)->entered.load(std::memory_order_relaxed);
    if (e >= op->seq + 1) continue;
    out += (out.empty() ? "; behind: " : ", ") + std::string("rank ") + std::to_string(r) +
           (e == 0 ? " has entered no collective" : " is still before it (last entered #" + std::to_string(e - 1) + ")");
  }
  return out;
}

// Local peers whose board tag says they left their input for this op's sequence number but for
// another call: they run a board algorithm while we run something else (or the same with other
// arguments). Not for point-to-point ops (their seq counts something else) nor MPCOMM_CHECK's probe
// (it shares the op's seq, and a rank past it may already be on the board).
void Engine::check_board_tags() {
  const detail::Op* op = failures_.op();
  if (host_ == nullptr || op == nullptr || op->fingerprint_probe || op->kind == OpKind::send || op->kind == OpKind::recv)
    return;
  const int parity = static_cast<int>(fp_.seq & 1);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    detail::Fingerprint theirs;
    if (!host_->board_tag(r)->read(fp_.seq + 1, &theirs, sizeof theirs) &&
        !host_->board_slot(parity, r)->read(fp_.seq + 1, &theirs, sizeof theirs))
      continue;
    if (!(theirs == fp_))
      fail(ErrorCode::mismatch, "rank " + std::to_string(r) + " called " + detail::describe(theirs) +
                                    " but this rank called " + detail::describe(fp_));
  }
}

void Engine::check_health(const std::vector<Handle>& hs, const SharedWait* shared, const std::function<bool()>& done) {
  check_board_tags();
  failures_.check_host_reports();
  auto now = Clock::now();
  if (now >= next_liveness_) {
    next_liveness_ = now + kLivenessEvery;
    std::vector<int> watched;
    for (const auto& h : hs) {
      if (h->done) continue;
      if (h->peer != kAnySource) {
        watched.push_back(h->peer);
        continue;
      }
      // A receive from any rank: a rank that died fails it; ranks that left in order (their communicator
      // destroyed, their stream closed) only when no rank is left that could send.
      int open = 0;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || peers_[static_cast<size_t>(r)].closed || left_in_order(r)) continue;
        watched.push_back(r);
        ++open;
      }
      if (open == 0)
        fail(ErrorCode::peer_failure, "every other rank has left while this rank waited for a message from any rank");
    }
    if (shared != nullptr)
      for (int r : shared->pending()) watched.push_back(r);
    for (int peer : watched) {
      if (peer_alive(peer)) continue;
      // The peer may have sent what we wait for (a frame in the ring, a publication on the board), then
      // left — it is done with this op: its frames come before its exit or `closed` (release), so one more
      // pass over the links and done() see them now.
      while (progress()) {
      }
      if (done()) return;
      const PeerInfo& in = info_[peer];
      bool closed = seg_ != nullptr && in.local >= 0 && seg_->doorbell(in.local)->closed.load() != 0;
      fail(ErrorCode::peer_failure,
           "rank " + std::to_string(peer) + (closed ? " destroyed its communicator"
                                                     : " (pid " + std::to_string(in.pid) + ", this host) died") +
               " while this rank waited for it");
    }
  }
  failures_.check_store_reports();
}

void Engine::time_out(const std::vector<Handle>& hs, const SharedWait* shared) {
  std::string who;
  for (const auto& h : hs) {
    if (h->done) continue;
    if (!who.empty()) who += ", ";
    who +=
        (h->peer == kAnySource ? "any rank (tag " + std::to_string(h->tag) + ", "
                               : "rank " + std::to_string(h->peer) + info_[static_cast<size_t>(h->peer)].where + " (") +
        (h->is_send && h->single_copy ? "send of " + std::to_string(h->bytes) + " bytes by single copy, not read yet"
                                      : std::string(h->is_send ? "send" : "recv") + " " +
                                            std::to_string(h->done_bytes) + "/" + std::to_string(h->bytes) + " bytes") +
        ")";
  }
  if (shared != nullptr) who += (who.empty() ? "" : ", ") + shared->what();
  fail(ErrorCode::timeout, "timed out after " + seconds_text(timeout_) + " s waiting for " + who + who_is_behind());
}

void Engine::sleep_a_little(int max_ms, const std::vector<Handle>& hs, const std::function<bool()>& done) {
  // What we wait for decides how we sleep: only on this host → the futex doorbell (a poll() cannot see
  // shared-memory bytes, and a 1 ms poll slice costs 1 ms per message); anything remote → poll() on the
  // sockets, in 1 ms slices when local peers exist too.
  const bool on_futex = seg_ != nullptr && my_local_ >= 0;
  bool only_local = on_futex;
  for (const auto& h : hs)
    if (!h->done && (h->peer == kAnySource ? has_tcp_ : peers_[h->peer].link && peers_[h->peer].link->poll_fd() >= 0))
      only_local = false;
  bool tcp_busy = false;
  if (only_local && has_tcp_)
    for (const auto& p : peers_)
      if (p.link && p.link->poll_fd() >= 0 && p.busy()) tcp_busy = true;
  uint32_t seen = 0;
  Doorbell* me = on_futex ? seg_->doorbell(my_local_) : nullptr;
  if (me != nullptr) {
    seen = me->seq.load(std::memory_order_seq_cst);
    me->sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ShmSegment::ring()
  }
  // Re-check after announcing the sleep, so that no wake-up is lost: frames, and shared memory that a
  // peer writes before it wakes us (wait_shared).
  bool buffered = false;  // bytes inside a transport that poll() cannot see (TLS records) are read first
  for (const auto& p : peers_)
    if (p.link && p.link->buffered()) buffered = true;
  if (!progress() && !done() && !buffered) {
    if (only_local) {
      // A remote transfer in flight still gets drained every millisecond.
      seg_->sleep(my_local_, seen, tcp_busy ? 1 : max_ms);
    } else if (has_tcp_) {
      std::vector<pollfd> fds;
      for (int r = 0; r < size_; ++r) {
        const Link* link = peers_[r].link.get();
        if (link == nullptr || link->poll_fd() < 0) continue;
        fds.push_back(pollfd{link->poll_fd(), POLLIN, 0});
        if (peers_[r].sendq.empty()) continue;
        if (link->poll_fd_out() == link->poll_fd())
          fds.back().events |= POLLOUT;
        else
          fds.push_back(pollfd{link->poll_fd_out(), POLLOUT, 0});
      }
      ::poll(fds.data(), fds.size(), me != nullptr ? 1 : max_ms);
    } else if (me != nullptr) {
      seg_->sleep(my_local_, seen, max_ms);
    } else {
      ::usleep(1000);
    }
  }
  if (me != nullptr) me->sleeping.store(0, std::memory_order_relaxed);
}


}  // namespace mpcomm::native
