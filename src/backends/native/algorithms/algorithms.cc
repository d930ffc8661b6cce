// The list of native algorithms with what each needs besides frames (algorithms.h), and the check the
// selection makes before one runs.
#include "backends/native/algorithms/algorithms.h"

#include <cstring>

#include "core/reproducible/exact.h"
#include "kernels/reduce.h"
#include "mpcomm/error.h"

namespace mpcomm::native {

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> algos = {
      {OpKind::allreduce, "flat", allreduce_flat},
      {OpKind::allreduce, "ring", allreduce_ring, kNeedsNothing, true},
      {OpKind::allreduce, "ring_shm", allreduce_ring_shm, kNeedsNothing, true},
      {OpKind::allreduce, "direct", allreduce_direct, kNeedsSingleCopy, true},
      {OpKind::allreduce, "two_copy", allreduce_two_copy, kNeedsSharedMemory | kNeedsTwoRanks, true},
      {OpKind::allreduce, "staged", allreduce_staged, kNeedsSharedMemory, true},
      {OpKind::allreduce, "arrival", allreduce_arrival, kNeedsSharedMemory | kNeedsBoardSize, true},
      {OpKind::allreduce, "board", allreduce_board, kNeedsSharedMemory | kNeedsBoardSize},
      {OpKind::allreduce, "recursive_doubling", allreduce_recursive_doubling},
      {OpKind::allreduce, "hierarchical", allreduce_hierarchical},
      {OpKind::allreduce, "hierarchical_sliced", allreduce_hierarchical_sliced, kNeedsEvenHosts, true},
      {OpKind::broadcast, "binomial", broadcast_binomial},
      {OpKind::broadcast, "flat", broadcast_flat},
      {OpKind::broadcast, "direct", broadcast_direct, kNeedsSingleCopy},
      {OpKind::broadcast, "hierarchical", broadcast_hierarchical},
      {OpKind::broadcast, "staged", broadcast_staged, kNeedsSharedMemory},
      {OpKind::broadcast, "board", broadcast_board, kNeedsSharedMemory | kNeedsBoardSize},
      {OpKind::broadcast, "eager", broadcast_eager, kNeedsSharedMemory | kNeedsBoardSize},
      {OpKind::reduce, "binomial", reduce_binomial},
      {OpKind::reduce, "hierarchical", reduce_hierarchical},
      {OpKind::allgather, "ring", allgather_ring},
      {OpKind::allgather, "ring_shm", allgather_ring_shm},
      {OpKind::allgather, "flat", allgather_flat},
      {OpKind::allgather, "direct", allgather_direct, kNeedsSingleCopy},
      {OpKind::allgather, "staged", allgather_staged, kNeedsSharedMemory},
      {OpKind::reduce_scatter, "ring", reduce_scatter_ring},
      {OpKind::reduce_scatter, "direct", reduce_scatter_direct, kNeedsSingleCopy, true},
      {OpKind::gather, "flat", gather_flat},
      {OpKind::scatter, "flat", scatter_flat},
      {OpKind::alltoall, "pairwise", alltoall_pairwise},
      {OpKind::alltoallv, "pairwise", alltoallv_pairwise},
      {OpKind::allgatherv, "ring", allgatherv_ring},
      {OpKind::allgatherv, "flat", allgatherv_flat},
      {OpKind::barrier, "dissemination", barrier_dissemination},
      {OpKind::barrier, "linear", barrier_linear},
      {OpKind::barrier, "board", barrier_board, kNeedsSharedMemory},
  };
  return algos;
}

const std::vector<ChoicePoint>& choice_points() {
  static const std::vector<ChoicePoint> points = [] {
    std::vector<ChoicePoint> out = {
        {Choice::allgather_direct_stores, OpKind::allgather, "direct", "allgather.direct.stores", {"plain", "streaming"},
         "how the direct allgather copies this rank's block into its slot of the result (out of place)", {}},
        {Choice::allgather_staged_stores, OpKind::allgather, "staged", "allgather.staged.stores", {"plain", "streaming"},
         "how the staged allgather's readers copy the blocks out of the stages", {}},
        {Choice::broadcast_staged_stores, OpKind::broadcast, "staged", "broadcast.staged.stores", {"plain", "streaming"},
         "how the staged broadcast's receivers copy the root's buffer out of its stage", {}},
        {Choice::allreduce_staged_stores, OpKind::allreduce, "staged", "allreduce.staged.stores", {"plain", "streaming"},
         "how the staged allreduce copies the results into the output", {}},
        {Choice::broadcast_hierarchical_local, OpKind::broadcast, "hierarchical", "broadcast.hierarchical.local",
         {"binomial", "flat"}, "how the hierarchical broadcast goes on inside each host, from the host's leader", {}},
    };
    for (ChoicePoint& p : out)
      for (const std::string& c : p.choices) p.ran.push_back(std::string(p.algorithm) + "+" + c);
    return out;
  }();
  return points;
}

