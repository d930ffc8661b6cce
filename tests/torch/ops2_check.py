"""The ops PyTorch 2.x code calls beyond 1.13's, on the "mpcomm" backend: all_gather_into_tensor and
reduce_scatter_tensor (FSDP2's), their coalesced forms and all_reduce's through the coalescing manager,
batch_isend_irecv, barrier(device_ids=...), monitored_barrier, functional collectives, c10d's sequence numbers,
what the profiler records for each op, and a refused dtype leaving the group usable. Results exact (integer-valued
inputs) against a reference from every rank's inputs, and against PyTorch's own gloo in the same job.

Run as every rank of a job under PyTorch 2.x (torchrun, mpcomm launch, mpirun):
    python tests/torch/ops2_check.py
Prints one line per failure and a summary; exits 1 on any failure.
"""

import argparse
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import mpcomm.torch  # noqa: F401  (registers the backend)

failures = []
cases = [0]


def check(name, got, want):
    cases[0] += 1
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    if len(got) != len(want) or not all(g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
                                        for g, w in zip(got, want)):
        failures.append(name)
        print(f"rank {dist.get_rank()}: FAIL {name}: got {[g.flatten()[:6].tolist() for g in got][:2]} "
              f"want {[w.flatten()[:6].tolist() for w in want][:2]}", flush=True)


def expect(name, cond):
    cases[0] += 1
    if not cond:
        failures.append(name)
        print(f"rank {dist.get_rank()}: FAIL {name}", flush=True)


