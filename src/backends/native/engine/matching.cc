// Matching frames to receives (engine.h): collective frames from one peer match its posted collective
// receives in order, and carry the sender's fingerprint, which must be ours; point-to-point frames
// match by tag (FIFO per tag). A frame that comes before its receive is kept as unexpected (unexpected.h)
// and delivered when the receive is posted; a large collective one instead waits in its link. A receive
// from any rank takes the earliest kept frame with its tag, else the first to come; against receives
// that name the frame's sender, the one posted first wins.
#include <algorithm>
#include <cstring>

#include "backends/native/engine/engine.h"

namespace mpcomm::native {

// A whole payload that waited in an unexpected buffer.
static void deliver(Xfer& x, const char* data) {
  if (x.bytes == 0) return;
  if (x.reduce)
    combine(x, 0, data, x.bytes);
  else
    std::memcpy(x.rdata, data, x.bytes);
}

void Engine::post_recv(const Handle& x) {
  if (x->kind == kFrameP2P) x->posted = ++posted_;
  if (x->peer == kAnySource) return post_any_recv(x);
  Peer& p = peers_[x->peer];
  // A frame that already arrived (fully or partly) takes precedence over later ones.
  for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
    Unexpected& u = **it;
    if (u.claimant || u.hdr.kind != x->kind) continue;
    if (x->kind == kFrameP2P && u.hdr.tag != x->tag) continue;
    if (x->kind == kFrameCollective && !(u.hdr.fp == x->fp))
      fail(ErrorCode::mismatch, "rank " + std::to_string(x->peer) + " called " + frame_name(u.hdr) +
                                    " but this rank called " + detail::describe(x->fp));
    return claim(x, p, it);
  }
  if (p.closed) fail(ErrorCode::peer_failure, p.closed_why);
  if (x->kind == kFrameCollective)
    p.coll_recvs.push_back(x);
  else
    p.p2p_recvs.push_back(x);
}

// A p2p receive from any rank: the frame with its tag that arrived first among those kept (every rank's
// unmatched frames, so none of them is wanted by an earlier receive), else the first such frame to come.
void Engine::post_any_recv(const Handle& x) {
  Peer* best = nullptr;
  std::list<std::shared_ptr<Unexpected>>::iterator best_it;
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[static_cast<size_t>(r)];
    for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
      const Unexpected& u = **it;
      if (u.claimant || u.hdr.kind != kFrameP2P || u.hdr.tag != x->tag) continue;
      if (best == nullptr || u.arrival < (*best_it)->arrival) {
        best = &p;
        best_it = it;
        x->peer = r;
      }
      break;  // a later frame of this rank arrived later
    }
  }
  if (best != nullptr) return claim(x, *best, best_it);
  any_recvs_.push_back(x);
}

// x (its peer set) takes the unexpected frame *it of p: delivered now when whole, else as it comes.
void Engine::claim(const Handle& x, Peer& p, std::list<std::shared_ptr<Unexpected>>::iterator it) {
  Unexpected& u = **it;
  if (u.hdr.bytes != x->bytes)
    fail(ErrorCode::mismatch, "expected " + std::to_string(x->bytes) + " bytes from rank " + std::to_string(x->peer) +
                                  " but it sent " + frame_name(u.hdr));
  if (u.lazy) {
    // The payload is still in the sender's buffer: progress() reads it straight into ours (not here:
    // the caller's next sends go out first, and their receivers can start reading meanwhile).
    u.claimant = x;
  } else if (u.complete) {
    deliver(*x, u.data.get());
    x->done = true;
    buffers_.give_back(u);
    p.unexpected.erase(it);
  } else if (!x->reduce && p.rx_unexp.get() == &u) {
    // Arriving now (only the frame at the link's head can be incomplete): what came so far moves
    // over, the rest of the payload goes straight into the receive's buffer.
    if (p.rx_got > 0) std::memcpy(x->rdata, u.data.get(), p.rx_got);
    x->done_bytes = p.rx_got;
    p.rx_target = x;
    buffers_.give_back(u);
    p.rx_unexp.reset();
    p.unexpected.erase(it);
  } else {
    u.claimant = x;
  }
}

void Engine::keep_unexpected(Peer& p, std::shared_ptr<Unexpected> u) {
  u->arrival = ++arrived_;
  p.unexpected.push_back(std::move(u));
}

// The first posted receive that wants a p2p frame from `peer` with the frame's tag, taken off its list:
// from that peer or from any rank, whichever was posted first; null when none is. A receive of another
// size is a Mismatch.
Handle Engine::take_p2p_recv(int peer, Peer& p, const FrameHeader& h) {
  auto mine = std::find_if(p.p2p_recvs.begin(), p.p2p_recvs.end(), [&](const Handle& x) { return x->tag == h.tag; });
  auto any = std::find_if(any_recvs_.begin(), any_recvs_.end(), [&](const Handle& x) { return x->tag == h.tag; });
  const bool from_any = any != any_recvs_.end() && (mine == p.p2p_recvs.end() || (*any)->posted < (*mine)->posted);
  if (!from_any && mine == p.p2p_recvs.end()) return nullptr;
  Handle x = from_any ? *any : *mine;
  if (x->bytes != h.bytes)
    fail(ErrorCode::mismatch, "rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) + " bytes with tag " +
                                  std::to_string(h.tag) + " but the receive expects " + std::to_string(x->bytes));
  if (from_any) {
    any_recvs_.erase(any);
    x->peer = peer;
  } else {
    p.p2p_recvs.erase(mine);
  }
  return x;
}

