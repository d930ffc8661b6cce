// The Op helpers every layer uses (op.h): buffer spans, fingerprints, descriptions.
#include "core/op.h"

#include <algorithm>

namespace mpcomm::detail {

namespace {

// Bytes from the buffer's start to the end of its last non-empty block.
size_t extent(std::span<const size_t> counts, std::span<const size_t> displs, size_t es) {
  size_t end = 0;
  for (size_t p = 0; p < counts.size(); ++p)
    if (counts[p] > 0) end = std::max(end, (displs[p] + counts[p]) * es);
  return end;
}

}  // namespace

size_t recv_total(const Op& op) {
  size_t total = 0;
  if (op.v != nullptr)
    for (size_t c : op.v->recv_counts) total += c;
  return total;
}

BufferSpans buffer_spans(const Op& op, int rank, int size) {
  if (op.v != nullptr) {
    const size_t es = dtype_size(op.dtype);
    const VCounts& v = *op.v;
    return {op.kind == OpKind::alltoallv ? extent(v.send_counts, v.send_displs, es) : op.count * es,
            extent(v.recv_counts, v.recv_displs, es)};
  }
  const size_t one = op.bytes();
  size_t all = one;
  switch (op.kind) {
    case OpKind::allgather:
    case OpKind::reduce_scatter:
    case OpKind::gather:
    case OpKind::scatter:
    case OpKind::alltoall: all = one * static_cast<size_t>(size); break;
    default: break;
  }
  const bool is_root = op.rooted() && op.root == rank;
  switch (op.kind) {
    case OpKind::allreduce: return {one, one};
    case OpKind::broadcast: return {0, one};
    case OpKind::reduce: return {one, is_root ? one : 0};
    case OpKind::allgather: return {one, all};
    case OpKind::reduce_scatter: return {all, one};
    case OpKind::gather: return {one, is_root ? all : 0};
    case OpKind::scatter: return {is_root ? all : 0, one};
    case OpKind::alltoall: return {all, all};
    case OpKind::send: return {one, 0};
    case OpKind::recv: return {0, one};
    case OpKind::barrier:
    case OpKind::split:
    case OpKind::alltoallv:
    case OpKind::allgatherv: break;
  }
  return {0, 0};
}

Fingerprint fingerprint(const Op& op) {
  Fingerprint f;
  f.kind = static_cast<uint8_t>(op.kind);
  f.dtype = static_cast<uint8_t>(op.dtype);
  f.redop = op.reduces() ? static_cast<uint8_t>(op.redop) : 0xff;
  f.root = op.rooted() ? op.root : -1;
  f.reproducible = op.reproducible ? 1 : 0;
  f.seq = op.seq;
  f.count = op.kind == OpKind::alltoallv ? 0 : op.kind == OpKind::allgatherv ? recv_total(op) : op.count;
  return f;
}

std::string describe(const Fingerprint& f) {
  auto kind = static_cast<OpKind>(f.kind);
  std::string s = std::string(to_string(kind)) + " #" + std::to_string(f.seq);
  if (kind == OpKind::barrier) return s;
  const std::string dtype(to_string(static_cast<DataType>(f.dtype)));
  if (kind == OpKind::alltoallv) return s + " (" + dtype + ")";
  if (kind == OpKind::allgatherv) return s + " (total " + std::to_string(f.count) + ", " + dtype + ")";
  s += " (count " + std::to_string(f.count) + ", " + dtype;
  if (f.redop != 0xff) s += ", " + std::string(to_string(static_cast<ReduceOp>(f.redop)));
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  if (f.reproducible) s += ", reproducible";
  return s + ")";
}

std::string describe(const Op& op, int rank, int size, std::string_view backend) {
  std::string s;
  if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    s = std::string(to_string(op.kind)) + " #" + std::to_string(op.seq) + " (count " + std::to_string(op.count) + ", " +
        std::string(to_string(op.dtype)) + (op.kind == OpKind::send ? ", to rank " : ", from ") +
        (op.kind == OpKind::recv ? (op.peer == kAnySource ? "any rank" : "rank " + std::to_string(op.peer))
                                 : std::to_string(op.peer)) +
        ", tag " + std::to_string(op.tag) + ")";
  } else if (op.v != nullptr) {
    s = describe(fingerprint(op));
    s.insert(s.size() - 1, "; " + std::to_string(op.count) + " elements out, " + std::to_string(recv_total(op)) + " in");
  } else {
    s = describe(fingerprint(op));
  }
  return s + " on rank " + std::to_string(rank) + " of " + std::to_string(size) + " [" + std::string(backend) + "]";
}

}  // namespace mpcomm::detail
