// A rank program for the fault suite: every rank runs the same random sequence of collectives (drawn
// from SEED), and one rank, the victim, faults at a random point of it.
//
//   fault_prog MODE SEED TAG
//   MODE kill: the victim SIGKILLs itself from a timer thread a random 0-2 ms after entering op `at`
//              (so before, during or after that collective's traffic);
//        stop: the same with SIGSTOP: the victim hangs, alive, past every timeout;
//        exit: the victim returns from main before op `at`, closing its communicator normally.
//   MODE sender_dies / receiver_dies (SEED unused): rank 0 isends 1 MiB to rank 1, which posts its
//        receive 300 ms later; the victim SIGKILLs itself, rank 0 right after its isend (the receiver then
//        reads from a process that is gone), or rank 1 before it receives (the send is never read). On a
//        crowded host (MPCOMM_CPUS=1) the native backend leaves the payload in the sender's buffer for the
//        receiver to read. Then every rank meets in a barrier.
// TAG only marks the processes, so the test can look for orphans.
//
// Output: rank 0 prints "fault: victim V at op A (KIND), seed S"; each survivor that fails prints
// "rank R fault after X s: CODE: MESSAGE", X counted from its last completed op, and exits 3. The victim
// never gets past op `at`, and every later op (and a final barrier) needs it, so no survivor can finish.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpcomm/mpcomm.h"

namespace {

constexpr int kOps = 12;
const char* const kKinds[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "sendrecv"};

void run_op(mpcomm::Communicator& c, int kind, size_t count, int root, std::vector<float>& a, std::vector<float>& b) {
  using mpcomm::DataType;
  const int n = c.size(), r = c.rank();
  switch (kind) {
    case 0: c.allreduce(a.data(), b.data(), count, DataType::float32, mpcomm::ReduceOp::sum); break;
    case 1: c.broadcast(a.data(), count, DataType::float32, root); break;
    case 2: c.allgather(a.data(), b.data(), count / n, DataType::float32); break;
    case 3: c.reduce_scatter(a.data(), b.data(), count / n, DataType::float32, mpcomm::ReduceOp::sum); break;
    case 4: c.alltoall(a.data(), b.data(), count / n, DataType::float32); break;
    case 5: c.barrier(); break;
    default: {
      auto rq = c.irecv(b.data(), count, DataType::float32, (r + n - 1) % n, 1);
      auto sq = c.isend(a.data(), count, DataType::float32, (r + 1) % n, 1);
      rq.wait();
      sq.wait();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  const uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto comm = mpcomm::init_from_env();
  const int n = comm->size(), rank = comm->rank();
  if (mode == "sender_dies" || mode == "receiver_dies") {
    const int victim = mode == "sender_dies" ? 0 : 1;
    if (rank == 0 && std::getenv("MPCOMM_JOB_ID") != nullptr) std::printf("job %s\n", std::getenv("MPCOMM_JOB_ID"));
    if (rank == 0) std::printf("fault: victim %d at op 0 (sendrecv), seed 0\n", victim);
    std::vector<float> a(size_t{1} << 18, 1.0f), b(a.size(), 0.0f);
    auto last = std::chrono::steady_clock::now();
    try {
      if (rank == 0) {
        auto sq = comm->isend(a.data(), a.size(), mpcomm::DataType::float32, 1, 5);
        if (rank == victim) ::raise(SIGKILL);
        sq.wait();
      } else if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        if (rank == victim) ::raise(SIGKILL);
        comm->recv(b.data(), b.size(), mpcomm::DataType::float32, 0, 5);
      }
      last = std::chrono::steady_clock::now();
      comm->barrier();
    } catch (const mpcomm::Error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count();
      std::printf("rank %d fault after %.1f s: %s: %s\n", rank, s, std::string(mpcomm::to_string(e.code())).c_str(), e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return 3;
    }
    std::printf("rank %d done\n", rank);
    return 0;
  }
  std::mt19937_64 rng(seed);
  const int victim = static_cast<int>(rng() % static_cast<uint64_t>(n));
  const int at = static_cast<int>(rng() % kOps);
  const auto delay = std::chrono::microseconds(rng() % 2000);
  std::vector<int> kinds(kOps), roots(kOps);
  std::vector<size_t> counts(kOps);
  for (int i = 0; i < kOps; ++i) {
    kinds[i] = static_cast<int>(rng() % 7);
    counts[i] = static_cast<size_t>(n) * (1 + rng() % (size_t{1} << (rng() % 17)));  // n to n·65536 floats
    roots[i] = static_cast<int>(rng() % static_cast<uint64_t>(n));
  }
  if (rank == 0 && std::getenv("MPCOMM_JOB_ID") != nullptr) std::printf("job %s\n", std::getenv("MPCOMM_JOB_ID"));
  if (rank == 0) std::printf("fault: victim %d at op %d (%s), seed %llu\n", victim, at, kKinds[kinds[at]], static_cast<unsigned long long>(seed));
  size_t most = 0;
  for (size_t c : counts) most = std::max(most, c);
  std::vector<float> a(most, 1.0f), b(most, 0.0f);
  auto last = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < kOps; ++i) {
      if (rank == victim && i == at) {
        if (mode == "exit") return 0;
        const int sig = mode == "kill" ? SIGKILL : SIGSTOP;
        std::thread([delay, sig] {
          std::this_thread::sleep_for(delay);
          ::raise(sig);
        }).detach();
      }
      run_op(*comm, kinds[i], counts[i], roots[i], a, b);
      last = std::chrono::steady_clock::now();
      if (rank == victim && i == at)
        for (;;) ::pause();  // the signal lands during op `at` or right after it: go no further
    }
    comm->barrier();  // every rank takes part: the fault cannot go unnoticed
  } catch (const mpcomm::Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count();
    std::printf("rank %d fault after %.1f s: %s: %s\n", rank, s, std::string(mpcomm::to_string(e.code())).c_str(), e.what());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the launcher see the failure first
    return 3;
  }
  std::printf("rank %d done\n", rank);
  return 0;
}
