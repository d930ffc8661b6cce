// MPCOMM_TLS=1 on the store (net/tls.h): requests and replies of every size go through TLS; a client and a
// server that disagree about TLS are refused, each saying what to set; a TLS session keyed by another
// connection's key does not come up.
#include "net/tls.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "mpcomm/error.h"
#include "mpcomm/store.h"
#include "net/handshake.h"
#include "net/socket.h"

namespace mpcomm {
namespace {

using namespace std::chrono_literals;

// MPCOMM_TLS set for the life of the object, restored after.
class TlsSetting {
 public:
  explicit TlsSetting(const char* v) {
    if (const char* old = std::getenv("MPCOMM_TLS")) old_ = old, had_ = true;
    ::setenv("MPCOMM_TLS", v, 1);
  }
  ~TlsSetting() { had_ ? (void)::setenv("MPCOMM_TLS", old_.c_str(), 1) : (void)::unsetenv("MPCOMM_TLS"); }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(StoreTls, RequestsAndRepliesOfEverySizeGoThroughTls) {
  TlsSetting on("1");
  ASSERT_TRUE(net::tls::requested());
  TcpStoreServer server("127.0.0.1", 0, "tls-secret");
  TcpStore a("127.0.0.1", server.port(), "tls-secret", 5000ms), b("127.0.0.1", server.port(), "tls-secret", 5000ms);
  for (size_t n : {size_t{0}, size_t{1}, size_t{16383}, size_t{16385}, size_t{3} << 20}) {
    Bytes v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + n);
    a.set("k" + std::to_string(n), v);
    EXPECT_EQ(b.get("k" + std::to_string(n), 1000ms), v) << n << " bytes";
  }
  // A GET parked on the server until another client sets the key: the reply leaves later, encrypted.
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    a.set_string("late", "arrived");
  });
  EXPECT_EQ(b.get_string("late", 5000ms), "arrived");
  later.join();
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_EQ(a.add("n", 2), 7);
  EXPECT_EQ(server.refused_connections(), 0u);
}

TEST(StoreTls, ClientAndServerThatDisagreeAreRefusedSayingWhatToSet) {
  std::unique_ptr<TcpStoreServer> server;
  {
    TlsSetting on("1");
    server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "tls-secret");
  }
  TlsSetting off("0");
  try {
    TcpStore plain("127.0.0.1", server->port(), "tls-secret", 2000ms);
    FAIL() << "a client without TLS joined a server with TLS";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("refused this connection at its Hello"), std::string::npos) << e.what();
  }
  for (int i = 0; i < 200 && server->refused_connections() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->refused_connections(), 1u);

  TcpStoreServer plain_server("127.0.0.1", 0, "tls-secret");
  TlsSetting on("1");
  EXPECT_THROW(TcpStore("127.0.0.1", plain_server.port(), "tls-secret", 2000ms), PeerFailure);
  for (int i = 0; i < 200 && plain_server.refused_connections() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(plain_server.refused_connections(), 1u);
}

TEST(StoreTls, SessionsKeyedDifferentlyDoNotComeUp) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  uint8_t k1[net::tls::kKeyBytes] = {1}, k2[net::tls::kKeyBytes] = {2};
  std::string server_error;
  std::thread server([&] {
    try {
      net::tls::accept(b.get(), k2, net::deadline_after(3000ms), "test client");
    } catch (const Error& e) {
      server_error = e.what();
    }
  });
  EXPECT_THROW(net::tls::connect(a.get(), k1, net::deadline_after(3000ms), "test server"), Error);
  ::shutdown(a.get(), SHUT_RDWR);
  server.join();
  EXPECT_NE(server_error.find("TLS handshake with test client failed"), std::string::npos) << server_error;
}

}  // namespace
}  // namespace mpcomm
