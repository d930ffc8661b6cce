#!/usr/bin/python3
"""PyTorch reference for the C++ GPT-2 trainer (`mpcomm train`).

The test-suite runs this script and the C++ trainer on the same safetensors checkpoint and the same
data, and compares their per-step losses (and optionally the final weights). Everything here is
deliberately plain: GPT-2 written out by hand, float32, one thread, AdamW with torch's defaults.

Train:  gpt_reference.py --init-from W.safetensors (--data FILE | --tokens FILE) --seq T --batch B
                         --steps S [--heads H] [--lr 1e-3] [--beta1 0.9] [--beta2 0.999] [--eps 1e-8]
                         [--weight-decay 0.01] --loss-log OUT.jsonl [--save FINAL.safetensors]
                         [--comm-dtype bfloat16 --pp P]   (mpcomm train's bfloat16 casts between P stages)
                         [--dp D]                         (D replicas' gradients summed as mpcomm sums them)
                         [--top-k K] [--aux-loss-coef A]  (a mixture-of-experts checkpoint: mpcomm train's routing)
Make a random checkpoint:
        gpt_reference.py --make-init OUT.safetensors --layers L --hidden C --heads H --vocab V
                         --positions P --seed S [--experts E [--moe-every N]]

Run with /usr/bin/python3 (the interpreter with torch). Errors: one line on stderr, exit code 2.
"""
import argparse
import json
import math
import re
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RefError(Exception):
    pass


# ---------------------------------------------------------------- safetensors (no package needed)

def read_safetensors(path):
    """Returns ({name: float32 tensor}, metadata dict)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise RefError(f"{path}: cannot read: {e.strerror}")
    if len(blob) < 8:
        raise RefError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise RefError(f"{path}: header length {n} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RefError(f"{path}: header is not valid JSON: {e}")
    if not isinstance(header, dict):
        raise RefError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    data = memoryview(blob)[8 + n:]
    kinds = {"F32": (np.dtype("<f4"), 4), "F16": (np.dtype("<f2"), 2), "BF16": (np.dtype("<u2"), 2)}
    tensors = {}
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise RefError(f"{path}: tensor {name}: header entry lacks dtype, shape or data_offsets")
        dtype = info.get("dtype")
        if dtype not in kinds:
            raise RefError(f"{path}: tensor {name}: unsupported dtype {dtype!r} (want F32, F16 or BF16)")
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        npdt, size = kinds[dtype]
        count = math.prod(shape)
        if not (0 <= begin <= end <= len(data)) or end - begin != count * size:
            raise RefError(f"{path}: tensor {name}: data_offsets [{begin}, {end}] do not fit shape "
                           f"{shape} of {dtype} in a {len(data)}-byte data section")
        arr = np.frombuffer(data[begin:end], dtype=npdt)
        if dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view("<f4")
        tensors[name] = torch.from_numpy(arr.astype(np.float32)).reshape(shape)
    return tensors, meta


def write_safetensors(path, tensors, meta):
    """F32 tensors in sorted name order; header JSON is compact (no spaces), "__metadata__" first, then
    the tensors in the same sorted order, padded with trailing spaces to a multiple of 8 bytes."""
    names = sorted(tensors)
    header = {"__metadata__": dict(sorted(meta.items()))}
    chunks, offset = [], 0
    for name in names:
        raw = tensors[name].detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    try:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    except OSError as e:
        raise RefError(f"{path}: cannot write: {e.strerror}")


# ---------------------------------------------------------------- the model: GPT-2, float32, no dropout

class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored [in, out], y = x @ W + b."""
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.H
        q, k, v = self.c_attn(x).split(C, dim=2)                     # columns: q | k | v
        q, k, v = (t.view(B, T, self.H, hd).transpose(1, 2) for t in (q, k, v))   # [B, H, T, hd]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        future = torch.ones(T, T, dtype=torch.bool).triu(1)            # key position > query position
        scores = scores.masked_fill(future, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v                              # [B, H, T, hd]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C)
        self.c_proj = Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Router(nn.Module):
    def __init__(self, C, E):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(C, E))


