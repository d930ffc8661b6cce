// What the trainer's activations and gradients travel as (`mpcomm train --comm-dtype`): float32 as they
// are, or bfloat16 — rounded (to nearest even) before they leave a rank, widened to float32 when they
// arrive, and summed in float32:
//   allreduce_sum(x)   = bf16( Σ_ranks bf16(x_r) ), the sum taken in float32 in rank order: an all-to-all of
//                        bfloat16 blocks, each rank sums its block in float32, an all-gather of the rounded sums
//                        (the bytes of a ring all-reduce: a reduce-scatter and an all-gather, each 1/2 of 4-byte
//                        traffic);
//   reduce_scatter(x)  = Σ_ranks bf16(x_r) over this rank's block, in float32 (it travels no further);
//   allgather(x)       = bf16(x_r) of every rank, this rank's own included, so every rank holds the same;
//   send / recv        = bf16(x).
// With float32 each is the communicator's own call. The reductions' results do not depend on the algorithm
// a backend picks, only on the ranks' order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpcomm/communicator.h"

namespace mpcomm::parallel {

enum class WireType { float32, bfloat16 };

// "float32" | "bfloat16"; throws InvalidArgument naming --comm-dtype otherwise.
WireType parse_wire(const std::string& name);

void to_bf16(const float* in, uint16_t* out, size_t n);
void from_bf16(const uint16_t* in, float* out, size_t n);
// x[i] = float32(bfloat16(x[i])).
void round_to_bf16(float* x, size_t n);

struct Wire {
  WireType type = WireType::float32;
  bool bf16() const { return type == WireType::bfloat16; }

  void allreduce_sum(Communicator& comm, float* x, size_t n) const;
  void reduce_scatter_sum(Communicator& comm, const float* in, float* out, size_t n) const;  // in: n·size()
  void allgather(Communicator& comm, const float* in, float* out, size_t n) const;           // out: n·size()
  Request isend(Communicator& comm, const float* x, size_t n, int peer, int tag, std::vector<uint16_t>& staging) const;
  // Posts a receive into `staging` (bfloat16) or x (float32); finish_recv widens it once it has arrived.
  Request irecv(Communicator& comm, float* x, size_t n, int peer, int tag, std::vector<uint16_t>& staging) const;
  void finish_recv(float* x, size_t n, const std::vector<uint16_t>& staging) const;
  size_t bytes(size_t n) const { return n * (bf16() ? 2 : 4); }
};

}  // namespace mpcomm::parallel
