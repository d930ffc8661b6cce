// A rank program for the elastic tests, run under `mpcomm launch --elastic`.
//   elastic_prog VICTIMS AT ITERS DIR [OP]
//     ITERS checked ops of kind OP (default allreduce), each rank contributing values made from its rank in the
//     job, every result checked against the survivors' job ranks:
//       allreduce, iallreduce (non-blocking), broadcast, allgather, reduce_scatter, alltoall: 256 float64 each;
//       sendrecv (isend to the next rank, blocking recv from the previous), isend (isend and irecv, both waited);
//       split: an allreduce on a child split off by rank parity, then a barrier on the parent (so that a failure
//       in one child reaches the other's ranks).
//     The k-th rank of VICTIMS (comma-separated job ranks) writes the time (CLOCK_REALTIME, ns) to
//     DIR/killed.<r> and SIGKILLs itself at iteration AT·(k+1); a victim written R:stop SIGSTOPs itself instead
//     (and writes its process id to DIR/pid.<r>: the survivors' new rank 0 SIGKILLs it once it has printed, so
//     that the job ends); a victim written R:inshrink is not killed at an iteration: when its op fails (another
//     victim died), it SIGKILLs itself 2 ms after it checked in to its own shrink() — a second failure the others
//     only see when the new communicator's setup fails.
//     A survivor whose op fails shrinks its communicator, learns the survivors' job ranks (an allgather) and
//     runs the op again; the new communicator's rank 0 prints "shrunk to N ranks: first good collective T ms
//     after the kill (<the error's code>)". After the first shrink, OP may also be
//       grow      every survivor calls grow(1); the lost rank, restarted by --max-restarts as a joiner, SIGKILLs
//                 itself once the grow has seated it (the survivors are inside grow()): the grow fails and the
//                 survivors go on ("grow failed after T ms (<code>)");
//       badjoin   rank 0 starts this program as a joiner with a wrong secret: it must be refused ("refused
//                 joiner: ..."), no joiner may be counted waiting, and the job goes on;
//       overgrow  every survivor calls grow(2) under --max-restarts 1: refused at once on every rank
//                 ("grow refused: ..."); rank 0 then closes the joins, so the restarted joiner ends with 0.
//     At the end every survivor prints "rank R: ITERS OPs right, S shrinks" and exits 0 — or names the first
//     wrong result and exits 1. Rank 0 first prints "job <MPCOMM_JOB_ID>" (the job's shared memory is named
//     after it).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mpcomm/mpcomm.h"

extern char** environ;

namespace {

using mpcomm::Communicator;
using mpcomm::DataType;

long long realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct Victim {
  int rank;
  std::string how;  // "" (SIGKILL), "stop", "inshrink"
};

std::vector<Victim> parse(const std::string& s) {
  std::vector<Victim> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) {
      const auto colon = item.find(':');
      out.push_back({std::atoi(item.c_str()), colon == std::string::npos ? "" : item.substr(colon + 1)});
    }
  return out;
}

struct World {
  std::unique_ptr<Communicator> comm, child;
  std::vector<int> members;  // the job rank of each rank of comm
  int me = 0;                // this rank's job rank
};

constexpr size_t kCount = 256;

