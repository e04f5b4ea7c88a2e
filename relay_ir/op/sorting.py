"""Sorting operators: ``topk``, ``argsort`` and ``sort`` (Relay's names and attributes).

Order: a stable sort. Equal elements keep their index order, in ascending and in descending
order alike (ONNX TopK: "the lower index first"); ``-0.0`` equals ``+0.0``; NaN counts as larger
than every number (ascending: last, descending: first), as in numpy and torch.

The indices are integers and have no derivative. The values' adjoint scatters the output
gradient to the selected indices along the axis (``sum(where(idx == iota, g, 0))`` over the
``k`` axis of a ``(.., k, n, ..)`` one-hot, built from registry operators); their tangent
gathers the input tangent at those indices the same way.

The TE computes use no extern sort. ``topk`` with a static ``k <= SELECT_MAX_K`` on data of at
most 32 bits selects its ``k`` elements one after the other (``k`` integer max/min
reductions over packed (key, index) codes: O(k n)). The others rank every element by
counting the elements ordered before it (a reduction over the axis, O(n^2) per row) and then
place each element by its rank: exact, good for the short axes of model graphs, slow for
long ones.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import TypeInferenceError
from relay_ir.expr import Expr, Tuple, TupleGetItem, const
from relay_ir.op import OpPattern
from relay_ir.op import _te as T
from relay_ir.op._grad import field, grad_rule, op, static_shape, tensor_type, zeros_for
from relay_ir.op._rules import F, defop, norm_axis, tensor_arg, wrap
from relay_ir.ty import Dim, TensorType, TupleType, Type

_RET_TYPES = ("both", "values", "indices")
_INDEX_DTYPES = ("int32", "int64")


# ----------------------------------------------------------------------------- numpy
def _order(x: np.ndarray, axis: int, ascend: bool) -> np.ndarray:
    """Stable argsort along ``axis``; descending keeps equal elements in index order too."""
    if ascend:
        return np.argsort(x, axis=axis, kind="stable")
    # NOTE: reverse, stable ascending sort, reverse: descending with ties by lower index
    # (no negation: exact for unsigned and the most negative integer; NaN comes first)
    n = x.shape[axis]
    rev = np.flip(x, axis=axis)
    o = np.argsort(rev, axis=axis, kind="stable")
    return (n - 1) - np.flip(o, axis=axis)


def _k_of(attrs: Attrs, n: Dim) -> Dim:
    k = attrs.k
    return n if k is None or k < 1 else k


# ----------------------------------------------------------------------------- relations
def _sort_arg(arg_types: Sequence[Type], attrs: Attrs, name: str) -> tuple | None:
    t = tensor_arg(arg_types[0], "data")
    if t is None:
        return None
    if t.ndim == 0:
        raise TypeInferenceError(f"{name}: data must have rank >= 1, found a scalar")
    axis = norm_axis(attrs.axis, t.ndim)
    if hasattr(attrs, "dtype") and attrs.dtype not in _INDEX_DTYPES:
        raise TypeInferenceError(f"{name}: dtype (of the indices) must be int32 or int64, found "
                                 f"{attrs.dtype!r}")
    return t, axis


def topk_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``topk(data)``: values (data's dtype) and/or indices (``dtype``), the axis of size
    ``k`` (``k < 1``: the whole axis); ``ret_type`` both gives the pair."""
    r = _sort_arg(arg_types, attrs, "topk")
    if r is None:
        return None
    t, axis = r
    if attrs.ret_type not in _RET_TYPES:
        raise TypeInferenceError(f"topk: ret_type must be one of {', '.join(_RET_TYPES)}, "
                                 f"found {attrs.ret_type!r}")
    n = t.shape[axis]
    k = _k_of(attrs, n)
    if isinstance(n, int) and isinstance(k, int) and k > n:
        raise TypeInferenceError(f"topk: k={k} is larger than axis {attrs.axis} (size {n})")
    shape = t.shape[:axis] + (k,) + t.shape[axis + 1:]
    vals, idx = TensorType(shape, t.dtype), TensorType(shape, attrs.dtype)
    return {"both": TupleType((vals, idx)), "values": vals, "indices": idx}[attrs.ret_type]


def argsort_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``argsort(data)``: data's shape, dtype ``dtype``."""
    r = _sort_arg(arg_types, attrs, "argsort")
    return None if r is None else TensorType(r[0].shape, attrs.dtype)


