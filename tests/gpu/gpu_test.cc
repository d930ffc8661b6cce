// Device buffers. The host staging that lets native, gloo and mpi take cuda buffers is tested on any
// machine (Options::staging sends host buffers down the same path); the GPU tests proper skip without a
// GPU and say why; and a machine without one must refuse cuda buffers with the reason.
#include <gtest/gtest.h>

#include <algorithm>

#include "device/device.h"
#include "harness/process.h"
#include "harness/thread_world.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string no_gpu_reason() {
  std::string why;
  return device::cuda_devices(&why) == 0 ? why : "";
}

#define SKIP_WITHOUT_GPU()                                                           \
  do {                                                                               \
    if (device::cuda_devices() == 0) GTEST_SKIP() << "no GPU here: " << no_gpu_reason(); \
  } while (0)

void expect_cases_pass(testing::ThreadWorld& world, const std::vector<DataType>& only = {}) {
  const int n = world.size();
  for (OpKind op : check::checked_ops())
    for (const auto& c : check::conformance_cases(op, n)) {
      if (!only.empty() && std::find(only.begin(), only.end(), c.dtype) == only.end()) continue;
      if (world.comm(0).backend() == "nccl" && is_bitwise(c.redop) &&
          (op == OpKind::allreduce || op == OpKind::reduce || op == OpKind::reduce_scatter)) {
        // NCCL has no bitwise reductions: refused on every rank, before any traffic.
        world.run([&](int, Communicator& comm) { EXPECT_THROW(check::run_case(comm, c), Unsupported); });
        continue;
      }
      std::vector<check::Result> res(static_cast<size_t>(n));
      world.run([&](int r, Communicator& comm) { res[static_cast<size_t>(r)] = check::run_case(comm, c); });
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(res[r].wrong, 0u) << world.comm(0).backend() << ": " << check::describe(c) << ": rank " << r
                                    << ", first wrong " << res[r].first_wrong;
    }
}

// ---- staging, on any machine ---------------------------------------------------------------------

class Staging : public ::testing::TestWithParam<std::string> {};

// Every op, count and in-place layout through the staging buffer, for element sizes 1, 2 and 8 (staging
// moves bytes; the dtype only sets how many): overlapping buffers share one staged region, the broadcast
// root's and in-place inputs are copied in, results copied back.
TEST_P(Staging, EveryCaseThroughTheStagingBuffer) {
  Options o;
  o.staging = 1;
  testing::ThreadWorld world(GetParam(), 3, o);
  expect_cases_pass(world, {DataType::int8, DataType::bfloat16, DataType::float64});
}

