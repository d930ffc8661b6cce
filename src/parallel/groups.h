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

struct ParallelDims {
  int tp = 1, pp = 1, dp = 1;
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

  // Collective over `world`: every rank calls it with the same dims. Throws InvalidArgument when
  // tp*pp*dp differs from the world's size.
  static ParallelGroups create(Communicator& world, const ParallelDims& dims);
};

}  // namespace mpcomm::parallel
