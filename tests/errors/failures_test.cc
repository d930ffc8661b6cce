// Failures end in an mpcomm::Error on every rank involved, within the timeout, naming the op, its
// sequence number, the rank and the peer: mismatched calls, a peer that never calls, a rank that
// never joins, a rank killed with SIGKILL (processes, through `mpcomm launch`).
#include <dirent.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "harness/process.h"
#include "harness/thread_world.h"

namespace mpcomm {
namespace {

using std::chrono::steady_clock;
using testing::message;
using testing::run_command;
using testing::RunResult;
using testing::mpcomm_shm_entries;
using testing::count_processes_running;

double seconds_since(steady_clock::time_point t0) {
  return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

Options quick(int timeout_ms, int check = 0) {
  Options o;
  o.timeout = Millis(timeout_ms);
  o.check = check;
  return o;
}

template <class E>
std::string expect_error(const std::exception_ptr& e, const std::string& who) {
  if (!e) {
    ADD_FAILURE() << who << " did not fail";
    return "";
  }
  try {
    std::rethrow_exception(e);
  } catch (const E& x) {
    return x.what();
  } catch (const std::exception& x) {
    ADD_FAILURE() << who << " failed with the wrong error type: " << x.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- mismatches (ranks as threads) -----------------------------------------------------------------

TEST(Mismatch, DifferentCollectivesFailOnBothRanksNamingBothCalls) {
  testing::ThreadWorld world("native", 2, quick(20000));
  auto t0 = steady_clock::now();
  auto errs = world.run_collect([](int r, Communicator& c) {
    float buf[4] = {1, 2, 3, 4};
    if (r == 0)
      c.allreduce(buf, buf, 4, DataType::float32, ReduceOp::sum);
    else
      c.broadcast(buf, 4, DataType::float32, 0);
  });
  EXPECT_LT(seconds_since(t0), 5.0) << "a mismatch must not wait for the timeout";
  for (int r = 0; r < 2; ++r) {
    std::string m = expect_error<Mismatch>(errs[r], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "allreduce #0 (count 4, float32, sum)")) << m;
    EXPECT_TRUE(contains(m, "broadcast #0 (count 4, float32, root 0)")) << m;
  }
  // The communicator is aborted now: later calls fail at once with the reason.
  auto again = world.run_collect([](int, Communicator& c) { c.barrier(); });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(contains(message(again[r]), "aborted")) << message(again[r]);
}

TEST(Mismatch, SameOpDifferentCountOrDtypeFailsOnEveryRank) {
  for (int variant = 0; variant < 2; ++variant) {
    testing::ThreadWorld world("native", 3, quick(20000));
    auto errs = world.run_collect([&](int r, Communicator& c) {
      std::vector<double> buf(16, 1.0);
      size_t count = (variant == 0 && r == 2) ? 9 : 8;
      DataType dt = (variant == 1 && r == 1) ? DataType::int64 : DataType::float64;
      c.allreduce(buf.data(), buf.data(), count, dt, ReduceOp::sum);
    });
    for (int r = 0; r < 3; ++r) {
      std::string m = expect_error<Mismatch>(errs[r], "rank " + std::to_string(r));
      if (variant == 0) {
        EXPECT_TRUE(contains(m, "count 9") || contains(m, "count 8")) << m;
      } else {
        EXPECT_TRUE(contains(m, "int64") || contains(m, "float64")) << m;
      }
    }
  }
}

// On a host whose ranks outnumber its CPUs (threads: one more than the CPUs), small allreduces meet on
// the shared board (the arrival allreduce) and send no frames. A rank that calls something else must
// still fail at once, and so must every rank on the board: a broadcast whose rank waits for frames
// that never come (it reads the others' board tags), and an allreduce with another count (the last to
// arrive compares the tags).
TEST(Mismatch, OnTheBoardEveryRankFailsAtOnce) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  for (int variant = 0; variant < 2; ++variant) {
    testing::ThreadWorld world("native", n, quick(20000));
    auto t0 = steady_clock::now();
    auto errs = world.run_collect([&](int r, Communicator& c) {
      float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
      if (r == 1 && variant == 0)
        c.broadcast(buf, 4, DataType::float32, 0);
      else
        c.allreduce(buf, buf, r == 1 ? 5 : 4, DataType::float32, ReduceOp::sum);
    });
    EXPECT_LT(seconds_since(t0), 5.0) << "a mismatch must not wait for the timeout";
    for (int r = 0; r < n; ++r) {
      std::string m = expect_error<Mismatch>(errs[static_cast<size_t>(r)], "rank " + std::to_string(r));
      EXPECT_TRUE(contains(m, "allreduce #0 (count 4, float32, sum)")) << m;
      EXPECT_TRUE(contains(m, variant == 0 ? "broadcast #0 (count 4, float32, root 0)" : "allreduce #0 (count 5")) << m;
    }
  }
}

// On a host whose ranks outnumber its CPUs, broadcasts and allgathers from a few KiB meet in the ranks'
// stages (the staged flow) and send no frames. A receiver that calls something else must fail at once,
// naming both calls, and so must the root that waits for it to copy: an allgather (it reads the root's
// stage and its tag), a broadcast of another count, an allreduce that meets on the board (the root
// reads its tag while it waits). The other receivers may finish their broadcast first.
TEST(Mismatch, OnTheStagesTheRootAndTheOtherCallFailAtOnce) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  const size_t count = size_t{64} << 10;  // floats: 256 KiB, staged
  const char* other[] = {"allgather #0 (count 16384, float32)", "broadcast #0 (count 65537, float32, root 0)",
                         "allreduce #0 (count 4, float32, sum)"};
  for (int variant = 0; variant < 3; ++variant) {
    testing::ThreadWorld world("native", n, quick(20000));
    auto t0 = steady_clock::now();
    auto errs = world.run_collect([&](int r, Communicator& c) {
      std::vector<float> buf(count * static_cast<size_t>(n) + 1, 1.0f);
      if (r != 1) {
        c.broadcast(buf.data(), count, DataType::float32, 0);
      } else if (variant == 0) {
        c.allgather(buf.data(), buf.data() + count, count / 4, DataType::float32);
      } else if (variant == 1) {
        c.broadcast(buf.data(), count + 1, DataType::float32, 0);
      } else {
        c.allreduce(buf.data(), buf.data(), 4, DataType::float32, ReduceOp::sum);
      }
    });
    EXPECT_LT(seconds_since(t0), 5.0) << "a mismatch must not wait for the timeout (variant " << variant << ")";
    for (int r : {0, 1}) {
      std::string m = expect_error<Mismatch>(errs[static_cast<size_t>(r)], "rank " + std::to_string(r));
      EXPECT_TRUE(contains(m, "broadcast #0 (count 65536, float32, root 0)")) << m;
      EXPECT_TRUE(contains(m, other[variant])) << m;
    }
  }
}

// The staged allreduce (forced; the built-in table takes it on a crowded host from 8 MiB) meets in the
// ranks' stages and sends no frames. A rank that calls it with another count (forced: also staged; by
// the table: a small one, on the board) must make every rank fail at once, naming both calls; a rank
// that never calls, make the others time out naming it.
TEST(Mismatch, StagedAllreduceOfAnotherCountFailsEveryRankAtOnce) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  const size_t count = size_t{256} << 10;  // floats: 1 MiB
  Options o = quick(20000);
  o.params["MPCOMM_ALGO"] = "allreduce=staged";
  testing::ThreadWorld world("native", n, o);
  auto t0 = steady_clock::now();
  auto errs = world.run_collect([&](int r, Communicator& c) {
    std::vector<float> buf(count + 1, 1.0f);
    c.allreduce(buf.data(), buf.data(), r == 1 ? count + 1 : count, DataType::float32, ReduceOp::sum);
  });
  EXPECT_LT(seconds_since(t0), 5.0) << "a mismatch must not wait for the timeout";
  for (int r = 0; r < n; ++r) {
    std::string m = expect_error<Mismatch>(errs[static_cast<size_t>(r)], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "allreduce #0 (count 262144, float32, sum)")) << m;
    EXPECT_TRUE(contains(m, "allreduce #0 (count 262145, float32, sum)")) << m;
  }
  // By the built-in table: 8 MiB staged on every rank but one, whose 16 floats meet on the board.
  testing::ThreadWorld table("native", n, quick(20000));
  t0 = steady_clock::now();
  errs = table.run_collect([&](int r, Communicator& c) {
    std::vector<float> buf(size_t{2} << 20, 1.0f);
    c.allreduce(buf.data(), buf.data(), r == 1 ? 16 : buf.size(), DataType::float32, ReduceOp::sum);
  });
  EXPECT_LT(seconds_since(t0), 5.0) << "a mismatch must not wait for the timeout";
  for (int r = 0; r < n; ++r) {
    std::string m = expect_error<Mismatch>(errs[static_cast<size_t>(r)], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "allreduce #0 (count 2097152, float32, sum)")) << m;
    EXPECT_TRUE(contains(m, "allreduce #0 (count 16, float32, sum)")) << m;
  }
}