class MoE(nn.Module):
    """mpcomm train --experts E --top-k K: a router, top-k experts per token weighted by their (not renormalized)
    probabilities, no capacity limit; and Switch's load-balancing loss per sequence, averaged over the batch."""
    def __init__(self, C, E):
        super().__init__()
        self.router = Router(C, E)
        self.experts = nn.ModuleList(MLP(C) for _ in range(E))
        self.top_k, self.aux_coef = 1, 0.0
        self.bf16 = False                                              # --comm-dtype bfloat16: rows to and from
                                                                       # the experts (and their gradients) rounded
        self.aux = None                                                # the last forward's load-balancing loss

    def forward(self, x):
        B, T, C = x.shape
        E, K = len(self.experts), self.top_k
        flat = x.reshape(B * T, C)
        probs = F.softmax(flat @ self.router.weight, dim=-1)           # [N, E]
        chosen = torch.topk(probs, K, dim=-1).indices                  # [N, K]
        y = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows = (chosen == e).any(dim=-1).nonzero().flatten()
            if len(rows):
                wire = BF16Wire.apply if self.bf16 else (lambda t: t)
                y = y.index_add(0, rows, probs[rows, e:e + 1] * wire(expert(wire(flat[rows]))))
        counts = torch.zeros(B * T, E).scatter_add(1, chosen, torch.ones(B * T, K))
        f = counts.view(B, T, E).sum(1) / (T * K)                      # no gradient through f
        P = probs.view(B, T, E).mean(1)
        self.aux = self.aux_coef * E * (f * P).sum(-1).mean()
        return y.view(B, T, C)


class Block(nn.Module):
    def __init__(self, C, H, E=0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MoE(C, E) if E else MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class BF16Wire(torch.autograd.Function):
    """What crosses a pipeline stage boundary with `--comm-dtype bfloat16`: the activation rounded to bfloat16
    on the way forward, its gradient rounded on the way back."""
    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).float()

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).float()


def stage_ends(L, pp):
    """Where mpcomm train's pipeline stages end: stages differ by at most one layer, earlier ones take the extra."""
    ends, at = [], 0
    for s in range(pp):
        at += L // pp + (1 if s < L % pp else 0)
        ends.append(at)
    return ends


