// The native backend's built-in selection table (src/backends/native/selection/builtin_table.cc): its key
// choices, pinned by world shape, size, in place and placement, independent of the machine the test runs
// on.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "backends/native/algorithms/algorithms.h"
#include "backends/native/selection/selection.h"
#include "tuning/selection_table.h"

namespace mpcomm {
namespace {

using tuning::Placement;

const tuning::Table& builtin() {
  static const tuning::Table t =
      tuning::parse_table(native::builtin_table_text(), "the built-in table", "native", native::vocabulary());
  return t;
}

// `ranks` ranks with host of rank r = host_of[r] (empty: one host), `cpus` CPUs per host.
tuning::Shape shape(int ranks, long cpus, std::vector<int> host_of = {}, bool single_copy = true) {
  if (host_of.empty()) host_of.assign(static_cast<size_t>(ranks), 0);
  tuning::Shape s;
  s.ranks = ranks;
  s.hosts = *std::max_element(host_of.begin(), host_of.end()) + 1;
  std::vector<int> per(static_cast<size_t>(s.hosts), 0);
  for (int h : host_of) ++per[static_cast<size_t>(h)];
  s.per_host = *std::max_element(per.begin(), per.end());
  s.even_hosts = std::all_of(per.begin(), per.end(), [&](int k) { return k == per.front(); });
  s.cpus_per_rank = static_cast<double>(cpus) / s.per_host;
  s.single_copy = single_copy && s.hosts == 1 && ranks > 1;
  return s;
}

// What the table chooses for `bytes` per rank (uint8), with the per-call facts given.
std::string chosen(const tuning::Shape& s, OpKind op, size_t bytes, bool in_place = false, Placement now = Placement::near) {
  const tuning::ShapeRows rows({&builtin()}, s, native::vocabulary().size());
  const tuning::CallFacts facts{in_place, now};
  const auto* e = rows.find(native::subject_of(op), tuning::make_call(op, DataType::uint8, bytes, s.ranks), [&] { return facts; },
                            [](const tuning::Row&) { return true; });
  return e != nullptr ? e->row->choice : "(none)";
}

constexpr size_t K = 1024, M = 1024 * 1024;

TEST(BuiltinTable, EveryOpEndsWithARowForEveryCall) {
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpKind op = static_cast<OpKind>(k);
    if (native::algorithm_names(op).empty()) continue;
    const tuning::Row* last = nullptr;
    for (const auto& r : builtin().rows)
      if (r.subject == native::subject_of(op)) last = &r;
    ASSERT_NE(last, nullptr) << to_string(op);
    EXPECT_EQ(tuning::format_row(*last), std::string(to_string(op)) + " -> " + last->choice) << "a catch-all row";
    EXPECT_EQ(native::find_algorithm(op, last->choice)->needs, 0u) << "the catch-all runs everywhere";
  }
}

TEST(BuiltinTable, AllreduceOnOneHostWithACpuPerRank) {
  const auto two = shape(2, 2);
  // Up to 2 KiB every rank reads every input off the board; then one round of messages.
  EXPECT_EQ(chosen(two, OpKind::allreduce, 0), "board");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 8), "board");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 2 * K), "board");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 2 * K + 1), "flat");
  EXPECT_EQ(chosen(shape(8, 8), OpKind::allreduce, 8), "board");
  EXPECT_EQ(chosen(shape(2, 1), OpKind::allreduce, 8), "flat");  // crowded: no spinning on the board
  EXPECT_EQ(chosen(shape(2, 2, {0, 1}), OpKind::allreduce, 8), "flat");  // two hosts: no board
  EXPECT_EQ(chosen(two, OpKind::allreduce, 64 * K - 1), "flat");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 64 * K), "direct");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 8 * M - 1), "direct");
  // Two-copy from 8 MiB, out of place on every rank and with the CPUs near each other.
  EXPECT_EQ(chosen(two, OpKind::allreduce, 8 * M), "two_copy");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 64 * M), "two_copy");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 64 * M, /*in_place=*/true), "direct");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 64 * M, false, Placement::far), "direct");
  EXPECT_EQ(chosen(two, OpKind::allreduce, 64 * M, false, Placement::unknown), "direct");
  // Without single copy: no direct allreduce; two-copy needs none.
  const auto two_no_sc = shape(2, 2, {}, false);
  EXPECT_EQ(chosen(two_no_sc, OpKind::allreduce, 256 * K), "flat");
  EXPECT_EQ(chosen(two_no_sc, OpKind::allreduce, 256 * K + 1), "ring");
  EXPECT_EQ(chosen(two_no_sc, OpKind::allreduce, 64 * M), "two_copy");
  EXPECT_EQ(chosen(two_no_sc, OpKind::allreduce, 64 * M, true), "ring");
  // More ranks: direct from 64 KiB, flat while (n-1)·B <= 256 KiB.
  EXPECT_EQ(chosen(shape(3, 4), OpKind::allreduce, 64 * M), "direct");
  EXPECT_EQ(chosen(shape(8, 8), OpKind::allreduce, 37449), "flat");
  EXPECT_EQ(chosen(shape(8, 8), OpKind::allreduce, 37450), "ring");
  EXPECT_EQ(chosen(shape(8, 8), OpKind::allreduce, 64 * K), "direct");
  EXPECT_EQ(chosen(shape(1, 2), OpKind::allreduce, 64 * M), "ring");
}

