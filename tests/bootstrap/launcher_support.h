// What the launcher's tests share (launcher_test.cc, launcher_failures_test.cc): looking at processes in
// /proc, running launch() in-process with its output captured, and the fixture that checks no child
// outlives a test.
#pragma once

#include "bootstrap/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/env.h"
#include "net/socket.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm::launcher_test {

using Clock = std::chrono::steady_clock;

// ---- /proc helpers ----------------------------------------------------------------------------------

struct ProcInfo {
  pid_t pid;
  pid_t ppid;
  pid_t pgrp;
  char state;
};

inline std::vector<ProcInfo> all_processes() {
  std::vector<ProcInfo> procs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream f(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;  // gone meanwhile
    std::istringstream rest(stat.substr(close + 1));
    ProcInfo p{static_cast<pid_t>(std::stol(name)), 0, 0, '?'};
    rest >> p.state >> p.ppid >> p.pgrp;
    procs.push_back(p);
  }
  return procs;
}

inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& p : all_processes())
    if (p.ppid == parent) out.push_back(p.pid);
  return out;
}

// Live (not zombie) processes in any of the given process groups.
inline std::vector<pid_t> live_in_groups(const std::vector<pid_t>& groups) {
  std::vector<pid_t> out;
  for (const auto& p : all_processes())
    if (p.state != 'Z' && std::find(groups.begin(), groups.end(), p.pgrp) != groups.end()) out.push_back(p.pid);
  return out;
}

inline bool alive(pid_t pid) {
  for (const auto& p : all_processes())
    if (p.pid == pid) return p.state != 'Z';
  return false;
}

// ---- running launch() with its output captured -------------------------------------------------------

struct Result {
  int status = -1;
  std::string out, err;
  double seconds = 0;
};

inline std::string slurp(int fd) {
  std::string s;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

inline int temp_file() {
  char path[] = "/tmp/mpcomm_launcher_test.XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  ::unlink(path);
  return fd;
}

// Runs launch() with fds 1 and 2 pointing at temporary files.
inline Result run(const LaunchOptions& o) {
  std::fflush(stdout);
  std::fflush(stderr);
  int out = temp_file(), err = temp_file();
  int saved_out = ::dup(STDOUT_FILENO), saved_err = ::dup(STDERR_FILENO);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  auto restore = [&] {
    ::dup2(saved_out, STDOUT_FILENO);
    ::dup2(saved_err, STDERR_FILENO);
    ::close(saved_out);
    ::close(saved_err);
  };
  Result r;
  auto t0 = Clock::now();
  try {
    r.status = launch(o);
  } catch (...) {
    restore();
    ::close(out);
    ::close(err);
    throw;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  restore();
  r.out = slurp(out);
  r.err = slurp(err);
  ::close(out);
  ::close(err);
  return r;
}

inline LaunchOptions sh(int n, const std::string& script) {
  LaunchOptions o;
  o.nranks = n;
  o.grace_s = 0.5;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

inline bool has_line(const std::string& text, const std::string& line) {
  auto ls = lines(text);
  return std::find(ls.begin(), ls.end(), line) != ls.end();
}

// Value after "key=" in the line that starts with `prefix`.
inline std::string field(const std::string& text, const std::string& prefix, const std::string& key) {
  for (const auto& l : lines(text)) {
    if (l.rfind(prefix, 0) != 0) continue;
    size_t at = l.find(key + "=");
    if (at == std::string::npos) continue;
    size_t start = at + key.size() + 1;
    return l.substr(start, l.find(' ', start) - start);
  }
  return "";
}

// Saves an environment variable and puts it back.
class EnvVar {
 public:
  explicit EnvVar(const char* name) : name_(name) {
    const char* v = std::getenv(name);
    if (v != nullptr) old_ = v;
  }
  ~EnvVar() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Every test ends with no child of this process left, zombie or not.
class LauncherTest : public ::testing::Test {
 protected:
  void TearDown() override {
    auto kids = children_of(::getpid());
    EXPECT_TRUE(kids.empty()) << kids.size() << " child process(es) outlived launch(), e.g. pid " << kids[0];
  }
};

}  // namespace mpcomm::launcher_test
