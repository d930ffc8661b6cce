// Argument checks (argument_checks.h): what every backend is spared, done once at the call.
#include "core/argument_checks.h"

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"

namespace mpcomm::detail {

namespace {

[[noreturn]] void bad(const Op& op, const Backend& b, const std::string& why) {
  throw InvalidArgument("mpcomm: " + b.describe(op) + ": " + why);
}

bool overlap(const char* a, size_t an, const char* b, size_t bn) { return an > 0 && bn > 0 && a < b + bn && b < a + an; }

// One non-empty block of an uneven op: bytes [lo, hi) of the address space, and whose block it is.
struct Block {
  uintptr_t lo, hi;
  size_t rank;
};

std::vector<Block> blocks_of(const void* base, std::span<const size_t> counts, std::span<const size_t> displs, size_t es) {
  std::vector<Block> out;
  const auto b = reinterpret_cast<uintptr_t>(base);
  for (size_t p = 0; p < counts.size(); ++p)
    if (counts[p] > 0) out.push_back({b + displs[p] * es, b + (displs[p] + counts[p]) * es, p});
  std::sort(out.begin(), out.end(), [](const Block& x, const Block& y) { return x.lo < y.lo; });
  return out;
}

// The first pair of blocks, one of each sorted list, that share a byte (null when none do).
std::pair<const Block*, const Block*> first_overlap(const std::vector<Block>& a, const std::vector<Block>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].lo < b[j].hi && b[j].lo < a[i].hi) return {&a[i], &b[j]};
    if (a[i].hi <= b[j].hi)
      ++i;
    else
      ++j;
  }
  return {nullptr, nullptr};
}

std::string elements_text(const Block& x, uintptr_t base, size_t es) {
  return "[" + std::to_string((x.lo - base) / es) + ", " + std::to_string((x.hi - base) / es) + ")";
}

// alltoallv and allgatherv: one count and displacement per rank, every block inside the address space,
// buffers of non-empty blocks not null, what this rank sends itself (alltoallv) or the others
// (allgatherv) fitting its own receive block, and the receive blocks apart from each other and from the
// send region, but allgatherv's in-place layout.
BufferSpans check_uneven(const Op& op, const Backend& c) {
  if (c.options().device.kind == Device::cuda)
    device::require_cuda(c.describe(op) + " on " + to_string(c.options().device));
  const VCounts& v = *op.v;
  const bool a2a = op.kind == OpKind::alltoallv;
  const size_t n = static_cast<size_t>(c.size()), me = static_cast<size_t>(c.rank()), es = dtype_size(op.dtype);
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max()) / es;  // elements
  auto at = [](const char* name, size_t p) { return std::string(name) + "[" + std::to_string(p) + "]"; };
  auto one_per_rank = [&](std::span<const size_t> s, const char* name) {
    if (s.size() != n)
      bad(op, c, std::string(name) + " has " + std::to_string(s.size()) + " entries, expected one per rank (" +
                     std::to_string(n) + ")");
  };
  auto inside = [&](std::span<const size_t> counts, std::span<const size_t> displs, const char* cn, const char* dn) {
    for (size_t p = 0; p < n; ++p)
      if (counts[p] > limit || displs[p] > limit - counts[p])
        bad(op, c, at(dn, p) + " " + std::to_string(displs[p]) + " + " + at(cn, p) + " " + std::to_string(counts[p]) +
                       " elements × " + std::to_string(es) + " bytes overflows the address space");
  };
  if (a2a) {
    one_per_rank(v.send_counts, "send_counts");
    one_per_rank(v.send_displs, "send_displs");
  }
  one_per_rank(v.recv_counts, "recv_counts");
  one_per_rank(v.recv_displs, "recv_displs");
  if (a2a) inside(v.send_counts, v.send_displs, "send_counts", "send_displs");
  inside(v.recv_counts, v.recv_displs, "recv_counts", "recv_displs");
  if (op.count > limit)
    bad(op, c, (a2a ? "the send counts add up to " : "send_count ") + std::to_string(op.count) + " elements × " +
                   std::to_string(es) + " bytes, which overflows the address space");
  if (a2a && v.send_counts[me] != v.recv_counts[me])
    bad(op, c, at("send_counts", me) + " is " + std::to_string(v.send_counts[me]) + " but " + at("recv_counts", me) +
                   " is " + std::to_string(v.recv_counts[me]) + ": what this rank sends itself must fill its own block");
  if (!a2a && v.recv_counts[me] != op.count)
    bad(op, c, "send_count is " + std::to_string(op.count) + " but " + at("recv_counts", me) + " (this rank's block) is " +
                   std::to_string(v.recv_counts[me]));
  if (op.count > 0 && op.send == nullptr)
    bad(op, c, "send buffer is null but " + std::to_string(op.count) + " elements go out");
  const std::vector<Block> recv = blocks_of(op.recv, v.recv_counts, v.recv_displs, es);
  if (!recv.empty() && op.recv == nullptr)
    bad(op, c, "recv buffer is null but " + at("recv_counts", recv.front().rank) + " is " +
                   std::to_string(v.recv_counts[recv.front().rank]));

  // Receive blocks apart (sorted: only neighbours can share a byte), and apart from the send region.
  const auto rbase = reinterpret_cast<uintptr_t>(op.recv);
  for (size_t i = 1; i < recv.size(); ++i)
    if (recv[i].lo < recv[i - 1].hi)
      bad(op, c, "the receive blocks of ranks " + std::to_string(recv[i - 1].rank) + " and " + std::to_string(recv[i].rank) +
                     " overlap (elements " + elements_text(recv[i - 1], rbase, es) + " and " +
                     elements_text(recv[i], rbase, es) + " of recv)");
  const auto sbase = reinterpret_cast<uintptr_t>(op.send);
  if (a2a) {
    const std::vector<Block> send = blocks_of(op.send, v.send_counts, v.send_displs, es);
    if (auto [s, r] = first_overlap(send, recv); s != nullptr)
      bad(op, c, "the send block for rank " + std::to_string(s->rank) + " (elements " + elements_text(*s, sbase, es) +
                     " of send) overlaps the receive block of rank " + std::to_string(r->rank) + " (elements " +
                     elements_text(*r, rbase, es) + " of recv); alltoallv has no in-place form");
  } else if (op.count > 0) {
    const std::vector<Block> send = {{sbase, sbase + op.count * es, me}};
    const bool in_place = op.send == static_cast<const char*>(op.recv) + v.recv_displs[me] * es;
    if (auto [s, r] = first_overlap(send, recv); s != nullptr && !in_place)
      bad(op, c, "the send buffer overlaps the receive block of rank " + std::to_string(r->rank) + " (elements " +
                     elements_text(*r, rbase, es) + " of recv) but is not the in-place layout (send == recv + " +
                     at("recv_displs", me) + ")");
  }
  return buffer_spans(op, c.rank(), c.size());
}

}  // namespace

