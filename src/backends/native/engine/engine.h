// The native backend's message engine: frames, matching, progress and bounded waiting, written once
// for every transport.
//
// Every message on a Link is a FrameHeader followed by its payload. Collective frames carry the
// sending op's Fingerprint; the receiver compares it with its own op and reports a Mismatch naming
// both calls instead of reading wrong data. Collective frames from one peer match posted receives in
// FIFO order; point-to-point frames match by tag (FIFO per tag). Frames that arrive before their
// receive is posted are kept as "unexpected" and copied out later, so two ranks that send to each
// other at once never deadlock. Progress is made only inside wait()/test() (no helper threads); a
// waiter spins briefly, then sleeps on its futex doorbell (shared memory) or in poll() (TCP), checking
// at least every 50 ms for aborts reported by peers, dead local peers and its deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/abort_record.h"
#include "core/op.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"
#include "backends/native/engine/host_local.h"
#include "backends/native/transport/link.h"
#include "backends/native/transport/shm/shm_segment.h"

namespace mpcomm::native {

using Clock = std::chrono::steady_clock;

struct FrameHeader {
  uint32_t magic;
  uint8_t kind;  // kFrameCollective or kFrameP2P
  uint8_t pad[3];
  int32_t tag;
  uint32_t skip;  // filler bytes between this header and the payload (see Link::write_offset)
  detail::Fingerprint fp;
  uint64_t bytes;
};
static_assert(sizeof(FrameHeader) == 48);
inline constexpr uint32_t kFrameMagic = 0x4d504652;  // "MPFR"
inline constexpr uint8_t kFrameCollective = 1;
inline constexpr uint8_t kFrameP2P = 2;
inline constexpr uint8_t kFrameAck = 3;  // single-copy frame read: the sender may reuse its buffer
inline constexpr uint8_t kFlagSingleCopy = 1;  // FrameHeader::pad[0]: the payload is a SingleCopy descriptor
inline constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;
// Sends marked Route::direct go by single copy from this size on (unless MPCOMM_SINGLE_COPY_KB is lower).
inline constexpr size_t kDirectFrom = size_t{128} << 10;
// Sends from this size go by single copy on a host whose ranks outnumber its CPUs, and through the ring
// or by single copy, whichever is faster lately, on other hosts (Engine's constructor).
inline constexpr size_t kP2PSingleFrom = size_t{64} << 10;
// How a collective frame to a local rank travels: usual (single copy from Engine::single_copy_from()),
// direct (single copy from kDirectFrom on), ring (always through the shared-memory ring).
enum class Route : uint8_t { usual, direct, ring };

// The engine's knobs, read once per communicator from its Options (engine_settings()).
struct EngineSettings {
  // How long a waiter keeps polling (yielding between passes) before it sleeps: MPCOMM_SPIN_US.
  std::chrono::microseconds spin_for{1000};
  // Large collective frames between local processes may go by single copy (the receiver reads the
  // sender's buffer with process_vm_readv()): MPCOMM_SINGLE_COPY on and MPCOMM_SINGLE_COPY_KB > 0 ...
  bool single_copy = true;
  // ... from this many bytes on: MPCOMM_SINGLE_COPY_KB.
  size_t single_copy_from = size_t{256} << 10;
  // Largest frame buffered before its receive is posted: MPCOMM_MAX_UNEXPECTED_MB.
  uint64_t max_unexpected = uint64_t{1} << 30;
  // This machine's CPUs: MPCOMM_CPUS, else the online ones (0: ask the system).
  long cpus = 0;
  // Ranks of the whole communicator on this machine (its hostname), emulated hosts included (0: this
  // host's ranks only).
  int machine_ranks = 0;
};
EngineSettings engine_settings(const Options& opts);

// One pending send or receive.
struct Xfer {
  int peer = -1;
  bool is_send = false;
  uint8_t kind = kFrameCollective;
  int tag = 0;
  detail::Fingerprint fp;
  const char* sdata = nullptr;
  char* rdata = nullptr;
  size_t bytes = 0;
  size_t done_bytes = 0;  // send: header + payload written; recv: payload read
  FrameHeader hdr{};      // send only
  bool done = false;
  bool single_copy = false;  // send: offered as a descriptor; done when the receiver's ack arrives
  int32_t token = 0;         // single-copy p2p send: what the receiver's ack names it by (1 and up)
  int8_t p2p_path = -1;      // p2p send whose path is chosen (Engine::choose_p2p_single): Link::kThroughLink ...
  Route route = Route::usual;  // send: when it goes by single copy (Engine::send)
  // A reducing receive (recv_reduce): rdata = own op payload, combined as the bytes arrive instead of
  // copied. `carry` holds the bytes of an element not yet complete (split by the ring's end, or by TCP).
  bool reduce = false;
  const char* own = nullptr;
  // recv_reduce: the result also goes here, with streaming stores (reduce_into_streamed).
  char* stream_to = nullptr;
  bool own_first = true;  // recv_reduce: own op incoming (else incoming op own)
  DataType dtype = DataType::uint8;
  ReduceOp redop = ReduceOp::sum;
  size_t combined = 0;
  char carry[16];
  size_t carry_len = 0;
};
using Handle = std::shared_ptr<Xfer>;

struct PeerInfo {
  int pid = 0;           // process id, when on this host
  bool same_host = false;
  int local = -1;        // index in the shared-memory segment, when on this host
  std::string where;     // for messages, on another host: " on <machine> at <address>"
};

class Engine {
 public:
  Engine(int rank, int size, std::vector<std::unique_ptr<Link>> links, std::vector<PeerInfo> peers,
         std::shared_ptr<const ShmSegment> seg, int my_local, std::shared_ptr<Store> abort_store, Millis timeout,
         EngineSettings settings = {});
  ~Engine();

