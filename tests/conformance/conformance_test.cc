// The conformance suite: every op × dtype × reduce op × count × in/out of place × world size, on every
// backend, ranks as threads. A new backend is tested by adding its name to kBackends.
//
// Counts are {0, 1, 7, 1000, 2^20+3}. For the ops whose count is per rank block (allgather,
// reduce_scatter, gather, scatter, alltoall) the block is ceil(count / ranks), so the whole buffer
// stays near `count` elements and the suite stays fast.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <thread>

#include "harness/thread_world.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

const std::vector<std::string> kBackends = {"native"};
const std::vector<int> kWorldSizes = {1, 2, 3, 4, 5, 8};
const std::vector<size_t> kCounts = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

bool per_rank_blocks(OpKind k) {
  return k == OpKind::allgather || k == OpKind::reduce_scatter || k == OpKind::gather || k == OpKind::scatter ||
         k == OpKind::alltoall;
}
bool reduces(OpKind k) { return k == OpKind::allreduce || k == OpKind::reduce || k == OpKind::reduce_scatter; }
bool rooted(OpKind k) { return k == OpKind::broadcast || k == OpKind::reduce || k == OpKind::gather || k == OpKind::scatter; }

using Param = std::tuple<std::string, int, OpKind>;

class Conformance : public ::testing::TestWithParam<Param> {};

TEST_P(Conformance, EveryDtypeRedopCountAndPlacement) {
  const auto& [backend, n, op] = GetParam();
  auto& world = testing::shared_world(backend, n);
  std::vector<check::Case> cases;
  for (int d = 0; d < kNumDataTypes; ++d)
    for (int ro = 0; ro < (reduces(op) ? kNumReduceOps : 1); ++ro)
      for (size_t count : kCounts)
        for (bool in_place : {false, true}) {
          if (op == OpKind::broadcast && in_place) continue;  // broadcast has one buffer
          check::Case c;
          c.op = op;
          c.dtype = static_cast<DataType>(d);
          c.redop = static_cast<ReduceOp>(ro);
          c.count = per_rank_blocks(op) ? (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n) : count;
          c.root = rooted(op) ? static_cast<int>((count + static_cast<size_t>(d)) % static_cast<size_t>(n)) : 0;
          c.in_place = in_place;
          cases.push_back(c);
        }
  for (const auto& c : cases) {
    std::vector<check::Result> results(static_cast<size_t>(n));
    world.run([&](int r, Communicator& comm) { results[static_cast<size_t>(r)] = check::run_case(comm, c); });
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(results[r].wrong, 0u) << check::describe(c) << " on " << n << " ranks: rank " << r << " has "
                                      << results[r].wrong << " wrong elements, first " << results[r].first_wrong;
  }
}

std::vector<Param> all_params() {
  std::vector<Param> ps;
  for (const auto& b : kBackends)
    for (int n : kWorldSizes)
      for (OpKind op : check::checked_ops()) ps.emplace_back(b, n, op);
  return ps;
}

INSTANTIATE_TEST_SUITE_P(All, Conformance, ::testing::ValuesIn(all_params()), [](const auto& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks_" +
         std::string(to_string(std::get<2>(info.param)));
});

// ---- barrier, point to point, split ----------------------------------------------------------------

class Basics : public ::testing::TestWithParam<std::string> {};

TEST_P(Basics, BarrierHoldsEveryRankUntilAllArrive) {
  for (int n : {1, 2, 3, 5, 8}) {
    auto& world = testing::shared_world(GetParam(), n);
    std::atomic<int> arrived{0};
    std::vector<int> seen(static_cast<size_t>(n), -1);
    world.run([&](int r, Communicator& comm) {
      if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the late rank
      arrived.fetch_add(1);
      comm.barrier();
      seen[static_cast<size_t>(r)] = arrived.load();
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], n) << "rank " << r << " left the barrier early, n=" << n;
  }
}

