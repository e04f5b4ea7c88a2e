"""The indexing and scan operators (relay_ir/op/indexing_ext.py) compiled, against numpy.

Each row: one operator call compiled with ``runtime.build(target="llvm")`` (median of
``--repeat`` calls) next to its numpy reference run by the interpreter (``runtime.evaluate``)
and, for einsum, ``np.einsum`` itself. Two design choices are measured side by side in the
same run: the blocked scan against the masked O(d^2) one (``_BLOCKED_SCAN_MIN``), and the
matmul schedule for matmul-shaped einsums against the generic one (in a child process with a
fresh kernel cache, since the cache key does not hold the schedule kind).

    .venv/bin/python benchmarks/bench_indexing_ext.py [--repeat 15]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2] * 1e3


def _prog(body: str, params: str) -> Any:
    import relay_ir as rly
    return rly.parse('#[version = "0.0.5"]\ndef @main(' + params + ') {\n  ' + body + '\n}\n')


def _ty(shape: tuple, dtype: str = "float32") -> str:
    return f"Tensor[({', '.join(map(str, shape))}), {dtype}]"


def cases() -> list[tuple[str, str, str, list[np.ndarray]]]:
    rng = np.random.default_rng(0)
    f = "float32"
    x = rng.standard_normal((1024, 1024)).astype(f)
    return [
        ("gather (1024,1024) idx (1024,64) axis 1", "gather(%x, %i, axis=1)",
         f"%x: {_ty((1024, 1024))}, %i: {_ty((1024, 64), 'int64')}",
         [x, rng.integers(0, 1024, (1024, 64))]),
        ("gather_nd (4096,64) 512 rows", "gather_nd(%x, %i)",
         f"%x: {_ty((4096, 64))}, %i: {_ty((1, 512), 'int64')}",
         [rng.standard_normal((4096, 64)).astype(f), rng.integers(0, 4096, (1, 512))]),
        ("scatter_elements add (1024,1024) idx (1024,16)",
         'scatter_elements(%x, %i, %u, axis=1, reduction="add")',
         f"%x: {_ty((1024, 1024))}, %i: {_ty((1024, 16), 'int64')}, %u: {_ty((1024, 16))}",
         [x, rng.integers(0, 1024, (1024, 16)), rng.standard_normal((1024, 16)).astype(f)]),
        ("scatter_nd update (4096,64) 512 rows", "scatter_nd(%x, %i, %u)",
         f"%x: {_ty((4096, 64))}, %i: {_ty((1, 512), 'int64')}, %u: {_ty((512, 64))}",
         [rng.standard_normal((4096, 64)).astype(f), rng.permutation(4096)[:512].reshape(1, 512),
          rng.standard_normal((512, 64)).astype(f)]),
        ("one_hot (4096,) depth 1000", "one_hot(%i, 1f, 0f, depth=1000)",
         f"%i: {_ty((4096,), 'int64')}", [rng.integers(0, 1000, 4096)]),
        ("cumsum (8,4096) axis 1", "cumsum(%x, axis=1)", f"%x: {_ty((8, 4096))}",
         [rng.standard_normal((8, 4096)).astype(f)]),
        ("cumsum (256,512) axis 1", "cumsum(%x, axis=1)", f"%x: {_ty((256, 512))}",
         [rng.standard_normal((256, 512)).astype(f)]),
        ("cumprod (64,1024) axis 1", "cumprod(%x, axis=1)", f"%x: {_ty((64, 1024))}",
         [rng.uniform(0.999, 1.001, (64, 1024)).astype(f)]),
    ]


EINSUMS = [("bij,bjk->bik", [(16, 128, 64), (16, 64, 128)]),
           ("ij,kj->ik", [(256, 256), (256, 256)]),
           ("bhqd,bhkd->bhqk", [(2, 4, 64, 32), (2, 4, 64, 32)]),
           ("ij,j->i", [(512, 512), (512,)])]


def einsum_times(repeat: int) -> dict[str, float]:
    """Compiled einsum medians (ms) under the current schedule choice."""
    from relay_ir import runtime
    rng = np.random.default_rng(1)
    out = {}
    for eq, shapes in EINSUMS:
        params = ", ".join(f"%a{i}: {_ty(s)}" for i, s in enumerate(shapes))
        ops = ", ".join(f"%a{i}" for i in range(len(shapes)))
        mod = _prog(f'einsum(({ops},), equation="{eq}")', params)
        args = [rng.standard_normal(s).astype("float32") for s in shapes]
        exe = runtime.build(mod, target="llvm")
        np.testing.assert_allclose(exe(*args), np.einsum(eq, *args), rtol=1e-3, atol=1e-3)
        out[eq] = _median_ms(lambda: exe(*args), repeat)
        out[eq + " np"] = _median_ms(lambda: np.einsum(eq, *args), repeat)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--einsum-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.einsum_only:  # the child process: the generic schedule for every einsum
        from relay_ir.runtime import lower_tvm
        lower_tvm._einsum_matmul = lambda *a: False  # type: ignore[assignment]
        print(json.dumps(einsum_times(args.repeat)))
        return 0
    # NOTE: fresh kernel caches: a kernel cached before the einsum schedule choice existed
    # has the same key as today's
    with tempfile.TemporaryDirectory() as d:
        os.environ["RELAY_IR_CACHE_DIR"] = d
        return _run(args.repeat)


def _run(repeat: int) -> int:
    from relay_ir import runtime
    from relay_ir.op import indexing_ext
    print("| operator call | compiled ms | interpreter (numpy) ms | numpy / compiled |")
    print("|---|---:|---:|---:|")
    for name, body, params, vals in cases():
        mod = _prog(body, params)
        exe = runtime.build(mod, target="llvm")
        want = runtime.evaluate(mod, *vals)
        np.testing.assert_allclose(exe(*vals), want, rtol=1e-3, atol=1e-3)
        tc = _median_ms(lambda: exe(*vals), repeat)
        ti = _median_ms(lambda: runtime.evaluate(mod, *vals), repeat)
        print(f"| {name} | {tc:.3f} | {ti:.3f} | {ti / tc:.2f} |", flush=True)
    # the blocked scan against the masked one, same process (different kernels, own keys)
    x = np.random.default_rng(2).standard_normal((8, 4096)).astype("float32")
    mod = _prog("cumsum(%x, axis=1)", f"%x: {_ty((8, 4096))}")
    blocked = runtime.build(mod, target="llvm")
    saved = indexing_ext._BLOCKED_SCAN_MIN
    indexing_ext._BLOCKED_SCAN_MIN = 1 << 30
    try:
        masked = runtime.build(mod, target="llvm")
    finally:
        indexing_ext._BLOCKED_SCAN_MIN = saved
    tb = _median_ms(lambda: blocked(x), repeat)
    tm = _median_ms(lambda: masked(x), repeat)
    print(f"\ncumsum (8,4096) axis 1: blocked {tb:.3f} ms, masked O(d^2) {tm:.3f} ms "
          f"({tm / tb:.1f}x)")
    # matmul-shaped einsums: the matmul schedule here, the generic one in a child process
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, RELAY_IR_CACHE_DIR=d)
        child = subprocess.run([sys.executable, __file__, "--einsum-only", "--repeat",
                                str(repeat)], env=env, capture_output=True, text=True,
                               check=True)
    generic = json.loads(child.stdout.strip().splitlines()[-1])
    mine = einsum_times(repeat)
    print("\n| einsum | shapes | matmul schedule ms | generic schedule ms | np.einsum ms |")
    print("|---|---|---:|---:|---:|")
    for eq, shapes in EINSUMS:
        print(f"| `{eq}` | {' x '.join(map(str, shapes))} | {mine[eq]:.3f} | "
              f"{generic[eq]:.3f} | {mine[eq + ' np']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
