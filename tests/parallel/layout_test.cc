// How the model is cut: every element of every tensor belongs to exactly one tensor-parallel shard (once
// per stage that holds the tensor), stages split the layers evenly, and the seeded initialization is the
// same model whatever the split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "parallel/layout.h"

namespace mpcomm::parallel {
namespace {

TEST(Layout, StagesSplitLayersEvenlyEarlierStagesTakeTheExtra) {
  std::vector<std::pair<int, int>> got;
  for (int s = 0; s < 3; ++s) {
    auto r = stage_range(5, 3, s);
    got.push_back({r.first_layer, r.end_layer});
    EXPECT_EQ(r.first, s == 0);
    EXPECT_EQ(r.last, s == 2);
  }
  EXPECT_EQ(got, (std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 5}}));
  EXPECT_EQ(padded_vocab(256, 3), 258);
  EXPECT_EQ(padded_vocab(256, 4), 256);
}

TEST(Layout, ShardsCoverEveryElementExactlyOnce) {
  GPTConfig cfg{3, 24, 6, 50, 8};  // vocab 50: padded for tp 3 and 4
  for (int tp : {1, 2, 3}) {
    for (int pp : {1, 2, 3}) {
      // element -> how many (tp rank, stage) shards hold it, per tensor
      std::map<std::string, std::vector<int>> cover;
      std::map<std::string, Split> split;
      for (auto& [name, shape] : full_model_tensors(cfg)) cover[name].assign(static_cast<size_t>(shape[0] * (shape.size() == 2 ? shape[1] : 1)), 0);
      for (int s = 0; s < pp; ++s)
        for (int t = 0; t < tp; ++t) {
          ShardLayout l(cfg, tp, t, pp, s);
          size_t offset = 0;
          for (const auto& p : l.params()) {
            EXPECT_EQ(p.offset, offset) << p.name;
            offset += p.numel;
            split[p.name] = p.split;
            size_t local = 0;
            for (const auto& seg : l.segments(p)) {
              EXPECT_LE(seg.local_offset + seg.len, p.numel) << p.name;
              for (size_t i = 0; i < seg.len; ++i) cover[p.name].at(seg.full_offset + i)++;
              local += seg.len;
            }
            if (p.split != Split::vocab_rows) {
              EXPECT_EQ(local, p.numel) << p.name;
            }
          }
          EXPECT_EQ(offset, l.total());
        }
      for (const auto& [name, counts] : cover) {
        // wte lives on the first and the last stage (tied), everything else on one stage; replicated
        // tensors are on every tensor-parallel rank, the others cut into disjoint pieces.
        int want = (name == "wte.weight" && pp > 1 ? 2 : 1) * (split.at(name) == Split::replicated ? tp : 1);
        for (size_t i = 0; i < counts.size(); ++i)
          ASSERT_EQ(counts[i], want) << name << " element " << i << " with tp " << tp << ", pp " << pp;
      }
    }
  }
}

// The full model assembled from the shards of a split.
std::map<std::string, std::vector<float>> assemble(const GPTConfig& cfg, int tp, int pp, uint64_t seed) {
  std::map<std::string, std::vector<float>> full;
  for (auto& [name, shape] : full_model_tensors(cfg)) full[name].assign(static_cast<size_t>(shape[0] * (shape.size() == 2 ? shape[1] : 1)), NAN);
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t) {
      ShardLayout l(cfg, tp, t, pp, s);
      std::vector<float> params(l.total());
      init_params(l, seed, params.data());
      for (const auto& p : l.params())
        for (const auto& seg : l.segments(p))
          std::copy_n(params.data() + p.offset + seg.local_offset, seg.len, full[p.name].data() + seg.full_offset);
    }
  return full;
}

TEST(Layout, SeededInitializationIsTheSameModelWhateverTheSplit) {
  GPTConfig cfg{2, 16, 4, 30, 8};
  auto one = assemble(cfg, 1, 1, 3), split = assemble(cfg, 2, 2, 3), other_seed = assemble(cfg, 1, 1, 4);
  EXPECT_EQ(one, split);
  EXPECT_NE(one.at("wte.weight"), other_seed.at("wte.weight"));
  EXPECT_EQ(one.at("h.1.ln_2.weight"), std::vector<float>(16, 1.0f));
  EXPECT_EQ(one.at("h.0.mlp.c_fc.bias"), std::vector<float>(64, 0.0f));
  // N(0, 0.02) for weights; the residual projections are scaled down by sqrt(2 L)
  auto rms = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / v.size());
  };
  EXPECT_NEAR(rms(one.at("wte.weight")), 0.02, 0.003);
  EXPECT_NEAR(rms(one.at("h.0.mlp.c_proj.weight")), 0.01, 0.0015);
}

}  // namespace
}  // namespace mpcomm::parallel
