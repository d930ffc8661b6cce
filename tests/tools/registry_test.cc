// The backend registry (backends/registry.h): what each backend needs from `mpcomm launch` agrees with
// the backends of this build, and a backend the build has not got is refused before anything starts.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "harness/process.h"
#include "mpcomm/communicator.h"
#include "mpcomm/error.h"

namespace mpcomm {
namespace {

std::string refusal(const std::string& backend) {
  try {
    launch_needs(backend);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "launch_needs(\"" << backend << "\") did not throw InvalidArgument";
  return "";
}

// auto goes through mpirun where this build has mpi (so that mpi is among its backends), unless
// MPCOMM_AUTO_BACKENDS leaves mpi out.
TEST(LaunchNeeds, OnlyMpiAndAutoWithMpiGoThroughMpirunAndOnlyGlooIsNotPinned) {
  const auto built = compiled_backends();
  ASSERT_FALSE(built.empty());
  const bool have_mpi = std::find(built.begin(), built.end(), "mpi") != built.end();
  for (const auto& b : built) {
    LaunchNeeds needs;
    ASSERT_NO_THROW(needs = launch_needs(b)) << b;
    EXPECT_EQ(needs.via_mpirun, b == "mpi" || (b == "auto" && have_mpi)) << b;
    EXPECT_EQ(needs.may_pin, b != "gloo") << b;
  }
  ::setenv("MPCOMM_AUTO_BACKENDS", "native,gloo", 1);
  EXPECT_FALSE(launch_needs("auto").via_mpirun);
  ::setenv("MPCOMM_AUTO_BACKENDS", "gloo,mpi", 1);
  EXPECT_EQ(launch_needs("auto").via_mpirun, have_mpi);
  ::unsetenv("MPCOMM_AUTO_BACKENDS");
}

TEST(LaunchNeeds, ABackendThisBuildHasNotGotIsRefusedWithTheReason) {
  const auto built = compiled_backends();
  for (const std::string b : {"gloo", "mpi", "nccl"}) {
    if (std::find(built.begin(), built.end(), b) != built.end()) continue;
    const std::string msg = refusal(b);
    EXPECT_EQ(msg.rfind("mpcomm: launch: --backend " + b + ": this build of mpcomm has no " + b + " backend (", 0), 0u)
        << msg;
    EXPECT_NE(msg.find("reconfigure and rebuild"), std::string::npos) << msg;
  }
  const std::string msg = refusal("carrier-pigeon");
  EXPECT_EQ(msg.rfind("mpcomm: launch: --backend carrier-pigeon: no such backend (this build has: native", 0), 0u)
      << msg;
}

TEST(LaunchNeeds, TheLaunchCommandRefusesABackendItHasNotGot) {
  auto r = testing::run_command(std::string(MPCOMM_CLI) + " launch -n 1 --backend carrier-pigeon -- true");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--backend carrier-pigeon: no such backend"), std::string::npos) << r.output;
}

// create() refuses the same way, naming what this build has.
TEST(Registry, CreateRefusesAnUnknownBackend) {
  try {
    create("carrier-pigeon", std::make_shared<HashStore>(), 0, 1);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("mpcomm: backend carrier-pigeon: no such backend (this build has: native", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace mpcomm
