// mpcomm launch, run in-process (launcher_support.h): exit statuses, the first failure and the
// termination of the survivors, leftovers of a killed job, the abort announcement, Ctrl-C and SIGTERM —
// and that no process outlives launch().
#include "bootstrap/launcher_support.h"

namespace mpcomm {
namespace {

using namespace launcher_test;

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


}  // namespace
}  // namespace mpcomm
