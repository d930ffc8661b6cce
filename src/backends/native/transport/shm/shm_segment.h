// One shared-memory segment per host and communicator. It holds, for every ordered pair of local
// ranks, a single-producer/single-consumer byte ring, plus a doorbell (futex word) per local rank, an
// abort record, and with 2 local ranks and more a stage per rank and a board (below). The segment is created
// by the host's lowest rank and unlinked as soon as every local rank has mapped it, so nothing is left
// in /dev/shm even if a rank is SIGKILLed afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/native/transport/link.h"

namespace mpcomm::native {

// Per local rank: a doorbell counter that writers bump after moving bytes towards (or away from) it,
// and a flag saying it sleeps on the futex so that only then a wake system call is made.
struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleeping{0};
  std::atomic<uint32_t> closed{0};  // set when the rank destroyed its communicator
  int32_t pid = 0;
  int32_t global_rank = -1;
  // Single-copy probe: the rank's address of its own probe_value, so that a peer can check with
  // process_vm_readv() that it may read this process's memory.
  std::atomic<uint64_t> probe_addr{0};
  uint64_t probe_value = 0;
  // 1 + sequence number of the last collective the rank entered. Written at every collective, so on a
  // cache line of its own: the peers read `sleeping` after every transfer (ShmSegment::ring), and a
  // line the owner had just written would cost each of them a miss (2 ranks, 4 KiB allreduce: see
  // docs/performance.md).
  alignas(64) std::atomic<uint64_t> entered{0};
  // Written only by its rank, read by one peer: a cache line's round trip between the two
  // (HostLocal::round_trip_ns), on a line of its own, with the CPU the rank ran on when it met the peer.
  alignas(64) std::atomic<uint64_t> echo{0};
  std::atomic<int32_t> echo_cpu{-1};
};

struct alignas(64) RingCtl {
  alignas(64) std::atomic<uint64_t> head{0};  // bytes ever written (producer)
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes ever read (consumer)
};

// The board: two sets (by parity of the op's sequence number) of one input slot per local rank and
// one result slot (kBoardBytes each), for collectives in which every local rank leaves its input and the
// result is computed for all once every input is there (the arrival allreduce). Its control words, each
// on a cache line of its own:
struct alignas(64) BoardCtl {
  std::atomic<uint32_t> arrived{0};                 // ranks whose input for the current op is in place
  alignas(64) std::atomic<uint64_t> published{0};  // 1 + sequence number of the last op whose result is in place
  // Once every input is in place, for results of several chunks: (1 + sequence number) << 16 | the next
  // chunk to claim, and how many chunks are reduced.
  alignas(64) std::atomic<uint64_t> work{0};
  alignas(64) std::atomic<uint32_t> chunks_done{0};
};
// Per local rank, written before it arrives: which op its input belongs to (1 + its sequence number,
// and its fingerprint, detail::Fingerprint, as opaque words). Other ranks read it at any time, also while
// its owner rewrites it for its next op: a seqlock (seq is 0 while the words change).
struct alignas(64) BoardTag {
  static constexpr size_t kWords = 6;
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> words[kWords] = {};
  void write(uint64_t stamp, const void* fp, size_t bytes);
  // Copies the fingerprint out when the tag holds `stamp` (and still did after the copy).
  bool read(uint64_t stamp, void* fp, size_t bytes) const;
};

// Per local rank and parity of the op's sequence number, one cache line for small collectives in which
// every rank reads every other's input (the board allreduce): which op it belongs to (1 + its sequence
// number, 0 while it is written, and its fingerprint, as BoardTag) and, when the input is at most
// kInlineBytes, the input itself, so that a peer learns both with one transfer of one line. The owner
// rewrites a slot only two ops later, i.e. once every peer has read it (the algorithm's comment says why).
struct alignas(64) BoardSlot {
  static constexpr size_t kInlineBytes = 32;
  static constexpr size_t kWords = 3;
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> words[kWords] = {};
  char data[kInlineBytes];
  // Writes the fingerprint and `n` bytes of data (n <= kInlineBytes), then `stamp` (release).
  void write(uint64_t stamp, const void* fp, size_t fp_bytes, const void* data, size_t n);
  // Copies the fingerprint out when the slot holds `stamp` (and still did after the copy).
  bool read(uint64_t stamp, void* fp, size_t bytes) const;
};
static_assert(sizeof(BoardSlot) == 64);
// Per local rank: the stamp (1 + sequence number) of the last op whose board slots and input slots —
// the others' and, for the arrival allreduce, its own — this rank has finished reading. A rank rewrites
// its slots of one parity only once every other rank has finished the op that last wrote them
// (HostLocal::board_claim).
struct alignas(64) BoardDone {
  std::atomic<uint64_t> stamp{0};
};