// One op of kind `op` (iteration `it`) on w.comm, checked; returns what was wrong ("" when right). Throws mpcomm::Error
// when the op fails.
std::string run_op(World& w, const std::string& op, int it) {
  Communicator& c = *w.comm;
  const int n = c.size(), r = c.rank();
  const auto val = [&](int q) { return w.members[static_cast<size_t>(q)] + 1.0; };
  std::vector<double> got, want;
  std::vector<double> mine(kCount, w.me + 1.0);
  if (op == "allreduce" || op == "iallreduce" || op == "reduce_scatter") {
    got.assign(kCount, 0);
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += val(q);
    want.assign(kCount, sum);
    if (op == "allreduce") c.allreduce(mine.data(), got.data(), kCount, DataType::float64, mpcomm::ReduceOp::sum);
    if (op == "iallreduce")
      c.iallreduce(mine.data(), got.data(), kCount, DataType::float64, mpcomm::ReduceOp::sum).wait();
    if (op == "reduce_scatter") {
      std::vector<double> all(kCount * static_cast<size_t>(n), w.me + 1.0);
      c.reduce_scatter(all.data(), got.data(), kCount, DataType::float64, mpcomm::ReduceOp::sum);
    }
  } else if (op == "broadcast") {  // from each rank in turn: a leaf of one broadcast's tree is another's root
    const int root = it % n;
    got.assign(kCount, r == root ? w.me + 1.0 : -1.0);
    c.broadcast(got.data(), kCount, DataType::float64, root);
    want.assign(kCount, val(root));
  } else if (op == "allgather" || op == "alltoall") {
    got.assign(kCount * static_cast<size_t>(n), 0);
    std::vector<double> send(kCount * static_cast<size_t>(n));
    for (int q = 0; q < n; ++q)
      for (size_t j = 0; j < kCount; ++j) {
        // allgather: every block of q's is q's value; alltoall: the block for rank p says who sent it to whom.
        send[static_cast<size_t>(q) * kCount + j] = op == "allgather" ? w.me + 1.0 : (w.me + 1.0) * 1000 + val(q);
        want.push_back(op == "allgather" ? val(q) : val(q) * 1000 + val(r));
      }
    if (op == "allgather") c.allgather(send.data(), got.data(), kCount, DataType::float64);
    if (op == "alltoall") c.alltoall(send.data(), got.data(), kCount, DataType::float64);
  } else if (op == "sendrecv" || op == "isend") {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    got.assign(kCount, 0);
    want.assign(kCount, val(prev));
    mpcomm::Request s = c.isend(mine.data(), kCount, DataType::float64, next, 7);
    if (op == "sendrecv") {
      c.recv(got.data(), kCount, DataType::float64, prev, 7);
    } else {
      mpcomm::Request rr = c.irecv(got.data(), kCount, DataType::float64, prev, 7);
      rr.wait();
    }
    s.wait();
  } else if (op == "split") {
    if (!w.child) w.child = c.split(r % 2, r);
    got.assign(kCount, 0);
    double sum = 0;
    for (int q = r % 2; q < n; q += 2) sum += val(q);
    want.assign(kCount, sum);
    w.child->allreduce(mine.data(), got.data(), kCount, DataType::float64, mpcomm::ReduceOp::sum);
    c.barrier();
  } else {
    return "unknown op " + op;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return op + " gave " + std::to_string(got[i]) + " at " + std::to_string(i) + ", want " + std::to_string(want[i]);
  return "";
}

// "tcp://host:port" of MPCOMM_STORE.
std::unique_ptr<mpcomm::TcpStore> job_store() {
  const std::string url = std::getenv("MPCOMM_STORE") ? std::getenv("MPCOMM_STORE") : "";
  const auto colon = url.rfind(':');
  const char* token = std::getenv("MPCOMM_TOKEN");
  return std::make_unique<mpcomm::TcpStore>(url.substr(6, colon - 6),
                                            static_cast<uint16_t>(std::atoi(url.c_str() + colon + 1)),
                                            token ? token : "", mpcomm::Millis(10000));
}

// A restarted rank (MPCOMM_JOIN=1). In the grow test it dies once the grow seated it; else it ends with 0 when
// the job closes its joins.
int joiner(const std::string& op) {
  if (op == "grow") {
    std::thread([] {
      auto store = job_store();
      while (!store->check({"mpcomm/join/seat/0"})) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ::raise(SIGKILL);
    }).detach();
  }
  try {
    std::unique_ptr<Communicator> c = mpcomm::init_from_env();
    if (c == nullptr) {
      std::printf("joiner: the job closed its joins\n");
      return 0;
    }
    std::printf("joiner: seated as rank %d of %d, which this test does not expect\n", c->rank(), c->size());
  } catch (const std::exception& e) {
    std::printf("joiner: %s\n", e.what());
  }
  return 3;
}

// badjoin: this program again, as a joiner with a wrong secret; returns its exit status.
int start_bad_joiner(const char* self) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "MPCOMM_TOKEN=", 13) != 0 && std::strncmp(*e, "MPCOMM_JOIN=", 12) != 0) env.push_back(*e);
  env.push_back("MPCOMM_TOKEN=not-the-job-secret");
  env.push_back("MPCOMM_JOIN=1");
  std::vector<char*> envp, argv{const_cast<char*>(self),
                                const_cast<char*>("-"),
                                const_cast<char*>("0"),
                                const_cast<char*>("0"),
                                const_cast<char*>("-"),
                                const_cast<char*>("badjoin"),
                                nullptr};
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What the survivors do after their first shrink, for the grow tests.
void after_first_shrink(World& w, const std::string& op, const char* self) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  if (op == "grow") {
    try {
      w.comm->grow(1);
      if (w.comm->rank() == 0) std::printf("grow succeeded, which this test does not expect\n");
    } catch (const mpcomm::Error& e) {
      if (w.comm->rank() == 0)
        std::printf("grow failed after %.0f ms (%s): %s\n", ms(), std::string(mpcomm::to_string(e.code())).c_str(),
                    e.what());
    }
  } else if (op == "overgrow") {
    try {
      w.comm->grow(2);
    } catch (const mpcomm::InvalidArgument& e) {
      if (w.comm->rank() == 0) std::printf("grow refused after %.0f ms: %s\n", ms(), e.what());
    }
    if (w.comm->rank() == 0) mpcomm::close_joins(*w.comm);
  } else if (op == "badjoin" && w.comm->rank() == 0) {
    const int status = start_bad_joiner(self);
    std::printf("refused joiner: exit status %d, %lld joiners waiting\n", status,
                static_cast<long long>(mpcomm::waiting_joiners(*w.comm)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::vector<Victim> victims = parse(argv[1]);
  const int at = std::atoi(argv[2]), iters = std::atoi(argv[3]);
  const std::string dir = argv[4];
  const std::string mode = argc > 5 ? argv[5] : "allreduce";
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* join_env = std::getenv("MPCOMM_JOIN");
  if (join_env != nullptr && std::string(join_env) == "1") return joiner(mode);
  const bool grow_mode = mode == "grow" || mode == "badjoin" || mode == "overgrow";
  const std::string op = grow_mode ? "allreduce" : mode;
  World w;
  w.comm = mpcomm::init_from_env();
  w.me = w.comm->rank();
  if (w.me == 0 && std::getenv("MPCOMM_JOB_ID") != nullptr) std::printf("job %s\n", std::getenv("MPCOMM_JOB_ID"));
  for (int r = 0; r < w.comm->size(); ++r) w.members.push_back(r);
  int shrinks = 0;
  for (int it = 0; it < iters; ++it) {
    for (size_t k = 0; k < victims.size(); ++k)
      if (victims[k].rank == w.me && victims[k].how != "inshrink" && it == at * static_cast<int>(k + 1)) {
        std::ofstream(dir + "/pid." + std::to_string(w.me)) << ::getpid() << "\n";
        std::ofstream(dir + "/killed." + std::to_string(w.me)) << realtime_ns() << "\n";
        ::raise(victims[k].how == "stop" ? SIGSTOP : SIGKILL);
      }
    std::string wrong;
    for (;;) {
      try {
        wrong = run_op(w, op, it);
        break;
      } catch (const mpcomm::Error& e) {
        const std::string code(mpcomm::to_string(e.code()));
        for (const Victim& v : victims)
          if (v.rank == w.me && v.how == "inshrink")
            std::thread([here = "world/" + std::string(w.comm->backend()) + "/shrink0/here/" + std::to_string(w.me)] {
              auto store = job_store();  // dies once it has checked in: the others count it in, then its setup fails
              while (!store->check({here})) std::this_thread::sleep_for(std::chrono::milliseconds(1));
              std::this_thread::sleep_for(std::chrono::milliseconds(2));
              ::raise(SIGKILL);
            }).detach();
        w.child.reset();
        w.comm = w.comm->shrink();
        ++shrinks;
        // Who is left, and where: point-to-point ops let ranks drift an iteration or two apart, so all go on
        // from the furthest (the iterations skipped were run and checked on the old communicator).
        int32_t mine[2] = {w.me, it};
        std::vector<int32_t> all(2 * static_cast<size_t>(w.comm->size()));
        w.comm->allgather(mine, all.data(), 2, DataType::int32);
        w.members.clear();
        for (size_t q = 0; q < all.size(); q += 2) {
          w.members.push_back(all[q]);
          it = std::max(it, all[q + 1]);
        }
        wrong = run_op(w, op, it);
        const long long now = realtime_ns();
        if (w.comm->rank() == 0) {
          long long killed = 0;
          for (const Victim& v : victims) {
            std::ifstream f(dir + "/killed." + std::to_string(v.rank));
            long long t = 0;
            if (f >> t && t > killed) killed = t;  // the latest kill is this shrink's
          }
          std::printf("shrunk to %d ranks: first good collective %.1f ms after the kill (%s)\n", w.comm->size(),
                      static_cast<double>(now - killed) / 1e6, code.c_str());
          for (const Victim& v : victims) {  // a stopped one ends now, so that the job can
            std::ifstream f(dir + "/pid." + std::to_string(v.rank));
            int pid = 0;
            if (v.how == "stop" && f >> pid && pid > 0) ::kill(pid, SIGKILL);
          }
        }
        if (shrinks == 1 && grow_mode) after_first_shrink(w, mode, argv[0]);
        break;
      }
    }
    if (!wrong.empty()) {
      std::printf("rank %d: iteration %d: %s\n", w.me, it, wrong.c_str());
      return 1;
    }
  }
  std::printf("rank %d: %d %ss right, %d shrinks\n", w.me, iters, op.c_str(), shrinks);
  return 0;
}
