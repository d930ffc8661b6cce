// Non-blocking collectives on every thread backend, through the conformance checker: queues of mixed
// i-ops waited in reverse order, computation between post and wait, blocking and non-blocking calls
// interleaved, progress without test(), and issue order. Results must be exact (the checker's inputs
// make every reduction exact in any order).
#include <gtest/gtest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "harness/thread_world.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

using testing::thread_backends;

// Ten cases of mixed kinds, dtypes, sizes and placements (one of 2^20 + 3 elements, so that a queue
// holds something that takes a while; the uneven ops with a block of 2^20 + 3 elements and empty ones,
// their count arrays gone before the requests complete), the same on every rank.
std::vector<check::Case> mixed_cases(int n) {
  using check::Case;
  const int root = n - 1;
  return {
      Case{OpKind::allreduce, DataType::float32, ReduceOp::sum, (size_t{1} << 20) + 3, 0, false},
      Case{OpKind::broadcast, DataType::int32, ReduceOp::sum, 1000, root, false},
      Case{OpKind::reduce, DataType::bfloat16, ReduceOp::max, 777, root, true},
      Case{OpKind::allgather, DataType::int8, ReduceOp::sum, 333, 0, false},
      Case{OpKind::reduce_scatter, DataType::float64, ReduceOp::avg, 257, 0, true},
      Case{OpKind::gather, DataType::float16, ReduceOp::sum, 100, 0, false},
      Case{OpKind::scatter, DataType::int64, ReduceOp::sum, 65, root, true},
      Case{OpKind::alltoall, DataType::uint8, ReduceOp::sum, 4099, 0, false},
      Case{OpKind::alltoallv, DataType::float32, ReduceOp::sum, (size_t{1} << 20) + 3, 0, false},
      Case{OpKind::allgatherv, DataType::bfloat16, ReduceOp::sum, 5001, 0, true},
  };
}

// Something for the caller to do while its ops are in flight.
double compute_a_while() {
  double x = 0;
  for (int i = 1; i < 2000000; ++i) x += std::sqrt(static_cast<double>(i));
  return x;
}

class NonBlocking : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Every rank's result of every case: 0 wrong elements.
void expect_exact(const std::vector<std::vector<check::Result>>& results, const std::vector<check::Case>& cases) {
  for (size_t r = 0; r < results.size(); ++r)
    for (size_t i = 0; i < cases.size(); ++i)
      EXPECT_EQ(results[r][i].wrong, 0u) << check::describe(cases[i]) << " on rank " << r << ": "
                                         << results[r][i].first_wrong;
}

TEST_P(NonBlocking, TenMixedOpsWaitedInReverseAreExact) {
  const auto& [backend, n] = GetParam();
  auto& world = testing::shared_world(backend, n);
  const auto cases = mixed_cases(n);
  std::vector<std::vector<check::Result>> results(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    std::vector<check::PreparedCase> prepared;
    for (const auto& c : cases) prepared.emplace_back(comm, c);
    std::vector<Request> reqs;
    for (auto& p : prepared) reqs.push_back(p.post());
    Request barrier = comm.ibarrier();
    volatile double sink = compute_a_while();
    (void)sink;
    barrier.wait();
    for (size_t i = reqs.size(); i-- > 0;) reqs[i].wait();
    for (auto& p : prepared) results[static_cast<size_t>(r)].push_back(p.verify());
  });
  expect_exact(results, cases);
}

TEST_P(NonBlocking, BlockingAndNonBlockingInterleaved) {
  const auto& [backend, n] = GetParam();
  auto& world = testing::shared_world(backend, n);
  const auto cases = mixed_cases(n);
  std::vector<std::vector<check::Result>> results(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    std::vector<check::PreparedCase> prepared;
    for (const auto& c : cases) prepared.emplace_back(comm, c);
    std::vector<Request> reqs;
    for (size_t i = 0; i < prepared.size(); ++i) {
      if (i % 2 == 0)
        reqs.push_back(prepared[i].post());
      else
        prepared[i].run();  // waits for the ops issued before it, then runs on this thread
    }
    for (auto& q : reqs) q.wait();
    for (auto& p : prepared) results[static_cast<size_t>(r)].push_back(p.verify());
  });
  expect_exact(results, cases);
}

