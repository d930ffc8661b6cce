// The mpi backend, run as processes through `mpcomm launch --backend mpi` (mpirun underneath): the full
// conformance matrix, split, MPCOMM_CHECK mismatches, chunked large counts, point to point, a killed
// rank, a rank that never calls, emulated hosts, output relaying, Ctrl-C; and the environment rules
// that let ranks under mpirun find the launcher's store and their emulated host.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/env.h"
#include "harness/process.h"
#include "mpcomm/communicator.h"

namespace mpcomm {
namespace {

using testing::count_processes_running;
using testing::line_with;
using testing::mpcomm_shm_entries;
using testing::run_command;
using testing::RunResult;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool have_mpi() {
  for (const auto& b : available_backends())
    if (b == "mpi") return true;
  return false;
}

#ifdef MPCOMM_MPI_RANK_PROG
const std::string kProg = MPCOMM_MPI_RANK_PROG;
const std::string kTestProg = MPCOMM_TESTPROG;  // topology, kill, stall, abort: the rank program every backend uses
#else
const std::string kProg;
const std::string kTestProg = MPCOMM_TESTPROG;
#endif

// Open MPI's per-mpirun session directories (<TMPDIR>/ompi.<host>.<uid>/pid.<mpirun pid>).
std::vector<std::string> ompi_session_dirs() {
  const char* tmp = std::getenv("TMPDIR");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ompi." + host + "." +
                    std::to_string(::geteuid());
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind("pid.", 0) == 0) out.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `mpcomm launch --backend mpi <args>`.
std::string launch(const std::string& args) { return std::string(MPCOMM_CLI) + " launch --backend mpi " + args; }

// Every rank of the job printed "rank R ok".
void expect_every_rank_ok(const RunResult& r, int ranks) {
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_TRUE(contains(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " ok")) << r.output;
}

class MpiProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_mpi() || kProg.empty()) GTEST_SKIP() << "this build has no mpi backend";
    shm_before_ = mpcomm_shm_entries();
    sessions_before_ = ompi_session_dirs();
  }
  void TearDown() override {
    if (IsSkipped()) return;
    // Nothing new (a launch may also remove what a killed launcher left before the test).
    for (const std::string& e : mpcomm_shm_entries())
      EXPECT_NE(std::find(shm_before_.begin(), shm_before_.end(), e), shm_before_.end()) << "shared memory left behind: " << e;
    for (const char* mode : {"topology", "grid", "mismatch", "kill", "stall", "abort", "chunks", "bigcount", "p2p",
                             "anysource", "anysourcebig", "partial", "exit", "wrongsize"})
      EXPECT_EQ(count_processes_running(kProg, mode) + count_processes_running(kTestProg, mode), 0)
          << "ranks of '" << mode << "' left behind";
    EXPECT_EQ(count_processes_running("mpirun", "-n"), 0) << "mpirun left behind";
    for (const std::string& d : ompi_session_dirs())
      EXPECT_NE(std::find(sessions_before_.begin(), sessions_before_.end(), d), sessions_before_.end())
          << "Open MPI session directory left behind: " << d;
  }
  std::vector<std::string> shm_before_, sessions_before_;
};

// ---- the conformance matrix -------------------------------------------------------------------------

// (ranks, MPCOMM_MPI_CALLS): the calls the table picks, and each kind of call forced.
class MpiConformance : public MpiProcesses, public ::testing::WithParamInterface<std::tuple<int, std::string>> {};

TEST_P(MpiConformance, FullMatrixPasses) {
  const auto& [n, calls] = GetParam();
  RunResult r = run_command("MPCOMM_MPI_CALLS=" + calls + " " +
                            launch("-n " + std::to_string(n) + " --timeout 120 -- " + MPCOMM_CLI + " selftest --conformance"));
  EXPECT_EQ(r.status, 0) << r.output;
  std::string summary = line_with(r.output, "conformance: backend mpi");
  EXPECT_EQ(summary.rfind("[0] conformance: backend mpi, " + std::to_string(n) + " ranks, ", 0), 0u) << r.output;
  EXPECT_TRUE(contains(summary, " 0 failed")) << r.output;
  std::printf("conformance on %d ranks: %.1f s\n", n, r.seconds);
}

