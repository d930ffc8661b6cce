// The benchmark hook behind mpcomm._C._time_from_cpp (scripts/torch-bench's "c++" column): an op timed from
// C++ on a group's own communicator, so the PyTorch layer's cost is the difference. Not part of mpcomm.torch.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "torch/ops.h"

namespace mpcomm::torch_backend {

// Runs `iters` calls of `op` ("allreduce", "broadcast", "alltoall": blocking; "iallreduce": the non-blocking
// call and its wait; "sendrecv": a ring of isend/irecv) on float32 buffers of `count` elements straight on the
// group's communicator, each after a barrier (unless `barrier` is false), under the group's issue lock, and
// returns each call's seconds.
std::vector<double> time_from_cpp(Ops& group, const std::string& op, size_t count, int iters, bool barrier = true);

}  // namespace mpcomm::torch_backend