BufferSpans check_arguments(const Op& op, const Backend& c) {
  if (static_cast<unsigned>(op.dtype) >= kNumDataTypes)
    bad(op, c, "unknown data type value " + std::to_string(static_cast<int>(op.dtype)));
  if (op.v != nullptr) return check_uneven(op, c);
  if (op.reduces() && static_cast<unsigned>(op.redop) >= kNumReduceOps)
    bad(op, c, "unknown reduce op value " + std::to_string(static_cast<int>(op.redop)));
  if (op.reduces() && is_bitwise(op.redop) && is_floating(op.dtype))
    bad(op, c, std::string(to_string(op.redop)) + " needs an integer data type (int8, uint8, int32, int64), not " +
                   std::string(to_string(op.dtype)));
  if (op.rooted() && (op.root < 0 || op.root >= c.size()))
    bad(op, c, "root " + std::to_string(op.root) + " is out of range [0, " + std::to_string(c.size()) + ")");
  if (op.kind == OpKind::recv && op.peer == kAnySource) {
    if (!c.receives_from_any_source())
      bad(op, c, "the " + std::string(c.name()) + " backend cannot receive from any source: name the sender");
    if (c.size() == 1) bad(op, c, "a receive from any source needs another rank to send");
  } else if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    if (op.peer < 0 || op.peer >= c.size())
      bad(op, c, "peer " + std::to_string(op.peer) + " is out of range [0, " + std::to_string(c.size()) + ")");
    if (op.peer == c.rank()) bad(op, c, "sending to or receiving from oneself is not supported");
  }
  if ((op.kind == OpKind::send || op.kind == OpKind::recv) && op.tag < 0)
    bad(op, c, "tag " + std::to_string(op.tag) + " is negative");
  if (c.options().device.kind == Device::cuda)
    device::require_cuda(c.describe(op) + " on " + to_string(c.options().device));

  // Sizes: count × element size × (ranks, for the per-rank collectives) must fit.
  const size_t es = dtype_size(op.dtype);
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
  size_t blocks = 1;
  switch (op.kind) {
    case OpKind::allgather:
    case OpKind::reduce_scatter:
    case OpKind::gather:
    case OpKind::scatter:
    case OpKind::alltoall: blocks = static_cast<size_t>(c.size()); break;
    default: break;
  }
  if (op.count > limit / es / blocks)
    bad(op, c, "count " + std::to_string(op.count) + " × " + std::to_string(es) + " bytes × " +
                   std::to_string(blocks) + " overflows the address space");
  const size_t one = op.count * es;

  // Which buffers matter on this rank, and how big they are.
  const BufferSpans spans = buffer_spans(op, c.rank(), c.size());
  if (spans.send_n > 0 && op.send == nullptr) bad(op, c, "send buffer is null but count is " + std::to_string(op.count));
  if (spans.recv_n > 0 && op.recv == nullptr) bad(op, c, "recv buffer is null but count is " + std::to_string(op.count));

  // Overlapping buffers must be exactly the documented in-place layout.
  const char* sp = static_cast<const char*>(op.send);
  const char* rp = static_cast<const char*>(op.recv);
  if (!overlap(sp, spans.send_n, rp, spans.recv_n)) return spans;
  bool in_place = false;
  switch (op.kind) {
    case OpKind::allreduce:
    case OpKind::reduce:
    case OpKind::alltoall: in_place = sp == rp; break;
    case OpKind::allgather: in_place = sp == rp + static_cast<size_t>(c.rank()) * one; break;
    case OpKind::reduce_scatter: in_place = rp == sp + static_cast<size_t>(c.rank()) * one; break;
    case OpKind::gather: in_place = sp == rp + static_cast<size_t>(op.root) * one; break;
    case OpKind::scatter: in_place = rp == sp + static_cast<size_t>(op.root) * one; break;
    default: break;
  }
  if (!in_place) bad(op, c, "send and recv buffers overlap but are not the in-place layout");
  return spans;
}

}  // namespace mpcomm::detail