  // How errors name the op: describe(ctx, op), called only when an error needs it (a description
  // formatted per call cost a string or more per send and receive).
  using Describe = std::string (*)(const void* ctx, const detail::Op& op);
  // The op whose frames send()/recv() create and whose name errors carry; set before each call into the
  // engine (a collective, a send or receive started, waited or tested). op must live until the next begin().
  void begin(const detail::Op* op, Describe describe, const void* ctx);
  // Marks entry into collective number `seq` (visible to local peers, for "who is behind").
  void entered(uint64_t seq);

  // Collective frame. Route::direct: for algorithms in which every reader copies straight from the
  // source (flat allgather): single copy from kDirectFrom on instead of single_copy_from(); through a
  // ring, each byte would be copied twice, and with ranks outnumbering CPUs the second copy is the cost
  // (4 ranks on 2 CPUs, 512 KiB blocks: 1750 us through rings, 680-790 us by single copy).
  // Route::ring: never by single copy (the two-copy allreduce, whatever MPCOMM_SINGLE_COPY_KB says).
  // A frame that goes into the link whole as it is posted (below 4 KiB, nothing queued) wakes a sleeping
  // receiver only at this rank's next wait or test, or at notify_deferred(): the wake's fence waits until
  // the frame's lines are this CPU's, so the frames of several sends go out together (a broadcast's
  // root: one such wait for all n-1 frames, not one after each).
  Handle send(int peer, const void* data, size_t bytes, Route route = Route::usual);
  // Wakes the sleeping receivers of the frames send() left for later. The front door calls it when an
  // op ends, however it ends; the engine's waits call it when they begin.
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
  Handle recv_p2p(int peer, int tag, void* data, size_t bytes);

  void wait(const Handle& h);
  void wait_all(const std::vector<Handle>& hs);
  // One progress pass; true when h is done. Rethrows a failure.
  bool test(const Handle& h);

  // What the ranks can do besides frames when all of them are on this host (host_local.h); null when
  // they are not, or for one rank.
  HostLocal* host() { return host_.get(); }
  // Collective frames from this size on go by single copy to local ranks (SIZE_MAX: never).
  size_t single_copy_from() const { return settings_.single_copy ? settings_.single_copy_from : SIZE_MAX; }

