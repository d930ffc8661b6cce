"""PyTorch 2.x training workloads on the "mpcomm" backend, each against one process training the same model on
the global batch (the reference, computed by every rank itself): parameters after the steps equal within 1e-5
relative (fp32).

    fsdp      FSDP2 (fully_shard) of a small transformer over every rank
    tp2d      a 2-D DeviceMesh (dp x tp): DTensor Colwise/Rowwise tensor parallelism, FSDP2 over dp (4 ranks)
    pipeline  torch.distributed.pipelining, one stage per rank, 1F1B over 4 micro-batches
    ddp       DistributedDataParallel
    ddp_sparse  DistributedDataParallel of an nn.Embedding(sparse=True) and a linear layer (sparse all_reduce)

Run as every rank of a job (torchrun): python tests/torch/workloads2_check.py WORKLOAD [--backend mpcomm|gloo]
[--steps S] [--dim D]. Prints "rank R of N: ..., 0 failed" and the median step time; exits 1 on a failure.
"""

import argparse
import copy
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import mpcomm.torch  # noqa: F401  (registers the backend)

HEADS, SEQ, BATCH, LR = 4, 8, 16, 0.05
VOCAB = 50  # ddp_sparse: small, so that every rank's batch shares rows with the others'
D, FF = 32, 64  # --dim sets D (FF = 2 D)


def transformer(layers=2):
    torch.manual_seed(0)
    blocks = [nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, batch_first=True) for _ in range(layers)]
    return nn.Sequential(*blocks, nn.Linear(D, D))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, FF), nn.Linear(FF, D)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def mlps(k=2):
    torch.manual_seed(0)
    return nn.Sequential(*[MLP() for _ in range(k)])


def batches(steps):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, SEQ, D, generator=g), torch.randn(BATCH, SEQ, D, generator=g)) for _ in range(steps)]


def train_reference(model, data):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def full(p):
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()


def compare(name, got_params, want_params, failures):
    worst = 0.0
    for (k, g), w in zip(got_params, want_params):
        g, w = full(g), w.detach()
        rel = float((g - w).abs().max() / w.abs().max().clamp_min(1e-12))
        worst = max(worst, rel)
        if rel > 1e-5:
            failures.append(f"{name}: {k} differs from one process by {rel:.2e} relative")
    return worst


def timed_steps(step, data):
    times = []
    for x, y in data:
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)
    return times


def shard_step(model, index, shards):
    """A data-parallel training step: this replica trains on its shard `index` of `shards` of the batch."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    per = BATCH // shards

    def step(x, y):
        opt.zero_grad()
        nn.functional.mse_loss(model(x[index * per:(index + 1) * per]), y[index * per:(index + 1) * per]).backward()
        opt.step()
    return step


def run(workload, steps, failures):
    r, n = dist.get_rank(), dist.get_world_size()
    data = batches(steps)
    if workload in ("fsdp", "ddp"):
        ref = train_reference(transformer(), data)
        model = transformer()
        if workload == "fsdp":
            from torch.distributed.fsdp import fully_shard
            for block in model[:-1]:
                fully_shard(block)
            fully_shard(model)
        else:
            model = nn.parallel.DistributedDataParallel(model)
        times = timed_steps(shard_step(model, r, n), data)
        mine = model.module if workload == "ddp" else model
        worst = compare(workload, list(mine.named_parameters()), list(ref.parameters()), failures)
    elif workload == "ddp_sparse":
        def embedding_model():
            torch.manual_seed(0)
            return nn.Sequential(nn.Embedding(VOCAB, D, sparse=True), nn.Linear(D, D))
        g = torch.Generator().manual_seed(2)
        data = [(torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randn(BATCH, SEQ, D, generator=g))
                for _ in range(steps)]
        ref = train_reference(embedding_model(), data)
        model = nn.parallel.DistributedDataParallel(embedding_model())
        times = timed_steps(shard_step(model, r, n), data)
        worst = compare(workload, list(model.module.named_parameters()), list(ref.parameters()), failures)
    elif workload == "tp2d":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        if n % 2:
            raise SystemExit("tp2d needs an even number of ranks")
        mesh = init_device_mesh("cpu", (n // 2, 2), mesh_dim_names=("dp", "tp"))
        ref = train_reference(mlps(), data)
        model = mlps()
        for block in model:
            parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        times = timed_steps(shard_step(model, mesh["dp"].get_local_rank(), n // 2), data)
        worst = compare("tp2d", list(model.named_parameters()), list(ref.parameters()), failures)
    elif workload == "pipeline":
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        ref = train_reference(mlps(n), data)
        stage_module = copy.deepcopy(mlps(n)[r])
        stage = PipelineStage(stage_module, r, n, torch.device("cpu"))
        sched = Schedule1F1B(stage, 4, loss_fn=nn.functional.mse_loss)
        opt = torch.optim.SGD(stage_module.parameters(), lr=LR)

        def step(x, y):
            opt.zero_grad()
            if r == 0:
                sched.step(x)
            elif r == n - 1:
                sched.step(target=y)
            else:
                sched.step()
            opt.step()
        times = timed_steps(step, data)
        worst = compare("pipeline", list(stage_module.named_parameters()), list(ref[r].parameters()), failures)
    else:
        raise SystemExit(f"unknown workload {workload}")
    return worst, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["fsdp", "tp2d", "pipeline", "ddp", "ddp_sparse"])
    ap.add_argument("--backend", default="mpcomm")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dim", type=int, default=32, help="model width (default 32; the feed-forward is twice it)")
    ap.add_argument("--tag", help="ignored (marks the job's processes for the test runner)")
    a = ap.parse_args()
    global D, FF
    D, FF = a.dim, 2 * a.dim
    dist.init_process_group(a.backend)
    failures = []
    worst, times = run(a.workload, a.steps, failures)
    for f in failures[:5]:
        print(f"rank {dist.get_rank()}: FAIL {f}", flush=True)
    step_ms = statistics.median(times[1:] or times) * 1e3
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {a.workload} on {a.backend}, {a.steps} steps, "
          f"largest difference from one process {worst:.1e}, median step {step_ms:.1f} ms, {len(failures)} failed",
          flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
