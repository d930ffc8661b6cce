// Native collective algorithms. Each lives in its own file that starts with its steps and the bytes
// it moves; all of them speak only to the Engine (send/recv of collective frames), so they run over
// shared memory and TCP alike. select.cc picks one per op, size and world size; MPCOMM_ALGO forces one.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/op.h"
#include "native/engine.h"

namespace mpcomm::native {

struct AlgoCtx {
  Engine& e;
  const detail::Op& op;
  int rank;
  int size;
  std::vector<char>& scratch_buf;
  const Topology& topo;  // which host each rank is on
  // At least n bytes of scratch, reused across calls.
  char* scratch(size_t n) {
    if (scratch_buf.size() < n) scratch_buf.resize(n);
    return scratch_buf.data();
  }
  size_t elem() const { return dtype_size(op.dtype); }
};

using AlgoFn = void (*)(AlgoCtx&);
struct Algorithm {
  OpKind kind;
  const char* name;
  AlgoFn fn;
};

void allreduce_flat(AlgoCtx& c);
void allreduce_ring(AlgoCtx& c);
void allreduce_direct(AlgoCtx& c);
// Two ranks on one host: pieces through the shared-memory ring, results left in the owner's result
// area for the other rank to copy, outputs written with streaming stores (out of place; in place:
// direct).
void allreduce_two_copy(AlgoCtx& c);
// allreduce_two_copy from this buffer size on (2 ranks, one host, each with a CPU).
inline constexpr size_t kTwoCopyFrom = size_t{8} << 20;
// One host whose ranks outnumber its CPUs, small messages: every rank leaves its input on the host's
// board (shared memory); once all are there the result is reduced, by the last to arrive alone up to
// 4 KiB, in chunks by every waiting rank above (up to ShmSegment::kBoardBytes; larger, or on several
// hosts: flat).
void allreduce_arrival(AlgoCtx& c);
// allreduce_arrival up to this buffer size on one host with at least twice as many ranks as CPUs; with
// fewer (some ranks have a CPU of their own), up to kArrivalMildUpTo.
inline constexpr size_t kArrivalUpTo = size_t{32} << 10;
inline constexpr size_t kArrivalMildUpTo = size_t{4} << 10;
void allreduce_recursive_doubling(AlgoCtx& c);
void allreduce_hierarchical(AlgoCtx& c);
void allreduce_hierarchical_sliced(AlgoCtx& c);
// Recursive doubling over `group` (ranks of the communicator, this rank among them), in place on the
// `count` elements at buf, reduce op only (no avg division). Every member ends with the same bits.
// Uses c.scratch.
void recursive_doubling_over(AlgoCtx& c, const std::vector<int>& group, char* buf, size_t count);
// The two halves of the ring allreduce over `group` (this rank at index i), on the op's count elements
// cut into group.size() chunks. Reduce-scatter: buf = in reduced over the group on chunk (i+1) mod n,
// the member's "owned" chunk (in may be buf); reduce op only. All-gather: every member's owned chunk
// into everyone's buf. `route`: how the chunks travel (Engine::send).
void ring_reduce_scatter_over(AlgoCtx& c, const std::vector<int>& group, const char* in, char* buf,
                              Route route = Route::usual);
void ring_allgather_over(AlgoCtx& c, const std::vector<int>& group, char* buf, Route route = Route::usual);
// The ring allreduce with its chunks sent by `route` (Engine::send); allreduce_ring chooses the route
// (and on a crowded host whether to run at all).
void allreduce_ring_routed(AlgoCtx& c, Route route);
// One host whose ranks outnumber its CPUs: from this buffer size the ring allreduce asks where the CPUs
// are (cpus_far_apart) and runs the direct allreduce when they are far apart.
inline constexpr size_t kCrowdedPlacementFrom = size_t{256} << 10;
// This machine's online CPUs (read once).
long online_cpus();
// One host (every rank calls it, in the same op, n >= 2): whether the CPUs are far apart now, a cache
// line's round trip between ranks 0 and 1 (Engine::round_trip_ns, measured by rank 0) above
// MPCOMM_FAR_NS; rank 0's answer on every rank (one round of small frames). placement.cc says why.
bool cpus_far_apart(AlgoCtx& c);
// The direct algorithms' handshake (direct_handshake.cc). direct_exchange: sends `mine` to every rank
// in `peers` (its can_access: mine.can_access and whether we can access that peer) and returns what
// each sent us, indexed by rank (ours at our rank), with can_access the pair's verdict: both sides
// said yes. Both ranks of a pair get the same verdict; only then may they touch each other's memory.
// direct_done: tells every rank in `peers` that we are done with its
// buffers and waits until each has said the same.
struct DirectDesc {
  uint64_t in = 0, out = 0;  // the rank's buffers (addresses in its process)
  uint64_t can_access = 1;
};
std::vector<DirectDesc> direct_exchange(AlgoCtx& c, const std::vector<int>& peers, const DirectDesc& mine);
// direct_exchange with every other rank (`others`: r+1, r+2, ..., in that order), each sending whether
// it reaches every other rank. True when all do: the same answer on every rank, so that all fall back
// together when one cannot.
bool direct_exchange_all(AlgoCtx& c, DirectDesc mine, std::vector<int>* others, std::vector<DirectDesc>* peer);
// Bytes per piece and source for the algorithms that reduce pieces read from the other n-1 ranks: the
// n-1 bounce pieces and the result stay in a core's L2. A whole number of es-byte elements.
size_t direct_piece_bytes(int n, size_t es);
void direct_done(AlgoCtx& c, const std::vector<int>& peers);
// The staged flow (staged_flow.cc), every rank of the communicator on this host: this rank copies
// `bytes` at src into its stage piece by piece (streaming stores) for every rank in `readers` to copy
// out, and copies each `in` out of its sender's stage into dst (with streaming stores when `stream`).
// Returns once all of it is done, every reader having consumed every piece of ours. Every rank named
// must call it in the same op, with matching sizes.
struct StagedIn {
  int from;
  char* dst;
  size_t bytes;
};
void staged_flow(AlgoCtx& c, const char* src, size_t bytes, const std::vector<int>& readers,
                 const std::vector<StagedIn>& in, bool stream);
// The staged algorithms' readers write with streaming stores from this many bytes of output.
inline constexpr size_t kStagedStreamFrom = size_t{2} << 20;
void broadcast_binomial(AlgoCtx& c);
void broadcast_direct(AlgoCtx& c);
// One host whose ranks outnumber its CPUs, from kStagedBroadcastFrom: the root copies its buffer once
// into its stage, and every receiver copies it out (staged_flow).
void broadcast_staged(AlgoCtx& c);
inline constexpr size_t kStagedBroadcastFrom = size_t{32} << 10;
void broadcast_flat(AlgoCtx& c);
// Flat broadcast of buf (bytes) over `group` from member `root`: the root sends to everyone at once.
void broadcast_flat_over(AlgoCtx& c, const std::vector<int>& group, int root, void* buf, size_t bytes);
void broadcast_hierarchical(AlgoCtx& c);
// Binomial broadcast of buf (bytes) over `group` from member `root` (an index into group).
void broadcast_binomial_over(AlgoCtx& c, const std::vector<int>& group, int root, void* buf, size_t bytes);
void reduce_binomial(AlgoCtx& c);
void reduce_hierarchical(AlgoCtx& c);
// Binomial reduce over `group` to member `root` (an index into group): acc holds this rank's
// contribution on entry and, at root, the reduction of the group's on return (elsewhere it is
// clobbered). reduce op only (no avg division); no scratch.
void reduce_binomial_over(AlgoCtx& c, const std::vector<int>& group, int root, char* acc);
void allgather_ring(AlgoCtx& c);
// allgather_ring with its blocks sent by `route` (Engine::send).
void allgather_ring_routed(AlgoCtx& c, Route route);
// allgather's first step: this rank's block copied to its place in the result (unless it is there
// already: in place). Returns the result buffer.
char* allgather_place_own_block(const AlgoCtx& c);
void allgather_flat(AlgoCtx& c);
void allgather_direct(AlgoCtx& c);
// One host whose ranks outnumber its CPUs, from kStagedAllgatherFrom bytes in all: every rank copies its
// block once into its stage, and every other copies it out (staged_flow).
void allgather_staged(AlgoCtx& c);
inline constexpr size_t kStagedAllgatherFrom = size_t{16} << 10;
// The smallest block the choice gives to allgather_direct and reduce_scatter_direct (one host, single
// copy).
inline constexpr size_t kDirectBlocksFrom = size_t{32} << 10;
void reduce_scatter_ring(AlgoCtx& c);
void reduce_scatter_direct(AlgoCtx& c);
void gather_flat(AlgoCtx& c);
void scatter_flat(AlgoCtx& c);
void alltoall_pairwise(AlgoCtx& c);
void barrier_dissemination(AlgoCtx& c);

// The ranks of this rank's host (`local`, in rank order, leader first) and one leader per host
// (`leaders`, in host order). A host's leader is `prefer` when it is on that host, else its lowest rank.
struct HostGroups {
  std::vector<int> local;
  std::vector<int> leaders;
  int leader() const { return local.front(); }
};
HostGroups host_groups(const AlgoCtx& c, int prefer = -1);
inline std::vector<int> all_ranks(const AlgoCtx& c) {
  std::vector<int> all(static_cast<size_t>(c.size));
  for (int i = 0; i < c.size; ++i) all[static_cast<size_t>(i)] = i;
  return all;
}
inline int index_in(const std::vector<int>& group, int rank) {
  return static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
}

// Every algorithm, for listing and for MPCOMM_ALGO.
const std::vector<Algorithm>& all_algorithms();
// The algorithm to run for op on `size` ranks.
const Algorithm& select_algorithm(const detail::Op& op, int size, const Topology& topo);

// Split `count` elements into `parts` nearly equal chunks; chunk i is [offset(i), offset(i+1)).
inline size_t chunk_offset(size_t count, int parts, int i) {
  size_t base = count / static_cast<size_t>(parts), extra = count % static_cast<size_t>(parts);
  size_t ii = static_cast<size_t>(i);
  return ii * base + std::min(ii, extra);
}
inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace mpcomm::native