  // Fails the current op: "mpcomm: <op on this rank>: msg", published as this communicator's abort
  // reason (so that the other ranks fail too), then thrown as the error of `code`.
  [[noreturn]] void fail(ErrorCode code, const std::string& msg);
  // Records the first failure and tells peers (shared-memory abort record, store key mpcomm/abort).
  void publish_abort(ErrorCode code, const std::string& msg);
  std::string abort_reason() const;
  // Marks this rank's shared-memory doorbell closed so local peers stop waiting for it.
  void close();

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  friend class HostLocal;  // its waits, single copies and probes are the engine's
  // A frame that arrived before its receive was posted, buffered. A receive posted while its payload
  // is still arriving takes what came so far and the rest straight from the link (reducing receives,
  // which cannot, claim it and take it whole at the end).
  struct Unexpected {
    FrameHeader hdr{};
    std::unique_ptr<char[]> data;  // not value-initialized: the payload overwrites it
    size_t capacity = 0;           // of data (a reused buffer may be larger than the payload)
    bool complete = false;
    Handle claimant;  // a reducing receive posted while the payload was still arriving, or a lazy frame's
    // A single-copy p2p frame (a crowded host's large sends): only its descriptor came; the payload
    // stays in the sender's buffer until the receive is posted, or until kLazyLimit passed (then it is
    // read into a buffer, so that a program whose ranks all block in sends still ends).
    bool lazy = false;
    uint64_t remote = 0;  // the sender's buffer
    int32_t token = 0;    // the ack's
    std::chrono::steady_clock::time_point since{};
  };
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
    // A large collective frame arrived before its receive was posted: its payload stays in the link
    // (no buffering, no extra copy) until the receive is posted. Collective frames from one peer are
    // matched in order, and every rank calls collectives in the same order, so the receive will come.
    bool rx_stalled = false;
    // Single copy (large collective frames between local processes): the receiver copies straight out
    // of the sender's buffer with process_vm_readv() and acknowledges; the sender's send completes then.
    std::deque<Handle> awaiting_ack;  // our single-copy collective sends, in order
    std::list<Handle> p2p_awaiting;   // our single-copy p2p sends, acknowledged by token in any order
    int32_t next_token = 0;
    bool rx_single = false;           // the frame being received is a descriptor
    uint64_t rx_desc[2] = {0, 0};     // address in the sender; for p2p its ack's token (else unused)
    size_t rx_desc_got = 0;
    int single_copy_ok = 0;           // 0 not probed yet, 1 yes, -1 no
    // A large p2p payload from this peer through the link into its posted receive: nanoseconds and
    // bytes of our copies out of the ring so far (their rate is published to the sender).
    uint64_t rx_copy_ns = 0;
    size_t rx_copy_bytes = 0;
    // Our own copies into the ring for large p2p sends to this peer: their last rate by size class
    // (MB/s, half the new and half the last; Link::rate_class), and the current send's nanoseconds so far.
    uint64_t tx_ring_rate[Link::kRateClasses] = {};
    uint64_t tx_copy_ns = 0;
    uint64_t rx_rate[Link::kRateClasses][2] = {};  // what we published, by size class and path (MB/s)
    // Whether the first copy of a class (by path; our copies into the ring) was seen: it is not counted.
    bool rx_warm[Link::kRateClasses][2] = {};
    bool tx_warm[Link::kRateClasses] = {};
    // Our p2p sends to this peer whose path was chosen, by size class, and the last of them that went
    // each path (choose_p2p_single()).
    uint32_t large_sends[Link::kRateClasses] = {};
    uint32_t last_use[Link::kRateClasses][2] = {};
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

