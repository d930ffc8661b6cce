// The trainer's modes beyond plain tensor, pipeline and data parallelism — each changes the traffic, not the
// model: sequence parallelism and ZeRO-1 (the distributed optimizer) give the single-process losses on every
// split and backend, alone and together; their traffic is exactly Megatron's (reduce-scatter and all-gather
// per layer; one reduce-scatter and one all-gather per bucket); ZeRO's optimizer state is 1/dp, and its
// checkpoints are the usual ones.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "parallel/checkpoint.h"
#include "parallel/kernels.h"
#include "parallel/safetensors.h"
#include "parallel/train_helpers.h"
#include "parallel/wire.h"

namespace mpcomm::parallel {
namespace {

using Call = RecordingCommunicator::Call;

struct Mode {
  std::string backend;
  int tp, pp, dp;
};

std::string name_of(const Mode& m) {
  return m.backend + "_tp" + std::to_string(m.tp) + "_pp" + std::to_string(m.pp) + "_dp" + std::to_string(m.dp);
}
void PrintTo(const Mode& m, std::ostream* os) { *os << name_of(m); }

// The single-process run with c's model and batch.
std::vector<double> reference_losses(TrainConfig c) {
  c.dims = {1, 1, 1};
  c.zero = 0;
  c.save.clear();
  if (c.batch == small_config().batch) return single_process_losses();
  return train_on("native", c);
}

// ---------------------------------------------------------------------------------------------------
// ZeRO-1

class Zero : public ::testing::TestWithParam<Mode> {};

TEST_P(Zero, LossesEqualSingleProcess) {
  const Mode m = GetParam();
  TrainConfig c = small_config();
  c.dims = {m.tp, m.pp, m.dp};
  c.zero = 1;
  c.bucket_mb = 3001.0 * 4 / 1048576.0;  // several buckets, padded to a multiple of dp
  if (m.dp == 3) c.batch = 12;           // 2 micro-batches of 2 sequences per replica
  auto losses = train_on(m.backend, c);
  EXPECT_LT(max_rel_diff(reference_losses(c), losses), 1e-5);
  EXPECT_LT(losses.back(), losses.front());
}

std::vector<Mode> zero_modes() {
  std::vector<Mode> out;
  for (const auto& b : testing::thread_backends())
    for (auto [tp, pp, dp] : {std::tuple{1, 1, 2}, {1, 1, 3}, {2, 1, 2}, {1, 2, 2}, {2, 2, 2}})
      if (b == "native" || tp * pp * dp <= 4) out.push_back({b, tp, pp, dp});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Splits, Zero, ::testing::ValuesIn(zero_modes()),
                         [](const auto& info) { return name_of(info.param); });

// 2 replicas, buckets of 16 Ki floats: per bucket one reduce-scatter of its half, then (after the loss's
// all-reduce) per bucket one all-gather of the half; the optimizer holds half the state.
TEST(ZeroTraffic, OneReduceScatterAndOneAllGatherPerBucket) {
  TrainConfig c = small_config();
  c.dims = {1, 1, 2};
  c.zero = 1;
  c.steps = 1;
  c.bucket_mb = 16.0 * 1024 * 4 / 1048576.0;
  ThreadWorld world("native", 2);
  std::vector<std::vector<Call>> dp(2);
  std::vector<size_t> totals(2);
  std::vector<double> state(2);
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(c, 2);
    ParallelGroups g = ParallelGroups::create(comm, c.dims);
    auto* rd = recorded_by(g.dp);
    Trainer t(run, g);
    t.step(0);
    dp[static_cast<size_t>(rank)] = rd->calls;
    totals[static_cast<size_t>(rank)] = t.layout().total();
    state[static_cast<size_t>(rank)] = t.stats().optimizer_bytes;
  });
  const size_t padded = (totals[0] + 1) / 2 * 2;
  std::vector<Call> want;
  std::vector<size_t> halves;
  for (size_t end = padded; end > 0; end = end > 16384 ? end - 16384 : 0)
    halves.push_back(std::min<size_t>(end, 16384) / 2);
  for (size_t h : halves) want.push_back({OpKind::reduce_scatter, h, ReduceOp::sum});
  want.push_back({OpKind::allreduce, 1, ReduceOp::sum});  // the loss
  for (size_t h : halves) want.push_back({OpKind::allgather, h, ReduceOp::sum});
  EXPECT_GE(halves.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(dp[static_cast<size_t>(r)], want) << "rank " << r;
    EXPECT_EQ(state[static_cast<size_t>(r)], 8.0 * padded / 2) << "m and v for half the parameters";
  }
}

