// mpcomm launch, run in-process: each test forks real ranks (mostly /bin/sh one-liners), captures the
// launcher's stdout/stderr through temporary files, and checks the output relay, the rank environment,
// host placement and pinning, bad options, and several nodes; launcher_failures_test.cc the exit
// statuses, failures and signals.
#include "bootstrap/launcher_support.h"

namespace mpcomm {
namespace {

using namespace launcher_test;

// ---- output and environment ---------------------------------------------------------------------------

TEST_F(LauncherTest, EveryRankLineIsPrefixed) {
  EnvVar keep("MPCOMM_HOST_ID");
  ::unsetenv("MPCOMM_HOST_ID");
  Result r = run(sh(3, "echo rank=$RANK size=$WORLD_SIZE host=$MPCOMM_HOST_ID local=$LOCAL_RANK/$LOCAL_WORLD_SIZE"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out).size(), 3u) << r.out;
  for (int i = 0; i < 3; ++i) {
    std::string want =
        "[" + std::to_string(i) + "] rank=" + std::to_string(i) + " size=3 host= local=" + std::to_string(i) + "/3";
    EXPECT_TRUE(has_line(r.out, want)) << "missing '" << want << "' in:\n" << r.out;
  }
  EXPECT_EQ(r.err, "");
}

TEST_F(LauncherTest, StderrGoesToStderrWithPrefix) {
  Result r = run(sh(2, "echo out-$RANK; echo err-$RANK >&2"));
  EXPECT_EQ(r.status, 0);
  for (int i = 0; i < 2; ++i) {
    std::string s = std::to_string(i);
    EXPECT_TRUE(has_line(r.out, "[" + s + "] out-" + s)) << r.out;
    EXPECT_TRUE(has_line(r.err, "[" + s + "] err-" + s)) << r.err;
  }
  EXPECT_EQ(r.out.find("err-"), std::string::npos);
  EXPECT_EQ(r.err.find("out-"), std::string::npos);
}

TEST_F(LauncherTest, LinesStayWholeAndPartialLastLineIsFlushed) {
  Result r = run(sh(1, "printf 'a\\nb'; sleep 0.1; printf 'c\\nlast'"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[0] a\n[0] bc\n[0] last\n");
}

TEST_F(LauncherTest, PrefixCanBeTurnedOff) {
  LaunchOptions o = sh(1, "echo hello; printf tail");
  o.prefix_output = false;
  Result r = run(o);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "hello\ntail\n");
}

TEST_F(LauncherTest, OverlongLinesAreCutIntoPieces) {
  // 140000 bytes, then exactly 65536: cut at 65536 however the pipe delivers them.
  Result r = run(sh(1, "head -c 140000 /dev/zero | tr '\\0' x; echo; head -c 65536 /dev/zero | tr '\\0' y; echo"));
  EXPECT_EQ(r.status, 0);
  auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 4u);
  EXPECT_EQ(ls[0], "[0] " + std::string(65536, 'x'));
  EXPECT_EQ(ls[1], "[0] " + std::string(65536, 'x'));
  EXPECT_EQ(ls[2], "[0] " + std::string(140000 - 2 * 65536, 'x'));
  EXPECT_EQ(ls[3], "[0] " + std::string(65536, 'y'));
}

TEST_F(LauncherTest, RanksGetStoreTokenJobIdTimeoutAndBackend) {
  EnvVar keep("MPCOMM_TOKEN");
  ::unsetenv("MPCOMM_TOKEN");
  LaunchOptions o = sh(2,
                       "echo store=$MPCOMM_STORE addr=$MASTER_ADDR port=$MASTER_PORT token=$MPCOMM_TOKEN "
                       "job=$MPCOMM_JOB_ID timeout=$MPCOMM_TIMEOUT backend=$MPCOMM_BACKEND");
  o.timeout_s = 7;
  o.backend = "gloo";
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string port = field(r.out, "[0]", "port");
  ASSERT_FALSE(port.empty()) << r.out;
  EXPECT_GT(std::stoi(port), 0);
  // MASTER_PORT is PyTorch's (rank 0 starts a c10d store there), not the mpcomm store's.
  const std::string store = field(r.out, "[0]", "store");
  EXPECT_EQ(store.rfind("tcp://127.0.0.1:", 0), 0u) << store;
  EXPECT_NE(store, "tcp://127.0.0.1:" + port);
  EXPECT_EQ(field(r.out, "[0]", "addr"), "127.0.0.1");
  std::string token = field(r.out, "[0]", "token"), job = field(r.out, "[0]", "job");
  EXPECT_EQ(token.size(), 64u);  // 32 random bytes
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  EXPECT_EQ(job.size(), 12u);
  EXPECT_EQ(job.find_first_not_of("0123456789abcdef"), std::string::npos) << job;
  EXPECT_EQ(field(r.out, "[0]", "timeout"), "7");
  EXPECT_EQ(field(r.out, "[0]", "backend"), "gloo");
  for (const char* key : {"store", "port", "token", "job"})  // one job: the same for every rank
    EXPECT_EQ(field(r.out, "[1]", key), field(r.out, "[0]", key)) << key;
}

TEST_F(LauncherTest, TokenComesFromTheEnvironmentWhenSet) {
  EnvVar keep("MPCOMM_TOKEN");
  ::setenv("MPCOMM_TOKEN", "my-secret-token", 1);
  Result r = run(sh(1, "echo token=$MPCOMM_TOKEN"));
  EXPECT_EQ(r.out, "[0] token=my-secret-token\n");
}

TEST_F(LauncherTest, FractionalTimeout) {
  LaunchOptions o = sh(1, "echo $MPCOMM_TIMEOUT");
  o.timeout_s = 0.25;
  EXPECT_EQ(run(o).out, "[0] 0.250\n");
}

TEST_F(LauncherTest, FourRanksOnTwoHostsInBlocks) {
  std::string host = host_id_from_env();
  LaunchOptions o = sh(4, "echo host=$MPCOMM_HOST_ID local=$LOCAL_RANK/$LOCAL_WORLD_SIZE");
  o.hosts = 2;
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "[0] host=" + host + "-h0 local=0/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[1] host=" + host + "-h0 local=1/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[2] host=" + host + "-h1 local=0/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[3] host=" + host + "-h1 local=1/2")) << r.out;
}