// A local rank's stage: an area of kStageBytes that only its owner writes, for algorithms that copy a
// buffer once into shared memory for every other local rank to copy out (the staged broadcast and
// allgather, staged_flow.cc; the staged allreduce's pieces and results; the two-copy allreduce's result
// pieces). Its control words, each on a
// cache line of its own: how many pieces the owner has published, and per reader how many it has
// consumed, each as (1 + the op's sequence number) << kStagePieceBits | pieces, so that a word left
// from an earlier call never counts.
struct alignas(64) StageWord {
  std::atomic<uint64_t> v{0};
};
inline constexpr int kStagePieceBits = 24;
// Sets of these words: the staged flow uses set 0; the staged allreduce set 0 for the pieces it leaves
// in its stage for the other ranks to reduce, set 1 for the results it leaves there for them to copy.
inline constexpr int kStageWordSets = 2;

struct SegmentHeader {
  uint64_t magic;
  uint32_t nlocal;
  uint32_t pad;
  uint64_t ring_bytes;
  std::atomic<int32_t> abort_flag;  // 0 none, else 1 + ErrorCode
  int32_t abort_rank;
  char abort_msg[1024];
};

class ShmSegment {
 public:
  // Creates (leader) or opens a segment. Names are "/mpcomm.<job>.<unique>".
  static std::unique_ptr<ShmSegment> create(const std::string& name, int nlocal, size_t ring_bytes);
  static std::unique_ptr<ShmSegment> open(const std::string& name, int nlocal);
  ~ShmSegment();
  static void unlink(const std::string& name);

  SegmentHeader* header() const { return hdr_; }
  Doorbell* doorbell(int local) const;
  RingCtl* ring_ctl(int from, int to) const;
  char* ring_data(int from, int to) const;
  // A local rank's stage (kStageBytes) and its control words (StageWord): published, and consumed by
  // local rank `reader`; only segments of 2 local ranks and more have them (else null).
  char* stage(int local) const;
  StageWord* stage_published(int local, int set = 0) const;
  StageWord* stage_consumed(int local, int reader, int set = 0) const;
  static constexpr size_t kStageBytes = size_t{512} << 10;
  // The board (segments of 2 local ranks and more).
  BoardCtl* board_ctl() const;
  BoardTag* board_tag(int local) const;
  BoardSlot* board_slot(int parity, int local) const;
  BoardDone* board_done(int local) const;
  char* board_input(int parity, int local) const;
  char* board_result(int parity) const;
  static constexpr size_t kBoardBytes = size_t{64} << 10;
  size_t ring_bytes() const { return ring_bytes_; }
  int nlocal() const { return nlocal_; }

  // Bumps `local`'s doorbell and wakes it if it sleeps.
  void ring(int local) const;
  // Sleeps on `local`'s doorbell while its counter still equals `seen`, at most `ms` milliseconds.
  void sleep(int local, uint32_t seen, int ms) const;

  // Records the first abort (code, reporting rank, message) and wakes every local rank.
  void publish_abort(int code, int rank, const std::string& msg) const;
  // 0 when not aborted, else 1 + ErrorCode; *msg gets the message.
  int aborted(std::string* msg) const;

  // Bytes per ring: `forced` rounded up to a power of two (MPCOMM_SHM_RING_BYTES; 0: sized by nlocal).
  static size_t default_ring_bytes(int nlocal, int64_t forced);

 private:
  ShmSegment(void* base, size_t len, int nlocal, size_t ring_bytes);
  static size_t layout_size(int nlocal, size_t ring_bytes);
  char* stage_base() const;
  char* board_base() const;
  void* base_;
  size_t len_;
  int nlocal_;
  size_t ring_bytes_;
  SegmentHeader* hdr_;
};

// The link from local rank `me` to local rank `peer`: writes go to ring (me -> peer), reads come from
// ring (peer -> me). Lock-free: each ring has one writer and one reader.
class ShmLink : public Link {
 public:
  ShmLink(const ShmSegment* seg, int me, int peer);
  size_t write_some(const void* buf, size_t n) override;
  bool write_whole(const void* a, size_t an, const void* b, size_t bn) override;
  size_t read_some(void* buf, size_t n) override;
  size_t peek(const char** data, size_t want) override;
  void consume(size_t n) override;
  void notify() override { seg_->ring(peer_); }
  int write_offset() const override { return static_cast<int>(tx_head_ & 63); }

 private:
  const ShmSegment* seg_;
  int peer_;
  RingCtl* tx_;
  char* tx_data_;
  RingCtl* rx_;
  char* rx_data_;
  uint64_t cap_;
  uint64_t min_chunk_;  // bytes moved at a time unless the frame has fewer left
  void put(const void* buf, size_t n);  // n bytes at our head, which has room for them (not published)
  uint64_t tx_head_, tx_tail_cache_;  // our view of the ring we write
  uint64_t rx_tail_, rx_head_cache_;  // our view of the ring we read
};

}  // namespace mpcomm::native
