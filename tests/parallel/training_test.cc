// The GPT trainer with ranks as threads: every split of the model (tp × pp × dp) on every thread-capable
// backend gives the single-process losses; the collectives each layer issues are exactly Megatron's; bad
// configurations fail on every rank before training.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/front_door.h"
#include "core/op.h"
#include "harness/thread_world.h"
#include "parallel/checkpoint.h"
#include "parallel/kernels.h"
#include "parallel/train_helpers.h"
#include "parallel/trainer.h"

namespace mpcomm::parallel {
namespace {

// ---------------------------------------------------------------------------------------------------
// splitting the model changes nothing but the speed

struct Split3 {
  int tp, pp, dp;
  friend std::ostream& operator<<(std::ostream& os, const Split3& s) {
    return os << "tp" << s.tp << "×pp" << s.pp << "×dp" << s.dp;
  }
};

class Equivalence : public ::testing::TestWithParam<std::tuple<std::string, Split3>> {};

TEST_P(Equivalence, LossesEqualSingleProcess) {
  auto [backend, s] = GetParam();
  TrainConfig c = small_config();
  c.dims = {s.tp, s.pp, s.dp};
  auto losses = train_on(backend, c);
  const auto& ref = single_process_losses();
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(max_rel_diff(ref, losses), 1e-5);
  EXPECT_LT(losses.back(), losses.front()) << "training lowers the loss";
}

using testing::thread_backends;  // mpi ranks are processes (tests/mpi); nccl: tests/gpu

INSTANTIATE_TEST_SUITE_P(
    Splits, Equivalence,
    ::testing::Combine(::testing::ValuesIn(thread_backends()),
                       ::testing::Values(Split3{2, 1, 1}, Split3{1, 2, 1}, Split3{1, 1, 2}, Split3{2, 2, 1},
                                         Split3{2, 1, 2}, Split3{1, 2, 2})),
    [](const auto& info) {
      auto s = std::get<1>(info.param);
      return std::get<0>(info.param) + "_tp" + std::to_string(s.tp) + "_pp" + std::to_string(s.pp) + "_dp" +
             std::to_string(s.dp);
    });

TEST(Training, GPipeEqualsOneFOneBAndMicroBatchesChangeNothing) {
  TrainConfig c = small_config();
  c.dims = {1, 2, 1};
  c.schedule = "gpipe";
  c.micro_batches = 4;
  EXPECT_LT(max_rel_diff(single_process_losses(), train_on("native", c)), 1e-5);
}

TEST(Training, VocabularyPaddingDoesNotChangeTheLoss) {
  // 256 byte tokens over 3 ranks: the table is padded to 258 rows; the padded logits must not count.
  TrainConfig c = small_config();
  c.hidden = 48, c.heads = 6;
  TrainConfig one = c;
  c.dims = {3, 1, 1};
  EXPECT_LT(max_rel_diff(train_on("native", one), train_on("native", c)), 1e-5);
}

TEST(Training, UnevenStagesAndEmulatedHosts) {
  // 3 layers on 2 stages (2 + 1), tensor-parallel pairs on two emulated hosts (TCP between them).
  TrainConfig c = small_config();
  c.layers = 3;
  TrainConfig one = c;
  c.dims = {2, 2, 1};
  ThreadWorld world("native", 4, {}, {"h0", "h0", "h1", "h1"});
  std::vector<double> losses;
  world.run([&](int rank, Communicator& comm) {
    auto l = train(c, comm).losses;
    if (rank == 0) losses = l;
  });
  EXPECT_LT(max_rel_diff(train_on("native", one), losses), 1e-5);
}

// ---------------------------------------------------------------------------------------------------
// the exact collectives of tensor parallelism

TEST(Training, TensorParallelCollectivesAreMegatrons) {
  TrainConfig c = small_config();
  c.dims = {2, 1, 1};
  c.layers = 3, c.micro_batches = 1, c.steps = 1;
  const size_t N = static_cast<size_t>(c.batch * c.seq), C = static_cast<size_t>(c.hidden);
  const auto recorded = record_one_step(c, &ParallelGroups::tp);
  const Call x{OpKind::allreduce, N * C, ReduceOp::sum};  // an activation or its gradient, [N,C]
  std::vector<Call> want = {x};                           // embedding (vocab-parallel)
  for (int l = 0; l < c.layers; ++l) want.insert(want.end(), {x, x});  // attn c_proj, mlp c_proj (row-parallel)
  want.push_back({OpKind::allreduce, N, ReduceOp::max});  // cross-entropy: max,
  want.push_back({OpKind::allreduce, N, ReduceOp::sum});  //   target logit,
  want.push_back({OpKind::allreduce, N, ReduceOp::sum});  //   sum of exp
  want.push_back(x);                                      // output layer's input gradient
  for (int l = 0; l < c.layers; ++l) want.insert(want.end(), {x, x});  // mlp c_fc, attn c_attn input gradients
  EXPECT_EQ(recorded[0], want);
  EXPECT_EQ(recorded[1], want);
}

TEST(Training, PipelineAndDataParallelTraffic) {
  // 2 stages × 2 replicas, 2 micro-batches: each stage sends one [mb*T, C] activation (or gradient) per
  // micro-batch; data parallel all-reduces the gradients in buckets of bucket_mb and the loss on the last stage.
  TrainConfig c = small_config();
  c.dims = {1, 2, 2};
  c.steps = 1;
  c.bucket_mb = 16.0 * 1024 * 4 / 1048576.0;  // 16 Ki floats
  const size_t mbN = static_cast<size_t>(c.batch / 2 / c.micro_batches * c.seq), C = static_cast<size_t>(c.hidden);
  ThreadWorld world("native", 4);
  std::vector<std::vector<Call>> pp(4), dp(4);
  std::vector<size_t> totals(4), wte(4);
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(c, 4);
    ParallelGroups g = ParallelGroups::create(comm, c.dims);
    auto* rp = recorded_by(g.pp);
    auto* rd = recorded_by(g.dp);
    Trainer t(run, g);
    t.step(0);
    auto r = static_cast<size_t>(rank);
    pp[r] = rp->calls, dp[r] = rd->calls, totals[r] = t.layout().total(), wte[r] = t.layout().at("wte.weight").numel;
  });
  for (size_t r = 0; r < 4; ++r) {
    const bool last = r >= 2;  // world rank = tp + 1*(dp + 2*pp)
    // pipeline: 2 activations one way, 2 gradients the other, then the tied-embedding exchange
    std::vector<Call> want_pp;
    OpKind out = last ? OpKind::recv : OpKind::send, back = last ? OpKind::send : OpKind::recv;
    for (auto k : {out, back, out, back}) want_pp.push_back({k, mbN * C, ReduceOp::sum});
    std::sort(want_pp.begin(), want_pp.end(), [](auto& a, auto& b) { return a.kind < b.kind; });
    std::vector<Call> pipeline(pp[r].begin(), pp[r].end() - 2);
    std::sort(pipeline.begin(), pipeline.end(), [](auto& a, auto& b) { return a.kind < b.kind; });
    EXPECT_EQ(pipeline, want_pp) << "rank " << r;
    EXPECT_EQ(pp[r][pp[r].size() - 2], (Call{OpKind::send, wte[r], ReduceOp::sum})) << "rank " << r;
    EXPECT_EQ(pp[r].back(), (Call{OpKind::recv, wte[r], ReduceOp::sum})) << "rank " << r;
    // data parallel: buckets of 16 Ki floats from the end of the gradient buffer, then (last stage) the loss
    std::vector<Call> want_dp;
    for (size_t end = totals[r]; end > 0; end = end > 16384 ? end - 16384 : 0)
      want_dp.push_back({OpKind::allreduce, std::min<size_t>(end, 16384), ReduceOp::sum});
    if (last) want_dp.push_back({OpKind::allreduce, 1, ReduceOp::sum});
    EXPECT_EQ(dp[r], want_dp) << "rank " << r;
  }
}

