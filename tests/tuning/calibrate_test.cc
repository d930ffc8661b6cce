// Calibration recovers the constants that generated its rows (the model plus noise), profiles read back what
// was written and refuse what is missing, naming it.
#include "tuning/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mpcomm/error.h"

namespace mpcomm::tuning {
namespace {

constexpr double us = 1e-6, GB = 1e9;

// Rows of every op the model has, on 2, 3, 4 and 6 ranks of one host and 2 and 4 ranks over 2 hosts, timed by `truth`
// (each op with its own constants, scaled) with multiplicative noise of ±noise.
std::vector<Measurement> synthetic(const BackendCosts& truth, double noise, int cores, bool emulated) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> u(1 - noise, 1 + noise);
  std::vector<Measurement> rows;
  for (const auto& op : model_ops())
    for (auto [ranks, hosts] : std::vector<std::pair<int, int>>{{2, 1}, {3, 1}, {4, 1}, {6, 1}, {2, 2}, {4, 2}})
      for (double bytes = 3 << 10; bytes <= 12 << 20; bytes *= 8) {
        const double t = predict(truth, op, bytes, CommShape{ranks, hosts, cores, emulated}).seconds;
        rows.push_back({"b", op, bytes, ranks, hosts, t * u(rng)});
      }
  return rows;
}

BackendCosts truth() {
  BackendCosts c;
  c.overhead_s = 4 * us;
  c.intra = {3 * us, 6 * GB};
  c.inter = {40 * us, 1.2 * GB};
  for (const auto& op : model_ops()) {
    BackendCosts::OpCosts o;
    o.overhead_s = c.overhead_s, o.intra = c.intra, o.inter = c.inter, o.has_intra = o.has_inter = true;
    o.algorithm = algorithms_for(op, CommShape{2, 1}).front();
    if (op == "broadcast") o.intra.bw_Bps = 9 * GB, o.algorithm = "tree";
    c.ops[op] = {o};
  }
  return c;
}

TEST(Calibrate, NonnegativeLeastSquaresSolvesAndClampsAtZero) {
  // y = 2 + 3x exactly.
  auto c = nonnegative_least_squares({{1, 0}, {1, 1}, {1, 2}}, {2, 5, 8}, {1, 1, 1});
  EXPECT_NEAR(c[0], 2, 1e-12);
  EXPECT_NEAR(c[1], 3, 1e-12);
  // The best unconstrained intercept is negative: held at 0, the slope fitted alone.
  c = nonnegative_least_squares({{1, 1}, {1, 2}, {1, 3}}, {1, 3, 5}, {1, 1, 1});
  EXPECT_EQ(c[0], 0);
  EXPECT_NEAR(c[1], 22.0 / 14, 1e-12);
}

// Every band of every op against the truth. Through noise, a band's rows tell only what dominates their time:
// the latencies in the smallest sizes' band, the bandwidths in the largest's; exact rows tell everything.
void expect_recovered(const BackendCosts& t, const Profile& p, double tol, bool exact, int cores = 0,
                      bool emulated = false) {
  const BackendCosts& b = p.backend("b");
  for (const auto& op : model_ops()) {
    const auto& bands = b.ops.at(op);
    for (size_t i = 0; i < bands.size(); ++i) {
      const auto& got = bands[i];
      const auto& want = t.ops.at(op).front();
      SCOPED_TRACE(op + " band " + std::to_string(i) + (got.pairs ? " (pairs)" : ""));
      if (got.pairs) {
        // Two ranks: the algorithms coincide and a step is the call's overhead again; what must be right is the
        // time, within a host and across two, at the band's sizes.
        const double from = i > 0 && bands[i - 1].pairs ? bands[i - 1].below_bytes : 3 << 10;
        const double at = std::isfinite(got.below_bytes) ? (from + got.below_bytes) / 2 : 12 << 20;
        for (int hosts : {1, 2})
          EXPECT_NEAR(predict(b, op, at, CommShape{2, hosts, cores, emulated}).seconds /
                          predict(t, op, at, CommShape{2, hosts, cores, emulated}).seconds,
                      1, 3 * tol)
              << at << " bytes, hosts " << hosts;
        continue;
      }
      EXPECT_EQ(got.algorithm, want.algorithm);
      if (exact || i + 1 == bands.size()) {
        EXPECT_NEAR(got.intra.bw_Bps / want.intra.bw_Bps, 1, tol);
        EXPECT_NEAR(got.inter.bw_Bps / want.inter.bw_Bps, 1, tol);
      }
      if (!exact && i > 0) continue;
      // Overhead and one step within a host: their sum is what the rows tell apart best. sendrecv takes one
      // step whatever the ranks, so only the call's whole latency is known, within a host and across.
      EXPECT_NEAR((got.overhead_s + got.intra.alpha_s) / (want.overhead_s + want.intra.alpha_s), 1, 3 * tol);
      if (op != "sendrecv") {
        EXPECT_NEAR(got.intra.alpha_s / want.intra.alpha_s, 1, 5 * tol);
        EXPECT_NEAR(got.inter.alpha_s / want.inter.alpha_s, 1, 3 * tol);
      } else {
        EXPECT_NEAR((got.overhead_s + got.inter.alpha_s) / (want.overhead_s + want.inter.alpha_s), 1, 3 * tol);
      }
    }
  }
  // Sizes 3K (carried into the next band) and 24K, then 192K, 1.5M and 12M each alone (their latencies held
  // from the band below): four bands, for two ranks and for more.
  EXPECT_EQ(b.ops.at("allreduce").size(), 8u);
}

TEST(Calibrate, RecoversTheConstantsOfExactRows) {
  const auto t = truth();
  const Profile p = calibrate(synthetic(t, 0, 0, false), "x", 4, 0, false);
  expect_recovered(t, p, 1e-6, true);
}

TEST(Calibrate, RecoversTheConstantsThroughNoiseAndCrowding) {
  const auto t = truth();
  CalibrationReport report;
  const Profile p = calibrate(synthetic(t, 0.03, 2, true), "x", 2, 2, true, &report);
  expect_recovered(t, p, 0.06, false, 2, true);
  EXPECT_EQ(p.cores_per_host, 2);
  EXPECT_TRUE(p.emulated_hosts);
  for (const auto& f : report.fits) EXPECT_LT(f.median_rel_error, 0.04) << f.op << " " << f.level;
  // And the fitted profile predicts rows it never saw (other sizes and shapes) as well as the noise allows.
  std::vector<Measurement> unseen;
  for (const auto& op : model_ops())
    for (auto [ranks, hosts] : std::vector<std::pair<int, int>>{{6, 1}, {8, 2}, {8, 4}})
      unseen.push_back({"b", op, 5e6, ranks, hosts, predict(t, op, 5e6, CommShape{ranks, hosts, 2, true}).seconds});
  const auto v = validate(p, unseen);
  EXPECT_EQ(v.rows.size(), unseen.size());
  EXPECT_LT(v.max_abs_error, 0.1);
}

// Rows measured after compute (bench --compute-us) in two runs, whose ranks waited 1 and 10 ms for the last on
// average, generated from the truth's warm time by known cold costs (others across hosts than within one) with
// ±3% noise: calibration fits the warm constants from the back-to-back rows alone and the cold costs per op,
// level and wait from the rest.
TEST(Calibrate, RecoversTheColdCostsOfRowsAfterCompute) {
  const auto t = truth();
  auto rows = synthetic(t, 0, 0, false);
  const BackendCosts::ColdCost want[] = {{1e-3, 0.3, 40 * us, false},
                                         {10e-3, 0.8, 120 * us, false},
                                         {1e-3, 0.1, 60 * us, true},
                                         {10e-3, 0.2, 90 * us, true}};
  const char* ops[] = {"allreduce", "sendrecv", "reduce_scatter"};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.97, 1.03);
  for (const auto& k : want)
    for (const auto& op : ops)
      for (auto [ranks, hosts] : k.across_hosts ? std::vector<std::pair<int, int>>{{2, 2}, {4, 2}}
                                                : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}})
        for (double bytes = 16 << 10; bytes <= 4 << 20; bytes *= 4) {
          const double warm = predict(t, op, bytes, CommShape{ranks, hosts}).seconds;
          Measurement m{"b", op, bytes, ranks, hosts, (warm * (1 + k.scale) + k.wake_s) * u(rng)};
          // A bench run's compute, and the wait it measured: the longer compute's ranks happened to wait less, so
          // calibration must order the fits by wait, not by compute.
          m.compute_s = 0.1 - k.wait_s, m.wait_s = k.wait_s;
          rows.push_back(m);
        }
  CalibrationReport report;
  const Profile p = calibrate(rows, "x", 4, 0, false, &report);
  expect_recovered(t, p, 1e-6, true);  // the cold rows did not disturb the warm fit
  for (const auto& op : ops) {
    SCOPED_TRACE(op);
    const auto& cold = p.backend("b").cold.at(op);
    ASSERT_EQ(cold.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(cold[i].wait_s, want[i].wait_s, 1e-12);
      EXPECT_EQ(cold[i].across_hosts, want[i].across_hosts);
      EXPECT_NEAR(cold[i].scale, want[i].scale, 0.05);
      EXPECT_NEAR(cold[i].wake_s / want[i].wake_s, 1, 0.15);
    }
  }
  int cold_fits = 0;
  for (const auto& f : report.fits) cold_fits += f.level.rfind("cold", 0) == 0 && f.median_rel_error < 0.03;
  EXPECT_EQ(cold_fits, 12);
  // Validation predicts a row after compute with its level's cold costs, a back-to-back one without.
  const double warm = predict(t, "allreduce", 1e6, CommShape{4, 1}).seconds;
  Measurement after{"b", "allreduce", 1e6, 4, 1, warm * 1.8 + 120 * us};
  after.compute_s = 60e-3, after.wait_s = 10e-3;
  const double warm2 = predict(t, "allreduce", 1e6, CommShape{4, 2}).seconds;
  Measurement across{"b", "allreduce", 1e6, 4, 2, warm2 * 1.2 + 90 * us};
  across.compute_s = 60e-3, across.wait_s = 10e-3;
  const auto v = validate(p, {after, across, {"b", "allreduce", 1e6, 4, 1, warm}});
  ASSERT_EQ(v.rows.size(), 3u);
  EXPECT_LT(v.max_abs_error, 0.05);
  // Rows after compute with more ranks than cores are left out, and said to be.
  Measurement crowded = after;
  crowded.ranks = 6;
  rows.push_back(crowded);
  CalibrationReport r2;
  const Profile p2 = calibrate(rows, "x", 4, 4, false, &r2);
  EXPECT_TRUE(validate(p2, {crowded}).rows.empty()) << "nor are they validated";
  bool said = false;
  for (const auto& s : r2.skipped)
    said = said || s.find("6 ranks over 1 hosts after compute: more ranks than cores") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Calibrate, RowsThatCannotBeFittedAreRefused) {
  // One size only: α and β cannot be told apart.
  std::vector<Measurement> rows = {{"b", "allreduce", 1e3, 2, 1, 1e-5}, {"b", "allreduce", 1e3, 4, 1, 3e-5}};
  EXPECT_THROW(calibrate(rows, "x", 2, 0, false), InvalidArgument);
}

