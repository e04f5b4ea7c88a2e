"""Tail calls, memory planning and dispatch on ``executor="relax"`` (issue 21), side by side.

Parts (``--only``; all by default):

* ``dispatch``: the 10,000-step loop of ``bench_executor.py`` (idle iteration; an iteration
  calling ``tanh`` on a (4,) vector) on the Relax VM with the memory plan on and off
  (``relax_plan.ENABLED``), per iteration. Goal: <= 1 us in all, the kernel <= 0.3 us above
  idle.
* ``w6``: the gradient of W6's scalar loop (``workloads.W6_SRC``) at 300, 1,000 and 3,000
  steps, default compiled executor against ``executor="relax"``, per step, and VM calls per
  step on the Relax VM (``VirtualMachine.set_instrument``).
* ``w5``: W5's TreeLSTM gradient, 64 trees, per tree, both executors, and VM calls per tree.
* ``memory``: the W2 training step and the W2 loss: bytes of the intermediates in the dataflow
  executor's plan (``executor._plan_memory``: distinct buffers) against the Relax VM's plan
  (its shared storage plus the intermediates left with an allocation of their own).

Times are CPU time of the process (``time.process_time``: all its threads, so the Relax VM's
large-stack worker counts; waiting for the CPU on a shared machine does not) and wall time,
the median over ``--rounds`` interleaved rounds.

Run: ``.venv/bin/python benchmarks/bench_relax_plan.py [--only dispatch,w6,w5,memory]
[--rounds 5]``.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import numpy as np  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import passes, runtime  # noqa: E402
from relay_ir.passes import PassContext  # noqa: E402
from relay_ir.runtime import relax_plan  # noqa: E402


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(CPU seconds of the process, wall seconds) of one call."""
    c, w = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - w


def interleave(runs: list[tuple[str, Callable[[], Any]]], rounds: int, inner: int = 1
               ) -> dict[str, tuple[float, float]]:
    """Median (CPU, wall) seconds per call of each run, rounds interleaved; each round
    takes the best of ``inner`` calls."""
    got: dict[str, tuple[list, list]] = {n: ([], []) for n, _ in runs}
    for _ in range(rounds):
        for name, fn in runs:
            best = min((timed(fn) for _ in range(inner)), key=lambda t: t[0])
            got[name][0].append(best[0])
            got[name][1].append(best[1])
    return {n: (statistics.median(c), statistics.median(w)) for n, (c, w) in got.items()}


def vm_calls(exe: Any, fn: Callable[[], Any]) -> collections.Counter:
    """VM calls by callee (kernels together) during ``fn()``."""
    cnt: collections.Counter = collections.Counter()

    def instrument(func: Any, name: str, before: bool, ret: Any, *args: Any) -> None:
        if before:
            cnt["kernels" if name.startswith("k_") else name] += 1
    exe.vm.set_instrument(instrument)
    try:
        fn()
    finally:
        exe.vm.set_instrument(None)
    return cnt


def dispatch(rounds: int) -> None:
    from bench_executor import DISPATCH_IDLE, DISPATCH_KERNEL
    n_steps = 10_000
    n = np.array(n_steps, "int64")
    x = np.float32([0.1, 0.2, 0.3, 0.4])
    runs = []
    for plan in (True, False):
        relax_plan.ENABLED = plan
        for kind, src in (("idle", DISPATCH_IDLE), ("tanh", DISPATCH_KERNEL)):
            exe = runtime.build(rly.parse(src), executor="relax")
            exe(n, x)
            runs.append((f"plan {'on' if plan else 'off'}, {kind}", lambda e=exe: e(n, x)))
    relax_plan.ENABLED = True
    res = interleave(runs, rounds, inner=5)
    print(f"### dispatch: {n_steps:,}-step loop on executor='relax', us per iteration")
    print("| case | CPU | wall |\n|---|---:|---:|")
    for name, (c, w) in res.items():
        print(f"| {name} | {c / n_steps * 1e6:.3f} | {w / n_steps * 1e6:.3f} |")
    for plan in ("on", "off"):
        k = res[f"plan {plan}, tanh"][0] - res[f"plan {plan}, idle"][0]
        print(f"kernel above idle, plan {plan}: {k / n_steps * 1e6:.3f} us (CPU)")


