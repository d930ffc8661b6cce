// The planner: its memory accounting against what the trainer really holds, the published models' sizes, the
// splits it can and cannot make, and the errors it gives.
#include "parallel/planner.h"

#include <gtest/gtest.h>

#include <vector>

#include "harness/thread_world.h"
#include "mpcomm/error.h"
#include "parallel/gpt.h"
#include "parallel/tp_layers.h"

namespace mpcomm::parallel {
namespace {

#define EXPECT_THROW_CONTAINS(stmt, part)                                                 \
  try {                                                                                   \
    stmt;                                                                                 \
    ADD_FAILURE() << "no error from " #stmt;                                              \
  } catch (const InvalidArgument& e) {                                                    \
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "in: " << e.what(); \
  }

TEST(Planner, TrainerParameterCountsAreTheShardLayoutsOnEveryStage) {
  for (const auto& [layers, hidden, heads, vocab] :
       std::vector<std::tuple<int, int, int, int>>{{2, 32, 4, 256}, {5, 48, 6, 101}, {7, 64, 8, 50257}}) {
    GPTConfig cfg;
    cfg.layers = layers, cfg.hidden = hidden, cfg.heads = heads, cfg.vocab = vocab, cfg.positions = 40;
    for (int tp : {1, 2}) {
      for (int pp : {1, 2, 3}) {
        if (pp > layers) continue;
        for (int s = 0; s < pp; ++s)
          for (int t = 0; t < tp; ++t)
            EXPECT_EQ(trainer_params(cfg, tp, pp, s), ShardLayout(cfg, tp, t, pp, s).total())
                << "layers " << layers << " tp " << tp << " pp " << pp << " stage " << s;
      }
    }
  }
}

// What a GPTStage holds after the forward of `micros` micro-batches, against the planner's count.
void check_activations(int tp, int pp, int stage, int micros) {
  GPTConfig cfg;
  cfg.layers = 4, cfg.hidden = 32, cfg.heads = 4, cfg.vocab = 67, cfg.positions = 16;
  const size_t B = 2, T = 8, N = B * T;
  testing::ThreadWorld world("native", tp);
  world.run([&](int rank, Communicator& comm) {
    ShardLayout layout(cfg, tp, rank, pp, stage);
    std::vector<float> params(layout.total()), grads(layout.total(), 0);
    init_params(layout, 3, params.data());
    TensorParallel t(tp > 1 ? &comm : nullptr);
    GPTStage g(layout, t, params.data(), grads.data(), B, T);
    std::vector<int32_t> tokens(N), targets(N);
    for (size_t i = 0; i < N; ++i)
      tokens[i] = static_cast<int32_t>(i % 67), targets[i] = static_cast<int32_t>((i + 1) % 67);
    std::vector<float> input(N * 32, 0.01f);
    double loss = 0;
    for (int m = 0; m < micros; ++m) g.forward(m, input.data(), tokens.data(), targets.data(), &loss);
    EXPECT_EQ(g.activation_floats(), micros * trainer_activation_floats(cfg, tp, pp, stage, B, T))
        << "tp " << tp << " pp " << pp << " stage " << stage;
  });
}

TEST(Planner, TrainerActivationCountsAreWhatAStageHolds) {
  check_activations(1, 1, 0, 1);
  check_activations(1, 2, 0, 2);
  check_activations(1, 2, 1, 1);
  check_activations(2, 1, 0, 1);
  check_activations(2, 3, 1, 2);
}

TEST(Planner, PublishedModelsHaveTheirPublishedSizes) {
  // Hugging Face's counts: GPT-2 124,439,808 parameters; Llama 2 7B 6,738,415,616.
  EXPECT_EQ(static_cast<long long>(total_params(model_by_name("gpt2"))), 124439808LL);
  EXPECT_EQ(static_cast<long long>(total_params(model_by_name("llama2-7b"))), 6738415616LL);
  EXPECT_NEAR(total_params(model_by_name("gpt3-175b")) / 1e9, 175, 1.5);
  EXPECT_NEAR(total_params(model_by_name("llama2-70b")) / 1e9, 69, 0.5);
}

tuning::Profile flat_profile(double flops, double memory_gb, double bw_gbs) {
  const std::string text =
      "mpcomm-profile 1\nname = flat\nranks_per_host = 8\nflops = " + std::to_string(flops) +
      "\nmemory_gb = " + std::to_string(memory_gb) +
      "\nmfu = 0.5\nbackend x overhead_us=0 intra_alpha_us=0 intra_bw_gbs=" + std::to_string(bw_gbs) +
      " inter_alpha_us=0 inter_bw_gbs=" + std::to_string(bw_gbs) + "\n";
  return tuning::parse_profile(text, "flat");
}

TEST(Planner, MemoryAndTimeOfOneSplitByHand) {
  ModelSpec m = model_by_name("gpt2");
  PlanRequest r;
  r.model = m, r.gpus = 1, r.gpus_per_node = 1, r.global_batch = 8, r.micro_batch = 2;
  const auto p = plan(r, flat_profile(1e14, 80, 1e6));
  ASSERT_EQ(p.ranked.size(), 1u);
  const Candidate& c = p.ranked[0];
  const double P = total_params(m);
  EXPECT_DOUBLE_EQ(c.memory.params, P);
  EXPECT_DOUBLE_EQ(c.memory.weights, 2 * P);
  EXPECT_DOUBLE_EQ(c.memory.grads, 4 * P);
  EXPECT_DOUBLE_EQ(c.memory.optimizer, 12 * P);
  // Selective recomputation: 34·s·b·h bytes a layer, one micro-batch in flight without a pipeline, + the logits.
  EXPECT_DOUBLE_EQ(c.memory.activations, 12 * 34.0 * 1024 * 2 * 768 + 1024.0 * 2 * 50257 * 4);
  EXPECT_EQ(c.micro_batches, 4);
  const double flops = (6 * P + 12.0 * 12 * 768 * 1024 * 4.0 / 3) * 1024 * 8;
  EXPECT_NEAR(c.compute, flops / (1e14 * 0.5), 1e-9);
  EXPECT_EQ(c.tp_comm + c.pp_comm + c.dp_comm + c.bubble, 0);
  EXPECT_NEAR(c.step, c.compute, 1e-12);
}

TEST(Planner, ThePipelineBubbleAndTheOptimizerSplitFollowTheSplit) {
  PlanRequest r;
  r.model = model_by_name("gpt2-xl"), r.gpus = 8, r.gpus_per_node = 8, r.global_batch = 64, r.micro_batch = 1;
  const auto p = plan(r, flat_profile(1e14, 80, 1e6));
  for (const auto& c : p.ranked) {
    EXPECT_EQ(c.tp * c.pp * c.dp, 8);
    EXPECT_EQ(c.micro_batches, 64 / c.dp);
    EXPECT_NEAR(c.bubble, (c.pp - 1) * (c.compute + c.tp_comm) / c.micro_batches, 1e-9 * c.step) << c.tp << c.pp;
    EXPECT_NEAR(c.memory.optimizer, 12 * c.memory.params / c.dp, 1);
  }
  for (size_t i = 1; i < p.ranked.size(); ++i) EXPECT_LE(p.ranked[i - 1].step, p.ranked[i].step);
  // gpt2-xl has 25 heads: tp 2, 4 and 8 do not divide them, and the planner says so.
  bool said = false;
  for (const auto& c : p.rejected)
    said |= c.tp == 2 && c.why_not.find("does not divide the heads") != std::string::npos;
  EXPECT_TRUE(said);
  for (const auto& c : p.ranked) EXPECT_EQ(c.tp, 1);
}

// The communication terms on two nodes, each from the cost model with the shape the split gives its group.
TEST(Planner, CommunicationTermsUseTheGroupsShapes) {
  PlanRequest r;
  r.model = model_by_name("gpt2"), r.gpus = 16, r.gpus_per_node = 8, r.global_batch = 32, r.micro_batch = 2;
  const auto prof = tuning::published_profile("dgx-a100-ib200");
  const auto& nccl = prof.backend("nccl");
  const auto p = plan(r, prof);
  const double s = 1024, b = 2, h = 768, act = s * b * h * 2;
  auto find = [&](int tp, int pp, int dp) -> const Candidate& {
    for (const auto& c : p.ranked)
      if (c.tp == tp && c.pp == pp && c.dp == dp) return c;
    ADD_FAILURE() << "no split tp " << tp << " pp " << pp << " dp " << dp;
    return p.ranked.front();
  };
  // tp 2 pp 1 dp 8: 4 all-reduces a layer and micro-batch within a node; dp over 4 ranks a node on 2 nodes.
  const Candidate& a = find(2, 1, 8);
  EXPECT_NEAR(a.tp_comm, a.micro_batches * 4 * 12 * tuning::predict(nccl, "allreduce", act, {2, 1}).seconds, 1e-12);
  EXPECT_NEAR(a.dp_comm, tuning::predict(nccl, "allreduce", a.memory.params * 4, {8, 2}).seconds, 1e-12);
  EXPECT_EQ(a.pp_comm, 0);
  // tp 1 pp 4 dp 4: each stage's 4 ranks on one node, two stages a node: the pipeline crosses nodes, 4 ranks of
  // a node sending at once; dp within a node.
  const Candidate& c = find(1, 4, 4);
  tuning::Phase ph;
  ph.steps_inter = 1, ph.bytes_rank = act, ph.bytes_host = 4 * act;
  const auto k = tuning::constants(nccl, "sendrecv", act, 2);
  EXPECT_NEAR(c.pp_comm, 2 * (c.micro_batches + 3) * (k.overhead_s + tuning::phase_seconds(ph, k.intra, k.inter)),
              1e-12);
  EXPECT_NEAR(c.dp_comm, tuning::predict(nccl, "allreduce", c.memory.params * 4, {4, 1}).seconds, 1e-12);
  // dp 5 does not fill its nodes evenly (4 a node): planned as the fullest node's count on each, not refused.
  r.gpus = 40, r.global_batch = 40, r.micro_batch = 1;
  const auto q = plan(r, prof);
  bool found = false;
  for (const auto& x : q.ranked) {
    if (x.tp != 2 || x.pp != 4 || x.dp != 5) continue;
    found = true;
    EXPECT_NEAR(x.dp_comm, tuning::predict(nccl, "allreduce", x.memory.params * 4, {6, 2}).seconds, 1e-12);
  }
  EXPECT_TRUE(found);
}

TEST(Planner, GPT3OnAThousandH100sFindsSplitsThatFit) {
  PlanRequest r;
  r.model = model_by_name("gpt3-175b"), r.gpus = 1024, r.gpus_per_node = 8, r.global_batch = 1536;
  const auto prof = tuning::published_profile("dgx-h100-ndr400");
  const auto p = plan(r, prof);
  ASSERT_FALSE(p.ranked.empty());
  for (const auto& c : p.ranked) EXPECT_LE(c.memory.total(), 0.9 * 80e9);
  // Without tensor parallelism, 8 stages leave 22 B parameters a GPU (18 bytes each): rejected for memory.
  bool said = false;
  for (const auto& c : p.rejected) said |= c.tp == 1 && c.pp == 8 && c.why_not.find("GB a GPU") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_NE(p.why_best.find("wins over"), std::string::npos) << p.why_best;
}

TEST(Planner, BadInputIsRefusedNamingWhatIsWrong) {
  PlanRequest r;
  r.model = model_by_name("gpt2"), r.gpus = 4, r.gpus_per_node = 8, r.global_batch = 8;
  const auto prof = tuning::published_profile("dgx-a100-ib200");
  EXPECT_THROW_CONTAINS(plan(r, prof), "--gpus-per-node 8 is more than --gpus 4");
  r.gpus = 12;
  EXPECT_THROW_CONTAINS(plan(r, prof), "not a whole number of nodes");
  r.gpus = 8, r.recompute = "some";
  EXPECT_THROW_CONTAINS(plan(r, prof), "--recompute");
  r.recompute = "full", r.model.hidden = 770;
  EXPECT_THROW_CONTAINS(plan(r, prof), "not a multiple of heads");
  r.model = model_by_name("gpt2");
  EXPECT_THROW_CONTAINS(plan(r, tuning::parse_profile("mpcomm-profile 1\nname = c\nranks_per_host = 2\nbackend b "
                                                      "overhead_us=1 intra_alpha_us=1 intra_bw_gbs=1 inter_alpha_us=1 "
                                                      "inter_bw_gbs=1\n",
                                                      "c")),
                        "has no flops");
  EXPECT_THROW_CONTAINS(model_by_name("gpt5"), "unknown model 'gpt5' (known: gpt2");
}

}  // namespace
}  // namespace mpcomm::parallel
