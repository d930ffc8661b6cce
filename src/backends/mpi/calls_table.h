// Which MPI calls an op makes, as data: blocking MPI collectives run Open MPI's tuned algorithms
// (coll/tuned) on the calling thread, as an Open MPI user's MPI_Allreduce does; non-blocking ones
// (MPI_Iallreduce ...) run libnbc's schedules, slower for most sizes on few ranks but faster for some,
// and their wait yields the CPU. The built-in table (calls_table.cc) holds what was measured
// (docs/performance.md, "The mpi backend's calls"); MPCOMM_TUNING's backend=mpi rows come before it, and
// MPCOMM_MPI_CALLS=blocking|nonblocking forces one kind for every op. Rows decide from the communicator's
// shape (agreed at creation) and the call's size, so every rank makes the same kind of call: a blocking
// and a non-blocking collective never match.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/op.h"
#include "tuning/selection_table.h"

namespace mpcomm::mpi {

enum class MpiCalls : uint8_t { blocking, nonblocking };

// The subjects of the mpi backend's rows: op k's calls at index k (unnamed for sends, receives and
// split, which have one kind each); choices "blocking", "nonblocking".
const tuning::Vocabulary& calls_vocabulary();
std::string_view builtin_calls_text();
const tuning::Table& builtin_calls_table();

class CallsSelection {
 public:
  // Reads MPCOMM_MPI_CALLS and the MPCOMM_TUNING file (bad input: InvalidArgument, at creation) ...
  explicit CallsSelection(const Options& opts);
  // ... and keeps the rows that fit the communicator's shape.
  void fit(const tuning::Shape& shape);
  MpiCalls calls_for(const detail::Op& op) const;
  // "tuning file PATH, then the built-in table" (with "; MPCOMM_MPI_CALLS forces ..." when it does).
  std::string describe() const;
  const tuning::Table* file() const { return file_.get(); }

 private:
  std::optional<MpiCalls> forced_;
  std::unique_ptr<tuning::Table> file_;
  tuning::ShapeRows rows_;
  int ranks_ = 1;
};

}  // namespace mpcomm::mpi