TEST(BuiltinTable, AllreduceOnACrowdedHost) {
  // Two ranks per CPU: arrival up to 32 KiB; 4 ranks: recursive doubling to 24 KiB, then the ring
  // through the rings; through the stages from 256 KiB while the CPUs are far apart, from 8 MiB always.
  const auto four = shape(4, 2);
  EXPECT_EQ(chosen(four, OpKind::allreduce, 1), "arrival");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 32 * K), "arrival");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 32 * K + 1), "ring_shm");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 0), "recursive_doubling") << "nothing to reduce";
  EXPECT_EQ(chosen(shape(4, 3), OpKind::allreduce, 24 * K), "recursive_doubling");
  EXPECT_EQ(chosen(shape(4, 3), OpKind::allreduce, 24 * K + 1), "ring_shm");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 256 * K), "ring_shm");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 256 * K - 1, false, Placement::far), "ring_shm");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 256 * K, false, Placement::far), "staged");
  EXPECT_EQ(chosen(shape(4, 2, {}, false), OpKind::allreduce, 256 * K, false, Placement::far), "staged")
      << "no single copy needed";
  EXPECT_EQ(chosen(four, OpKind::allreduce, 8 * M - 1), "ring_shm");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 8 * M), "staged");
  EXPECT_EQ(chosen(four, OpKind::allreduce, 64 * M, true, Placement::unknown), "staged") << "in place too";
  EXPECT_EQ(chosen(shape(8, 2), OpKind::allreduce, 8 * M), "staged");
  // Fewer than two ranks per CPU: arrival up to 4 KiB.
  const auto three = shape(3, 2);
  EXPECT_EQ(chosen(three, OpKind::allreduce, 4 * K), "arrival");
  EXPECT_EQ(chosen(three, OpKind::allreduce, 4 * K + 1), "recursive_doubling");
  EXPECT_EQ(chosen(three, OpKind::allreduce, 128 * K), "recursive_doubling");
  EXPECT_EQ(chosen(three, OpKind::allreduce, 128 * K + 1), "ring_shm");
  EXPECT_EQ(chosen(shape(8, 2), OpKind::allreduce, 37449), "recursive_doubling");
  EXPECT_EQ(chosen(shape(8, 2), OpKind::allreduce, 37450), "ring_shm");
  // Two ranks on one CPU: no arrival (one rank waits for one other anyway).
  EXPECT_EQ(chosen(shape(2, 1), OpKind::allreduce, 256 * K), "flat");
  EXPECT_EQ(chosen(shape(2, 1), OpKind::allreduce, 256 * K + 1), "ring_shm");
  EXPECT_EQ(chosen(shape(2, 1), OpKind::allreduce, 8 * M), "staged");
}

TEST(BuiltinTable, AllreduceAcrossHosts) {
  EXPECT_EQ(chosen(shape(4, 2, {0, 0, 1, 1}), OpKind::allreduce, 1 * M), "hierarchical_sliced");
  EXPECT_EQ(chosen(shape(6, 2, {0, 1, 2, 0, 1, 2}), OpKind::allreduce, 1 * M), "hierarchical_sliced");
  EXPECT_EQ(chosen(shape(5, 2, {0, 1, 0, 1, 0}), OpKind::allreduce, 1 * M), "hierarchical") << "uneven hosts";
  EXPECT_EQ(chosen(shape(4, 2, {0, 0, 1, 1}), OpKind::allreduce, 1 * K), "hierarchical") << "small: fewest messages";
  EXPECT_EQ(chosen(shape(4, 2, {0, 1, 2, 3}), OpKind::allreduce, 1 * M), "ring") << "one rank per host";
  // Crowding is judged on one host only: with one rank per host, hosts may differ in CPUs.
  std::vector<int> own(64);
  for (int r = 0; r < 64; ++r) own[static_cast<size_t>(r)] = r;
  EXPECT_EQ(chosen(shape(64, 1, own), OpKind::allreduce, 1 * K), "flat");
  EXPECT_EQ(chosen(shape(64, 1), OpKind::allreduce, 1 * K), "arrival");
}

