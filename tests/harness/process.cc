#include "harness/process.h"

#include <dirent.h>
#include <sys/wait.h>

#include <chrono>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace mpcomm::testing {

RunResult run_command(const std::string& cmd) {
  RunResult res;
  auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return res;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) res.output.append(buf, n);
  int st = ::pclose(p);
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::vector<std::string> mpcomm_shm_entries() {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind("mpcomm.", 0) == 0 || std::string(e->d_name).rfind("vader_segment.", 0) == 0)
        out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

int count_processes_running(const std::string& prog, const std::string& arg) {
  int n = 0;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::string cmdline;
      if (FILE* f = std::fopen(("/proc/" + std::string(e->d_name) + "/cmdline").c_str(), "r")) {
        char buf[8192];
        size_t got = std::fread(buf, 1, sizeof buf, f);
        cmdline.assign(buf, got);
        std::fclose(f);
      }
      std::vector<std::string> argv;
      for (size_t pos = 0; pos < cmdline.size();) {
        size_t end = cmdline.find('\0', pos);
        if (end == std::string::npos) end = cmdline.size();
        argv.push_back(cmdline.substr(pos, end - pos));
        pos = end + 1;
      }
      if (argv.size() >= 2 && argv[0] == prog && std::find(argv.begin() + 1, argv.end(), arg) != argv.end()) ++n;
    }
    ::closedir(d);
  }
  return n;
}

std::string unique_tag() {
  static int counter = 0;
  return "tag-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

std::string line_with(const std::string& output, const std::string& needle) {
  auto pos = output.find(needle);
  if (pos == std::string::npos) return "";
  auto start = output.rfind('\n', pos);
  start = start == std::string::npos ? 0 : start + 1;
  return output.substr(start, output.find('\n', pos) - start);
}

}  // namespace mpcomm::testing
