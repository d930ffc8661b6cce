// benchmarks/plain_mpi.c's loop written against mpcomm's public API only: what an application calling
// comm->allreduce / comm->broadcast sees, with the same flags, iteration rule, statistics and JSON rows,
// so that scripts/perf-check --mpi-plain can print one next to the other.
//
//   build/mpcomm launch -n N --backend mpi    -- build/benchmarks/api_latency [flags]
//   build/mpcomm launch -n N --backend native -- build/benchmarks/api_latency [flags]
//
// flags: [-o allreduce,broadcast,sendrecv] [-b 8] [-e 64M] [-f 2] [-w 10] [-n 100] [-m 10] [-B 1G] [-j FILE]
//
// The backend is MPCOMM_BACKEND (init_from_env(); mpcomm launch --backend sets it). Method, per op and
// size (float32 elements, sum; broadcast from rank 0; out of place for allreduce):
//   1. one checked call: every rank fills its input with rank + 1 (allreduce: every element must come out
//      as n(n+1)/2) or the root fills 1, 2, ... 1021, 1, ... and the others 0 (broadcast); the wrong
//      elements of all ranks are summed into "wrong";
//   2. W warm-up iterations, then I timed ones; an iteration is comm->barrier(), t0, one call, t1
//      (std::chrono::steady_clock, i.e. clock_gettime(CLOCK_MONOTONIC)); t1 - t0 is that rank's time;
//   3. per rank the median (and mean, min) over the I timed iterations; the row's median_us is the
//      largest of the ranks' medians (comm->allreduce max), min_median_us the smallest.
// Iteration rule (the same in plain_mpi.c): I(bytes) = min(n, max(m, B / bytes)) and
// W(bytes) = max(1, w * I / n): with the defaults 100 timed and 10 warm-up iterations up to 8 MiB,
// 64 (6 warm-up) at 16 MiB, 32 (3) at 32 MiB, 16 (1) at 64 MiB.
//
// sendrecv (-o sendrecv; not in the default list) is a pipeline's ring shift: every rank isends its
// buffer to rank + 1 and irecvs from rank − 1 (tag 0), then waits for both; its send buffer is written
// afresh before each iteration's barrier (outside the timed call), as a pipeline stage's activations are,
// and its checked call must deliver rank − 1's pattern.
//
// Rank 0 prints one JSON object per row to stdout (and appends it to FILE with -j), as plain_mpi does
// with "program":"mpcomm", "backend":"<comm->backend()>", "variant":"api".
#include <mpcomm/mpcomm.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr size_t MiB = size_t{1} << 20;

struct Config {
  bool allreduce = true, broadcast = true, sendrecv = false;
  size_t min_bytes = 8, max_bytes = 64 * MiB;
  double factor = 2.0;
  int warmup = 10, iters = 100, min_iters = 10;
  size_t budget = size_t{1} << 30;
  std::string json;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "api_latency: %s\n", msg.c_str());
  std::exit(2);
}

// "8", "64K", "64M", "1G"
size_t parse_bytes(const char* s) {
  char* end;
  double v = std::strtod(s, &end);
  size_t mult = 1;
  if (*end == 'k' || *end == 'K') mult = size_t{1} << 10, ++end;
  else if (*end == 'm' || *end == 'M') mult = MiB, ++end;
  else if (*end == 'g' || *end == 'G') mult = size_t{1} << 30, ++end;
  if (end == s || *end != '\0' || v < 0) die("bad size (want e.g. 8, 64K, 64M)");
  return static_cast<size_t>(v * static_cast<double>(mult));
}

