// TcpStoreServer: one thread, one poll() loop, serving the store protocol (tcp_store_protocol.h) to every
// client at once, so that no client, slow or hostile, can hold up the others or the process that owns it.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bootstrap/store_detail.h"
#include "bootstrap/tcp_store_protocol.h"
#include "log/log.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"
#include "net/handshake.h"
#include "net/munge.h"
#include "net/socket.h"
#include "net/tls.h"

namespace mpcomm {

namespace sd = store_detail;
using namespace store_wire;

namespace {

// A connection must end its handshake this soon after connecting, so that idle strays cannot pile up.
constexpr auto kHelloTimeout = std::chrono::seconds(30);

}  // namespace

// GET and WAIT never block the server: a request whose keys are missing is parked on its connection
// until a SET/ADD/set_local creates them or its deadline passes. While a connection has a parked request
// or unsent reply bytes the server reads nothing more from it, so each connection costs at most one
// frame plus one reply of memory. Every length is checked against the store's limits before anything
// is allocated for it (parse_request); a frame that breaks the protocol closes its connection with a
// warning and never affects the others.
struct TcpStoreServer::Impl {
  // One client connection. Only the server thread touches these.
  struct Conn {
    net::Fd fd;
    std::string peer;
    std::unique_ptr<net::HandshakeServer> hs;  // until it accepts, nothing else is read
    std::unique_ptr<net::tls::MemoryServer> tls;  // with MPCOMM_TLS=1, once the handshake accepted
    net::Deadline hello_deadline;
    Bytes in;  // received bytes; in[in_off..] not yet parsed
    size_t in_off = 0;
    Bytes out;  // reply bytes; out[out_off..] not yet sent
    size_t out_off = 0;
    bool parked = false;  // a GET or WAIT waits for keys
    uint8_t parked_cmd = 0;
    std::vector<std::string> parked_keys;
    int64_t parked_timeout_ms = 0;
    net::Deadline parked_deadline;

    bool closed() const { return !fd.valid(); }
    bool busy() const { return parked || out_off < out.size(); }
  };

  std::string host;
  uint16_t port = 0;
  net::Auth auth;
  std::string where;  // "tcp://host:port", for messages
  net::Fd listener;
  net::Fd wake;  // eventfd: set_local() and the destructor poke the loop through it
  std::atomic<bool> stop{false};
  std::atomic<size_t> refused{0};

  std::mutex mu;  // guards map: the loop and set_local() both write it
  std::unordered_map<std::string, Bytes> map;

  std::vector<std::unique_ptr<Conn>> conns;  // server thread only
  bool keys_added = false;                   // server thread only: parked requests may be ready
  std::thread thread;

  void run();
  void loop_once();
  void accept_all();
  void read_from(Conn& c);
  void flush(Conn& c);
  bool send_pending(Conn& c);
  void process(Conn& c);
  void handle(Conn& c, uint8_t cmd, std::string key, const uint8_t* value, size_t value_len, int64_t arg);
  void reply(Conn& c, Status status, const uint8_t* value, size_t value_len, int64_t number);
  void reply_missing(Conn& c, Status status, const std::vector<std::string>& keys);
  bool try_answer_parked(Conn& c);
  void resolve_parked();
  void expire(net::Deadline now);
  void close(Conn& c, LogLevel level, const std::string& why);
  void start_tls(Conn& c);
  void queue_wire(Conn& c, const Bytes& wire);
  void wake_loop();
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;
};

std::vector<std::string> TcpStoreServer::Impl::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (map.find(k) == map.end()) out.push_back(k);
  return out;
}

void TcpStoreServer::Impl::close(Conn& c, LogLevel level, const std::string& why) {
  if (c.closed()) return;
  if (level == LogLevel::warn)
    MPCOMM_LOG(warn, "store server %s: closing the connection from %s: %s", where.c_str(), c.peer.c_str(), why.c_str());
  else
    MPCOMM_LOG(info, "store server %s: connection from %s ended: %s", where.c_str(), c.peer.c_str(), why.c_str());
  c.fd.reset();  // buffers stay until the loop drops the connection: process() may still be looking at them
  c.parked = false;
}