TEST_P(Basics, SendRecvRingWithTagsOutOfOrderAndLargeMessages) {
  const int n = 4;
  auto& world = testing::shared_world(GetParam(), n);
  const size_t big = (size_t{1} << 21) + 5;  // larger than any shared-memory ring: must stream
  world.run([&](int r, Communicator& comm) {
    int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<int32_t> a(big), b(3), got_a(big), got_b(3);
    for (size_t i = 0; i < big; ++i) a[i] = static_cast<int32_t>(r * 1000003 + i);
    for (int i = 0; i < 3; ++i) b[i] = -r - i;
    // Both directions at once, receives posted in the opposite tag order: must neither deadlock nor mix.
    Request s1 = comm.isend(a.data(), big, DataType::int32, right, 7);
    Request s2 = comm.isend(b.data(), 3, DataType::int32, right, 9);
    Request r2 = comm.irecv(got_b.data(), 3, DataType::int32, left, 9);
    Request r1 = comm.irecv(got_a.data(), big, DataType::int32, left, 7);
    r1.wait();
    r2.wait();
    s1.wait();
    s2.wait();
    for (size_t i = 0; i < big; ++i)
      if (got_a[i] != static_cast<int32_t>(left * 1000003 + i)) throw std::runtime_error("big payload wrong at " + std::to_string(i));
    for (int i = 0; i < 3; ++i)
      if (got_b[i] != -left - i) throw std::runtime_error("small payload wrong");
    // Blocking send to each other at once with large messages: progress while sending avoids deadlock.
    comm.send(a.data(), big, DataType::int32, right, 1);
    comm.recv(got_a.data(), big, DataType::int32, left, 1);
    if (got_a[big - 1] != static_cast<int32_t>(left * 1000003 + big - 1)) throw std::runtime_error("blocking pair wrong");
    // Empty messages are messages too.
    comm.send(nullptr, 0, DataType::float32, right, 3);
    comm.recv(nullptr, 0, DataType::float32, left, 3);
  });
}

TEST_P(Basics, SplitIntoTwoByTwoGrid) {
  const int n = 4;
  auto& world = testing::shared_world(GetParam(), n);
  std::vector<std::array<int, 6>> got(n);
  world.run([&](int r, Communicator& comm) {
    int row = r / 2, col = r % 2;
    auto row_comm = comm.split(row, -col);  // reversed key: rank order within a row is reversed
    auto col_comm = comm.split(col, r);
    int32_t v = 1 << r, row_sum = 0, col_sum = 0;
    row_comm->allreduce(&v, &row_sum, 1, DataType::int32, ReduceOp::sum);
    col_comm->allreduce(&v, &col_sum, 1, DataType::int32, ReduceOp::sum);
    auto none = comm.split(-1, 0);
    got[r] = {row_comm->rank(), row_comm->size(), col_comm->rank(), col_comm->size(), row_sum, col_sum};
    if (none != nullptr) throw std::runtime_error("negative color must give no communicator");
    // Sub-communicators work independently of each other and of the parent.
    comm.barrier();
  });
  for (int r = 0; r < n; ++r) {
    int row = r / 2, col = r % 2;
    EXPECT_EQ(got[r][0], 1 - col) << "rank " << r;
    EXPECT_EQ(got[r][1], 2);
    EXPECT_EQ(got[r][2], row) << "rank " << r;
    EXPECT_EQ(got[r][3], 2);
    EXPECT_EQ(got[r][4], (1 << (2 * row)) + (1 << (2 * row + 1))) << "rank " << r;
    EXPECT_EQ(got[r][5], (1 << col) + (1 << (col + 2))) << "rank " << r;
  }
}

TEST_P(Basics, EmulatedHostsUseTcpBetweenAndShmWithin) {
  // 4 ranks on 2 emulated hosts: every op still correct across the TCP links.
  Options o;
  o.timeout = Millis(60000);
  testing::ThreadWorld world(GetParam(), 4, o, {"hostA", "hostA", "hostB", "hostB"});
  EXPECT_EQ(world.comm(0).topology().num_hosts(), 2);
  EXPECT_EQ(world.comm(3).topology().host, 1);
  EXPECT_EQ(world.comm(3).topology().local_rank, 1);
  EXPECT_EQ(world.comm(2).topology().local_size, 2);
  for (OpKind op : check::checked_ops())
    for (size_t count : {size_t{0}, size_t{5}, size_t{300001}}) {
      check::Case c;
      c.op = op;
      c.dtype = DataType::bfloat16;
      c.redop = ReduceOp::sum;
      c.count = count;
      c.root = 2;
      std::vector<check::Result> res(4);
      world.run([&](int r, Communicator& comm) { res[r] = check::run_case(comm, c); });
      for (int r = 0; r < 4; ++r) ASSERT_EQ(res[r].wrong, 0u) << check::describe(c) << " rank " << r << ": " << res[r].first_wrong;
    }
}

INSTANTIATE_TEST_SUITE_P(All, Basics, ::testing::ValuesIn(kBackends));

}  // namespace
}  // namespace mpcomm
