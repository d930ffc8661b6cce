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

namespace mpcomm::torch_backend {

// ---- checks and conversions ---------------------------------------------------------------------------

namespace {

[[noreturn]] void refuse(const std::string& op, const std::string& why) {
  throw std::invalid_argument("mpcomm: " + op + ": " + why);
}

DataType to_mpcomm(const at::Tensor& t, const std::string& op) {
  switch (t.scalar_type()) {
    case at::kHalf: return DataType::float16;
    case at::kBFloat16: return DataType::bfloat16;
    case at::kFloat: return DataType::float32;
    case at::kDouble: return DataType::float64;
    case at::kChar: return DataType::int8;
    case at::kByte: return DataType::uint8;
    case at::kBool: return DataType::uint8;
    case at::kInt: return DataType::int32;
    case at::kLong: return DataType::int64;
    default:
      refuse(op, std::string("dtype ") + c10::toString(t.scalar_type()) +
                     " is not supported (float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool are)");
  }
}

ReduceOp to_mpcomm(const c10d::ReduceOp& r, const at::Tensor& t, const std::string& op) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (r.op_) {
    // bool: a sum or maximum is a logical or, a product or minimum a logical and (as in NCCL).
    case c10d::ReduceOp::SUM: return is_bool ? ReduceOp::max : ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      if (is_bool) refuse(op, "AVG of bool tensors has no meaning");
      return ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT: return is_bool ? ReduceOp::min : ReduceOp::prod;
    case c10d::ReduceOp::MIN: return ReduceOp::min;
    case c10d::ReduceOp::MAX: return ReduceOp::max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      const char* name = r.op_ == c10d::ReduceOp::BAND ? "BAND" : r.op_ == c10d::ReduceOp::BOR ? "BOR" : "BXOR";
      if (t.is_floating_point())
        refuse(op, std::string(name) + " needs an integer or bool tensor, not " + c10::toString(t.scalar_type()));
      // bool tensors hold 0 or 1 per byte: the bitwise ops on those bytes are the logical ones.
      if (r.op_ == c10d::ReduceOp::BAND) return ReduceOp::band;
      return r.op_ == c10d::ReduceOp::BOR ? ReduceOp::bor : ReduceOp::bxor;
    }
    case c10d::ReduceOp::PREMUL_SUM:
      refuse(op, "PREMUL_SUM (NCCL's pre-multiplied sum) is not supported "
                 "(SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
    default:
      refuse(op, "reduce op " + std::to_string(static_cast<int>(r.op_)) +
                     " is not supported (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
  }
}

// A tensor this group can hand to the communicator: strided, of a supported dtype, on the group's device.
void check_tensor(const at::Tensor& t, const std::string& op, const Communicator& c) {
  if (!t.defined()) refuse(op, "a tensor argument is undefined (None)");
  if (t.layout() != at::kStrided) refuse(op, "only dense (strided) tensors are supported, not sparse ones");
  const bool want_cuda = c.options().device.kind == Device::cuda;
  if (t.device().is_cuda() != want_cuda || (!t.device().is_cuda() && !t.device().is_cpu()))
    refuse(op, "tensor on " + t.device().str() + ", but this group's communicator (mpcomm backend '" +
                   std::string(c.backend()) + "') takes " + (want_cuda ? "CUDA" : "CPU") +
                   " tensors (set MPCOMM_BACKEND=nccl and MPCOMM_DEVICE=cuda for GPU tensors)");
  to_mpcomm(t, op);
}

void check_list(const std::vector<at::Tensor>& ts, size_t n, const std::string& op, const std::string& what) {
  if (ts.size() != n)
    refuse(op, what + " must hold " + std::to_string(n) + " tensor(s), got " + std::to_string(ts.size()));
}

void check_same(const at::Tensor& a, const at::Tensor& b, const std::string& op, const std::string& what) {
  if (a.scalar_type() != b.scalar_type())
    refuse(op, what + ": dtypes differ (" + std::string(c10::toString(a.scalar_type())) + " and " +
                   c10::toString(b.scalar_type()) + ")");
  if (a.numel() != b.numel())
    refuse(op, what + ": sizes differ (" + std::to_string(a.numel()) + " and " + std::to_string(b.numel()) +
                   " elements)");
}

void check_root(int64_t root, int size, const std::string& op) {
  if (root < 0 || root >= size)
    refuse(op, "root rank " + std::to_string(root) + " is out of range [0, " + std::to_string(size) + ")");
}

size_t elems(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

// A contiguous tensor with t's data: t itself, or a copy (copied back into t after the op when `out`).
at::Tensor contiguous(MpcommWork& w, const at::Tensor& t, bool out) {
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (out) w.copy_out.push_back([t, c]() mutable { t.copy_(c); });
  w.keep.push_back(c);
  return c;
}

// One flat buffer for a list of tensors of one dtype, each element copied in (when `in`).
at::Tensor flat(MpcommWork& w, const std::vector<at::Tensor>& ts, const at::Tensor& like, bool in) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  at::Tensor f = at::empty({n}, like.options().memory_format(c10::nullopt));
  if (in) {
    int64_t off = 0;
    for (const auto& t : ts) {
      f.narrow(0, off, t.numel()).copy_(t.reshape({-1}));
      off += t.numel();
    }
  }
  w.keep.push_back(f);
  return f;
}

// After the op: every tensor of `ts` gets its part of `f`.
void unflatten_after(MpcommWork& w, const at::Tensor& f, std::vector<at::Tensor> ts) {
  w.copy_out.push_back([f, ts]() mutable {
    int64_t off = 0;
    for (auto& t : ts) {
      t.copy_(f.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

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
    : comm_(create_communicator(store, rank, size, timeout)), rank_(rank), size_(size) {}

Ops::~Ops() {
  done_.stop();
  comm_.reset();
}

// ---- the ops ------------------------------------------------------------------------------------------

template <class F>
Ops::Works Ops::launch(c10d::OpType type, const char* /*name*/, std::vector<at::Tensor> outputs, F&& issue) {
  auto w = c10::make_intrusive<MpcommWork>(rank_, type, std::move(outputs), &done_);
  {
    std::lock_guard<std::mutex> g(issue_mu_);
    issue(*w);
  }
  return w;
}

Ops::Works Ops::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const std::string op = "broadcast";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  check_root(opts.rootRank, size_, op);
  return launch(c10d::OpType::BROADCAST, "broadcast", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->ibroadcast(t.data_ptr(), elems(t), to_mpcomm(t, op), static_cast<int>(opts.rootRank)));
  });
}

Ops::Works Ops::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const std::string op = "allreduce";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  return launch(c10d::OpType::ALLREDUCE, "allreduce", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->iallreduce(t.data_ptr(), t.data_ptr(), elems(t), to_mpcomm(t, op), r));
  });
}

Ops::Works Ops::allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const std::string op = "allreduce_coalesced";
  if (tensors.empty()) refuse(op, "the tensor list is empty");
  for (const auto& t : tensors) {
    check_tensor(t, op, *comm_);
    if (t.scalar_type() != tensors[0].scalar_type())
      refuse(op, "every tensor must have one dtype (" + std::string(c10::toString(tensors[0].scalar_type())) +
                     " and " + c10::toString(t.scalar_type()) + " given)");
  }
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  return launch(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, [&](MpcommWork& w) {
    at::Tensor f = flat(w, tensors, tensors[0], true);
    unflatten_after(w, f, tensors);
    w.requests.push_back(comm_->iallreduce(f.data_ptr(), f.data_ptr(), elems(f), to_mpcomm(f, op), r));
  });
}

