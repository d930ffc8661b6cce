// The checks of a c10d op's tensors and options, the conversions of dtypes and reduce ops to mpcomm's, and the
// buffers an op hands the communicator (contiguous copies, one flat buffer for a list) with their copy-backs.
#include "torch/tensor_args.h"

#include <ATen/ops/empty.h>

namespace mpcomm::torch_backend {

[[noreturn]] void refuse(const std::string& op, const std::string& why) {
  throw std::invalid_argument("mpcomm: " + op + ": " + why);
}

namespace {

// How a dtype travels: mpcomm's dtype and how many of its elements one tensor element is (0: not at all).
// Complex numbers go as their real and imaginary parts (sums and averages stay exact per part); unsigned
// 32/64-bit integers as the signed ones of their width (sums, products and the bitwise ops have the same
// bits); 16-bit integers and the float8 types only as bytes (no reduction kernels for them).
struct Wire {
  DataType dt = DataType::uint8;
  size_t per = 0;
  enum Reduces : uint8_t { all, wrapping, sum_avg, none } reduces = all;
};

Wire wire_of(at::ScalarType s) {
  switch (s) {
    case at::kHalf:
      return {DataType::float16, 1};
    case at::kBFloat16:
      return {DataType::bfloat16, 1};
    case at::kFloat:
      return {DataType::float32, 1};
    case at::kDouble:
      return {DataType::float64, 1};
    case at::kChar:
      return {DataType::int8, 1};
    case at::kByte:
      return {DataType::uint8, 1};
    case at::kBool:
      return {DataType::uint8, 1};
    case at::kInt:
      return {DataType::int32, 1};
    case at::kLong:
      return {DataType::int64, 1};
    case at::kComplexFloat:
      return {DataType::float32, 2, Wire::sum_avg};
    case at::kComplexDouble:
      return {DataType::float64, 2, Wire::sum_avg};
    case at::kShort:
      return {DataType::uint8, 2, Wire::none};
#if MPCOMM_TORCH_2
    case at::kUInt16:
      return {DataType::uint8, 2, Wire::none};
    case at::kUInt32:
      return {DataType::int32, 1, Wire::wrapping};
    case at::kUInt64:
      return {DataType::int64, 1, Wire::wrapping};
#endif
    default:
#if MPCOMM_TORCH_2
      if (c10::isFloat8Type(s)) return {DataType::uint8, 1, Wire::none};
#endif
      return {};
  }
}

}  // namespace

DataType to_mpcomm(const at::Tensor& t, const std::string& op) {
  const Wire w = wire_of(t.scalar_type());
  if (w.per == 0)
    refuse(op, std::string("dtype ") + c10::toString(t.scalar_type()) +
                   " is not supported (float16, bfloat16, float32, float64, complex64, complex128, int8, uint8, int16, "
                   "int32, int64, bool" +
                   (MPCOMM_TORCH_2 ? ", uint16, uint32, uint64 and the float8 types are)" : " are)"));
  return w.dt;
}

size_t elems(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * wire_of(t.scalar_type()).per; }

ReduceOp to_mpcomm(const c10d::ReduceOp& r, const at::Tensor& t, const std::string& op) {
  const bool is_bool = t.scalar_type() == at::kBool;
  const Wire w = wire_of(t.scalar_type());
  const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"};
  const auto name = [&]() -> std::string {
    const int i = static_cast<int>(r.op_);
    return i >= 0 && i < 8 ? names[i] : "reduce op " + std::to_string(i);
  };
  const std::string dtype = c10::toString(t.scalar_type());
  if (w.reduces == Wire::none && w.per > 0)
    refuse(op, name() + " of " + dtype + " tensors: " + dtype +
                   " is only moved (broadcast, all_gather, all_to_all, scatter, gather, send/recv), never reduced");
  if (w.reduces == Wire::sum_avg && r.op_ != c10d::ReduceOp::SUM && r.op_ != c10d::ReduceOp::AVG)
    refuse(op, name() + " of " + dtype + " tensors is not supported (SUM and AVG are)");
  if (w.reduces == Wire::wrapping &&
      (r.op_ == c10d::ReduceOp::AVG || r.op_ == c10d::ReduceOp::MIN || r.op_ == c10d::ReduceOp::MAX))
    refuse(op, name() + " of " + dtype + " tensors is not supported (SUM, PRODUCT, BAND, BOR, BXOR are)");
  switch (r.op_) {
    // bool: a sum or maximum is a logical or, a product or minimum a logical and (as in NCCL).
    case c10d::ReduceOp::SUM:
      return is_bool ? ReduceOp::max : ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      if (is_bool) refuse(op, "AVG of bool tensors has no meaning");
      return ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? ReduceOp::min : ReduceOp::prod;
    case c10d::ReduceOp::MIN:
      return ReduceOp::min;
    case c10d::ReduceOp::MAX:
      return ReduceOp::max;
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
      refuse(op,
             "PREMUL_SUM (NCCL's pre-multiplied sum) is not supported "
             "(SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
    default:
      refuse(op, "reduce op " + std::to_string(static_cast<int>(r.op_)) +
                     " is not supported (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
  }
}

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
    refuse(op,
           what + ": sizes differ (" + std::to_string(a.numel()) + " and " + std::to_string(b.numel()) + " elements)");
}

void check_root(int64_t root, int size, const std::string& op) {
  if (root < 0 || root >= size)
    refuse(op, "root rank " + std::to_string(root) + " is out of range [0, " + std::to_string(size) + ")");
}

at::Tensor contiguous(MpcommWork& w, const at::Tensor& t, bool out) {
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (out) w.copy_out.push_back([t, c]() mutable { t.copy_(c); });
  w.keep.push_back(c);
  return c;
}

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

void unflatten_after(MpcommWork& w, const at::Tensor& f, std::vector<at::Tensor> ts) {
  w.copy_out.push_back([f, ts]() mutable {
    int64_t off = 0;
    for (auto& t : ts) {
      t.copy_(f.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

}  // namespace mpcomm::torch_backend
