// mpcomm train against PyTorch (Debian's python3-torch): the same GPT-2, from the same safetensors
// weights, on the same data, trained with torch.optim.AdamW by scripts/gpt_reference.py. The weights are
// made by the Python side, so nothing of the C++ model is trusted to build the reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>

#include "harness/process.h"
#include "parallel/safetensors.h"

namespace mpcomm::parallel {
namespace {

using testing::run_command;

const std::string kCli = MPCOMM_CLI;
const std::string kReference = std::string("/usr/bin/python3 ") + MPCOMM_GPT_REFERENCE;

struct TempDir {
  std::string path = "/tmp/mpcomm-torch-test-" + std::to_string(::getpid()) + "-" + testing::unique_tag();
  TempDir() { run_command("mkdir -p " + path); }
  ~TempDir() { run_command("rm -rf " + path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::vector<double> read_losses(const std::string& path) {
  std::ifstream f(path);
  std::vector<double> out;
  std::string line;
  int k = 0;
  while (std::getline(f, line)) {
    // {"step": k, "loss": x} — the step first, as the format says
    std::string want = "{\"step\":" + std::to_string(k);
    std::string compact;
    for (char ch : line)
      if (ch != ' ') compact += ch;
    EXPECT_EQ(compact.rfind(want, 0), 0u) << path << ": " << line;
    out.push_back(std::stod(compact.substr(compact.find("\"loss\":") + 7)));
    ++k;
  }
  return out;
}

void expect_same_losses(const std::vector<double>& torch, const std::vector<double>& ours, size_t steps) {
  ASSERT_EQ(torch.size(), steps);
  ASSERT_EQ(ours.size(), steps);
  double worst = 0;
  for (size_t k = 0; k < steps; ++k) worst = std::max(worst, std::fabs(ours[k] - torch[k]) / std::fabs(torch[k]));
  std::printf("max relative loss difference to PyTorch over %zu steps: %.3g\n", steps, worst);
  EXPECT_LT(worst, 1e-4);
  EXPECT_LT(torch.back(), torch.front());
}

// Largest |a - b| over every tensor of two checkpoints with the same names.
double max_weight_difference(const std::string& a_path, const std::string& b_path) {
  SafetensorsFile a(a_path), b(b_path);
  EXPECT_EQ(a.tensors().size(), b.tensors().size());
  double worst = 0;
  for (const auto& [name, info] : a.tensors()) {
    auto x = a.read_f32(name), y = b.read_f32(name);
    EXPECT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) worst = std::max(worst, double(std::fabs(x[i] - y[i])));
  }
  return worst;
}

TEST(PyTorch, TwoByTwoPipelineAndTensorParallelEqualsTorchOverTenSteps) {
  TempDir dir;
  auto r = run_command(kReference + " --make-init " + (dir / "init.safetensors") +
                       " --layers 2 --hidden 48 --heads 4 --vocab 256 --positions 32 --seed 5");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string common = " --seq 32 --batch 8 --steps 10 --init-from " + (dir / "init.safetensors");
  r = run_command(kReference + common + " --data /usr/share/common-licenses/GPL-3 --loss-log " + (dir / "torch.jsonl") +
                  " --save " + (dir / "torch.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(kCli + " train -n 4 --tp 2 --pp 2 --micro-batches 2" + common + " --loss-log " +
                  (dir / "ours.jsonl") + " --save " + (dir / "ours.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(read_losses(dir / "torch.jsonl"), read_losses(dir / "ours.jsonl"), 10);
  double dw = max_weight_difference(dir / "torch.safetensors", dir / "ours.safetensors");
  std::printf("largest weight difference after 10 AdamW steps: %.3g\n", dw);
  EXPECT_LT(dw, 1e-4);
}

TEST(PyTorch, TokenFileWithAPaddedVocabularyEqualsTorch) {
  // 301 token ids over 2 tensor-parallel ranks: the table is padded to 302 rows.
  TempDir dir;
  std::vector<uint16_t> ids(5000);
  std::mt19937 rng(11);
  for (auto& id : ids) id = static_cast<uint16_t>(rng() % 301 % (1 + rng() % 301));  // skewed, so there is something to learn
  ids[17] = 300;
  std::ofstream(dir / "tokens.bin", std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), ids.size() * 2);
  auto r = run_command(kReference + " --make-init " + (dir / "init.safetensors") +
                       " --layers 2 --hidden 32 --heads 2 --vocab 301 --positions 16 --seed 9");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string common = " --seq 16 --batch 8 --steps 6 --lr 0.003 --weight-decay 0.1 --beta2 0.99 --init-from " +
                             (dir / "init.safetensors") + " --tokens " + (dir / "tokens.bin");
  r = run_command(kReference + common + " --loss-log " + (dir / "torch.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(kCli + " train -n 4 --tp 2 --dp 2 --micro-batches 2" + common + " --loss-log " + (dir / "ours.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(read_losses(dir / "torch.jsonl"), read_losses(dir / "ours.jsonl"), 6);
}

// --comm-dtype bfloat16 between 2 pipeline stages: the activations and gradients crossing the boundary and the
// tied wte's two gradients rounded to bfloat16, exactly where the reference rounds them (its --pp 2); and within
// 1e-2 of the float32 run after 20 steps.
TEST(PyTorch, BFloat16OnTheWireEqualsTheReferenceDoingTheSameCasts) {
  TempDir dir;
  auto r = run_command(kReference + " --make-init " + (dir / "init.safetensors") +
                       " --layers 3 --hidden 48 --heads 4 --vocab 256 --positions 32 --seed 5");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string common = " --seq 32 --batch 8 --steps 20 --lr 0.003 --init-from " + (dir / "init.safetensors");
  const std::string data = " --data /usr/share/common-licenses/GPL-3";
  r = run_command(kReference + common + data + " --comm-dtype bfloat16 --pp 2 --loss-log " + (dir / "torch.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(kReference + common + data + " --loss-log " + (dir / "torch32.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string backend : {"native", "gloo"}) {
    r = run_command(kCli + " train -n 2 --pp 2 --micro-batches 2 --comm-dtype bfloat16 --backend " + backend + common +
                    " --loss-log " + (dir / "ours.jsonl"));
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_losses(read_losses(dir / "torch.jsonl"), read_losses(dir / "ours.jsonl"), 20);
  }
  // With 2 data-parallel replicas too: the reference computes each replica's gradient and sums them as the wire
  // does (bf16(Σ bf16(g_r))); ours is closer to it than to the reference summing in float32.
  r = run_command(kReference + common + data + " --comm-dtype bfloat16 --pp 2 --dp 2 --loss-log " +
                  (dir / "torch_dp.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(kCli + " train -n 4 --pp 2 --dp 2 --micro-batches 2 --comm-dtype bfloat16" + common + " --loss-log " +
                  (dir / "ours_dp.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto ours_dp = read_losses(dir / "ours_dp.jsonl"), torch_dp = read_losses(dir / "torch_dp.jsonl");
  expect_same_losses(torch_dp, ours_dp, 20);
  double to_dp = 0, to_single = 0;
  for (size_t k = 0; k < 20; ++k)
    to_dp = std::max(to_dp, std::fabs(ours_dp[k] - torch_dp[k])),
    to_single = std::max(to_single, std::fabs(ours_dp[k] - read_losses(dir / "torch.jsonl")[k]));
  EXPECT_LT(to_dp, to_single) << "the replicas' rounded gradients are what the reference sums";
  const auto bf16 = read_losses(dir / "torch.jsonl"), fp32 = read_losses(dir / "torch32.jsonl");
  EXPECT_LT(std::fabs(bf16.back() - fp32.back()) / fp32.back(), 1e-2);
  EXPECT_NE(bf16.back(), fp32.back()) << "the casts change something";
}

// Mixture of experts: the reference's router, top-k and per-sequence load-balancing loss written plainly in
// PyTorch (every expert a loop over its tokens); ours with the experts over 2 expert-parallel ranks, tensor
// parallelism with sequence parallelism, and over 2 pipeline stages. From the same safetensors weights.
TEST(PyTorch, MixtureOfExpertsEqualsTorch) {
  TempDir dir;
  auto r =
      run_command(kReference + " --make-init " + (dir / "init.safetensors") +
                  " --layers 4 --hidden 32 --heads 4 --vocab 256 --positions 16 --seed 4 --experts 4 --moe-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string common = " --seq 16 --batch 8 --steps 10 --lr 0.003 --top-k 2 --aux-loss-coef 0.5 --init-from " +
                             (dir / "init.safetensors") + " --data /usr/share/common-licenses/GPL-3";
  r = run_command(kReference + common + " --loss-log " + (dir / "torch.jsonl") + " --save " +
                  (dir / "torch.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string split : {"-n 4 --tp 2 --dp 2 --expert-parallel 2 --sequence-parallel --micro-batches 2",
                                  "-n 4 --pp 2 --dp 2 --expert-parallel 2 --micro-batches 2"}) {
    r = run_command(kCli + " train " + split + common + " --loss-log " + (dir / "ours.jsonl") + " --save " +
                    (dir / "ours.safetensors"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("mixture of experts (4 experts, top-2, over 2 expert-parallel ranks)"), std::string::npos)
        << r.output;
    expect_same_losses(read_losses(dir / "torch.jsonl"), read_losses(dir / "ours.jsonl"), 10);
    EXPECT_LT(max_weight_difference(dir / "torch.safetensors", dir / "ours.safetensors"), 1e-3) << split;
  }
  // bfloat16 on the wire: the rows to and from the experts rounded as the reference rounds them, and the pipeline
  // boundary's casts.
  r = run_command(kReference + common + " --comm-dtype bfloat16 --pp 2 --loss-log " + (dir / "torch16.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(kCli + " train -n 2 --pp 2 --micro-batches 2 --comm-dtype bfloat16" + common + " --loss-log " +
                  (dir / "ours16.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(read_losses(dir / "torch16.jsonl"), read_losses(dir / "ours16.jsonl"), 10);
  EXPECT_NE(read_losses(dir / "torch16.jsonl"), read_losses(dir / "torch.jsonl")) << "the casts change something";
}

TEST(TrainCli, BadInputFailsBeforeTrainingWithANonZeroExit) {
  TempDir dir;
  auto r = run_command(kCli + " train -n 4 --tp 3 --steps 1 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--tp 3 × --pp 1 × --dp 1 = 3 ranks, but the job has 4"), std::string::npos) << r.output;
  std::ofstream(dir / "garbage.safetensors") << "this is not a checkpoint";
  r = run_command(kCli + " train -n 2 --tp 2 --init-from " + (dir / "garbage.safetensors") + " 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find(dir / "garbage.safetensors"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step"), std::string::npos) << "no training started: " << r.output;
  r = run_command(kCli + " train -n 2 --pp 2 --layers 1 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("1 layers cannot fill --pp 2"), std::string::npos) << r.output;
  r = run_command(kCli + " train -n 2 --tp 2 --zero 1 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--zero 1 shards the optimizer over the data-parallel ranks, and --dp is 1"),
            std::string::npos)
      << r.output;
  r = run_command(kCli + " train -n 2 --dp 2 --comm-dtype float16 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--comm-dtype 'float16' is not one of float32, bfloat16"), std::string::npos) << r.output;
  r = run_command(kCli + " train -n 2 --dp 2 --zero 3 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--zero 3: stage 0 or 1"), std::string::npos) << r.output;
  r = run_command(kCli + " train -n 6 --dp 6 --batch 12 --experts 4 --expert-parallel 3 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--experts 4 is not divisible by --expert-parallel 3 ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mpcomm::parallel
