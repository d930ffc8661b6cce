// discover_env() for each launcher it knows, its precedence, and the errors for missing or
// inconsistent values (each must name the variables involved).
#include "bootstrap/env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "mpcomm/error.h"

namespace mpcomm {
namespace {

// Clears every variable discover_env() reads, and puts them all back afterwards.
class EnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"MPCOMM_STORE",
                                          "MPCOMM_HOSTS",
                                          "MPCOMM_STORE_SERVED",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_NTASKS_PER_NODE",
                                          "SLURM_STEP_TASKS_PER_NODE",
                                          "SLURM_TASKS_PER_NODE",
                                          "SLURM_NODEID",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST",
                                          "SLURM_JOB_ID",
                                          "SLURM_JOBID",
                                          "SLURM_STEP_ID",
                                          "SLURM_STEPID",
                                          "SLURMD_NODENAME",
                                          "MPCOMM_HOST_ID"};

  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }
  static void set(const char* k, const char* v) { ::setenv(k, v, 1); }

  // The InvalidArgument message discover_env() throws (fails the test if it does not throw).
  static std::string error() {
    try {
      discover_env();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    ADD_FAILURE() << "discover_env() did not throw InvalidArgument";
    return "";
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

void set_torchrun(const char* rank, const char* size) {
  ::setenv("RANK", rank, 1);
  ::setenv("WORLD_SIZE", size, 1);
  ::setenv("LOCAL_RANK", rank, 1);
  ::setenv("LOCAL_WORLD_SIZE", size, 1);
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
}

void set_openmpi() {
  ::setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
}

void set_slurm() {
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "6", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
}

// A task of an srun step as srun sets it, without any store address.
void set_slurm_step() {
  set_slurm();
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3)", 1);
}

// ---- the four launchers ---------------------------------------------------------------------------

TEST_F(EnvTest, MpcommLaunch) {
  set("MPCOMM_STORE", "tcp://127.0.0.1:4000");
  set("RANK", "2");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "0");
  set("LOCAL_WORLD_SIZE", "2");
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "4000");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "mpcomm");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.store_url, "tcp://127.0.0.1:4000");
  EXPECT_FALSE(e.serve_store);  // the launcher serves it
}

TEST_F(EnvTest, MpcommRankZeroDoesNotServeAndFileStoreIsAccepted) {
  set("MPCOMM_STORE", "file:///tmp/mpcomm-store");
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "mpcomm");
  EXPECT_EQ(e.store_url, "file:///tmp/mpcomm-store");
  EXPECT_FALSE(e.serve_store);
  EXPECT_EQ(e.local_rank, 0);  // no local information: one host
  EXPECT_EQ(e.local_size, 1);
}

TEST_F(EnvTest, MpcommWinsOverEverythingElse) {
  set_openmpi();
  set_slurm();
  set_torchrun("1", "2");
  set("MPCOMM_STORE", "tcp://127.0.0.1:5000");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "mpcomm");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.size, 2);
  EXPECT_EQ(e.store_url, "tcp://127.0.0.1:5000");
}

TEST_F(EnvTest, TorchrunRankZeroServes) {
  set_torchrun("0", "4");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.store_url, "tcp://10.0.0.1:29500");
  EXPECT_TRUE(e.serve_store);
}

TEST_F(EnvTest, TorchrunOtherRanksConnect) {
  set_torchrun("3", "4");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "2");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_FALSE(e.serve_store);
}

TEST_F(EnvTest, TorchrunIpv6AddressIsBracketed) {
  set_torchrun("1", "2");
  set("MASTER_ADDR", "::1");
  EXPECT_EQ(discover_env().store_url, "tcp://[::1]:29500");
}

TEST_F(EnvTest, TorchrunWinsOverOpenMpiAndSlurm) {
  set_openmpi();
  set_slurm();
  set_torchrun("1", "2");
  EXPECT_EQ(discover_env().source, "torchrun");
}

TEST_F(EnvTest, OpenMpiWithMasterAddr) {
  set_openmpi();
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "1234");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
  EXPECT_EQ(e.store_url, "tcp://node0:1234");
  EXPECT_FALSE(e.serve_store);
}

