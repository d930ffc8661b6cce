#include "bootstrap/process_state.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace mpcomm {

ProcessState process_state(int pid) {
  if (pid <= 0) return ProcessState::running;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return ProcessState::gone;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return ProcessState::running;
  const size_t paren = line.rfind(')');  // the state follows the command's name in parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return ProcessState::running;
  switch (line[paren + 2]) {
    case 'Z':
    case 'X':
      return ProcessState::gone;
    case 'T':
    case 't':
      return ProcessState::stopped;
    default:
      return ProcessState::running;
  }
}

}  // namespace mpcomm
