#include "backends/mpi/watchdog.h"

#include <mutex>
#include <thread>
#include <vector>

#include "core/wait.h"

namespace mpcomm {

namespace {

constexpr auto kEvery = std::chrono::milliseconds(50);

// The watched slots (never destroyed: slots may be released during static destruction). The thread
// runs while there is a slot to watch.
struct Slots {
  std::mutex mu;
  std::vector<std::weak_ptr<Watchdog::Slot>> list;
  bool started = false;
};
Slots& slots() {
  static Slots* s = new Slots();
  return *s;
}

}  // namespace

void Watchdog::loop() {
  Slots& all = slots();
  for (;;) {
    std::this_thread::sleep_for(kEvery);
    std::vector<std::shared_ptr<Slot>> live;
    {
      std::lock_guard<std::mutex> g(all.mu);
      std::vector<std::weak_ptr<Slot>> kept;
      for (auto& w : all.list)
        if (auto s = w.lock()) {
          live.push_back(s);
          kept.push_back(w);
        }
      all.list.swap(kept);
      if (live.empty()) {  // nothing to watch: the thread ends; the next slot starts another
        all.started = false;
        return;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto& s : live) look(*s, now);
  }
}

void Watchdog::Slot::detach() {
  std::lock_guard<std::mutex> g(mu_);
  detached_ = true;
}

// The clock restarts whenever the armed value changes; an expiry fires once per arming, and only while
// the slot still holds that value (the call may have ended meanwhile) and its owner is there.
void Watchdog::look(Slot& s, std::chrono::steady_clock::time_point now) {
  const uint64_t v = s.armed_.load(std::memory_order_acquire);
  if (v == 0 || v != s.seen_) {
    s.seen_ = v;
    s.since_ = now;
    s.fired_ = false;
    return;
  }
  if (s.fired_) return;
  std::lock_guard<std::mutex> g(s.mu_);
  if (s.detached_) return;
  auto fire = [&](ErrorCode code, const std::string& why) {
    if (s.armed_.load(std::memory_order_acquire) != v) return;  // the call ended meanwhile
    s.fired_ = true;
    s.on_expiry_(code, why, v);
  };
  if (now - s.since_ >= s.timeout_) return fire(ErrorCode::timeout, "timed out after " + seconds_text(s.timeout_) + " s");
  if (s.abort_watch_ != nullptr)
    if (std::string msg = s.abort_watch_->poll(); !msg.empty())
      fire(ErrorCode::peer_failure, "aborted because another rank failed: " + msg);
}

std::shared_ptr<Watchdog::Slot> Watchdog::watch(std::chrono::milliseconds timeout, AbortWatch* abort_watch,
                                                Expiry on_expiry) {
  std::shared_ptr<Slot> slot(new Slot(timeout, abort_watch, std::move(on_expiry)));
  Slots& all = slots();
  std::lock_guard<std::mutex> g(all.mu);
  all.list.push_back(slot);
  if (!all.started) {
    all.started = true;
    std::thread(&Watchdog::loop).detach();
  }
  return slot;
}

}  // namespace mpcomm
