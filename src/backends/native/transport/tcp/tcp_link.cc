#include "backends/native/transport/tcp/tcp_link.h"

#include <errno.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "log/log.h"
#include "mpcomm/error.h"
#include "net/handshake.h"

namespace mpcomm::native {

static constexpr uint32_t kTcpMagic = 0x4d50544d;  // "MPTM": multi-stream links
static constexpr int kMaxStreams = 64;

TcpLink::TcpLink(std::vector<net::Fd> fds, int peer, std::vector<net::tls::Ssl> tls)
    : fds_(std::move(fds)), tls_(std::move(tls)), name_("rank " + std::to_string(peer)), next_out_(fds_.size()) {
  if (!tls_.empty() && tls_.size() != fds_.size()) throw Internal("mpcomm: a TLS session per TCP connection, or none");
  for (size_t s = 0; s < fds_.size(); ++s) {
    net::set_nonblocking(fds_[s].get(), true);
    next_out_[s] = s * kStripe;
  }
}

int TcpLink::poll_fd_out() const {
  return fds_[(written_ / kStripe) % fds_.size()].get();  // the connection holding the first unsent byte
}

bool TcpLink::buffered() const {
  for (const auto& t : tls_)
    if (net::tls::buffered(t.get())) return true;
  return false;
}

size_t TcpLink::send_on(size_t s, const char* p, size_t n) {
  if (!tls_.empty()) return net::tls::write_some(tls_[s].get(), p, n, name_);
  ssize_t w = ::send(fds_[s].get(), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w >= 0) return static_cast<size_t>(w);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw PeerFailure("connection to " + name_ + " failed while sending: " + std::strerror(errno));
}

size_t TcpLink::write_some(const void* buf, size_t n) {
  const char* base = static_cast<const char*>(buf);
  const uint64_t end = written_ + n;  // buf holds stream bytes [written_, end)
  const size_t k = fds_.size();
  for (size_t s = 0; s < k; ++s) {
    while (next_out_[s] < end) {
      const uint64_t stripe_end = (next_out_[s] / kStripe + 1) * kStripe;
      const uint64_t upto = std::min(stripe_end, end);
      const size_t sent = send_on(s, base + (next_out_[s] - written_), static_cast<size_t>(upto - next_out_[s]));
      next_out_[s] += sent;
      if (next_out_[s] == stripe_end) next_out_[s] += (k - 1) * kStripe;  // its next stripe
      if (sent == 0 || next_out_[s] < upto) break;                     // full for now
    }
  }
  uint64_t first_unsent = end;
  for (uint64_t q : next_out_) first_unsent = std::min(first_unsent, q);
  const size_t taken = static_cast<size_t>(first_unsent - written_);
  written_ = first_unsent;
  return taken;
}

size_t TcpLink::read_some(void* buf, size_t n) {
  char* out = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const size_t s = (read_pos_ / kStripe) % fds_.size();
    const uint64_t stripe_end = (read_pos_ / kStripe + 1) * kStripe;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(stripe_end - read_pos_, n - got));
    if (!tls_.empty()) {
      const size_t r = net::tls::read_some(tls_[s].get(), out + got, want, name_);
      got += r;
      read_pos_ += r;
      if (r < want) break;  // drained this connection for now
      continue;
    }
    ssize_t r = ::recv(fds_[s].get(), out + got, want, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
      read_pos_ += static_cast<uint64_t>(r);
      if (static_cast<size_t>(r) < want) break;  // drained this connection for now
      continue;
    }
    if (r == 0) throw PeerFailure(name_ + " closed its connection (process ended?)");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
    throw PeerFailure("connection to " + name_ + " failed while receiving: " + std::strerror(errno));
  }
  return got;
}

