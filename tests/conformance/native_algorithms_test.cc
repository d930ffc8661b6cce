// The native backend's algorithm choice, and the algorithms that the whole-matrix conformance suite
// reaches only at sizes or world shapes it does not run: flat (single-copy) broadcast and allgather on
// one host, the direct allgather's and reduce-scatter's fallbacks across hosts, the direct allreduce with more ranks than this machine has CPUs, and the sliced
// hierarchical allreduce on hosts with equal rank counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
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

TEST(NativeSelect, DirectBroadcastAllgatherAndReduceScatterOnlyForLargeBuffersOnOneHost) {
  if (!native::single_copy_enabled()) GTEST_SKIP() << "single copy is turned off in this environment";
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 2) GTEST_SKIP() << "one CPU: every host of 2 ranks is crowded";
  const std::vector<int> one_host2 = {0, 0}, own_hosts4 = {0, 1, 2, 3};
  // Every rank with a CPU of its own (as many ranks as CPUs).
  const std::vector<int> one_host(static_cast<size_t>(std::min<long>(cpus, 64)), 0);
  // Broadcast: from 64 KiB.
  EXPECT_EQ(chosen(OpKind::broadcast, 64 << 10, one_host), "direct");
  EXPECT_EQ(chosen(OpKind::broadcast, (64 << 10) - 1, one_host), "binomial");
  EXPECT_EQ(chosen(OpKind::broadcast, 64 << 10, one_host2), "direct");
  EXPECT_EQ(chosen(OpKind::broadcast, (64 << 10) - 1, one_host2), "binomial");
  EXPECT_EQ(chosen(OpKind::broadcast, 64 << 20, own_hosts4), "binomial") << "no single copy between hosts";
  // Allgather: from 32 KiB blocks.
  const size_t big = native::kDirectBlocksFrom;
  EXPECT_EQ(chosen(OpKind::allgather, big, one_host), "direct");
  EXPECT_EQ(chosen(OpKind::allgather, big - 1, one_host), "ring");
  EXPECT_EQ(chosen(OpKind::allgather, big, one_host2), "direct");
  EXPECT_EQ(chosen(OpKind::allgather, big - 1, one_host2), "ring");
  EXPECT_EQ(chosen(OpKind::allgather, 64 << 20, own_hosts4), "ring") << "no single copy between hosts";
  // Reduce-scatter: the same, also when ranks outnumber CPUs.
  const std::vector<int> crowded(static_cast<size_t>(cpus + 1), 0);
  EXPECT_EQ(chosen(OpKind::reduce_scatter, big, one_host), "direct");
  EXPECT_EQ(chosen(OpKind::reduce_scatter, big - 1, one_host), "ring");
  EXPECT_EQ(chosen(OpKind::reduce_scatter, big, crowded), "direct");
  EXPECT_EQ(chosen(OpKind::reduce_scatter, big, one_host2), "direct");
  EXPECT_EQ(chosen(OpKind::reduce_scatter, 64 << 20, own_hosts4), "ring") << "no single copy between hosts";
}

// Ranks outnumbering the CPUs of their one host: the staged broadcast from kStagedBroadcastFrom (below:
// binomial) and the staged allgather from kStagedAllgatherFrom in all (below: the ring), single copy or
// not; across hosts neither.
TEST(NativeSelect, StagedBroadcastAndAllgatherOnACrowdedHost) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 63) GTEST_SKIP() << "too many CPUs to crowd";
  const size_t n = static_cast<size_t>(cpus + 1);
  const std::vector<int> crowded(n, 0);
  EXPECT_EQ(chosen(OpKind::broadcast, native::kStagedBroadcastFrom, crowded), "staged");
  EXPECT_EQ(chosen(OpKind::broadcast, 64 << 20, crowded), "staged");
  EXPECT_EQ(chosen(OpKind::broadcast, native::kStagedBroadcastFrom - 1, crowded), "binomial");
  const size_t block = (native::kStagedAllgatherFrom + n - 1) / n;  // the smallest block that reaches it in all
  EXPECT_EQ(chosen(OpKind::allgather, block, crowded), "staged");
  EXPECT_EQ(chosen(OpKind::allgather, 16 << 20, crowded), "staged");
  EXPECT_EQ(chosen(OpKind::allgather, block - 1, crowded), "ring");
  std::vector<int> two_hosts(2 * n);
  for (size_t r = 0; r < two_hosts.size(); ++r) two_hosts[r] = static_cast<int>(r % 2);
  EXPECT_NE(chosen(OpKind::broadcast, 64 << 20, two_hosts), "staged") << "two hosts";
  EXPECT_NE(chosen(OpKind::allgather, 16 << 20, two_hosts), "staged") << "two hosts";
  if (cpus >= 2) {
    EXPECT_NE(chosen(OpKind::broadcast, 64 << 20, {0, 0}), "staged") << "a CPU per rank";
    EXPECT_NE(chosen(OpKind::allgather, 16 << 20, {0, 0}), "staged") << "a CPU per rank";
  }
}

