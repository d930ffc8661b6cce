// Store tests: one suite run over every store (HashStore, FileStore, TcpStore, PrefixStore), then what
// is particular to each: TcpStore's token check, hostile frames, big values and dying servers; FileStore's
// torn and foreign files; open_store's URL parsing.
#include "mpcomm/store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "mpcomm/error.h"
#include "net/handshake.h"
#include "net/socket.h"

namespace mpcomm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

long ms_since(Clock::time_point t0) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/mpcomm_store_test.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `f` and returns the mpcomm::Error it throws (fails the test if it throws nothing).
template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// ---- one suite, every store ---------------------------------------------------------------------------

// Opens handles on one store; for stores with a server or a file, each handle is its own client.
class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  virtual std::shared_ptr<Store> open() = 0;
};

class HashEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> open() override { return store_; }

 private:
  std::shared_ptr<HashStore> store_ = std::make_shared<HashStore>();
};

class FileEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> open() override { return std::make_shared<FileStore>(dir_.path() + "/store"); }

 private:
  TempDir dir_;
};

class TcpEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> open() override {
    return std::make_shared<TcpStore>("127.0.0.1", server_.port(), "job-token", 2000ms);
  }

 private:
  TcpStoreServer server_{"127.0.0.1", 0, "job-token"};
};

class PrefixEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> open() override { return std::make_shared<PrefixStore>("job7", base_); }

 private:
  std::shared_ptr<HashStore> base_ = std::make_shared<HashStore>();
};

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& kind = GetParam();
    if (kind == "hash") env_ = std::make_unique<HashEnv>();
    if (kind == "file") env_ = std::make_unique<FileEnv>();
    if (kind == "tcp") env_ = std::make_unique<TcpEnv>();
    if (kind == "prefix") env_ = std::make_unique<PrefixEnv>();
    ASSERT_NE(env_, nullptr) << kind;
    store_ = env_->open();
  }
  void TearDown() override {
    store_.reset();
    env_.reset();
  }

  std::unique_ptr<StoreEnv> env_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetReturnsTheBytesAndLastSetWins) {
  Bytes binary = {0, 1, 0xff, 0, 0x7f, '\n'};
  store_->set("bin", binary);
  auto other = env_->open();
  EXPECT_EQ(other->get("bin", 1000ms), binary);

  store_->set_string("name", "first");
  store_->set_string("name", "second");
  EXPECT_EQ(other->get_string("name", 1000ms), "second");

  store_->set("empty", {});
  EXPECT_TRUE(other->check({"empty"}));
  EXPECT_EQ(other->get("empty", 1000ms), Bytes{});

  Bytes big(256 * 1024);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  store_->set("big", big);
  EXPECT_EQ(other->get("big", 1000ms), big);
}

TEST_P(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto writer = env_->open();
  auto t0 = Clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(60ms);
    writer->set_string("late", "here");
  });
  std::string v = store_->get_string("late", 5000ms);
  long waited = ms_since(t0);
  t.join();
  EXPECT_EQ(v, "here");
  EXPECT_GE(waited, 50);  // it blocked rather than returning something early
  EXPECT_LT(waited, 1000);
}

TEST_P(StoreTest, GetTimeoutThrowsTimeoutNamingTheKey) {
  auto t0 = Clock::now();
  std::string msg = error_of<Timeout>([&] { store_->get("host/3", 200ms); });
  long waited = ms_since(t0);
  EXPECT_EQ(msg.rfind("mpcomm: store get timed out after 200 ms waiting for keys [", 0), 0u) << msg;
  EXPECT_NE(msg.find("host/3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(store "), std::string::npos) << msg;
  EXPECT_GE(waited, 190);
  EXPECT_LT(waited, 900);
}

