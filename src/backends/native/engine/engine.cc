// The engine's setup and its posting of sends and receives (engine.h).
#include "backends/native/engine/engine.h"

#include <unistd.h>

#include <algorithm>

#include "settings/settings.h"

namespace mpcomm::native {

EngineSettings engine_settings(const Options& opts) {
  EngineSettings s;
  s.spin_for = std::chrono::microseconds(std::max<int64_t>(0, param_int(opts, "MPCOMM_SPIN_US")));
  s.single_copy = param_int(opts, "MPCOMM_SINGLE_COPY") != 0;
  s.max_unexpected = static_cast<uint64_t>(std::max<int64_t>(1, param_int(opts, "MPCOMM_MAX_UNEXPECTED_MB"))) << 20;
  const int64_t cpus = param_int(opts, "MPCOMM_CPUS");
  s.cpus = cpus > 0 ? static_cast<long>(cpus) : ::sysconf(_SC_NPROCESSORS_ONLN);
  if (opts.elastic > 0) s.store_every = std::chrono::milliseconds(50);
  return s;
}

std::string frame_name(const FrameHeader& h) {
  if (h.kind == kFrameP2P) return "send (tag " + std::to_string(h.tag) + ", " + std::to_string(h.bytes) + " bytes)";
  return detail::describe(h.fp);
}

Engine::Engine(int rank, int size, std::vector<std::unique_ptr<Link>> links, std::vector<PeerInfo> peers,
               std::shared_ptr<const ShmSegment> seg, int my_local, std::shared_ptr<Store> abort_store, Millis timeout,
               EngineSettings settings)
    : rank_(rank),
      size_(size),
      peers_(static_cast<size_t>(size)),
      info_(std::move(peers)),
      seg_holder_(std::move(seg)),
      seg_(seg_holder_.get()),
      my_local_(my_local),
      failures_(rank, size, seg_, std::move(abort_store), settings.store_every),
      timeout_(timeout),
      settings_(settings),
      single_copy_(settings.single_copy, rank, info_, seg_, my_local) {
  for (int r = 0; r < size; ++r) {
    peers_[r].link = std::move(links[r]);
    if (peers_[r].link && peers_[r].link->poll_fd() >= 0) has_tcp_ = true;
  }
  const long cpus = settings_.cpus > 0 ? settings_.cpus : ::sysconf(_SC_NPROCESSORS_ONLN);
  crowded_ = seg_ != nullptr && seg_->nlocal() > cpus;
  // Waiting on sockets, a rank polls briefly before it yields only when this machine has more ranks
  // than CPUs (emulated hosts, whose ranks all share it): else it spins as on shared memory, as MPI's
  // TCP transport does (docs/performance.md, "Across hosts").
  const int machine_ranks = settings_.machine_ranks > 0 ? settings_.machine_ranks : (seg_ != nullptr ? seg_->nlocal() : 1);
  if ((has_tcp_ && machine_ranks > cpus) || crowded_) spin_passes_ = 2;
  if (seg_ != nullptr && my_local_ >= 0 && seg_->nlocal() == size_ && seg_->board_ctl() != nullptr) {
    std::vector<int> local_of(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) local_of[static_cast<size_t>(r)] = r == rank_ ? my_local_ : info_[static_cast<size_t>(r)].local;
    host_ = std::make_unique<HostLocal>(*this, *seg_, std::move(local_of), crowded_);
  }
}

Engine::~Engine() {
  for (auto& p : peers_) p.link.reset();  // links point into the segment: drop them first
}

void Engine::entered(uint64_t seq) {
  if (seg_ != nullptr && my_local_ >= 0) seg_->doorbell(my_local_)->entered.store(seq + 1, std::memory_order_relaxed);
}

void Engine::close() {
  if (seg_ != nullptr && my_local_ >= 0) {
    seg_->doorbell(my_local_)->closed.store(1, std::memory_order_release);
    for (int i = 0; i < seg_->nlocal(); ++i)
      if (i != my_local_) seg_->ring(i);
  }
}

// ---- sends --------------------------------------------------------------------------------------

Handle Engine::post_send(int peer, uint8_t kind, int tag, const detail::Fingerprint& fp, const void* data,
                         size_t bytes, Route route) {
  auto x = std::make_shared<Xfer>();
  x->peer = peer;
  x->is_send = true;
  x->kind = kind;
  x->tag = tag;
  x->fp = fp;
  x->sdata = static_cast<const char*>(data);
  x->bytes = bytes;
  x->route = route;
  x->hdr = FrameHeader{kFrameMagic, kind, {}, tag, 0, fp, bytes};
  Peer& p = peers_[peer];
  if (p.closed) fail(ErrorCode::peer_failure, p.closed_why);
  // The path (path_policy.h), decided now: a descriptor of our buffer instead of the payload.
  if (kind != kFrameAck && route != Route::ring &&
      paths_.single_copy(kind == kFrameP2P ? PathPolicy::p2p : PathPolicy::collective, bytes) && single_copy_.usable(peer)) {
    x->single_copy = true;
    x->hdr.pad[0] = kFlagSingleCopy;
    if (kind == kFrameP2P) {
      p.next_token = p.next_token == INT32_MAX ? 1 : p.next_token + 1;
      x->token = p.next_token;
    }
  }
  p.sendq.push_back(x);
  if (p.sendq.size() == 1) {  // eager: most small sends finish here
    try {
      if (progress_send(peer, p)) p.link->notify();
    } catch (const PeerFailure& e) {
      link_failed(p, e);
    }
  }
  return x;
}

Handle Engine::send(int peer, const void* data, size_t bytes, Route route) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  // Small and nothing queued: whole into the link, unless the table sends messages this small by single copy.
  if (bytes < kFastSendBytes && (route == Route::ring || bytes < paths_.single_copy_from(PathPolicy::collective)) &&
      p.sendq.empty() && !p.closed) {
    const FrameHeader hdr{kFrameMagic, kFrameCollective, {}, 0, 0, fp_, bytes};
    if (p.link->write_whole(&hdr, sizeof hdr, data, bytes)) {
      if (!p.notify_due) {
        p.notify_due = true;
        notify_due_.push_back(peer);
      }
      return sent_;
    }
  }
  return post_send(peer, kFrameCollective, 0, fp_, data, bytes, route);
}