TEST(Profile, WhatIsWrittenReadsBack) {
  const auto t = truth();
  Profile p = calibrate(synthetic(t, 0, 0, false), "x", 4, 2, true);
  p.backends.at("b").cold["allreduce"] = {
      {1e-3, 0.25, 30 * us, false}, {0.02, 1.5, 200 * us, false}, {0.02, 0.5, 80 * us, true}};
  const Profile q = parse_profile(format_profile(p), "roundtrip");
  ASSERT_EQ(q.backend("b").cold.at("allreduce").size(), 3u);
  EXPECT_NEAR(after_wait(q.backend("b"), "allreduce", CommShape{2, 1}, 1e-4, 0.02), 1e-4 * 2.5 + 200 * us, 1e-12);
  EXPECT_NEAR(after_wait(q.backend("b"), "allreduce", CommShape{2, 2}, 1e-4, 0.02), 1e-4 * 1.5 + 80 * us, 1e-12);
  EXPECT_EQ(format_profile(q), format_profile(p));
  for (const auto& op : model_ops())
    EXPECT_NEAR(predict(q.backend("b"), op, 1e6, CommShape{4, 2, 2, true}).seconds,
                predict(p.backend("b"), op, 1e6, CommShape{4, 2, 2, true}).seconds, 1e-5 * 1e-3);
  for (const auto& name : published_profiles()) EXPECT_EQ(published_profile(name).name, name);
}

