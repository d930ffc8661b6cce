// The one description of an operation that flows from the public call through the checked entry
// point into a backend (NCCL's ncclInfo idea).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>

#include "mpcomm/communicator.h"

namespace mpcomm::detail {

// The counts and displacements of alltoallv and allgatherv, in elements, one entry per rank each
// (allgatherv: the recv ones only). A blocking call's view the caller's arrays; an i-op's view copies
// its request owns (OpRequest), so an Op's `v` is valid while its op runs, and never kept past it.
struct VCounts {
  std::span<const size_t> send_counts, send_displs, recv_counts, recv_displs;
};

struct Op {
  OpKind kind = OpKind::barrier;
  uint64_t seq = 0;           // collective sequence number (p2p ops: the p2p counter)
  const void* send = nullptr;
  void* recv = nullptr;
  // Elements: per rank for allgather/reduce_scatter/gather/scatter/alltoall; what this rank sends for
  // alltoallv (the sum of its send counts) and allgatherv (its send count).
  size_t count = 0;
  DataType dtype = DataType::uint8;
  ReduceOp redop = ReduceOp::sum;
  int root = -1;              // rooted collectives
  int peer = -1;              // send/recv (recv: kAnySource for any rank)
  int tag = 0;                // send/recv
  bool fingerprint_probe = false;  // MPCOMM_CHECK's allgather of fingerprints, which shares the op's seq
  // A sum made reproducible (core/reproducible/exact.h): the front door runs it as several backend ops, numbered
  // seq, seq + 1, ... (reproducible_steps()).
  bool reproducible = false;
  const VCounts* v = nullptr;      // alltoallv, allgatherv
  // What the backend ran (its algorithm or library call, a static string), for the flight recorder; set
  // by the backend as it runs the op.
  mutable const char* algorithm = nullptr;
  // OpClock readings for the timeline (trace.h): when the op was issued and when it started (0: not yet).
  uint64_t issued = 0, started = 0;

  size_t bytes() const { return count * dtype_size(dtype); }
  bool reduces() const {
    return kind == OpKind::allreduce || kind == OpKind::reduce || kind == OpKind::reduce_scatter;
  }
  bool rooted() const {
    return kind == OpKind::broadcast || kind == OpKind::reduce || kind == OpKind::gather || kind == OpKind::scatter;
  }
  bool uneven() const { return kind == OpKind::alltoallv || kind == OpKind::allgatherv; }
};

// The elements every rank's recv_counts add up to (allgatherv: the same on every rank).
size_t recv_total(const Op& op);

// Bytes of an op's send and recv buffers that matter on `rank` of `size` (the rules of communicator.h:
// e.g. reduce's recv at the root only, allgather's recv of size() blocks). Assumes a validated op.
struct BufferSpans {
  size_t send_n = 0, recv_n = 0;
};
BufferSpans buffer_spans(const Op& op, int rank, int size);

// What two ranks must agree on for a collective. Carried in every native frame; exchanged up front
// (MPCOMM_CHECK=1) by backends that cannot check it themselves. count: the op's count, but for
// allgatherv the sum of recv_counts and for alltoallv 0 (its ranks share no size; the pairwise counts
// are checked apart: FrontDoor::verify_counts, or native frames, which carry their size).
struct Fingerprint {
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t redop = 0xff;  // 0xff: not a reduction
  uint8_t reproducible = 0;
  int32_t root = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  bool operator==(const Fingerprint&) const = default;
};
Fingerprint fingerprint(const Op& op);

// "allreduce #12 (count 1000, float32, sum)", "allgatherv #3 (total 1000, int8)", "alltoallv #4 (int8)"
std::string describe(const Fingerprint& f);
inline std::string describe(const Op& op) { return describe(fingerprint(op)); }
// "allreduce #12 (count 1000, float32, sum) on rank 1 of 4 [native]" — the prefix of every error. The
// v-ops add this rank's side: "alltoallv #4 (int8; 10 elements out, 12 in) on rank 1 of 4 [gloo]".
std::string describe(const Op& op, int rank, int size, std::string_view backend);

// Backend side of a Request.
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  // Request::on_complete (the front door's requests only).
  virtual void on_complete(std::function<void(std::exception_ptr)> fn);
  // Request::source: a completed receive's sender; -1 before, and for other ops.
  virtual int source() const { return -1; }
};

}  // namespace mpcomm::detail