TEST_F(EnvTest, OpenMpiRankZeroServesMpcommStore) {
  set_openmpi();
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  set("MPCOMM_STORE", "tcp://node0:7000");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.store_url, "tcp://node0:7000");
  EXPECT_TRUE(e.serve_store);  // nobody else runs a store under mpirun
}

TEST_F(EnvTest, OpenMpiFileStoreHasNoServer) {
  set_openmpi();
  set("OMPI_COMM_WORLD_RANK", "0");
  set("MPCOMM_STORE", "file:///shared/store");
  EXPECT_FALSE(discover_env().serve_store);
}

TEST_F(EnvTest, OpenMpiWinsOverSlurm) {
  set_slurm();
  set_openmpi();
  set("MPCOMM_STORE", "tcp://node0:7000");
  EXPECT_EQ(discover_env().source, "openmpi");
}

TEST_F(EnvTest, SlurmWithNtasksPerNode) {
  set_slurm();
  set("SLURM_NTASKS_PER_NODE", "2");
  set("SLURM_TASKS_PER_NODE", "5(x9)");  // ignored: SLURM_NTASKS_PER_NODE comes first
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "29500");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.size, 6);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.store_url, "tcp://node0:29500");
  EXPECT_FALSE(e.serve_store);
}

TEST_F(EnvTest, SlurmLocalSizeFromTasksPerNode) {
  set_slurm();
  set("SLURM_TASKS_PER_NODE", "3(x2)");
  set("MPCOMM_STORE", "tcp://node0:29500");
  EXPECT_EQ(discover_env().local_size, 3);
}

TEST_F(EnvTest, SlurmUnevenTasksPerNodeIndexedByNodeId) {
  set_slurm();
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "5");
  set("SLURM_LOCALID", "0");
  set("SLURM_TASKS_PER_NODE", "2(x2),1");
  set("SLURM_NODEID", "2");
  set("MPCOMM_STORE", "tcp://node0:29500");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.local_size, 1);
  EXPECT_TRUE(e.serve_store);
  set("SLURM_NODEID", "1");
  EXPECT_EQ(discover_env().local_size, 2);
}

// ---- errors ---------------------------------------------------------------------------------------

