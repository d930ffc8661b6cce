// TEMPORARY: proves that the built-in selection table (src/tuning/native_defaults.cc) chooses what the
// if-ladder of src/native/algorithms/select.cc and the second choices hidden in the algorithms ran,
// over a grid of ops, sizes, data types, world shapes, CPUs, single copy, in place and placement.
// It goes with the ladder, in the next commit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "native/algorithms/algorithms.h"
#include "native/engine.h"
#include "tuning/defaults.h"
#include "tuning/selection_table.h"

namespace mpcomm {
namespace {

constexpr size_t K = 1024;

// The ladder of select.cc as it was at d8dfd96, with the CPUs and single copy as parameters instead of
// sysconf() and the environment (checked against the real one below).
std::string old_ladder(OpKind kind, size_t bytes, size_t count, int size, int hosts, bool even, long cpus, bool sc) {
  const bool direct = hosts <= 1 && size > 1 && sc;
  const bool crowded = size > cpus;
  const bool one_crowded_host = hosts <= 1 && size > 1 && crowded;
  const size_t scf = sc ? 256 * K : SIZE_MAX;
  if (one_crowded_host && kind == OpKind::broadcast && bytes >= 32 * K) return "staged";
  if (direct && kind == OpKind::broadcast && bytes >= (crowded ? scf : size_t{64} << 10)) return "direct";
  if (one_crowded_host && kind == OpKind::allgather && bytes * static_cast<size_t>(size) >= 16 * K) return "staged";
  if (direct && kind == OpKind::allgather && bytes >= 32 * K) return "direct";
  if (direct && kind == OpKind::reduce_scatter && bytes >= 32 * K) return "direct";
  const bool multi_host = hosts > 1 && hosts < size;
  if (multi_host && (kind == OpKind::broadcast || kind == OpKind::reduce)) return "hierarchical";
  if (kind == OpKind::allreduce) {
    const bool small = bytes * static_cast<size_t>(size > 1 ? size - 1 : 1) <= (256u << 10) || count < static_cast<size_t>(size);
    if (multi_host) return !small && even ? "hierarchical_sliced" : "hierarchical";
    if (hosts <= 1 && size == 2 && !crowded && bytes >= (size_t{8} << 20)) return "two_copy";
    if (direct && !crowded && bytes >= (size_t{64} << 10) && count >= static_cast<size_t>(size)) return "direct";
    if (size > 2 && hosts <= 1 && crowded) {
      const size_t upto = size >= 2 * cpus ? 32 * K : 4 * K;
      if (bytes > 0 && bytes <= upto) return "arrival";
      bool doubling = small;
      if ((size & (size - 1)) == 0) {
        int log2n = 0;
        while ((1 << log2n) < size) ++log2n;
        doubling = bytes <= (size_t{8} << 10) * static_cast<size_t>(2 * (size - 1)) / static_cast<size_t>(log2n) && small;
        doubling = doubling || count < static_cast<size_t>(size);
      }
      return doubling ? "recursive_doubling" : "ring";
    }
    return small ? "flat" : "ring";
  }
  for (const auto& a : native::all_algorithms())
    if (a.kind == kind) return a.name;
  return "?";
}

// What then ran: the ladder's choice with the second choices the algorithms made themselves (read off
// their code at d8dfd96). `far`: cpus_far_apart's verdict; `in_place`: some rank in place.
std::string old_ran(OpKind kind, size_t bytes, size_t count, int size, int hosts, bool even, long cpus, bool sc,
                    bool in_place, bool far) {
  std::string a = old_ladder(kind, bytes, count, size, hosts, even, cpus, sc);
  const bool crowded_one_host = hosts <= 1 && size > cpus;
  const bool board = hosts <= 1 && size > 1;
  // allreduce_direct: the ring (by the usual route) for 1 rank, fewer elements than ranks, or a rank
  // that cannot reach another's memory.
  auto direct_allreduce = [&] { return size == 1 || count < static_cast<size_t>(size) || !sc ? std::string("ring") : std::string("direct"); };
  if (kind == OpKind::allreduce) {
    if (a == "two_copy") {
      if (size != 2 || count < 2 || !board || far || in_place) return direct_allreduce();
      return a;
    }
    if (a == "direct") return direct_allreduce();
    if (a == "ring") {
      if (!crowded_one_host) return "ring";
      // On a crowded host the ring's chunks go through the rings (ring_shm); from 256 KiB with the CPUs
      // far apart the direct allreduce, whose fallback without single copy is the ring by the usual
      // route: without single copy, the same as through the rings.
      if (bytes >= 256 * K && count >= static_cast<size_t>(size) && far) return sc ? direct_allreduce() : "ring_shm";
      return "ring_shm";
    }
    if (a == "arrival") return board && bytes > 0 && bytes <= 64 * K ? a : "flat";
  }
  if (kind == OpKind::allgather) {
    if (a == "staged" && (size == 1 || bytes == 0 || !board)) a = "direct";
    if (a == "direct" && size > 1) {
      if (size == 2 && bytes >= 256 * K && bytes <= 2048 * K && !far) return "ring_shm";
      if (!sc) return size == 2 || bytes < 128 * K ? "ring" : "flat";
    }
  }
  if (kind == OpKind::broadcast && a == "staged" && !board) return "direct";
  if (kind == OpKind::reduce_scatter && a == "direct" && (size == 1 || !sc)) return "ring";
  return a;
}

std::vector<std::string> names_with_ring_shm(OpKind op) {
  std::vector<std::string> out;
  for (const auto& a : native::all_algorithms())
    if (a.kind == op) out.push_back(a.name);
  if (op == OpKind::allreduce || op == OpKind::allgather) out.push_back("ring_shm");
  return out;
}

struct Layout {
  int hosts, per_host;
  bool even;
  std::vector<int> host_of_rank;
};

std::vector<Layout> layouts(int n) {
  std::vector<std::vector<int>> all;
  for (int h = 1; h <= std::min(n, 5); ++h) {
    std::vector<int> v(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) v[static_cast<size_t>(r)] = r * h / n;  // block placement
    all.push_back(v);
  }
  std::vector<int> own(static_cast<size_t>(n)), alternate(static_cast<size_t>(n)), lopsided(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    own[static_cast<size_t>(r)] = r;
    alternate[static_cast<size_t>(r)] = r % 2;
  }
  lopsided.back() = 1;
  all.push_back(own);
  if (n >= 3) {
    all.push_back(alternate);
    all.push_back(lopsided);
  }
  std::vector<Layout> out;
  for (const auto& v : all) {
    const int hosts = *std::max_element(v.begin(), v.end()) + 1;
    std::vector<int> per(static_cast<size_t>(hosts));
    for (int h : v) ++per[static_cast<size_t>(h)];
    const int most = *std::max_element(per.begin(), per.end());
    const bool even = std::all_of(per.begin(), per.end(), [&](int k) { return k == per.front(); });
    out.push_back({hosts, most, even, v});
  }
  return out;
}

std::vector<size_t> sizes() {
  std::set<size_t> s = {0, 1, 2, 3, 24 * K - 1, 24 * K, 24 * K + 1};
  for (int k = 2; k <= 28; ++k) {
    const size_t p = size_t{1} << k;
    for (size_t v : {p - 1, p, p + 1, 3 * (p / 2)}) s.insert(v);
  }
  for (int n = 1; n <= 16; ++n) {
    const size_t flat = (256 * K) / static_cast<size_t>(std::max(n - 1, 1));
    for (size_t v : {flat, flat + 1}) s.insert(v);
    const size_t staged = (16 * K + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
    for (size_t v : {staged - 1, staged, staged + 1}) s.insert(v);
  }
  std::vector<size_t> out;
  for (size_t v : s)
    if (v <= (size_t{256} << 20)) out.push_back(v);
  return out;
}

TEST(SelectionProof, LadderCopyIsTheLadderOfSelectCc) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const bool sc = native::single_copy_enabled();
  size_t checked = 0;
  for (int n = 1; n <= 16; ++n)
    for (const Layout& l : layouts(n)) {
      Topology t;
      t.host_of_rank = l.host_of_rank;
      for (int h = 0; h < l.hosts; ++h) t.host_names.push_back("h" + std::to_string(h));
      for (int k = 0; k < 9; ++k)
        for (size_t bytes : sizes()) {
          detail::Op op;
          op.kind = static_cast<OpKind>(k);
          op.dtype = DataType::uint8;
          op.count = bytes;
          op.root = 0;
          ASSERT_EQ(native::select_algorithm(op, n, t).name, old_ladder(op.kind, bytes, bytes, n, l.hosts, l.even, cpus, sc))
              << to_string(op.kind) << " " << bytes << " B, " << n << " ranks on " << l.hosts << " hosts";
          ++checked;
        }
    }
  std::printf("ladder copy checked against select.cc: %zu cases\n", checked);
}

TEST(SelectionProof, DefaultTableChoosesWhatTheLadderRan) {
  const tuning::Table table = tuning::parse_table(tuning::builtin_table_text("native"), "the built-in defaults", "native",
                                                  names_with_ring_shm);
  const std::vector<size_t> all_sizes = sizes();
  const DataType dtypes[] = {DataType::uint8, DataType::bfloat16, DataType::float32, DataType::float64};
  size_t checked = 0, wrong = 0;
  std::vector<std::string> first;
  for (int n = 1; n <= 16; ++n)
    for (const Layout& l : layouts(n))
      for (long cpus : {1L, 2L, 3L, 4L, 8L, 32L})
        for (bool sc : {false, true}) {
          tuning::Shape shape;
          shape.ranks = n;
          shape.hosts = l.hosts;
          shape.per_host = l.per_host;
          shape.even_hosts = l.even;
          shape.cpus_per_rank = static_cast<double>(cpus) / l.per_host;
          shape.single_copy = sc && l.hosts == 1 && n > 1;
          const tuning::ShapeRows rows({&table}, shape);
          for (int k = 0; k < 9; ++k)
            for (DataType dt : dtypes)
              for (size_t bytes : all_sizes) {
                const size_t es = dtype_size(dt);
                if (bytes % es != 0) continue;
                const OpKind op = static_cast<OpKind>(k);
                const tuning::Call call = tuning::make_call(op, dt, bytes / es, n);
                // Only the allreduce and the allgather ever depended on in place or placement.
                const bool per_call = op == OpKind::allreduce || op == OpKind::allgather;
                for (bool in_place : {false, true})
                  for (bool far : {false, true}) {
                    if (!per_call && (in_place || far)) continue;
                    const std::string want = old_ran(op, bytes, bytes / es, n, l.hosts, l.even, cpus, sc, in_place, far);
                    const tuning::CallFacts facts{in_place, far ? tuning::Placement::far : tuning::Placement::near};
                    const auto* e = rows.find(call, [&] { return facts; }, [](const tuning::Row&) { return true; });
                    const std::string got = e != nullptr ? e->row->choice : "(no row)";
                    ++checked;
                    if (got == want) continue;
                    ++wrong;
                    if (first.size() < 20)
                      first.push_back(std::string(to_string(op)) + " " + std::to_string(bytes) + " B " + std::string(to_string(dt)) +
                                      ", " + std::to_string(n) + " ranks on " + std::to_string(l.hosts) + " hosts (most " +
                                      std::to_string(l.per_host) + (l.even ? ", even" : ", uneven") + "), " + std::to_string(cpus) +
                                      " CPUs, single copy " + (sc ? "on" : "off") + (in_place ? ", in place" : "") +
                                      (far ? ", far" : ", near") + ": ladder ran " + want + ", table says " + got +
                                      (e != nullptr ? " (line " + std::to_string(e->row->line) + ")" : ""));
                  }
              }
        }
  std::printf("default table against the ladder: %zu cases, %zu differ\n", checked, wrong);
  for (const auto& f : first) ADD_FAILURE() << f;
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace mpcomm
