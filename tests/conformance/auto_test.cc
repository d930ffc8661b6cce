// The auto backend's own promises (the conformance suite runs on it too, routed by the harness's mixed
// table): every rank routes by rank 0's table even when its own file says otherwise; a chain of calls
// that alternate backends, each consuming the last one's result, stays exact, blocking and
// non-blocking; a table of another machine is passed over with a warning, a malformed one is an error
// naming the file and field on every rank; auto with native alone works; a split gives an auto child.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "backends/auto/route_table.h"
#include "harness/thread_world.h"

namespace mpcomm {
namespace {

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

bool have_gloo() {
  for (const auto& b : available_backends())
    if (b == "gloo") return true;
  return false;
}

// A table file in TMPDIR, removed with the object.
struct TableFile {
  std::string path;
  explicit TableFile(const std::string& name, const std::string& text) {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/mpcomm-auto-test-" +
           std::to_string(::getpid()) + "-" + name + ".table";
    std::ofstream(path) << text;
  }
  ~TableFile() { ::unlink(path.c_str()); }
};

Options with_table(const std::string& path) {
  Options o;
  o.timeout = Millis(20000);
  o.params["MPCOMM_TUNING"] = path;
  return o;
}

std::string ran(const Communicator& c, OpKind k) {
  const char* a = c.stats()[static_cast<size_t>(k)].algorithm;
  return a != nullptr ? a : "";
}

// Each rank creates its auto communicator with its own options.
std::vector<std::unique_ptr<Communicator>> create_each(int n, const std::vector<Options>& opts) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(n));
  auto errs = testing::run_threads(
      n, [&](int r) { comms[static_cast<size_t>(r)] = create("auto", store, r, n, opts[static_cast<size_t>(r)]); });
  for (int r = 0; r < n; ++r)
    if (errs[static_cast<size_t>(r)])
      throw std::runtime_error("rank " + std::to_string(r) + ": " + testing::message(errs[static_cast<size_t>(r)]));
  return comms;
}

TEST(Auto, EveryRankRoutesByRankZerosTable) {
  if (!have_gloo()) GTEST_SKIP() << "this build has no gloo: auto has one backend, nothing to disagree on";
  TableFile to_gloo("gloo", "mpcomm-tuning 1 backend=auto\nallreduce -> gloo\nsendrecv -> gloo\n");
  TableFile to_native("native", "mpcomm-tuning 1 backend=auto\nallreduce -> native\nsendrecv -> native\n");
  for (const bool zero_says_gloo : {true, false}) {
    const std::string want = zero_says_gloo ? "gloo/" : "native/";
    auto comms = create_each(3, {with_table(zero_says_gloo ? to_gloo.path : to_native.path),
                                 with_table(zero_says_gloo ? to_native.path : to_gloo.path),
                                 with_table(zero_says_gloo ? to_native.path : to_gloo.path)});
    auto errs = testing::run_threads(3, [&](int r) {
      Communicator& c = *comms[static_cast<size_t>(r)];
      std::vector<int32_t> v(5, r + 1), out(5);
      c.allreduce(v.data(), out.data(), v.size(), DataType::int32, ReduceOp::sum);
      for (int32_t x : out) EXPECT_EQ(x, 6) << "rank " << r;
      EXPECT_EQ(ran(c, OpKind::allreduce).rfind(want, 0), 0u) << "rank " << r << " ran " << ran(c, OpKind::allreduce);
      if (r == 0) c.send(v.data(), v.size(), DataType::int32, 1, 3);
      if (r == 1) {
        c.recv(out.data(), out.size(), DataType::int32, 0, 3);
        EXPECT_EQ(out[4], 1);
        EXPECT_EQ(ran(c, OpKind::recv).rfind(want, 0), 0u) << ran(c, OpKind::recv);
      }
    });
    for (int r = 0; r < 3; ++r) EXPECT_EQ(testing::message(errs[static_cast<size_t>(r)]), "") << "rank " << r;
  }
}