TEST_P(StoreTest, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i, s = env_->open()] {
      for (int j = 0; j < kAdds; ++j) seen[i].push_back(s->add("counter", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  // Every add saw a different count, and together they saw exactly 1..800: none was lost or doubled.
  ASSERT_EQ(all.size(), size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(store_->add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store_->get_string("counter", 100ms), "800");
  EXPECT_EQ(store_->add("counter", -801), -1);
}

TEST_P(StoreTest, AddOnANonIntegerIsRejectedAndLeavesTheValue) {
  store_->set_string("text", "abc");
  std::string msg = error_of<InvalidArgument>([&] { store_->add("text", 1); });
  EXPECT_NE(msg.find("text"), std::string::npos) << msg;
  EXPECT_EQ(store_->get_string("text", 100ms), "abc");
  store_->set_string("big", "9223372036854775807");
  EXPECT_THROW(store_->add("big", 1), InvalidArgument);  // overflow is an error, not a wrap
}

TEST_P(StoreTest, CheckWaitAndRemove) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"a"}));
  store_->set_string("a", "1");
  EXPECT_TRUE(store_->check({"a"}));
  EXPECT_FALSE(store_->check({"a", "b"}));

  auto writer = env_->open();
  std::thread t([&] {
    std::this_thread::sleep_for(30ms);
    writer->set_string("b", "2");
  });
  store_->wait({"a", "b"}, 5000ms);
  t.join();
  EXPECT_TRUE(store_->check({"a", "b"}));

  EXPECT_TRUE(store_->remove("a"));
  EXPECT_FALSE(store_->remove("a"));
  EXPECT_FALSE(store_->check({"a"}));
  EXPECT_THROW(store_->get("a", 50ms), Timeout);
  store_->set_string("a", "again");
  EXPECT_EQ(store_->get_string("a", 100ms), "again");
}

TEST_P(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  store_->set_string("present", "1");
  std::string msg = error_of<Timeout>([&] { store_->wait({"present", "absent"}, 100ms); });
  EXPECT_NE(msg.find("mpcomm: store wait timed out after 100 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("absent]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("present"), std::string::npos) << msg;
}

TEST_P(StoreTest, PrefixStoresOnOneBaseDoNotSeeEachOthersKeys) {
  auto base = env_->open();
  PrefixStore tp("tp", base), pp("pp", base);
  tp.set_string("rank0", "tp-value");
  EXPECT_FALSE(pp.check({"rank0"}));
  EXPECT_THROW(pp.get("rank0", 50ms), Timeout);
  pp.set_string("rank0", "pp-value");
  EXPECT_EQ(tp.get_string("rank0", 100ms), "tp-value");
  EXPECT_EQ(pp.get_string("rank0", 100ms), "pp-value");
  EXPECT_EQ(tp.add("n", 5), 5);
  EXPECT_EQ(pp.add("n", 1), 1);
  EXPECT_TRUE(base->check({"tp/rank0", "pp/rank0"}));  // the base holds them under "prefix/key"
  EXPECT_FALSE(base->check({"rank0"}));
  EXPECT_TRUE(tp.remove("rank0"));
  EXPECT_EQ(pp.get_string("rank0", 100ms), "pp-value");
}

