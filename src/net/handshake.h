// How every TCP connection mpcomm opens (the store, the native transport) proves that both ends belong to
// the job, without any secret or replayable value crossing the wire.
//
// Secret mode (every job with a secret: MPCOMM_TOKEN, or the one mpcomm launch or the MUNGE join hands out):
//   client -> server  Hello: u32 magic | u32 version | u32 mode=0 | u32 flags | i64 rank | 32-byte nonce Nc
//   server -> client  32-byte nonce Ns | HMAC(K, "mpcomm server" | magic | rank | Nc | Ns)
//   client -> server  HMAC(K, "mpcomm client" | magic | rank | Nc | Ns)
//   server -> client  with TLS only: one byte, 1 (the proof is accepted: TLS starts after it)
// K is HMAC-SHA256 of the secret under a fixed label, so the secret itself is used for nothing else. Both
// nonces are fresh per connection, so a recorded exchange proves nothing a second time; the labels keep
// the server's answer from being usable as a client's. The client checks the server's proof first, so a
// rank never talks to a listener that does not know the secret (a squatter on a derived port).
//
// MUNGE mode (under Slurm without a secret; only the store's server speaks it, see munge.h):
//   client -> server  Hello with mode=1
//   server -> client  Ns
//   client -> server  u32 length | MUNGE credential of "mpcomm munge client" | magic | rank | Nc | Ns | job
//   server -> client  u8 0 | u32 length | MUNGE credential of "mpcomm munge server" | Nc | Ns | secret,
//                     decodable only by the client's uid
//                  or u8 1 | u32 length | why it refused (then it closes)
// The server accepts a credential only of its own uid (root when MPCOMM_MUNGE_ROOT=1), of this job, bound
// to its fresh nonce; the job's secret, made at random by the server, then travels only inside a
// credential that the client's uid alone can decode. The client checks that the answer's credential is of
// its own uid (or root when allowed): the server is the job owner's.
//
// flags bit 0: the client puts the connection under TLS (MPCOMM_TLS=1, tls.h); the server refuses a client
// that differs from it. Both ends then key TLS with HMAC(K, "mpcomm session" | magic | rank | Nc | Ns),
// which nobody else can compute: not even a relay of this handshake could read or change what follows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "net/socket.h"

namespace mpcomm::net {

inline constexpr uint32_t kHandshakeVersion = 2;

// What one end knows to prove it belongs to the job.
struct Auth {
  std::string secret;  // the job's secret; a MUNGE client starts without it and is handed it
  bool munge = false;  // MUNGE mode: the server checks credentials, clients receive the secret
  std::string job;     // MUNGE mode: the job credentials must name ("slurm/JOBID")
  bool tls = false;    // the connection goes under TLS after the handshake (both ends must say so)
};

// What a successful handshake leaves both ends with.
struct Joined {
  std::string secret;            // the job's secret (the client's, or the one the server handed out)
  uint8_t session_key[32] = {};  // this connection's key: TLS's pre-shared key
  int64_t rank = -1;             // the rank the client's Hello named
};
// Secret mode with `secret`.
inline Auth secret_auth(std::string secret) {
  Auth a;
  a.secret = std::move(secret);
  return a;
}

// nbytes from getrandom(), in hex: the job's secrets and ids.
std::string random_hex(size_t nbytes);

// Handshakes refused in this process, by any listener (the store's server counts its own too).
uint64_t refused_handshakes();

// The server side as a state machine fed by whoever reads the socket (the store's poll() loop, or
// server_handshake() below): it asks for want() bytes, is fed exactly that many, and answers.
class HandshakeServer {
 public:
  HandshakeServer(uint32_t magic, const Auth& auth);
  // Bytes the next feed() takes; 0 once accepted or refused.
  size_t want() const { return want_; }
  // Consumes want() bytes from p and appends what to send back to *out. Returns "" to go on, else why
  // the peer is refused (what *out holds then is sent before closing, best effort). Counts refusals.
  std::string feed(const uint8_t* p, std::vector<uint8_t>* out);
  bool accepted() const { return state_ == State::accepted; }
  // The rank the peer's Hello named (-1: not a rank).
  int64_t rank() const { return rank_; }
  // Once accepted: this connection's session key (handshake.h's header comment).
  void session_key(uint8_t out[32]) const;

 private:
  enum class State { hello, proof, munge_length, munge_cred, accepted, refused };
  std::string refuse(std::string why);
  std::string munge_accept(const std::string& cred, std::vector<uint8_t>* out);
  uint32_t magic_;
  Auth auth_;
  State state_ = State::hello;
  size_t want_;
  int64_t rank_ = -1;
  uint8_t cnonce_[32] = {};
  uint8_t snonce_[32] = {};
};

// The client side on a connected blocking socket. Returns the job's secret (the one the server handed out
// in MUNGE mode, else auth.secret) and the connection's session key. Throws PeerFailure naming `what` when
// the server does not prove the secret or refuses (with its reason when it gave one), Timeout past the
// deadline.
Joined client_handshake(int fd, uint32_t magic, const Auth& auth, int64_t rank, Deadline deadline,
                        const std::string& what);

// The server side on an accepted blocking socket. Returns "" when the peer proved it belongs to the job
// (*joined, when given: the rank it named, the session key), else why not. Throws Timeout or PeerFailure
// when the peer stalls or leaves.
std::string server_handshake(int fd, uint32_t magic, const Auth& auth, Joined* joined, Deadline deadline,
                             const std::string& what);

// "ADDRESS:PORT" of the far end of a connected socket, for messages ("an unknown peer" when unknown).
std::string peer_address(int fd);

}  // namespace mpcomm::net
