// Helpers for tests that run ranks as processes through `mpcomm launch`.
#pragma once

#include <string>
#include <vector>

namespace mpcomm::testing {

struct RunResult {
  int status = -1;  // exit status of the shell command
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// Runs a shell command and collects its output.
RunResult run_command(const std::string& cmd);

// Names in /dev/shm that start with "mpcomm." (ours) or "vader_segment." (Open MPI's shared memory).
std::vector<std::string> mpcomm_shm_entries();

// Live processes whose argv[0] is `prog` and one of whose arguments is `arg`.
int count_processes_running(const std::string& prog, const std::string& arg);

// An argument no other test's processes carry ("tag-<pid>-<n>"), to find this test's processes.
std::string unique_tag();

// The line of `output` that contains `needle` ("" if none).
std::string line_with(const std::string& output, const std::string& needle);

}  // namespace mpcomm::testing
