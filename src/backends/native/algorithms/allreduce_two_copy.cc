// allreduce, two-copy — for large buffers out of place, 2 ranks on one host, each with a CPU of its
// own. The bytes cross between the ranks through shared memory (copied in by one rank, out by the
// other), never by process_vm_readv/writev, whose page pinning costs as much as the copy; and every
// byte written into an output is a streaming store, which does not first read the output's line into
// the cache (both measured in docs/performance.md, "The ceiling: kernels and copies").
//
// Needs: shared memory (HostLocal: the two ranks' stages), exactly 2 ranks. It wins with the CPUs near
// each other and out of place; far apart, every byte below crosses from one CPU's cache to the other's,
// several times slower than near and slower than the direct allreduce, and in place its outputs are the
// lines just read (nothing to save): the selection table runs it only when the CPUs are near and no rank
// is in place (docs/performance.md, "Why runs differ"). In place it is as correct: piece k of our input
// is overwritten (D) only after the other rank's token for it, i.e. after all of it has left through the
// ring (A) and been reduced.
//   rank r owns chunk r of 2, cut into pieces of kPiece bytes; step k = 0, 1, ...:
//   A. send piece k of the other rank's chunk of our input (through the shared-memory ring, never by
//      single copy);
//   B. reduce the other rank's piece k of our chunk with ours, as it arrives, into slot k mod D of our
//      stage (HostLocal::stage, D slots) and, streamed, into our output;
//   C. once piece k-1 is reduced, tell the other rank (a token frame): the result is in our slot;
//   D. on the other rank's token for its piece k-1, copy that piece from its slot into our output
//      (streamed) and acknowledge (an ack frame): the slot is free again. A slot is reused D pieces
//      later, after its ack; the call returns once every slot is acknowledged.
// Every frame goes through the engine (fingerprints, timeouts, peer failures). Both ranks post sends and
// receives in the same order (per step: piece, token, ack), as frames from one peer match in order;
// tokens and acks carry their piece and kind, and a wrong one fails the call. Only the chunk's owner
// reduces it, so both ranks get the same bits.
// Bytes per rank: B/2 of our input copied into the ring, B/2 of it and B/2 from the ring reduced, B
// written into our output (half reduced, half copied from the other's slot), no output line read
// first; what crosses between the ranks goes from cache to cache. Measured: docs/performance.md.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "mpcomm/error.h"
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

namespace {

constexpr size_t kPiece = size_t{128} << 10;
static_assert(HostLocal::kStageBytes >= 2 * kPiece, "a stage must hold two pieces");

// A token says "result piece k is in my slot", an ack "I copied your piece k out".
uint64_t token(size_t k) { return uint64_t{k} << 1; }
uint64_t ack(size_t k) { return uint64_t{k} << 1 | 1; }

void check_frame(uint64_t got, uint64_t want, int peer) {
  auto text = [](uint64_t v) { return std::string(v & 1 ? "an ack" : "a token") + " for piece " + std::to_string(v >> 1); };
  if (got != want)
    throw Internal("mpcomm: two-copy allreduce: rank " + std::to_string(peer) + " sent " + text(got) + " where " +
                   text(want) + " was due");
}

}  // namespace

void allreduce_two_copy(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  const int q = 1 - r;
  char* mine = c.host().stage(r);
  const char* theirs = c.host().stage(q);
  char* out = static_cast<char*>(op.recv);
  const char* in = static_cast<const char*>(op.send);

  const size_t es = c.elem(), piece = kPiece / es * es;
  const size_t slots = HostLocal::kStageBytes / piece;
  const bool avg = op.redop == ReduceOp::avg;
  const size_t m0 = chunk_offset(op.count, n, r) * es, m1 = chunk_offset(op.count, n, r + 1) * es;
  const size_t t0 = chunk_offset(op.count, n, q) * es, t1 = chunk_offset(op.count, n, q + 1) * es;
  const size_t k_in = (m1 - m0 + piece - 1) / piece, k_out = (t1 - t0 + piece - 1) / piece;
  auto len_in = [&](size_t k) { return std::min(piece, m1 - m0 - k * piece); };
  auto len_out = [&](size_t k) { return std::min(piece, t1 - t0 - k * piece); };
  auto slot = [&](size_t k) { return mine + (k % slots) * piece; };

  std::vector<Handle> reduced(k_in), acked(k_in), pending;
  std::vector<uint64_t> tok_out(k_in), ack_out(k_out), tok_in(k_out), ack_in(k_in);
  pending.reserve(2 * k_out + 2 * k_in);
  for (size_t k = 0; k <= std::max(k_in, k_out); ++k) {
    // A.
    if (k < k_out) pending.push_back(c.e.send(q, in + t0 + k * piece, len_out(k), Route::ring));
    // B. (avg: divided in C, then streamed)
    if (k < k_in) {
      if (k >= slots) {
        c.e.wait(acked[k - slots]);
        check_frame(ack_in[k - slots], ack(k - slots), q);
      }
      reduced[k] = c.e.recv_reduce(q, slot(k), in + m0 + k * piece, len_in(k), op.dtype, op.redop,
                                   avg ? nullptr : out + m0 + k * piece);
    }
    if (k == 0) continue;
    const size_t j = k - 1;
    // C.
    if (j < k_in) {
      c.e.wait(reduced[j]);
      if (avg) {
        c.divide_avg(slot(j), len_in(j) / es);
        copy_streamed(out + m0 + j * piece, slot(j), len_in(j));
      }
      tok_out[j] = token(j);
      pending.push_back(c.e.send(q, &tok_out[j], sizeof(uint64_t)));
    }
    // D.
    if (j < k_out) {
      c.e.wait(c.e.recv(q, &tok_in[j], sizeof(uint64_t)));
      check_frame(tok_in[j], token(j), q);
      copy_streamed(out + t0 + j * piece, theirs + (j % slots) * piece, len_out(j));
      ack_out[j] = ack(j);
      pending.push_back(c.e.send(q, &ack_out[j], sizeof(uint64_t)));
    }
    if (j < k_in) acked[j] = c.e.recv(q, &ack_in[j], sizeof(uint64_t));
  }
  // Our slots are free for the next call only once the other rank has copied every piece out.
  const size_t first_unchecked = k_in > slots ? k_in - slots : 0;
  for (size_t j = first_unchecked; j < k_in; ++j) pending.push_back(acked[j]);
  c.e.wait_all(pending);
  for (size_t j = first_unchecked; j < k_in; ++j) check_frame(ack_in[j], ack(j), q);
}

}  // namespace mpcomm::native
