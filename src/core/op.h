// The one description of an operation that flows from the public call through the checked entry
// point into a backend (NCCL's ncclInfo idea).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "mpcomm/communicator.h"

namespace mpcomm::detail {

struct Op {
  OpKind kind = OpKind::barrier;
  uint64_t seq = 0;           // collective sequence number (p2p ops: the p2p counter)
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;           // elements (per rank for allgather/reduce_scatter/gather/scatter/alltoall)
  DataType dtype = DataType::uint8;
  ReduceOp redop = ReduceOp::sum;
  int root = -1;              // rooted collectives
  int peer = -1;              // send/recv
  int tag = 0;                // send/recv
  bool fingerprint_probe = false;  // MPCOMM_CHECK's allgather of fingerprints, which shares the op's seq
  // What the backend ran (its algorithm or library call, a static string), for the flight recorder; set
  // by the backend as it runs the op.
  mutable const char* algorithm = nullptr;

  size_t bytes() const { return count * dtype_size(dtype); }
  bool reduces() const {
    return kind == OpKind::allreduce || kind == OpKind::reduce || kind == OpKind::reduce_scatter;
  }
  bool rooted() const {
    return kind == OpKind::broadcast || kind == OpKind::reduce || kind == OpKind::gather || kind == OpKind::scatter;
  }
};

// Bytes of an op's send and recv buffers that matter on `rank` of `size` (the rules of communicator.h:
// e.g. reduce's recv at the root only, allgather's recv of size() blocks). Assumes a validated op.
struct BufferSpans {
  size_t send_n = 0, recv_n = 0;
};
BufferSpans buffer_spans(const Op& op, int rank, int size);

// What two ranks must agree on for a collective. Carried in every native frame; exchanged up front
// (MPCOMM_CHECK=1) by backends that cannot check it themselves.
struct Fingerprint {
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t redop = 0xff;  // 0xff: not a reduction
  uint8_t pad = 0;
  int32_t root = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  bool operator==(const Fingerprint&) const = default;
};
Fingerprint fingerprint(const Op& op);

// "allreduce #12 (count 1000, float32, sum)"
std::string describe(const Fingerprint& f);
inline std::string describe(const Op& op) { return describe(fingerprint(op)); }
// "allreduce #12 (count 1000, float32, sum) on rank 1 of 4 [native]" — the prefix of every error.
std::string describe(const Op& op, int rank, int size, std::string_view backend);

// Backend side of a Request.
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  // Request::on_complete (the front door's requests only).
  virtual void on_complete(std::function<void(std::exception_ptr)> fn);
};

}  // namespace mpcomm::detail
