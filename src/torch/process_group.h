// ProcessGroupMpcomm: the torch.distributed backend "mpcomm" — a c10d::ProcessGroup on PyTorch 1.13, a
// c10d::Backend on 2.x (compat.h). Every op forwards to Ops (ops.h), which does the work. Only this class and
// module.cc's bindings name the torch base class.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "mpcomm/communicator.h"
#include "torch/compat.h"
#include "torch/ops.h"

namespace mpcomm::torch_backend {

class ProcessGroupMpcomm final : public GroupBase {
 public:
  // Creates the communicator (MPCOMM_BACKEND, native by default) over `store`; blocks until every rank
  // of the group joined or `timeout` passed. The timeout bounds every op too.
  ProcessGroupMpcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout)
      : GroupBase(rank, size), ops_(store, rank, size, timeout) {}
  // The group over a communicator made already (shrunk()'s); `timeout` bounds every op.
  ProcessGroupMpcomm(std::unique_ptr<Communicator> comm, std::chrono::milliseconds timeout)
      : GroupBase(comm->rank(), comm->size()), ops_(std::move(comm), timeout) {}

  const std::string getBackendName() const override { return "mpcomm"; }
  // The mpcomm backend underneath ("native", "gloo", "mpi", "nccl").
  std::string mpcomm_backend() const { return std::string(ops_.communicator().backend()); }
  Communicator& communicator() { return ops_.communicator(); }
  Ops& ops() { return ops_; }
  // After an op failed (a peer died or timed out), on every survivor — or, with `exclude` (ranks of this group),
  // on purpose: a new group over the ranks still alive, in their order, numbered from 0 (Communicator::shrink;
  // native and gloo underneath). Null on an excluded rank. This group's pending and later ops fail.
  c10::intrusive_ptr<GroupBase> shrunk(const std::vector<int>& exclude);

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
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // c10d's sequence number: collectives issued on this group, alike on every rank while they agree.
  uint64_t getSequenceNumberForGroup() override { return ops_.collectives_issued(); }
  // Numbers start at 0 on every rank; there is nothing to agree on.
  void setSequenceNumberForGroup() override {}
#if MPCOMM_TORCH_2
  // destroy_process_group: the communicator goes now, not when Python drops its last reference.
  void shutdown() override { ops_.shutdown(); }
  // ProcessGroup.abort(): every pending and later op fails.
  void abort() override { ops_.abort("aborted by torch.distributed (ProcessGroup abort)"); }
  // torch.distributed.shrink_group: the backends whose communicators shrink (native, gloo).
  bool supportsShrinking() const override;
  // shrink_group(ranks_to_exclude): shrunk(ranks) on the ranks that stay (those excluded do not call it). Every
  // shrink revokes the old group's pending ops first, so SHRINK_ABORT and the default behave alike; the new group
  // keeps this one's timeout (options are not taken).
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts_override) override;
  Works allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::AllgatherOptions& opts) override;
  Works reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::ReduceScatterOptions& opts) override;
#endif

 private:
  Ops ops_;
};

}  // namespace mpcomm::torch_backend