Ops::Works Ops::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const std::string op = "reduce";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  check_root(opts.rootRank, size_, op);
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  const int root = static_cast<int>(opts.rootRank);
  return launch(c10d::OpType::REDUCE, "reduce", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], rank_ == root);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->ireduce(t.data_ptr(), rank_ == root ? t.data_ptr() : nullptr, elems(t),
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
  check_tensor(in, op, *comm_);
  bool even = true;
  for (const auto& o : outputs[0]) {
    check_tensor(o, op, *comm_);
    if (o.scalar_type() != in.scalar_type())
      refuse(op, "output dtype " + std::string(c10::toString(o.scalar_type())) + " differs from the input's " +
                     c10::toString(in.scalar_type()));
    even = even && o.numel() == in.numel();
  }
  check_same(outputs[0][static_cast<size_t>(rank_)], in, op, "this rank's output and its input");
  return launch(c10d::OpType::ALLGATHER, "allgather", outputs[0], [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, in, false);
    w.keep.push_back(in);
    at::Tensor f = flat(w, outputs[0], in, false);
    unflatten_after(w, f, outputs[0]);
    const DataType dt = to_mpcomm(in, op);
    if (even) {
      w.requests.push_back(comm_->iallgather(src.data_ptr(), f.data_ptr(), elems(src), dt));
    } else {
      std::vector<size_t> counts, displs;
      size_t off = 0;
      for (const auto& o : outputs[0]) {
        counts.push_back(elems(o));
        displs.push_back(off);
        off += elems(o);
      }
      w.requests.push_back(comm_->iallgatherv(src.data_ptr(), elems(src), f.data_ptr(), counts, displs, dt));
    }
  });
}

