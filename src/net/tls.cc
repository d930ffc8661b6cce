// TLS 1.3 with an external PSK per connection (tls.h), on OpenSSL's libssl.
#include "net/tls.h"

#include <openssl/err.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "mpcomm/error.h"
#include "settings/settings.h"

namespace mpcomm::net::tls {

namespace {

constexpr char kIdentity[] = "mpcomm";
constexpr unsigned char kAes128GcmSha256[2] = {0x13, 0x01};

std::string openssl_error() {
  std::string s;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    s += (s.empty() ? "" : "; ") + std::string(buf);
  }
  return s.empty() ? std::string("no reason given") : s;
}

// The session an external PSK stands for: the key as its master key, TLS 1.3, AES-128-GCM.
SSL_SESSION* psk_session(SSL* ssl) {
  const auto* key = static_cast<const uint8_t*>(SSL_get_app_data(ssl));
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  SSL_SESSION* s = SSL_SESSION_new();
  if (key == nullptr || cipher == nullptr || s == nullptr || !SSL_SESSION_set1_master_key(s, key, kKeyBytes) ||
      !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int use_psk(SSL* ssl, const EVP_MD*, const unsigned char** id, size_t* idlen, SSL_SESSION** sess) {
  *sess = psk_session(ssl);
  *id = reinterpret_cast<const unsigned char*>(kIdentity);
  *idlen = sizeof kIdentity - 1;
  return *sess != nullptr;
}

int find_psk(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  *sess = nullptr;  // an unknown identity: no PSK, and without a certificate the handshake fails
  if (idlen == sizeof kIdentity - 1 && std::memcmp(id, kIdentity, idlen) == 0) *sess = psk_session(ssl);
  return 1;
}

SSL_CTX* make_ctx(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) throw Internal("mpcomm: TLS: SSL_CTX_new failed: " + openssl_error());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read what the socket holds, many records at once, instead of two reads per 16 KiB record; what is
  // read ahead waits inside the session (buffered() says so to the engine, which reads it before sleeping).
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 256 * 1024);
  if (server)
    SSL_CTX_set_psk_find_session_callback(ctx, find_psk);
  else
    SSL_CTX_set_psk_use_session_callback(ctx, use_psk);
  return ctx;
}

SSL_CTX* ctx(bool server) {
  static SSL_CTX* const client_ctx = make_ctx(false);
  static SSL_CTX* const server_ctx = make_ctx(true);
  return server ? server_ctx : client_ctx;
}

// Waits until fd is ready for what SSL_get_error() asked; false when the deadline passed.
bool wait_for(int fd, int ssl_error, Deadline deadline) {
  pollfd p{fd, static_cast<short>(ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
  while (true) {
    int r = ::poll(&p, 1, ms_left(deadline, 1000));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the next SSL call report it
    if (Clock::now() >= deadline) return false;
  }
}

// The key must outlive the handshake: SSL_get_app_data points at it until then.
Ssl handshake(int fd, const uint8_t key[kKeyBytes], bool server, Deadline deadline, const std::string& what) {
  ERR_clear_error();
  Ssl ssl(SSL_new(ctx(server)));
  if (!ssl || !SSL_set_fd(ssl.get(), fd)) throw Internal("mpcomm: TLS with " + what + ": " + openssl_error());
  SSL_set_app_data(ssl.get(), const_cast<uint8_t*>(key));
  set_nonblocking(fd, true);
  while (true) {
    int r = server ? SSL_accept(ssl.get()) : SSL_connect(ssl.get());
    if (r == 1) break;
    int e = SSL_get_error(ssl.get(), r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
      throw PeerFailure("mpcomm: the TLS handshake with " + what + " failed (does it use MPCOMM_TLS=1 with this " +
                        "job's secret?): " + openssl_error());
    if (!wait_for(fd, e, deadline)) throw Timeout("mpcomm: the TLS handshake with " + what + " did not end in time");
  }
  SSL_set_app_data(ssl.get(), nullptr);
  return ssl;
}

[[noreturn]] void failed(SSL* ssl, int r, const char* doing, const std::string& what) {
  int e = SSL_get_error(ssl, r);
  if (e == SSL_ERROR_ZERO_RETURN) throw PeerFailure("mpcomm: " + what + " closed its connection (process ended?)");
  if (e == SSL_ERROR_SYSCALL)
    throw PeerFailure("mpcomm: the connection to " + what + " failed while " + doing + ": " +
                      (errno != 0 ? std::strerror(errno) : "it closed (process ended?)"));
  throw PeerFailure("mpcomm: TLS on the connection to " + what + " failed while " + doing + ": " + openssl_error());
}

}  // namespace

bool requested() { return param_string("MPCOMM_TLS") == "1"; }

Ssl connect(int fd, const uint8_t key[kKeyBytes], Deadline deadline, const std::string& what) {
  return handshake(fd, key, false, deadline, what);
}

Ssl accept(int fd, const uint8_t key[kKeyBytes], Deadline deadline, const std::string& what) {
  return handshake(fd, key, true, deadline, what);
}

size_t write_some(SSL* ssl, const void* buf, size_t n, const std::string& what) {
  size_t done = 0;
  while (done < n) {  // one record per SSL_write_ex (partial writes): as many as the socket takes now
    size_t k = 0;
    ERR_clear_error();
    errno = 0;
    int r = SSL_write_ex(ssl, static_cast<const char*>(buf) + done, n - done, &k);
    if (r == 1) {
      done += k;
      continue;
    }
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) break;
    failed(ssl, r, "sending", what);
  }
  return done;
}

size_t read_some(SSL* ssl, void* buf, size_t n, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    size_t k = 0;
    ERR_clear_error();
    errno = 0;
    int r = SSL_read_ex(ssl, static_cast<char*>(buf) + got, n - got, &k);
    if (r == 1) {
      got += k;
      continue;
    }
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
    failed(ssl, r, "receiving", what);
  }
  return got;
}

bool buffered(SSL* ssl) { return SSL_has_pending(ssl) != 0; }

void write_all(SSL* ssl, int fd, const void* buf, size_t n, Deadline deadline, const std::string& what) {
  if (ssl == nullptr) return net::write_all(fd, buf, n, deadline, what);
  const char* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < n) {
    size_t w = write_some(ssl, p + done, n - done, what);
    done += w;
    if (w == 0 && !wait_for(fd, SSL_ERROR_WANT_WRITE, deadline)) throw Timeout("mpcomm: timed out sending to " + what);
  }
}

