// The fault suite (short version; scripts/faults runs it with many seeds): for every backend, a rank is
// SIGKILLed, SIGSTOPped past the timeout, or exits early, at a random point of a random sequence of
// collectives (tests/faults/fault_prog.cc). Checked every time:
//   - the launcher exits non-zero, within the timeout + 10 s (+ its grace period);
//   - native and gloo: every survivor raises a peer failure or a timeout within the timeout + 10 s of its
//     last completed op, naming the op; mpi: mpirun ends the whole job when a rank dies (MPI's fault model),
//     so there the survivors either report or are ended by mpirun, and the launcher names the rank;
//   - no process of the job is left (a stopped rank too), and no shared-memory segment of the job.
// Sockets die with their processes, so no process left means no socket left.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>

#include "harness/process.h"
#include "mpcomm/mpcomm.h"

namespace mpcomm {
namespace {

using testing::RunResult;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// "auto_gloo": auto without mpi (so not under mpirun), every op routed to gloo.
struct Fault {
  std::string backend, mode;
  uint64_t seed;
};

constexpr const char* kAllOnGloo = R"(mpcomm-tuning 1 backend=auto
allreduce -> gloo
broadcast -> gloo
allgather -> gloo
reduce_scatter -> gloo
alltoall -> gloo
barrier -> gloo
sendrecv -> gloo
)";

// The environment that makes f's job (auto_gloo: auto without mpi, every op on gloo).
std::string env_of(const Fault& f) {
  if (f.backend != "auto_gloo") return "";
  const std::string table = ::testing::TempDir() + "mpcomm-faults-all-on-gloo.table";
  std::ofstream(table) << kAllOnGloo;
  return "MPCOMM_AUTO_BACKENDS=native,gloo MPCOMM_TUNING=" + table + " ";
}

// mpirun starts the ranks, and ends the job when one dies (MPI's fault model): mpi, and auto with mpi.
bool under_mpirun(const std::string& backend) { return backend == "mpi" || backend == "auto"; }

constexpr double kTimeout = 3;  // MPCOMM_TIMEOUT of the ranks, seconds
// The launcher's grace: how long it lets the other ranks run on after the first one ended. Survivors must
// report within it, or the launcher ends them first and the test cannot tell; a gloo survivor that learns
// of the death second hand may take more than 2 s on a loaded machine.
constexpr int kGrace = 6;

void inject(const Fault& f) {
  const int n = 3 + static_cast<int>(f.seed % 3);  // 3 to 5 ranks
  const int hosts = under_mpirun(f.backend) ? 1 : 1 + static_cast<int>(f.seed / 3 % 2);
  const std::string tag = testing::unique_tag();
  const std::string backend = f.backend == "auto_gloo" ? "auto" : f.backend;
  RunResult r = testing::run_command(
      env_of(f) + MPCOMM_CLI + " launch -n " + std::to_string(n) + " --hosts " + std::to_string(hosts) + " --backend " +
      backend + " --timeout " + std::to_string(static_cast<int>(kTimeout)) + " --grace " + std::to_string(kGrace) +
      " -- " + MPCOMM_FAULT_PROG + " " + f.mode + " " + std::to_string(f.seed) + " " + tag);
  const std::string what = f.backend + " " + f.mode + " seed " + std::to_string(f.seed) + ", " + std::to_string(n) +
                           " ranks on " + std::to_string(hosts) + " host(s)";
  SCOPED_TRACE(what);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("fault: victim (\\d+) at op (\\d+)"))) << r.output;
  const int victim = std::stoi(m[1]);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(r.seconds, kTimeout + 10 + kGrace + 3) << r.output;  // + grace + start-up
  int reported = 0;
  for (int s = 0; s < n; ++s) {
    if (s == victim) continue;
    const std::string head = "[" + std::to_string(s) + "] rank " + std::to_string(s) + " fault after ";
    const std::string line = testing::line_with(r.output, head);
    if (line.empty()) {
      // Only mpirun may end a survivor before it reports (a rank that died, or the mpi backend's watchdog
      // ending a job stuck in a blocking MPI call: MPI_Abort).
      EXPECT_TRUE(under_mpirun(f.backend)) << "rank " << s << " did not report the fault:\n" << r.output;
      continue;
    }
    ++reported;
    const double after = std::atof(line.c_str() + line.find(head) + head.size());
    EXPECT_LT(after, kTimeout + 10) << line;
    EXPECT_TRUE(contains(line, ": peer failure: ") || contains(line, ": timeout: ")) << line;
    EXPECT_TRUE(std::regex_search(line, std::regex("(allreduce|broadcast|allgather|reduce_scatter|alltoall|barrier|send|recv) #\\d+")))
        << line;
    EXPECT_TRUE(contains(line, "on rank " + std::to_string(s) + " of " + std::to_string(n))) << line;
  }
  if (f.backend == "auto_gloo") {
    // Every op ran on gloo: what failed names gloo, and a survivor that saw the death names the rank.
    EXPECT_TRUE(contains(r.output, "[gloo]")) << r.output;
  }
  if (under_mpirun(f.backend) && reported == 0) {
    EXPECT_TRUE(contains(r.output, "mpcomm launch: rank ")) << "the launcher must name the rank that ended\n" << r.output;
  }
  EXPECT_EQ(testing::count_processes_running(MPCOMM_FAULT_PROG, tag), 0) << "orphaned ranks\n" << r.output;
  std::smatch job;
  ASSERT_TRUE(std::regex_search(r.output, job, std::regex("\\] job ([0-9a-f]+)"))) << r.output;
  for (const auto& e : testing::mpcomm_shm_entries()) EXPECT_FALSE(contains(e, job[1].str())) << "left behind: " << e;
}

