// Reproducible sums through communicators: the same bits for every backend, forced native algorithm, host
// layout, permutation of which rank holds which vector, and — through ReproducibleSum — any number of ranks the
// vectors are spread over; blocking and non-blocking alike. Ranks as threads; mpi and processes:
// Processes.SameBitsOnEveryBackendHostsAndShift.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "harness/process.h"
#include "harness/thread_world.h"
#include "mpcomm/reproducible.h"
#include "reproducible/inputs.h"

namespace mpcomm {
namespace {

using testing::mixed_bytes;
using testing::ThreadWorld;

constexpr DataType kTypes[] = {DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};

Options reproducible(std::map<std::string, std::string> params = {}) {
  Options o;
  o.reproducible = 1;
  o.timeout = Millis(60000);
  o.params = std::move(params);
  return o;
}

// Per rank r holding vector shift(r): the bytes of allreduce (sum, avg), reduce_scatter and reduce (root 0),
// for every floating type and `counts`, as rank 0 sees them.
std::string results(ThreadWorld& w, const std::vector<size_t>& counts, const std::vector<int>& holds) {
  std::string out;
  std::mutex mu;
  w.run([&](int rank, Communicator& comm) {
    std::string mine;
    const size_t P = static_cast<size_t>(comm.size());
    for (DataType dt : kTypes)
      for (size_t count : counts) {
        const size_t es = dtype_size(dt);
        const auto x = mixed_bytes(holds[static_cast<size_t>(rank)], count * P, dt);
        std::vector<char> y(count * P * es);
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          comm.allreduce(x.data(), y.data(), count, dt, op);
          mine.append(y.data(), count * es);
        }
        comm.reduce_scatter(x.data(), y.data(), count, dt, ReduceOp::sum);
        mine.append(y.data(), count * es);  // rank 0's block
        comm.reduce(x.data(), y.data(), count, dt, ReduceOp::sum, 0);
        mine.append(y.data(), count * es);
      }
    if (rank == 0) {
      std::lock_guard<std::mutex> g(mu);
      out = mine;
    }
  });
  return out;
}

std::vector<int> identity(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) v[static_cast<size_t>(r)] = r;
  return v;
}

const std::vector<size_t> kCounts{0, 1, 7, 1000, 20000};

TEST(Reproducible, SameBitsOnEveryBackendAndHostLayout) {
  ThreadWorld base("native", 4, reproducible());
  const std::string want = results(base, kCounts, identity(4));
  ASSERT_FALSE(want.empty());
  for (const auto& backend : testing::thread_backends())
    for (std::vector<std::string> hosts :
         {std::vector<std::string>{}, {"a", "a", "b", "b"}, {"a", "b", "c", "d"}, {"a", "b", "a", "b"}}) {
      SCOPED_TRACE(backend + ", " + std::to_string(hosts.size()) + " host ids");
      ThreadWorld w(backend, 4, reproducible(), hosts);
      EXPECT_TRUE(results(w, kCounts, identity(4)) == want);
    }
}

// Every native algorithm the pieces can run on: the max all-reduce of the bins, the int64 reduce-scatter and
// reduce, the allgather of the rounded blocks.
TEST(Reproducible, SameBitsForEveryForcedNativeAlgorithm) {
  ThreadWorld base("native", 4, reproducible());
  const std::string want = results(base, kCounts, identity(4));
  for (const char* algo : {"allreduce=ring,reduce_scatter=ring,allgather=ring", "allreduce=flat,allgather=flat",
                           "allreduce=recursive_doubling,reduce=binomial", "allreduce=staged,allgather=staged"}) {
    SCOPED_TRACE(algo);
    ThreadWorld w("native", 4, reproducible({{"MPCOMM_ALGO", algo}}));
    EXPECT_TRUE(results(w, kCounts, identity(4)) == want);
  }
  // and without reproducible sums the algorithms do differ on these values (else this would prove nothing)
  auto plain = [](const char* algo) {
    Options o;
    o.params["MPCOMM_ALGO"] = algo;
    ThreadWorld w("native", 4, o);
    std::vector<float> out(20000);
    w.run([&](int rank, Communicator& comm) {
      auto x = testing::mixed_values<float>(rank, 20000);
      comm.allreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
      if (rank == 0) out = x;
    });
    return out;
  };
  EXPECT_NE(plain("allreduce=ring"), plain("allreduce=recursive_doubling"));
}

