// TcpStore: a store server (one thread, one poll() loop) and its client.
//
// Wire protocol, all integers little-endian. A connection opens with a net::Hello (magic 'MPST') that
// carries the job token's digest; the server closes connections whose Hello is wrong and counts them.
// Then the client sends requests, one at a time, and the server answers each in order:
//   request  u32 'MPSQ' | u8 cmd | u32 key_len | key | u64 value_len | value | i64 arg
//   reply    u32 'MPSR' | u8 status | u64 value_len | value | i64 number
// arg is the timeout in ms for GET and WAIT, the delta for ADD, 0 otherwise. CHECK and WAIT carry no
// key; their value is a key list (u32 count, then u32 length + bytes per key), and a WAIT that times out
// answers with the list of keys still missing. status is OK, TIMEOUT or INVALID (value = message).
// number is ADD's new value, CHECK's and REMOVE's 0/1.
//
// GET and WAIT never block the server: a request whose keys are missing is parked on its connection
// until a SET/ADD/set_local creates them or its deadline passes. While a connection has a parked request
// or unsent reply bytes the server reads nothing more from it, so each connection costs at most one
// frame plus one reply of memory. Every length is checked against the store's limits before anything
// is allocated for it; a frame that breaks the protocol closes its connection with a warning and never
// affects the others.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "log/log.h"
#include "net/socket.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm {

namespace store_detail {  // defined in store.cc
extern const size_t kMaxKeyBytes;
extern const size_t kMaxValueBytes;
extern const size_t kMaxKeysPerRequest;
std::string key_list(const std::vector<std::string>& keys);
void check_key(const std::string& key, const char* op, const std::string& where);
void check_keys(const std::vector<std::string>& keys, const char* op, const std::string& where);
void check_value(const std::string& key, size_t size, const std::string& where);
net::Deadline deadline_for(Millis timeout, const char* op, const std::string& where);
Timeout timeout_error(const char* op, Millis timeout, const std::vector<std::string>& missing,
                      const std::string& where);
int64_t add_to_counter(Bytes& value, int64_t delta, const std::string& key, const std::string& where);
}  // namespace store_detail

namespace sd = store_detail;

namespace {

// ---- protocol ---------------------------------------------------------------------------------------

constexpr uint32_t kHelloMagic = 0x4d505354;  // 'MPST'
// net.cc's Hello version. net.h exposes only the blocking recv_hello(), which a poll() loop cannot use,
// so the server checks the Hello itself.
constexpr uint32_t kHelloVersion = 1;
constexpr uint32_t kRequestMagic = 0x4d505351;  // 'MPSQ'
constexpr uint32_t kReplyMagic = 0x4d505352;    // 'MPSR'

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCheck, kWait, kRemove };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kInvalid = 2 };

constexpr size_t kRequestHead = 4 + 1 + 4;  // magic, cmd, key_len
constexpr size_t kReplyHead = 4 + 1 + 8;    // magic, status, value_len
constexpr int64_t kLongestWaitMs = int64_t{365} * 24 * 3600 * 1000;
// A connection must present its Hello this soon after connecting, so that idle strays cannot pile up.
constexpr auto kHelloTimeout = std::chrono::seconds(30);

const char* cmd_name(uint8_t c) {
  switch (c) {
    case kSet: return "set";
    case kGet: return "get";
    case kAdd: return "add";
    case kCheck: return "check";
    case kWait: return "wait";
    case kRemove: return "remove";
  }
  return "unknown";
}

