// What auto's routing costs per call (Google Benchmark): a blocking 8-byte allreduce on a one-rank
// communicator of native, against the same call on an auto communicator, which routes it to native.
// Both go through the front door and native's one-rank path, so the difference is the routing: a memo
// hit when the size repeats, a look through the table's rows when it changes every call (alternating).
//
//   build/benchmarks/auto_route_bench [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <benchmark/benchmark.h>

#include <memory>

#include "mpcomm/mpcomm.h"

namespace {

using namespace mpcomm;

std::unique_ptr<Communicator> one_rank(const char* backend) {
  Options o;
  o.params["MPCOMM_AUTO_BACKENDS"] = "native";  // one process: no mpirun world, and gloo adds nothing here
  return create(backend, std::make_shared<HashStore>(), 0, 1, o);
}

void BM_allreduce(benchmark::State& state, const char* backend, bool alternate) {
  auto comm = one_rank(backend);
  float x[4] = {1, 2, 3, 4};
  size_t k = 0;
  for (auto _ : state) comm->allreduce(x, x, alternate ? 1 + (++k & 1) : 2, DataType::float32, ReduceOp::sum);
}
BENCHMARK_CAPTURE(BM_allreduce, native, "native", false);
BENCHMARK_CAPTURE(BM_allreduce, auto, "auto", false);
BENCHMARK_CAPTURE(BM_allreduce, native_alternating, "native", true);
BENCHMARK_CAPTURE(BM_allreduce, auto_alternating, "auto", true);

}  // namespace

BENCHMARK_MAIN();