TEST_F(EnvTest, NothingSetNamesEveryLauncher) {
  std::string msg = error();
  EXPECT_EQ(msg.rfind("mpcomm: ", 0), 0u) << msg;
  for (const char* v : {"MPCOMM_STORE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    EXPECT_NE(msg.find(v), std::string::npos) << v << " missing from: " << msg;
}

TEST_F(EnvTest, StoreWithoutRankSaysSo) {
  set("MPCOMM_STORE", "tcp://127.0.0.1:4000");
  std::string msg = error();
  EXPECT_NE(msg.find("MPCOMM_STORE is set"), std::string::npos) << msg;
}

TEST_F(EnvTest, RankNotLessThanSize) {
  set_torchrun("4", "4");
  set("LOCAL_RANK", "0");
  std::string msg = error();
  EXPECT_NE(msg.find("RANK=4 is not less than WORLD_SIZE=4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("torchrun"), std::string::npos) << msg;
}

TEST_F(EnvTest, NegativeRank) {
  set_openmpi();
  set("OMPI_COMM_WORLD_RANK", "-1");
  set("MPCOMM_STORE", "tcp://node0:7000");
  std::string msg = error();
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_RANK=-1 is negative"), std::string::npos) << msg;
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << msg;  // looked-at list
}

TEST_F(EnvTest, NotANumber) {
  set_slurm();
  set("SLURM_NTASKS", "six");
  set("MPCOMM_STORE", "tcp://node0:7000");
  std::string msg = error();
  EXPECT_NE(msg.find("SLURM_NTASKS='six' is not a number"), std::string::npos) << msg;
}

TEST_F(EnvTest, TrailingGarbageIsNotANumber) {
  set_torchrun("1", "2x");
  EXPECT_NE(error().find("WORLD_SIZE='2x' is not a number"), std::string::npos);
}

TEST_F(EnvTest, ZeroSize) {
  set_torchrun("0", "0");
  EXPECT_NE(error().find("WORLD_SIZE=0 must be at least 1"), std::string::npos);
}

TEST_F(EnvTest, MissingWorldSize) {
  set_torchrun("1", "2");
  ::unsetenv("WORLD_SIZE");
  EXPECT_NE(error().find("WORLD_SIZE is not set"), std::string::npos);
}

TEST_F(EnvTest, NoStoreAddress) {
  set_torchrun("1", "2");
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  std::string msg = error();
  EXPECT_NE(msg.find("no store address"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MASTER_ADDR"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MASTER_PORT"), std::string::npos) << msg;
}

TEST_F(EnvTest, OpenMpiWithoutStore) {
  set_openmpi();
  std::string msg = error();
  EXPECT_NE(msg.find("Open MPI"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MPCOMM_STORE"), std::string::npos) << msg;
}

TEST_F(EnvTest, HalfAStoreAddress) {
  set_openmpi();
  set("MASTER_ADDR", "node0");
  EXPECT_NE(error().find("MASTER_ADDR is set but MASTER_PORT is not"), std::string::npos);
}

TEST_F(EnvTest, BadMasterPort) {
  set_torchrun("1", "2");
  set("MASTER_PORT", "70000");
  EXPECT_NE(error().find("MASTER_PORT=70000 is not a port"), std::string::npos);
}

TEST_F(EnvTest, BadStoreUrl) {
  set_torchrun("1", "2");
  set("MPCOMM_STORE", "redis://x:1");
  EXPECT_NE(error().find("MPCOMM_STORE='redis://x:1'"), std::string::npos);
  set("MPCOMM_STORE", "tcp://nohost");
  EXPECT_NE(error().find("is not tcp://HOST:PORT"), std::string::npos);
}

TEST_F(EnvTest, LocalRankNotLessThanLocalSize) {
  set_torchrun("1", "4");
  set("LOCAL_RANK", "2");
  set("LOCAL_WORLD_SIZE", "2");
  EXPECT_NE(error().find("LOCAL_RANK=2 is not less than LOCAL_WORLD_SIZE=2"), std::string::npos);
}

TEST_F(EnvTest, LocalSizeLargerThanSize) {
  set_openmpi();
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "9");
  set("MPCOMM_STORE", "tcp://node0:7000");
  EXPECT_NE(error().find("OMPI_COMM_WORLD_LOCAL_SIZE=9 is not between 1 and OMPI_COMM_WORLD_SIZE=8"),
            std::string::npos);
}

TEST_F(EnvTest, HalfTheLocalInformation) {
  set_torchrun("1", "4");
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_NE(error().find("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"), std::string::npos);
}

TEST_F(EnvTest, BadSlurmTasksPerNode) {
  set_slurm();
  set("SLURM_TASKS_PER_NODE", "2(x");
  set("MPCOMM_STORE", "tcp://node0:7000");
  EXPECT_NE(error().find("SLURM_TASKS_PER_NODE='2(x'"), std::string::npos);
}

// ---- host id --------------------------------------------------------------------------------------

// ---- Slurm without a store address: the step's first node, a port from the job and step ids --------

TEST_F(EnvTest, SlurmStoreOnTheStepsFirstNodeAtAPortFromTheJob) {
  set_slurm_step();
  set("SLURM_STEP_NODELIST", "mc-h[0-1]");
  set("SLURM_JOB_NODELIST", "other[5-9]");
  set("SLURM_JOB_ID", "41");
  set("SLURM_STEP_ID", "0");
  EnvInfo e = discover_env();
  EXPECT_EQ(e.store_url.rfind("tcp://mc-h0:", 0), 0u) << e.store_url;
  const int port = std::stoi(e.store_url.substr(std::string("tcp://mc-h0:").size()));
  EXPECT_GE(port, 10000);
  EXPECT_LT(port, 30000);
  EXPECT_FALSE(e.serve_store);  // rank 3
  set("SLURM_PROCID", "0");
  EnvInfo e0 = discover_env();
  EXPECT_EQ(e0.store_url, e.store_url);  // every task derives the same
  EXPECT_TRUE(e0.serve_store);
  set("SLURM_STEP_ID", "1");
  EXPECT_NE(discover_env().store_url, e.store_url);  // the next step of the job: another port
  set("SLURM_STEP_ID", "0");
  set("SLURM_JOB_ID", "42");
  EXPECT_NE(discover_env().store_url, e.store_url);  // another job
}

TEST_F(EnvTest, SlurmDerivedStoreIsServedByTheFirstTaskOfTheFirstNode) {
  set_slurm_step();
  set("SLURM_STEP_NODELIST", "mc-h[0-1]");
  set("SLURM_JOB_ID", "41");
  set("SLURM_STEP_ID", "0");
  set("SLURMD_NODENAME", "mc-h1");  // rank 3 placed on the second node
  EXPECT_FALSE(discover_env().serve_store);
  set("SLURMD_NODENAME", "mc-h0");  // rank 3 as the first task (local 0) of the first node
  set("SLURM_LOCALID", "0");
  EXPECT_TRUE(discover_env().serve_store);
  set("SLURM_PROCID", "0");  // rank 0 not on the first node (--distribution=arbitrary): not its store
  set("SLURMD_NODENAME", "mc-h1");
  EXPECT_FALSE(discover_env().serve_store);
}

TEST_F(EnvTest, SlurmMasterAddrWinsOverTheDerivedStore) {
  set_slurm_step();
  set("SLURM_STEP_NODELIST", "mc-h[0-1]");
  set("SLURM_JOB_ID", "41");
  set("MASTER_ADDR", "10.1.2.3");
  set("MASTER_PORT", "29999");
  EXPECT_EQ(discover_env().store_url, "tcp://10.1.2.3:29999");
}

TEST_F(EnvTest, SlurmJobNodelistWhenNoStepNodelist) {
  set_slurm_step();
  set("SLURM_JOB_NODELIST", "gpu07,gpu[09-10]");
  set("SLURM_JOB_ID", "7");
  EXPECT_EQ(discover_env().store_url.rfind("tcp://gpu07:", 0), 0u);
}

TEST_F(EnvTest, SlurmWithoutNodelistOrJobIdNamesWhatToSet) {
  set_slurm_step();
  set("SLURM_STEP_NODELIST", "mc-h[0-1]");
  std::string msg = error();
  EXPECT_NE(msg.find("no store address"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SLURM_JOB_ID"), std::string::npos) << msg;
}

TEST_F(EnvTest, FirstHostOfSlurmHostLists) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(first_slurm_host("node[07,01-04]"), "node07");
  EXPECT_EQ(first_slurm_host("rack[2-3]-n[03-04]"), "rack2-n03");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("bad[1-2"), "");
}

TEST_F(EnvTest, LaunchedAsRank) {
  EXPECT_FALSE(launched_as_rank());
  set_slurm();  // a batch script: SLURM_PROCID but no step id
  EXPECT_FALSE(launched_as_rank());
  set("SLURM_STEP_ID", "0");  // a task of an srun step
  EXPECT_TRUE(launched_as_rank());
  set("SLURM_NTASKS", "1");  // srun --pty bash: a step of one task
  EXPECT_FALSE(launched_as_rank());
  ::unsetenv("SLURM_STEP_ID");
  ::unsetenv("SLURM_PROCID");
  set_openmpi();
  EXPECT_TRUE(launched_as_rank());
  set("OMPI_COMM_WORLD_SIZE", "1");
  EXPECT_FALSE(launched_as_rank());
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  set("RANK", "0");
  EXPECT_FALSE(launched_as_rank());  // half of torchrun's pair
  set("WORLD_SIZE", "2");
  EXPECT_TRUE(launched_as_rank());
  set("WORLD_SIZE", "1");
  EXPECT_FALSE(launched_as_rank());
}

TEST_F(EnvTest, HostIdOverride) {
  set("MPCOMM_HOST_ID", "fake-host-7");
  EXPECT_EQ(host_id_from_env(), "fake-host-7");
}

TEST_F(EnvTest, HostIdDefaultsToHostname) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(host_id_from_env(), name);
}

}  // namespace
}  // namespace mpcomm