// The handshake accepted a client that puts the connection under TLS: what it sent after the handshake
// is already TLS.
void TcpStoreServer::Impl::start_tls(Conn& c) {
  uint8_t key[net::tls::kKeyBytes];
  c.hs->session_key(key);
  c.tls = std::make_unique<net::tls::MemoryServer>(key);
  Bytes rest(c.in.begin() + static_cast<ptrdiff_t>(c.in_off), c.in.end()), wire;
  c.in.clear();
  c.in_off = 0;
  c.tls->received(rest.data(), rest.size(), &c.in, &wire);
  queue_wire(c, wire);
}

// Queues bytes for the socket and sends what it takes now; the rest goes out on POLLOUT.
void TcpStoreServer::Impl::queue_wire(Conn& c, const Bytes& wire) {
  if (wire.empty()) return;
  c.out.insert(c.out.end(), wire.begin(), wire.end());
  if (send_pending(c)) {
    c.out.clear();
    c.out_off = 0;
  }
}

void TcpStoreServer::Impl::run() {
  try {
    while (!stop.load(std::memory_order_acquire)) loop_once();
  } catch (const std::exception& e) {
    // Not reachable by anything a client sends (those close one connection); a failed system call or
    // allocation. Close everything so that clients fail at once instead of waiting for their deadlines.
    MPCOMM_LOG(error, "store server %s stopped: %s", where.c_str(), e.what());
  }
  conns.clear();
  listener.reset();
}

void TcpStoreServer::Impl::loop_once() {
  std::vector<pollfd> fds;
  fds.reserve(conns.size() + 2);
  fds.push_back({wake.get(), POLLIN, 0});
  fds.push_back({listener.get(), POLLIN, 0});
  net::Deadline next = net::Clock::now() + std::chrono::seconds(1);
  for (const auto& c : conns) {
    short events = POLLRDHUP;
    if (c->out_off < c->out.size())
      events |= POLLOUT;
    else if (!c->parked)
      events |= POLLIN;
    fds.push_back({c->fd.get(), events, 0});
    if (c->parked) next = std::min(next, c->parked_deadline);
    if (!c->hs->accepted()) next = std::min(next, c->hello_deadline);
  }
  int rc = ::poll(fds.data(), fds.size(), net::ms_left(next) + 1);
  if (rc < 0 && errno != EINTR) throw Internal("mpcomm: poll() failed: " + std::string(std::strerror(errno)));
  if (rc > 0) {
    if (fds[0].revents & POLLIN) {
      uint64_t n = 0;
      while (::read(wake.get(), &n, sizeof n) < 0 && errno == EINTR) {
      }
      keys_added = true;  // set_local() may have created keys
    }
    size_t polled = fds.size() - 2;  // accept_all() appends; those are polled next time
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = *conns[i];
      short ev = fds[i + 2].revents;
      if (ev == 0 || c.closed()) continue;
      try {
        if (ev & POLLOUT) flush(c);
        if (c.closed()) continue;
        if (!c.busy() && (ev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)))
          read_from(c);
        else if (c.busy() && (ev & (POLLRDHUP | POLLHUP | POLLERR)))
          close(c, LogLevel::info, "the client went away with a request outstanding");
      } catch (const Malformed& m) {
        close(c, LogLevel::warn, m.why);
      } catch (const std::exception& e) {  // e.g. out of memory for one client's frame: drop that client
        close(c, LogLevel::warn, e.what());
      }
    }
  }
  resolve_parked();
  expire(net::Clock::now());
  std::erase_if(conns, [](const std::unique_ptr<Conn>& c) { return c->closed(); });
}

