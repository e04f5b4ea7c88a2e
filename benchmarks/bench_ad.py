"""Reverse-mode AD benchmark: the raw gradient of the W2 MLP loss (WORKLOADS.md).

W2 loss, forward only, float32, batch 64, MLP 784-512-512-10 (``y = x @ W + b``)::

    h1 = relu(x @ W1 + b1); h2 = relu(h1 @ W2 + b2); logits = h2 @ W3 + b3
    loss = mean over the batch of -log_softmax(logits)[label]     (labels one-hot, float32)

Data exactly as WORKLOADS.md: ``rng = np.random.default_rng(0)``; per layer W then b uniform in
+-1/sqrt(fan_in); then x standard normal and integer labels.

Measured in one process, side by side:

* transform time of ``passes.gradient`` (parse and type inference excluded; the input is typed),
* primitive calls: static (op call sites in the entry and every global it reaches) and dynamic
  (operator implementations the interpreter ran for one call, counted by wrapping them),
* interpreter time of the forward program and of the raw gradient program (``runtime.evaluate``),
* numpy: the same forward, and a hand-written forward + backward, in the same run.

The gradient is checked against the numpy gradient before anything is timed.

Also W6 (WORKLOADS.md, scalar-heavy): the gradient of ``sum_{i<1000} sin(x*i)*0.001`` at
``x = 0.5`` written as a recursive global (3000 forward ops and their backward steps), with the
closed form ``sum_i 0.001*i*cos(x*i)`` as the check.

Run: ``.venv/bin/python benchmarks/bench_ad.py [--repeat N]``.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Call, GlobalVar, Op
from relay_ir.module import IRModule
from relay_ir.op import list_ops
from relay_ir.traversal import post_order

B, SIZES = 64, [(784, 512), (512, 512), (512, 10)]

W2_TEXT = """#[version = "0.0.5"]
def @main(%x: Tensor[(64, 784), float32], %y: Tensor[(64, 10), float32],
          %w1: Tensor[(784, 512), float32], %b1: Tensor[(512), float32],
          %w2: Tensor[(512, 512), float32], %b2: Tensor[(512), float32],
          %w3: Tensor[(512, 10), float32], %b3: Tensor[(10), float32]) -> float32 {
  let %h1 = nn.relu(add(nn.matmul(%x, %w1), %b1));
  let %h2 = nn.relu(add(nn.matmul(%h1, %w2), %b2));
  let %logits = add(nn.matmul(%h2, %w3), %b3);
  let %logp = nn.log_softmax(%logits);
  negative(mean(sum(multiply(%logp, %y), axis=[1])))
}
"""


def w2_data() -> list[np.ndarray]:
    """Arguments of ``@main`` in its parameter order, generated as WORKLOADS.md says."""
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in SIZES:
        bound = 1 / np.sqrt(fan_in)
        w = rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)
        b = rng.uniform(-bound, bound, (fan_out,)).astype(np.float32)
        params += [w, b]
    x = rng.standard_normal((B, 784), dtype=np.float32)
    labels = rng.integers(0, 10, B)
    y = np.eye(10, dtype=np.float32)[labels]
    return [x, y, *params]


# ----------------------------------------------------------------------------- numpy
def numpy_forward(x: np.ndarray, y: np.ndarray, *p: np.ndarray) -> np.float32:
    w1, b1, w2, b2, w3, b3 = p
    h1 = np.maximum(x @ w1 + b1, 0)
    h2 = np.maximum(h1 @ w2 + b2, 0)
    z = h2 @ w3 + b3
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def numpy_value_and_grad(x: np.ndarray, y: np.ndarray, *p: np.ndarray) -> tuple:
    """Hand-written forward and backward (gradients for every argument, as the AD gives)."""
    w1, b1, w2, b2, w3, b3 = p
    a1 = x @ w1 + b1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ w2 + b2
    h2 = np.maximum(a2, 0)
    z = h2 @ w3 + b3
    zs = z - z.max(axis=1, keepdims=True)
    e = np.exp(zs)
    s = e.sum(axis=1, keepdims=True)
    logp = zs - np.log(s)
    loss = -np.mean(np.sum(logp * y, axis=1))
    dlogp = -y / B
    dy = -logp / B
    dz = dlogp - (e / s) * dlogp.sum(axis=1, keepdims=True)
    dw3, db3 = h2.T @ dz, dz.sum(axis=0)
    dh2 = dz @ w3.T
    da2 = dh2 * (a2 > 0)
    dw2, db2 = h1.T @ da2, da2.sum(axis=0)
    dh1 = da2 @ w2.T
    da1 = dh1 * (a1 > 0)
    dw1, db1 = x.T @ da1, da1.sum(axis=0)
    dx = da1 @ w1.T
    return loss, (dx, dy, dw1, db1, dw2, db2, dw3, db3)


# ----------------------------------------------------------------------------- counting
def static_op_calls(mod: IRModule, entry: str) -> int:
    """Op call sites in ``entry`` and every global it reaches."""
    seen, todo, count = {entry}, [entry], 0
    while todo:
        fn = mod[todo.pop()]
        for node in post_order(fn):
            if isinstance(node, Call) and isinstance(node.op, Op):
                count += 1
            elif isinstance(node, GlobalVar) and node.name_hint not in seen:
                seen.add(node.name_hint)
                todo.append(node.name_hint)
    return count


def dynamic_op_calls(mod: IRModule, args: list[np.ndarray]) -> tuple[int, dict[str, int]]:
    """Operator implementations run by one interpreter call, in total and per operator."""
    counts: dict[str, int] = {}
    saved = []
    for od in list_ops():
        if od.impl is None:
            continue
        saved.append((od, od.impl))

        def counted(a: Any, attrs: Any, _impl: Callable = od.impl, _n: str = od.name) -> Any:
            counts[_n] = counts.get(_n, 0) + 1
            return _impl(a, attrs)
        od.impl = counted
    try:
        fresh = rly.parse(rly.astext(mod), "<count>")  # NOTE: a new module, compiled afresh
        runtime.evaluate(fresh, *args)
    finally:
        for od, impl in saved:
            od.impl = impl
    return sum(counts.values()), counts


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, min) seconds of ``repeat`` calls after one warm-up call.

    On the shared 2-core machine the minimum is the least noisy figure; ratios use it.
    """
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


