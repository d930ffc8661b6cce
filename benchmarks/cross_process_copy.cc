// What it costs to move bytes between two processes by single copy (process_vm_readv/writev, which the
// direct algorithms use) against a plain copy within one process: 32 MiB in 512 KiB pieces between a
// cached 512 KiB buffer and 32 MiB that is not in the cache (a 256 MiB sweep before each pass), as the
// direct allreduce moves them. One process copies; the other only holds its buffer.
//
//   build/benchmarks/cross_process_copy        prints the median of 11 passes of each
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/reduce.h"

namespace {

constexpr size_t kBytes = size_t{32} << 20, kPiece = size_t{512} << 10;

pid_t child = -1;  // ended by die(), so that a failing parent leaves nothing behind

[[noreturn]] void die(const char* what) {
  std::perror(what);
  if (child > 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  std::exit(1);
}

char* map_buffer(size_t bytes, int fill) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("cross_process_copy: mmap");
  std::memset(p, fill, bytes);
  return static_cast<char*>(p);
}

}  // namespace

int main() {
  int to_child[2], from_child[2];
  if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) die("cross_process_copy: pipe");
  const pid_t pid = ::fork();
  if (pid < 0) die("cross_process_copy: fork");
  if (pid == 0) {  // holds its buffer (its own pages, not shared with the parent) until the parent goes
    ::close(to_child[1]);
    ::close(from_child[0]);
    void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(1);  // the parent then reads end-of-file
    std::memset(p, 2, kBytes);
    const uint64_t addr = reinterpret_cast<uint64_t>(p);
    if (::write(from_child[1], &addr, sizeof addr) != sizeof addr) _exit(1);
    char c;
    (void)!::read(to_child[0], &c, 1);  // a byte, or end-of-file when the parent is gone
    _exit(0);
  }
  child = pid;
  ::close(to_child[0]);
  ::close(from_child[1]);
  uint64_t remote = 0;
  if (::read(from_child[0], &remote, sizeof remote) != sizeof remote) die("cross_process_copy: child address");
  char* local = map_buffer(kBytes, 1);
  char* bounce = map_buffer(kPiece, 0);
  std::vector<char> sweep(size_t{256} << 20, 3);

  const char* names[] = {"process_vm_readv  other process -> cached piece",
                         "memcpy            own buffer    -> cached piece",
                         "process_vm_writev cached piece  -> other process",
                         "memcpy            cached piece  -> own buffer",
                         "copy_streamed     cached piece  -> own buffer"};
  for (int kind = 0; kind < 5; ++kind) {
    std::vector<double> ms;
    for (int pass = 0; pass < 11; ++pass) {
      volatile char sink = 0;
      for (size_t i = 0; i < sweep.size(); i += 64) sink = static_cast<char>(sink + sweep[i]);
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t at = 0; at < kBytes; at += kPiece) {
        iovec near{bounce, kPiece}, far{reinterpret_cast<void*>(remote + at), kPiece};
        ssize_t moved = static_cast<ssize_t>(kPiece);
        if (kind == 0) moved = ::process_vm_readv(child, &near, 1, &far, 1, 0);
        if (kind == 1) std::memcpy(bounce, local + at, kPiece);
        if (kind == 2) moved = ::process_vm_writev(child, &near, 1, &far, 1, 0);
        if (kind == 3) std::memcpy(local + at, bounce, kPiece);
        if (kind == 4) mpcomm::copy_streamed(local + at, bounce, kPiece);
        if (moved < 0) die("cross_process_copy: process_vm_readv/writev");
        if (moved != static_cast<ssize_t>(kPiece)) {
          errno = EIO;
          die("cross_process_copy: process_vm_readv/writev moved less than a piece");
        }
      }
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s: %6.2f ms per 32 MiB (%.1f GB/s)\n", names[kind], ms[5], kBytes / ms[5] / 1e6);
  }
  if (::write(to_child[1], "x", 1) != 1) die("cross_process_copy: telling the child");
  ::waitpid(child, nullptr, 0);
  child = -1;
  return 0;
}
