// Environment discovery: which rank this process is, how many there are, and where the rendezvous store
// is, read from whatever launched us. One function so that init_from_env() and the tools agree.
//
// Precedence, first match wins:
//   mpcomm   mpcomm launch: MPCOMM_STORE with RANK and WORLD_SIZE (the launcher serves the store)
//   torchrun RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (rank 0 serves)
//   openmpi  OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}
//   slurm    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
//            SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE ("2(x3),1", indexed by SLURM_NODEID)
// Under Open MPI and Slurm the store address comes from MPCOMM_STORE or MASTER_ADDR:MASTER_PORT (under
// Slurm, without either: the step's first node, at a port derived from SLURM_JOB_ID and SLURM_STEP_ID),
// and rank 0 serves it when it is a tcp:// store — unless MPCOMM_STORE_SERVED=1 says that someone else
// serves it (`mpcomm launch --backend mpi` runs mpirun around its own store and sets it).
#pragma once

#include <string>

namespace mpcomm {

struct EnvInfo {
  int rank = 0;
  int size = 1;
  // Position among the ranks on this host. When the launcher does not say, the whole job is taken to
  // be one host (local_rank = rank, local_size = size); Topology still comes from host ids.
  int local_rank = 0;
  int local_size = 1;
  std::string store_url;     // "tcp://HOST:PORT" or "file:///PATH"
  bool serve_store = false;  // this process must start the TcpStoreServer (it listens on store_url's port)
  std::string source;        // "mpcomm" | "torchrun" | "openmpi" | "slurm"
};

// Reads the process environment. Throws InvalidArgument naming the variables it looked at when no
// launcher is recognized or a value is missing, not a number, negative or inconsistent (rank >= size).
EnvInfo discover_env();

// MPCOMM_HOST_ID when set and non-empty, else gethostname(). Under Open MPI with MPCOMM_HOSTS=H > 1 (how
// `mpcomm launch --hosts H --backend mpi` emulates hosts, since mpirun gives every rank the same
// environment) it is "<hostname>-h<h>" with h = emulated_host_of_rank(world rank, world size, H).
// Throws InvalidArgument for an MPCOMM_HOSTS that is not a number between 1 and the world size.
std::string host_id_from_env();

// Whether this process is one rank of a job of several that some launcher started, as the tools decide
// whether to run as a rank (`--launcher auto`): RANK with WORLD_SIZE > 1 (torchrun, mpcomm launch),
// OMPI_COMM_WORLD_RANK with OMPI_COMM_WORLD_SIZE > 1 (mpirun), or SLURM_PROCID with SLURM_STEP_ID and
// SLURM_NTASKS > 1 (a task of an srun step; a batch script has no step id, `srun --pty bash` one task).
bool launched_as_rank();

// The first host of a Slurm host list: "node[01-04,07],gpu3" -> "node01"; "" when malformed.
std::string first_slurm_host(const std::string& list);

// Block placement of `size` ranks on `hosts` emulated hosts: host h runs ranks [h*size/hosts,
// (h+1)*size/hosts). Returns the host of `rank`.
int emulated_host_of_rank(int rank, int size, int hosts);

}  // namespace mpcomm