def values(rank, n, dtype, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 5 + salt * 3) % 7 - 3).to(dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", help="ignored (marks the job's processes for the test runner)")
    ap.parse_args()
    dist.init_process_group("mpcomm")
    gloo = dist.new_group(backend="gloo")
    r, n = dist.get_rank(), dist.get_world_size()

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for count in (1, 7, 1000):
            tag = f"[{str(dtype).split('.')[1]}, {count}]"
            for g, who in ((None, ""), (gloo, " (gloo)")):
                out = torch.empty(count * n, dtype=dtype)
                dist.all_gather_into_tensor(out, values(r, count, dtype), group=g)
                check("all_gather_into_tensor" + tag + who, out, torch.cat([values(q, count, dtype) for q in range(n)]))
                for opname, op in (("SUM", dist.ReduceOp.SUM), ("MAX", dist.ReduceOp.MAX)):
                    rs = torch.empty(count, dtype=dtype)
                    dist.reduce_scatter_tensor(rs, values(r, count * n, dtype, salt=1), op=op, group=g)
                    stack = torch.stack([values(q, count * n, dtype, salt=1) for q in range(n)])
                    ref = stack.sum(0) if opname == "SUM" else stack.max(0).values
                    check(f"reduce_scatter_tensor {opname}" + tag + who, rs, ref[r * count:(r + 1) * count].to(dtype))

    # The coalescing manager: many tensors, one collective (sizes differ per tensor).
    sizes = [3, 1, 17]
    with dist._coalescing_manager(async_ops=True) as cm:
        ts = [values(r, k, torch.float32, salt=i) for i, k in enumerate(sizes)]
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    check("coalesced all_reduce", ts, [sum(values(q, k, torch.float32, salt=i) for q in range(n))
                                       for i, k in enumerate(sizes)])
    outs = [torch.empty(k * n) for k in sizes]
    with dist._coalescing_manager():
        for i, (k, o) in enumerate(zip(sizes, outs)):
            dist.all_gather_into_tensor(o, values(r, k, torch.float32, salt=i))
    check("coalesced all_gather_into_tensor", outs,
          [torch.cat([values(q, k, torch.float32, salt=i) for q in range(n)]) for i, k in enumerate(sizes)])
    outs = [torch.empty(k) for k in sizes]
    with dist._coalescing_manager():
        for i, (k, o) in enumerate(zip(sizes, outs)):
            dist.reduce_scatter_tensor(o, values(r, k * n, torch.float32, salt=i))
    check("coalesced reduce_scatter_tensor", outs,
          [sum(values(q, k * n, torch.float32, salt=i) for q in range(n))[r * k:(r + 1) * k] for i, k in enumerate(sizes)])

    # batch_isend_irecv: a ring both ways at once (a rank alone has no peer: mpcomm sends to no rank itself).
    if n > 1:
        got = [torch.empty(5), torch.empty(5)]
        ops = [dist.P2POp(dist.isend, values(r, 5, torch.float32, salt=2), (r + 1) % n),
               dist.P2POp(dist.isend, values(r, 5, torch.float32, salt=3), (r - 1) % n),
               dist.P2POp(dist.irecv, got[0], (r - 1) % n), dist.P2POp(dist.irecv, got[1], (r + 1) % n)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check("batch_isend_irecv", got, [values((r - 1) % n, 5, torch.float32, salt=2),
                                         values((r + 1) % n, 5, torch.float32, salt=3)])

    # Receive from any source: rank 0 takes one message from every other rank as they come (dist.recv without
    # src returns the sender), on the world and on a subgroup of the odd ranks (which returns global ranks).
    for name, members in (("world", list(range(n))), ("odd ranks", [q for q in range(n) if q % 2 == 1])):
        g = dist.new_group(members) if name != "world" and len(members) > 1 else None
        if len(members) < 2 or r not in members:
            continue
        head = members[0]
        if r == head:
            got = {}
            for _ in members[1:]:
                t = torch.empty(1000)
                src = dist.recv(t, tag=9, group=g)
                got[src] = t
            expect(f"recv from any source ({name}): senders {sorted(got)}", sorted(got) == members[1:])
            check(f"recv from any source ({name})", [got.get(q, torch.empty(0)) for q in members[1:]],
                  [values(q, 1000, torch.float32, salt=7) for q in members[1:]])
        else:
            dist.send(values(r, 1000, torch.float32, salt=7), dst=head, tag=9, group=g)

    # Functional collectives (torch.compile's and DTensor's path) on CPU tensors.
    x = values(r, 6, torch.float32, salt=4)
    y = funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))
    check("funcol.all_reduce", y, sum(values(q, 6, torch.float32, salt=4) for q in range(n)))
    gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor  # renamed in later 2.x
    y = funcol.wait_tensor(gather(x, 0, dist.group.WORLD))
    check("funcol.all_gather_tensor", y, torch.cat([values(q, 6, torch.float32, salt=4) for q in range(n)]))

    # c10d's sequence number: alike on every rank, one more per collective.
    before = dist.group.WORLD._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(1))
    dist.barrier(device_ids=[0])
    after = dist.group.WORLD._get_sequence_number_for_group()
    expect(f"sequence number +2 over two collectives ({before} -> {after})", after == before + 2)
    seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(seqs, torch.tensor([after], dtype=torch.int64), group=gloo)
    expect(f"sequence numbers alike on every rank ({[int(s) for s in seqs]})", all(int(s) == after for s in seqs))

    # The profiler records each op under c10d's name with its input shapes.
    with torch.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(torch.ones(4, 3))
        dist.broadcast(torch.ones(2), src=0)
        dist.all_gather_into_tensor(torch.empty(4 * n), torch.ones(4))
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * n))
        if n > 1:
            if r == 0:
                dist.send(torch.ones(3), dst=1)
            elif r == 1:
                dist.recv(torch.empty(3), src=0)
        dist.barrier()
    events = {e.name: e for e in prof.events() if e.name.startswith("mpcomm:")}
    want = ["mpcomm:all_reduce", "mpcomm:broadcast", "mpcomm:all_gather_into_tensor", "mpcomm:reduce_scatter_tensor",
            "mpcomm:barrier"] + (["mpcomm:send"] if r == 0 and n > 1 else ["mpcomm:recv"] if r == 1 else [])
    for name in want:
        expect(f"profiler saw {name} (it saw {sorted(events)})", name in events)
    if "mpcomm:all_reduce" in events:
        expect(f"all_reduce's recorded shapes {events['mpcomm:all_reduce'].input_shapes}",
               events["mpcomm:all_reduce"].input_shapes == [[4, 3]])

    # The dtypes 2.x adds. Moved (broadcast, all_gather_into_tensor, all_to_all, send/recv) exactly, bit for bit;
    # reduced where the dtype allows (uint32/uint64: SUM and the bitwise ops; complex: SUM and AVG); the other
    # reductions refused by name, the group still usable.
    def size_of(dtype):
        return torch.empty(0, dtype=dtype).element_size()

    def bits(dtype, rank, count, salt=0):
        raw = (torch.arange(count * size_of(dtype), dtype=torch.int64) * 37 + rank * 11 + salt) % 251
        return raw.to(torch.uint8).view(dtype)

    def zeros_of(dtype, count):
        return torch.zeros(count * size_of(dtype), dtype=torch.uint8).view(dtype)
    moved = [torch.uint16, torch.uint32, torch.uint64, torch.int16, torch.complex64, torch.complex128,
             torch.float8_e4m3fn, torch.float8_e5m2]
    for dtype in moved:
        name = str(dtype).split(".")[1]
        x = bits(dtype, 0, 5) if r == 0 else zeros_of(dtype, 5)
        dist.broadcast(x, src=0)
        check(f"broadcast [{name}] (bits)", x.view(torch.uint8), bits(dtype, 0, 5).view(torch.uint8))
        out = zeros_of(dtype, 7 * n)
        dist.all_gather_into_tensor(out, bits(dtype, r, 7))
        check(f"all_gather_into_tensor [{name}] (bits)", out.view(torch.uint8),
              torch.cat([bits(dtype, q, 7).view(torch.uint8) for q in range(n)]))
        a2a = zeros_of(dtype, 3 * n)
        dist.all_to_all_single(a2a, bits(dtype, r, 3 * n, salt=1))
        check(f"all_to_all_single [{name}] (bits)", a2a.view(torch.uint8),
              torch.cat([bits(dtype, q, 3 * n, salt=1)[3 * r:3 * r + 3].view(torch.uint8) for q in range(n)]))
        if n > 1:
            if r == 0:
                dist.send(bits(dtype, 0, 9, salt=2), dst=1)
            elif r == 1:
                y = zeros_of(dtype, 9)
                dist.recv(y, src=0)
                check(f"send/recv [{name}] (bits)", y.view(torch.uint8), bits(dtype, 0, 9, salt=2).view(torch.uint8))
    for dtype, width in ((torch.uint32, 32), (torch.uint64, 64)):
        name = str(dtype).split(".")[1]
        big = (1 << (width - 1)) + 5  # beyond the signed range
        x = torch.tensor([big, r + 1, 3], dtype=torch.uint64).to(dtype)
        dist.all_reduce(x)
        want = torch.tensor([(big * n) % (1 << width), n * (n + 1) // 2, 3 * n], dtype=torch.uint64).to(dtype)
        check(f"all_reduce SUM [{name}] past the signed range", x, want)
        x = torch.tensor([1 << (r % 8), 255, 0], dtype=torch.uint64).to(dtype)
        dist.all_reduce(x, op=dist.ReduceOp.BOR)
        bor = 0
        for q in range(n):
            bor |= 1 << (q % 8)
        check(f"all_reduce BOR [{name}]", x, torch.tensor([bor, 255, 0], dtype=torch.uint64).to(dtype))
    for dtype in (torch.complex64, torch.complex128):
        name = str(dtype).split(".")[1]
        z = torch.tensor([complex(r + 1, -r), complex(0.5, 2)], dtype=dtype)
        dist.all_reduce(z)
        check(f"all_reduce SUM [{name}]", z, torch.tensor([complex(n * (n + 1) / 2, -n * (n - 1) / 2),
                                                             complex(0.5 * n, 2 * n)], dtype=dtype))
        z = torch.tensor([complex(2 * (r + 1), 4)], dtype=dtype)
        dist.all_reduce(z, op=dist.ReduceOp.AVG)
        check(f"all_reduce AVG [{name}]", z, torch.tensor([complex(n + 1, 4)], dtype=dtype))
    refusals = [("uint16", torch.uint16, dist.ReduceOp.SUM, ["SUM", "UInt16", "only moved"]),
                ("float8_e4m3fn", torch.float8_e4m3fn, dist.ReduceOp.SUM, ["SUM", "Float8_e4m3fn", "never reduced"]),
                ("int16", torch.int16, dist.ReduceOp.MAX, ["MAX", "Short", "only moved"]),
                ("complex64 MAX", torch.complex64, dist.ReduceOp.MAX, ["MAX", "omplex"]),
                ("uint32 MIN", torch.uint32, dist.ReduceOp.MIN, ["MIN", "UInt32", "SUM, PRODUCT"])]
    for what, dtype, op, words in refusals:
        try:
            dist.all_reduce(zeros_of(dtype, 3), op=op)
            expect(f"all_reduce of {what} refused", False)
        except (RuntimeError, ValueError) as e:
            expect(f"the refusal of {what} names {words}: {e}", all(w in str(e) for w in words))
    t = torch.ones(2)
    dist.all_reduce(t)
    check("all_reduce after the refused calls", t, torch.full((2,), float(n)))

    # Sparse (COO) all_reduce, as DDP's nn.Embedding(sparse=True) gradients make it: every rank's entries summed
    # (overlapping indices add up), equal to PyTorch's gloo; AVG divides.
    shape = (max(n, 6), 3, 2)

    def sparse_of(rank):
        idx = torch.tensor([[rank, 0, 5], [1, rank % 3, 2]], dtype=torch.int64)
        val = torch.tensor([[1.0 + rank, 2.0], [3.0, -rank], [0.5, 0.25]])
        return torch.sparse_coo_tensor(idx, val, shape, check_invariants=True)
    want = sum(sparse_of(q).to_dense() for q in range(n))
    for g, who in ((None, ""), (gloo, " (gloo)")):
        sp = sparse_of(r)
        dist.all_reduce(sp, group=g)
        check("sparse all_reduce" + who, sp.to_dense(), want)
        expect("sparse all_reduce stays sparse and coalesced" + who, sp.is_sparse)
    sp = sparse_of(r)
    dist.all_reduce(sp, op=dist.ReduceOp.AVG)
    check("sparse all_reduce AVG", sp.to_dense(), want / n)
    e = sparse_of(r) if r == 0 else torch.sparse_coo_tensor(torch.zeros((2, 0), dtype=torch.int64),
                                                            torch.zeros((0, 2)), shape, check_invariants=True)
    dist.all_reduce(e)
    check("sparse all_reduce with empty ranks", e.to_dense(), sparse_of(0).to_dense())

    dist.monitored_barrier(wait_all_ranks=True)
    dist.barrier()
    print(f"rank {r} of {n}: {cases[0]} checks, {len(failures)} failed", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
