// MpcommWork's waiting, testing, future and single conclusion, and the completion thread's loop. mpcomm's
// errors reach Python as RuntimeError with mpcomm's message (op, sequence, rank, peer).
#include "torch/work.h"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

namespace mpcomm::torch_backend {

namespace {

// A RuntimeError in Python, with mpcomm's message. A timeout also says so in the words c10d's users look for
// (gloo's "Timed out", NCCL's "timeout"; PyTorch's own tests match " timeout ").
std::exception_ptr as_python_error(const std::exception& e) {
  if (dynamic_cast<const Timeout*>(&e) != nullptr)
    return std::make_exception_ptr(std::runtime_error(std::string(e.what()) + " (c10d: timeout exceeded)"));
  return std::make_exception_ptr(std::runtime_error(e.what()));
}

}  // namespace

// ---- Work ---------------------------------------------------------------------------------------------

bool MpcommWork::isCompleted() {
  if (done()) return true;
  std::exception_ptr error;
  try {
    for (auto& r : requests)
      if (!r.test()) return false;
  } catch (const std::exception& e) {
    error = as_python_error(e);
  }
  conclude(error);
  return true;
}

bool MpcommWork::wait(std::chrono::milliseconds timeout) {
  std::exception_ptr error;
  try {
    if (timeout == kNoTimeout) {
      for (auto& r : requests) r.wait();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      for (auto& r : requests)
        while (!r.test()) {
          if (std::chrono::steady_clock::now() >= deadline)
            throw std::runtime_error("mpcomm: " + std::string(c10d::opTypeToString(opType_)) +
                                     ": not completed within work.wait()'s timeout of " +
                                     std::to_string(timeout.count()) + " ms (the op goes on)");
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("within work.wait()'s timeout") != std::string::npos) throw;
    error = as_python_error(e);
  } catch (const std::exception& e) {
    error = as_python_error(e);
  }
  conclude(error);
  std::lock_guard<std::mutex> g(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> MpcommWork::getFuture() {
  bool arm = false;
  {
    std::lock_guard<std::mutex> g(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
      arm = true;
    }
  }
  if (arm) {
    if (done()) {
      fulfil();
    } else {
      // The last request to end hands the work to the group's completion thread.
      auto left = std::make_shared<std::atomic<size_t>>(requests.size());
      c10::intrusive_ptr<MpcommWork> self = c10::intrusive_ptr<MpcommWork>::reclaim_copy(this);
      for (auto& r : requests)
        r.on_complete([self, left](std::exception_ptr) {
          if (left->fetch_sub(1) == 1) self->done_->completed(self);
        });
    }
  }
  std::lock_guard<std::mutex> g(future_mu_);
  return future_;
}

// (A mutex and a flag, not std::call_once: glibc's call_once makes a futex system call every time.)
void MpcommWork::conclude(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> once(conclude_mu_);
    if (!concluded_) {
      concluded_ = true;
      if (!error) {
        try {
          for (auto& f : copy_out) f();
        } catch (const std::exception& e) {
          error = as_python_error(e);
        }
      }
      keep.clear();
      finish(error);
    }
  }
  fulfil();
}

void MpcommWork::on_ended() {
  std::exception_ptr error;
  try {
    for (auto& r : requests) r.wait();  // ended already: returns or throws at once
  } catch (const std::exception& e) {
    error = as_python_error(e);
  }
  conclude(error);
}

bool MpcommWork::done() {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_;
}

void MpcommWork::fulfil() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> g(future_mu_);
    f = future_;
  }
  if (!f || f->completed() || !done()) return;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> g(mutex_);
    error = exception_;
  }
  std::lock_guard<std::mutex> g(fulfil_mu_);
  if (f->completed()) return;
  if (error)
    f->setError(error);
  else
    f->markCompleted(c10::IValue(outputs_));
}

// ---- the completion thread ----------------------------------------------------------------------------

Completions::Completions() : thread_(&Completions::loop, this) {}

void Completions::completed(c10::intrusive_ptr<MpcommWork> work) {
  {
    std::lock_guard<std::mutex> g(mu_);
    done_.push_back(std::move(work));
  }
  cv_.notify_one();
}

void Completions::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Completions::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !done_.empty(); });
    if (done_.empty()) return;
    auto w = std::move(done_.front());
    done_.pop_front();
    lk.unlock();
    w->on_ended();
    w.reset();
    lk.lock();
  }
}

int MpcommWork::sourceRank() const {
  const int src = requests.size() == 1 ? requests[0].source() : -1;
  if (src < 0) throw std::runtime_error("mpcomm: sourceRank: the receive has not completed (or is not a receive)");
  return src;
}

}  // namespace mpcomm::torch_backend
