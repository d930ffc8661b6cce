// The native backend's message engine: frames, matching, progress and bounded waiting, written once for
// every transport. Its parts, one job per file:
//   engine.cc       posting sends and receives (the small-frame fast path), the engine's setup
//   matching.cc     frames matched to posted receives: collective frames from one peer in order, p2p
//                   frames by tag (FIFO per tag); frames that came first kept as unexpected
//   progress.cc     moving bytes: per peer, the receive side (headers, payloads, reducing receives) and
//                   the send queue; a wait's passes until it is done (spinning, then yielding)
//   single_copy.cc  frames that go by single copy (a descriptor, the receiver's read, an ack), lazy p2p
//                   frames (unexpected.h), the copies HostLocal makes
//   waiting.cc      what a wait does once spinning did not finish it: sleep on the futex doorbell (shared
//                   memory) or in poll() (TCP), checking at least every 50 ms for aborts, dead peers and
//                   the deadline
//   failures.h      which op errors name, the first failure, how peers are told
//   path_policy.h   which messages go by single copy (decided from the table at creation)
//   host_local.h    what ranks of one host share besides frames (board, stages, placement)
//
// Every message on a Link is a FrameHeader followed by its payload (frame.h). Collective frames carry
// the sending op's Fingerprint; the receiver compares it with its own op and reports a Mismatch naming
// both calls instead of reading wrong data. Frames that arrive before their receive is posted are kept,
// so two ranks that send to each other at once never deadlock. Progress is made only inside
// wait()/test() (no helper threads).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "backends/native/engine/failures.h"
#include "backends/native/engine/frame.h"
#include "backends/native/engine/host_local.h"
#include "backends/native/engine/path_policy.h"
#include "backends/native/engine/single_copy.h"
#include "backends/native/engine/unexpected.h"
#include "backends/native/transport/link.h"
#include "backends/native/transport/shm/shm_segment.h"
#include "core/op.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm::native {

using Clock = std::chrono::steady_clock;

// The engine's fixed thresholds (`mpcomm info` lists them: engine_constants()).
// A small collective frame to a peer with nothing queued goes straight into the link when the whole
// frame fits (shared memory): no Xfer, no queue, and a handle that is done already. Below this size such
// payloads follow their header without filler.
inline constexpr size_t kFastSendBytes = 4096;
// Payloads from this size on are placed at their source's offset within a cache line (Link::write_offset).
inline constexpr size_t kAlignFrom = 4096;
// Collective payloads above this size wait in the link for their receive instead of being buffered
// (frames from one peer match in order, and every rank calls collectives in the same order, so the
// receive will come).
inline constexpr uint64_t kEagerBytes = 4096;
// A lazy frame whose receive is not posted within this long is read into a buffer and its sender
// released: that ends the wait of a program whose ranks all block in sends to each other before they
// receive. A receive that comes later costs one more copy.
inline constexpr auto kLazyLimit = std::chrono::milliseconds(200);
// On a crowded host a single-copy read of a collective frame goes in pieces of this size with a yield
// between them, so that the readers of one source that share a CPU take turns and find the piece in the
// cache.
inline constexpr size_t kCrowdedReadPiece = size_t{1} << 20;
// A waiter that has spun makes this many more passes, yielding the CPU between them, before it sleeps;
// it sleeps at most kLongestSleep at a time (its health is checked after each), and looks whether the
// peers it waits for are alive at most every kLivenessEvery.
inline constexpr int kYieldPasses = 50;
inline constexpr auto kLongestSleep = std::chrono::milliseconds(50);
inline constexpr auto kLivenessEvery = std::chrono::milliseconds(100);

// The engine's knobs, read once per communicator from its Options (engine_settings()).
struct EngineSettings {
  // How long a waiter keeps polling (yielding between passes) before it sleeps: MPCOMM_SPIN_US.
  std::chrono::microseconds spin_for{1000};
  // Messages to local ranks may go by single copy (path_policy.h): MPCOMM_SINGLE_COPY.
  bool single_copy = true;
  // Largest frame buffered before its receive is posted: MPCOMM_MAX_UNEXPECTED_MB.
  uint64_t max_unexpected = uint64_t{1} << 30;
  // This machine's CPUs: MPCOMM_CPUS, else the online ones.
  long cpus = 0;
  // Ranks of the whole communicator on this machine (its hostname), emulated hosts included (0: this
  // host's ranks only).
  int machine_ranks = 0;
  // How often a long wait asks the store for a failure another host published: an elastic communicator's
  // survivors must hear at once that a peer moved on to shrink(); otherwise a failure ends the job anyway.
  std::chrono::milliseconds store_every{500};
};
EngineSettings engine_settings(const Options& opts);