void TcpStoreServer::Impl::accept_all() {
  while (true) {
    net::Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // EMFILE and friends: leave the connection in the backlog and try again on the next turn.
      MPCOMM_LOG(warn, "store server %s: accept() failed: %s", where.c_str(), std::strerror(errno));
      return;
    }
    net::set_nodelay(fd.get());
    auto c = std::make_unique<Conn>();
    c->peer = net::peer_address(fd.get());
    c->fd = std::move(fd);
    c->hs = std::make_unique<net::HandshakeServer>(kHelloMagic, auth);
    c->hello_deadline = net::Clock::now() + kHelloTimeout;
    conns.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(Conn& c) {
  uint8_t chunk[64 * 1024];
  while (!c.closed() && !c.busy()) {
    ssize_t r = ::recv(c.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (r > 0) {
      if (c.tls) {  // ciphertext: what it completes is the plaintext the protocol reads
        Bytes wire;
        c.tls->received(chunk, static_cast<size_t>(r), &c.in, &wire);
        queue_wire(c, wire);
      } else {
        c.in.insert(c.in.end(), chunk, chunk + r);
      }
      process(c);
      continue;
    }
    if (r == 0) {
      bool mid_frame = c.in_off < c.in.size();
      close(c, mid_frame ? LogLevel::warn : LogLevel::info,
            mid_frame ? "it closed in the middle of a frame" : "closed by the client");
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) close(c, LogLevel::info, std::strerror(errno));
    return;
  }
}

// Sends c.out[c.out_off..] as far as the socket takes it now, without blocking; every reply leaves
// through here. True when all of it is sent; false when the socket is full (the rest goes out on
// POLLOUT) or the send failed (c is then closed).
bool TcpStoreServer::Impl::send_pending(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t w = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c.out_off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    close(c, LogLevel::info, std::string("sending a reply failed: ") + std::strerror(errno));
    return false;
  }
  return true;
}

void TcpStoreServer::Impl::flush(Conn& c) {
  if (!send_pending(c)) return;
  // Fully sent: drop the buffer (a 64 MiB reply should not stay allocated) and serve what queued up.
  if (c.out.capacity() > (size_t{1} << 20)) Bytes().swap(c.out);
  c.out.clear();
  c.out_off = 0;
  process(c);
}

// Parses and serves the complete frames in c.in until the connection becomes busy. Throws Malformed.
void TcpStoreServer::Impl::process(Conn& c) {
  while (!c.hs->accepted()) {
    const size_t need = c.hs->want();
    if (c.busy() || c.in.size() - c.in_off < need) return;
    Bytes answer;
    std::string why = c.hs->feed(c.in.data() + c.in_off, &answer);
    c.in_off += need;
    if (!answer.empty()) {
      c.out.insert(c.out.end(), answer.begin(), answer.end());
      if (send_pending(c)) {
        c.out.clear();
        c.out_off = 0;
      }
    }
    if (!why.empty()) {
      refused.fetch_add(1);  // before closing: the client learns of the refusal from the close
      close(c, LogLevel::warn, "refused: " + why);
      return;
    }
    if (c.hs->accepted() && auth.tls) start_tls(c);
  }
  while (!c.closed() && !c.busy()) {
    RequestFrame req;
    size_t frame_bytes = 0;
    if (!parse_request(c.in.data() + c.in_off, c.in.size() - c.in_off, &req, &frame_bytes)) {
      if (frame_bytes > 0) {  // make room for the whole frame once, now that its size is known and bounded
        if (c.in_off > 0) {
          c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.in_off));
          c.in_off = 0;
        }
        c.in.reserve(frame_bytes);
      }
      break;
    }
    handle(c, req.cmd, std::move(req.key), req.value, req.value_len, req.arg);
    c.in_off += frame_bytes;
  }
  if (c.in_off == c.in.size()) {
    if (c.in.capacity() > (size_t{1} << 20)) Bytes().swap(c.in);
    c.in.clear();
    c.in_off = 0;
  }
}