// What AdamW keeps per rank is 1/dp of the replicated optimizer's, on every rank.
TEST(ZeroTraffic, OptimizerStateIsOneDpthOfTheReplicatedOne) {
  for (int zero : {0, 1}) {
    TrainConfig c = small_config();
    c.dims = {1, 1, 4};
    c.zero = zero;
    c.steps = 1;
    ThreadWorld world("native", 4);
    std::vector<TrainResult> results(4);
    world.run([&](int rank, Communicator& comm) { results[static_cast<size_t>(rank)] = train(c, comm); });
    for (const auto& r : results[0].ranks) {
      const double replicated = 8 * r.params;
      if (zero)
        EXPECT_NEAR(r.optimizer_bytes / replicated, 0.25, 1e-3);
      else
        EXPECT_EQ(r.optimizer_bytes, replicated);
    }
  }
}

// A ZeRO run saves the usual checkpoint (the whole model under Hugging Face names), equal to the replicated
// run's, and a ZeRO run on another split continues from it.
TEST(ZeroCheckpoint, SavesTheUsualModelAndResumesOnAnotherSplit) {
  const std::string dir = "/tmp/mpcomm-zero-test-" + std::to_string(::getpid());
  TrainConfig c = small_config();
  c.steps = 3;
  c.save = dir + "-one.safetensors";
  train_on("native", c);
  TrainConfig z = c;
  z.dims = {2, 1, 2};
  z.zero = 1;
  z.save = dir + "-zero.safetensors";
  train_on("native", z);
  SafetensorsFile one(c.save), zero(z.save);
  ASSERT_EQ(one.tensors().size(), zero.tensors().size());
  for (const auto& [n, info] : one.tensors()) {
    ASSERT_TRUE(zero.has(n)) << n;
    auto a = one.read_f32(n), b = zero.read_f32(n);
    ASSERT_EQ(a.size(), b.size()) << n;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::fabs(a[i])) << n << "[" << i << "]";
  }
  TrainConfig resume = small_config();
  resume.init_from = z.save;
  resume.dims = {1, 2, 2};
  resume.zero = 1;
  TrainConfig resume_one = resume;
  resume_one.dims = {1, 1, 1};
  resume_one.zero = 0;
  EXPECT_LT(max_rel_diff(train_on("native", resume_one), train_on("native", resume)), 1e-5);
  std::remove(c.save.c_str());
  std::remove(z.save.c_str());
}

// ---------------------------------------------------------------------------------------------------
// overlap: the data-parallel buckets start while the backward goes on (read from the timeline)

// Issue times (µs) of rank 0's data-parallel bucket reductions and the end of its last backward, step 0.
std::pair<std::vector<double>, double> buckets_and_backward_end(bool overlap, const std::string& path) {
  TrainConfig c = small_config();
  c.dims = {1, 1, 2};
  c.steps = 1;
  c.zero = 0;
  c.overlap = overlap;
  c.bucket_mb = 2000.0 * 4 / 1048576.0;
  c.trace = path;
  ThreadWorld world("native", 2);
  world.run([&](int, Communicator& comm) { train(c, comm); });
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<double> issued;
  double backward_end = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("pid") != 0) continue;
    const double ts = e.at("ts"), end = ts + e.at("dur").get<double>();
    if (e.at("name") == "backward") backward_end = std::max(backward_end, end);
    if (e.at("name") == "allreduce" && e.at("args").at("count") != 1 && e.at("args").at("dtype") == "float32")
      issued.push_back(ts - e.at("args").value("queued_us", 0.0));
  }
  std::remove(path.c_str());
  return {issued, backward_end};
}

