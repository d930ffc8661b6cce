// The GPT trainer over the mpi backend (ranks under mpirun, through `mpcomm train --backend mpi`): every
// split of the model, and the modes that change only the traffic (ZeRO-1, sequence parallelism), gives the losses of
// the single-process run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "harness/process.h"
#include "mpcomm/communicator.h"

namespace mpcomm {
namespace {

using testing::run_command;

std::vector<double> losses_of(const std::string& args, const std::string& log) {
  auto r = run_command(std::string(MPCOMM_CLI) + " train --layers 2 --hidden 32 --heads 4 --seq 16 --batch 8 "
                       "--micro-batches 2 --steps 4 --lr 0.003 --seed 7 --loss-log " + log + " " + args + " 2>&1");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
  std::vector<double> out;
  std::ifstream f(log);
  std::string line;
  while (std::getline(f, line)) out.push_back(std::stod(line.substr(line.find("\"loss\":") + 7)));
  ::unlink(log.c_str());
  return out;
}

TEST(MpiTraining, EverySplitEqualsTheSingleProcessRun) {
  bool have = false;
  for (const auto& b : available_backends()) have = have || b == "mpi";
  if (!have) GTEST_SKIP() << "this build has no mpi backend";
  const std::string log = "/tmp/mpcomm-mpi-train-" + std::to_string(::getpid()) + ".jsonl";
  auto ref = losses_of("-n 1", log);
  ASSERT_EQ(ref.size(), 4u);
  for (const char* split :
       {"--tp 2 --pp 1 --dp 1", "--tp 1 --pp 2 --dp 1", "--tp 1 --pp 1 --dp 2", "--tp 2 --pp 2 --dp 1",
        "--tp 2 --pp 1 --dp 2", "--tp 1 --pp 2 --dp 2", "--tp 1 --pp 1 --dp 2 --zero 1",
        "--tp 2 --pp 1 --dp 2 --zero 1", "--tp 2 --pp 2 --dp 1 --sequence-parallel",
        "--tp 2 --pp 1 --dp 2 --sequence-parallel --zero 1"}) {
    auto got = losses_of(std::string("--backend mpi ") + split, log);  // ranks: tp*pp*dp
    ASSERT_EQ(got.size(), ref.size()) << split;
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_LT(std::fabs(got[k] - ref[k]) / ref[k], 1e-5) << split << " step " << k;
  }
}

// Mixture of experts: the tokens travel to their experts by the mpi backend's alltoallv.
TEST(MpiTraining, MixtureOfExpertsEqualsTheSingleProcessRun) {
  bool have = false;
  for (const auto& b : available_backends()) have = have || b == "mpi";
  if (!have) GTEST_SKIP() << "this build has no mpi backend";
  const std::string log = "/tmp/mpcomm-mpi-train-moe-" + std::to_string(::getpid()) + ".jsonl";
  const std::string moe = " --experts 4 --top-k 2 --aux-loss-coef 0.1 ";
  auto ref = losses_of("-n 1" + moe, log);
  ASSERT_EQ(ref.size(), 4u);
  for (const char* split : {"--dp 2 --expert-parallel 2", "--tp 2 --dp 2 --expert-parallel 2 --sequence-parallel"}) {
    auto got = losses_of(std::string("--backend mpi ") + split + moe, log);
    ASSERT_EQ(got.size(), ref.size()) << split;
    for (size_t k = 0; k < ref.size(); ++k) EXPECT_LT(std::fabs(got[k] - ref[k]) / ref[k], 1e-5) << split << " step " << k;
  }
}

// --reproducible: the loss log and the saved model of mpi at dp 2 are native's at dp 1 and 4, byte for byte.
TEST(MpiTraining, ReproducibleTrainingIsBitwiseTheSame) {
  bool have = false;
  for (const auto& b : available_backends()) have = have || b == "mpi";
  if (!have) GTEST_SKIP() << "this build has no mpi backend";
  const std::string base = "/tmp/mpcomm-mpi-repro-" + std::to_string(::getpid());
  auto run = [&](const std::string& split, const std::string& name) {
    auto r = run_command(std::string(MPCOMM_CLI) +
                         " train --layers 2 --hidden 32 --heads 4 --seq 16 --batch 8 --steps 4 "
                         "--lr 0.003 --seed 7 --tp 2 --reproducible " +
                         split + " --loss-log " + base + name + ".jsonl --save " + base + name + ".safetensors 2>&1");
    EXPECT_EQ(r.status, 0) << split << "\n" << r.output;
  };
  run("--dp 1 --micro-batches 4", "one");
  run("--dp 4 --micro-batches 1", "four");
  run("--backend mpi --dp 2 --micro-batches 2", "mpi");
  for (const char* ext : {".jsonl", ".safetensors"}) {
    EXPECT_EQ(run_command("cmp " + base + "one" + ext + " " + base + "mpi" + ext).status, 0) << ext;
    EXPECT_EQ(run_command("cmp " + base + "one" + ext + " " + base + "four" + ext).status, 0) << ext;
  }
  run_command("rm -f " + base + "*");
}

// bfloat16 on the wire: the rounding and the float32 sums are the trainer's own (parallel/wire.h), so mpi gives
// native's losses.
TEST(MpiTraining, BFloat16OnTheWireEqualsNatives) {
  bool have = false;
  for (const auto& b : available_backends()) have = have || b == "mpi";
  if (!have) GTEST_SKIP() << "this build has no mpi backend";
  const std::string log = "/tmp/mpcomm-mpi-train-bf16-" + std::to_string(::getpid()) + ".jsonl";
  const std::string split = " --tp 2 --pp 1 --dp 2 --comm-dtype bfloat16";
  auto native = losses_of("--backend native" + split, log);
  auto mpi = losses_of("--backend mpi" + split, log);
  ASSERT_EQ(native.size(), 4u);
  ASSERT_EQ(mpi.size(), native.size());
  for (size_t k = 0; k < native.size(); ++k) EXPECT_LT(std::fabs(mpi[k] - native[k]) / native[k], 1e-5) << "step " << k;
}

}  // namespace
}  // namespace mpcomm
