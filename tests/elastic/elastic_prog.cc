// A rank program for the elastic tests, run under `mpcomm launch --elastic`.
//   elastic_prog VICTIMS AT ITERS DIR
//     ITERS checked allreduces (sum) of 1024 float64, rank r contributing r + 1 (its rank in the job). The
//     k-th rank of VICTIMS (comma-separated job ranks) writes the time (CLOCK_REALTIME, ns) to DIR/killed.<r>
//     and SIGKILLs itself at iteration AT·(k+1); a victim written R:stop SIGSTOPs itself instead (and writes its
//     process id to DIR/pid.<r>: the survivors' new rank 0 SIGKILLs it once it has printed, so that the job
//     ends). A survivor whose allreduce fails shrinks its communicator,
//     learns the survivors' job ranks (an allgather) and repeats the allreduce; the new communicator's rank 0
//     prints "shrunk to N ranks: first good collective T ms after the kill (<the error's code>)". At the end
//     every survivor prints "rank R: ITERS allreduces right, S shrinks" and exits 0 — or names the first wrong
//     sum and exits 1. Rank 0 first prints "job <MPCOMM_JOB_ID>" (the job's shared memory is named after it).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mpcomm/mpcomm.h"

namespace {

long long realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct Victim {
  int rank;
  bool stop;
};

std::vector<Victim> parse(const std::string& s) {
  std::vector<Victim> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back({std::atoi(item.c_str()), item.find(":stop") != std::string::npos});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::vector<Victim> victims = parse(argv[1]);
  const int at = std::atoi(argv[2]), iters = std::atoi(argv[3]);
  const std::string dir = argv[4];
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::unique_ptr<mpcomm::Communicator> comm = mpcomm::init_from_env();
  const int me = comm->rank();  // the job rank
  if (me == 0 && std::getenv("MPCOMM_JOB_ID") != nullptr) std::printf("job %s\n", std::getenv("MPCOMM_JOB_ID"));
  std::vector<int> members(static_cast<size_t>(comm->size()));
  for (int r = 0; r < comm->size(); ++r) members[static_cast<size_t>(r)] = r;
  std::vector<double> buf(1024);
  int shrinks = 0;
  for (int it = 0; it < iters; ++it) {
    for (size_t k = 0; k < victims.size(); ++k)
      if (victims[k].rank == me && it == at * static_cast<int>(k + 1)) {
        std::ofstream(dir + "/pid." + std::to_string(me)) << ::getpid() << "\n";
        std::ofstream(dir + "/killed." + std::to_string(me)) << realtime_ns() << "\n";
        ::raise(victims[k].stop ? SIGSTOP : SIGKILL);
      }
    for (;;) {
      std::fill(buf.begin(), buf.end(), me + 1.0);
      try {
        comm->allreduce(buf.data(), buf.data(), buf.size(), mpcomm::DataType::float64, mpcomm::ReduceOp::sum);
        break;
      } catch (const mpcomm::Error& e) {
        const std::string code(mpcomm::to_string(e.code()));
        comm = comm->shrink();
        ++shrinks;
        int mine = me;
        members.assign(static_cast<size_t>(comm->size()), -1);
        comm->allgather(&mine, members.data(), 1, mpcomm::DataType::int32);
        std::fill(buf.begin(), buf.end(), me + 1.0);
        comm->allreduce(buf.data(), buf.data(), buf.size(), mpcomm::DataType::float64, mpcomm::ReduceOp::sum);
        const long long now = realtime_ns();
        if (comm->rank() != 0) break;
        long long killed = 0;
        for (const Victim& v : victims) {
          std::ifstream f(dir + "/killed." + std::to_string(v.rank));
          long long t = 0;
          if (f >> t && t > killed) killed = t;  // the latest kill is this shrink's
        }
        std::printf("shrunk to %d ranks: first good collective %.1f ms after the kill (%s)\n", comm->size(),
                    static_cast<double>(now - killed) / 1e6, code.c_str());
        for (const Victim& v : victims) {  // a stopped one ends now, so that the job can
          std::ifstream f(dir + "/pid." + std::to_string(v.rank));
          int pid = 0;
          if (v.stop && f >> pid && pid > 0) ::kill(pid, SIGKILL);
        }
        break;
      }
    }
    double want = 0;
    for (int m : members) want += m + 1.0;
    for (double v : buf)
      if (v != want) {
        std::printf("rank %d: iteration %d: sum %g, want %g\n", me, it, v, want);
        return 1;
      }
  }
  std::printf("rank %d: %d allreduces right, %d shrinks\n", me, iters, shrinks);
  return 0;
}