void read_all(SSL* ssl, int fd, void* buf, size_t n, Deadline deadline, const std::string& what) {
  if (ssl == nullptr) return net::read_all(fd, buf, n, deadline, what);
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    size_t r = read_some(ssl, p + got, n - got, what);
    got += r;
    if (r == 0 && !wait_for(fd, SSL_ERROR_WANT_READ, deadline))
      throw Timeout("mpcomm: timed out receiving from " + what);
  }
}

MemoryServer::MemoryServer(const uint8_t key[kKeyBytes]) {
  std::memcpy(key_, key, kKeyBytes);
  ERR_clear_error();
  ssl_.reset(SSL_new(ctx(true)));
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  if (!ssl_ || in_ == nullptr || out_ == nullptr) {
    BIO_free(in_);
    BIO_free(out_);
    throw Internal("mpcomm: TLS: cannot make a session: " + openssl_error());
  }
  BIO_set_mem_eof_return(in_, -1);  // empty means "more later", not the end
  SSL_set_bio(ssl_.get(), in_, out_);
  SSL_set_app_data(ssl_.get(), key_);
  SSL_set_accept_state(ssl_.get());
}

void MemoryServer::drain(std::vector<uint8_t>* wire) {
  char buf[16 * 1024];
  int r;
  while ((r = BIO_read(out_, buf, sizeof buf)) > 0) wire->insert(wire->end(), buf, buf + r);
}

void MemoryServer::received(const uint8_t* p, size_t n, std::vector<uint8_t>* plain, std::vector<uint8_t>* wire) {
  ERR_clear_error();
  if (n > 0 && BIO_write(in_, p, static_cast<int>(n)) != static_cast<int>(n))
    throw Internal("mpcomm: TLS: cannot buffer received bytes");
  if (!SSL_is_init_finished(ssl_.get())) {
    int r = SSL_do_handshake(ssl_.get());
    drain(wire);
    if (r != 1) {
      int e = SSL_get_error(ssl_.get(), r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
      throw PeerFailure("mpcomm: TLS handshake failed: " + openssl_error());
    }
  }
  uint8_t buf[16 * 1024];
  while (true) {
    size_t k = 0;
    int r = SSL_read_ex(ssl_.get(), buf, sizeof buf, &k);
    if (r == 1) {
      plain->insert(plain->end(), buf, buf + k);
      continue;
    }
    int e = SSL_get_error(ssl_.get(), r);
    drain(wire);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
    if (e == SSL_ERROR_ZERO_RETURN) throw PeerFailure("mpcomm: the client closed its TLS session");
    throw PeerFailure("mpcomm: TLS failed: " + openssl_error());
  }
}

void MemoryServer::send(const uint8_t* p, size_t n, std::vector<uint8_t>* wire) {
  ERR_clear_error();
  size_t done = 0;
  while (done < n) {
    size_t k = 0;
    if (SSL_write_ex(ssl_.get(), p + done, n - done, &k) != 1)
      throw PeerFailure("mpcomm: TLS: cannot encrypt a reply: " + openssl_error());
    done += k;
    drain(wire);
  }
}

}  // namespace mpcomm::net::tls