// Combines `len` bytes (whole elements) of payload at offset `off` into a reducing receive.
void combine(Xfer& x, size_t off, const char* src, size_t len);

class Engine final : public HostLocal::Owner {
 public:
  Engine(int rank, int size, std::vector<std::unique_ptr<Link>> links, std::vector<PeerInfo> peers,
         std::shared_ptr<const ShmSegment> seg, int my_local, std::shared_ptr<Store> abort_store, Millis timeout,
         EngineSettings settings = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Which messages go by single copy; until set (at the end of setup), none.
  void set_paths(PathPolicy paths) { paths_ = std::move(paths); }
  const EngineSettings& settings() const { return settings_; }

  // The op whose frames send()/recv() create and whose name errors carry; set before each call into the
  // engine (a collective, a send or receive started, waited or tested). op must live until the next begin().
  void begin(const detail::Op* op) {
    failures_.begin(op);
    fp_ = detail::fingerprint(*op);
  }
  // Marks entry into collective number `seq` (visible to local peers, for "who is behind").
  void entered(uint64_t seq);

  // A collective frame. route: Route::ring never goes by single copy (the two-copy allreduce, ring_shm).
  // A frame that goes into the link whole as it is posted (below kFastSendBytes, nothing queued) wakes a
  // sleeping receiver only at this rank's next wait or test, or at notify_deferred(): the wake's fence
  // waits until the frame's lines are this CPU's, so the frames of several sends go out together (a
  // broadcast's root: one such wait for all n-1 frames, not one after each).
  Handle send(int peer, const void* data, size_t bytes, Route route = Route::usual);
  // Wakes the sleeping receivers of the frames send() left for later. The backend calls it when an op
  // ends, however it ends; the engine's waits call it when they begin.
  void notify_deferred();
  Handle recv(int peer, void* data, size_t bytes);  // collective frame
  // Collective frame whose payload is reduced into dst as it arrives: dst = own op payload (own may be
  // dst). Over shared memory the payload is read straight from the ring, never copied. `stream_to`:
  // the result also goes there, with streaming stores (dst stays in the cache to be sent on).
  // `own_first`: dst = own op incoming, else incoming op own (so that two ranks reduce in the same
  // order: min/max of NaNs and NaN payloads depend on it).
  Handle recv_reduce(int peer, void* dst, const void* own, size_t bytes, DataType dt, ReduceOp op,
                     void* stream_to = nullptr, bool own_first = true);
  Handle send_p2p(int peer, int tag, const void* data, size_t bytes);
  // peer kAnySource: the first frame with the tag from any rank (the handle's peer names it once matched).
  Handle recv_p2p(int peer, int tag, void* data, size_t bytes);

  void wait(const Handle& h);
  void wait_all(const std::vector<Handle>& hs);
  // One progress pass; true when h is done. Rethrows a failure.
  bool test(const Handle& h);

  // What the ranks can do besides frames when all of them are on this host (host_local.h); null when
  // they are not, or for one rank.
  HostLocal* host() { return host_.get(); }
  // Whether this rank may read `peer`'s memory (probed once it can be: SingleCopy::probe).
  bool single_copy_to(int peer) { return single_copy_.usable(peer); }

  // Fails the current op (Failures::fail).
  [[noreturn]] void fail(ErrorCode code, const std::string& msg) { failures_.fail(code, msg); }
  // Records the first failure and tells peers; any thread.
  void publish_abort(ErrorCode code, const std::string& msg) { failures_.publish(code, msg); }
  std::string abort_reason() const { return failures_.reason(); }
  // Marks this rank's shared-memory doorbell closed so local peers stop waiting for it.
  void close();

  int rank() const override { return rank_; }
  int size() const { return size_; }

  // HostLocal::Owner.
  void copy_with_peer(int peer, char* local_buf, uint64_t remote, size_t n, bool write) override;
  int single_copy_state(int rank) override;
  void wait_shared(const std::function<bool()>& done, const std::function<std::vector<int>()>& pending,
                   const std::function<std::string()>& what) override;
  bool peer_alive(int peer) const override;
  // A rank of this host whose communicator was destroyed (it closed its doorbell).
  bool left_in_order(int peer) const;
  void wake_local_peers() const override;

 private:
  struct Peer {
    std::unique_ptr<Link> link;
    std::deque<Handle> sendq;
    std::deque<Handle> coll_recvs;
    std::list<Handle> p2p_recvs;
    std::list<std::shared_ptr<Unexpected>> unexpected;
    FrameHeader rx_hdr{};
    size_t rx_hdr_got = 0;
    bool rx_in_payload = false;
    size_t rx_skip = 0;  // filler bytes still to drop before the payload
    // A large collective frame (above kEagerBytes), or a collective single-copy descriptor, arrived
    // before its receive was posted: it stays in the link until the receive is posted.
    bool rx_stalled = false;
    // Single copy: our sends the receiver reads; collective ones are acknowledged in order, p2p ones by
    // token in any order.
    std::deque<Handle> awaiting_ack;
    std::list<Handle> p2p_awaiting;
    int32_t next_token = 0;
    bool rx_single = false;           // the frame being received is a descriptor
    uint64_t rx_desc[2] = {0, 0};     // address in the sender; for p2p its ack's token (else unused)
    size_t rx_desc_got = 0;
    Handle rx_target;
    std::shared_ptr<Unexpected> rx_unexp;
    size_t rx_got = 0;
    // The peer closed the stream. Not an error by itself (a rank that finished may leave first); an
    // error for any operation that still needs this peer.
    bool closed = false;
    std::string closed_why;
    bool notify_due = false;  // a frame went into the link whose receiver was not woken yet (send())
    bool busy() const {
      return !sendq.empty() || !coll_recvs.empty() || !p2p_recvs.empty() || rx_in_payload || rx_hdr_got > 0 ||
             !awaiting_ack.empty() || !p2p_awaiting.empty();
    }
  };
  // What wait_until() waits for besides handles (wait_shared).
  struct SharedWait {
    const std::function<std::vector<int>()>& pending;
    const std::function<std::string()>& what;
  };

  // ---- posting (engine.cc)
  Handle post_send(int peer, uint8_t kind, int tag, const detail::Fingerprint& fp, const void* data, size_t bytes,
                   Route route = Route::usual);
  void post_recv(const Handle& x);
  // ---- matching (matching.cc)
  void post_any_recv(const Handle& x);
  void claim(const Handle& x, Peer& p, std::list<std::shared_ptr<Unexpected>>::iterator it);
  void keep_unexpected(Peer& p, std::shared_ptr<Unexpected> u);
  void on_header(int peer, Peer& p);
  Handle take_p2p_recv(int peer, Peer& p, const FrameHeader& h);
  void finish_payload(Peer& p);
  void check_frames_match_op();
  // ---- progress and the wait's passes (progress.cc)
  void wait_until(const std::function<bool()>& done, const std::vector<Handle>& hs, const SharedWait* shared = nullptr);
  bool progress();
  bool progress_send(int peer, Peer& p);
  bool progress_recv(int peer, Peer& p);
  bool progress_reduce_payload(Peer& p);
  void link_failed(Peer& p, const PeerFailure& e);
  // ---- single copy (single_copy.cc)
  void receive_single_copy(int peer, Peer& p);
  bool read_lazy_frames();
  void ack_p2p(int peer, int32_t token);
  // ---- waiting (waiting.cc)
  void sleep_a_little(int max_ms, const std::vector<Handle>& hs, const std::function<bool()>& done);
  void check_health(const std::vector<Handle>& hs, const SharedWait* shared, const std::function<bool()>& done);
  void check_board_tags();
  std::string who_is_behind() const;
  [[noreturn]] void time_out(const std::vector<Handle>& hs, const SharedWait* shared);

  int rank_, size_;
  std::vector<Peer> peers_;
  std::vector<PeerInfo> info_;
  std::shared_ptr<const ShmSegment> seg_holder_;  // outlives the links that point into it
  const ShmSegment* seg_;
  int my_local_;
  Failures failures_;
  Millis timeout_;
  EngineSettings settings_;
  SingleCopy single_copy_;
  PathPolicy paths_;
  std::unique_ptr<HostLocal> host_;
  bool has_tcp_ = false;
  // Progress passes before the first yield (waiting.cc says why): many while every local rank has a CPU
  // of its own, 2 when local ranks outnumber the CPUs or there are TCP peers on a crowded machine.
  int spin_passes_ = 200;
  bool crowded_ = false;  // this host's ranks outnumber its CPUs
  detail::Fingerprint fp_{};
  std::chrono::steady_clock::time_point next_liveness_{};
  std::vector<char> bounce_;  // reducing receives over links without peek(), single-copy reductions
  UnexpectedBuffers buffers_;
  // Receives from any rank not matched yet, in posting order; the counters that order p2p receives by
  // posting (Xfer::posted) and unexpected frames by arrival (Unexpected::arrival).
  std::list<Handle> any_recvs_;
  uint64_t posted_ = 0, arrived_ = 0;
  int lazy_frames_ = 0;          // lazy single-copy p2p frames held (Unexpected::lazy)
  std::vector<int> notify_due_;  // peers whose Peer::notify_due is set
  // The handle of every send that completed as it was posted (send()'s fast path): done, never changed.
  const Handle sent_ = [] {
    auto x = std::make_shared<Xfer>();
    x->is_send = true;
    x->done = true;
    return x;
  }();
};

}  // namespace mpcomm::native