TEST(Overlap, BucketsStartBeforeTheBackwardEndsAndNotWithout) {
  const std::string path = "/tmp/mpcomm-overlap-test-" + std::to_string(::getpid()) + ".json";
  auto [with, end_with] = buckets_and_backward_end(true, path);
  ASSERT_GE(with.size(), 3u);
  const size_t early =
      static_cast<size_t>(std::count_if(with.begin(), with.end(), [&](double t) { return t < end_with; }));
  EXPECT_GE(early, with.size() - 1) << "all but the bucket holding wte and wpe start during the backward";
  auto [without, end_without] = buckets_and_backward_end(false, path);
  ASSERT_EQ(without.size(), with.size());
  for (double t : without) EXPECT_GE(t, end_without);
}

// ---------------------------------------------------------------------------------------------------
// bfloat16 on the wire

// The wire's collectives are exactly what wire.h says, bit for bit, whatever the backend's algorithm: three
// ranks, a length that does not split evenly, values that bfloat16 rounds.
TEST(Wire, BFloat16CollectivesAreTheDocumentedRoundings) {
  for (const auto& backend : testing::thread_backends()) {
    SCOPED_TRACE(backend);
    const int n = 3;
    const size_t len = 10;
    auto value = [](int r, size_t i) {
      return 1.0f + 0.001953125f * static_cast<float>(i) + 0.1234567f * static_cast<float>(r);
    };
    auto r16 = [](float x) {
      uint16_t b;
      to_bf16(&x, &b, 1);
      float y;
      from_bf16(&b, &y, 1);
      return y;
    };
    ThreadWorld world(backend, n);
    Wire wire{WireType::bfloat16};
    world.run([&](int r, Communicator& comm) {
      std::vector<float> x(len), rs_in(len * n), rs_out(len), ag(len * n);
      for (size_t i = 0; i < len; ++i) x[i] = value(r, i);
      for (size_t i = 0; i < len * n; ++i) rs_in[i] = value(r, i);
      wire.allreduce_sum(comm, x.data(), len);
      wire.reduce_scatter_sum(comm, rs_in.data(), rs_out.data(), len);
      std::vector<float> mine(len);
      for (size_t i = 0; i < len; ++i) mine[i] = value(r, i) * 3.0f;
      wire.allgather(comm, mine.data(), ag.data(), len);
      for (size_t i = 0; i < len; ++i) {
        float sum = 0, block = 0;
        for (int q = 0; q < n; ++q) sum += r16(value(q, i));
        for (int q = 0; q < n; ++q) block += r16(value(q, static_cast<size_t>(r) * len + i));
        EXPECT_EQ(x[i], r16(sum)) << "allreduce, element " << i;
        EXPECT_EQ(rs_out[i], block) << "reduce-scatter, element " << i;
        for (int q = 0; q < n; ++q) EXPECT_EQ(ag[static_cast<size_t>(q) * len + i], r16(value(q, i) * 3.0f));
      }
    });
  }
}

