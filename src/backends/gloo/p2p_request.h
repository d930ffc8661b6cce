// The gloo backend's sends and receives (unbound buffers), and how Gloo's errors become mpcomm's.
#pragma once

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "core/backend.h"
#include "core/op.h"
#include "mpcomm/error.h"

namespace mpcomm::gloo_backend {

// Runs f; Gloo's errors become mpcomm errors that name the op on backend b: timeouts as Timeout, a
// closed or failed connection as PeerFailure, a broken Gloo invariant as Internal.
template <class F>
void guarded(const detail::Backend& b, const detail::Op& op, F&& f) {
  try {
    f();
  } catch (const ::gloo::IoException& e) {
    std::string w = e.what();
    bool timed_out = w.find("imed out") != std::string::npos || w.find("imeout") != std::string::npos;
    std::string msg = "mpcomm: " + b.describe(op) + ": gloo: " + w;
    if (timed_out) throw Timeout(msg);
    throw PeerFailure(msg);
  } catch (const ::gloo::Exception& e) {
    throw PeerFailure("mpcomm: " + b.describe(op) + ": gloo: " + e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw Internal("mpcomm: " + b.describe(op) + ": gloo: " + e.what());
  }
}

// A send or receive on a Gloo unbound buffer. Gloo's own threads move the bytes; completion is seen in
// waitSend/waitRecv, and Gloo has no way to ask without waiting (a wait that times out signals the
// timeout to every pair of the context, closing them all). So test() hands the wait to a thread of the
// request's own, started at the first test(), and reports what it saw. The backend outlives its requests
// (the front door keeps it while any is in flight).
class P2PRequest final : public detail::RequestState {
 public:
  P2PRequest(const detail::Backend* b, std::unique_ptr<::gloo::transport::UnboundBuffer> buf, detail::Op op)
      : b_(b), buf_(std::move(buf)), op_(op) {}
  ~P2PRequest() override;
  void wait() override;
  bool test() override;
  // waitRecv names the sender (of a receive from several ranks: the one that matched).
  int source() const override { return done_ ? source_ : -1; }

 private:
  void wait_here();  // the bounded wait; throws the op's error
  const detail::Backend* b_;
  std::unique_ptr<::gloo::transport::UnboundBuffer> buf_;
  detail::Op op_;
  bool done_ = false;
  int source_ = -1;
  std::thread waiter_;  // test()'s wait, when test() was called before completion
  std::atomic<bool> waiter_done_{false};
  std::exception_ptr waiter_error_;  // written by waiter_ before waiter_done_
};

}  // namespace mpcomm::gloo_backend
