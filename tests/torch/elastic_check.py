"""mpcomm.torch.shrink (and, on 2.x, torch.distributed.shrink_group) as a user sees them. Run as 4 ranks under
`mpcomm launch --elastic` (MPCOMM_ELASTIC=1):

  1. shrink() of a healthy group without exclude is refused, naming why; the group still works.
  2. A subgroup of ranks 0, 1, 2 drops rank 1 on purpose: rank 1 gets None, ranks 0 and 2 a group of 2 whose
     all_reduce and broadcast (src: a global rank) are exact.
  3. Rank 1 SIGKILLs itself with an all_reduce in flight: the others' wait raises RuntimeError, shrink() replaces
     the default group (world 3, ranks renumbered in order), its all_reduce is exact, and new_group() over the new
     world works.
  4. The new last rank leaves on purpose: 2.x through torch.distributed.shrink_group([2]) (the leaving rank does
     not call it), 1.13 through shrink(exclude=[2]) (every rank calls it, the leaving one gets None).

Ranks 0, 2 and 3 (numbered as at the start) print "rank R: OK ..." or "rank R: FAIL <why>".
"""

import os
import sys
import time

import torch
import torch.distributed as dist

import mpcomm.torch
from faults_check import killed_mid_all_reduce  # this folder's

dist.init_process_group("mpcomm")
ME = dist.get_rank()
TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


def out(msg):
    print(f"rank {ME}: {msg}", flush=True)


def ranks_of(g):
    return dist.get_process_group_ranks(g) if TORCH_2 else sorted(dist.distributed_c10d._pg_group_ranks[g])


def summed(group=None):
    """all_reduce of (global rank + 1) over `group`: the sum it must give."""
    t = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(t, group=group)
    want = float(sum(q + 1 for q in (ranks_of(group) if group is not None else range(dist.get_world_size()))))
    return [] if torch.equal(t, torch.full((1000,), want)) else [f"all_reduce gave {t[0].item()}, not {want}"]


def healthy_refused():
    try:
        mpcomm.torch.shrink()
        return ["shrink() of a healthy group without exclude was not refused"]
    except RuntimeError as e:
        fails = [] if "has not failed" in str(e) else [f"the refusal does not say why: {e}"]
    return fails + summed()


def subgroup_excludes():
    sub = dist.new_group([0, 1, 2], backend="mpcomm")
    fails = []
    if ME in (0, 1, 2):
        g = mpcomm.torch.shrink(sub, exclude=[1])
        if ME == 1:
            fails += [] if g is None else ["the excluded rank got a group"]
        else:
            fails += [] if ranks_of(g) == [0, 2] else [f"the shrunk subgroup has ranks {ranks_of(g)}"]
            fails += summed(g)
            b = torch.arange(5.0) if ME == 2 else torch.zeros(5)
            dist.broadcast(b, src=2, group=g)
            fails += [] if torch.equal(b, torch.arange(5.0)) else [f"broadcast on the shrunk subgroup gave {b}"]
    dist.barrier()
    return fails


def killed_rank():
    t0 = time.monotonic()
    detected, text = killed_mid_all_reduce(1, 1 << 20)
    if detected is None:
        return ["no all_reduce failed after rank 1 was killed"]
    if "died" not in text and "failed" not in text:
        return [f"the error does not say a rank failed: {text}"]
    mpcomm.torch.shrink()
    took = time.monotonic() - t0
    out(f"the failure raised {detected:.2f} s after the wait began, the shrunk world was ready at {took:.2f} s")
    fails = [] if dist.get_world_size() == 3 else [f"world size {dist.get_world_size()} after the shrink"]
    want_rank = {0: 0, 2: 1, 3: 2}[ME]
    fails += [] if dist.get_rank() == want_rank else [f"rank {dist.get_rank()} after the shrink, not {want_rank}"]
    fails += [] if ranks_of(dist.group.WORLD) == [0, 1, 2] else [f"the new world's ranks {ranks_of(dist.group.WORLD)}"]
    fails += summed()
    pair = dist.new_group([0, 2], backend="mpcomm")
    if dist.get_rank() in (0, 2):
        fails += summed(pair)
    return fails


def leave_on_purpose():
    fails = []
    if TORCH_2:
        if dist.get_rank() == 2:
            return []
        g = dist.shrink_group([2])
    else:
        leaving = dist.get_rank() == 2
        g = mpcomm.torch.shrink(exclude=[2])
        if leaving or g is None:
            return [] if leaving and g is None else [f"leaving: {leaving}, but got the group {g}"]
    fails += [] if g == dist.group.WORLD and dist.get_world_size() == 2 else ["the default group was not replaced"]
    fails += [] if ranks_of(g) == [0, 1] else [f"the world left has ranks {ranks_of(g)}, not [0, 1]"]
    return fails + summed()


fails = []
for step in (healthy_refused, subgroup_excludes, killed_rank, leave_on_purpose):
    if ME == 1 and step is killed_rank:
        killed_rank()  # does not return
    fails += [f"{step.__name__}: {f}" for f in step()]
    if fails:
        break
for f in fails:
    out("FAIL " + f)
if not fails:
    out("OK shrink: refused when healthy, subgroup exclusion, killed rank, leaving on purpose")
sys.stdout.flush()
os._exit(1 if fails else 0)
