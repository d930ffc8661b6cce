// The host-local capabilities of an engine whose ranks all share this host (host_local.h).
#include "backends/native/engine/host_local.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>


namespace mpcomm::native {

HostLocal::HostLocal(Owner& e, const ShmSegment& seg, std::vector<int> local_of, bool crowded)
    : e_(e), seg_(seg), local_of_(std::move(local_of)), crowded_(crowded), e_rank_(e.rank()),
      seen_(local_of_.size(), 0) {}

void HostLocal::board_claim(int parity, uint64_t stamp) {
  const uint64_t last = written_[parity & 1];
  const int n = static_cast<int>(local_of_.size());
  auto finished = [&](int r) {
    if (seen_[static_cast<size_t>(r)] > last) return true;
    const uint64_t d = seg_.board_done(local(r))->stamp.load(std::memory_order_acquire);
    if (d >= last) board_seen(r, d + 1);  // done with `last`: every later stamp of its is past it
    return d >= last;
  };
  auto all_finished = [&] {
    for (int r = 0; r < n; ++r)
      if (r != e_rank_ && !finished(r)) return false;
    return true;
  };
  if (last != 0 && !all_finished()) {
    auto behind = [&] {
      std::vector<int> out;
      for (int r = 0; r < n; ++r)
        if (r != e_rank_ && !finished(r)) out.push_back(r);
      return out;
    };
    auto what = [&] {
      std::string s;
      for (int r : behind()) s += (s.empty() ? "rank " : ", rank ") + std::to_string(r);
      return s + " to finish reading this rank's board slots of #" + std::to_string(last - 1);
    };
    wait(all_finished, behind, what);
  }
  written_[parity & 1] = stamp;
}

void HostLocal::read(int rank, void* dst, uint64_t remote, size_t n) {
  e_.copy_with_peer(rank, static_cast<char*>(dst), remote, n, false);
}

void HostLocal::write(int rank, uint64_t remote, const void* src, size_t n) {
  // process_vm_writev only reads the local side.
  e_.copy_with_peer(rank, const_cast<char*>(static_cast<const char*>(src)), remote, n, true);
}

void HostLocal::wait(const std::function<bool()>& done, const std::function<std::vector<int>()>& pending,
                     const std::function<std::string()>& what) {
  e_.wait_shared(done, pending, what);
}

void HostLocal::wake() const { e_.wake_local_peers(); }

double HostLocal::round_trip_ns(int peer, int trips, uint64_t stamp, std::chrono::steady_clock::time_point meet_until) {
  using Clock = std::chrono::steady_clock;
  constexpr int kMaxTrips = 64;
  // The lead's word that ends the measure for both (it gave up): the peer stops waiting at once.
  constexpr uint64_t kGiveUp = 0xffff;
  const double unknown = std::numeric_limits<double>::quiet_NaN();
  if (peer == e_.rank() || trips < 1 || trips > kMaxTrips) return unknown;
  Doorbell& my_bell = *seg_.doorbell(local(e_.rank()));
  const Doorbell& their_bell = *seg_.doorbell(local(peer));
  std::atomic<uint64_t>& mine = my_bell.echo;
  const std::atomic<uint64_t>& theirs = their_bell.echo;
  const bool lead = e_.rank() < peer;
  // Words of this measurement only (`stamp`): a word left from an earlier one never matches. Trip 0
  // meets the peer (when it arrives is not timed); trips 1..n are timed one by one and their median
  // counts, so that one preemption does not.
  auto word = [&](uint64_t i) { return stamp << 16 | i; };
  double ns[kMaxTrips];
  auto give_up = meet_until;
  // With the ranks outnumbering the CPUs, once a measure has succeeded, the timed trips get this long
  // in all, and a measure cut short counts as the last one that succeeded: a peer that lost its CPU to
  // another rank comes back only after the scheduler's slice, and waiting for it would cost every such
  // call that much (docs/performance.md, "Why runs differ").
  const bool short_budget = crowded_ && !std::isnan(last_round_trip_ns_);
  const auto timed_budget = short_budget ? std::chrono::microseconds(200) : std::chrono::microseconds(5000);
  const double gave_up = short_budget ? last_round_trip_ns_ : unknown;
  for (int i = 0; i <= trips; ++i) {
    const auto t0 = Clock::now();
    if (i == 1) give_up = std::min(meet_until, t0 + timed_budget);
    if (lead) {
      if (i == 0) my_bell.echo_cpu.store(::sched_getcpu(), std::memory_order_relaxed);
      mine.store(word(static_cast<uint64_t>(i)), std::memory_order_release);
    }
    for (uint32_t spins = 0;; ++spins) {
      const uint64_t w = theirs.load(std::memory_order_acquire);
      if (w == word(static_cast<uint64_t>(i))) break;
      if (!lead && w == word(kGiveUp)) return 0;
      if ((spins & 63) != 63) continue;
      if (Clock::now() > give_up) {
        if (!lead) return 0;
        mine.store(word(kGiveUp), std::memory_order_release);
        return i > 0 ? gave_up : unknown;
      }
      if (i > 0) continue;
      if (crowded_) ::sched_yield();  // the peer may need this CPU to get here at all
      // Meeting may take long (at creation): a peer that is gone never comes.
      if ((spins & 0xffff) == 0xffff && !e_.peer_alive(peer)) {
        if (!lead) return 0;
        mine.store(word(kGiveUp), std::memory_order_release);
        return unknown;
      }
    }
    if (!lead) {
      if (i == 0) my_bell.echo_cpu.store(::sched_getcpu(), std::memory_order_relaxed);
      mine.store(word(static_cast<uint64_t>(i)), std::memory_order_release);
    }
    if (i == 0) {
      // Met: both see both CPUs (each stored its own before its word of trip 0). Two ranks on one CPU
      // share its caches (near), and their round trip would only time the scheduler: both stop here.
      const int32_t a = my_bell.echo_cpu.load(std::memory_order_relaxed);
      const int32_t b = their_bell.echo_cpu.load(std::memory_order_relaxed);
      if (a >= 0 && a == b) return 0;
    }
    if (lead && i > 0) ns[i - 1] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  }
  if (!lead) return 0;
  std::nth_element(ns, ns + trips / 2, ns + trips);
  last_round_trip_ns_ = ns[trips / 2];
  return last_round_trip_ns_;
}

bool HostLocal::probe_single_copy(std::chrono::steady_clock::time_point deadline) {
  bool all = true;
  for (int r = 0; r < static_cast<int>(local_of_.size()); ++r) {
    if (r == e_.rank()) continue;
    // Not known until the peer's engine has published its probe word.
    int state = e_.single_copy_state(r);
    for (uint32_t spins = 1; state == 0; ++spins) {
      if (std::chrono::steady_clock::now() > deadline || ((spins & 1023) == 0 && !e_.peer_alive(r))) return false;
      std::this_thread::yield();
      state = e_.single_copy_state(r);
    }
    all = all && state > 0;
  }
  return all;
}

}  // namespace mpcomm::native
