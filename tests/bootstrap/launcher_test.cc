// mpcomm launch, run in-process: each test forks real ranks (mostly /bin/sh one-liners), captures the
// launcher's stdout/stderr through temporary files, and checks the output relay, the rank environment,
// host placement, exit-status propagation, termination of the survivors, Ctrl-C, and that no process
// outlives launch().
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

namespace mpcomm {
namespace {

using Clock = std::chrono::steady_clock;

// ---- /proc helpers ----------------------------------------------------------------------------------

struct ProcInfo {
  pid_t pid;
  pid_t ppid;
  pid_t pgrp;
  char state;
};

std::vector<ProcInfo> all_processes() {
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

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& p : all_processes())
    if (p.ppid == parent) out.push_back(p.pid);
  return out;
}

// Live (not zombie) processes in any of the given process groups.
std::vector<pid_t> live_in_groups(const std::vector<pid_t>& groups) {
  std::vector<pid_t> out;
  for (const auto& p : all_processes())
    if (p.state != 'Z' && std::find(groups.begin(), groups.end(), p.pgrp) != groups.end()) out.push_back(p.pid);
  return out;
}

bool alive(pid_t pid) {
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

std::string slurp(int fd) {
  std::string s;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

int temp_file() {
  char path[] = "/tmp/mpcomm_launcher_test.XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  ::unlink(path);
  return fd;
}

// Runs launch() with fds 1 and 2 pointing at temporary files.
Result run(const LaunchOptions& o) {
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

LaunchOptions sh(int n, const std::string& script) {
  LaunchOptions o;
  o.nranks = n;
  o.grace_s = 0.5;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  auto ls = lines(text);
  return std::find(ls.begin(), ls.end(), line) != ls.end();
}

// Value after "key=" in the line that starts with `prefix`.
std::string field(const std::string& text, const std::string& prefix, const std::string& key) {
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

// ---- output and environment ---------------------------------------------------------------------------

TEST_F(LauncherTest, EveryRankLineIsPrefixed) {
  EnvVar keep("MPCOMM_HOST_ID");
  ::unsetenv("MPCOMM_HOST_ID");
  Result r = run(sh(3, "echo rank=$RANK size=$WORLD_SIZE host=$MPCOMM_HOST_ID local=$LOCAL_RANK/$LOCAL_WORLD_SIZE"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out).size(), 3u) << r.out;
  for (int i = 0; i < 3; ++i) {
    std::string want =
        "[" + std::to_string(i) + "] rank=" + std::to_string(i) + " size=3 host= local=" + std::to_string(i) + "/3";
    EXPECT_TRUE(has_line(r.out, want)) << "missing '" << want << "' in:\n" << r.out;
  }
  EXPECT_EQ(r.err, "");
}

TEST_F(LauncherTest, StderrGoesToStderrWithPrefix) {
  Result r = run(sh(2, "echo out-$RANK; echo err-$RANK >&2"));
  EXPECT_EQ(r.status, 0);
  for (int i = 0; i < 2; ++i) {
    std::string s = std::to_string(i);
    EXPECT_TRUE(has_line(r.out, "[" + s + "] out-" + s)) << r.out;
    EXPECT_TRUE(has_line(r.err, "[" + s + "] err-" + s)) << r.err;
  }
  EXPECT_EQ(r.out.find("err-"), std::string::npos);
  EXPECT_EQ(r.err.find("out-"), std::string::npos);
}

TEST_F(LauncherTest, LinesStayWholeAndPartialLastLineIsFlushed) {
  Result r = run(sh(1, "printf 'a\\nb'; sleep 0.1; printf 'c\\nlast'"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[0] a\n[0] bc\n[0] last\n");
}

TEST_F(LauncherTest, PrefixCanBeTurnedOff) {
  LaunchOptions o = sh(1, "echo hello; printf tail");
  o.prefix_output = false;
  Result r = run(o);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "hello\ntail\n");
}

TEST_F(LauncherTest, OverlongLinesAreCutIntoPieces) {
  // 140000 bytes, then exactly 65536: cut at 65536 however the pipe delivers them.
  Result r = run(sh(1, "head -c 140000 /dev/zero | tr '\\0' x; echo; head -c 65536 /dev/zero | tr '\\0' y; echo"));
  EXPECT_EQ(r.status, 0);
  auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 4u);
  EXPECT_EQ(ls[0], "[0] " + std::string(65536, 'x'));
  EXPECT_EQ(ls[1], "[0] " + std::string(65536, 'x'));
  EXPECT_EQ(ls[2], "[0] " + std::string(140000 - 2 * 65536, 'x'));
  EXPECT_EQ(ls[3], "[0] " + std::string(65536, 'y'));
}

TEST_F(LauncherTest, RanksGetStoreTokenJobIdTimeoutAndBackend) {
  EnvVar keep("MPCOMM_TOKEN");
  ::unsetenv("MPCOMM_TOKEN");
  LaunchOptions o = sh(2,
                       "echo store=$MPCOMM_STORE addr=$MASTER_ADDR port=$MASTER_PORT token=$MPCOMM_TOKEN "
                       "job=$MPCOMM_JOB_ID timeout=$MPCOMM_TIMEOUT backend=$MPCOMM_BACKEND");
  o.timeout_s = 7;
  o.backend = "gloo";
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string port = field(r.out, "[0]", "port");
  ASSERT_FALSE(port.empty()) << r.out;
  EXPECT_GT(std::stoi(port), 0);
  // MASTER_PORT is PyTorch's (rank 0 starts a c10d store there), not the mpcomm store's.
  const std::string store = field(r.out, "[0]", "store");
  EXPECT_EQ(store.rfind("tcp://127.0.0.1:", 0), 0u) << store;
  EXPECT_NE(store, "tcp://127.0.0.1:" + port);
  EXPECT_EQ(field(r.out, "[0]", "addr"), "127.0.0.1");
  std::string token = field(r.out, "[0]", "token"), job = field(r.out, "[0]", "job");
  EXPECT_EQ(token.size(), 32u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  EXPECT_EQ(job.size(), 12u);
  EXPECT_EQ(job.find_first_not_of("0123456789abcdef"), std::string::npos) << job;
  EXPECT_EQ(field(r.out, "[0]", "timeout"), "7");
  EXPECT_EQ(field(r.out, "[0]", "backend"), "gloo");
  for (const char* key : {"store", "port", "token", "job"})  // one job: the same for every rank
    EXPECT_EQ(field(r.out, "[1]", key), field(r.out, "[0]", key)) << key;
}

TEST_F(LauncherTest, TokenComesFromTheEnvironmentWhenSet) {
  EnvVar keep("MPCOMM_TOKEN");
  ::setenv("MPCOMM_TOKEN", "my-secret-token", 1);
  Result r = run(sh(1, "echo token=$MPCOMM_TOKEN"));
  EXPECT_EQ(r.out, "[0] token=my-secret-token\n");
}

TEST_F(LauncherTest, FractionalTimeout) {
  LaunchOptions o = sh(1, "echo $MPCOMM_TIMEOUT");
  o.timeout_s = 0.25;
  EXPECT_EQ(run(o).out, "[0] 0.250\n");
}

TEST_F(LauncherTest, FourRanksOnTwoHostsInBlocks) {
  std::string host = host_id_from_env();
  LaunchOptions o = sh(4, "echo host=$MPCOMM_HOST_ID local=$LOCAL_RANK/$LOCAL_WORLD_SIZE");
  o.hosts = 2;
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "[0] host=" + host + "-h0 local=0/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[1] host=" + host + "-h0 local=1/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[2] host=" + host + "-h1 local=0/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[3] host=" + host + "-h1 local=1/2")) << r.out;
}

TEST_F(LauncherTest, FiveRanksOnTwoHostsSplitUnevenly) {
  std::string host = host_id_from_env();
  LaunchOptions o = sh(5, "echo host=$MPCOMM_HOST_ID local=$LOCAL_RANK/$LOCAL_WORLD_SIZE");
  o.hosts = 2;
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "[0] host=" + host + "-h0 local=0/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[1] host=" + host + "-h0 local=1/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[2] host=" + host + "-h1 local=0/3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[3] host=" + host + "-h1 local=1/3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[4] host=" + host + "-h1 local=2/3")) << r.out;
}

// ---- pinning -------------------------------------------------------------------------------------------

TEST(LauncherBind, RanksThatFitGetACpuEach) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bind_slot(r, 4, 1, 4), r);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bind_slot(r, 4, 2, 8), r);
}