void usage() {
  std::printf(
      "usage: api_latency [-o allreduce,broadcast,sendrecv] [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-n ITERS]\n"
      "                   [-m MIN_ITERS] [-B BUDGET_BYTES] [-j FILE]\n"
      "defaults: -o allreduce,broadcast -b 8 -e 64M -f 2 -w 10 -n 100 -m 10 -B 1G\n"
      "iterations per size: I = min(n, max(m, B / bytes)), warm-up max(1, w * I / n)\n"
      "run under: mpcomm launch -n N --backend mpi|native -- api_latency ...\n");
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    }
    if (i + 1 >= argc) die("a flag without its value (-h for help)");
    const char* v = argv[++i];
    if (a == "-o" || a == "--ops") {
      c.allreduce = std::strstr(v, "allreduce") != nullptr;
      c.broadcast = std::strstr(v, "broadcast") != nullptr;
      c.sendrecv = std::strstr(v, "sendrecv") != nullptr;
      if (!c.allreduce && !c.broadcast && !c.sendrecv) die("-o takes a comma list of allreduce, broadcast, sendrecv");
    } else if (a == "-b") c.min_bytes = parse_bytes(v);
    else if (a == "-e") c.max_bytes = parse_bytes(v);
    else if (a == "-f") c.factor = std::atof(v);
    else if (a == "-w") c.warmup = std::atoi(v);
    else if (a == "-n") c.iters = std::atoi(v);
    else if (a == "-m") c.min_iters = std::atoi(v);
    else if (a == "-B") c.budget = parse_bytes(v);
    else if (a == "-j" || a == "--json") c.json = v;
    else die("unknown flag " + a + " (-h for help)");
  }
  c.min_bytes = std::max<size_t>(c.min_bytes, 4);
  if (c.factor <= 1.0 || c.iters < 1 || c.min_iters < 1 || c.warmup < 0 || c.max_bytes < c.min_bytes)
    die("want -f > 1, -n >= 1, -m >= 1, -w >= 0, -e >= -b");
  return c;
}

