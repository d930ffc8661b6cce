// The MPI calls of an op: which ones, with which arguments (MPI_IN_PLACE, the root's buffers, chunks of
// at most chunk_elements() for allreduce, broadcast and reduce, int counts for the uneven ops), in both
// kinds: blocking (MPI_Allreduce ...) and non-blocking (MPI_Iallreduce ...).
#pragma once

#include <string>
#include <vector>

#include "backends/mpi/comm_state.h"
#include "core/op.h"

namespace mpcomm::mpi {

using detail::Op;

// The counts and displacements of an uneven op as MPI takes them (int), checked to fit before any call.
struct UnevenInts {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};

// One MPI call of an op, with its arguments as both kinds of calls take them (MPI_IN_PLACE and the
// root's buffers already decided).
struct MpiCall {
  OpKind kind;
  const void* send;
  void* recv;
  int count;
  MPI_Datatype type;
  MPI_Op mop;
  int root;
  MPI_Comm comm;
  const UnevenInts* v = nullptr;  // alltoallv, allgatherv
};

// The blocking call, or (req != null) the non-blocking one; and their names.
int make_call(const MpiCall& c, MPI_Request* req);
const char* call_name(OpKind kind, bool blocking);
// Whether the op is MPI's in-place layout of itself (communicator.h's rules, translated).
bool mpi_in_place(const Op& op, int rank);
// The other collectives take one count per rank block, which MPI cannot express past INT_MAX.
int one_call_count(const Op& op, const detail::Backend& b);

// The chunks of a call of `count` elements: post(offset in bytes, elements) for each, at least one call
// (count 0 included); every chunk is posted before any is completed (MPI matches collectives in order).
template <class Post>
void for_chunks(const CommState& st, size_t count, size_t es, Post&& post) {
  const size_t chunk = st.chunk_elements(es);
  size_t off = 0;
  do {
    const size_t n = std::min(chunk, count - off);
    post(off * es, static_cast<int>(n));
    off += n;
  } while (off < count);
}

// The MPI calls of `op`, in order: call(MpiCall) for each. allreduce, broadcast and reduce go out in chunks
// of at most chunk_elements() (for_chunks); the other collectives take one count per rank block.
template <class Call>
void for_calls(const Op& op, int rank, const CommState& st, const detail::Backend& b, const UnevenInts& uneven,
               Call&& call) {
  const MPI_Datatype type = mpi_type(op.dtype);
  const MPI_Op mop = op.reduces() ? mpi_op(op.dtype, op.redop) : MPI_OP_NULL;
  const bool in_place = mpi_in_place(op, rank);
  const bool is_root = op.rooted() && op.root == rank;
  const size_t es = dtype_size(op.dtype);
  const auto* src = static_cast<const char*>(op.send);
  auto* dst = static_cast<char*>(op.recv);
  MpiCall c{op.kind, nullptr, nullptr, 0, type, mop, op.root, st.comm};
  switch (op.kind) {
    case OpKind::allreduce:
    case OpKind::broadcast:
    case OpKind::reduce:
      for_chunks(st, op.count, es, [&](size_t off, int n) {
        c.send = in_place ? MPI_IN_PLACE : src + off;
        c.recv = op.kind == OpKind::reduce && !is_root ? nullptr : dst + off;
        c.count = n;
        call(c);
      });
      return;
    case OpKind::reduce_scatter:
      // MPI's in-place reduce_scatter takes every block from recvbuf and leaves the result at its start;
      // ours has it at block rank() (MpiBackend::run moves it there; block 0 is scratch then).
      c.count = one_call_count(op, b);
      c.send = in_place ? MPI_IN_PLACE : op.send;
      c.recv = in_place ? const_cast<void*>(op.send) : op.recv;
      return call(c);
    case OpKind::scatter:
      c.count = one_call_count(op, b);
      c.send = is_root ? op.send : nullptr;
      c.recv = in_place ? MPI_IN_PLACE : op.recv;
      return call(c);
    case OpKind::allgather:
    case OpKind::gather:
    case OpKind::alltoall:
      c.count = one_call_count(op, b);
      c.send = in_place ? MPI_IN_PLACE : op.send;
      c.recv = op.kind == OpKind::gather && !is_root ? nullptr : op.recv;
      return call(c);
    case OpKind::barrier: return call(c);
    case OpKind::alltoallv:
    case OpKind::allgatherv:
      // Counts and displacements from `uneven` (prepare_uneven); allgatherv's own count fits, as its
      // recv_counts[rank] does.
      c.v = &uneven;
      c.count = static_cast<int>(op.kind == OpKind::allgatherv ? op.count : 0);
      c.send = in_place ? MPI_IN_PLACE : op.send;
      c.recv = op.recv;
      return call(c);
    default: return;
  }
}

}  // namespace mpcomm::mpi