def sort_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``sort(data)``: data's type."""
    r = _sort_arg(arg_types, attrs, "sort")
    return None if r is None else r[0]


# ----------------------------------------------------------------------------- references
def topk_ref(args: list, attrs: Attrs) -> Any:
    """The first ``k`` of the stable order along the axis."""
    x = args[0]
    axis = norm_axis(attrs.axis, x.ndim)
    k = _k_of(attrs, x.shape[axis])
    idx = np.take(_order(x, axis, attrs.is_ascend), np.arange(k), axis=axis)
    vals = np.take_along_axis(x, idx, axis=axis)
    vals, idx = wrap(vals, x.dtype), wrap(idx, attrs.dtype)
    return {"both": (vals, idx), "values": vals, "indices": idx}[attrs.ret_type]


def argsort_ref(args: list, attrs: Attrs) -> np.ndarray:
    """The stable order along the axis."""
    x = args[0]
    return wrap(_order(x, norm_axis(attrs.axis, x.ndim), attrs.is_ascend), attrs.dtype)


def sort_ref(args: list, attrs: Attrs) -> np.ndarray:
    """The values in stable order along the axis."""
    x = args[0]
    axis = norm_axis(attrs.axis, x.ndim)
    return wrap(np.take_along_axis(x, _order(x, axis, attrs.is_ascend), axis=axis), x.dtype)


# ----------------------------------------------------------------------------- TE computes
def _key(v: Any) -> Any:
    """An order-preserving comparable key: floats by :func:`~relay_ir.op._te.order_key` (NaN
    above all, ``-0.0`` folded onto ``+0.0``), bool as int8, integers as they are."""
    dt = T.dtype_of(v)
    if T.is_float(dt):
        k = T.order_key(v)
        return T.select(v == T.const(0, dt), T.const(0, T.dtype_of(k)), k)
    if dt == "bool":
        return T.cast(v, "int8")
    return v


def _sorted_te(x: Any, axis: int, ascend: bool, k: Any, idx_dtype: str,
               want: str) -> list:
    """``[values]``, ``[indices]`` or both of the first ``k`` of the stable order."""
    te, tirx = T.te_mod(), T.tir_mod()
    xs = T.shape_of(x)
    n = xs[axis]

    def at(i: Sequence[Any], j: Any) -> list[Any]:
        return list(i[:axis]) + [j] + list(i[axis + 1:])
    rj = te.reduce_axis((0, n), name="rj")

    def rank_body(*i):  # type: ignore[no-untyped-def]
        ki, kj = _key(x(*i)), _key(x(*at(i, rj)))
        before = kj < ki if ascend else kj > ki
        tie = tirx.all(kj == ki, rj < i[axis])
        return te.sum(T.cast(tirx.any(before, tie), "int32"), axis=[rj])
    rank = te.compute(xs, rank_body, name="T_sort_rank")
    ri = te.reduce_axis((0, n), name="ri")
    oshape = at(xs, k)

    def idx_body(*o):  # type: ignore[no-untyped-def]
        hit = rank(*at(o, ri)) == T.cast(o[axis], "int32")
        return te.sum(tirx.if_then_else(hit, T.cast(ri, idx_dtype), T.const(0, idx_dtype)),
                      axis=[ri])
    idx = te.compute(oshape, idx_body, name="T_sort_indices")
    out = []
    if want in ("both", "values"):
        out.append(te.compute(oshape, lambda *o: x(*at(o, idx(*o))), name="T_sort_values",
                              tag="injective"))
    if want in ("both", "indices"):
        out.append(idx)
    return out


#: ``topk`` with at most this many (static) ``k`` selects them one after the other
#: (``k`` reductions over the axis: O(k n)) instead of ranking every element (O(n^2)).
SELECT_MAX_K = 32


_PACKABLE = ("float16", "float32", "bool", "int8", "int16", "int32", "uint8", "uint16")


