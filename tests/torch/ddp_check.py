"""DistributedDataParallel on the "mpcomm" backend against gloo, in one job, from one seed.

Three copies of an MLP of about 10 M parameters train for --steps steps on the same data: DDP over the
mpcomm group, DDP over a gloo group, and DDP over the mpcomm group with a communication hook that averages
the gradient buckets through get_future() (what DDP's comm hooks use). Checks that all three end with the
same parameters (within --rtol relative) and prints every copy's median step time. Rank 0 prints one JSON
line: {"steps", "params", "mpcomm_ms", "gloo_ms", "hook_ms", "speedup", "max_rel_diff", "hook_max_rel_diff"}.

    torchrun --nproc_per_node 4 tests/torch/ddp_check.py [--steps 20]
    torchrun --nproc_per_node 4 tests/torch/ddp_check.py --only BACKEND --save FILE

--only trains one copy, over BACKEND alone (the default group; no other group in the process, whose threads
would take CPU time from it): rank 0 prints {"backend", "step_ms"} and saves the final parameters to FILE
(scripts/torch-bench --ddp compares the backends this way).
"""

import argparse
import copy
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mpcomm.torch  # noqa: F401


def mlp(width):
    return nn.Sequential(nn.Linear(1024, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 512))


def averaging_hook(group):
    """Sums a bucket over `group` and divides by its size, through the Work's future."""
    def hook(state, bucket):
        t = bucket.buffer()
        t.div_(dist.get_world_size(group))
        fut = dist.all_reduce(t, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    return hook


def max_rel_diff(a, b):
    worst = 0.0
    for p, q in zip(a.parameters(), b.parameters()):
        d = (p.detach() - q.detach()).abs().max().item()
        s = max(p.detach().abs().max().item(), 1e-12)
        worst = max(worst, d / s)
    return worst


def batches_of(args, rank):
    gen = torch.Generator().manual_seed(99 + rank)  # each rank its own data
    return [(torch.randn(args.batch, 1024, generator=gen), torch.randn(args.batch, 512, generator=gen))
            for _ in range(args.steps)]


def only(args):
    dist.init_process_group(args.only)
    r = dist.get_rank()
    torch.manual_seed(1234)
    model = DDP(mlp(args.width))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for x, y in batches_of(args, r):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if r == 0:
        print(json.dumps({"backend": args.only, "step_ms": statistics.median(times[2:] if len(times) > 4 else times) * 1e3}),
              flush=True)
        if args.save:
            torch.save([p.detach().clone() for p in model.module.parameters()], args.save)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--only", default="", help="train over this backend alone (see above)")
    ap.add_argument("--save", default="", help="with --only: rank 0 saves the final parameters here")
    ap.add_argument("--tag", help="ignored (marks the job's processes for the test runner)")
    args = ap.parse_args()

    if args.only:
        return only(args)
    dist.init_process_group("mpcomm")
    gloo = dist.new_group(backend="gloo")
    r = dist.get_rank()
    torch.manual_seed(1234)
    base = mlp(args.width)
    nparams = sum(p.numel() for p in base.parameters())
    models = {
        "mpcomm": DDP(copy.deepcopy(base)),
        "gloo": DDP(copy.deepcopy(base), process_group=gloo),
        "hook": DDP(copy.deepcopy(base)),
    }
    models["hook"].register_comm_hook(None, averaging_hook(dist.group.WORLD))
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
    batches = batches_of(args, r)
    times = {k: [] for k in models}
    for x, y in batches:
        for k, m in models.items():  # in turns, step by step: the same machine state for each
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            opts[k].zero_grad()
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            opts[k].step()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v[2:] if len(v) > 4 else v) * 1e3 for k, v in times.items()}
    diff = max_rel_diff(models["mpcomm"].module, models["gloo"].module)
    hook_diff = max_rel_diff(models["hook"].module, models["gloo"].module)
    fails = []
    if diff > args.rtol:
        fails.append(f"mpcomm and gloo parameters differ by {diff:.3g} relative (allowed {args.rtol})")
    if hook_diff > args.rtol:
        fails.append(f"the comm-hook model and gloo's differ by {hook_diff:.3g} relative (allowed {args.rtol})")
    speedup = med["gloo"] / med["mpcomm"]
    if r == 0:
        print(json.dumps({"steps": args.steps, "params": nparams, "mpcomm_ms": round(med["mpcomm"], 2),
                          "gloo_ms": round(med["gloo"], 2), "hook_ms": round(med["hook"], 2),
                          "speedup": round(speedup, 2), "max_rel_diff": diff, "hook_max_rel_diff": hook_diff}),
              flush=True)
    for f in fails:
        print(f"rank {r}: FAIL {f}", flush=True)
    if not fails:
        print(f"rank {r}: OK ddp", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
