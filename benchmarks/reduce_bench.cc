// Reduction kernels against this machine's copy bandwidth (Google Benchmark).
//
//   build/benchmarks/reduce_bench [--benchmark_filter=...]
//
// Every case reduces two 16 MiB-per-source inputs into an output the way the native backend's ring does
// (dst = a op b, out of cache), so bytes/s counts the two reads and one write, as memcpy's counts one read
// and one write. "memcpy" is the ceiling a bandwidth-bound kernel can approach.
//
// BM_reduce_sources: n sources of 32 KiB each, in the cache, reduced into a 32 KiB output (the flat and
// arrival allreduces' case: every rank's input at once); bytes/s counts n reads and one write.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "core/reduce.h"
#include "mpcomm/types.h"

namespace {

using mpcomm::DataType;
using mpcomm::ReduceOp;

constexpr size_t kBytes = 16u << 20;

void BM_memcpy(benchmark::State& st) {
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  for (auto _ : st) {
    std::memcpy(b.data(), a.data(), kBytes);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 2 * kBytes));
}
BENCHMARK(BM_memcpy)->Unit(benchmark::kMicrosecond);

void BM_reduce(benchmark::State& st, DataType dt, ReduceOp op) {
  const size_t es = mpcomm::dtype_size(dt), count = kBytes / es;
  std::vector<char> a(kBytes), b(kBytes), out(kBytes);
  // small integers (in every dtype's encoding: zero bytes are 0 everywhere, and 0 op 0 is 0)
  std::memset(a.data(), 0, kBytes);
  std::memset(b.data(), 0, kBytes);
  const void* srcs[2] = {a.data(), b.data()};
  for (auto _ : st) {
    mpcomm::reduce_into(out.data(), srcs, 2, count, dt, op);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 3 * kBytes));
  st.SetLabel(mpcomm::reduce_kernel_isa());
}
BENCHMARK_CAPTURE(BM_reduce, float32_sum, DataType::float32, ReduceOp::sum)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, bfloat16_sum, DataType::bfloat16, ReduceOp::sum)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, float16_sum, DataType::float16, ReduceOp::sum)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, float64_sum, DataType::float64, ReduceOp::sum)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, int32_sum, DataType::int32, ReduceOp::sum)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, int8_sum, DataType::int8, ReduceOp::sum)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, float32_max, DataType::float32, ReduceOp::max)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reduce, bfloat16_max, DataType::bfloat16, ReduceOp::max)->Unit(benchmark::kMicrosecond);

void BM_reduce_sources(benchmark::State& st, DataType dt, ReduceOp op) {
  const int n = static_cast<int>(st.range(0));
  const size_t bytes = 32u << 10, count = bytes / mpcomm::dtype_size(dt);
  std::vector<std::vector<char>> in(static_cast<size_t>(n), std::vector<char>(bytes, 0));
  std::vector<char> out(bytes);
  std::vector<const void*> srcs;
  for (const auto& v : in) srcs.push_back(v.data());
  for (auto _ : st) {
    mpcomm::reduce_into(out.data(), srcs.data(), n, count, dt, op);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * (n + 1) * static_cast<int64_t>(bytes));
  st.SetLabel(mpcomm::reduce_kernel_isa());
}
BENCHMARK_CAPTURE(BM_reduce_sources, float32_sum, DataType::float32, ReduceOp::sum)->Arg(3)->Arg(4)->Arg(8);
BENCHMARK_CAPTURE(BM_reduce_sources, int32_max, DataType::int32, ReduceOp::max)->Arg(4);
BENCHMARK_CAPTURE(BM_reduce_sources, bfloat16_sum, DataType::bfloat16, ReduceOp::sum)->Arg(4);

}  // namespace

BENCHMARK_MAIN();
