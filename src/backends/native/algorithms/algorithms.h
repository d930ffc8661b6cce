// Native collective algorithms. Each lives in its own file that starts with its steps, the bytes it
// moves and, when it needs more than frames, which host-local capabilities (host_local.h) it uses. They
// speak to the Engine: frames through Engine::send/recv, everything else through Engine::host(). Each
// does exactly what its name says; which one runs is the selection table's choice (selection/), or
// MPCOMM_ALGO's. An algorithm that cannot run in a shape says so in its needs (below): it is then never
// chosen, and a forced one fails on every rank before any traffic.
// What no algorithm does itself (NativeBackend::run does it once): one rank is a local copy
// (run_alone), a call of no elements moves nothing (but a barrier, and the uneven ops, whose ranks'
// counts differ), and avg divides the result after the sum, unless the algorithm divides its pieces as
// it writes them (Algorithm::divides_avg, with AlgoCtx::divide_avg).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/op.h"
#include "kernels/reduce.h"
#include "backends/native/engine/engine.h"

namespace mpcomm::native {

// The protocol choices inside algorithms that the selection table makes, per call, from the call's size
// and the communicator's facts (rows OP.ALGORITHM.ASPECT; choice_points() lists each with its choices):
// an algorithm asks for one instead of deciding by a size of its own. The value is the index of the
// choice in its ChoicePoint's list.
enum class Choice : uint8_t {
  allgather_direct_stores,       // our own block into our slot of the result: 0 plain, 1 streaming stores
  allgather_staged_stores,       // the readers' copies out of the stages: 0 plain, 1 streaming
  broadcast_staged_stores,       // the same, for the staged broadcast
  allreduce_staged_stores,       // the results into the output: 0 plain, 1 streaming
  broadcast_hierarchical_local,  // inside each host: 0 binomial, 1 flat (the host's ranks read the leader's buffer)
};
inline constexpr int kNumChoices = 5;
struct ChoicePoint {
  Choice id;
  OpKind op;
  const char* algorithm;  // the algorithm that asks
  const char* name;       // the table's subject
  std::vector<std::string> choices;
  const char* doc;
  // Per choice, what the flight recorder shows for a call that made it: "ALGORITHM+CHOICE".
  std::vector<std::string> ran;
};
// Every choice point, in Choice order (algorithms.cc).
const std::vector<ChoicePoint>& choice_points();
// Streaming stores write lines without reading them first and leave them out of the cache: for outputs
// too large to stay there.
inline constexpr int kPlainStores = 0, kStreamingStores = 1;

// What answers an algorithm's protocol choices: the communicator's selection.
class Choices {
 public:
  virtual int pick(Choice which, const detail::Op& op) const = 0;