// Nobody calls anything that could drive the op (test() on a queued or running collective only looks
// at its state): it completes on the progress thread while the caller sleeps.
TEST_P(NonBlocking, CompletesWithoutTheCallersHelp) {
  const auto& [backend, n] = GetParam();
  auto& world = testing::shared_world(backend, n);
  std::vector<int> completed(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    std::vector<float> x(size_t{1} << 18, 1.0f);
    Request q = comm.iallreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!q.test() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    completed[static_cast<size_t>(r)] = q.test() && x[0] == static_cast<float>(n) && x.back() == static_cast<float>(n);
    q.wait();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(completed[r]) << "rank " << r;
}

// A large send and its receive in flight while neither rank touches its request: the progress thread,
// which nobody wakes for them, finds them by itself and moves the whole message through the shared-memory
// ring (32 MiB: many ring's worths, each needing the sender to refill it), so that a single test() after
// 300 ms finds both done. (One test() moves at most a ring's worth: without the progress thread they would
// still be in flight.)
TEST(NonBlockingP2P, LargeSendAndReceiveProgressWithoutTheCallers) {
  Options o;
  o.params["MPCOMM_SINGLE_COPY"] = "0";  // through the ring, whatever the CPUs
  testing::ThreadWorld world("native", 2, o);
  std::vector<int> done(2), right(2);
  world.run([&](int r, Communicator& comm) {
    const size_t count = size_t{8} << 20;  // 32 MiB of int32
    std::vector<int32_t> buf(count, r == 0 ? 7 : -1);
    comm.barrier();
    Request q = r == 0 ? comm.isend(buf.data(), count, DataType::int32, 1, 5)
                       : comm.irecv(buf.data(), count, DataType::int32, 0, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    done[static_cast<size_t>(r)] = q.test();
    q.wait();
    right[static_cast<size_t>(r)] = buf.front() == 7 && buf.back() == 7;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(done[static_cast<size_t>(r)]) << "rank " << r << ": still in flight after 300 ms";
    EXPECT_TRUE(right[static_cast<size_t>(r)]) << "rank " << r;
  }
}

// Issue order: when a later op has completed, every op issued before it has too; a Request waited twice
// returns at once.
TEST_P(NonBlocking, OpsCompleteInIssueOrder) {
  const auto& [backend, n] = GetParam();
  auto& world = testing::shared_world(backend, n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    std::vector<std::vector<int32_t>> bufs(6, std::vector<int32_t>(4096, r));
    std::vector<Request> reqs;
    for (auto& b : bufs) reqs.push_back(comm.iallreduce(b.data(), b.data(), b.size(), DataType::int32, ReduceOp::sum));
    reqs.back().wait();
    for (size_t i = 0; i < reqs.size(); ++i)
      if (!reqs[i].test()) errors[static_cast<size_t>(r)] += "op " + std::to_string(i) + " not done; ";
    for (auto& q : reqs) q.wait();
    reqs.back().wait();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// on_complete: every request's callback is called exactly once without anybody waiting — collectives
// and a ring of isend/irecv (on gloo, whose tests are not cheap, too) — with the results in place; a
// callback given after the op ended runs at once; a second callback is refused.
TEST_P(NonBlocking, CompletionCallbacksFireWithoutWaiting) {
  const auto& [backend, n] = GetParam();
  auto& world = testing::shared_world(backend, n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    std::string& err = errors[static_cast<size_t>(r)];
    constexpr int kOps = 6;
    std::vector<std::vector<int32_t>> bufs(kOps, std::vector<int32_t>(5000, r + 1));
    std::vector<int32_t> ring_in(777, -1), ring_out(777, r);
    std::vector<Request> reqs;
    for (auto& b : bufs) reqs.push_back(comm.iallreduce(b.data(), b.data(), b.size(), DataType::int32, ReduceOp::sum));
    if (n > 1) {
      reqs.push_back(comm.irecv(ring_in.data(), ring_in.size(), DataType::int32, (r + n - 1) % n, 5));
      reqs.push_back(comm.isend(ring_out.data(), ring_out.size(), DataType::int32, (r + 1) % n, 5));
    }
    std::vector<std::atomic<int>> calls(reqs.size());
    std::vector<std::atomic<bool>> failed(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i)
      reqs[i].on_complete([&, i](std::exception_ptr e) {
        failed[i] = e != nullptr;
        calls[i].fetch_add(1);
      });
    try {
      reqs[0].on_complete([](std::exception_ptr) {});
      err += "a second callback was taken; ";
    } catch (const InvalidArgument&) {
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto all_called = [&] {
      for (auto& c : calls)
        if (c.load() == 0) return false;
      return true;
    };
    while (!all_called() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (calls[i].load() != 1) err += "request " + std::to_string(i) + " called back " + std::to_string(calls[i]) + " times; ";
      if (failed[i]) err += "request " + std::to_string(i) + " failed; ";
    }
    const int32_t sum = n * (n + 1) / 2;
    for (auto& b : bufs)
      if (b.front() != sum || b.back() != sum) err += "allreduce result wrong; ";
    if (n > 1 && (ring_in.front() != (r + n - 1) % n || ring_in.back() != (r + n - 1) % n)) err += "ring result wrong; ";
    for (auto& q : reqs) q.wait();
    Request done = comm.ibarrier();
    done.wait();
    int late = 0;
    done.on_complete([&](std::exception_ptr e) { late += e ? 100 : 1; });  // given after the end: runs here, now
    if (late != 1) err += "a callback given after the end did not run at once; ";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

std::vector<std::tuple<std::string, int>> params() {
  std::vector<std::tuple<std::string, int>> ps;
  for (const auto& b : thread_backends())
    for (int n : {1, 2, 3, 4}) ps.emplace_back(b, n);
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Backends, NonBlocking, ::testing::ValuesIn(params()), [](const auto& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
});

// Threads of this process (/proc/self/task).
int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

// The progress thread ends with its communicator.
TEST(NonBlockingThreads, ProgressThreadsEndWithTheirCommunicators) {
  for (const auto& backend : thread_backends()) {
    const int before = thread_count();
    {
      testing::ThreadWorld world(backend, 3);
      world.run([&](int r, Communicator& comm) {
        int32_t v = r;
        comm.iallreduce(&v, &v, 1, DataType::int32, ReduceOp::sum).wait();
        EXPECT_EQ(v, 3);
      });
      EXPECT_GE(thread_count(), before + 3) << backend << ": one progress thread per communicator";
    }
    EXPECT_EQ(thread_count(), before) << backend;
  }
}

}  // namespace
}  // namespace mpcomm
