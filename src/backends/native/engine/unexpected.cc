// The buffers of unexpected frames (unexpected.h).
#include "backends/native/engine/unexpected.h"

#include <algorithm>

namespace mpcomm::native {

void UnexpectedBuffers::take(Unexpected& u, size_t bytes) {
  if (bytes >= kSpareFrom) {
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (it->first >= bytes && (best == spare_.end() || it->first < best->first)) best = it;
    if (best != spare_.end()) {
      u.capacity = best->first;
      u.data = std::move(best->second);
      spare_.erase(best);
      return;
    }
  }
  u.data.reset(new char[bytes]);
  u.capacity = bytes;
}

void UnexpectedBuffers::give_back(Unexpected& u) {
  if (!u.data || u.capacity < kSpareFrom || u.capacity > kSpareMaxBytes) {
    u.data.reset();
    return;
  }
  if (spare_.size() >= kSpareBuffers) {
    auto smallest = std::min_element(spare_.begin(), spare_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (smallest->first >= u.capacity) {
      u.data.reset();
      return;
    }
    spare_.erase(smallest);
  }
  spare_.emplace_back(u.capacity, std::move(u.data));
}

}  // namespace mpcomm::native
