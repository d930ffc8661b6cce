// The cost model's formulas against hand-computed times, its choice of algorithm, and the published profiles
// against the published nccl-tests figures their docs cite (docs/planner.md).
#include "tuning/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "mpcomm/error.h"
#include "tuning/profile.h"

namespace mpcomm::tuning {
namespace {

constexpr double us = 1e-6, GB = 1e9, MiB = 1 << 20;

BackendCosts costs(double overhead_us, double a_intra_us, double bw_intra_gbs, double a_inter_us, double bw_inter_gbs) {
  BackendCosts c;
  c.overhead_s = overhead_us * us;
  c.intra = {a_intra_us * us, bw_intra_gbs * GB};
  c.inter = {a_inter_us * us, bw_inter_gbs * GB};
  return c;
}

TEST(CostModel, RingAllreduceOnOneHostByHand) {
  // 4 ranks: 6 steps of 2 us, each rank sends 2·3/4 of 1 MB at 10 GB/s, + 5 us for the call.
  const auto p = predict(costs(5, 2, 10, 50, 1), "allreduce", 1e6, CommShape{4, 1}, "ring");
  EXPECT_NEAR(p.seconds, 5 * us + 6 * 2 * us + 1.5e6 / (10 * GB), 1e-12);
}

TEST(CostModel, AllreduceAcrossHostsByHand) {
  const auto c = costs(5, 2, 10, 50, 4);
  const double S = 8e6;
  // 8 ranks over 2 hosts. Ring: 14 steps, 2 of them crossing; 2·7/8·S through each rank and each host's network.
  EXPECT_NEAR(predict(c, "allreduce", S, CommShape{8, 2}, "ring").seconds,
              5 * us + 12 * 2 * us + 2 * 50 * us + std::max(1.75 * S / (10 * GB), 1.75 * S / (4 * GB)), 1e-12);
  // Hierarchical: reduce-scatter and allgather within hosts (3 steps, 3/4·S each), allreduce of S/4 per rank
  // among the 2 hosts (2 crossing steps, 2·1/2·S per host).
  EXPECT_NEAR(predict(c, "allreduce", S, CommShape{8, 2}, "hierarchical").seconds,
              5 * us + 2 * (3 * 2 * us + 0.75 * S / (10 * GB)) + 2 * 50 * us + S / (4 * GB), 1e-12);
  // Tree over 16 ranks on 4 hosts: a chain of 4 up and down (6 steps), log2(4) = 2 levels up and down (4 steps).
  EXPECT_NEAR(predict(c, "allreduce", S, CommShape{16, 4}, "tree").seconds,
              5 * us + 6 * 2 * us + 4 * 50 * us + std::max(2 * S / (10 * GB), 2 * S / (4 * GB)), 1e-12);
}

TEST(CostModel, TheOtherOpsByHand) {
  const auto c = costs(1, 2, 10, 20, 5);
  const double S = 4e6;
  EXPECT_NEAR(predict(c, "broadcast", S, CommShape{6, 2}, "ring").seconds,
              1 * us + 4 * 2 * us + 1 * 20 * us + std::max(S / (10 * GB), S / (5 * GB)), 1e-12);
  EXPECT_NEAR(predict(c, "broadcast", S, CommShape{8, 1}, "tree").seconds, 1 * us + 3 * (2 * us + S / (10 * GB)),
              1e-12);
  EXPECT_NEAR(predict(c, "allgather", S, CommShape{4, 1}).seconds, 1 * us + 3 * 2 * us + 0.75 * S / (10 * GB), 1e-12);
  EXPECT_NEAR(predict(c, "reduce_scatter", S, CommShape{4, 2}).seconds,
              1 * us + 2 * 2 * us + 20 * us + std::max(0.75 * S / (10 * GB), 0.75 * S / (5 * GB)), 1e-12);
  // alltoall over 2 hosts of 2: each host sends 2·2/4 of S out.
  EXPECT_NEAR(predict(c, "alltoall", S, CommShape{4, 2}).seconds,
              1 * us + 2 * 2 * us + 20 * us + std::max(0.75 * S / (10 * GB), S / (5 * GB)), 1e-12);
  EXPECT_NEAR(predict(c, "sendrecv", S, CommShape{2, 1}).seconds, 1 * us + 2 * us + S / (10 * GB), 1e-12);
  EXPECT_NEAR(predict(c, "sendrecv", S, CommShape{4, 2}).seconds, 1 * us + 20 * us + S / (5 * GB), 1e-12);
  EXPECT_EQ(predict(c, "allreduce", S, CommShape{1, 1}).seconds, 0) << "one rank moves nothing";
}

TEST(CostModel, TheFastestAlgorithmIsChosen) {
  const auto c = costs(5, 1, 200, 5, 200);
  // Many hosts, a small message: the tree's log2(h) crossing steps beat the ring's 2(n-1) steps.
  EXPECT_EQ(predict(c, "allreduce", 1024, CommShape{128, 16}).algorithm, "tree");
  // One host, a large message: the ring moves 2(n-1)/n·S, the tree 2S.
  EXPECT_EQ(predict(c, "allreduce", 1 << 30, CommShape{8, 1}).algorithm, "ring");
}

TEST(CostModel, RanksBeyondTheCoresTakeTurns) {
  const auto c = costs(5, 2, 10, 50, 4);
  const double one = predict(c, "allreduce", 1e6, CommShape{8, 2}).seconds;
  EXPECT_NEAR(predict(c, "allreduce", 1e6, CommShape{8, 2, 2}).seconds, 2 * one, 1e-12) << "4 ranks a host on 2 cores";
  EXPECT_NEAR(predict(c, "allreduce", 1e6, CommShape{8, 2, 2, true}).seconds, 4 * one, 1e-12)
      << "emulated hosts: all 8 ranks on the machine's 2 cores";
  EXPECT_NEAR(predict(c, "allreduce", 1e6, CommShape{8, 2, 16}).seconds, one, 1e-12) << "enough cores";
}

TEST(CostModel, AnOpWhoseRanksWaitedCostsItsColdCost) {
  auto c = costs(5, 2, 10, 50, 4);
  const double warm = 100e-6;
  const CommShape one{2, 1}, two{4, 2};
  EXPECT_EQ(after_wait(c, "allreduce", one, warm, 0.05), warm) << "no cold costs: back to back";
  c.cold["allreduce"] = {{1e-3, 0.2, 10e-6, false}, {10e-3, 0.6, 50e-6, false}};
  EXPECT_EQ(after_wait(c, "allreduce", one, warm, 0), warm);
  EXPECT_EQ(after_wait(c, "sendrecv", one, warm, 0.05), warm) << "an op without cold costs";
  EXPECT_NEAR(after_wait(c, "allreduce", one, warm, 0.5e-3), warm * 1.1 + 5e-6, 1e-15)
      << "below the smallest wait: linear from 0";
  EXPECT_NEAR(after_wait(c, "allreduce", one, warm, 1e-3), warm * 1.2 + 10e-6, 1e-15);
  EXPECT_NEAR(after_wait(c, "allreduce", one, warm, std::sqrt(10) * 1e-3), warm * 1.4 + 30e-6, 1e-15)
      << "halfway in log wait";
  EXPECT_NEAR(after_wait(c, "allreduce", one, warm, 1.0), warm * 1.6 + 50e-6, 1e-15) << "held beyond the largest";
  EXPECT_NEAR(after_wait(c, "allreduce", two, warm, 10e-3), warm * 1.6 + 50e-6, 1e-15)
      << "no costs across hosts: those within one";
  c.cold["allreduce"].push_back({10e-3, 0.1, 80e-6, true});
  EXPECT_NEAR(after_wait(c, "allreduce", two, warm, 10e-3), warm * 1.1 + 80e-6, 1e-15) << "across hosts";
  EXPECT_NEAR(after_wait(c, "allreduce", one, warm, 10e-3), warm * 1.6 + 50e-6, 1e-15);
}

TEST(CostModel, BadInputIsRefused) {
  const auto c = costs(5, 2, 10, 50, 4);
  EXPECT_THROW(predict(c, "allshuffle", 1, CommShape{2, 1}), InvalidArgument);
  EXPECT_THROW(predict(c, "allreduce", 1, CommShape{6, 4}), InvalidArgument);
  EXPECT_THROW(predict(c, "allreduce", 1, CommShape{0, 1}), InvalidArgument);
  EXPECT_THROW(predict(c, "allreduce", 1, CommShape{8, 1}, "hierarchical"), InvalidArgument);
  EXPECT_THROW(predict(c, "broadcast", 1, CommShape{8, 1}, "direct"), InvalidArgument);
}

// nccl-tests' bus bandwidth as the model predicts it.
double busbw(const std::string& profile, double bytes, int ranks, int hosts) {
  const Profile p = published_profile(profile);
  const auto t = predict(p.backend("nccl"), "allreduce", bytes, CommShape{ranks, hosts}).seconds;
  return bytes / t * bus_factor("allreduce", ranks) / GB;
}

// Within 15% of the published figures docs/planner.md cites (nccl-tests all_reduce_perf, ring or tree, not NVLS).
TEST(CostModel, PublishedProfilesAgreeWithPublishedFigures) {
  auto within = [](double predicted, double published) { return std::abs(predicted / published - 1) <= 0.15; };
  EXPECT_PRED2(within, busbw("dgx-a100-ib200", 8 * 1024 * MiB, 8, 1), 230);    // nccl-tests#149, #175
  EXPECT_PRED2(within, busbw("dgx-a100-ib200", 8 * 1024 * MiB, 32, 4), 192);   // nccl#812
  EXPECT_PRED2(within, busbw("dgx-h100-ndr400", 8 * 1024 * MiB, 8, 1), 370);   // nccl-tests#212, nccl#1455 (ring)
  EXPECT_PRED2(within, busbw("dgx-h100-ndr400", 8 * 1024 * MiB, 32, 4), 380);  // nccl-tests#309, #319
  EXPECT_PRED2(within, busbw("h200-ndr400", 512 * MiB, 1984, 248), 350);       // nccl-tests#283
  // Small messages: 16 H100 nodes, 8 B: 62-72 us (nccl#1469).
  const auto p = published_profile("dgx-h100-ndr400");
  EXPECT_PRED2(within, predict(p.backend("nccl"), "allreduce", 8, CommShape{128, 16}).seconds / us, 67);
}

}  // namespace
}  // namespace mpcomm::tuning