 protected:
  ~Choices() = default;
};

struct AlgoCtx {
  Engine& e;
  const detail::Op& op;
  int rank;
  int size;
  std::vector<char>& scratch_buf;
  const Topology& topo;  // which host each rank is on
  const Choices& choices;
  // The table's choice for this call; the flight record names it with the algorithm ("direct+streaming").
  int pick(Choice which) const {
    const int k = choices.pick(which, op);
    op.algorithm = choice_points()[static_cast<size_t>(which)].ran[static_cast<size_t>(k)].c_str();
    return k;
  }
  // For algorithms that divide avg's sums themselves (Algorithm::divides_avg): divides `count` elements
  // at p by the group's size when the op is avg, else nothing.
  void divide_avg(void* p, size_t count) const {
    if (op.redop == ReduceOp::avg) divide_by(p, count, op.dtype, size);
  }
  // dst[i] = the reduction of srcs[0..nsrc)[i], avg divided: reduce_into and divide_avg, or for a
  // reproducible sum (Selection::reproducible) the exact sum of the values, rounded once.
  void reduce_piece(void* dst, const void* const* srcs, int nsrc, size_t count) const;
  // At least n bytes of scratch, reused across calls.
  char* scratch(size_t n) {
    if (scratch_buf.size() < n) scratch_buf.resize(n);
    return scratch_buf.data();
  }
  size_t elem() const { return dtype_size(op.dtype); }
  // The host-local capabilities; only for algorithms that declare a need of them (the selection checks
  // the needs first), else Internal.
  HostLocal& host() const;
};

using AlgoFn = void (*)(AlgoCtx&);

// What an algorithm needs besides frames, checked before it runs (cannot_run()).
enum Need : unsigned {
  kNeedsNothing = 0,
  kNeedsSingleCopy = 1,     // every rank on this host, each reading and writing the others' memory
  kNeedsSharedMemory = 2,   // every rank on this host: the board and the stages
  kNeedsTwoRanks = 4,       // exactly 2 ranks
  kNeedsEvenHosts = 8,      // every host holds as many ranks
  kNeedsBoardSize = 16,     // at most HostLocal::kBoardBytes per rank
};

struct Algorithm {
  OpKind kind;
  const char* name;
  AlgoFn fn;
  unsigned needs = kNeedsNothing;
  // avg: the algorithm divides the sums as it writes them (one pass less over a large result); else
  // NativeBackend::run divides the result once the algorithm is done (divide_avg_result).
  bool divides_avg = false;
};

void allreduce_flat(AlgoCtx& c);
void allreduce_ring(AlgoCtx& c);
void allreduce_direct(AlgoCtx& c);
// Results of the arrival allreduce larger than this are reduced in chunks of it, claimed by every rank that
// waits; smaller ones by the last rank to arrive alone.
inline constexpr size_t kArrivalChunkBytes = size_t{4} << 10;
// One host whose ranks outnumber its CPUs, large: every block reduced by its owner from pieces the others
// leave in their stages, the results left in the owner's stage for the others (allreduce_staged.cc).
void allreduce_staged(AlgoCtx& c);
// Two ranks on one host: pieces through the shared-memory ring, results left in the owner's stage for
// the other rank to copy, outputs written with streaming stores.
void allreduce_two_copy(AlgoCtx& c);
// Every rank leaves its input on the host's board (shared memory); once all are there the result is
// reduced, by the last to arrive alone up to 4 KiB, in chunks by every waiting rank above.
void allreduce_arrival(AlgoCtx& c);
// Every rank leaves its input on the board (up to 32 bytes in its small slot, with its tag) and reduces
// every input itself, in rank order: one cache line from each peer, no rank waiting for another's result.
void allreduce_board(AlgoCtx& c);
// The board's meeting (allreduce_board.cc): leaves `bytes` of input (with the op's tag) on the board and
// returns once every rank of the op has left its own, all fingerprints checked. Then, until this rank's
// next-but-one op, board_input_of(c, r, bytes) is rank r's input.
void board_meet(AlgoCtx& c, const void* input, size_t bytes);
const void* board_input_of(AlgoCtx& c, int rank, size_t bytes);
// Marks this op's reading of the board finished (HostLocal::board_done): every algorithm that wrote or
// read the board calls it once it is done with it.
void board_finished(AlgoCtx& c);
// Fails the op with a Mismatch naming both calls unless rank r's fingerprint `theirs` is ours (`fp`).
void expect_same_call(AlgoCtx& c, int r, const detail::Fingerprint& theirs, const detail::Fingerprint& fp);
// The same for what rank r's board tag holds: its fingerprint under our stamp, or (it runs another op)
// under whatever stamp it holds now, which shows that op.
void check_board_tag(AlgoCtx& c, int r, uint64_t stamp, const detail::Fingerprint& fp);
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
// The ring allreduce with its chunks through the shared-memory rings between local ranks, never by
// single copy (allreduce_ring.cc).
void allreduce_ring_shm(AlgoCtx& c);
// The direct algorithms' handshake (direct_handshake.cc). direct_exchange: sends `mine` to every rank
// in `peers` and returns what each sent us, indexed by rank (ours at our rank). direct_done: tells
// every rank in `peers` that we are done with its buffers and waits until each has said the same.
struct DirectDesc {
  uint64_t in = 0, out = 0;  // the rank's buffers (addresses in its process)
};
std::vector<DirectDesc> direct_exchange(AlgoCtx& c, const std::vector<int>& peers, const DirectDesc& mine);
// The other ranks, r+1, r+2, ..., in that order (each starts on a different one).
std::vector<int> others_of(const AlgoCtx& c);
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
// A stage's words (StageWord) for the op of stamp `stamp` (1 + its sequence number): the op's mark above
// a count of pieces, so that a word another op left counts as none.
inline constexpr uint64_t kStageCountMask = (uint64_t{1} << kStagePieceBits) - 1;
struct StageCount {
  uint64_t mark;
  explicit StageCount(uint64_t stamp) : mark(stamp & (~uint64_t{0} >> kStagePieceBits)) {}
  size_t operator()(const StageWord* w) const {
    const uint64_t v = w->v.load(std::memory_order_acquire);
    return (v >> kStagePieceBits) == mark ? static_cast<size_t>(v & kStageCountMask) : size_t{0};
  }
  // What a word that counts k pieces holds.
  uint64_t word(size_t k) const { return mark << kStagePieceBits | k; }
};
void broadcast_binomial(AlgoCtx& c);
void broadcast_direct(AlgoCtx& c);
// The root copies its buffer once into its stage, and every receiver copies it out (staged_flow).
void broadcast_staged(AlgoCtx& c);
// One host, every rank with a CPU, small: every rank meets on the board (board_meet), the root leaving
// its buffer there, and every receiver copies it out.
void broadcast_board(AlgoCtx& c);
// One host, small: the root leaves its buffer on the board and returns; every receiver copies it off.
void broadcast_eager(AlgoCtx& c);
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
// The ring allgather with its blocks through the shared-memory rings between local ranks, never by
// single copy.
void allgather_ring_shm(AlgoCtx& c);
// allgather's first step: this rank's block copied to its place in the result (unless it is there
// already: in place). Returns the result buffer.
char* allgather_place_own_block(const AlgoCtx& c);
void allgather_flat(AlgoCtx& c);
void allgather_direct(AlgoCtx& c);
// Every rank copies its block once into its stage, and every other copies it out (staged_flow).
void allgather_staged(AlgoCtx& c);
void reduce_scatter_ring(AlgoCtx& c);
void reduce_scatter_direct(AlgoCtx& c);
void gather_flat(AlgoCtx& c);
void scatter_flat(AlgoCtx& c);
void alltoall_pairwise(AlgoCtx& c);
void alltoallv_pairwise(AlgoCtx& c);
void allgatherv_ring(AlgoCtx& c);
void allgatherv_flat(AlgoCtx& c);
// Where rank q's block of allgatherv's result is (the result's start for an empty block, whose
// displacement may point anywhere).
char* allgatherv_block(const AlgoCtx& c, int q);
// allgatherv's first step: this rank's block copied into its place (unless in place).
void allgatherv_place_own_block(const AlgoCtx& c);
void barrier_dissemination(AlgoCtx& c);
void barrier_linear(AlgoCtx& c);
// One host, every rank with a CPU: every rank leaves its tag on the board and waits for every other's.
void barrier_board(AlgoCtx& c);

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

// Every algorithm, for listing, for the selection tables and for MPCOMM_ALGO (algorithms.cc).
const std::vector<Algorithm>& all_algorithms();
// The algorithms of one op, in all_algorithms() order.
std::vector<std::string> algorithm_names(OpKind kind);
// The algorithm of `kind` called `name`, or null.
const Algorithm* find_algorithm(OpKind kind, std::string_view name);
// Why `a` cannot run for c.op on this communicator (null: it can). The same on every rank: it depends
// only on facts all ranks share (ranks, hosts, single copy agreed at creation, the op's size).
const char* cannot_run(const Algorithm& a, const AlgoCtx& c);
// The local part of a collective on 1 rank: recv = send where the op has both (avg divides by 1).
void run_alone(const AlgoCtx& c);
// avg: the result divided by the group's size, on the ranks that have one (reduce: the root).
void divide_avg_result(const AlgoCtx& c);

// Split `count` elements into `parts` nearly equal chunks; chunk i is [offset(i), offset(i+1)).
inline size_t chunk_offset(size_t count, int parts, int i) {
  size_t base = count / static_cast<size_t>(parts), extra = count % static_cast<size_t>(parts);
  size_t ii = static_cast<size_t>(i);
  return ii * base + std::min(ii, extra);
}
inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace mpcomm::native
