// HashStore: a map under one mutex; blocked get/wait sleep on a condition variable that every change
// of the key set wakes. For ranks that are threads of one process.
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "bootstrap/store_detail.h"
#include "net/socket.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm {

namespace sd = store_detail;

static const std::string kWhere = "HashStore";

struct HashStore::State {
  std::mutex mu;
  std::condition_variable changed;  // notified when a key is created
  std::unordered_map<std::string, Bytes> map;

  // Waits (mu held through `lock`) until every key exists or the deadline passes; returns the keys
  // still missing (empty on success).
  std::vector<std::string> wait_for(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                                    net::Deadline deadline) {
    auto missing = [&] {
      std::vector<std::string> out;
      for (const auto& k : keys)
        if (map.find(k) == map.end()) out.push_back(k);
      return out;
    };
    changed.wait_until(lock, deadline, [&] { return missing().empty(); });
    return missing();
  }
};

HashStore::HashStore() : s_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  sd::check_key(key, "set", kWhere);
  sd::check_value(key, value.size(), kWhere);
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->map[key] = value;
  }
  s_->changed.notify_all();
}

Bytes HashStore::get(const std::string& key, Millis timeout) {
  sd::check_key(key, "get", kWhere);
  auto deadline = sd::deadline_for(timeout, "get", kWhere);
  std::unique_lock<std::mutex> lock(s_->mu);
  auto missing = s_->wait_for(lock, {key}, deadline);
  if (!missing.empty()) throw sd::timeout_error("get", timeout, missing, kWhere);
  return s_->map.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  sd::check_key(key, "add", kWhere);
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    auto it = s_->map.find(key);
    Bytes value = it == s_->map.end() ? Bytes{} : it->second;
    result = sd::add_to_counter(value, delta, key, kWhere);
    s_->map[key] = std::move(value);
  }
  s_->changed.notify_all();
  return result;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  sd::check_keys(keys, "check", kWhere);
  std::lock_guard<std::mutex> lock(s_->mu);
  for (const auto& k : keys)
    if (s_->map.find(k) == s_->map.end()) return false;
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  sd::check_keys(keys, "wait", kWhere);
  auto deadline = sd::deadline_for(timeout, "wait", kWhere);
  std::unique_lock<std::mutex> lock(s_->mu);
  auto missing = s_->wait_for(lock, keys, deadline);
  if (!missing.empty()) throw sd::timeout_error("wait", timeout, missing, kWhere);
}

bool HashStore::remove(const std::string& key) {
  sd::check_key(key, "remove", kWhere);
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->map.erase(key) > 0;
}

}  // namespace mpcomm
