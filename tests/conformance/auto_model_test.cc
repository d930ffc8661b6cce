// The auto backend where its table has no row for a call: the child this machine's cost-model profile
// (`mpcomm plan --calibrate`, MPCOMM_PROFILE_DIR) predicts fastest runs it — every rank alike, from rank 0's
// profile — and native where the profile has no constants for the others, or there is no profile.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/thread_world.h"

namespace mpcomm {
namespace {

bool have_gloo() {
  for (const auto& b : available_backends())
    if (b == "gloo") return true;
  return false;
}

// A profile directory and an auto table without rows, removed with the object; MPCOMM_PROFILE_DIR points at the
// directory while it lives.
struct ProfileDir {
  std::string dir, table;
  ProfileDir() {
    dir = (std::filesystem::temp_directory_path() / ("mpcomm-auto-model-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    table = dir + "/empty.table";
    std::ofstream(table) << "mpcomm-tuning 1 backend=auto\n";
    ::setenv("MPCOMM_PROFILE_DIR", dir.c_str(), 1);
  }
  ~ProfileDir() {
    ::unsetenv("MPCOMM_PROFILE_DIR");
    std::filesystem::remove_all(dir);
  }
  // native's and gloo's bandwidth within a host, GB/s (0: no constants for that backend).
  void write(double native_gbs, double gloo_gbs) const {
    std::ofstream f(dir + "/this-machine.profile");
    f << "mpcomm-profile 1\nname = test\nranks_per_host = 3\n";
    auto backend = [&](const char* name, double gbs) {
      if (gbs > 0)
        f << "backend " << name << " overhead_us=1 intra_alpha_us=1 intra_bw_gbs=" << gbs
          << " inter_alpha_us=1 inter_bw_gbs=" << gbs << "\n";
    };
    backend("native", native_gbs);
    backend("gloo", gloo_gbs);
  }
};

std::string allreduce_ran_on(const std::string& table) {
  Options o;
  o.timeout = Millis(20000);
  o.params["MPCOMM_TUNING"] = table;
  std::vector<std::string> ran(3);
  testing::ThreadWorld world("auto", 3, o);
  world.run([&](int r, Communicator& c) {
    std::vector<int32_t> v(1000, r + 1), out(1000);
    c.allreduce(v.data(), out.data(), v.size(), DataType::int32, ReduceOp::sum);
    for (int32_t x : out) ASSERT_EQ(x, 6);
    const char* a = c.stats()[static_cast<size_t>(OpKind::allreduce)].algorithm;
    ran[static_cast<size_t>(r)] = a != nullptr ? a : "";
  });
  for (const auto& x : ran) EXPECT_EQ(x.substr(0, x.find('/')), ran[0].substr(0, ran[0].find('/'))) << "ranks differ";
  return ran[0].substr(0, ran[0].find('/'));
}

TEST(AutoModel, WhereNoRowMatchesTheProfilesFastestChildRuns) {
  if (!have_gloo()) GTEST_SKIP() << "this build has no gloo: auto has one backend to route to";
  ProfileDir p;
  EXPECT_EQ(allreduce_ran_on(p.table), "native") << "no profile: native, the default";
  p.write(0.001, 100);
  EXPECT_EQ(allreduce_ran_on(p.table), "gloo") << "the profile predicts gloo far faster";
  p.write(100, 0.001);
  EXPECT_EQ(allreduce_ran_on(p.table), "native") << "the profile predicts native far faster";
  p.write(0.001, 0);
  EXPECT_EQ(allreduce_ran_on(p.table), "native") << "constants for native only: nothing else to choose";
}

}  // namespace
}  // namespace mpcomm
