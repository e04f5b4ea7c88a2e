"""Kernels on numpy's arrays: 64-byte aligned kernel parameters (before) vs element alignment.

For W1 (fused tanh/sigmoid chain, 4M float32), W3 (dense+bias+relu 1024^3) and a 3x3
convolution (1x64x56x56, 64 filters, bias, relu), two executables are built from the same
program with fresh in-memory kernel caches: "old", whose kernels declare their parameters
64-byte aligned (as ``te.create_prim_func`` does; the executor then has to copy unaligned
inputs into an aligned buffer), and "new" (the shipped lowering, ``schedules.unaligned_params``).
Inputs: 64-byte aligned, as numpy allocates them, and offset by 4 bytes (a view from element
1). All variants run interleaved in one loop; each figure is the best of ``--rounds`` calls.
Two tables: whole calls of the executable (a fresh output array each call, as users get), and
the kernel alone on preallocated TVM tensors (no allocation, no argument path: what the
alignment declaration itself costs).

Run: ``.venv/bin/python benchmarks/bench_alignment.py [--rounds 40] [--only W1,W3,conv]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads as W  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402
from relay_ir.runtime import schedules  # noqa: E402
from relay_ir.runtime.executor import as_aligned  # noqa: E402
from relay_ir.runtime.kernel_cache import KernelCache  # noqa: E402

CONV = W.HDR + """def @main(%x: Tensor[(1, 64, 56, 56), float32],
          %k: Tensor[(64, 64, 3, 3), float32], %b: Tensor[(64), float32]) {
  nn.relu(nn.bias_add(nn.conv2d(%x, %k, padding=[1, 1], channels=64, kernel_size=[3, 3]), %b))
}"""


def _cases() -> dict[str, tuple[str, list[np.ndarray]]]:
    rng = np.random.default_rng(0)
    return {
        "W1": (W.W1_SRC, [W.w1_data()]),
        "W3": (W.W3_SRC, list(W.w3_data())),
        "conv": (CONV, [rng.standard_normal((1, 64, 56, 56), dtype=np.float32),
                        rng.standard_normal((64, 64, 3, 3), dtype=np.float32) / 24,
                        rng.standard_normal(64, dtype=np.float32)]),
    }


def _offset4(a: np.ndarray) -> np.ndarray:
    buf = np.empty(a.size + 1, a.dtype)
    v = buf[1:].reshape(a.shape)
    v[...] = a
    return v


def _build(src: str, old: bool) -> Any:
    real = schedules.unaligned_params
    if old:
        schedules.unaligned_params = lambda f: f   # NOTE: the kernels as before the change
    try:
        return runtime.build(rly.parse(src), target="llvm", cache=KernelCache(use_disk=False))
    finally:
        schedules.unaligned_params = real


def _kernel(exe: Any, inputs: list[np.ndarray]) -> Callable[[], Any]:
    """The program's single kernel called on zero-copy views of ``inputs`` and a preallocated
    output (runtime internals: the relax executable's kernel record)."""
    import tvm
    import tvm_ffi
    (kern,) = exe._backend.kernels.values()
    outs = [as_aligned(np.empty(shape, dtype)) for shape, dtype in kern.outs]
    args = [tvm_ffi.from_dlpack(a, require_alignment=0) for a in inputs] + \
        [tvm.runtime.tensor(c) for c in kern.consts] + [tvm_ffi.from_dlpack(o) for o in outs]
    func = kern.module[kern.symbol]
    return lambda: func(*args)


def _race(fs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    best = {k: float("inf") for k in fs}
    for f in fs.values():
        f()
    for _ in range(rounds):
        for k, f in fs.items():
            t0 = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--only", default="", help="comma-separated: W1,W3,conv")
    args = ap.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    print(f"load average {os.getloadavg()[0]:.1f}; best of {args.rounds} interleaved calls, ms")
    head = ("| program | old, aligned input | old, numpy input (copied) | new, aligned input | "
            "new, numpy input | new, offset 4 B |\n|---|---:|---:|---:|---:|---:|")
    whole, kern = [], []
    for name, (src, data) in _cases().items():
        if only and name not in only:
            continue
        old, new = _build(src, True), _build(src, False)
        al = [as_aligned(a) for a in data]
        npy = [a.copy() for a in data]
        off = [_offset4(a) for a in data]
        np.testing.assert_allclose(new(*off), old(*al), rtol=1e-5, atol=1e-5)
        fs: dict[str, Callable[[], Any]] = {
            "old aligned": lambda: old(*al),
            "old numpy": lambda: old(*[as_aligned(a) for a in npy]),   # the old argument path
            "new aligned": lambda: new(*al),
            "new numpy": lambda: new(*npy),
            "new offset": lambda: new(*off)}
        best = _race(fs, args.rounds)
        whole.append(f"| {name} | " + " | ".join(f"{best[k] * 1e3:.2f}" for k in fs) + " |")
        ks = {"old aligned": _kernel(old, al), "new aligned": _kernel(new, al),
              "new numpy": _kernel(new, npy), "new offset": _kernel(new, off)}
        kb = _race(ks, args.rounds)
        kern.append(f"| {name} | " + " | ".join(f"{kb[k] * 1e3:.2f}" for k in ks) + " |")
    print("\nWhole calls (fresh output each call)\n" + head + "\n" + "\n".join(whole))
    print("\nKernel alone (preallocated output)\n| program | old, aligned input | new, aligned "
          "input | new, numpy input | new, offset 4 B |\n|---|---:|---:|---:|---:|\n" +
          "\n".join(kern))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
