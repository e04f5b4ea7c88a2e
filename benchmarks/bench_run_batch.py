"""``exe.run_batch`` against one-by-one calls on W5 (TreeLSTM H=128, 64 trees, fwd + bwd).

The optimized gradient program of W5 is built once (``runtime.build``); the 64 trees are run
one by one (``exe(*args)``: the Relax VM, one tree to completion) and with ``run_batch`` over
consecutive chunks of 1, 8 and 64 trees, interleaved in rounds; figures are per tree, the
median over ``--rounds``. Also printed: the agenda's counters for each chunk size (kernel
calls the instances made, calls made, batched calls, groups). Results of run_batch are
checked against the one-by-one results (loss and every gradient).

Run: ``.venv/bin/python benchmarks/bench_run_batch.py [--rounds 3] [--trees 64]
[--defer heavy|all|none] [--agenda most|depth] [--sizes symbolic|static] [--hidden 128]
[--forward] [--kernels]`` (``--hidden`` changes W5's H = D; ``--forward`` runs the loss
alone, without the gradient; ``--kernels`` also times each batched kernel alone, static and
symbolic batch sizes against single calls). Times are wall time and this process's CPU time
(every thread): on a machine shared with other jobs the CPU time is the steadier figure.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trees", type=int, default=64)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--defer", default="heavy", choices=["heavy", "all", "none"],
                    help="which kernels park on the agenda (runtime.batching.DEFER)")
    ap.add_argument("--agenda", default="most", choices=["most", "depth"],
                    help="the agenda's choice (runtime.batching.AGENDA)")
    ap.add_argument("--sizes", default="symbolic", choices=["static", "symbolic"],
                    help="batched kernels' batch size (runtime.batching.BATCH_SIZES)")
    ap.add_argument("--hidden", type=int, default=128, help="H = D (W5: 128)")
    ap.add_argument("--forward", action="store_true",
                    help="the forward program only (no gradient)")
    ap.add_argument("--kernels", action="store_true",
                    help="also time each batched kernel alone: static (padded) and symbolic "
                         "batch sizes against single calls, per instance (CPU time)")
    a = ap.parse_args(argv)
    from relay_ir.runtime import batching
    batching.DEFER, batching.AGENDA = a.defer, a.agenda
    batching.BATCH_SIZES = a.sizes
    import relay_ir as rly
    from relay_ir import passes, runtime
    import workloads as W
    W.H5 = a.hidden            # NOTE: w5_source and w5_params read it when called
    mod = rly.parse(W.w5_source())
    g = mod if a.forward else passes.optimize(passes.gradient(mod, entry="main"))
    exe = runtime.build(g, target="llvm")
    trees, params = W.w5_trees()[:a.trees], W.w5_params()
    eye5 = np.eye(5, dtype=np.float32)
    args = [(W._to_adt(mod, t), eye5[y], *params) for t, y in trees]
    sizes = [int(b) for b in a.batches.split(",")]

    def one_by_one() -> list:
        return [exe(*x) for x in args]

    def batched(b: int) -> list:
        out: list = []
        for i in range(0, len(args), b):
            out.extend(exe.run_batch(args[i:i + b]))
        return out
    want = one_by_one()
    stats = {}
    for b in sizes:                       # warm-up: compiles the batched kernels once
        got = batched(b)
        stats[b] = exe.batch_stats()
        for w, r in zip(want, got):
            if a.forward:
                w, r = (w, ()), (r, ())
            assert abs(float(w[0]) - float(r[0])) <= 1e-4 * max(1.0, abs(float(w[0])))
            for x, y in zip(w[1][1:], r[1][1:]):
                np.testing.assert_allclose(y, x, rtol=2e-3, atol=1e-5)
    # NOTE: wall time and this process's CPU time (every thread); on a machine shared with
    # other jobs the CPU time is the steadier figure
    times: dict[str, list[float]] = {"one-by-one": []}
    cpu: dict[str, list[float]] = {"one-by-one": []}
    for b in sizes:
        times[f"run_batch {b}"] = []
        cpu[f"run_batch {b}"] = []
    for _ in range(a.rounds):
        t, c = time.perf_counter(), time.process_time()
        one_by_one()
        times["one-by-one"].append(time.perf_counter() - t)
        cpu["one-by-one"].append(time.process_time() - c)
        for b in sizes:
            t, c = time.perf_counter(), time.process_time()
            batched(b)
            times[f"run_batch {b}"].append(time.perf_counter() - t)
            cpu[f"run_batch {b}"].append(time.process_time() - c)
    base = statistics.median(times["one-by-one"])
    cbase = statistics.median(cpu["one-by-one"])
    n = len(args)
    what = "fwd" if a.forward else "fwd+bwd"
    print(f"W5 {what} H={a.hidden}, {n} trees, median of {a.rounds} rounds (ms per tree); "
          f"defer={a.defer} agenda={a.agenda} sizes={a.sizes}")
    for name, ts in times.items():
        med = statistics.median(ts)
        cmed = statistics.median(cpu[name])
        print(f"  {name:14s} {1e3 * med / n:8.2f} ms/tree   speedup vs one-by-one "
              f"{base / med:5.2f}x   (CPU time {1e3 * cmed / n:8.2f} ms/tree, "
              f"{cbase / cmed:5.2f}x)")
    for b in sizes:
        print(f"  counters, chunks of {b} (last chunk): {stats[b]}")
    if a.kernels:
        kernel_table(exe)
    return 0


def kernel_table(exe) -> None:
    """Per instance CPU microseconds of each batched kernel run_batch made (random inputs of
    the kernel's shapes; shared inputs passed once), static and symbolic batch sizes, against
    the plain kernel called once per instance."""
    r = exe._batch_runner
    clock = time.process_time
    rng = np.random.default_rng(0)
    print("  batched kernels, us per instance (CPU): static / symbolic / single calls")
    for (sig, shared), bk in r.batched.items():
        if bk is None:
            continue
        kr = next(k for k in r.kernels.values() if k.signature == sig)
        one = [rng.standard_normal(t.shape).astype(t.dtype) for t in kr.param_types]
        row = []
        for n in (2, 8, 64):
            leaves = [[x if s else x.copy() for x, s in zip(one, shared)] for _ in range(n)]
            reps = max(3, 256 // n)
            res = []
            for mode in ("static", "symbolic"):
                bk.mode = mode
                bk.prepare(n)
                if mode == "symbolic" and bk.func is None:
                    bk.func = bk._variant(True)
                bk.call(r, leaves)
                t = clock()
                for _ in range(reps):
                    bk.call(r, leaves)
                res.append((clock() - t) / reps / n * 1e6)
            t = clock()
            for _ in range(reps):
                for lv in leaves:
                    kr.call(lv)
            res.append((clock() - t) / reps / n * 1e6)
            row.append(f"n={n}: " + " / ".join(f"{x:.1f}" for x in res))
        bk.mode = "symbolic"
        shapes = "x".join(str(tuple(t.shape)) for t in kr.param_types)
        print(f"    {kr.kern.label} {shapes} shared={tuple(int(s) for s in shared)}: "
              + ";  ".join(row))


if __name__ == "__main__":
    sys.exit(main())