class GPT2(nn.Module):
    """state_dict() names are exactly Hugging Face GPT-2's (without the `transformer.` prefix)."""
    def __init__(self, L, C, H, V, P, E=0, every=1):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(P, C)
        self.h = nn.ModuleList(Block(C, H, E if E and (i + 1) % every == 0 else 0) for i in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.wire_after = set()   # blocks after which a bfloat16 stage boundary lies (emulate_pipeline)
        self.wte_out = None       # the last stage's copy of wte (emulate_pipeline)

    def emulate_pipeline(self, pp):
        """The casts of `mpcomm train --pp PP --comm-dtype bfloat16` (tp 1, dp 1): a bfloat16 boundary after each
        stage but the last, and the tied wte held twice, by the first stage (embedding) and the last (output
        layer), whose gradients each cross the wire rounded to bfloat16 and are added in float32."""
        if pp < 2:
            return
        self.wire_after = {e - 1 for e in stage_ends(len(self.h), pp)[:-1]}
        self.wte_out = nn.Parameter(self.wte.weight.detach().clone())

    def tie_gradients(self):
        if self.wte_out is None:
            return
        g = self.wte.weight.grad.to(torch.bfloat16).float() + self.wte_out.grad.to(torch.bfloat16).float()
        self.wte.weight.grad = g.clone()
        self.wte_out.grad = g

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for i, block in enumerate(self.h):
            x = block(x)
            if i in self.wire_after:
                x = BF16Wire.apply(x)
        head = self.wte.weight if self.wte_out is None else self.wte_out
        return self.ln_f(x) @ head.t()                                 # tied: the same parameter


def moe_layers(model):
    return [b.mlp for b in model.h if isinstance(b.mlp, MoE)]


def expected_shapes(L, C, V, P, E=0, every=1):
    shapes = {"wte.weight": [V, C], "wpe.weight": [P, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            shapes[p + ln + ".weight"] = [C]
            shapes[p + ln + ".bias"] = [C]
        shapes.update({p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                       p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C]})
        mlps = [p + "mlp."]
        if E and (i + 1) % every == 0:
            shapes[p + "mlp.router.weight"] = [C, E]
            mlps = [f"{p}mlp.experts.{e}." for e in range(E)]
        for m in mlps:
            shapes.update({m + "c_fc.weight": [C, 4 * C], m + "c_fc.bias": [4 * C],
                           m + "c_proj.weight": [4 * C, C], m + "c_proj.bias": [C]})
    return shapes


def load_model(path, heads):
    raw, meta = read_safetensors(path)
    tensors = {}
    for name, t in raw.items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        if name == "lm_head.weight" or re.fullmatch(r"h\.\d+\.attn\.(bias|masked_bias)", name):
            continue
        tensors[name] = t
    for name in ("wte.weight", "wpe.weight"):
        if name not in tensors:
            raise RefError(f"{path}: tensor {name} is missing")
        if tensors[name].dim() != 2:
            raise RefError(f"{path}: tensor {name} has shape {list(tensors[name].shape)}, want 2 dims")
    (V, C), P = tensors["wte.weight"].shape, tensors["wpe.weight"].shape[0]
    L = len({int(m.group(1)) for n in tensors for m in [re.match(r"h\.(\d+)\.", n)] if m})
    if heads is None:
        if "n_head" not in meta:
            raise RefError(f"{path}: no --heads given and no n_head in __metadata__")
        try:
            heads = int(meta["n_head"])
        except ValueError:
            raise RefError(f"{path}: __metadata__ n_head {meta['n_head']!r} is not an integer")
    if heads <= 0 or C % heads:
        raise RefError(f"{path}: hidden size {C} is not divisible by {heads} heads")
    routers = sorted(int(m.group(1)) for n in tensors for m in [re.fullmatch(r"h\.(\d+)\.mlp\.router\.weight", n)] if m)
    E = tensors[f"h.{routers[0]}.mlp.router.weight"].shape[1] if routers else 0
    every = routers[0] + 1 if routers else 1
    want = expected_shapes(L, C, V, P, E, every)
    for name, shape in want.items():
        if name not in tensors:
            raise RefError(f"{path}: tensor {name} is missing")
        if list(tensors[name].shape) != shape:
            raise RefError(f"{path}: tensor {name} has shape {list(tensors[name].shape)}, want {shape}")
    extra = sorted(set(tensors) - set(want))
    if extra:
        raise RefError(f"{path}: unexpected tensor {extra[0]}")
    model = GPT2(L, C, heads, V, P, E, every)
    model.load_state_dict(tensors, strict=True)
    return model, heads


def make_init(a):
    """A random GPT-2 checkpoint; generated in a fixed order from torch.Generator(seed)."""
    L, C, H, V, P = a.layers, a.hidden, a.heads, a.vocab, a.positions
    if None in (L, C, H, V, P, a.seed):
        raise RefError("--make-init needs --layers --hidden --heads --vocab --positions --seed")
    if min(L, C, H, V, P) <= 0 or C % H:
        raise RefError(f"--make-init: bad sizes (layers {L}, hidden {C}, heads {H}, vocab {V}, positions {P})")
    g = torch.Generator().manual_seed(a.seed)
    normal = lambda shape, std, mean=0.0: torch.randn(shape, generator=g) * std + mean
    out = {}
    E, every = a.experts or 0, a.moe_every or 1
    for name, shape in expected_shapes(L, C, V, P, E, every).items():     # insertion order is fixed
        if re.search(r"ln_\d\.weight$|ln_f\.weight$", name):
            out[name] = normal(shape, 0.1, 1.0)
        elif name.endswith("c_proj.weight"):
            out[name] = normal(shape, 0.02 / math.sqrt(2 * L))
        else:                                                          # other weights, all biases
            out[name] = normal(shape, 0.02)
    write_safetensors(a.make_init, out, {"n_head": str(H), "format": "pt"})


# ---------------------------------------------------------------- data and training

def load_tokens(a, V, T):
    path = a.data if a.data is not None else a.tokens
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise RefError(f"{path}: cannot read: {e.strerror}")
    if a.data is not None:
        tokens = np.frombuffer(blob, dtype=np.uint8)
    else:
        if len(blob) % 2:
            raise RefError(f"{path}: odd byte count {len(blob)} for uint16 tokens")
        tokens = np.frombuffer(blob, dtype="<u2")
    if len(tokens) < T + 2:
        raise RefError(f"{path}: {len(tokens)} tokens, need at least seq + 2 = {T + 2}")
    if int(tokens.max()) >= V:
        raise RefError(f"{path}: token id {int(tokens.max())} is not below the vocabulary size {V}")
    return torch.from_numpy(tokens.astype(np.int64))


def batch(tokens, k, B, T):
    span = len(tokens) - T - 1
    offsets = [((k * B + j) * T) % span for j in range(B)]             # Python ints: no overflow
    x = torch.stack([tokens[o:o + T] for o in offsets])
    y = torch.stack([tokens[o + 1:o + T + 1] for o in offsets])
    return x, y


def replica_gradients(model, x, y, a):
    """--dp D: each data-parallel replica's gradient from its B/D sequences (mpcomm train's split of the batch),
    then their sum as mpcomm's data-parallel reduction makes it: with --comm-dtype bfloat16, bf16(Σ_r bf16(g_r))
    summed in float32 in replica order. Returns the batch's mean cross-entropy."""
    if a.batch % a.dp:
        raise RefError(f"--batch {a.batch} is not divisible by --dp {a.dp}")
    per, V = a.batch // a.dp, model.wte.weight.shape[0]
    bf16 = a.comm_dtype == "bfloat16"
    wire = (lambda g: g.to(torch.bfloat16).float()) if bf16 else (lambda g: g)
    summed, loss = {}, 0.0
    for r in range(a.dp):
        xs, ys = x[r * per:(r + 1) * per], y[r * per:(r + 1) * per]
        logits = model(xs)
        ce = F.cross_entropy(logits.view(-1, V), ys.view(-1), reduction="sum") / (a.batch * a.seq)
        aux = sum(moe.aux for moe in moe_layers(model)) * (per / a.batch)  # the replica's share of the mean
        (ce + aux).backward()
        loss += ce.item()
        for name, param in model.named_parameters():
            g = wire(param.grad if param.grad is not None else torch.zeros_like(param))
            summed[name] = g.clone() if r == 0 else summed[name] + g
            param.grad = None
    for name, param in model.named_parameters():
        param.grad = wire(summed[name])
    return loss


def train(a):
    model, heads = load_model(a.init_from, a.heads)
    V, P = model.wte.weight.shape[0], model.wpe.weight.shape[0]
    if a.steps < 0:
        raise RefError(f"--steps {a.steps} is negative")
    log = None
    if a.steps > 0:
        if (a.data is None) == (a.tokens is None) or a.seq is None or a.batch is None:
            raise RefError("training needs exactly one of --data/--tokens, and --seq and --batch")
        if not 0 < a.seq <= P:
            raise RefError(f"--seq {a.seq} must be in 1..{P} (the checkpoint's wpe positions)")
        if a.batch <= 0:
            raise RefError(f"--batch {a.batch} must be positive")
        tokens = load_tokens(a, V, a.seq)
    if a.loss_log is not None:
        try:
            log = open(a.loss_log, "w")
        except OSError as e:
            raise RefError(f"{a.loss_log}: cannot write: {e.strerror}")
    if a.comm_dtype == "bfloat16":
        model.emulate_pipeline(a.pp)
    elif a.pp != 1:
        raise RefError("--pp only says where the bfloat16 casts go: give it with --comm-dtype bfloat16")
    for moe in moe_layers(model):
        moe.top_k, moe.aux_coef, moe.bf16 = a.top_k, a.aux_loss_coef, a.comm_dtype == "bfloat16"
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    for k in range(a.steps):
        x, y = batch(tokens, k, a.batch, a.seq)
        opt.zero_grad()
        if a.dp == 1:
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, V), y.view(-1)).item()
            objective = F.cross_entropy(logits.view(-1, V), y.view(-1))
            objective = objective + sum(moe.aux for moe in moe_layers(model))  # the log shows the cross-entropy
            objective.backward()
            for param in model.parameters():                           # an expert no token reached: a zero
                if param.grad is None:                                 # gradient, stepped like mpcomm's (not
                    param.grad = torch.zeros_like(param)               # skipped, as AdamW skips None)
        else:
            loss = replica_gradients(model, x, y, a)
        if log is not None:
            log.write(f'{{"step": {k}, "loss": {loss!r}}}\n')
            log.flush()
        model.tie_gradients()
        opt.step()
    if log is not None:
        log.close()
    if a.save is not None:
        state = {k: v for k, v in model.state_dict().items() if k != "wte_out"}
        write_safetensors(a.save, state, {"n_head": str(heads), "format": "pt"})


