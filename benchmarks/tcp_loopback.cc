// The ceiling for the native TCP transport: a raw loopback socket, one writer thread and one reader
// thread, 64 MiB messages, write()/read() in a loop, TCP_NODELAY as the native links set it.
//
//   build/benchmarks/tcp_loopback        prints GB/s over 10 messages
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

}  // namespace

int main() {
  const size_t kBytes = 64u << 20;
  const int kMessages = 10;
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("tcp_loopback: listen");
  std::thread reader([&] {
    int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) die("tcp_loopback: accept");
    std::vector<char> buf(kBytes);
    for (int m = 0; m < kMessages; ++m)
      for (size_t got = 0; got < kBytes;) {
        ssize_t n = ::read(c, buf.data() + got, kBytes - got);
        if (n <= 0) die("tcp_loopback: read");
        got += static_cast<size_t>(n);
      }
    ::close(c);
  });
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    die("tcp_loopback: connect");
  std::vector<char> buf(kBytes, 1);
  auto t0 = std::chrono::steady_clock::now();
  for (int m = 0; m < kMessages; ++m)
    for (size_t put = 0; put < kBytes;) {
      ssize_t n = ::write(s, buf.data() + put, kBytes - put);
      if (n <= 0) die("tcp_loopback: write");
      put += static_cast<size_t>(n);
    }
  reader.join();
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("raw loopback TCP, %d x 64 MiB: %.2f GB/s\n", kMessages, kMessages * static_cast<double>(kBytes) / t / 1e9);
  ::close(s);
  ::close(listener);
}
