// Which algorithm runs: flat exchange for small allreduces (one round of latency); for large ones on
// one host with single copy, while every rank has a CPU, the direct allreduce (every rank reduces its
// chunk from the others' buffers and writes it into theirs; two ranks from 8 MiB the two-copy one,
// through shared memory), else the ring (bandwidth-optimal);
// recursive doubling for small ones when ranks outnumber CPUs; for large broadcasts on one host the
// direct broadcast (receivers read from the root while the root writes into them), for large
// allgathers and reduce-scatters the direct ones (every rank writes its block straight into the others'
// results; every rank reduces its block straight out of the others' inputs); when ranks outnumber
// the CPUs of their one host, the staged broadcast and allgather (through shared memory); the hierarchical
// allreduce/broadcast/reduce across hosts (for large allreduces on hosts with equal rank counts,
// sliced: every rank carries part of the traffic).
// MPCOMM_ALGO forces a choice per op, e.g. MPCOMM_ALGO=allreduce=ring. Every rank must pick the same
// algorithm, so the choice depends only on the op, the world, the host layout and the environment.
#include <unistd.h>

#include <algorithm>
#include <string>

#include "core/params.h"
#include "mpcomm/error.h"
#include "native/algorithms/algorithms.h"

namespace mpcomm::native {

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> algos = {
      {OpKind::allreduce, "flat", allreduce_flat},
      {OpKind::allreduce, "ring", allreduce_ring},
      {OpKind::allreduce, "direct", allreduce_direct},
      {OpKind::allreduce, "two_copy", allreduce_two_copy},
      {OpKind::allreduce, "arrival", allreduce_arrival},
      {OpKind::allreduce, "recursive_doubling", allreduce_recursive_doubling},
      {OpKind::allreduce, "hierarchical", allreduce_hierarchical},
      {OpKind::allreduce, "hierarchical_sliced", allreduce_hierarchical_sliced},
      {OpKind::broadcast, "binomial", broadcast_binomial},
      {OpKind::broadcast, "flat", broadcast_flat},
      {OpKind::broadcast, "direct", broadcast_direct},
      {OpKind::broadcast, "hierarchical", broadcast_hierarchical},
      {OpKind::broadcast, "staged", broadcast_staged},
      {OpKind::reduce, "binomial", reduce_binomial},
      {OpKind::reduce, "hierarchical", reduce_hierarchical},
      {OpKind::allgather, "ring", allgather_ring},
      {OpKind::allgather, "flat", allgather_flat},
      {OpKind::allgather, "direct", allgather_direct},
      {OpKind::allgather, "staged", allgather_staged},
      {OpKind::reduce_scatter, "ring", reduce_scatter_ring},
      {OpKind::reduce_scatter, "direct", reduce_scatter_direct},
      {OpKind::gather, "flat", gather_flat},
      {OpKind::scatter, "flat", scatter_flat},
      {OpKind::alltoall, "pairwise", alltoall_pairwise},
      {OpKind::barrier, "dissemination", barrier_dissemination},
  };
  return algos;
}

long online_cpus() {
  static const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n;
}

static const Algorithm* find(OpKind kind, const std::string& name) {
  for (const auto& a : all_algorithms())
    if (a.kind == kind && name == a.name) return &a;
  return nullptr;
}

// MPCOMM_ALGO="op=alg,op=alg"; parsed once per process.
static const Algorithm* forced(OpKind kind) {
  static const std::vector<const Algorithm*> table = [] {
    std::vector<const Algorithm*> t(kNumOpKinds, nullptr);
    std::string spec = param_string("MPCOMM_ALGO");
    size_t pos = 0;
    while (pos < spec.size()) {
      size_t comma = spec.find(',', pos);
      std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? spec.size() : comma + 1;
      if (item.empty()) continue;
      size_t eq = item.find('=');
      bool ok = false;
      if (eq != std::string::npos) {
        for (int k = 0; k < kNumOpKinds && !ok; ++k) {
          if (item.substr(0, eq) != to_string(static_cast<OpKind>(k))) continue;
          if (const Algorithm* a = find(static_cast<OpKind>(k), item.substr(eq + 1))) {
            t[k] = a;
            ok = true;
          }
        }
      }
      if (!ok) throw InvalidArgument("mpcomm: MPCOMM_ALGO entry '" + item + "' names no known op=algorithm");
    }
    return t;
  }();
  return table[static_cast<size_t>(kind)];
}

static bool even_hosts(const Topology& topo) {
  std::vector<int> per_host(static_cast<size_t>(topo.num_hosts()), 0);
  for (int h : topo.host_of_rank) ++per_host[static_cast<size_t>(h)];
  return std::all_of(per_host.begin(), per_host.end(), [&](int k) { return k == per_host.front(); });
}

