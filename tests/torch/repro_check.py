"""MPCOMM_REPRODUCIBLE=1 under torch.distributed: all_reduce's SUM and AVG give the same bits whichever rank holds
which tensor, and so does DDP's gradient average after a step, whichever rank holds which micro-batch; and
mpcomm.torch.ReproducibleGradients gives the same parameters for the same micro-batches on 1, 2 or 4 ranks.

Run as N ranks (tests/torch/run.sh torchrun N repro_check.py). Each rank prints "rank R: OK repro" or FAIL.
"""
import argparse
import os

os.environ["MPCOMM_REPRODUCIBLE"] = "1"  # before the group is made: its communicator reads it then

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import mpcomm.torch  # noqa: E402,F401

BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16}


def vector(v, n, dtype):
    """Values of mixed magnitude (2^-16 .. 2^16) and sign, a function of v only."""
    g = torch.Generator().manual_seed(1000 + v)
    x = torch.randn(n, generator=g, dtype=torch.float64) * torch.exp2(torch.randint(-16, 16, (n,), generator=g).double())
    return x.to(dtype)


def same_bits(a, b):
    return torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag")
    args = ap.parse_args()
    dist.init_process_group("mpcomm")
    r, w = dist.get_rank(), dist.get_world_size()
    failures = []
    ops = [("sum", dist.ReduceOp.SUM)] + ([("avg", dist.ReduceOp.AVG)] if hasattr(dist.ReduceOp, "AVG") else [])
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for n in (1, 7, 1000, 100003):
            for name, op in ops:
                results = []
                for shift in range(w):
                    x = vector((r + shift) % w, n, dtype)
                    dist.all_reduce(x, op=op)
                    results.append(x)
                if not all(same_bits(results[0], t) for t in results[1:]):
                    failures.append(f"all_reduce {name} of {n} {dtype}: the bits depend on which rank holds which tensor")
    # the data is such that a float32 sum does depend on the order (else the above would prove nothing)
    xs = [vector(v, 100003, torch.float32) for v in range(max(w, 3))]
    fwd, bwd = sum(xs), sum(reversed(xs))
    if same_bits(fwd, bwd):
        failures.append("a float32 sum of these vectors does not depend on the order")

    # DDP: one SGD step on micro-batch (r + shift) % w of a fixed set; the parameters are the same bits for any shift
    params = []
    for shift in range(w):
        torch.manual_seed(7)
        model = DDP(nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 8)))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(50 + (r + shift) % w)
        x, y = torch.randn(16, 64, generator=g), torch.randn(16, 8, generator=g)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        params.append([p.detach().clone() for p in model.module.parameters()])
    for other in params[1:]:
        if not all(same_bits(a, b) for a, b in zip(params[0], other)):
            failures.append("DDP: the parameters after a step depend on which rank held which micro-batch")
            break
    # mpcomm.torch.ReproducibleGradients: the same 4 micro-batches spread over 1, 2 and 4 ranks (subgroups of this
    # job), each rank adding its micro-batches' gradients: the parameters after a step are the same bits
    after = {}
    for size in (1, 2, 4):
        group = dist.new_group(list(range(size)))
        if w < 4 or r >= size:
            continue
        torch.manual_seed(7)
        model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 8))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        acc = mpcomm.torch.ReproducibleGradients(model.parameters(), group)
        per = 4 // size
        for m in range(r * per, (r + 1) * per):
            g = torch.Generator().manual_seed(80 + m)
            x, y = torch.randn(16, 64, generator=g), torch.randn(16, 8, generator=g)
            (nn.functional.mse_loss(model(x), y, reduction="sum") / (4 * 16 * 8)).backward()
            acc.add()
        acc.reduce()
        opt.step()
        after[size] = [p.detach().clone() for p in model.parameters()]
    if r == 0 and w == 4:
        for size in (2, 4):
            if not all(same_bits(a, b) for a, b in zip(after[1], after[size])):
                failures.append(f"ReproducibleGradients: 4 micro-batches on {size} ranks are not the bits of 1 rank's")
    dist.barrier()
    for f in failures:
        print(f"rank {r}: FAIL {f}", flush=True)
    if not failures:
        print(f"rank {r}: OK repro", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
