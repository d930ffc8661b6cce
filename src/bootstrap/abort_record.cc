#include "bootstrap/abort_record.h"

#include "log/log.h"
#include "mpcomm/error.h"

namespace mpcomm {

void publish_abort_reason(Store& store, const std::string& reason) {
  if (!store.check({kAbortKey})) store.set_string(kAbortKey, reason);
}

std::string read_abort_reason(Store& store) {
  if (!store.check({kAbortKey})) return "";
  return store.get_string(kAbortKey, Millis(1000));
}

AbortWatch::AbortWatch(const std::shared_ptr<Store>& store, std::chrono::milliseconds every, std::string who,
                       bool job_wide)
    : store_(store && job_wide ? root_store(store) : store), every_(every), who_(std::move(who)) {}

std::shared_ptr<Store> AbortWatch::store_locked() {
  std::lock_guard<std::mutex> g(mu_);
  return store_;
}

bool AbortWatch::watching() const {
  std::lock_guard<std::mutex> g(mu_);
  return store_ != nullptr;
}

void AbortWatch::lost(const std::exception& e) {
  MPCOMM_LOG(info, "%s: store unreachable, no longer watching it for aborts: %s", who_.c_str(), e.what());
  std::lock_guard<std::mutex> g(mu_);
  store_.reset();
}

std::string AbortWatch::poll() {
  {
    std::lock_guard<std::mutex> g(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (store_ == nullptr || now < next_) return "";
    next_ = now + every_;
  }
  return read();
}

std::string AbortWatch::read() {
  std::shared_ptr<Store> s = store_locked();
  if (!s) return "";
  try {
    return read_abort_reason(*s);
  } catch (const std::exception& e) {
    lost(e);
    return "";
  }
}

void AbortWatch::publish(const std::string& reason) {
  std::shared_ptr<Store> s = store_locked();
  if (!s) return;
  try {
    publish_abort_reason(*s, reason);
  } catch (const std::exception& e) {
    MPCOMM_LOG(info, "%s could not publish its abort to the store: %s", who_.c_str(), e.what());
  }
}

}  // namespace mpcomm
