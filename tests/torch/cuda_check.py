"""CUDA tensors on an mpcomm group (nccl underneath): an op waits for what PyTorch's current stream computes
before the call. One rank on the one GPU: its all_gather_into_tensor copies the input on the communicator's
stream, so an input still being written by a long kernel on PyTorch's stream would come out stale.

Exits 77 (skipped) with the reason where there is no GPU or no CUDA PyTorch.
    python tests/torch/cuda_check.py
"""

import os
import sys
import tempfile

import torch

if not torch.cuda.is_available():
    print(f"skipped: no GPU usable by this PyTorch ({torch.__version__}, CUDA {torch.version.cuda})")
    sys.exit(77)

import torch.distributed as dist  # noqa: E402

import mpcomm.torch  # noqa: F401,E402  (registers the backend)

os.environ.update(MPCOMM_BACKEND="nccl", MPCOMM_DEVICE="cuda:0")
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("mpcomm", store=store, rank=0, world_size=1)
failures = 0
for n in (1 << 10, 1 << 22):
    a = torch.randn(4096, 4096, device="cuda")
    inp = torch.zeros(n, device="cuda")
    for trial in range(5):
        inp.zero_()
        out = torch.full((n,), -1.0, device="cuda")
        # A kernel queue of many milliseconds on the current stream, the last of which writes the input.
        big = a
        for _ in range(8):
            big = big @ a / 64
        inp.copy_(big.flatten()[:n])
        dist.all_gather_into_tensor(out, inp)
        torch.cuda.synchronize()
        if not torch.equal(out, inp):
            failures += 1
            print(f"FAIL: {n} elements, trial {trial}: the op read the input before PyTorch's stream wrote it "
                  f"({int((out != inp).sum())} elements differ)")
dist.destroy_process_group()
print(f"cuda stream order: {failures} failed")
sys.exit(1 if failures else 0)
