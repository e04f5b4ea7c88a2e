"""Reductions: sum, mean, max, min, prod, all, any, argmax, argmin, variance.

All take ``axis`` (None: every axis), ``keepdims`` and ``exclude`` (reduce every axis *except*
``axis``) as Relay's ReduceAttrs. Results keep the input dtype, except argmax/argmin (int32).
``mean`` of integers truncates like integer ``divide``; float16 reductions accumulate in
float32 and round back to float16.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import TypeInferenceError
from relay_ir.op import OpPattern
from relay_ir.op._jvp import jvp_linear, jvp_reduce
from relay_ir.op import _te as T
from relay_ir.op._rules import (F, defop, reduce_axes, reduce_rel, reduce_shape, same_dtype,
                                tensor_arg, tensor_args, wrap)
from relay_ir.op._grad import (grad_rule, keep_reduced, op, scalar, static_shape, tensor_type,
                               )
from relay_ir.ty import TensorType, Type

_REDUCE_ATTRS = [
    F("axis", "ints?", None, "axes to reduce (None: all)"),
    F("keepdims", "bool", False, "keep reduced axes as size 1"),
    F("exclude", "bool", False, "reduce every axis except those in axis"),
]


def _axes(x: np.ndarray, attrs: Attrs) -> tuple[int, ...]:
    return tuple(reduce_axes(x.ndim, attrs.axis, attrs.exclude))


def _acc_dtype(dt: np.dtype) -> np.dtype | None:
    return np.dtype("float32") if dt == np.float16 else None


def _simple(np_fn: Callable[..., np.ndarray]) -> Callable[[list, Attrs], np.ndarray]:
    def impl(args: list, attrs: Attrs) -> np.ndarray:
        x = args[0]
        acc = _acc_dtype(x.dtype)
        xa = x if acc is None else x.astype(acc)
        return wrap(np_fn(xa, axis=_axes(x, attrs), keepdims=attrs.keepdims), x.dtype)
    return impl


def _sum(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _prod(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _max(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    return np.max(x, axis=axis, keepdims=keepdims) if axis else x.copy()


def _min(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    return np.min(x, axis=axis, keepdims=keepdims) if axis else x.copy()


def mean_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Sum divided by the reduced element count (integers truncate)."""
    x = args[0]
    axes = _axes(x, attrs)
    count = 1
    for a in axes:
        count *= x.shape[a]
    acc = _acc_dtype(x.dtype)
    xa = x if acc is None else x.astype(acc)
    s = np.sum(xa, axis=axes, keepdims=attrs.keepdims, dtype=xa.dtype)
    if x.dtype.kind in "iu":
        s = np.asarray(s)
        neg = s < 0
        q = np.abs(s) // count if count else np.zeros_like(s)
        return wrap(np.where(neg, -q, q), x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return wrap(np.true_divide(s, count), x.dtype)


def _check_bool_rel(name: str) -> Callable[..., Type | None]:
    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
        t = tensor_arg(arg_types[0], "data")
        if t is None:
            return None
        if t.dtype != "bool":
            raise TypeInferenceError(f"{name} expects a bool tensor, found {t.dtype}")
        return reduce_rel(arg_types, attrs)
    rel.__doc__ = f"``{name}(x: bool tensor)``: the reduced shape, bool."
    return rel


# ----------------------------------------------------------------------------- gradient rules
def _reduced(call) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """The axes a reduction call removes and the input's rank."""
    x = call.args[0]
    nd = tensor_type(x).ndim
    return reduce_axes(nd, call.attrs.axis, call.attrs.exclude), nd


def _expand(call, e):  # type: ignore[no-untyped-def]
    """A reduced value with its reduced axes restored as size 1 (broadcasts against x)."""
    axes, nd = _reduced(call)
    return keep_reduced(e, nd, axes, call.attrs.keepdims)


@grad_rule
def sum_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``sum(x)``: ``g`` re-expanded and broadcast to ``x``."""
    x = call.args[0]
    return (op("broadcast_to_like", _expand(call, g), x),)


def _count(call) -> int:  # type: ignore[no-untyped-def]
    axes, _ = _reduced(call)
    shape = static_shape(call.args[0], call)
    n = 1
    for a in axes:
        n *= shape[a]
    return n


@grad_rule
def mean_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``mean(x)``: ``g / count`` re-expanded and broadcast to ``x``."""
    x = call.args[0]
    if all(isinstance(d, int) for d in tensor_type(x).shape):
        scaled = op("multiply", _expand(call, g), scalar(1.0 / max(_count(call), 1), x))
        return (op("broadcast_to_like", scaled, x),)
    # NOTE: symbolic dims: the count is computed at run time
    axes, _ = _reduced(call)
    count = op("sum", op("ones_like", x), axis=axes, keepdims=True)
    return (op("divide", op("broadcast_to_like", _expand(call, g), x), count),)


def _extremum_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``max``/``min``: ``g`` split evenly among the elements equal to the extremum."""
    x = call.args[0]
    hit = op("equal", x, _expand(call, out))
    ind = op("where", hit, op("ones_like", x), op("zeros_like", x))
    axes, _ = _reduced(call)
    count = op("sum", ind, axis=axes, keepdims=True)
    return (op("multiply", ind, op("divide", _expand(call, g), count)),)


@grad_rule
def prod_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``prod(x)``: ``g`` times the product of the *other* elements, exact with zeros.

    With ``nz`` the number of zeros among the reduced elements, ``P`` the product of the
    nonzero ones and ``Z`` the product of the zeros (0 with a zero, 1 without), the product of
    the elements other than ``x_i`` is ``P / x_i * Z`` for a nonzero ``x_i`` and ``P * [nz ==
    1]`` for a zero one. No division by zero (``P / 1`` where ``x_i`` is 0), so no NaN or inf
    where ``x`` has zeros; ``Z`` keeps the rule a product of ``x``'s elements where ``nz <= 1``,
    so the gradient of the gradient is exact there too.
    """
    x = call.args[0]
    a = call.attrs
    ones, zeros = op("ones_like", x), op("zeros_like", x)
    zero = op("equal", x, zeros)
    nonzeros = op("where", zero, ones, x)

    def reduce(name, e):  # type: ignore[no-untyped-def]
        return op(name, e, axis=a.axis, keepdims=True, exclude=a.exclude)
    p_nonzero = reduce("prod", nonzeros)
    p_zero = reduce("prod", op("where", zero, x, ones))
    count = reduce("sum", op("where", zero, ones, zeros))
    lone = op("where", op("equal", count, op("ones_like", count)), op("ones_like", count),
              op("zeros_like", count))
    others = op("where", zero, op("broadcast_to_like", lone, x),
                op("broadcast_to_like", p_zero, x))
    return (op("multiply", op("multiply", _expand(call, g), p_nonzero),
               op("divide", others, nonzeros)),)


@grad_rule
def variance_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``variance(x, m)``: ``2 (x - m) g / (n - unbiased)`` for x, minus its collapse for m."""
    x, m = call.args
    n = _count(call) - int(call.attrs.unbiased)
    d = op("subtract", x, m)
    gx = op("multiply", op("multiply", d, _expand(call, g)), scalar(2.0 / max(n, 1), x))
    return (gx, op("negative", op("collapse_sum_like", gx, m)))


_REDUCE_GRAD = {"sum": sum_grad, "mean": mean_grad, "max": grad_rule(_extremum_grad),
                "min": grad_rule(_extremum_grad), "prod": prod_grad}


# ----------------------------------------------------------------------------- TE computes
def _reduce_te(kind: str):  # type: ignore[no-untyped-def]
    """Compute of a plain reduction (float16 accumulates in float32; bools as or/and)."""
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        dt = T.dtype_of(x)
        axes = reduce_axes(len(x.shape), attrs.axis, attrs.exclude)
        if dt == "bool":
            k = {"sum": "max", "prod": "min"}.get(kind, kind)
            r = T.reduce(x, axes, attrs.keepdims, k, acc_dtype="int8")
            return T.cast_tensor(r, "bool")
        acc = "float32" if dt == "float16" else dt
        return T.cast_tensor(T.reduce(x, axes, attrs.keepdims, kind, acc_dtype=acc), dt)
    compute.__doc__ = f"TE compute of ``{kind}``."
    return compute


def _count_te(x: object, axes: Sequence[int]) -> object:
    return T.shape_size([T.shape_of(x)[a] for a in axes])


def mean_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``mean`` (integers: wrapping sum, truncating division; count 0 gives 0)."""
    x = inputs[0]
    dt = T.dtype_of(x)
    axes = reduce_axes(len(x.shape), attrs.axis, attrs.exclude)
    n = _count_te(x, axes)
    if dt == "bool":
        s = T.reduce(x, axes, attrs.keepdims, "max", acc_dtype="int8")
        return T.elemwise(lambda v: T.cast(v, "bool"), s, name="T_mean")
    if T.is_int(dt):
        s = T.reduce(x, axes, attrs.keepdims, "sum")
        return T.elemwise(lambda v: T.trunc_div(v, T.cast(T.as_expr(n, "int64"), dt)), s,
                          name="T_mean")
    acc = "float32" if dt == "float16" else dt
    s = T.reduce(x, axes, attrs.keepdims, "sum", acc_dtype=acc)
    return T.elemwise(lambda v: T.cast(v / T.cast(T.as_expr(n, "int64"), acc), dt), s,
                      name="T_mean")


def _arg_reducer(which: str, last: bool) -> object:
    """The ``(index, value)`` reducer of ``arg{which}``: the better value wins, ties go to the
    first index (``last``: the last); index -1 marks the identity."""
    te, tirx = T.te_mod(), T.tir_mod()

    def combine(lhs, rhs):  # type: ignore[no-untyped-def]
        (li, lv), (ri, rv) = lhs, rhs
        better = rv > lv if which == "max" else rv < lv
        tie = tirx.And(tirx.EQ(rv, lv), (ri > li) if last else (ri < li))
        take_r = tirx.Or(tirx.Or(better, tie), li < T.const(0, "int32"))
        return (T.select(take_r, ri, li), T.select(take_r, rv, lv))

    def ident(t0, t1):  # type: ignore[no-untyped-def]
        init = T.min_value(t1) if which == "max" else T.max_value(t1)
        return (T.const(-1, t0), init)
    return te.comm_reducer(combine, ident, name=f"arg{which}")


def _arg_reduce_te(which: str):  # type: ignore[no-untyped-def]
    """Compute of argmax/argmin: the flattened index over the reduced axes (int32)."""
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te = T.te_mod()
        x = inputs[0]
        shp = T.shape_of(x)
        vdt = "int8" if T.dtype_of(x) == "bool" else T.dtype_of(x)
        axes = reduce_axes(len(shp), attrs.axis, attrs.exclude)
        red = _arg_reducer(which, attrs.select_last_index)
        raxes = [te.reduce_axis((0, shp[a]), name=f"k{a}") for a in axes]
        if attrs.keepdims:
            out_shape = [1 if i in axes else d for i, d in enumerate(shp)]
        else:
            out_shape = [d for i, d in enumerate(shp) if i not in axes]

        def body(*o):  # type: ignore[no-untyped-def]
            idx, oi, ri = [], 0, 0
            flat = T.const(0, "int32")
            for i in range(len(shp)):
                if i in axes:
                    idx.append(raxes[ri])
                    flat = flat * T.cast(T.as_expr(shp[i], "int32"), "int32") + \
                        T.cast(raxes[ri], "int32")
                    ri += 1
                    oi += 1 if attrs.keepdims else 0
                else:
                    idx.append(o[oi])
                    oi += 1
            return red((flat, T.cast(x(*idx), vdt)), axis=raxes)
        if not axes:
            return te.compute(out_shape, lambda *o: T.const(0, "int32"), name="T_arg")
        return te.compute(out_shape, body, name=f"T_arg{which}")[0]
    compute.__doc__ = f"TE compute of ``arg{which}``."
    return compute


def variance_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``variance`` (integers: squares in the dtype, sums in 64 bits)."""
    x, m = inputs
    dt = T.dtype_of(x)
    axes = reduce_axes(len(x.shape), attrs.axis, attrs.exclude)
    n = T.as_expr(_count_te(x, axes), "int64") - int(attrs.unbiased)
    # NOTE: the mean has keepdims shape; broadcast it against x
    if T.is_int(dt):
        acc = "uint64" if dt.startswith("uint") else "int64"

        def sq(*i):  # type: ignore[no-untyped-def]
            d = x(*i) - T.bcast_index(m, i)
            return T.cast(d * d, acc)
        s = T.reduce(x, axes, attrs.keepdims, "sum", acc_dtype=acc, fn=sq)
        return T.elemwise(lambda v: T.cast(T.trunc_div(v, T.cast(n, acc)), dt), s,
                          name="T_var")
    acc = "float32" if dt == "float16" else ("float64" if dt == "bool" else dt)

    def sqf(*i):  # type: ignore[no-untyped-def]
        d = T.cast(x(*i), acc) - T.cast(T.bcast_index(m, i), acc)
        return d * d
    s = T.reduce(x, axes, attrs.keepdims, "sum", acc_dtype=acc, fn=sqf)
    return T.elemwise(lambda v: T.cast(v / T.cast(n, acc), dt), s, name="T_var")


def _defreduce(name: str, impl: Callable[..., Any], compute: Callable[..., Any], doc: str,
               rel: Callable[..., Any] = reduce_rel, **rules: Any) -> None:
    """Register a one-input reduction with ``ReduceAttrs`` (pattern COMM_REDUCE)."""
    defop(name, 1, attrs=_REDUCE_ATTRS, attrs_type="ReduceAttrs", rel=rel, impl=impl,
          pattern=OpPattern.COMM_REDUCE, doc=doc, compute=compute, **rules)


# name, JVP rule, numpy reference, TE compute, doc; the gradient is _REDUCE_GRAD[name]
for _name, _jvp, _impl, _compute, _doc in [
        ("sum", jvp_linear, _simple(_sum), _reduce_te("sum"), "Sum over axes."),
        ("prod", jvp_reduce, _simple(_prod), _reduce_te("prod"), "Product over axes."),
        ("max", jvp_reduce, _simple(_max), _reduce_te("max"), "Maximum over axes."),
        ("min", jvp_reduce, _simple(_min), _reduce_te("min"), "Minimum over axes."),
        ("mean", jvp_linear, mean_ref, mean_te, "Mean over axes.")]:
    _defreduce(_name, _impl, _compute, _doc, grad=_REDUCE_GRAD[_name], jvp=_jvp)
_defreduce("all", _simple(np.all), _reduce_te("min"), "Logical and over axes.",
           rel=_check_bool_rel("all"), non_differentiable=True)
_defreduce("any", _simple(np.any), _reduce_te("max"), "Logical or over axes.",
           rel=_check_bool_rel("any"), non_differentiable=True)


# ----------------------------------------------------------------------------- argmax / argmin
def arg_reduce_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``argmax/argmin(x, axis, keepdims, exclude)``: the reduced shape, int32."""
    t = reduce_rel(arg_types, attrs)
    return None if t is None else TensorType(t.shape, "int32")  # type: ignore[union-attr]


def _arg_reduce(np_arg: Callable[..., np.ndarray]) -> Callable[[list, Attrs], np.ndarray]:
    def impl(args: list, attrs: Attrs) -> np.ndarray:
        x = args[0]
        axes = _axes(x, attrs)
        rest = [i for i in range(x.ndim) if i not in axes]
        # NOTE: move the reduced axes last and flatten them: the index is into that flattening
        xt = np.transpose(x, rest + list(axes)).reshape(
            [x.shape[i] for i in rest] + [-1 if x.size else 0])
        if xt.shape[-1] == 0:
            raise ValueError("argmax/argmin of an empty tensor")
        if attrs.select_last_index:
            n = xt.shape[-1]
            idx = n - 1 - np_arg(xt[..., ::-1], axis=-1)
        else:
            idx = np_arg(xt, axis=-1)
        out = np.asarray(idx, dtype="int32")
        if attrs.keepdims:
            out = out.reshape(reduce_shape(x.shape, axes, True))
        return out
    return impl


_ARG_ATTRS = [
    F("axis", "ints?", None, "axes to reduce (None: all)"),
    F("keepdims", "bool", False, "keep reduced axes as size 1"),
    F("select_last_index", "bool", False, "on ties, the last index instead of the first"),
    F("exclude", "bool", False, "reduce every axis except those in axis"),
]
defop("argmax", 1, attrs=_ARG_ATTRS, attrs_type="ArgReduceAttrs", rel=arg_reduce_rel,
      impl=_arg_reduce(np.argmax), pattern=OpPattern.COMM_REDUCE,
      doc="Index of the maximum over axes (int32).", non_differentiable=True,
      compute=_arg_reduce_te("max"))
defop("argmin", 1, attrs=_ARG_ATTRS, attrs_type="ArgReduceAttrs", rel=arg_reduce_rel,
      impl=_arg_reduce(np.argmin), pattern=OpPattern.COMM_REDUCE,
      doc="Index of the minimum over axes (int32).", non_differentiable=True,
      compute=_arg_reduce_te("min"))


# ----------------------------------------------------------------------------- variance
def variance_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``variance(x, mean)``: ``mean`` is ``x``'s mean with keepdims; the reduced shape."""
    ts = tensor_args(arg_types, ("data", "mean"))
    if ts is None:
        return None
    same_dtype(ts[0], ts[1])
    return reduce_rel(arg_types[:1], attrs)


def variance_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``sum((x - mean)**2) / (n - unbiased)`` over the axes."""
    x, m = args
    axes = _axes(x, attrs)
    count = 1
    for a in axes:
        count *= x.shape[a]
    acc = _acc_dtype(x.dtype)
    xa, ma = (x, m) if acc is None else (x.astype(acc), m.astype(acc))
    d = xa - ma
    s = np.sum(d * d, axis=axes, keepdims=attrs.keepdims)
    with np.errstate(invalid="ignore", divide="ignore"):
        return wrap(s / (count - int(attrs.unbiased)), x.dtype)


def variance_jvp(call, out, tangents):  # type: ignore[no-untyped-def]
    """``variance(x, m)``: ``2 sum((x - m) (tx - tm)) / (n - unbiased)``, the exact
    linearisation (no difference of two variances, which cancels for small tangents)."""
    x, m = call.args
    a = call.attrs
    prod = op("multiply", op("subtract", x, m), op("subtract", tangents[0], tangents[1]))
    s = op("sum", prod, axis=a.axis, keepdims=a.keepdims, exclude=a.exclude)
    if all(isinstance(d, int) for d in tensor_type(x).shape):
        return op("multiply", s, scalar(2.0 / max(_count(call) - int(a.unbiased), 1), x))
    # NOTE: symbolic dims: the count is computed at run time
    count = op("sum", op("ones_like", x), axis=a.axis, keepdims=a.keepdims, exclude=a.exclude)
    if a.unbiased:
        count = op("subtract", count, op("ones_like", count))
    return op("divide", op("multiply", s, scalar(2.0, x)), count)


defop("variance", 2, grad=variance_grad, jvp=variance_jvp,
      attrs=_REDUCE_ATTRS + [F("unbiased", "bool", False, "divide by n - 1")],
      attrs_type="VarianceAttrs", rel=variance_rel, impl=variance_ref,
      pattern=OpPattern.COMM_REDUCE, compute=variance_te,
      doc="Variance given the mean (Relay's ``_variance``; ``std`` is ``sqrt`` of it).")
