// A Link is a reliable, ordered, non-blocking byte stream to one peer: the only thing the native
// engine needs from a transport. transport/shm implements it with a pair of shared-memory rings,
// transport/tcp with a socket. Framing, matching and waiting live in the engine, once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpcomm::native {

class Link {
 public:
  virtual ~Link() = default;
  // Copy up to n bytes into the stream; returns how many were taken (0 when full). Never blocks.
  virtual size_t write_some(const void* buf, size_t n) = 0;
  // Copies a then b (a small frame: header and payload) into the stream as one write when both fit now,
  // and returns true; else writes nothing and returns false (also for transports that cannot tell).
  virtual bool write_whole(const void* a, size_t an, const void* b, size_t bn) { return false; }
  // Copy up to n bytes out of the stream; returns how many (0 when empty). Never blocks. Throws
  // PeerFailure when the peer closed the stream.
  virtual size_t read_some(void* buf, size_t n) = 0;
  // Zero-copy reading, for transports whose bytes sit in memory the reader can see (shared memory):
  // peek() points *data at the contiguous readable bytes at the head of the stream and returns how
  // many (0 when none, when fewer than the transport's chunk of the `want` bytes the reader still
  // expects have arrived, or when the transport cannot); consume(n) then drops n <= that many.
  virtual size_t peek(const char** data, size_t want) { return 0; }
  virtual void consume(size_t n) {}
  // Where the next written byte lands, modulo 64, for transports that copy through memory (else -1).
  // The engine pads large payloads so that they sit in the ring at the same offset within a cache line
  // as in the sender's buffer: copies between buffers that are misaligned against each other run at
  // half speed or worse.
  virtual int write_offset() const { return -1; }
  // Called after a progress pass moved bytes on this link, so a sleeping peer wakes up.
  virtual void notify() {}
  // A file descriptor to poll() for bytes to read, or -1 (shared memory uses a futex doorbell instead).
  virtual int poll_fd() const { return -1; }
  // The descriptor to poll() for room to write (a link of several connections waits on one of them).
  virtual int poll_fd_out() const { return poll_fd(); }
  // Whether bytes wait inside the transport where poll() cannot see them (TLS's decrypted records): the
  // engine reads them before it sleeps.
  virtual bool buffered() const { return false; }
};

}  // namespace mpcomm::native
