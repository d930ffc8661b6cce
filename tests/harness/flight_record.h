// Reading a communicator's flight record (Communicator::flight_record()) in tests: what each recorded
// operation ran.
#pragma once

#include <string>
#include <vector>

#include "mpcomm/mpcomm.h"

namespace mpcomm::testing {

struct Recorded {
  std::string op;         // "allreduce"
  size_t count = 0;
  std::string state;      // "done", "FAILED", ...
  std::string algorithm;  // what the backend ran ("-" when it set nothing): "ring", "direct+streaming"
};

// The recorded operations, oldest first.
std::vector<Recorded> recorded_ops(const Communicator& comm);
// What the most recent recorded operation ran ("" when none), as recorded: its algorithm and, where the
// algorithm asked the table for a protocol choice, that choice ("direct+streaming").
std::string last_ran(const Communicator& comm);
// The algorithm alone ("direct").
std::string last_algorithm(const Communicator& comm);

}  // namespace mpcomm::testing