def w6(rounds: int) -> None:
    import workloads as wl
    x = np.array(np.float32(0.5))
    print("### W6 gradient, per step (us); VM calls per step on the Relax VM")
    print("| steps | default executor CPU | relax CPU | default wall | relax wall | "
          "relax VM calls/step | df/dx |\n|---:|---:|---:|---:|---:|---:|---:|")
    for steps in (300, 1000, 3000):
        # NOTE: loops kept as loops (a static trip count would otherwise unroll): this
        # measures the executors' cost per step
        with PassContext(config={"partial-eval.unroll_budget": 0}):
            g = passes.optimize(passes.gradient(rly.parse(wl.w6_source(f"{steps}f")),
                                                entry="main"))
            vm, rx = runtime.build(g), runtime.build(g, executor="relax")
        a, b = float(vm(x)[1][0]), float(rx(x)[1][0])
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (a, b)
        res = interleave([("vm", lambda: vm(x)), ("relax", lambda: rx(x))], rounds)
        calls = sum(vm_calls(rx, lambda: rx(x)).values())
        print(f"| {steps} | {res['vm'][0] / steps * 1e6:.1f} | {res['relax'][0] / steps * 1e6:.1f}"
              f" | {res['vm'][1] / steps * 1e6:.1f} | {res['relax'][1] / steps * 1e6:.1f} | "
              f"{calls / steps:.0f} | {b:.6f} |")


def w5(rounds: int) -> None:
    import workloads as wl
    trees, params = wl.w5_trees(), wl.w5_params()
    mod = rly.parse(wl.w5_source())
    g = passes.optimize(passes.gradient(mod, entry="main"))
    adts = [(wl._to_adt(mod, t), y) for t, y in trees]
    eye5 = np.eye(5, dtype=np.float32)
    exes = {"default executor": runtime.build(g), "relax": runtime.build(g, executor="relax")}

    def pass_of(exe: Any) -> Callable[[], float]:
        return lambda: sum(float(exe(t, eye5[y], *params)[0]) for t, y in adts)
    checks = {k: pass_of(e)() for k, e in exes.items()}
    res = interleave([(k, pass_of(e)) for k, e in exes.items()], rounds)
    calls = vm_calls(exes["relax"], pass_of(exes["relax"]))
    print(f"### W5 TreeLSTM gradient, per tree (ms), {len(adts)} trees")
    print("| executor | CPU | wall | check |\n|---|---:|---:|---:|")
    for k, (c, w) in res.items():
        print(f"| {k} | {c / len(adts) * 1e3:.2f} | {w / len(adts) * 1e3:.2f} | "
              f"{checks[k]:.4f} |")
    tot = sum(calls.values())
    top = ", ".join(f"{k} {v / len(adts):.0f}" for k, v in calls.most_common(8))
    print(f"Relax VM calls per tree: {tot / len(adts):.0f} ({top})")


def memory() -> None:
    import workloads as wl
    from relay_ir import demo
    from relay_ir.module import IRModule
    x, y, params = wl.w2_data()
    args = [x, np.eye(10, dtype=np.float32)[y], *params]
    step = demo.first_order(demo.sgd_step_module(rly.parse(wl.W2_LOSS), "main", n_data=2,
                                                 lr=0.01), "train_step")
    cases = [("W2 training step (gradient + SGD, first-order)",
              IRModule({"main": step["train_step"]})),
             ("W2 loss (forward)", IRModule({"main": rly.parse(wl.W2_LOSS)["main"]}))]
    print("### memory of the intermediates (KiB)")
    print("| program | kernels | relax: shared storage | relax: own "
          "allocations (intermediates) | relax total | unplanned (one allocation each) |"
          "\n|---|---:|---:|---:|---:|---:|")
    # NOTE: the dataflow path's plan (a column of the first runs, benchmarks/RESULTS.md) is
    # gone with that path (issue 21: one compiled executor); the interpreter gives the values
    for name, mod in cases:
        want = runtime.evaluate(mod, *args)
        r = runtime.build(mod)
        got = r(*args)
        for a, b in zip(want if isinstance(want, tuple) else [want],
                        got if isinstance(got, tuple) else [got]):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
        st = r._backend.plan_stats[r._backend.cp.globals["main"]]
        outs = got if isinstance(got, tuple) else [got]
        out_bytes = sum(relax_plan._round(np.asarray(o).nbytes) for o in outs)
        own = max(0, st["own_bytes"] - out_bytes)   # NOTE: the results are allocated anyway
        print(f"| {name} | {r.num_kernels()} | "
              f"{st['arena'] / 1024:.0f} | {own / 1024:.0f} | {(st['arena'] + own) / 1024:.0f} "
              f"| {(st['unplanned_bytes'] + own) / 1024:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="dispatch,w6,w5,memory")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    parts = {"dispatch": lambda: dispatch(args.rounds), "w6": lambda: w6(args.rounds),
             "w5": lambda: w5(max(1, args.rounds // 2)), "memory": memory}
    for p in args.only.split(","):
        parts[p.strip()]()
        print(flush=True)


if __name__ == "__main__":
    main()
