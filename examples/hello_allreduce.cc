// hello_allreduce: every rank contributes rank + 1; after one all-reduce (sum) every rank holds
// 1 + 2 + ... + n.
//
//   mpcomm launch -n 4 -- ./hello_allreduce                    (the native backend)
//   mpcomm launch -n 4 --backend gloo -- ./hello_allreduce     (or mpi; nccl with MPCOMM_DEVICE=cuda buffers)
#include <mpcomm/mpcomm.h>

#include <cstdio>
#include <vector>

int main() try {
  // Rank, size and rendezvous come from the launcher's variables (also torchrun's, mpirun's, srun's).
  auto comm = mpcomm::init_from_env();
  const int n = comm->size();

  std::vector<float> x(1024, static_cast<float>(comm->rank() + 1));
  comm->allreduce(x.data(), x.data(), x.size(), mpcomm::DataType::float32, mpcomm::ReduceOp::sum);  // in place

  const float expected = n * (n + 1) / 2.0f;
  int wrong = 0;
  for (float v : x) wrong += v != expected;
  std::printf("hello from rank %d of %d (%.*s): sum %g, expected %g: %s\n", comm->rank(), n,
              static_cast<int>(comm->backend().size()), comm->backend().data(), x[0], expected,
              wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
} catch (const mpcomm::Error& e) {  // every failure: the op, its sequence number, the rank and the peer
  std::fprintf(stderr, "hello_allreduce: %s\n", e.what());
  return 1;
}