std::vector<std::string> algorithm_names(OpKind kind) {
  std::vector<std::string> out;
  for (const auto& a : all_algorithms())
    if (a.kind == kind) out.emplace_back(a.name);
  return out;
}

const Algorithm* find_algorithm(OpKind kind, std::string_view name) {
  for (const auto& a : all_algorithms())
    if (a.kind == kind && name == a.name) return &a;
  return nullptr;
}

const char* cannot_run(const Algorithm& a, const AlgoCtx& c) {
  if (a.needs == kNeedsNothing || c.size == 1) return nullptr;
  HostLocal* h = c.e.host();
  if ((a.needs & (kNeedsSharedMemory | kNeedsSingleCopy)) != 0 && h == nullptr)
    return "it needs every rank on one host (their shared memory)";
  if ((a.needs & kNeedsSingleCopy) != 0 && !h->single_copy())
    return "it needs every rank to read and write the others' memory (single copy: MPCOMM_SINGLE_COPY=1, "
           "and a kernel that lets the ranks use process_vm_readv on each other)";
  if ((a.needs & kNeedsTwoRanks) != 0 && c.size != 2) return "it runs on exactly 2 ranks";
  if ((a.needs & kNeedsBoardSize) != 0 && c.op.bytes() > HostLocal::kBoardBytes)
    return "it holds at most 64 KiB per rank on the board";
  if ((a.needs & kNeedsEvenHosts) != 0) {
    std::vector<int> per_host(static_cast<size_t>(c.topo.num_hosts()), 0);
    for (int h : c.topo.host_of_rank) ++per_host[static_cast<size_t>(h)];
    if (!std::all_of(per_host.begin(), per_host.end(), [&](int k) { return k == per_host.front(); }))
      return "it needs every host to hold as many ranks";
  }
  return nullptr;
}

HostLocal& AlgoCtx::host() const {
  HostLocal* h = e.host();
  if (h == nullptr) throw Internal("mpcomm: " + detail::describe(op) + ": a native algorithm asked for host-local capabilities that this communicator lacks");
  return *h;
}

void expect_same_call(AlgoCtx& c, int r, const detail::Fingerprint& theirs, const detail::Fingerprint& fp) {
  if (!(theirs == fp))
    c.e.fail(ErrorCode::mismatch, "rank " + std::to_string(r) + " called " + detail::describe(theirs) +
                                      " but this rank called " + detail::describe(fp));
}

void check_board_tag(AlgoCtx& c, int r, uint64_t stamp, const detail::Fingerprint& fp) {
  detail::Fingerprint theirs{};
  const BoardTag* t = c.host().board_tag(r);
  if (!t->read(stamp, &theirs, sizeof theirs)) t->read(t->seq.load(std::memory_order_acquire), &theirs, sizeof theirs);
  expect_same_call(c, r, theirs, fp);
}

void AlgoCtx::reduce_piece(void* dst, const void* const* srcs, int nsrc, size_t count) const {
  if (op.reproducible)
    return detail::repro::sum_values(srcs, nsrc, count, op.dtype, dst, op.redop == ReduceOp::avg,
                                     static_cast<uint64_t>(size));
  reduce_into(dst, srcs, nsrc, count, op.dtype, op.redop);
  divide_avg(dst, count);
}

void divide_avg_result(const AlgoCtx& c) {
  const auto& op = c.op;
  if (op.redop != ReduceOp::avg || !op.reduces() || (op.kind == OpKind::reduce && c.rank != op.root)) return;
  divide_by(op.recv, op.count, op.dtype, c.size);
}

void run_alone(const AlgoCtx& c) {
  const auto& op = c.op;
  const size_t b = op.bytes();
  if (b == 0 || op.kind == OpKind::broadcast || op.kind == OpKind::barrier) return;
  if (op.send != op.recv) std::memcpy(op.recv, op.send, b);
}

}  // namespace mpcomm::native
