"""The torch.distributed backend "mpcomm".

    import mpcomm.torch
    torch.distributed.init_process_group("mpcomm")

Importing this module registers the backend. Every torch.distributed op then runs on an mpcomm
communicator (MPCOMM_BACKEND picks the one underneath: native by default, gloo, mpi, or nccl for CUDA
tensors) that meets its peers through the c10d store init_process_group made; the timeout given to
init_process_group bounds the rendezvous and every op.

Under mpirun or srun (which set no torchrun variables) the import fills RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE from the launcher's variables, and MASTER_ADDR / MASTER_PORT when they are missing
(127.0.0.1 or the first node of a Slurm job, and a port derived from the job's id), so that
init_process_group's default env:// rendezvous works unchanged.
"""

import os as _os
import zlib as _zlib

import torch.distributed as _dist

from mpcomm import _C

__all__ = ["create_process_group", "backend_of", "flight_record", "available_backends"]

create_process_group = _C.create_process_group
backend_of = _C.backend_of
flight_record = _C.flight_record
available_backends = _C.available_backends


def _job_port(job_id: str) -> str:
    # A port in 20000..29999 that every rank of the job derives alike.
    return str(20000 + _zlib.crc32(job_id.encode()) % 10000)


def _first_slurm_node(nodelist: str) -> str:
    # "node[01-04,07],gpu3" -> "node01"; "a,b" -> "a".
    first = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist
    if "[" in first:
        prefix, rest = first.split("[", 1)
        return prefix + rest.split("]")[0].split(",")[0].split("-")[0]
    return first


def _fill_torchrun_env(env=_os.environ) -> None:
    """Sets torchrun's variables from mpirun's or Slurm's, where torchrun's are missing."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return
    if "OMPI_COMM_WORLD_RANK" in env:
        pairs = {"RANK": "OMPI_COMM_WORLD_RANK", "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
                 "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE"}
        job = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_orte_hnp_uri", "")
        master = "127.0.0.1"
        if "MASTER_ADDR" not in env and env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1") != env.get("OMPI_COMM_WORLD_SIZE", "1"):
            # Ranks on several hosts: 127.0.0.1 would be a different store on each.
            raise RuntimeError("mpcomm: mpirun started this job on several hosts, and nothing says where rank 0's "
                               "store is: pass mpirun -x MASTER_ADDR=<the first host's address> (and -x MASTER_PORT)")
    elif "SLURM_PROCID" in env:
        pairs = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID"}
        job = env.get("SLURM_JOB_ID", "") + "." + env.get("SLURM_STEP_ID", "")
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        master = _first_slurm_node(nodes) if nodes else "127.0.0.1"
    else:
        return
    for k, v in pairs.items():
        if k not in env and v in env:
            env[k] = env[v]
    env.setdefault("MASTER_ADDR", master)
    env.setdefault("MASTER_PORT", _job_port(job or "mpcomm"))


def _create(store, rank, size, timeout):
    return _C.create_process_group(store, rank, size, timeout)


_fill_torchrun_env()
if not hasattr(_dist.Backend, "MPCOMM"):
    _dist.Backend.register_backend("mpcomm", _create)
