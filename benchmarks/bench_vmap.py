"""passes.vmap benchmark: a batched program against a loop of single-instance calls.

Workload: an MLP 64-256-256-10 on one example ``x: (64,)`` (``tanh(dense(x, W) + b)`` twice, then
``log_softmax``), float32, weights shared (``in_axes=(0, None, ...)``). Side by side in one
process, compiled with ``runtime.build(target="llvm")``:

* **loop**: the single-instance executable called once per instance (``B`` calls);
* **vmap**: ``passes.vmap`` with a symbolic batch (one executable for every size), one call on
  the stacked batch;
* **vmap static**: ``passes.vmap(..., batch_size=B)``, one call;
* per-example gradients: ``vmap(optimize(gradient(mlp)))`` (symbolic and static batch, one
  call) against the single-instance gradient program called ``B`` times.

The loop / vmap ratios use the faster of the two batched forms. Every batched result is
checked against the loop before timing. Times: median of ``--repeat`` runs after a warm-up (per
batch, in microseconds).

Run: ``.venv/bin/python benchmarks/bench_vmap.py [--repeat N] [--batches 1,8,64]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime

MLP = """#[version = "0.0.5"]
def @main(%x: Tensor[(64,), float32], %w1: Tensor[(256, 64), float32],
          %b1: Tensor[(256,), float32], %w2: Tensor[(256, 256), float32],
          %b2: Tensor[(256,), float32], %w3: Tensor[(10, 256), float32]) {
  let %h1 = tanh(add(nn.dense(%x, %w1), %b1));
  let %h2 = tanh(add(nn.dense(%h1, %w2), %b2));
  sum(nn.log_softmax(nn.dense(%h2, %w3)))
}"""


def _median_us(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def _leaves(v: Any) -> list[np.ndarray]:
    if isinstance(v, tuple):
        return [x for f in v for x in _leaves(f)]
    return [np.asarray(v)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batches", default="1,8,64")
    opts = ap.parse_args()
    rng = np.random.default_rng(0)
    weights = [rng.uniform(-0.1, 0.1, s).astype("float32")
               for s in ((256, 64), (256,), (256, 256), (256,), (10, 256))]
    mod = passes.InferType()(rly.parse(MLP))
    axes = (0,) + (None,) * 5
    one = runtime.build(mod, target="llvm")
    vm_sym = runtime.build(passes.vmap(mod, in_axes=axes), target="llvm")
    gmod = passes.optimize(passes.gradient(mod))
    g_one = runtime.build(gmod, target="llvm")
    g_sym = runtime.build(passes.vmap(gmod, in_axes=axes), target="llvm")
    print("| B | loop us | vmap (symbolic) us | vmap (static B) us | loop / vmap | "
          "grad loop us | vmap(grad) us | vmap(grad) static us | loop / vmap(grad) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in (int(s) for s in opts.batches.split(",")):
        xs = rng.standard_normal((b, 64)).astype("float32")
        vm_static = runtime.build(passes.vmap(mod, in_axes=axes, batch_size=b), target="llvm")
        g_static = runtime.build(passes.vmap(gmod, in_axes=axes, batch_size=b), target="llvm")
        loop_out = np.stack([one(xs[i], *weights) for i in range(b)])
        for exe in (vm_sym, vm_static):
            np.testing.assert_allclose(exe(xs, *weights), loop_out, rtol=1e-4, atol=1e-4)
        g_loop = [_leaves(g_one(xs[i], *weights)) for i in range(b)]
        for g_exe in (g_sym, g_static):
            for k, leaf in enumerate(_leaves(g_exe(xs, *weights))):
                np.testing.assert_allclose(leaf, np.stack([g[k] for g in g_loop]), rtol=1e-3,
                                           atol=1e-4)
        t_loop = _median_us(lambda: [one(xs[i], *weights) for i in range(b)], opts.repeat)
        t_sym = _median_us(lambda: vm_sym(xs, *weights), opts.repeat)
        t_static = _median_us(lambda: vm_static(xs, *weights), opts.repeat)
        tg_loop = _median_us(lambda: [g_one(xs[i], *weights) for i in range(b)], opts.repeat)
        tg_bat = _median_us(lambda: g_sym(xs, *weights), opts.repeat)
        tg_static = _median_us(lambda: g_static(xs, *weights), opts.repeat)
        print(f"| {b} | {t_loop:.0f} | {t_sym:.0f} | {t_static:.0f} | "
              f"{t_loop / min(t_sym, t_static):.1f}x | {tg_loop:.0f} | {tg_bat:.0f} | "
              f"{tg_static:.0f} | {tg_loop / min(tg_bat, tg_static):.1f}x |")


if __name__ == "__main__":
    main()
