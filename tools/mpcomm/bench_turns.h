// Backends that take turns, row by row, within one `mpcomm bench` run.
//
// Why: on a shared machine the conditions change within a minute. On the 2-vCPU cloud machines this
// project is measured on, the hypervisor moves the two vCPUs between host cores that share a cache,
// that are farther apart, and that are hyperthreads of one core: a cache line's round trip between
// the two CPUs then takes about 110, 520 or 50 ns, and a buffer written on one CPU is read on the other
// at about 9, 1.6 or more GB/s (docs/performance.md, "Why runs differ"). Measured one backend after the
// other, each backend's whole sweep can land in another such state, and "side by side" compares
// machines rather than backends. So the driver starts every backend's ranks at once and lets them
// measure in turns: row k of every backend, then row k+1 of every backend, the order of the backends
// reversed every other row. Ranks not on turn block in a futex and take no CPU. Before each turn the
// driver measures how far apart the first two CPUs are (core/cpu_pair.h) and records it with the row.
//
// The board is a small file that the driver creates and every rank maps (the driver removes its name
// once all ranks have mapped it). Per backend: `ready` counts the ranks that reached their first row,
// `go` is the row that backend may measure, `done` the last row its rank 0 finished (kAllDone once the
// backend has no rows left and waits only to exit).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace mpcomm::bench {

class TurnBoard {
 public:
  static constexpr int kMaxBackends = 16;
  static constexpr uint32_t kAllDone = 0xffffffffu;

  // The driver's board for `backends` backends, in a new file at `path` (truncated, zeroed).
  static TurnBoard create(const std::string& path, int backends);
  // A rank's view of the board at `path`, for backend `slot`.
  static TurnBoard attach(const std::string& path, int slot);
  TurnBoard() = default;
  TurnBoard(TurnBoard&& o) noexcept;
  TurnBoard& operator=(TurnBoard&& o) noexcept;
  ~TurnBoard();

  // ---- the ranks (slot = the backend attached to) ----
  // This rank has its communicator and buffers and waits for its first turn.
  void ready() const;
  // Blocks until the driver lets this backend measure row k (1, 2, ...); throws Timeout after
  // timeout_s, naming `who` and the row.
  void wait_turn(uint32_t k, double timeout_s, const std::string& who) const;
  // Rank 0: row k is measured (or, with kAllDone, nothing is left but to exit).
  void finish(uint32_t k) const;

  // ---- the driver ----
  uint32_t ready_count(int slot) const;
  uint32_t done(int slot) const;
  void give_turn(int slot, uint32_t k) const;
  // Sleeps until done(slot) changes from `seen` or `ms` milliseconds pass.
  void wait_done_change(int slot, uint32_t seen, int ms) const;

 private:
  struct Slot;
  Slot* slot_at(int i) const;
  void* map_ = nullptr;
  int slot_ = 0;
};

}  // namespace mpcomm::bench
