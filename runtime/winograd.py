"""Winograd convolutions F(2x2, 3x3) and F(4x4, 3x3) for the CPU: opt-in (``fast_math=True``).

``conv-winograd`` rewrites a float32 NCHW ``nn.conv2d`` with a constant 3x3 OIHW weight,
stride 1, dilation 1 and one group into the Winograd form (Lavin and Gray, "Fast Algorithms
for Convolutional Neural Networks", 2015) written with ordinary operators::

    U[xi, nu, c, k] = (G W[k, c] G^T)[xi, nu]           at compile time (float64 -> float32)
    V[xi, nu, p, c] = (B^T d[p, c] B)[xi, nu]           d: the (m+2)^2 input tile p
    M[xi, nu]       = nn.batch_matmul(V[xi, nu], U[xi, nu])    [P, C] x [C, K]
    Y[p, k]         = (A^T M[., ., p, k] A)             the m x m output tile

The tiles ``d`` are strided slices of the zero-padded input, stacked (one injective kernel);
``V`` is one product with the constant ``kron(B^T, B^T)`` and ``Y`` one with
``kron(A^T, A^T)`` (matmul kernels), then one injective kernel puts the tiles in place, into
which the fuser folds the convolution's epilogue (bias, relu, the residual add) as after a
direct convolution. (``TRANSFORM_MATMUL[0] = False``: the transforms as sums of slices
instead, which the fuser splits into dozens of kernels; kept for comparison.)

Values: a tile output is a sum of (m+2)^2 products of transformed values, whose rounding
differs from the direct sum's (F(2x2, 3x3): relative errors ~1e-6 of the output scale;
F(4x4, 3x3): ~1e-5; tests/test_conv_winograd.py), and an inf in an input tile makes NaN of
the whole output tile (``inf - inf`` in the transform), where the direct convolution gives
inf only where the window holds the inf. So it runs only when the user opts in:
``runtime.build(..., fast_math=True)``; the default build never rewrites a convolution.

Which layers: :func:`winograd_tile` (the cost rule; measured on ResNet-50's 3x3 layers,
benchmarks/RESULTS.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from relay_ir.expr import Call, Constant, Expr, Function, Op, Tuple
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import FunctionPass
from relay_ir.ty import TensorType

# m -> (B^T, G, A^T): alpha = m + 2 points; interpolation points 0, 1, -1 (and 2, -2) and inf
TRANSFORMS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    2: (np.array([[1, 0, -1, 0],
                  [0, 1, 1, 0],
                  [0, -1, 1, 0],
                  [0, 1, 0, -1]], dtype=np.float64),
        np.array([[1, 0, 0],
                  [0.5, 0.5, 0.5],
                  [0.5, -0.5, 0.5],
                  [0, 0, 1]], dtype=np.float64),
        np.array([[1, 1, 1, 0],
                  [0, 1, -1, -1]], dtype=np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0],
                  [0, -4, -4, 1, 1, 0],
                  [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0],
                  [0, 4, 0, -5, 0, 1]], dtype=np.float64),
        np.array([[1 / 4, 0, 0],
                  [-1 / 6, -1 / 6, -1 / 6],
                  [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6],
                  [0, 0, 1]], dtype=np.float64),
        np.array([[1, 1, 1, 1, 1, 0],
                  [0, 1, -1, 2, -2, 0],
                  [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]], dtype=np.float64)),
}

# The cost rule's thresholds (measured, benchmarks/RESULTS.md "Winograd"): Winograd pays where
# the products dominate the transforms, i.e. enough channels, and where the tiles fill the
# matmul's rows (pixels per image / m^2)
# (1 thread, loaded 2-core machine, medians of one layer with bias+relu fused, direct / F(4x4) ms):
# 64x56x56: 1.51 / 3.31; 128x28x28: 1.44 / 1.74; 256x28x28: 5.48 / 4.20; 256x14x14: 1.41 / 1.29;
# 512x14x14: 5.48 / 8.01; 512x7x7: 1.50 / 2.18 (2 threads: 256x14x14 0.79 / 0.85). F(2x2) lost
# everywhere (1.2-4x the direct time). ResNet-50 with its six 256x14x14 layers as Winograd ran
# 3.6-4.1% slower (bench_models --switch): each transformed weight element (36 per 3x3 window,
# 4x the direct weight's bytes) is used by only P = 16 tile rows there, and the model is
# bound by its weights' memory traffic. So: 256+ channels and at least 32 tiles (256x28x28).
MIN_CHANNELS = 256
MIN_TILES = 32
MAX_WASTE = 1 / 3
# False: conv-winograd leaves every convolution alone (bench_models --switch WINOGRAD=...)
WINOGRAD = True
# None: winograd_tile's rule; 0, 2 or 4: that choice for every eligible layer (A/B figures)
FORCE_TILE: list[int | None] = [None]
# True: the transforms as products with constant matrices (three matmul kernels and two
# layout kernels); False: as sums of slices (the fuser splits them into dozens of kernels)
TRANSFORM_MATMUL = [True]


def winograd_tile(n: int, c: int, k: int, h: int, w: int) -> int:
    """The output tile ``m`` (2 or 4) for a 3x3 stride-1 convolution of ``n`` images of ``c``
    channels, ``h`` x ``w`` output, ``k`` output channels, or 0 (the direct schedule)."""
    if FORCE_TILE[0] is not None:
        return FORCE_TILE[0]
    if min(c, k) < MIN_CHANNELS:
        return 0
    for m in (4,):
        tiles = n * (-(-h // m)) * (-(-w // m))
        # NOTE: the partial edge tiles waste work (14x14 in 4x4 tiles: 31%, and it still won)
        waste = tiles * m * m / (n * h * w) - 1
        if tiles >= MIN_TILES and waste <= MAX_WASTE:
            return m
    return 0


def transform_weight(w: np.ndarray, m: int) -> np.ndarray:
    """``U[xi * alpha + nu, c, k] = (G w[k, c] G^T)[xi, nu]`` for an OIHW 3x3 weight, float32
    (the transform in float64)."""
    _, g, _ = TRANSFORMS[m]
    u = np.einsum("ai,kcij,bj->abck", g, w.astype(np.float64), g)
    a = m + 2
    return np.ascontiguousarray(u.reshape(a * a, *u.shape[2:]).astype(w.dtype))


def _call(name: str, *args: Any, span: Any = None, **attrs: Any) -> Call:
    from relay_ir.op._rules import make_call
    return make_call(name, *args, span=span, **attrs)


def _lincomb(coefs: Any, terms: list[Expr], span: Any) -> Expr:
    """``sum(c * t)`` over the non-zero coefficients (1 and -1 as adds and subtracts)."""
    pairs = [(float(c), t) for c, t in zip(coefs, terms) if c != 0]
    pairs.sort(key=lambda p: p[0] < 0)           # a positive term first where there is one
    out: Expr | None = None
    for c, t in pairs:
        mag = abs(c)
        term = t if mag == 1 else _call("multiply", t, Constant(np.array(mag, np.float32)),
                                        span=span)
        if out is None:
            out = term if c > 0 else _call("negative", term, span=span)
        else:
            out = _call("add" if c > 0 else "subtract", out, term, span=span)
    assert out is not None
    return out


def winograd_conv2d(x: Expr, w: np.ndarray, padding: tuple[int, int, int, int],
                    in_shape: tuple[int, ...], m: int, span: Any = None) -> Expr:
    """The Winograd form of ``nn.conv2d(x, w, padding)`` (NCHW, ``w`` OIHW 3x3 float32,
    stride 1, dilation 1, one group) with output tile ``m``, as operator calls."""
    bt, _, at = TRANSFORMS[m]
    alpha = m + 2
    n, c, hi, wi = in_shape
    k = w.shape[0]
    pt, pl, pb, pr = padding
    ho, wo = hi + pt + pb - 2, wi + pl + pr - 2
    th, tw = -(-ho // m), -(-wo // m)
    p = n * th * tw
    # NOTE: the padding the tiles need; the rows and columns past the convolution's own
    # padding only feed the outputs sliced off at the end
    zero = Constant(np.array(0.0, np.float32))
    xp = _call("nn.pad", x, zero, span=span,
               pad_width=((0, 0), (0, 0), (pt, m * th + 2 - hi - pt),
                          (pl, m * tw + 2 - wi - pl)))
    if TRANSFORM_MATMUL[0]:
        return _matmul_form(xp, w, m, (n, c, k, th, tw, ho, wo), span)
    d = [[_call("strided_slice", xp, span=span, begin=(0, 0, a, b),
                end=(n, c, a + m * (th - 1) + 1, b + m * (tw - 1) + 1), strides=(1, 1, m, m))
          for b in range(alpha)] for a in range(alpha)]
    # B^T d B, rows then columns
    rows = [[_lincomb(bt[xi], [d[a][b] for a in range(alpha)], span) for b in range(alpha)]
            for xi in range(alpha)]
    v = [_lincomb(bt[nu], rows[xi], span) for xi in range(alpha) for nu in range(alpha)]
    vs = _call("stack", Tuple(tuple(v), span=span), span=span, axis=0)   # [a2, N, C, th, tw]
    vt = _call("transpose", vs, span=span, axes=(0, 1, 3, 4, 2))         # [a2, N, th, tw, C]
    vr = _call("reshape", vt, span=span, newshape=(alpha * alpha, p, c))
    u = transform_weight(w, m)
    uc = Constant(u, span=span, checked_type_=TensorType(tuple(u.shape), "float32"))
    prod = _call("nn.batch_matmul", vr, uc, span=span, transpose_b=False)  # [a2, P, K]
    mm = [[_call("reshape", _call("strided_slice", prod, span=span, begin=(xi * alpha + nu,),
                                  end=(xi * alpha + nu + 1,), axes=(0,)),
                 span=span, newshape=(p, k))
           for nu in range(alpha)] for xi in range(alpha)]
    # A^T M A, rows then columns
    r2 = [[_lincomb(at[i], [mm[xi][nu] for xi in range(alpha)], span) for nu in range(alpha)]
          for i in range(m)]
    y = [_lincomb(at[j], r2[i], span) for i in range(m) for j in range(m)]
    ys = _call("stack", Tuple(tuple(y), span=span), span=span, axis=0)   # [m*m, P, K]
    y6 = _call("reshape", ys, span=span, newshape=(m, m, n, th, tw, k))
    yt = _call("transpose", y6, span=span, axes=(2, 5, 3, 0, 4, 1))      # [N, K, th, m, tw, m]
    yr = _call("reshape", yt, span=span, newshape=(n, k, th * m, tw * m))
    if th * m == ho and tw * m == wo:
        return yr
    return _call("strided_slice", yr, span=span, begin=(0, 0, 0, 0), end=(n, k, ho, wo))


def _const(a: np.ndarray, span: Any) -> Constant:
    a = np.ascontiguousarray(a.astype(np.float32))
    return Constant(a, span=span, checked_type_=TensorType(tuple(a.shape), "float32"))


def _matmul_form(xp: Expr, w: np.ndarray, m: int,
                 dims: tuple[int, ...], span: Any) -> Expr:
    """The transforms as products with the constant matrices ``kron(B^T, B^T)`` and
    ``kron(A^T, A^T)`` (one matmul kernel each, on the matmul schedule)."""
    bt, _, at = TRANSFORMS[m]
    alpha = m + 2
    a2 = alpha * alpha
    n, c, k, th, tw, ho, wo = dims
    p = n * th * tw
    # NOTE: a stack of a2 strided slices (inlined: a chain of a2 selects per element, the
    # slowest kernel of the form at 56x56; a take over a constant index table failed to
    # schedule: int32/int64 index types)
    ds = _call("stack", Tuple(tuple(
        _call("strided_slice", xp, span=span, begin=(0, 0, a, b),
              end=(n, c, a + m * (th - 1) + 1, b + m * (tw - 1) + 1), strides=(1, 1, m, m))
        for a in range(alpha) for b in range(alpha)), span=span), span=span, axis=0)
    dflat = _call("reshape", ds, span=span, newshape=(a2, n * c * th * tw))
    v = _call("nn.matmul", _const(np.kron(bt, bt), span), dflat, span=span)
    # NOTE: the tiles as the product's rows and the output channels as its columns: the
    # matmul schedule's 32-wide column panels divide K, and any number of rows tiles by 6
    # (tiles as columns, 16 or 49 of them, ran at 14-53 GFLOP/s)
    v5 = _call("reshape", v, span=span, newshape=(a2, n, c, th, tw))
    vr = _call("reshape", _call("transpose", v5, span=span, axes=(0, 1, 3, 4, 2)),
               span=span, newshape=(a2, p, c))
    u = transform_weight(w, m)                                     # [a2, C, K]
    prod = _call("nn.batch_matmul", vr, _const(u, span), span=span,
                 transpose_b=False)                                # [a2, P, K]
    flat = _call("reshape", prod, span=span, newshape=(a2, p * k))
    y = _call("nn.matmul", _const(np.kron(at, at), span), flat, span=span)   # [m*m, P*K]
    y6 = _call("reshape", y, span=span, newshape=(m, m, n, th, tw, k))
    yt = _call("transpose", y6, span=span, axes=(2, 5, 3, 0, 4, 1))      # [N, K, th, m, tw, m]
    yr = _call("reshape", yt, span=span, newshape=(n, k, th * m, tw * m))
    if th * m == ho and tw * m == wo:
        return yr
    return _call("strided_slice", yr, span=span, begin=(0, 0, 0, 0), end=(n, k, ho, wo))


def eligible(c: Call) -> tuple[np.ndarray, tuple[int, ...], tuple[int, int, int, int]] | None:
    """``(weight, input shape, padding)`` of a convolution ``conv-winograd`` may rewrite."""
    at = c.attrs
    w = c.args[1]
    xt = c.args[0].checked_type_ if hasattr(c.args[0], "checked_type_") else None
    if (type(w) is not Constant or w.data.dtype != np.float32 or w.data.ndim != 4
            or w.data.shape[2:] != (3, 3) or at.kernel_layout != "OIHW"
            or at.data_layout != "NCHW" or at.out_layout not in ("", "NCHW")
            or at.groups != 1 or at.out_dtype not in ("", None, "float32")
            or tuple(at.strides) != (1, 1) or tuple(at.dilation) != (1, 1)
            or not isinstance(xt, TensorType) or xt.dtype != "float32" or len(xt.shape) != 4
            or not all(type(s) is int for s in xt.shape) or xt.shape[1] != w.data.shape[1]):
        return None
    pad = tuple(int(v) for v in at.padding)
    if len(pad) == 1:
        pad = pad * 4
    elif len(pad) == 2:
        pad = (pad[0], pad[1], pad[0], pad[1])
    if len(pad) != 4:
        return None
    return w.data, tuple(xt.shape), pad  # type: ignore[return-value]


@dataclass(frozen=True)
class ConvWinograd(FunctionPass):
    """``nn.conv2d`` as Winograd F(m x m, 3x3) where :func:`winograd_tile` chooses it (see the
    module docstring). Changes values beyond rounding (inf in the input): ``runtime.build``
    runs it only with ``fast_math=True``, on llvm."""

    name: ClassVar[str] = "conv-winograd"
    opt_level: ClassVar[int] = 2

    def function_transformer(self, mod: IRModule, ctx: Any) -> Callable[[Function], Function]:
        return lambda fn: _Winograd().visit(fn)  # type: ignore[return-value]


class _Winograd(ExprMutator):
    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if (not WINOGRAD or type(new) is not Call or type(new.op) is not Op
                or new.op.name != "nn.conv2d"):
            return new
        # NOTE: the input's type from the original call (the mutated argument may be new)
        probe = Call(new.op, (c.args[0], new.args[1]), new.attrs, new.type_args)
        got = eligible(probe)
        if got is None:
            return new
        w, shape, pad = got
        ho, wo = shape[2] + pad[0] + pad[2] - 2, shape[3] + pad[1] + pad[3] - 2
        if ho < 1 or wo < 1:
            return new
        m = winograd_tile(shape[0], shape[1], w.shape[0], ho, wo)
        if m not in TRANSFORMS:
            return new
        return winograd_conv2d(new.args[0], w, pad, shape, m, span=new.span)
