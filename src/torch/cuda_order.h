// CUDA tensors and PyTorch's streams. mpcomm's nccl communicator runs each op to its end on a stream of its own
// (the op's request completes once that stream has drained), so an op's results are in place for any stream
// once its Work completes; what the op must wait for is the work PyTorch queued on its current stream before
// the call: the kernels that write the op's inputs, or still read its outputs. So before an op is issued, the
// current stream of every device its tensors are on is drained up to the call (an event recorded there and
// polled, bounded by the group's timeout). CPU tensors cost one check of their device.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <string>
#include <vector>

namespace mpcomm::torch_backend {

// Waits until the work queued on the current CUDA stream of the devices of `a` and `b` before now has ended;
// throws std::runtime_error naming `op` past `timeout`.
void order_after_current_streams(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                                 std::chrono::milliseconds timeout, const char* op);

}  // namespace mpcomm::torch_backend
