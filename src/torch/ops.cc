// The c10d ops on an mpcomm Communicator: the checks of tensors and options, the conversions of dtypes and
// reduce ops, and each op's buffers, i-op(s) and copy-backs on one MpcommWork.
#include "torch/ops.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>

#include "torch/c10d_store.h"
#include "torch/tensor_args.h"

namespace mpcomm::torch_backend {

namespace {

Millis group_timeout(std::chrono::milliseconds t) { return t.count() > 0 ? Millis(t.count()) : Millis(0); }

std::unique_ptr<Communicator> create_communicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  std::chrono::milliseconds timeout) {
  const char* b = std::getenv("MPCOMM_BACKEND");
  const std::string backend = b && *b ? b : "native";
  mpcomm::Options opts;
  opts.timeout = group_timeout(timeout);
  return create(backend, std::make_shared<C10dStore>(store), rank, size, opts);
}

}  // namespace

// ---- the communicator ---------------------------------------------------------------------------------

Ops::Ops(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
    : comm_(create_communicator(store, rank, size, timeout)),
      rank_(rank),
      size_(size),
      cuda_(comm_->options().device.kind == Device::cuda),
      timeout_(timeout),
      backend_name_(comm_->backend()) {}

Ops::Ops(std::unique_ptr<Communicator> comm, std::chrono::milliseconds timeout)
    : comm_(std::move(comm)),
      rank_(comm_->rank()),
      size_(comm_->size()),
      cuda_(comm_->options().device.kind == Device::cuda),
      timeout_(timeout),
      backend_name_(comm_->backend()) {}

Ops::~Ops() { shutdown(); }

void Ops::shutdown() {
  std::lock_guard<std::mutex> g(issue_mu_);
  done_.stop();
  comm_.reset();
}

void Ops::abort(const std::string& reason) {
  std::lock_guard<std::mutex> g(issue_mu_);
  if (comm_) comm_->abort(reason);
}

// Not under the issue lock: a shrink can take several timeouts, and abort() (which takes it) must not wait that
// long; ops issued meanwhile fail with Revoked.
std::unique_ptr<Communicator> Ops::shrink(const std::vector<int>& exclude) { return communicator().shrink(exclude); }

Communicator& Ops::communicator() const {
  if (!comm_) throw std::runtime_error("mpcomm: the group was shut down (destroy_process_group): no op can run on it");
  return *comm_;
}

// ---- the ops ------------------------------------------------------------------------------------------

Ops::Works Ops::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const std::string op = "broadcast";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, communicator());
  check_root(opts.rootRank, size_, op);
  return launch(c10d::OpType::BROADCAST, "mpcomm:broadcast", tensors, tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(
        communicator().ibroadcast(t.data_ptr(), elems(t), to_mpcomm(t, op), static_cast<int>(opts.rootRank)));
  });
}

Ops::Works Ops::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const std::string op = "allreduce";
  check_list(tensors, 1, op, "the tensor list");
  if (tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse(tensors, opts);
  check_tensor(tensors[0], op, communicator());
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  return launch(c10d::OpType::ALLREDUCE, "mpcomm:all_reduce", tensors, tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(communicator().iallreduce(t.data_ptr(), t.data_ptr(), elems(t), to_mpcomm(t, op), r));
  });
}

Ops::Works Ops::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const std::string op = "reduce";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, communicator());
  check_root(opts.rootRank, size_, op);
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  const int root = static_cast<int>(opts.rootRank);
  return launch(c10d::OpType::REDUCE, "mpcomm:reduce", tensors, tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], rank_ == root);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(communicator().ireduce(t.data_ptr(), rank_ == root ? t.data_ptr() : nullptr, elems(t),
                                                to_mpcomm(t, op), r, root));
  });
}

Ops::Works Ops::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                          const c10d::AllgatherOptions&) {
  const std::string op = "allgather";
  check_list(inputs, 1, op, "the input list");
  if (outputs.size() != 1) refuse(op, "the output must be one list of tensors, got " + std::to_string(outputs.size()));
  check_list(outputs[0], static_cast<size_t>(size_), op, "the output list");
  const at::Tensor& in = inputs[0];
  check_tensor(in, op, communicator());
  bool even = true;
  for (const auto& o : outputs[0]) {
    check_tensor(o, op, communicator());
    if (o.scalar_type() != in.scalar_type())
      refuse(op, "output dtype " + std::string(c10::toString(o.scalar_type())) + " differs from the input's " +
                     c10::toString(in.scalar_type()));
    even = even && o.numel() == in.numel();
  }
  check_same(outputs[0][static_cast<size_t>(rank_)], in, op, "this rank's output and its input");
  return launch(c10d::OpType::ALLGATHER, "mpcomm:all_gather", inputs, outputs[0], [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, in, false);
    w.keep.push_back(in);
    at::Tensor f = flat(w, outputs[0], in, false);
    unflatten_after(w, f, outputs[0]);
    const DataType dt = to_mpcomm(in, op);
    if (even) {
      w.requests.push_back(communicator().iallgather(src.data_ptr(), f.data_ptr(), elems(src), dt));
    } else {
      std::vector<size_t> counts, displs;
      size_t off = 0;
      for (const auto& o : outputs[0]) {
        counts.push_back(elems(o));
        displs.push_back(off);
        off += elems(o);
      }
      w.requests.push_back(communicator().iallgatherv(src.data_ptr(), elems(src), f.data_ptr(), counts, displs, dt));
    }
  });
}