// Ranks outnumbering CPUs change the small allreduce's algorithm only on one host: with one rank per
// host, each host counts its own CPUs, and a host with fewer would choose differently from the others.
TEST(NativeSelect, CrowdingIsJudgedOnOneHostOnly) {
  std::vector<int> own_hosts(64);
  for (int r = 0; r < 64; ++r) own_hosts[static_cast<size_t>(r)] = r;
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 10, own_hosts), "flat");
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 64) {
    EXPECT_EQ(chosen(OpKind::allreduce, 1 << 10, std::vector<int>(64, 0)), "arrival");
  }
}

// The direct allreduce: on one host, from 64 KiB, while every rank has a CPU of its own (2 ranks: up to
// the two-copy allreduce's size).
TEST(NativeSelect, DirectAllreduceOnlyOnOneUncrowdedHost) {
  if (!native::single_copy_enabled()) GTEST_SKIP() << "single copy is turned off in this environment";
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const std::vector<int> two = {0, 0};
  EXPECT_EQ(chosen(OpKind::allreduce, 64 << 10, two), "direct");
  EXPECT_EQ(chosen(OpKind::allreduce, native::kTwoCopyFrom - 1, two), "direct");
  EXPECT_EQ(chosen(OpKind::allreduce, 64 << 20, {0, 0, 0}), cpus >= 3 ? "direct" : "ring");
  EXPECT_EQ(chosen(OpKind::allreduce, (64 << 10) - 1, two), "flat");
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, {0, 1}), "ring") << "no single copy between hosts";
  const std::vector<int> crowded(static_cast<size_t>(cpus + 1), 0);
  EXPECT_EQ(chosen(OpKind::allreduce, 1 << 20, crowded), "ring") << "ranks outnumber CPUs";
}

// The two-copy allreduce: 2 ranks on one host with a CPU each, from 8 MiB, in place or not (in place it
// runs the direct one itself, after asking the other rank).
TEST(NativeSelect, TwoCopyAllreduceForTwoRanksOnOneHostFrom8MiB) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const std::vector<int> two = {0, 0};
  if (cpus < 2) {
    EXPECT_NE(chosen(OpKind::allreduce, 64 << 20, two), "two_copy") << "ranks outnumber CPUs";
    return;
  }
  EXPECT_EQ(chosen(OpKind::allreduce, native::kTwoCopyFrom, two), "two_copy");
  EXPECT_EQ(chosen(OpKind::allreduce, 64 << 20, two), "two_copy");
  EXPECT_NE(chosen(OpKind::allreduce, native::kTwoCopyFrom - 1, two), "two_copy");
  EXPECT_NE(chosen(OpKind::allreduce, 64 << 20, {0, 1}), "two_copy") << "two hosts";
  EXPECT_NE(chosen(OpKind::allreduce, 64 << 20, {0, 0, 0}), "two_copy") << "three ranks";
}

