// The heartbeat of an elastic process (heartbeat.h).
#include "core/heartbeat.h"

#include <mutex>
#include <thread>
#include <vector>

#include "log/log.h"

namespace mpcomm::detail {

namespace {

// The connection the beats go through: a store client of their own, so that a beat never queues behind a
// communicator's long wait on the shared one (a TcpStore serves one request at a time). A store of another kind
// (in this process, PyTorch's) is shared: nothing of it blocks a beat that long.
std::shared_ptr<Store> beat_connection(const std::shared_ptr<Store>& root) {
  const auto* tcp = dynamic_cast<const TcpStore*>(root.get());
  if (tcp == nullptr) return root;
  try {
    return std::make_shared<TcpStore>(tcp->host(), tcp->port(), tcp->secret(), kBeatStalled);
  } catch (const std::exception& e) {
    MPCOMM_LOG(info, "heartbeat: a connection of its own to the store failed (%s); beating on the shared one",
               e.what());
    return root;
  }
}

// The process's beat thread and what it beats: one entry per (store, key), held while any of its handles lives.
// Made once and never destroyed, its thread detached: a process that exits with communicators still alive must
// not wait on a store that no longer answers.
class Beater {
 public:
  void add(const std::shared_ptr<Store>& root, const std::string& key, const std::shared_ptr<void>& handle) {
    std::lock_guard<std::mutex> g(mu_);
    for (Beat& b : beats_)
      if (b.key == key && b.of.lock() == root) {
        b.handles.push_back(handle);
        return;
      }
    beats_.push_back({root, beat_connection(root), key, {handle}});
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
  }

 private:
  struct Beat {
    std::weak_ptr<Store> of;     // the job's store the communicators use
    std::shared_ptr<Store> via;  // the connection the beats take (kept while a handle lives)
    std::string key;
    std::vector<std::weak_ptr<void>> handles;
  };

  void run() {
    for (;;) {
      std::vector<std::pair<std::shared_ptr<Store>, std::string>> now;
      {
        std::lock_guard<std::mutex> g(mu_);
        for (Beat& b : beats_) std::erase_if(b.handles, [](const std::weak_ptr<void>& h) { return h.expired(); });
        std::erase_if(beats_, [](const Beat& b) { return b.handles.empty() || b.of.expired(); });
        for (const Beat& b : beats_) now.emplace_back(b.via, b.key);
      }
      for (auto& [store, key] : now) {
        try {
          store->add(key, 1);
        } catch (...) {  // the store is out of reach: the beats stop, which is what they tell
        }
      }
      now.clear();  // no connection kept alive by this thread while asleep
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
