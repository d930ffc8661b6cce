// What the ranks of a communicator can do besides sending frames, when every one of them is on this
// host: the capability interface between the native algorithms and the shared-memory transport.
// Engine::host() returns it for such a communicator of 2 ranks or more, and null otherwise (ranks on
// several hosts, or one rank). An algorithm that uses it says which facilities in its top comment and
// declares it in its needs (algorithms.cc), so that it is neither chosen nor forced where they are
// missing: it then fails at the call, on every rank alike, before any traffic.
//
//   single copy  read and write another rank's memory (process_vm_readv/writev): the direct algorithms
//   board        per rank an input slot and per op a result slot in shared memory, and per rank a
//                small slot of one cache line: the arrival and board allreduces
//   stages       per rank an area in shared memory that only its owner writes: the staged broadcast and
//                allgather (staged_flow.cc), the staged and the two-copy allreduce
//   waiting      for what local ranks write into the board and the stages (bounded, watched, like frames)
//   placement    how far apart two ranks' CPUs are now (a cache line's round trip): the selection's
//                placement facts (selection/world_facts.cc at creation, selection/call_facts.cc at the
//                calls whose row asks)
//
// Ranks are the communicator's ranks throughout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/native/transport/shm/shm_segment.h"

namespace mpcomm::native {

class HostLocal {
 public:
  // What HostLocal asks of the engine that owns it (the engine implements it).
  class Owner {
   public:
    virtual int rank() const = 0;
    // Single copy with a rank's memory; errors name the op, the rank and why (a dead rank: PeerFailure).
    virtual void copy_with_peer(int rank, char* local_buf, uint64_t remote, size_t n, bool write) = 0;
    // Whether this rank may read `rank`'s memory: 1 yes, -1 no, 0 not known yet (SingleCopy::probe).
    virtual int single_copy_state(int rank) = 0;
    // HostLocal::wait's engine side: frames keep moving while it waits, and every wait is bounded.
    virtual void wait_shared(const std::function<bool()>& done, const std::function<std::vector<int>()>& pending,
                             const std::function<std::string()>& what) = 0;
    virtual bool peer_alive(int rank) const = 0;
    virtual void wake_local_peers() const = 0;

   protected:
    ~Owner() = default;
  };

  HostLocal(Owner& owner, const ShmSegment& seg, std::vector<int> local_of, bool crowded);

  // ---- facts, the same on every rank ----
  // Every rank may read and write every other rank's memory: MPCOMM_SINGLE_COPY is on and the kernel
  // allows it between every pair (probed at creation: probe_single_copy(), then agreed).
  bool single_copy() const { return single_copy_; }

  // ---- single copy ----
  // Copies n bytes from `rank`'s memory at `remote` / to it. Errors name the rank; a rank that is gone
  // is a peer failure.
  void read(int rank, void* dst, uint64_t remote, size_t n);
  void write(int rank, uint64_t remote, const void* src, size_t n);

  // ---- the board (ShmSegment's: two sets of slots, by the parity of the op's sequence number) ----
  static constexpr size_t kBoardBytes = ShmSegment::kBoardBytes;
  BoardCtl* board_ctl() const { return seg_.board_ctl(); }
  BoardTag* board_tag(int rank) const { return seg_.board_tag(local(rank)); }
  BoardSlot* board_slot(int parity, int rank) const { return seg_.board_slot(parity, local(rank)); }
  char* board_input(int parity, int rank) const { return seg_.board_input(parity, local(rank)); }
  char* board_result(int parity) const { return seg_.board_result(parity); }
  // Flow control of this rank's slots. A rank rewrites its slots of one parity (small slot, input slot)
  // two ops after it last wrote them at the earliest, but an op in between need not make it hear from
  // every rank (a broadcast it roots only sends), so a reader may still be at that earlier op:
  //  - board_claim(parity, stamp) before writing them for op `stamp`: waits until every other rank has
  //    finished the op that last wrote them (its done word, or a later stamp of its already seen);
  //  - board_seen(rank, stamp) when rank's slot showed `stamp`: it has finished every op before;
  //  - board_done(stamp) once this rank has finished reading the board for op `stamp`.
  void board_claim(int parity, uint64_t stamp);
  void board_seen(int rank, uint64_t stamp) {
    uint64_t& s = seen_[static_cast<size_t>(rank)];
    if (stamp > s) s = stamp;
  }
  void board_done(uint64_t stamp) const {
    seg_.board_done(local(e_rank_))->stamp.store(stamp, std::memory_order_release);
  }

  // ---- stages ----
  static constexpr size_t kStageBytes = ShmSegment::kStageBytes;
  char* stage(int rank) const { return seg_.stage(local(rank)); }
  // Each of kStageWordSets sets of words (ShmSegment) for an algorithm's separate flows through a stage.
  StageWord* stage_published(int rank, int set = 0) const { return seg_.stage_published(local(rank), set); }
  StageWord* stage_consumed(int owner, int reader, int set = 0) const {
    return seg_.stage_consumed(local(owner), local(reader), set);
  }

  // ---- waiting for shared memory ----
  // Waits until done() holds, for what local ranks write outside frames. `pending()` gives the ranks
  // still awaited (watched for liveness), `what()` what a timeout waited for. Frames keep moving, and a
  // collective frame of this op's number but another fingerprint is a Mismatch (Engine::wait_shared).
  void wait(const std::function<bool()>& done, const std::function<std::vector<int>()>& pending,
            const std::function<std::string()>& what);
  // Wakes every local rank that sleeps (after writing shared memory it may wait for).
  void wake() const;

  // ---- placement ----
  // How far apart this rank's CPU and `peer`'s are now: both call it with the same `stamp` (a word no
  // earlier call used); the lower rank writes its echo word trips + 1 times, each time waiting for the
  // peer to write the same value back, and returns the median nanoseconds of the last `trips` round
  // trips (the higher rank answers and returns 0). The first trip only meets the peer (until
  // `meet_until`, yielding the CPU on a crowded host); the two ranks on one CPU when they meet: 0 at
  // once. The timed trips give up after 5 ms in all, and the peer with them; on a crowded host, once a
  // measure succeeded, after 200 us, returning the last measure that succeeded. NaN: not known.
  // On a virtual machine it changes within minutes: about 50 ns between hyperthreads of one core,
  // 110 ns within a shared cache, 270 or 520 ns farther apart (docs/performance.md, "Why runs differ").
  double round_trip_ns(int peer, int trips, uint64_t stamp, std::chrono::steady_clock::time_point meet_until);

  // ---- at creation ----
  // Whether this rank can read every local rank's memory (each publishes a probe word when its engine
  // starts; waits for them until `deadline`).
  bool probe_single_copy(std::chrono::steady_clock::time_point deadline);
  // What every rank agreed (single copy between every pair).
  void agreed(bool single_copy) { single_copy_ = single_copy; }

 private:
  int local(int rank) const { return local_of_[static_cast<size_t>(rank)]; }
  Owner& e_;
  const ShmSegment& seg_;
  std::vector<int> local_of_;  // segment index of every rank
  bool crowded_;               // the host's ranks outnumber its CPUs: meeting yields the CPU
  bool single_copy_ = false;
  int e_rank_;
  double last_round_trip_ns_ = std::numeric_limits<double>::quiet_NaN();  // the lead's last full measure
  uint64_t written_[2] = {0, 0};  // the stamp this rank last wrote into its slots of each parity
  std::vector<uint64_t> seen_;    // per rank, the highest stamp seen in its slots
};

}  // namespace mpcomm::native
