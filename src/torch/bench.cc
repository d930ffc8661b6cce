// time_from_cpp: the benchmark hook's op table and timing loop, on the communicator of a group's Ops.
#include "torch/bench.h"

#include <chrono>
#include <functional>
#include <stdexcept>

namespace mpcomm::torch_backend {

std::vector<double> time_from_cpp(Ops& group, const std::string& op, size_t count, int iters, bool barrier) {
  Communicator& comm = group.communicator();
  const int n = group.size(), r = group.rank();
  const size_t blocks = op == "alltoall" ? static_cast<size_t>(n) : 1;
  std::vector<float> a(count * blocks, 1.0f), b(count * blocks, 0.0f);
  std::vector<double> secs;
  std::function<void()> call;
  if (op == "allreduce")
    call = [&] { comm.allreduce(a.data(), a.data(), count, DataType::float32, ReduceOp::sum); };
  else if (op == "broadcast")
    call = [&] { comm.broadcast(a.data(), count, DataType::float32, 0); };
  else if (op == "alltoall")
    call = [&] { comm.alltoall(a.data(), b.data(), count, DataType::float32); };
  else if (op == "iallreduce")  // the non-blocking call and its wait, as the process group makes it
    call = [&] { comm.iallreduce(a.data(), a.data(), count, DataType::float32, ReduceOp::sum).wait(); };
  else if (op == "sendrecv")
    call = [&] {
      if (n == 1) return;
      Request in = comm.irecv(b.data(), count, DataType::float32, (r + n - 1) % n, 9);
      Request out = comm.isend(a.data(), count, DataType::float32, (r + 1) % n, 9);
      in.wait();
      out.wait();
    };
  else
    throw std::invalid_argument("mpcomm: time_from_cpp: unknown op '" + op +
                                "' (allreduce, iallreduce, broadcast, alltoall, sendrecv)");
  auto g = group.issue_lock();
  for (int i = 0; i < iters; ++i) {
    if (barrier) comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return secs;
}

}  // namespace mpcomm::torch_backend