TEST_P(Staging, PointToPointThroughTheStagingBuffer) {
  Options o;
  o.staging = 1;
  testing::ThreadWorld world(GetParam(), 2, o);
  world.run([&](int r, Communicator& comm) {
    std::vector<int32_t> out(1000), in(1000, -1);
    for (int i = 0; i < 1000; ++i) out[static_cast<size_t>(i)] = r * 100000 + i;
    Request rq = comm.irecv(in.data(), in.size(), DataType::int32, 1 - r, 3);
    Request sq = comm.isend(out.data(), out.size(), DataType::int32, 1 - r, 3);
    out.assign(out.size(), 7);  // the send was copied when it started: changing the buffer now is allowed
    sq.wait();
    rq.wait();
    for (int i = 0; i < 1000; ++i)
      if (in[static_cast<size_t>(i)] != (1 - r) * 100000 + i)
        throw std::runtime_error("element " + std::to_string(i) + " = " + std::to_string(in[static_cast<size_t>(i)]));
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, Staging, ::testing::ValuesIn(testing::thread_backends()),
                         [](const auto& info) { return info.param; });

// ---- a machine without a GPU says so ------------------------------------------------------------

TEST(NoGpu, CudaBuffersAreRefusedWithTheReason) {
  if (device::cuda_devices() > 0) GTEST_SKIP() << "a GPU is present";
  Options o;
  o.device = Device{Device::cuda, 0};
  auto avail = available_backends();
  for (const std::string b : {"native", "gloo"}) {
    if (std::find(avail.begin(), avail.end(), b) == avail.end()) continue;
    try {
      create(b, std::make_shared<HashStore>(), 0, 1, o);
      FAIL() << b << " was created on cuda buffers without a GPU";
    } catch (const Unsupported& e) {
      EXPECT_TRUE(contains(e.what(), b + " on cuda:0 needs a GPU: " + no_gpu_reason())) << e.what();
    }
  }
  // A cpu communicator refuses nothing; device memory cannot be had either, and says why.
  EXPECT_THROW(device::Buffer(Device{Device::cuda, 0}, 16), Unsupported);
}

TEST(NoGpu, NcclIsCompiledInButNotAvailable) {
#ifndef MPCOMM_HAVE_NCCL
  GTEST_SKIP() << "this build has no nccl backend (no CUDA toolkit or NCCL at configure time)";
#else
  if (device::cuda_devices() > 0) GTEST_SKIP() << "a GPU is present";
  auto compiled = compiled_backends(), avail = available_backends();
  EXPECT_NE(std::find(compiled.begin(), compiled.end(), "nccl"), compiled.end());
  EXPECT_EQ(std::find(avail.begin(), avail.end(), "nccl"), avail.end());
  auto store = std::make_shared<HashStore>();
  try {
    create("nccl", store, 0, 1);
    FAIL() << "the nccl backend was created without a GPU";
  } catch (const Unsupported& e) {
    EXPECT_TRUE(contains(e.what(), "backend nccl needs a GPU")) << e.what();
  }
#endif
}

TEST(NoGpu, BenchWithCudaBuffersFailsWithTheReason) {
  if (device::cuda_devices() > 0) GTEST_SKIP() << "a GPU is present";
  auto r = testing::run_command(std::string(MPCOMM_CLI) + " bench --ranks 2 --device cuda -b 8 -e 8");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--device cuda needs a GPU")) << r.output;
}

// ---- on a GPU ------------------------------------------------------------------------------------

const std::vector<DataType> kGpuDtypes = {DataType::float32, DataType::bfloat16, DataType::float16};

TEST(Gpu, CpuBackendsOnDeviceBuffers) {
  SKIP_WITHOUT_GPU();
  for (const auto& b : testing::thread_backends())
    for (int n : {1, 2, 3, 4}) {
      Options o;
      o.device = Device{Device::cuda, 0};
      testing::ThreadWorld world(b, n, o);
      expect_cases_pass(world, kGpuDtypes);
    }
}

// NCCL: one process per rank, each its own emulated host, so that several ranks may share one GPU.
TEST(Gpu, NcclConformanceThroughLaunch) {
  SKIP_WITHOUT_GPU();
  auto avail = available_backends();
  if (std::find(avail.begin(), avail.end(), "nccl") == avail.end()) GTEST_SKIP() << "no nccl backend in this build";
  for (int n : {1, 2, 3, 4}) {
    const std::string ns = std::to_string(n);
    auto r = testing::run_command(std::string(MPCOMM_CLI) + " launch -n " + ns + " --hosts " + ns +
                                  " --backend nccl --timeout 120 -- " + MPCOMM_CLI +
                                  " selftest --conformance --device cuda --only-dtypes float32,bfloat16,float16");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "conformance: backend nccl, " + ns + " ranks, cuda buffers, ")) << r.output;
    EXPECT_TRUE(contains(r.output, " 0 failed")) << r.output;
  }
}

TEST(Gpu, MpiOnDeviceBuffersThroughLaunch) {
  SKIP_WITHOUT_GPU();
  auto avail = available_backends();
  if (std::find(avail.begin(), avail.end(), "mpi") == avail.end()) GTEST_SKIP() << "no mpi backend in this build";
  auto r = testing::run_command(std::string(MPCOMM_CLI) + " launch -n 2 --backend mpi --timeout 120 -- " + MPCOMM_CLI +
                                " selftest --conformance --device cuda --only-dtypes float32,bfloat16,float16");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "conformance: backend mpi, 2 ranks, cuda buffers, ")) << r.output;
  EXPECT_TRUE(contains(r.output, " 0 failed")) << r.output;
}

}  // namespace
}  // namespace mpcomm
