"""Failures on the "mpcomm" backend, as a user sees them. Run as every rank of a job:

    faults_check.py bad        bad input is refused before any traffic, with a clear Python error; the
                               group still works afterwards
    faults_check.py skip       the last rank skips an all_reduce: every other rank's wait() raises within
                               the timeout (3 s) + 5 s, naming the rank it waited for
    faults_check.py kill       rank 1 SIGKILLs itself while an all_reduce is in flight: every other rank
                               raises within a few seconds (the timeout is 60 s)
    faults_check.py monitored  (PyTorch 2.x; 1.13 lets only gloo run it) the last rank skips monitored_barrier:
                               rank 0 raises within its 2 s timeout + 3 s naming that rank; the others raise
                               within the group's timeout (3 s) + 5 s
    faults_check.py subgroup   new_group(ranks=[0, n-1], backend="mpcomm"): exact results inside it, the
                               others are not members

Each surviving rank prints "rank R: OK <what>" or "rank R: FAIL <why>" and exits 0 or 1.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import mpcomm.torch  # noqa: F401


def out(msg):
    print(f"rank {dist.get_rank()}: {msg}", flush=True)


def expect_error(what, fn, words):
    """fn() must raise RuntimeError/ValueError whose text holds every word of `words`."""
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        if missing:
            return [f"{what}: error lacks {missing}: {text}"]
        return []
    return [f"{what}: was not refused"]


def bad():
    r, n = dist.get_rank(), dist.get_world_size()
    fails = []
    # A dtype that cannot travel (1.13: quantized; 2.x's dispatcher keeps quantized tensors from backends, its
    # bits8 reaches them), and one that travels but is never reduced.
    if torch.__version__.startswith("1."):
        odd, odd_name = torch.quantize_per_tensor(torch.ones(3), 1.0, 0, torch.quint8), "QUInt8"
    else:
        odd, odd_name = torch.zeros(3, dtype=torch.uint8).view(torch.bits8), "Bits8"
    fails += expect_error("unsupported dtype", lambda: dist.broadcast(odd, src=0), ["dtype", odd_name, "not supported"])
    fails += expect_error("int16 reduced", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
                          ["SUM", "Short", "only moved"])
    fails += expect_error("root out of range", lambda: dist.broadcast(torch.ones(3), src=n + 5),
                          ["root", str(n + 5), "out of range"])
    fails += expect_error("reduce_scatter list of different sizes",
                          lambda: dist.reduce_scatter(torch.empty(4), [torch.ones(4 + (q == 1)) for q in range(n)]),
                          ["reduce_scatter", "sizes differ"])
    fails += expect_error("all_gather output list of the wrong length",
                          lambda: dist.all_gather([torch.empty(3) for _ in range(n + 1)], torch.ones(3)),
                          ["allgather", "output list", str(n)])
    # A tensor on another device: PyTorch built without CUDA cannot make a CUDA tensor (and its dispatcher
    # refuses meta tensors before they reach a backend); with CUDA, the group's device check refuses it.
    try:
        cuda = torch.ones(3, device="cuda")
        fails += expect_error("a CUDA tensor", lambda: dist.all_reduce(cuda), ["cuda", "CPU"])
    except (RuntimeError, AssertionError) as e:
        out(f"(no CUDA tensor possible here: {str(e).splitlines()[0][:60]})")
    fails += expect_error("BOR of floats", lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BOR),
                          ["BOR", "integer or bool", "Float"])
    if hasattr(dist, "_make_nccl_premul_sum"):
        fails += expect_error("PREMUL_SUM", lambda: dist.all_reduce(torch.ones(3), op=dist._make_nccl_premul_sum(2.0)),
                              ["PREMUL_SUM", "not supported"])
    # No traffic was started by any of them: the group still works, and exactly.
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((5,), float(n * (n + 1) // 2))):
        fails.append(f"the group is broken after the refusals: {t.tolist()}")
    return fails


def absent_last_rank(call):
    """The last rank stays away (alive: no peer failure) past the others' timeout while they make `call`.
    Returns (the absent rank, seconds until call raised, its text): (rank, None, None) on the absent rank,
    (rank, seconds, None) where call returned."""
    r, n = dist.get_rank(), dist.get_world_size()
    missing = n - 1
    if r == missing:
        time.sleep(12)
        return missing, None, None
    t0 = time.monotonic()
    try:
        call()
        return missing, time.monotonic() - t0, None
    except RuntimeError as e:
        took, text = time.monotonic() - t0, str(e)
        out(f"raised after {took:.1f} s: {text.splitlines()[0][:300]}")
        return missing, took, text


def skip():
    missing, took, text = absent_last_rank(lambda: dist.all_reduce(torch.ones(1000)))
    if took is None:
        return []
    if text is None:
        return ["the all_reduce completed without the last rank"]
    fails = []
    if took > 3 + 5:
        fails.append(f"raised after {took:.1f} s, past the timeout + 5 s")
    if f"rank {missing}" not in text and "communicator was aborted" not in text:
        fails.append(f"the error does not name rank {missing}: {text}")
    if "allreduce" not in text:
        fails.append(f"the error does not name the op: {text}")
    return fails


def monitored():
    missing, took, text = absent_last_rank(
        lambda: dist.monitored_barrier(timeout=datetime.timedelta(seconds=2), wait_all_ranks=True))
    if took is None:
        return []
    if text is None:
        return ["monitored_barrier passed without the last rank"]
    if dist.get_rank() == 0:
        fails = [] if f"Rank {missing} failed to pass monitoredBarrier in 2000 ms" in text else [
            f"rank 0's error does not name rank {missing}: {text}"]
        return fails + ([f"raised after {took:.1f} s, past 2 s + 3 s"] if took > 5 else [])
    return [f"raised after {took:.1f} s, past the timeout + 5 s"] if took > 8 else []


def killed_mid_all_reduce(victim, elements):
    """`victim` SIGKILLs itself with an all_reduce of `elements` floats in flight; every other rank keeps issuing
    them until one raises. Returns (seconds until it raised, the error's text), or (None, None) if none did."""
    t = torch.ones(elements)
    w = dist.all_reduce(t, async_op=True)
    if dist.get_rank() == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(50):  # the one in flight, then more: one of them must fail
            w.wait()
            w = dist.all_reduce(t, async_op=True)
        return None, None
    except RuntimeError as e:
        return time.monotonic() - t0, str(e)


def kill():
    dist.all_reduce(torch.ones(1 << 22))  # everyone connected
    took, text = killed_mid_all_reduce(1, 1 << 22)
    if took is None:
        return ["no all_reduce failed after rank 1 was killed"]
    out(f"raised after {took:.1f} s: {text.splitlines()[0][:300]}")
    return [] if took < 15 else [f"raised only after {took:.1f} s"]


def subgroup():
    fails = subgroup_ops()
    # Every rank here before any leaves: rank 0 serves the store, which a rank still in new_group's store
    # barrier (PyTorch 1.13 polls it) may yet ask.
    dist.barrier()
    return fails


def subgroup_ops():
    r, n = dist.get_rank(), dist.get_world_size()
    members = [0, n - 1]
    g = dist.new_group(ranks=members, backend="mpcomm")
    if r not in members:
        return [] if g == dist.GroupMember.NON_GROUP_MEMBER else ["a non-member got a group"]
    t = torch.full((7,), float(r))
    dist.all_reduce(t, group=g)
    if not torch.equal(t, torch.full((7,), float(sum(members)))):
        return [f"subgroup all_reduce gave {t.tolist()}"]
    b = torch.arange(4.0) if r == n - 1 else torch.zeros(4)
    dist.broadcast(b, src=n - 1, group=g)  # src is a global rank
    return [] if torch.equal(b, torch.arange(4.0)) else [f"subgroup broadcast gave {b.tolist()}"]


def main():
    mode = sys.argv[1]
    timeout = {"skip": 3, "monitored": 3, "kill": 60}.get(mode, 60)
    dist.init_process_group("mpcomm", timeout=datetime.timedelta(seconds=timeout))
    fails = {"bad": bad, "skip": skip, "monitored": monitored, "kill": kill, "subgroup": subgroup}[mode]()
    for f in fails:
        out("FAIL " + f)
    if not fails:
        out("OK " + mode)
    sys.stdout.flush()
    os._exit(1 if fails else 0)  # no destroy: after a failure the group is aborted anyway


if __name__ == "__main__":
    main()
