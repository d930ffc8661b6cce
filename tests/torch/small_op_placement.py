"""Where a small dist.all_reduce's time goes on a crowded host: the slowest rank's time per call and the
CPU each rank's main thread runs on.

    /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 4 \
        tests/torch/small_op_placement.py [--backend mpcomm] [--calls 2000] [--bytes 8]

(PYTHONPATH=build/python for a build's package.) Each call follows a dist.barrier(); a call's time is the
slowest rank's, from its own barrier exit to its own return. Every 20 calls each rank notes the CPU its
main thread is on (/proc/thread-self/stat). Rank 0 prints one JSON line: the median call in us, the
median per 200 calls, and each rank's CPUs with how often it was seen there ("cpus": {"0": 100} for
a rank that never left CPU 0). With 4 ranks on 2 CPUs the scheduler leaves 3 of them on one CPU in
about half of the jobs, for the whole job (docs/performance.md, "A small op's time under torchrun").
"""

import argparse
import collections
import json
import statistics
import time

import torch
import torch.distributed as dist


def cpu_now():
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="mpcomm")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=8)
    a = ap.parse_args()
    if a.backend == "mpcomm":
        import mpcomm.torch  # noqa: F401
    dist.init_process_group(a.backend)
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.ones(max(1, a.bytes // 4))
    for _ in range(5):
        dist.all_reduce(x)
    spans, cpus = [], []
    clock = time.perf_counter
    for i in range(a.calls):
        dist.barrier()
        t0 = clock()
        dist.all_reduce(x)
        spans.append(clock() - t0)
        if i % 20 == 0:
            cpus.append(cpu_now())
    mine = torch.tensor(spans, dtype=torch.float64)
    everyone = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(everyone, mine)
    seen = torch.tensor([cpus.count(c) for c in range(64)], dtype=torch.int64)
    seen_all = [torch.empty_like(seen) for _ in range(n)]
    dist.all_gather(seen_all, seen)
    if r == 0:
        slowest = torch.stack(everyone).max(0).values * 1e6
        per = [round(statistics.median(slowest[k:k + 200].tolist()), 1) for k in range(0, a.calls, 200)]
        placement = [{str(c): int(v) for c, v in enumerate(s.tolist()) if v} for s in seen_all]
        print(json.dumps({"backend": a.backend, "ranks": n, "bytes": a.bytes, "median_us": round(slowest.median().item(), 1),
                          "median_us_per_200": per, "cpus": placement}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
