// Which address a rank advertises: MPCOMM_ADDR, MPCOMM_IFNAME's interfaces (NCCL_SOCKET_IFNAME's
// syntax), the route to the store's host, else loopback; and the helpers behind it.
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "net/socket.h"
#include "bootstrap/bind_address.h"
#include "settings/settings.h"
#include "mpcomm/communicator.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm {
namespace {

class AddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"MPCOMM_ADDR", "MPCOMM_IFNAME", "MASTER_ADDR"}) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_) v ? (void)::setenv(k.c_str(), v->c_str(), 1) : (void)::unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// The first IPv4 address of an up interface other than lo, or "" when this machine has none.
std::string first_non_loopback_ipv4(std::string* ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_UP) == 0) continue;
    if (std::string(i->ifa_name) == "lo") continue;
    char buf[NI_MAXHOST] = {};
    getnameinfo(i->ifa_addr, sizeof(sockaddr_in), buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
    found = buf;
    *ifname = i->ifa_name;
  }
  freeifaddrs(list);
  return found;
}

TEST_F(AddressTest, LoopbackAddresses) {
  EXPECT_TRUE(net::is_loopback("127.0.0.1"));
  EXPECT_TRUE(net::is_loopback("127.0.1.1"));  // Debian's /etc/hosts entry for the machine's own name
  EXPECT_TRUE(net::is_loopback("::1"));
  EXPECT_TRUE(net::is_loopback("localhost"));
  EXPECT_FALSE(net::is_loopback("10.1.2.3"));
  EXPECT_FALSE(net::is_loopback("fd00::1"));
  EXPECT_FALSE(net::is_loopback("no-such-host.invalid"));
}

TEST_F(AddressTest, HostPortBracketsIpv6) {
  EXPECT_EQ(net::host_port("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(net::host_port("fd00::1", 80), "[fd00::1]:80");
  EXPECT_EQ(net::parse_host_port(net::host_port("fd00::1", 80)).first, "fd00::1");
}

TEST_F(AddressTest, InterfaceByNamePrefixExactAndExclusion) {
  EXPECT_EQ(net::interface_address("lo"), "127.0.0.1");
  EXPECT_EQ(net::interface_address("=lo"), "127.0.0.1");
  std::string ifname;
  const std::string other = first_non_loopback_ipv4(&ifname);
  if (other.empty()) GTEST_SKIP() << "this machine has no IPv4 interface besides lo";
  EXPECT_EQ(net::interface_address(ifname), other);
  EXPECT_EQ(net::interface_address("^lo"), other);
  EXPECT_NE(net::interface_address("^" + ifname), other);
}

TEST_F(AddressTest, NoMatchingInterfaceNamesWhatThereIs) {
  try {
    net::interface_address("=nosuchif0");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("MPCOMM_IFNAME='=nosuchif0'"), std::string::npos) << m;
    EXPECT_NE(m.find("lo 127.0.0.1"), std::string::npos) << m;  // the interfaces there are
  }
  EXPECT_THROW(net::interface_address(","), InvalidArgument);
}

TEST_F(AddressTest, RouteTowardAHost) {
  EXPECT_EQ(net::address_toward("127.0.0.1"), "127.0.0.1");
  std::string ifname;
  const std::string other = first_non_loopback_ipv4(&ifname);
  if (other.empty()) GTEST_SKIP() << "this machine has no IPv4 interface besides lo";
  EXPECT_EQ(net::address_toward(other), other);  // one of our own addresses: sent from itself
  EXPECT_THROW(net::address_toward("no-such-host.invalid"), InvalidArgument);
}

TEST_F(AddressTest, LoopbackLiterals) {
  EXPECT_TRUE(net::is_loopback_literal("127.0.0.1"));
  EXPECT_TRUE(net::is_loopback_literal("127.0.1.1"));
  EXPECT_TRUE(net::is_loopback_literal("::1"));
  EXPECT_TRUE(net::is_loopback_literal("localhost"));
  EXPECT_FALSE(net::is_loopback_literal("10.0.0.1"));
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_FALSE(net::is_loopback_literal(name));  // a name, whatever it resolves to here
  EXPECT_EQ(net::wildcard_for("127.0.0.1"), "0.0.0.0");
  EXPECT_EQ(net::wildcard_for("::1"), "::");
}

// The machine's own name resolving to loopback here (Debian's "127.0.1.1 <hostname>"): the store is on
// this machine for this rank, but the others reach it on its network address, so that is advertised.
TEST_F(AddressTest, OwnNameOnLoopbackAdvertisesANetworkAddress) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  if (!net::is_loopback(name)) GTEST_SKIP() << name << " does not resolve to loopback here";
  std::string ifname;
  const std::string other = first_non_loopback_ipv4(&ifname);
  if (other.empty()) GTEST_SKIP() << "this machine has no IPv4 interface besides lo";
  ::setenv("MASTER_ADDR", name, 1);
  EXPECT_EQ(choose_bind_address(Options{}, nullptr), other);
  // A store served by that name listens on every interface, so the others reach it.
  TcpStore served(name, 0, "t", Millis(5000), /*start_server=*/true);
  TcpStore by_address(other, served.port(), "t", Millis(5000));
  by_address.set_string("k", "v");
  EXPECT_EQ(served.get_string("k", Millis(1000)), "v");
}

TEST_F(AddressTest, ChosenAddress) {
  Options opts;
  auto store = std::make_shared<TcpStore>("127.0.0.1", 0, "t", Millis(5000), /*start_server=*/true);
  auto prefixed = std::make_shared<PrefixStore>("x", store);
  // A store on loopback: the job is on this machine.
  EXPECT_EQ(choose_bind_address(opts, prefixed.get()), "127.0.0.1");
  EXPECT_EQ(choose_bind_address(opts, nullptr), "127.0.0.1");
  ::setenv("MPCOMM_IFNAME", "lo", 1);
  EXPECT_EQ(choose_bind_address(opts, nullptr), "127.0.0.1");
  ::setenv("MPCOMM_ADDR", "10.9.8.7", 1);  // said outright: taken as it is
  EXPECT_EQ(choose_bind_address(opts, nullptr), "10.9.8.7");
  opts.params["MPCOMM_ADDR"] = "10.9.8.6";
  EXPECT_EQ(choose_bind_address(opts, nullptr), "10.9.8.6");
  ::unsetenv("MPCOMM_ADDR");
  ::unsetenv("MPCOMM_IFNAME");
  opts.params.clear();
  std::string ifname;
  const std::string other = first_non_loopback_ipv4(&ifname);
  if (other.empty()) GTEST_SKIP() << "this machine has no IPv4 interface besides lo";
  // MASTER_ADDR on a network address: the address that routes there, never loopback.
  ::setenv("MASTER_ADDR", other.c_str(), 1);
  EXPECT_EQ(choose_bind_address(opts, nullptr), other);
}

}  // namespace
}  // namespace mpcomm