TEST_F(LauncherTest, FiveRanksOnTwoHostsSplitUnevenly) {
  std::string host = host_id_from_env();
  LaunchOptions o = sh(5, "echo host=$MPCOMM_HOST_ID local=$LOCAL_RANK/$LOCAL_WORLD_SIZE");
  o.hosts = 2;
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "[0] host=" + host + "-h0 local=0/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[1] host=" + host + "-h0 local=1/2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[2] host=" + host + "-h1 local=0/3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[3] host=" + host + "-h1 local=1/3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "[4] host=" + host + "-h1 local=2/3")) << r.out;
}

// ---- pinning -------------------------------------------------------------------------------------------

TEST(LauncherBind, RanksThatFitGetACpuEach) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bind_slot(r, 4, 1, 4), r);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bind_slot(r, 4, 2, 8), r);
}

TEST(LauncherBind, OversubscribedRanksAreDealtRoundRobinPerHost) {
  // One host: rank r on CPU r mod c.
  for (int r = 0; r < 5; ++r) EXPECT_EQ(bind_slot(r, 5, 1, 2), r % 2) << "rank " << r;
  // 2 hosts x 2 ranks on 2 CPUs: the leaders (ranks 0 and 2) on different CPUs, each host on both.
  EXPECT_EQ(bind_slot(0, 4, 2, 2), 0);
  EXPECT_EQ(bind_slot(1, 4, 2, 2), 1);
  EXPECT_EQ(bind_slot(2, 4, 2, 2), 1);
  EXPECT_EQ(bind_slot(3, 4, 2, 2), 0);
  // One rank per host: spread, not stacked on CPU 0.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bind_slot(r, 4, 4, 2), r % 2) << "rank " << r;
}