// The arrival allreduce: on one host whose ranks outnumber its CPUs, from 1 byte up to kArrivalUpTo
// with at least two ranks per CPU, up to kArrivalMildUpTo with fewer; not beyond, not with a CPU per
// rank, not across hosts.
TEST(NativeSelect, ArrivalAllreduceForSmallBuffersOnACrowdedHost) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const std::vector<int> crowded(static_cast<size_t>(std::max<long>(4, 2 * cpus)), 0);
  EXPECT_EQ(chosen(OpKind::allreduce, 1, crowded), "arrival");
  EXPECT_EQ(chosen(OpKind::allreduce, native::kArrivalUpTo, crowded), "arrival");
  EXPECT_NE(chosen(OpKind::allreduce, native::kArrivalUpTo + 1, crowded), "arrival");
  EXPECT_NE(chosen(OpKind::allreduce, 0, crowded), "arrival") << "nothing to reduce";
  if (cpus >= 2) {
    const std::vector<int> mild(static_cast<size_t>(cpus + 1), 0);
    EXPECT_EQ(chosen(OpKind::allreduce, native::kArrivalMildUpTo, mild), "arrival");
    EXPECT_NE(chosen(OpKind::allreduce, native::kArrivalMildUpTo + 1, mild), "arrival");
  }
  if (cpus >= 3) {
    EXPECT_EQ(chosen(OpKind::allreduce, 64, {0, 0, 0}), "flat") << "a CPU per rank";
  }
  std::vector<int> two_hosts(crowded.size());
  for (size_t r = 0; r < two_hosts.size(); ++r) two_hosts[r] = static_cast<int>(r % 2);
  EXPECT_NE(chosen(OpKind::allreduce, 64, two_hosts), "arrival") << "two hosts";
}

