// The conformance suite: every op × dtype × reduce op × count × in/out of place × world size, on every
// backend, ranks as threads. A new backend is tested by adding its name to kBackends.
//
// Counts are {0, 1, 7, 1000, 2^20+3}. For the ops whose count is per rank block (allgather,
// reduce_scatter, gather, scatter, alltoall) the block is ceil(count / ranks), so the whole buffer
// stays near `count` elements and the suite stays fast.
#include <gtest/gtest.h>

#include <cstdlib>

#include <array>
#include <atomic>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "harness/flight_record.h"
#include "harness/process.h"
#include "harness/thread_world.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

using testing::thread_backends;  // mpi ranks are processes (tests/mpi); nccl: tests/gpu
const std::vector<std::string> kBackends = thread_backends();
const std::vector<int> kWorldSizes = {1, 2, 3, 4, 5, 8};

using Param = std::tuple<std::string, int, OpKind>;

class Conformance : public ::testing::TestWithParam<Param> {};

TEST_P(Conformance, EveryDtypeRedopCountAndPlacement) {
  const auto& [backend, n, op] = GetParam();
  auto& world = testing::shared_world(backend, n);
  for (const auto& c : check::conformance_cases(op, n)) {
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

// Every op's conformance cases on `world`, 0 wrong on every rank.
void expect_every_case_passes(testing::ThreadWorld& world) {
  const int n = world.size();
  for (OpKind op : check::checked_ops())
    for (const auto& c : check::conformance_cases(op, n)) {
      std::vector<check::Result> results(static_cast<size_t>(n));
      world.run([&](int r, Communicator& comm) { results[static_cast<size_t>(r)] = check::run_case(comm, c); });
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(results[r].wrong, 0u) << check::describe(c) << ": rank " << r << ", first wrong " << results[r].first_wrong;
    }
}

// A 4 KiB shared-memory ring: every large message wraps around it thousands of times, frames of
// different dtypes leave payloads at every offset (elements split by the ring's end are combined through
// the bounce buffer), and large collective frames wait in the ring for their receive.
TEST(NativeSmallRing, EveryOpWrapsAroundTheRing) {
  Options o;
  o.params = {{"MPCOMM_SHM_RING_BYTES", "4096"}, {"MPCOMM_SINGLE_COPY", "0"}};  // large frames through the ring too
  testing::ThreadWorld world("native", 3, o);
  expect_every_case_passes(world);
}

// Large sends that arrive before their receives, in both directions at once: the receiver drives
// progress on the last tag's receive for a while, so that earlier frames have arrived whole before their
// receive, or are arriving, or come after it; sizes go down and up (buffers kept for reuse are larger than
// the payloads they take). Two ranks (a CPU each: through a 4 KiB ring, each payload in thousands of
// passes, a receive posted mid-frame taking what came and the rest from the ring) and four on one
// counted CPU (MPCOMM_CPUS=1, a crowded host: from 64 KiB by single copy, the payload left in the
// sender's buffer until its receive is posted). Every byte at its place.
class NativeUnexpected : public ::testing::TestWithParam<bool> {};

// The name of a test's host (its parameter: crowded or not).
std::string host_kind(const ::testing::TestParamInfo<bool>& info) { return info.param ? "Crowded" : "CpuPerRank"; }

TEST_P(NativeUnexpected, LargeSendsBeforeTheirReceivesArriveWhole) {
  const bool crowded = GetParam();
  Options o;
  o.params = {{"MPCOMM_SHM_RING_BYTES", "4096"}, {"MPCOMM_SINGLE_COPY", "1"}};
  if (crowded) o.params["MPCOMM_CPUS"] = "1";
  const int n = crowded ? 4 : 2;
  testing::ThreadWorld world("native", n, o);
  const std::vector<size_t> sizes = {(size_t{3} << 20) + 7, size_t{1} << 20, (size_t{64} << 10) + 1, (size_t{2} << 20) + 3,
                                     size_t{100}, (size_t{3} << 20) + 7, size_t{300} << 10};
  auto value = [](int from, size_t tag, size_t i) { return static_cast<uint8_t>(from * 131 + tag * 31 + i * 7 + (i >> 12)); };
  std::vector<std::string> errors(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    const size_t last = sizes.size();  // the marker's tag
    std::vector<std::vector<uint8_t>> out(sizes.size()), in(sizes.size());
    std::vector<Request> sends;
    for (size_t t = 0; t < sizes.size(); ++t) {
      out[t].resize(sizes[t]);
      for (size_t i = 0; i < sizes[t]; ++i) out[t][i] = value(r, t, i);
      sends.push_back(comm.isend(out[t].data(), sizes[t], DataType::uint8, right, static_cast<int>(t)));
    }
    uint8_t marker_out = 42, marker_in = 0;
    sends.push_back(comm.isend(&marker_out, 1, DataType::uint8, right, static_cast<int>(last)));
    Request marker = comm.irecv(&marker_in, 1, DataType::uint8, left, static_cast<int>(last));
    std::vector<Request> recvs;
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (int pass = 0; pass < (t % 2 == 0 ? 200 : 0); ++pass) marker.test();
      in[t].assign(sizes[t], 0);
      recvs.push_back(comm.irecv(in[t].data(), sizes[t], DataType::uint8, left, static_cast<int>(t)));
    }
    marker.wait();
    for (auto& q : recvs) q.wait();
    for (auto& q : sends) q.wait();
    std::string& e = errors[static_cast<size_t>(r)];
    if (marker_in != 42) e += "marker wrong; ";
    for (size_t t = 0; t < sizes.size(); ++t)
      for (size_t i = 0; i < sizes[t]; ++i)
        if (in[t][i] != value(left, t, i)) {
          e += "tag " + std::to_string(t) + " byte " + std::to_string(i) + " wrong; ";
          break;
        }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Hosts, NativeUnexpected, ::testing::Values(false, true),
                         host_kind);

// A send to a local rank goes through the ring or by single copy, as the table's send.path rows say for
// its size: the built-in rows on a crowded host (here 2 ranks on one counted CPU: single copy from 64
// KiB), a tuning file's rows that alternate the paths by size with a CPU per rank. 40 round trips, each
// way, of sizes around the thresholds, fresh data each time: every byte at its place, and every send
// went the path its size asks (the flight record names it).
class NativeP2PPaths : public ::testing::TestWithParam<bool> {};

TEST_P(NativeP2PPaths, SendsGoThePathTheTableSaysAndArriveWhole) {
  const bool crowded = GetParam();
  Options o;
  o.params = {{"MPCOMM_SINGLE_COPY", "1"}};
  constexpr size_t K = 1024;
  std::function<bool(size_t)> single;
  if (crowded) {
    o.params["MPCOMM_CPUS"] = "1";
    single = [](size_t b) { return b >= 64 * K; };
  } else {
    const std::string path = ::testing::TempDir() + "mpcomm-send-paths.txt";
    std::ofstream(path) << "mpcomm-tuning 1 backend=native\n"
                           "send.path bytes=[64K,256K) -> single_copy\nsend.path bytes=[256K,4M] -> ring\n"
                           "send.path bytes=(4M,inf) -> single_copy\nsend.path -> ring\n";
    o.params["MPCOMM_TUNING"] = path;
    single = [](size_t b) { return (b >= 64 * K && b < 256 * K) || b > 4096 * K; };
  }
  testing::ThreadWorld world("native", 2, o);
  const std::vector<size_t> sizes = crowded ? std::vector<size_t>{64 * K, 100 * K + 3, 64 * K - 1, 256 * K + 1}
                                            : std::vector<size_t>{64 * K, 1024 * K + 3, 256 * K - 1, 4096 * K + 5,
                                                                  256 * K + 1, 4096 * K, 64 * K - 1};
  auto value = [](int from, int round, size_t i) { return static_cast<uint8_t>(from * 101 + round * 13 + i * 7 + (i >> 11)); };
  std::vector<std::string> errors(2);
  world.run([&](int r, Communicator& comm) {
    std::string& e = errors[static_cast<size_t>(r)];
    for (int round = 0; round < 40 && e.empty(); ++round) {
      const size_t bytes = sizes[static_cast<size_t>(round) % sizes.size()];
      std::vector<uint8_t> out(bytes), in(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) out[i] = value(r, round, i);
      std::string path;
      if (r == 0) {
        comm.send(out.data(), bytes, DataType::uint8, 1, round);
        path = testing::last_algorithm(comm);
        comm.recv(in.data(), bytes, DataType::uint8, 1, round);
      } else {
        comm.recv(in.data(), bytes, DataType::uint8, 0, round);
        comm.send(out.data(), bytes, DataType::uint8, 0, round);
        path = testing::last_algorithm(comm);
      }
      const std::string want = single(bytes) ? "single_copy" : "ring";
      if (path != want) e = "round " + std::to_string(round) + " (" + std::to_string(bytes) + " bytes) went by " + path + ", not " + want;
      for (size_t i = 0; i < bytes && e.empty(); ++i)
        if (in[i] != value(1 - r, round, i)) e = "round " + std::to_string(round) + " (" + std::to_string(bytes) + " bytes): byte " + std::to_string(i) + " wrong";
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

INSTANTIATE_TEST_SUITE_P(Hosts, NativeP2PPaths, ::testing::Values(false, true),
                         host_kind);

// A crowded host's large sends wait in the sender's buffer for their receive; a program whose ranks all
// block in such a send before they receive (unsafe under MPI, where it may hang) still ends: a payload
// whose receive has not come within the engine's limit (200 ms) is read into a buffer and its sender
// released. Three rounds, so that the buffers of one are reused by the next.
TEST(NativeUnexpected, RanksThatAllSendBeforeTheyReceiveStillFinish) {
  Options o;
  o.params = {{"MPCOMM_CPUS", "1"}, {"MPCOMM_SINGLE_COPY", "1"}};
  const int n = 3;
  testing::ThreadWorld world("native", n, o);
  std::vector<std::string> errors(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    const size_t count = (size_t{1} << 18) + 5;  // a little over 1 MiB of floats
    for (int round = 0; round < 3; ++round) {
      std::vector<float> out(count), in(count, -1.0f);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(r * 1000 + round * 10) + static_cast<float>(i % 7);
      comm.send(out.data(), count, DataType::float32, (r + 1) % n, round);
      comm.recv(in.data(), count, DataType::float32, (r + n - 1) % n, round);
      const int from = (r + n - 1) % n;
      for (size_t i = 0; i < count; ++i)
        if (in[i] != static_cast<float>(from * 1000 + round * 10) + static_cast<float>(i % 7)) {
          errors[static_cast<size_t>(r)] += "round " + std::to_string(round) + " element " + std::to_string(i) + " wrong; ";
          break;
        }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

// MPCOMM_SINGLE_COPY=1 (the default, set for this communicator in case the environment turned it off): large collective frames are read straight from the sender's buffer
// (process_vm_readv; ranks as threads read their own process) and acknowledged; reducing receives go
// through the bounce buffer in pieces.
TEST(NativeSingleCopy, EveryOpWithReadsFromTheSendersBuffer) {
  Options o;
  o.params = {{"MPCOMM_SINGLE_COPY", "1"}};
  testing::ThreadWorld world("native", 3, o);
  expect_every_case_passes(world);
}

// Hosts interleaved and uneven (ranks 0, 2, 4 on A; 1, 3 on B): native runs the hierarchical
// allreduce, broadcast and reduce. Every root, so that the root is sometimes its host's lowest rank and
// sometimes not, on either host.
TEST(NativeHierarchical, EveryRootOnInterleavedUnevenHosts) {
  Options o;
  o.timeout = Millis(60000);
  const int n = 5;
  testing::ThreadWorld world("native", n, o, {"hostA", "hostB", "hostA", "hostB", "hostA"});
  ASSERT_EQ(world.comm(0).topology().num_hosts(), 2);
  for (OpKind op : {OpKind::allreduce, OpKind::broadcast, OpKind::reduce})
    for (int root = 0; root < n; ++root)
      for (size_t count : {size_t{0}, size_t{7}, size_t{300001}})
        for (ReduceOp redop : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
          if (op == OpKind::broadcast && redop != ReduceOp::sum) continue;
          check::Case c;
          c.op = op;
          c.dtype = redop == ReduceOp::avg ? DataType::float32 : DataType::int32;
          c.redop = redop;
          c.count = count;
          c.root = root;
          c.in_place = root % 2 == 1;
          std::vector<check::Result> res(n);
          world.run([&](int r, Communicator& comm) { res[r] = check::run_case(comm, c); });
          for (int r = 0; r < n; ++r)
            ASSERT_EQ(res[r].wrong, 0u) << check::describe(c) << " rank " << r << ": " << res[r].first_wrong;
        }
}

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
    // Blocking sends around the ring, ordered so that any backend completes them (even ranks send
    // first). The native backend also completes the unordered version (every rank sends first):
    // it receives into a side buffer while its own send waits. Gloo and MPI may deadlock there.
    const bool send_first = comm.backend() == "native" || r % 2 == 0 || n % 2 == 1;
    if (send_first) comm.send(a.data(), big, DataType::int32, right, 1);
    comm.recv(got_a.data(), big, DataType::int32, left, 1);
    if (!send_first) comm.send(a.data(), big, DataType::int32, right, 1);
    if (got_a[big - 1] != static_cast<int32_t>(left * 1000003 + big - 1)) throw std::runtime_error("blocking pair wrong");
    // Empty messages are messages too.
    if (send_first) comm.send(nullptr, 0, DataType::float32, right, 3);
    comm.recv(nullptr, 0, DataType::float32, left, 3);
    if (!send_first) comm.send(nullptr, 0, DataType::float32, right, 3);
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

// ---- the same suite with ranks as processes ----------------------------------------------------------

class ProcessConformance : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(ProcessConformance, FullMatrixThroughLaunch) {
  const auto& [backend, n, hosts] = GetParam();
  auto r = testing::run_command(std::string(MPCOMM_CLI) + " launch -n " + std::to_string(n) + " --hosts " +
                                std::to_string(hosts) + " --backend " + backend + " --timeout 120 -- " + MPCOMM_CLI +
                                " selftest --conformance");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("conformance: backend " + backend + ", " + std::to_string(n) + " ranks, "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << r.output;
}

std::vector<std::tuple<std::string, int, int>> process_params() {
  std::vector<std::tuple<std::string, int, int>> ps;
  for (const auto& b : kBackends) {
    ps.emplace_back(b, 3, 1);
    ps.emplace_back(b, 4, 2);
  }
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Launch, ProcessConformance, ::testing::ValuesIn(process_params()), [](const auto& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks_" +
         std::to_string(std::get<2>(info.param)) + "hosts";
});

// ---- several backends over the same ranks ------------------------------------------------------------

TEST(MultiBackend, EveryBackendOnTheSameRanksAtOnce) {
  // One store, one prefix per backend: a program can hold a communicator of each and use them in turn.
  const int n = 3;
  auto store = std::make_shared<HashStore>();
  std::vector<std::vector<std::unique_ptr<Communicator>>> comms(n);
  auto errs = testing::run_threads(n, [&](int r) {
    for (const auto& b : kBackends) {
      Options o;
      o.timeout = Millis(60000);
      comms[r].push_back(create(b, std::make_shared<PrefixStore>("multi/" + b, store), r, n, o));
    }
    for (int round = 0; round < 3; ++round)
      for (auto& c : comms[r]) {
        int64_t v = (r + 1) * (round + 1), sum = 0;
        c->allreduce(&v, &sum, 1, DataType::int64, ReduceOp::sum);
        if (sum != 6 * (round + 1)) throw std::runtime_error(std::string(c->backend()) + " gave " + std::to_string(sum));
      }
  });
  for (int r = 0; r < n; ++r) EXPECT_FALSE(errs[r]) << testing::message(errs[r]);
  EXPECT_EQ(comms[0].size(), kBackends.size());
}

INSTANTIATE_TEST_SUITE_P(All, Basics, ::testing::ValuesIn(kBackends), [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mpcomm
