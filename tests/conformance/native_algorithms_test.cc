// The native backend's algorithms where the whole-matrix conformance suite does not reach them: each
// forced (MPCOMM_ALGO) with ranks as processes over the conformance matrix of its op, where it runs and
// where it must refuse; and the algorithms with shared state (stages, board, two-copy slots) called
// back to back, every root, odd sizes, in and out of place. Which algorithm the built-in table chooses:
// tests/tuning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "harness/flight_record.h"
#include "harness/process.h"
#include "harness/thread_world.h"
#include "backends/native/algorithms/algorithms.h"
#include "backends/native/engine/engine.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

constexpr size_t K = 1024, M = 1024 * 1024;
// Where the built-in table's *.staged.stores rows turn to streaming stores.
constexpr size_t kStreamedFrom = 2 * M;

Options forcing(const std::string& algo) {
  Options o;
  o.timeout = Millis(60000);
  if (!algo.empty()) o.params["MPCOMM_ALGO"] = algo;
  return o;
}

// Forced (MPCOMM_ALGO), with ranks as processes, the conformance matrix of the op (every dtype, reduce
// op, root, count, also fewer elements than ranks, and placement) — for every algorithm of the registry,
// in the shapes its needs (algorithms.h) say it runs in and those they say it refuses: where it runs,
// every case it runs must be right (and an algorithm limited to the board's size refuses the cases above
// it on every rank); where it cannot run at all, every case is refused on every rank, naming why.
struct ForcedRun {
  std::string shape;          // mpcomm launch's "-n N --hosts H"
  const char* refuses = nullptr;  // every case, with this reason
};

std::vector<ForcedRun> runs_for(const native::Algorithm& a) {
  using namespace native;
  const char* kOneHost = "it needs every rank on one host";
  std::vector<ForcedRun> runs;
  if ((a.needs & kNeedsTwoRanks) != 0) {
    runs.push_back({"-n 2 --hosts 1"});
    runs.push_back({"-n 3 --hosts 1", "it runs on exactly 2 ranks"});
  } else if ((a.needs & kNeedsEvenHosts) != 0) {
    runs.push_back({"-n 4 --hosts 2"});
    runs.push_back({"-n 3 --hosts 2", "it needs every host to hold as many ranks"});
  } else {
    runs.push_back({"-n 3 --hosts 1"});
  }
  if ((a.needs & (kNeedsSharedMemory | kNeedsSingleCopy)) != 0)
    runs.push_back({"-n 4 --hosts 2", kOneHost});
  else if ((a.needs & kNeedsEvenHosts) == 0)
    runs.push_back({"-n 4 --hosts 2"});
  return runs;
}

class ForcedAlgorithm : public ::testing::TestWithParam<size_t> {};