void TcpStoreServer::Impl::handle(Conn& c, uint8_t cmd, std::string key, const uint8_t* value, size_t value_len,
                                  int64_t arg) {
  const char* name = cmd_name(cmd);
  bool multi = cmd == kCheck || cmd == kWait;
  if (multi && !key.empty()) throw Malformed{std::string(name) + " with a key outside its key list"};
  if ((cmd == kGet || cmd == kWait) && arg < 0)
    throw Malformed{std::string(name) + " with a negative timeout (" + std::to_string(arg) + " ms)"};
  if (cmd != kSet && !multi && value_len != 0) throw Malformed{std::string(name) + " with a value"};
  std::vector<std::string> keys;
  if (multi) {
    std::string bad = parse_key_list(value, value_len, &keys);
    if (!bad.empty()) throw Malformed{std::string(name) + " with " + bad};
  }

  std::unique_lock<std::mutex> lock(mu);
  switch (cmd) {
    case kSet:
      map[key].assign(value, value + value_len);
      keys_added = true;
      lock.unlock();
      reply(c, kOk, nullptr, 0, 0);
      return;
    case kAdd: {
      auto it = map.find(key);
      Bytes v = it == map.end() ? Bytes{} : it->second;
      int64_t result = 0;
      try {
        result = sd::add_to_counter(v, arg, key, where);
      } catch (const InvalidArgument& e) {
        lock.unlock();
        std::string msg = e.what();
        reply(c, kInvalid, reinterpret_cast<const uint8_t*>(msg.data()), msg.size(), 0);
        return;
      }
      map[key] = std::move(v);
      keys_added = true;
      lock.unlock();
      reply(c, kOk, nullptr, 0, result);
      return;
    }
    case kCheck: {
      bool all = missing_locked(keys).empty();
      lock.unlock();
      reply(c, kOk, nullptr, 0, all ? 1 : 0);
      return;
    }
    case kRemove: {
      bool existed = map.erase(key) > 0;
      lock.unlock();
      reply(c, kOk, nullptr, 0, existed ? 1 : 0);
      return;
    }
    case kGet:
    case kWait:
      lock.unlock();
      c.parked = true;
      c.parked_cmd = cmd;
      c.parked_keys = cmd == kGet ? std::vector<std::string>{std::move(key)} : std::move(keys);
      c.parked_timeout_ms = std::min(arg, kLongestWaitMs);
      c.parked_deadline = net::Clock::now() + std::chrono::milliseconds(c.parked_timeout_ms);
      try_answer_parked(c);  // answers at once when the keys exist
      return;
  }
}

void TcpStoreServer::Impl::reply(Conn& c, Status status, const uint8_t* value, size_t value_len, int64_t number) {
  if (c.tls) {
    Bytes plain, wire;
    put_reply(plain, status, value, value_len, number);
    c.tls->send(plain.data(), plain.size(), &wire);
    c.out.insert(c.out.end(), wire.begin(), wire.end());
  } else {
    put_reply(c.out, status, value, value_len, number);
  }
  // Send what the socket takes now; the rest goes out on POLLOUT. Not flush(): that would recurse into
  // process() from inside process().
  if (!send_pending(c)) return;
  c.out.clear();
  c.out_off = 0;
}

void TcpStoreServer::Impl::reply_missing(Conn& c, Status status, const std::vector<std::string>& keys) {
  Bytes list;
  put_key_list(list, keys);
  reply(c, status, list.data(), list.size(), 0);
}

// Answers c's parked request if its keys now exist; true when answered.
bool TcpStoreServer::Impl::try_answer_parked(Conn& c) {
  std::unique_lock<std::mutex> lock(mu);
  if (!missing_locked(c.parked_keys).empty()) return false;
  c.parked = false;
  if (c.parked_cmd == kGet) {
    Bytes v = map.at(c.parked_keys[0]);  // copied so that the lock is not held while sending
    lock.unlock();
    reply(c, kOk, v.data(), v.size(), 0);
  } else {
    lock.unlock();
    reply(c, kOk, nullptr, 0, 0);
  }
  c.parked_keys.clear();
  return true;
}

