// What the connection handshake (src/net/handshake.h) costs a job (Google Benchmark), on loopback:
//   Connect      a TCP connection to the store's server, closed at once: what any connection pays
//   Join         a TcpStore: connect, Hello, the server's challenge and proof, the client's proof
//   JoinAndSet   a TcpStore and its first request: the round trip that follows every join
//   Proofs       one handshake over a Unix socket pair: nonces, HMACs and the exchange without TCP
// Join - Connect is what the handshake adds to each connection; a job of N ranks on one host makes N
// store connections (the native transport's TCP links join the same way, across hosts only).
//
//   build/benchmarks/handshake_bench [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <benchmark/benchmark.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "mpcomm/store.h"
#include "net/handshake.h"
#include "net/socket.h"

namespace {

using namespace mpcomm;

TcpStoreServer& server() {
  static TcpStoreServer s("127.0.0.1", 0, "benchmark-secret-0123456789");
  return s;
}

void Connect(benchmark::State& state) {
  for (auto _ : state) {
    net::Fd fd = net::connect_tcp("127.0.0.1", server().port(), net::deadline_after(Millis(5000)), "bench");
    benchmark::DoNotOptimize(fd.get());
  }
}
BENCHMARK(Connect)->UseRealTime();

void Join(benchmark::State& state) {
  for (auto _ : state) {
    TcpStore c("127.0.0.1", server().port(), "benchmark-secret-0123456789", Millis(5000));
    benchmark::DoNotOptimize(&c);
  }
}
BENCHMARK(Join)->UseRealTime();

void JoinAndSet(benchmark::State& state) {
  for (auto _ : state) {
    TcpStore c("127.0.0.1", server().port(), "benchmark-secret-0123456789", Millis(5000));
    c.set_string("k", "v");
  }
}
BENCHMARK(JoinAndSet)->UseRealTime();

// Both ends of one handshake over a socket pair (a thread for the client): the work without TCP.
void Proofs(benchmark::State& state) {
  const net::Auth auth = net::secret_auth("benchmark-secret-0123456789");
  std::vector<uint8_t> out;
  for (auto _ : state) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) state.SkipWithError("socketpair");
    net::Fd a(sv[0]), b(sv[1]);
    net::HandshakeServer hs(0x4d505354, auth);
    std::vector<uint8_t> hello(hs.want());
    std::thread client(
        [&] { net::client_handshake(a.get(), 0x4d505354, auth, 0, net::deadline_after(Millis(5000)), "bench"); });
    net::read_all(b.get(), hello.data(), hello.size(), net::deadline_after(Millis(5000)), "bench");
    out.clear();
    hs.feed(hello.data(), &out);
    net::write_all(b.get(), out.data(), out.size(), net::deadline_after(Millis(5000)), "bench");
    std::vector<uint8_t> proof(hs.want());
    net::read_all(b.get(), proof.data(), proof.size(), net::deadline_after(Millis(5000)), "bench");
    out.clear();
    if (!hs.feed(proof.data(), &out).empty() || !hs.accepted()) state.SkipWithError("refused");
    client.join();
  }
}
BENCHMARK(Proofs)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
