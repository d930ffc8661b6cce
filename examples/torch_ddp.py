"""DistributedDataParallel on mpcomm: PyTorch's data-parallel training with "mpcomm" as the backend.

    torchrun --nproc_per_node 4 torch_ddp.py        (Debian's torchrun: add --redirects 1 --tee 1)
    mpcomm launch -n 4 -- python3 torch_ddp.py
    mpirun -n 4 python3 torch_ddp.py

Each rank trains a small MLP on its own batches; DDP averages the gradients over mpcomm (overlapped with
the backward pass). At the end every rank checks that its parameters equal rank 0's and prints "ok".
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mpcomm.torch  # registers the "mpcomm" backend

dist.init_process_group("mpcomm")
rank = dist.get_rank()
torch.manual_seed(0)  # the same initial model everywhere
model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(100 + rank)  # each rank its own data
for step in range(20):
    x = torch.randn(16, 32, generator=data)
    y = x.sum(1, keepdim=True)
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
first = flat.clone()
dist.broadcast(first, src=0)
same = torch.equal(flat, first)
print(f"rank {rank}: loss {loss.item():.4f}, parameters {'equal to' if same else 'DIFFERENT from'} rank 0's: "
      f"{'ok' if same else 'FAILED'}", flush=True)
dist.destroy_process_group()
