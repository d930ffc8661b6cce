// What the front door costs per call (Google Benchmark): a blocking allreduce of 8 bytes through the
// public Communicator onto a backend that does nothing, against calling that backend directly. The
// difference is the per-call bookkeeping every op pays whatever the backend: argument checks, the
// sequence number, two op-clock readings, the flight recorder's entry, the statistics.
//
//   build/benchmarks/front_door_bench [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <benchmark/benchmark.h>

#include <memory>

#include "core/backend.h"
#include "core/front_door.h"
#include "mpcomm/mpcomm.h"

namespace {

using namespace mpcomm;

class NullBackend final : public detail::Backend {
 public:
  NullBackend(Options opts) : Backend("null", 0, 1, topology(), std::move(opts), nullptr) {}
  void run(const detail::Op& op) override {
    op.algorithm = "nothing";
    benchmark::DoNotOptimize(op.recv);
  }
  std::shared_ptr<detail::RequestState> start(const detail::Op&) override { return nullptr; }
  void abort(ErrorCode, const std::string&) override {}

 private:
  static Topology topology() {
    Topology t;
    t.host_of_rank = {0};
    t.host_names = {"here"};
    return t;
  }
};

Options options(long trace_entries) {
  Options o;
  o.params["MPCOMM_TRACE_ENTRIES"] = std::to_string(trace_entries);
  return o.resolved();
}

// The backend alone: what a call costs without the front door.
void BM_backend_directly(benchmark::State& state) {
  auto owned = std::make_unique<NullBackend>(options(64));
  detail::Backend* b = owned.get();
  benchmark::DoNotOptimize(b);  // a virtual call, as the front door makes it
  float x[2] = {1, 2};
  detail::Op op{.kind = OpKind::allreduce, .send = x, .recv = x, .count = 2, .dtype = DataType::float32};
  for (auto _ : state) {
    b->run(op);
    ++op.seq;
  }
}
BENCHMARK(BM_backend_directly);

// Through the front door, with the flight recorder at its default size (64) and off (0).
void BM_front_door(benchmark::State& state) {
  auto comm = detail::make_communicator(std::make_unique<NullBackend>(options(state.range(0))), nullptr);
  float x[2] = {1, 2};
  for (auto _ : state) comm->allreduce(x, x, 2, DataType::float32, ReduceOp::sum);
  state.counters["trace_entries"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_front_door)->Arg(64)->Arg(0);

}  // namespace

BENCHMARK_MAIN();