// One element (8 bytes) on gloo, 1000 on native: each op reads what the one before wrote.
constexpr const char* kAlternate = "mpcomm-tuning 1 backend=auto\nallreduce bytes=[0,8] -> gloo\n";

TEST(Auto, ChainsAcrossBackendsStayExact) {
  if (!have_gloo()) GTEST_SKIP() << "this build has no gloo: auto has one backend to route to";
  TableFile t("alternate", kAlternate);
  constexpr int n = 3;
  testing::ThreadWorld world("auto", n, with_table(t.path));
  world.run([&](int r, Communicator& c) {
    int64_t x = r + 1, expect = 1;
    std::vector<int64_t> big(1000), sum(1000);
    for (int k = 0; k < 20; ++k) {
      // On gloo: the sum of every rank's x; then on native: every rank adds its rank to that sum.
      int64_t total = 0;
      c.allreduce(&x, &total, 1, DataType::int64, ReduceOp::sum);
      ASSERT_EQ(ran(c, OpKind::allreduce).rfind("gloo/", 0), 0u) << ran(c, OpKind::allreduce);
      for (auto& v : big) v = total + r;
      c.allreduce(big.data(), sum.data(), big.size(), DataType::int64, ReduceOp::sum);
      ASSERT_EQ(ran(c, OpKind::allreduce).rfind("native/", 0), 0u) << ran(c, OpKind::allreduce);
      x = sum[static_cast<size_t>(k) * 37 % 1000] % 1000003 + r;
      const int64_t t_expect = k == 0 ? 6 : n * expect + 3;  // sum of (expect + r) over r
      expect = (n * t_expect + 3) % 1000003;                 // sum of (total + r) over r
      ASSERT_EQ(total, t_expect) << "step " << k;
      ASSERT_EQ(x, expect + r) << "step " << k;
    }
  });
}

TEST(Auto, NonBlockingCallsOverTwoBackendsCompleteInIssueOrder) {
  if (!have_gloo()) GTEST_SKIP() << "this build has no gloo: auto has one backend to route to";
  TableFile t("alternate", kAlternate);
  constexpr int n = 3, ops = 12;
  testing::ThreadWorld world("auto", n, with_table(t.path));
  // What every element ends as, when op k (max on its first element alone, on gloo; sum on all 1000, on
  // native; alternating) runs in issue order, in place.
  std::vector<std::vector<int64_t>> sim(n, std::vector<int64_t>(1000));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < 1000; ++i) sim[r][i] = (r + 1) * static_cast<int64_t>(i % 7 + 1);
  for (int k = 0; k < ops; ++k) {
    const size_t count = k % 2 == 0 ? 1 : 1000;
    for (size_t i = 0; i < count; ++i) {
      int64_t v = k % 2 == 0 ? sim[0][i] : 0;
      for (int r = 0; r < n; ++r) v = k % 2 == 0 ? std::max(v, sim[r][i]) : v + sim[r][i];
      for (int r = 0; r < n; ++r) sim[r][i] = v;
    }
  }
  world.run([&](int r, Communicator& c) {
    std::vector<int64_t> buf(1000);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = (r + 1) * static_cast<int64_t>(i % 7 + 1);
    std::vector<Request> reqs;
    for (int k = 0; k < ops; ++k)
      reqs.push_back(k % 2 == 0 ? c.iallreduce(buf.data(), buf.data(), 1, DataType::int64, ReduceOp::max)
                                : c.iallreduce(buf.data(), buf.data(), 1000, DataType::int64, ReduceOp::sum));
    for (auto& q : reqs) q.wait();
    EXPECT_EQ(buf, sim[static_cast<size_t>(r)]) << "rank " << r;
  });
}

