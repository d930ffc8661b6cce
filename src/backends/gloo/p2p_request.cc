#include "backends/gloo/p2p_request.h"

namespace mpcomm::gloo_backend {

P2PRequest::~P2PRequest() {
  if (!waiter_.joinable()) return;
  if (!waiter_done_.load()) {  // dropped before it completed: end the waiter's wait
    if (op_.kind == OpKind::send)
      buf_->abortWaitSend();
    else
      buf_->abortWaitRecv();
  }
  waiter_.join();
}

void P2PRequest::wait_here() {
  guarded(*b_, op_, [&] {
    const auto timeout = b_->options().timeout;
    bool ok = op_.kind == OpKind::send ? buf_->waitSend(timeout) : buf_->waitRecv(&source_, timeout);
    if (!ok) throw Timeout("mpcomm: " + b_->describe(op_) + ": gloo: no completion");
  });
}

void P2PRequest::wait() {
  if (done_) return;
  if (waiter_.joinable()) {
    waiter_.join();
    if (waiter_error_) std::rethrow_exception(waiter_error_);
  } else {
    wait_here();
  }
  done_ = true;
}

bool P2PRequest::test() {
  if (done_) return true;
  if (!waiter_.joinable())
    waiter_ = std::thread([this] {
      try {
        wait_here();
      } catch (...) {
        waiter_error_ = std::current_exception();
      }
      waiter_done_.store(true);
    });
  if (!waiter_done_.load()) return false;
  wait();
  return true;
}

}  // namespace mpcomm::gloo_backend