// ---------------------------------------------------------------------------------------------------
// bad input: a clear error before training, on every rank

std::string resolve_error(const TrainConfig& c, int world) {
  try {
    resolve(c, world);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Training, BadConfigurationsAreRejectedWithTheReason) {
  auto with = [](auto f) {
    TrainConfig c = small_config();
    f(c);
    return c;
  };
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.dims = {2, 2, 1}; }), 2),
              "--tp 2 × --pp 2 × --dp 1 = 4 ranks, but the job has 2");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.dims = {3, 1, 1}; }), 3),
              "--heads 4 is not divisible by --tp 3");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.dims = {1, 3, 1}; }), 3),
              "2 layers cannot fill --pp 3");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.dims = {1, 1, 2}, c.micro_batches = 3; }), 2),
              "--batch 8 is not divisible by --micro-batches 3 × --dp 2");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.hidden = 30; }), 1),
              "--hidden 30 is not divisible by --heads 4");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.schedule = "zigzag"; }), 1), "zigzag");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.data = "/nonexistent/corpus"; }), 1),
              "/nonexistent/corpus: cannot open");
  EXPECT_CONTAINS(resolve_error(with([](auto& c) { c.init_from = "/nonexistent/model.safetensors"; }), 1),
              "/nonexistent/model.safetensors");
}

