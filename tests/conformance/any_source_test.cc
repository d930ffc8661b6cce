// Receives from any source on every thread backend (testing/any_source_check.h), over shared memory and
// over TCP between emulated hosts; and on native, what a receive from any source says when it cannot end
// well: a message of the wrong size names its sender, a wait that times out names "any rank", a world of
// one rank is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "harness/thread_world.h"
#include "testing/any_source_check.h"

namespace mpcomm {
namespace {

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// backend, ranks, emulated hosts (0: all on one).
using Param = std::tuple<std::string, int, int>;

class AnySource : public ::testing::TestWithParam<Param> {};

TEST_P(AnySource, EveryMessageWholeFromItsSenderInTheOrderTheBackendPromises) {
  const auto& [backend, n, hosts] = GetParam();
  std::vector<std::string> host_of;
  for (int r = 0; hosts > 0 && r < n; ++r) host_of.push_back("h" + std::to_string(r * hosts / n));
  testing::ThreadWorld world(backend, n, {}, host_of);
  std::vector<std::string> errs(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    errs[static_cast<size_t>(r)] = check::any_source_check(comm, backend == "native");
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errs[static_cast<size_t>(r)], "") << "rank " << r;
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const auto& b : testing::thread_backends())
    for (int n : {2, 3, 4}) out.emplace_back(b, n, 0);
  out.emplace_back("native", 4, 2);  // TCP between the hosts, shared memory within
  out.emplace_back("native", 3, 3);  // TCP only
  return out;
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [b, n, hosts] = info.param;
  return b + "_" + std::to_string(n) + "ranks" + (hosts > 0 ? "_" + std::to_string(hosts) + "hosts" : "");
}

INSTANTIATE_TEST_SUITE_P(Backends, AnySource, ::testing::ValuesIn(params()), name);

TEST(AnySourceFailures, AMessageOfTheWrongSizeNamesItsSender) {
  testing::ThreadWorld world("native", 3);
  std::string caught;
  world.run_collect([&](int r, Communicator& comm) {
    int32_t three[3] = {1, 2, 3}, four[4] = {};
    if (r == 2) comm.send(three, 3, DataType::int32, 0, 4);
    if (r != 0) return;
    try {
      comm.recv(four, 4, DataType::int32, kAnySource, 4);
    } catch (const Mismatch& e) {
      caught = e.what();
    }
  });
  EXPECT_TRUE(contains(caught, "recv #0 (count 4, int32, from any rank, tag 4) on rank 0 of 3 [native]")) << caught;
  EXPECT_TRUE(contains(caught, "rank 2 sent 12 bytes with tag 4 but the receive expects 16") ||
              contains(caught, "expected 16 bytes from rank 2"))
      << caught;
}

TEST(AnySourceFailures, ATimeoutNamesAnyRankAndTheTagAfterANegativeTagWasRefused) {
  Options opts;
  opts.timeout = Millis(300);
  testing::ThreadWorld world("native", 2, opts);
  std::string caught;
  const auto t0 = std::chrono::steady_clock::now();
  world.run_collect([&](int r, Communicator& comm) {
    int32_t x = 0;
    if (r != 0) return;
    try {
      comm.irecv(&x, 1, DataType::int32, kAnySource, -2);
      ADD_FAILURE() << "a negative tag was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "tag -2 is negative")) << e.what();
    }
    try {
      comm.recv(&x, 1, DataType::int32, kAnySource, 6);
    } catch (const Timeout& e) {
      caught = e.what();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(contains(caught, "waiting for any rank (tag 6, recv 0/4 bytes)")) << caught;
}

TEST(AnySourceFailures, OneRankHasNobodyToHearFrom) {
  testing::ThreadWorld world("native", 1);
  world.run([&](int, Communicator& comm) {
    int32_t x = 0;
    try {
      comm.recv(&x, 1, DataType::int32, kAnySource, 0);
      ADD_FAILURE() << "a receive from any source on one rank was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "a receive from any source needs another rank to send")) << e.what();
    }
  });
}

}  // namespace
}  // namespace mpcomm
