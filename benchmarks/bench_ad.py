"""AD benchmark (issue 11): the W2 MLP loss's gradient in every form, side by side; checkpointing.

W2 loss, forward only, float32, batch 64, MLP 784-512-512-10 (``y = x @ W + b``)::

    h1 = relu(x @ W1 + b1); h2 = relu(h1 @ W2 + b2); logits = h2 @ W3 + b3
    loss = mean over the batch of -log_softmax(logits)[label]     (labels one-hot, float32)

Data exactly as WORKLOADS.md: ``rng = np.random.default_rng(0)``; per layer W then b uniform in
+-1/sqrt(fan_in); then x standard normal and integer labels.

Measured in one process, side by side (every gradient is checked against numpy's hand-written
backward before anything is timed):

* the forward program; the raw higher-order gradient (``passes.gradient``); that gradient after
  ``passes.optimize`` (first-order code); the first-order mode's gradient
  (``mode="first_order"``); the forward-mode JVP along one random direction (``passes.jvp``),
  raw and optimized; numpy's forward and hand-written forward + backward;
* transform time (parse and type inference excluded: the input is typed);
* primitive calls: static (op call sites in the entry and every global it reaches) and dynamic
  (operator implementations the interpreter ran for one call, counted by wrapping them);
* interpreter time (``runtime.evaluate``; median and min of ``--repeat`` runs after a warm-up;
  ratios use the min, the least noisy figure on a shared machine).

Goals (issue 11): optimized gradient <= 3.5x the forward's primitive calls and <= 4x its
interpreter time.

Checkpointing (``--ckpt``): a deep MLP (``--layers`` 32 relu layers of ``--width`` 512, batch
``--batch`` 256, float32, blocks of ``--per-block`` 4 layers as a global ``@block``), the raw
gradient with and without ``annotation.checkpoint`` around each block call: peak traced memory
(``tracemalloc``, one run after a warm-up; the inputs are allocated before tracing starts) and
interpreter time. Goal: at most half the peak memory for at most 1.4x the time.

Also W6 (WORKLOADS.md, scalar-heavy): the gradient of ``sum_{i<1000} sin(x*i)*0.001`` at
``x = 0.5`` written as a recursive global (3000 forward ops and their backward steps), with the
closed form ``sum_i 0.001*i*cos(x*i)`` as the check.

Run: ``.venv/bin/python benchmarks/bench_ad.py [--repeat N] [--no-ckpt] [--no-w6]``.
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
from relay_ir.module import IRModule
from relay_ir.op import list_ops
from workloads import W2_LOSS, blocked_mlp, op_call_sites, peak_memory, w2_args, w2_numpy_loss, w2_numpy_value_and_grad

# NOTE: W2 (program, data and numpy gradient) is defined once, in benchmarks/workloads.py
W2_TEXT, w2_data, numpy_forward = W2_LOSS, w2_args, w2_numpy_loss


def numpy_value_and_grad(*args: np.ndarray) -> tuple:
    """Hand-written forward and backward (gradients for every argument, as the AD gives)."""
    loss, grads = w2_numpy_value_and_grad(*args, inputs=True)
    return loss, tuple(grads)


# ----------------------------------------------------------------------------- counting
static_op_calls = op_call_sites


def dynamic_op_calls(mod: IRModule, args: list[np.ndarray]) -> tuple[int, dict[str, int]]:
    """Operator implementations run by one interpreter call, in total and per operator."""
    import contextlib

    from relay_ir.op import override_op
    counts: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for od in list_ops():
            if od.impl is None:
                continue

            def counted(a: Any, attrs: Any, _impl: Callable = od.impl, _n: str = od.name) -> Any:
                counts[_n] = counts.get(_n, 0) + 1
                return _impl(a, attrs)
            stack.enter_context(override_op(od.name, impl=counted))
        fresh = rly.parse(rly.astext(mod), "<count>")  # NOTE: a new module, compiled afresh
        runtime.evaluate(fresh, *args)
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


def deep_mlp(layers: int, width: int, batch: int, per_block: int, checkpoint: bool) -> str:
    """The checkpointing workload: relu layers with biases, loss ``mean(h * h)``."""
    return blocked_mlp(layers, per_block, width, batch, checkpoint)


def bench_checkpoint(layers: int, width: int, batch: int, per_block: int, repeat: int) -> None:
    """Peak memory and interpreter time of the raw gradient with and without checkpointing."""
    rng = np.random.default_rng(0)
    data = [rng.standard_normal((batch, width), dtype=np.float32)]
    for _ in range(layers):
        data += [(rng.uniform(-1, 1, (width, width)) * np.sqrt(3 / width)).astype(np.float32),
                 np.zeros(width, np.float32)]
    rows = {}
    for ck in (False, True):
        g = passes.gradient(rly.parse(deep_mlp(layers, width, batch, per_block, ck), "<mlp>"))
        rows[ck] = (g, peak_memory(g, data))
    out = {ck: runtime.evaluate(rows[ck][0], *data) for ck in rows}
    for a, b in zip(out[True][1], out[False][1]):
        assert np.array_equal(a, b), "checkpointed gradient differs"
    # NOTE: interleaved runs, so that both see the same machine load
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeat):
        for ck in (False, True):
            t0 = time.perf_counter()
            runtime.evaluate(rows[ck][0], *data)
            times[ck].append(time.perf_counter() - t0)
    print(f"# checkpointing: {layers} relu layers of {width}, batch {batch}, float32, blocks of "
          f"{per_block} layers; raw gradient; gradients identical with and without")
    print("| program | peak traced memory (MiB) | interpreter ms (median, min) |")
    print("|---|---:|---:|")
    for ck, label in ((False, "without checkpoint"), (True, "annotation.checkpoint per block")):
        ts = times[ck]
        print(f"| {label} | {rows[ck][1] / 2**20:.1f} | {statistics.median(ts) * 1e3:.0f} "
              f"(min {min(ts) * 1e3:.0f}) |")
    print(f"checkpoint / plain: {rows[True][1] / rows[False][1]:.2f}x peak memory, "
          f"{min(times[True]) / min(times[False]):.2f}x time (min), "
          f"{statistics.median(times[True]) / statistics.median(times[False]):.2f}x (median) "
          "(goal: <= 0.5x memory for <= 1.4x time)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-ckpt", action="store_true", help="skip the checkpointing benchmark")
    ap.add_argument("--no-w6", action="store_true", help="skip W6")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--per-block", type=int, default=4, dest="per_block")
    args = ap.parse_args(argv)

    data = w2_data()
    mod = passes.InferType()(rly.parse(W2_TEXT, "<w2>"))
    ref_value, ref_grads = numpy_value_and_grad(*data)
    np.testing.assert_allclose(runtime.evaluate(mod, *data), ref_value, rtol=1e-5)
    tr = max(3, args.repeat // 2)
    programs: list[tuple[str, IRModule, tuple[float, float] | None]] = [("forward", mod, None)]
    t_raw = timed(lambda: passes.gradient(mod), tr)
    raw = passes.gradient(mod)
    programs.append(("raw gradient (higher-order)", raw, t_raw))
    t_opt = timed(lambda: passes.optimize(raw), tr)
    programs.append(("optimized gradient (passes.optimize of the raw one)",
                     passes.optimize(raw), (t_opt[0] + t_raw[0], t_opt[1] + t_raw[1])))
    t_fo = timed(lambda: passes.gradient(mod, mode="first_order"), tr)
    programs.append(("first-order-mode gradient", passes.gradient(mod, mode="first_order"),
                     t_fo))

    t_jvp = timed(lambda: passes.jvp(mod), tr)
    jvp_mod = passes.jvp(mod)
    t_jopt = timed(lambda: passes.optimize(jvp_mod), tr)
    jvp_opt = passes.optimize(jvp_mod)

    # correctness first: value and every gradient against numpy's hand-written backward, and
    # the JVP along a random direction against <gradient, direction>
    for name, prog, _ in programs[1:]:
        value, grads = runtime.evaluate(prog, *data)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        for got, want in zip(grads, ref_grads):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-6, err_msg=name)

    rng = np.random.default_rng(1)
    tangents = [rng.standard_normal(a.shape).astype(np.float32) for a in data]
    want = sum(float(np.sum(g.astype(np.float64) * t)) for g, t in zip(ref_grads, tangents))
    for prog in (jvp_mod, jvp_opt):
        value, tangent = runtime.evaluate(prog, *data, *tangents)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        np.testing.assert_allclose(float(tangent), want, rtol=2e-3)

    rows = []
    for name, prog, t_tr in programs:
        s_calls = static_op_calls(prog, "main")
        d_calls, _ = dynamic_op_calls(prog, data)
        t = timed(lambda p=prog: runtime.evaluate(p, *data), args.repeat)
        rows.append((name, s_calls, d_calls, t, t_tr))
    jargs = data + tangents
    for name, prog, t_tr in (("forward-mode JVP, one direction (`passes.jvp`)", jvp_mod, t_jvp),
                             ("optimized JVP", jvp_opt,
                              (t_jvp[0] + t_jopt[0], t_jvp[1] + t_jopt[1]))):
        d_calls, _ = dynamic_op_calls(prog, jargs)
        t = timed(lambda p=prog: runtime.evaluate(p, *jargs), args.repeat)
        rows.append((name, static_op_calls(prog, "main"), d_calls, t, t_tr))
    t_np_fwd = timed(lambda: numpy_forward(*data), args.repeat)
    t_np_grad = timed(lambda: numpy_value_and_grad(*data), args.repeat)

    ms = lambda t: f"{t[0] * 1e3:.2f} (min {t[1] * 1e3:.2f})"  # noqa: E731
    print(f"# W2 MLP loss: forward and gradients (python {platform.python_version()}, "
          f"numpy {np.__version__}, {args.repeat} runs, median and min)")
    print(f"loss = {float(ref_value):.6f}; every gradient program matches numpy's hand-written "
          "backward (8 gradients), the JVPs match <gradient, direction>")
    print("| program | transform ms | static op calls | dynamic op calls | x forward (dynamic) "
          "| interpreter ms | x forward (time, min) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    f_d, f_t = rows[0][2], rows[0][3][1]
    for name, s_calls, d_calls, t, t_tr in rows:
        tr_s = "" if t_tr is None else ms(t_tr)
        print(f"| {name} | {tr_s} | {s_calls} | {d_calls} | {d_calls / f_d:.2f} | {ms(t)} | "
              f"{t[1] / f_t:.2f} |")
    print(f"| numpy forward | | | | | {ms(t_np_fwd)} | {t_np_fwd[1] / f_t:.2f} |")
    print(f"| numpy hand-written forward + backward | | | | | {ms(t_np_grad)} | "
          f"{t_np_grad[1] / f_t:.2f} |")
    opt = rows[2]
    print(f"goals: optimized gradient {opt[2] / f_d:.2f}x the forward's primitive calls "
          f"(goal <= 3.5x), {opt[3][1] / f_t:.2f}x its interpreter time (goal <= 4x); "
          f"optimized / numpy hand-written: {opt[3][1] / t_np_grad[1]:.2f}x (min)")
    if not args.no_ckpt:
        bench_checkpoint(args.layers, args.width, args.batch, args.per_block,
                         max(3, args.repeat // 2))
    if not args.no_w6:
        bench_w6(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
