// mpcomm train --elastic under mpcomm launch --elastic: a rank SIGKILLed mid-run (--fail-rank) takes its
// data-parallel replica with it, the other replicas go on at dp - 1 from the step in flight, and with
// --reproducible the loss log and the saved model are the bytes of a run that lost nothing — for a lone
// replica rank, a tensor-parallel and a pipeline replica, world rank 0 itself, and two failures one after
// the other; and with --max-restarts the lost rank started again, its replica grown back in (the other
// ranks of a tensor-parallel replica waiting to come back with it), with the same bytes again.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/process.h"

namespace mpcomm {
namespace {

using testing::line_with;
using testing::run_command;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

struct Outcome {
  testing::RunResult r;
  std::string losses, model;
};

class ElasticTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("mpcomm-elastic-train-" + testing::unique_tag());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The small model by default; `size` replaces it (and the steps).
  Outcome train(const std::string& backend, const std::string& split, const std::string& extra,
                const std::string& size =
                    "--layers 2 --hidden 32 --heads 4 --seq 16 --batch 8 --micro-batches 2 "
                    "--steps 6") {
    const std::string log = dir_ + "/loss.jsonl", model = dir_ + "/model.safetensors";
    Outcome out;
    out.r = run_command(std::string(MPCOMM_CLI) + " train " + split + " --backend " + backend + " " + size +
                        " --reproducible --timeout 20 --loss-log " + log + " --save " + model + " " + extra + " 2>&1");
    out.losses = slurp(log), out.model = slurp(model);
    std::filesystem::remove(log), std::filesystem::remove(model);
    return out;
  }

  // The elastic run that loses `fail` against the same run losing nothing.
  void same_bits(const std::string& backend, const std::string& split, const std::string& fail, int recoveries) {
    SCOPED_TRACE(backend + " " + split + " --fail-rank " + fail);
    const Outcome want = train(backend, split, "");
    ASSERT_EQ(want.r.status, 0) << want.r.output;
    ASSERT_NE(want.losses.find("\"step\":5"), std::string::npos) << want.losses;
    const Outcome got = train(backend, split, "--elastic --fail-rank " + fail);
    ASSERT_EQ(got.r.status, 0) << got.r.output;
    EXPECT_NE(line_with(got.r.output, "lost rank"), "") << got.r.output;
    EXPECT_EQ(count(got.r.output, "recovered at step"), static_cast<size_t>(recoveries)) << got.r.output;
    EXPECT_EQ(got.losses, want.losses) << got.r.output;
    EXPECT_TRUE(got.model == want.model) << "the saved model differs";
    std::printf("%s\n", line_with(got.r.output, "recovered at step").c_str());
  }

