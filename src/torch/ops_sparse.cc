// The all-reduce of a sparse (COO) tensor, as gloo does it: every rank's coalesced indices and values are
// gathered (all-gather of the counts, then one all-gatherv each), summed into one coalesced tensor on every
// rank and copied into the caller's tensor. DDP's gradients of nn.Embedding(sparse=True) take this path.
#include <ATen/ops/empty.h>
#include <ATen/ops/sparse_coo_tensor.h>

#include <string>
#include <vector>

#include "torch/ops.h"
#include "torch/tensor_args.h"

namespace mpcomm::torch_backend {

Ops::Works Ops::allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const std::string op = "allreduce (sparse)";
  at::Tensor& t = tensors[0];
  if (t.layout() != at::kSparse)
    refuse(op, std::string("only COO sparse tensors are supported, not ") + c10::toString(t.layout()));
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM && opts.reduceOp.op_ != c10d::ReduceOp::AVG)
    refuse(op, "sparse tensors are reduced with SUM or AVG only");
  if (!t.device().is_cpu() || communicator().options().device.kind == Device::cuda)
    refuse(op, "sparse tensors on " + t.device().str() + " in a group of " +
                   to_string(communicator().options().device) +
                   ": only CPU sparse tensors in a CPU group are supported");
  const at::Tensor in = t.coalesce();
  const at::Tensor vals = in._values().contiguous();  // [nnz, dense sizes...]
  to_mpcomm(vals, op);
  const bool avg = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  return launch(c10d::OpType::ALLREDUCE, "mpcomm:all_reduce", tensors, tensors, [&](MpcommWork& w) {
    const int64_t sparse_dim = in.sparse_dim(), nnz = in._nnz();
    // Every rank's count of entries first (the gathers below need them).
    std::vector<int64_t> nnzs(static_cast<size_t>(size_));
    communicator().allgather(&nnz, nnzs.data(), 1, DataType::int64);
    int64_t total = 0;
    for (int64_t k : nnzs) total += k;
    const at::Tensor idx = in._indices().t().contiguous();  // [nnz, sparse_dim]: one row per entry
    std::vector<int64_t> dense(vals.sizes().begin() + 1, vals.sizes().end());
    std::vector<int64_t> all_vals_shape{total};
    all_vals_shape.insert(all_vals_shape.end(), dense.begin(), dense.end());
    at::Tensor all_idx = at::empty({total, sparse_dim}, idx.options());
    at::Tensor all_vals = at::empty(all_vals_shape, vals.options());
    // Elements per entry, as the gathers count them.
    int64_t per_entry = 1;
    for (int64_t d : dense) per_entry *= d;
    const size_t idx_row = static_cast<size_t>(sparse_dim);
    const size_t val_row = static_cast<size_t>(per_entry) * elems(at::empty({1}, vals.options()));
    std::vector<size_t> ic(nnzs.size()), vc(nnzs.size()), id(nnzs.size()), vd(nnzs.size());
    size_t at_i = 0, at_v = 0;
    for (size_t r = 0; r < nnzs.size(); ++r) {
      ic[r] = static_cast<size_t>(nnzs[r]) * idx_row;
      vc[r] = static_cast<size_t>(nnzs[r]) * val_row;
      id[r] = at_i, vd[r] = at_v;
      at_i += ic[r], at_v += vc[r];
    }
    w.keep.insert(w.keep.end(), {idx, vals, all_idx, all_vals});
    w.requests.push_back(communicator().iallgatherv(idx.data_ptr(), ic[static_cast<size_t>(rank_)], all_idx.data_ptr(),
                                                    ic, id, DataType::int64));
    w.requests.push_back(communicator().iallgatherv(vals.data_ptr(), vc[static_cast<size_t>(rank_)],
                                                    all_vals.data_ptr(), vc, vd, to_mpcomm(vals, op)));
    w.copy_out.push_back([t = tensors[0], all_idx, all_vals, sizes = in.sizes().vec(), avg, n = size_]() mutable {
      at::Tensor sum = at::sparse_coo_tensor(all_idx.t(), all_vals, sizes).coalesce();
      if (avg) sum = sum / n;
      t.copy_(sum);
    });
  });
}

}  // namespace mpcomm::torch_backend