TEST(LauncherBind, OversubscribedRanksAreDealtRoundRobinPerHost) {
  // One host: rank r on CPU r mod c.
  for (int r = 0; r < 5; ++r) EXPECT_EQ(bind_slot(r, 5, 1, 2), r % 2) << "rank " << r;
  // 2 hosts x 2 ranks on 2 CPUs: the leaders (ranks 0 and 2) on different CPUs, each host on both.
  EXPECT_EQ(bind_slot(0, 4, 2, 2), 0);
  EXPECT_EQ(bind_slot(1, 4, 2, 2), 1);
  EXPECT_EQ(bind_slot(2, 4, 2, 2), 1);
  EXPECT_EQ(bind_slot(3, 4, 2, 2), 0);
  // One rank per host: spread, not stacked on CPU 0.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bind_slot(r, 4, 4, 2), r % 2) << "rank " << r;
}

// The plan reaches the ranks: each one's affinity is the single CPU bind_slot names; --no-bind leaves
// the launcher's mask.
TEST_F(LauncherTest, EachRankRunsOnItsSlotsCpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  const int n = static_cast<int>(cpus.size()) + 1, hosts = 2;  // more ranks than CPUs
  LaunchOptions o = sh(n, "echo cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)");
  o.hosts = hosts;
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < n; ++rank) {
    const std::string want = std::to_string(cpus[static_cast<size_t>(bind_slot(rank, n, hosts, static_cast<int>(cpus.size())))]);
    EXPECT_EQ(field(r.out, "[" + std::to_string(rank) + "]", "cpus"), want) << r.out;
  }
  o.bind = false;
  r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  if (cpus.size() > 1) {
    EXPECT_NE(field(r.out, "[0]", "cpus"), std::to_string(cpus[0])) << r.out;
  }
  // Ranks of a backend that may not be pinned (gloo: backends/launch_needs.cc says why) are left unpinned.
  o.bind = true;
  o.needs.may_pin = false;
  r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  if (cpus.size() > 1) {
    for (int rank = 0; rank < n; ++rank)
      EXPECT_NE(field(r.out, "[" + std::to_string(rank) + "]", "cpus").find_first_of(",-"), std::string::npos)
          << "rank " << rank << " (may_pin false) is pinned to one CPU: " << r.out;
  }
}