TEST(Timeout, StagedAllreduceNamesTheRankThatNeverCalls) {
  const int n = static_cast<int>(std::max<long>(3, ::sysconf(_SC_NPROCESSORS_ONLN) + 1));
  if (n > 16) GTEST_SKIP() << "too many CPUs to crowd with threads";
  Options o = quick(600);
  o.params["MPCOMM_ALGO"] = "allreduce=staged";
  testing::ThreadWorld world("native", n, o);
  auto t0 = steady_clock::now();
  auto errs = world.run_collect([&](int r, Communicator& c) {
    if (r == n - 1) return;  // never calls
    std::vector<float> buf(size_t{1} << 20, 1.0f);
    c.allreduce(buf.data(), buf.data(), buf.size(), DataType::float32, ReduceOp::sum);
  });
  const double took = seconds_since(t0);
  EXPECT_LT(took, 5.0);
  EXPECT_GE(took, 0.5);
  EXPECT_FALSE(errs[static_cast<size_t>(n - 1)]);
  const std::string last = "rank " + std::to_string(n - 1);
  for (int r = 0; r + 1 < n; ++r) {
    std::string m = expect_error<Timeout>(errs[static_cast<size_t>(r)], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "allreduce #0")) << m;
    EXPECT_TRUE(contains(m, last + " to publish its piece 1 of ")) << m;
    EXPECT_TRUE(contains(m, "(staged allreduce)")) << m;
  }
}

