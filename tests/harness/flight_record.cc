#include "harness/flight_record.h"

#include <sstream>

namespace mpcomm::testing {

std::vector<Recorded> recorded_ops(const Communicator& comm) {
  std::vector<Recorded> out;
  std::istringstream text(comm.flight_record());
  std::string line;
  std::getline(text, line);  // "mpcomm flight recorder: ..."
  std::getline(text, line);  // the column names
  // seq op count dtype redop root peer tag state start(ms) took(ms) algorithm [error]
  while (std::getline(text, line)) {
    std::istringstream cols(line);
    std::string seq, dtype, redop, root, peer, tag, start, took;
    Recorded r;
    if (cols >> seq >> r.op >> r.count >> dtype >> redop >> root >> peer >> tag >> r.state >> start >> took >> r.algorithm)
      out.push_back(r);
  }
  return out;
}

std::string last_ran(const Communicator& comm) {
  const std::vector<Recorded> ops = recorded_ops(comm);
  return ops.empty() ? std::string() : ops.back().algorithm;
}

std::string last_algorithm(const Communicator& comm) {
  const std::string ran = last_ran(comm);
  return ran.substr(0, ran.find('+'));
}

}  // namespace mpcomm::testing
