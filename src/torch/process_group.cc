// ProcessGroupMpcomm's overrides: each hands its arguments to the same op of Ops, unchanged.
#include "torch/process_group.h"

namespace mpcomm::torch_backend {

using Works = ProcessGroupMpcomm::Works;

Works ProcessGroupMpcomm::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  return ops_.broadcast(tensors, opts);
}

Works ProcessGroupMpcomm::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  return ops_.allreduce(tensors, opts);
}

Works ProcessGroupMpcomm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                              const c10d::AllreduceCoalescedOptions& opts) {
  return ops_.allreduce_coalesced(tensors, opts);
}

Works ProcessGroupMpcomm::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  return ops_.reduce(tensors, opts);
}

Works ProcessGroupMpcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllgatherOptions& opts) {
  return ops_.allgather(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return ops_._allgather_base(output, input, opts);
}

Works ProcessGroupMpcomm::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                              std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return ops_.allgather_coalesced(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                 const c10d::GatherOptions& opts) {
  return ops_.gather(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                  const c10d::ScatterOptions& opts) {
  return ops_.scatter(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ReduceScatterOptions& opts) {
  return ops_.reduce_scatter(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                               const c10d::ReduceScatterOptions& opts) {
  return ops_._reduce_scatter_base(output, input, opts);
}

Works ProcessGroupMpcomm::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                                        std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  return ops_.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
}

Works ProcessGroupMpcomm::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                   const c10d::AllToAllOptions& opts) {
  return ops_.alltoall(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return ops_.send(tensors, dst, tag);
}

Works ProcessGroupMpcomm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return ops_.recv(tensors, src, tag);
}

Works ProcessGroupMpcomm::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return ops_.recvAnysource(tensors, tag);
}

Works ProcessGroupMpcomm::barrier(const c10d::BarrierOptions& opts) { return ops_.barrier(opts); }

void ProcessGroupMpcomm::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  ops_.monitored_barrier(opts, wait_all_ranks);
}

c10::intrusive_ptr<GroupBase> ProcessGroupMpcomm::shrunk(const std::vector<int>& exclude) {
  std::unique_ptr<Communicator> c = ops_.shrink(exclude);
  if (!c) return {};
  return c10::make_intrusive<ProcessGroupMpcomm>(std::move(c), ops_.timeout());
}

#if MPCOMM_TORCH_2
bool ProcessGroupMpcomm::supportsShrinking() const {
  return ops_.backend_name() == "native" || ops_.backend_name() == "gloo";
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupMpcomm::shrink(const std::vector<int64_t>& ranks_to_exclude,
                                                             int /*shrink_flags*/,
                                                             const c10::intrusive_ptr<Options>& /*opts_override*/) {
  std::vector<int> exclude;
  for (int64_t r : ranks_to_exclude) {
    if (r < 0 || r >= getSize())
      throw std::invalid_argument("mpcomm: shrink_group: rank " + std::to_string(r) +
                                  " is not a rank of this group of " + std::to_string(getSize()));
    exclude.push_back(static_cast<int>(r));
  }
  return shrunk(exclude);
}

Works ProcessGroupMpcomm::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
  return ops_.allgather_into_tensor_coalesced(outputs, inputs, opts);
}

Works ProcessGroupMpcomm::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  return ops_.reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}
#endif

}  // namespace mpcomm::torch_backend
