#include "core/device_staging.h"

#include <algorithm>
#include <vector>

#include "device/device.h"

namespace mpcomm::detail {

namespace {

class HostStaging final : public StagingMemory {
 public:
  ~HostStaging() override {
    for (char* p : deferred_) device::release_pinned(p);
  }
  char* area(size_t bytes) override {
    if (bytes > bytes_) {
      area_.reset(static_cast<char*>(device::alloc_pinned(bytes)), device::release_pinned);
      bytes_ = bytes;
    }
    return area_.get();
  }
  void copy_in(char* staged, const void* user, size_t n) override { device::copy(staged, user, n); }
  void copy_out(void* user, const char* staged, size_t n) override { device::copy(user, staged, n); }
  char* alloc(size_t n) override { return static_cast<char*>(device::alloc_pinned(n > 0 ? n : 1)); }
  // Memory a dropped request's operation may still write goes with the backend, not before.
  void release(char* p, bool maybe_in_use) noexcept override {
    if (!maybe_in_use) return device::release_pinned(p);
    try {
      deferred_.push_back(p);
    } catch (...) {  // out of memory: leak it rather than free it under the operation
    }
  }

 private:
  std::vector<char*> deferred_;
  std::shared_ptr<char> area_;
  size_t bytes_ = 0;
};

bool overlap(const char* a, size_t an, const char* b, size_t bn) { return an > 0 && bn > 0 && a < b + bn && b < a + an; }

constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::unique_ptr<StagingMemory> host_staging() { return std::make_unique<HostStaging>(); }

void run_staged(const Op& op, const BufferSpans& spans, int rank, StageWhich which, StagingMemory& mem,
                const std::function<void(const Op&)>& run) {
  const char* s = static_cast<const char*>(op.send);
  char* r = static_cast<char*>(op.recv);
  const size_t send_n = spans.send_n, recv_n = spans.recv_n;
  const bool joint = overlap(s, send_n, r, recv_n);  // an in-place layout: one region, staged as one
  if (joint) which.send = which.recv = which.send || which.recv;
  if (!which.any()) return run(op);
  Op staged = op;
  if (joint) {
    const char* lo = std::min<const char*>(s, r);
    const size_t n = static_cast<size_t>(std::max(s + send_n, static_cast<const char*>(r) + recv_n) - lo);
    char* h = mem.area(n);
    mem.copy_in(h, lo, n);
    staged.send = h + (s - lo);
    staged.recv = h + (r - lo);
  } else {
    const size_t at_recv = which.send ? aligned(send_n) : 0;
    char* h = mem.area(at_recv + (which.recv ? recv_n : 0));
    if (which.send && send_n > 0) {
      staged.send = h;
      mem.copy_in(h, s, send_n);
    }
    if (which.recv && recv_n > 0) {
      staged.recv = h + at_recv;
      // Outside the in-place layouts only the broadcast root's receive buffer holds input.
      if (op.kind == OpKind::broadcast && op.root == rank) mem.copy_in(h + at_recv, r, recv_n);
    }
    if (op.kind == OpKind::broadcast) staged.send = staged.recv;
  }
  mem.ready();
  run(staged);
  if (!which.recv || recv_n == 0) return;
  const char* out = static_cast<const char*>(staged.recv);
  if (op.v == nullptr) return mem.copy_out(r, out, recv_n);
  // The uneven ops: only their receive blocks, never the bytes between them (not the op's to write).
  const size_t es = dtype_size(op.dtype);
  const VCounts& v = *op.v;
  for (size_t p = 0; p < v.recv_counts.size(); ++p)
    if (v.recv_counts[p] > 0) mem.copy_out(r + v.recv_displs[p] * es, out + v.recv_displs[p] * es, v.recv_counts[p] * es);
}

namespace {

class StagedRequest final : public RequestState {
 public:
  StagedRequest(StagingMemory& mem, char* staged, void* user_dst, size_t n)
      : mem_(mem), staged_(staged), user_dst_(user_dst), n_(n) {}
  ~StagedRequest() override {
    if (staged_ != nullptr) mem_.release(staged_, /*maybe_in_use=*/true);
  }
  void set_inner(std::shared_ptr<RequestState> inner) { inner_ = std::move(inner); }
  int source() const override { return inner_ ? inner_->source() : -1; }
  void wait() override {
    if (staged_ == nullptr) return;
    inner_->wait();
    finish();
  }
  bool test() override {
    if (staged_ == nullptr) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    if (user_dst_ != nullptr) mem_.copy_out(user_dst_, staged_, n_);
    mem_.release(staged_, false);
    staged_ = nullptr;
  }
  StagingMemory& mem_;
  char* staged_;
  void* user_dst_;  // a receive's destination
  size_t n_;
  std::shared_ptr<RequestState> inner_;
};

}  // namespace

std::shared_ptr<RequestState> start_staged(const Op& op, StagingMemory& mem,
                                           const std::function<std::shared_ptr<RequestState>(const Op&)>& start) {
  const size_t n = op.bytes();
  if (n == 0) return start(op);
  const bool is_send = op.kind == OpKind::send;
  char* h = mem.alloc(n);
  auto req = std::make_shared<StagedRequest>(mem, h, is_send ? nullptr : op.recv, n);
  Op staged = op;
  if (is_send) {
    mem.copy_in(h, op.send, n);
    staged.send = h;
  } else {
    staged.recv = h;
  }
  mem.ready();
  req->set_inner(start(staged));
  return req;
}

}  // namespace mpcomm::detail
