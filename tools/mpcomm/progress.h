// A progress bar on stderr for the drivers (bench, train) while their ranks run: redrawn every 200 ms
// from what `poll` reports — how many of `total` steps are done, and a text to show after the bar — and
// erased when it goes out of scope. Nothing is drawn unless stderr is a terminal.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace mpcomm::cli {

class ProgressBar {
 public:
  using Poll = std::function<std::pair<size_t, std::string>()>;
  ProgressBar(std::string label, size_t total, Poll poll);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mpcomm::cli
