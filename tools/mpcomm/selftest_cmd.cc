// mpcomm selftest: every collective × a few dtypes and sizes on the ranks of this job, each result
// checked on every rank, timings reduced to the slowest rank. Exits 1 if anything was wrong.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "cli_checks.h"
#include "commands.h"
#include "mpcomm/mpcomm.h"
#include "testing/collective_check.h"

namespace mpcomm::cli {

namespace {

struct SelftestOptions {
  std::vector<std::string> dtypes = {"float", "bfloat16", "int32"};
  std::vector<size_t> counts = {0, 1, 7, 1000, 262147};
  int iters = 5;
  bool conformance = false;  // the full conformance matrix instead of the table
  bool nonblocking = false;  // conformance: the cases posted non-blocking, in queues (run_queues)
  std::vector<std::string> only_dtypes;  // conformance: just these dtypes (default: every one)
  std::vector<std::string> only_ops;     // conformance: just these ops (default: every one)
  std::string device;        // cpu or cuda (default MPCOMM_DEVICE)
  uint64_t random = 0;       // > 0: that many random cases instead (the soak)
  uint64_t seed = 1;
};

// The soak: `count` random cases (op, dtype, reduce op, element count, root, placement), drawn from the
// same seed on every rank so that all call the same thing, each result checked on every rank. Prints
// one summary line: "soak: backend B, N ranks, seed S: K ops, W wrong".
int run_random(Communicator& comm, const SelftestOptions& o) {
  std::mt19937_64 rng(o.seed);
  const auto& ops = check::checked_ops();
  uint64_t wrong_ops = 0, wrong_elems = 0;
  std::string first;
  for (uint64_t i = 0; i < o.random; ++i) {
    check::Case c;
    c.op = ops[rng() % ops.size()];
    c.dtype = static_cast<DataType>(rng() % kNumDataTypes);
    c.redop = static_cast<ReduceOp>(rng() % kNumReduceOps);
    // The bitwise ops take integer types only: on a floating-point one, sum, prod or min instead.
    if (is_bitwise(c.redop) && is_floating(c.dtype)) c.redop = static_cast<ReduceOp>(static_cast<int>(c.redop) - 5);
    // Element counts spread over every scale: 0, tiny, around ring chunks, up to 2^18 (per rank block).
    const int bits = static_cast<int>(rng() % 19);
    c.count = bits == 0 ? 0 : (size_t{1} << (bits - 1)) + rng() % (size_t{1} << (bits - 1));
    c.root = static_cast<int>(rng() % static_cast<uint64_t>(comm.size()));
    c.in_place = (rng() & 1) != 0 && c.op != OpKind::broadcast && c.op != OpKind::alltoallv;
    check::Result r = check::run_case(comm, c);
    uint64_t w = r.wrong, wsum = 0;
    comm.allreduce(&w, &wsum, 1, DataType::int64, ReduceOp::sum);
    if (r.wrong > 0 && first.empty()) first = check::describe(c) + ": " + r.first_wrong;
    if (wsum > 0) ++wrong_ops;
    wrong_elems += wsum;
  }
  if (!first.empty()) std::fprintf(stderr, "rank %d: first wrong: %s\n", comm.rank(), first.c_str());
  comm.barrier();
  if (comm.rank() == 0)
    std::printf("soak: backend %s, %d ranks, seed %llu: %llu ops, %llu wrong (%llu wrong elements)\n",
                std::string(comm.backend()).c_str(), comm.size(), static_cast<unsigned long long>(o.seed),
                static_cast<unsigned long long>(o.random), static_cast<unsigned long long>(wrong_ops),
                static_cast<unsigned long long>(wrong_elems));
  return wrong_ops == 0 ? 0 : 1;
}

// Counted outcomes of cases checked on every rank.
struct Tally {
  uint64_t cases = 0, wrong_cases = 0, refused = 0;
  void add(Communicator& comm, const check::Case& c, const check::Result& r) {
    uint64_t w = r.wrong > 0 ? 1 : 0, any = 0;
    comm.allreduce(&w, &any, 1, DataType::int64, ReduceOp::sum);
    if (r.wrong > 0)
      std::printf("rank %d: %s: %zu wrong, first %s\n", comm.rank(), check::describe(c).c_str(), r.wrong,
                  r.first_wrong.c_str());
    ++cases;
    if (any > 0) ++wrong_cases;
  }
  void refuse(const Communicator& comm, const Unsupported& e) {
    if (refused++ == 0 && comm.rank() == 0) std::printf("refused: %s\n", e.what());
  }
};

// The cases non-blocking, in queues of 8: every third run blocking between the posted ones (they run in
// issue order), the requests waited in reverse order, then every result checked.
void run_queues(Communicator& comm, const std::vector<check::Case>& cases, Tally& t) {
  constexpr size_t kQueue = 8;
  for (size_t first = 0; first < cases.size(); first += kQueue) {
    const size_t n = std::min(kQueue, cases.size() - first);
    std::vector<check::PreparedCase> prepared;
    std::vector<Request> reqs(n);
    std::vector<bool> refused(n, false);
    for (size_t i = 0; i < n; ++i) prepared.emplace_back(comm, cases[first + i]);
    for (size_t i = 0; i < n; ++i) {
      try {
        if (i % 3 == 2)
          prepared[i].run();
        else
          reqs[i] = prepared[i].post();
      } catch (const Unsupported& e) {
        refused[i] = true;
        t.refuse(comm, e);
      }
    }
    for (size_t i = n; i-- > 0;) {
      if (!reqs[i].valid()) continue;
      try {
        reqs[i].wait();
      } catch (const Unsupported& e) {
        refused[i] = true;
        t.refuse(comm, e);
      }
    }
    for (size_t i = 0; i < n; ++i)
      if (!refused[i]) t.add(comm, cases[first + i], prepared[i].verify());
  }
}

// The barrier's cases: in round k rank k mod n enters 20 ms late, and every other rank must be held in
// the barrier until it came (at least 10 ms: the rounds start together, after an allreduce, within a few
// ms). A barrier that lets a rank through early is a wrong case; a refused one is counted apart.
void run_barrier_cases(Communicator& comm, Tally& t) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kLate = std::chrono::milliseconds(20), kHeldAtLeast = std::chrono::milliseconds(10);
  const int n = comm.size();
  for (int round = 0; round < 2 * n; ++round) {
    check::Case c;
    c.op = OpKind::barrier;
    check::Result r;
    try {
      int64_t sync = 0;
      comm.allreduce(&sync, &sync, 1, DataType::int64, ReduceOp::sum);
      const bool late = round % n == comm.rank();
      if (late) std::this_thread::sleep_for(kLate);
      const auto t0 = Clock::now();
      comm.barrier();
      if (!late && n > 1 && Clock::now() - t0 < kHeldAtLeast) {
        r.wrong = 1;
        r.first_wrong = "left the barrier before rank " + std::to_string(round % n) + " entered it";
      }
    } catch (const Unsupported& e) {
      t.refuse(comm, e);
      continue;
    }
    t.add(comm, c, r);
  }
}

// The full matrix of the conformance suite (check::conformance_cases), every op; prints only
// failures and a summary line. This is how process runs (gloo, mpi) are held to the same suite. A case
// that the communicator refuses (Unsupported, on every rank alike: e.g. an algorithm MPCOMM_ALGO forces
// that cannot run at that size) is counted apart, and the first refusal is printed.
int run_conformance(Communicator& comm, const SelftestOptions& o) {
  std::vector<DataType> only;
  for (const auto& d : o.only_dtypes) only.push_back(parse_dtype(d));
  std::vector<std::string> ops = {"barrier"};
  for (OpKind op : check::checked_ops()) ops.emplace_back(to_string(op));
  for (const auto& name : o.only_ops)
    if (std::find(ops.begin(), ops.end(), name) == ops.end())
      throw InvalidArgument("mpcomm selftest: --only-ops: unknown op '" + name + "'");
  std::vector<check::Case> cases;
  for (OpKind op : check::checked_ops()) {
    if (!o.only_ops.empty() && std::find(o.only_ops.begin(), o.only_ops.end(), to_string(op)) == o.only_ops.end()) continue;
    for (const auto& c : check::conformance_cases(op, comm.size()))
      if (only.empty() || std::find(only.begin(), only.end(), c.dtype) != only.end()) cases.push_back(c);
  }
  Tally t;
  const bool barrier = o.only_ops.empty() || std::find(o.only_ops.begin(), o.only_ops.end(), "barrier") != o.only_ops.end();
  if (barrier && !o.nonblocking) run_barrier_cases(comm, t);
  if (o.nonblocking) {
    run_queues(comm, cases, t);
  } else {
    for (const auto& c : cases) {
      try {
        t.add(comm, c, check::run_case(comm, c));
      } catch (const Unsupported& e) {
        t.refuse(comm, e);
      }
    }
  }
  // Every rank finished its cases: a barrier, unless the barrier is what is checked (MPCOMM_ALGO may force
  // one that cannot run here).
  int64_t done = 0;
  if (barrier)
    comm.allreduce(&done, &done, 1, DataType::int64, ReduceOp::sum);
  else
    comm.barrier();
  if (comm.rank() == 0)
    std::printf("conformance: backend %s, %d ranks, %s buffers%s, %llu cases, %llu failed, %llu refused\n",
                std::string(comm.backend()).c_str(), comm.size(), to_string(comm.options().device).c_str(),
                o.nonblocking ? ", non-blocking in queues" : "", static_cast<unsigned long long>(t.cases),
                static_cast<unsigned long long>(t.wrong_cases), static_cast<unsigned long long>(t.refused));
  return t.wrong_cases == 0 ? 0 : 1;
}

int run_selftest(const SelftestOptions& o) {
  Options opts;
  if (!o.device.empty()) opts.device = parse_device(o.device);
  auto comm = init_from_env(opts);
  if (o.conformance) return run_conformance(*comm, o);
  if (o.random > 0) return run_random(*comm, o);
  const int n = comm->size();
  const bool lead = comm->rank() == 0;
  if (lead) {
    std::printf("# mpcomm selftest: backend %s, %d ranks on %d hosts, %s buffers\n", std::string(comm->backend()).c_str(),
                n, comm->topology().num_hosts(), to_string(comm->options().device).c_str());
    std::printf("# %-15s %-9s %-5s %10s %12s %8s\n", "op", "dtype", "redop", "count", "time(us)", "#wrong");
  }
  uint64_t total_wrong = 0, total_cases = 0;
  for (OpKind op : check::checked_ops())
    for (const auto& dn : o.dtypes)
      for (size_t count : o.counts) {
        check::Case c;
        c.op = op;
        c.dtype = parse_dtype(dn);
        c.redop = ReduceOp::sum;
        c.count = count;
        c.root = n - 1;
        double best = 1e30;
        uint64_t wrong = 0;
        for (int it = 0; it < o.iters; ++it) {
          c.in_place = it % 2 == 1 && op != OpKind::alltoallv;  // alltoallv has no in-place form
          check::Result r = check::run_case(*comm, c);
          // The slowest rank's time counts; wrong elements are summed over ranks.
          double t = r.seconds, tmax = 0;
          comm->allreduce(&t, &tmax, 1, DataType::float64, ReduceOp::max);
          uint64_t w = r.wrong, wsum = 0;
          comm->allreduce(&w, &wsum, 1, DataType::int64, ReduceOp::sum);
          if (r.wrong > 0) std::fprintf(stderr, "rank %d: %s: %s\n", comm->rank(), check::describe(c).c_str(), r.first_wrong.c_str());
          best = std::min(best, tmax);
          wrong += wsum;
        }
        total_wrong += wrong;
        ++total_cases;
        bool red = op == OpKind::allreduce || op == OpKind::reduce || op == OpKind::reduce_scatter;
        if (lead)
          std::printf("  %-15s %-9s %-5s %10zu %12.1f %8llu\n", std::string(to_string(op)).c_str(),
                      std::string(to_string(c.dtype)).c_str(), red ? "sum" : "-", count, best * 1e6,
                      static_cast<unsigned long long>(wrong));
      }
  comm->barrier();
  if (lead)
    std::printf("# %llu cases, %llu wrong elements: %s\n", static_cast<unsigned long long>(total_cases),
                static_cast<unsigned long long>(total_wrong), total_wrong == 0 ? "OK" : "FAILED");
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

Runner add_selftest(CLI::App& app) {
  auto o = std::make_shared<SelftestOptions>();
  app.add_option("-d,--dtypes", o->dtypes, "data types")->delimiter(',');
  app.add_option("-c,--counts", o->counts, "element counts")->delimiter(',');
  app.add_flag("--conformance", o->conformance, "run the conformance suite's full matrix; print failures and a summary");
  app.add_flag("--nonblocking", o->nonblocking,
               "with --conformance: post the cases non-blocking in queues of 8 (every third blocking in between), "
               "wait in reverse order, then check");
  app.add_option("--only-dtypes", o->only_dtypes, "with --conformance: only these data types")->delimiter(',');
  app.add_option("--only-ops", o->only_ops, "with --conformance: only these ops (allreduce, broadcast, ...)")->delimiter(',');
  app.add_option("--random", o->random, "run this many random cases instead (every rank draws the same from --seed)");
  app.add_option("--seed", o->seed, "seed of --random");
  app.add_option("--device", o->device, "where the buffers live: cpu, cuda, cuda:N (default MPCOMM_DEVICE)");
  app.add_option("-n,--iters", o->iters, "runs per case (alternating out-of-place and in-place)")->check(whole_at_least(1));
  return [o] { return run_selftest(*o); };
}

}  // namespace mpcomm::cli