// A large send on a crowded host (MPCOMM_CPUS=1: native leaves the payload in the sender's buffer until
// the receive is posted) whose sender dies before the read, or whose receiver dies before it: the
// survivors fail with a peer failure naming the dead rank (the receiver: its read; the sender: its send),
// and nothing is left.
TEST(FaultsPointToPoint, ALargeSendWhoseSenderOrReceiverDies) {
  for (const std::string mode : {"sender_dies", "receiver_dies"}) {
    SCOPED_TRACE(mode);
    const int victim = mode == "sender_dies" ? 0 : 1, survivor = 1 - victim;
    const std::string tag = testing::unique_tag();
    RunResult r = testing::run_command("MPCOMM_CPUS=1 " + std::string(MPCOMM_CLI) + " launch -n 3 --backend native --timeout " +
                                       std::to_string(static_cast<int>(kTimeout)) + " --grace " + std::to_string(kGrace) +
                                       " -- " + MPCOMM_FAULT_PROG + " " + mode + " 0 " + tag);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_LT(r.seconds, kTimeout + 10 + kGrace + 3) << r.output;
    const std::string line = testing::line_with(r.output, "[" + std::to_string(survivor) + "] rank " + std::to_string(survivor) + " fault after ");
    ASSERT_FALSE(line.empty()) << "rank " << survivor << " did not report the fault:\n" << r.output;
    EXPECT_TRUE(contains(line, ": peer failure: ")) << line;
    EXPECT_TRUE(contains(line, "rank " + std::to_string(victim))) << line;
    EXPECT_EQ(testing::count_processes_running(MPCOMM_FAULT_PROG, tag), 0) << "orphaned ranks\n" << r.output;
    std::smatch job;
    ASSERT_TRUE(std::regex_search(r.output, job, std::regex("\\] job ([0-9a-f]+)"))) << r.output;
    for (const auto& e : testing::mpcomm_shm_entries()) EXPECT_FALSE(contains(e, job[1].str())) << "left behind: " << e;
  }
}

class Faults : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// Three seeds per backend and fault by default; MPCOMM_TEST_FAULT_SEEDS=N and MPCOMM_TEST_FAULT_SEED_BASE=B run
// seeds B..B+N-1 instead (scripts/faults).
TEST_P(Faults, EverySurvivorFailsInTimeAndNothingIsLeft) {
  const auto& [backend, mode] = GetParam();
  const char* count = std::getenv("MPCOMM_TEST_FAULT_SEEDS");
  const char* base = std::getenv("MPCOMM_TEST_FAULT_SEED_BASE");
  const uint64_t b = base != nullptr ? std::strtoull(base, nullptr, 10) : 11;
  const uint64_t k = count != nullptr ? std::strtoull(count, nullptr, 10) : 3;
  int failures_before = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
  for (uint64_t seed = b; seed < b + k; ++seed) inject({backend, mode, seed});
  int parts = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() - failures_before;
  std::printf("faults: %s %s: %llu injected (seeds %llu..%llu), %s\n", backend.c_str(), mode.c_str(),
              static_cast<unsigned long long>(k), static_cast<unsigned long long>(b),
              static_cast<unsigned long long>(b + k - 1), parts == 0 ? "every survivor failed in time, nothing left" : "FAILURES above");
}

std::vector<std::tuple<std::string, std::string>> params() {
  std::vector<std::tuple<std::string, std::string>> ps;
  for (const auto& b : available_backends())
    if (b != "nccl")
      for (const char* mode : {"kill", "stop", "exit"}) {
        ps.emplace_back(b, mode);
        if (b == "gloo") ps.emplace_back("auto_gloo", mode);
      }
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Backends, Faults, ::testing::ValuesIn(params()), [](const auto& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param);
});

}  // namespace
}  // namespace mpcomm