// A header has arrived whole (p.rx_hdr): checked, then matched to a posted receive, an acknowledged
// send, or kept as unexpected.
void Engine::on_header(int peer, Peer& p) {
  const FrameHeader& h = p.rx_hdr;
  const bool same_host = info_[peer].same_host && info_[peer].local >= 0 && seg_ != nullptr;
  if (h.magic != kFrameMagic || (h.kind != kFrameCollective && h.kind != kFrameP2P && h.kind != kFrameAck) ||
      h.bytes > kMaxFrameBytes || h.skip >= 64 ||
      (h.pad[0] & kFlagSingleCopy && ((h.kind != kFrameCollective && h.kind != kFrameP2P) || !same_host)))
    fail(ErrorCode::internal, "corrupt frame from rank " + std::to_string(peer) + " (magic " +
                                  std::to_string(h.magic) + ", kind " + std::to_string(h.kind) + ", " +
                                  std::to_string(h.bytes) + " bytes)");
  p.rx_target.reset();
  p.rx_unexp.reset();
  if (h.kind == kFrameAck && h.tag != 0) {  // a p2p read, named by its token
    for (auto it = p.p2p_awaiting.begin(); it != p.p2p_awaiting.end(); ++it)
      if ((*it)->token == h.tag) {
        (*it)->done = true;
        p.p2p_awaiting.erase(it);
        return;
      }
    fail(ErrorCode::internal, "rank " + std::to_string(peer) + " acknowledged a read this rank never offered (token " +
                                  std::to_string(h.tag) + ")");
  }
  if (h.kind == kFrameAck) {
    if (p.awaiting_ack.empty()) fail(ErrorCode::internal, "rank " + std::to_string(peer) + " acknowledged a read this rank never offered");
    p.awaiting_ack.front()->done = true;
    p.awaiting_ack.pop_front();
    return;
  }
  if (h.kind == kFrameCollective && !p.coll_recvs.empty()) {
    Handle x = p.coll_recvs.front();
    if (!(h.fp == x->fp))
      fail(ErrorCode::mismatch, "rank " + std::to_string(peer) + " called " + frame_name(h) +
                                    " but this rank called " + detail::describe(x->fp));
    if (h.bytes != x->bytes)
      fail(ErrorCode::mismatch, "expected " + std::to_string(x->bytes) + " bytes from rank " + std::to_string(peer) +
                                    " but it sent " + std::to_string(h.bytes));
    p.coll_recvs.pop_front();
    p.rx_target = x;
  } else if (h.kind == kFrameP2P) {
    p.rx_target = take_p2p_recv(peer, p, h);
  }
  const bool single = (h.pad[0] & kFlagSingleCopy) != 0;  // a descriptor: nothing to buffer
  // A large collective frame, or a collective descriptor of any size (its sender's buffer is read
  // straight into the receive's), waits in the link until its receive is posted.
  if (!p.rx_target && h.kind == kFrameCollective && (h.bytes > kEagerBytes || single)) {
    p.rx_stalled = true;
    return;
  }
  if (!p.rx_target && !single && h.bytes > settings_.max_unexpected)
    fail(ErrorCode::internal, "rank " + std::to_string(peer) + " sent " + frame_name(h) + " of " +
                                  std::to_string(h.bytes) + " bytes before this rank posted its receive: more than the " +
                                  std::to_string(settings_.max_unexpected >> 20) + " MiB a rank buffers (MPCOMM_MAX_UNEXPECTED_MB)");
  if (!p.rx_target && !single) {
    p.rx_unexp = std::make_shared<Unexpected>();
    p.rx_unexp->hdr = h;
    buffers_.take(*p.rx_unexp, h.bytes);
    keep_unexpected(p, p.rx_unexp);
  }
  p.rx_in_payload = true;
  p.rx_got = 0;
  p.rx_skip = h.skip;
  p.rx_single = single;
  p.rx_desc_got = 0;
}

void Engine::finish_payload(Peer& p) {
  p.rx_in_payload = false;
  if (p.rx_target) {
    p.rx_target->done = true;
    p.rx_target.reset();
    return;
  }
  Unexpected& u = *p.rx_unexp;
  u.complete = true;
  if (u.claimant) {
    deliver(*u.claimant, u.data.get());
    u.claimant->done = true;
    buffers_.give_back(u);
    p.unexpected.remove(p.rx_unexp);
  }
  p.rx_unexp.reset();
}

// Collective frames already here (buffered, or a large one waiting in its link) that belong to this
// op's sequence number but to another call: the sender runs another collective.
void Engine::check_frames_match_op() {
  if (failures_.op() == nullptr) return;
  for (int r = 0; r < size_; ++r) {
    const Peer& p = peers_[static_cast<size_t>(r)];
    auto check = [&](const FrameHeader& h) {
      if (h.kind == kFrameCollective && h.fp.seq == fp_.seq && !(h.fp == fp_))
        fail(ErrorCode::mismatch, "rank " + std::to_string(r) + " called " + frame_name(h) + " but this rank called " +
                                      detail::describe(fp_));
    };
    for (const auto& u : p.unexpected) check(u->hdr);
    if (p.rx_stalled) check(p.rx_hdr);
  }
}

}  // namespace mpcomm::native
