// `mpcomm launch -n N [--hosts H] [--timeout S] -- PROGRAM ARGS...`: runs N ranks of PROGRAM on this
// machine around an in-process TcpStoreServer, as if they were spread over H hosts.
//
// What the launcher guarantees:
//   - every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//     MPCOMM_STORE, MPCOMM_TOKEN, MPCOMM_JOB_ID, MPCOMM_TIMEOUT, MPCOMM_BACKEND, and with H > 1
//     MPCOMM_HOST_ID = "<host>-h<h>"; host h runs ranks [h*N/H, (h+1)*N/H);
//   - each output line of rank r reaches the launcher's stdout/stderr whole, as "[r] line"; stdin goes
//     to rank 0 only, the others read /dev/null (as under mpirun);
//   - the first rank to fail is announced in the store ("mpcomm/abort") so the others can fail fast;
//     the rest get grace_s to end, then SIGTERM, then SIGKILL 2 s later;
//   - SIGINT/SIGTERM to the launcher terminate every rank (SIGKILL 2 s later, or at a second signal);
//   - no rank, nor anything left in a rank's process group, outlives launch(); ranks die with the
//     launcher (PR_SET_PDEATHSIG) even when it is killed; /dev/shm/mpcomm.<job id>* is removed.
//
// With needs.via_mpirun (the mpi backend) the ranks are started by one `mpirun -n N` child instead
// (shared memory on one host, TCP between emulated hosts; see mpirun_plan() in launch/mpirun.cc), around
// the same store, and the same guarantees hold: ranks learn their rank from OMPI_COMM_WORLD_*, the store
// from MPCOMM_STORE (MPCOMM_STORE_SERVED=1: the launcher serves it) and their emulated host from
// MPCOMM_HOSTS=H instead of MPCOMM_HOST_ID; output comes back through mpirun's --tag-output as the same
// "[r] line"s; a failed rank (reported by mpirun, which then ends the others itself) is announced and its
// status returned; SIGINT/SIGTERM and the launcher's death (PR_SET_PDEATHSIG = SIGTERM) reach mpirun,
// which ends its ranks; and whatever mpirun leaves behind when it is killed (ranks, its session
// directory) is removed.
//
// The launcher is in src/bootstrap/launch/, one file a job (launch_internal.h lists them).
#pragma once

#include <string>
#include <vector>

namespace mpcomm {

// What a backend needs from the launcher. The launcher does not know backends by name: whoever fills
// LaunchOptions asks launch_needs(backend) (src/backends/registry.h), which also says why each
// backend needs what it does.
struct LaunchNeeds {
  bool via_mpirun = false;  // ranks are started by one mpirun child (the mpi backend)
  bool may_pin = true;      // ranks may be pinned to a CPU (LaunchOptions::bind; not gloo)
};

struct LaunchOptions {
  int nranks = 1;                       // -n
  int hosts = 1;                        // --hosts: emulated hosts (MPCOMM_HOST_ID)
  double timeout_s = 300;               // --timeout: MPCOMM_TIMEOUT for the ranks
  std::string backend = "native";       // MPCOMM_BACKEND for the ranks, and nothing else
  LaunchNeeds needs;                    // how the backend's ranks are started: launch_needs(backend)
  double grace_s = 10;                  // after the first failure, how long the others may take to end
  // --elastic: a rank killed by a signal is lost, not the job's failure: the others go on (their communicators
  // are elastic, MPCOMM_ELASTIC=1, so they can shrink); the lost ranks are listed at the end. A rank that
  // exits with an error still fails the job.
  bool elastic = false;
  // --max-restarts (with elastic): a lost rank's program is started again, as a joiner (MPCOMM_JOIN=1: its
  // init_from_env() waits in mpcomm::join() for the others to grow()), up to this many times in all.
  int max_restarts = 0;
  bool prefix_output = true;            // "[r] " before each line
  // Pin each rank to one of the CPUs this process may use, the one bind_slot() names (mpirun pins by
  // default for small jobs; under mpirun: --bind-to core, core:overload-allowed when ranks outnumber
  // cores). Two spinning ranks left to the scheduler can share one CPU for a whole run and be ten
  // times slower; with more ranks than CPUs, unpinned ranks migrate and small collectives turn bimodal,
  // fast in one run and slow in the next (docs/performance.md, "What made the difference").
  // Only where needs.may_pin: not for gloo (src/backends/registry.cc says why).
  bool bind = true;
  std::vector<std::string> argv;        // PROGRAM ARGS...; PROGRAM is looked up on PATH unless it has a '/'
  std::string bind_addr = "127.0.0.1";  // where the store listens (and MASTER_ADDR)
  // Several nodes (torchrun's meaning): this launcher starts nranks = nproc_per_node ranks, global ranks
  // [node_rank * nranks, (node_rank + 1) * nranks) of nnodes * nranks; node 0 serves the store at
  // `master` (HOST:PORT, listening on every interface), the others reach it there. See launch() below.
  int nnodes = 1;
  int node_rank = 0;
  std::string master;
  std::string token_file;  // --token-file: the job's secret, in a file of mode 0600 (every node the same)
  bool insecure = false;   // --insecure: several nodes with a non-loopback master and no secret
};

// With nnodes > 1, every node's launcher runs this node's ranks and also: exports the global RANK and
// WORLD_SIZE, LOCAL_RANK / LOCAL_WORLD_SIZE within the node, MASTER_ADDR = the master's host and
// MASTER_PORT = a port node 0 chose for PyTorch's store, MPCOMM_STORE = tcp://MASTER, and the job's secret
// as MPCOMM_TOKEN: MPCOMM_TOKEN's or --token-file's (the same on every node), else under Slurm with MUNGE
// the one node 0's store makes and hands to the launchers that prove their uid and job by MUNGE, else (a
// loopback master, or --insecure) one derived from --master; without any of these a non-loopback master
// is refused; the job id is node 0's;
// a failure on any node is announced in the store and ends the ranks of every node (the others'
// launchers look every 200 ms); node 0 keeps the store until every node's ranks have ended (or its
// timeout); a launcher that loses the store ends its ranks. Each node's host id is its hostname.
//
// Runs the job and returns the launcher's exit status: 0 when every rank exited 0, else the first
// failing rank's status (its exit code, or 128 + signal), or 128 + signal when the launcher itself was
// interrupted. Throws InvalidArgument for bad options before anything starts, Internal when the job
// cannot be started (after cleaning up what did start).
//
// launch() forks; call it from the thread that should own the ranks (PR_SET_PDEATHSIG follows the
// forking thread), and not from two threads at once (it owns SIGINT/SIGTERM while it runs).
int launch(const LaunchOptions& opts);

// Which of `ncpus` CPUs (an index into the launcher's affinity mask) rank `rank` of `nranks` on `hosts`
// emulated hosts is pinned to (LaunchOptions::bind). Ranks that fit get one each, in rank order. Else
// each host's ranks are dealt round-robin from a CPU that moves on with the host: hosts' first ranks
// (their leaders, which carry the traffic between hosts) do not all share CPU 0, and each host's own
// ranks are spread over the CPUs too.
int bind_slot(int rank, int nranks, int hosts, int ncpus);

}  // namespace mpcomm
