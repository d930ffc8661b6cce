// overlap: data-parallel gradients all-reduced while the backward pass goes on (how DDP buckets work).
//
// Backward produces the gradients of the last layer first. Each bucket (one layer's gradients) is handed
// to iallreduce as soon as it is computed, and the next bucket is computed while that one travels; one
// wait per bucket at the end, before the optimizer step. The same step with a blocking allreduce after
// each bucket is timed for comparison. Rules for non-blocking calls: a bucket belongs to the communicator
// until its Request completes; one thread issues the calls; calls run in the order they were issued.
//
//   mpcomm launch -n 4 -- ./overlap
#include <mpcomm/mpcomm.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

constexpr int kBuckets = 8;
constexpr size_t kBucketFloats = 1 << 18;  // 1 MiB of float32 per bucket

// Stands in for one layer's backward: some arithmetic, then gradient i of bucket b on rank r is
// (r + 1) * (b + 1) + i % 3 (small integers: their average over the ranks is exact or nearly).
void backward_layer(std::vector<float>& g, int b, int r) {
  float work = 0;
  for (int pass = 0; pass < 8; ++pass)
    for (size_t i = 0; i < g.size(); ++i) work += std::sqrt(static_cast<float>(i + pass));
  const float keep = work < 0 ? 1.0f : 0.0f;  // never negative: 0, but the compiler must do the work
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((r + 1) * (b + 1) + static_cast<int>(i % 3)) + keep;
}

int main() try {
  using clock = std::chrono::steady_clock;
  auto comm = mpcomm::init_from_env();
  const int n = comm->size(), r = comm->rank();
  std::vector<std::vector<float>> grads(kBuckets, std::vector<float>(kBucketFloats));

  auto step = [&](bool overlap) {
    comm->barrier();
    auto t0 = clock::now();
    std::vector<mpcomm::Request> pending;
    for (int b = kBuckets - 1; b >= 0; --b) {  // the last layer first, as backward runs
      backward_layer(grads[b], b, r);
      if (overlap)
        pending.push_back(comm->iallreduce(grads[b].data(), grads[b].data(), kBucketFloats,
                                           mpcomm::DataType::float32, mpcomm::ReduceOp::avg));
      else
        comm->allreduce(grads[b].data(), grads[b].data(), kBucketFloats, mpcomm::DataType::float32,
                        mpcomm::ReduceOp::avg);
    }
    for (auto& p : pending) p.wait();  // every gradient averaged: the optimizer step may start
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  };

  const double blocking_ms = step(false);
  const double overlap_ms = step(true);

  // avg over ranks of (r + 1) * (b + 1) + i % 3 = (n + 1) / 2 * (b + 1) + i % 3
  int wrong = 0;
  for (int b = 0; b < kBuckets; ++b)
    for (size_t i = 0; i < kBucketFloats; ++i) {
      const float expected = (n + 1) / 2.0f * (b + 1) + static_cast<float>(i % 3);
      wrong += std::fabs(grads[b][i] - expected) > 1e-6f * expected;
    }
  std::printf("overlap rank %d of %d: %d buckets of %zu floats averaged; backward + all-reduce %.1f ms blocking, "
              "%.1f ms overlapped: %s\n",
              r, n, kBuckets, kBucketFloats, blocking_ms, overlap_ms, wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
} catch (const mpcomm::Error& e) {
  std::fprintf(stderr, "overlap: %s\n", e.what());
  return 1;
}
