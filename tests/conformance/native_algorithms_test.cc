// The native backend's algorithm choice, and the algorithms that the whole-matrix conformance suite
// reaches only at sizes or world shapes it does not run: flat (single-copy) broadcast and allgather on
// one host, the direct allreduce with more ranks than this machine has CPUs, and the sliced
// hierarchical allreduce on hosts with equal rank counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/process.h"
#include "harness/thread_world.h"
#include "native/algorithms/algorithms.h"
#include "native/engine.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

Topology topology_of(const std::vector<int>& host_of_rank) {
  Topology t;
  t.host_of_rank = host_of_rank;
  int hosts = 0;
  for (int h : host_of_rank) hosts = std::max(hosts, h + 1);
  for (int h = 0; h < hosts; ++h) t.host_names.push_back("h" + std::to_string(h));
  return t;
}

std::string chosen(OpKind kind, size_t bytes, const std::vector<int>& host_of_rank) {
  detail::Op op;
  op.kind = kind;
  op.dtype = DataType::uint8;
  op.count = bytes;
  op.root = 0;
  return native::select_algorithm(op, static_cast<int>(host_of_rank.size()), topology_of(host_of_rank)).name;
}

TEST(NativeSelect, FlatBroadcastAndAllgatherOnlyForLargeBuffersOnOneHost) {
  if (!native::single_copy_enabled()) GTEST_SKIP() << "single copy is turned off in this environment";
  const std::vector<int> one_host4 = {0, 0, 0, 0}, one_host2 = {0, 0}, own_hosts4 = {0, 1, 2, 3};
  for (OpKind k : {OpKind::broadcast, OpKind::allgather}) {
    // Broadcast from the single-copy size; allgather's direct frames go by single copy sooner.
    const size_t big = k == OpKind::broadcast ? native::single_copy_from()
                                              : std::min(native::kDirectFrom, native::single_copy_from());
    const size_t below = big - 1;
    const std::string small_algo = k == OpKind::broadcast ? "binomial" : "ring";
    EXPECT_EQ(chosen(k, big, one_host4), "flat") << to_string(k);
    EXPECT_EQ(chosen(k, below, one_host4), small_algo) << to_string(k);
    EXPECT_EQ(chosen(k, big, one_host2), small_algo) << to_string(k) << ": two ranks gain nothing";
    EXPECT_EQ(chosen(k, big, own_hosts4), small_algo) << to_string(k) << ": no single copy between hosts";
  }
}

// Ranks outnumbering CPUs change the small allreduce's algorithm only on one host: with one rank per
// host, each host counts its own CPUs, and a host with fewer would choose differently from the others.
TEST(NativeSelect, CrowdingIsJudgedOnOneHostOnly) {
  std::vector<int> own_hosts(64);
  for (int r = 0; r < 64; ++r) own_hosts[static_cast<size_t>(r)] = r;
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 10, own_hosts), "flat");
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 64) {
    EXPECT_EQ(chosen(OpKind::allreduce, 1 << 10, std::vector<int>(64, 0)), "recursive_doubling");
  }
}

// The direct allreduce: on one host, from 64 KiB, while every rank has a CPU of its own.
TEST(NativeSelect, DirectAllreduceOnlyOnOneUncrowdedHost) {
  if (!native::single_copy_enabled()) GTEST_SKIP() << "single copy is turned off in this environment";
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const std::vector<int> two = {0, 0};
  EXPECT_EQ(chosen(OpKind::allreduce, 64 << 10, two), "direct");
  EXPECT_EQ(chosen(OpKind::allreduce, 64 << 20, two), "direct");
  EXPECT_EQ(chosen(OpKind::allreduce, (64 << 10) - 1, two), "flat");
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, {0, 1}), "ring") << "no single copy between hosts";
  const std::vector<int> crowded(static_cast<size_t>(cpus + 1), 0);
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, crowded), "ring") << "ranks outnumber CPUs";
}

