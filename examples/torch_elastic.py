"""A training loop that loses a rank and keeps training (mpcomm.torch.shrink), like a torchft replica loop.

    mpcomm launch --elastic -n 4 -- python3 torch_elastic.py --fail-rank 2 --fail-step 5
    MPCOMM_ELASTIC=1 torchrun --nproc_per_node 4 torch_elastic.py --fail-rank 2 --fail-step 5

Every step trains on the same global batch: GLOBAL micro-batches, dealt out over the ranks alive (micro-batch i to
rank i mod world size). The gradients are summed exactly (mpcomm.torch.ReproducibleGradients), so the sum does not
depend on which rank computed which micro-batch. At the start of --fail-step, --fail-rank SIGKILLs itself. The
others' gradient sum raises RuntimeError; they call mpcomm.torch.shrink(), which replaces the default group with one
over the survivors, and run the step again on fewer ranks. No checkpoint is read: the model and the optimizer are
alike on every rank, and the failed step changed neither.

The result is the same bits as a run that lost nothing: each survivor prints the SHA-256 of the final parameters,
which a run without --fail-rank prints too. Each survivor ends with "rank R: OK ..." (R: its rank at the start).
Needs MPCOMM_ELASTIC=1 (mpcomm launch --elastic sets it): without it a failure ends the job. Under torchrun give
--max-restarts 0 and a --monitor-interval longer than the run, or torchrun's agent ends the survivors with the lost
rank (docs/reliability.md).
"""

import argparse
import copy
import hashlib
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import mpcomm.torch  # registers the "mpcomm" backend

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--global", dest="micro_batches", type=int, default=12, help="micro-batches in a step's batch")
p.add_argument("--micro", type=int, default=8, help="samples in a micro-batch")
p.add_argument("--fail-rank", type=int, default=-1, help="this rank SIGKILLs itself at --fail-step")
p.add_argument("--fail-step", type=int, default=3)
p.add_argument("--tag", default="", help="ignored (lets a test find the job's processes)")
args = p.parse_args()

dist.init_process_group("mpcomm")
me = dist.get_rank()  # the rank at the start, which names this process in what it prints
torch.manual_seed(0)  # the same initial model everywhere
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).double()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
samples = args.micro_batches * args.micro


def micro_batch(step, i):
    """Micro-batch i of a step: the same tensors on whichever rank computes it."""
    g = torch.Generator().manual_seed(1000 * step + i)
    x = torch.randn(args.micro, 16, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(1, keepdim=True))


def train_step(step, grads):
    """One step on the ranks alive; raises RuntimeError when a rank is lost during it."""
    world, rank = dist.get_world_size(), dist.get_rank()
    opt.zero_grad()
    for i in range(rank, args.micro_batches, world):
        x, y = micro_batch(step, i)
        (nn.functional.mse_loss(model(x), y, reduction="sum") / samples).backward()
        grads.add()
    grads.reduce()  # every rank's micro-batches, summed exactly: the gradient of the global batch
    opt.step()


grads = mpcomm.torch.ReproducibleGradients(model.parameters())
step, lost = 0, 0
before = None  # the model and optimizer as the last step began
while step < args.steps:
    if me == args.fail_rank and step == args.fail_step:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        before = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
        train_step(step, grads)
        step += 1
    except RuntimeError as e:
        t0 = time.monotonic()
        was = dist.get_world_size()
        mpcomm.torch.shrink()  # the default group, now over the survivors
        grads = mpcomm.torch.ReproducibleGradients(model.parameters())  # drops the failed step's partial sums
        opt.zero_grad()
        # A rank lost late in a step's sum can leave some survivors past that step and others in it (never more
        # than one apart: every step sums over all): all go on from the earliest, those ahead from their copy.
        earliest = torch.tensor([step])
        dist.all_reduce(earliest, op=dist.ReduceOp.MIN)
        if int(earliest) < step:
            model.load_state_dict(before[0])
            opt.load_state_dict(before[1])
            step = int(earliest)
        lost += was - dist.get_world_size()
        print(f"rank {me}: step {step} failed ({str(e).splitlines()[0][:120]}); shrunk from {was} to "
              f"{dist.get_world_size()} ranks in {time.monotonic() - t0:.2f} s, running step {step} again", flush=True)

digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
x, y = micro_batch(args.steps, 0)
with torch.no_grad():
    loss = nn.functional.mse_loss(model(x), y).item()
print(f"rank {me}: OK {args.steps} steps on {dist.get_world_size()} ranks ({lost} lost), held-out loss {loss:.4f}, "
      f"parameters sha256 {digest}", flush=True)
dist.destroy_process_group()
