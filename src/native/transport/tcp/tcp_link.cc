#include "native/transport/tcp/tcp_link.h"

#include <errno.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "mpcomm/error.h"

namespace mpcomm::native {

static constexpr uint32_t kTcpMagic = 0x4d50544c;  // "MPTL"

TcpLink::TcpLink(net::Fd fd, int peer) : fd_(std::move(fd)), peer_(peer) { net::set_nonblocking(fd_.get(), true); }

size_t TcpLink::write_some(const void* buf, size_t n) {
  ssize_t w = ::send(fd_.get(), buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w >= 0) return static_cast<size_t>(w);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw PeerFailure("connection to rank " + std::to_string(peer_) + " failed while sending: " + std::strerror(errno));
}

size_t TcpLink::read_some(void* buf, size_t n) {
  ssize_t r = ::recv(fd_.get(), buf, n, MSG_DONTWAIT);
  if (r > 0) return static_cast<size_t>(r);
  if (r == 0) throw PeerFailure("rank " + std::to_string(peer_) + " closed its connection (process ended?)");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw PeerFailure("connection to rank " + std::to_string(peer_) + " failed while receiving: " + std::strerror(errno));
}

std::map<int, std::unique_ptr<TcpLink>> connect_tcp_mesh(Store& store, int rank, const std::vector<int>& remote,
                                                         const std::string& bind_addr, const std::string& token,
                                                         net::Deadline deadline) {
  std::map<int, std::unique_ptr<TcpLink>> links;
  if (remote.empty()) return links;
  uint16_t port = 0;
  net::Fd listener = net::listen_tcp(bind_addr, 0, &port);
  store.set_string("tcp/" + std::to_string(rank), bind_addr + ":" + std::to_string(port));

  // Lower peers: we connect. Higher peers: they connect to us.
  int expect_accepts = 0;
  for (int peer : remote) {
    if (peer > rank) {
      ++expect_accepts;
      continue;
    }
    auto left = std::chrono::duration_cast<Millis>(deadline - net::Clock::now());
    std::string addr = store.get_string("tcp/" + std::to_string(peer), std::max(left, Millis(1)));
    auto [host, p] = net::parse_host_port(addr);
    std::string what = "rank " + std::to_string(peer);
    net::Fd fd = net::connect_tcp(host, p, deadline, what);
    net::send_hello(fd.get(), kTcpMagic, token, rank, deadline, what);
    links[peer] = std::make_unique<TcpLink>(std::move(fd), peer);
  }
  while (expect_accepts > 0) {
    net::Fd fd = net::accept_tcp(listener.get(), deadline, "ranks of other hosts");
    net::Hello h{};
    bool ok = false;
    try {  // a stray connection that says nothing must not hold up the mesh
      ok = net::recv_hello(fd.get(), kTcpMagic, token, &h, std::min(deadline, net::deadline_after(Millis(2000))),
                           "an incoming rank connection");
    } catch (const Error&) {
      ok = false;
    }
    bool known = ok && h.rank > rank && std::find(remote.begin(), remote.end(), static_cast<int>(h.rank)) != remote.end() &&
                 links.count(static_cast<int>(h.rank)) == 0;
    if (!known) {
      if (!ok)
        MPCOMM_LOG(warn, "rank %d refused a transport connection: not an mpcomm rank of this job (wrong magic, "
                   "protocol version or job token, or nothing sent in 2 s)", rank);
      else
        MPCOMM_LOG(warn, "rank %d refused a transport connection from a peer calling itself rank %lld: not a rank it "
                   "expects a connection from", rank, static_cast<long long>(h.rank));
      continue;
    }
    links[static_cast<int>(h.rank)] = std::make_unique<TcpLink>(std::move(fd), static_cast<int>(h.rank));
    --expect_accepts;
  }
  return links;
}

}  // namespace mpcomm::native
