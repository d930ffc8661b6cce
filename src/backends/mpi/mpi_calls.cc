// The MPI calls of an op (mpi_calls.h).
#include "backends/mpi/mpi_calls.h"

namespace mpcomm::mpi {

// The other collectives take one count per rank block, which MPI cannot express past INT_MAX.
int one_call_count(const Op& op, const detail::Backend& b) {
  if (op.count > static_cast<size_t>(INT_MAX))
    throw Unsupported("mpcomm: " + b.describe(op) + ": count " + std::to_string(op.count) + " is more than the " +
                      std::to_string(INT_MAX) + " elements one MPI call can carry per rank, and the mpi backend " +
                      "splits only allreduce, broadcast, reduce, send and recv into chunks");
  return static_cast<int>(op.count);
}

// The blocking call, or (req != null) the non-blocking one; and their names.
int make_call(const MpiCall& c, MPI_Request* req) {
  switch (c.kind) {
    case OpKind::allreduce:
      return req ? MPI_Iallreduce(c.send, c.recv, c.count, c.type, c.mop, c.comm, req)
                 : MPI_Allreduce(c.send, c.recv, c.count, c.type, c.mop, c.comm);
    case OpKind::broadcast:
      return req ? MPI_Ibcast(c.recv, c.count, c.type, c.root, c.comm, req) : MPI_Bcast(c.recv, c.count, c.type, c.root, c.comm);
    case OpKind::reduce:
      return req ? MPI_Ireduce(c.send, c.recv, c.count, c.type, c.mop, c.root, c.comm, req)
                 : MPI_Reduce(c.send, c.recv, c.count, c.type, c.mop, c.root, c.comm);
    case OpKind::allgather:
      return req ? MPI_Iallgather(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm, req)
                 : MPI_Allgather(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm);
    case OpKind::reduce_scatter:
      return req ? MPI_Ireduce_scatter_block(c.send, c.recv, c.count, c.type, c.mop, c.comm, req)
                 : MPI_Reduce_scatter_block(c.send, c.recv, c.count, c.type, c.mop, c.comm);
    case OpKind::gather:
      return req ? MPI_Igather(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm, req)
                 : MPI_Gather(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm);
    case OpKind::scatter:
      return req ? MPI_Iscatter(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm, req)
                 : MPI_Scatter(c.send, c.count, c.type, c.recv, c.count, c.type, c.root, c.comm);
    case OpKind::alltoall:
      return req ? MPI_Ialltoall(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm, req)
                 : MPI_Alltoall(c.send, c.count, c.type, c.recv, c.count, c.type, c.comm);
    case OpKind::barrier: return req ? MPI_Ibarrier(c.comm, req) : MPI_Barrier(c.comm);
    case OpKind::alltoallv: {
      const UnevenInts& v = *c.v;
      return req ? MPI_Ialltoallv(c.send, v.send_counts.data(), v.send_displs.data(), c.type, c.recv,
                                  v.recv_counts.data(), v.recv_displs.data(), c.type, c.comm, req)
                 : MPI_Alltoallv(c.send, v.send_counts.data(), v.send_displs.data(), c.type, c.recv,
                                 v.recv_counts.data(), v.recv_displs.data(), c.type, c.comm);
    }
    case OpKind::allgatherv: {
      const UnevenInts& v = *c.v;
      return req ? MPI_Iallgatherv(c.send, c.count, c.type, c.recv, v.recv_counts.data(), v.recv_displs.data(),
                                   c.type, c.comm, req)
                 : MPI_Allgatherv(c.send, c.count, c.type, c.recv, v.recv_counts.data(), v.recv_displs.data(),
                                  c.type, c.comm);
    }
    default: return MPI_ERR_OP;
  }
}

const char* call_name(OpKind kind, bool blocking) {
  switch (kind) {
    case OpKind::allreduce: return blocking ? "MPI_Allreduce" : "MPI_Iallreduce";
    case OpKind::broadcast: return blocking ? "MPI_Bcast" : "MPI_Ibcast";
    case OpKind::reduce: return blocking ? "MPI_Reduce" : "MPI_Ireduce";
    case OpKind::allgather: return blocking ? "MPI_Allgather" : "MPI_Iallgather";
    case OpKind::reduce_scatter: return blocking ? "MPI_Reduce_scatter_block" : "MPI_Ireduce_scatter_block";
    case OpKind::gather: return blocking ? "MPI_Gather" : "MPI_Igather";
    case OpKind::scatter: return blocking ? "MPI_Scatter" : "MPI_Iscatter";
    case OpKind::alltoall: return blocking ? "MPI_Alltoall" : "MPI_Ialltoall";
    case OpKind::barrier: return blocking ? "MPI_Barrier" : "MPI_Ibarrier";
    case OpKind::alltoallv: return blocking ? "MPI_Alltoallv" : "MPI_Ialltoallv";
    case OpKind::allgatherv: return blocking ? "MPI_Allgatherv" : "MPI_Iallgatherv";
    default: return "MPI";
  }
}

// Whether the op is MPI's in-place layout of itself (communicator.h's rules, translated).
bool mpi_in_place(const Op& op, int rank) {
  const size_t es = dtype_size(op.dtype);
  auto block = [&](const void* base, int r) {
    return static_cast<const char*>(base) + static_cast<size_t>(r) * op.count * es;
  };
  const bool is_root = op.rooted() && op.root == rank;
  switch (op.kind) {
    case OpKind::allreduce: return op.send == op.recv;
    case OpKind::reduce: return is_root && op.send == op.recv;
    case OpKind::allgather: return op.count > 0 && op.send == block(op.recv, rank);
    case OpKind::reduce_scatter: return op.count > 0 && op.recv == block(op.send, rank);
    case OpKind::gather: return is_root && op.count > 0 && op.send == block(op.recv, op.root);
    case OpKind::scatter: return is_root && op.count > 0 && op.recv == block(op.send, op.root);
    case OpKind::alltoall: return op.count > 0 && op.send == op.recv;
    // MPI_IN_PLACE for MPI_Allgatherv: this rank's block is already at recvbuf + rdispls[rank].
    case OpKind::allgatherv:
      return op.count > 0 && op.send == static_cast<const char*>(op.recv) +
                                            op.v->recv_displs[static_cast<size_t>(rank)] * es;
    default: return false;
  }
}

}  // namespace mpcomm::mpi