std::map<int, std::unique_ptr<TcpLink>> connect_tcp_mesh(Store& store, int rank, const std::vector<int>& remote,
                                                         const std::string& bind_addr, const std::string& token,
                                                         int streams, bool tls, net::Deadline deadline) {
  std::map<int, std::unique_ptr<TcpLink>> links;
  if (remote.empty()) return links;
  if (streams < 1 || streams > kMaxStreams)
    throw InvalidArgument("mpcomm: MPCOMM_TCP_STREAMS=" + std::to_string(streams) + " is not between 1 and " +
                          std::to_string(kMaxStreams));
  uint16_t port = 0;
  net::Fd listener = net::listen_tcp(bind_addr, 0, &port);
  store.set_string("tcp/" + std::to_string(rank), net::host_port(bind_addr, port));

  // Lower peers: we connect, `streams` times, each connection saying which of how many it is.
  // Higher peers: they connect to us.
  net::Auth auth = net::secret_auth(token);
  auth.tls = tls;
  // A peer's connections so far, by index, with their TLS sessions.
  struct Incoming {
    std::vector<net::Fd> fds;
    std::vector<net::tls::Ssl> tls;
  };
  std::map<int, Incoming> incoming;
  size_t expect_accepts = 0;
  for (int peer : remote) {
    if (peer > rank) {
      ++expect_accepts;
      continue;
    }
    auto left = std::chrono::duration_cast<Millis>(deadline - net::Clock::now());
    std::string addr = store.get_string("tcp/" + std::to_string(peer), std::max(left, Millis(1)));
    auto [host, p] = net::parse_host_port(addr);
    std::string what = "rank " + std::to_string(peer) + " at " + addr;
    std::vector<net::Fd> fds;
    std::vector<net::tls::Ssl> sessions;
    for (int i = 0; i < streams; ++i) {
      net::Fd fd = net::connect_tcp(host, p, deadline, what);
      const net::Joined j = net::client_handshake(fd.get(), kTcpMagic, auth, rank, deadline, what);
      if (tls) sessions.push_back(net::tls::connect(fd.get(), j.session_key, deadline, what));
      const uint32_t which[2] = {static_cast<uint32_t>(i), static_cast<uint32_t>(streams)};
      net::tls::write_all(tls ? sessions.back().get() : nullptr, fd.get(), which, sizeof which, deadline, what);
      fds.push_back(std::move(fd));
    }
    links[peer] = std::make_unique<TcpLink>(std::move(fds), peer, std::move(sessions));
  }
  while (expect_accepts > 0) {
    net::Fd fd = net::accept_tcp(listener.get(), deadline, "ranks of other hosts");
    const std::string peer = net::peer_address(fd.get());
    net::Joined joined;
    net::tls::Ssl session;
    uint32_t which[2] = {0, 0};
    std::string refused;
    try {  // a stray connection that says nothing must not hold up the mesh
      const auto by = std::min(deadline, net::deadline_after(Millis(2000)));
      const std::string what = "a connection from " + peer;
      refused = net::server_handshake(fd.get(), kTcpMagic, auth, &joined, by, what);
      if (refused.empty() && tls) session = net::tls::accept(fd.get(), joined.session_key, by, what);
      if (refused.empty()) net::tls::read_all(session.get(), fd.get(), which, sizeof which, by, what);
    } catch (const Error& e) {
      refused = std::string("its handshake did not end: ") + e.what();
    }
    const bool ok = refused.empty();
    const int64_t claimed = joined.rank;
    const int from = static_cast<int>(claimed);
    auto& got = incoming[ok ? from : -1];
    bool known = ok && claimed > rank && std::find(remote.begin(), remote.end(), from) != remote.end() &&
                 links.count(from) == 0 && which[1] >= 1 && which[1] <= static_cast<uint32_t>(kMaxStreams) &&
                 which[0] < which[1] && (got.fds.empty() || got.fds.size() == which[1]) &&
                 (got.fds.empty() || !got.fds[which[0]].valid());
    if (!known) {
      if (!ok)
        MPCOMM_LOG(warn, "rank %d refused a transport connection from %s: %s", rank, peer.c_str(), refused.c_str());
      else
        MPCOMM_LOG(warn,
                   "rank %d refused a transport connection from %s calling itself rank %lld (stream %u of %u): "
                   "not a connection it expects",
                   rank, peer.c_str(), static_cast<long long>(claimed), which[0], which[1]);
      continue;
    }
    if (got.fds.empty()) {
      got.fds.resize(which[1]);
      if (tls) got.tls.resize(which[1]);
    }
    got.fds[which[0]] = std::move(fd);
    if (tls) got.tls[which[0]] = std::move(session);
    if (std::all_of(got.fds.begin(), got.fds.end(), [](const net::Fd& f) { return f.valid(); })) {
      links[from] = std::make_unique<TcpLink>(std::move(got.fds), from, std::move(got.tls));
      incoming.erase(from);
      --expect_accepts;
    }
  }
  return links;
}

}  // namespace mpcomm::native
