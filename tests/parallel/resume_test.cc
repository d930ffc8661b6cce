// A checkpoint written in any mode of the trainer is the usual model: a run resumes from it on another split,
// in another mode, and trains as one process resuming from it does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

#include "parallel/train_helpers.h"

namespace mpcomm::parallel {
namespace {

struct Case {
  const char* name;
  std::function<void(TrainConfig&)> saved_by, resumed_by;
};

TrainConfig four_layers() {
  TrainConfig c = small_config();
  c.layers = 4;
  return c;
}

void interleaved(TrainConfig& c, int tp, int dp) {
  c.dims = {tp, 2, dp};
  c.schedule = "interleaved";
  c.virtual_stages = 2;
}

std::vector<Case> cases() {
  return {
      {"sequence_parallel_to_data_parallel",
       [](TrainConfig& c) {
         c.dims = {2, 2, 1}, c.sequence_parallel = true;
       },
       [](TrainConfig& c) {
         c.dims = {1, 1, 2};
       }},
      {"data_parallel_to_sequence_parallel",
       [](TrainConfig& c) {
         c.dims = {1, 1, 2};
       },
       [](TrainConfig& c) {
         c.dims = {2, 1, 2}, c.sequence_parallel = true;
       }},
      {"bfloat16_wire_to_float32",
       [](TrainConfig& c) {
         c.dims = {2, 1, 2}, c.comm_dtype = "bfloat16";
       },
       [](TrainConfig& c) {
         c.dims = {1, 2, 2};
       }},
      {"interleaved_to_tensor_parallel", [](TrainConfig& c) { interleaved(c, 1, 1); },
       [](TrainConfig& c) {
         c.dims = {2, 1, 2};
       }},
      {"tensor_parallel_to_interleaved",
       [](TrainConfig& c) {
         c.dims = {2, 2, 1};
       },
       [](TrainConfig& c) { interleaved(c, 1, 2); }},
      {"zero_to_interleaved_sequence_parallel",
       [](TrainConfig& c) {
         c.dims = {1, 1, 4}, c.zero = 1;
       },
       [](TrainConfig& c) {
         interleaved(c, 2, 1);
         c.sequence_parallel = true;
       }},
  };
}

TEST(Resume, EveryModesCheckpointResumesOnAnotherSplit) {
  const std::string path = "/tmp/mpcomm-resume-test-" + std::to_string(::getpid()) + ".safetensors";
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    TrainConfig c = four_layers();
    c.steps = 2;
    c.save = path;
    k.saved_by(c);
    train_on("native", c);
    TrainConfig one = four_layers();
    one.init_from = path;
    one.steps = 3;
    const auto expected = train_on("native", one);
    TrainConfig other = one;
    k.resumed_by(other);
    const auto losses = train_on("native", other);
    EXPECT_LT(max_rel_diff(expected, losses), 1e-5);
    // resumed, not started again: the first loss is below the fresh model's
    TrainConfig fresh = four_layers();
    fresh.steps = 1;
    EXPECT_LT(losses.front(), train_on("native", fresh).front());
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mpcomm::parallel
