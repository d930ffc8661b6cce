// The heartbeat of an elastic process (heartbeat.h).
#include "core/heartbeat.h"

#include <mutex>
#include <thread>
#include <vector>

namespace mpcomm::detail {

namespace {

// The process's beat thread and what it beats. Made once and never destroyed, its thread detached: a process
// that exits with communicators still alive must not wait on a store that no longer answers.
class Beater {
 public:
  void add(const std::shared_ptr<Store>& root, const std::string& key, const std::shared_ptr<void>& handle) {
    std::lock_guard<std::mutex> g(mu_);
    beats_.push_back({root, key, handle});
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
  }

 private:
  struct Beat {
    std::weak_ptr<Store> root;
    std::string key;
    std::weak_ptr<void> handle;
  };

  void run() {
    for (;;) {
      std::vector<std::pair<std::shared_ptr<Store>, std::string>> now;
      {
        std::lock_guard<std::mutex> g(mu_);
        std::erase_if(beats_, [](const Beat& b) { return b.handle.expired() || b.root.expired(); });
        for (const Beat& b : beats_)
          if (auto s = b.root.lock()) now.emplace_back(std::move(s), b.key);
      }
      for (auto& [store, key] : now) {
        try {
          store->add(key, 1);
        } catch (...) {  // the store is out of reach: the beats stop, which is what they tell
        }
      }
      now.clear();  // no store kept alive while asleep
      std::this_thread::sleep_for(kBeatEvery);
    }
  }

  std::mutex mu_;
  std::vector<Beat> beats_;
  bool started_ = false;
};

Beater& beater() {
  static Beater* b = new Beater;  // never destroyed (its thread may still run at exit)
  return *b;
}

}  // namespace

std::string heartbeat_key(const std::string& host, const std::string& pid) { return "alive/" + host + "/" + pid; }

std::shared_ptr<void> keep_beating(const std::shared_ptr<Store>& root, const std::string& key) {
  auto handle = std::make_shared<int>(0);
  root->add(key, 1);  // the first beat before the communicator is used
  beater().add(root, key, handle);
  return handle;
}

}  // namespace mpcomm::detail