TEST_P(StoreTest, BadArgumentsAreRejectedBeforeAnyTraffic) {
  std::string long_key(4097, 'k');
  EXPECT_THROW(store_->set(long_key, {}), InvalidArgument);
  EXPECT_THROW(store_->get(long_key, 10ms), InvalidArgument);
  EXPECT_THROW(store_->check({long_key}), InvalidArgument);
  EXPECT_THROW(store_->get("k", Millis(-1)), InvalidArgument);
  EXPECT_THROW(store_->wait({"k"}, Millis(-1)), InvalidArgument);
  // The store still works afterwards (for TcpStore: nothing half-sent broke the connection).
  store_->set_string("k", "v");
  EXPECT_EQ(store_->get_string("k", 100ms), "v");
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::Values("hash", "file", "tcp", "prefix"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- TcpStore ---------------------------------------------------------------------------------------------

constexpr uint32_t kHelloMagic = 0x4d505354;  // 'MPST'

// A request frame as the wire format in tcp_store_protocol.h describes it; lengths are whatever the test says.
Bytes frame(uint8_t cmd, uint32_t key_len, const std::string& key, uint64_t value_len, const Bytes& value,
            int64_t arg, uint32_t magic = 0x4d505351) {
  Bytes f;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) f.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(magic, 4);
  f.push_back(cmd);
  put(key_len, 4);
  f.insert(f.end(), key.begin(), key.end());
  put(value_len, 8);
  f.insert(f.end(), value.begin(), value.end());
  put(static_cast<uint64_t>(arg), 8);
  return f;
}

// A raw connection that has proved the job's secret.
net::Fd raw_client(uint16_t port, const std::string& token) {
  auto deadline = net::deadline_after(1000ms);
  net::Fd fd = net::connect_tcp("127.0.0.1", port, deadline, "test store");
  net::client_handshake(fd.get(), kHelloMagic, net::secret_auth(token), -1, deadline, "test store");
  return fd;
}

// Waits up to 2 s for the server to have refused `n` connections (it counts when it reads the refused
// bytes, after the client already saw the refusal).
bool refused_reaches(const TcpStoreServer& server, size_t n) {
  for (int i = 0; i < 200 && server.refused_connections() < n; ++i) std::this_thread::sleep_for(10ms);
  return server.refused_connections() == n;
}

// True when the server closes `fd` within a second (reads past the end of whatever it sent).
bool closed_by_server(int fd) {
  try {
    uint8_t buf[256];
    for (int i = 0; i < 1000; ++i) net::read_all(fd, buf, 1, net::deadline_after(1000ms), "test store");
  } catch (const PeerFailure&) {
    return true;
  } catch (const Timeout&) {
    return false;
  }
  return false;
}

TEST(TcpStoreTest, WrongSecretIsRefusedOnBothSidesAndCounted) {
  TcpStoreServer server("127.0.0.1", 0, "right-token");
  auto t0 = Clock::now();
  std::string msg =
      error_of<PeerFailure>([&] { TcpStore intruder("127.0.0.1", server.port(), "wrong-token", 1000ms); });
  EXPECT_LT(ms_since(t0), 900);
  EXPECT_NE(msg.find("does not know this job's secret"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MPCOMM_TOKEN"), std::string::npos) << msg;
  EXPECT_TRUE(refused_reaches(server, 1));  // the intruder's proof is refused by the server too

  TcpStore member("127.0.0.1", server.port(), "right-token", 1000ms);
  EXPECT_FALSE(member.check({"k"}));
  member.set_string("k", "ok");
  EXPECT_EQ(member.get_string("k", 100ms), "ok");
  EXPECT_EQ(server.refused_connections(), 1u);
}

// A rank's handshake recorded on its way to the server (a relay between a socket pair and the server, as
// a capture of the wire would see it), then played again on a new connection: the server's nonce is new,
// so the recorded proof is worth nothing.
TEST(TcpStoreTest, ReplayedHandshakeIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, "the-secret");
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd rank_end(sv[0]), relay_end(sv[1]);
  net::Fd upstream = net::connect_tcp("127.0.0.1", server.port(), net::deadline_after(1000ms), "test");
  Bytes recorded;  // what the rank sent
  std::atomic<bool> stop{false};
  std::thread relay([&] {
    uint8_t buf[4096];
    while (!stop) {
      pollfd p[2] = {{relay_end.get(), POLLIN, 0}, {upstream.get(), POLLIN, 0}};
      if (::poll(p, 2, 10) <= 0) continue;
      if (p[0].revents & POLLIN) {
        ssize_t n = ::recv(relay_end.get(), buf, sizeof buf, 0);
        if (n <= 0) return;
        recorded.insert(recorded.end(), buf, buf + n);
        net::write_all(upstream.get(), buf, static_cast<size_t>(n), net::deadline_after(1000ms), "test");
      }
      if (p[1].revents & POLLIN) {
        ssize_t n = ::recv(upstream.get(), buf, sizeof buf, 0);
        if (n <= 0) return;
        net::write_all(relay_end.get(), buf, static_cast<size_t>(n), net::deadline_after(1000ms), "test");
      }
    }
  });
  EXPECT_EQ(net::client_handshake(rank_end.get(), kHelloMagic, net::secret_auth("the-secret"), 3,
                                  net::deadline_after(1000ms), "test")
                .secret,
            "the-secret");
  std::this_thread::sleep_for(50ms);  // the proof reaches the server
  stop = true;
  relay.join();
  ASSERT_EQ(recorded.size(), 56u + 32u);  // Hello, then the proof: nothing else was sent
  EXPECT_EQ(server.refused_connections(), 0u);

  net::Fd replay = net::connect_tcp("127.0.0.1", server.port(), net::deadline_after(1000ms), "test");
  net::write_all(replay.get(), recorded.data(), 56, net::deadline_after(1000ms), "test");
  uint8_t challenge[64];
  net::read_all(replay.get(), challenge, sizeof challenge, net::deadline_after(1000ms), "test");
  net::write_all(replay.get(), recorded.data() + 56, 32, net::deadline_after(1000ms), "test");
  EXPECT_TRUE(closed_by_server(replay.get()));
  EXPECT_TRUE(refused_reaches(server, 1));
  // The recorded secret-mode bytes hold no secret: neither the token nor anything the client derived
  // from it alone (the proof is bound to the nonces).
  const std::string wire(recorded.begin(), recorded.end());
  EXPECT_EQ(wire.find("the-secret"), std::string::npos);
  TcpStore member("127.0.0.1", server.port(), "the-secret", 1000ms);  // the job goes on
  member.set_string("k", "ok");
  EXPECT_EQ(member.get_string("k", 100ms), "ok");
}

TEST(TcpStoreTest, HelloWithAForeignMagicIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  auto deadline = net::deadline_after(1000ms);
  net::Fd fd = net::connect_tcp("127.0.0.1", server.port(), deadline, "test store");
  std::string msg = error_of<PeerFailure>(
      [&] { net::client_handshake(fd.get(), 0x12345678, net::secret_auth("tok"), -1, deadline, "test store"); });
  EXPECT_NE(msg.find("refused this connection at its Hello"), std::string::npos) << msg;
  EXPECT_TRUE(refused_reaches(server, 1));
}

TEST(TcpStoreTest, MalformedFramesCloseOnlyTheirConnection) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore good("127.0.0.1", server.port(), "tok", 1000ms);
  good.set_string("before", "1");

  Bytes too_many_keys = {0x88, 0x13, 0, 0};  // a key list claiming 5000 keys
  Bytes short_list = {2, 0, 0, 0, 1, 0, 0, 0, 'a'};  // claims 2 keys, holds 1
  std::vector<std::pair<std::string, Bytes>> cases = {
      {"key_len 0xffffffff", frame(1, 0xffffffffu, "", 0, {}, 0)},
      {"value_len 2^40", frame(1, 1, "k", uint64_t{1} << 40, {}, 0)},
      {"value_len 64 MiB + 1", frame(1, 1, "k", (uint64_t{64} << 20) + 1, {}, 0)},
      {"bad frame magic", frame(1, 1, "k", 0, {}, 0, 0xdeadbeef)},
      {"unknown command", frame(99, 1, "k", 0, {}, 0)},
      {"wait with 5000 keys", frame(5, 0, "", too_many_keys.size(), too_many_keys, 10)},
      {"check with a short key list", frame(4, 0, "", short_list.size(), short_list, 0)},
      {"get with a negative timeout", frame(2, 1, "k", 0, {}, -5)},
  };
  for (const auto& [name, bytes_on_wire] : cases) {
    SCOPED_TRACE(name);
    net::Fd fd = raw_client(server.port(), "tok");
    net::write_all(fd.get(), bytes_on_wire.data(), bytes_on_wire.size(), net::deadline_after(1000ms), "test");
    EXPECT_TRUE(closed_by_server(fd.get()));
    // The connection that was already open, and a new one, still work.
    good.set_string(name, "survived");
    EXPECT_EQ(good.get_string(name, 100ms), "survived");
  }
  // A client that sends half a frame and disappears does not disturb the server either.
  {
    net::Fd fd = raw_client(server.port(), "tok");
    Bytes half = frame(1, 3, "abc", 10, bytes("0123456789"), 0);
    half.resize(half.size() / 2);
    net::write_all(fd.get(), half.data(), half.size(), net::deadline_after(1000ms), "test");
  }
  TcpStore fresh("127.0.0.1", server.port(), "tok", 1000ms);
  EXPECT_EQ(fresh.get_string("before", 100ms), "1");
  EXPECT_FALSE(fresh.check({"abc"}));
  EXPECT_EQ(server.refused_connections(), 0u);  // these passed the Hello; they were cut off for the frame
}

TEST(TcpStoreTest, WellFormedRawFrameIsServed) {
  // Pins the wire format: if the encoding changed, this hand-built SET would not be understood.
  TcpStoreServer server("127.0.0.1", 0, "tok");
  net::Fd fd = raw_client(server.port(), "tok");
  Bytes f = frame(1, 3, "abc", 2, bytes("xy"), 0);
  net::write_all(fd.get(), f.data(), f.size(), net::deadline_after(1000ms), "test");
  uint8_t reply[4 + 1 + 8 + 8];
  net::read_all(fd.get(), reply, sizeof reply, net::deadline_after(1000ms), "test");
  EXPECT_EQ(reply[0], 0x52);  // 'MPSR' little-endian
  EXPECT_EQ(reply[4], 0);     // OK
  TcpStore client("127.0.0.1", server.port(), "tok", 1000ms);
  EXPECT_EQ(client.get_string("abc", 100ms), "xy");
}

TEST(TcpStoreTest, OneMiBValueRoundTrips) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore a("127.0.0.1", server.port(), "tok", 1000ms), b("127.0.0.1", server.port(), "tok", 1000ms);
  Bytes v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  a.set("weights", v);
  EXPECT_EQ(b.get("weights", 1000ms), v);
  EXPECT_EQ(a.get("weights", 1000ms), v);
}

