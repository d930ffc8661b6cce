"""mpcomm.torch's translation of mpirun's and Slurm's variables into torchrun's (what init_process_group's
env:// reads), on made-up environments."""

import sys

from mpcomm.torch import _fill_torchrun_env, _job_port

fails = []


def expect(name, env, want):
    env = dict(env)
    _fill_torchrun_env(env)
    for k, v in want.items():
        if env.get(k) != v:
            fails.append(f"{name}: {k}={env.get(k)!r}, want {v!r}")


# torchrun's own variables are left alone
expect("torchrun", {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1234"},
       {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1234"})
# Open MPI on one host: rank, size, local rank/size; loopback and a port from the job id, alike on every rank
ompi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_MCA_ess_base_jobid": "12345"}
expect("openmpi", ompi, {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4",
                         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": _job_port("12345")})
# Open MPI on several hosts: loopback would be another store on each host; without MASTER_ADDR it is refused
ompi = dict(ompi, OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_LOCAL_SIZE="2")
try:
    _fill_torchrun_env(dict(ompi))
    fails.append("openmpi on 2 hosts without MASTER_ADDR: no error")
except RuntimeError as e:
    if "MASTER_ADDR" not in str(e):
        fails.append(f"openmpi on 2 hosts: the error does not name MASTER_ADDR: {e}")
expect("openmpi, MASTER_* given", dict(ompi, MASTER_ADDR="10.0.0.1", MASTER_PORT="999"),
       {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "999"})
# Slurm: the first node of the step's node list
slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0",
         "SLURM_STEP_NODELIST": "node[03-04,09],gpu1"}
expect("slurm", slurm, {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "node03",
                        "MASTER_PORT": _job_port("77.0")})
expect("slurm, plain list", dict(slurm, SLURM_STEP_NODELIST="alpha,beta"), {"MASTER_ADDR": "alpha"})
port = int(_job_port("77.0"))
if not 20000 <= port < 30000:
    fails.append(f"job port {port} outside 20000..29999")
if _job_port("77.0") == _job_port("78.0"):
    fails.append("two jobs got one port")

for f in fails:
    print("FAIL", f)
print("OK" if not fails else f"{len(fails)} failed")
sys.exit(1 if fails else 0)