// The iteration rule (plain_mpi.c has the same).
int timed_iters(const Config& c, size_t bytes) {
  return static_cast<int>(std::min<size_t>(c.iters, std::max<size_t>(c.min_iters, c.budget / bytes)));
}
int warmup_iters(const Config& c, int iters) {
  const int w = static_cast<int>(static_cast<long long>(c.warmup) * iters / c.iters);
  return c.warmup == 0 ? 0 : std::max(w, 1);
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum class Op { allreduce, broadcast, sendrecv };
const char* op_name(Op op) { return op == Op::allreduce ? "allreduce" : op == Op::broadcast ? "broadcast" : "sendrecv"; }

// The pattern rank `from` sends in the ring shift, fresh each iteration `it`.
float shift_value(int from, int it, size_t i) { return static_cast<float>((from + 1) * 1000 + (it % 7 + 7) % 7 + static_cast<int>(i % 251)); }

struct Bench {
  mpcomm::Communicator& comm;
  const Config& c;
  float* send;
  float* recv;
  std::vector<double> t;

  void call(Op op, size_t count) {
    if (op == Op::allreduce)
      comm.allreduce(send, recv, count, mpcomm::DataType::float32, mpcomm::ReduceOp::sum);
    else if (op == Op::broadcast)
      comm.broadcast(recv, count, mpcomm::DataType::float32, 0);
    else {
      const int n = comm.size(), r = comm.rank();
      mpcomm::Request rq = comm.irecv(recv, count, mpcomm::DataType::float32, (r + n - 1) % n);
      mpcomm::Request sq = comm.isend(send, count, mpcomm::DataType::float32, (r + 1) % n);
      rq.wait();
      sq.wait();
    }
  }

  // The send buffer of iteration `it` (sendrecv only).
  void fill(Op op, size_t count, int it) {
    if (op != Op::sendrecv) return;
    for (size_t i = 0; i < count; ++i) send[i] = shift_value(comm.rank(), it, i);
  }

  // One checked call; returns this rank's wrong elements.
  double check(Op op, size_t count) {
    const int rank = comm.rank(), n = comm.size();
    double wrong = 0;
    if (op == Op::allreduce) {
      for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(rank + 1), recv[i] = -1.0f;
      call(op, count);
      const float want = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != want;
    } else if (op == Op::broadcast) {
      for (size_t i = 0; i < count; ++i) recv[i] = rank == 0 ? static_cast<float>(i % 1021 + 1) : 0.0f;
      call(op, count);
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != static_cast<float>(i % 1021 + 1);
    } else {
      fill(op, count, -1);
      for (size_t i = 0; i < count; ++i) recv[i] = -1.0f;
      call(op, count);
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != shift_value((rank + n - 1) % n, -1, i);
    }
    return wrong;
  }

  void row(Op op, size_t bytes) {
    const size_t count = bytes / sizeof(float);
    bytes = count * sizeof(float);
    double wrong = check(op, count);
    const int iters = timed_iters(c, bytes), warm = warmup_iters(c, iters);
    t.assign(iters, 0.0);
    for (int i = -warm; i < iters; ++i) {
      fill(op, count, i);
      comm.barrier();
      const double t0 = now_us();
      call(op, count);
      const double t1 = now_us();
      if (i >= 0) t[i] = t1 - t0;
    }
    double sum = 0;
    for (double x : t) sum += x;
    std::sort(t.begin(), t.end());
    const double med = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
    // largest median, largest mean, largest min, then the smallest median (as the negated largest)
    double mine[4] = {med, sum / iters, t[0], -med}, most[4];
    comm.allreduce(mine, most, 4, mpcomm::DataType::float64, mpcomm::ReduceOp::max);
    double all_wrong = 0;
    comm.allreduce(&wrong, &all_wrong, 1, mpcomm::DataType::float64, mpcomm::ReduceOp::sum);
    if (comm.rank() != 0) return;
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"program\":\"mpcomm\",\"backend\":\"%.*s\",\"variant\":\"api\",\"op\":\"%s\",\"dtype\":\"float32\","
                  "\"bytes\":%zu,\"count\":%zu,\"ranks\":%d,\"warmup\":%d,\"iters\":%d,\"wrong\":%lld,\"median_us\":%.3f,"
                  "\"min_median_us\":%.3f,\"mean_us\":%.3f,\"min_us\":%.3f}",
                  static_cast<int>(comm.backend().size()), comm.backend().data(), op_name(op), bytes, count, comm.size(),
                  warm, iters, static_cast<long long>(all_wrong), most[0], -most[3], most[1], most[2]);
    std::printf("%s\n", line);
    std::fflush(stdout);
    if (!c.json.empty()) {
      FILE* f = std::fopen(c.json.c_str(), "a");
      if (!f) die("cannot open " + c.json);
      std::fprintf(f, "%s\n", line);
      std::fclose(f);
    }
  }
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  try {
    auto comm = mpcomm::init_from_env();
    const size_t cap = (c.max_bytes + 4095) / 4096 * 4096;
    std::unique_ptr<float, FreeDeleter> send(static_cast<float*>(std::aligned_alloc(4096, cap)));
    std::unique_ptr<float, FreeDeleter> recv(static_cast<float*>(std::aligned_alloc(4096, cap)));
    if (!send || !recv) die("out of memory");
    std::memset(send.get(), 0, cap);
    std::memset(recv.get(), 0, cap);
    Bench b{*comm, c, send.get(), recv.get(), {}};
    for (Op op : {Op::allreduce, Op::broadcast, Op::sendrecv}) {
      if (op == Op::allreduce ? !c.allreduce : op == Op::broadcast ? !c.broadcast : !c.sendrecv) continue;
      for (double x = static_cast<double>(c.min_bytes); x <= static_cast<double>(c.max_bytes) * (1 + 1e-9); x *= c.factor)
        b.row(op, static_cast<size_t>(x + 0.5));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "api_latency: %s\n", e.what());
    return 1;
  }
  return 0;
}
