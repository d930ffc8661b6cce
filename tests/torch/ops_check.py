"""Every torch.distributed op on the "mpcomm" backend, every dtype, sizes {0, 1, 7, 1000, 2^20+3}: results
exact (integer-valued inputs, so every reduction is exact in any order) against a reference computed from
every rank's inputs, and equal to the gloo backend's in the same job where PyTorch 1.13's gloo has the op.

Run as every rank of a job (torchrun, mpcomm launch, mpirun):
    /usr/bin/python3 tests/torch/ops_check.py [--sizes 0,1,7,1000,1048579] [--quick]
        [--auto TABLE --expect-routed native,gloo]   (MPCOMM_BACKEND=auto routed by TABLE; the flight
                                                      record must show each named backend running ops)
Prints one line per failure and a summary; exits 1 on any failure.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

import mpcomm.torch  # noqa: F401  (registers the backend)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
REDUCE_OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
              "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}

failures = []
checked = {"cases": 0, "gloo_compared": 0, "gloo_lacks": set()}


def values(rank, n, dtype, salt=0):
    """Rank `rank`'s input: small integers ([-3, 3], [0, 3] unsigned, {0, 1} bool), so that sums and
    products over 4 ranks stay exact in every dtype (|x| <= 81 < 256, bfloat16's exact range)."""
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 7 + rank * 5 + salt * 3) % 7 - 3
    if dtype == torch.bool:
        return (v % 2 == 0)
    if dtype == torch.uint8:
        v = v.abs()
    return v.to(dtype)


def reduce_ref(tensors, op, dtype, world):
    """The reduction of the ranks' tensors, computed in float64/int64 and cast back (bitwise: in the dtype)."""
    if op in ("BAND", "BOR", "BXOR"):
        fn = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
        out = tensors[0].clone()
        for t in tensors[1:]:
            out = fn(out, t)
        return out
    if dtype == torch.bool:
        stack = torch.stack([t.to(torch.int64) for t in tensors])
        out = stack.max(0).values if op in ("SUM", "MAX") else stack.min(0).values
        return out.to(torch.bool)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([t.to(wide) for t in tensors])
    if op == "SUM":
        out = stack.sum(0)
    elif op == "PRODUCT":
        out = stack.prod(0)
    elif op == "MIN":
        out = stack.min(0).values
    elif op == "MAX":
        out = stack.max(0).values
    else:  # AVG
        out = stack.sum(0) / world if dtype.is_floating_point else torch.div(stack.sum(0), world, rounding_mode="trunc")
    return out.to(dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))


def check(name, got, want):
    checked["cases"] += 1
    if isinstance(got, (list, tuple)):
        ok = len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    else:
        ok = same(got, want)
    if not ok:
        failures.append(name)
        g = got if not isinstance(got, (list, tuple)) else (got[0] if got else None)
        w = want if not isinstance(want, (list, tuple)) else (want[0] if want else None)
        print(f"rank {dist.get_rank()}: FAIL {name}: got {None if g is None else g.flatten()[:8].tolist()} "
              f"want {None if w is None else w.flatten()[:8].tolist()}", flush=True)


def run_both(name, fn, gloo, skip_gloo_why=None):
    """fn(group) -> result. Runs on mpcomm (default group) and, unless skipped, on the gloo group; returns
    mpcomm's result and compares gloo's with it."""
    mine = fn(None)
    if skip_gloo_why is None:
        try:
            theirs = fn(gloo)
        except RuntimeError as e:
            checked["gloo_lacks"].add(f"{name.split('[')[0]}: {str(e).splitlines()[0][:70]}")
            return mine
        checked["gloo_compared"] += 1
        check(name + " (against gloo)", theirs, mine)
    return mine


