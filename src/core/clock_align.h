// Moving every rank's clock onto rank 0's, for the timeline (mpcomm/trace.h).
//
// Ranks on rank 0's machine (the same kernel boot id) read the same steady_clock: their offset is 0. Every
// other rank plays ping-pong with rank 0 over the communicator, kRounds times: it sends, rank 0 answers its
// clock T, and the rank takes T − (t_send + t_receive) / 2 from the round with the shortest round trip
// (NTP's estimate; its error is at most half that round trip).
#pragma once

#include <cstdint>
#include <functional>

#include "mpcomm/communicator.h"

namespace mpcomm::detail {

struct ClockAlignment {
  int64_t offset_ns = 0;  // add to this rank's clock to get rank 0's
  int64_t base_ns = 0;    // rank 0's clock when the alignment ended: time 0 of the trace
  int64_t rtt_ns = 0;     // the round trip the offset came from (0: same machine as rank 0)
};

// Collective over `world`. `clock` reads this rank's clock in ns (tests skew it). With trust_same_machine
// false every rank but 0 plays ping-pong, wherever it runs (tests).
ClockAlignment align_clocks(Communicator& world, const std::function<int64_t()>& clock, bool trust_same_machine);

// A number naming this machine's running kernel (its boot id), the same for every process on it.
uint64_t machine_id();

}  // namespace mpcomm::detail