const Algorithm& select_algorithm(const detail::Op& op, int size, const Topology& topo) {
  if (const Algorithm* a = forced(op.kind)) return *a;
  // One host and large buffers: the ranks copy straight out of and into each other's buffers
  // (single copy; the direct algorithms).
  const bool direct = topo.num_hosts() <= 1 && size > 1 && single_copy_enabled();
  const bool crowded = size > online_cpus();
  // Broadcast: the receivers read most of the root's buffer and the root writes the rest into theirs.
  // Medians of 5 runs against binomial (2 ranks) and binomial/flat (4 ranks on 2 CPUs): 2 ranks 64 KiB
  // 8.6 -> 7.5 us, 128 KiB 14.6 -> 10.4 us, 1 MiB 114 -> 45 us, 16 MiB 5.1 -> 2.4 ms; 4 ranks 256 KiB
  // 110 -> 94 us, 4 MiB 2.5 -> 1.9 ms, but 128 KiB 20 -> 49 us: crowded, from the single-copy size.
  // Ranks outnumbering the CPUs of their one host: staged, through shared memory (every receiver copies
  // the root's buffer out of the root's stage; no single copy). 4 ranks on 2 CPUs, medians of 4-6
  // interleaved runs with mpi in the same runs, CPUs near: 32 KiB 10.4 us (binomial 9.3, mpi 17), 256
  // KiB 33 us (direct 50), 4 MiB 0.40 ms (direct 0.60, mpi 0.80), 32 MiB 4.3 ms (direct 9-11 ms, mpi
  // 13); far apart, where the binomial tree's rounds cross between the CPUs' caches: 64 KiB 21 us
  // (binomial 47, mpi 30), 128 KiB 23 us (binomial 100, mpi 38). Up to 16 KiB binomial wins either way.
  const bool one_crowded_host = topo.num_hosts() <= 1 && size > 1 && crowded;
  if (one_crowded_host && op.kind == OpKind::broadcast && op.bytes() >= kStagedBroadcastFrom)
    return *find(op.kind, "staged");
  if (direct && op.kind == OpKind::broadcast && op.bytes() >= (crowded ? single_copy_from() : size_t{64} << 10))
    return *find(op.kind, "direct");
  // Allgather, likewise: every rank's block through its stage. 4 ranks on 2 CPUs, medians, near (far):
  // 16 KiB 9.3 us (10.0) against the ring's 10.7 (16.6), 256 KiB 39 us (48) against direct's 70 (68),
  // 4 MiB 0.45 ms against 0.98 (mpi 1.0), 32 MiB 6.3 ms against 10.7 (mpi 13.7). At 4 KiB even.
  if (one_crowded_host && op.kind == OpKind::allgather && op.bytes() * static_cast<size_t>(size) >= kStagedAllgatherFrom)
    return *find(op.kind, "staged");
  // Allgather: every rank writes its block into every other's result, read once and written n times
  // out of the cache. Medians of 3 interleaved runs against ring (2 ranks) and ring/flat (4 ranks on
  // 2 CPUs), out of place, by total size: 2 ranks 64 KiB 8.2 -> 7.7 us, 512 KiB 67 -> 31 us, 4 MiB
  // 563 -> 452 us, 32 MiB 8.0 -> 7.3 ms; 4 ranks 128 KiB 59 -> 54 us, 512 KiB 165 -> 96 us, 4 MiB 1.37
  // -> 1.01 ms; but 4 ranks 64 KiB (16 KiB blocks) 31 -> 37 us: from 32 KiB blocks.
  if (direct && op.kind == OpKind::allgather && op.bytes() >= kDirectBlocksFrom) return *find(op.kind, "direct");
  // Reduce-scatter: rank r reduces block r straight out of the others' inputs (the ring first copies
  // all n blocks to scratch, then moves partials n-1 times). Medians of 3 interleaved runs against the
  // ring, out of place, by total size: 2 ranks 64 KiB 13.4 -> 8.9 us, 1 MiB 282 -> 109 us, 8 MiB 4.2 ->
  // 1.6 ms, 64 MiB 36 -> 17 ms; 4 ranks on 2 CPUs 256 KiB 189 -> 136 us, 4 MiB 5.0 -> 2.8 ms, 64 MiB
  // 86 -> 46 ms; but 4 ranks 64 KiB (16 KiB blocks) 53 -> 57 us: from 32 KiB blocks, as allgather.
  if (direct && op.kind == OpKind::reduce_scatter && op.bytes() >= kDirectBlocksFrom) return *find(op.kind, "direct");
  // Several hosts, some with more than one rank: one message per host over the slow links.
  const bool multi_host = topo.num_hosts() > 1 && topo.num_hosts() < size;
  if (multi_host && (op.kind == OpKind::broadcast || op.kind == OpKind::reduce))
    return *find(op.kind, "hierarchical");
  if (op.kind == OpKind::allreduce) {
    const bool small = op.bytes() * static_cast<size_t>(size > 1 ? size - 1 : 1) <= (256u << 10) ||
                       op.count < static_cast<size_t>(size);
    // Large, and every host has as many ranks: every rank carries a slice between the hosts.
    if (multi_host) return *find(OpKind::allreduce, !small && even_hosts(topo) ? "hierarchical_sliced" : "hierarchical");
    // Two ranks on one host, each with a CPU, from 8 MiB: two-copy (through shared memory, outputs
    // streamed; in place it runs direct). Out of place, medians of interleaved runs against direct
    // (4-6 runs): 4 MiB 0.83 -> 1.05 ms, 6 MiB 1.62 -> 1.48 ms, 8 MiB 2.87 -> 2.09 ms, 12 MiB 4.31 ->
    // 3.67 ms, 16 MiB 6.38 -> 4.79 ms, 32 MiB 12.2 -> 10.0 ms, 64 MiB 24.4 -> 19.5 ms (bfloat16 26.5 ->
    // 21.6 ms); in place unchanged.
    if (topo.num_hosts() <= 1 && size == 2 && !crowded && op.bytes() >= kTwoCopyFrom)
      return *find(OpKind::allreduce, "two_copy");
    // One host, every rank with a CPU of its own, single copy: from 64 KiB each rank reduces its chunk
    // straight out of the others' buffers and writes the result straight into theirs. 2 ranks, medians
    // of 5 runs against flat/ring: 64 KiB 18 -> 14 us, 256 KiB 50 -> 36 us, 1 MiB 249 -> 193 us, 64 MiB
    // in place 29 -> 21 ms. With ranks outnumbering CPUs it loses (4 ranks on 2, 4 MiB: 4.8 ms ring,
    // 12 ms direct): its n-1 reads per piece wait for CPUs the other ranks hold.
    if (direct && !crowded && op.bytes() >= (size_t{64} << 10) && op.count >= static_cast<size_t>(size))
      return *find(OpKind::allreduce, "direct");
    // Small: one round of n-1 messages when every rank has a CPU; log2(n) rounds of one message when
    // ranks outnumber CPUs (each message may cost the receiver a wake-up). There, with n a power of
    // two, the ring takes over sooner: each of its 2(n-1) steps moves B/n, while each of recursive
    // doubling's log2(n) rounds moves and reduces all of B. 4 ranks on 2 CPUs, medians, -n 200: 16 KiB
    // 29-33 us doubling vs 37 ring; 32 KiB 45-50 vs 34; 128 KiB 138-181 vs 86. 8 ranks: 16 KiB 73 vs
    // 172, 64 KiB 274 vs 240. So: doubling up to 8 KiB * 2(n-1) / log2(n) (4 ranks: 24 KiB).
    // Crowding is judged on one host only: with one rank per host, hosts may differ in CPUs, and every
    // rank must choose the same algorithm.
    // Small and crowded: the arrival allreduce (no rank waits for a particular other; once all inputs are
    // there, the last to arrive reduces them, above 4 KiB in chunks shared with every waiting rank). Medians of 3 interleaved runs against the choice before (recursive
    // doubling), 4 ranks on 2 CPUs, -n 200: 8 B 13.3 -> 6.5 us, 512 B 15.2 -> 7.5 us, 4 KiB 22.8 -> 13.0
    // us, 16 KiB 32.7 -> 29.4 us. With the result reduced in chunks by every waiting rank (5 runs, against
    // the ring, mpi in the same run): 16 KiB 19 vs 34 us (mpi 29), 32 KiB 27 vs 31 us (mpi 39), 64 KiB
    // 43 vs 46 us: up to 32 KiB. 8 ranks: 8 B 34 -> 14 us, 4 KiB 45 -> 28 us, 32 KiB 111 (doubling) ->
    // 46 us. But 3 ranks on 2 CPUs (one rank has a CPU of its own): 4 KiB 8.9 vs 9.2 us doubling, 16 KiB
    // 13.5 vs 10.1 us: only up to 4 KiB while ranks are fewer than twice the CPUs.
    if (size > 2 && topo.num_hosts() <= 1 && crowded) {
      const size_t upto = size >= 2 * online_cpus() ? kArrivalUpTo : kArrivalMildUpTo;
      if (op.bytes() > 0 && op.bytes() <= upto) return *find(OpKind::allreduce, "arrival");
      bool doubling = small;
      if ((size & (size - 1)) == 0) {
        int log2n = 0;
        while ((1 << log2n) < size) ++log2n;
        doubling = op.bytes() <= (size_t{8} << 10) * static_cast<size_t>(2 * (size - 1)) / static_cast<size_t>(log2n) &&
                   small;
        doubling = doubling || op.count < static_cast<size_t>(size);
      }
      return *find(OpKind::allreduce, doubling ? "recursive_doubling" : "ring");
    }
    return *find(OpKind::allreduce, small ? "flat" : "ring");
  }
  for (const auto& a : all_algorithms())
    if (a.kind == op.kind) return a;
  throw Internal("mpcomm: no native algorithm for " + std::string(to_string(op.kind)));
}

}  // namespace mpcomm::native
