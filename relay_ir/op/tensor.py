"""Elementwise tensor operators: unary and binary math, comparisons, logic, where, cast, clip,
constructors (zeros/ones/full and the ``*_like`` forms), copy.

Integer semantics follow TVM's: ``divide`` and ``mod`` truncate toward zero (C semantics),
``floor_divide``/``floor_mod`` round toward negative infinity; integer division by zero gives 0
(no trap). Every result keeps the dtype its relation promises (float16 stays float16).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import TypeInferenceError
from relay_ir.expr import Expr
from relay_ir.op import OpPattern
from relay_ir.op._grad import (grad_rule, op, out_shape, scalar, sum_to,
                               zero_rule, zeros_for)
from relay_ir.op import _te as T
from relay_ir.op._jvp import (jvp_linear, jvp_linear_in, jvp_multilinear, jvp_symmetric,
                              jvp_zero)
from relay_ir.op._rules import (F, broadcast_shapes, check_dtype, def_broadcast, def_elemwise,
                                defop, identity_rel, ranked_arg, same_dtype, tensor_rel, wrap)
from relay_ir.ty import TensorType, Type

_ERR = {"divide": "ignore", "over": "ignore", "invalid": "ignore", "under": "ignore"}


# ----------------------------------------------------------------------------- integer helpers
def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division rounding toward zero for integers; true division for floats."""
    if a.dtype.kind in "iu":
        if b.all():
            # NOTE: a - fmod(a, b) is an exact multiple of b, so flooring it truncates
            return np.floor_divide(a - np.fmod(a, b), b) if a.dtype.kind == "i" else a // b
        with np.errstate(**_ERR):
            q = np.floor_divide(a - np.fmod(a, b), b)
            return np.where(np.equal(b, 0), np.zeros((), a.dtype), q)
    with np.errstate(**_ERR):
        return np.true_divide(a, b)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.all():
        return np.fmod(a, b)
    with np.errstate(**_ERR):
        return np.fmod(a, b)


def _int_or_float(a: np.ndarray, b: np.ndarray, int_op: Any, float_op: Any) -> np.ndarray:
    """``int_op(a, b)`` on integers (0 where ``b`` is 0), ``float_op(a, b)`` on floats."""
    if a.dtype.kind in "iu":
        if b.all():
            return int_op(a, b)
        with np.errstate(**_ERR):
            return np.where(np.equal(b, 0), np.zeros((), a.dtype), int_op(a, b))
    with np.errstate(**_ERR):
        return float_op(a, b)


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _int_or_float(a, b, np.floor_divide, lambda a, b: np.floor(np.true_divide(a, b)))