TEST_F(LauncherTest, ScriptWithoutShebangRunsUnderSh) {
  char path[] = "/tmp/mpcomm_launcher_script.XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string body = "echo from-script $RANK\n";
  ASSERT_EQ(::write(fd, body.data(), body.size()), static_cast<ssize_t>(body.size()));
  ::close(fd);
  ::chmod(path, 0700);
  LaunchOptions o;
  o.argv = {path};
  Result r = run(o);
  ::unlink(path);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] from-script 0\n");
}

// ---- exit status and failures -------------------------------------------------------------------------

TEST_F(LauncherTest, AllRanksSucceed) { EXPECT_EQ(run(sh(4, "exit 0")).status, 0); }

TEST_F(LauncherTest, FirstFailureIsReturnedAndTheOthersAreTerminated) {
  Result r = run(sh(3, "if [ $RANK = 1 ]; then exit 3; fi; sleep 30"));
  EXPECT_EQ(r.status, 3);
  EXPECT_LT(r.seconds, 2.0) << "the sleeping ranks were not terminated after the 0.5 s grace";
  EXPECT_TRUE(has_line(r.err, "mpcomm launch: rank 1 exited with status 3; waiting up to 0.5 s for the other ranks"))
      << r.err;
  EXPECT_NE(r.err.find("terminating 2 rank(s)"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, OthersMayFinishWithinGrace) {
  LaunchOptions o = sh(2, "if [ $RANK = 0 ]; then exit 4; fi; sleep 0.2; echo finished");
  o.grace_s = 5;
  Result r = run(o);
  EXPECT_EQ(r.status, 4);
  EXPECT_LT(r.seconds, 2.0);
  EXPECT_TRUE(has_line(r.out, "[1] finished")) << r.out;
  EXPECT_EQ(r.err.find("terminating"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, KilledRankReturns137) {
  Result r = run(sh(2, "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 30"));
  EXPECT_EQ(r.status, 137);
  EXPECT_LT(r.seconds, 2.0);
  EXPECT_NE(r.err.find("mpcomm launch: rank 1 exited with signal 9 (Killed)"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, RanksIgnoringSigtermAreKilled) {
  LaunchOptions o = sh(2, "if [ $RANK = 0 ]; then exit 5; fi; trap '' TERM; sleep 30");
  o.grace_s = 0.2;
  Result r = run(o);
  EXPECT_EQ(r.status, 5);
  EXPECT_GT(r.seconds, 2.0);  // SIGTERM at 0.2 s was ignored; SIGKILL 2 s later
  EXPECT_LT(r.seconds, 4.0);  // (generous: a loaded machine)
  EXPECT_NE(r.err.find("killing 1 rank(s)"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, LeftoverBackgroundProcessDiesWithItsRank) {
  Result r = run(sh(1, "sleep 30 & echo bg=$!"));
  EXPECT_EQ(r.status, 0);
  EXPECT_LT(r.seconds, 1.5) << "the background job kept the output pipe open";
  std::string bg = field(r.out, "[0]", "bg");
  ASSERT_FALSE(bg.empty()) << r.out;
  auto deadline = Clock::now() + std::chrono::seconds(1);  // init reaps it asynchronously
  while (alive(std::stoi(bg)) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(alive(std::stoi(bg)));
}

TEST_F(LauncherTest, LeakedShmSegmentsOfTheJobAreRemoved) {
  ASSERT_TRUE(std::filesystem::is_directory("/dev/shm"));
  Result r = run(sh(2,
                    "echo job=$MPCOMM_JOB_ID; touch /dev/shm/mpcomm.$MPCOMM_JOB_ID.r$RANK; "
                    "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 30"));
  EXPECT_EQ(r.status, 137);
  std::string job = field(r.out, "[0]", "job");
  ASSERT_EQ(job.size(), 12u) << r.out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind("mpcomm." + job, 0), 0u) << e.path() << " was left behind";
}

// A launcher killed by SIGKILL cannot clean up: its job's /dev/shm entries (here two files its ranks
// made; with --backend mpi, Open MPI's backing folder) stay until the next launch sees that the job's
// launcher lock is free and removes them. A job whose launcher lives keeps its entries.
TEST_F(LauncherTest, LeftoversOfAKilledLauncherAreRemovedByTheNextLaunch) {
  ASSERT_TRUE(std::filesystem::is_directory("/dev/shm"));
  auto job_entries = [](const std::string& job) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("mpcomm." + job + ".", 0) == 0) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  // A launcher (the CLI, a child of ours) whose two ranks each make an entry, print the job, then sleep.
  char out_path[] = "/tmp/mpcomm_launcher_kill.XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  ASSERT_GE(out_fd, 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::execl(MPCOMM_CLI, MPCOMM_CLI, "launch", "-n", "2", "--", "/bin/sh", "-c",
            "touch /dev/shm/mpcomm.$MPCOMM_JOB_ID.r$RANK && echo job=$MPCOMM_JOB_ID; exec sleep 30", nullptr);
    ::_exit(127);
  }
  ::close(out_fd);
  struct Reaper {  // if an assertion ends the test early: the launcher goes, its ranks with it (PDEATHSIG)
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reaper{launcher};
  std::string job;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::ifstream f(out_path);
    std::stringstream text;
    text << f.rdbuf();
    job = field(text.str(), "[1]", "job");
    if (!job.empty() && job == field(text.str(), "[0]", "job")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::unlink(out_path);
  ASSERT_EQ(job.size(), 12u) << "the ranks did not report their job in 20 s";
  const std::vector<std::string> made = {"mpcomm." + job + ".launcher", "mpcomm." + job + ".r0", "mpcomm." + job + ".r1"};
  EXPECT_EQ(job_entries(job), made) << "job '" << job << "': its launcher's lock and both ranks' files";
  const std::vector<pid_t> ranks = children_of(launcher);
  EXPECT_EQ(ranks.size(), 2u);

  // A launch while that job lives leaves the job alone.
  ASSERT_EQ(run(sh(1, "exit 0")).status, 0);
  EXPECT_EQ(job_entries(job), made) << "a live job's entries were removed";

  ::kill(launcher, SIGKILL);
  int ws = 0;
  ASSERT_EQ(::waitpid(launcher, &ws, 0), launcher);
  reaper.pid = -1;
  deadline = Clock::now() + std::chrono::seconds(5);  // the ranks die with their launcher (PDEATHSIG)
  auto any_alive = [&] { return std::any_of(ranks.begin(), ranks.end(), [](pid_t p) { return alive(p); }); };
  while (any_alive() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(any_alive());
  // The entries stay until a launch sweeps them: ours below, or one of a test running alongside (ctest -j).
  ASSERT_EQ(run(sh(1, "exit 0")).status, 0);
  EXPECT_TRUE(job_entries(job).empty()) << "left behind: " << job_entries(job).size() << " entries of job " << job;
}

// A rank that is this test binary, for the abort test: rank 0 fails, rank 1 reads the abort key.
TEST(LauncherHelper, ReadAbortKey) {
  if (std::getenv("MPCOMM_TEST_LAUNCHER_HELPER") == nullptr) GTEST_SKIP() << "only runs as a rank";
  if (std::string(std::getenv("RANK")) == "0") std::_Exit(3);
  auto store = open_store(std::getenv("MPCOMM_STORE"), std::getenv("MPCOMM_TOKEN"), Millis(5000));
  std::string abort = store->get_string("mpcomm/abort", Millis(5000));
  std::printf("abort: %s\n", abort.c_str());
  std::fflush(stdout);
  std::_Exit(0);
}

TEST_F(LauncherTest, FirstFailureIsAnnouncedInTheStore) {
  EnvVar keep("MPCOMM_TEST_LAUNCHER_HELPER");
  ::setenv("MPCOMM_TEST_LAUNCHER_HELPER", "1", 1);
  std::string self = std::filesystem::read_symlink("/proc/self/exe");
  LaunchOptions o;
  o.nranks = 2;
  o.grace_s = 2;
  o.argv = {self, "--gtest_filter=LauncherHelper.ReadAbortKey"};
  Result r = run(o);
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "[1] abort: rank 0 exited with status 3")) << r.out << r.err;
}

// ---- signals to the launcher ----------------------------------------------------------------------------

// Sends `sig` to this process once `n` ranks run; returns the ranks' pids (= their process groups).
std::vector<pid_t> signal_when_running(int n, int sig) {
  auto deadline = Clock::now() + std::chrono::seconds(2);
  std::vector<pid_t> kids;
  while (Clock::now() < deadline) {
    kids = children_of(::getpid());
    if (static_cast<int>(kids.size()) >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the shells start their sleeps
  ::kill(::getpid(), sig);
  return kids;
}

void expect_interrupt(int sig, int want_status) {
  std::vector<pid_t> groups;
  std::thread sender([&] { groups = signal_when_running(3, sig); });
  Result r = run(sh(3, "sleep 30 & wait"));
  sender.join();
  EXPECT_EQ(r.status, want_status) << r.err;
  EXPECT_LT(r.seconds, 2.5);
  EXPECT_EQ(groups.size(), 3u);
  EXPECT_NE(r.err.find(std::string("mpcomm launch: interrupted by SIG") + sigabbrev_np(sig)), std::string::npos)
      << r.err;
  EXPECT_TRUE(children_of(::getpid()).empty());
  auto deadline = Clock::now() + std::chrono::seconds(1);  // orphaned sleeps, if any, are reaped by init
  while (!live_in_groups(groups).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(live_in_groups(groups).empty()) << "a process of a rank's group survived";
}

TEST_F(LauncherTest, CtrlCTerminatesEveryRankAndReturns130) { expect_interrupt(SIGINT, 130); }

TEST_F(LauncherTest, SigtermTerminatesEveryRankAndReturns143) { expect_interrupt(SIGTERM, 143); }

TEST_F(LauncherTest, SignalHandlersAreRestored) {
  struct sigaction before {
  }, after{};
  ::sigaction(SIGINT, nullptr, &before);
  run(sh(1, "true"));
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
}

// ---- bad options ---------------------------------------------------------------------------------------

std::string launch_error(const LaunchOptions& o) {
  try {
    launch(o);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "launch() did not throw InvalidArgument";
  return "";
}

TEST_F(LauncherTest, BadOptionsAreRejectedBeforeAnythingStarts) {
  LaunchOptions o = sh(0, "true");
  EXPECT_NE(launch_error(o).find("-n must be at least 1"), std::string::npos);
  o = sh(4, "true");
  o.hosts = 0;
  EXPECT_NE(launch_error(o).find("--hosts must be between 1 and -n 4"), std::string::npos);
  o.hosts = 5;
  EXPECT_NE(launch_error(o).find("--hosts must be between 1 and -n 4 (got 5)"), std::string::npos);
  o = sh(1, "true");
  o.argv.clear();
  EXPECT_NE(launch_error(o).find("no program given"), std::string::npos);
  o = sh(1, "true");
  o.timeout_s = 0;
  EXPECT_NE(launch_error(o).find("--timeout"), std::string::npos);
}

TEST_F(LauncherTest, MissingProgramIsNamed) {
  LaunchOptions o;
  o.argv = {"mpcomm-no-such-program-xyz"};
  std::string msg = launch_error(o);
  EXPECT_EQ(msg.rfind("mpcomm: launch: program 'mpcomm-no-such-program-xyz' not found on PATH", 0), 0u) << msg;
  o.argv = {"/nonexistent/prog"};
  msg = launch_error(o);
  EXPECT_NE(msg.find("cannot run '/nonexistent/prog'"), std::string::npos) << msg;
  o.argv = {"/tmp"};
  msg = launch_error(o);
  EXPECT_NE(msg.find("not an executable file"), std::string::npos) << msg;
}

// ---- several nodes: mpcomm launch --nnodes, two launchers of this machine on loopback ------------------

namespace nodes {

std::string free_port() {
  uint16_t p = 0;
  (void)net::listen_tcp("127.0.0.1", 0, &p);
  return std::to_string(p);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs `script` in a shell; returns its exit status.
int shell(const std::string& script) {
  int st = std::system(("bash -c '" + script + "'").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace nodes

TEST(LaunchNodes, TwoNodesGiveGlobalRanksAndOneStore) {
  const std::string port = nodes::free_port(), dir = "/tmp/mpcomm_nodes_" + std::to_string(::getpid());
  const std::string cli = MPCOMM_CLI, prog = "echo R=\\$RANK W=\\$WORLD_SIZE L=\\$LOCAL_RANK LW=\\$LOCAL_WORLD_SIZE S=\\$MPCOMM_STORE "
                                                "M=\\$MASTER_ADDR:\\$MASTER_PORT";  // expanded by each rank's sh
  const std::string node = cli + " launch --nnodes 2 --master 127.0.0.1:" + port + " --nproc-per-node 2 --timeout 30 ";
  ASSERT_EQ(nodes::shell("mkdir -p " + dir + "; " + node + "--node-rank 1 -- sh -c \"" + prog + "\" > " + dir +
                         "/n1 2>&1 & " + node + "--node-rank 0 -- sh -c \"" + prog + "\" > " + dir +
                         "/n0 2>&1; a=$?; wait $!; b=$?; exit $((a | b))"),
            0)
      << nodes::read_file(dir + "/n0") << nodes::read_file(dir + "/n1");
  const std::string n0 = nodes::read_file(dir + "/n0"), n1 = nodes::read_file(dir + "/n1");
  std::filesystem::remove_all(dir);
  const std::string store = "S=tcp://127.0.0.1:" + port;
  for (int r = 0; r < 4; ++r) {
    const std::string& out = r < 2 ? n0 : n1;
    EXPECT_NE(out.find("[" + std::to_string(r) + "] R=" + std::to_string(r) + " W=4 L=" + std::to_string(r % 2) +
                       " LW=2 " + store),
              std::string::npos)
        << out;
  }
  // PyTorch's port: node 0's choice, the same on both nodes, not the store's.
  const std::string m0 = field(n0, "[0]", "M"), m1 = field(n1, "[2]", "M");
  EXPECT_EQ(m0, m1);
  EXPECT_NE(m0, "127.0.0.1:" + port);
}

TEST(LaunchNodes, NodesGivenDifferentShapesAreRefusedAndBothEnd) {
  const std::string port = nodes::free_port(), dir = "/tmp/mpcomm_nodes_" + std::to_string(::getpid());
  const std::string cli = MPCOMM_CLI;
  const std::string node = cli + " launch --nnodes 2 --master 127.0.0.1:" + port + " --grace 1 --timeout 30 ";
  const auto t0 = Clock::now();
  // Node 0 with 2 ranks that would sleep 60 s; node 1 with 1 rank: refused, and node 0's ranks end.
  const int st = nodes::shell("mkdir -p " + dir + "; " + node + "--node-rank 0 -n 2 -- sleep 60 > " + dir +
                              "/n0 2>&1 & sleep 0.5; " + node + "--node-rank 1 -n 1 -- true > " + dir +
                              "/n1 2>&1; b=$?; wait $!; a=$?; [ $a -ne 0 ] && [ $b -ne 0 ]");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string n0 = nodes::read_file(dir + "/n0"), n1 = nodes::read_file(dir + "/n1");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(st, 0) << "both nodes must fail\nnode 0:\n" << n0 << "node 1:\n" << n1;
  EXPECT_NE(n1.find("every node must be given the same"), std::string::npos) << n1;
  EXPECT_NE(n0.find("every node must be given the same"), std::string::npos) << n0;
  EXPECT_LT(s, 20) << "node 0's ranks were not ended";
}

}  // namespace
}  // namespace mpcomm