// MPCOMM_CHECK works the same on every backend that runs ranks as threads (mpi: tests/mpi).
using testing::thread_backends;  // mpi ranks are processes (tests/mpi); nccl: tests/gpu

class FingerprintCheck : public ::testing::TestWithParam<std::string> {};

TEST_P(FingerprintCheck, DifferentRootsFailOnBothRanksNamingBothRoots) {
  // A broadcast whose two ranks both think they are root moves no frame that either rank receives;
  // the fingerprint exchange still reports it, on both ranks, naming both roots.
  testing::ThreadWorld world(GetParam(), 2, quick(20000, /*check=*/1));
  auto errs = world.run_collect([](int r, Communicator& c) {
    int32_t v[2] = {r, r};
    c.broadcast(v, 2, DataType::int32, r);
  });
  for (int r = 0; r < 2; ++r) {
    std::string m = expect_error<Mismatch>(errs[r], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "root 0")) << m;
    EXPECT_TRUE(contains(m, "root 1")) << m;
    EXPECT_TRUE(contains(m, "[" + GetParam() + "]")) << m;
  }
}

TEST_P(FingerprintCheck, DifferentCollectivesFailOnEveryRank) {
  testing::ThreadWorld world(GetParam(), 3, quick(20000, 1));
  auto errs = world.run_collect([](int r, Communicator& c) {
    float buf[6] = {};
    if (r == 1)
      c.allgather(buf, buf + 2, 2, DataType::float32);
    else
      c.allreduce(buf, buf, 2, DataType::float32, ReduceOp::max);
  });
  for (int r = 0; r < 3; ++r) {
    std::string m = expect_error<Mismatch>(errs[r], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "allgather #0")) << m;
    EXPECT_TRUE(contains(m, "allreduce #0")) << m;
  }
}