// On one host with single copy the native backend sums in one pass (direct: each piece's owner reads every
// rank's values); the generic path (forced ring) gives the same bits.
TEST(Reproducible, NativeOnOneHostSumsInOnePassWithTheSameBits) {
  ThreadWorld fused("native", 4, reproducible());
  bool one_pass = false;
  fused.run([&](int rank, Communicator& comm) {
    std::vector<float> x(20000, 1.0f);
    comm.allreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
    if (rank == 0)
      one_pass = std::string(comm.stats()[static_cast<size_t>(OpKind::allreduce)].algorithm) == "reproducible+direct";
  });
  if (!one_pass) GTEST_SKIP() << "no single copy between the ranks here (process_vm_readv refused)";
  ThreadWorld generic("native", 4, reproducible({{"MPCOMM_ALGO", "allreduce=ring,reduce_scatter=ring"}}));
  for (std::vector<int> holds : {std::vector<int>{0, 1, 2, 3}, {2, 0, 3, 1}})
    EXPECT_TRUE(results(fused, kCounts, holds) == results(generic, kCounts, {3, 2, 1, 0}));
}

TEST(Reproducible, SameBitsWhicheverRankHoldsWhichVector) {
  ThreadWorld w("native", 4, reproducible());
  const std::string want = results(w, kCounts, {0, 1, 2, 3});
  for (std::vector<int> holds : {std::vector<int>{3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}})
    EXPECT_TRUE(results(w, kCounts, holds) == want);
}

TEST(Reproducible, ALargeCount) {
  const std::vector<size_t> big{(size_t{1} << 20) + 3};
  ThreadWorld a("native", 4, reproducible()), b("gloo", 4, reproducible(), {"a", "a", "b", "b"});
  EXPECT_TRUE(results(a, big, {0, 1, 2, 3}) == results(b, big, {2, 3, 1, 0}));
}

// The same 8 vectors on 1, 2, 4 and 8 ranks, evenly and not: ReproducibleSum's allreduce and reduce_scatter give
// the same bits, and so does a reproducible communicator's allreduce with one vector per rank.
TEST(Reproducible, AnyNumberOfRanksThroughTheAccumulator) {
  const size_t n = 4096;
  for (DataType dt : kTypes) {
    SCOPED_TRACE(std::string(to_string(dt)));
    const size_t es = dtype_size(dt);
    std::vector<std::vector<char>> vs;
    for (int v = 0; v < 8; ++v) vs.push_back(mixed_bytes(v, n, dt));
    std::string want;
    {
      ThreadWorld w("native", 8, reproducible());
      w.run([&](int rank, Communicator& comm) {
        std::vector<char> out(n * es);
        comm.allreduce(vs[static_cast<size_t>(rank)].data(), out.data(), n, dt, ReduceOp::sum);
        if (rank == 0) want.assign(out.data(), out.size());
      });
    }
    for (std::vector<std::vector<int>> spread : {std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}},
                                                 {{0, 1, 2, 3}, {4, 5, 6, 7}},
                                                 {{7, 0}, {1, 6}, {2, 5}, {3, 4}},
                                                 {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
                                                 {{5, 2, 0}, {7}, {1, 3, 6, 4}},
                                                 {{}, {3, 1, 4, 0, 5, 2, 6, 7}}}) {
      const int P = static_cast<int>(spread.size());
      SCOPED_TRACE(std::to_string(P) + " ranks");
      ThreadWorld w("gloo", P);
      std::vector<std::string> got(spread.size()), blocks(spread.size());
      w.run([&](int rank, Communicator& comm) {
        ReproducibleSum acc(dt, n);
        for (int v : spread[static_cast<size_t>(rank)]) acc.add(vs[static_cast<size_t>(v)].data());
        std::vector<char> out(n * es), block(n / static_cast<size_t>(P) * es);
        acc.allreduce(comm, out.data());
        if (n % static_cast<size_t>(P) == 0) acc.reduce_scatter(comm, block.data());
        got[static_cast<size_t>(rank)].assign(out.data(), out.size());
        blocks[static_cast<size_t>(rank)].assign(block.data(), block.size());
      });
      for (int r = 0; r < P; ++r) EXPECT_TRUE(got[static_cast<size_t>(r)] == want) << "rank " << r;
      if (n % static_cast<size_t>(P) != 0) continue;
      const size_t per = n / static_cast<size_t>(P) * es;
      for (size_t r = 0; r < spread.size(); ++r) EXPECT_TRUE(blocks[r] == want.substr(r * per, per)) << "block " << r;
    }
  }
}