// bfloat16 on the wire, every mode at once: within 1e-2 of the float32 run after 20 steps, and every replica of a
// parameter still bit-identical (tensor-parallel copies, data-parallel replicas, the tied wte at both ends).
TEST(Wire, BFloat16TrainingStaysCloseAndReplicasIdentical) {
  TrainConfig c = small_config();
  c.steps = 20;
  c.dims = {2, 2, 2};
  c.sequence_parallel = true;
  c.zero = 1;
  c.bucket_mb = 3000.0 * 4 / 1048576.0;
  TrainConfig wide = c;
  wide.comm_dtype = "bfloat16";
  const auto fp32 = train_on("native", c);
  ThreadWorld world("native", 8);
  std::vector<std::vector<double>> losses(8);
  std::vector<std::map<std::string, std::vector<float>>> params(8);
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(wide, 8);
    ParallelGroups g = ParallelGroups::create(comm, wide.dims);
    Trainer t(run, g);
    for (int k = 0; k < wide.steps; ++k) losses[static_cast<size_t>(rank)].push_back(t.step(k));
    for (const auto& p : t.layout().params())
      params[static_cast<size_t>(rank)][p.name].assign(t.params().begin() + static_cast<long>(p.offset),
                                                       t.params().begin() + static_cast<long>(p.offset + p.numel));
  });
  EXPECT_LT(std::fabs(losses[0].back() - fp32.back()) / fp32.back(), 1e-2);
  EXPECT_NE(losses[0].back(), fp32.back());
  int compared = 0;
  for (int r = 0; r < 8; ++r) {
    const Coords me = coords_of(r, c.dims);
    for (const auto& [name, values] : params[static_cast<size_t>(r)]) {
      const int replica = rank_of({me.tp, me.pp, 0}, c.dims);  // every parameter: the same on every dp rank
      EXPECT_TRUE(values == params[static_cast<size_t>(replica)].at(name))
          << name << " rank " << r << " vs " << replica;
      const int tp0 = rank_of({0, me.pp, me.dp}, c.dims);
      const bool replicated = name.find("ln_") != std::string::npos || name.find("c_proj.bias") != std::string::npos ||
                              name == "wpe.weight";
      if (replicated) {
        EXPECT_TRUE(values == params[static_cast<size_t>(tp0)].at(name)) << name << " rank " << r;
      }
      if (name == "wte.weight") {
        const int other_end = rank_of({me.tp, 1 - me.pp, me.dp}, c.dims);
        EXPECT_TRUE(values == params[static_cast<size_t>(other_end)].at(name)) << "wte rank " << r;
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);
}

// ---------------------------------------------------------------------------------------------------
// the interleaved schedule: V model chunks per pipeline rank

struct InterleavedMode {
  std::string backend;
  int tp, pp, dp, V;
  bool sp, zero;
};
void PrintTo(const InterleavedMode& m, std::ostream* os) {
  *os << m.backend << "_tp" << m.tp << "_pp" << m.pp << "_dp" << m.dp << "_v" << m.V << (m.sp ? "_sp" : "")
      << (m.zero ? "_zero" : "");
}

class Interleaved : public ::testing::TestWithParam<InterleavedMode> {};

TEST_P(Interleaved, LossesEqualSingleProcess) {
  const InterleavedMode m = GetParam();
  TrainConfig c = small_config();
  c.layers = m.pp * m.V;  // one layer per chunk
  TrainConfig one = c;
  c.dims = {m.tp, m.pp, m.dp};
  c.schedule = "interleaved";
  c.virtual_stages = m.V;
  c.micro_batches = m.pp;
  c.batch = 4 * m.pp * m.dp;
  one.batch = c.batch;
  c.sequence_parallel = m.sp;
  c.zero = m.zero;
  auto losses = train_on(m.backend, c);
  EXPECT_LT(max_rel_diff(train_on("native", one), losses), 1e-5);
  EXPECT_LT(losses.back(), losses.front());
}

std::vector<InterleavedMode> interleaved_modes() {
  std::vector<InterleavedMode> out;
  for (const auto& b : testing::thread_backends()) {
    out.push_back({b, 1, 2, 1, 2, false, false});
    out.push_back({b, 1, 2, 1, 4, false, false});
  }
  out.push_back({"native", 1, 4, 1, 2, false, false});
  out.push_back({"native", 2, 2, 1, 2, true, false});
  out.push_back({"native", 1, 2, 2, 2, false, true});
  out.push_back({"native", 2, 2, 2, 2, true, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Splits, Interleaved, ::testing::ValuesIn(interleaved_modes()), [](const auto& info) {
  std::ostringstream os;
  PrintTo(info.param, &os);
  return os.str();
});

TEST(InterleavedCheckpoint, SavesTheUsualModel) {
  const std::string base = "/tmp/mpcomm-interleaved-test-" + std::to_string(::getpid());
  TrainConfig c = small_config();
  c.layers = 4, c.steps = 2, c.micro_batches = 2;
  c.save = base + "-one.safetensors";
  train_on("native", c);
  TrainConfig v = c;
  v.dims = {1, 2, 1};
  v.schedule = "interleaved";
  v.virtual_stages = 2;
  v.save = base + "-v.safetensors";
  train_on("native", v);
  SafetensorsFile a(c.save), b(v.save);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& [n, info] : a.tensors()) {
    auto x = a.read_f32(n), y = b.read_f32(n);
    ASSERT_EQ(x.size(), y.size()) << n;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5 + 1e-5 * std::fabs(x[i])) << n << "[" << i << "]";
  }
  std::remove(c.save.c_str());
  std::remove(v.save.c_str());
}

TEST(InterleavedCheckpoint, BadShapesAreRefusedBeforeAnyTraffic) {
  auto error = [](TrainConfig c) -> std::string {
    try {
      resolve(c, c.dims.world());
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  };
  TrainConfig c = small_config();
  c.layers = 6, c.dims = {1, 2, 1}, c.schedule = "interleaved", c.virtual_stages = 2, c.micro_batches = 2;
  EXPECT_NE(error(c).find("--virtual-stages 2 does not divide the layers per stage: 6 layers over --pp 2 are 3 per stage"),
            std::string::npos)
      << error(c);
  c.layers = 4, c.micro_batches = 3, c.batch = 6;
  EXPECT_NE(error(c).find("--micro-batches 3 is not a multiple of --pp 2"), std::string::npos) << error(c);
  c.micro_batches = 2, c.batch = 8, c.virtual_stages = 1;
  EXPECT_NE(error(c).find("needs --virtual-stages 2 or more"), std::string::npos) << error(c);
  c.schedule = "1f1b", c.virtual_stages = 2;
  EXPECT_NE(error(c).find("--virtual-stages 2 needs --schedule interleaved"), std::string::npos) << error(c);
}

TEST(TrainStats, EveryFieldSurvivesTheGatherToRankZero) {
  RankStats a;
  a.tp = {1, 2, 3}, a.pp = {4, 5, 6}, a.dp = {7, 8, 9}, a.embedding = {10, 11, 12};
  a.pp_wait_s = 13, a.step_s = 14, a.optimizer_bytes = 15, a.params = 16, a.tp_spent = 17, a.pp_spent = 18;
  a.dp_spent = 19, a.ep = {20, 21, 22}, a.aux_loss = 23;
  const std::vector<double> v = a.to_vector();
  ASSERT_EQ(v.size(), static_cast<size_t>(RankStats::kFields));
  EXPECT_EQ(RankStats::from_vector(v.data()).to_vector(), v);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<double>(i + 1)) << "field " << i;
}

// ---------------------------------------------------------------------------------------------------
// sequence parallelism

struct SpMode {
  std::string backend;
  int tp, pp, dp, zero;
};
void PrintTo(const SpMode& m, std::ostream* os) {
  *os << m.backend << "_tp" << m.tp << "_pp" << m.pp << "_dp" << m.dp << (m.zero ? "_zero" : "");
}

class SequenceParallel : public ::testing::TestWithParam<SpMode> {};

TEST_P(SequenceParallel, LossesEqualSingleProcess) {
  const SpMode m = GetParam();
  TrainConfig c = small_config();
  c.dims = {m.tp, m.pp, m.dp};
  c.sequence_parallel = true;
  c.zero = m.zero;
  auto losses = train_on(m.backend, c);
  EXPECT_LT(max_rel_diff(single_process_losses(), losses), 1e-5);
  EXPECT_LT(losses.back(), losses.front());
}

std::vector<SpMode> sp_modes() {
  std::vector<SpMode> out;
  for (const auto& b : testing::thread_backends()) {
    for (auto [tp, pp, dp, zero] : {std::tuple{2, 1, 1, 0}, {4, 1, 1, 0}, {2, 2, 1, 0}, {2, 1, 2, 0}, {2, 1, 2, 1}})
      out.push_back({b, tp, pp, dp, zero});
    if (b == "native") out.push_back({b, 2, 2, 2, 1});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Splits, SequenceParallel, ::testing::ValuesIn(sp_modes()), [](const auto& info) {
  std::ostringstream os;
  PrintTo(info.param, &os);
  return os.str();
});

// Megatron's list, per micro-batch on one stage of tp 2: the embedding's reduce-scatter; per layer an all-gather
// before each column-parallel layer and a reduce-scatter after each row-parallel one; the all-gather before the
// output layer and the cross-entropy's three all-reduces over all tokens; backward the same mirrored (a
// reduce-scatter where the forward all-gathers); at the end of the step one all-reduce of the LayerNorm and
// row-parallel bias gradients. Every reduce-scatter and all-gather moves a rank's 1/tp of the tokens.
TEST(SequenceParallelTraffic, ReduceScatterAndAllGatherInPlaceOfAllReduce) {
  TrainConfig c = small_config();
  c.dims = {2, 1, 1};
  c.layers = 3, c.micro_batches = 1, c.steps = 1;
  c.sequence_parallel = true;
  const size_t N = static_cast<size_t>(c.batch * c.seq), C = static_cast<size_t>(c.hidden), R = N / 2;
  const auto recorded = record_one_step(c, &ParallelGroups::tp);
  const Call ag{OpKind::allgather, R * C, ReduceOp::sum}, rs{OpKind::reduce_scatter, R * C, ReduceOp::sum};
  std::vector<Call> want = {rs};  // embedding
  for (int l = 0; l < c.layers; ++l)
    want.insert(want.end(), {ag, rs, ag, rs});            // ln_1 → c_attn, c_proj; ln_2 → c_fc, c_proj
  want.push_back(ag);                                     // ln_f → output layer
  want.push_back({OpKind::allreduce, N, ReduceOp::max});  // cross-entropy over all tokens
  want.push_back({OpKind::allreduce, N, ReduceOp::sum});
  want.push_back({OpKind::allreduce, N, ReduceOp::sum});
  want.push_back(rs);                                                            // output layer's input gradient
  for (int l = 0; l < c.layers; ++l) want.insert(want.end(), {ag, rs, ag, rs});  // mirrored
  want.push_back(ag);                                                            // embedding's gradient, every token
  want.push_back({OpKind::allreduce, static_cast<size_t>(6 * c.layers + 2) * C, ReduceOp::sum});  // LN, biases
  EXPECT_EQ(recorded[0], want);
  EXPECT_EQ(recorded[1], want);
}

TEST(SequenceParallelTraffic, BadShapesAreRefusedBeforeAnyTraffic) {
  TrainConfig c = small_config();
  c.sequence_parallel = true;
  try {
    resolve(c, 1);
    ADD_FAILURE() << "--sequence-parallel with --tp 1";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--tp is 1"), std::string::npos) << e.what();
  }
  c.dims = {2, 1, 1};
  c.seq = 15, c.batch = 2, c.micro_batches = 2;  // 1 sequence of 15 tokens per micro-batch
  try {
    resolve(c, 2);
    ADD_FAILURE() << "15 tokens over 2 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("15 tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpcomm::parallel
