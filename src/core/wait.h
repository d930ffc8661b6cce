// Bounded waiting, written once: the duration text every timeout message uses, and the polling loop of
// the backends whose library completes work only when asked (MPI_Test, cudaEventQuery,
// ncclCommGetAsyncError). The native engine has its own waiter (it sleeps on its transports).
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "bootstrap/abort_record.h"
#include "mpcomm/error.h"
#include "mpcomm/types.h"

namespace mpcomm {

// "300", "2.5", "0.05": seconds as timeout messages write them.
std::string seconds_text(double seconds);
inline std::string seconds_text(std::chrono::milliseconds d) { return seconds_text(static_cast<double>(d.count()) / 1000.0); }

// How a poll_until() paces its polls.
struct PollPace {
  std::chrono::steady_clock::duration spin_for{};  // poll back to back (sched_yield between) this long,
  std::chrono::microseconds first_nap{50};         // then sleep this long between rounds,
  std::chrono::microseconds max_nap{1000};         // doubling up to this
  int polls_per_round = 1;                         // ready() calls per round
};

// Calls ready() until it returns true. Between rounds: the deadline (Timeout: "mpcomm: <what()>: timed
// out after <timeout> s waiting for <waiting_for>") and the job's abort record (PeerFailure: "mpcomm:
// <what()>: aborted because another rank failed: <reason>"). `watch` may be null.
template <class Ready, class What>
void poll_until(Ready&& ready, const PollPace& pace, std::chrono::steady_clock::time_point deadline,
                std::chrono::milliseconds timeout, AbortWatch* watch, What&& what, const std::string& waiting_for) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto nap = pace.first_nap;
  for (;;) {
    for (int i = 0; i < pace.polls_per_round; ++i)
      if (ready()) return;
    const auto now = Clock::now();
    if (now >= deadline)
      throw Timeout("mpcomm: " + what() + ": timed out after " + seconds_text(timeout) + " s waiting for " +
                    waiting_for);
    if (watch != nullptr)
      if (std::string msg = watch->poll(); !msg.empty())
        throw PeerFailure("mpcomm: " + what() + ": aborted because another rank failed: " + msg);
    if (now - start < pace.spin_for) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, pace.max_nap);
  }
}

}  // namespace mpcomm