def _floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _int_or_float(a, b, np.mod, lambda a, b: a - np.floor(np.true_divide(a, b)) * b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        if a.dtype.kind == "i" and np.any(b < 0):
            # NOTE: x ** -k on integers: 1 for x == 1, +-1 for x == -1, else 0 (truncation)
            pos = np.power(a, np.maximum(b, 0))
            odd = np.not_equal(np.mod(b, 2), 0)
            neg = np.where(np.equal(a, 1), 1, np.where(np.equal(a, -1), np.where(odd, -1, 1), 0))
            return np.where(b < 0, neg.astype(a.dtype), pos)
        with np.errstate(**_ERR):
            return np.power(a, b)
    with np.errstate(**_ERR):
        return np.power(a, b)


def _float_fn(fn):  # type: ignore[no-untyped-def]
    """Apply a float function to ints through float64 (TVM computes in the input dtype).

    Floating-point errors (log(0), overflow) follow IEEE; callers that run many ops (the
    interpreter, FoldConstant) silence numpy's warnings once around the whole run.
    """
    def g(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "iub":
            return fn(x.astype("float64"))
        return fn(x)
    return g


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # NOTE: split by sign so that exp never overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_TWO_OVER_SQRT_PI = 2.0 / np.sqrt(np.pi)


def _erf_series(a: np.ndarray) -> np.ndarray:
    """``erf(a)`` for ``0 <= a < 2.5`` in float64: ``2/sqrt(pi) exp(-a^2) sum_n (2a^2)^n a /
    (2n+1)!!`` (every term positive: no cancellation; 60 terms reach 1e-16 at ``a = 2.5``)."""
    a2 = a * a
    term = a.copy()
    acc = a.copy()
    for n in range(1, 60):
        term = term * (2.0 * a2) / (2 * n + 1)
        acc = acc + term
    return _TWO_OVER_SQRT_PI * np.exp(-a2) * acc


def _erfc_cf(a: np.ndarray) -> np.ndarray:
    """``erfc(a)`` for finite ``a >= 2.5`` in float64: the continued fraction ``exp(-a^2) /
    sqrt(pi) / (a + (1/2) / (a + 1 / (a + (3/2) / (a + ...))))``, 80 levels, evaluated
    from the bottom up."""
    f = a.copy()
    for k in range(80, 0, -1):
        f = a + (k / 2.0) / f
    return np.exp(-a * a) / np.sqrt(np.pi) / f


def erf_f64(x: np.ndarray) -> np.ndarray:
    """``erf`` in float64 (relative error below 2e-15 against ``math.erf``: every float32
    result correctly rounded); odd, ``erf(+-inf) = +-1``, NaN propagates, ``-0.0`` kept."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    r = np.ones_like(a)
    small = a < 2.5
    r[small] = _erf_series(a[small])
    mid = ~small & np.isfinite(a)
    r[mid] = 1.0 - _erfc_cf(a[mid])
    r[np.isnan(a)] = np.nan
    return np.copysign(r, x)


def erfc_f64(x: np.ndarray) -> np.ndarray:
    """``erfc(x) = 1 - erf(x)`` in float64, accurate in relative terms for large ``x``."""
    x = np.asarray(x, np.float64)
    r = 1.0 - erf_f64(x)
    far = np.isfinite(x) & (x >= 2.5)
    r[far] = _erfc_cf(x[far])
    return r


def _erf(x: np.ndarray) -> np.ndarray:
    """Reference ``erf``: computed in float64, rounded once to the input's float dtype."""
    return erf_f64(x).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def _round(x: np.ndarray) -> np.ndarray:
    # TVM rounds half away from zero; numpy rounds half to even.
    if x.dtype.kind in "iub":
        return x
    return np.sign(x) * np.floor(np.abs(x) + np.asarray(0.5, x.dtype))


def _sign(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "b":
        return x
    return np.sign(x)


def _identity_copy(x: np.ndarray) -> np.ndarray:
    return np.array(x, copy=True)


# ----------------------------------------------------------------------------- gradient rules
# Rules take (call, out, out_grad) (see relay_ir.op); ``_u``/``_b`` build unary and broadcasting
# binary rules from the local derivative(s) written with registry ops.
def _u(local):  # type: ignore[no-untyped-def]
    """A unary rule ``x => g * local(x, y, g)`` (``local`` returns the full product)."""
    @grad_rule
    def rule(call, out, g):  # type: ignore[no-untyped-def]
        return (local(call.args[0], out, g),)
    rule.__doc__ = local.__doc__
    return rule


def _mul(a: Expr, b: Expr) -> Expr:
    return op("multiply", a, b)


def _div(a: Expr, b: Expr) -> Expr:
    return op("divide", a, b)


def _sq(x: Expr) -> Expr:
    return op("multiply", x, x)


_UNARY_GRAD = {
    "exp": _u(lambda x, y, g: _mul(g, y)),
    "log": _u(lambda x, y, g: _div(g, x)),
    "log2": _u(lambda x, y, g: _div(g, _mul(x, scalar(np.log(2.0), x)))),
    "log10": _u(lambda x, y, g: _div(g, _mul(x, scalar(np.log(10.0), x)))),
    "sqrt": _u(lambda x, y, g: _div(g, _mul(scalar(2.0, x), y))),
    "rsqrt": _u(lambda x, y, g: _mul(g, _mul(scalar(-0.5, x), _div(y, x)))),
    "sigmoid": _u(lambda x, y, g: _mul(g, _mul(y, op("subtract", scalar(1.0, x), y)))),
    "tanh": _u(lambda x, y, g: _mul(g, op("subtract", scalar(1.0, x), _sq(y)))),
    "erf": _u(lambda x, y, g: _mul(g, _mul(scalar(_TWO_OVER_SQRT_PI, x),
                                          op("exp", op("negative", _sq(x)))))),
    "sin": _u(lambda x, y, g: _mul(g, op("cos", x))),
    "cos": _u(lambda x, y, g: op("negative", _mul(g, op("sin", x)))),
    "tan": _u(lambda x, y, g: _mul(g, op("add", scalar(1.0, x), _sq(y)))),
    "asin": _u(lambda x, y, g: _div(g, op("sqrt", op("subtract", scalar(1.0, x), _sq(x))))),
    "acos": _u(lambda x, y, g: op("negative", _div(
        g, op("sqrt", op("subtract", scalar(1.0, x), _sq(x)))))),
    "atan": _u(lambda x, y, g: _div(g, op("add", scalar(1.0, x), _sq(x)))),
    "sinh": _u(lambda x, y, g: _mul(g, op("cosh", x))),
    "cosh": _u(lambda x, y, g: _mul(g, op("sinh", x))),
    "asinh": _u(lambda x, y, g: _div(g, op("sqrt", op("add", _sq(x), scalar(1.0, x))))),
    "acosh": _u(lambda x, y, g: _div(g, op("sqrt", op("subtract", _sq(x), scalar(1.0, x))))),
    "atanh": _u(lambda x, y, g: _div(g, op("subtract", scalar(1.0, x), _sq(x)))),
}


def _abs_local(x: Expr, y: Expr, g: Expr) -> Expr:
    """``abs``: ``g`` where ``x >= 0`` else ``-g``."""
    return op("where", op("less", x, scalar(0.0, x)), op("negative", g), g)


_ZERO = grad_rule(zero_rule)


def _binary(da, db):  # type: ignore[no-untyped-def]
    """A broadcasting rule from the two full local adjoints, each summed to its input's shape."""
    @grad_rule
    def rule(call, out, g):  # type: ignore[no-untyped-def]
        a, b = call.args
        shape = out_shape(call)
        return (sum_to(da(a, b, out, g), shape, a), sum_to(db(a, b, out, g), shape, b))
    return rule


def _zeros_of(g: Expr) -> Expr:
    return op("zeros_like", g)


def _power_db(a: Expr, b: Expr, y: Expr, g: Expr) -> Expr:
    # NOTE: log is taken of where(a > 0, a, 1): no nan where a <= 0 (derivative taken as 0)
    pos = op("greater", a, scalar(0.0, a))
    safe = op("where", pos, a, op("ones_like", a))
    return _mul(g, _mul(y, op("log", safe)))


_BINARY_GRAD = {
    "add": _binary(lambda a, b, y, g: g, lambda a, b, y, g: g),
    "subtract": _binary(lambda a, b, y, g: g, lambda a, b, y, g: op("negative", g)),
    "multiply": _binary(lambda a, b, y, g: _mul(g, b), lambda a, b, y, g: _mul(g, a)),
    "divide": _binary(lambda a, b, y, g: _div(g, b),
                      lambda a, b, y, g: op("negative", _div(_mul(g, y), b))),
    "power": _binary(lambda a, b, y, g: _mul(g, _mul(b, op("power", a, op(
                         "subtract", b, scalar(1.0, b))))), _power_db),
    "maximum": _binary(
        lambda a, b, y, g: op("where", op("greater_equal", a, b), g, _zeros_of(g)),
        lambda a, b, y, g: op("where", op("less", a, b), g, _zeros_of(g))),
    "minimum": _binary(
        lambda a, b, y, g: op("where", op("less_equal", a, b), g, _zeros_of(g)),
        lambda a, b, y, g: op("where", op("greater", a, b), g, _zeros_of(g))),
    "floor_divide": _ZERO,
    "mod": _binary(lambda a, b, y, g: g,
                   lambda a, b, y, g: op("negative", _mul(g, op("trunc", _div(a, b))))),
    "floor_mod": _binary(lambda a, b, y, g: g,
                         lambda a, b, y, g: op("negative", _mul(g, op("floor", _div(a, b))))),
}



# ----------------------------------------------------------------------------- JVP rules
def _bjvp(local):  # type: ignore[no-untyped-def]
    """A binary JVP rule from ``local(a, b, out, ta, tb)`` (broadcasting like the op)."""
    def rule(call, out, t):  # type: ignore[no-untyped-def]
        a, b = call.args
        return local(a, b, out, t[0], t[1])
    rule.__doc__ = local.__doc__
    return rule


_BINARY_JVP = {
    "add": jvp_linear,
    "subtract": jvp_linear,
    "multiply": jvp_multilinear,
    "divide": _bjvp(lambda a, b, y, ta, tb: _div(op("subtract", ta, _mul(y, tb)), b)),
    "power": _bjvp(lambda a, b, y, ta, tb: op("add", _mul(ta, _mul(b, op("power", a, op(
        "subtract", b, scalar(1.0, b))))), _power_db(a, b, y, tb))),
    "maximum": _bjvp(lambda a, b, y, ta, tb: op("where", op("greater_equal", a, b), ta, tb)),
    "minimum": _bjvp(lambda a, b, y, ta, tb: op("where", op("less_equal", a, b), ta, tb)),
    "floor_divide": jvp_zero,
    "mod": _bjvp(lambda a, b, y, ta, tb: op("subtract", ta,
                                             _mul(tb, op("trunc", _div(a, b))))),
    "floor_mod": _bjvp(lambda a, b, y, ta, tb: op("subtract", ta,
                                                   _mul(tb, op("floor", _div(a, b))))),
}

# ----------------------------------------------------------------------------- TE computes
# Each ``*_te(attrs, inputs, out_type)`` builds the operator's tensor expression (relay_ir.op).
def _float_te(name: str):  # type: ignore[no-untyped-def]
    """Compute for a float function: fast form for float32 where enabled; float16 via float32."""
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        dt = T.dtype_of(x)
        tirx = T.tir_mod()
        if name == "erf" and dt in ("float16", "float32") and (
                dt == "float16" or T.use_fast(name, dt)):
            return T.fast_erf_tensor(x)
        if dt == "float32" and T.use_fast(name, dt) and name in ("exp", "tanh", "sigmoid"):
            if name == "exp":
                return T.fast_exp_tensor(x)
            if name == "tanh":
                return T.elemwise(T.tanh_f32, x, name="T_tanh")
            return T.elemwise(T.sigmoid_f32, x, name="T_sigmoid")
        fn = getattr(tirx, name)
        if dt == "float16":
            return T.elemwise(lambda v: T.cast(fn(T.cast(v, "float32")), dt), x)
        return T.unary_float(x, fn, dt)
    compute.__doc__ = f"TE compute of ``{name}``."
    return compute


def _elem_te(fn, doc: str):  # type: ignore[no-untyped-def]
    """Compute applying ``fn(value, dtype)`` elementwise (result: ``out_type``'s dtype)."""
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        dt = T.dtype_of(x)
        return T.elemwise(lambda v: fn(v, dt), x)
    compute.__doc__ = doc
    return compute


def _negative_e(v, dt):  # type: ignore[no-untyped-def]
    if dt == "bool":
        return v  # numpy: -True is an error, negative(bool) keeps the value through wrap
    if dt.startswith("uint"):
        # NOTE: TVM's simplifier folds ``0 - v`` on wide unsigned ints to 0; ~v + 1 wraps
        return T.tir_mod().bitwise_not(v) + T.const(1, dt)
    return T.const(0, dt) - v


def _abs_e(v, dt):  # type: ignore[no-untyped-def]
    if dt == "bool" or dt.startswith("uint"):
        return v
    if T.is_float(dt):
        return T.tir_mod().abs(v)
    return T.select(v < T.const(0, dt), T.const(0, dt) - v, v)


def _rounding_e(name: str):  # type: ignore[no-untyped-def]
    def fn(v, dt):  # type: ignore[no-untyped-def]
        if not T.is_float(dt):
            return v
        return getattr(T.tir_mod(), name)(v)
    return fn


def _round_e(v, dt):  # type: ignore[no-untyped-def]
    if not T.is_float(dt):
        return v
    tirx = T.tir_mod()
    # sign(x) * floor(|x| + 0.5), exactly the reference's formula (half away from zero)
    r = tirx.floor(tirx.abs(v) + T.const(0.5, dt))
    return T.select(v < T.const(0, dt), -r, T.select(v > T.const(0, dt), r, v * T.const(0, dt)))


def _sign_e(v, dt):  # type: ignore[no-untyped-def]
    if dt == "bool":
        return v
    zero = T.const(0, dt)
    one = T.const(1, dt)
    if dt.startswith("uint"):
        return T.select(v > zero, one, zero)
    return T.select(v > zero, one, T.select(v < zero, T.const(-1, dt), v))


def _logical_not_e(v, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().Not(T.cast(v, "bool")) if dt == "bool" else T.cast(
        T.tir_mod().EQ(v, T.const(0, dt)), dt)


def _bitwise_not_e(v, dt):  # type: ignore[no-untyped-def]
    if dt == "bool":
        return T.tir_mod().Not(v)
    return T.tir_mod().bitwise_not(v)


def _float_pred_te(name: str):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        dt = T.dtype_of(x)
        fn = getattr(T.tir_mod(), name)
        if not T.is_float(dt):
            return T.elemwise(lambda v: T.const(name == "isfinite", "bool"), x)
        return T.elemwise(fn, x)
    compute.__doc__ = f"TE compute of ``{name}`` (bool result)."
    return compute


def _fill_like_te(value: int):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        return T.elemwise(lambda v: T.const(value, T.dtype_of(x)), x)
    compute.__doc__ = f"TE compute of a tensor of {value}s like the input."
    return compute


def power_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``power``: wide integers use an opaque squaring loop (see _te)."""
    a, b = inputs
    dt = T.dtype_of(a)
    if dt in ("int32", "int64", "uint32", "uint64"):
        return T.int_power_tensor(a, b)
    return T.broadcast(lambda u, v: _power_b(u, v, dt), [a, b])


def _binary_te(fn, doc: str, out_dtype: str | None = None):  # type: ignore[no-untyped-def]
    """Broadcasting compute of ``fn(a, b, dtype)``; the result is cast to ``out_dtype``."""
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        a, b = inputs
        dt = T.dtype_of(a)
        if out_dtype is None:
            return T.broadcast(lambda u, v: fn(u, v, dt), [a, b])
        return T.broadcast(lambda u, v: T.cast(fn(u, v, dt), out_dtype), [a, b])
    compute.__doc__ = doc
    return compute


def _add_b(u, v, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().Or(u, v) if dt == "bool" else u + v


def _sub_b(u, v, dt):  # type: ignore[no-untyped-def]
    # NOTE: opaque: TVM would fold float x - x and (x + y) - y (wrong for inf/nan)
    return T.tir_mod().bitwise_xor(u, v) if dt == "bool" else u - T.opaque(v)


def _mul_b(u, v, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().And(u, v) if dt == "bool" else u * v


def _via_f64(fn):  # type: ignore[no-untyped-def]
    """Apply a float formula to bools through float64 (numpy's promotion), back to bool."""
    def g(u, v, dt):  # type: ignore[no-untyped-def]
        if dt != "bool":
            return fn(u, v, dt)
        return T.cast(fn(T.cast(u, "float64"), T.cast(v, "float64"), "float64"), "bool")
    return g


@_via_f64
def _div_b(u, v, dt):  # type: ignore[no-untyped-def]
    return u / v if T.is_float(dt) else T.trunc_div(u, v)


@_via_f64
def _floordiv_b(u, v, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().floor(u / v) if T.is_float(dt) else T.floor_div(u, v)


def _mod_b(u, v, dt):  # type: ignore[no-untyped-def]
    tirx = T.tir_mod()
    if dt in ("float16", "float32"):
        # NOTE: LLVM has no fmod intrinsic here; in float64 the quotient and product are exact
        u64, v64 = T.cast(u, "float64"), T.cast(v, "float64")
        return T.cast(u64 - tirx.trunc(u64 / v64) * v64, dt)
    if dt == "float64":
        return u - tirx.trunc(u / v) * v
    if dt == "bool":
        return T.const(False, "bool")
    return T.trunc_mod(u, v)


@_via_f64
def _floormod_b(u, v, dt):  # type: ignore[no-untyped-def]
    return u - T.tir_mod().floor(u / v) * v if T.is_float(dt) else T.floor_mod(u, v)


def _power_b(u, v, dt):  # type: ignore[no-untyped-def]
    if T.is_float(dt):
        tirx = T.tir_mod()
        if dt == "float16":
            return T.cast(tirx.power(T.cast(u, "float32"), T.cast(v, "float32")), dt)
        return tirx.power(u, v)
    return T.int_power(u, v)


def _max_b(u, v, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().Or(u, v) if dt == "bool" else T.maximum(u, v)  # NOTE: NaN propagates


def _min_b(u, v, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().And(u, v) if dt == "bool" else T.minimum(u, v)


def _logical_b(kind: str):  # type: ignore[no-untyped-def]
    def fn(u, v, dt):  # type: ignore[no-untyped-def]
        tirx = T.tir_mod()
        bu, bv = T.cast(u, "bool"), T.cast(v, "bool")
        r = {"and": tirx.And, "or": tirx.Or, "xor": T.ne}[kind](bu, bv)
        return T.cast(r, dt)
    return fn


def _bitwise_b(kind: str):  # type: ignore[no-untyped-def]
    def fn(u, v, dt):  # type: ignore[no-untyped-def]
        tirx = T.tir_mod()
        if dt == "bool":
            return {"and": tirx.And, "or": tirx.Or, "xor": T.ne}[kind](u, v)
        return {"and": tirx.bitwise_and, "or": tirx.bitwise_or,
                "xor": tirx.bitwise_xor}[kind](u, v)
    return fn


def _compare_b(kind: str):  # type: ignore[no-untyped-def]
    def fn(u, v, dt):  # type: ignore[no-untyped-def]
        tirx = T.tir_mod()
        if dt == "bool":
            u, v = T.cast(u, "int8"), T.cast(v, "int8")
        else:
            v = T.opaque(v)  # NOTE: TVM folds float x == x to true, x != x to false
            if kind == "not_equal":
                # NOTE: TVM emits the ordered `fcmp one` for !=, false when a NaN is involved;
                # numpy's != is IEEE's unordered one (true for NaN)
                return tirx.Or(tirx.NE(u, v), tirx.Or(tirx.isnan(u), tirx.isnan(v)))
        return {"less": tirx.LT, "greater": tirx.GT, "less_equal": tirx.LE,
                "greater_equal": tirx.GE, "equal": tirx.EQ, "not_equal": tirx.NE}[kind](u, v)
    return fn


def where_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``where`` (a non-bool condition is ``!= 0``)."""
    c, x, y = inputs
    return T.broadcast(lambda cv, xv, yv: T.select(T.cast(cv, "bool"), xv, yv), [c, x, y],
                       name="T_where")


def cast_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``cast`` (numpy ``astype``)."""
    return T.elemwise(lambda v: T.cast(v, out_type.dtype), inputs[0], name="T_cast")


def cast_like_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``cast_like``."""
    return T.elemwise(lambda v: T.cast(v, out_type.dtype), inputs[0], name="T_cast")


def clip_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``clip`` (bounds converted like the reference)."""
    x = inputs[0]
    dt = np.dtype(T.dtype_of(x))
    lo = T.const(_clip_bound(attrs.a_min, dt), dt.name)
    hi = T.const(_clip_bound(attrs.a_max, dt), dt.name)
    tirx = T.tir_mod()
    if dt.kind == "b":
        return T.elemwise(lambda v: tirx.And(tirx.Or(v, lo), hi), x, name="T_clip")
    # NOTE: np.minimum(np.maximum(x, lo), hi) as numpy computes it (NaN propagates)
    return T.elemwise(lambda v: T.minimum(T.maximum(v, lo), hi), x, name="T_clip")


def _init_te(value: int):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te = T.te_mod()
        return te.compute(tuple(attrs.shape), lambda *i: T.const(value, attrs.dtype),
                          name="T_full")
    compute.__doc__ = f"TE compute of a constant tensor of {value}s."
    return compute


def full_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``full``: the 0-d value converted to the result dtype."""
    te = T.te_mod()
    v = inputs[0]
    return te.compute(tuple(attrs.shape), lambda *i: T.cast(v(), out_type.dtype), name="T_full")


def full_like_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``full_like``."""
    x, v = inputs
    return T.elemwise(lambda e: T.cast(v(), T.dtype_of(x)), x, name="T_full")


def shape_of_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``shape_of`` (symbolic dims are read at run time)."""
    te = T.te_mod()
    x = inputs[0]
    dims = list(x.shape)
    dt = out_type.dtype

    def body(i):  # type: ignore[no-untyped-def]
        r = T.cast(dims[-1], dt) if dims else T.const(0, dt)
        for k in range(len(dims) - 2, -1, -1):
            r = T.select(i == k, T.cast(dims[k], dt), r)
        return r
    return te.compute((len(dims),), body, name="T_shape")


def _copy_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of an elementwise copy."""
    return T.elemwise(lambda v: v, inputs[0], name="T_copy")


# ----------------------------------------------------------------------------- unary math
_UNARY_FLOAT = {
    "exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
    "rsqrt": _rsqrt, "sigmoid": _sigmoid, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": _erf,
}
_UNARY_DOC = {
    "erf": "Gauss error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt`` (odd; ``+-inf`` "
           "gives ``+-1``). float32/float16 kernels use a vectorized rational approximation "
           "(max relative error 3.7e-7).",
}
for _name, _fn in _UNARY_FLOAT.items():
    def_elemwise(_name, _float_fn(_fn), doc=_UNARY_DOC.get(_name, f"Elementwise ``{_name}``."),
                 grad=_UNARY_GRAD[_name], jvp=jvp_symmetric, compute=_float_te(_name))

def_elemwise("negative", np.negative, doc="Elementwise ``-x``.",
             grad=_u(lambda x, y, g: op("negative", g)), jvp=jvp_linear,
             compute=_elem_te(_negative_e, "TE compute of ``negative``."))
def_elemwise("abs", np.abs, doc="Elementwise absolute value.", grad=_u(_abs_local),
             jvp=jvp_symmetric,
             compute=_elem_te(_abs_e, "TE compute of ``abs``."))
def_elemwise("floor", np.floor, doc="Round toward negative infinity (identity on integers).",
             grad=_ZERO,
             jvp=jvp_zero, compute=_elem_te(_rounding_e("floor"), "TE compute of ``floor``."))
def_elemwise("ceil", np.ceil, doc="Round toward positive infinity (identity on integers).",
             grad=_ZERO,
             jvp=jvp_zero, compute=_elem_te(_rounding_e("ceil"), "TE compute of ``ceil``."))
def_elemwise("trunc", np.trunc, doc="Round toward zero (identity on integers).", grad=_ZERO,
             jvp=jvp_zero,
             compute=_elem_te(_rounding_e("trunc"), "TE compute of ``trunc``."))
def_elemwise("round", _round, doc="Round half away from zero.", grad=_ZERO, jvp=jvp_zero,
             compute=_elem_te(_round_e, "TE compute of ``round``."))
def_elemwise("sign", _sign, doc="Elementwise sign (-1, 0, 1).", grad=_ZERO, jvp=jvp_zero,
             compute=_elem_te(_sign_e, "TE compute of ``sign``."))
def_elemwise("copy", _identity_copy, doc="A copy of the input.",
             grad=_u(lambda x, y, g: g), jvp=jvp_linear, compute=_copy_te)
def_elemwise("logical_not", np.logical_not, doc="Elementwise logical not.",
             non_differentiable=True,
             compute=_elem_te(_logical_not_e, "TE compute of ``logical_not``."))
def_elemwise("bitwise_not", np.invert, doc="Elementwise bitwise not (integers, bool).",
             non_differentiable=True,
             compute=_elem_te(_bitwise_not_e, "TE compute of ``bitwise_not``."))
def_elemwise("zeros_like", lambda x: np.zeros(x.shape, x.dtype),
             doc="Zeros of the input's type.", non_differentiable=True, compute=_fill_like_te(0))
def_elemwise("ones_like", lambda x: np.ones(x.shape, x.dtype),
             doc="Ones of the input's type.", non_differentiable=True, compute=_fill_like_te(1))
def_elemwise("stop_gradient", _identity_copy, doc="Identity whose gradient is zero.",
             grad=_ZERO, jvp=jvp_zero, compute=_copy_te)
for _name, _fn in {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}.items():
    def_elemwise(_name, _float_fn(_fn), out_dtype="bool", non_differentiable=True,
                 doc=f"Elementwise ``{_name}`` (bool result).", compute=_float_pred_te(_name))


# ----------------------------------------------------------------------------- binary math
_BINARY_MATH = [  # name, numpy reference, TE body, doc
    ("add", np.add, _add_b, "Broadcasting ``a + b``."),
    ("subtract", np.subtract, _sub_b, "Broadcasting ``a - b``."),
    ("multiply", np.multiply, _mul_b, "Broadcasting ``a * b``."),
    ("divide", _trunc_div, _div_b, "Broadcasting ``a / b`` (integers truncate toward 0)."),
    ("floor_divide", _floor_div, _floordiv_b, "Broadcasting division rounding down."),
    ("mod", _trunc_mod, _mod_b, "Remainder of truncating division (sign of ``a``)."),
    ("floor_mod", _floor_mod, _floormod_b, "Remainder of flooring division (sign of ``b``)."),
    ("power", _power, None, "Broadcasting ``a ** b``."),
    ("maximum", np.maximum, _max_b, "Broadcasting elementwise maximum."),
    ("minimum", np.minimum, _min_b, "Broadcasting elementwise minimum."),
]
for _name, _fn, _body, _doc in _BINARY_MATH:
    def_broadcast(_name, _fn, doc=_doc, grad=_BINARY_GRAD[_name], jvp=_BINARY_JVP[_name],
                  compute=power_te if _body is None else
                  _binary_te(_body, f"TE compute of ``{_name}``."))
for _family, _make_body in (("logical", _logical_b), ("bitwise", _bitwise_b)):
    for _kind in ("and", "or", "xor"):
        _name = f"{_family}_{_kind}"
        def_broadcast(_name, getattr(np, _name), doc=f"Broadcasting {_family} {_kind}.",
                      non_differentiable=True,
                      compute=_binary_te(_make_body(_kind), f"TE compute of ``{_name}``."))
for _name, _fn in {"less": np.less, "greater": np.greater, "less_equal": np.less_equal,
                   "greater_equal": np.greater_equal, "equal": np.equal,
                   "not_equal": np.not_equal}.items():
    def_broadcast(_name, _fn, out_dtype="bool", non_differentiable=True,
                  doc=f"Broadcasting comparison ``{_name}`` (bool result).",
                  compute=_binary_te(_compare_b(_name), f"TE compute of ``{_name}``."))


# ----------------------------------------------------------------------------- where, cast, clip
@tensor_rel("condition", "x", "y")
def where_rel(c: TensorType, x: TensorType, y: TensorType, attrs: Attrs) -> Type | None:
    """``where(cond, x, y)``: three-way broadcast; x and y share a dtype (the result's)."""
    dtype = same_dtype(x, y)
    shape = broadcast_shapes(broadcast_shapes(c.shape, x.shape), y.shape)
    return TensorType(shape, dtype)


def where_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.where`` with the dtype of ``x``."""
    c, x, y = args
    if c.dtype != np.bool_:
        c = c.astype(bool)
    return wrap(np.where(c, x, y), x.dtype)


@grad_rule
def where_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``where(c, x, y)``: zero for ``c``; ``g`` routed to the selected side, summed to shape."""
    c, x, y = call.args
    z = op("zeros_like", g)
    shape = out_shape(call)
    return (zeros_for(c), sum_to(op("where", c, g, z), shape, x),
            sum_to(op("where", c, z, g), shape, y))


defop("where", 3, rel=where_rel, impl=where_ref, pattern=OpPattern.BROADCAST, grad=where_grad,
      jvp=jvp_linear_in(1, 2),
      compute=where_te,
      doc="Select from ``x`` where ``cond`` holds, else from ``y`` (broadcasting).")


@tensor_rel("data")
def cast_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``cast(x, dtype)``: same shape, the new dtype."""
    return TensorType(t.shape, check_dtype(attrs.dtype))


def cast_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``astype`` (floats to integers truncate toward zero)."""
    with np.errstate(**_ERR):
        return np.asarray(args[0]).astype(attrs.dtype)


@grad_rule
def cast_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``cast(x)``: ``g`` cast back to ``x``'s dtype (zero for integer ``x``)."""
    x = call.args[0]
    return (op("cast_like", g, x),)


defop("cast", 1, grad=cast_grad, jvp=jvp_linear,
      attrs=[F("dtype", "dtype", None, "the target dtype")], attrs_type="CastAttrs",
      rel=cast_rel, impl=cast_ref, pattern=OpPattern.ELEMWISE, compute=cast_te,
      doc="Convert to another dtype.",
      required=("dtype",))


@tensor_rel("data", "dtype_like")
def cast_like_rel(data: TensorType, dtype_like: TensorType, attrs: Attrs) -> Type | None:
    """``cast_like(x, like)``: the shape of ``x``, the dtype of ``like``."""
    return TensorType(data.shape, dtype_like.dtype)


@grad_rule
def cast_like_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``cast_like(x, like)``: ``g`` cast back to ``x``'s dtype; zero for ``like``."""
    x, like = call.args
    return (op("cast_like", g, x), zeros_for(like))


defop("cast_like", 2, rel=cast_like_rel, grad=cast_like_grad,
      jvp=jvp_linear_in(0), compute=cast_like_te,
      impl=lambda args, attrs: args[0].astype(args[1].dtype), pattern=OpPattern.ELEMWISE,
      doc="Convert to the dtype of the second argument.")


def _clip_bound(v: float, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if v != v:
            return np.asarray(0, dtype)
        v = min(max(v, float(info.min)), float(info.max))
        return np.asarray(int(v), dtype)
    if dtype.kind == "b":
        return np.asarray(bool(v), dtype)
    return np.asarray(v, dtype)


def clip_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Clamp into ``[a_min, a_max]`` (bounds converted to the input dtype first)."""
    x = args[0]
    lo, hi = _clip_bound(attrs.a_min, x.dtype), _clip_bound(attrs.a_max, x.dtype)
    return wrap(np.minimum(np.maximum(x, lo), hi), x.dtype)


@grad_rule
def clip_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``clip(x)``: ``g`` where ``a_min <= x <= a_max``, else zero."""
    x = call.args[0]
    inside = op("logical_and", op("greater_equal", x, scalar(call.attrs.a_min, x)),
                op("less_equal", x, scalar(call.attrs.a_max, x)))
    return (op("where", inside, g, op("zeros_like", g)),)


defop("clip", 1, grad=clip_grad, jvp=jvp_symmetric, attrs=[F("a_min", "float", None, "lower bound"),
                        F("a_max", "float", None, "upper bound")],
      attrs_type="ClipAttrs", rel=identity_rel, impl=clip_ref, pattern=OpPattern.ELEMWISE,
      compute=clip_te,
      doc="Clamp every element into ``[a_min, a_max]``.",
      required=("a_min", "a_max"))


# ----------------------------------------------------------------------------- constructors
def _init_shape(attrs: Attrs, name: str) -> tuple[int, ...]:
    if attrs.shape is None:
        raise TypeInferenceError(f"{name} needs a shape attribute")
    for d in attrs.shape:
        if d < 0:
            raise TypeInferenceError(f"{name}: negative dimension {d} in shape {attrs.shape}")
    return tuple(attrs.shape)


def _init_rel(name: str):  # type: ignore[no-untyped-def]
    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
        return TensorType(_init_shape(attrs, name), check_dtype(attrs.dtype))
    rel.__doc__ = f"``{name}(shape, dtype)``: ``Tensor[shape, dtype]``."
    return rel


_INIT_ATTRS = [F("shape", "ints", None, "the result shape"),
               F("dtype", "dtype", "float32", "the result dtype")]

# NOTE: ``symbolic=True`` marks the zeros reverse-mode AD starts adjoint cells from ("no
# contribution", JAX's symbolic Zero): the same value, but optimization may drop such a zero
# as an absent term (``x + z => x``, ``x * z => z``) where IEEE would keep inf, nan or -0.0.
_ZEROS_ATTRS = _INIT_ATTRS + [F("symbolic", "bool", False,
                                "an AD 'no contribution' zero that optimization may drop")]

defop("zeros", 0, attrs=_ZEROS_ATTRS, attrs_type="InitOpAttrs", rel=_init_rel("zeros"),
      impl=lambda args, attrs: np.zeros(attrs.shape, attrs.dtype), pattern=OpPattern.ELEMWISE,
      doc="A tensor of zeros.", non_differentiable=True, compute=_init_te(0))
defop("ones", 0, attrs=_INIT_ATTRS, attrs_type="InitOpAttrs", rel=_init_rel("ones"),
      impl=lambda args, attrs: np.ones(attrs.shape, attrs.dtype), pattern=OpPattern.ELEMWISE,
      doc="A tensor of ones.", non_differentiable=True, compute=_init_te(1))


def full_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``full(value, shape, dtype)``: ``value`` is 0-d; dtype "" means the value's dtype."""
    v = ranked_arg(arg_types[0], "full", "fill_value", 0)
    if v is None:
        return None
    dtype = attrs.dtype or v.dtype
    return TensorType(_init_shape(attrs, "full"), check_dtype(dtype))


def full_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.full`` in the result dtype."""
    v = args[0]
    return np.full(attrs.shape, v, dtype=attrs.dtype or v.dtype)


@grad_rule
def full_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``full(v)``: the sum of ``g``, in ``v``'s dtype."""
    v = call.args[0]
    return (op("cast_like", op("sum", g), v),)


defop("full", 1, grad=full_grad,
      jvp=jvp_linear, attrs=[F("shape", "ints", None, "the result shape"),
                        F("dtype", "dtype", "", "the result dtype (\"\": the value's)")],
      attrs_type="InitOpAttrs", rel=full_rel, impl=full_ref, pattern=OpPattern.ELEMWISE,
      compute=full_te,
      doc="A tensor filled with a scalar value.")


@tensor_rel("data", "fill_value")
def full_like_rel(data: TensorType, fill_value: TensorType, attrs: Attrs) -> Type | None:
    """``full_like(x, value)``: the type of ``x``; ``value`` is 0-d."""
    if fill_value.ndim != 0:
        raise TypeInferenceError("full_like: fill_value must be a scalar")
    return data


@grad_rule
def full_like_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``full_like(x, v)``: zero for ``x``; the sum of ``g`` for ``v``."""
    x, v = call.args
    return (zeros_for(x), op("cast_like", op("sum", g), v))


defop("full_like", 2, rel=full_like_rel, grad=full_like_grad, jvp=jvp_linear_in(1),
      impl=lambda args, attrs: np.full(args[0].shape, args[1], dtype=args[0].dtype),
      pattern=OpPattern.ELEMWISE, doc="A tensor like ``x`` filled with a scalar value.",
      compute=full_like_te)


@tensor_rel("data")
def shape_of_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``shape_of(x)``: ``Tensor[(rank,), dtype]``."""
    return TensorType((t.ndim,), check_dtype(attrs.dtype))


defop("shape_of", 1, attrs=[F("dtype", "dtype", "int32", "the result dtype")],
      attrs_type="ShapeOfAttrs", rel=shape_of_rel,
      impl=lambda args, attrs: np.asarray(args[0].shape, dtype=attrs.dtype),
      pattern=OpPattern.OPAQUE, doc="The shape of a tensor as a 1-d tensor.", compute=shape_of_te,
      non_differentiable=True)
