// The native engine's failures (failures.h).
#include "backends/native/engine/failures.h"

#include "backends/native/transport/shm/shm_segment.h"

namespace mpcomm::native {

Failures::Failures(int rank, int size, const ShmSegment* seg, std::shared_ptr<Store> abort_store,
                   std::chrono::milliseconds store_every)
    : rank_(rank),
      size_(size),
      seg_(seg),
      watch_(abort_store, store_every, "rank " + std::to_string(rank), /*job_wide=*/false) {}

std::string Failures::context() const {
  return op_ != nullptr ? detail::describe(*op_, rank_, size_, "native") : "rank " + std::to_string(rank_);
}

void Failures::fail(ErrorCode code, const std::string& msg) {
  std::string full = "mpcomm: " + context() + ": " + msg;
  publish(code, full);
  throw_error(code, full);
}

void Failures::publish(ErrorCode code, const std::string& msg) {
  if (!record(code, msg)) return;
  if (seg_ != nullptr) seg_->publish_abort(static_cast<int>(code), rank_, msg);
  watch_.publish(msg);
}

bool Failures::record(ErrorCode code, const std::string& msg) {
  std::lock_guard<std::mutex> g(mu_);
  if (!msg_.empty()) return false;
  msg_ = msg;
  code_ = code;
  aborted_.store(true, std::memory_order_release);
  return true;
}

std::string Failures::reason() const {
  std::lock_guard<std::mutex> g(mu_);
  return msg_;
}

void Failures::throw_recorded() const {
  std::lock_guard<std::mutex> g(mu_);
  throw_error(code_, "mpcomm: " + context() + ": communicator was aborted: " + msg_);
}

void Failures::check_host_reports() {
  std::string msg;
  if (seg_ == nullptr) return;
  if (int code = seg_->aborted(&msg); code > 0 && msg != reason()) {
    auto ec = static_cast<ErrorCode>(code - 1);
    record(ec, msg);
    throw_error(ec, "mpcomm: " + context() + ": aborted because another rank failed: " + msg);
  }
}

void Failures::check_store_reports() {
  const std::string msg = watch_.poll();
  if (msg.empty() || msg == reason()) return;
  // A rank of this host publishes to the segment (with its error's code) before the store, so a failure
  // here may be in the segment now though it was not when we looked there: it came first, and it keeps
  // its code.
  check_host_reports();
  if (record(ErrorCode::peer_failure, msg) && seg_ != nullptr)
    seg_->publish_abort(static_cast<int>(ErrorCode::peer_failure), rank_, msg);
  throw PeerFailure("mpcomm: " + context() + ": aborted because another rank failed: " + msg);
}

std::string Failures::first_reported() {
  std::string msg;
  if (seg_ != nullptr && seg_->aborted(&msg) > 0) return " (first failure reported: " + msg + ")";
  if (std::string first = watch_.read(); !first.empty()) return " (first failure reported: " + first + ")";
  return "";
}

}  // namespace mpcomm::native