void Engine::notify_deferred() {
  for (int r : notify_due_) {
    Peer& p = peers_[static_cast<size_t>(r)];
    p.notify_due = false;
    p.link->notify();
  }
  notify_due_.clear();
}

Handle Engine::send_p2p(int peer, int tag, const void* data, size_t bytes) {
  detail::Fingerprint fp;
  fp.kind = static_cast<uint8_t>(OpKind::send);
  fp.count = bytes;
  return post_send(peer, kFrameP2P, tag, fp, data, bytes);
}

// ---- receives -----------------------------------------------------------------------------------

// A receive, not yet posted: a collective one matches by fingerprint, a p2p one by tag.
static Handle new_recv(int peer, uint8_t kind, void* data, size_t bytes) {
  auto x = std::make_shared<Xfer>();
  x->peer = peer;
  x->kind = kind;
  x->rdata = static_cast<char*>(data);
  x->bytes = bytes;
  return x;
}

static Handle collective_recv(int peer, const detail::Fingerprint& fp, void* data, size_t bytes) {
  Handle x = new_recv(peer, kFrameCollective, data, bytes);
  x->fp = fp;
  return x;
}

Handle Engine::recv(int peer, void* data, size_t bytes) {
  Handle x = collective_recv(peer, fp_, data, bytes);
  post_recv(x);
  return x;
}

Handle Engine::recv_reduce(int peer, void* dst, const void* own, size_t bytes, DataType dt, ReduceOp op,
                           void* stream_to, bool own_first) {
  Handle x = collective_recv(peer, fp_, dst, bytes);
  x->reduce = true;
  x->own = static_cast<const char*>(own);
  x->stream_to = static_cast<char*>(stream_to);
  x->own_first = own_first;
  x->dtype = dt;
  x->redop = op;
  post_recv(x);
  return x;
}

Handle Engine::recv_p2p(int peer, int tag, void* data, size_t bytes) {
  Handle x = new_recv(peer, kFrameP2P, data, bytes);
  x->tag = tag;
  post_recv(x);
  return x;
}

}  // namespace mpcomm::native
