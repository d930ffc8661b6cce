// The job's abort record: the first failure any rank reports, kept under one key of the job's root store,
// so that ranks blocked in a wait learn of it and fail with its reason instead of waiting out their
// timeout. Every backend and the launcher use it.
#pragma once

#include <string>

#include "mpcomm/store.h"

namespace mpcomm {

inline constexpr const char* kAbortKey = "mpcomm/abort";

// Records reason unless a failure is recorded already (the first one stays). Throws what the store throws.
void publish_abort_reason(Store& store, const std::string& reason);
// The recorded failure, or "" when there is none; never blocks longer than a second. Throws what the
// store throws.
std::string read_abort_reason(Store& store);

}  // namespace mpcomm
