// C10dStore's calls: each c10d call under the store's mutex (a wait is short polls, so that the abort watch does
// not queue behind it), its failures turned into mpcomm's Timeout or PeerFailure naming the keys.
#include "torch/c10d_store.h"

#include <exception>
#include <thread>

#include "mpcomm/error.h"

namespace mpcomm::torch_backend {

namespace {

std::string names(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

// c10d reports a wait past its timeout as a c10::Error / std::runtime_error whose text says so.
[[noreturn]] void rethrow(const std::string& what, const std::vector<std::string>& keys, Millis timeout) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string text = e.what();
    const std::string msg = "mpcomm: c10d store: " + what + " " + names(keys) + ": " + text.substr(0, text.find('\n'));
    if (text.find("imeout") != std::string::npos || text.find("imed out") != std::string::npos)
      throw Timeout(msg + " (waited " + std::to_string(timeout.count()) + " ms)");
    throw PeerFailure(msg);
  }
}

}  // namespace

void C10dStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> g(mu_);
  try {
    store_->set(key, value);
  } catch (...) {
    rethrow("set", {key}, Millis(0));
  }
}

Bytes C10dStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> g(mu_);
  try {
    return store_->get(key);
  } catch (...) {
    rethrow("get", {key}, timeout);
  }
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> g(mu_);
  try {
    return store_->add(key, delta);
  } catch (...) {
    rethrow("add", {key}, Millis(0));
  }
}

bool C10dStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> g(mu_);
  try {
    return store_->check(keys);
  } catch (...) {
    rethrow("check", keys, Millis(0));
  }
}

void C10dStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  // c10d's wait holds its connection for the whole wait; other callers (the abort watch's polls) must
  // not queue behind it for long, so wait in short slices.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(mu_);
      try {
        if (store_->check(keys)) return;
      } catch (...) {
        rethrow("wait for", keys, timeout);
      }
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw Timeout("mpcomm: c10d store: timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
                    names(keys));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool C10dStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  try {
    return store_->deleteKey(key);
  } catch (...) {
    rethrow("delete", {key}, Millis(0));
  }
}

}  // namespace mpcomm::torch_backend
