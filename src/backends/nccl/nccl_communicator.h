// The nccl backend: NVIDIA NCCL behind the Communicator API, bootstrapped through mpcomm's Store (rank 0's
// ncclUniqueId travels as a store key). Each Communicator owns one non-blocking NCCL communicator
// (ncclConfig_t::blocking = 0) and one CUDA stream (cudaStreamNonBlocking) on its GPU.
//
// Completion rule: a collective returns when its result is in the receive buffer. It is enqueued on the
// communicator's stream, and the calling thread then polls cudaStreamQuery and ncclCommGetAsyncError
// (yielding the core between polls for the first millisecond, sleeping 50 µs between polls after that)
// until the stream has drained, bounded by Options::timeout. isend/irecv return at once; their operations
// are handed to NCCL as one ncclGroupStart/ncclGroupEnd batch by the first wait() or test() on any of
// them (or by the next collective), and wait() polls that batch's CUDA event the same way.
//
// Buffers: the backend works on device buffers. Device (or managed) memory on the communicator's GPU goes
// to NCCL as it is; device memory on another GPU is an InvalidArgument. Host memory works too, slowly: it
// is staged through device memory that the communicator (for isend/irecv, the request) owns, copied in
// before the op and out after it. That is how the common layer's own host-memory calls reach NCCL
// (MPCOMM_CHECK's fingerprint allgather, split's exchange of colors and keys). A received host buffer is
// filled by wait()/test(), not before.
//
// GPU: Options::device's index when the device is cuda (index -1: local rank modulo the visible GPUs);
// with cpu, still local rank modulo the visible GPUs. cudaSetDevice precedes every CUDA and NCCL call
// path, so a communicator may be used from any thread (one at a time).
//
// Failures: an asynchronous NCCL error is a PeerFailure (Internal for a local CUDA or NCCL fault); a wait
// past the timeout is a Timeout, after ncclCommAbort. Either way this communicator is aborted, the job's
// abort key (mpcomm/abort in the root store) is set, and waits on the other ranks, which look at that key
// every 10 ms, fail soon after with this rank's reason. Every message names the op, its sequence number,
// the rank and, for point to point, the peer.
//
// Point to point: NCCL has no tags. Between two ranks, sends and receives match in the order they were
// posted, whatever their tags, and a receive must name the count and dtype that were sent (NCCL cannot
// detect a difference). A pair's first exchange sets up its connection inside NCCL and needs both sides'
// operations in flight, so post the sends and receives of an exchange before waiting on any of them (the
// batching above then hands them to NCCL together); test() may wait, bounded, for that setup. Sends,
// receives and collectives share one stream, in the order they reach NCCL: a collective completes after
// the point-to-point operations handed to NCCL before it.
//
// Emulated hosts: when Options::host_id is not this machine's hostname (MPCOMM_HOST_ID, mpcomm launch
// --hosts), NCCL_HOSTID is set to it before the process's first NCCL call, so NCCL takes each emulated
// host for a machine of its own and several ranks can share one GPU. Traffic between emulated hosts then
// goes through NCCL's network transport (sockets, or IB loopback), never NVLink, P2P or shared memory:
// numbers measured that way are NCCL's network numbers.
//
// Its parts, one job per file:
//   nccl_backend.cc    NcclBackend (run, start, abort, split, the memory it takes) and create_nccl
//   nccl_calls.h/.cc   how one op reaches NCCL: a collective's NCCL calls, a posted send or receive, staging
//   nccl_state.h/.cc   CommState: one communicator's NCCL and CUDA state, its bounded waits, abort, split
//   nccl_runtime.h/.cc NCCL's vocabulary: result codes and their text, data types and reductions
#pragma once

#include <memory>

#include "core/backend.h"

namespace mpcomm::nccl {

std::unique_ptr<detail::Backend> create_nccl(std::shared_ptr<Store> store, int rank, int size, const Options& opts);

}  // namespace mpcomm::nccl