TEST_P(FingerprintCheck, MatchingCallsPass) {
  testing::ThreadWorld world(GetParam(), 3, quick(20000, 1));
  world.run([](int r, Communicator& c) {
    int32_t v = r, s = 0;
    for (int i = 0; i < 10; ++i) c.allreduce(&v, &s, 1, DataType::int32, ReduceOp::sum);
    if (s != 3) throw std::runtime_error("wrong sum");
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, FingerprintCheck, ::testing::ValuesIn(thread_backends()),
                         [](const auto& info) { return info.param; });

// ---- the uneven ops: ranks that disagree on a count (ranks as threads) -------------------------------

// Every backend, with and without MPCOMM_CHECK: a size disagreement fails within moments, never writes a
// byte the receiver did not expect, and is a Mismatch naming both ranks. Where the front door checks the
// counts (every backend but native; native too under MPCOMM_CHECK) every rank fails with that one
// Mismatch; native without it fails at the receiver of the wrong frame (naming its sender), and the
// others with that Mismatch or as its peers (PeerFailure), or not at all when they were done.
class UnevenCounts : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  // Runs `call` on 3 ranks; checks the failures and returns each rank's message.
  std::vector<std::string> run_disagreeing(const std::function<void(int, Communicator&)>& call) {
    const auto& [backend, check] = GetParam();
    testing::ThreadWorld world(backend, 3, quick(20000, check));
    auto t0 = steady_clock::now();
    auto errs = world.run_collect(call);
    EXPECT_LT(seconds_since(t0), 10.0) << "a size disagreement must not wait for the timeout";
    std::vector<std::string> out;
    int mismatches = 0;
    for (int r = 0; r < 3; ++r) {
      out.push_back(message(errs[static_cast<size_t>(r)]));
      if (!errs[static_cast<size_t>(r)]) continue;
      try {
        std::rethrow_exception(errs[static_cast<size_t>(r)]);
      } catch (const Mismatch&) {
        ++mismatches;
      } catch (const PeerFailure&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " failed with neither a Mismatch nor a PeerFailure: " << e.what();
      }
    }
    const bool every_rank = backend != "native" || check != 0;
    EXPECT_EQ(mismatches, every_rank ? 3 : mismatches) << out[0] << "\n" << out[1] << "\n" << out[2];
    EXPECT_GE(mismatches, 1) << out[0] << "\n" << out[1] << "\n" << out[2];
    return out;
  }
  static bool any_contains(const std::vector<std::string>& ms, const std::string& part) {
    return std::any_of(ms.begin(), ms.end(), [&](const std::string& m) { return contains(m, part); });
  }
};

TEST_P(UnevenCounts, AlltoallvWhereASenderAndItsReceiverDisagree) {
  // Rank 1 sends rank 2 three elements; rank 2 expects two. Every other pair agrees (one element).
  const auto ms = run_disagreeing([](int r, Communicator& c) {
    std::vector<size_t> send_counts(3, 1), recv_counts(3, 1);
    if (r == 1) send_counts[2] = 3;
    if (r == 2) recv_counts[1] = 2;
    const std::vector<size_t> displs = {0, 4, 8};
    std::vector<int64_t> in(12, r), out(12, -7);
    c.alltoallv(in.data(), send_counts, displs, out.data(), recv_counts, displs, DataType::int64);
    if (r == 2 && out[5] != -7) throw std::runtime_error("rank 2 got a byte past its block from rank 1");
  });
  if (std::get<0>(GetParam()) == "native" && std::get<1>(GetParam()) == 0)
    EXPECT_TRUE(any_contains(ms, "on rank 2 of 3 [native]: expected 16 bytes from rank 1 but it sent 24")) << ms[2];
  else
    for (const auto& m : ms)
      EXPECT_TRUE(contains(m, "rank 1 sends 3 elements to rank 2, which expects 2 (send_counts[2] on rank 1, "
                              "recv_counts[1] on rank 2)")) << m;
}

TEST_P(UnevenCounts, AllgathervWhereRanksDisagreeOnTheCounts) {
  // Rank 2 expects 4 elements from rank 0 and 6 from rank 1, which send 5 each: the totals agree.
  const auto ms = run_disagreeing([](int r, Communicator& c) {
    std::vector<size_t> counts = {5, 5, 5};
    if (r == 2) counts = {4, 6, 5};
    const std::vector<size_t> displs = {0, 8, 16};
    std::vector<float> in(5, static_cast<float>(r)), out(24, -7);
    c.allgatherv(in.data(), 5, out.data(), counts, displs, DataType::float32);
  });
  if (std::get<0>(GetParam()) == "native" && std::get<1>(GetParam()) == 0)
    EXPECT_TRUE(any_contains(ms, "on rank 2 of 3 [native]: expected")) << ms[2];
  else
    for (const auto& m : ms)
      EXPECT_TRUE(contains(m, "rank 0 sends 5 elements to rank 2, which expects 4 (recv_counts[0] on rank 0 and on rank 2)"))
          << m;
}

TEST_P(UnevenCounts, AllgathervWhereTheTotalsDiffer) {
  // Rank 1 expects 3 elements from rank 0, which sends 5: the totals differ, which the fingerprint shows.
  const auto ms = run_disagreeing([](int r, Communicator& c) {
    std::vector<size_t> counts = {5, 5, 5};
    if (r == 1) counts = {3, 5, 5};
    const std::vector<size_t> displs = {0, 8, 16};
    std::vector<int8_t> in(5, static_cast<int8_t>(r)), out(24, -7);
    c.allgatherv(in.data(), 5, out.data(), counts, displs, DataType::int8);
  });
  // The fingerprints (native frames, or MPCOMM_CHECK's exchange, which comes first) name both totals.
  const bool fingerprints = std::get<0>(GetParam()) == "native" || std::get<1>(GetParam()) == 1;
  EXPECT_TRUE(any_contains(ms, fingerprints ? "allgatherv #0 (total 13, int8)" : "rank 0 sends 5 elements to rank 1, which expects 3"))
      << ms[0] << "\n" << ms[1] << "\n" << ms[2];
}

// The counts of an i-op are its own from the call on: the caller's arrays may change at once.
TEST_P(UnevenCounts, AnIopKeepsTheCountsOfItsCall) {
  const auto& [backend, check] = GetParam();
  testing::ThreadWorld world(backend, 3, quick(20000, check));
  world.run([](int r, Communicator& c) {
    std::vector<size_t> send_counts = {1, 2, 3}, recv_counts = {static_cast<size_t>(r) + 1, static_cast<size_t>(r) + 1,
                                                                 static_cast<size_t>(r) + 1};
    std::vector<size_t> send_displs = {0, 1, 3}, recv_displs = {0, 4, 8};
    std::vector<int32_t> in(6), out(12, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(100 * r + i);
    Request q = c.ialltoallv(in.data(), send_counts, send_displs, out.data(), recv_counts, recv_displs, DataType::int32);
    std::fill(send_counts.begin(), send_counts.end(), 99);  // nonsense now: the request must not see it
    std::fill(recv_displs.begin(), recv_displs.end(), 0);
    q.wait();
    // From rank p: block r of p's send buffer (r+1 elements at p's displacement r).
    const size_t first[3] = {0, 1, 3};
    for (size_t p = 0; p < 3; ++p)
      for (size_t k = 0; k < static_cast<size_t>(r) + 1; ++k)
        if (out[4 * p + k] != static_cast<int32_t>(100 * p + first[r] + k))
          throw std::runtime_error("rank " + std::to_string(r) + ": element " + std::to_string(k) + " from rank " +
                                   std::to_string(p) + " is " + std::to_string(out[4 * p + k]));
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, UnevenCounts,
                         ::testing::Combine(::testing::ValuesIn(thread_backends()), ::testing::Values(0, 1)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_check" : "");
                         });

// ---- timeouts (ranks as threads) -------------------------------------------------------------------

TEST(Timeout, APeerThatNeverCallsGivesATimeoutNamingIt) {
  testing::ThreadWorld world("native", 3, quick(600));
  auto t0 = steady_clock::now();
  auto errs = world.run_collect([](int r, Communicator& c) {
    if (r == 2) return;  // never calls
    float x = 1;
    c.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
  });
  double took = seconds_since(t0);
  EXPECT_LT(took, 5.0);
  EXPECT_GE(took, 0.5);
  EXPECT_FALSE(errs[2]);
  bool named = false;
  for (int r = 0; r < 2; ++r) {
    std::string m = message(errs[r]);
    EXPECT_TRUE(contains(m, "allreduce #0")) << m;
    // Directly (the rank waits for rank 2), or through "who is behind" (the algorithm has this rank wait
    // for another rank, which itself waits for rank 2).
    named = named || contains(m, "waiting for rank 2") || contains(m, "behind: rank 2 has entered no collective");
  }
  EXPECT_TRUE(named) << message(errs[0]) << " / " << message(errs[1]);
}

TEST(Timeout, ARankThatNeverJoinsIsNamed) {
  auto store = std::make_shared<HashStore>();
  auto t0 = steady_clock::now();
  auto errs = testing::run_threads(2, [&](int r) { create("native", store, r, 3, quick(500)); });
  EXPECT_LT(seconds_since(t0), 5.0);
  for (int r = 0; r < 2; ++r) {
    std::string m = expect_error<Timeout>(errs[r], "rank " + std::to_string(r));
    EXPECT_TRUE(contains(m, "rank 2 never showed up")) << m;
  }
}

// ---- processes through mpcomm launch ---------------------------------------------------------------

const std::string kLaunch = std::string(MPCOMM_CLI) + " launch";
const std::string kProg = MPCOMM_TESTPROG;

TEST(Processes, EmulatedHostsSplitRanksInBlocks) {
  RunResult r = run_command(kLaunch + " -n 4 --hosts 2 -- " + kProg + " topology");
  ASSERT_EQ(r.status, 0) << r.output;
  // Ranks 0-1 on one host, 2-3 on the other; two local ranks each.
  for (int rank = 0; rank < 4; ++rank) {
    std::string want = "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " host ";
    auto pos = r.output.find(want);
    ASSERT_NE(pos, std::string::npos) << r.output;
    std::string line = r.output.substr(pos, r.output.find('\n', pos) - pos);
    EXPECT_TRUE(contains(line, rank < 2 ? "-h0 " : "-h1 ")) << line;
    EXPECT_TRUE(contains(line, "local " + std::to_string(rank % 2) + "/2 hosts 2")) << line;
  }
}

TEST(Processes, SelftestPassesAcrossProcessesAndHosts) {
  for (const char* hosts : {"1", "2"}) {
    RunResult r = run_command(kLaunch + " -n 4 --hosts " + hosts + " --timeout 60 -- " + MPCOMM_CLI +
                              " selftest -n 2 -c 0,1,7,1000,100003 -d float,bfloat16,int8");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "0 wrong elements: OK")) << r.output;
  }
}

// (backend, emulated hosts, forced native algorithm). MPI's variant lives with the MPI tests (it runs
// under mpirun). With the arrival allreduce (16 floats) the survivors wait on the shared board, with the
// staged one in the stages, not for frames, and must still fail fast. (Who notices first, their own watch or the launcher's notice,
// varies: Processes.ARankThatLeavesIsNamedByTheOthers checks the watch alone.)
class KilledRank : public ::testing::TestWithParam<std::tuple<std::string, int, std::string>> {};

TEST_P(KilledRank, SurvivorsFailFastAndNothingIsLeftBehind) {
  const auto& [backend, hosts, algo] = GetParam();
  const std::string tag = testing::unique_tag();
  RunResult r = run_command((algo.empty() ? "" : "MPCOMM_ALGO=allreduce=" + algo + " ") + kLaunch + " -n 4 --backend " +
                            backend + " --hosts " + std::to_string(hosts) + " --timeout 20 -- " + kProg + " kill 2 5 " +
                            tag + (algo.empty() ? "" : " 16"));
  // The launcher reports the killed rank's status (128 + SIGKILL) and every survivor its error.
  EXPECT_EQ(r.status, 137) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  for (int s : {0, 1, 3}) {
    std::string tag = "[" + std::to_string(s) + "] rank " + std::to_string(s) + " failed after ";
    std::string line = testing::line_with(r.output, tag);
    ASSERT_FALSE(line.empty()) << "rank " << s << " did not report a failure:\n" << r.output;
    EXPECT_TRUE(contains(line, "peer failure")) << line;
    EXPECT_TRUE(contains(line, "allreduce #")) << line;
    double after = std::atof(line.c_str() + line.find(tag) + tag.size());
    EXPECT_LT(after, 20.0) << line;  // within the timeout
  }
  // This job's segments (named after its job id) must all be gone.
  std::string job = testing::line_with(r.output, "[0] job ");
  ASSERT_FALSE(job.empty()) << r.output;
  job = job.substr(job.find("[0] job ") + 8);
  for (const auto& e : mpcomm_shm_entries()) EXPECT_EQ(e.find("mpcomm." + job), std::string::npos) << "left behind: " << e;
  EXPECT_EQ(count_processes_running(kProg, tag), 0) << "orphaned ranks";
}

std::vector<std::tuple<std::string, int, std::string>> killed_rank_params() {
  std::vector<std::tuple<std::string, int, std::string>> ps = {{"native", 1, ""}, {"native", 2, ""}, {"native", 1, "arrival"}, {"native", 1, "staged"}};
  for (const auto& b : available_backends())
    if (b == "gloo") ps.emplace_back("gloo", 1, "");
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Backends, KilledRank, ::testing::ValuesIn(killed_rank_params()), [](const auto& info) {
  const std::string& algo = std::get<2>(info.param);
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "hosts" + (algo.empty() ? "" : "_" + algo);
});

// `testprog MODE VICTIM AT TAG` on 3 ranks under `mpcomm launch LAUNCH_ARGS`: by frames (allreduces of
// 1 MiB), or on the board (the arrival allreduce forced, allreduces of 3000 floats: a result of 3
// chunks that the waiting ranks share).
RunResult run_three(const std::string& launch_args, const std::string& prog_args, const std::string& tag, bool board) {
  return run_command((board ? "MPCOMM_ALGO=allreduce=arrival " : "") + kLaunch + " -n 3 " + launch_args + " -- " + kProg +
                     " " + prog_args + " " + tag + (board ? " 3000" : ""));
}

// Frames, then the board (where the report also says whose input is missing).
TEST(Processes, AStalledRankMakesTheOthersTimeOut) {
  for (bool board : {false, true}) {
    const std::string tag = testing::unique_tag();
    RunResult r = run_three("--timeout 2 --grace 5", "stall 1 2", tag, board);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_LT(r.seconds, 20.0) << r.output;
    EXPECT_TRUE(contains(r.output, "timeout")) << r.output;
    // The rank everybody ends up waiting for may be a bystander; the report names the one behind.
    EXPECT_TRUE(contains(r.output, "behind: rank 1 is still before it")) << r.output;
    if (board) {
      EXPECT_TRUE(contains(r.output, "rank 1 to leave its input on the board")) << r.output;
    }
    EXPECT_EQ(count_processes_running(kProg, tag), 0) << "orphaned ranks";
  }
}

// A rank that returns (destroying its communicator, exit status 0: the launcher sees nothing wrong)
// while the others wait for it: they fail with a peer failure naming it, long before the timeout. By
// frames and on the board (there the others watch the ranks whose input is missing).
TEST(Processes, ARankThatLeavesIsNamedByTheOthers) {
  for (bool board : {false, true}) {
    const std::string tag = testing::unique_tag();
    RunResult r = run_three("--timeout 60", "leave 1 3", tag, board);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_LT(r.seconds, 30.0) << r.output;
    for (int s : {0, 2}) {
      std::string line = testing::line_with(r.output, "[" + std::to_string(s) + "] rank " + std::to_string(s) + " failed after ");
      EXPECT_TRUE(contains(line, "rank 1 destroyed its communicator while this rank waited for it")) << r.output;
    }
    EXPECT_EQ(count_processes_running(kProg, tag), 0) << "orphaned ranks";
  }
}

// The same as Mismatch.OnTheBoardEveryRankFailsAtOnce, as processes with the arrival allreduce forced
// (whatever this machine's CPU count): after 3 good calls rank 1 calls broadcast; every rank reports
// the mismatch, naming both calls.
TEST(Processes, AMismatchOnTheBoardFailsEveryRank) {
  const std::string tag = testing::unique_tag();
  RunResult r = run_three("--timeout 60", "mismatch 1 3", tag, /*board=*/true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  for (int s : {0, 1, 2}) {
    std::string line = testing::line_with(r.output, "[" + std::to_string(s) + "] rank " + std::to_string(s) + " failed after ");
    EXPECT_TRUE(contains(line, ": mismatch: ")) << r.output;
    EXPECT_TRUE(contains(line, "broadcast #")) << line;
    EXPECT_TRUE(contains(line, "allreduce #")) << line;
  }
  EXPECT_EQ(count_processes_running(kProg, tag), 0) << "orphaned ranks";
}

}  // namespace
}  // namespace mpcomm