// The plan reaches the ranks: each one's affinity is the single CPU bind_slot names; --no-bind leaves
// the launcher's mask.
TEST_F(LauncherTest, EachRankRunsOnItsSlotsCpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  const int n = static_cast<int>(cpus.size()) + 1, hosts = 2;  // more ranks than CPUs
  LaunchOptions o = sh(n, "echo cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)");
  o.hosts = hosts;
  Result r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < n; ++rank) {
    const std::string want = std::to_string(cpus[static_cast<size_t>(bind_slot(rank, n, hosts, static_cast<int>(cpus.size())))]);
    EXPECT_EQ(field(r.out, "[" + std::to_string(rank) + "]", "cpus"), want) << r.out;
  }
  o.bind = false;
  r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  if (cpus.size() > 1) {
    EXPECT_NE(field(r.out, "[0]", "cpus"), std::to_string(cpus[0])) << r.out;
  }
  // Ranks of a backend that may not be pinned (gloo: backends/launch_needs.cc says why) are left unpinned.
  o.bind = true;
  o.needs.may_pin = false;
  r = run(o);
  ASSERT_EQ(r.status, 0) << r.err;
  if (cpus.size() > 1) {
    for (int rank = 0; rank < n; ++rank)
      EXPECT_NE(field(r.out, "[" + std::to_string(rank) + "]", "cpus").find_first_of(",-"), std::string::npos)
          << "rank " << rank << " (may_pin false) is pinned to one CPU: " << r.out;
  }
}

TEST_F(LauncherTest, ScriptWithoutShebangRunsUnderSh) {
  char path[] = "/tmp/mpcomm_launcher_script.XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string body = "echo from-script $RANK\n";
  ASSERT_EQ(::write(fd, body.data(), body.size()), static_cast<ssize_t>(body.size()));
  ::close(fd);
  ::chmod(path, 0700);
  LaunchOptions o;
  o.argv = {path};
  Result r = run(o);
  ::unlink(path);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] from-script 0\n");
}


// ---- bad options ---------------------------------------------------------------------------------------