TEST(BuiltinTable, Broadcast) {
  EXPECT_EQ(chosen(shape(2, 2), OpKind::broadcast, 8), "board");
  EXPECT_EQ(chosen(shape(2, 2), OpKind::broadcast, 2 * K), "board");
  EXPECT_EQ(chosen(shape(2, 2), OpKind::broadcast, 2 * K + 1), "binomial");
  EXPECT_EQ(chosen(shape(4, 2), OpKind::broadcast, 8), "flat") << "crowded";
  EXPECT_EQ(chosen(shape(4, 2), OpKind::broadcast, 2 * K), "flat") << "crowded";
  EXPECT_EQ(chosen(shape(4, 2), OpKind::broadcast, 2 * K + 1), "binomial") << "crowded";
  EXPECT_EQ(chosen(shape(2, 2), OpKind::broadcast, 64 * K), "direct");
  EXPECT_EQ(chosen(shape(2, 2), OpKind::broadcast, 64 * K - 1), "binomial");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::broadcast, 64 * M), "direct");
  EXPECT_EQ(chosen(shape(2, 2, {}, false), OpKind::broadcast, 64 * M), "binomial");
  EXPECT_EQ(chosen(shape(4, 2), OpKind::broadcast, 32 * K), "staged") << "crowded";
  EXPECT_EQ(chosen(shape(4, 2), OpKind::broadcast, 32 * K - 1), "binomial");
  EXPECT_EQ(chosen(shape(4, 2, {}, false), OpKind::broadcast, 64 * M), "staged") << "no single copy needed";
  EXPECT_EQ(chosen(shape(4, 2, {0, 0, 1, 1}), OpKind::broadcast, 64 * M), "hierarchical");
  EXPECT_EQ(chosen(shape(4, 2, {0, 1, 2, 3}), OpKind::broadcast, 64 * M), "binomial");
}

TEST(BuiltinTable, ReduceGatherScatterAlltoallBarrier) {
  EXPECT_EQ(chosen(shape(4, 2, {0, 0, 1, 1}), OpKind::reduce, 1 * M), "hierarchical");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::reduce, 1 * M), "binomial");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::gather, 1 * M), "flat");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::scatter, 1 * M), "flat");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::alltoall, 1 * M), "pairwise");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::barrier, 0), "board");
  EXPECT_EQ(chosen(shape(4, 2), OpKind::barrier, 0), "linear") << "crowded";
  EXPECT_EQ(chosen(shape(2, 1), OpKind::barrier, 0), "dissemination") << "crowded, two ranks";
  EXPECT_EQ(chosen(shape(4, 2, {0, 0, 1, 1}), OpKind::barrier, 0), "dissemination");
}

TEST(BuiltinTable, AllgatherAndReduceScatter) {
  // From 32 KiB blocks on one host: direct; 2 ranks with blocks of 256 KiB-2 MiB and the CPUs near:
  // the ring through shared memory.
  const auto two = shape(2, 2);
  EXPECT_EQ(chosen(two, OpKind::allgather, 32 * K), "direct");
  EXPECT_EQ(chosen(two, OpKind::allgather, 32 * K - 1), "ring");
  EXPECT_EQ(chosen(two, OpKind::allgather, 256 * K), "ring_shm");
  EXPECT_EQ(chosen(two, OpKind::allgather, 2 * M), "ring_shm");
  EXPECT_EQ(chosen(two, OpKind::allgather, 2 * M + 1), "direct");
  EXPECT_EQ(chosen(two, OpKind::allgather, 1 * M, false, Placement::far), "direct");
  EXPECT_EQ(chosen(shape(4, 4), OpKind::allgather, 1 * M), "direct") << "the ring_shm rows are for 2 ranks";
  EXPECT_EQ(chosen(shape(4, 4, {0, 1, 2, 3}), OpKind::allgather, 64 * M), "ring");
  // A crowded host from 16 KiB in all: staged.
  EXPECT_EQ(chosen(shape(4, 2), OpKind::allgather, 4 * K), "staged");
  EXPECT_EQ(chosen(shape(4, 2), OpKind::allgather, 4 * K - 1), "ring");
  EXPECT_EQ(chosen(shape(5, 2), OpKind::allgather, 3277), "staged");
  EXPECT_EQ(chosen(shape(5, 2), OpKind::allgather, 3276), "ring");
  // Reduce-scatter: from 32 KiB blocks on one host, crowded or not.
  EXPECT_EQ(chosen(two, OpKind::reduce_scatter, 32 * K), "direct");
  EXPECT_EQ(chosen(two, OpKind::reduce_scatter, 32 * K - 1), "ring");
  EXPECT_EQ(chosen(shape(4, 2), OpKind::reduce_scatter, 32 * K), "direct");
  EXPECT_EQ(chosen(shape(4, 2, {0, 1, 2, 3}), OpKind::reduce_scatter, 64 * M), "ring");
  EXPECT_EQ(chosen(shape(2, 2, {}, false), OpKind::reduce_scatter, 64 * M), "ring");
}

