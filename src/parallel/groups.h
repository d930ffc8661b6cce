// Process groups for 3-D parallelism: a world of tp × pp × dp ranks, tensor-parallel rank varying
// fastest, then data-parallel, then pipeline (Megatron's order):
//   world rank = tp_rank + tp * (dp_rank + dp * pp_rank)
// so the ranks of a tensor-parallel group are neighbours (on one host when hosts hold consecutive ranks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mpcomm/communicator.h"

namespace mpcomm::parallel {

// ep: expert parallelism, carved out of data parallelism: the data-parallel ranks form groups of ep consecutive
// ranks, which share their experts (expert-parallel rank = dp rank % ep); ep divides dp.
struct ParallelDims {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int world() const { return tp * pp * dp; }
};

struct Coords {
  int tp = 0, pp = 0, dp = 0;
};
Coords coords_of(int rank, const ParallelDims& d);
int rank_of(const Coords& c, const ParallelDims& d);

// Time, bytes and calls of one kind of traffic, as the trainer reports them.
struct CommMeter {
  double seconds = 0;
  uint64_t bytes = 0;
  uint64_t calls = 0;
};

// This rank's groups. Each is a communicator of the world's backend, made by split(); tests may swap
// one for a wrapper (a recording communicator) before the model uses it.
struct ParallelGroups {
  ParallelDims dims;
  Coords me;
  Communicator* world = nullptr;
  std::unique_ptr<Communicator> tp;  // same pp and dp: all-reduces inside layers
  std::unique_ptr<Communicator> pp;  // same tp and dp: activations and gradients between stages
  std::unique_ptr<Communicator> dp;  // same tp and pp: gradient all-reduce
  // With ep > 1 (else null): the expert-parallel group (same tp, pp and dp / ep: tokens to their experts by
  // all-to-all), and the ranks holding the same experts (same tp, pp and dp % ep: the experts' gradient sum).
  std::unique_ptr<Communicator> ep, edp;

  // Collective over `world`: every rank calls it with the same dims. Throws InvalidArgument when
  // tp*pp*dp differs from the world's size.
  static ParallelGroups create(Communicator& world, const ParallelDims& dims);
};

}  // namespace mpcomm::parallel
