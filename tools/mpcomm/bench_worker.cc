// The measuring side of mpcomm bench: runs inside every rank (under launch), times each op × size the
// way nccl-tests does (warm-up, then `iters` back-to-back calls; the slowest rank's mean counts) and
// records per-iteration latency for p50/p99. Rank 0 prints the table and writes the JSON lines. When
// backends take turns (Config::turns), every row waits for its turn on the driver's board.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "bench.h"
#include "bench_arrival.h"
#include "bench_moe.h"
#include "bench_turns.h"
#include "device/device.h"
#include "testing/collective_check.h"

namespace mpcomm::bench {

namespace {

using clock_type = std::chrono::steady_clock;

OpKind op_kind(const std::string& op) {
  for (int k = 0; k < kNumOpKinds; ++k)
    if (op == to_string(static_cast<OpKind>(k))) return static_cast<OpKind>(k);
  return OpKind::send;  // "sendrecv"
}

bool block_op(const std::string& op) {
  return op == "allgather" || op == "reduce_scatter" || op == "gather" || op == "scatter" || op == "alltoall";
}

// One call of `op` on `bytes` (nccl-tests' size: the whole buffer for block ops).
struct Call {
  Communicator& comm;
  const Config& c;
  std::string op;
  DataType dt;
  ReduceOp red;
  size_t count;  // elements per rank block (block ops) or per buffer
  bool inplace;
  Buffers& b;