Ops::Works Ops::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  const std::string op = "_allgather_base";
  check_tensor(input, op, communicator());
  check_tensor(output, op, communicator());
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  if (output.numel() != input.numel() * size_)
    refuse(op, "the output holds " + std::to_string(output.numel()) +
                   " elements, not world size × input = " + std::to_string(input.numel() * size_));
  return launch(c10d::OpType::_ALLGATHER_BASE, "mpcomm:all_gather_into_tensor", {input}, {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    w.requests.push_back(communicator().iallgather(src.data_ptr(), dst.data_ptr(), elems(src), to_mpcomm(src, op)));
  });
}

Ops::Works Ops::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                       const c10d::GatherOptions& opts) {
  const std::string op = "gather";
  check_list(inputs, 1, op, "the input list");
  check_tensor(inputs[0], op, communicator());
  check_root(opts.rootRank, size_, op);
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = rank_ == root;
  if (at_root) {
    if (outputs.size() != 1) refuse(op, "the root needs one list of output tensors");
    check_list(outputs[0], static_cast<size_t>(size_), op, "the root's output list");
    for (const auto& o : outputs[0]) {
      check_tensor(o, op, communicator());
      check_same(o, inputs[0], op, "an output against the input");
    }
  } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
    refuse(op, "only the root (rank " + std::to_string(root) + ") takes output tensors");
  }
  std::vector<at::Tensor> outs = at_root ? outputs[0] : std::vector<at::Tensor>{};
  return launch(c10d::OpType::GATHER, "mpcomm:gather", inputs, outs, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, inputs[0], false);
    w.keep.push_back(inputs[0]);
    void* dst = nullptr;
    if (at_root) {
      at::Tensor f = flat(w, outs, src, false);
      unflatten_after(w, f, outs);
      dst = f.data_ptr();
    }
    w.requests.push_back(communicator().igather(src.data_ptr(), dst, elems(src), to_mpcomm(src, op), root));
  });
}

Ops::Works Ops::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                        const c10d::ScatterOptions& opts) {
  const std::string op = "scatter";
  check_list(outputs, 1, op, "the output list");
  check_tensor(outputs[0], op, communicator());
  check_root(opts.rootRank, size_, op);
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = rank_ == root;
  if (at_root) {
    if (inputs.size() != 1) refuse(op, "the root needs one list of input tensors");
    check_list(inputs[0], static_cast<size_t>(size_), op, "the root's input list");
    for (const auto& t : inputs[0]) {
      check_tensor(t, op, communicator());
      check_same(t, outputs[0], op, "an input against the output");
    }
  } else if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty())) {
    refuse(op, "only the root (rank " + std::to_string(root) + ") takes input tensors");
  }
  return launch(c10d::OpType::SCATTER, "mpcomm:scatter", at_root ? inputs[0] : outputs, outputs, [&](MpcommWork& w) {
    at::Tensor dst = contiguous(w, outputs[0], true);
    w.keep.push_back(outputs[0]);
    const void* src = nullptr;
    if (at_root) src = flat(w, inputs[0], dst, true).data_ptr();
    w.requests.push_back(communicator().iscatter(src, dst.data_ptr(), elems(dst), to_mpcomm(dst, op), root));
  });
}

