"""Where a DDP step's time goes: forward, backward and optimizer step of ddp_check.py's MLP, without DDP
and with it, over one backend, and a lone all_reduce of all its gradients. Rank 0 prints one line per row,
medians of 12 steps in ms.

    PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 4 \\
        tests/torch/ddp_breakdown.py [--backend mpcomm|gloo] [--batch 16] [--bucket-cap-mb 25]
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mpcomm.torch  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_check import mlp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="mpcomm")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size (1000: one bucket, no overlap)")
    args = ap.parse_args()
    dist.init_process_group(args.backend)
    torch.manual_seed(1)
    x, y = torch.randn(args.batch, 1024), torch.randn(args.batch, 512)
    rows = {}
    for name, model in (("plain", mlp(args.width)), ("ddp", DDP(mlp(args.width), bucket_cap_mb=args.bucket_cap_mb))):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        times = []
        for _ in range(15):
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            times.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
        rows[name] = [statistics.median(t[i] for t in times[3:]) * 1e3 for i in range(4)]
    grads = torch.randn(sum(p.numel() for p in mlp(args.width).parameters()))
    lone = []
    for _ in range(8):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(grads)
        lone.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        for name, (f, b, o, total) in rows.items():
            print("%s %s: forward %.1f, backward %.1f, step %.1f, total %.1f ms" % (args.backend, name, f, b, o, total), flush=True)
        print("%s all_reduce of %d floats: %.1f ms" % (args.backend, grads.numel(), statistics.median(lone[2:]) * 1e3), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
