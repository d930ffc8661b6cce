// mpcomm train --reproducible: with the micro-batch size, tp and pp fixed, the losses and the saved model are the
// same bits for dp 1, 2 and 4, on every thread backend and on one and two emulated hosts (mpi:
// MpiTraining.ReproducibleTrainingIsBitwiseTheSame).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "parallel/train_helpers.h"

namespace mpcomm::parallel {
namespace {

struct Outcome {
  std::vector<double> losses;
  std::string model;  // the saved checkpoint's bytes
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Micro-batches of 2 sequences: 8 sequences per step over dp ranks.
Outcome train_split(const std::string& backend, int tp, int pp, int dp, int hosts, bool reproducible) {
  TrainConfig c = small_config();
  c.dims = {tp, pp, dp};
  c.micro_batches = 8 / (2 * dp);
  c.reproducible = reproducible;
  c.save = "/tmp/mpcomm-repro-train-" + std::to_string(::getpid()) + ".safetensors";
  const int n = c.dims.world();
  std::vector<std::string> host_ids;
  for (int r = 0; hosts > 1 && r < n; ++r) host_ids.push_back("h" + std::to_string(r * hosts / n));
  ThreadWorld world(backend, n, Options{}, host_ids);
  Outcome out;
  world.run([&](int rank, Communicator& comm) {
    auto losses = train(c, comm).losses;
    if (rank == 0) out.losses = losses;
  });
  out.model = read_file(c.save);
  ::unlink(c.save.c_str());
  return out;
}

TEST(ReproducibleTraining, TheSameBitsForEveryDataParallelDegreeBackendAndHostLayout) {
  for (auto [tp, pp] : {std::pair{2, 1}, {1, 2}}) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " pp " + std::to_string(pp));
    const Outcome want = train_split("native", tp, pp, 1, 1, true);
    ASSERT_EQ(want.losses.size(), 4u);
    ASSERT_FALSE(want.model.empty());
    EXPECT_LT(want.losses.back(), want.losses.front());
    for (const auto& backend : testing::thread_backends())
      for (int dp : {1, 2, 4})
        for (int hosts : {1, 2}) {
          if (backend != "native" && dp == 1) continue;
          SCOPED_TRACE(backend + " dp " + std::to_string(dp) + " hosts " + std::to_string(hosts));
          const Outcome got = train_split(backend, tp, pp, dp, hosts, true);
          EXPECT_EQ(got.losses, want.losses);
          EXPECT_TRUE(got.model == want.model) << "the saved model differs";
        }
  }
}

TEST(ReproducibleTraining, WithoutItTheDegreesDiffer) {
  const Outcome one = train_split("native", 1, 1, 1, 1, false), four = train_split("native", 1, 1, 4, 1, false);
  EXPECT_FALSE(one.model == four.model) << "float sums in another order: some bit differs";
  EXPECT_LT(max_rel_diff(one.losses, four.losses), 1e-5);
}

TEST(ReproducibleTraining, RefusesWhatItDoesNotCoverYet) {
  TrainConfig c = small_config();
  c.reproducible = true;
  c.dims = {1, 1, 2};
  c.zero = 1;
  EXPECT_THROW(resolve(c, 2), InvalidArgument);
  c.zero = 0;
  c.comm_dtype = "bfloat16";
  EXPECT_THROW(resolve(c, 2), InvalidArgument);
}

}  // namespace
}  // namespace mpcomm::parallel
