#include "backends/native/transport/shm/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "settings/settings.h"
#include "mpcomm/error.h"

namespace mpcomm::native {

static constexpr uint64_t kMagic = 0x4d50434f4d4d5348ull;  // "MPCOMMSH"

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t ShmSegment::default_ring_bytes(int nlocal, int64_t forced) {
  if (forced > 0) {
    size_t b = 4096;
    while (b < static_cast<size_t>(forced)) b <<= 1;
    return b;
  }
  // About 64 MiB of rings per host in all, each between 16 KiB and 1 MiB, a power of two.
  size_t pairs = std::max<size_t>(1, static_cast<size_t>(nlocal) * static_cast<size_t>(nlocal - 1));
  size_t b = 1 << 20;
  while (b > (16u << 10) && b * pairs > (64u << 20)) b >>= 1;
  return b;
}

// Board layout: BoardCtl, the n tags, the 2n small slots (parity-major), the n done words, then for each
// parity n input slots and the result slot.
static size_t board_head(size_t n) {
  return align_up(sizeof(BoardCtl) + n * sizeof(BoardTag) + 2 * n * sizeof(BoardSlot) + n * sizeof(BoardDone), 4096);
}
static size_t board_size(size_t n) {
  return n < 2 ? 0 : board_head(n) + 2 * (n + 1) * ShmSegment::kBoardBytes;
}

// Stages: for each local rank kStageBytes, then the control words, kStageWordSets sets of: each rank's
// published word followed by one consumed word per reader.
static size_t stages_size(size_t n) {
  return n < 2 ? 0 : n * ShmSegment::kStageBytes + align_up(kStageWordSets * n * (n + 1) * sizeof(StageWord), 4096);
}

size_t ShmSegment::layout_size(int nlocal, size_t ring_bytes) {
  size_t n = static_cast<size_t>(nlocal);
  return align_up(sizeof(SegmentHeader), 4096) + align_up(n * sizeof(Doorbell), 4096) +
         align_up(n * n * (sizeof(RingCtl) + ring_bytes), 4096) + stages_size(n) + board_size(n);
}

ShmSegment::ShmSegment(void* base, size_t len, int nlocal, size_t ring_bytes)
    : base_(base), len_(len), nlocal_(nlocal), ring_bytes_(ring_bytes), hdr_(static_cast<SegmentHeader*>(base)) {}

ShmSegment::~ShmSegment() { ::munmap(base_, len_); }

static std::string errno_text() { return std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")"; }

std::unique_ptr<ShmSegment> ShmSegment::create(const std::string& name, int nlocal, size_t ring_bytes) {
  size_t len = layout_size(nlocal, ring_bytes);
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw Internal("mpcomm: cannot create shared memory " + name + ": " + errno_text());
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0) {
    std::string e = errno_text();
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Internal("mpcomm: cannot size shared memory " + name + " to " + std::to_string(len) + " bytes: " + e);
  }
  // Reserve the pages now: a full /dev/shm is a clear error here instead of a SIGBUS mid-collective.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(len)); err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Internal("mpcomm: cannot allocate " + std::to_string(len) + " bytes of shared memory for " + name +
                   " (is /dev/shm full?): " + std::strerror(err));
  }
  // MAP_POPULATE: map every page up front, so that no page fault lands inside a timed collective.
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    std::string e = errno_text();
    ::shm_unlink(name.c_str());
    throw Internal("mpcomm: cannot map shared memory " + name + ": " + e);
  }
  auto seg = std::unique_ptr<ShmSegment>(new ShmSegment(p, len, nlocal, ring_bytes));
  // The file is zero-filled; construct the atomics in place, then publish the magic last.
  auto* h = new (p) SegmentHeader{};
  h->nlocal = static_cast<uint32_t>(nlocal);
  h->ring_bytes = ring_bytes;
  h->abort_flag.store(0);
  for (int i = 0; i < nlocal; ++i) new (seg->doorbell(i)) Doorbell{};
  for (int i = 0; i < nlocal; ++i)
    for (int j = 0; j < nlocal; ++j) new (seg->ring_ctl(i, j)) RingCtl{};
  if (nlocal >= 2) {
    new (seg->board_ctl()) BoardCtl{};
    for (int i = 0; i < nlocal; ++i) new (seg->board_tag(i)) BoardTag{};
    for (int p = 0; p < 2; ++p)
      for (int i = 0; i < nlocal; ++i) new (seg->board_slot(p, i)) BoardSlot{};
    for (int i = 0; i < nlocal; ++i) new (seg->board_done(i)) BoardDone{};
    for (int set = 0; set < kStageWordSets; ++set)
      for (int i = 0; i < nlocal; ++i) {
        new (seg->stage_published(i, set)) StageWord{};
        for (int j = 0; j < nlocal; ++j) new (seg->stage_consumed(i, j, set)) StageWord{};
      }
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return seg;
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name, int nlocal) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw Internal("mpcomm: cannot open shared memory " + name + ": " + errno_text());
  struct stat st{};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(SegmentHeader))) {
    ::close(fd);
    throw Internal("mpcomm: shared memory " + name + " is too small");
  }
  size_t len = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw Internal("mpcomm: cannot map shared memory " + name + ": " + errno_text());
  auto* h = static_cast<SegmentHeader*>(p);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kMagic || h->nlocal != static_cast<uint32_t>(nlocal) ||
      layout_size(nlocal, h->ring_bytes) != len) {
    ::munmap(p, len);
    throw Internal("mpcomm: shared memory " + name + " has an unexpected layout (another job's segment?)");
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(p, len, nlocal, h->ring_bytes));
}

