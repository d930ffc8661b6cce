// The front door's reproducible sums (Options::reproducible, MPCOMM_REPRODUCIBLE): a sum or average of
// floating-point values is run as collectives of integers the backend adds exactly (exact.h), so the bits do
// not depend on which algorithm or backend runs them, on the host layout, the chunking or the order of the
// ranks. Every rank splits the op the same way, from facts they share (kind, count, dtype, size), and the
// pieces run back to back on the backend with the sequence numbers the op reserved:
//   allreduce, small (count · size · element ≤ kGatherBytes): allgather of the values; every rank encodes every
//     rank's values under their common top bins and adds the integers (one collective; exact.h: sum_values);
//   allreduce:       max all-reduce of the bins (1 byte per element), reduce-scatter of the int64 words, each
//                    rank rounds its block, allgather of the rounded blocks (the bytes of a ring all-reduce
//                    at 1/4 + 2 + 1 of the values' width in float32's case);
//   reduce_scatter:  max all-reduce of the bins, reduce-scatter of the words, rounded where they land;
//   reduce:          max all-reduce of the bins, reduce of the words to the root, rounded there.
// avg is the exact sum divided by the ranks, in double, rounded once.
// A backend that can read every rank's values itself sums them in one pass instead, with the same bits
// (Backend::runs_reproducible: native on one host, exact.h's sum_values); the op is then one backend op.
#include <algorithm>
#include <vector>

#include "core/front_door.h"
#include "core/reproducible/exact.h"
#include "mpcomm/error.h"

namespace mpcomm::detail {

namespace {

constexpr size_t kGatherBytes = 64 * 1024;

bool gathers(const Op& op, int size) {
  return op.kind == OpKind::allreduce && op.count * static_cast<size_t>(size) * dtype_size(op.dtype) <= kGatherBytes;
}

}  // namespace

bool FrontDoor::reproducible(const Op& op) const {
  return reproducible_ && is_floating(op.dtype) && (op.redop == ReduceOp::sum || op.redop == ReduceOp::avg) &&
         (op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter || op.kind == OpKind::reduce);
}

bool FrontDoor::backend_sums(const Op& op) const {
  return op.reproducible && !gathers(op, backend_->size()) && backend_->runs_reproducible(op);
}

uint64_t FrontDoor::sequence_numbers(const Op& op) const {
  if (!op.reproducible || backend_->size() == 1 || backend_sums(op)) return 1;
  if (op.kind != OpKind::allreduce) return 2;
  return gathers(op, backend_->size()) ? 1 : 3;
}

void FrontDoor::run_sub_op(Op sub, uint64_t seq) {
  sub.seq = seq;
  run_on_backend(sub, buffer_spans(sub, backend_->rank(), backend_->size()));
}

void FrontDoor::run_reproducible(const Op& op) {
  namespace r = repro;
  op.algorithm = "reproducible";
  const int P = backend_->size(), me = backend_->rank();
  const size_t np = static_cast<size_t>(P);
  const DataType dt = op.dtype;
  const size_t W = static_cast<size_t>(r::words(dt)), es = dtype_size(dt);
  if (backend_->memory_type(op.send) != MemoryType::host || backend_->memory_type(op.recv) != MemoryType::host)
    throw Unsupported("mpcomm: " + backend_->describe(op) +
                      ": reproducible sums read and write host memory; this buffer is device memory");
  if (np > r::kMaxValues)
    throw Unsupported("mpcomm: " + backend_->describe(op) + ": reproducible sums add at most " +
                      std::to_string(r::kMaxValues) + " ranks' values");
  const bool avg = op.redop == ReduceOp::avg;
  // n: the elements summed per rank (reduce_scatter: every rank's blocks)
  const size_t n = op.kind == OpKind::reduce_scatter ? op.count * np : op.count;
  const uint64_t s0 = op.seq;

  if (P == 1) {  // one rank's values, rounded as any sum of them would be
    const void* mine = op.send;
    r::sum_values(&mine, 1, n, dt, op.recv, avg, 1);
    return;
  }
  ReproducibleScratch& k = repro_;
  auto fit = [](auto& v, size_t size) {
    if (v.size() < size) v.resize(size);
    return v.data();
  };
  if (op.kind == OpKind::allreduce && gathers(op, P)) {
    char* all = fit(k.all, n * np * es);
    run_sub_op(Op{.kind = OpKind::allgather, .send = op.send, .recv = all, .count = n, .dtype = dt}, s0);
    std::vector<const void*>& srcs = k.sources;
    srcs.resize(np);
    for (size_t q = 0; q < np; ++q) srcs[q] = all + q * n * es;
    r::sum_values(srcs.data(), P, n, dt, op.recv, avg, np);
    return;
  }

  // the common top bins
  uint8_t* top = fit(k.top, n);
  r::bins_of(op.send, n, dt, top);
  run_sub_op(Op{.kind = OpKind::allreduce,
                .send = top,
                .recv = top,
                .count = n,
                .dtype = DataType::uint8,
                .redop = ReduceOp::max},
             s0);
  if (op.kind == OpKind::reduce) {
    int64_t* words = fit(k.words, n * W);
    int64_t* sum = fit(k.mine, n * W);
    r::encode(op.send, n, dt, top, words);
    run_sub_op(Op{.kind = OpKind::reduce,
                  .send = words,
                  .recv = sum,
                  .count = n * W,
                  .dtype = DataType::int64,
                  .redop = ReduceOp::sum,
                  .root = op.root},
               s0 + 1);
    if (me == op.root) r::decode(sum, n, dt, top, op.recv, avg, np);
    return;
  }
  // reduce_scatter's blocks, or allreduce's padded to a multiple of the ranks
  const size_t block = op.kind == OpKind::reduce_scatter ? op.count : (n + np - 1) / np;
  int64_t* words = fit(k.words, block * np * W);
  int64_t* mine = fit(k.mine, block * W);
  r::encode(op.send, n, dt, top, words);
  std::fill(words + n * W, words + block * np * W, 0);  // the padding
  run_sub_op(Op{.kind = OpKind::reduce_scatter,
                .send = words,
                .recv = mine,
                .count = block * W,
                .dtype = DataType::int64,
                .redop = ReduceOp::sum},
             s0 + 1);
  const size_t first = static_cast<size_t>(me) * block, have = first >= n ? 0 : std::min(block, n - first);
  if (op.kind == OpKind::reduce_scatter) {
    r::decode(mine, block, dt, top + first, op.recv, avg, np);
    return;
  }
  if (n == block * np) {  // no padding: rounded in place and gathered straight into recv
    char* recv = static_cast<char*>(op.recv);
    r::decode(mine, block, dt, top + first, recv + first * es, avg, np);
    run_sub_op(Op{.kind = OpKind::allgather, .send = recv + first * es, .recv = recv, .count = block, .dtype = dt},
               s0 + 2);
    return;
  }
  char* rounded = fit(k.rounded, block * es);
  std::fill(rounded + have * es, rounded + block * es, 0);
  r::decode(mine, have, dt, top + first, rounded, avg, np);
  char* all = fit(k.all, block * np * es);
  run_sub_op(Op{.kind = OpKind::allgather, .send = rounded, .recv = all, .count = block, .dtype = dt}, s0 + 2);
  std::copy_n(all, n * es, static_cast<char*>(op.recv));
}

}  // namespace mpcomm::detail