  std::string dir_;
};

TEST_F(ElasticTraining, ALostReplicaLeavesAndTheRestGoOnWithTheSameBits) {
  for (const char* backend : {"native", "gloo"}) {
    same_bits(backend, "-n 4 --dp 4", "2@3", 1);         // 8 micro-batches dealt 3, 3, 2
    same_bits(backend, "-n 4 --tp 2 --dp 2", "1@2", 1);  // rank 0 of the lost replica leaves
  }
  same_bits("native", "-n 4 --pp 2 --dp 2", "0@1", 1);  // world rank 0, the one that reports, is lost
}

TEST_F(ElasticTraining, TwoFailuresOneAfterTheOther) { same_bits("native", "-n 8 --pp 2 --dp 4", "5@2,2@4", 2); }

// Steps long enough (about 0.15 s, 2 s after the failure) that a restarted process is back before the run ends.
constexpr const char* kLonger = "--layers 2 --hidden 64 --heads 4 --seq 64 --batch 16 --micro-batches 2 --steps 16";

TEST_F(ElasticTraining, ARestartedRankGrowsItsReplicaBackWithTheSameBits) {
  // --reproducible: the same bytes on every backend, so one uninterrupted run per split.
  const Outcome plain = train("native", "-n 4 --dp 4", "", kLonger),
                tp2 = train("native", "-n 4 --tp 2 --dp 2", "", kLonger);
  ASSERT_EQ(plain.r.status, 0) << plain.r.output;
  ASSERT_EQ(tp2.r.status, 0) << tp2.r.output;
  struct Case {
    const char *backend, *split, *fail;
    const Outcome& want;
  };
  for (const Case& c : {Case{"native", "-n 4 --dp 4", "2@3", plain}, Case{"gloo", "-n 4 --dp 4", "2@3", plain},
                        Case{"native", "-n 4 --tp 2 --dp 2", "1@3", tp2}}) {
    SCOPED_TRACE(std::string(c.backend) + " " + c.split + " --fail-rank " + c.fail);
    const Outcome got =
        train(c.backend, c.split, std::string("--elastic --max-restarts 1 --fail-rank ") + c.fail, kLonger);
    ASSERT_EQ(got.r.status, 0) << got.r.output;
    EXPECT_NE(line_with(got.r.output, "started rank"), "") << got.r.output;  // the launcher restarted it
    EXPECT_EQ(count(got.r.output, "recovered at step"), 1u) << got.r.output;
    EXPECT_EQ(count(got.r.output, "grew back at step"), 1u) << got.r.output;  // tp 2: with the rank that left
    EXPECT_EQ(got.losses, c.want.losses) << got.r.output;
    EXPECT_TRUE(got.model == c.want.model) << "the saved model differs";
    std::printf("%s\n", line_with(got.r.output, "grew back at step").c_str());
  }
}

TEST_F(ElasticTraining, RestartsUsedUpTheReplicaThatWaitsToComeBackLeavesAtTheEnd) {
  const Outcome want = train("native", "-n 4 --tp 2 --dp 2", "", kLonger);
  ASSERT_EQ(want.r.status, 0) << want.r.output;
  // The restarted rank 1 (back well before step 10) dies again; rank 0 of its replica waits in join() until the run
  // closes its joins.
  const Outcome got = train("native", "-n 4 --tp 2 --dp 2", "--elastic --max-restarts 1 --fail-rank 1@3,1@10", kLonger);
  ASSERT_EQ(got.r.status, 0) << got.r.output;
  EXPECT_EQ(count(got.r.output, "recovered at step"), 2u) << got.r.output;
  EXPECT_NE(line_with(got.r.output, "rank 0 leaves"), "") << got.r.output;
  EXPECT_EQ(got.losses, want.losses) << got.r.output;
}

TEST_F(ElasticTraining, EveryReplicaLostEndsTheRun) {
  // Ranks 0 and 2: one of each tensor-parallel pair; the survivors hold no whole replica.
  const Outcome got = train("native", "-n 4 --tp 2 --dp 2", "--elastic --fail-rank 0@2,2@2");
  EXPECT_NE(got.r.status, 0) << got.r.output;
  EXPECT_NE(line_with(got.r.output, "every data-parallel replica lost a rank"), "") << got.r.output;
}

TEST_F(ElasticTraining, RefusesWhatItCannotRun) {
  Outcome r = train("native", "-n 2 --dp 2", "--fail-rank 1@2");
  EXPECT_NE(r.r.status, 0);
  EXPECT_NE(line_with(r.r.output, "--fail-rank needs --elastic"), "") << r.r.output;
  r = train("native", "-n 2 --dp 2", "--elastic --fail-rank 1at2");
  EXPECT_NE(r.r.status, 0);
  EXPECT_NE(line_with(r.r.output, "give RANK@STEP"), "") << r.r.output;
  r = train("native", "-n 2 --dp 2", "--max-restarts 1");
  EXPECT_NE(r.r.status, 0);
  EXPECT_NE(line_with(r.r.output, "--max-restarts needs --elastic"), "") << r.r.output;
  r = train("native", "-n 2 --dp 2", "--elastic --zero 1");
  EXPECT_NE(r.r.status, 0);
  EXPECT_NE(line_with(r.r.output, "--elastic with --zero 1 is not supported"), "") << r.r.output;
}

}  // namespace
}  // namespace mpcomm