void ShmSegment::unlink(const std::string& name) { ::shm_unlink(name.c_str()); }

Doorbell* ShmSegment::doorbell(int local) const {
  char* b = static_cast<char*>(base_) + align_up(sizeof(SegmentHeader), 4096);
  return reinterpret_cast<Doorbell*>(b) + local;
}

RingCtl* ShmSegment::ring_ctl(int from, int to) const {
  char* b = static_cast<char*>(base_) + align_up(sizeof(SegmentHeader), 4096) +
            align_up(static_cast<size_t>(nlocal_) * sizeof(Doorbell), 4096);
  size_t idx = static_cast<size_t>(from) * static_cast<size_t>(nlocal_) + static_cast<size_t>(to);
  return reinterpret_cast<RingCtl*>(b + idx * (sizeof(RingCtl) + ring_bytes_));
}

char* ShmSegment::ring_data(int from, int to) const { return reinterpret_cast<char*>(ring_ctl(from, to) + 1); }

char* ShmSegment::stage_base() const {
  const size_t n = static_cast<size_t>(nlocal_);
  if (n < 2) return nullptr;
  return static_cast<char*>(base_) + align_up(sizeof(SegmentHeader), 4096) + align_up(n * sizeof(Doorbell), 4096) +
         align_up(n * n * (sizeof(RingCtl) + ring_bytes_), 4096);
}

char* ShmSegment::stage(int local) const {
  char* b = stage_base();
  return b == nullptr ? nullptr : b + static_cast<size_t>(local) * kStageBytes;
}

StageWord* ShmSegment::stage_published(int local, int set) const {
  char* b = stage_base();
  if (b == nullptr) return nullptr;
  const size_t per_set = static_cast<size_t>(nlocal_) * static_cast<size_t>(nlocal_ + 1);
  auto* words = reinterpret_cast<StageWord*>(b + static_cast<size_t>(nlocal_) * kStageBytes);
  return words + static_cast<size_t>(set) * per_set + static_cast<size_t>(local) * static_cast<size_t>(nlocal_ + 1);
}

StageWord* ShmSegment::stage_consumed(int local, int reader, int set) const {
  StageWord* p = stage_published(local, set);
  return p == nullptr ? nullptr : p + 1 + reader;
}

// The seqlock of a tag's words (BoardTag, BoardSlot): seq is 0 while they change.
// `more` writes what goes with the words under the same seqlock (BoardSlot's inline data).
template <size_t K, class More>
static void seqlock_write(std::atomic<uint64_t>& seq, std::atomic<uint64_t> (&words)[K], uint64_t stamp,
                          const void* src, size_t bytes, More&& more) {
  uint64_t w[K] = {};
  std::memcpy(w, src, std::min(bytes, sizeof w));
  seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // readers that see a word below see seq = 0
  for (size_t i = 0; i < K; ++i) words[i].store(w[i], std::memory_order_relaxed);
  more();
  seq.store(stamp, std::memory_order_release);
}

template <size_t K>
static bool seqlock_read(const std::atomic<uint64_t>& seq, const std::atomic<uint64_t> (&words)[K], uint64_t stamp,
                         void* dst, size_t bytes) {
  if (seq.load(std::memory_order_acquire) != stamp) return false;
  uint64_t w[K];
  for (size_t i = 0; i < K; ++i) w[i] = words[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);  // the words were read before seq is read again
  if (seq.load(std::memory_order_relaxed) != stamp) return false;
  std::memcpy(dst, w, std::min(bytes, sizeof w));
  return true;
}

