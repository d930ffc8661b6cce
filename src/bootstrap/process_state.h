// What became of a process of this host, for the waits and the shrink agreement that must tell a dead or
// stopped rank from a slow one.
#pragma once

namespace mpcomm {

enum class ProcessState {
  running,  // exists and can run (or its state could not be read)
  gone,     // no such process, or a zombie its parent has not reaped yet
  stopped,  // SIGSTOP or a debugger: it cannot take part until it is continued
};

ProcessState process_state(int pid);

}  // namespace mpcomm
