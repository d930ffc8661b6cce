// Mixture of experts in the trainer (moe.h): every split — data, tensor (with and without sequence
// parallelism), pipeline, and the experts spread over expert-parallel ranks — gives the single-process losses on
// every backend; the all-to-alls carry exactly the router's assignment; the checkpoint holds every expert under
// its documented name and resumes on another split; bad shapes fail before any traffic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "parallel/checkpoint.h"
#include "parallel/safetensors.h"
#include "parallel/train_helpers.h"

namespace mpcomm::parallel {
namespace {

TrainConfig moe_config() {
  TrainConfig c = small_config();
  c.layers = 4;
  c.experts = 4;
  c.top_k = 2;
  c.moe_every = 2;        // layers 1 and 3
  c.aux_loss_coef = 0.1;  // large enough that a wrong load-balancing gradient shows in the loss
  return c;
}

const std::vector<double>& moe_single_process() {
  static const std::vector<double> losses = train_on("native", moe_config());
  return losses;
}

struct Split {
  std::string backend;
  int tp, pp, dp, ep;
  bool sp;
};

std::string name_of(const Split& s) {
  return s.backend + "_tp" + std::to_string(s.tp) + "_pp" + std::to_string(s.pp) + "_dp" + std::to_string(s.dp) +
         "_ep" + std::to_string(s.ep) + (s.sp ? "_sp" : "");
}
void PrintTo(const Split& s, std::ostream* os) { *os << name_of(s); }

class MoE : public ::testing::TestWithParam<Split> {};

TEST_P(MoE, LossesEqualSingleProcess) {
  const Split s = GetParam();
  TrainConfig c = moe_config();
  c.dims = {s.tp, s.pp, s.dp, s.ep};
  c.sequence_parallel = s.sp;
  const auto losses = train_on(s.backend, c);
  EXPECT_LT(max_rel_diff(moe_single_process(), losses), 1e-5);
  EXPECT_LT(losses.back(), losses.front());
}

std::vector<Split> moe_splits() {
  std::vector<Split> out;
  for (const auto& b : testing::thread_backends()) {
    out.push_back({b, 1, 1, 2, 2, false});
    out.push_back({b, 2, 1, 2, 2, true});
    if (b != "native") continue;
    out.push_back({b, 1, 1, 2, 1, false});
    out.push_back({b, 1, 1, 4, 4, false});
    out.push_back({b, 1, 1, 4, 2, false});
    out.push_back({b, 2, 1, 1, 1, false});
    out.push_back({b, 2, 2, 1, 1, true});
    out.push_back({b, 1, 2, 2, 2, false});
    out.push_back({b, 2, 1, 4, 2, true});  // one sequence per micro-batch, cut over the two tensor-parallel ranks
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Splits, MoE, ::testing::ValuesIn(moe_splits()),
                         [](const auto& info) { return name_of(info.param); });

TEST(MoELoss, TheLoadBalancingLossChangesTraining) {
  TrainConfig c = moe_config();
  c.aux_loss_coef = 0;
  EXPECT_GT(max_rel_diff(moe_single_process(), train_on("native", c)), 1e-4);
}

// Four data-parallel ranks, the experts over two: each MoE forward makes one all-to-all of counts and two
// alltoallv, each backward two more; the dispatch's counts per destination are the router's assignments to
// that destination's experts, times the hidden size. And the router's assignments over all ranks equal the
// single-process run's (the same step-0 weights and tokens).
TEST(MoETraffic, AllToAllCountsAreTheRoutersAssignment) {
  TrainConfig c = moe_config();
  c.dims = {1, 1, 4, 2};
  const int n = c.dims.world();
  const size_t C = static_cast<size_t>(c.hidden), El = 2;
  ThreadWorld world("native", n);
  std::vector<std::vector<std::vector<int64_t>>> routing(static_cast<size_t>(n));
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(c, n);
    ParallelGroups g = ParallelGroups::create(comm, c.dims);
    auto* rec = recorded_by(g.ep);
    Trainer t(run, g);
    t.step(0);
    const auto routed = t.routing();
    routing[static_cast<size_t>(rank)] = routed;
    // 2 micro-batches × 2 MoE layers
    ASSERT_EQ(routed.size(), 4u);
    size_t forwards = 0;
    for (size_t i = 0; i < rec->calls.size(); ++i) {
      if (rec->calls[i].kind != OpKind::alltoall) continue;
      EXPECT_EQ(rec->calls[i].count, El);
      // the next alltoallv (the front door may check the counts first, with an allgather)
      size_t next = i + 1;
      while (next < rec->calls.size() && rec->calls[next].kind != OpKind::alltoallv) ++next;
      ASSERT_LT(next, rec->calls.size());
      const auto& dispatch = rec->calls[next];
      ASSERT_EQ(dispatch.send_counts.size(), 2u);
      const auto& r = routed.at(forwards);
      for (size_t d = 0; d < 2; ++d)
        EXPECT_EQ(dispatch.send_counts[d], C * static_cast<size_t>(r[d * El] + r[d * El + 1])) << "destination " << d;
      EXPECT_EQ(dispatch.count, C * static_cast<size_t>(c.top_k) * 16 * 1)  // a micro-batch: 1 sequence of 16
          << "every token goes to top-k experts";
      ++forwards;
    }
    EXPECT_EQ(forwards, routed.size());
    const auto v =
        std::count_if(rec->calls.begin(), rec->calls.end(), [](const Call& k) { return k.kind == OpKind::alltoallv; });
    EXPECT_EQ(v, static_cast<long>(4 * routed.size())) << "two per forward, two per backward";
  });
  // per MoE layer, the assignments of the whole batch
  std::map<size_t, std::vector<int64_t>> spread, one;
  for (const auto& rank : routing)
    for (size_t i = 0; i < rank.size(); ++i) {
      auto& into = spread[i % 2];
      into.resize(4, 0);
      for (size_t e = 0; e < 4; ++e) into[e] += rank[i][e];
    }
  TrainConfig single = moe_config();
  ThreadWorld w1("native", 1);
  w1.run([&](int, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(single, 1);
    ParallelGroups g = ParallelGroups::create(comm, single.dims);
    Trainer t(run, g);
    t.step(0);
    const auto routed = t.routing();
    for (size_t i = 0; i < routed.size(); ++i) {
      auto& into = one[i % 2];
      into.resize(4, 0);
      for (size_t e = 0; e < 4; ++e) into[e] += routed[i][e];
    }
  });
  EXPECT_EQ(spread, one);
}

TEST(MoEResolve, BadShapesAreRefusedBeforeAnyTraffic) {
  auto error = [](TrainConfig c) -> std::string {
    try {
      resolve(c, c.dims.world());
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  TrainConfig c = moe_config();
  c.dims = {1, 1, 3, 3};
  c.batch = 12;
  EXPECT_CONTAINS(error(c), "--experts 4 is not divisible by --expert-parallel 3");
  c = moe_config();
  c.dims = {1, 1, 2, 4};
  EXPECT_CONTAINS(error(c), "must divide --dp 2");
  c = moe_config();
  c.top_k = 5;
  EXPECT_CONTAINS(error(c), "--top-k 5");
  c = moe_config();
  c.dims = {1, 1, 2, 1};
  c.zero = 1;
  EXPECT_CONTAINS(error(c), "--zero 1 with --experts");
  c = moe_config();
  c.experts = 0;
  c.dims = {1, 1, 2, 2};
  EXPECT_CONTAINS(error(c), "--expert-parallel 2 needs --experts");
  c = moe_config();
  c.moe_every = 5;
  EXPECT_CONTAINS(error(c), "--moe-every 5 leaves none of the 4 layers");
}

// Saved from experts over two ranks (tp 2 too): every expert under h.<i>.mlp.experts.<e>.*, the same model the
// single-process run saves; loaded on another split, training goes on as it does on one process.
TEST(MoECheckpoint, HoldsEveryExpertAndResumesOnAnotherSplit) {
  const std::string dir = "/tmp/mpcomm-moe-ckpt-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  TrainConfig c = moe_config();
  c.steps = 2;
  c.save = dir + "/one.safetensors";
  train_on("native", c);
  c.dims = {2, 1, 2, 2};
  c.save = dir + "/spread.safetensors";
  train_on("native", c);
  SafetensorsFile one(dir + "/one.safetensors"), spread(dir + "/spread.safetensors");
  ASSERT_EQ(one.tensors().size(), spread.tensors().size());
  for (const char* name : {"h.1.mlp.router.weight", "h.1.mlp.experts.0.c_fc.weight", "h.3.mlp.experts.3.c_proj.bias",
                           "h.0.mlp.c_fc.weight"})
    EXPECT_TRUE(spread.tensors().count(name)) << name;
  EXPECT_FALSE(spread.tensors().count("h.1.mlp.c_fc.weight"));
  EXPECT_EQ(spread.metadata().at("n_experts"), "4");
  for (const auto& [name, info] : one.tensors()) {
    auto a = one.read_f32(name), b = spread.read_f32(name);
    ASSERT_EQ(a.size(), b.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    // AdamW's first steps move a weight by ~lr whatever its gradient's size, so a near-zero gradient computed in
    // another order can move it differently by a small part of lr (3e-3); a missing or wrong expert is ~1e-2 off.
    EXPECT_LT(worst, 1e-4) << name;
  }
  TrainConfig resume = moe_config();
  resume.experts = 0;  // from the checkpoint
  resume.init_from = dir + "/spread.safetensors";
  resume.steps = 3;
  const auto on_one = train_on("native", resume);
  resume.dims = {1, 2, 2, 2};
  EXPECT_LT(max_rel_diff(on_one, train_on("native", resume)), 1e-5);
  ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace mpcomm::parallel