TEST(TcpStoreTest, ServerDestructionWakesAWaitingClient) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "tok");
  TcpStore client("127.0.0.1", server->port(), "tok", 1000ms);
  client.set_string("x", "1");  // the connection is up and accepted
  std::atomic<bool> threw{false};
  std::thread waiter([&] {
    try {
      client.get("never", 10000ms);
    } catch (const PeerFailure&) {
      threw = true;
    } catch (const Timeout&) {
      threw = true;
    }
  });
  std::this_thread::sleep_for(50ms);
  auto destroyed = Clock::now();
  server.reset();
  waiter.join();
  EXPECT_TRUE(threw);
  EXPECT_LT(ms_since(destroyed), 500);  // promptly, not at the 10 s timeout
}

TEST(TcpStoreTest, ServerThatNeverAnswersTheHelloYieldsTimeout) {
  // A socket that listens but never accepts: connect succeeds (backlog), nothing ever answers.
  uint16_t port = 0;
  net::Fd listener = net::listen_tcp("127.0.0.1", 0, &port);
  auto t0 = Clock::now();
  std::string msg = error_of<Timeout>([&] { TcpStore client("127.0.0.1", port, "tok", 300ms); });
  EXPECT_GE(ms_since(t0), 250);
  EXPECT_LT(ms_since(t0), 900);
  EXPECT_NE(msg.find("handshake with store tcp://127.0.0.1:"), std::string::npos) << msg;
}