std::string launch_error(const LaunchOptions& o) {
  try {
    launch(o);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "launch() did not throw InvalidArgument";
  return "";
}

TEST_F(LauncherTest, BadOptionsAreRejectedBeforeAnythingStarts) {
  LaunchOptions o = sh(0, "true");
  EXPECT_NE(launch_error(o).find("-n must be at least 1"), std::string::npos);
  o = sh(4, "true");
  o.hosts = 0;
  EXPECT_NE(launch_error(o).find("--hosts must be between 1 and -n 4"), std::string::npos);
  o.hosts = 5;
  EXPECT_NE(launch_error(o).find("--hosts must be between 1 and -n 4 (got 5)"), std::string::npos);
  o = sh(1, "true");
  o.argv.clear();
  EXPECT_NE(launch_error(o).find("no program given"), std::string::npos);
  o = sh(1, "true");
  o.timeout_s = 0;
  EXPECT_NE(launch_error(o).find("--timeout"), std::string::npos);
}

TEST_F(LauncherTest, MissingProgramIsNamed) {
  LaunchOptions o;
  o.argv = {"mpcomm-no-such-program-xyz"};
  std::string msg = launch_error(o);
  EXPECT_EQ(msg.rfind("mpcomm: launch: program 'mpcomm-no-such-program-xyz' not found on PATH", 0), 0u) << msg;
  o.argv = {"/nonexistent/prog"};
  msg = launch_error(o);
  EXPECT_NE(msg.find("cannot run '/nonexistent/prog'"), std::string::npos) << msg;
  o.argv = {"/tmp"};
  msg = launch_error(o);
  EXPECT_NE(msg.find("not an executable file"), std::string::npos) << msg;
}

// ---- several nodes: mpcomm launch --nnodes, two launchers of this machine on loopback ------------------

namespace nodes {

std::string free_port() {
  uint16_t p = 0;
  (void)net::listen_tcp("127.0.0.1", 0, &p);
  return std::to_string(p);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs `script` in a shell; returns its exit status.
int shell(const std::string& script) {
  int st = std::system(("bash -c '" + script + "'").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace nodes

TEST(LaunchNodes, TwoNodesGiveGlobalRanksAndOneStore) {
  const std::string port = nodes::free_port(), dir = "/tmp/mpcomm_nodes_" + std::to_string(::getpid());
  const std::string cli = MPCOMM_CLI, prog = "echo R=\\$RANK W=\\$WORLD_SIZE L=\\$LOCAL_RANK LW=\\$LOCAL_WORLD_SIZE S=\\$MPCOMM_STORE "
                                                "M=\\$MASTER_ADDR:\\$MASTER_PORT";  // expanded by each rank's sh
  const std::string node = cli + " launch --nnodes 2 --master 127.0.0.1:" + port + " --nproc-per-node 2 --timeout 30 ";
  ASSERT_EQ(nodes::shell("mkdir -p " + dir + "; " + node + "--node-rank 1 -- sh -c \"" + prog + "\" > " + dir +
                         "/n1 2>&1 & " + node + "--node-rank 0 -- sh -c \"" + prog + "\" > " + dir +
                         "/n0 2>&1; a=$?; wait $!; b=$?; exit $((a | b))"),
            0)
      << nodes::read_file(dir + "/n0") << nodes::read_file(dir + "/n1");
  const std::string n0 = nodes::read_file(dir + "/n0"), n1 = nodes::read_file(dir + "/n1");
  std::filesystem::remove_all(dir);
  const std::string store = "S=tcp://127.0.0.1:" + port;
  for (int r = 0; r < 4; ++r) {
    const std::string& out = r < 2 ? n0 : n1;
    EXPECT_NE(out.find("[" + std::to_string(r) + "] R=" + std::to_string(r) + " W=4 L=" + std::to_string(r % 2) +
                       " LW=2 " + store),
              std::string::npos)
        << out;
  }
  // PyTorch's port: node 0's choice, the same on both nodes, not the store's.
  const std::string m0 = field(n0, "[0]", "M"), m1 = field(n1, "[2]", "M");
  EXPECT_EQ(m0, m1);
  EXPECT_NE(m0, "127.0.0.1:" + port);
}

TEST(LaunchNodes, NodesGivenDifferentShapesAreRefusedAndBothEnd) {
  const std::string port = nodes::free_port(), dir = "/tmp/mpcomm_nodes_" + std::to_string(::getpid());
  const std::string cli = MPCOMM_CLI;
  const std::string node = cli + " launch --nnodes 2 --master 127.0.0.1:" + port + " --grace 1 --timeout 30 ";
  const auto t0 = Clock::now();
  // Node 0 with 2 ranks that would sleep 60 s; node 1 with 1 rank: refused, and node 0's ranks end.
  const int st = nodes::shell("mkdir -p " + dir + "; " + node + "--node-rank 0 -n 2 -- sleep 60 > " + dir +
                              "/n0 2>&1 & sleep 0.5; " + node + "--node-rank 1 -n 1 -- true > " + dir +
                              "/n1 2>&1; b=$?; wait $!; a=$?; [ $a -ne 0 ] && [ $b -ne 0 ]");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string n0 = nodes::read_file(dir + "/n0"), n1 = nodes::read_file(dir + "/n1");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(st, 0) << "both nodes must fail\nnode 0:\n" << n0 << "node 1:\n" << n1;
  EXPECT_NE(n1.find("every node must be given the same"), std::string::npos) << n1;
  EXPECT_NE(n0.find("every node must be given the same"), std::string::npos) << n0;
  EXPECT_LT(s, 20) << "node 0's ranks were not ended";
}

}  // namespace
}  // namespace mpcomm
