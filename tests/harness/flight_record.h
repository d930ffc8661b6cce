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
  std::string algorithm;  // what the backend ran ("-" when it set nothing)
};

// The recorded operations, oldest first.
std::vector<Recorded> recorded_ops(const Communicator& comm);
// The algorithm of the most recent recorded operation ("" when none).
std::string last_algorithm(const Communicator& comm);

}  // namespace mpcomm::testing
