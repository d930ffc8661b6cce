// TLS 1.3 on mpcomm's connections (MPCOMM_TLS=1): the store's and the native transport's, between hosts.
// No certificates: after the connection handshake (handshake.h) both ends hold a key that only they can
// know (derived from the job's secret and both ends' fresh nonces), and TLS runs with it as its external
// PSK (psk_dhe_ke: with an ephemeral key exchange too, so a secret that leaks later does not open what was
// recorded). TLS_AES_128_GCM_SHA256 only; no session tickets; nothing else to configure.
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/socket.h"

namespace mpcomm::net::tls {

inline constexpr size_t kKeyBytes = 32;

struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
using Ssl = std::unique_ptr<SSL, SslFree>;

// Whether this process puts its connections under TLS: MPCOMM_TLS=1.
bool requested();

// TLS on a connected socket whose connection handshake just ended, as its client or its server; blocks
// until done or the deadline. The socket is non-blocking from then on. Throws PeerFailure naming `what`
// and OpenSSL's reason, Timeout past the deadline.
Ssl connect(int fd, const uint8_t key[kKeyBytes], Deadline deadline, const std::string& what);
Ssl accept(int fd, const uint8_t key[kKeyBytes], Deadline deadline, const std::string& what);

// Non-blocking transfers on such a session: the bytes moved, 0 when the socket would block. A write
// that returned 0 must be retried with the same bytes (more may follow them). Throw PeerFailure when the
// peer closed or the session failed.
size_t write_some(SSL* ssl, const void* buf, size_t n, const std::string& what);
size_t read_some(SSL* ssl, void* buf, size_t n, const std::string& what);
// Whether decrypted or received bytes wait inside the session, where poll() cannot see them.
bool buffered(SSL* ssl);

// Blocking transfers bounded by the deadline; with ssl == nullptr, plain net::write_all / read_all.
void write_all(SSL* ssl, int fd, const void* buf, size_t n, Deadline deadline, const std::string& what);
void read_all(SSL* ssl, int fd, void* buf, size_t n, Deadline deadline, const std::string& what);

// The server's side for a poll() loop that does its own socket I/O (the store's server): ciphertext in,
// plaintext out, and the reverse, through memory.
class MemoryServer {
 public:
  explicit MemoryServer(const uint8_t key[kKeyBytes]);
  // Takes ciphertext read from the socket; appends the plaintext it completes to *plain and what must go
  // back on the socket (handshake messages) to *wire. Throws PeerFailure on a TLS failure.
  void received(const uint8_t* p, size_t n, std::vector<uint8_t>* plain, std::vector<uint8_t>* wire);
  // Appends plaintext, encrypted, to *wire.
  void send(const uint8_t* p, size_t n, std::vector<uint8_t>* wire);

 private:
  void drain(std::vector<uint8_t>* wire);
  uint8_t key_[kKeyBytes];
  Ssl ssl_;
  BIO* in_ = nullptr;   // owned by ssl_
  BIO* out_ = nullptr;  // owned by ssl_
};

}  // namespace mpcomm::net::tls