W6_TEXT = """#[version = "0.0.5"]
def @w6(%i: float32, %x: float32, %acc: float32) -> float32 {
  if (greater_equal(%i, 1000f)) { %acc } else {
    @w6(add(%i, 1f), %x, add(%acc, multiply(sin(multiply(%x, %i)), 0.001f)))
  }
}
def @main(%x: float32) -> float32 { @w6(0f, %x, 0f) }
"""


def bench_w6(repeat: int) -> None:
    """W6: transform, forward and gradient interpreter times; value against the closed form."""
    mod = passes.InferType()(rly.parse(W6_TEXT, "<w6>"))
    t_transform = timed(lambda: passes.gradient(mod), 3)
    g = passes.gradient(mod)
    x = np.asarray(0.5, dtype=np.float32)
    _, (gx,) = runtime.evaluate(g, x)
    i = np.arange(1000)
    exact = float(np.sum(0.001 * i * np.cos(0.5 * i)))
    assert abs(float(gx) - exact) < 1e-4, (gx, exact)
    t_fwd = timed(lambda: runtime.evaluate(mod, x), repeat)
    t_grad = timed(lambda: runtime.evaluate(g, x), repeat)
    d_fwd, _ = dynamic_op_calls(mod, [x])
    d_grad, _ = dynamic_op_calls(g, [x])
    print(f"W6: df/dx = {float(gx):.6f} (exact {exact:.6f}); transform "
          f"{t_transform[0] * 1e3:.1f} ms; forward {t_fwd[0] * 1e3:.1f} ms (min "
          f"{t_fwd[1] * 1e3:.1f}), {d_fwd} op calls; raw gradient {t_grad[0] * 1e3:.1f} ms (min "
          f"{t_grad[1] * 1e3:.1f}), {d_grad} op calls ({t_grad[1] / t_fwd[1]:.1f}x forward, min)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)

    data = w2_data()
    mod = passes.InferType()(rly.parse(W2_TEXT, "<w2>"))
    t_transform = timed(lambda: passes.gradient(mod), max(3, args.repeat // 2))
    g = passes.gradient(mod)

    # correctness first: value and every gradient against numpy's hand-written backward
    value, grads = runtime.evaluate(g, *data)
    ref_value, ref_grads = numpy_value_and_grad(*data)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    np.testing.assert_allclose(runtime.evaluate(mod, *data), ref_value, rtol=1e-5)
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-6)

    s_fwd, s_grad = static_op_calls(mod, "main"), static_op_calls(g, "main")
    d_fwd, _ = dynamic_op_calls(mod, data)
    d_grad, per_op = dynamic_op_calls(g, data)

    t_fwd = timed(lambda: runtime.evaluate(mod, *data), args.repeat)
    t_grad = timed(lambda: runtime.evaluate(g, *data), args.repeat)
    t_np_fwd = timed(lambda: numpy_forward(*data), args.repeat)
    t_np_grad = timed(lambda: numpy_value_and_grad(*data), args.repeat)

    ms = lambda t: f"{t[0] * 1e3:.2f} (min {t[1] * 1e3:.2f})"  # noqa: E731
    print(f"# W2 MLP loss, raw reverse-mode gradient (python {platform.python_version()}, "
          f"numpy {np.__version__}, {args.repeat} runs, median and min)")
    print(f"loss = {float(value):.6f} (numpy {float(ref_value):.6f}); all 8 gradients match "
          "numpy's hand-written backward")
    print(f"transform passes.gradient: {ms(t_transform)} ms")
    print("| program | static op calls | dynamic op calls | interpreter ms | numpy ms |")
    print("|---|---:|---:|---:|---:|")
    print(f"| forward | {s_fwd} | {d_fwd} | {ms(t_fwd)} | {ms(t_np_fwd)} |")
    print(f"| raw gradient (value + 8 gradients) | {s_grad} | {d_grad} | {ms(t_grad)} | "
          f"{ms(t_np_grad)} (hand-written) |")
    print(f"gradient / forward: {s_grad / s_fwd:.1f}x static op calls, "
          f"{d_grad / d_fwd:.1f}x dynamic op calls, {t_grad[1] / t_fwd[1]:.2f}x interpreter "
          f"time (min); raw gradient / numpy hand-written: {t_grad[1] / t_np_grad[1]:.2f}x (min)")
    top = sorted(per_op.items(), key=lambda kv: -kv[1])
    print("dynamic op calls of the gradient by operator: "
          + ", ".join(f"{n} {c}" for n, c in top))
    bench_w6(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