def _selected_te(x: Any, axis: int, ascend: bool, k: int, idx_dtype: str,
                 want: str) -> list:
    """``topk`` by ``k`` chained reductions over one int64 per element, its 32-bit order key
    above its index (descending: the index complemented), so that the order is the integer
    order: selection ``r`` is the max (ascending: min) of the codes past selection ``r - 1``
    (plain integer max/min reductions, which vectorize)."""
    te, tirx = T.te_mod(), T.tir_mod()
    xs = T.shape_of(x)
    n = xs[axis]
    outer = list(xs[:axis]) + list(xs[axis + 1:])
    i64 = "int64"
    low = T.const((1 << 31) - 1, i64)  # NOTE: the index part, below bit 31 (n < 2^31)
    shift = T.const(1 << 32, i64)

    def code(*i):  # type: ignore[no-untyped-def]
        key = T.cast(_key(x(*i)), i64)
        j = T.cast(i[axis], i64)
        return key * shift + (j if ascend else low - j)
    codes = te.compute(xs, code, name="T_topk_code")

    def at(o: Sequence[Any], j: Any) -> list[Any]:
        return list(o[:axis]) + [j] + list(o[axis:])
    picks: list[Any] = []
    for r in range(k):
        rj = te.reduce_axis((0, n), name=f"rj{r}")
        prev = picks[-1] if picks else None
        if ascend:
            def body(*o, prev=prev, rj=rj):  # type: ignore[no-untyped-def]
                c = codes(*at(o, rj))
                if prev is not None:
                    c = tirx.Select(c > prev(*o), c, tirx.max_value(i64))
                return te.min(c, axis=[rj])
        else:
            def body(*o, prev=prev, rj=rj):  # type: ignore[no-untyped-def]
                c = codes(*at(o, rj))
                if prev is not None:
                    c = tirx.Select(c < prev(*o), c, tirx.min_value(i64))
                return te.max(c, axis=[rj])
        picks.append(te.compute(outer, _positional(body, len(outer)), name=f"T_topk_pick{r}"))

    def idx_body(*i):  # type: ignore[no-untyped-def]
        o = list(i[:axis]) + list(i[axis + 1:])
        c = picks[k - 1](*o)
        for r in range(k - 2, -1, -1):
            c = T.select(i[axis] == r, picks[r](*o), c)
        j = tirx.bitwise_and(c, low)
        return T.cast(j if ascend else low - j, idx_dtype)
    oshape = list(xs[:axis]) + [k] + list(xs[axis + 1:])
    idx = te.compute(oshape, idx_body, name="T_sort_indices", tag="injective")
    out = []
    if want in ("both", "values"):
        out.append(te.compute(oshape, lambda *o: x(*(list(o[:axis]) + [idx(*o)] +
                                                      list(o[axis + 1:]))),
                              name="T_sort_values", tag="injective"))
    if want in ("both", "indices"):
        out.append(idx)
    return out


def _positional(fn: Any, n: int) -> Any:
    """``fn`` (which takes keyword defaults) as a function of ``n`` positional indices (TE's
    ``compute`` refuses keyword arguments)."""
    return lambda *i: fn(*i)


def topk_te(attrs: Attrs, inputs: list, out_type: Type) -> Any:
    """TE compute of ``topk``: ``k`` chained selections for ``k <= SELECT_MAX_K``, else rank
    by counting, then place (see the module docstring)."""
    x = inputs[0]
    xs = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(xs))
    k = _k_of(attrs, xs[axis])
    if isinstance(k, int) and k <= SELECT_MAX_K and T.dtype_of(x) in _PACKABLE:
        r = _selected_te(x, axis, attrs.is_ascend, k, attrs.dtype, attrs.ret_type)
    else:
        r = _sorted_te(x, axis, attrs.is_ascend, k, attrs.dtype, attrs.ret_type)
    return r if attrs.ret_type == "both" else r[0]


def argsort_te(attrs: Attrs, inputs: list, out_type: Type) -> Any:
    """TE compute of ``argsort``."""
    x = inputs[0]
    xs = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(xs))
    return _sorted_te(x, axis, attrs.is_ascend, xs[axis], attrs.dtype, "indices")[0]


def sort_te(attrs: Attrs, inputs: list, out_type: Type) -> Any:
    """TE compute of ``sort``."""
    x = inputs[0]
    xs = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(xs))
    return _sorted_te(x, axis, attrs.is_ascend, xs[axis], "int32", "values")[0]


# ----------------------------------------------------------------------------- derivatives
def _one_hot(idx: Expr, axis: int, n: int, call: Any) -> Expr:
    """``(.., k, n, ..)`` bool: ``idx[.., j, ..] == i`` (``idx`` expanded after ``axis``)."""
    shape = [1] * (tensor_type(call.args[0]).ndim + 1)
    shape[axis + 1] = n
    dt = "int32" if call.op.name == "sort" else call.attrs.dtype
    iota = const(np.arange(n, dtype=dt).reshape(shape))
    return op("equal", op("expand_dims", idx, axis=axis + 1), iota)


