// Reproducible sums: the same bits whatever the algorithm, backend, host layout, chunking, rank order — and
// whatever the number of ranks the summed vectors are spread over.
//
// A communicator made with Options::reproducible = 1 (or MPCOMM_REPRODUCIBLE=1) sums floating-point values
// this way in allreduce, reduce_scatter and reduce (sum and avg). ReproducibleSum goes further: a rank adds any
// number of vectors into it, and the collective combines the ranks' accumulators; the result depends only on
// the multiset of vectors added anywhere — 8 vectors on 8 ranks, 4 on 2 or all 8 on one give the same bits.
//
// How (docs/reproducible.md): each value is cut, exactly, to integer multiples of a unit 2^−32 (float64:
// 2^−80) below the largest value of its element, and the integers are added — integer addition does not depend
// on order. The one rounding is the final one. At most 2^15 vectors per sum. Infinities and NaN propagate as in
// IEEE arithmetic (NaN when both infinities occur); a zero sum is +0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mpcomm/communicator.h"
#include "mpcomm/export.h"
#include "mpcomm/types.h"

namespace mpcomm {

class MPCOMM_API ReproducibleSum {
 public:
  // `count` elements of `dtype` (float16, bfloat16, float32 or float64; else InvalidArgument).
  ReproducibleSum(DataType dtype, size_t count);
  ~ReproducibleSum();
  ReproducibleSum(ReproducibleSum&&) noexcept;
  ReproducibleSum& operator=(ReproducibleSum&&) noexcept;

  DataType dtype() const;
  size_t count() const;
  // Vectors added since the last clear().
  uint64_t vectors() const;

  // Adds a vector of count() elements (host memory).
  void add(const void* values);
  void clear();

  // The sum of this rank's vectors alone (no communication).
  void result(void* out) const;
  // Collective over comm: every rank gets the sum of every rank's vectors in out (count() elements). Every rank
  // must have the same dtype and count. Throws InvalidArgument when the ranks' vectors could be more than 2^15
  // (each rank's count times the ranks).
  void allreduce(Communicator& comm, void* out) const;
  // Collective: this rank's block of the sum, count() / comm.size() elements from rank() · that on (count()
  // must be a multiple of the ranks).
  void reduce_scatter(Communicator& comm, void* out) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace mpcomm
