// mpcomm launch's job secret (src/bootstrap/launch/secret.cc): one node makes a random one; several share
// MPCOMM_TOKEN or a token file readable by its owner alone, or join by MUNGE under Slurm; a secret derived
// from --master only on loopback or with --insecure.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "bootstrap/launch/launch_internal.h"
#include "bootstrap/launcher_support.h"
#include "mpcomm/error.h"

namespace mpcomm {
namespace {

using namespace launcher_test;
using launch_detail::job_secret;

LaunchOptions two_nodes(const std::string& master) {
  LaunchOptions o;
  o.nnodes = 2;
  o.master = master;
  o.argv = {"true"};
  return o;
}

std::string secret_error(const LaunchOptions& o) {
  try {
    job_secret(o);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "job_secret() did not throw InvalidArgument";
  return "";
}

// No secret and no Slurm job in the environment while a test runs.
struct NoSecretAround {
  EnvVar token{"MPCOMM_TOKEN"}, job{"SLURM_JOB_ID"}, jobid{"SLURM_JOBID"}, sock{"MPCOMM_MUNGE_SOCKET"};
  NoSecretAround() {
    for (const char* v : {"MPCOMM_TOKEN", "SLURM_JOB_ID", "SLURM_JOBID", "MPCOMM_MUNGE_SOCKET"}) ::unsetenv(v);
  }
};

TEST(LaunchSecret, SeveralNodesWithANetworkMasterAndNoSecretAreRefused) {
  NoSecretAround clean;
  LaunchOptions o = two_nodes("192.0.2.7:29500");
  const std::string msg = secret_error(o);
  for (const char* part : {"--master 192.0.2.7:29500 needs a secret every node shares", "MPCOMM_TOKEN", "--token-file",
                           "mode 0600", "MUNGE", "--insecure"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
  o.insecure = true;  // said on purpose: derived, as every node can derive it
  EXPECT_EQ(job_secret(o).secret, "master/192.0.2.7:29500");
  EXPECT_FALSE(job_secret(o).munge);
  // On loopback the nodes are this machine's processes.
  EXPECT_EQ(job_secret(two_nodes("127.0.0.1:29500")).secret, "master/127.0.0.1:29500");
  ::setenv("MPCOMM_TOKEN", "given-by-the-user", 1);
  EXPECT_EQ(job_secret(two_nodes("192.0.2.7:29500")).secret, "given-by-the-user");
}

TEST(LaunchSecret, OneNodeMakesARandomSecretEveryTime) {
  NoSecretAround clean;
  LaunchOptions o;
  o.argv = {"true"};
  const std::string a = job_secret(o).secret, b = job_secret(o).secret;
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST(LaunchSecret, TokenFileMustBeReadableByItsOwnerAlone) {
  NoSecretAround clean;
  const std::string dir = "/tmp/mpcomm_secret_" + std::to_string(::getpid()), path = dir + "/job.secret";
  std::filesystem::create_directories(dir);
  std::ofstream(path) << "s3cret-of-the-job-0123456789\n";
  LaunchOptions o = two_nodes("192.0.2.7:29500");
  o.token_file = path;
  ::chmod(path.c_str(), 0644);
  std::string msg = secret_error(o);
  EXPECT_NE(msg.find("--token-file " + path + ": its mode is 0644"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chmod 600 " + path), std::string::npos) << msg;
  ::chmod(path.c_str(), 0640);
  EXPECT_NE(secret_error(o).find("its mode is 0640"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(job_secret(o).secret, "s3cret-of-the-job-0123456789");  // the trailing newline dropped
  std::ofstream(path) << "short\n";
  EXPECT_NE(secret_error(o).find("holds 5 characters; a secret needs at least 16"), std::string::npos);
  o.token_file = dir + "/missing";
  msg = secret_error(o);
  EXPECT_NE(msg.find("--token-file " + dir + "/missing: No such file"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

TEST(LaunchSecret, UnderSlurmWithoutMungeTheRefusalSaysWhatToGive) {
  NoSecretAround clean;
  ::setenv("SLURM_JOB_ID", "77", 1);
  ::setenv("MPCOMM_MUNGE_SOCKET", "/nonexistent/munge.socket", 1);
  const std::string msg = secret_error(two_nodes("192.0.2.7:29500"));
  EXPECT_NE(msg.find("joins the nodes by MUNGE, but"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/munge.socket"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MPCOMM_TOKEN, or --token-file"), std::string::npos) << msg;
}

TEST(LaunchSecret, TwoNodesOnATokenFileHandTheirRanksItsSecret) {
  NoSecretAround clean;
  const std::string dir = "/tmp/mpcomm_secret_nodes_" + std::to_string(::getpid()), path = dir + "/job.secret";
  std::filesystem::create_directories(dir);
  std::ofstream(path) << "the-two-nodes-share-this-one\n";
  ::chmod(path.c_str(), 0600);
  uint16_t p = 0;
  (void)net::listen_tcp("127.0.0.1", 0, &p);
  const std::string node = std::string(MPCOMM_CLI) + " launch --nnodes 2 --master 127.0.0.1:" + std::to_string(p) +
                           " --token-file " + path + " -n 1 --timeout 30 ";
  const std::string prog = " -- sh -c \"echo token=\\$MPCOMM_TOKEN\"";
  const int st = std::system(("bash -c '" + node + "--node-rank 1" + prog + " > " + dir + "/n1 2>&1 & " + node +
                              "--node-rank 0" + prog + " > " + dir + "/n0 2>&1; a=$?; wait $!; exit $((a | $?))'")
                                 .c_str());
  auto read = [](const std::string& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string n0 = read(dir + "/n0"), n1 = read(dir + "/n1");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(st, 0) << n0 << n1;
  EXPECT_NE(n0.find("[0] token=the-two-nodes-share-this-one"), std::string::npos) << n0;
  EXPECT_NE(n1.find("[1] token=the-two-nodes-share-this-one"), std::string::npos) << n1;
}

}  // namespace
}  // namespace mpcomm
