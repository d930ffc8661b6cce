"""The torch.distributed backend "mpcomm".

    import mpcomm.torch
    torch.distributed.init_process_group("mpcomm")

Importing this module registers the backend (PyTorch 1.13: a ProcessGroup; 2.x: a c10d Backend for the "cpu"
and "cuda" devices, created through the extended API). Every torch.distributed op then runs on an mpcomm
communicator (MPCOMM_BACKEND picks the one underneath: native by default, gloo, mpi, nccl for CUDA
tensors, or auto: every op on the backend auto's table chooses) that meets its peers through the c10d store init_process_group made; the timeout given to
init_process_group bounds the rendezvous and every op.

Under mpirun or srun (which set no torchrun variables) the import fills RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE from the launcher's variables, and MASTER_ADDR / MASTER_PORT when they are missing
(127.0.0.1 or the first node of a Slurm job, and a port derived from the job's id), so that
init_process_group's default env:// rendezvous works unchanged.
"""

import os as _os
import re as _re
import zlib as _zlib

import torch as _torch
import torch.distributed as _dist

from mpcomm import _build_info


def _release(version: str) -> tuple:
    m = _re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else (version,)


# The extension is compiled against one torch's C++ API, which changes between releases: refuse another torch
# before loading it, by name, rather than fail on a missing symbol.
if _release(_torch.__version__) != _release(_build_info.TORCH_VERSION):
    raise ImportError(
        f"mpcomm: this mpcomm package was built for torch {_build_info.TORCH_VERSION}, but the torch imported is "
        f"{_torch.__version__} ({_torch.__file__}); rebuild it against this torch "
        "(pip install --no-build-isolation <mpcomm source>, docs/torch.md)")

_TORCH_2 = _release(_torch.__version__)[0] >= 2

if _TORCH_2:
    # pip's torch exports a Gloo of its own; the extension's libmpcomm needs the system's. Deep binding makes
    # what the extension loads find symbols in its own dependencies (the system's libgloo first) before the
    # process's (cmake/torch2.cmake).
    import sys as _sys
    _flags = _sys.getdlopenflags()
    _sys.setdlopenflags(_flags | _os.RTLD_DEEPBIND)
    try:
        from mpcomm import _C
    finally:
        _sys.setdlopenflags(_flags)
else:
    from mpcomm import _C

__all__ = ["create_process_group", "backend_of", "flight_record", "available_backends", "ReproducibleGradients",
           "shrink"]

create_process_group = _C.create_process_group
available_backends = _C.available_backends


def _mpcomm_group(pg):
    """The mpcomm object under a torch.distributed group: on 2.x the group's CPU backend, on 1.13 the group."""
    if _TORCH_2 and isinstance(pg, _dist.ProcessGroup):
        return pg._get_backend(_torch.device("cpu"))
    return pg


def backend_of(pg) -> str:
    """The mpcomm backend under an mpcomm group (native, gloo, mpi, nccl, auto)."""
    return _C.backend_of(_mpcomm_group(pg))


def flight_record(pg) -> str:
    """The flight recorder's text of an mpcomm group: its last operations with state and times."""
    return _C.flight_record(_mpcomm_group(pg))


def shrink(group=None, exclude=None):
    """After an op on an mpcomm group raised RuntimeError because a rank died or stopped answering, called on every
    survivor: a new group over the ranks still alive, in their order, numbered from 0, that takes the old group's
    place in torch.distributed (group=None: the default group, replaced — get_rank() and get_world_size() then
    answer for the new world, and the other groups are dropped). The survivors agree on who is gone within the
    group's timeout (longer when another rank is lost while they agree); every op still pending on the old group
    fails. With `exclude` (ranks of the group), those ranks
    leave on purpose, also from a healthy group: every rank calls it, and the excluded get None.

    Needs MPCOMM_ELASTIC=1 (set by `mpcomm launch --elastic`), without which a failure ends the job, and the
    native or gloo backend underneath. On 2.x torch.distributed.shrink_group(ranks, group) works on mpcomm groups
    too (docs/torch.md).
    """
    from mpcomm import _shrink
    pg = group if group is not None else _shrink.default_group()
    is_default = pg == _shrink.default_group()
    try:
        made = _C.shrink(_mpcomm_group(pg), sorted(exclude or []))
    except RuntimeError as e:
        if "c10d store" not in str(e):
            raise
        # The survivors agree through the store the group met through; it can go with a lost rank.
        raise RuntimeError(f"{e}\nmpcomm.torch.shrink: the survivors cannot reach the store this group met through: "
                           "it lived in a lost rank (init_process_group's env:// store lives in rank 0 under mpcomm "
                           "launch and mpirun; torchrun 2.x keeps it in its agent). Give init_process_group a store "
                           "that outlives the ranks (docs/torch.md, \"Surviving a lost rank\")") from None
    if made is None:
        _shrink.forget(pg, is_default)
        return None
    new_backend, kept = made
    if _TORCH_2:
        return _shrink.register_torch2(pg, is_default, new_backend, kept)
    return _shrink.register_torch1(pg, is_default, new_backend, kept)


class ReproducibleGradients:
    """Gradients summed exactly over micro-batches and ranks: the sum depends only on which micro-batches were
    added, not on how they were spread over ranks — the same bits for any world size (docs/reproducible.md).

        acc = ReproducibleGradients(model.parameters(), group)   # no DDP: this does its reduction
        for x, y in my_micro_batches:
            loss_fn(model(x), y).backward()                       # the loss scaled by the global batch
            acc.add()                                             # adds every .grad, then zeroes them
        acc.reduce()                                              # .grad = the sum over every rank's micro-batches
        opt.step()
    """

    def __init__(self, params, group=None):
        self.params = [p for p in params if p.requires_grad]
        self.group = group if group is not None else _dist.group.WORLD
        total = sum(p.numel() for p in self.params)
        self._flat = _torch.zeros(total, dtype=self.params[0].dtype if self.params else _torch.float32)
        self._sum = _C.ReproducibleSum(self._flat)

    def add(self):
        at = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self._flat[at:at + n].zero_()
            else:
                self._flat[at:at + n].copy_(p.grad.reshape(-1))
                p.grad.zero_()
            at += n
        self._sum.add(self._flat)

    def reduce(self):
        self._sum.allreduce(_mpcomm_group(self.group), self._flat)
        self._sum.clear()
        at = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                p.grad = _torch.empty_like(p)
            p.grad.copy_(self._flat[at:at + n].view_as(p))
            at += n


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


def _create_backend(dist_options, backend_options):
    # 2.x's extended API: the group's store (prefixed for this group), its rank and size, and the timeout given
    # to init_process_group / new_group.
    return _C.create_process_group(dist_options.store, dist_options.group_rank, dist_options.group_size,
                                   dist_options.timeout)


_fill_torchrun_env()
if not hasattr(_dist.Backend, "MPCOMM"):
    if _TORCH_2:
        _dist.Backend.register_backend("mpcomm", _create_backend, extended_api=True, devices=["cpu", "cuda"])
        # mpcomm keeps a flight record of its own (flight_record(group), printed when an op fails); torch's
        # recorder hook on every op of a group would double the cost of a small collective.
        _self_recording = getattr(_dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
        if isinstance(_self_recording, set):
            _self_recording.add("mpcomm")
    else:
        _dist.Backend.register_backend("mpcomm", _create)