void BoardTag::write(uint64_t stamp, const void* fp, size_t bytes) { seqlock_write(seq, words, stamp, fp, bytes, [] {}); }

bool BoardTag::read(uint64_t stamp, void* fp, size_t bytes) const { return seqlock_read(seq, words, stamp, fp, bytes); }

void BoardSlot::write(uint64_t stamp, const void* fp, size_t fp_bytes, const void* src, size_t n) {
  seqlock_write(seq, words, stamp, fp, fp_bytes, [&] {
    if (n > 0) std::memcpy(data, src, std::min(n, kInlineBytes));
  });
}

bool BoardSlot::read(uint64_t stamp, void* fp, size_t bytes) const { return seqlock_read(seq, words, stamp, fp, bytes); }

char* ShmSegment::board_base() const {
  const size_t n = static_cast<size_t>(nlocal_);
  if (n < 2) return nullptr;
  return static_cast<char*>(base_) + align_up(sizeof(SegmentHeader), 4096) + align_up(n * sizeof(Doorbell), 4096) +
         align_up(n * n * (sizeof(RingCtl) + ring_bytes_), 4096) + stages_size(n);
}

BoardCtl* ShmSegment::board_ctl() const { return reinterpret_cast<BoardCtl*>(board_base()); }

BoardTag* ShmSegment::board_tag(int local) const {
  char* b = board_base();
  return b == nullptr ? nullptr : reinterpret_cast<BoardTag*>(b + sizeof(BoardCtl)) + local;
}

BoardSlot* ShmSegment::board_slot(int parity, int local) const {
  char* b = board_base();
  const size_t n = static_cast<size_t>(nlocal_);
  if (b == nullptr) return nullptr;
  auto* first = reinterpret_cast<BoardSlot*>(b + sizeof(BoardCtl) + n * sizeof(BoardTag));
  return first + static_cast<size_t>(parity & 1) * n + static_cast<size_t>(local);
}

BoardDone* ShmSegment::board_done(int local) const {
  char* b = board_base();
  const size_t n = static_cast<size_t>(nlocal_);
  if (b == nullptr) return nullptr;
  return reinterpret_cast<BoardDone*>(b + sizeof(BoardCtl) + n * sizeof(BoardTag) + 2 * n * sizeof(BoardSlot)) + local;
}

char* ShmSegment::board_input(int parity, int local) const {
  char* b = board_base();
  const size_t n = static_cast<size_t>(nlocal_);
  const size_t slot = static_cast<size_t>(parity & 1) * (n + 1) + static_cast<size_t>(local);
  return b == nullptr ? nullptr : b + board_head(n) + slot * kBoardBytes;
}

char* ShmSegment::board_result(int parity) const { return nlocal_ < 2 ? nullptr : board_input(parity, nlocal_); }

static long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE: the word is shared between processes (and between mappings in one process).
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

void ShmSegment::ring(int local) const {
  // Only a sleeper needs the counter bumped and a wake-up. Dekker with sleep_a_little(): the caller
  // published its bytes before this fence, the sleeper announces `sleeping` before re-checking for
  // bytes, so either we see it asleep or it sees our bytes. Skipping the shared write while the peer
  // spins keeps the doorbell's cache line from bouncing on every chunk of a large transfer.
  Doorbell* d = doorbell(local);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d->sleeping.load(std::memory_order_seq_cst) == 0) return;
  d->seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&d->seq, FUTEX_WAKE, 1, nullptr);
}

void ShmSegment::sleep(int local, uint32_t seen, int ms) const {
  Doorbell* d = doorbell(local);
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  futex(&d->seq, FUTEX_WAIT, seen, &ts);
}

void ShmSegment::publish_abort(int code, int rank, const std::string& msg) const {
  int32_t expected = 0;
  // Claim the record with a sentinel so the message is complete before the flag says so.
  if (hdr_->abort_flag.compare_exchange_strong(expected, -1)) {
    hdr_->abort_rank = rank;
    size_t n = std::min(msg.size(), sizeof(hdr_->abort_msg) - 1);
    std::memcpy(hdr_->abort_msg, msg.data(), n);
    hdr_->abort_msg[n] = '\0';
    hdr_->abort_flag.store(1 + code, std::memory_order_release);
  }
  for (int i = 0; i < nlocal_; ++i) ring(i);
}

