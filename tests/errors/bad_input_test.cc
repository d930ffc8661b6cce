// Bad input from outside a call: a second init of the same rank, and strangers at a native transport
// port (wrong job token, garbage, a rank that is not expected). Each is refused, named, and does not
// disturb the job. (Argument errors of each op: arguments_test.cc; mismatched calls: failures_test.cc;
// malformed store frames: bootstrap/store_test.cc; malformed transport frames: fuzz/frame_fuzz.cc.)
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "harness/thread_world.h"
#include "net/handshake.h"
#include "net/socket.h"

namespace mpcomm {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class SecondInit : public ::testing::TestWithParam<std::string> {};

TEST_P(SecondInit, OfTheSameRankFailsAtOnceNamingIt) {
  auto store = std::make_shared<HashStore>();
  Options o;
  o.timeout = Millis(10000);
  std::vector<std::unique_ptr<Communicator>> comms(2);
  auto errs = testing::run_threads(2, [&](int r) { comms[r] = create(GetParam(), store, r, 2, o); });
  ASSERT_FALSE(errs[0] || errs[1]) << testing::message(errs[0]) << testing::message(errs[1]);
  auto t0 = std::chrono::steady_clock::now();
  try {
    create(GetParam(), store, 0, 2, o);
    FAIL() << "a second rank 0 joined";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "rank 0 of 2 joined this group a second time")) << e.what();
    EXPECT_TRUE(contains(e.what(), GetParam() + " communicator setup on rank 0 of 2")) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // The group that was there works on.
  auto errs2 = testing::run_threads(2, [&](int r) {
    int32_t v = r + 1, sum = 0;
    comms[r]->allreduce(&v, &sum, 1, DataType::int32, ReduceOp::sum);
    if (sum != 3) throw std::runtime_error("sum " + std::to_string(sum));
  });
  EXPECT_FALSE(errs2[0] || errs2[1]) << testing::message(errs2[0]) << testing::message(errs2[1]);
}

std::vector<std::string> store_backends() {
  std::vector<std::string> out;
  for (const auto& b : testing::thread_backends()) out.push_back(b);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, SecondInit, ::testing::ValuesIn(store_backends()),
                         [](const auto& info) { return info.param; });

// Rank 0 of a native job on two emulated hosts listens for rank 1. Before rank 1 comes, three strangers
// connect: one with the wrong job token, one with garbage, one claiming to be a rank the listener does
// not expect. Each is closed without a byte of reply; then rank 1 joins and the job works.
TEST(NativeTransport, RefusesWrongTokensGarbageAndUnexpectedRanks) {
  auto store = std::make_shared<HashStore>();
  Options o;
  o.timeout = Millis(20000);
  o.token = "the-job-token";
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::exception_ptr err[2];
  // Rank 1's peer record, ahead of rank 1 itself: rank 0 then opens its listener and waits for rank 1's
  // connection, which gives the strangers their turn first.
  store->set_string("peer/1", "hostB\n" + std::to_string(::getpid()));
  std::thread rank0([&] {
    Options a = o;
    a.host_id = "hostA";
    try {
      comms[0] = create("native", store, 0, 2, a);
    } catch (...) {
      err[0] = std::current_exception();
    }
  });
  std::string addr = store->get_string("tcp/0", Millis(10000));
  auto [host, port] = net::parse_host_port(addr);
  auto refused = [&](const std::function<void(int)>& say) {
    net::Fd fd = net::connect_tcp(host, port, net::deadline_after(Millis(5000)), "test stranger");
    say(fd.get());
    char c;
    ::shutdown(fd.get(), SHUT_WR);
    // The listener reads the Hello, refuses, and closes: recv sees the end of the stream, no reply.
    timeval tv{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    // A close with our bytes unread arrives as a reset: refused all the same. A timeout is not a refusal.
    ssize_t got = ::recv(fd.get(), &c, 1, 0);
    return got == 0 || (got < 0 && errno == ECONNRESET);
  };
  constexpr uint32_t kTransportMagic = 0x4d50544c;  // the native TCP transport's Hello ("MPTL")
  auto handshake = [&](int fd, const std::string& secret, int64_t rank) {
    try {  // with a wrong secret the rank's listener fails to prove it first: the client gives up
      net::client_handshake(fd, kTransportMagic, net::secret_auth(secret), rank, net::deadline_after(Millis(1000)),
                            "t");
    } catch (const Error&) {
    }
  };
  EXPECT_TRUE(refused([&](int fd) { handshake(fd, "a-wrong-token", 1); })) << "wrong token";
  EXPECT_TRUE(refused([&](int fd) { ::send(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, MSG_NOSIGNAL); })) << "garbage";
  EXPECT_TRUE(refused([&](int fd) { handshake(fd, o.token, 7); })) << "a rank that does not exist";
  std::thread rank1([&] {
    Options b = o;
    b.host_id = "hostB";
    try {
      comms[1] = create("native", store, 1, 2, b);
    } catch (...) {
      err[1] = std::current_exception();
    }
  });
  rank0.join();
  rank1.join();
  ASSERT_TRUE(comms[0] && comms[1]) << testing::message(err[0]) << " / " << testing::message(err[1]);
  auto errs = testing::run_threads(2, [&](int r) {
    int32_t v = r + 1, sum = 0;
    comms[r]->allreduce(&v, &sum, 1, DataType::int32, ReduceOp::sum);
    if (sum != 3) throw std::runtime_error("sum " + std::to_string(sum));
  });
  EXPECT_FALSE(errs[0] || errs[1]) << testing::message(errs[0]) << testing::message(errs[1]);
}

}  // namespace
}  // namespace mpcomm
