// The Work a c10d op returns (its mpcomm requests, kept buffers and copy-backs, its future) and the completion
// thread that ends works off the progress thread. Nothing here depends on the process group's base class.
#pragma once

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "mpcomm/communicator.h"

namespace mpcomm::torch_backend {

class Completions;

// One PyTorch op: the mpcomm requests it issued, the tensors it must keep alive until they end, and the
// copies back into the caller's tensors that follow a successful end. Whoever sees the end first (wait(),
// isCompleted(), or the completion thread once getFuture() armed it) concludes it, once.
class MpcommWork final : public c10d::Work {
 public:
  // profiling_title: c10d's "<backend>:<op>" name, under which a running profiler records the op with the
  // shapes of `inputs` from here until conclude() (nullptr when no profiler is on: nothing is recorded).
  MpcommWork(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
             std::vector<at::Tensor> outputs, Completions* done)
      : c10d::Work(rank, type, profiling_title,
                   profiling_title ? c10::optional<std::vector<at::Tensor>>(inputs) : c10::nullopt),
        outputs_(std::move(outputs)),
        done_(done) {}

  std::vector<Request> requests;
  std::vector<at::Tensor> keep;                 // buffers the requests use
  std::vector<std::function<void()>> copy_out;  // after success, in order

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // A receive from any source: the group rank it came from, once it ended well (what dist.recv returns).
  int sourceRank() const override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Ends the work once: copies back on success, records the error otherwise, fulfils the future.
  void conclude(std::exception_ptr error);
  // Called by the completion thread: every request ended.
  void on_ended();

 private:
  bool done();
  void fulfil();

  std::vector<at::Tensor> outputs_;
  Completions* done_;  // the group's completion thread, for getFuture()
  std::mutex conclude_mu_;
  bool concluded_ = false;  // under conclude_mu_
  std::mutex future_mu_, fulfil_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A group's completion thread: fulfils futures and runs copy-backs off the communicator's progress thread.
class Completions {
 public:
  Completions();
  ~Completions() { stop(); }
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // A work whose requests all ended (called from the progress thread).
  void completed(c10::intrusive_ptr<MpcommWork> work);
  // Ends the thread once the works handed to it are ended (before the communicator goes); works handed over
  // after that are released with this object.
  void stop();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<MpcommWork>> done_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mpcomm::torch_backend
