// A collective with inputs that every rank can generate and results that every rank can verify on
// its own, independently of any backend. Inputs are small integers chosen per reduce op so that the
// exact result fits every dtype and does not depend on the order of reduction:
//   sum: values in [-3, 3] (unsigned [0, 6]);  prod: all ±1 but one 2;  min/max: [-6, 6];
//   avg: base + d_r with the d_r summing to 0, so the average is the integer base exactly;
//   band: 127 with one bit cleared per rank;  bor: one bit set per rank;  bxor: any byte (signed: [-128, 127]);
//   data movement: (31·rank + 7·index) mod 97, unique per rank at each index.
// The uneven ops (alltoallv, allgatherv) get uneven blocks from the case's count (uneven_count()), laid
// out with gaps in another order than the ranks'; the gaps must come back untouched.
// Used by the conformance suite (ranks as threads) and by `mpcomm selftest` (ranks as processes).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mpcomm/communicator.h"

namespace mpcomm::check {

struct Case {
  OpKind op = OpKind::allreduce;
  DataType dtype = DataType::float32;
  ReduceOp redop = ReduceOp::sum;
  // Elements; per rank block for allgather/reduce_scatter/gather/scatter/alltoall; for alltoallv and
  // allgatherv the scale of their uneven blocks (uneven_count()).
  size_t count = 0;
  int root = 0;
  bool in_place = false;
};

struct Result {
  size_t wrong = 0;        // wrong elements on this rank
  std::string first_wrong; // where and what, for the first one
  double seconds = 0;      // time of the collective call alone
};

std::string describe(const Case& c);

// Runs c on comm (every rank of comm must call it with the same Case) and verifies this rank's output.
Result run_case(Communicator& comm, const Case& c);

// A case's buffers on this rank, filled; run() (blocking) or post() (non-blocking: complete the Request
// before verify()), then verify() checks the output. The buffers live as long as the object.
class PreparedCase {
 public:
  PreparedCase(Communicator& comm, const Case& c);
  ~PreparedCase();
  PreparedCase(PreparedCase&&) noexcept;
  void run();
  Request post();
  Result verify();

 private:
  Request issue(bool nonblocking);
  struct State;
  std::unique_ptr<State> s_;
};

// Elements rank `from` sends rank `to` in an alltoallv case of `count` on n ranks (allgatherv: rank p's
// block is uneven_count(p, 0, ...)): around ceil(count / n), uneven, some empty, and when count is at
// least 2^20 the block from rank n-1 to rank 0 is `count` elements. The same on every rank.
size_t uneven_count(int from, int to, size_t count, int n);

// Elements of the receive buffer of an alltoallv or allgatherv case on `rank`: its blocks and the gaps
// before, between and after them.
size_t uneven_recv_elements(const Case& c, int rank, int n);

// The ops run_case() supports, in the order the suite and selftest run them.
const std::vector<OpKind>& checked_ops();

// The conformance matrix for one op on n ranks: every dtype × reduce op (for reducing ops; the bitwise
// ones for the integer types) × count in
// {0, 1, 7, 1000, 2^20+3} × out-of-place/in-place, roots varying with the case. For the ops whose
// count is per rank block the block is ceil(count / n), so each buffer stays near `count` elements. The
// uneven ops: a data type of each size (int8, bfloat16, float32, float64: they only move bytes), alltoallv
// out of place only (it has no in-place form).
std::vector<Case> conformance_cases(OpKind op, int n);

}  // namespace mpcomm::check
