// Ranks as processes under `mpcomm launch --elastic`: a rank SIGKILLed mid-loop is lost, the launcher keeps
// the others running, they catch the error, shrink, and every later allreduce is right (elastic_prog.cc
// checks each sum against the survivors' ranks); the launcher exits 0 naming the lost ranks. Nothing is left
// behind in /dev/shm.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "harness/process.h"

namespace mpcomm {
namespace {

using testing::line_with;
using testing::run_command;

struct Elastic {
  testing::RunResult r;
  int shrunk = 0, right = 0;
};

Elastic run_elastic(const std::string& backend, int n, const std::string& victims, int timeout_s,
                    const std::string& extra = "", const std::string& op = "allreduce") {
  const std::string dir = std::filesystem::temp_directory_path() / ("mpcomm-elastic-" + testing::unique_tag());
  std::filesystem::create_directories(dir);
  Elastic e;
  e.r = run_command(std::string(MPCOMM_CLI) + " launch --elastic -n " + std::to_string(n) + " --backend " + backend +
                    " --timeout " + std::to_string(timeout_s) + " " + extra + " -- " + MPCOMM_ELASTIC_PROG + " " +
                    victims + " 20 100 " + dir + " " + op + " 2>&1");
  std::filesystem::remove_all(dir);
  for (size_t at = 0; (at = e.r.output.find("shrunk to ", at)) != std::string::npos; ++at) ++e.shrunk;
  const std::string right = " " + (op == "grow" || op == "badjoin" || op == "overgrow" ? "allreduce" : op) + "s right";
  for (size_t at = 0; (at = e.r.output.find(right, at)) != std::string::npos; ++at) ++e.right;
  return e;
}

// Nothing of the job (its shared memory is named after its id) is left in /dev/shm.
void nothing_left(const std::string& output) {
  std::string job = line_with(output, "[0] job ");
  ASSERT_FALSE(job.empty()) << output;
  job = job.substr(job.find("[0] job ") + 8);
  for (const auto& e : testing::mpcomm_shm_entries())
    EXPECT_EQ(e.find("mpcomm." + job), std::string::npos) << "left behind: " << e;
}

TEST(ElasticLaunch, AKilledRankIsLostTheOthersShrinkAndGoOn) {
  for (const char* backend : {"native", "gloo"}) {
    SCOPED_TRACE(backend);
    Elastic e = run_elastic(backend, 4, "2", 30);
    EXPECT_EQ(e.r.status, 0) << e.r.output;
    EXPECT_NE(line_with(e.r.output, "lost rank 2"), "") << e.r.output;
    EXPECT_EQ(e.shrunk, 1) << e.r.output;
    EXPECT_EQ(e.right, 3) << e.r.output;  // every survivor, every sum right
    std::printf("%s: %s\n", backend, line_with(e.r.output, "shrunk to").c_str());
    nothing_left(e.r.output);
  }
}

TEST(ElasticLaunch, AStoppedRankIsLeftOutOnceTheTimeoutEndsTheOp) {
  Elastic e = run_elastic("native", 4, "1:stop", 3);
  EXPECT_EQ(e.r.status, 0) << e.r.output;
  EXPECT_EQ(e.shrunk, 1) << e.r.output;
  EXPECT_EQ(e.right, 3) << e.r.output;
  EXPECT_NE(line_with(e.r.output, "(timeout)"), "") << e.r.output;  // what the survivors saw: the op timed out
  std::printf("%s\n", line_with(e.r.output, "shrunk to").c_str());
}

TEST(ElasticLaunch, ThreeOfEightLostOneAfterAnother) {
  Elastic e = run_elastic("native", 8, "5,1,6", 30);
  EXPECT_EQ(e.r.status, 0) << e.r.output;
  EXPECT_EQ(e.shrunk, 3) << e.r.output;
  EXPECT_EQ(e.right, 5) << e.r.output;
  EXPECT_NE(line_with(e.r.output, "lost rank 5, rank 1, rank 6"), "") << e.r.output;
  nothing_left(e.r.output);
  EXPECT_NE(line_with(e.r.output, "shrunk to 5 ranks"), "") << e.r.output;
  std::printf("%s\n", line_with(e.r.output, "shrunk to 5 ranks").c_str());
}

TEST(ElasticLaunch, ARankKilledDuringEveryKindOfOpIsLostTheOthersGoOn) {
  for (const char* backend : {"native", "gloo"})
    for (const char* op :
         {"iallreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "sendrecv", "isend", "split"}) {
      SCOPED_TRACE(std::string(backend) + " " + op);
      Elastic e = run_elastic(backend, 4, "2", 30, "", op);
      EXPECT_EQ(e.r.status, 0) << e.r.output;
      EXPECT_EQ(e.shrunk, 1) << e.r.output;
      EXPECT_EQ(e.right, 3) << e.r.output;  // every survivor, every result right
      EXPECT_NE(line_with(e.r.output, "lost rank 2; every other rank ended with 0"), "") << e.r.output;
      nothing_left(e.r.output);
    }
}

TEST(ElasticLaunch, ASecondRankLostDuringTheShrinkIsLeftOutToo) {
  for (const char* backend : {"native", "gloo"}) {
    SCOPED_TRACE(backend);
    // rank 1 dies 2 ms after it checked in to its shrink: counted in, it fails the new communicator's setup,
    // and the others agree again without it (the setup bounded by the timeout, 3 s)
    Elastic e = run_elastic(backend, 4, "2,1:inshrink", 3);
    EXPECT_EQ(e.r.status, 0) << e.r.output;
    EXPECT_EQ(e.right, 2) << e.r.output;
    EXPECT_NE(line_with(e.r.output, "shrunk to 2 ranks"), "") << e.r.output;
    EXPECT_NE(line_with(e.r.output, "lost rank 2, rank 1"), "") << e.r.output;
    EXPECT_NE(line_with(e.r.output, "agreeing again without the lost"), "") << e.r.output;  // a second round ran
    std::printf("%s: %s\n", backend, line_with(e.r.output, "shrunk to").c_str());
    nothing_left(e.r.output);
  }
}

TEST(ElasticLaunch, AJoinerLostDuringTheGrowFailsTheGrowOnlyTheOthersGoOn) {
  // the restarted rank SIGKILLs itself once seated, while the others are inside grow(1)
  Elastic e = run_elastic("native", 4, "2", 3, "--max-restarts 1", "grow");
  EXPECT_EQ(e.r.status, 0) << e.r.output;
  EXPECT_NE(line_with(e.r.output, "grow failed after"), "") << e.r.output;
  EXPECT_EQ(e.right, 3) << e.r.output;
  EXPECT_NE(line_with(e.r.output, "lost rank 2, rank 2 (restart 1)"), "") << e.r.output;
  nothing_left(e.r.output);
}

TEST(ElasticLaunch, AJoinerWithAWrongSecretIsRefusedAndTheJobGoesOn) {
  Elastic e = run_elastic("native", 4, "2", 30, "", "badjoin");
  EXPECT_EQ(e.r.status, 0) << e.r.output;
  EXPECT_NE(line_with(e.r.output, "does not know this job's secret"), "") << e.r.output;
  EXPECT_NE(line_with(e.r.output, "refused joiner: exit status 3, 0 joiners waiting"), "") << e.r.output;
  EXPECT_EQ(e.right, 3) << e.r.output;
}

TEST(ElasticLaunch, AGrowBeyondWhatTheLauncherStartsIsRefusedAtOnce) {
  Elastic e = run_elastic("native", 4, "2", 30, "--max-restarts 1", "overgrow");
  EXPECT_EQ(e.r.status, 0) << e.r.output;
  const std::string refused = line_with(e.r.output, "grow refused after");
  EXPECT_NE(refused.find("the job's launchers start at most 1 joiners in all (mpcomm launch --max-restarts, per node)"),
            std::string::npos)
      << e.r.output;
  EXPECT_NE(line_with(e.r.output, "joiner: the job closed its joins"), "") << e.r.output;
  EXPECT_EQ(e.right, 3) << e.r.output;
}

TEST(ElasticLaunch, MaxRestartsNeedsElastic) {
  const auto r = run_command(std::string(MPCOMM_CLI) + " launch -n 2 --max-restarts 1 -- true 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(line_with(r.output, "--max-restarts"), "") << r.output;
}

TEST(ElasticLaunch, WithoutElasticAKilledRankEndsTheJob) {
  const std::string dir = std::filesystem::temp_directory_path() / ("mpcomm-elastic-" + testing::unique_tag());
  std::filesystem::create_directories(dir);
  auto r = run_command(std::string(MPCOMM_CLI) + " launch -n 3 --timeout 30 -- " + MPCOMM_ELASTIC_PROG + " 1 20 100 " +
                       dir + " 2>&1");
  std::filesystem::remove_all(dir);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(line_with(r.output, "allreduces right"), "") << r.output;
}

}  // namespace
}  // namespace mpcomm
