#include "net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "mpcomm/error.h"

namespace mpcomm::net {

static std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

int ms_left(Deadline d, int cap_ms) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  if (left < 0) return 0;
  return left > cap_ms ? cap_ms : static_cast<int>(left);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::pair<std::string, uint16_t> parse_host_port(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw InvalidArgument("mpcomm: '" + s + "' is not HOST:PORT");
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) throw InvalidArgument("mpcomm: bad port in '" + s + "'");
  return {host, static_cast<uint16_t>(port)};
}

static sockaddr_storage resolve(const std::string& host, uint16_t port, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    throw InvalidArgument("mpcomm: cannot resolve host '" + host + "': " + gai_strerror(rc));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}

Fd listen_tcp(const std::string& host, uint16_t port, uint16_t* bound) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(host, port, &len);
  Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw Internal("mpcomm: socket() failed: " + errno_text(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    throw Internal("mpcomm: cannot bind " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  if (::listen(fd.get(), 1024) != 0) throw Internal("mpcomm: listen() failed: " + errno_text(errno));
  if (bound != nullptr) {
    sockaddr_storage got{};
    socklen_t gl = sizeof got;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &gl);
    *bound = ntohs(got.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&got)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  }
  return fd;
}

Fd connect_tcp(const std::string& host, uint16_t port, Deadline deadline, const std::string& what) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(host, port, &len);
  int last = 0;
  auto backoff = std::chrono::milliseconds(5);
  while (true) {
    Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) throw Internal("mpcomm: socket() failed: " + errno_text(errno));
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      set_nodelay(fd.get());
      return fd;
    }
    last = errno;
    // Refused (not listening yet), or no route yet (a node whose network comes up later): retried.
    if (last != ECONNREFUSED && last != EAGAIN && last != ETIMEDOUT && last != ENOENT && last != EINTR &&
        last != EHOSTUNREACH && last != ENETUNREACH)
      throw PeerFailure("mpcomm: cannot connect to " + what + " at " + host + ":" + std::to_string(port) + ": " +
                        errno_text(last));
    if (Clock::now() + backoff > deadline)
      throw Timeout("mpcomm: timed out connecting to " + what + " at " + host + ":" + std::to_string(port) +
                    " (last error: " + errno_text(last) + ")");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Fd accept_tcp(int listen_fd, Deadline deadline, const std::string& what) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    int rc = ::poll(&p, 1, ms_left(deadline, 1000));
    if (rc < 0 && errno != EINTR) throw Internal("mpcomm: poll() failed while accepting " + what + ": " + errno_text(errno));
    if (rc > 0) {
      Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (fd.valid()) {
        set_nodelay(fd.get());
        return fd;
      }
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        throw Internal("mpcomm: accept() failed for " + what + ": " + errno_text(errno));
    }
    if (Clock::now() >= deadline) throw Timeout("mpcomm: timed out waiting for " + what + " to connect");
  }
}

void set_nonblocking(int fd, bool on) {
  int fl = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void write_all(int fd, const void* buf, size_t n, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      throw PeerFailure("mpcomm: connection to " + what + " failed while sending: " + errno_text(errno));
    pollfd pf{fd, POLLOUT, 0};
    int left = ms_left(deadline, 1000);
    if (left == 0 && Clock::now() >= deadline) throw Timeout("mpcomm: timed out sending to " + what);
    ::poll(&pf, 1, left);
  }
}

void read_all(int fd, void* buf, size_t n, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw PeerFailure("mpcomm: " + what + " closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      throw PeerFailure("mpcomm: connection to " + what + " failed while receiving: " + errno_text(errno));
    pollfd pf{fd, POLLIN, 0};
    int left = ms_left(deadline, 1000);
    if (left == 0 && Clock::now() >= deadline) throw Timeout("mpcomm: timed out receiving from " + what);
    ::poll(&pf, 1, left);
  }
}

static std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {};
  if (getnameinfo(sa, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

static bool loopback_sockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

bool is_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  bool lo = loopback_sockaddr(res->ai_addr);
  freeaddrinfo(res);
  return lo;
}

bool is_loopback_literal(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host.c_str(), &a6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
  return false;
}

std::string wildcard_for(const std::string& host) {
  socklen_t len = 0;
  try {
    return resolve(host, 0, &len).ss_family == AF_INET6 ? "::" : "0.0.0.0";
  } catch (const InvalidArgument&) {
    return host.find(':') != std::string::npos ? "::" : "0.0.0.0";
  }
}

std::string address_toward(const std::string& host) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(host, 9, &len);  // any port: nothing is sent
  Fd fd(::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw Internal("mpcomm: socket() failed: " + errno_text(errno));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    throw PeerFailure("mpcomm: no route from this host to " + host + ": " + errno_text(errno));
  sockaddr_storage me{};
  socklen_t ml = sizeof me;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &ml) != 0)
    throw Internal("mpcomm: getsockname() failed: " + errno_text(errno));
  std::string a = numeric(reinterpret_cast<sockaddr*>(&me), ml);
  if (a.empty()) throw Internal("mpcomm: cannot print the local address toward " + host);
  return a;
}

std::string interface_address(const std::string& spec_in) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') exclude = true, spec.erase(0, 1);
  if (!spec.empty() && spec[0] == '=') exact = true, spec.erase(0, 1);
  std::vector<std::string> names;
  for (size_t i = 0; i <= spec.size();) {
    size_t j = spec.find(',', i);
    if (j == std::string::npos) j = spec.size();
    if (j > i) names.push_back(spec.substr(i, j - i));
    i = j + 1;
  }
  if (names.empty()) throw InvalidArgument("mpcomm: MPCOMM_IFNAME='" + spec_in + "' names no interface");
  auto listed = [&](const char* ifname) {
    for (const auto& n : names)
      if (exact ? n == ifname : std::strncmp(ifname, n.c_str(), n.size()) == 0) return true;
    return false;
  };
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Internal("mpcomm: getifaddrs() failed: " + errno_text(errno));
  std::string v4, v6, seen;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::string a = numeric(i->ifa_addr, len);
    if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr)) continue;
    seen += (seen.empty() ? "" : ", ") + std::string(i->ifa_name) + " " + a;
    if (listed(i->ifa_name) == exclude) continue;
    if (fam == AF_INET && v4.empty()) v4 = a;
    if (fam == AF_INET6 && v6.empty()) v6 = a;
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  throw InvalidArgument("mpcomm: MPCOMM_IFNAME='" + spec_in + "' selects no interface with an address (this host has: " +
                        (seen.empty() ? std::string("none") : seen) + ")");
}

std::string host_port(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace mpcomm::net
