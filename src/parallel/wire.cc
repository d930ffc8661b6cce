#include "parallel/wire.h"

#include <algorithm>

#include "kernels/half.h"
#include "mpcomm/error.h"

namespace mpcomm::parallel {

WireType parse_wire(const std::string& name) {
  if (name == "float32" || name == "float") return WireType::float32;
  if (name == "bfloat16" || name == "bf16") return WireType::bfloat16;
  throw InvalidArgument("mpcomm train: --comm-dtype '" + name + "' is not one of float32, bfloat16");
}

void to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::f32_to_bf16(in[i]);
}

void from_bf16(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = detail::bf16_to_f32(in[i]);
}

void round_to_bf16(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = detail::bf16_to_f32(detail::f32_to_bf16(x[i]));
}

namespace {

// Σ over the ranks' bfloat16 blocks of this rank's block, in float32 and rank order: an all-to-all of blocks
// of `block` elements (the input padded with zeros to size()·block).
std::vector<float> sum_my_block(Communicator& comm, const float* x, size_t n, size_t block) {
  const size_t p = static_cast<size_t>(comm.size());
  std::vector<uint16_t> out(p * block, 0), in(p * block);
  to_bf16(x, out.data(), n);
  comm.alltoall(out.data(), in.data(), block, DataType::bfloat16);
  std::vector<float> sum(block, 0.0f);
  for (size_t r = 0; r < p; ++r)
    for (size_t i = 0; i < block; ++i) sum[i] += detail::bf16_to_f32(in[r * block + i]);
  return sum;
}

}  // namespace

void Wire::allreduce_sum(Communicator& comm, float* x, size_t n) const {
  if (!bf16()) {
    comm.allreduce(x, x, n, DataType::float32, ReduceOp::sum);
    return;
  }
  const size_t p = static_cast<size_t>(comm.size()), block = (n + p - 1) / p;
  const std::vector<float> mine = sum_my_block(comm, x, n, block);
  std::vector<uint16_t> rounded(block), all(p * block);
  to_bf16(mine.data(), rounded.data(), block);
  comm.allgather(rounded.data(), all.data(), block, DataType::bfloat16);
  from_bf16(all.data(), x, n);
}

void Wire::reduce_scatter_sum(Communicator& comm, const float* in, float* out, size_t n) const {
  if (!bf16()) {
    comm.reduce_scatter(in, out, n, DataType::float32, ReduceOp::sum);
    return;
  }
  const std::vector<float> mine = sum_my_block(comm, in, n * static_cast<size_t>(comm.size()), n);
  std::copy(mine.begin(), mine.end(), out);
}

void Wire::allgather(Communicator& comm, const float* in, float* out, size_t n) const {
  if (!bf16()) {
    comm.allgather(in, out, n, DataType::float32);
    return;
  }
  std::vector<uint16_t> mine(n), all(n * static_cast<size_t>(comm.size()));
  to_bf16(in, mine.data(), n);
  comm.allgather(mine.data(), all.data(), n, DataType::bfloat16);
  from_bf16(all.data(), out, all.size());
}

Request Wire::isend(Communicator& comm, const float* x, size_t n, int peer, int tag,
                    std::vector<uint16_t>& staging) const {
  if (!bf16()) return comm.isend(x, n, DataType::float32, peer, tag);
  staging.resize(n);
  to_bf16(x, staging.data(), n);
  return comm.isend(staging.data(), n, DataType::bfloat16, peer, tag);
}

Request Wire::irecv(Communicator& comm, float* x, size_t n, int peer, int tag, std::vector<uint16_t>& staging) const {
  if (!bf16()) return comm.irecv(x, n, DataType::float32, peer, tag);
  staging.resize(n);
  return comm.irecv(staging.data(), n, DataType::bfloat16, peer, tag);
}

void Wire::finish_recv(float* x, size_t n, const std::vector<uint16_t>& staging) const {
  if (bf16()) from_bf16(staging.data(), x, n);
}

}  // namespace mpcomm::parallel
