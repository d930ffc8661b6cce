// What every op of Ops does to its arguments before any traffic: checks that name the op and what is wrong
// (a refused call throws std::invalid_argument, a ValueError/RuntimeError in Python, and leaves the group usable),
// the conversions to mpcomm's dtypes and reduce ops, and the contiguous buffers an op works on.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "mpcomm/communicator.h"
#include "torch/compat.h"
#include "torch/work.h"

namespace mpcomm::torch_backend {

[[noreturn]] void refuse(const std::string& op, const std::string& why);

// mpcomm's dtype that t's data travels as (see elems()); refuses a dtype that cannot travel, by name.
DataType to_mpcomm(const at::Tensor& t, const std::string& op);
// mpcomm's reduce op for r on tensors like t (bool: sum/max are or, product/min are and); refuses by name a
// reduction a dtype cannot have (any of int16, uint16 and float8; all but SUM and AVG of complex; AVG, MIN, MAX
// of uint32 and uint64).
ReduceOp to_mpcomm(const c10d::ReduceOp& r, const at::Tensor& t, const std::string& op);

// A tensor this group can hand to the communicator: strided, of a supported dtype, on the group's device.
void check_tensor(const at::Tensor& t, const std::string& op, const Communicator& c);
void check_list(const std::vector<at::Tensor>& ts, size_t n, const std::string& op, const std::string& what);
// Same dtype and element count.
void check_same(const at::Tensor& a, const at::Tensor& b, const std::string& op, const std::string& what);
void check_root(int64_t root, int size, const std::string& op);

// How many elements of to_mpcomm(t)'s dtype t's data is (complex: two per element; int16, uint16: two bytes).
size_t elems(const at::Tensor& t);

// A contiguous tensor with t's data: t itself, or a copy (copied back into t after the op when `out`).
at::Tensor contiguous(MpcommWork& w, const at::Tensor& t, bool out);
// One flat buffer for a list of tensors of one dtype, each element copied in (when `in`).
at::Tensor flat(MpcommWork& w, const std::vector<at::Tensor>& ts, const at::Tensor& like, bool in);
// After the op: every tensor of `ts` gets its part of `f`.
void unflatten_after(MpcommWork& w, const at::Tensor& f, std::vector<at::Tensor> ts);

}  // namespace mpcomm::torch_backend
