// pipeline: a 2-stage pipeline with non-blocking point-to-point (GPipe schedule: every forward, then every
// backward). The ranks pair up into pipelines (0-1, 2-3, ...; split), stage 0 and stage 1 of each.
//
//   stage 0   forward of micro-batch m: a_m = 2 x_m + 1, isend a_m to stage 1 (tag m) and go on to m + 1
//             while it travels; then irecv every gradient g_m from stage 1 and wait for them.
//   stage 1   irecv of every a_m posted up front; wait for a_m, loss_m = sum(a_m^2) / 2, gradient
//             g_m = a_m, isend g_m back to stage 0.
//
// Stage 0 checks each gradient against the activation it sent; stage 1 checks each activation. The two
// pipelines' losses are then summed over the data-parallel group (the ranks of one stage).
//
//   mpcomm launch -n 2 -- ./pipeline      (n even: n/2 pipelines)
#include <mpcomm/mpcomm.h>

#include <cstdio>
#include <string>
#include <vector>

constexpr int kMicroBatches = 4;
constexpr size_t kWidth = 4096;  // elements per activation

// Micro-batch m of pipeline p: x_m[i] = p + m + i % 8.
float input_at(int pipe, int m, size_t i) { return static_cast<float>(pipe + m + static_cast<int>(i % 8)); }

int main() try {
  using mpcomm::DataType;
  auto world = mpcomm::init_from_env();
  if (world->size() % 2 != 0)
    throw mpcomm::InvalidArgument("pipeline: needs an even number of ranks, not " + std::to_string(world->size()));
  const int pipe_id = world->rank() / 2;
  auto pipe = world->split(/*color=*/pipe_id, /*key=*/world->rank());  // stage = rank in the pipeline
  auto dp = world->split(/*color=*/pipe->rank(), /*key=*/world->rank());  // the same stage of every pipeline
  const int stage = pipe->rank();

  std::vector<std::vector<float>> act(kMicroBatches, std::vector<float>(kWidth));
  std::vector<std::vector<float>> grad(kMicroBatches, std::vector<float>(kWidth));
  std::vector<mpcomm::Request> sends, recvs;
  int wrong = 0;
  double loss = 0;

  if (stage == 0) {
    for (int m = 0; m < kMicroBatches; ++m) {  // forward: each activation leaves while the next is computed
      for (size_t i = 0; i < kWidth; ++i) act[m][i] = 2 * input_at(pipe_id, m, i) + 1;
      sends.push_back(pipe->isend(act[m].data(), kWidth, DataType::float32, /*peer=*/1, /*tag=*/m));
    }
    for (int m = 0; m < kMicroBatches; ++m)
      recvs.push_back(pipe->irecv(grad[m].data(), kWidth, DataType::float32, /*peer=*/1, /*tag=*/m));
    for (int m = 0; m < kMicroBatches; ++m) {  // backward: the gradients, in order
      recvs[m].wait();
      for (size_t i = 0; i < kWidth; ++i) wrong += grad[m][i] != act[m][i];
    }
  } else {
    for (int m = 0; m < kMicroBatches; ++m)
      recvs.push_back(pipe->irecv(act[m].data(), kWidth, DataType::float32, /*peer=*/0, /*tag=*/m));
    for (int m = 0; m < kMicroBatches; ++m) {
      recvs[m].wait();
      for (size_t i = 0; i < kWidth; ++i) {
        wrong += act[m][i] != 2 * input_at(pipe_id, m, i) + 1;
        loss += 0.5 * act[m][i] * act[m][i];
        grad[m][i] = act[m][i];
      }
      sends.push_back(pipe->isend(grad[m].data(), kWidth, DataType::float32, /*peer=*/0, /*tag=*/m));
    }
  }
  for (auto& s : sends) s.wait();  // a send's buffer is the communicator's until its request completes

  // Data parallel: the same stage of every pipeline sums its losses (stage 0's are 0).
  dp->allreduce(&loss, &loss, 1, DataType::float64, mpcomm::ReduceOp::sum);
  if (stage == 1) {
    double expected = 0;
    for (int p = 0; p < world->size() / 2; ++p)
      for (int m = 0; m < kMicroBatches; ++m)
        for (size_t i = 0; i < kWidth; ++i) expected += 0.5 * (2.0 * input_at(p, m, i) + 1) * (2.0 * input_at(p, m, i) + 1);
    wrong += loss != expected;
  }
  std::printf("pipeline %d stage %d (rank %d of %d): %d micro-batches of %zu floats %s: %s\n", pipe_id, stage,
              world->rank(), world->size(), kMicroBatches, kWidth,
              stage == 0 ? "sent, their gradients back"
                         : ("received, gradients sent; loss of every pipeline " + std::to_string(loss)).c_str(),
              wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
} catch (const mpcomm::Error& e) {
  std::fprintf(stderr, "pipeline: %s\n", e.what());
  return 1;
}
