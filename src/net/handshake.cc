// The connection handshake (handshake.h): nonces from getrandom(), HMAC-SHA256 from OpenSSL's libcrypto,
// MUNGE through net/munge.h.
#include "net/handshake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "log/log.h"
#include "mpcomm/error.h"
#include "net/munge.h"

namespace mpcomm::net {

namespace {

using Bytes = std::vector<uint8_t>;
constexpr size_t kNonce = 32, kMac = 32;
constexpr size_t kHelloBytes = 4 + 4 + 4 + 4 + 8 + kNonce;
// A MUNGE credential is base64 of at most a few hundred bytes here; anything longer is not one.
constexpr uint32_t kMaxCredential = 16 * 1024;
constexpr uint32_t kModeSecret = 0, kModeMunge = 1;
constexpr uint32_t kFlagTls = 1;
constexpr uint8_t kProofAccepted = 1;
std::atomic<uint64_t> g_refused{0};

void store_le(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_le(Bytes& b, uint64_t v, size_t n) {
  uint8_t tmp[8];
  store_le(tmp, v, n);
  b.insert(b.end(), tmp, tmp + n);
}
uint64_t get_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void random_bytes(uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Internal(std::string("mpcomm: getrandom() failed: ") + std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void hmac(const uint8_t* key, size_t key_len, const Bytes& msg, uint8_t out[kMac]) {
  unsigned int len = kMac;
  if (HMAC(EVP_sha256(), key, static_cast<int>(key_len), msg.data(), msg.size(), out, &len) == nullptr || len != kMac)
    throw Internal("mpcomm: HMAC-SHA256 failed (OpenSSL)");
}

// K: the secret under a fixed label, so that the secret itself keys nothing else.
void job_key(const std::string& secret, uint8_t out[kMac]) {
  static const char kLabel[] = "mpcomm job key v2";
  hmac(reinterpret_cast<const uint8_t*>(kLabel), sizeof kLabel - 1, Bytes(secret.begin(), secret.end()), out);
}

// label | magic | rank | Nc | Ns (| extra)
Bytes transcript(const char* label, uint32_t magic, int64_t rank, const uint8_t* cn, const uint8_t* sn) {
  Bytes m(label, label + std::strlen(label) + 1);
  put_le(m, magic, 4);
  put_le(m, static_cast<uint64_t>(rank), 8);
  m.insert(m.end(), cn, cn + kNonce);
  m.insert(m.end(), sn, sn + kNonce);
  return m;
}

void proof(const std::string& secret, const char* label, uint32_t magic, int64_t rank, const uint8_t* cn,
           const uint8_t* sn, uint8_t out[kMac]) {
  uint8_t k[kMac];
  job_key(secret, k);
  hmac(k, sizeof k, transcript(label, magic, rank, cn, sn), out);
  OPENSSL_cleanse(k, sizeof k);
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

bool munge_root_allowed() {
  const char* r = std::getenv("MPCOMM_MUNGE_ROOT");
  return r != nullptr && std::strcmp(r, "1") == 0;
}

// Whose credentials this end accepts: its own uid's, root's too when MPCOMM_MUNGE_ROOT=1.
std::string uid_refusal(uid_t uid) {
  const uid_t me = ::geteuid();
  if (uid == me || (uid == 0 && munge_root_allowed())) return "";
  return "its MUNGE credential is of uid " + std::to_string(uid) + ", not of the job's owner (uid " +
         std::to_string(me) + ")" + (uid == 0 ? "; root is let in only with MPCOMM_MUNGE_ROOT=1" : "");
}

}  // namespace

uint64_t refused_handshakes() { return g_refused.load(); }

std::string random_hex(size_t nbytes) {
  std::vector<uint8_t> raw(nbytes);
  random_bytes(raw.data(), nbytes);
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : raw) hex += {digits[b >> 4], digits[b & 15]};
  return hex;
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "an unknown peer";
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
  return "an unknown peer";
}

HandshakeServer::HandshakeServer(uint32_t magic, const Auth& auth) : magic_(magic), auth_(auth), want_(kHelloBytes) {}

std::string HandshakeServer::refuse(std::string why) {
  state_ = State::refused;
  want_ = 0;
  g_refused.fetch_add(1);
  return why;
}

std::string HandshakeServer::feed(const uint8_t* p, Bytes* out) {
  switch (state_) {
    case State::hello: {
      const uint32_t magic = static_cast<uint32_t>(get_le(p, 4)), version = static_cast<uint32_t>(get_le(p + 4, 4));
      const uint32_t mode = static_cast<uint32_t>(get_le(p + 8, 4));
      if (magic != magic_) return refuse("it is not an mpcomm connection of this kind (magic " + hex(magic) + ")");
      if (version != kHandshakeVersion)
        return refuse("it speaks handshake version " + std::to_string(version) + ", this end " +
                      std::to_string(kHandshakeVersion));
      if (mode != kModeSecret && mode != kModeMunge)
        return refuse("it asks for handshake mode " + std::to_string(mode));
      if (mode == kModeMunge && !auth_.munge)
        return refuse("it asks to join by MUNGE, but this job has a secret (MPCOMM_TOKEN): give it the same");
      if (mode == kModeSecret && auth_.munge && auth_.secret.empty())
        return refuse("it presents a secret, but this job's ranks join by MUNGE (unset MPCOMM_TOKEN)");
      const uint32_t flags = static_cast<uint32_t>(get_le(p + 12, 4));
      if (((flags & kFlagTls) != 0) != auth_.tls)
        return refuse(
            auth_.tls ? std::string("it does not use TLS, and this end does (set MPCOMM_TLS the same on every rank)")
                      : std::string("it asks for TLS, and this end does not (set MPCOMM_TLS the same on every rank)"));
      rank_ = static_cast<int64_t>(get_le(p + 16, 8));
      std::memcpy(cnonce_, p + 24, kNonce);
      random_bytes(snonce_, kNonce);
      out->insert(out->end(), snonce_, snonce_ + kNonce);
      if (mode == kModeMunge) {
        state_ = State::munge_length;
        want_ = 4;
        return "";
      }
      uint8_t mac[kMac];
      proof(auth_.secret, "mpcomm server", magic_, rank_, cnonce_, snonce_, mac);
      out->insert(out->end(), mac, mac + kMac);
      state_ = State::proof;
      want_ = kMac;
      return "";
    }
    case State::proof: {
      uint8_t mac[kMac];
      proof(auth_.secret, "mpcomm client", magic_, rank_, cnonce_, snonce_, mac);
      if (CRYPTO_memcmp(mac, p, kMac) != 0)
        return refuse(
            "it does not prove this job's secret (a wrong MPCOMM_TOKEN, a replayed handshake, or not of "
            "this job)");
      if (auth_.tls) out->push_back(kProofAccepted);  // TLS bytes follow only after this
      state_ = State::accepted;
      want_ = 0;
      return "";
    }
    case State::munge_length: {
      const uint32_t n = static_cast<uint32_t>(get_le(p, 4));
      if (n == 0 || n > kMaxCredential)
        return refuse("it sends a MUNGE credential of " + std::to_string(n) + " bytes (at most " +
                      std::to_string(kMaxCredential) + ")");
      state_ = State::munge_cred;
      want_ = n;
      return "";
    }
    case State::munge_cred:
      return munge_accept(std::string(reinterpret_cast<const char*>(p), want_), out);
    case State::accepted:
    case State::refused:
      break;
  }
  throw Internal("mpcomm: handshake fed after it ended");
}

void HandshakeServer::session_key(uint8_t out[32]) const {
  if (state_ != State::accepted) throw Internal("mpcomm: a session key before the handshake was accepted");
  proof(auth_.secret, "mpcomm session", magic_, rank_, cnonce_, snonce_, out);
}

std::string HandshakeServer::munge_accept(const std::string& cred, Bytes* out) {
  auto answer_refusal = [&](const std::string& why) {
    out->push_back(1);
    put_le(*out, why.size(), 4);
    out->insert(out->end(), why.begin(), why.end());
    return refuse(why);
  };
  munge::Decoded d;
  std::string bad;
  try {
    bad = munge::decode(cred, &d);
  } catch (const Error& e) {
    bad = e.what();
  }
  if (!bad.empty()) return answer_refusal("its MUNGE credential does not decode: " + bad);
  if (std::string why = uid_refusal(d.uid); !why.empty()) return answer_refusal(why);
  Bytes want = transcript("mpcomm munge client", magic_, rank_, cnonce_, snonce_);
  want.insert(want.end(), auth_.job.begin(), auth_.job.end());
  if (d.payload != want)
    return answer_refusal("its MUNGE credential is not for this job (" + auth_.job +
                          ") and this connection's nonces (another job's, or replayed)");
  Bytes mine = transcript("mpcomm munge server", magic_, rank_, cnonce_, snonce_);
  mine.insert(mine.end(), auth_.secret.begin(), auth_.secret.end());
  std::string answer = munge::encode(mine, d.uid);
  out->push_back(0);
  put_le(*out, answer.size(), 4);
  out->insert(out->end(), answer.begin(), answer.end());
  state_ = State::accepted;
  want_ = 0;
  return "";
}

static Joined client_steps(int fd, uint32_t magic, const Auth& auth, int64_t rank, Deadline deadline,
                           const std::string& what);

Joined client_handshake(int fd, uint32_t magic, const Auth& auth, int64_t rank, Deadline deadline,
                        const std::string& what) {
  try {
    return client_steps(fd, magic, auth, rank, deadline, what);
  } catch (const Timeout& e) {
    throw Timeout("mpcomm: the handshake with " + what + " did not end in time (" + e.what() +
                  "): is it an mpcomm listener of this job, and alive?");
  }
}

static Joined client_steps(int fd, uint32_t magic, const Auth& auth, int64_t rank, Deadline deadline,
                           const std::string& what) {
  uint8_t cn[kNonce], sn[kNonce];
  Joined j;
  j.rank = rank;
  random_bytes(cn, kNonce);
  uint8_t hello[kHelloBytes] = {};
  store_le(hello, magic, 4);
  store_le(hello + 4, kHandshakeVersion, 4);
  store_le(hello + 8, auth.munge ? kModeMunge : kModeSecret, 4);
  store_le(hello + 12, auth.tls ? kFlagTls : 0, 4);
  store_le(hello + 16, static_cast<uint64_t>(rank), 8);
  std::memcpy(hello + 24, cn, kNonce);
  write_all(fd, hello, sizeof hello, deadline, what);
  try {
    read_all(fd, sn, kNonce, deadline, what);
  } catch (const PeerFailure& e) {
    throw PeerFailure("mpcomm: " + what +
                      " refused this connection at its Hello (another protocol version or job "
                      "kind; its log says why): " +
                      e.what());
  }
  if (!auth.munge) {
    uint8_t theirs[kMac], mine[kMac];
    read_all(fd, theirs, kMac, deadline, what);
    proof(auth.secret, "mpcomm server", magic, rank, cn, sn, mine);
    const bool server_knows = CRYPTO_memcmp(theirs, mine, kMac) == 0;
    // Our proof goes out either way (bound to this connection's nonces it is worth nothing elsewhere), so
    // that a server with another secret refuses, logs and counts us too.
    proof(auth.secret, "mpcomm client", magic, rank, cn, sn, mine);
    write_all(fd, mine, kMac, deadline, what);
    if (!server_knows)
      throw PeerFailure("mpcomm: " + what +
                        " does not know this job's secret (a wrong MPCOMM_TOKEN on one side, or "
                        "another job's listener at that address): refused to go on");
    if (auth.tls) {
      uint8_t ack = 0;
      try {
        read_all(fd, &ack, 1, deadline, what);
      } catch (const PeerFailure& e) {
        throw PeerFailure("mpcomm: " + what + " refused this connection's proof (its log says why): " + e.what());
      }
      if (ack != kProofAccepted) throw PeerFailure("mpcomm: " + what + " answered the proof with a malformed byte");
    }
    j.secret = auth.secret;
    proof(j.secret, "mpcomm session", magic, rank, cn, sn, j.session_key);
    return j;
  }
  Bytes payload = transcript("mpcomm munge client", magic, rank, cn, sn);
  payload.insert(payload.end(), auth.job.begin(), auth.job.end());
  const std::string cred = munge::encode(payload, std::nullopt);
  Bytes msg;
  put_le(msg, cred.size(), 4);
  msg.insert(msg.end(), cred.begin(), cred.end());
  write_all(fd, msg.data(), msg.size(), deadline, what);
  uint8_t head[5];
  try {
    read_all(fd, head, sizeof head, deadline, what);
  } catch (const PeerFailure& e) {
    throw PeerFailure("mpcomm: " + what + " closed the connection during the MUNGE join: " + e.what());
  }
  const uint32_t n = static_cast<uint32_t>(get_le(head + 1, 4));
  if (n > kMaxCredential) throw PeerFailure("mpcomm: " + what + " answered the MUNGE join with a malformed frame");
  std::string body(n, '\0');
  read_all(fd, body.data(), n, deadline, what);
  if (head[0] != 0) throw PeerFailure("mpcomm: " + what + " refused this process: " + body);
  munge::Decoded d;
  if (std::string bad = munge::decode(body, &d); !bad.empty())
    throw PeerFailure("mpcomm: " + what + " answered with a MUNGE credential that does not decode: " + bad);
  if (std::string why = uid_refusal(d.uid); !why.empty())
    throw PeerFailure("mpcomm: " + what + " is not the job owner's: " + why);
  const Bytes head_want = transcript("mpcomm munge server", magic, rank, cn, sn);
  if (d.payload.size() < head_want.size() || !std::equal(head_want.begin(), head_want.end(), d.payload.begin()))
    throw PeerFailure("mpcomm: " + what + " answered with a MUNGE credential of another connection");
  j.secret.assign(d.payload.begin() + static_cast<ptrdiff_t>(head_want.size()), d.payload.end());
  proof(j.secret, "mpcomm session", magic, rank, cn, sn, j.session_key);
  return j;
}

std::string server_handshake(int fd, uint32_t magic, const Auth& auth, Joined* joined, Deadline deadline,
                             const std::string& what) {
  HandshakeServer hs(magic, auth);
  Bytes in, out;
  while (hs.want() > 0) {
    in.resize(hs.want());
    read_all(fd, in.data(), in.size(), deadline, what);
    out.clear();
    std::string why = hs.feed(in.data(), &out);
    if (!out.empty()) {
      try {
        write_all(fd, out.data(), out.size(), deadline, what);
      } catch (const Error&) {
        if (why.empty()) throw;
      }
    }
    if (!why.empty()) return why;
  }
  if (joined != nullptr) {
    joined->secret = auth.secret;
    joined->rank = hs.rank();
    hs.session_key(joined->session_key);
  }
  return "";
}

}  // namespace mpcomm::net
