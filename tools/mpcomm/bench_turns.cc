#include "bench_turns.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "mpcomm/error.h"

namespace mpcomm::bench {

struct TurnBoard::Slot {
  alignas(64) std::atomic<uint32_t> ready;
  alignas(64) std::atomic<uint32_t> go;
  alignas(64) std::atomic<uint32_t> done;
};

namespace {

constexpr size_t kBoardBytes = 4096;

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, int ms) {
  // Not FUTEX_PRIVATE: the words are shared between the driver and the ranks of every backend.
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ms < 0 ? nullptr : &ts, nullptr, 0);
}

void* map_file(const std::string& path, bool create) {
  int fd = ::open(path.c_str(), create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0600);
  if (fd < 0) throw Internal("mpcomm bench: cannot open the turn board " + path + ": " + std::strerror(errno));
  if (create && ::ftruncate(fd, kBoardBytes) != 0) {
    int err = errno;
    ::close(fd);
    throw Internal("mpcomm bench: cannot size the turn board " + path + ": " + std::strerror(err));
  }
  void* p = ::mmap(nullptr, kBoardBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw Internal("mpcomm bench: cannot map the turn board " + path + ": " + std::strerror(err));
  return p;
}

}  // namespace

TurnBoard TurnBoard::create(const std::string& path, int backends) {
  if (backends < 1 || backends > kMaxBackends)
    throw InvalidArgument("mpcomm bench: at most " + std::to_string(kMaxBackends) + " backends take turns in one run");
  TurnBoard b;
  b.map_ = map_file(path, true);  // ftruncate zeroed it: every count starts at 0
  return b;
}

TurnBoard TurnBoard::attach(const std::string& path, int slot) {
  if (slot < 0 || slot >= kMaxBackends) throw InvalidArgument("mpcomm bench: turn slot " + std::to_string(slot) + " out of range");
  TurnBoard b;
  b.map_ = map_file(path, false);
  b.slot_ = slot;
  return b;
}

TurnBoard::TurnBoard(TurnBoard&& o) noexcept : map_(o.map_), slot_(o.slot_) { o.map_ = nullptr; }

TurnBoard& TurnBoard::operator=(TurnBoard&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) ::munmap(map_, kBoardBytes);
    map_ = o.map_;
    slot_ = o.slot_;
    o.map_ = nullptr;
  }
  return *this;
}

TurnBoard::~TurnBoard() {
  if (map_ != nullptr) ::munmap(map_, kBoardBytes);
}

TurnBoard::Slot* TurnBoard::slot_at(int i) const {
  static_assert(sizeof(Slot) * kMaxBackends <= kBoardBytes);
  return static_cast<Slot*>(map_) + i;
}

void TurnBoard::ready() const { slot_at(slot_)->ready.fetch_add(1); }  // the driver polls it

void TurnBoard::wait_turn(uint32_t k, double timeout_s, const std::string& who) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::atomic<uint32_t>& go = slot_at(slot_)->go;
  for (uint32_t seen = go.load(); seen < k; seen = go.load()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw Timeout("mpcomm bench: " + who + " waited " + std::to_string(static_cast<int>(timeout_s)) +
                    " s for its turn at row " + std::to_string(k) + " (the driver let it measure up to row " +
                    std::to_string(seen) + "; is the driver gone?)");
    futex(&go, FUTEX_WAIT, seen, 100);
  }
}

void TurnBoard::finish(uint32_t k) const {
  slot_at(slot_)->done.store(k);
  futex(&slot_at(slot_)->done, FUTEX_WAKE, INT32_MAX, -1);
}

uint32_t TurnBoard::ready_count(int slot) const { return slot_at(slot)->ready.load(); }

uint32_t TurnBoard::done(int slot) const { return slot_at(slot)->done.load(); }

void TurnBoard::give_turn(int slot, uint32_t k) const {
  slot_at(slot)->go.store(k);
  futex(&slot_at(slot)->go, FUTEX_WAKE, INT32_MAX, -1);
}

void TurnBoard::wait_done_change(int slot, uint32_t seen, int ms) const { futex(&slot_at(slot)->done, FUTEX_WAIT, seen, ms); }

}  // namespace mpcomm::bench