Ops::Works Ops::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  const std::string op = "_allgather_base";
  check_tensor(input, op, *comm_);
  check_tensor(output, op, *comm_);
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  if (output.numel() != input.numel() * size_)
    refuse(op, "the output holds " + std::to_string(output.numel()) + " elements, not world size × input = " +
                   std::to_string(input.numel() * size_));
  return launch(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    w.requests.push_back(comm_->iallgather(src.data_ptr(), dst.data_ptr(), elems(src), to_mpcomm(src, op)));
  });
}

Ops::Works Ops::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllgatherOptions&) {
  const std::string op = "allgather_coalesced";
  if (inputs.empty()) refuse(op, "the input list is empty");
  check_list(std::vector<at::Tensor>(outputs.size()), static_cast<size_t>(size_), op, "the output lists");
  for (const auto& t : inputs) {
    check_tensor(t, op, *comm_);
    if (t.scalar_type() != inputs[0].scalar_type()) refuse(op, "every input must have one dtype");
  }
  for (const auto& list : outputs) {
    check_list(list, inputs.size(), op, "each output list");
    for (size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], op, *comm_);
      check_same(list[i], inputs[i], op, "output " + std::to_string(i) + " against input " + std::to_string(i));
    }
  }
  std::vector<at::Tensor> all_out;
  for (const auto& list : outputs) all_out.insert(all_out.end(), list.begin(), list.end());
  return launch(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all_out, [&](MpcommWork& w) {
    at::Tensor in = flat(w, inputs, inputs[0], true);
    at::Tensor f = flat(w, all_out, inputs[0], false);  // rank r's block: its inputs in order
    unflatten_after(w, f, all_out);
    w.requests.push_back(comm_->iallgather(in.data_ptr(), f.data_ptr(), elems(in), to_mpcomm(in, op)));
  });
}

Ops::Works Ops::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                       const c10d::GatherOptions& opts) {
  const std::string op = "gather";
  check_list(inputs, 1, op, "the input list");
  check_tensor(inputs[0], op, *comm_);
  check_root(opts.rootRank, size_, op);
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = rank_ == root;
  if (at_root) {
    if (outputs.size() != 1) refuse(op, "the root needs one list of output tensors");
    check_list(outputs[0], static_cast<size_t>(size_), op, "the root's output list");
    for (const auto& o : outputs[0]) {
      check_tensor(o, op, *comm_);
      check_same(o, inputs[0], op, "an output against the input");
    }
  } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
    refuse(op, "only the root (rank " + std::to_string(root) + ") takes output tensors");
  }
  std::vector<at::Tensor> outs = at_root ? outputs[0] : std::vector<at::Tensor>{};
  return launch(c10d::OpType::GATHER, "gather", outs, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, inputs[0], false);
    w.keep.push_back(inputs[0]);
    void* dst = nullptr;
    if (at_root) {
      at::Tensor f = flat(w, outs, src, false);
      unflatten_after(w, f, outs);
      dst = f.data_ptr();
    }
    w.requests.push_back(comm_->igather(src.data_ptr(), dst, elems(src), to_mpcomm(src, op), root));
  });
}

Ops::Works Ops::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                        const c10d::ScatterOptions& opts) {
  const std::string op = "scatter";
  check_list(outputs, 1, op, "the output list");
  check_tensor(outputs[0], op, *comm_);
  check_root(opts.rootRank, size_, op);
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = rank_ == root;
  if (at_root) {
    if (inputs.size() != 1) refuse(op, "the root needs one list of input tensors");
    check_list(inputs[0], static_cast<size_t>(size_), op, "the root's input list");
    for (const auto& t : inputs[0]) {
      check_tensor(t, op, *comm_);
      check_same(t, outputs[0], op, "an input against the output");
    }
  } else if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty())) {
    refuse(op, "only the root (rank " + std::to_string(root) + ") takes input tensors");
  }
  return launch(c10d::OpType::SCATTER, "scatter", outputs, [&](MpcommWork& w) {
    at::Tensor dst = contiguous(w, outputs[0], true);
    w.keep.push_back(outputs[0]);
    const void* src = nullptr;
    if (at_root) src = flat(w, inputs[0], dst, true).data_ptr();
    w.requests.push_back(comm_->iscatter(src, dst.data_ptr(), elems(dst), to_mpcomm(dst, op), root));
  });
}