TEST(TcpStoreTest, HungServerYieldsTimeoutNotAHang) {
  // A server that ends the handshake, then never answers a request.
  uint16_t port = 0;
  net::Fd listener = net::listen_tcp("127.0.0.1", 0, &port);
  std::atomic<bool> done{false};
  std::thread hung([&] {
    net::Fd fd = net::accept_tcp(listener.get(), net::deadline_after(2000ms), "test");
    net::Joined joined;
    EXPECT_EQ(net::server_handshake(fd.get(), kHelloMagic, net::secret_auth("tok"), &joined,
                                    net::deadline_after(2000ms), "test"),
              "");
    while (!done) std::this_thread::sleep_for(5ms);
  });
  TcpStore client("127.0.0.1", port, "tok", 300ms);
  auto t0 = Clock::now();
  std::string msg = error_of<Timeout>([&] { client.get("k", 100ms); });
  EXPECT_GE(ms_since(t0), 100);
  EXPECT_LT(ms_since(t0), 900);
  EXPECT_NE(msg.find("store get of keys [k] failed"), std::string::npos) << msg;
  EXPECT_THROW(client.set("k", {}), PeerFailure);  // the connection is out of step now; no silent reuse
  done = true;
  hung.join();
}

TEST(TcpStoreTest, ConnectTimesOutWhenNoServerComes) {
  uint16_t port = 0;
  { net::Fd probe = net::listen_tcp("127.0.0.1", 0, &port); }  // a port nobody listens on now
  auto t0 = Clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, "tok", 200ms), Timeout);
  EXPECT_LT(ms_since(t0), 900);
}

