// TcpStore: the client of TcpStoreServer. One connection, one request at a time under a mutex; a
// connection that fails is not reopened, since the request stream on it is out of step.
#include <algorithm>
#include <mutex>
#include <string_view>

#include "bootstrap/store_detail.h"
#include "bootstrap/tcp_store_protocol.h"
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

// An error's message without its "mpcomm: ", for quoting inside another message.
std::string without_prefix(const char* what) {
  std::string_view s = what;
  if (s.starts_with("mpcomm: ")) s.remove_prefix(8);
  return std::string(s);
}

}  // namespace

struct TcpStore::Impl {
  std::unique_ptr<TcpStoreServer> server;  // with start_server; declared first so it is destroyed last
  std::string host;
  uint16_t port = 0;
  std::string where;  // "tcp://host:port"
  Millis timeout{0};
  std::string secret;  // the job's secret (handed out by the server in MUNGE mode)

  std::mutex mu;  // one request at a time
  net::Fd fd;
  net::tls::Ssl ssl;      // with MPCOMM_TLS=1
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
    net::tls::write_all(ssl.get(), fd.get(), frame.data(), frame.size(), net::deadline_after(timeout), what);
    uint8_t head[kReplyHead];
    net::tls::read_all(ssl.get(), fd.get(), head, sizeof head, reply_by, what);
    if (get_le(head, 4) != kReplyMagic || head[4] > kInvalid)
      throw PeerFailure("mpcomm: " + where + " answered with something that is not a store reply");
    uint64_t len = get_le(head + 5, 8);
    if (len > sd::kMaxValueBytes)
      throw PeerFailure("mpcomm: " + where + " answered with a value of " + std::to_string(len) + " bytes (at most " +
                        std::to_string(sd::kMaxValueBytes) + ")");
    Reply r{static_cast<Status>(head[4]), Bytes(len), 0};
    if (len > 0) net::tls::read_all(ssl.get(), fd.get(), r.value.data(), len, reply_by, what);
    uint8_t num[8];
    net::tls::read_all(ssl.get(), fd.get(), num, sizeof num, reply_by, what);
    r.number = static_cast<int64_t>(get_le(num, 8));
    answered = true;
    return r;
  } catch (const Error& e) {
    // The stream is now out of step (a reply may still arrive), so the connection is done for.
    ssl.reset();
    fd.reset();
    lost = without_prefix(e.what());
    if (!answered && e.code() == ErrorCode::peer_failure)
      throw PeerFailure("mpcomm: " + op + " failed: store " + where + " refused the connection after the handshake " +
                        "(the server logs the reason): " + lost);
    throw_error(e.code(), "mpcomm: " + op + " failed (store " + where + "): " + lost);
  }
}

TcpStore::TcpStore(const std::string& host, uint16_t port, std::string token, Millis timeout, bool start_server,
                   StoreAuth auth)
    : impl_(std::make_unique<Impl>()) {
  Impl& c = *impl_;
  c.host = host;
  c.port = port;
  c.where = store_url(host, port);
  auto deadline = sd::deadline_for(timeout, "connect", c.where);
  c.timeout = timeout;
  if (start_server) {
    // A store the other hosts reach by a name or a network address listens on every interface: the
    // name may resolve to another of this host's addresses here than it does there.
    // (Only a loopback literal stays on loopback: a name may resolve to 127.0.1.1 here, Debian's entry
    // for the machine's own name, and to its network address everywhere else.)
    const std::string listen = net::is_loopback_literal(host) ? host : net::wildcard_for(host);
    c.server = std::make_unique<TcpStoreServer>(listen, port, token, auth);
    c.port = c.server->port();
    c.where = store_url(host, c.port);
  }
  c.fd = net::connect_tcp(host, c.port, deadline, "store " + c.where);
  // With a secret, MUNGE mode is not needed: the server takes clients that prove it.
  net::Auth a = net::secret_auth(token);
  a.munge = auth == StoreAuth::munge && token.empty();
  a.job = net::munge::slurm_job();
  a.tls = net::tls::requested();
  net::Joined j = net::client_handshake(c.fd.get(), kHelloMagic, a, -1, deadline, "store " + c.where);
  c.secret = j.secret;
  if (a.tls) c.ssl = net::tls::connect(c.fd.get(), j.session_key, deadline, "store " + c.where);
}

const std::string& TcpStore::secret() const { return impl_->secret; }

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
