// libFuzzer target: the native transport's frame parser (engine.cc on_header and the payload paths).
//
// A native Engine of 2 ranks whose link to rank 1 is fed the fuzz input, as if rank 1 (or anyone who got
// past the transport's token handshake) sent those bytes over TCP. Rank 0 posts what a collective and
// point-to-point traffic would: a collective receive, a reducing receive and two tagged receives, then
// makes progress until the input is used up. Whatever the bytes, the engine must either deliver them or
// fail with an mpcomm::Error naming rank 1 — never crash, read out of bounds or allocate a length it read
// from the wire before bounding it (MPCOMM_MAX_UNEXPECTED_MB is 1 here).
//
// The input's first byte picks the collective's element count (so that frames match sometimes), the
// rest is the byte stream.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/op.h"
#include "mpcomm/error.h"
#include "backends/native/engine/engine.h"

namespace {

using namespace mpcomm;

// A link whose incoming stream is the fuzz input, in pieces of varying size (as TCP delivers them).
class FuzzLink : public native::Link {
 public:
  FuzzLink(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t write_some(const void*, size_t n) override { return n; }
  size_t read_some(void* buf, size_t n) override {
    if (off_ == size_) return 0;
    size_t piece = 1 + (off_ * 7919) % 97;  // deterministic, uneven pieces
    n = std::min({n, size_ - off_, piece});
    std::memcpy(buf, data_ + off_, n);
    off_ += n;
    return n;
  }
  int poll_fd() const override { return -1; }
  bool exhausted() const { return off_ == size_; }

 private:
  const uint8_t* data_;
  size_t size_, off_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("MPCOMM_MAX_UNEXPECTED_MB", "1", 1);
  ::setenv("MPCOMM_SPIN_US", "0", 1);
  ::setenv("MPCOMM_DEBUG", "ERROR", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t count = data[0] % 64;
  std::vector<std::unique_ptr<native::Link>> links(2);
  auto link = std::make_unique<FuzzLink>(data + 1, size - 1);
  FuzzLink* fl = link.get();
  links[1] = std::move(link);
  std::vector<native::PeerInfo> peers(2);
  native::Engine e(0, 2, std::move(links), peers, nullptr, -1, nullptr, Millis(50));
  std::vector<float> a(count + 1), b(count + 1), own(count + 1, 1.0f);
  std::vector<char> p1(64), p2(4096);
  detail::Op op{.kind = OpKind::allreduce, .seq = 0, .send = own.data(), .recv = a.data(), .count = count,
                .dtype = DataType::float32, .redop = ReduceOp::sum};
  e.begin(&op);
  try {
    std::vector<native::Handle> hs = {
        e.recv(1, a.data(), count * sizeof(float)),
        e.recv_reduce(1, b.data(), own.data(), count * sizeof(float), DataType::float32, ReduceOp::sum),
        e.recv_p2p(1, 0, p1.data(), p1.size()),
        e.recv_p2p(1, 5, p2.data(), p2.size()),
    };
    // Progress until the input is used up (each pass reads what the link offers), then a few more.
    for (int pass = 0, idle = 0; pass < 100000 && idle < 4; ++pass) {
      bool all = true;
      for (auto& h : hs) all = e.test(h) && all;
      if (all) break;
      if (fl->exhausted()) ++idle;
    }
  } catch (const Error&) {
    // A malformed or mismatched stream: the engine said so. That is the expected outcome.
  }
  return 0;
}