int ShmSegment::aborted(std::string* msg) const {
  int32_t f = hdr_->abort_flag.load(std::memory_order_acquire);
  if (f <= 0) return 0;
  if (msg != nullptr) *msg = hdr_->abort_msg;
  return f;
}

// ---- ShmLink --------------------------------------------------------------------------------------

ShmLink::ShmLink(const ShmSegment* seg, int me, int peer)
    : seg_(seg),
      peer_(peer),
      tx_(seg->ring_ctl(me, peer)),
      tx_data_(seg->ring_data(me, peer)),
      rx_(seg->ring_ctl(peer, me)),
      rx_data_(seg->ring_data(peer, me)),
      cap_(seg->ring_bytes()),
      min_chunk_(std::min<uint64_t>(seg->ring_bytes() / 8, 16u << 10)) {
  tx_head_ = tx_->head.load(std::memory_order_relaxed);
  tx_tail_cache_ = tx_->tail.load(std::memory_order_acquire);
  rx_tail_ = rx_->tail.load(std::memory_order_relaxed);
  rx_head_cache_ = rx_->head.load(std::memory_order_acquire);
}

size_t ShmLink::write_some(const void* buf, size_t n) {
  uint64_t free = cap_ - (tx_head_ - tx_tail_cache_);
  if (free < n) {
    tx_tail_cache_ = tx_->tail.load(std::memory_order_acquire);
    free = cap_ - (tx_head_ - tx_tail_cache_);
  }
  // Move whole chunks: a writer that refills every freed cache line works on the lines its reader is
  // reading, and both slow down to the speed of lines bouncing between cores.
  if (free < std::min<uint64_t>(n, min_chunk_)) return 0;
  n = std::min<uint64_t>(n, free);
  if (n == 0) return 0;
  put(buf, n);
  tx_->head.store(tx_head_, std::memory_order_release);
  return n;
}

void ShmLink::put(const void* buf, size_t n) {
  uint64_t off = tx_head_ & (cap_ - 1);
  size_t first = std::min<uint64_t>(n, cap_ - off);
  std::memcpy(tx_data_ + off, buf, first);
  if (first < n) std::memcpy(tx_data_, static_cast<const char*>(buf) + first, n - first);
  tx_head_ += n;
}

bool ShmLink::write_whole(const void* a, size_t an, const void* b, size_t bn) {
  const uint64_t n = an + bn;
  if (cap_ - (tx_head_ - tx_tail_cache_) < n) {
    tx_tail_cache_ = tx_->tail.load(std::memory_order_acquire);
    if (cap_ - (tx_head_ - tx_tail_cache_) < n) return false;
  }
  put(a, an);
  if (bn > 0) put(b, bn);
  tx_->head.store(tx_head_, std::memory_order_release);  // the reader sees the whole frame at once
  return true;
}

size_t ShmLink::peek(const char** data, size_t want) {
  uint64_t avail = rx_head_cache_ - rx_tail_;
  if (avail < want) {
    rx_head_cache_ = rx_->head.load(std::memory_order_acquire);
    avail = rx_head_cache_ - rx_tail_;
  }
  if (avail < std::min<uint64_t>(want, min_chunk_)) return 0;  // whole chunks, as write_some
  uint64_t off = rx_tail_ & (cap_ - 1);
  *data = rx_data_ + off;
  return std::min<uint64_t>(avail, cap_ - off);
}

void ShmLink::consume(size_t n) {
  rx_tail_ += n;
  rx_->tail.store(rx_tail_, std::memory_order_release);
}

size_t ShmLink::read_some(void* buf, size_t n) {
  uint64_t avail = rx_head_cache_ - rx_tail_;
  if (avail < n) {
    rx_head_cache_ = rx_->head.load(std::memory_order_acquire);
    avail = rx_head_cache_ - rx_tail_;
  }
  if (avail < std::min<uint64_t>(n, min_chunk_)) return 0;  // whole chunks, as write_some
  n = std::min<uint64_t>(n, avail);
  if (n == 0) return 0;
  uint64_t off = rx_tail_ & (cap_ - 1);
  size_t first = std::min<uint64_t>(n, cap_ - off);
  std::memcpy(buf, rx_data_ + off, first);
  if (first < n) std::memcpy(static_cast<char*>(buf) + first, rx_data_, n - first);
  rx_tail_ += n;
  rx_->tail.store(rx_tail_, std::memory_order_release);
  return n;
}

}  // namespace mpcomm::native
