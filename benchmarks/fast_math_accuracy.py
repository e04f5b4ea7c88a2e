"""Accuracy of the fast-math float32 transcendentals against numpy float64.

Usage: ``python benchmarks/fast_math_accuracy.py [N]`` (default N = 2**22 random points per
range); ``--dense`` for the exp / sigmoid / tanh table of docs/fast_math.md (every 509th float32
bit pattern, both signs, plus dense tails), ``--fit`` to redo the fits of relay_ir's forms.
For every operator in ``relay_ir.op._te.FAST_MATH_CANDIDATES`` the script compiles the
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


# ----------------------------------------------------------------------------- --dense
def _previous_form(name: str):  # type: ignore[no-untyped-def]
    """The float32 fast forms relay_ir used up to 2026-11-26 (TOPI's ``fast_exp`` with a shift
    of 1 above 88, ``1 / (1 + that exp(-x))`` and TOPI's ``fast_tanh``), for the before/after
    table."""
    from tvm import te, topi
    from relay_ir.op import _te as T

    def old_exp(x):  # type: ignore[no-untyped-def]
        hi = T.const(88.0, "float32")
        big = lambda *i: T.tir_mod().GT(x(*i), hi)  # noqa: E731
        sh = te.compute(x.shape, lambda *i: x(*i) - T.select(big(*i), T.const(1.0, "float32"),
                                                              T.const(0.0, "float32")))
        e = topi.fast_exp(sh)
        return te.compute(x.shape, lambda *i: e(*i) * T.select(
            big(*i), T.const(np.e, "float32"), T.const(1.0, "float32")))
    if name == "exp":
        return old_exp
    if name == "tanh":
        return topi.fast_tanh
    return lambda x: T.elemwise(lambda v: T.const(1.0, "float32") / (T.const(1.0, "float32") + v),
                                old_exp(T.elemwise(lambda v: -v, x)))


def _compiled_form(build, n: int):  # type: ignore[no-untyped-def]
    import tvm
    from tvm import te
    from tvm.target import codegen
    x = te.placeholder((n,), "float32", name="x")
    y = build(x)
    target = tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    ex = tvm.compile(te.create_prim_func([x, y]), target=target)

    def run(a: np.ndarray) -> np.ndarray:
        out = tvm.runtime.empty((n,), "float32")
        ex["main"](tvm.runtime.tensor(a), out)
        return out.numpy()
    return run


def dense_samples() -> np.ndarray:
    """Every 509th float32 bit pattern (both signs, the whole range) plus uniform samples of
    the tails: sigmoid's [-104, -9], [-20, 20], tanh's [-1e-3, 1e-3], exp's [80, 89]."""
    allb = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(1)
    extra = [rng.uniform(-104, -9, 1 << 20), rng.uniform(-1e-3, 1e-3, 1 << 18),
             rng.uniform(-20, 20, 1 << 20), rng.uniform(80, 89, 1 << 18)]
    x = np.concatenate([allb] + [e.astype(np.float32) for e in extra])
    return x[np.isfinite(x)]


def dense_errors(name: str, got: np.ndarray, x: np.ndarray
                 ) -> tuple[float, float, float, float]:
    """(max relative error where the float64 result is a normal float32, the x there, max
    absolute error where it is subnormal, max error in float32 ulps of the float64 result where
    that is normal: the spacing of the float32 binade holding it)."""
    with np.errstate(over="ignore"):
        ref = _reference(name, x)
    got = got.astype(np.float64)
    normal = (np.abs(ref) >= np.finfo(np.float32).tiny) & (np.abs(ref) <= np.finfo(np.float32).max)
    rel = np.abs(got[normal] - ref[normal]) / np.abs(ref[normal])
    sub = np.abs(ref) < np.finfo(np.float32).tiny
    i = int(np.argmax(rel))
    _, ex = np.frexp(ref[normal])
    ulps = np.abs(got[normal] - ref[normal]) / np.ldexp(1.0, ex - 24)
    return (float(rel[i]), float(x[normal][i]), float(np.abs(got[sub] - ref[sub]).max()),
            float(ulps.max()))


def dense_table() -> None:
    """The markdown table of docs/fast_math.md."""
    x = dense_samples()
    print(f"float32, {x.size} points (every 509th bit pattern + tails); error against numpy "
          "float64 of the same inputs\n")
    print("| op | form | max rel. error (normal results) | at x | max error in ulps (normal) "
          "| max abs. error (subnormal results) |\n|---|---|---:|---:|---:|---:|")
    for name in ("exp", "sigmoid", "tanh"):
        forms = [("relay_ir (now)", _compiled(name, True, x.shape)),
                 ("previous (TOPI-based)", _compiled_form(_previous_form(name), x.size)),
                 ("fast_math(False)", _compiled(name, False, x.shape))]
        for label, run in forms:
            rel, at, sub, ulps = dense_errors(name, run(x), x)
            print(f"| {name} | {label} | {rel:.3g} | {at:.6g} | {ulps:.2f} | {sub:.3g} |")


# ----------------------------------------------------------------------------- --fit
def fit_exp(deg: int = 5, a: float = 0.3467) -> np.ndarray:
    """exp(r) ~ 1 + c1 r + ... + c_deg r^deg on [-a, a], minimax in relative error (Lawson's
    iteratively reweighted least squares on Chebyshev points)."""
    r = np.cos(np.linspace(0, np.pi, 20001)) * a
    f = np.exp(r)
    A = np.stack([r ** k for k in range(1, deg + 1)], 1) / f[:, None]
    b = (f - 1) / f
    w = np.ones_like(r)
    for _ in range(200):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(A * sw[:, None], b * sw, rcond=None)
        w = w * np.abs(A @ c - b)
        w /= w.sum()
    return np.concatenate([[1.0], c])


def fit_tanh(m: int = 4, k: int = 4, clamp: float = 9.0) -> tuple[np.ndarray, np.ndarray]:
    """tanh(x) ~ x N(x^2) / D(x^2), N of degree m, D of degree k with D(0) = 1, on [0, clamp],
    minimax in relative error: differential correction, each step a linear program (scipy)."""
    from scipy.optimize import linprog
    x = np.concatenate([np.linspace(1e-4, 1, 6000), np.linspace(1, clamp, 6000)])
    s = x * x
    g = np.tanh(x) / x
    sn = np.stack([s ** j for j in range(m + 1)], 1)
    sd = np.stack([s ** j for j in range(1, k + 1)], 1)
    d_prev = np.ones_like(s)
    for _ in range(20):
        w = g * d_prev
        a_ub = np.vstack([np.hstack([sn, -g[:, None] * sd, -w[:, None]]),
                          np.hstack([-sn, g[:, None] * sd, -w[:, None]])])
        b_ub = np.concatenate([g, -g])
        scale = np.abs(a_ub).max(0)
        cost = np.zeros(a_ub.shape[1])
        cost[-1] = 1
        res = linprog(cost, A_ub=a_ub / scale, b_ub=b_ub, bounds=[(None, None)] * a_ub.shape[1],
                      method="highs")
        z = res.x / scale
        num, den = z[:m + 1], np.concatenate([[1.0], z[m + 1:m + 1 + k]])
        d_prev = sd @ den[1:] + 1
    return num, den


def print_fits() -> None:
    """The coefficients of relay_ir/op/_te.py's forms, rounded to float32, and the fits' own
    maximum relative errors (float64 arithmetic, float64 coefficients)."""
    r = np.linspace(-0.3467, 0.3467, 200001)
    for deg in (4, 5, 6):
        c = fit_exp(deg)
        err = np.abs(np.polyval(c[::-1], r) / np.exp(r) - 1).max()
        print(f"exp polynomial of degree {deg}: fit error {err:.3g}")
    print("exp polynomial (degree 5, used):", [float(np.float32(c)) for c in fit_exp()])
    x = np.linspace(1e-4, 9.0, 200001)
    for m, k in ((3, 3), (4, 3), (5, 2), (4, 4), (6, 3)):
        num, den = fit_tanh(m, k)
        s2 = x * x
        err = np.abs(x * np.polyval(num[::-1], s2) / np.polyval(den[::-1], s2) / np.tanh(x)
                     - 1).max()
        print(f"tanh rational of degree {2 * m + 1}/{2 * k}: fit error {err:.3g}")
    num, den = fit_tanh()
    print("tanh numerator (9/8, used):", [float(np.float32(c)) for c in num])
    print("tanh denominator:", [float(np.float32(c)) for c in den])


def main() -> None:
    """Print one line per operator."""
    if "--dense" in sys.argv:
        dense_table()
        return
    if "--fit" in sys.argv:
        print_fits()
        return
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
