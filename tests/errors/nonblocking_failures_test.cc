// A failure in the middle of a queue of non-blocking ops (a timeout, a mismatch; a killed peer in the
// process tests) fails that request, with the same kind and message as the blocking call, and every
// later request at once; nothing hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "harness/process.h"
#include "harness/thread_world.h"

namespace mpcomm {
namespace {

using testing::thread_backends;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

struct Outcome {
  std::vector<std::string> kinds;     // per request: "ok" or the error code's name
  std::vector<std::string> messages;  // per request: the error's message
  std::string post_after;             // once a request failed: the error of one more post
};

// Every rank posts kQueue iallreduces; rank `odd` behaves as `mode` says at request kAt: "stall" (posts
// nothing more), "broadcast" (posts an ibroadcast there instead). Every rank then waits on its requests
// in order and records how each ended.
constexpr int kQueue = 8, kAt = 3;

std::vector<Outcome> run_queue(const std::string& backend, const std::string& mode, Options opts) {
  const int n = 3, odd = 2;
  testing::ThreadWorld world(backend, n, opts);
  std::vector<Outcome> out(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    std::vector<std::vector<float>> bufs(kQueue, std::vector<float>(1000, 1.0f));
    std::vector<Request> reqs;
    for (int i = 0; i < kQueue; ++i) {
      auto& b = bufs[static_cast<size_t>(i)];
      if (r == odd && i == kAt && mode == "stall") break;
      if (r == odd && i == kAt && mode == "broadcast")
        reqs.push_back(comm.ibroadcast(b.data(), b.size(), DataType::float32, 0));
      else
        reqs.push_back(comm.iallreduce(b.data(), b.data(), b.size(), DataType::float32, ReduceOp::sum));
    }
    Outcome& o = out[static_cast<size_t>(r)];
    // Each request's completion callback hears the same outcome as its wait().
    // (A callback may run just after wait() returned, on the thread that ended the op.)
    std::mutex heard_mu;
    std::vector<std::string> heard(reqs.size(), "not called");
    for (size_t i = 0; i < reqs.size(); ++i)
      reqs[i].on_complete([&heard, &heard_mu, i](std::exception_ptr e) {
        std::string what = "ok";
        if (e) try {
            std::rethrow_exception(e);
          } catch (const Error& err) {
            what = to_string(err.code());
          } catch (...) {
            what = "not an mpcomm error";
          }
        std::lock_guard<std::mutex> g(heard_mu);
        heard[i] = what;
      });
    for (auto& q : reqs) {
      try {
        q.wait();
        o.kinds.emplace_back("ok");
        o.messages.emplace_back("");
      } catch (const Error& e) {
        o.kinds.emplace_back(to_string(e.code()));
        o.messages.emplace_back(e.what());
      }
    }
    if (std::find(o.kinds.begin(), o.kinds.end(), "peer failure") != o.kinds.end()) try {
        comm.iallreduce(bufs[0].data(), bufs[0].data(), bufs[0].size(), DataType::float32, ReduceOp::sum).wait();
        o.post_after = "posted";
      } catch (const Error& e) {
        o.post_after = e.what();
      }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::unique_lock<std::mutex> g(heard_mu);
    while (std::find(heard.begin(), heard.end(), "not called") != heard.end() &&
           std::chrono::steady_clock::now() < give_up) {
      g.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      g.lock();
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(heard[i], o.kinds[i]) << "rank " << r << " request " << i << ": callback against wait()";
    // The stalled rank stays out of the way until the others have timed out.
    if (r == odd && mode == "stall") std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  });
  return out;
}

// The requests after the failed one all fail at once, naming themselves and the first failure.
void expect_rest_aborted(const Outcome& o, int r, const std::string& first) {
  for (int i = kAt + 1; i < kQueue; ++i) {
    EXPECT_EQ(o.kinds[static_cast<size_t>(i)], "peer failure") << "rank " << r << " request " << i;
    EXPECT_TRUE(contains(o.messages[static_cast<size_t>(i)], "allreduce #" + std::to_string(i)))
        << o.messages[static_cast<size_t>(i)];
    EXPECT_TRUE(contains(o.messages[static_cast<size_t>(i)], "communicator was aborted: " + first))
        << o.messages[static_cast<size_t>(i)];
  }
}

class QueueFailure : public ::testing::TestWithParam<std::string> {};

TEST_P(QueueFailure, ATimeoutFailsThatRequestAndEveryLaterOne) {
  Options opts;
  opts.timeout = Millis(1000);
  const auto t0 = std::chrono::steady_clock::now();
  auto out = run_queue(GetParam(), "stall", opts);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  for (int r : {0, 1}) {
    const Outcome& o = out[static_cast<size_t>(r)];
    ASSERT_EQ(o.kinds.size(), size_t{kQueue});
    for (int i = 0; i < kAt; ++i) EXPECT_EQ(o.kinds[static_cast<size_t>(i)], "ok") << "rank " << r << " request " << i;
    const std::string& first = o.messages[kAt];
    // A survivor either timed out itself or heard of the other survivor's timeout first.
    EXPECT_TRUE(o.kinds[kAt] == "timeout" || o.kinds[kAt] == "peer failure") << first;
    EXPECT_TRUE(contains(first, "allreduce #3")) << first;
    expect_rest_aborted(o, r, first);
    // A post on the aborted communicator is refused, naming the number it would have had.
    EXPECT_TRUE(contains(o.post_after, "allreduce #8 ") && contains(o.post_after, "communicator was aborted")) << o.post_after;
  }
}

TEST_P(QueueFailure, AMismatchFailsThatRequestAndEveryLaterOne) {
  Options opts;
  opts.timeout = Millis(20000);
  opts.check = GetParam() == "native" ? 0 : 1;  // native finds it in its frames; the others need MPCOMM_CHECK
  auto out = run_queue(GetParam(), "broadcast", opts);
  for (int r : {0, 1, 2}) {
    const Outcome& o = out[static_cast<size_t>(r)];
    ASSERT_EQ(o.kinds.size(), size_t{kQueue});
    for (int i = 0; i < kAt; ++i) EXPECT_EQ(o.kinds[static_cast<size_t>(i)], "ok") << "rank " << r << " request " << i;
    const std::string& first = o.messages[kAt];
    EXPECT_TRUE(o.kinds[kAt] == "mismatch" || o.kinds[kAt] == "peer failure") << "rank " << r << ": " << first;
    EXPECT_TRUE(contains(first, "#3")) << first;
    for (int i = kAt + 1; i < kQueue; ++i)
      EXPECT_EQ(o.kinds[static_cast<size_t>(i)], "peer failure") << "rank " << r << " request " << i;
  }
  // Somebody names the mismatch itself.
  int mismatches = 0;
  for (const auto& o : out) mismatches += o.kinds[kAt] == "mismatch";
  EXPECT_GE(mismatches, 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, QueueFailure, ::testing::ValuesIn(thread_backends()),
                         [](const auto& info) { return info.param; });

// A rank SIGKILLed in the middle of the queue (processes under mpcomm launch): every survivor's request
// at that point fails with a peer failure, every later one at once, and nothing is left behind.
TEST(QueueFailureProcesses, AKilledRankFailsTheRestOfTheQueue) {
  for (const auto& backend : thread_backends()) {
    const std::string tag = testing::unique_tag();
    auto r = testing::run_command(std::string(MPCOMM_CLI) + " launch -n 3 --backend " + backend +
                                  " --timeout 30 -- " + MPCOMM_TESTPROG + " ikill 2 11 " + tag);
    EXPECT_EQ(r.status, 137) << r.output;
    EXPECT_LT(r.seconds, 40.0) << r.output;
    for (int s : {0, 1}) {
      const std::string line = testing::line_with(r.output, "[" + std::to_string(s) + "] rank " + std::to_string(s) + " failed after ");
      ASSERT_FALSE(line.empty()) << backend << ": rank " << s << " did not report:\n" << r.output;
      EXPECT_TRUE(contains(line, "peer failure")) << line;
      const std::string later = testing::line_with(r.output, "[" + std::to_string(s) + "] rank " + std::to_string(s) + " later:");
      EXPECT_TRUE(contains(later, "peer failure: ") && contains(later, "communicator was aborted")) << r.output;
    }
    EXPECT_EQ(testing::count_processes_running(MPCOMM_TESTPROG, tag), 0) << "orphaned ranks";
  }
}

}  // namespace
}  // namespace mpcomm
