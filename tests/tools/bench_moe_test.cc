// mpcomm bench's mixture-of-experts rows: the router's counts agree between every pair of ranks, add up to
// the tokens, follow the skew asked for; and the alltoallv / allgatherv rows run checked on every backend.
#include "../../tools/mpcomm/bench_moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "../../tools/mpcomm/bench.h"
#include "harness/process.h"

namespace mpcomm {
namespace {

TEST(MoeCounts, EveryPairAgreesAndTheTokensAddUp) {
  for (int n : {1, 2, 5, 8})
    for (double skew : {0.0, 1.0, 2.5}) {
      SCOPED_TRACE("n " + std::to_string(n) + " skew " + std::to_string(skew));
      std::vector<bench::MoeCounts> a2a, agv;
      for (int r = 0; r < n; ++r) {
        a2a.push_back(bench::moe_counts("alltoallv", r, n, 100, 16, skew));
        agv.push_back(bench::moe_counts("allgatherv", r, n, 100, 16, skew));
      }
      for (int r = 0; r < n; ++r) {
        const auto& m = a2a[static_cast<size_t>(r)];
        EXPECT_EQ(m.send_total, 100u * 16) << "every token of rank " << r << " goes somewhere";
        for (int p = 0; p < n; ++p) {
          EXPECT_EQ(m.send_counts[static_cast<size_t>(p)],
                    a2a[static_cast<size_t>(p)].recv_counts[static_cast<size_t>(r)]);
          EXPECT_EQ(m.send_counts[static_cast<size_t>(p)] % 16, 0u) << "whole tokens";
        }
        for (size_t p = 1; p < static_cast<size_t>(n); ++p)
          EXPECT_EQ(m.recv_displs[p], m.recv_displs[p - 1] + m.recv_counts[p - 1]);
        // allgatherv: the same counts everywhere, a rank sends its own block, n × 100 tokens in all
        EXPECT_EQ(agv[static_cast<size_t>(r)].recv_counts, agv[0].recv_counts);
        EXPECT_EQ(agv[static_cast<size_t>(r)].send_total, agv[0].recv_counts[static_cast<size_t>(r)]);
        EXPECT_EQ(agv[static_cast<size_t>(r)].recv_total, static_cast<size_t>(n) * 100 * 16);
      }
    }
}

TEST(MoeCounts, TheSkewSetsHowBusyTheBusiestRankIs) {
  auto busiest = [](double skew) { return bench::moe_counts("alltoallv", 0, 8, 4000, 1, skew).max_over_mean; };
  EXPECT_LT(busiest(0), 1.1) << "even: every rank near the mean";
  EXPECT_GT(busiest(1), 2.0) << "Zipf over 8 ranks: the first takes 1/H(8) = 37% of 8 ranks' tokens";
  EXPECT_GT(busiest(3), busiest(1));
  EXPECT_LT(busiest(3), 8.0 + 1e-9) << "at most every token";
}

// The rows end to end: checked on every backend, sizes as whole tokens, the skew reported.
TEST(MoeRows, AlltoallvAndAllgathervOnEveryBackend) {
  char tmpl[] = "/tmp/mpcomm-moe-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl), json = dir + "/rows.jsonl";
  auto r =
      testing::run_command(std::string(MPCOMM_CLI) +
                           " bench --ranks 3 --backends all --ops alltoallv,allgatherv -b 1K -e 64K -f 8 -n 2 -w 1 "
                           "--moe-hidden 64 --imbalance 1.5 --json " +
                           json);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream f(json);
  int rows = 0;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    ++rows;
    EXPECT_EQ(j.at("wrong"), 0) << line;
    EXPECT_EQ(j.at("bytes").get<size_t>() % (64 * 4), 0u) << "whole tokens: " << line;
    EXPECT_GT(j.at("imbalance").get<double>(), 1.0) << line;
    EXPECT_FALSE(j.at("inplace").get<bool>());
  }
  const auto backends = available_backends();
  const int usable =
      static_cast<int>(std::count_if(backends.begin(), backends.end(), [](auto& b) { return b != "nccl"; }));
  EXPECT_EQ(rows, usable * 2 * 3) << "2 ops × sizes 1K, 8K, 64K per backend";
  testing::run_command("rm -rf " + dir);
}

}  // namespace
}  // namespace mpcomm