// 1-8 ranks, 2-13 s each on a 2-core machine: the mpi backend's waits test back to back before they
// sleep, as Open MPI's non-blocking collectives advance only inside MPI calls (docs/performance.md, "The
// mpi backend's calls").
INSTANTIATE_TEST_SUITE_P(Ranks, MpiConformance,
                         ::testing::Values(std::make_tuple(1, "auto"), std::make_tuple(2, "auto"),
                                           std::make_tuple(3, "auto"), std::make_tuple(4, "auto"),
                                           std::make_tuple(5, "auto"), std::make_tuple(8, "auto"),
                                           std::make_tuple(2, "nonblocking"), std::make_tuple(3, "blocking"),
                                           std::make_tuple(4, "nonblocking"), std::make_tuple(5, "blocking")),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// Which MPI calls an op makes is a table row: the built-in table (a CPU per rank, small: blocking), a
// tuning file's backend=mpi rows before it (its other sections ignored), MPCOMM_MPI_CALLS over both.
TEST_F(MpiProcesses, CallsComeFromTheTableAndATuningFilesRows) {
  const std::string path = ::testing::TempDir() + "mpcomm-mpi-calls.txt";
  std::ofstream(path) << "mpcomm-tuning 1 backend=native\nallreduce -> ring\n"
                         "mpcomm-tuning 1 backend=mpi\nallreduce bytes=[0,64] -> nonblocking\nbroadcast -> blocking\n";
  struct Case {
    std::string env, allreduce, broadcast;
  };
  for (const Case& c : {Case{"", "MPI_Allreduce", "MPI_Bcast"}, Case{"MPCOMM_TUNING=" + path, "MPI_Iallreduce", "MPI_Bcast"},
                        Case{"MPCOMM_TUNING=" + path + " MPCOMM_MPI_CALLS=blocking", "MPI_Allreduce", "MPI_Bcast"},
                        Case{"MPCOMM_MPI_CALLS=nonblocking", "MPI_Iallreduce", "MPI_Ibcast"}}) {
    RunResult r = run_command(c.env + " " + launch("-n 2 --timeout 30 -- " + kProg + " calls"));
    ASSERT_EQ(r.status, 0) << c.env << "\n" << r.output;
    for (int rank = 0; rank < 2; ++rank)
      EXPECT_TRUE(contains(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " calls allreduce=" +
                                         c.allreduce + " broadcast=" + c.broadcast))
          << c.env << "\n" << r.output;
  }
}

// mpcomm tune --backend mpi measures blocking against non-blocking calls and writes a backend=mpi section
// beside the native one already in the file; a communicator that loads the file makes, for an 8-byte
// allreduce and broadcast, the call its row chose, the faster of the two it measured.
TEST_F(MpiProcesses, TuneWritesACallsSectionThatTheBackendFollows) {
  const std::string path = ::testing::TempDir() + "mpcomm-mpi-tune.txt";
  std::ofstream(path) << "mpcomm-tuning 1 backend=native\nallreduce ranks=2 -> ring\n";
  RunResult r = run_command(std::string(MPCOMM_CLI) + " tune --backend mpi --ranks 2 --ops allreduce,broadcast -b 8 -e 8 " +
                            "-n 50 -w 5 --timeout 60 -o " + path);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream f(path);
  std::string line, section;
  std::map<std::string, std::string> chose;  // op -> its row's choice, in the mpi section
  while (std::getline(f, line)) {
    if (line.rfind("mpcomm-tuning 1 backend=", 0) == 0) section = line.substr(24);
    if (line.empty() || line[0] == '#' || line.rfind("mpcomm-tuning", 0) == 0) continue;
    if (section == "native") {
      EXPECT_EQ(line, "allreduce ranks=2 -> ring") << "the native section is kept as it was";
    }
    if (section != "mpi") continue;
    const std::string op = line.substr(0, line.find(' '));
    const size_t arrow = line.find(" -> ");
    ASSERT_NE(arrow, std::string::npos) << line;
    const std::string choice = line.substr(arrow + 4, line.find(' ', arrow + 4) - arrow - 4);
    EXPECT_TRUE(choice == "blocking" || choice == "nonblocking") << line;
    // us=blocking:T1,nonblocking:T2: the choice is the faster.
    const std::string us = line.substr(line.find("us=") + 3);
    const double tb = std::atof(us.c_str() + us.find("blocking:") + 9), tn = std::atof(us.c_str() + us.find("nonblocking:") + 12);
    EXPECT_EQ(choice, tb <= tn ? "blocking" : "nonblocking") << line;
    chose[op] = choice;
  }
  ASSERT_EQ(chose.size(), 2u) << "a row each for allreduce and broadcast";
  r = run_command("MPCOMM_TUNING=" + path + " " + launch("-n 2 --timeout 30 -- " + kProg + " calls"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string allreduce = chose["allreduce"] == "blocking" ? "MPI_Allreduce" : "MPI_Iallreduce";
  const std::string broadcast = chose["broadcast"] == "blocking" ? "MPI_Bcast" : "MPI_Ibcast";
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_TRUE(contains(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " calls allreduce=" +
                                       allreduce + " broadcast=" + broadcast)) << r.output;
}

// The i-ops under mpirun: the conformance matrix posted in queues of 8 (every third case blocking in
// between), waited in reverse order; with either kind of MPI call underneath.
TEST_F(MpiProcesses, NonBlockingConformanceInQueues) {
  for (const auto& [n, calls] : {std::make_pair(2, "blocking"), std::make_pair(3, "nonblocking"), std::make_pair(4, "auto")}) {
    RunResult r = run_command(std::string("MPCOMM_MPI_CALLS=") + calls + " " +
                              launch("-n " + std::to_string(n) + " --timeout 120 -- " + MPCOMM_CLI +
                                     " selftest --conformance --nonblocking"));
    EXPECT_EQ(r.status, 0) << r.output;
    const std::string summary = line_with(r.output, "conformance: backend mpi");
    EXPECT_TRUE(contains(summary, std::to_string(n) + " ranks, cpu buffers, non-blocking in queues")) << r.output;
    EXPECT_TRUE(contains(summary, " 0 failed")) << r.output;
  }
}

// ---- groups, checks, counts, point to point ---------------------------------------------------------

// A launcher killed by SIGKILL cannot end its job: mpirun gets the launcher's death signal (SIGTERM),
// sometimes more than once, and then exits without ending its ranks; Open MPI's backing folder stays.
// The next launch sees that the job's launcher is gone and ends both.
TEST_F(MpiProcesses, WhatAKilledLauncherLeftIsEndedByTheNextLaunch) {
  const std::string seconds = "60." + std::to_string(::getpid() % 100000);  // names this test's ranks
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execl(MPCOMM_CLI, MPCOMM_CLI, "launch", "--backend", "mpi", "-n", "2", "--", "sleep", seconds.c_str(), nullptr);
    ::_exit(127);
  }
  auto ranks = [&] {  // mpirun starts the program by its full path
    return count_processes_running("sleep", seconds) + count_processes_running("/bin/sleep", seconds) +
           count_processes_running("/usr/bin/sleep", seconds);
  };
  struct Reaper {  // if an assertion ends the test early: the launcher goes, and a launch sweeps its job
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;
      if (::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
      run_command(std::string(MPCOMM_CLI) + " launch -n 1 -- true");
    }
  } reaper{launcher};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ranks() < 2 && std::chrono::steady_clock::now() < deadline) ::usleep(20 * 1000);
  ASSERT_EQ(ranks(), 2) << "mpirun did not start both ranks in 30 s";
  auto vader_folders = [] {
    int n = 0;
    for (const std::string& e : mpcomm_shm_entries()) n += e.size() > 6 && e.compare(e.size() - 6, 6, ".vader") == 0;
    return n;
  };
  EXPECT_EQ(vader_folders(), 1);
  ::kill(launcher, SIGKILL);
  int ws = 0;
  ASSERT_EQ(::waitpid(launcher, &ws, 0), launcher);
  reaper.pid = -1;
  ::usleep(1500 * 1000);  // mpirun's orderly end, when it gets one, takes about a second
  EXPECT_EQ(vader_folders(), 1) << "the killed launcher's job left no backing folder: this test shows nothing";

  RunResult r = run_command(std::string(MPCOMM_CLI) + " launch -n 1 -- true");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(ranks(), 0) << "ranks of the killed launcher's job outlived the next launch";
  EXPECT_EQ(vader_folders(), 0) << "the killed launcher's backing folder outlived the next launch";
  // (TearDown: no new Open MPI session folder, i.e. also the killed launcher's mpirun's is gone.)
}

TEST_F(MpiProcesses, SplitIntoATwoByTwoGrid) {
  RunResult r = run_command(launch("-n 4 --timeout 60 -- " + kProg + " grid"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_every_rank_ok(r, 4);
}

TEST_F(MpiProcesses, CheckFindsMismatchedCollectivesOnEveryRank) {
  RunResult r = run_command("MPCOMM_CHECK=1 " + launch("-n 3 --timeout 30 -- " + kProg + " mismatch"));
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_LT(r.seconds, 20.0) << "a mismatch must not wait for the timeout\n" << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    std::string line =
        line_with(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " mismatch: ");
    ASSERT_FALSE(line.empty()) << r.output;
    EXPECT_TRUE(contains(line, "allreduce #0 (count 4, float32, sum)")) << line;
    EXPECT_TRUE(contains(line, "broadcast #0 (count 4, float32, root 0)")) << line;
    EXPECT_TRUE(contains(line, "[mpi]")) << line;
  }
}

TEST_F(MpiProcesses, LargeCountsAreSplitIntoChunks) {
  RunResult r = run_command(launch("-n 3 --timeout 60 -- " + kProg + " chunks"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_every_rank_ok(r, 3);
}

// MPI_ANY_SOURCE: whole messages from their senders. One that would take more than one MPI message (the
// chunk limit forced to 1000 elements) is refused, and the communicator goes on.
TEST_F(MpiProcesses, ReceivesFromAnySource) {
  RunResult r = run_command(launch("-n 3 --timeout 60 -- " + kProg + " anysource"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_every_rank_ok(r, 3);
  r = run_command(launch("-n 2 --timeout 60 -- " + kProg + " anysourcebig"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_every_rank_ok(r, 2);
  EXPECT_TRUE(
      contains(line_with(r.output, "[0] rank 0 unsupported: "),
               "recv #0 (count 2000, int32, from any rank, tag 1) on rank 0 of 2 [mpi]: the mpi backend receives "
               "from any source at most 1000 elements (one MPI message)"))
      << r.output;
}

// Refused before any MPI call, with either kind of call; the communicator stays usable past the timeout
// (2 s: nothing was left armed for the watchdog).
TEST_F(MpiProcesses, CountsPastIntMaxAreUnsupportedWhereMpiCannotSplitThem) {
  for (const std::string calls : {"blocking", "nonblocking"}) {
    RunResult r = run_command("MPCOMM_MPI_CALLS=" + calls + " " + launch("-n 2 --timeout 2 -- " + kProg + " bigcount"));
    EXPECT_EQ(r.status, 0) << r.output;
    for (int rank = 0; rank < 2; ++rank) {
      std::string line =
          line_with(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " unsupported: ");
      ASSERT_FALSE(line.empty()) << r.output;
      EXPECT_TRUE(contains(line, "alltoall #0 (count 2147483648, int8)")) << line;
      EXPECT_TRUE(contains(line, "more than the 2147483647 elements")) << line;
      EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + " usable after the refusal")) << r.output;
      EXPECT_TRUE(contains(r.output, "alltoallv #2 (int8; 1 elements out, 1 in) on rank " + std::to_string(rank) +
                                         " of 2 [mpi]: send_displs[" + std::to_string(rank) +
                                         "] is 2147483648, more than the 2147483647 elements MPI's MPI_Alltoallv takes"))
          << r.output;
      EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + " usable after the alltoallv refusal")) << r.output;
    }
  }
}

TEST_F(MpiProcesses, PointToPointWithTagsOrderAndCountCheck) {
  RunResult r = run_command(launch("-n 3 --timeout 30 -- " + kProg + " p2p"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_every_rank_ok(r, 3);
  std::string line = line_with(r.output, "[1] rank 1 mismatch: ");
  EXPECT_TRUE(contains(line, "recv #")) << r.output;
  EXPECT_TRUE(contains(line, "rank 0 sent 3 elements where 4 were expected")) << r.output;
}

TEST_F(MpiProcesses, RankAndSizeMustBeMpiWorlds) {
  RunResult r = run_command(launch("-n 1 --timeout 30 -- " + kProg + " wrongsize"));
  EXPECT_EQ(r.status, 0) << r.output;
  std::string line = line_with(r.output, "[0] rank 0 invalid: ");
  EXPECT_TRUE(contains(line, "rank 0 of 2 was asked for")) << r.output;
  EXPECT_TRUE(contains(line, "rank 0 of 1")) << r.output;
}

// ---- hosts and output ---------------------------------------------------------------------------------

TEST_F(MpiProcesses, EmulatedHostsSplitRanksInBlocks) {
  RunResult r = run_command(launch("-n 4 --hosts 2 -- " + kTestProg + " topology"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    std::string line = line_with(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " host ");
    ASSERT_FALSE(line.empty()) << r.output;
    EXPECT_TRUE(contains(line, rank < 2 ? "-h0 " : "-h1 ")) << line;
    EXPECT_TRUE(contains(line, "local " + std::to_string(rank % 2) + "/2 hosts 2")) << line;
  }
}

TEST_F(MpiProcesses, OneHostByDefault) {
  RunResult r = run_command(launch("-n 3 -- " + kTestProg + " topology"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(contains(line_with(r.output, "[" + std::to_string(rank) + "] rank "),
                         "local " + std::to_string(rank) + "/3 hosts 1"))
        << r.output;
}

TEST_F(MpiProcesses, LinesWrittenInPiecesStayWholeAndPrefixed) {
  RunResult r = run_command(launch("-n 3 -- " + kProg + " partial"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(contains(r.output, "[" + std::to_string(rank) + "] part1 part2\n")) << r.output;
  EXPECT_FALSE(contains(r.output, "<stdout>")) << r.output;
}

// ---- failures -------------------------------------------------------------------------------------------

TEST_F(MpiProcesses, KilledRankEndsTheJobFastWithItsStatus) {
  RunResult r = run_command(launch("-n 4 --timeout 20 -- " + kTestProg + " kill 2 5"));
  EXPECT_EQ(r.status, 137) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  EXPECT_TRUE(contains(r.output, "mpcomm launch: rank 2 exited with signal 9 (Killed) (reported by mpirun)"))
      << r.output;
  std::printf("killed rank: the job ended after %.1f s\n", r.seconds);
}

TEST_F(MpiProcesses, FailingRankStatusIsReturned) {
  RunResult r = run_command(launch("-n 3 --timeout 20 -- " + kProg + " exit 5 1"));
  EXPECT_EQ(r.status, 5) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
  EXPECT_TRUE(contains(r.output, "mpcomm launch: rank 1 exited with status 5 (reported by mpirun)")) << r.output;
}

// A wait keeps calling MPI_Test back to back for MPCOMM_MPI_SPIN_MS before it sleeps; the deadline and
// the abort key are checked all along, also while it spins.
TEST_F(MpiProcesses, TheDeadlineHoldsWhileAWaitSpins) {
  RunResult r = run_command("MPCOMM_MPI_CALLS=nonblocking MPCOMM_MPI_SPIN_MS=60000 " +
                            launch("-n 3 --timeout 3 -- " + kTestProg + " stall 2 2"));
  EXPECT_EQ(r.status, 3) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::string tag = "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " failed after ";
    std::string line = line_with(r.output, tag);
    ASSERT_FALSE(line.empty()) << r.output;
    EXPECT_TRUE(contains(line, ": timeout: ")) << line;
    double after = std::atof(line.c_str() + line.find(tag) + tag.size());
    EXPECT_LT(after, 10.0) << "the wait spun past its deadline: " << line;
  }
}

TEST_F(MpiProcesses, ARankThatNeverCallsGivesATimeoutNamingTheOp) {
  RunResult r = run_command("MPCOMM_MPI_CALLS=nonblocking " + launch("-n 3 --timeout 3 -- " + kTestProg + " stall 2 2"));
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::string tag = "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " failed after ";
    std::string line = line_with(r.output, tag);
    ASSERT_FALSE(line.empty()) << r.output;
    EXPECT_TRUE(contains(line, ": timeout: mpcomm: allreduce #2 (count 262144, float32, max) on rank " +
                                   std::to_string(rank) + " of 3 [mpi]: timed out after 3 s"))
        << line;
    double after = std::atof(line.c_str() + line.find(tag) + tag.size());
    EXPECT_GE(after, 2.9) << line;
    EXPECT_LT(after, 6.0) << line;  // the timeout plus a few seconds
    // Later calls fail at once with the reason.
    std::string then = line_with(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " then: ");
    EXPECT_TRUE(contains(then, "communicator was aborted")) << r.output;
  }
  std::printf("never-calling rank: the job ended after %.1f s (timeout 3 s)\n", r.seconds);
}

TEST_F(MpiProcesses, AnAbortReachesRanksWaitingInACollective) {
  // Rank 1 aborts instead of calling allreduce #2; ranks 0 and 2 learn it from the store's abort key
  // (polled every 500 ms), long before their 30 s timeout.
  RunResult r = run_command("MPCOMM_MPI_CALLS=nonblocking " + launch("-n 3 --timeout 30 -- " + kTestProg + " abort 1 2"));
  EXPECT_EQ(r.status, 3) << r.output;
  for (int rank : {0, 2}) {
    std::string tag = "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " failed after ";
    std::string line = line_with(r.output, tag);
    ASSERT_FALSE(line.empty()) << r.output;
    EXPECT_TRUE(contains(line, ": peer failure: mpcomm: allreduce #2 ")) << line;
    EXPECT_TRUE(contains(line, "aborted because another rank failed: rank 1 aborted: testing")) << line;
    EXPECT_LT(std::atof(line.c_str() + line.find(tag) + tag.size()), 3.0) << line;
  }
}

// A blocking MPI call cannot time out or be interrupted: when a rank never makes the matching call, the
// watchdog ends the job once the others' call has lasted the timeout, with our error naming the op, its
// sequence number and the rank; when a rank aborts while the others sit in a blocking call, it ends the
// job naming the abort. Nothing is left behind.
TEST_F(MpiProcesses, TheWatchdogEndsAJobStuckInABlockingCall) {
  for (const std::string mode : {"stall", "abort"}) {
    const std::string tag = testing::unique_tag();
    RunResult r = run_command("MPCOMM_MPI_CALLS=blocking " +
                              launch("-n 3 --timeout 3 -- " + kTestProg + " " + mode + " 1 2 " + tag));
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_LT(r.seconds, 15.0) << r.output;
    const std::string line = line_with(r.output, "the watchdog ends the job with MPI_Abort");
    ASSERT_FALSE(line.empty()) << r.output;
    EXPECT_TRUE(contains(line, "allreduce #2 (count 262144, float32, max) on rank ")) << line;
    EXPECT_TRUE(contains(line, " of 3 [mpi]: ")) << line;
    if (mode == "stall")
      EXPECT_TRUE(contains(line, "timed out after 3 s in a blocking MPI call")) << line;
    else
      EXPECT_TRUE(contains(line, "aborted because another rank failed: rank 1 aborted: testing")) << line;
    EXPECT_EQ(count_processes_running(kTestProg, tag), 0) << "orphaned ranks";
  }
}

TEST_F(MpiProcesses, KilledMpirunLeavesNoRankBehind) {
  // The launcher sees mpirun die and kills what it left: every process with the job's MPCOMM_JOB_ID.
  RunResult r = run_command("sh -c '" + launch("-n 3 --timeout 60 -- " + kTestProg + " stall 9 0") +
                            " & pid=$!; sleep 3; kill -KILL $(pgrep -P $pid -x mpirun); wait $pid; echo status=$?'");
  EXPECT_TRUE(contains(r.output, "status=137")) << r.output;
  EXPECT_TRUE(contains(r.output, "mpcomm launch: mpirun exited with signal 9 (Killed)")) << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
}

TEST_F(MpiProcesses, CtrlCTerminatesTheJobAndReturns130) {
  // No victim (rank 9 does not exist): the ranks loop allreduces until interrupted.
  RunResult r = run_command("sh -c '" + launch("-n 3 --timeout 60 -- " + kTestProg + " stall 9 0") +
                            " & pid=$!; sleep 3; kill -INT $pid; wait $pid; echo status=$?'");
  EXPECT_TRUE(contains(r.output, "status=130")) << r.output;
  EXPECT_TRUE(contains(r.output, "mpcomm launch: interrupted by SIGINT; terminating mpirun and its ranks")) << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
}

// ---- the environment under mpirun ---------------------------------------------------------------------

// Sets variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  void set(const char* k, const char* v) {
    save(k);
    ::setenv(k, v, 1);
  }
  void unset(const char* k) {
    save(k);
    ::unsetenv(k);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  void save(const char* k) {
    const char* old = std::getenv(k);
    saved_.emplace_back(k, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

void clear_launch_env(ScopedEnv& env) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "SLURM_PROCID", "MPCOMM_HOST_ID", "MPCOMM_HOSTS", "MPCOMM_STORE_SERVED",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    env.unset(v);
}

TEST(MpiEnvironment, LaunchersStoreIsNotServedByRankZero) {
  ScopedEnv env;
  clear_launch_env(env);
  env.set("OMPI_COMM_WORLD_RANK", "0");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("MPCOMM_STORE", "tcp://127.0.0.1:7000");
  EXPECT_TRUE(discover_env().serve_store);  // plain mpirun: nobody else runs it
  env.set("MPCOMM_STORE_SERVED", "1");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.store_url, "tcp://127.0.0.1:7000");
  EXPECT_FALSE(e.serve_store);  // mpcomm launch --backend mpi serves it
}

TEST(MpiEnvironment, EmulatedHostComesFromTheWorldRank) {
  ScopedEnv env;
  clear_launch_env(env);
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  env.set("OMPI_COMM_WORLD_SIZE", "5");
  env.set("MPCOMM_HOSTS", "2");
  // 5 ranks on 2 hosts: [0, 2) and [2, 5), as the forked launcher places them.
  for (int r = 0; r < 5; ++r) {
    env.set("OMPI_COMM_WORLD_RANK", std::to_string(r).c_str());
    EXPECT_EQ(host_id_from_env(), std::string(name) + (r < 2 ? "-h0" : "-h1")) << "rank " << r;
  }
  env.set("MPCOMM_HOSTS", "1");
  EXPECT_EQ(host_id_from_env(), name);
  env.set("MPCOMM_HOST_ID", "chosen");  // an explicit host id wins
  env.set("MPCOMM_HOSTS", "2");
  EXPECT_EQ(host_id_from_env(), "chosen");
  env.unset("MPCOMM_HOST_ID");
  env.set("MPCOMM_HOSTS", "9");
  try {
    host_id_from_env();
    ADD_FAILURE() << "MPCOMM_HOSTS=9 with 5 ranks accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "MPCOMM_HOSTS=9 is not between 1 and OMPI_COMM_WORLD_SIZE=5")) << e.what();
  }
}

TEST(MpiEnvironment, BlockPlacement) {
  for (int n = 1; n <= 9; ++n)
    for (int hosts = 1; hosts <= n; ++hosts)
      for (int r = 0; r < n; ++r) {
        int h = emulated_host_of_rank(r, n, hosts);
        EXPECT_LE(static_cast<long>(h) * n / hosts, r) << n << " " << hosts << " " << r;
        EXPECT_LT(r, static_cast<long>(h + 1) * n / hosts) << n << " " << hosts << " " << r;
      }
}

}  // namespace
}  // namespace mpcomm