TEST(Auto, ATableOfAnotherMachineIsPassedOverWithAWarning) {
  TableFile t("foreign", "mpcomm-tuning 1 backend=auto machine=Some_Other_CPU.c96.g8.h4\nallreduce -> gloo\n");
  const autosel::TableChoice c = autosel::choose_table(t.path, 1);
  EXPECT_NE(c.source, "tuning file " + t.path);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_TRUE(contains(c.warnings[0], t.path) && contains(c.warnings[0], "Some_Other_CPU.c96.g8.h4") &&
              contains(c.warnings[0], autosel::machine_fingerprint(1)))
      << c.warnings[0];
  // The same file naming this machine is used.
  TableFile mine("mine",
                 "mpcomm-tuning 1 backend=auto machine=" + autosel::machine_fingerprint(1) + "\nallreduce -> gloo\n");
  EXPECT_EQ(autosel::choose_table(mine.path, 1).source, "tuning file " + mine.path);
  if (!have_gloo()) return;
  // A communicator does not route by the foreign one.
  testing::ThreadWorld world("auto", 2, with_table(t.path));
  world.run([&](int, Communicator& comm) {
    int32_t v = 1, s = 0;
    comm.allreduce(&v, &s, 1, DataType::int32, ReduceOp::sum);
    EXPECT_EQ(s, 2);
    EXPECT_EQ(ran(comm, OpKind::allreduce).rfind("native/", 0), 0u) << ran(comm, OpKind::allreduce);
  });
}

TEST(Auto, AMalformedTableFailsEveryRankNamingFileAndField) {
  for (const std::string row : {"allreduce bytes=[1,x) -> gloo", "allreduce -> fastest"}) {
    TableFile t("bad", "mpcomm-tuning 1 backend=auto\n" + row + "\n");
    const std::string field = contains(row, "bytes") ? "field 'bytes'" : "fastest";
    auto store = std::make_shared<HashStore>();
    auto errs = testing::run_threads(2, [&](int r) { create("auto", store, r, 2, with_table(t.path)); });
    for (int r = 0; r < 2; ++r) {
      const std::string m = testing::message(errs[static_cast<size_t>(r)]);
      EXPECT_TRUE(contains(m, t.path) && contains(m, "line 2") && contains(m, field)) << "rank " << r << ": " << m;
    }
  }
}

TEST(Auto, WorksWithNativeAlone) {
  Options o = with_table(testing::mixed_auto_table());
  o.params["MPCOMM_AUTO_BACKENDS"] = "native";
  testing::ThreadWorld world("auto", 2, o);
  world.run([&](int, Communicator& comm) {
    EXPECT_EQ(comm.backend(), "auto");
    for (size_t count : {1, 100, 5000}) {  // sizes the mixed table sends to gloo and to native
      std::vector<int32_t> v(count, 2), s(count);
      comm.allreduce(v.data(), s.data(), count, DataType::int32, ReduceOp::sum);
      EXPECT_EQ(s[count - 1], 4);
      EXPECT_EQ(ran(comm, OpKind::allreduce).rfind("native/", 0), 0u) << ran(comm, OpKind::allreduce);
    }
  });
}

TEST(Auto, SplitGivesAnAutoGroupRoutedByTheSameTable) {
  if (!have_gloo()) GTEST_SKIP() << "this build has no gloo: auto has one backend to route to";
  TableFile t("alternate", kAlternate);
  testing::ThreadWorld world("auto", 4, with_table(t.path));
  world.run([&](int r, Communicator& comm) {
    auto sub = comm.split(r % 2, r);
    ASSERT_TRUE(sub);
    EXPECT_EQ(sub->backend(), "auto");
    EXPECT_EQ(sub->size(), 2);
    int64_t v = r, s = 0;
    sub->allreduce(&v, &s, 1, DataType::int64, ReduceOp::sum);
    EXPECT_EQ(s, r % 2 == 0 ? 2 : 4);
    EXPECT_EQ(ran(*sub, OpKind::allreduce).rfind("gloo/", 0), 0u) << ran(*sub, OpKind::allreduce);
    std::vector<int64_t> big(100, r), bs(100);
    sub->allreduce(big.data(), bs.data(), big.size(), DataType::int64, ReduceOp::sum);
    EXPECT_EQ(bs[99], r % 2 == 0 ? 2 : 4);
    EXPECT_EQ(ran(*sub, OpKind::allreduce).rfind("native/", 0), 0u) << ran(*sub, OpKind::allreduce);
  });
}

}  // namespace
}  // namespace mpcomm