  // The handle of every send that completed as it was posted (send()'s fast path): done, never changed.
  const Handle sent_ = [] {
    auto x = std::make_shared<Xfer>();
    x->is_send = true;
    x->done = true;
    return x;
  }();
  Handle post_send(int peer, uint8_t kind, int tag, const detail::Fingerprint& fp, const void* data, size_t bytes,
                   Route route = Route::usual);
  void post_recv(const Handle& x);
  bool progress();
  void link_failed(Peer& p, const PeerFailure& e);
  bool progress_send(int peer, Peer& p);
  bool progress_recv(int peer, Peer& p);
  void on_header(int peer, Peer& p);
  Handle take_p2p_recv(int peer, Peer& p, const FrameHeader& h);
  void finish_payload(Peer& p);
  bool progress_reduce_payload(Peer& p);
  bool can_single_copy(int peer, Peer& p);
  void copy_with_peer(int peer, char* local_buf, uint64_t remote, size_t n, bool write);
  // HostLocal::wait: waits until done() holds, for shared memory that local peers write outside frames
  // (the board, the stages). `pending()` gives the ranks still awaited, watched for liveness; `what()`
  // says what a timeout waited for. Frames keep moving meanwhile, and a collective frame of this op's
  // sequence number but another fingerprint is a Mismatch: its sender runs another collective, one that
  // waits for frames. (The other way round, every wait checks the board's tags: check_board_tags.)
  // wake_local_peers: HostLocal::wake.
  void wait_shared(const std::function<bool()>& done, const std::function<std::vector<int>()>& pending,
                   const std::function<std::string()>& what);
  void wake_local_peers() const;
  bool same_host(int peer) const;
  void receive_single_copy(int peer, Peer& p);
  static void deliver(Xfer& x, const char* data);
  // What wait_shared() waits for besides handles.
  struct SharedWait {
    const std::function<std::vector<int>()>& pending;
    const std::function<std::string()>& what;
  };
  void wait_until(const std::function<bool()>& done, const std::vector<Handle>& hs, const SharedWait* shared = nullptr);
  void sleep_a_little(int max_ms, const std::vector<Handle>& hs, const std::function<bool()>& done);
  bool me_sleeps_on_futex() const;
  void check_health(const std::vector<Handle>& hs, const SharedWait* shared, const std::function<bool()>& done);
  void check_frames_match_op();
  void check_board_tags();
  bool peer_alive(int peer) const;
  std::string context() const;
  std::string first_reported_failure();
  std::string who_is_behind() const;

  int rank_, size_;
  std::vector<Peer> peers_;
  std::vector<PeerInfo> info_;
  std::shared_ptr<const ShmSegment> seg_holder_;  // outlives the links that point into it
  const ShmSegment* seg_;
  int my_local_;
  AbortWatch abort_watch_;
  Millis timeout_;
  EngineSettings settings_;
  std::unique_ptr<HostLocal> host_;
  bool has_tcp_ = false;
  // Progress passes before the first yield: many while every local rank has a CPU of its own (a peer's
  // bytes arrive within microseconds); 2 when local ranks outnumber the CPUs (the peer we wait for may
  // need our CPU to run at all: 4 ranks on 2 CPUs, 8 B allreduce 17 -> 8 us) or when there are TCP
  // peers (a pass costs a recv() per socket, and emulated hosts share the CPUs: 2 hosts x 2 ranks on
  // 2 CPUs, 8 B allreduce 140 -> 25 us).
  int spin_passes_ = 200;
  bool crowded_ = false;  // this host's ranks outnumber its CPUs
  size_t p2p_single_from_ = SIZE_MAX;  // sends from this size to local ranks go by single copy (crowded hosts)
  // Sends to local ranks from this size (below p2p_single_from_) go through the ring or by single copy,
  // whichever was faster lately (choose_p2p_single()).
  size_t p2p_choice_from_ = SIZE_MAX;
  bool choose_p2p_single(Peer& p, size_t bytes);
  void publish_rate(Peer& p, int path, size_t bytes, uint64_t ns);
  const detail::Op* op_ = nullptr;
  Describe describe_ = nullptr;
  const void* describe_ctx_ = nullptr;
  detail::Fingerprint fp_{};
  // The first failure, recorded by the driving thread or by an abort from any other (abort_mu_).
  bool record_abort(ErrorCode code, const std::string& msg);  // false when one was recorded before
  mutable std::mutex abort_mu_;
  std::string abort_msg_;
  ErrorCode abort_code_ = ErrorCode::internal;
  std::atomic<bool> aborted_{false};
  std::chrono::steady_clock::time_point next_liveness_{}, next_store_check_{};
  std::vector<char> bounce_;  // reducing receives over links without peek()
  // Buffers of large unexpected payloads, kept for the next (kSpareBuffers at most): a fresh one of
  // many MiB costs a page fault and a cleared page for every 4 KiB it receives, every time.
  void take_buffer(Unexpected& u, size_t bytes);
  void give_back_buffer(Unexpected& u);
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> spare_buffers_;
  // Lazy single-copy p2p frames held (Unexpected::lazy): read those whose receive is posted, and into a
  // buffer those held kLazyLimit without one.
  bool read_lazy_frames();
  void ack_p2p(int peer, int32_t token);
  int lazy_frames_ = 0;
  std::vector<int> notify_due_;  // peers whose Peer::notify_due is set
};

}  // namespace mpcomm::native