// Forced (MPCOMM_ALGO), with ranks as processes: 3 ranks read and write each other's buffers by
// process_vm_readv/writev, every dtype, reduce op, count (also fewer elements than ranks) and
// placement of the conformance matrix. On 2 emulated hosts no rank can reach the other host's memory:
// every rank must see that and run the ring instead, all of them, or the call would hang.
TEST(NativeAlgorithms, DirectAllreduceForcedAcrossProcessesAndItsFallback) {
  for (const char* shape : {"-n 3 --hosts 1", "-n 4 --hosts 2"}) {
    auto r = testing::run_command(std::string("MPCOMM_ALGO=allreduce=direct ") + MPCOMM_CLI + " launch " + shape +
                                  " --backend native --timeout 120 -- " + MPCOMM_CLI + " selftest --conformance --only-ops allreduce");
    EXPECT_EQ(r.status, 0) << shape << "\n" << r.output;
    EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << shape << "\n" << r.output;
    EXPECT_EQ(r.output.find(" 0 cases"), std::string::npos) << shape << "\n" << r.output;
  }
}

TEST(NativeSelect, SlicedHierarchicalAllreduceOnlyForLargeBuffersOnEvenHosts) {
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, {0, 0, 1, 1}), "hierarchical_sliced");
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, {0, 1, 2, 0, 1, 2}), "hierarchical_sliced");
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, {0, 1, 0, 1, 0}), "hierarchical") << "uneven hosts";
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 10, {0, 0, 1, 1}), "hierarchical") << "small: fewest messages";
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, {0, 1, 2, 3}), "ring") << "one rank per host: nothing to group";
}

void expect_all_right(testing::ThreadWorld& world, const check::Case& c) {
  std::vector<check::Result> res(static_cast<size_t>(world.size()));
  world.run([&](int r, Communicator& comm) { res[static_cast<size_t>(r)] = check::run_case(comm, c); });
  for (int r = 0; r < world.size(); ++r)
    ASSERT_EQ(res[r].wrong, 0u) << check::describe(c) << " rank " << r << ": " << res[r].first_wrong;
}

// 4 ranks on one host, buffers just over the single-copy size: every root of the flat broadcast reads
// straight from that root's buffer; the flat allgather's ranks read each other's blocks, sent as
// direct frames (single copy from kDirectFrom).
TEST(NativeAlgorithms, FlatBroadcastEveryRootAndFlatAllgather) {
  const int n = 4;
  auto& world = testing::shared_world("native", n);
  const size_t count = native::single_copy_from() / sizeof(int32_t) + 3;
  for (int root = 0; root < n; ++root) {
    check::Case c;
    c.op = OpKind::broadcast;
    c.dtype = DataType::int32;
    c.count = count;
    c.root = root;
    c.in_place = root % 2 == 0;
    expect_all_right(world, c);
  }
  for (bool in_place : {false, true}) {
    check::Case c;
    c.op = OpKind::allgather;
    c.dtype = DataType::int32;
    c.count = std::min(native::kDirectFrom, native::single_copy_from()) / sizeof(int32_t) + 3;
    c.in_place = in_place;
    expect_all_right(world, c);
  }
}

// Even hosts, interleaved: 2 hosts × 2 ranks (recursive doubling between two slices' owners) and
// 3 hosts × 2 ranks (three owners per slice: one folds in first). Counts that do not divide evenly.
TEST(NativeHierarchical, SlicedAllreduceOnEvenInterleavedHosts) {
  Options o;
  o.timeout = Millis(60000);
  for (const std::vector<std::string>& hosts : {std::vector<std::string>{"A", "B", "A", "B"},
                                                std::vector<std::string>{"A", "B", "C", "A", "B", "C"}}) {
    testing::ThreadWorld world("native", static_cast<int>(hosts.size()), o, hosts);
    for (size_t count : {size_t{300001}, size_t{1} << 18})
      for (ReduceOp redop : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        check::Case c;
        c.op = OpKind::allreduce;
        c.dtype = redop == ReduceOp::avg ? DataType::float32 : DataType::int32;
        c.redop = redop;
        c.count = count;
        c.in_place = redop == ReduceOp::max;
        expect_all_right(world, c);
      }
  }
}

}  // namespace
}  // namespace mpcomm
