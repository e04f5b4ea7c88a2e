"""W6's gradient with and without the loop rule of AD (passes/loop_ad.py), side by side.

Builds ``passes.optimize(passes.gradient(W6, loop_rule=...))`` for both settings at each trip
count, compiles both on the Relax VM, checks they agree, then times them interleaved in one
process (CPU time of the process and wall time, medians over ``--rounds``) and counts the VM
calls per step by callee (``VirtualMachine.set_instrument``).

Run: ``.venv/bin/python benchmarks/bench_loop_ad.py [--steps 1000,3000] [--rounds 7]``.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import passes, runtime  # noqa: E402
from relay_ir.passes import PassContext  # noqa: E402

from bench_relax_plan import interleave, vm_calls  # noqa: E402
import workloads as wl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", default="1000,3000")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    x = np.array(np.float32(0.5))
    print("| steps | rule | CPU us/step | wall us/step | VM calls/step | top callees per step "
          "| df/dx |\n|---:|---|---:|---:|---:|---|---:|")
    for steps in (int(s) for s in a.steps.split(",")):
        src = wl.w6_source(f"{steps}f")
        exes = {}
        for name, rule in (("reference", False), ("tape", True)):
            # NOTE: loops kept as loops: a static trip count would otherwise unroll (partial
            # evaluation's budget), and this measures the executor's cost per step
            with PassContext(config={"partial-eval.unroll_budget": 0}):
                g = passes.optimize(passes.gradient(rly.parse(src), entry="main",
                                                    loop_rule=rule))
                exes[name] = runtime.build(g)
        vals = {k: float(e(x)[1][0]) for k, e in exes.items()}
        assert abs(vals["tape"] - vals["reference"]) <= 1e-5 * max(1.0, abs(vals["tape"])), vals
        res = interleave([(k, (lambda e=e: e(x))) for k, e in exes.items()], a.rounds)
        for k, e in exes.items():
            calls = vm_calls(e, lambda e=e: e(x))
            top = ", ".join(f"{n} {c / steps:.2f}" for n, c in calls.most_common(8))
            print(f"| {steps} | {k} | {res[k][0] / steps * 1e6:.2f} | "
                  f"{res[k][1] / steps * 1e6:.2f} | {sum(calls.values()) / steps:.1f} | {top} | "
                  f"{vals[k]:.6f} |")


if __name__ == "__main__":
    main()
