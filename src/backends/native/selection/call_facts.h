// The facts an algorithm row may ask at the call (tuning/selection_table.h: placement_now, in_place),
// agreed by the ranks in one round of small frames of that call (so timeouts, dead peers and mismatched
// calls are reported as for any frame): where the CPUs of ranks 0 and 1 are now (a cache line's round
// trip between them, measured by rank 0 against MPCOMM_FAR_NS), and whether some rank runs the call in
// place. Only calls that reach such a row pay it; `mpcomm info --table` marks those rows. The facts
// agreed once, at creation, are world_facts.h's.
#pragma once

#include <cstdint>

#include "backends/native/engine/engine.h"

namespace mpcomm::native {

// Far apart, near, or not known (not every rank on one host: nothing measured).
enum class CpuDistance : uint8_t { unknown, near, far };

// Rank 0's verdict on a round trip of `ns` against `far_ns`: far when measured above it; a measure that
// did not finish in time (NaN) counts as near. far_ns 0: never far; below 0: always far.
CpuDistance cpu_distance(double ns, double far_ns);

struct CallAgreement {
  bool any_in_place = false;
  CpuDistance distance = CpuDistance::unknown;
  double round_trip_ns = 0;  // rank 0's measure (NaN elsewhere or when not measured)
};

// Every rank of the current op (Engine::begin) calls it with the same `placement` and `in_place_wanted`
// (the selection's rows are the same everywhere). placement: ranks 0 and 1 measure (Engine::host()
// needed; else unknown) and rank 0 judges by its `far_ns`; in_place_wanted: every rank tells every
// other whether it runs in place (`in_place`). One round of 8-byte frames: from rank 0 to the others
// when only placement is asked, between every pair when in place is.
CallAgreement agree_at_call(Engine& e, uint64_t seq, bool placement, bool in_place_wanted, bool in_place, double far_ns);

}  // namespace mpcomm::native
