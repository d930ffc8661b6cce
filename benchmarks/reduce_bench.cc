// Reduction kernels against this machine's copy bandwidth (Google Benchmark).
//
//   build/benchmarks/reduce_bench [--benchmark_filter=...]
//
// Every case reduces two 16 MiB-per-source inputs into an output the way the native backend's ring does
// (dst = a op b, out of cache), so bytes/s counts the two reads and one write, as memcpy's counts one read
// and one write. "memcpy" is the ceiling a bandwidth-bound kernel can approach.
//
// BM_kernels/SET/DTYPE/SIZE[/streamed]: the same two-source sum with each kernel set this CPU runs
// (generic, avx2, avx512: what MPCOMM_KERNELS chooses), 256 KiB per source (in the cache) and 16 MiB
// (out of it); "streamed" is reduce_into_streamed into a streamed output (the two-copy allreduce's
// outputs). bytes/s as BM_reduce.
//
// BM_reduce_sources: n sources of 32 KiB each, in the cache, reduced into a 32 KiB output (the flat and
// arrival allreduces' case: every rank's input at once); bytes/s counts n reads and one write.
//
// BM_reproducible_sum/DTYPE/n: the reproducible sum of n sources (core/reproducible/exact.h: sum_values, the
// native direct algorithms' one pass), 16 MiB per source of mixed magnitude and sign, out of the cache; bytes/s
// as BM_reduce. Set against BM_reduce's same sum it is the cost of the bits being the same.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/reproducible/exact.h"
#include "kernels/reduce.h"
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

void BM_reproducible_sum(benchmark::State& st, DataType dt) {
  const size_t es = mpcomm::dtype_size(dt), count = kBytes / es, n = static_cast<size_t>(st.range(0));
  std::vector<std::vector<char>> in(n, std::vector<char>(kBytes));
  for (size_t k = 0; k < n; ++k)
    for (size_t i = 0; i < count; ++i) {  // ±(1 .. 2) · 2^(−16 .. 15)
      const uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (k + 1) * 0xC2B2AE3D27D4EB4Full;
      const double v = ((h & 1) ? -1.0 : 1.0) *
                       std::ldexp(1.0 + static_cast<double>(h >> 44) / 1048576.0, static_cast<int>(h >> 8 & 31) - 16);
      const auto f = static_cast<float>(v);
      const uint16_t b = mpcomm::float_to_bf16(f);
      if (es == 8) std::memcpy(in[k].data() + i * 8, &v, 8);
      if (es == 4) std::memcpy(in[k].data() + i * 4, &f, 4);
      if (es == 2) std::memcpy(in[k].data() + i * 2, &b, 2);
    }
  std::vector<const void*> srcs;
  for (const auto& v : in) srcs.push_back(v.data());
  std::vector<char> out(kBytes);
  for (auto _ : st) {
    mpcomm::detail::repro::sum_values(srcs.data(), static_cast<int>(n), count, dt, out.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * (n + 1) * kBytes));
}
BENCHMARK_CAPTURE(BM_reproducible_sum, float32, DataType::float32)->Arg(2)->Arg(4)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reproducible_sum, bfloat16, DataType::bfloat16)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_reproducible_sum, float64, DataType::float64)->Arg(2)->Unit(benchmark::kMicrosecond);

void BM_kernels(benchmark::State& st, mpcomm::Kernels k, DataType dt, size_t bytes, bool streamed) {
  const size_t count = bytes / mpcomm::dtype_size(dt);
  // 1.0 in float32 / bfloat16 / float16, so that sums stay finite and normal
  const uint32_t one32 = 0x3f800000u;
  const uint16_t one16 = dt == DataType::bfloat16 ? 0x3f80 : 0x3c00;
  std::vector<char> a(bytes), b(bytes), out(bytes);
  for (size_t i = 0; i < count; ++i) {
    if (dt == DataType::float32) {
      std::memcpy(a.data() + 4 * i, &one32, 4);
    } else {
      std::memcpy(a.data() + 2 * i, &one16, 2);
    }
  }
  b = a;
  const void* srcs[2] = {a.data(), b.data()};
  for (auto _ : st) {
    if (streamed) {
      mpcomm::reduce_into_streamed(k, nullptr, out.data(), srcs, 2, count, dt, ReduceOp::sum);
    } else {
      mpcomm::reduce_into(k, out.data(), srcs, 2, count, dt, ReduceOp::sum);
    }
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 3 * bytes));
}

const bool kernels_registered = [] {
  for (mpcomm::Kernels k : {mpcomm::Kernels::generic, mpcomm::Kernels::avx2, mpcomm::Kernels::avx512}) {
    if (!mpcomm::kernels_supported(k)) continue;
    const std::string set = mpcomm::kernels_option(k);
    for (DataType dt : {DataType::float32, DataType::bfloat16, DataType::float16})
      for (size_t bytes : {size_t{256} << 10, size_t{16} << 20})
        for (bool streamed : {false, true}) {
          if (streamed && bytes < (size_t{16} << 20)) continue;
          const std::string name = "BM_kernels/" + set + "/" + std::string(mpcomm::to_string(dt)) + "/" +
                                   (bytes < (1u << 20) ? std::to_string(bytes >> 10) + "K" : std::to_string(bytes >> 20) + "M") +
                                   (streamed ? "/streamed" : "");
          benchmark::RegisterBenchmark(name.c_str(), BM_kernels, k, dt, bytes, streamed)->Unit(benchmark::kMicrosecond);
        }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
