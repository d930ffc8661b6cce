// The coalesced forms of Ops: many tensors, one collective over their concatenation (DDP's and FSDP2's
// buckets), and each tensor copied back to its place when the op ends.
#include <ATen/ops/empty.h>

#include <string>

#include "torch/compat.h"
#include "torch/ops.h"
#include "torch/tensor_args.h"

namespace mpcomm::torch_backend {

Ops::Works Ops::allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const std::string op = "allreduce_coalesced";
  if (tensors.empty()) refuse(op, "the tensor list is empty");
  for (const auto& t : tensors) {
    check_tensor(t, op, communicator());
    if (t.scalar_type() != tensors[0].scalar_type())
      refuse(op, "every tensor must have one dtype (" + std::string(c10::toString(tensors[0].scalar_type())) + " and " +
                     c10::toString(t.scalar_type()) + " given)");
  }
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  return launch(c10d::OpType::ALLREDUCE_COALESCED, "mpcomm:allreduce_coalesced", tensors, tensors, [&](MpcommWork& w) {
    at::Tensor f = flat(w, tensors, tensors[0], true);
    unflatten_after(w, f, tensors);
    w.requests.push_back(communicator().iallreduce(f.data_ptr(), f.data_ptr(), elems(f), to_mpcomm(f, op), r));
  });
}

Ops::Works Ops::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllgatherOptions&) {
  const std::string op = "allgather_coalesced";
  if (inputs.empty()) refuse(op, "the input list is empty");
  check_list(std::vector<at::Tensor>(outputs.size()), static_cast<size_t>(size_), op, "the output lists");
  for (const auto& t : inputs) {
    check_tensor(t, op, communicator());
    if (t.scalar_type() != inputs[0].scalar_type()) refuse(op, "every input must have one dtype");
  }
  for (const auto& list : outputs) {
    check_list(list, inputs.size(), op, "each output list");
    for (size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], op, communicator());
      check_same(list[i], inputs[i], op, "output " + std::to_string(i) + " against input " + std::to_string(i));
    }
  }
  std::vector<at::Tensor> all_out;
  for (const auto& list : outputs) all_out.insert(all_out.end(), list.begin(), list.end());
  return launch(c10d::OpType::ALLGATHER_COALESCED, "mpcomm:allgather_coalesced", inputs, all_out, [&](MpcommWork& w) {
    at::Tensor in = flat(w, inputs, inputs[0], true);
    at::Tensor f = flat(w, all_out, inputs[0], false);  // rank r's block: its inputs in order
    unflatten_after(w, f, all_out);
    w.requests.push_back(communicator().iallgather(in.data_ptr(), f.data_ptr(), elems(in), to_mpcomm(in, op)));
  });
}

#if MPCOMM_TORCH_2

namespace {

// Tensor-coalesced arguments: as many outputs as inputs, one dtype, the larger of each pair world size times
// the smaller.
void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, const Communicator& c,
                 const std::string& op, bool output_is_larger, int size) {
  if (inputs.empty()) refuse(op, "the input list is empty");
  check_list(outputs, inputs.size(), op, "the output list");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], op, c);
    check_tensor(outputs[i], op, c);
    if (inputs[i].scalar_type() != inputs[0].scalar_type() || outputs[i].scalar_type() != inputs[0].scalar_type())
      refuse(op, "every input and output must have one dtype (" + std::string(c10::toString(inputs[0].scalar_type())) +
                     " first, " + c10::toString(inputs[i].scalar_type()) + " / " +
                     c10::toString(outputs[i].scalar_type()) + " at " + std::to_string(i) + ")");
    const at::Tensor& big = output_is_larger ? outputs[i] : inputs[i];
    const at::Tensor& small = output_is_larger ? inputs[i] : outputs[i];
    if (big.numel() != small.numel() * size)
      refuse(op, std::string(output_is_larger ? "output " : "input ") + std::to_string(i) + " holds " +
                     std::to_string(big.numel()) + " elements, not world size × " +
                     (output_is_larger ? "input" : "output") + " = " + std::to_string(small.numel() * size));
  }
}

}  // namespace

Ops::Works Ops::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                const c10d::AllgatherOptions&) {
  const std::string op = "allgather_into_tensor_coalesced";
  check_pairs(outputs, inputs, communicator(), op, true, size_);
  return launch(
      c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, "mpcomm:all_gather_into_tensor_coalesced", inputs, outputs,
      [&](MpcommWork& w) {
        // Rank r's block of the gathered buffer: its inputs in order; output i takes piece i of each.
        at::Tensor in = flat(w, inputs, inputs[0], true);
        at::Tensor f = at::empty({in.numel() * size_}, in.options());
        w.keep.push_back(f);
        const int64_t block = in.numel();
        w.copy_out.push_back([f, block, outputs, size = size_]() mutable {
          int64_t off = 0;
          for (auto& o : outputs) {
            const int64_t n = o.numel() / size;
            for (int r = 0; r < size; ++r) o.view({-1}).narrow(0, r * n, n).copy_(f.narrow(0, r * block + off, n));
            off += n;
          }
        });
        w.requests.push_back(communicator().iallgather(in.data_ptr(), f.data_ptr(), elems(in), to_mpcomm(in, op)));
      });
}

Ops::Works Ops::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter_tensor_coalesced";
  check_pairs(outputs, inputs, communicator(), op, false, size_);
  const ReduceOp r = to_mpcomm(opts.reduceOp, outputs[0], op);
  return launch(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "mpcomm:reduce_scatter_tensor_coalesced", inputs,
                outputs, [&](MpcommWork& w) {
                  // Rank r's block of the buffer reduced: piece r of each input, in order.
                  int64_t block = 0;
                  for (const auto& o : outputs) block += o.numel();
                  at::Tensor f = at::empty({block * size_}, inputs[0].options());
                  int64_t off = 0;
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    const int64_t n = outputs[i].numel();
                    const at::Tensor in = inputs[i].reshape({-1});
                    for (int k = 0; k < size_; ++k) f.narrow(0, k * block + off, n).copy_(in.narrow(0, k * n, n));
                    off += n;
                  }
                  w.keep.push_back(f);
                  at::Tensor dst = flat(w, outputs, outputs[0], false);
                  unflatten_after(w, dst, outputs);
                  w.requests.push_back(
                      communicator().ireduce_scatter(f.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
                });
}

#endif  // MPCOMM_TORCH_2

}  // namespace mpcomm::torch_backend