// Forced (MPCOMM_ALGO), with ranks as processes, the conformance matrix of the op (every dtype, reduce
// op, root, count, also fewer elements than ranks, and placement):
//  - the direct allreduce with 3 ranks, which read and write each other's buffers by
//    process_vm_readv/writev; on 2 emulated hosts no rank can reach the other host's memory: every rank
//    must see that and run the ring instead, all of them, or the call would hang;
//  - the direct broadcast on 2 emulated hosts: each root-receiver pair that cannot reach each other
//    goes by a plain send, the others (same host) directly;
//  - the direct allgather and reduce-scatter on 2 emulated hosts: every rank must fall back (to the flat
//    allgather, to the ring), all of them;
//  - the flat broadcast and the flat allgather on one host, which the choice no longer reaches there;
//  - the two-copy allreduce at every size (one piece, fewer elements than ranks: direct), with its
//    placement check off (MPCOMM_FAR_NS=0: two-copy whatever the round trip), with every round
//    trip counting as far (=1: both ranks must run the direct one, on the lower rank's word), and with
//    3 ranks (it runs the direct one);
//  - the direct allgather at 2 ranks, whose blocks of 256 KiB-2 MiB (1 MiB + 3 of the 8-bit types) go by
//    the ring through shared memory when the CPUs are near (MPCOMM_FAR_NS=0) and directly when far (=1);
//  - the arrival allreduce with 3 processes (above its size it runs the flat one), and on 2 emulated
//    hosts (no board: flat, all of them);
//  - the direct broadcast with 4 processes on one host (on a machine of fewer CPUs the choice takes the
//    staged one there);
//  - the staged broadcast and allgather with 3 processes (every byte through the stages in the
//    processes' shared memory, whether or not they outnumber the CPUs), and on 2 emulated hosts (no
//    board: the direct ones, all of them).
TEST(NativeAlgorithms, ForcedDirectAndFlatAcrossProcessesAndTheirFallbacks) {
  struct Run {
    const char *algo, *shape, *op, *env = "";
  };
  for (const Run& run : {Run{"allreduce=direct", "-n 3 --hosts 1", "allreduce"}, Run{"allreduce=direct", "-n 4 --hosts 2", "allreduce"},
                         Run{"broadcast=direct", "-n 4 --hosts 2", "broadcast"}, Run{"broadcast=flat", "-n 3 --hosts 1", "broadcast"},
                         Run{"allgather=direct", "-n 4 --hosts 2", "allgather"}, Run{"allgather=flat", "-n 3 --hosts 1", "allgather"},
                         Run{"reduce_scatter=direct", "-n 4 --hosts 2", "reduce_scatter"},
                         Run{"allreduce=two_copy", "-n 2 --hosts 1", "allreduce", "MPCOMM_FAR_NS=0"},
                         Run{"allreduce=two_copy", "-n 2 --hosts 1", "allreduce", "MPCOMM_FAR_NS=1"},
                         Run{"allreduce=two_copy", "-n 3 --hosts 1", "allreduce"},
                         Run{"allgather=direct", "-n 2 --hosts 1", "allgather", "MPCOMM_FAR_NS=0"},
                         Run{"allgather=direct", "-n 2 --hosts 1", "allgather", "MPCOMM_FAR_NS=1"},
                         Run{"allreduce=arrival", "-n 3 --hosts 1", "allreduce"}, Run{"allreduce=arrival", "-n 4 --hosts 2", "allreduce"},
                         Run{"broadcast=direct", "-n 4 --hosts 1", "broadcast"},
                         Run{"broadcast=staged", "-n 3 --hosts 1", "broadcast"}, Run{"broadcast=staged", "-n 4 --hosts 2", "broadcast"},
                         Run{"allgather=staged", "-n 3 --hosts 1", "allgather"}, Run{"allgather=staged", "-n 4 --hosts 2", "allgather"}}) {
    const std::string what = std::string(run.algo) + " " + run.shape + " " + run.env;
    auto r = testing::run_command(std::string(run.env) + " MPCOMM_ALGO=" + run.algo + " " + MPCOMM_CLI + " launch " + run.shape +
                                  " --backend native --timeout 120 -- " + MPCOMM_CLI + " selftest --conformance --only-ops " + run.op);
    EXPECT_EQ(r.status, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << what << "\n" << r.output;
    EXPECT_EQ(r.output.find(" 0 cases"), std::string::npos) << what << "\n" << r.output;
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

// 4 ranks on one host (on a machine of fewer than 4 CPUs the choice takes the staged broadcast and
// allgather instead: see the forced runs above), buffers just over the single-copy size: every root of the direct broadcast
// (receivers read from that root, the root writes their tails, which are not whole cache lines). The
// direct allgather and reduce-scatter with blocks just over their smallest size, over one 256 KiB
// piece and over 4 MiB (the allgather's own block streamed), tails that are not whole cache lines, in
// and out of place.
TEST(NativeAlgorithms, DirectBroadcastEveryRootAndDirectBlockOps) {
  const int n = 4;
  auto& world = testing::shared_world("native", n);
  const size_t count = native::single_copy_from() / sizeof(int32_t) + 3;
  for (int root = 0; root < n; ++root) {
    check::Case c;
    c.op = OpKind::broadcast;
    c.dtype = DataType::int32;
    c.count = count + static_cast<size_t>(root);
    c.root = root;
    expect_all_right(world, c);
  }
  for (OpKind op : {OpKind::allgather, OpKind::reduce_scatter})
    for (size_t block : {native::kDirectBlocksFrom, size_t{256} << 10, size_t{4} << 20})
      for (bool in_place : {false, true}) {
        check::Case c;
        c.op = op;
        c.dtype = DataType::int32;
        c.redop = ReduceOp::sum;
        c.count = block / sizeof(int32_t) + 3;
        c.in_place = in_place;
        expect_all_right(world, c);
      }
}

// The staged broadcast and allgather with ranks as threads, one more than this machine's CPUs (so the
// choice takes them): the conformance matrix of both ops (every dtype, count and root, in and out of
// place); then 90 calls back to back, with every rank in turn the root, of one piece, of exactly the
// stage's slots and one element more, and of several rounds of the stage with a short last piece
// (streamed: above kStagedStreamFrom), in place or not, with the arrival allreduce (which writes the
// same board tags) in between. Every rank's stage is reused without a handshake after the call in
// which every reader consumed it; every rank must get the exact result of every call.
TEST(NativeAlgorithms, StagedBroadcastAndAllgatherReuseTheStages) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  const std::vector<int> one_host(static_cast<size_t>(n), 0);
  ASSERT_EQ(chosen(OpKind::broadcast, native::kStagedBroadcastFrom, one_host), "staged");
  ASSERT_EQ(chosen(OpKind::allgather, native::kStagedAllgatherFrom, one_host), "staged");
  testing::ThreadWorld world("native", n);
  for (OpKind op : {OpKind::broadcast, OpKind::allgather})
    for (const check::Case& c : check::conformance_cases(op, n)) expect_all_right(world, c);

  const size_t stage = native::ShmSegment::kStageBytes / sizeof(int32_t);
  const size_t counts[] = {native::kStagedBroadcastFrom / sizeof(int32_t), stage + 1,
                           native::kStagedStreamFrom / sizeof(int32_t) + 3 * stage + 5};
  std::vector<size_t> wrong(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    size_t& bad = wrong[static_cast<size_t>(r)];
    auto value = [](int it, int rank, size_t i) { return static_cast<int32_t>(it * 1000003 + rank * 7919 + static_cast<int>(i)); };
    for (int it = 0; it < 90; ++it) {
      const size_t count = counts[it % 3];
      if (it % 2 == 0) {
        const int root = (it / 2) % n;
        std::vector<int32_t> buf(count, -1);
        if (r == root)
          for (size_t i = 0; i < count; ++i) buf[i] = value(it, root, i);
        comm.broadcast(buf.data(), count, DataType::int32, root);
        for (size_t i = 0; i < count; ++i) bad += buf[i] != value(it, root, i);
      } else {
        const size_t block = count / static_cast<size_t>(n) + 1;
        std::vector<int32_t> out(block * static_cast<size_t>(n), -1), in(block);
        int32_t* mine = out.data() + static_cast<size_t>(r) * block;
        const bool in_place = it % 4 == 1;
        for (size_t i = 0; i < block; ++i) (in_place ? mine : in.data())[i] = value(it, r, i);
        comm.allgather(in_place ? mine : in.data(), out.data(), block, DataType::int32);
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < block; ++i) bad += out[static_cast<size_t>(q) * block + i] != value(it, q, i);
      }
      if (it % 5 == 0) {
        int32_t v = r + 1;
        comm.allreduce(&v, &v, 1, DataType::int32, ReduceOp::sum);
        bad += v != n * (n + 1) / 2;
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0u) << "rank " << r;
}

// Out of place with more pieces per chunk than result slots (slots are reused) and chunks of different
// piece counts (an odd count), every reduce op on int32, avg on float32 and bfloat16 (divided, then
// streamed), and in place and mixed (one rank in place, the other not: both must run the direct one).
TEST(NativeAlgorithms, TwoCopyAllreduceReusesSlotsAndFallsBackTogether) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: 2 ranks do not choose the two-copy allreduce";
  auto& world = testing::shared_world("native", 2);
  const size_t count = native::kTwoCopyFrom / sizeof(int32_t) + 1;  // 33 and 32 pieces of 128 KiB
  const ReduceOp redops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::sum};
  for (size_t i = 0; i < std::size(redops); ++i) {
    check::Case c;
    c.op = OpKind::allreduce;
    c.dtype = DataType::int32;
    c.redop = redops[i];
    c.count = count;
    c.in_place = i + 1 == std::size(redops);  // the second sum: in place
    expect_all_right(world, c);
  }
  for (DataType dt : {DataType::float32, DataType::bfloat16}) {
    check::Case c;
    c.op = OpKind::allreduce;
    c.dtype = dt;
    c.redop = ReduceOp::avg;
    c.count = native::kTwoCopyFrom / dtype_size(dt) + 3;
    expect_all_right(world, c);
  }
  // Rank 0 in place, rank 1 not: 1 + 2 everywhere.
  std::vector<std::vector<float>> in(2), out(2);
  std::vector<size_t> wrong(2);
  world.run([&](int r, Communicator& comm) {
    in[r].assign(count, static_cast<float>(r + 1));
    out[r].assign(count, -1.0f);
    float* dst = r == 0 ? in[r].data() : out[r].data();
    comm.allreduce(in[r].data(), dst, count, DataType::float32, ReduceOp::sum);
    for (size_t i = 0; i < count; ++i) wrong[r] += dst[i] != 3.0f;
  });
  EXPECT_EQ(wrong[0], 0u);
  EXPECT_EQ(wrong[1], 0u);
}

// The arrival allreduce with ranks as threads, two per CPU of this machine (so the choice takes it up
// to kArrivalUpTo): the conformance matrix up to that size (every dtype and reduce op, 1 to 1000
// elements, in and out of place); then 300 calls back to back, of 4 B up to kArrivalUpTo (one chunk or
// several, the last one short), in place or not, with frame collectives (a larger allreduce, a
// broadcast) in between: the board is reused without handshakes, and every rank must get the exact
// result of every call.
TEST(NativeAlgorithms, ArrivalAllreduceReusesTheBoardAmongOtherCollectives) {
  const int n = static_cast<int>(std::max<long>(4, 2 * ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (n > 64) GTEST_SKIP() << "too many CPUs to crowd with threads";
  ASSERT_EQ(chosen(OpKind::allreduce, 64, std::vector<int>(static_cast<size_t>(n), 0)), "arrival");
  testing::ThreadWorld world("native", n);
  for (const check::Case& c : check::conformance_cases(OpKind::allreduce, n))
    if (c.count > 0 && c.count * dtype_size(c.dtype) <= native::kArrivalUpTo) expect_all_right(world, c);

  const size_t counts[] = {1, 7, 3000, native::kArrivalUpTo / sizeof(int32_t)};
  const int32_t tri = n * (n + 1) / 2;
  std::vector<size_t> wrong(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    size_t& bad = wrong[static_cast<size_t>(r)];
    for (int it = 0; it < 300; ++it) {
      const size_t count = counts[it % 4];
      const ReduceOp redop = it % 5 == 4 ? ReduceOp::max : ReduceOp::sum;
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = (r + 1) * static_cast<int32_t>(i + 1 + static_cast<size_t>(it));
      int32_t* dst = it % 3 == 0 ? in.data() : out.data();
      comm.allreduce(in.data(), dst, count, DataType::int32, redop);
      for (size_t i = 0; i < count; ++i)
        bad += dst[i] != static_cast<int32_t>(i + 1 + static_cast<size_t>(it)) * (redop == ReduceOp::sum ? tri : n);
      if (it % 7 == 0) {
        std::vector<int32_t> big(native::kArrivalUpTo / sizeof(int32_t) + 1, r + 1);
        comm.allreduce(big.data(), big.data(), big.size(), DataType::int32, ReduceOp::sum);
        for (int32_t v : big) bad += v != tri;
        int32_t v = r == 0 ? it : -1;
        comm.broadcast(&v, 1, DataType::int32, 0);
        bad += v != it;
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0u) << "rank " << r;
}

// Every rank gets the same bits, also where the order of the operands shows: min and max of a NaN and a
// number (and of two NaNs with different payloads). 2 ranks: the flat allreduce (reducing straight
// from the ring in rank order), the direct one and the two-copy one; in and out of place. (Not sums:
// which payload a sum of two NaNs keeps is the compiler's choice, as it may swap an addition's
// operands; sums of numbers do not depend on the order at 2 ranks.)
TEST(NativeAlgorithms, TwoRanksGetTheSameBitsWhereOperandOrderShows) {
  auto& world = testing::shared_world("native", 2);
  for (size_t count : {size_t{7}, size_t{1000}, size_t{70000}, native::kTwoCopyFrom / sizeof(float) + 5})
    for (ReduceOp redop : {ReduceOp::min, ReduceOp::max})
      for (bool in_place : {false, true}) {
        std::vector<std::vector<uint32_t>> out(2);
        world.run([&](int r, Communicator& comm) {
          std::vector<uint32_t> in(count);
          // i % 4: 0 both NaN (payloads differ by rank), 1 only rank 0, 2 only rank 1, 3 neither.
          for (size_t i = 0; i < count; ++i) {
            const uint32_t one = 0x3f800000u, nan = 0x7fc00000u | static_cast<uint32_t>(1 + r + 2 * (i % 5));
            const size_t k = i % 4;
            in[i] = k == 0 || k == static_cast<size_t>(1 + r) ? nan : one + static_cast<uint32_t>(i % 7);
          }
          out[r].assign(count, 0);
          uint32_t* dst = in_place ? in.data() : out[r].data();
          comm.allreduce(in.data(), dst, count, DataType::float32, redop);
          if (in_place) out[r] = in;
        });
        EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), count * sizeof(uint32_t)), 0)
            << to_string(redop) << " count " << count << (in_place ? " in place" : "");
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
