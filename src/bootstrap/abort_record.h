// The job's abort record: the first failure any rank reports, kept under one key of the job's root
// store, so that ranks blocked in a wait learn of it and fail with its reason instead of waiting out
// their timeout. Every backend and the launcher use it; AbortWatch is how a waiting backend looks at it.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "mpcomm/store.h"

namespace mpcomm {

inline constexpr const char* kAbortKey = "mpcomm/abort";

// Records reason unless a failure is recorded already (the first one stays). Throws what the store throws.
void publish_abort_reason(Store& store, const std::string& reason);
// The recorded failure, or "" when there is none; never blocks longer than a second. Throws what the
// store throws.
std::string read_abort_reason(Store& store);

// One communicator's view of the job's abort record, for waits that cannot otherwise hear of a failure
// elsewhere. A store that fails once (its host may legitimately have finished first) is not asked again:
// from then on the waits rely on their transport and their deadline. Thread-safe.
class AbortWatch {
 public:
  // `store`: any store of the job (its root is used, or with `job_wide` false the store itself: one
  // communicator's record, Options::elastic); null watches nothing. `every`: poll() asks the store at most
  // this often.
  AbortWatch(const std::shared_ptr<Store>& store, std::chrono::milliseconds every, std::string who,
             bool job_wide = true);
  // The recorded failure ("" when none, or when asked less than `every` ago).
  std::string poll();
  // The recorded failure, asked now.
  std::string read();
  // Publishes `reason` as the job's failure (unless one is recorded); a store error is logged, not thrown.
  void publish(const std::string& reason);
  bool watching() const;

 private:
  std::shared_ptr<Store> store_locked();
  void lost(const std::exception& e);
  mutable std::mutex mu_;
  std::shared_ptr<Store> store_;
  const std::chrono::steady_clock::duration every_;
  std::chrono::steady_clock::time_point next_{};
  const std::string who_;
};

}  // namespace mpcomm