def _scatter(g: Expr, idx: Expr, x: Expr, axis: int, call: Any) -> Expr:
    """``g`` (the selected values' adjoint) added to zeros of ``x``'s shape at ``idx``."""
    n = static_shape(x, call)[axis]
    zero = const(np.zeros((), tensor_type(x).dtype))
    picked = op("where", _one_hot(idx, axis, n, call), op("expand_dims", g, axis=axis + 1), zero)
    return op("sum", picked, axis=(axis,))


def _gather(t: Expr, idx: Expr, axis: int, call: Any) -> Expr:
    """``t`` read at ``idx`` along ``axis`` (the tangent of the selected values)."""
    n = static_shape(call.args[0], call)[axis]
    zero = const(np.zeros((), tensor_type(call.args[0]).dtype))
    picked = op("where", _one_hot(idx, axis, n, call), op("expand_dims", t, axis=axis), zero)
    return op("sum", picked, axis=(axis + 1,))


def _indices_of(call: Any, out: Expr) -> Expr:
    """The selected indices of a ``topk``/``sort`` call (recomputed where not an output)."""
    at = call.attrs
    x = call.args[0]
    if call.op.name == "sort":
        return op("argsort", x, axis=at.axis, is_ascend=at.is_ascend, dtype="int32")
    if at.ret_type == "both":
        return field(out, 1)
    return op("topk", x, k=at.k, axis=at.axis, ret_type="indices", is_ascend=at.is_ascend,
              dtype=at.dtype)


@grad_rule
def topk_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``topk``/``sort``: the values' adjoint scattered (added) to the selected indices; the
    indices have no derivative."""
    x = call.args[0]
    axis = norm_axis(call.attrs.axis, tensor_type(x).ndim)
    if call.op.name == "topk" and call.attrs.ret_type == "indices":
        return (zeros_for(x),)
    gv = field(g, 0) if call.op.name == "topk" and call.attrs.ret_type == "both" else g
    return (_scatter(gv, _indices_of(call, out), x, axis, call),)


def topk_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """``topk``/``sort``: the input tangent at the selected indices (zero for the indices)."""
    at = call.attrs
    if call.op.name == "topk" and at.ret_type == "indices":
        return op("zeros_like", out)
    axis = norm_axis(at.axis, tensor_type(call.args[0]).ndim)
    tv = _gather(t[0], _indices_of(call, out), axis, call)
    if call.op.name == "topk" and at.ret_type == "both":
        return Tuple((tv, op("zeros_like", TupleGetItem(out, 1))))
    return tv


# ----------------------------------------------------------------------------- registration
defop("topk", 1, attrs=[F("k", "int?", 1, "how many (< 1 or None: the whole axis)"),
                        F("axis", "int", -1, "the axis to select along"),
                        F("ret_type", "str", "both", "both (values, indices), values or "
                          "indices"),
                        F("is_ascend", "bool", False, "the smallest (True) or largest"),
                        F("dtype", "dtype", "int32", "the indices' dtype (int32 or int64)")],
      attrs_type="TopKAttrs", rel=topk_rel, impl=topk_ref, compute=topk_te, grad=topk_grad,
      jvp=topk_jvp, pattern=OpPattern.OPAQUE,
      doc="The k largest (smallest) elements along an axis and their indices (stable).")
defop("argsort", 1, attrs=[F("axis", "int", -1, "the axis to sort along"),
                           F("is_ascend", "bool", True, "ascending (True) or descending"),
                           F("dtype", "dtype", "int32", "the indices' dtype (int32 or int64)")],
      attrs_type="ArgsortAttrs", rel=argsort_rel, impl=argsort_ref, compute=argsort_te,
      non_differentiable=True, pattern=OpPattern.OPAQUE,
      doc="The indices that sort an axis (stable; NaN largest).")
defop("sort", 1, attrs=[F("axis", "int", -1, "the axis to sort along"),
                        F("is_ascend", "bool", True, "ascending (True) or descending")],
      attrs_type="SortAttrs", rel=sort_rel, impl=sort_ref, compute=sort_te, grad=topk_grad,
      jvp=topk_jvp, pattern=OpPattern.OPAQUE,
      doc="An axis sorted (stable; NaN largest).")