void expect_refused(const std::string& text, const std::string& part) {
  try {
    parse_profile(text, "F");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Profile, MissingOrWrongFieldsAreNamed) {
  const std::string head = "mpcomm-profile 1\nname = p\nranks_per_host = 8\n";
  const std::string full = "overhead_us=1 intra_alpha_us=1 intra_bw_gbs=1 inter_alpha_us=1 inter_bw_gbs=1";
  expect_refused(head + "backend nccl overhead_us=1 intra_alpha_us=1 intra_bw_gbs=1 inter_alpha_us=1\n",
                 "profile F: line 4 (backend nccl): missing field inter_bw_gbs");
  expect_refused(head + "backend nccl " + full + " colour=blue\n", "unknown field colour");
  expect_refused(head + "backend nccl overhead_us=x intra_alpha_us=1 intra_bw_gbs=1 inter_alpha_us=1 inter_bw_gbs=1\n",
                 "overhead_us: 'x' is not a number");
  expect_refused("mpcomm-profile 1\nranks_per_host = 8\nbackend nccl " + full + "\n", "missing field name");
  expect_refused("mpcomm-profile 1\nname = p\nbackend nccl " + full + "\n", "missing field ranks_per_host");
  expect_refused(head, "missing a 'backend' line");
  expect_refused(head + "flopz = 1\n", "unknown key 'flopz'");
  expect_refused("name = p\n", "expected 'mpcomm-profile 1' first");
  expect_refused(head + "backend nccl " + full + "\nop nccl allshuffle " + full + "\n", "unknown op 'allshuffle'");
  expect_refused(head + "op nccl allreduce " + full + "\n", "comes before a 'backend nccl' line");
  const std::string backend = head + "backend nccl " + full + "\n";
  const std::string cold = "cold nccl allreduce across_hosts=0 wait_us=";
  expect_refused(head + cold + "1 scale=0 wake_us=1\n", "line 4 (cold nccl allreduce): comes before a 'backend nccl'");
  expect_refused(backend + cold + "1 scale=0\n", "line 5 (cold nccl allreduce): missing field wake_us");
  expect_refused(backend + "cold nccl allreduce wait_us=1 scale=0 wake_us=1\n", "missing field across_hosts");
  expect_refused(backend + cold + "10 scale=0 wake_us=1\n" + cold + "5 scale=0 wake_us=1\n",
                 "line 6 (cold nccl allreduce): wait_us must be above 0 and grow");
  expect_refused(backend + "cold nccl allshuffle across_hosts=0 wait_us=1 scale=0 wake_us=1\n",
                 "unknown op 'allshuffle'");
  expect_refused(backend + "cold nccl\n", "'cold' needs a backend and an op");
  expect_refused(
      backend + "cold nccl allreduce across_hosts=1 wait_us=5 scale=0 wake_us=1\n" + cold + "10 scale=0 wake_us=1\n",
      "line 6 (cold nccl allreduce): wait_us must be above 0");
  EXPECT_THROW(load_profile("dgx-z100"), InvalidArgument);
  EXPECT_THROW(load_profile("/nonexistent/p.profile"), InvalidArgument);
}

}  // namespace
}  // namespace mpcomm::tuning
