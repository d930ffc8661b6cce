// Native TCP links of several connections (MPCOMM_TCP_STREAMS): a link's bytes striped over them in
// 256 KiB pieces arrive whole and in order — messages that straddle stripes, small ones after large
// ones, both directions at once — between ranks of two emulated hosts (threads of this process); each
// with and without TLS (MPCOMM_TLS=1: every connection its own TLS session).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "harness/thread_world.h"
#include "mpcomm/mpcomm.h"
#include "mpcomm/store.h"

namespace mpcomm {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& x : v) x = static_cast<uint8_t>(g());
  return v;
}

class TcpStreams : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  Options options() const {
    Options o;
    o.params["MPCOMM_TCP_STREAMS"] = std::to_string(std::get<0>(GetParam()));
    o.params["MPCOMM_TLS"] = std::get<1>(GetParam()) ? "1" : "0";
    o.timeout = Millis(60000);
    return o;
  }
};

TEST_P(TcpStreams, RingOfMessagesAcrossStripesArrivesInOrder) {
  const Options o = options();
  // Ranks 0,1 on host a and 2,3 on host b: 1 -> 2 and 3 -> 0 cross hosts (TCP), the others shared memory.
  testing::ThreadWorld w("native", 4, o, {"a", "a", "b", "b"});
  // Sizes around the stripe (256 KiB), several stripes, odd ones, and small ones after large ones.
  const std::vector<size_t> sizes = {1, 1000, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (3 << 20) + 17, 5, 64,
                                     (1 << 20) * 2 + 333, 7};
  w.run([&](int r, Communicator& c) {
    const int next = (r + 1) % 4, prev = (r + 3) % 4;
    for (int round = 0; round < 2; ++round) {
      std::vector<std::vector<uint8_t>> out, in;
      std::vector<Request> reqs;
      for (size_t i = 0; i < sizes.size(); ++i) {
        out.push_back(pattern(sizes[i], static_cast<uint32_t>(r * 1000 + i + round * 7)));
        in.emplace_back(sizes[i]);
      }
      // Every message posted at once, both ways: the link carries them back to back.
      for (size_t i = 0; i < sizes.size(); ++i) {
        reqs.push_back(c.irecv(in[i].data(), sizes[i], DataType::uint8, prev, static_cast<int>(i)));
        reqs.push_back(c.isend(out[i].data(), sizes[i], DataType::uint8, next, static_cast<int>(i)));
      }
      for (auto& q : reqs) q.wait();
      for (size_t i = 0; i < sizes.size(); ++i)
        ASSERT_EQ(in[i], pattern(sizes[i], static_cast<uint32_t>(prev * 1000 + i + round * 7)))
            << "message " << i << " of " << sizes[i] << " bytes from rank " << prev;
    }
  });
}

TEST_P(TcpStreams, LargeAllreduceAcrossHostsIsExact) {
  const Options o = options();
  testing::ThreadWorld w("native", 2, o, {"a", "b"});
  const size_t n = (5 << 20) / 4 + 3;  // 5 MiB of int32 and a bit: 21 stripes, the last one short
  w.run([&](int r, Communicator& c) {
    std::vector<int32_t> x(n), y(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<int32_t>(i * (r + 1) % 1000003);
    c.allreduce(x.data(), y.data(), n, DataType::int32, ReduceOp::sum);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], static_cast<int32_t>(i % 1000003 + (i * 2) % 1000003)) << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Streams, TcpStreams, ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "s" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tls" : "");
                         });

// IPv6: the store and the transports of native and gloo between two emulated hosts over ::1.
TEST(Ipv6, StoreAndTransportsOverIpv6) {
  auto store = std::make_shared<TcpStore>("::1", 0, "tok", Millis(10000), /*start_server=*/true);
  store->set_string("k", "v");
  EXPECT_EQ(store->get_string("k", Millis(1000)), "v");
  for (const std::string& backend : testing::thread_backends()) {
    if (backend != "native" && backend != "gloo") continue;
    Options o;
    o.params["MPCOMM_ADDR"] = "::1";
    o.params["MPCOMM_TCP_STREAMS"] = "2";
    o.timeout = Millis(30000);
    testing::ThreadWorld w(backend, 2, o, {"a", "b"});
    w.run([&](int r, Communicator& c) {
      std::vector<float> x(300000, static_cast<float>(r + 1)), y(x.size());
      c.allreduce(x.data(), y.data(), x.size(), DataType::float32, ReduceOp::sum);
      for (float v : y) ASSERT_EQ(v, 3.0f) << backend;
    });
  }
}

// Out of range, on two hosts (where it is read) and on one (where it is not): refused at creation.
TEST(TcpStreamsKnob, OutOfRangeIsRefusedNamingIt) {
  for (const std::vector<std::string>& hosts : {std::vector<std::string>{"a", "b"}, std::vector<std::string>{}})
    for (const char* bad : {"0", "-3", "65"}) {
      Options o;
      o.params["MPCOMM_TCP_STREAMS"] = bad;
      o.timeout = Millis(10000);
      try {
        testing::ThreadWorld w("native", 2, o, hosts);
        FAIL() << "MPCOMM_TCP_STREAMS=" << bad << " was accepted";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("MPCOMM_TCP_STREAMS='" + std::string(bad) + "' (Options::params): expected a whole number from 1 to 64"),
                  std::string::npos) << e.what();
      }
    }
}

}  // namespace
}  // namespace mpcomm