TEST(TcpStoreTest, ClientConnectsToAServerThatStartsLater) {
  uint16_t port = 0;
  { net::Fd probe = net::listen_tcp("127.0.0.1", 0, &port); }
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(80ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port, "tok");
  });
  TcpStore client("127.0.0.1", port, "tok", 2000ms);
  starter.join();
  client.set_string("k", "v");
  EXPECT_EQ(client.get_string("k", 100ms), "v");
}

TEST(TcpStoreTest, StartServerServesOtherClients) {
  TcpStore rank0("127.0.0.1", 0, "tok", 1000ms, /*start_server=*/true);
  ASSERT_NE(rank0.port(), 0);
  TcpStore rank1("127.0.0.1", rank0.port(), "tok", 1000ms);
  std::thread t([&] {
    std::this_thread::sleep_for(30ms);
    rank0.set_string("master", "ready");
  });
  EXPECT_EQ(rank1.get_string("master", 2000ms), "ready");
  t.join();
  EXPECT_EQ(rank1.add("joined", 1), 1);
  EXPECT_EQ(rank0.add("joined", 1), 2);
}

TEST(TcpStoreTest, SetLocalReleasesParkedWaiters) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore a("127.0.0.1", server.port(), "tok", 1000ms), b("127.0.0.1", server.port(), "tok", 1000ms);
  std::string got;
  std::thread ta([&] { got = a.get_string("failed_rank", 5000ms); });
  std::thread tb([&] { b.wait({"failed_rank", "other"}, 5000ms); });
  std::this_thread::sleep_for(50ms);
  auto t0 = Clock::now();
  server.set_local("failed_rank", bytes("3"));
  ta.join();
  EXPECT_LT(ms_since(t0), 500);
  EXPECT_EQ(got, "3");
  server.set_local("other", {});
  tb.join();
  EXPECT_LT(ms_since(t0), 1000);
}

