// Bounds for calls that cannot bound themselves. A blocking MPI collective can be neither cancelled nor
// interrupted: a rank that never arrives would hold its peers in MPI_Allreduce forever. Such a call arms
// its slot before it starts and disarms it after (two plain stores: nothing on the fast path); the
// watchdog's thread looks at every armed slot every 50 ms, and when one has stayed armed with the same
// value past its timeout, or the job's abort record appears while it is armed, it runs the slot's
// expiry action on its own thread — which must end the call the only way left: end the job.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "bootstrap/abort_record.h"
#include "mpcomm/error.h"

namespace mpcomm {

class Watchdog {
 public:
  // Why a slot expired (Timeout or PeerFailure) and the reason's text ("timed out after 3 s", or the job's
  // abort record); the value the slot was armed with.
  using Expiry = std::function<void(ErrorCode code, const std::string& why, uint64_t armed)>;

  class Slot {
   public:
    // `value` != 0 names the call (a sequence number + 1, say); a new value restarts the clock.
    void arm(uint64_t value) { armed_.store(value, std::memory_order_release); }
    void disarm() { armed_.store(0, std::memory_order_release); }
    // The owner is going away: once this returns, no expiry runs and the abort watch is not used.
    void detach();

   private:
    friend class Watchdog;
    Slot(std::chrono::milliseconds timeout, AbortWatch* abort_watch, Expiry on_expiry)
        : timeout_(timeout), abort_watch_(abort_watch), on_expiry_(std::move(on_expiry)) {}
    std::atomic<uint64_t> armed_{0};
    std::mutex mu_;          // the watchdog's use of the owner's things (abort watch, expiry), and detach()
    bool detached_ = false;
    const std::chrono::milliseconds timeout_;
    AbortWatch* const abort_watch_;  // may be null; must outlive the slot
    const Expiry on_expiry_;
    // The watchdog thread's own view.
    uint64_t seen_ = 0;
    std::chrono::steady_clock::time_point since_{};
    bool fired_ = false;
  };

  // A slot watched until the returned pointer is released. The first slot starts the thread.
  static std::shared_ptr<Slot> watch(std::chrono::milliseconds timeout, AbortWatch* abort_watch, Expiry on_expiry);

 private:
  static void loop();
  // The watchdog's look at one slot (its thread only).
  static void look(Slot& s, std::chrono::steady_clock::time_point now);
};

}  // namespace mpcomm
