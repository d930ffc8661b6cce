#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace mpcomm::cli {

ProgressBar::ProgressBar(std::string label, size_t total, Poll poll) {
  if (!::isatty(STDERR_FILENO) || total == 0) return;
  thread_ = std::thread([this, label = std::move(label), total, poll = std::move(poll)] {
    while (!stop_) {
      auto [done, tail] = poll();
      done = std::min(done, total);
      const size_t width = 30, filled = width * done / total;
      std::fprintf(stderr, "\r  %-10s [%s%s] %zu/%zu%s   ", label.c_str(), std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total, tail.c_str());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::fprintf(stderr, "\r%90s\r", "");
  });
}

ProgressBar::~ProgressBar() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace mpcomm::cli