// The message paths, as the engine gets them (Selection::paths: the send.path and collective.path rows
// made into the spans of sizes that go by single copy): sends from 64 KiB by single copy on a crowded
// host and with the CPUs far apart, through the ring with them near or on several hosts; a collective's
// messages by single copy from 256 KiB. A tuning file's rows come first, also where they cut a span in
// two.
TEST(BuiltinTable, MessagePaths) {
  using native::PathPolicy;
  auto paths = [](tuning::Shape s, const std::string& table = "") {
    Options o;
    std::string path;
    if (!table.empty()) {
      path = ::testing::TempDir() + "mpcomm-paths-table.txt";
      std::ofstream(path) << "mpcomm-tuning 1 backend=native\n" << table;
      o.params["MPCOMM_TUNING"] = path;
    }
    native::Selection sel(o);
    sel.fit(s);
    return sel.paths();
  };
  auto far = shape(2, 2), crowded = shape(4, 2), near = shape(2, 2);
  far.placement = Placement::far;
  near.placement = Placement::near;
  for (const auto& s : {far, crowded}) {
    const PathPolicy p = paths(s);
    EXPECT_FALSE(p.single_copy(PathPolicy::p2p, 64 * K - 1));
    EXPECT_TRUE(p.single_copy(PathPolicy::p2p, 64 * K));
    EXPECT_TRUE(p.single_copy(PathPolicy::p2p, SIZE_MAX));
  }
  for (const auto& s : {near, shape(4, 4, {0, 0, 1, 1})}) {
    const PathPolicy p = paths(s);
    EXPECT_FALSE(p.single_copy(PathPolicy::p2p, 64 * K));
    EXPECT_FALSE(p.single_copy(PathPolicy::p2p, 64 * M));
    EXPECT_TRUE(p.spans(PathPolicy::p2p).empty());
  }
  const PathPolicy p = paths(near);
  EXPECT_FALSE(p.single_copy(PathPolicy::collective, 256 * K - 1));
  EXPECT_TRUE(p.single_copy(PathPolicy::collective, 256 * K));
  const PathPolicy cut = paths(far, "send.path bytes=(1M,4M] -> ring\nsend.path bytes=8 -> single_copy\n");
  EXPECT_TRUE(cut.single_copy(PathPolicy::p2p, 8));
  EXPECT_FALSE(cut.single_copy(PathPolicy::p2p, 9));
  EXPECT_TRUE(cut.single_copy(PathPolicy::p2p, 1 * M));
  EXPECT_FALSE(cut.single_copy(PathPolicy::p2p, 1 * M + 1));
  EXPECT_FALSE(cut.single_copy(PathPolicy::p2p, 4 * M));
  EXPECT_TRUE(cut.single_copy(PathPolicy::p2p, 4 * M + 1));
  ASSERT_EQ(cut.spans(PathPolicy::p2p).size(), 3u);
}

// The algorithms' protocol choices: streaming stores into outputs too large for the cache, and the
// hierarchical broadcast flat inside each host from 256 KiB.
TEST(BuiltinTable, AlgorithmChoices) {
  native::Selection sel{Options{}};
  sel.fit(shape(4, 2));
  auto pick = [&](native::Choice c, OpKind op, size_t count) {
    detail::Op o;
    o.kind = op;
    o.count = count;
    o.dtype = DataType::uint8;
    return sel.pick(c, o);
  };
  EXPECT_EQ(pick(native::Choice::allgather_direct_stores, OpKind::allgather, 4 * M - 1), native::kPlainStores);
  EXPECT_EQ(pick(native::Choice::allgather_direct_stores, OpKind::allgather, 4 * M), native::kStreamingStores);
  EXPECT_EQ(pick(native::Choice::allgather_staged_stores, OpKind::allgather, M / 2 - 1), native::kPlainStores);  // 4 blocks
  EXPECT_EQ(pick(native::Choice::allgather_staged_stores, OpKind::allgather, M / 2), native::kStreamingStores);
  EXPECT_EQ(pick(native::Choice::broadcast_staged_stores, OpKind::broadcast, 2 * M), native::kStreamingStores);
  EXPECT_EQ(pick(native::Choice::allreduce_staged_stores, OpKind::allreduce, 2 * M - 1), native::kPlainStores);
  EXPECT_EQ(pick(native::Choice::broadcast_hierarchical_local, OpKind::broadcast, 256 * K - 1), 0);  // binomial
  EXPECT_EQ(pick(native::Choice::broadcast_hierarchical_local, OpKind::broadcast, 256 * K), 1);      // flat
}

}  // namespace
}  // namespace mpcomm
