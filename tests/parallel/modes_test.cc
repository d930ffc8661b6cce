// The trainer's modes beyond plain tensor, pipeline and data parallelism — each changes the traffic, not the
// model: ZeRO-1 (the distributed optimizer) gives the single-process losses on every split and backend, its
// traffic is exactly one reduce-scatter and one all-gather per bucket, its optimizer state is 1/dp, and its
// checkpoints are the usual ones.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "parallel/checkpoint.h"
#include "parallel/kernels.h"
#include "parallel/safetensors.h"
#include "parallel/train_helpers.h"

namespace mpcomm::parallel {
namespace {

using Call = RecordingCommunicator::Call;

struct Mode {
  std::string backend;
  int tp, pp, dp;
};

std::string name_of(const Mode& m) {
  return m.backend + "_tp" + std::to_string(m.tp) + "_pp" + std::to_string(m.pp) + "_dp" + std::to_string(m.dp);
}
void PrintTo(const Mode& m, std::ostream* os) { *os << name_of(m); }

// The single-process run with c's model and batch.
std::vector<double> reference_losses(TrainConfig c) {
  c.dims = {1, 1, 1};
  c.zero = 0;
  c.save.clear();
  if (c.batch == small_config().batch) return single_process_losses();
  return train_on("native", c);
}

// ---------------------------------------------------------------------------------------------------
// ZeRO-1

class Zero : public ::testing::TestWithParam<Mode> {};

TEST_P(Zero, LossesEqualSingleProcess) {
  const Mode m = GetParam();
  TrainConfig c = small_config();
  c.dims = {m.tp, m.pp, m.dp};
  c.zero = 1;
  c.bucket_mb = 3001.0 * 4 / 1048576.0;  // several buckets, padded to a multiple of dp
  if (m.dp == 3) c.batch = 12;           // 2 micro-batches of 2 sequences per replica
  auto losses = train_on(m.backend, c);
  EXPECT_LT(max_rel_diff(reference_losses(c), losses), 1e-5);
  EXPECT_LT(losses.back(), losses.front());
}

std::vector<Mode> zero_modes() {
  std::vector<Mode> out;
  for (const auto& b : testing::thread_backends())
    for (auto [tp, pp, dp] : {std::tuple{1, 1, 2}, {1, 1, 3}, {2, 1, 2}, {1, 2, 2}, {2, 2, 2}})
      if (b == "native" || tp * pp * dp <= 4) out.push_back({b, tp, pp, dp});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Splits, Zero, ::testing::ValuesIn(zero_modes()),
                         [](const auto& info) { return name_of(info.param); });

// 2 replicas, buckets of 16 Ki floats: per bucket one reduce-scatter of its half, then (after the loss's
// all-reduce) per bucket one all-gather of the half; the optimizer holds half the state.
TEST(ZeroTraffic, OneReduceScatterAndOneAllGatherPerBucket) {
  TrainConfig c = small_config();
  c.dims = {1, 1, 2};
  c.zero = 1;
  c.steps = 1;
  c.bucket_mb = 16.0 * 1024 * 4 / 1048576.0;
  ThreadWorld world("native", 2);
  std::vector<std::vector<Call>> dp(2);
  std::vector<size_t> totals(2);
  std::vector<double> state(2);
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(c, 2);
    ParallelGroups g = ParallelGroups::create(comm, c.dims);
    auto* rd = recorded_by(g.dp);
    Trainer t(run, g);
    t.step(0);
    dp[static_cast<size_t>(rank)] = rd->calls;
    totals[static_cast<size_t>(rank)] = t.layout().total();
    state[static_cast<size_t>(rank)] = t.stats().optimizer_bytes;
  });
  const size_t padded = (totals[0] + 1) / 2 * 2;
  std::vector<Call> want;
  std::vector<size_t> halves;
  for (size_t end = padded; end > 0; end = end > 16384 ? end - 16384 : 0)
    halves.push_back(std::min<size_t>(end, 16384) / 2);
  for (size_t h : halves) want.push_back({OpKind::reduce_scatter, h, ReduceOp::sum});
  want.push_back({OpKind::allreduce, 1, ReduceOp::sum});  // the loss
  for (size_t h : halves) want.push_back({OpKind::allgather, h, ReduceOp::sum});
  EXPECT_GE(halves.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(dp[static_cast<size_t>(r)], want) << "rank " << r;
    EXPECT_EQ(state[static_cast<size_t>(r)], 8.0 * padded / 2) << "m and v for half the parameters";
  }
}

// What AdamW keeps per rank is 1/dp of the replicated optimizer's, on every rank.
TEST(ZeroTraffic, OptimizerStateIsOneDpthOfTheReplicatedOne) {
  for (int zero : {0, 1}) {
    TrainConfig c = small_config();
    c.dims = {1, 1, 4};
    c.zero = zero;
    c.steps = 1;
    ThreadWorld world("native", 4);
    std::vector<TrainResult> results(4);
    world.run([&](int rank, Communicator& comm) { results[static_cast<size_t>(rank)] = train(c, comm); });
    for (const auto& r : results[0].ranks) {
      const double replicated = 8 * r.params;
      if (zero)
        EXPECT_NEAR(r.optimizer_bytes / replicated, 0.25, 1e-3);
      else
        EXPECT_EQ(r.optimizer_bytes, replicated);
    }
  }
}

// A ZeRO run saves the usual checkpoint (the whole model under Hugging Face names), equal to the replicated
// run's, and a ZeRO run on another split continues from it.
TEST(ZeroCheckpoint, SavesTheUsualModelAndResumesOnAnotherSplit) {
  const std::string dir = "/tmp/mpcomm-zero-test-" + std::to_string(::getpid());
  TrainConfig c = small_config();
  c.steps = 3;
  c.save = dir + "-one.safetensors";
  train_on("native", c);
  TrainConfig z = c;
  z.dims = {2, 1, 2};
  z.zero = 1;
  z.save = dir + "-zero.safetensors";
  train_on("native", z);
  SafetensorsFile one(c.save), zero(z.save);
  ASSERT_EQ(one.tensors().size(), zero.tensors().size());
  for (const auto& [n, info] : one.tensors()) {
    ASSERT_TRUE(zero.has(n)) << n;
    auto a = one.read_f32(n), b = zero.read_f32(n);
    ASSERT_EQ(a.size(), b.size()) << n;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::fabs(a[i])) << n << "[" << i << "]";
  }
  TrainConfig resume = small_config();
  resume.init_from = z.save;
  resume.dims = {1, 2, 2};
  resume.zero = 1;
  TrainConfig resume_one = resume;
  resume_one.dims = {1, 1, 1};
  resume_one.zero = 0;
  EXPECT_LT(max_rel_diff(train_on("native", resume_one), train_on("native", resume)), 1e-5);
  std::remove(c.save.c_str());
  std::remove(z.save.c_str());
}

}  // namespace
}  // namespace mpcomm::parallel