TEST(TcpStoreTest, ParkedGetDoesNotBlockOtherClients) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  TcpStore waiter("127.0.0.1", server.port(), "tok", 1000ms), other("127.0.0.1", server.port(), "tok", 1000ms);
  std::thread t([&] { EXPECT_THROW(waiter.get("nothing", 300ms), Timeout); });
  std::this_thread::sleep_for(30ms);
  auto t0 = Clock::now();
  for (int i = 0; i < 50; ++i) other.add("busy", 1);
  EXPECT_LT(ms_since(t0), 250);  // served while the other request was parked
  t.join();
  EXPECT_EQ(other.add("busy", 0), 50);
}

// ---- FileStore -----------------------------------------------------------------------------------------------

TEST(FileStoreTest, AForeignFileIsRejected) {
  TempDir dir;
  std::string path = dir.path() + "/notes.txt";
  std::ofstream(path) << "these are not the keys you are looking for\n";
  std::string msg = error_of<InvalidArgument>([&] { FileStore s(path); });
  EXPECT_NE(msg.find("not an mpcomm file store"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(FileStoreTest, ATornRecordIsIgnoredAndCutOffByTheNextWriter) {
  TempDir dir;
  std::string path = dir.path() + "/store";
  FileStore s(path);
  s.set_string("a", "1");
  auto good_size = std::filesystem::file_size(path);
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    const char torn[] = {'S', 1, 0, 0, 0, 5, 0, 0};  // a record header cut off mid-length
    f.write(torn, sizeof torn);
  }
  EXPECT_EQ(s.get_string("a", 100ms), "1");
  EXPECT_FALSE(s.check({"b"}));
  s.set_string("b", "2");
  FileStore other(path);
  EXPECT_EQ(other.get_string("a", 100ms), "1");
  EXPECT_EQ(other.get_string("b", 100ms), "2");
  EXPECT_EQ(std::filesystem::file_size(path), good_size + 1 + 4 + 8 + 1 + 1);  // the torn bytes are gone
}

TEST(FileStoreTest, AnOversizedLengthIsReportedNotAllocated) {
  TempDir dir;
  std::string path = dir.path() + "/store";
  FileStore s(path);
  s.set_string("a", "1");
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    const char huge[] = {'S', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};  // value_len = 2^40
    f.write(huge, sizeof huge);
  }
  std::string msg = error_of<Internal>([&] { s.check({"a"}); });
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
}

TEST(FileStoreTest, AMissingDirectoryFailsAtConstruction) {
  EXPECT_THROW(FileStore("/nonexistent-mpcomm-dir/store"), InvalidArgument);
}

// ---- open_store -------------------------------------------------------------------------------------------------

TEST(OpenStoreTest, ParsesTcpAndFileUrlsAndRejectsOthers) {
  TcpStoreServer server("127.0.0.1", 0, "tok");
  auto tcp = open_store("tcp://127.0.0.1:" + std::to_string(server.port()), "tok", 1000ms);
  ASSERT_NE(dynamic_cast<TcpStore*>(tcp.get()), nullptr);
  tcp->set_string("k", "v");
  server.set_local("k2", bytes("v2"));
  EXPECT_EQ(tcp->get_string("k2", 100ms), "v2");

  TempDir dir;
  auto file = open_store("file://" + dir.path() + "/s", "tok", 1000ms);
  auto* fs = dynamic_cast<FileStore*>(file.get());
  ASSERT_NE(fs, nullptr);
  EXPECT_EQ(fs->path(), dir.path() + "/s");

  for (const char* bad : {"http://127.0.0.1:80", "file://relative/path", "file://", "tcp://127.0.0.1",
                          "tcp://127.0.0.1:0", "tcp://127.0.0.1:99999", "127.0.0.1:4000", ""}) {
    SCOPED_TRACE(bad);
    std::string msg = error_of<InvalidArgument>([&] { open_store(bad, "tok", 100ms); });
    EXPECT_EQ(msg.rfind("mpcomm: ", 0), 0u) << msg;
  }
}

}  // namespace
}  // namespace mpcomm
