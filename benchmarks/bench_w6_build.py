"""W6's gradient unrolled: what partial evaluation's loop unrolling costs and gives.

For each trip count (``--steps``) and fusion depth (``--fuse-depth``): the time of
``passes.optimize(passes.gradient(...))``, whether the loops unrolled, the number of fused
kernels, the time of ``runtime.build`` (with an empty kernel cache in a temporary directory
unless ``--warm``; the pipeline caches off), and the median time per call over ``--rounds``
rounds of ``--calls`` calls, with the check value. ``--budget 0`` keeps the loops (partial
evaluation's ``partial-eval.unroll_budget``), for the loop's side of the comparison.

Run: ``.venv/bin/python benchmarks/bench_w6_build.py [--steps 1000] [--fuse-depth 256,1024]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["RELAY_IR_BUILD_CACHE"] = "0"
os.environ["RELAY_IR_OPT_CACHE"] = "0"

import numpy as np  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import passes, runtime  # noqa: E402
from relay_ir.passes import PassContext  # noqa: E402

import workloads as wl  # noqa: E402


def one(steps: int, depth: int, budget: int | None, rounds: int, calls: int) -> str:
    config = {"fuse-ops.max_depth": depth}
    if budget is not None:
        config["partial-eval.unroll_budget"] = budget
    x = np.array(np.float32(0.5))
    with PassContext(config=config):
        t0 = time.perf_counter()
        g = passes.optimize(passes.gradient(rly.parse(wl.w6_source(f"{steps}f")), entry="main"))
        t1 = time.perf_counter()
        exe = runtime.build(g)
        t2 = time.perf_counter()
    value = float(exe(x)[1][0])
    per_call = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            exe(x)
        per_call.append((time.perf_counter() - t) / calls)
    loops = "loops" if len(g.functions) > 1 else "unrolled"
    return (f"| {steps} | {depth} | {loops} | {t1 - t0:.2f} | {exe.num_kernels()} | "
            f"{t2 - t1:.2f} | {statistics.median(per_call) * 1e6:.1f} | {value:.6f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", default="1000")
    ap.add_argument("--fuse-depth", default="256")
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warm", action="store_true", help="keep the user's kernel cache")
    a = ap.parse_args()
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"load average {os.getloadavg()[0]:.1f}; {now}; the first build imports TVM")
    print("| steps | fuse depth | loops | optimize s | kernels | build s | us per call | df/dx |\n"
          "|---:|---:|---|---:|---:|---:|---:|---:|")
    for steps in (int(s) for s in a.steps.split(",")):
        for depth in (int(d) for d in a.fuse_depth.split(",")):
            if a.warm:
                print(one(steps, depth, a.budget, a.rounds, a.calls), flush=True)
                continue
            with tempfile.TemporaryDirectory() as d:
                os.environ["RELAY_IR_CACHE_DIR"] = d
                print(one(steps, depth, a.budget, a.rounds, a.calls), flush=True)


if __name__ == "__main__":
    main()
