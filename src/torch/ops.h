// Ops: the communicator under an "mpcomm" group and every c10d op mapped onto its non-blocking calls. It
// derives from no torch class: the process group (process_group.h) forwards its overrides here.
#pragma once

#include <ATen/record_function.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "mpcomm/communicator.h"
#include "torch/compat.h"
#include "torch/cuda_order.h"
#include "torch/work.h"

namespace mpcomm::torch_backend {

// Each op checks its tensors (device, dtype, layout, sizes) before any traffic, issues the mpcomm i-op(s)
// under the issue lock and returns a Work at once; the op progresses on the communicator's progress thread.
// Tensors that are not contiguous, and lists of tensors, go through a contiguous buffer and are copied back
// when the op ends (by whoever sees the end first: wait(), isCompleted(), or the completion thread that
// fulfils getFuture()'s future). Errors carry mpcomm's message (op, sequence, rank, peer) as a RuntimeError
// in Python; a refused call's message names the op and why.
class Ops {
 public:
  // Creates the communicator (MPCOMM_BACKEND, native by default) over `store`; blocks until every rank
  // of the group joined or `timeout` passed. The timeout bounds every op too.
  Ops(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  // Ops on a communicator made already (a shrink()'s); `timeout` bounds every op, as the parent group's did.
  Ops(std::unique_ptr<Communicator> comm, std::chrono::milliseconds timeout);
  ~Ops();
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;

  // The group's communicator; throws once the group was shut down.
  Communicator& communicator() const;
  // The mpcomm backend underneath (native, gloo, mpi, nccl, auto), also once shut down.
  const std::string& backend_name() const { return backend_name_; }
  // Ends the completion thread and frees the communicator (destroy_process_group on 2.x; the destructor):
  // every later op is refused.
  void shutdown();
  // Fails every pending and later op with `reason` (nothing once shut down).
  void abort(const std::string& reason);
  // Communicator::shrink(exclude): the communicator over the ranks still alive (nullptr on an excluded rank);
  // this group's pending and later ops fail with Revoked.
  std::unique_ptr<Communicator> shrink(const std::vector<int>& exclude);
  std::chrono::milliseconds timeout() const { return timeout_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // One thread at a time issues on the communicator: each op holds this while it issues.
  std::unique_lock<std::mutex> issue_lock() { return std::unique_lock<std::mutex>(issue_mu_); }

  using Works = c10::intrusive_ptr<c10d::Work>;
  Works broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts);
  Works allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  Works allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts);
  Works reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts);
  Works allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                  const c10d::AllgatherOptions& opts);
  Works _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts);
  Works allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                            const c10d::AllgatherOptions& opts);
  Works gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
               const c10d::GatherOptions& opts);
  Works scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                const c10d::ScatterOptions& opts);
  Works reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                       const c10d::ReduceScatterOptions& opts);
  Works _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts);
  Works alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                      std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts);
  Works alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions& opts);
  Works send(std::vector<at::Tensor>& tensors, int dst, int tag);
  Works recv(std::vector<at::Tensor>& tensors, int src, int tag);
  Works recvAnysource(std::vector<at::Tensor>& tensors, int tag);
  // allreduce of one sparse COO tensor (ops_sparse.cc).
  Works allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  Works barrier(const c10d::BarrierOptions& opts);
  // Every rank reports to rank 0 within opts.timeout (the group's timeout when 0); rank 0 names the ranks that
  // did not (the first, or all with wait_all_ranks) in a RuntimeError and aborts the group; else it releases all.
  void monitored_barrier(const c10d::BarrierOptions& opts, bool wait_all_ranks);
#if MPCOMM_TORCH_2
  // The 2.x tensor-coalesced forms (the coalescing manager): one all-gather / reduce-scatter over the tensors'
  // concatenation.
  Works allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::AllgatherOptions& opts);
  Works reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::ReduceScatterOptions& opts);
#endif
  // Collectives issued on this group so far (c10d's sequence number).
  uint64_t collectives_issued() const { return collectives_.load(std::memory_order_relaxed); }

 private:
  // recv and recvAnysource (src kAnySource).
  Works receive(std::vector<at::Tensor>& tensors, int src, int tag, c10d::OpType type, const char* title);
  // Makes the op's Work (recorded by a running profiler as `title`, c10d's "mpcomm:<op>", with the shapes of
  // `inputs`), issues its requests under the issue lock and returns it; a collective counts towards the
  // group's sequence number.
  template <class F>
  Works launch(c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
               std::vector<at::Tensor> outputs, F&& issue) {
    const bool profiled = at::hasCallbacks();
    if (cuda_) order_after_current_streams(inputs, outputs, timeout_, title);
    auto w =
        c10::make_intrusive<MpcommWork>(rank_, type, profiled ? title : nullptr, inputs, std::move(outputs), &done_);
    std::lock_guard<std::mutex> g(issue_mu_);
    issue(*w);
    if (type != c10d::OpType::SEND && type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE)
      collectives_.fetch_add(1, std::memory_order_relaxed);
    return w;
  }

  std::unique_ptr<Communicator> comm_;
  const int rank_, size_;
  const bool cuda_;  // the communicator takes CUDA tensors: ops wait for PyTorch's current stream first
  const std::chrono::milliseconds timeout_;
  const std::string backend_name_;
  std::atomic<uint64_t> collectives_{0};
  std::mutex issue_mu_;  // one thread at a time issues on the communicator
  Completions done_;     // started once the communicator exists; stopped before it goes
};

}  // namespace mpcomm::torch_backend
