"""Interpreter benchmarks, side by side in one run.

(a) dispatch overhead: a chain of N ``add`` calls on 0-d float32 tensors through the
    interpreter, per call, against calling ``np.add`` directly on the same arrays (and against
    the op's reference implementation called directly). Goal: interpreter / numpy <= 3.
(b) a 10,000-iteration scalar loop through a tail-recursive global (iterations per second)::

        def @loop(%i: int32, %acc: float32) -> float32 {
          if (%i == 0) { %acc } else { @loop(%i - 1, %acc + 1f) }
        }

(c) W6 of WORKLOADS.md, forward only: f(x) = sum_{i<1000} sin(x*i)*0.001 at x = 0.5::

        def @w6(%i: float32, %x: float32, %acc: float32) -> float32 {
          if (%i >= 1000f) { %acc } else { @w6(%i + 1f, %x, %acc + sin(%x * %i) * 0.001f) }
        }
        def @main(%x: float32) -> float32 { @w6(0f, %x, 0f) }

    against pure Python (math.sin loop), a numpy loop of 0-d float32 ops (eager, one numpy call
    per op) and the vectorised numpy closed form.

Run: ``.venv/bin/python benchmarks/bench_interpreter.py [--write]`` (``--write`` appends the
table to benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from typing import Callable

import numpy as np

from relay_ir.expr import Call, Function, GlobalVar, If, Var, const
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.op._rules import make_call as op
from relay_ir.runtime import evaluate
from relay_ir.traversal import build_lets
from relay_ir.ty import TensorType

F32 = TensorType((), "float32")
I32 = TensorType((), "int32")


def timeit(fn: Callable[[], object], repeat: int, number: int = 1) -> float:
    """Best (minimum) seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls.

    The minimum is the least noisy estimate on a shared machine (timeit's advice); every
    column of the table uses the same statistic.
    """
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


# ----------------------------------------------------------------------------- (a)
def bench_dispatch(n: int = 2000, repeat: int = 15) -> dict:
    """Per-call cost of ``add`` on 0-d float32 through the interpreter vs numpy."""
    x, y = Var("x", F32), Var("y", F32)
    add = op("add", x, y)
    vs = [Var(f"v{i}") for i in range(n)]
    bindings = [(vs[0], Call(add.op, (x, y), add.attrs))]
    bindings += [(vs[i], Call(add.op, (vs[i - 1], y), add.attrs)) for i in range(1, n)]
    mod = IRModule({"main": Function((x, y), build_lets(bindings, vs[-1]))})
    a = np.asarray(1.0, dtype="float32")
    b = np.asarray(1e-3, dtype="float32")
    r = evaluate(mod, a, b)
    assert r.dtype == np.float32
    t_interp = timeit(lambda: evaluate(mod, a, b), repeat) / n

    def numpy_loop() -> None:
        v = a
        for _ in range(n):
            v = np.add(v, b)

    impl, attrs = get_opdef("add").impl, add.attrs

    def impl_loop() -> None:
        v = a
        for _ in range(n):
            v = impl([v, b], attrs)

    t_numpy = timeit(numpy_loop, repeat) / n
    t_impl = timeit(impl_loop, repeat) / n
    return {"interp_us": t_interp * 1e6, "numpy_us": t_numpy * 1e6, "impl_us": t_impl * 1e6,
            "ratio": t_interp / t_numpy, "ratio_impl": t_interp / t_impl}


# ----------------------------------------------------------------------------- (b)
def loop_module() -> IRModule:
    i, acc, n = Var("i", I32), Var("acc", F32), Var("n", I32)
    loop = GlobalVar("loop")
    body = If(op("equal", i, const(0)), acc,
              Call(loop, (op("subtract", i, const(1)), op("add", acc, const(1.0)))))
    return IRModule({"loop": Function((i, acc), body, ret_type=F32),
                     "main": Function((n,), Call(loop, (n, const(0.0))), ret_type=F32)})


def loop_impls_direct() -> Callable[[np.ndarray], np.ndarray]:
    """Loop (b) as a Python loop calling the same op reference impls."""
    eq, sub, add = (get_opdef(n).impl for n in ("equal", "subtract", "add"))
    attrs = get_opdef("add").make_attrs({})
    zero, one_i, one_f = np.asarray(0, "int32"), np.asarray(1, "int32"), np.asarray(1.0, "float32")

    def run(n: np.ndarray) -> np.ndarray:
        i, acc = n, np.asarray(0.0, "float32")
        while not eq([i, zero], attrs):
            i, acc = sub([i, one_i], attrs), add([acc, one_f], attrs)
        return acc
    return run


def bench_loop(iters: int = 10_000, repeat: int = 7) -> dict:
    mod = loop_module()
    n = np.asarray(iters, dtype="int32")
    assert float(evaluate(mod, n)) == float(iters)
    direct = loop_impls_direct()
    assert float(direct(n)) == float(iters)
    t = timeit(lambda: evaluate(mod, n), repeat)
    t_direct = timeit(lambda: direct(n), repeat)
    return {"seconds": t, "iters_per_s": iters / t, "us_per_iter": t / iters * 1e6,
            "direct_ms": t_direct * 1e3, "ratio_direct": t / t_direct}


# ----------------------------------------------------------------------------- (c)
def w6_module() -> IRModule:
    i, x, acc, x0 = Var("i", F32), Var("x", F32), Var("acc", F32), Var("x", F32)
    w6 = GlobalVar("w6")
    step = op("add", acc, op("multiply", op("sin", op("multiply", x, i)), const(0.001)))
    body = If(op("greater_equal", i, const(1000.0)), acc,
              Call(w6, (op("add", i, const(1.0)), x, step)))
    return IRModule({"w6": Function((i, x, acc), body, ret_type=F32),
                     "main": Function((x0,), Call(w6, (const(0.0), x0, const(0.0))),
                                      ret_type=F32)})


def w6_python(x: float) -> float:
    acc = 0.0
    for i in range(1000):
        acc = acc + math.sin(x * i) * 0.001
    return acc


def w6_numpy_eager(x: np.ndarray) -> np.ndarray:
    acc = np.asarray(0.0, dtype="float32")
    k = np.asarray(0.001, dtype="float32")
    for i in range(1000):
        acc = np.add(acc, np.multiply(np.sin(np.multiply(x, np.float32(i))), k))
    return acc


def w6_numpy_closed(x: np.ndarray) -> np.ndarray:
    i = np.arange(1000, dtype="float32")
    return np.sum(np.sin(x * i) * np.float32(0.001))


def w6_impls_direct() -> Callable[[np.ndarray], np.ndarray]:
    """The W6 loop as a Python loop calling the same op reference impls the program calls."""
    names = ("greater_equal", "add", "multiply", "sin")
    impl = {n: get_opdef(n).impl for n in names}
    attrs = {n: get_opdef(n).make_attrs({}) for n in names}
    ge, add, mul, sin = (impl[n] for n in names)
    a_ge, a_add, a_mul, a_sin = (attrs[n] for n in names)
    stop, one, k = (np.asarray(v, dtype="float32") for v in (1000.0, 1.0, 0.001))

    def run(x: np.ndarray) -> np.ndarray:
        i = np.asarray(0.0, dtype="float32")
        acc = np.asarray(0.0, dtype="float32")
        while not ge([i, stop], a_ge):
            acc = add([acc, mul([sin([mul([x, i], a_mul)], a_sin), k], a_mul)], a_add)
            i = add([i, one], a_add)
        return acc
    return run


def bench_w6(repeat: int = 9) -> dict:
    mod = w6_module()
    x = np.asarray(0.5, dtype="float32")
    got = evaluate(mod, x)
    exact = w6_python(0.5)
    assert got.dtype == np.float32 and abs(float(got) - exact) < 1e-4, (got, exact)
    direct = w6_impls_direct()
    assert float(direct(x)) == float(got)
    return {
        "interp_ms": timeit(lambda: evaluate(mod, x), repeat) * 1e3,
        "impls_ms": timeit(lambda: direct(x), repeat) * 1e3,
        "python_ms": timeit(lambda: w6_python(0.5), repeat, 20) * 1e3,
        "numpy_eager_ms": timeit(lambda: w6_numpy_eager(x), repeat) * 1e3,
        "numpy_closed_ms": timeit(lambda: w6_numpy_closed(x), repeat, 200) * 1e3,
        "value": float(got), "exact": exact,
    }


# ----------------------------------------------------------------------------- report
def report(a: dict, b: dict, c: dict) -> str:
    lines = [
        "## Interpreter (`benchmarks/bench_interpreter.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_interpreter.py --write` "
        f"({time.strftime('%Y-%m-%d %H:%M')}, Python {platform.python_version()}, numpy "
        f"{np.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} on "
        f"the shared machine). Best of 7-15 rounds each; the ratios, measured side by side in "
        f"one process, are the figures of merit.",
        "",
        "| benchmark | relay_ir interpreter | reference | ratio |",
        "|---|---|---|---|",
        f"| (a) `add` of two 0-d float32, per call | {a['interp_us']:.2f} µs | np.add direct "
        f"{a['numpy_us']:.2f} µs; op impl direct {a['impl_us']:.2f} µs | "
        f"{a['ratio']:.2f}x numpy (goal <= 3x); {a['ratio_impl']:.2f}x impl |",
        f"| (b) 10,000-iteration tail-recursive global loop | {b['seconds'] * 1e3:.1f} ms = "
        f"{b['iters_per_s']:,.0f} iterations/s ({b['us_per_iter']:.2f} µs/iteration, 3 ops "
        f"+ if + call) | the same op impls called from a Python `while` loop "
        f"{b['direct_ms']:.1f} ms | {b['ratio_direct']:.2f}x the impls loop |",
        f"| (c) W6 forward, sum_{{i<1000}} sin(x*i)*0.001 | {c['interp_ms']:.2f} ms/call | "
        f"the same op impls called from a Python loop {c['impls_ms']:.2f} ms; numpy eager 0-d "
        f"ops {c['numpy_eager_ms']:.2f} ms; pure Python {c['python_ms']:.3f} ms; numpy closed "
        f"form {c['numpy_closed_ms'] * 1e3:.1f} µs | {c['interp_ms'] / c['impls_ms']:.2f}x the "
        f"impls loop; {c['interp_ms'] / c['numpy_eager_ms']:.1f}x numpy eager; "
        f"{c['interp_ms'] / c['python_ms']:.0f}x pure Python |",
        "",
        f"W6 value: interpreter {c['value']:.6f} (float32), exact {c['exact']:.6f}. Each W6 "
        f"iteration runs 6 operator impls (a comparison, 2 adds, 2 multiplies, sin), an `if` "
        f"and a tail call: {c['interp_ms']:.1f} µs per iteration, of which "
        f"{c['impls_ms']:.1f} µs are the operator reference implementations themselves "
        f"and "
        f"{c['interp_ms'] - c['impls_ms']:.1f} µs the interpreter.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    a = bench_dispatch()
    b = bench_loop()
    c = bench_w6()
    text = report(a, b, c)
    print(text)
    if args.write:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
        new = not os.path.exists(path)
        old = "" if new else open(path, encoding="utf-8").read()
        with open(path, "a", encoding="utf-8") as f:
            if new:
                f.write("# Benchmark results\n\nEvery figure below was produced by the command "
                        "named in its section.\n\n")
            elif not old.endswith("\n\n"):
                f.write("\n" if old.endswith("\n") else "\n\n")
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
