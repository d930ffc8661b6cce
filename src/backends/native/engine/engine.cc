#include "backends/native/engine/engine.h"

#include <poll.h>
#include <sys/uio.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "log/log.h"
#include "core/wait.h"
#include "settings/settings.h"
#include "kernels/reduce.h"

namespace mpcomm::native {

static constexpr int kYieldPasses = 50;    // sched_yield passes before sleeping
static constexpr int kSleepMs = 50;        // longest single sleep; health is checked after each
static constexpr auto kLivenessEvery = std::chrono::milliseconds(100);
static constexpr auto kStoreEvery = std::chrono::milliseconds(500);
static constexpr uint64_t kProbeMagic = 0x6d70636f6d6d5052ull;

EngineSettings engine_settings(const Options& opts) {
  EngineSettings s;
  s.spin_for = std::chrono::microseconds(std::max<int64_t>(0, param_int(opts, "MPCOMM_SPIN_US")));
  const int64_t kb = param_int(opts, "MPCOMM_SINGLE_COPY_KB");
  s.single_copy = param_int(opts, "MPCOMM_SINGLE_COPY") != 0 && kb > 0;
  s.single_copy_from = kb > 0 ? static_cast<size_t>(kb) << 10 : SIZE_MAX;
  s.max_unexpected = static_cast<uint64_t>(std::max<int64_t>(1, param_int(opts, "MPCOMM_MAX_UNEXPECTED_MB"))) << 20;
  const int64_t cpus = param_int(opts, "MPCOMM_CPUS");
  s.cpus = cpus > 0 ? static_cast<long>(cpus) : ::sysconf(_SC_NPROCESSORS_ONLN);
  return s;
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
      abort_watch_(abort_store, kStoreEvery, "rank " + std::to_string(rank)),
      timeout_(timeout),
      settings_(settings) {
  for (int r = 0; r < size; ++r) {
    peers_[r].link = std::move(links[r]);
    if (peers_[r].link && peers_[r].link->poll_fd() >= 0) has_tcp_ = true;
  }
  const long cpus = settings_.cpus > 0 ? settings_.cpus : ::sysconf(_SC_NPROCESSORS_ONLN);
  crowded_ = seg_ != nullptr && seg_->nlocal() > cpus;
  // Sends from 64 KiB (or MPCOMM_SINGLE_COPY_KB if lower) on a crowded host go by single copy: through
  // the ring the sender and the receiver wait for each other's turns on the CPUs, which the copies' rates
  // do not show (docs/performance.md, "Point-to-point on a crowded host" and "Point-to-point from 64 KiB
  // by the faster path": 4 ranks on 2 CPUs, 64 KiB, single copy 0.61x the time of the choice, 3 ranks 0.65x).
  // On other hosts, from there on, the faster path now (choose_p2p_single()): with the CPUs far apart
  // single copy wins from 64 KiB, with them near the ring.
  if (crowded_) p2p_single_from_ = std::min(settings_.single_copy_from, kP2PSingleFrom);
  if (settings_.single_copy && !crowded_) p2p_choice_from_ = std::min(settings_.single_copy_from, kP2PSingleFrom);
  // Waiting on sockets, a rank polls briefly before it yields only when this machine has more ranks
  // than CPUs (emulated hosts, whose ranks all share it): else it spins as on shared memory, as MPI's
  // TCP transport does (2 hosts x 1 rank, 8 B allreduce over a veth, unpinned: 50-65 us yielding early,
  // about 20 us spinning; docs/performance.md, "Across hosts").
  const int machine_ranks = settings_.machine_ranks > 0 ? settings_.machine_ranks : (seg_ != nullptr ? seg_->nlocal() : 1);
  if ((has_tcp_ && machine_ranks > cpus) || crowded_) spin_passes_ = 2;
  if (seg_ != nullptr && my_local_ >= 0 && seg_->nlocal() == size_ && seg_->board_ctl() != nullptr) {
    std::vector<int> local_of(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) local_of[static_cast<size_t>(r)] = r == rank_ ? my_local_ : info_[static_cast<size_t>(r)].local;
    host_ = std::make_unique<HostLocal>(*this, *seg_, std::move(local_of), crowded_);
  }
  if (seg_ != nullptr && my_local_ >= 0) {
    Doorbell* me = seg_->doorbell(my_local_);
    me->probe_value = kProbeMagic ^ static_cast<uint64_t>(::getpid());
    me->probe_addr.store(reinterpret_cast<uint64_t>(&me->probe_value), std::memory_order_release);
  }
}

Engine::~Engine() {
  for (auto& p : peers_) p.link.reset();  // links point into the segment: drop them first
}

void Engine::begin(const detail::Op* op, Describe describe, const void* ctx) {
  op_ = op;
  fp_ = detail::fingerprint(*op);
  describe_ = describe;
  describe_ctx_ = ctx;
}

void Engine::entered(uint64_t seq) {
  if (seg_ != nullptr && my_local_ >= 0) seg_->doorbell(my_local_)->entered.store(seq + 1, std::memory_order_relaxed);
}

// On a timeout: which ranks of this host have not even entered the collective we wait in. The rank
// we wait for is often only waiting for someone else; this names the one that is behind.
std::string Engine::who_is_behind() const {
  if (seg_ == nullptr || op_ == nullptr || op_->kind == OpKind::send || op_->kind == OpKind::recv) return "";
  std::string out;
  for (int r = 0; r < size_; ++r) {
    const PeerInfo& in = info_[r];
    if (r == rank_ || in.local < 0) continue;
    uint64_t e = seg_->doorbell(in.local)->entered.load(std::memory_order_relaxed);
    if (e >= op_->seq + 1) continue;
    out += (out.empty() ? "; behind: " : ", ") + std::string("rank ") + std::to_string(r) +
           (e == 0 ? " has entered no collective" : " is still before it (last entered #" + std::to_string(e - 1) + ")");
  }
  return out;
}

std::string Engine::context() const {
  return describe_ != nullptr && op_ != nullptr ? describe_(describe_ctx_, *op_) : "rank " + std::to_string(rank_);
}

void Engine::fail(ErrorCode code, const std::string& msg) {
  std::string full = "mpcomm: " + context() + ": " + msg;
  publish_abort(code, full);
  throw_error(code, full);
}

void Engine::publish_abort(ErrorCode code, const std::string& msg) {
  if (!record_abort(code, msg)) return;
  if (seg_ != nullptr) seg_->publish_abort(static_cast<int>(code), rank_, msg);
  abort_watch_.publish(msg);
}

bool Engine::record_abort(ErrorCode code, const std::string& msg) {
  std::lock_guard<std::mutex> g(abort_mu_);
  if (!abort_msg_.empty()) return false;
  abort_msg_ = msg;
  abort_code_ = code;
  aborted_.store(true, std::memory_order_release);
  return true;
}

std::string Engine::abort_reason() const {
  std::lock_guard<std::mutex> g(abort_mu_);
  return abort_msg_;
}

void Engine::close() {
  if (seg_ != nullptr && my_local_ >= 0) {
    seg_->doorbell(my_local_)->closed.store(1, std::memory_order_release);
    for (int i = 0; i < seg_->nlocal(); ++i)
      if (i != my_local_) seg_->ring(i);
  }
}

// ---- posting --------------------------------------------------------------------------------------

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
  x->route = route;  // set before the eager attempt below: its first pass decides single copy
  x->hdr = FrameHeader{kFrameMagic, kind, {}, tag, 0, fp, bytes};
  Peer& p = peers_[peer];
  if (p.closed) fail(ErrorCode::peer_failure, p.closed_why);
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

// A small collective frame to a peer with nothing queued goes straight into the link when the whole
// frame fits (shared memory): no Xfer, no queue, and a handle that is done already (sent_). Below 4 KiB:
// such payloads follow their header without filler (kAlignFrom).
static constexpr size_t kFastSendBytes = 4096;

Handle Engine::send(int peer, const void* data, size_t bytes, Route route) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (bytes < kFastSendBytes && p.sendq.empty() && !p.closed) {
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

// A collective receive, not yet posted.
static Handle collective_recv(int peer, const detail::Fingerprint& fp, void* data, size_t bytes) {
  auto x = std::make_shared<Xfer>();
  x->peer = peer;
  x->kind = kFrameCollective;
  x->fp = fp;
  x->rdata = static_cast<char*>(data);
  x->bytes = bytes;
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

// Combines `len` bytes (whole elements) of payload at offset `off` into a reducing receive.
static void combine(Xfer& x, size_t off, const char* src, size_t len) {
  const void* srcs[2] = {x.own + off, src};
  if (!x.own_first) std::swap(srcs[0], srcs[1]);
  if (x.stream_to != nullptr)
    reduce_into_streamed(x.rdata + off, x.stream_to + off, srcs, 2, len / dtype_size(x.dtype), x.dtype, x.redop);
  else
    reduce_into(x.rdata + off, srcs, 2, len / dtype_size(x.dtype), x.dtype, x.redop);
}

// A whole payload that waited in an unexpected buffer.
void Engine::deliver(Xfer& x, const char* data) {
  if (x.bytes == 0) return;
  if (x.reduce)
    combine(x, 0, data, x.bytes);
  else
    std::memcpy(x.rdata, data, x.bytes);
}

Handle Engine::recv_p2p(int peer, int tag, void* data, size_t bytes) {
  auto x = std::make_shared<Xfer>();
  x->peer = peer;
  x->kind = kFrameP2P;
  x->tag = tag;
  x->rdata = static_cast<char*>(data);
  x->bytes = bytes;
  post_recv(x);
  return x;
}

// Payloads from this size on are placed at their source's offset within a cache line (Link::write_offset).
static constexpr size_t kAlignFrom = 4096;
static const char kZeros[64] = {};

// Collective payloads above this size wait in the link for their receive instead of being buffered.
static constexpr uint64_t kEagerBytes = 4096;

static std::string frame_name(const FrameHeader& h) {
  if (h.kind == kFrameP2P) return "send (tag " + std::to_string(h.tag) + ", " + std::to_string(h.bytes) + " bytes)";
  return detail::describe(h.fp);
}

void Engine::post_recv(const Handle& x) {
  Peer& p = peers_[x->peer];
  // A frame that already arrived (fully or partly) takes precedence over later ones.
  for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
    Unexpected& u = **it;
    if (u.claimant || u.hdr.kind != x->kind) continue;
    if (x->kind == kFrameP2P && u.hdr.tag != x->tag) continue;
    if (x->kind == kFrameCollective && !(u.hdr.fp == x->fp))
      fail(ErrorCode::mismatch, "rank " + std::to_string(x->peer) + " called " + frame_name(u.hdr) +
                                    " but this rank called " + detail::describe(x->fp));
    if (u.hdr.bytes != x->bytes)
      fail(ErrorCode::mismatch, "expected " + std::to_string(x->bytes) + " bytes from rank " +
                                    std::to_string(x->peer) + " but it sent " + frame_name(u.hdr));
    if (u.lazy) {
      // The payload is still in the sender's buffer: progress() reads it straight into ours (not here:
      // the caller's next sends go out first, and their receivers can start reading meanwhile).
      u.claimant = x;
    } else if (u.complete) {
      deliver(*x, u.data.get());
      x->done = true;
      give_back_buffer(u);
      p.unexpected.erase(it);
    } else if (!x->reduce && p.rx_unexp.get() == &u) {
      // Arriving now (only the frame at the link's head can be incomplete): what came so far moves
      // over, the rest of the payload goes straight into the receive's buffer.
      if (p.rx_got > 0) std::memcpy(x->rdata, u.data.get(), p.rx_got);
      x->done_bytes = p.rx_got;
      p.rx_target = x;
      give_back_buffer(u);
      p.rx_unexp.reset();
      p.unexpected.erase(it);
    } else {
      u.claimant = x;
    }
    return;
  }
  if (p.closed) fail(ErrorCode::peer_failure, p.closed_why);
  if (x->kind == kFrameCollective)
    p.coll_recvs.push_back(x);
  else
    p.p2p_recvs.push_back(x);
}

// Unexpected payloads from this size on get a buffer that is kept for reuse.
static constexpr size_t kSpareFrom = size_t{64} << 10;
static constexpr size_t kSpareBuffers = 2;
static constexpr size_t kSpareMaxBytes = size_t{256} << 20;  // larger buffers are not kept

void Engine::take_buffer(Unexpected& u, size_t bytes) {
  if (bytes >= kSpareFrom) {
    // The smallest spare that holds it.
    auto best = spare_buffers_.end();
    for (auto it = spare_buffers_.begin(); it != spare_buffers_.end(); ++it)
      if (it->first >= bytes && (best == spare_buffers_.end() || it->first < best->first)) best = it;
    if (best != spare_buffers_.end()) {
      u.capacity = best->first;
      u.data = std::move(best->second);
      spare_buffers_.erase(best);
      return;
    }
  }
  u.data.reset(new char[bytes]);
  u.capacity = bytes;
}

void Engine::give_back_buffer(Unexpected& u) {
  if (!u.data || u.capacity < kSpareFrom || u.capacity > kSpareMaxBytes) {
    u.data.reset();
    return;
  }
  if (spare_buffers_.size() >= kSpareBuffers) {
    // Keep the larger ones.
    auto smallest = std::min_element(spare_buffers_.begin(), spare_buffers_.end(),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (smallest->first >= u.capacity) {
      u.data.reset();
      return;
    }
    spare_buffers_.erase(smallest);
  }
  spare_buffers_.emplace_back(u.capacity, std::move(u.data));
}

// ---- progress -------------------------------------------------------------------------------------

bool Engine::progress_send(int peer, Peer& p) {
  bool moved = false;
  while (!p.sendq.empty()) {
    Xfer& x = *p.sendq.front();
    const size_t single_from = x.route == Route::direct ? std::min(kDirectFrom, settings_.single_copy_from)
                               : x.route == Route::ring   ? SIZE_MAX
                                                          : settings_.single_copy_from;
    // Large p2p sends on a crowded host go by single copy too (docs/native.md, "Point-to-point on a
    // crowded host"): through the ring, sender and receiver would take turns on the CPUs for every ring's
    // worth. With a CPU per rank, the faster path lately.
    if (x.kind == kFrameP2P && x.done_bytes == 0 && x.p2p_path < 0 && x.bytes >= p2p_choice_from_ &&
        x.bytes < p2p_single_from_)
      x.p2p_path = static_cast<int8_t>(choose_p2p_single(p, x.bytes) ? Link::kSingleCopy : Link::kThroughLink);
    const bool p2p_single = x.kind == kFrameP2P && (x.bytes >= p2p_single_from_ || x.p2p_path == Link::kSingleCopy);
    if (x.done_bytes == 0 && ((x.kind == kFrameCollective && x.bytes >= single_from) || p2p_single) &&
        can_single_copy(peer, p)) {
      x.single_copy = true;
      x.hdr.pad[0] = kFlagSingleCopy;
      x.hdr.skip = 0;
      if (x.kind == kFrameP2P) {
        p.next_token = p.next_token == INT32_MAX ? 1 : p.next_token + 1;
        x.token = p.next_token;
      }
    }
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
    const bool timed = x.p2p_path == Link::kThroughLink;  // our copies into the ring (choose_p2p_single())
    while (x.done_bytes < total) {
      size_t n;
      if (x.done_bytes < sizeof(FrameHeader))
        n = p.link->write_some(reinterpret_cast<const char*>(&x.hdr) + x.done_bytes, sizeof(FrameHeader) - x.done_bytes);
      else if (x.done_bytes < hsz)
        n = p.link->write_some(kZeros, hsz - x.done_bytes);
      else if (timed) {
        const auto t0 = Clock::now();
        n = p.link->write_some(x.sdata + (x.done_bytes - hsz), total - x.done_bytes);
        p.tx_copy_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
      } else
        n = p.link->write_some(x.sdata + (x.done_bytes - hsz), total - x.done_bytes);
      if (n == 0) return moved;
      moved = true;
      x.done_bytes += n;
    }
    if (timed) {
      const uint64_t sample = std::clamp<uint64_t>(x.bytes * 1000 / std::max<uint64_t>(p.tx_copy_ns, 1), 1, UINT32_MAX);
      const int c = Link::rate_class(x.bytes);
      uint64_t& rate = p.tx_ring_rate[c];
      if (p.tx_warm[c])  // the first copy of a class is cold (see publish_rate)
        rate = rate == 0 ? sample : (rate + sample) / 2;
      p.tx_warm[c] = true;
      p.tx_copy_ns = 0;
    }
    x.done = true;
    p.sendq.pop_front();
  }
  return moved;
}

// The first posted receive from `peer` with the frame's tag, taken off the list; null when none is. A
// receive of another size is a Mismatch.
Handle Engine::take_p2p_recv(int peer, Peer& p, const FrameHeader& h) {
  for (auto it = p.p2p_recvs.begin(); it != p.p2p_recvs.end(); ++it) {
    if ((*it)->tag != h.tag) continue;
    if ((*it)->bytes != h.bytes)
      fail(ErrorCode::mismatch, "rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) + " bytes with tag " +
                                    std::to_string(h.tag) + " but the receive expects " + std::to_string((*it)->bytes));
    Handle x = *it;
    p.p2p_recvs.erase(it);
    return x;
  }
  return nullptr;
}

void Engine::on_header(int peer, Peer& p) {
  const FrameHeader& h = p.rx_hdr;
  if (h.magic != kFrameMagic || (h.kind != kFrameCollective && h.kind != kFrameP2P && h.kind != kFrameAck) ||
      h.bytes > kMaxFrameBytes || h.skip >= 64 ||
      (h.pad[0] & kFlagSingleCopy && ((h.kind != kFrameCollective && h.kind != kFrameP2P) || !same_host(peer))))
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
  if (!p.rx_target && h.kind == kFrameCollective && h.bytes > kEagerBytes) {
    p.rx_stalled = true;
    return;
  }
  const bool single = (h.pad[0] & kFlagSingleCopy) != 0;  // a descriptor: nothing to buffer
  if (!p.rx_target && !single && h.bytes > settings_.max_unexpected)
    fail(ErrorCode::internal, "rank " + std::to_string(peer) + " sent " + frame_name(h) + " of " +
                                  std::to_string(h.bytes) + " bytes before this rank posted its receive: more than the " +
                                  std::to_string(settings_.max_unexpected >> 20) + " MiB a rank buffers (MPCOMM_MAX_UNEXPECTED_MB)");
  if (!p.rx_target && !single) {
    p.rx_unexp = std::make_shared<Unexpected>();
    p.rx_unexp->hdr = h;
    take_buffer(*p.rx_unexp, h.bytes);
    p.unexpected.push_back(p.rx_unexp);
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
    give_back_buffer(u);
    p.unexpected.remove(p.rx_unexp);
  }
  p.rx_unexp.reset();
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
    // A large p2p payload into its posted receive: the time of our copies out of the ring (not of the
    // waits between them) is published with its rate (choose_p2p_single()).
    const bool timed = p.rx_hdr.kind == kFrameP2P && total >= p2p_choice_from_ && p.rx_target;
    while (p.rx_got < total) {
      const auto t0 = timed ? Clock::now() : Clock::time_point{};
      size_t n = p.link->read_some(dst + p.rx_got, total - p.rx_got);
      if (n == 0) return moved;
      if (timed) {
        p.rx_copy_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        p.rx_copy_bytes += n;
      }
      moved = true;
      p.rx_got += n;
      if (p.rx_target) p.rx_target->done_bytes = p.rx_got;
    }
    if (timed) {
      publish_rate(p, Link::kThroughLink, p.rx_copy_bytes, p.rx_copy_ns);
      p.rx_copy_ns = 0;
      p.rx_copy_bytes = 0;
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

bool Engine::same_host(int peer) const { return info_[peer].same_host && info_[peer].local >= 0 && seg_ != nullptr; }

// Whether this rank may read the peer's memory (and, the same rules holding both ways, the peer ours):
// process_vm_readv() of the peer's published probe word. Asked once the peer has published it.
bool Engine::can_single_copy(int peer, Peer& p) {
  if (p.single_copy_ok != 0) return p.single_copy_ok > 0;
  if (!settings_.single_copy || !same_host(peer)) {
    p.single_copy_ok = -1;
    return false;
  }
  const Doorbell* d = seg_->doorbell(info_[peer].local);
  const uint64_t addr = d->probe_addr.load(std::memory_order_acquire);
  if (addr == 0) return false;  // not published yet: ask again next time
  uint64_t got = 0;
  iovec local{&got, sizeof got}, remote{reinterpret_cast<void*>(addr), sizeof got};
  const bool ok = ::process_vm_readv(info_[peer].pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof got) &&
                  got == d->probe_value;
  if (!ok) MPCOMM_LOG(info, "rank %d: no single-copy transfers with rank %d (%s)", rank_, peer, std::strerror(errno));
  p.single_copy_ok = ok ? 1 : -1;
  return ok;
}

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

// Collective frames already here (buffered, or a large one waiting in its link) that belong to this
// op's sequence number but to another call: the sender runs another collective.
void Engine::check_frames_match_op() {
  if (op_ == nullptr) return;
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

// Local peers whose board tag says they left their input for this op's sequence number but for
// another call: they run the arrival allreduce while we run something else (or the same with other
// arguments). Not for point-to-point ops (their seq counts something else) nor MPCOMM_CHECK's probe
// (it shares the op's seq, and a rank past it may already be on the board).
void Engine::check_board_tags() {
  if (host_ == nullptr || op_ == nullptr || op_->fingerprint_probe || op_->kind == OpKind::send || op_->kind == OpKind::recv)
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

// n bytes between our memory and `peer`'s at `remote`, by process_vm_readv or process_vm_writev (the
// kernel checks the same permission for both: what can_single_copy() probed), in as many calls as the
// kernel needs.
void Engine::copy_with_peer(int peer, char* local_buf, uint64_t remote, size_t n, bool write) {
  const pid_t pid = static_cast<pid_t>(info_[static_cast<size_t>(peer)].pid);
  size_t done = 0;
  while (done < n) {
    iovec local{local_buf + done, n - done}, far{reinterpret_cast<void*>(remote + done), n - done};
    ssize_t r = write ? ::process_vm_writev(pid, &local, 1, &far, 1, 0) : ::process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (r <= 0) {
      const int err = r < 0 ? errno : EIO;
      fail(err == ESRCH ? ErrorCode::peer_failure : ErrorCode::internal,
           std::string(write ? "writing " : "reading ") + std::to_string(n) + " bytes straight " + (write ? "into" : "from") +
               " rank " + std::to_string(peer) + "'s buffer failed: " + std::strerror(err) +
               " (MPCOMM_SINGLE_COPY=0 turns this off)");
    }
    done += static_cast<size_t>(r);
  }
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
      // Its receive is not posted yet: keep the descriptor (post_recv reads the payload).
      auto u = std::make_shared<Unexpected>();
      u->hdr = p.rx_hdr;
      u->lazy = true;
      u->remote = p.rx_desc[0];
      u->token = token;
      u->since = Clock::now();
      p.unexpected.push_back(std::move(u));
      ++lazy_frames_;
      return;
    }
    // In one piece: no other reader shares the source.
    Handle x = std::move(p.rx_target);
    const auto t0 = Clock::now();
    copy_with_peer(peer, x->rdata, p.rx_desc[0], total, false);
    publish_rate(p, Link::kSingleCopy, total,
                 static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    x->done_bytes = total;
    x->done = true;
    ack_p2p(peer, token);
    return;
  }
  Xfer& x = *p.rx_target;  // collective single-copy frames are large: never unexpected (they stall)
  // (copy_with_peer uses info_[peer].pid, the pid can_single_copy() probed; the descriptor's own pid is not needed.)
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
    // When local ranks outnumber CPUs, in 1 MiB pieces with a yield between them: the ranks that share
    // our CPU and read the same source (a flat broadcast's readers) take turns and find the piece still
    // in the cache (4 ranks on 2 CPUs, 4 MiB broadcast: 1.97-2.01 ms in one piece, 1.26-1.33 ms so).
    const size_t piece = crowded_ ? size_t{1} << 20 : total;
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

// Large p2p sends to a local rank (from p2p_choice_from_ up to p2p_single_from_): through the ring, the
// payload passes from one CPU's cache to the other's, which is fast while the two CPUs share a cache
// and slow when the hypervisor has put them far apart (2 ranks, 1 MiB: 105 us near, 580 us far); by
// single copy the receiver reads the sender's buffer through memory at about the same speed either way
// (150-180 us near, 180-290 us far).
// Which holds now changes within minutes, so each side times its copies of each large payload, not the
// waits between them: the receiver its copies out of the ring, or its single-copy read, and publishes
// their rate (MB/s) in the ring; the sender its copies into the ring (with the CPUs far apart those are
// the slow ones: they write lines the reader last held). Through the ring the slower of the two copies
// sets the pace (they overlap, piece by piece). Rates are kept by size class (Link::rate_class): a 64 KiB single copy pays its system call
// and its handshake on a sixteenth of the bytes a 1 MiB one does. The sender takes the faster path, an
// unmeasured one first, and after some large sends of a class (kRefreshEvery, more the slower it was)
// the path not taken for that long, so that its rate stays current (publish_rate()).
bool Engine::choose_p2p_single(Peer& p, size_t bytes) {
  constexpr uint32_t kRefreshEvery = 32;
  if (!p.link || p.single_copy_ok < 0) return false;
  const int c = Link::rate_class(bytes);
  const uint32_t n = ++p.large_sends[c];
  // Through the ring both copy, the receiver one piece while the sender writes the next: the slower
  // copy sets the pace (2 ranks near, 4 MiB ring shift: 214 us, 19.6 GB/s, with copy rates of 17 and
  // 13.6 GB/s; far, 64 KiB: 30 us, 2.2 GB/s, the sender's copies 2.5-2.8).
  const uint64_t rx_ring = p.link->peer_rx_rate(c, Link::kThroughLink), single = p.link->peer_rx_rate(c, Link::kSingleCopy);
  const uint64_t tx_ring = p.tx_ring_rate[c];
  const uint64_t ring = rx_ring == 0 || tx_ring == 0 ? 0 : std::min(rx_ring, tx_ring);
  int path;
  if (ring == 0)
    path = Link::kThroughLink;
  else if (single == 0)
    path = Link::kSingleCopy;
  else {
    path = single > ring ? Link::kSingleCopy : Link::kThroughLink;
    // The slower path is tried again after kRefreshEvery sends times how much slower it was, up to 16
    // times: a path five times slower (the ring with the CPUs far apart) costs the mean under 3%.
    const uint64_t higher = std::max(single, ring), lower = std::max<uint64_t>(std::min(single, ring), 1);
    const uint64_t every = kRefreshEvery * std::min<uint64_t>(higher / lower, 16);
    if (n - p.last_use[c][1 - path] >= every) path = 1 - path;
  }
  p.last_use[c][path] = n;
  return path == Link::kSingleCopy;
}

void Engine::publish_rate(Peer& p, int path, size_t bytes, uint64_t ns) {
  if (!p.link || bytes < p2p_choice_from_) return;
  // Half the new copy's rate and half the last published: one copy slowed by a preemption does not
  // switch the sender's path by itself, and a change of placement shows within a few sends.
  const uint64_t sample = std::clamp<uint64_t>(bytes * 1000 / std::max<uint64_t>(ns, 1), 1, UINT32_MAX);
  const int c = Link::rate_class(bytes);
  // The first copy of a class by each path is not counted: it is cold (2 ranks, 64 KiB, the CPUs far
  // apart: a single copy's first read of the sender's buffer at 2.2-2.6 GB/s, the next ones at 4-10), and
  // a path without a rate is tried again (choose_p2p_single()).
  if (!p.rx_warm[c][path & 1]) {
    p.rx_warm[c][path & 1] = true;
    return;
  }
  uint64_t& rate = p.rx_rate[c][path & 1];
  rate = rate == 0 ? sample : (rate + sample) / 2;
  p.link->publish_rx_rate(c, path, static_cast<uint32_t>(rate));
}

void Engine::ack_p2p(int peer, int32_t token) {
  post_send(peer, kFrameAck, token, detail::Fingerprint{}, nullptr, 0);
}

// A lazy frame whose receive is not posted within this long is read into a buffer and its sender
// released: that ends the wait of a program whose ranks all block in sends to each other before they
// receive, which would otherwise never end. A receive that comes later than this costs one more copy.
static constexpr auto kLazyLimit = std::chrono::milliseconds(200);

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
        const auto t0 = Clock::now();
        copy_with_peer(r, x.rdata, u.remote, x.bytes, false);
        publish_rate(peers_[static_cast<size_t>(r)], Link::kSingleCopy, x.bytes,
                     static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
        x.done_bytes = x.bytes;
        x.done = true;
      } else {
        if (now == Clock::time_point{}) now = Clock::now();
        if (now - u.since < kLazyLimit) {
          ++it;
          continue;
        }
        take_buffer(u, u.hdr.bytes);
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

// A link threw: the peer is gone. Only an error if something still needed that peer.
void Engine::link_failed(Peer& p, const PeerFailure& e) {
  p.closed = true;
  p.closed_why = e.what();
  if (p.busy()) fail(ErrorCode::peer_failure, e.what() + first_reported_failure());
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

// A peer that closed its connection may only have reacted to an earlier failure; name that one too.
std::string Engine::first_reported_failure() {
  std::string msg;
  if (seg_ != nullptr && seg_->aborted(&msg) > 0) return " (first failure reported: " + msg + ")";
  if (std::string first = abort_watch_.read(); !first.empty()) return " (first failure reported: " + first + ")";
  return "";
}

// ---- waiting --------------------------------------------------------------------------------------

bool Engine::peer_alive(int peer) const {
  const PeerInfo& in = info_[peer];
  if (seg_ != nullptr && in.local >= 0 && seg_->doorbell(in.local)->closed.load(std::memory_order_acquire) != 0)
    return false;
  if (!in.same_host || in.pid <= 0 || in.pid == getpid()) return true;
  if (::kill(in.pid, 0) != 0 && errno == ESRCH) return false;
  // A killed child stays a zombie until its parent reaps it; that is dead too.
  std::ifstream stat("/proc/" + std::to_string(in.pid) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    auto close_paren = line.rfind(')');
    if (close_paren != std::string::npos && close_paren + 2 < line.size()) {
      char state = line[close_paren + 2];
      if (state == 'Z' || state == 'X') return false;
    }
  }
  return true;
}

void Engine::check_health(const std::vector<Handle>& hs, const SharedWait* shared, const std::function<bool()>& done) {
  check_board_tags();
  std::string msg;
  if (seg_ != nullptr) {
    if (int code = seg_->aborted(&msg); code > 0 && msg != abort_reason()) {
      auto ec = static_cast<ErrorCode>(code - 1);
      record_abort(ec, msg);
      throw_error(ec, "mpcomm: " + context() + ": aborted because another rank failed: " + msg);
    }
  }
  auto now = Clock::now();
  if (now >= next_liveness_) {
    next_liveness_ = now + kLivenessEvery;
    std::vector<int> watched;
    for (const auto& h : hs)
      if (!h->done) watched.push_back(h->peer);
    if (shared != nullptr)
      for (int r : shared->pending()) watched.push_back(r);
    for (int peer : watched) {
      if (peer_alive(peer)) continue;
      // A peer on the board may have published what we wait for, then left (it is done with this op):
      // its exit or `closed` (release) comes after the publication, so done() sees it now.
      if (shared != nullptr && done()) return;
      const PeerInfo& in = info_[peer];
      bool closed = seg_ != nullptr && in.local >= 0 && seg_->doorbell(in.local)->closed.load() != 0;
      fail(ErrorCode::peer_failure,
           "rank " + std::to_string(peer) + (closed ? " destroyed its communicator"
                                                     : " (pid " + std::to_string(in.pid) + ", this host) died") +
               " while this rank waited for it");
    }
  }
  msg = abort_watch_.poll();
  if (!msg.empty() && msg != abort_reason()) {
    // A rank of this host publishes to the segment (with its error's code) before the store, so a
    // failure here may be in the segment now though it was not when we looked above: it came first,
    // and it keeps its code.
    std::string local;
    if (int code = seg_ != nullptr ? seg_->aborted(&local) : 0; code > 0 && local != abort_reason()) {
      auto ec = static_cast<ErrorCode>(code - 1);
      record_abort(ec, local);
      throw_error(ec, "mpcomm: " + context() + ": aborted because another rank failed: " + local);
    }
    if (record_abort(ErrorCode::peer_failure, msg) && seg_ != nullptr)
      seg_->publish_abort(static_cast<int>(ErrorCode::peer_failure), rank_, msg);
    throw PeerFailure("mpcomm: " + context() + ": aborted because another rank failed: " + msg);
  }
}

bool Engine::me_sleeps_on_futex() const { return seg_ != nullptr && my_local_ >= 0; }

void Engine::sleep_a_little(int max_ms, const std::vector<Handle>& hs, const std::function<bool()>& done) {
  // What we wait for decides how we sleep: only on this host → the futex doorbell (a poll() cannot see
  // shared-memory bytes, and a 1 ms poll slice costs 1 ms per message); anything remote → poll() on the
  // sockets, in 1 ms slices when local peers exist too.
  bool only_local = me_sleeps_on_futex();
  for (const auto& h : hs)
    if (!h->done && peers_[h->peer].link && peers_[h->peer].link->poll_fd() >= 0) only_local = false;
  bool tcp_busy = false;
  if (only_local && has_tcp_)
    for (const auto& p : peers_)
      if (p.link && p.link->poll_fd() >= 0 && p.busy()) tcp_busy = true;
  uint32_t seen = 0;
  Doorbell* me = (seg_ != nullptr && my_local_ >= 0) ? seg_->doorbell(my_local_) : nullptr;
  if (me != nullptr) {
    seen = me->seq.load(std::memory_order_seq_cst);
    me->sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ShmSegment::ring()
  }
  // Re-check after announcing the sleep, so that no wake-up is lost: frames, and shared memory that a
  // peer writes before it wakes us (wait_shared).
  if (!progress() && !done()) {
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

void Engine::wait_until(const std::function<bool()>& done, const std::vector<Handle>& hs, const SharedWait* shared) {
  if (!notify_due_.empty()) notify_deferred();
  if (done()) return;
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(abort_mu_);
    throw_error(abort_code_, "mpcomm: " + context() + ": communicator was aborted: " + abort_msg_);
  }
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
    if (Clock::now() >= deadline) {
      std::string who;
      for (const auto& h : hs) {
        if (h->done) continue;
        if (!who.empty()) who += ", ";
        who += "rank " + std::to_string(h->peer) + info_[static_cast<size_t>(h->peer)].where + " (" +
               (h->is_send && h->single_copy ? "send of " + std::to_string(h->bytes) + " bytes by single copy, not read yet"
                                             : std::string(h->is_send ? "send" : "recv") + " " + std::to_string(h->done_bytes) +
                                                   "/" + std::to_string(h->bytes) + " bytes") +
               ")";
      }
      if (shared != nullptr) who += (who.empty() ? "" : ", ") + shared->what();
      fail(ErrorCode::timeout, "timed out after " + seconds_text(timeout_) + " s waiting for " + who + who_is_behind());
    }
    sleep_a_little(kSleepMs, hs, done);
  }
}

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

}  // namespace mpcomm::native
