"""Accuracy of the fast-math float32 transcendentals against numpy float64.

Usage: ``python benchmarks/fast_math_accuracy.py [N]`` (default N = 2**22 random points per
range). For every operator in ``relay_ir.op._te.FAST_MATH_CANDIDATES`` the script compiles the
operator's compute twice (``fast_math(True)`` and ``fast_math(False)``), evaluates both on
random float32 inputs spread over a wide range (plus a dense grid), and prints the maximum
relative error against the float64 numpy reference of the same float32 inputs. Results where
the float64 reference is below the smallest normal float32 (1.18e-38) are reported separately
(absolute error), since float32 cannot represent them relatively.
"""
from __future__ import annotations

import sys

import numpy as np

RANGES = {
    "exp": (-104.0, 88.7),
    "tanh": (-20.0, 20.0),
    "sigmoid": (-104.0, 104.0),
    "nn.softmax": (-40.0, 40.0),
    "erf": (-6.0, 6.0),
    # NOTE: gelu below -3 is x * (1 + erf(x / sqrt 2)) / 2 with a cancelling 1 + erf in
    # float32 (in every float32 implementation, torch's included): its relative error there is
    # large while the absolute error stays below 1e-7 |x|; the absolute column covers [-10, 10]
    "nn.gelu": (-3.0, 10.0),
    "nn.gelu/tanh": (-3.0, 10.0),
}
ABS_RANGE = (-10.0, 10.0)


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if name == "erf":
        from relay_ir.op.tensor import erf_f64
        return erf_f64(x64)
    if name.startswith("nn.gelu"):
        from relay_ir.op import get_opdef
        od = get_opdef("nn.gelu")
        mode = "tanh" if name.endswith("/tanh") else "none"
        return od.impl([x64], od.make_attrs({"approximate": mode}))
    if name == "exp":
        return np.exp(x64)
    if name == "tanh":
        return np.tanh(x64)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x64))
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _compiled(name: str, fast: bool, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    import tvm
    from tvm import te
    from tvm.target import codegen
    from relay_ir.op import get_opdef
    from relay_ir.op._te import fast_math
    from relay_ir.ty import TensorType
    od = get_opdef(name.split("/")[0])
    attrs = od.make_attrs({"approximate": "tanh"} if name.endswith("/tanh") else {})
    x = te.placeholder(shape, "float32", name="x")
    with fast_math(fast):
        y = od.compute(attrs, [x], TensorType(shape, "float32"))
    target = tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    ex = tvm.compile(te.create_prim_func([x, y]), target=target)

    def run(a: np.ndarray) -> np.ndarray:
        out = tvm.runtime.empty(shape, "float32")
        ex["main"](tvm.runtime.tensor(a), out)
        return out.numpy()
    return run


def measure(name: str, n: int) -> dict[str, float]:
    """Max relative error (normal range) and max absolute error (subnormal range)."""
    lo, hi = RANGES[name]
    rng = np.random.default_rng(0)
    if name == "nn.softmax":
        shape: tuple[int, ...] = (n // 1024, 1024)
    else:
        shape = (n,)
    x = rng.uniform(lo, hi, shape).astype(np.float32)
    if name != "nn.softmax":
        x[: n // 4] = np.linspace(lo, hi, n // 4, dtype=np.float32)
        x[n // 4: n // 2] = np.linspace(-1, 1, n // 4, dtype=np.float32)
    ref = _reference(name, x)
    out = {}
    for fast in (True, False):
        got = _compiled(name, fast, shape)(x).astype(np.float64)
        normal = np.abs(ref) >= np.finfo(np.float32).tiny
        rel = np.abs(got[normal] - ref[normal]) / np.abs(ref[normal])
        sub = np.abs(got[~normal] - ref[~normal])
        key = "fast" if fast else "libm"
        out[f"{key}_max_rel"] = float(rel.max())
        out[f"{key}_max_abs_subnormal"] = float(sub.max()) if sub.size else 0.0
    if name.startswith("nn.gelu"):
        xa = np.linspace(*ABS_RANGE, n, dtype=np.float32)
        out["fast_max_abs"] = float(np.abs(_compiled(name, True, (n,))(xa).astype(np.float64)
                                           - _reference(name, xa)).max())
    return out


def main() -> None:
    """Print one line per operator."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 22
    print(f"float32, {n} points per op; error against numpy float64 of the same inputs")
    for name in RANGES:
        r = measure(name, n)
        lo, hi = RANGES[name]
        print(f"{name:11s} [{lo:g}, {hi:g}]  fast: max rel {r['fast_max_rel']:.3g} "
              f"(subnormal abs {r['fast_max_abs_subnormal']:.3g})  "
              f"default/libm: max rel {r['libm_max_rel']:.3g}"
              + (f"  fast: max abs on {list(ABS_RANGE)} {r['fast_max_abs']:.3g}"
                 if "fast_max_abs" in r else ""))


if __name__ == "__main__":
    main()
