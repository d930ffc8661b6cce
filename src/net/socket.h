// Socket helpers shared by the TCP store and the native TCP transport. Every call that can block
// takes a deadline and throws mpcomm::Timeout past it; a closed or reset connection throws
// PeerFailure. `what` names the connection in error messages ("store 127.0.0.1:29500", "rank 3").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace mpcomm::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after(std::chrono::milliseconds d) { return Clock::now() + d; }
// Milliseconds left until `d`, at least 0, at most `cap_ms`, for poll().
int ms_left(Deadline d, int cap_ms = 1 << 30);

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// "host:port" -> (host, port); throws InvalidArgument.
std::pair<std::string, uint16_t> parse_host_port(const std::string& s);

// A listening TCP socket on host:port (port 0 = any free port); *bound gets the actual port.
Fd listen_tcp(const std::string& host, uint16_t port, uint16_t* bound);
// Connects, retrying refused connections until the deadline.
Fd connect_tcp(const std::string& host, uint16_t port, Deadline deadline, const std::string& what);
// Accepts one connection or throws Timeout.
Fd accept_tcp(int listen_fd, Deadline deadline, const std::string& what);

void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);

// Blocking full transfers bounded by a deadline.
void write_all(int fd, const void* buf, size_t n, Deadline deadline, const std::string& what);
void read_all(int fd, void* buf, size_t n, Deadline deadline, const std::string& what);

// ---- which local address to advertise ----------------------------------------------------------------

// Whether `host` (a name or a literal) resolves to a loopback address (127.0.0.0/8, ::1, ::ffff:127.x).
// A name that does not resolve is not loopback.
bool is_loopback(const std::string& host);

// Whether `host` is "localhost" or a loopback address literal. A name that resolves to loopback only
// here (Debian's "127.0.1.1 <hostname>") is not: other machines reach that name elsewhere.
bool is_loopback_literal(const std::string& host);

// The wildcard address of the family `host` resolves to first ("::" or "0.0.0.0"): where a server
// listens that others reach by that name (clients resolve it alike).
std::string wildcard_for(const std::string& host);

// The local address this machine's routing table would send from to reach `host` (a UDP socket
// connected there, no packet sent). Throws InvalidArgument when `host` does not resolve, PeerFailure
// when no route leads there.
std::string address_toward(const std::string& host);

// The first address of the first interface `spec` selects, NCCL_SOCKET_IFNAME's syntax: a comma list of
// name prefixes ("eth,ib"); "=" first for exact names ("=eth0"); "^" first to exclude ("^lo,docker").
// IPv4 before IPv6; IPv6 link-local addresses are skipped. Throws InvalidArgument naming `spec` and every
// interface with an address when none matches.
std::string interface_address(const std::string& spec);

// An address with its port as HOST:PORT, IPv6 in brackets.
std::string host_port(const std::string& host, uint16_t port);

}  // namespace mpcomm::net