TEST_P(ForcedAlgorithm, RunsWhereItsNeedsAllowAndRefusesElsewhere) {
  const native::Algorithm& a = native::all_algorithms()[GetParam()];
  const std::string op(to_string(a.kind)), algo = op + "=" + a.name;
  for (const ForcedRun& run : runs_for(a)) {
    const std::string what = algo + " " + run.shape;
    auto r = testing::run_command("MPCOMM_ALGO=" + algo + " " + MPCOMM_CLI + " launch " + run.shape +
                                  " --backend native --timeout 120 -- " + MPCOMM_CLI + " selftest --conformance --only-ops " + op);
    EXPECT_EQ(r.status, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << what << "\n" << r.output;
    if (run.refuses != nullptr) {
      EXPECT_NE(r.output.find(" 0 cases, 0 failed"), std::string::npos) << what << "\n" << r.output;
      EXPECT_NE(r.output.find("MPCOMM_ALGO forces " + algo + ", which cannot run here: " + run.refuses), std::string::npos)
          << what << "\n" << r.output;
    } else {
      EXPECT_EQ(r.output.find(" 0 cases"), std::string::npos) << what << "\n" << r.output;
      const bool some_refused = (a.needs & native::kNeedsBoardSize) != 0;  // above the board's size per rank
      EXPECT_EQ(r.output.find(" 0 refused") != std::string::npos, !some_refused) << what << "\n" << r.output;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, ForcedAlgorithm, ::testing::Range(size_t{0}, native::all_algorithms().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           const native::Algorithm& a = native::all_algorithms()[info.param];
                           return std::string(to_string(a.kind)) + "_" + a.name;
                         });

void expect_all_right(testing::ThreadWorld& world, const check::Case& c) {
  std::vector<check::Result> res(static_cast<size_t>(world.size()));
  world.run([&](int r, Communicator& comm) { res[static_cast<size_t>(r)] = check::run_case(comm, c); });
  for (int r = 0; r < world.size(); ++r)
    ASSERT_EQ(res[r].wrong, 0u) << check::describe(c) << " rank " << r << ": " << res[r].first_wrong;
}

// 4 ranks on one host, the direct broadcast, allgather and reduce-scatter forced: buffers just over
// 256 KiB, every root (receivers read from that root, the root writes their tails, which are not whole
// cache lines). The allgather and reduce-scatter with blocks from 32 KiB, over one 256 KiB piece and
// over 4 MiB (the allgather's own block streamed), tails that are not whole cache lines, in and out of
// place.
TEST(NativeAlgorithms, DirectBroadcastEveryRootAndDirectBlockOps) {
  const int n = 4;
  testing::ThreadWorld world("native", n, forcing("broadcast=direct,allgather=direct,reduce_scatter=direct"));
  const size_t count = 256 * K / sizeof(int32_t) + 3;
  for (int root = 0; root < n; ++root) {
    check::Case c;
    c.op = OpKind::broadcast;
    c.dtype = DataType::int32;
    c.count = count + static_cast<size_t>(root);
    c.root = root;
    expect_all_right(world, c);
  }
  for (OpKind op : {OpKind::allgather, OpKind::reduce_scatter})
    for (size_t block : {32 * K, 256 * K, 4 * M})
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

// The staged broadcast and allgather forced, with ranks as threads, one more than this machine's CPUs
// (where the built-in table takes them): the conformance matrix of both ops (every dtype, count and
// root, in and out of place); then 90 calls back to back, with every rank in turn the root, of one
// piece, of exactly the stage's slots and one element more, and of several rounds of the stage with a
// short last piece (streamed: above the built-in table's 2 MiB, allgather.staged.stores), in place or not, with the arrival allreduce
// (which writes the same board tags) in between. Every rank's stage is reused without a handshake after
// the call in which every reader consumed it; every rank must get the exact result of every call.
TEST(NativeAlgorithms, StagedBroadcastAndAllgatherReuseTheStages) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  testing::ThreadWorld world("native", n, forcing("broadcast=staged,allgather=staged,allreduce=arrival"));
  for (OpKind op : {OpKind::broadcast, OpKind::allgather})
    for (const check::Case& c : check::conformance_cases(op, n)) expect_all_right(world, c);

  const size_t stage = native::HostLocal::kStageBytes / sizeof(int32_t);
  const size_t counts[] = {32 * K / sizeof(int32_t), stage + 1,
                           kStreamedFrom / sizeof(int32_t) + 3 * stage + 5};
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

// The staged allreduce forced, with ranks as threads, one more than this machine's CPUs (where the
// built-in table takes it from 8 MiB): the conformance matrix (every dtype and reduce op, counts from
// fewer elements than ranks, in and out of place); then 120 calls back to back of sizes that leave
// blocks empty, fill one piece, end a block exactly where the input or result slots wrap, or take many
// rounds of both with short last pieces (streamed: from the built-in table's 2 MiB), in place or not, sum, max
// and avg, with a staged broadcast and allgather (which use the same stages and words) in between.
// Every rank must get the exact result of every call.
TEST(NativeAlgorithms, StagedAllreduceReusesTheStagesAmongTheOtherStagedOps) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  testing::ThreadWorld world("native", n, forcing("allreduce=staged,broadcast=staged,allgather=staged"));
  for (const check::Case& c : check::conformance_cases(OpKind::allreduce, n)) expect_all_right(world, c);

  const size_t piece = 32 * K / sizeof(int32_t), slots = native::HostLocal::kStageBytes / 2 / (32 * K);
  const size_t counts[] = {2, piece * static_cast<size_t>(n), slots * piece * static_cast<size_t>(n),
                           (slots + 1) * piece * static_cast<size_t>(n) - 5,
                           kStreamedFrom / sizeof(int32_t) + 7 * piece + 3};
  std::vector<size_t> wrong(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    size_t& bad = wrong[static_cast<size_t>(r)];
    for (int it = 0; it < 120; ++it) {
      const size_t count = counts[it % 5];
      const ReduceOp redop = it % 3 == 0 ? ReduceOp::sum : it % 3 == 1 ? ReduceOp::max : ReduceOp::avg;
      const bool in_place = it % 2 == 1;
      std::vector<int32_t> in(count), out(count, -1);
      // Rank q's element i: (q + 1) * n * x, x = i % 1000 + it; sum, max and avg of them are exact.
      auto elem = [&](int q, size_t i) { return (q + 1) * n * static_cast<int32_t>(i % 1000 + static_cast<size_t>(it)); };
      for (size_t i = 0; i < count; ++i) in[i] = elem(r, i);
      int32_t* dst = in_place ? in.data() : out.data();
      comm.allreduce(in.data(), dst, count, DataType::int32, redop);
      for (size_t i = 0; i < count; ++i) {
        const int32_t x = static_cast<int32_t>(i % 1000 + static_cast<size_t>(it)), tri = n * (n + 1) / 2;
        const int32_t want = redop == ReduceOp::sum ? n * x * tri : redop == ReduceOp::max ? elem(n - 1, i) : x * tri;
        bad += dst[i] != want;
      }
      if (it % 4 == 0) {
        const int root = (it / 4) % n;
        std::vector<int32_t> buf(count + 1, r == root ? it : -1);
        comm.broadcast(buf.data(), buf.size(), DataType::int32, root);
        for (int32_t v : buf) bad += v != it;
        std::vector<int32_t> all(static_cast<size_t>(n) * (count / 2 + 1), -1), mine(count / 2 + 1, r + it);
        comm.allgather(mine.data(), all.data(), mine.size(), DataType::int32);
        for (size_t i = 0; i < all.size(); ++i) bad += all[i] != static_cast<int32_t>(i / mine.size()) + it;
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0u) << "rank " << r;
}

// The two-copy allreduce forced: out of place with more pieces per chunk than result slots (slots are
// reused) and chunks of different piece counts (an odd count), every reduce op on int32, avg on float32
// and bfloat16 (divided, then streamed), in place, and mixed (one rank in place, the other not).
TEST(NativeAlgorithms, TwoCopyAllreduceReusesSlotsInAndOutOfPlace) {
  testing::ThreadWorld world("native", 2, forcing("allreduce=two_copy"));
  const size_t count = 8 * M / sizeof(int32_t) + 1;  // 33 and 32 pieces of 128 KiB
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
    c.count = 8 * M / dtype_size(dt) + 3;
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
    EXPECT_EQ(testing::last_algorithm(comm), "two_copy");
  });
  EXPECT_EQ(wrong[0], 0u);
  EXPECT_EQ(wrong[1], 0u);
}

// The arrival allreduce with ranks as threads, two per CPU of this machine (where the built-in table
// takes it up to 32 KiB): the conformance matrix up to that size (every dtype and reduce op, 1 to 1000
// elements, in and out of place); then 300 calls back to back, of 4 B up to 32 KiB (one chunk or
// several, the last one short), in place or not, with frame collectives (a larger allreduce, a
// broadcast) in between: the board is reused without handshakes, and every rank must get the exact
// result of every call.
TEST(NativeAlgorithms, ArrivalAllreduceReusesTheBoardAmongOtherCollectives) {
  const int n = static_cast<int>(std::max<long>(4, 2 * ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (n > 64) GTEST_SKIP() << "too many CPUs to crowd with threads";
  constexpr size_t kUpTo = 32 * K;
  testing::ThreadWorld world("native", n, forcing(""));
  world.run([&](int r, Communicator& comm) {
    int32_t v = r;
    comm.allreduce(&v, &v, 1, DataType::int32, ReduceOp::sum);
    ASSERT_EQ(testing::last_algorithm(comm), "arrival");
  });
  for (const check::Case& c : check::conformance_cases(OpKind::allreduce, n))
    if (c.count > 0 && c.count * dtype_size(c.dtype) <= kUpTo) expect_all_right(world, c);

  const size_t counts[] = {1, 7, 3000, kUpTo / sizeof(int32_t)};
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
        std::vector<int32_t> big(kUpTo / sizeof(int32_t) + 1, r + 1);
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

// Receivers that sleep on their doorbells (no spinning: MPCOMM_SPIN_US=0; the root comes 60 ms late)
// wake at the root's small frames, which the engine leaves in the rings and wakes their receivers for
// only at its next wait or when the op ends (Engine::send): the flat broadcast's n-1 frames, the
// linear barrier's releases. A receiver that missed its wake-up would sleep out its slice (up to 50
// ms) before it looked again: over 8 rounds, some round would take 25 ms or more.
TEST(NativeAlgorithms, SleepingReceiversWakeAtTheRootsFrames) {
  constexpr int n = 4, kRounds = 8;
  Options o = forcing("broadcast=flat,barrier=linear");
  o.params["MPCOMM_SPIN_US"] = "0";
  testing::ThreadWorld world("native", n, o);
  using Clock = std::chrono::steady_clock;
  for (const char* op : {"broadcast", "barrier"}) {
    std::vector<double> worst(static_cast<size_t>(n), 0.0);
    std::atomic<Clock::rep> sent{0};
    world.run([&](int r, Communicator& comm) {
      for (int round = 0; round < kRounds; ++round) {
        comm.allreduce(nullptr, nullptr, 0, DataType::int32, ReduceOp::sum);  // all here: a round's start
        int32_t v = r == 0 ? round : -1;
        if (r == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(60));
          sent = Clock::now().time_since_epoch().count();
        }
        if (std::string(op) == "broadcast") {
          comm.broadcast(&v, 1, DataType::int32, 0);
          EXPECT_EQ(v, round) << "rank " << r;
        } else {
          comm.barrier();
        }
        if (round == 0) {
          EXPECT_EQ(testing::last_algorithm(comm), std::string(op) == "broadcast" ? "flat" : "linear");
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch() -
                                                                     Clock::duration(sent.load())).count();
        worst[static_cast<size_t>(r)] = std::max(worst[static_cast<size_t>(r)], ms);
        comm.allreduce(nullptr, nullptr, 0, DataType::int32, ReduceOp::sum);  // nobody reads `sent` early
      }
    });
    for (int r = 1; r < n; ++r) EXPECT_LT(worst[static_cast<size_t>(r)], 25.0) << op << ", rank " << r;
  }
}

// The board allreduce back to back and among frame collectives whose root only sends (a broadcast, a
// scatter): the root may come back to the board while another rank is still reading it from the op
// before, and board_claim must hold it off. Two ranks per CPU (the allreduce forced: the table takes it
// only with a CPU per rank), so that a reader is often preempted between seeing the tags and reading
// the data; every call's result exact, in and out of place, inline (<= 32 B) and through the input
// slots. (Without the claim, runs fail within seconds: a reader finds the root's slot already holding
// its next stamp and waits for the old one, or reads the next op's input.)
TEST(NativeAlgorithms, BoardAllreduceReusesItsSlotsAmongOtherCollectives) {
  const int n = static_cast<int>(std::max<long>(4, 2 * ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (n > 64) GTEST_SKIP() << "too many CPUs to crowd with threads";
  Options o = forcing("allreduce=board");
  o.timeout = Millis(20000);
  testing::ThreadWorld world("native", n, o);
  const int32_t tri = n * (n + 1) / 2;
  std::vector<size_t> wrong(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    size_t& bad = wrong[static_cast<size_t>(r)];
    for (int it = 0; it < 2000; ++it) {
      const size_t count = it % 2 == 0 ? 3 : 300;  // 12 B inline, 1200 B through the input slots
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = (r + 1) * static_cast<int32_t>(i + 1 + static_cast<size_t>(it));
      int32_t* dst = it % 3 == 0 ? in.data() : out.data();
      comm.allreduce(in.data(), dst, count, DataType::int32, ReduceOp::sum);
      for (size_t i = 0; i < count; ++i) bad += dst[i] != static_cast<int32_t>(i + 1 + static_cast<size_t>(it)) * tri;
      std::vector<int32_t> b(it % 5 == 0 ? 4 : 2048, r == 0 ? it : -1);  // rank 0 only sends
      comm.broadcast(b.data(), b.size(), DataType::int32, 0);
      for (int32_t x : b) bad += x != it;
      if (it % 4 == 1) {
        std::vector<int32_t> all(static_cast<size_t>(n) * 512, r == 1 ? it : -1), mine(512, -2);
        comm.scatter(all.data(), mine.data(), 512, DataType::int32, 1);  // rank 1 only sends
        for (int32_t x : mine) bad += x != it;
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
  for (size_t count : {size_t{7}, size_t{1000}, size_t{70000}, 8 * M / sizeof(float) + 5})
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