def main():
    p = argparse.ArgumentParser(description="PyTorch GPT-2 reference for `mpcomm train`.")
    p.add_argument("--init-from")
    p.add_argument("--data", help="file whose bytes are the token ids (vocab 256)")
    p.add_argument("--tokens", help="file of uint16 little-endian token ids")
    p.add_argument("--seq", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--heads", type=int)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--comm-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="bfloat16: the casts of mpcomm train --comm-dtype bfloat16 at the stage boundaries of --pp")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages whose boundaries carry bfloat16")
    p.add_argument("--dp", type=int, default=1,
                   help="data-parallel replicas: gradients per replica, summed as mpcomm's reduction (bfloat16 too)")
    p.add_argument("--top-k", type=int, default=1, help="mixture of experts: experts per token")
    p.add_argument("--aux-loss-coef", type=float, default=0.01, help="mixture of experts: load-balancing loss α")
    p.add_argument("--loss-log")
    p.add_argument("--save")
    p.add_argument("--make-init", metavar="OUT")
    for name in ("--layers", "--hidden", "--vocab", "--positions", "--seed", "--experts", "--moe-every"):
        p.add_argument(name, type=int)
    a = p.parse_args()                                                 # usage errors exit 2 too
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        if a.make_init is not None:
            make_init(a)
        elif a.init_from is not None:
            train(a)
        else:
            raise RefError("give --init-from (train) or --make-init (make a checkpoint)")
    except RefError as e:
        print(f"gpt_reference.py: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
