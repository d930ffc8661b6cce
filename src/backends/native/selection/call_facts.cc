// The per-call agreement of agree.h.
#include "backends/native/selection/call_facts.h"

#include <cmath>
#include <limits>
#include <vector>

#include "log/log.h"

namespace mpcomm::native {

CpuDistance cpu_distance(double ns, double far_ns) {
  if (far_ns < 0) return CpuDistance::far;
  return far_ns > 0 && !std::isnan(ns) && ns > far_ns ? CpuDistance::far : CpuDistance::near;
}

namespace {
// The word every rank sends: bit 0 in place, bits 1-2 (rank 0's only) the CPUs' distance.
constexpr uint64_t kInPlace = 1;
uint64_t distance_bits(CpuDistance d) { return static_cast<uint64_t>(d) << 1; }
CpuDistance distance_of(uint64_t w) { return static_cast<CpuDistance>((w >> 1) & 3); }
}  // namespace

CallAgreement agree_at_call(Engine& e, uint64_t seq, bool placement, bool in_place_wanted, bool in_place, double far_ns) {
  CallAgreement out;
  const int rank = e.rank(), n = e.size();
  out.round_trip_ns = std::numeric_limits<double>::quiet_NaN();
  if (placement && e.host() != nullptr && rank <= 1) {
    const double rt = e.host()->round_trip_ns(1 - rank, 16, seq + 1, std::chrono::steady_clock::now() + std::chrono::milliseconds(5));
    if (rank == 0) {
      out.round_trip_ns = rt;
      out.distance = cpu_distance(rt, far_ns);
      MPCOMM_LOG(trace, "placement: a cache line's round trip between ranks 0 and 1 took %.0f ns", rt);
    }
  }
  const uint64_t mine = (in_place ? kInPlace : 0) | (rank == 0 ? distance_bits(out.distance) : 0);
  if (!in_place_wanted) {
    if (!placement || n == 1 || e.host() == nullptr) return out;  // the same on every rank
    uint64_t verdict = mine;
    if (rank == 0) {
      std::vector<Handle> hs;
      for (int q = 1; q < n; ++q) hs.push_back(e.send(q, &verdict, sizeof verdict));
      e.wait_all(hs);
    } else {
      e.wait(e.recv(0, &verdict, sizeof verdict));
    }
    out.distance = distance_of(verdict);
    return out;
  }
  std::vector<uint64_t> theirs(static_cast<size_t>(n), 0);
  std::vector<Handle> hs;
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    hs.push_back(e.recv(q, &theirs[static_cast<size_t>(q)], sizeof(uint64_t)));
    hs.push_back(e.send(q, &mine, sizeof mine));
  }
  e.wait_all(hs);
  theirs[static_cast<size_t>(rank)] = mine;
  for (uint64_t w : theirs) out.any_in_place = out.any_in_place || (w & kInPlace) != 0;
  out.distance = distance_of(theirs[0]);
  return out;
}

}  // namespace mpcomm::native