Ops::Works Ops::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                               const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter";
  check_list(outputs, 1, op, "the output list");
  if (inputs.size() != 1) refuse(op, "the input must be one list of tensors");
  check_list(inputs[0], static_cast<size_t>(size_), op, "the input list");
  check_tensor(outputs[0], op, *comm_);
  for (const auto& t : inputs[0]) {
    check_tensor(t, op, *comm_);
    check_same(t, outputs[0], op, "an input against the output");
  }
  const ReduceOp r = to_mpcomm(opts.reduceOp, outputs[0], op);
  return launch(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, [&](MpcommWork& w) {
    at::Tensor dst = contiguous(w, outputs[0], true);
    w.keep.push_back(outputs[0]);
    at::Tensor src = flat(w, inputs[0], dst, true);
    w.requests.push_back(comm_->ireduce_scatter(src.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
  });
}

Ops::Works Ops::_reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const std::string op = "_reduce_scatter_base";
  check_tensor(input, op, *comm_);
  check_tensor(output, op, *comm_);
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  if (input.numel() != output.numel() * size_)
    refuse(op, "the input holds " + std::to_string(input.numel()) + " elements, not world size × output = " +
                   std::to_string(output.numel() * size_));
  const ReduceOp r = to_mpcomm(opts.reduceOp, output, op);
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    w.requests.push_back(comm_->ireduce_scatter(src.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
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
  const int64_t row = rows > 0 ? t.numel() / rows : 0;
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
  check_tensor(input, op, *comm_);
  check_tensor(output, op, *comm_);
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
  return launch(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    const DataType dt = to_mpcomm(src, op);
    if (even)
      w.requests.push_back(comm_->ialltoall(src.data_ptr(), dst.data_ptr(), elems(src) / static_cast<size_t>(n), dt));
    else
      w.requests.push_back(comm_->ialltoallv(src.data_ptr(), sc, displacements(sc), dst.data_ptr(), rc,
                                             displacements(rc), dt));
  });
}

Ops::Works Ops::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                         const c10d::AllToAllOptions&) {
  const std::string op = "alltoall";
  const size_t n = static_cast<size_t>(size_);
  check_list(inputs, n, op, "the input list");
  check_list(outputs, n, op, "the output list");
  for (size_t i = 0; i < n; ++i) {
    check_tensor(inputs[i], op, *comm_);
    check_tensor(outputs[i], op, *comm_);
    if (inputs[i].scalar_type() != inputs[0].scalar_type() || outputs[i].scalar_type() != inputs[0].scalar_type())
      refuse(op, "every input and output must have one dtype");
  }
  return launch(c10d::OpType::ALLTOALL, "alltoall", outputs, [&](MpcommWork& w) {
    at::Tensor src = flat(w, inputs, inputs[0], true);
    at::Tensor dst = flat(w, outputs, inputs[0], false);
    unflatten_after(w, dst, outputs);
    std::vector<size_t> sc, rc;
    for (size_t i = 0; i < n; ++i) {
      sc.push_back(elems(inputs[i]));
      rc.push_back(elems(outputs[i]));
    }
    w.requests.push_back(comm_->ialltoallv(src.data_ptr(), sc, displacements(sc), dst.data_ptr(), rc, displacements(rc),
                                           to_mpcomm(src, op)));
  });
}

Ops::Works Ops::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const std::string op = "send";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  return launch(c10d::OpType::SEND, "send", {}, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], false);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->isend(t.data_ptr(), elems(t), to_mpcomm(t, op), dst, tag));
  });
}

Ops::Works Ops::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const std::string op = "recv";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  return launch(c10d::OpType::RECV, "recv", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->irecv(t.data_ptr(), elems(t), to_mpcomm(t, op), src, tag));
  });
}

Ops::Works Ops::recvAnysource(std::vector<at::Tensor>&, int) {
  refuse("recv", "receiving from any source is not supported by mpcomm: name the source rank (src=...)");
}

Ops::Works Ops::barrier(const c10d::BarrierOptions&) {
  return launch(c10d::OpType::BARRIER, "barrier", {}, [&](MpcommWork& w) { w.requests.push_back(comm_->ibarrier()); });
}

}  // namespace mpcomm::torch_backend