// Answers every parked request whose keys were created; the frames queued behind it may create more.
void TcpStoreServer::Impl::resolve_parked() {
  while (keys_added) {
    keys_added = false;
    for (auto& cp : conns) {
      Conn& c = *cp;
      if (c.closed() || !c.parked) continue;
      try {
        if (try_answer_parked(c) && !c.busy()) process(c);
      } catch (const Malformed& m) {
        close(c, LogLevel::warn, m.why);
      }
    }
  }
}

void TcpStoreServer::Impl::expire(net::Deadline now) {
  for (auto& cp : conns) {
    Conn& c = *cp;
    if (c.closed()) continue;
    if (!c.hs->accepted() && now >= c.hello_deadline) {
      close(c, LogLevel::warn, "no handshake within " + std::to_string(kHelloTimeout.count()) + " s of connecting");
      continue;
    }
    if (!c.parked || now < c.parked_deadline) continue;
    std::vector<std::string> missing;
    {
      std::lock_guard<std::mutex> lock(mu);
      missing = missing_locked(c.parked_keys);
    }
    c.parked = false;
    c.parked_keys.clear();
    try {
      reply_missing(c, kTimedOut, missing);
      if (!c.busy()) process(c);
    } catch (const Malformed& m) {
      close(c, LogLevel::warn, m.why);
    }
  }
  resolve_parked();  // frames served just now may have created keys
}

// Pokes the loop through the eventfd, so that it answers the requests parked on keys set_local() created,
// or sees `stop`.
void TcpStoreServer::Impl::wake_loop() {
  uint64_t one = 1;
  while (::write(wake.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, std::string token, StoreAuth auth)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.host = host;
  s.auth.secret = std::move(token);
  s.auth.tls = net::tls::requested();
  if (auth == StoreAuth::munge) {
    // Ranks prove who they are with MUNGE and are handed a secret made here: without one of its own the
    // job's secret is random, so nothing about it can be guessed from the job's public facts.
    std::string why;
    if (!net::munge::available(&why))
      throw PeerFailure("mpcomm: store server on " + host + ": its ranks join by MUNGE, but " + why);
    s.auth.munge = true;
    s.auth.job = net::munge::slurm_job();
    if (s.auth.secret.empty()) s.auth.secret = net::random_hex(32);  // nobody can guess it
  }
  s.listener = net::listen_tcp(host, port, &s.port);
  net::set_nonblocking(s.listener.get(), true);
  s.where = store_url(host, s.port);
  s.wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.wake.valid())
    throw Internal("mpcomm: store server " + s.where + ": eventfd() failed: " + std::strerror(errno));
  s.thread = std::thread([&s] { s.run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->wake_loop();
  impl_->thread.join();  // run() closes every connection and the listener on its way out
}

uint16_t TcpStoreServer::port() const { return impl_->port; }
const std::string& TcpStoreServer::host() const { return impl_->host; }
size_t TcpStoreServer::refused_connections() const { return impl_->refused.load(); }

void TcpStoreServer::set_local(const std::string& key, const Bytes& value) {
  sd::check_key(key, "set", impl_->where);
  sd::check_value(key, value.size(), impl_->where);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->map[key] = value;
  }
  impl_->wake_loop();  // so that it answers requests parked on this key
}

bool TcpStoreServer::set_local_if_absent(const std::string& key, const Bytes& value) {
  sd::check_key(key, "set", impl_->where);
  sd::check_value(key, value.size(), impl_->where);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->map.emplace(key, value).second) return false;
  }
  impl_->wake_loop();  // so that it answers requests parked on this key
  return true;
}

bool TcpStoreServer::get_local(const std::string& key, Bytes* value) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->map.find(key);
  if (it == impl_->map.end()) return false;
  if (value != nullptr) *value = it->second;
  return true;
}

}  // namespace mpcomm
