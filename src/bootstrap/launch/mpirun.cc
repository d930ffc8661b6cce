// mpcomm launch, the mpirun plan: for backends whose ranks mpirun starts (LaunchNeeds::via_mpirun), the
// ExecPlan of the one child, `mpirun -n N ... PROGRAM ARGS...`, around the launcher's store; and the
// removal of the session folder Open MPI leaves behind when mpirun is killed.
//
// Guarantees: the ranks get the job's environment (values through mpirun's environment, never on its
// command line), MPI's own transports (shared memory on one host, TCP over loopback between emulated
// hosts), with bind and may_pin one CPU core each as far as there are cores (round-robin beyond), and
// their output tagged for TagDemux; mpirun gets SIGTERM, not SIGKILL, when the launcher dies, so that
// it ends its ranks. Only this user's session folder of that one mpirun pid is ever removed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "bootstrap/launch/launch_internal.h"
#include "log/log.h"

namespace mpcomm::launch_detail {

// `mpirun -n N ... PROGRAM ARGS...` with the job's environment. mpirun gives every rank the same
// environment, so the ranks learn their rank from OMPI_COMM_WORLD_* (env.cc), that the launcher serves the
// store from MPCOMM_STORE_SERVED=1, and their emulated host from MPCOMM_HOSTS (host_id_from_env()).
//
// --mca pml ob1 --mca btl vader,self (one host) or tcp,self (emulated hosts): on one host MPI uses its
// shared-memory transport, as any MPI user gets; across emulated hosts TCP between every pair of ranks,
// what MPI uses between real hosts (it cannot tell emulated hosts apart, so shared memory is excluded
// there). ob1 so that UCX cannot bring its own transports. btl_tcp_if_include lo: every rank runs on this
// machine, and loopback also exists in containers without a network. --bind-to core (mpirun's own
// default for small jobs); when ranks outnumber cores, --oversubscribe and core:overload-allowed, which
// deals the ranks round-robin over the cores (rank r on core r mod cores), as our own launcher does.
ExecPlan mpirun_plan(const LaunchOptions& o, const std::string& mpirun, const std::string& program, const JobEnv& je,
                     std::vector<std::string>& args) {
  ExecPlan p;
  p.path = mpirun;
  p.death_signal = SIGTERM;  // mpirun, when told, ends its ranks; SIGKILL would orphan them
  std::vector<std::string> dropped = {"RANK",          "WORLD_SIZE",     "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR",   "MASTER_PORT",    "MPCOMM_STORE",   "MPCOMM_TOKEN",
                                      "MPCOMM_JOB_ID", "MPCOMM_TIMEOUT", "MPCOMM_BACKEND", "MPCOMM_STORE_SERVED",
                                      "MPCOMM_HOSTS"};
  if (o.hosts > 1) dropped.push_back("MPCOMM_HOST_ID");  // each rank derives its own from MPCOMM_HOSTS
  p.env = environment_without(dropped);
  auto put = [&](const char* k, const std::string& v) { p.env.push_back(std::string(k) + "=" + v); };
  put("MASTER_ADDR", je.addr);
  put("MASTER_PORT", je.port);
  put("MPCOMM_STORE", je.store_url);
  put("MPCOMM_STORE_SERVED", "1");
  put("MPCOMM_TOKEN", je.token);
  put("MPCOMM_JOB_ID", je.job_id);
  put("MPCOMM_TIMEOUT", je.timeout);
  put("MPCOMM_BACKEND", o.backend);
  if (o.hosts > 1) put("MPCOMM_HOSTS", std::to_string(o.hosts));

  args = {"mpirun", "-n", std::to_string(o.nranks)};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  if (o.nranks > usable_cores()) args.push_back("--oversubscribe");
  const bool overload = o.nranks > usable_cores();
  const char* btl = o.hosts > 1 ? "tcp,self" : "vader,self";
  // vader's segments go to a folder of this job that the launcher removes at the end, also when ranks
  // were killed (Open MPI leaves /dev/shm/vader_segment.* behind then).
  if (o.hosts == 1) {
    const std::string backing = "/dev/shm/mpcomm." + je.job_id + ".vader";
    if (::mkdir(backing.c_str(), 0700) == 0) {
      args.insert(args.end(), {"--mca", "btl_vader_backing_directory", backing});
    }
  }
  const bool bind = o.bind && o.needs.may_pin;  // see LaunchOptions::bind
  for (const char* a : {"--bind-to", !bind ? "none" : overload ? "core:overload-allowed" : "core", "--mca", "pml", "ob1", "--mca", "btl", btl, "--mca",
                        "btl_tcp_if_include", "lo", "--tag-output"})
    args.emplace_back(a);
  // -x NAME (not NAME=value): values, the token among them, stay out of mpirun's command line. Locally the
  // ranks inherit mpirun's environment anyway; -x is what carries it to other nodes.
  for (const auto& kv : p.env) {
    std::string name = kv.substr(0, kv.find('='));
    if (name.rfind("MPCOMM_", 0) == 0 || name == "MASTER_ADDR" || name == "MASTER_PORT") {
      args.emplace_back("-x");
      args.push_back(name);
    }
  }
  args.push_back(program);
  args.insert(args.end(), o.argv.begin() + 1, o.argv.end());
  finish_plan(p, args);
  p.exec_failed = "mpcomm launch: cannot execute '" + mpirun + "': ";
  return p;
}

// Open MPI's session directory of one mpirun, <TMPDIR>/ompi.<node>.<uid>/pid.<pid>, holds the PMIx
// shared-memory files of the job (megabytes). mpirun removes it when it ends; when it was killed it stays,
// so the launcher removes it once mpirun is gone.
void remove_mpirun_session_dir(pid_t mpirun_pid) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return;
  std::string node = host;
  for (const std::string& name : {node, node.substr(0, node.find('.'))}) {  // Open MPI drops the domain
    const std::string dir = base + "/ompi." + name + "." + std::to_string(::geteuid()) + "/pid." +
                            std::to_string(static_cast<int>(mpirun_pid));
    std::error_code ec;
    if (std::filesystem::remove_all(dir, ec) > 0)
      MPCOMM_LOG(info, "launch: removed %s, left behind by mpirun", dir.c_str());
  }
}

}  // namespace mpcomm::launch_detail