TEST(Training, EveryRankFailsBeforeAnyTraffic) {
  TrainConfig c = small_config();
  c.dims = {2, 1, 1};
  c.heads = 3, c.hidden = 33;
  ThreadWorld world("native", 2);
  auto errors = world.run_collect([&](int, Communicator& comm) { train(c, comm); });
  for (const auto& e : errors) EXPECT_CONTAINS(testing::message(e), "--heads 3 is not divisible by --tp 2");
  EXPECT_EQ(world.comm(0).sequence(), 0u) << "no collective was issued";
}

// ---------------------------------------------------------------------------------------------------
// checkpoints

std::string temp_path(const std::string& name) {
  return "/tmp/mpcomm-training-test-" + std::to_string(::getpid()) + "-" + name;
}

TEST(Training, SaveFromShardsEqualsSaveFromOneProcessAndLoadsBack) {
  TrainConfig c = small_config();
  c.steps = 2;
  c.save = temp_path("one.safetensors");
  train_on("native", c);
  TrainConfig sharded = c;
  sharded.dims = {2, 2, 1};
  sharded.save = temp_path("sharded.safetensors");
  train_on("native", sharded);
  SafetensorsFile one(c.save), four(sharded.save);
  ASSERT_EQ(one.tensors().size(), four.tensors().size());
  for (const auto& [name, info] : one.tensors()) {
    auto a = one.read_f32(name), b = four.read_f32(name);
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << name << "[" << i << "]";
  }
  EXPECT_EQ(four.metadata().at("n_head"), "4");
  // Continuing from the checkpoint on another split gives the losses of continuing in one process.
  TrainConfig cont = small_config();
  cont.init_from = sharded.save, cont.layers = 0, cont.hidden = 0, cont.heads = 0;
  auto ref = train_on("native", cont);
  cont.dims = {2, 1, 2};
  EXPECT_LT(max_rel_diff(ref, train_on("native", cont)), 1e-5);
  ::unlink(c.save.c_str());
  ::unlink(sharded.save.c_str());
}

TEST(Training, CheckpointWithAWrongShapeOrMissingTensorIsRejected) {
  GPTConfig m{2, 32, 4, 256, 16};
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  for (auto& [name, shape] : full_model_tensors(m)) {
    auto s = shape;
    if (name == "h.1.mlp.c_fc.weight") s = {32, 100};
    size_t n = 1;
    for (auto d : s) n *= static_cast<size_t>(d);
    data.emplace_back(n, 0.01f);
    tensors.push_back({name, s, data.back().data()});
  }
  std::string path = temp_path("bad-shape.safetensors");
  write_safetensors(path, tensors, {{"n_head", "4"}});
  TrainConfig c = small_config();
  c.init_from = path, c.layers = 0, c.hidden = 0, c.heads = 0;
  EXPECT_CONTAINS(resolve_error(c, 1), "tensor 'h.1.mlp.c_fc.weight' has shape [32, 100], the model needs [32, 128]");
  tensors.erase(tensors.begin() + 3);  // h.0.ln_1.bias
  write_safetensors(path, tensors, {{"n_head", "4"}});
  EXPECT_CONTAINS(resolve_error(c, 1), "tensor 'h.0.ln_1.bias' is missing");
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace mpcomm::parallel

namespace mpcomm::parallel {
namespace {

// Replicated parameters (LayerNorms, row-parallel biases, wpe) are updated by every tensor-parallel rank
// from its own copy of the gradient; the copies must stay bit-identical, which holds only if every rank
// gets bit-identical all-reduce results. Likewise the two copies of the tied wte (first and last stage).
class ReplicasStayIdentical : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplicasStayIdentical, AfterTraining) {
  TrainConfig c = small_config();
  c.dims = {4, 2, 1};
  c.heads = 8;
  ThreadWorld world(GetParam(), 8);
  std::vector<std::map<std::string, std::vector<float>>> params(8);
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(c, 8);
    ParallelGroups g = ParallelGroups::create(comm, c.dims);
    Trainer t(run, g);
    for (int k = 0; k < 3; ++k) t.step(k);
    for (const auto& p : t.layout().params())
      if (p.split == Split::replicated || p.name == "wte.weight")
        params[static_cast<size_t>(rank)][p.name].assign(t.params().begin() + p.offset, t.params().begin() + p.offset + p.numel);
  });
  int compared = 0;
  for (int r = 0; r < 8; ++r) {
    Coords me = coords_of(r, c.dims);
    for (const auto& [name, values] : params[static_cast<size_t>(r)]) {
      // the same tensor on tp rank 0 of this stage, and for wte on the other end of the pipeline
      int peer = name == "wte.weight" ? rank_of({me.tp, 1 - me.pp, 0}, c.dims) : rank_of({0, me.pp, 0}, c.dims);
      if (peer == r) continue;
      EXPECT_TRUE(values == params[static_cast<size_t>(peer)].at(name)) << name << " on rank " << r << " vs " << peer;
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReplicasStayIdentical, ::testing::ValuesIn(thread_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mpcomm::parallel