def gloo_skip(dtype, count):
    # Facts of PyTorch 1.13's gloo on this image: no bfloat16, SIGFPE on empty tensors.
    if count == 0:
        return "empty tensor"
    if dtype == torch.bfloat16:
        return "no bfloat16"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0,1,7,1000,1048579")
    ap.add_argument("--big-dtypes", default="all", help="dtypes run at sizes above 1000 (all, or a list)")
    ap.add_argument("--tag", help="ignored (marks the job's processes for the test runner)")
    ap.add_argument("--auto", metavar="TABLE", help="run on mpcomm's auto backend, routed by this table")
    ap.add_argument("--expect-routed", default="", help="backends the auto backend must have run ops on")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.auto:
        os.environ["MPCOMM_BACKEND"] = "auto"
        os.environ["MPCOMM_TUNING"] = args.auto
        os.environ["MPCOMM_TRACE_ENTRIES"] = "100000"  # the whole run, to see every backend it used

    dist.init_process_group("mpcomm")
    gloo = dist.new_group(backend="gloo")
    r, n = dist.get_rank(), dist.get_world_size()
    big_ok = (lambda dt: True) if args.big_dtypes == "all" else (lambda dt: str(dt).split(".")[1] in args.big_dtypes.split(","))

    for dtype in DTYPES:
        for count in sizes:
            if count > 1000 and not big_ok(dtype):
                continue
            tag = f"[{str(dtype).split('.')[1]}, {count}]"
            gs = gloo_skip(dtype, count)
            everyone = [values(q, count, dtype) for q in range(n)]

            # broadcast from the last rank
            def bcast(g):
                t = values(r, count, dtype)
                dist.broadcast(t, src=n - 1, group=g)
                return t
            check("broadcast" + tag, run_both("broadcast" + tag, bcast, gloo, gs), everyone[n - 1])

            # all_reduce, every reduce op
            for opname, op in REDUCE_OPS.items():
                if dtype == torch.bool and opname == "AVG":
                    continue
                def ar(g, op=op):
                    t = values(r, count, dtype)
                    dist.all_reduce(t, op=op, group=g)
                    return t
                skip = gs or ("gloo has no AVG" if opname == "AVG" else None)
                got = run_both(f"all_reduce {opname}{tag}", ar, gloo, skip)
                want = reduce_ref(everyone, opname, dtype, n)
                if opname == "AVG" and dtype in (torch.float16, torch.bfloat16):
                    ok = torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-2)
                    checked["cases"] += 1
                    if not ok:
                        failures.append(f"all_reduce AVG{tag}")
                        print(f"rank {r}: FAIL all_reduce AVG{tag}", flush=True)
                else:
                    check(f"all_reduce {opname}{tag}", got, want)

            # all_reduce, the bitwise ops of the integer types and bool (refused for floating types: faults_check)
            if not dtype.is_floating_point:
                for opname in ("BAND", "BOR", "BXOR"):
                    def arb(g, op=getattr(dist.ReduceOp, opname)):
                        t = values(r, count, dtype, salt=2)
                        dist.all_reduce(t, op=op, group=g)
                        return t
                    got = run_both(f"all_reduce {opname}{tag}", arb, gloo, gs)
                    check(f"all_reduce {opname}{tag}", got,
                          reduce_ref([values(q, count, dtype, salt=2) for q in range(n)], opname, dtype, n))

            # all_reduce_coalesced: two tensors of one dtype
            def arc(g):
                ts = [values(r, count, dtype), values(r, count + 3, dtype, salt=1)]
                dist.all_reduce_coalesced(ts, group=g)
                return ts
            want = [reduce_ref(everyone, "SUM", dtype, n),
                    reduce_ref([values(q, count + 3, dtype, salt=1) for q in range(n)], "SUM", dtype, n)]
            check("all_reduce_coalesced" + tag, run_both("all_reduce_coalesced" + tag, arc, gloo, gs), want)

            # reduce to rank 0 (MAX) and to the last rank (SUM); compared at the root (gloo leaves partial
            # results in other ranks' tensors; mpcomm leaves them as they were)
            for opname, dst in (("MAX", 0), ("SUM", n - 1)):
                kept = {}
                def red(g, opname=opname, dst=dst):
                    t = values(r, count, dtype)
                    dist.reduce(t, dst=dst, op=REDUCE_OPS[opname], group=g)
                    if g is None:
                        kept["t"] = t
                    return t if r == dst else torch.empty(0)
                run_both(f"reduce {opname}{tag}", red, gloo, gs)
                check(f"reduce {opname}{tag}", kept["t"],
                      reduce_ref(everyone, opname, dtype, n) if r == dst else values(r, count, dtype))

            # all_gather into a list; uneven (rank q gives count + q elements); the flat base; coalesced
            def ag(g):
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
                dist.all_gather(outs, values(r, count, dtype), group=g)
                return outs
            check("all_gather" + tag, run_both("all_gather" + tag, ag, gloo, gs), everyone)

            def agv(g):
                outs = [torch.empty(count + q, dtype=dtype) for q in range(n)]
                dist.all_gather(outs, values(r, count + r, dtype), group=g)
                return outs
            check("all_gather uneven" + tag, run_both("all_gather uneven" + tag, agv, gloo, "gloo needs equal sizes"),
                  [values(q, count + q, dtype) for q in range(n)])

            def agb(g):
                out = torch.empty(count * n, dtype=dtype)
                dist._all_gather_base(out, values(r, count, dtype), group=g)
                return out
            check("_all_gather_base" + tag, run_both("_all_gather_base" + tag, agb, gloo, gs), torch.cat(everyone))

            def agc(g):
                ins = [values(r, count, dtype), values(r, 5, dtype, salt=2)]
                outs = [[torch.empty(count, dtype=dtype), torch.empty(5, dtype=dtype)] for _ in range(n)]
                dist.all_gather_coalesced(outs, ins, group=g)
                return [t for lst in outs for t in lst]
            want = [t for q in range(n) for t in (values(q, count, dtype), values(q, 5, dtype, salt=2))]
            check("all_gather_coalesced" + tag, run_both("all_gather_coalesced" + tag, agc, gloo, gs), want)

            # gather to the last rank, scatter from rank 0
            def ga(g):
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)] if r == n - 1 else None
                dist.gather(values(r, count, dtype), gather_list=outs, dst=n - 1, group=g)
                return outs if outs is not None else []
            check("gather" + tag, run_both("gather" + tag, ga, gloo, gs), everyone if r == n - 1 else [])

            def sc(g):
                out = torch.empty(count, dtype=dtype)
                ins = [values(q, count, dtype, salt=4) for q in range(n)] if r == 0 else None
                dist.scatter(out, scatter_list=ins, src=0, group=g)
                return out
            check("scatter" + tag, run_both("scatter" + tag, sc, gloo, gs), values(r, count, dtype, salt=4))

            # reduce_scatter (list) and its flat base: rank q gets the sum of every rank's block q
            blocks = [[values(q, count, dtype, salt=10 + b) for b in range(n)] for q in range(n)]
            want = reduce_ref([blocks[q][r] for q in range(n)], "SUM", dtype, n)
            def rs(g):
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, [t.clone() for t in blocks[r]], group=g)
                return out
            check("reduce_scatter" + tag, run_both("reduce_scatter" + tag, rs, gloo, gs), want)

            def rsb(g):
                out = torch.empty(count, dtype=dtype)
                dist._reduce_scatter_base(out, torch.cat(blocks[r]), group=g)
                return out
            check("_reduce_scatter_base" + tag, run_both("_reduce_scatter_base" + tag, rsb, gloo, gs), want)

            # all_to_all_single, even and with split sizes (rank q sends q + p + count rows to rank p)
            def a2a(g):
                out = torch.empty(count * n, dtype=dtype)
                dist.all_to_all_single(out, torch.cat(blocks[r]), group=g)
                return out
            check("all_to_all_single" + tag, run_both("all_to_all_single" + tag, a2a, gloo, gs),
                  torch.cat([blocks[q][r] for q in range(n)]))

            def rows(q, p):
                return count % 5 + q + 2 * p  # uneven, and zero for count 0 ... between ranks 0 and 0
            def a2av(g):
                ins = [values(r, rows(r, p), dtype, salt=20 + p) for p in range(n)]
                out = torch.empty(sum(rows(q, r) for q in range(n)), dtype=dtype)
                dist.all_to_all_single(out, torch.cat(ins), output_split_sizes=[rows(q, r) for q in range(n)],
                                       input_split_sizes=[rows(r, p) for p in range(n)], group=g)
                return out
            check("all_to_all_single splits" + tag, run_both("all_to_all_single splits" + tag, a2av, gloo, gs),
                  torch.cat([values(q, rows(q, r), dtype, salt=20 + r) for q in range(n)]))

            def a2al(g):
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
                dist.all_to_all(outs, [t.clone() for t in blocks[r]], group=g)
                return outs
            check("all_to_all" + tag, run_both("all_to_all" + tag, a2al, gloo, "gloo has no all_to_all (list)"),
                  [blocks[q][r] for q in range(n)])

            # a ring of isend/irecv with a tag
            if n > 1:
                def ring(g):
                    out = torch.empty(count, dtype=dtype)
                    ws = [dist.irecv(out, src=(r - 1) % n, tag=7, group=g),
                          dist.isend(values(r, count, dtype, salt=30), dst=(r + 1) % n, tag=7, group=g)]
                    for w in ws:
                        w.wait()
                    return out
                check("isend/irecv ring" + tag, run_both("isend/irecv ring" + tag, ring, gloo, gs),
                      values((r - 1) % n, count, dtype, salt=30))

                # rank 0 receives from any source, one message from every other rank as they come
                def fan_in(g):
                    if r != 0:
                        dist.send(values(r, count, dtype, salt=40), dst=0, tag=9, group=g)
                        return []
                    got = {}
                    for _ in range(n - 1):
                        t = torch.empty(count, dtype=dtype)
                        got[dist.recv(t, tag=9, group=g)] = t
                    return [got.get(q, torch.empty(0)) for q in range(1, n)]
                check("recv from any source" + tag, run_both("recv from any source" + tag, fan_in, gloo, gs),
                      [values(q, count, dtype, salt=40) for q in range(1, n)] if r == 0 else [])

    # a sparse (COO) all_reduce: every rank's entries summed (overlapping ones add up), as gloo's
    def sparse_of(q):
        idx = torch.tensor([[q % 4, 0, 3], [1, q % 3, 2]], dtype=torch.int64)
        return torch.sparse_coo_tensor(idx, torch.tensor([[1.0 + q, 2.0], [3.0, -q], [0.5, 0.25]]), (4, 3, 2))
    sp = sparse_of(r)
    dist.all_reduce(sp)
    check("sparse all_reduce", sp.to_dense(), sum(sparse_of(q).to_dense() for q in range(n)))
    if n > 1:
        theirs = sparse_of(r)
        dist.all_reduce(theirs, group=gloo)
        check("sparse all_reduce (against gloo)", sp.to_dense(), theirs.to_dense())

    # int16 and complex tensors are moved bit for bit; complex ones are summed
    for dtype in (torch.int16, torch.complex64, torch.complex128):
        x = (torch.arange(6, dtype=torch.int64) * 1009 + 7).to(dtype) if r == 0 else torch.zeros(6, dtype=dtype)
        dist.broadcast(x, src=0)
        check(f"broadcast [{dtype}]", x, (torch.arange(6, dtype=torch.int64) * 1009 + 7).to(dtype))
    z = torch.tensor([complex(r, 1)], dtype=torch.complex64)
    dist.all_reduce(z)
    check("all_reduce [complex64]", z, torch.tensor([complex(n * (n - 1) / 2, n)], dtype=torch.complex64))

    # a non-contiguous tensor: allreduce of a transposed view, written back in place
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    dist.all_reduce(t)
    check("all_reduce non-contiguous", t, (torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * n))
    dist.barrier()

    # the bitwise reductions of a floating-point tensor are refused with a clear error
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.float32), op=dist.ReduceOp.BAND)
        failures.append("BAND of float32 was not refused")
    except (RuntimeError, ValueError) as e:
        if "BAND" not in str(e):
            failures.append(f"BAND refusal does not name it: {e}")

    dist.barrier()  # (not gloo's: PyTorch's gloo barrier can raise a failure of an earlier gloo op again)
    if args.auto:
        if mpcomm.torch.backend_of(dist.group.WORLD) != "auto":
            failures.append(f"the group runs on {mpcomm.torch.backend_of(dist.group.WORLD)}, not auto")
        record = mpcomm.torch.flight_record(dist.group.WORLD)
        for b in filter(None, args.expect_routed.split(",")):
            if f" {b}/" not in record:
                failures.append(f"no op ran on {b} (flight record: no '{b}/' in the algorithm column)")
    lacks = sorted(checked["gloo_lacks"])
    print(f"rank {r} of {n}: {checked['cases']} checks, {checked['gloo_compared']} compared with gloo, "
          f"{len(failures)} failed" + (f"; gloo lacks: {lacks}" if r == 0 else ""), flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