  void operator()() const {
    const int r = comm.rank(), n = comm.size();
    const size_t es = dtype_size(dt), blk = count * es;
    char* s = b.send.data();
    char* d = b.recv.data();
    if (op == "allreduce") {
      comm.allreduce(inplace ? d : s, d, count, dt, red);
    } else if (op == "broadcast") {
      comm.broadcast(d, count, dt, c.root);
    } else if (op == "reduce") {
      comm.reduce(inplace ? d : s, d, count, dt, red, c.root);
    } else if (op == "allgather") {
      comm.allgather(inplace ? d + static_cast<size_t>(r) * blk : s, d, count, dt);
    } else if (op == "reduce_scatter") {
      comm.reduce_scatter(s, inplace ? s + static_cast<size_t>(r) * blk : d, count, dt, red);
    } else if (op == "gather") {
      bool ip = inplace && r == c.root;
      comm.gather(ip ? d + static_cast<size_t>(r) * blk : s, d, count, dt, c.root);
    } else if (op == "scatter") {
      bool ip = inplace && r == c.root;
      comm.scatter(s, ip ? s + static_cast<size_t>(r) * blk : d, count, dt, c.root);
    } else if (op == "alltoall") {
      comm.alltoall(inplace ? d : s, d, count, dt);
    } else if (op == "sendrecv") {
      Request rq = comm.irecv(d, count, dt, (r + n - 1) % n, 0);
      Request sq = comm.isend(s, count, dt, (r + 1) % n, 0);
      rq.wait();
      sq.wait();
    }
  }
};

// Wrong elements of one checked run (summed over ranks).
uint64_t check_once(Communicator& comm, Communicator& control, const Config& c, const std::string& op, DataType dt,
                    ReduceOp red, size_t count, bool inplace) {
  uint64_t wrong = 0;
  if (op == "sendrecv") {
    const int r = comm.rank(), n = comm.size();
    std::vector<int32_t> out(count * dtype_size(dt) / 4 + 1, r * 7 + 1), in(out.size(), -1);
    const size_t bytes = out.size() * sizeof(int32_t);
    const Device dev = comm.options().device;
    device::Buffer dout(dev, bytes), din(dev, bytes);
    device::copy(dout.data(), out.data(), bytes);
    device::copy(din.data(), in.data(), bytes);
    Request rq = comm.irecv(din.data(), count, dt, (r + n - 1) % n, 1);
    Request sq = comm.isend(dout.data(), count, dt, (r + 1) % n, 1);
    rq.wait();
    sq.wait();
    device::copy(in.data(), din.data(), bytes);
    const size_t words = count * dtype_size(dt) / 4;
    for (size_t i = 0; i < words; ++i) wrong += in[i] != ((r + n - 1) % n) * 7 + 1;
  } else {
    check::Case k;
    k.op = op_kind(op);
    k.dtype = dt;
    k.redop = red;
    k.count = count;
    k.root = c.root;
    k.in_place = inplace;
    wrong = check::run_case(comm, k).wrong;
  }
  uint64_t total = 0;
  control.allreduce(&wrong, &total, 1, DataType::int64, ReduceOp::sum);
  return total;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

void print_header(const Config& c, const std::string& op, const std::string& dtype, const Communicator& comm) {
  std::printf(
      "#\n# mpcomm bench: backend %s, %d ranks on %d host(s), %s buffers, op %s, dtype %s, redop %s, root %d,"
      " iters %d, warmup %d, check %d\n",
      (std::string(comm.backend()) + (comm.options().reproducible > 0 ? kReproducibleSuffix : "")).c_str(), comm.size(),
      comm.topology().num_hosts(), to_string(comm.options().device).c_str(), op.c_str(), dtype.c_str(), c.redop.c_str(),
      c.root, c.iters, c.warmup, c.check);
  if (c.compute_us > 0)
    std::printf(
        "# each call after about %.0f us of compute on every rank (half to 1.5 times it), timed from its last "
        "rank's arrival\n",
        c.compute_us);
  std::printf("#%60s%34s\n", "out-of-place", "in-place");
  std::printf("#%11s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

}  // namespace

Buffers make_buffers(const Communicator& comm, const Config& c) {
  size_t es_max = 1;
  for (const auto& d : c.dtypes) es_max = std::max(es_max, dtype_size(parse_dtype(d)));
  const std::vector<size_t> all_sizes = sizes(c);
  const size_t largest = all_sizes.empty() ? 0 : all_sizes.back();
  const Device dev = comm.options().device;
  Buffers b;
  b.send = device::Buffer(dev, largest + es_max * static_cast<size_t>(comm.size()));
  b.recv = device::Buffer(dev, largest + es_max * static_cast<size_t>(comm.size()));
  device::fill(dev, b.send.data(), 0, b.send.size());
  device::fill(dev, b.recv.data(), 0, b.recv.size());
  return b;
}

size_t elements_per_rank(const std::string& op, size_t bytes, size_t es, int n) {
  // nccl-tests' size is the whole buffer; block ops split it into n blocks of whole elements.
  return bytes / (es * (block_op(op) ? static_cast<size_t>(n) : 1));
}

namespace {

// What comm ran for op at its last call.
std::string what_ran(const Communicator& comm, const std::string& op) {
  for (int k = 0; k < kNumOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (to_string(kind) != (op == "sendrecv" ? "send" : op)) continue;
    const char* ran = comm.stats()[static_cast<size_t>(k)].algorithm;
    if (ran != nullptr) return ran;
  }
  return "";
}

// Warm-up, a barrier, then c.iters timed calls of `op` on comm: the slowest rank's mean and per-call
// latencies, and what comm ran (read before the control communicator's calls, which may be comm's, overwrite it).
void time_calls(Communicator& comm, Communicator& control, const Config& c, const std::string& op,
                const std::function<void()>& call, Row& row) {
  for (int w = 0; w < c.warmup; ++w) call();
  if (c.compute_us > 0) {  // each call after compute, timed from its last rank's arrival
    const auto t0 = clock_type::now();
    const ArrivalTimes t = time_after_compute(control, c, call);
    row.start_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
    row.end_s = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
    row.ran = what_ran(comm, op);
    double sum = 0, waited = 0;
    for (double x : t.after_last) sum += x;
    for (double x : t.waited) waited += x;
    row.time_us = sum / static_cast<double>(t.after_last.size());
    row.p50_us = percentile(t.after_last, 0.5);
    row.p99_us = percentile(t.after_last, 0.99);
    row.compute_us = c.compute_us;
    row.wait_us = waited / static_cast<double>(t.waited.size());
    return;
  }
  control.barrier();
  std::vector<double> lat(static_cast<size_t>(c.iters)), lat_max(lat.size());
  auto t0 = clock_type::now();
  for (int i = 0; i < c.iters; ++i) {
    auto a = clock_type::now();
    call();
    lat[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(clock_type::now() - a).count();
  }
  const auto t1 = clock_type::now();
  row.ran = what_ran(comm, op);
  row.start_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
  row.end_s = std::chrono::duration<double>(t1.time_since_epoch()).count();
  double mean = std::chrono::duration<double, std::micro>(t1 - t0).count() / c.iters;
  control.allreduce(&mean, &row.time_us, 1, DataType::float64, ReduceOp::max);
  control.allreduce(lat.data(), lat_max.data(), lat.size(), DataType::float64, ReduceOp::max);
  row.p50_us = percentile(lat_max, 0.5);
  row.p99_us = percentile(lat_max, 0.99);
}

void fill_shape(Row& row, const Communicator& comm, const std::string& op, DataType dt) {
  row.backend = std::string(comm.backend()) + (comm.options().reproducible > 0 ? kReproducibleSuffix : "");
  row.op = op;
  row.dtype = std::string(to_string(dt));
  row.ranks = comm.size();
  row.hosts = comm.topology().num_hosts();
  row.device = to_string(comm.options().device);
}

}  // namespace

Row measure(Communicator& comm, Communicator& control, const Config& c, const std::string& op, DataType dt,
            size_t count, bool inplace, Buffers& b) {
  const int n = comm.size();
  const ReduceOp red = parse_reduce_op(c.redop);
  const size_t es = dtype_size(dt), size = count * es * (block_op(op) ? static_cast<size_t>(n) : 1);
  Row row;
  Call call{comm, c, op, dt, red, count, inplace, b};
  row.wrong = c.check ? check_once(comm, control, c, op, dt, red, count, inplace) : 0;
  Row timed;
  time_calls(
      comm, control, c, op, [&] { call(); }, timed);
  row.ran = timed.ran;
  fill_shape(row, comm, op, dt);
  row.redop = (op == "allreduce" || op == "reduce" || op == "reduce_scatter") ? c.redop : "none";
  row.root = (op == "broadcast" || op == "reduce" || op == "gather" || op == "scatter") ? c.root : -1;
  row.bytes = size;
  row.count = size / es;
  row.inplace = inplace;
  row.time_us = timed.time_us;
  row.start_s = timed.start_s, row.end_s = timed.end_s;
  row.algbw_gbs = static_cast<double>(size) / (row.time_us * 1e3);
  row.busbw_gbs = row.algbw_gbs * busbw_factor(op, n);
  row.p50_us = timed.p50_us;
  row.p99_us = timed.p99_us;
  row.compute_us = timed.compute_us, row.wait_us = timed.wait_us;
  return row;
}

Row measure_moe(Communicator& comm, Communicator& control, const Config& c, const std::string& op, DataType dt,
                size_t tokens) {
  const int n = comm.size(), me = comm.rank();
  const size_t es = dtype_size(dt), hidden = c.moe_hidden;
  const MoeCounts m = moe_counts(op, me, n, tokens, hidden, c.imbalance);
  const Device dev = comm.options().device;
  device::Buffer send(dev, std::max<size_t>(1, m.send_total * es)), recv(dev, std::max<size_t>(1, m.recv_total * es));
  // Bytes anyone can predict: byte j of the block rank `from` sends rank `to`.
  auto pattern = [](size_t from, size_t to, size_t j) {
    return static_cast<uint8_t>((from * 131 + to * 17 + j * 7) & 0xff);
  };
  const bool a2a = op == "alltoallv";
  {
    std::vector<uint8_t> host(m.send_total * es);
    for (size_t p = 0; p < m.send_counts.size(); ++p)
      for (size_t j = 0; j < m.send_counts[p] * es; ++j)
        host[(a2a ? m.send_displs[p] : 0) * es + j] = pattern(static_cast<size_t>(me), a2a ? p : 0, j);
    if (!host.empty()) device::copy(send.data(), host.data(), host.size());
  }
  auto call = [&] {
    if (a2a)
      comm.alltoallv(send.data(), m.send_counts, m.send_displs, recv.data(), m.recv_counts, m.recv_displs, dt);
    else
      comm.allgatherv(send.data(), m.send_total, recv.data(), m.recv_counts, m.recv_displs, dt);
  };
  Row row;
  if (c.check) {
    call();
    std::vector<uint8_t> got(m.recv_total * es);
    if (!got.empty()) device::copy(got.data(), recv.data(), got.size());
    uint64_t wrong = 0, total = 0;
    for (size_t p = 0; p < static_cast<size_t>(n); ++p)
      for (size_t j = 0; j < m.recv_counts[p] * es; ++j)
        wrong += got[m.recv_displs[p] * es + j] != pattern(p, a2a ? static_cast<size_t>(me) : 0, j);
    control.allreduce(&wrong, &total, 1, DataType::int64, ReduceOp::sum);
    row.wrong = total;
  }
  Row timed;
  time_calls(comm, control, c, op, call, timed);
  row.ran = timed.ran;
  fill_shape(row, comm, op, dt);
  row.redop = "none";
  row.root = -1;
  row.bytes = tokens * hidden * es;  // a rank's tokens: the mean of what each sends
  row.count = tokens * hidden;
  row.time_us = timed.time_us;
  row.start_s = timed.start_s, row.end_s = timed.end_s;
  row.algbw_gbs = static_cast<double>(row.bytes) / (row.time_us * 1e3);
  row.busbw_gbs = row.algbw_gbs * busbw_factor(op, n);
  row.p50_us = timed.p50_us;
  row.p99_us = timed.p99_us;
  row.compute_us = timed.compute_us, row.wait_us = timed.wait_us;
  row.imbalance = m.max_over_mean;
  return row;
}

bool has_inplace(const std::string& op) { return op != "broadcast" && op != "sendrecv" && !is_moe_op(op); }

int run_worker(Communicator& comm, const Config& c, const std::string& json_path) {
  const int n = comm.size();
  const bool lead = comm.rank() == 0;
  FILE* json = nullptr;
  if (lead && !json_path.empty()) {
    json = std::fopen(json_path.c_str(), "a");
    if (json == nullptr) throw InvalidArgument("mpcomm bench: cannot open " + json_path + " for writing");
  }
  uint64_t total_wrong = 0;
  Buffers b = make_buffers(comm, c);
  const std::vector<size_t> all_sizes = sizes(c);
  // Backends taking turns: this rank is ready once its communicator and buffers are.
  std::optional<TurnBoard> turns;
  uint32_t turn = 0;
  const std::string who = "rank " + std::to_string(comm.rank()) + " of backend " + std::string(comm.backend());
  // A bound, not an estimate: each other backend's row is at most this many calls, each bounded by the
  // ranks' timeout (the driver's death ends the ranks sooner: the launchers' PR_SET_PDEATHSIG).
  const double turn_timeout_s = c.timeout_s * (c.iters + c.warmup + 3) * std::max(1, c.turn_backends - 1);
  if (!c.turns.empty()) {
    turns.emplace(TurnBoard::attach(c.turns, c.turn_slot));
    turns->ready();
  }
  // One GPU shared by ranks that are each an emulated host: say what carried the bytes.
  std::string transport;
  if (comm.backend() == "nccl" && comm.topology().num_hosts() == n && n > 1 && device::cuda_devices() < n)
    transport = "nccl network transport between emulated hosts on one GPU (not NVLink)";
  // Each op in each data type in turn (-d float,bfloat16: the two tables of one op back to back).
  for (const auto& op : c.ops) for (const auto& dname : c.dtypes) {
    if (op == "sendrecv" && n == 1) {
      if (lead && dname == c.dtypes.front()) std::printf("#\n# %s skipped: it needs at least 2 ranks\n", op.c_str());
      continue;
    }
    const DataType dt = parse_dtype(dname);
    const size_t es = dtype_size(dt);
    if (lead) print_header(c, op, dname, comm);
    if (lead && is_moe_op(op))
      std::printf(
          "# mixture-of-experts %s: tokens of %zu elements, one expert per rank, router skew (Zipf exponent) "
          "%.2f; size = a rank's tokens\n",
          op == "alltoallv" ? "dispatch" : "gather", c.moe_hidden, c.imbalance);
    if (lead && !transport.empty()) std::printf("# transport: %s\n", transport.c_str());
    double busbw_sum = 0;
    int busbw_rows = 0;
    for (size_t bytes : all_sizes) {
      // Elements per block (block ops) or per buffer; the MoE ops: tokens per rank.
      const size_t count = is_moe_op(op) ? bytes / (es * c.moe_hidden) : elements_per_rank(op, bytes, es, n);
      if (count == 0) continue;
      Row rows[2];
      for (int ip = 0; ip < (has_inplace(op) ? 2 : 1); ++ip) {
        if (turns) turns->wait_turn(++turn, turn_timeout_s, who);
        Row& row = rows[ip] = is_moe_op(op) ? measure_moe(comm, comm, c, op, dt, count)
                                            : measure(comm, comm, c, op, dt, count, ip == 1, b);
        row.transport = transport;
        total_wrong += row.wrong;
        if (json != nullptr) std::fprintf(json, "%s\n", to_json(row).c_str());
        if (turns && lead) turns->finish(turn);
      }
      busbw_sum += rows[0].busbw_gbs;
      ++busbw_rows;
      if (lead) {
        const Row& o = rows[0];
        std::printf(" %11zu %12zu %8s %6s %5d %9.2f %7.3f %7.3f %6llu", o.bytes, o.count, dname.c_str(),
                    o.redop.c_str(), o.root, o.time_us, o.algbw_gbs, o.busbw_gbs, static_cast<unsigned long long>(o.wrong));
        if (has_inplace(op)) {
          const Row& i = rows[1];
          std::printf(" %9.2f %7.3f %7.3f %6llu\n", i.time_us, i.algbw_gbs, i.busbw_gbs, static_cast<unsigned long long>(i.wrong));
        } else if (is_moe_op(op)) {  // where the in-place columns are: how uneven the router made it
          std::printf("   busiest rank %.2fx the mean\n", o.imbalance);
        } else {
          std::printf(" %9s %7s %7s %6s\n", "n/a", "", "", "");
        }
        std::fflush(stdout);
        if (json != nullptr) std::fflush(json);
      }
    }
    if (lead) std::printf("# Avg bus bandwidth    : %.4f GB/s  (%s, %s, %s)\n", busbw_rows ? busbw_sum / busbw_rows : 0.0,
                          std::string(comm.backend()).c_str(), op.c_str(), dname.c_str());
  }
  if (json != nullptr) std::fclose(json);
  // Taking turns: the last turn is the one to exit in, so that no backend's teardown runs while another
  // measures (the driver waits for this backend's processes to end before the next turn).
  if (turns) {
    turns->wait_turn(++turn, turn_timeout_s, who);
    if (lead) turns->finish(TurnBoard::kAllDone);
  }
  comm.barrier();
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace mpcomm::bench
