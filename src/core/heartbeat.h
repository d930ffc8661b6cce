// The heartbeat of an elastic process: while it holds an elastic communicator, a thread of the process adds 1 to
// "alive/<host>/<pid>" in the job's root store every kBeatEvery. shrink() on any host reads the counters of the
// ranks that have not checked in: one whose counter has not moved for kBeatStalled is cut off (a link down, its
// host gone) or stopped, and is left out then — instead of at the end of the timeout (shrink.cc). Only the
// processes on another host need it: a dead or stopped process of the caller's own host is seen directly.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "mpcomm/store.h"

namespace mpcomm::detail {

inline constexpr auto kBeatEvery = std::chrono::milliseconds(100);
// Nine beats missed in a row: a process descheduled that long on a loaded machine is rare, and the price of a
// wrong call is one live rank counted out of the shrink (PeerFailure there), never a wrong result.
inline constexpr auto kBeatStalled = std::chrono::milliseconds(900);

std::string heartbeat_key(const std::string& host, const std::string& pid);

// Beats for this process on `root` (a job's root store) until the returned handle goes; one beat thread serves
// every store of the process.
std::shared_ptr<void> keep_beating(const std::shared_ptr<Store>& root, const std::string& key);

}  // namespace mpcomm::detail
