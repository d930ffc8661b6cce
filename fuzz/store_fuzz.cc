// libFuzzer target: the TcpStore server's wire protocol, end to end.
//
// One server runs in this process for the whole fuzzing session. Each input is one connection: the
// first byte chooses whether a real client's handshake (net/handshake.h: Hello, the server's challenge,
// the client's proof of the secret) goes first, so that the fuzzer reaches the request parser; without it
// the bytes meet the handshake itself (Hello fields, modes, proofs, MUNGE credential lengths). The rest is
// written as is, then the
// connection is half-closed and its replies drained. Every 64 inputs (and at the end of each input that
// the server answered) a real client must still set and get a key: a frame that crashes, hangs or
// poisons the server fails the run. AddressSanitizer and UndefinedBehaviorSanitizer watch every byte.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "log/log.h"
#include "mpcomm/store.h"
#include "net/handshake.h"
#include "net/socket.h"

namespace {

constexpr uint32_t kStoreHelloMagic = 0x4d505354;  // the store's Hello magic, as tcp_store_protocol.h defines it
const char* const kToken = "fuzz-token";

mpcomm::TcpStoreServer& server() {
  static auto* s = [] {
    ::setenv("MPCOMM_DEBUG", "ERROR", 0);  // refused and malformed connections log a warning each
    return new mpcomm::TcpStoreServer("127.0.0.1", 0, kToken);
  }();
  return *s;
}

void check_server_alive() {
  mpcomm::TcpStore client("127.0.0.1", server().port(), kToken, mpcomm::Millis(5000));
  client.set_string("fuzz/alive", "yes");
  if (client.get_string("fuzz/alive", mpcomm::Millis(5000)) != "yes") {
    std::fprintf(stderr, "store_fuzz: the server lost a key\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t runs = 0;
  auto& s = server();
  if (size == 0) return 0;
  const bool hello = (data[0] & 1) != 0;
  ++data;
  --size;
  auto deadline = mpcomm::net::deadline_after(mpcomm::Millis(2000));
  mpcomm::net::Fd fd = mpcomm::net::connect_tcp("127.0.0.1", s.port(), deadline, "fuzz store");
  if (hello)
    mpcomm::net::client_handshake(fd.get(), kStoreHelloMagic, mpcomm::net::secret_auth(kToken), -1, deadline,
                                  "fuzz store");
  size_t off = 0;
  while (off < size) {
    ssize_t w = ::send(fd.get(), data + off, size - off, MSG_NOSIGNAL);
    if (w <= 0) break;  // the server closed on a bad frame: expected
    off += static_cast<size_t>(w);
  }
  ::shutdown(fd.get(), SHUT_WR);
  // Drain replies until the server closes or goes quiet (a parked GET may wait for its timeout).
  char buf[4096];
  for (int i = 0; i < 64; ++i) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) break;
    if (::recv(fd.get(), buf, sizeof buf, 0) <= 0) break;
  }
  if (++runs % 64 == 0) check_server_alive();
  return 0;
}
