// A rank program for the multi-process tests, run under `mpcomm launch`.
//   testprog topology            print "rank R host H local L/S hosts N"
//   testprog kill VICTIM AT [TAG [N]]  loop allreduces of N floats (default 2^18, 1 MiB); rank VICTIM
//                                SIGKILLs itself at iteration AT. TAG is not read: tests find their
//                                processes by it.
//                                Survivors print "rank R failed after S s: <error>" and exit 3.
//   testprog stall VICTIM AT [TAG [N]]  rank VICTIM sleeps forever instead of calling allreduce.
//   testprog abort VICTIM AT     rank VICTIM calls Communicator::abort("testing") instead.
//   testprog leave VICTIM AT [TAG [N]]     rank VICTIM returns 0 instead (its communicator is destroyed).
//   testprog mismatch VICTIM AT [TAG [N]]  rank VICTIM calls broadcast (root 0) instead.
//   testprog ikill VICTIM AT [TAG [N]]     the same as kill, with the allreduces posted non-blocking in
//                                queues of 8 and waited in order; a survivor prints its first failure,
//                                then "rank R later: <code>: <error>" for each later request of its queue.
//   testprog pattern N ITERS     ITERS allreduces (sum) of N floats holding a known pattern, 1000.25 +
//                                (i % 4096) / 2 (exact sums); prints "pattern ok: ..." or where it is wrong
//                                and exits 1. tests/cluster looks for the pattern in a capture of the link.
//   testprog sums OUT [SHIFT]    reproducible sums (run with MPCOMM_REPRODUCIBLE=1): rank r holds input vector
//                                (r + SHIFT) % size of values of mixed magnitude and sign; allreduce (sum, avg),
//                                reduce_scatter and reduce of every floating type and several counts; rank 0
//                                writes the results' bytes to OUT. The same OUT whatever backend, algorithm,
//                                hosts or SHIFT.
//   testprog hold FILE           checked allreduces of 64 Ki floats, one every 10 ms, until FILE exists (rank
//                                0 looks and broadcasts the answer), at most 120 s; then prints "hold ok:
//                                rank R, I allreduces" (exit 0), or where a sum was wrong (exit 1). A job that
//                                lasts exactly as long as a test needs it (tests/cluster strangers).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "mpcomm/mpcomm.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the launcher even if the rank is killed
  auto comm = mpcomm::init_from_env();
  const int rank = comm->rank();
  if (rank == 0 && std::getenv("MPCOMM_JOB_ID") != nullptr) std::printf("job %s\n", std::getenv("MPCOMM_JOB_ID"));
  if (mode == "topology") {
    const auto& t = comm->topology();
    std::printf("rank %d host %s local %d/%d hosts %d\n", rank, t.host_names[t.host].c_str(), t.local_rank,
                t.local_size, t.num_hosts());
    comm->barrier();
    return 0;
  }
  if (mode == "pattern") {
    const size_t n = argc > 2 ? static_cast<size_t>(std::atol(argv[2])) : size_t{1} << 20;
    const int iters = argc > 3 ? std::atoi(argv[3]) : 1;
    std::vector<float> x(n);
    for (int it = 0; it < iters; ++it) {
      for (size_t i = 0; i < n; ++i) x[i] = 1000.25f + static_cast<float>(i % 4096) / 2;
      comm->allreduce(x.data(), x.data(), n, mpcomm::DataType::float32, mpcomm::ReduceOp::sum);
      for (size_t i = 0; i < n; ++i)
        if (x[i] != comm->size() * (1000.25f + static_cast<float>(i % 4096) / 2)) {
          std::printf("pattern WRONG on rank %d at element %zu of allreduce %d: %g\n", rank, i, it, x[i]);
          return 1;
        }
    }
    std::printf("pattern ok: rank %d of %d, %d allreduces of %zu floats\n", rank, comm->size(), iters, n);
    return 0;
  }
  if (mode == "sums") {
    const int n = comm->size(), mine = (rank + (argc > 3 ? std::atoi(argv[3]) : 0)) % n;
    std::vector<char> out;
    auto keep = [&](const std::vector<char>& v, size_t bytes) {
      out.insert(out.end(), v.begin(), v.begin() + static_cast<long>(bytes));
    };
    using mpcomm::DataType;
    for (DataType dt : {DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64})
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{20000}, (size_t{1} << 20) + 3}) {
        const size_t es = mpcomm::dtype_size(dt), total = count * static_cast<size_t>(n);
        std::vector<char> x(total * es), y(total * es);
        for (size_t i = 0; i < total; ++i) {  // a value from (vector, element): sign, 2^±24 magnitudes, mantissa
          uint64_t h = (static_cast<uint64_t>(mine) * 0x9E3779B97F4A7C15ull) ^ (i * 0xC2B2AE3D27D4EB4Full);
          h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
          const double v = ((h & 1) ? -1.0 : 1.0) * std::ldexp(1.0 + static_cast<double>(h >> 12 & 0xFFFFF) / 1048576.0,
                                                               static_cast<int>(h >> 40 & 31) - 16);
          const float f = static_cast<float>(v);
          if (dt == DataType::float64) std::memcpy(x.data() + i * 8, &v, 8);
          if (dt == DataType::float32) std::memcpy(x.data() + i * 4, &f, 4);
          const uint16_t half = dt == DataType::float16 ? mpcomm::float_to_half(f) : mpcomm::float_to_bf16(f);
          if (es == 2) std::memcpy(x.data() + i * 2, &half, 2);
        }
        for (auto op : {mpcomm::ReduceOp::sum, mpcomm::ReduceOp::avg}) {
          comm->allreduce(x.data(), y.data(), count, dt, op);
          keep(y, count * es);
        }
        comm->reduce_scatter(x.data(), y.data(), count, dt, mpcomm::ReduceOp::sum);
        std::vector<char> all(total * es);
        comm->allgather(y.data(), all.data(), count, dt);
        keep(all, total * es);
        comm->reduce(x.data(), y.data(), count, dt, mpcomm::ReduceOp::sum, n - 1);
        if (rank == n - 1) comm->send(y.data(), count, dt, 0, 7);
        if (rank == 0) comm->recv(y.data(), count, dt, n - 1, 7);
        keep(y, count * es);
      }
    if (rank == 0) {
      FILE* f = std::fopen(argv[2], "wb");
      if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) return 1;
    }
    std::printf("sums ok: rank %d\n", rank);
    return 0;
  }
  if (mode == "hold") {
    const std::string file = argc > 2 ? argv[2] : "";
    const int n = comm->size();
    std::vector<float> x(size_t{1} << 16);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (int it = 1;; ++it) {
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
      comm->allreduce(x.data(), x.data(), x.size(), mpcomm::DataType::float32, mpcomm::ReduceOp::sum);
      for (size_t i = 0; i < x.size(); ++i)
        if (x[i] != static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7))) {
          std::printf("hold WRONG on rank %d at element %zu of allreduce %d: %g\n", rank, i, it, x[i]);
          return 1;
        }
      int32_t stop = rank == 0 && (::access(file.c_str(), F_OK) == 0 || std::chrono::steady_clock::now() > until);
      comm->broadcast(&stop, 1, mpcomm::DataType::int32, 0);
      if (stop != 0) {
        if (::access(file.c_str(), F_OK) != 0 && rank == 0) {
          std::printf("hold: %s did not appear in 120 s\n", file.c_str());
          return 1;
        }
        std::printf("hold ok: rank %d, %d allreduces\n", rank, it);
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const int victim = argc > 2 ? std::atoi(argv[2]) : 1;
  const int at = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<float> buf(argc > 5 ? static_cast<size_t>(std::atol(argv[5])) : size_t{1} << 18, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  if (mode == "ikill") {
    constexpr int kQueue = 8;
    std::vector<std::vector<float>> bufs(kQueue, buf);
    for (int it = 0; it < 1000000; it += kQueue) {
      bool failed = false;
      auto report = [&](const mpcomm::Error& e) {
        const std::string code(mpcomm::to_string(e.code()));
        if (!failed) {
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::printf("rank %d failed after %.1f s: %s: %s\n", rank, s, code.c_str(), e.what());
        } else {
          std::printf("rank %d later: %s: %s\n", rank, code.c_str(), e.what());
        }
        failed = true;
      };
      // A failure seen while the queue is posted refuses the posts after it: reported in queue order,
      // after the requests posted before them.
      std::vector<mpcomm::Request> reqs;
      std::vector<std::exception_ptr> refused;
      for (int i = 0; i < kQueue; ++i) {
        if (rank == victim && it + i == at) ::raise(SIGKILL);
        auto& b = bufs[static_cast<size_t>(i)];
        try {
          reqs.push_back(comm->iallreduce(b.data(), b.data(), b.size(), mpcomm::DataType::float32, mpcomm::ReduceOp::max));
        } catch (const mpcomm::Error&) {
          refused.push_back(std::current_exception());
        }
      }
      for (auto& q : reqs) {
        try {
          q.wait();
        } catch (const mpcomm::Error& e) {
          report(e);
        }
      }
      for (const auto& e : refused) {
        try {
          std::rethrow_exception(e);
        } catch (const mpcomm::Error& err) {
          report(err);
        }
      }
      if (failed) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return 3;
      }
      t0 = std::chrono::steady_clock::now();
    }
    return 0;
  }
  try {
    for (int it = 0; it < 1000000; ++it) {
      if (rank == victim && it == at && mode == "mismatch") {
        comm->broadcast(buf.data(), buf.size(), mpcomm::DataType::float32, 0);
        continue;
      }
      if (rank == victim && it == at) {
        if (mode == "kill") ::raise(SIGKILL);
        if (mode == "leave") return 0;
        if (mode == "abort") {
          comm->abort("testing");  // publishes mpcomm/abort; the others see it while they wait
          std::this_thread::sleep_for(std::chrono::seconds(30));
          return 0;
        }
        for (;;) ::pause();  // stall
      }
      comm->allreduce(buf.data(), buf.data(), buf.size(), mpcomm::DataType::float32, mpcomm::ReduceOp::max);
      t0 = std::chrono::steady_clock::now();
    }
  } catch (const mpcomm::Error& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d failed after %.1f s: %s: %s\n", rank, s, std::string(mpcomm::to_string(e.code())).c_str(), e.what());
    // The communicator is aborted now: later calls fail at once, naming the reason.
    try {
      comm->barrier();
    } catch (const mpcomm::Error& again) {
      std::printf("rank %d then: %s\n", rank, again.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the launcher see the failure first
    return 3;
  }
  return 0;
}