TEST(Reproducible, NonBlockingAmongOtherOpsGivesTheBlockingBits) {
  ThreadWorld w("native", 3, reproducible());
  const size_t n = 50000;
  w.run([&](int rank, Communicator& comm) {
    auto x = testing::mixed_values<float>(rank, n);
    std::vector<float> blocking(n), a(n), b(n);
    comm.allreduce(x.data(), blocking.data(), n, DataType::float32, ReduceOp::sum);
    int32_t token = rank == 1 ? 42 : 0;
    Request r1 = comm.iallreduce(x.data(), a.data(), n, DataType::float32, ReduceOp::sum);
    Request r2 = comm.ibroadcast(&token, 1, DataType::int32, 1);
    Request r3 = comm.iallreduce(x.data(), b.data(), 7, DataType::float32, ReduceOp::sum);  // the gathered form
    r3.wait(), r2.wait(), r1.wait();
    EXPECT_EQ(token, 42);
    EXPECT_EQ(std::memcmp(a.data(), blocking.data(), n * 4), 0);
    EXPECT_EQ(std::memcmp(b.data(), blocking.data(), 7 * 4), 0) << "a prefix sums to the prefix";
    // integer sums and other reductions are left alone
    int64_t k = rank + 1;
    comm.allreduce(&k, &k, 1, DataType::int64, ReduceOp::sum);
    EXPECT_EQ(k, 6);
  });
}

// Infinities, NaN, signed zeros, subnormals and overflow through a communicator, on the gathering path (6
// elements) and the reduce-scatter path (20000): as ReproducibleSum.SpecialValuesFollowIeee says.
TEST(Reproducible, SpecialValuesThroughTheCollectives) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float sub = std::numeric_limits<float>::denorm_min();
  const float values[3][6] = {{inf, inf, nan, -0.0f, sub, 3e38f}, {1.0f, -inf, 1.0f, -0.0f, sub, 3e38f},
                              {2.0f, 0.0f, 2.0f, -0.0f, sub, 3e38f}};
  ThreadWorld w("native", 3, reproducible());
  for (size_t count : {size_t{6}, size_t{20000}}) {
    w.run([&](int rank, Communicator& comm) {
      std::vector<float> x(count, 0.5f), y(count);
      std::copy_n(values[rank], 6, x.begin());
      comm.allreduce(x.data(), y.data(), count, DataType::float32, ReduceOp::sum);
      EXPECT_EQ(y[0], inf);
      EXPECT_TRUE(std::isnan(y[1])) << "inf + -inf";
      EXPECT_TRUE(std::isnan(y[2]));
      EXPECT_EQ(y[3], 0.0f);
      EXPECT_FALSE(std::signbit(y[3])) << "a zero sum is +0";
      EXPECT_EQ(y[4], 3 * sub);
      EXPECT_EQ(y[5], inf) << "overflow";
      EXPECT_EQ(y[count - 1], count > 6 ? 1.5f : inf);
    });
  }
}

TEST(Reproducible, TheStatisticsAndTheErrorsNameIt) {
  ThreadWorld w("native", 2, reproducible());
  w.run([&](int, Communicator& comm) {
    std::vector<float> x(100, 1.0f);
    comm.allreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
    EXPECT_EQ(x[0], 2.0f);
    EXPECT_STREQ(comm.stats()[static_cast<size_t>(OpKind::allreduce)].algorithm, "reproducible");
    EXPECT_NE(comm.flight_record().find("reproducible"), std::string::npos) << comm.flight_record();
  });
}

// Processes: native, gloo and mpi, one and two emulated hosts, vectors shifted over the ranks, forced ring
// algorithms: the same file of results.
TEST(Processes, SameBitsOnEveryBackendHostsAndShift) {
  const std::string dir = "/tmp/mpcomm-repro-" + testing::unique_tag();
  ASSERT_EQ(testing::run_command("mkdir -p " + dir).status, 0);
  std::vector<std::string> runs{"--backend native --hosts 1", "--backend native --hosts 2", "--backend gloo --hosts 2",
                                "--backend native --hosts 1 @1", "--backend native --hosts 2 @3 ring"};
  for (const auto& b : available_backends())
    if (b == "mpi") runs.push_back("--backend mpi --hosts 1 @2");
  for (size_t k = 0; k < runs.size(); ++k) {
    std::string args = runs[k], shift = "0", env = "MPCOMM_REPRODUCIBLE=1 ";
    if (auto at = args.find(" @"); at != std::string::npos) {
      shift = args.substr(at + 2, 1);
      if (args.find(" ring") != std::string::npos)
        env += "MPCOMM_ALGO=allreduce=ring,reduce_scatter=ring,allgather=ring ";
      args = args.substr(0, at);
    }
    const std::string file = dir + "/" + std::to_string(k);
    auto r = testing::run_command(env + MPCOMM_CLI + " launch -n 4 " + args + " --timeout 120 -- " + MPCOMM_TESTPROG +
                                  " sums " + file + " " + shift + " 2>&1");
    ASSERT_EQ(r.status, 0) << runs[k] << "\n" << r.output;
    auto c = testing::run_command("cmp " + dir + "/0 " + file);
    EXPECT_EQ(c.status, 0) << runs[k] << " differs from " << runs[0] << ": " << c.output;
  }
  testing::run_command("rm -rf " + dir);
}

}  // namespace
}  // namespace mpcomm