void put_le(Bytes& out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void put_key_list(Bytes& out, const std::vector<std::string>& keys) {
  put_le(out, keys.size(), 4);
  for (const auto& k : keys) {
    put_le(out, k.size(), 4);
    out.insert(out.end(), k.begin(), k.end());
  }
}

// Parses a key list, bounding every count and length before using it. Returns why it is malformed, or
// an empty string.
std::string parse_key_list(const uint8_t* p, size_t n, std::vector<std::string>* keys) {
  if (n < 4) return "a key list of " + std::to_string(n) + " bytes, too short for its count";
  uint64_t count = get_le(p, 4);
  if (count > sd::kMaxKeysPerRequest)
    return "a key list of " + std::to_string(count) + " keys (at most " + std::to_string(sd::kMaxKeysPerRequest) + ")";
  size_t off = 4;
  keys->clear();
  for (uint64_t i = 0; i < count; ++i) {
    if (n - off < 4) return "a key list that ends before key " + std::to_string(i) + " of " + std::to_string(count);
    uint64_t len = get_le(p + off, 4);
    off += 4;
    if (len > sd::kMaxKeyBytes) return "a key of " + std::to_string(len) + " bytes in its key list";
    if (n - off < len) return "a key list that ends inside key " + std::to_string(i);
    keys->emplace_back(reinterpret_cast<const char*>(p + off), len);
    off += len;
  }
  if (off != n) return "a key list with " + std::to_string(n - off) + " bytes after its last key";
  return "";
}

Bytes encode_request(uint8_t cmd, const std::string& key, const Bytes& value, int64_t arg) {
  Bytes f;
  f.reserve(kRequestHead + key.size() + 8 + value.size() + 8);
  put_le(f, kRequestMagic, 4);
  f.push_back(cmd);
  put_le(f, key.size(), 4);
  f.insert(f.end(), key.begin(), key.end());
  put_le(f, value.size(), 8);
  f.insert(f.end(), value.begin(), value.end());
  put_le(f, static_cast<uint64_t>(arg), 8);
  return f;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string without_prefix(const char* what) {
  std::string_view s = what;
  if (s.starts_with("mpcomm: ")) s.remove_prefix(8);
  return std::string(s);
}

std::string url(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return "unknown peer";
}

// A protocol violation by one client; closes that connection.
struct Malformed {
  std::string why;
};

}  // namespace

// ---- server -------------------------------------------------------------------------------------------

struct TcpStoreServer::Impl {
  // One client connection. Only the server thread touches these.
  struct Conn {
    net::Fd fd;
    std::string peer;
    bool hello_done = false;
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
  std::string token;
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
  void process(Conn& c);
  void handle(Conn& c, uint8_t cmd, std::string key, const uint8_t* value, size_t value_len, int64_t arg);
  void reply(Conn& c, Status status, const uint8_t* value, size_t value_len, int64_t number);
  void reply_missing(Conn& c, Status status, const std::vector<std::string>& keys);
  bool try_answer_parked(Conn& c);
  void resolve_parked();
  void expire(net::Deadline now);
  void close(Conn& c, LogLevel level, const std::string& why);
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
    if (!c->hello_done) next = std::min(next, c->hello_deadline);
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
    c->peer = peer_name(fd.get());
    c->fd = std::move(fd);
    c->hello_deadline = net::Clock::now() + kHelloTimeout;
    conns.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(Conn& c) {
  uint8_t chunk[64 * 1024];
  while (!c.closed() && !c.busy()) {
    ssize_t r = ::recv(c.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (r > 0) {
      c.in.insert(c.in.end(), chunk, chunk + r);
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

void TcpStoreServer::Impl::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t w = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c.out_off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(c, LogLevel::info, std::string("sending a reply failed: ") + std::strerror(errno));
    return;
  }
  // Fully sent: drop the buffer (a 64 MiB reply should not stay allocated) and serve what queued up.
  if (c.out.capacity() > (size_t{1} << 20)) Bytes().swap(c.out);
  c.out.clear();
  c.out_off = 0;
  process(c);
}

// Parses and serves the complete frames in c.in until the connection becomes busy. Throws Malformed.
void TcpStoreServer::Impl::process(Conn& c) {
  if (!c.hello_done) {
    if (c.in.size() - c.in_off < sizeof(net::Hello)) return;
    net::Hello h{};
    std::memcpy(&h, c.in.data() + c.in_off, sizeof h);
    c.in_off += sizeof h;
    std::string why;
    if (h.magic != kHelloMagic)
      why = "it is not an mpcomm store client (hello magic " + hex(h.magic) + ")";
    else if (h.version != kHelloVersion)
      why = "it speaks protocol version " + std::to_string(h.version) + ", this server " +
            std::to_string(kHelloVersion);
    else if (h.token_digest != net::token_digest(token))
      why = "its job token is wrong (check MPCOMM_TOKEN)";
    if (!why.empty()) {
      refused.fetch_add(1);  // before closing: the client learns of the refusal from the close
      close(c, LogLevel::warn, "refused: " + why);
      return;
    }
    c.hello_done = true;
  }
  while (!c.closed() && !c.busy()) {
    const uint8_t* p = c.in.data() + c.in_off;
    size_t avail = c.in.size() - c.in_off;
    if (avail < kRequestHead) break;
    uint32_t magic = static_cast<uint32_t>(get_le(p, 4));
    uint8_t cmd = p[4];
    uint64_t key_len = get_le(p + 5, 4);
    if (magic != kRequestMagic) throw Malformed{"bad frame magic " + hex(magic)};
    if (cmd < kSet || cmd > kRemove) throw Malformed{"unknown command " + std::to_string(cmd)};
    if (key_len > sd::kMaxKeyBytes)
      throw Malformed{std::string(cmd_name(cmd)) + " with a key of " + std::to_string(key_len) + " bytes (at most " +
                      std::to_string(sd::kMaxKeyBytes) + ")"};
    if (avail < kRequestHead + key_len + 8) break;
    uint64_t value_len = get_le(p + kRequestHead + key_len, 8);
    if (value_len > sd::kMaxValueBytes)
      throw Malformed{std::string(cmd_name(cmd)) + " with a value of " + std::to_string(value_len) +
                      " bytes (at most " + std::to_string(sd::kMaxValueBytes) + ")"};
    size_t total = kRequestHead + key_len + 8 + value_len + 8;
    if (avail < total) {
      if (c.in_off > 0) {  // make room for the whole frame once, now that its size is known and bounded
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.in_off));
        c.in_off = 0;
      }
      c.in.reserve(total);
      break;
    }
    std::string key(reinterpret_cast<const char*>(p + kRequestHead), key_len);
    const uint8_t* value = p + kRequestHead + key_len + 8;
    int64_t arg = static_cast<int64_t>(get_le(value + value_len, 8));
    handle(c, cmd, std::move(key), value, value_len, arg);
    c.in_off += total;
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
  put_le(c.out, kReplyMagic, 4);
  c.out.push_back(status);
  put_le(c.out, value_len, 8);
  if (value_len > 0) c.out.insert(c.out.end(), value, value + value_len);
  put_le(c.out, static_cast<uint64_t>(number), 8);
  // Send what the socket takes now; the rest goes out on POLLOUT. Not flush(): that would recurse into
  // process() from inside process().
  while (c.out_off < c.out.size()) {
    ssize_t w = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c.out_off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(c, LogLevel::info, std::string("sending a reply failed: ") + std::strerror(errno));
    return;
  }
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
    if (!c.hello_done && now >= c.hello_deadline) {
      close(c, LogLevel::warn, "no hello within " + std::to_string(kHelloTimeout.count()) + " s of connecting");
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

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, std::string token)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.host = host;
  s.token = std::move(token);
  s.listener = net::listen_tcp(host, port, &s.port);
  net::set_nonblocking(s.listener.get(), true);
  s.where = url(host, s.port);
  s.wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.wake.valid())
    throw Internal("mpcomm: store server " + s.where + ": eventfd() failed: " + std::strerror(errno));
  s.thread = std::thread([&s] { s.run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop.store(true, std::memory_order_release);
  uint64_t one = 1;
  while (::write(impl_->wake.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
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
  uint64_t one = 1;  // wake the loop so that it answers requests parked on this key
  while (::write(impl_->wake.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
}

bool TcpStoreServer::set_local_if_absent(const std::string& key, const Bytes& value) {
  sd::check_key(key, "set", impl_->where);
  sd::check_value(key, value.size(), impl_->where);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->map.emplace(key, value).second) return false;
  }
  uint64_t one = 1;  // wake the loop so that it answers requests parked on this key
  while (::write(impl_->wake.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
  return true;
}

bool TcpStoreServer::get_local(const std::string& key, Bytes* value) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->map.find(key);
  if (it == impl_->map.end()) return false;
  if (value != nullptr) *value = it->second;
  return true;
}

// ---- client ---------------------------------------------------------------------------------------------

struct TcpStore::Impl {
  std::unique_ptr<TcpStoreServer> server;  // with start_server; declared first so it is destroyed last
  std::string host;
  uint16_t port = 0;
  std::string where;  // "tcp://host:port"
  Millis timeout{0};

  std::mutex mu;  // one request at a time
  net::Fd fd;
  bool answered = false;  // the server has answered once, so it accepted our Hello
  std::string lost;       // why the connection broke; it is not reopened

  struct Reply {
    Status status;
    Bytes value;
    int64_t number;
  };

  // Sends one request and reads its reply. `reply_by` bounds the wait for the reply.
  Reply call(uint8_t cmd, const std::string& key, const Bytes& value, int64_t arg, net::Deadline reply_by,
             const std::vector<std::string>& keys_for_errors);
};

TcpStore::Impl::Reply TcpStore::Impl::call(uint8_t cmd, const std::string& key, const Bytes& value, int64_t arg,
                                           net::Deadline reply_by,
                                           const std::vector<std::string>& keys_for_errors) {
  std::string what = "store " + where;
  std::string op = std::string("store ") + cmd_name(cmd) + " of keys " + sd::key_list(keys_for_errors);
  std::lock_guard<std::mutex> lock(mu);
  if (!lost.empty())
    throw PeerFailure("mpcomm: " + op + " failed: the connection to store " + where + " was lost earlier (" + lost +
                      ")");
  try {
    Bytes frame = encode_request(cmd, key, value, arg);
    net::write_all(fd.get(), frame.data(), frame.size(), net::deadline_after(timeout), what);
    uint8_t head[kReplyHead];
    net::read_all(fd.get(), head, sizeof head, reply_by, what);
    if (get_le(head, 4) != kReplyMagic || head[4] > kInvalid)
      throw PeerFailure("mpcomm: " + where + " answered with something that is not a store reply");
    uint64_t len = get_le(head + 5, 8);
    if (len > sd::kMaxValueBytes)
      throw PeerFailure("mpcomm: " + where + " answered with a value of " + std::to_string(len) + " bytes (at most " +
                        std::to_string(sd::kMaxValueBytes) + ")");
    Reply r{static_cast<Status>(head[4]), Bytes(len), 0};
    if (len > 0) net::read_all(fd.get(), r.value.data(), len, reply_by, what);
    uint8_t num[8];
    net::read_all(fd.get(), num, sizeof num, reply_by, what);
    r.number = static_cast<int64_t>(get_le(num, 8));
    answered = true;
    return r;
  } catch (const Error& e) {
    // The stream is now out of step (a reply may still arrive), so the connection is done for.
    fd.reset();
    lost = without_prefix(e.what());
    if (!answered && e.code() == ErrorCode::peer_failure)
      throw PeerFailure("mpcomm: " + op + " failed: store " + where + " refused the connection (probably a wrong " +
                        "MPCOMM_TOKEN; the server logs the reason): " + lost);
    throw_error(e.code(), "mpcomm: " + op + " failed (store " + where + "): " + lost);
  }
}

TcpStore::TcpStore(const std::string& host, uint16_t port, std::string token, Millis timeout, bool start_server)
    : impl_(std::make_unique<Impl>()) {
  Impl& c = *impl_;
  c.host = host;
  c.port = port;
  c.where = url(host, port);
  auto deadline = sd::deadline_for(timeout, "connect", c.where);
  c.timeout = timeout;
  if (start_server) {
    // A store the other hosts reach by a name or a network address listens on every interface: the
    // name may resolve to another of this host's addresses here than it does there.
    // (Only a loopback literal stays on loopback: a name may resolve to 127.0.1.1 here, Debian's entry
    // for the machine's own name, and to its network address everywhere else.)
    const std::string listen = net::is_loopback_literal(host) ? host : net::wildcard_for(host);
    c.server = std::make_unique<TcpStoreServer>(listen, port, token);
    c.port = c.server->port();
    c.where = url(host, c.port);
  }
  c.fd = net::connect_tcp(host, c.port, deadline, "store " + c.where);
  net::send_hello(c.fd.get(), kHelloMagic, token, -1, deadline, "store " + c.where);
}

TcpStore::~TcpStore() = default;

uint16_t TcpStore::port() const { return impl_->port; }
const std::string& TcpStore::host() const { return impl_->host; }

// Deadline for the reply to a blocking request the server holds for `timeout`: a little later than the
// server's, so that the server's TIMEOUT answer normally wins and a dead or hung server still cannot
// hold the client past it.
static net::Deadline reply_deadline(Millis timeout, const char* op, const std::string& where) {
  Millis grace = std::min<Millis>(Millis(250) + timeout / 4, Millis(5000));
  return sd::deadline_for(timeout, op, where) + grace;
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  sd::check_key(key, "set", impl_->where);
  sd::check_value(key, value.size(), impl_->where);
  impl_->call(kSet, key, value, 0, net::deadline_after(impl_->timeout), {key});
}

Bytes TcpStore::get(const std::string& key, Millis timeout) {
  sd::check_key(key, "get", impl_->where);
  auto by = reply_deadline(timeout, "get", impl_->where);
  int64_t ms = std::min<int64_t>(timeout.count(), kLongestWaitMs);
  auto r = impl_->call(kGet, key, {}, ms, by, {key});
  if (r.status == kTimedOut) throw sd::timeout_error("get", timeout, {key}, impl_->where);
  if (r.status != kOk) throw InvalidArgument(std::string(r.value.begin(), r.value.end()));
  return std::move(r.value);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  sd::check_key(key, "add", impl_->where);
  auto r = impl_->call(kAdd, key, {}, delta, net::deadline_after(impl_->timeout), {key});
  if (r.status != kOk) throw InvalidArgument(std::string(r.value.begin(), r.value.end()));
  return r.number;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  sd::check_keys(keys, "check", impl_->where);
  Bytes list;
  put_key_list(list, keys);
  auto r = impl_->call(kCheck, "", list, 0, net::deadline_after(impl_->timeout), keys);
  if (r.status != kOk) throw InvalidArgument(std::string(r.value.begin(), r.value.end()));
  return r.number != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  sd::check_keys(keys, "wait", impl_->where);
  auto by = reply_deadline(timeout, "wait", impl_->where);
  int64_t ms = std::min<int64_t>(timeout.count(), kLongestWaitMs);
  Bytes list;
  put_key_list(list, keys);
  auto r = impl_->call(kWait, "", list, ms, by, keys);
  if (r.status == kTimedOut) {
    std::vector<std::string> missing;
    if (!parse_key_list(r.value.data(), r.value.size(), &missing).empty() || missing.empty()) missing = keys;
    throw sd::timeout_error("wait", timeout, missing, impl_->where);
  }
  if (r.status != kOk) throw InvalidArgument(std::string(r.value.begin(), r.value.end()));
}

bool TcpStore::remove(const std::string& key) {
  sd::check_key(key, "remove", impl_->where);
  auto r = impl_->call(kRemove, key, {}, 0, net::deadline_after(impl_->timeout), {key});
  if (r.status != kOk) throw InvalidArgument(std::string(r.value.begin(), r.value.end()));
  return r.number != 0;
}

}  // namespace mpcomm