Ops::Works Ops::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                               const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter";
  check_list(outputs, 1, op, "the output list");
  if (inputs.size() != 1) refuse(op, "the input must be one list of tensors");
  check_list(inputs[0], static_cast<size_t>(size_), op, "the input list");
  check_tensor(outputs[0], op, communicator());
  for (const auto& t : inputs[0]) {
    check_tensor(t, op, communicator());
    check_same(t, outputs[0], op, "an input against the output");
  }
  const ReduceOp r = to_mpcomm(opts.reduceOp, outputs[0], op);
  return launch(c10d::OpType::REDUCE_SCATTER, "mpcomm:reduce_scatter", inputs[0], outputs, [&](MpcommWork& w) {
    at::Tensor dst = contiguous(w, outputs[0], true);
    w.keep.push_back(outputs[0]);
    at::Tensor src = flat(w, inputs[0], dst, true);
    w.requests.push_back(
        communicator().ireduce_scatter(src.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
  });
}

Ops::Works Ops::_reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const std::string op = "_reduce_scatter_base";
  check_tensor(input, op, communicator());
  check_tensor(output, op, communicator());
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  if (input.numel() != output.numel() * size_)
    refuse(op, "the input holds " + std::to_string(input.numel()) +
                   " elements, not world size × output = " + std::to_string(output.numel() * size_));
  const ReduceOp r = to_mpcomm(opts.reduceOp, output, op);
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, "mpcomm:reduce_scatter_tensor", {input}, {output}, [&](MpcommWork& w) {
        at::Tensor src = contiguous(w, input, false);
        at::Tensor dst = contiguous(w, output, true);
        w.keep.insert(w.keep.end(), {input, output});
        w.requests.push_back(
            communicator().ireduce_scatter(src.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
      });
}

namespace {

// Element counts of dim-0 splits of t (rows × elements per row), checked against t's first dimension.
std::vector<size_t> split_counts(const std::vector<int64_t>& splits, const at::Tensor& t, int size,
                                 const std::string& op, const std::string& what) {
  if (static_cast<int>(splits.size()) != size)
    refuse(op, what + " split sizes must have one entry per rank (" + std::to_string(size) + "), got " +
                   std::to_string(splits.size()));
  const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const int64_t row = rows > 0 ? static_cast<int64_t>(elems(t)) / rows : 0;  // in to_mpcomm(t)'s elements
  int64_t sum = 0;
  std::vector<size_t> counts;
  for (int64_t s : splits) {
    if (s < 0) refuse(op, what + " split size " + std::to_string(s) + " is negative");
    sum += s;
    counts.push_back(static_cast<size_t>(s * row));
  }
  if (sum != rows)
    refuse(op, what + " split sizes add up to " + std::to_string(sum) + " but the tensor has " + std::to_string(rows) +
                   " rows");
  return counts;
}

std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size());
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = off;
    off += counts[i];
  }
  return d;
}

}  // namespace

Ops::Works Ops::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                              std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  const std::string op = "alltoall_base";
  check_tensor(input, op, communicator());
  check_tensor(output, op, communicator());
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  const int n = size_;
  const bool even = output_split_sizes.empty() && input_split_sizes.empty();
  std::vector<size_t> sc, rc;
  if (even) {
    if (input.numel() != output.numel()) refuse(op, "output and input sizes differ");
    if (input.numel() % n != 0)
      refuse(op, "without split sizes the tensors' " + std::to_string(input.numel()) +
                     " elements must divide evenly among " + std::to_string(n) + " ranks");
  } else {
    sc = input_split_sizes.empty()
             ? split_counts(std::vector<int64_t>(n, input.dim() > 0 ? input.size(0) / n : 1), input, n, op, "input")
             : split_counts(input_split_sizes, input, n, op, "input");
    rc = output_split_sizes.empty()
             ? split_counts(std::vector<int64_t>(n, output.dim() > 0 ? output.size(0) / n : 1), output, n, op, "output")
             : split_counts(output_split_sizes, output, n, op, "output");
  }
  return launch(c10d::OpType::ALLTOALL_BASE, "mpcomm:all_to_all", {input}, {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    const DataType dt = to_mpcomm(src, op);
    if (even)
      w.requests.push_back(
          communicator().ialltoall(src.data_ptr(), dst.data_ptr(), elems(src) / static_cast<size_t>(n), dt));
    else
      w.requests.push_back(
          communicator().ialltoallv(src.data_ptr(), sc, displacements(sc), dst.data_ptr(), rc, displacements(rc), dt));
  });
}

Ops::Works Ops::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                         const c10d::AllToAllOptions&) {
  const std::string op = "alltoall";
  const size_t n = static_cast<size_t>(size_);
  check_list(inputs, n, op, "the input list");
  check_list(outputs, n, op, "the output list");
  for (size_t i = 0; i < n; ++i) {
    check_tensor(inputs[i], op, communicator());
    check_tensor(outputs[i], op, communicator());
    if (inputs[i].scalar_type() != inputs[0].scalar_type() || outputs[i].scalar_type() != inputs[0].scalar_type())
      refuse(op, "every input and output must have one dtype");
  }
  return launch(c10d::OpType::ALLTOALL, "mpcomm:all_to_all", inputs, outputs, [&](MpcommWork& w) {
    at::Tensor src = flat(w, inputs, inputs[0], true);
    at::Tensor dst = flat(w, outputs, inputs[0], false);
    unflatten_after(w, dst, outputs);
    std::vector<size_t> sc, rc;
    for (size_t i = 0; i < n; ++i) {
      sc.push_back(elems(inputs[i]));
      rc.push_back(elems(outputs[i]));
    }
    w.requests.push_back(communicator().ialltoallv(src.data_ptr(), sc, displacements(sc), dst.data_ptr(), rc,
                                                   displacements(rc), to_mpcomm(src, op)));
  });
}

}  // namespace mpcomm::torch_backend
