// ProcessGroupMpcomm: PyTorch's torch.distributed backend "mpcomm" (PyTorch 1.13's c10d::ProcessGroup),
// every op on an mpcomm Communicator's non-blocking calls.
//
// Each op checks its tensors (device, dtype, layout, sizes) before any traffic, issues the mpcomm i-op(s)
// under the group's issue lock and returns a Work at once; the op progresses on the communicator's
// progress thread. Tensors that are not contiguous, and lists of tensors, go through a contiguous
// buffer and are copied back when the op ends (by whoever sees the end first: wait(), isCompleted(), or
// the completion thread that fulfils getFuture()'s future). Errors carry mpcomm's message (op, sequence,
// rank, peer) as a RuntimeError in Python.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "mpcomm/communicator.h"

namespace mpcomm::torch_backend {

class MpcommWork;

class ProcessGroupMpcomm final : public c10d::ProcessGroup {
 public:
  // Creates the communicator (MPCOMM_BACKEND, native by default) over `store`; blocks until every rank
  // of the group joined or `timeout` passed. The timeout bounds every op too.
  ProcessGroupMpcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupMpcomm() override;

  const std::string getBackendName() const override { return "mpcomm"; }
  // The mpcomm backend underneath ("native", "gloo", "mpi", "nccl").
  std::string mpcomm_backend() const { return std::string(comm_->backend()); }
  Communicator& communicator() { return *comm_; }

  using Works = c10::intrusive_ptr<c10d::Work>;
  Works broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  Works allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  Works allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  Works reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  Works allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                  const c10d::AllgatherOptions& opts) override;
  Works _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  Works allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                            const c10d::AllgatherOptions& opts) override;
  Works gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
               const c10d::GatherOptions& opts) override;
  Works scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                const c10d::ScatterOptions& opts) override;
  Works reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                       const c10d::ReduceScatterOptions& opts) override;
  Works _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  Works alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                      std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) override;
  Works alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::AllToAllOptions& opts) override;
  Works send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  Works recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  Works recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  Works barrier(const c10d::BarrierOptions& opts) override;

  // Runs `iters` calls of `op` ("allreduce", "broadcast", "alltoall": blocking; "iallreduce": the
  // non-blocking call and its wait; "sendrecv": a ring of isend/irecv) on float32 buffers of `count`
  // elements straight on the communicator, from C++, each after a barrier (unless `barrier` is false), and
  // returns each call's seconds: what the same op costs without PyTorch (scripts/torch-bench).
  std::vector<double> time_from_cpp(const std::string& op, size_t count, int iters, bool barrier = true);

  // The completion thread's side: a Work whose requests all ended (called from the progress thread).
  void completed(c10::intrusive_ptr<MpcommWork> work);

 private:
  template <class F>
  Works launch(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs, F&& issue);
  void completion_loop();

  std::unique_ptr<Communicator> comm_;
  std::mutex issue_mu_;  // one thread at a time issues on the communicator

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::deque<c10::intrusive_ptr<MpcommWork>> done_;
  bool stop_ = false;
  std::thread done_thread_;  // fulfils futures and runs copy-backs off the progress thread
};

}  // namespace mpcomm::torch_backend
