"""Indexing and scan operators (issue 23): ``gather``, ``gather_nd``, ``scatter_elements``,
``scatter_nd``, ``one_hot``, ``cumsum``, ``cumprod``, ``arange`` and ``einsum``, with Relay's
names and attributes.

Index conventions shared by every operator here (integer indices of any width, int32 and int64
alike): a negative index counts from the end of its dimension (``i + d``, as ONNX and numpy
read it); an index still outside ``[0, d)`` after that is clamped to the nearest valid index
(ONNX calls such indices an error, so this only fixes a behaviour where the standard leaves
none). The reference implementation and the TVM compute follow the same rule. ``one_hot`` is
the exception: as in ONNX, an index outside ``[-depth, depth)`` gives a row of off values.

``gather_nd`` and ``scatter_nd`` take their indices as Relay (and TOPI) do, the index tuple
first: ``indices`` has shape ``(M, Y_0, ..., Y_{K-1})``; the ONNX converters move ONNX's
last-axis tuples to the front.

Scatters and scans are TE reductions (TE has no sequential-write or scan primitive that also
schedules for CUDA): each output element of a scatter looks at every update that may hit it
(``scatter_elements``: the indexed axis of ``indices``; ``scatter_nd``: all of
``Y_0 x ... x Y_{K-1}``, once per indexed slice for "update"), ``O(out x hits)``; a scan of a
long axis runs in blocks, ``O(d sqrt d)`` (benchmarks/RESULTS.md has the figures).
"""
from __future__ import annotations

import math
import string
from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Tuple, const
from relay_ir.op import OpPattern
from relay_ir.op import _te as T
from relay_ir.op._grad import (GradientRuleError, field, grad_rule, op, tensor_type, type_of,
                               zeros_for)
from relay_ir.op._jvp import jvp_linear, jvp_linear_in
from relay_ir.op._rules import (F, check_dtype, defop, dim_compatible, fmt_shape, is_any,
                                is_int_dtype, norm_axis, ranked_arg, shape_size, tensor_args,
                                tensor_rel, tuple_of_tensors, wrap)
from relay_ir.ty import Dim, TensorType, Type, format_dim

# ----------------------------------------------------------------------------- shared helpers


def _index_dtype(t: TensorType, name: str, what: str = "indices") -> None:
    if not is_int_dtype(t.dtype):
        raise TypeInferenceError(f"{name}: {what} must have an integer dtype, found {t.dtype}")


def _fix_np(idx: np.ndarray, d: int) -> np.ndarray:
    """Negative indices from the end, then clamped into ``[0, d)`` (int64)."""
    i = np.asarray(idx).astype(np.int64)
    i = np.where(i < 0, i + d, i)
    return np.clip(i, 0, max(d - 1, 0))


def _fix_te(i: Any, d: Any) -> Any:
    """TE twin of :func:`_fix_np`: an int64 index in ``[0, d)``."""
    tirx = T.tir_mod()
    i = T.cast(i, "int64")
    n = T.as_expr(d, "int64")
    i = tirx.Select(i < T.const(0, "int64"), i + n, i)
    return tirx.max(tirx.min(i, n - T.const(1, "int64")), T.const(0, "int64"))


def _same_dtype(name: str, a: TensorType, b: TensorType, what: str) -> None:
    if a.dtype != b.dtype:
        raise TypeInferenceError(f"{name}: {what} has dtype {b.dtype}, the data {a.dtype}")


def _reduction_init(kind: str, dtype: str) -> Any:
    """The identity of a scatter reduction in ``dtype`` (a TIR constant)."""
    if kind == "add":
        return T.const(-0.0 if T.is_float(dtype) else 0, dtype)
    if kind == "mul":
        return T.const(1, dtype)
    if kind == "max":
        return T.min_value(dtype)
    return T.max_value(dtype)


def _combine_te(kind: str, a: Any, b: Any) -> Any:
    if kind == "add":
        return a + b
    if kind == "mul":
        return a * b
    if kind == "max":
        return T.maximum(a, b)
    return T.minimum(a, b)


def _reducer(kind: str) -> Any:
    """The TE reducer of a scatter reduction, starting from its identity."""
    te = T.te_mod()
    if kind == "add":
        return te.comm_reducer(lambda a, b: a + b, lambda t: _reduction_init("add", t),
                               name="scatter_add")
    if kind == "mul":
        return te.comm_reducer(lambda a, b: a * b, lambda t: T.const(1, t), name="scatter_mul")
    # NOTE: T.maximum/T.minimum propagate NaN as numpy's maximum.at does (tirx.max drops it)
    if kind == "max":
        return te.comm_reducer(lambda a, b: T.maximum(a, b), lambda t: T.min_value(t),
                               name="scatter_max")
    return te.comm_reducer(lambda a, b: T.minimum(a, b), lambda t: T.max_value(t),
                           name="scatter_min")


_NP_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_flat_np(out: np.ndarray, target: np.ndarray, values: np.ndarray,
                     mode: str) -> np.ndarray:
    """Write ``values`` (row-major order) at flat positions ``target`` of ``out``: "update"
    keeps the last write to a position, the other modes combine every write with the data."""
    flat = out.reshape(-1)
    t = target.reshape(-1)
    v = values.reshape(-1)
    if mode == "update":
        if t.size:
            _, first_rev = np.unique(t[::-1], return_index=True)
            last = t.size - 1 - first_rev
            flat[t[last]] = v[last]
    else:
        _NP_AT[mode].at(flat, t, v)
    return flat.reshape(out.shape)


# ----------------------------------------------------------------------------- gather
@tensor_rel("data", "indices")
def gather_rel(x: TensorType, ind: TensorType, attrs: Attrs) -> Type | None:
    """``gather(data, indices, axis)``: ``out[i][j][k] = data[i][indices[i][j][k]][k]``
    (axis 1); indices have data's rank, any integer dtype; the result has indices' shape."""
    _index_dtype(ind, "gather")
    if x.ndim != ind.ndim:
        raise TypeInferenceError(f"gather: indices must have the data's rank {x.ndim}, found "
                                 f"rank {ind.ndim}")
    if x.ndim == 0:
        raise TypeInferenceError("gather: the data must have rank at least 1")
    axis = norm_axis(attrs.axis, x.ndim)
    for i, (a, b) in enumerate(zip(x.shape, ind.shape)):
        if i != axis and isinstance(a, int) and isinstance(b, int) and b > a:
            raise ShapeMismatchError(f"gather: indices dimension {i} ({b}) exceeds the data's "
                                     f"({a}); shapes {fmt_shape(ind.shape)} and "
                                     f"{fmt_shape(x.shape)}")
    return TensorType(ind.shape, x.dtype)


def _gather_coords(ind: np.ndarray, d: int, axis: int) -> tuple:
    coords = list(np.indices(ind.shape, dtype=np.int64, sparse=True))
    coords[axis] = _fix_np(ind, d)
    return tuple(coords)


def gather_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``data`` read at ``indices`` along ``axis`` (ONNX GatherElements)."""
    x, ind = args
    axis = norm_axis(attrs.axis, x.ndim)
    return wrap(x[_gather_coords(ind, x.shape[axis], axis)], x.dtype)


def gather_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``gather``."""
    te = T.te_mod()
    x, ind = inputs
    xs = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(xs))

    def body(*o: Any) -> Any:
        idx = list(o)
        idx[axis] = _fix_te(ind(*o), xs[axis])
        return x(*idx)
    return te.compute(T.shape_of(ind), body, name="T_gather", tag="injective")


@grad_rule
def gather_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``gather(x, idx)``: ``g`` scatter-added into zeros like x (repeated indices add up)."""
    x, idx = call.args
    return (op("scatter_elements", op("zeros_like", x), idx, g, axis=call.attrs.axis,
               reduction="add"), zeros_for(idx))


defop("gather", 2, attrs=[F("axis", "int", 0, "the axis indexed")], attrs_type="GatherAttrs",
      rel=gather_rel, impl=gather_ref, compute=gather_te, grad=gather_grad,
      jvp=jvp_linear_in(0), pattern=OpPattern.INJECTIVE,
      doc="Gather elements along an axis (ONNX GatherElements).")


# ----------------------------------------------------------------------------- gather_nd
def _nd_parts(x: TensorType, ind: TensorType, attrs: Attrs, name: str) -> tuple[int, int]:
    """(M, batch_dims) of a gather_nd/scatter_nd call, checked."""
    _index_dtype(ind, name)
    if ind.ndim < 1:
        raise TypeInferenceError(f"{name}: indices must have rank at least 1 (the index "
                                 "tuple first)")
    m = ind.shape[0]
    if not isinstance(m, int) or m < 1:
        raise TypeInferenceError(f"{name}: the index tuple length (indices dimension 0) must "
                                 f"be static and at least 1, found {format_dim(m)}")
    b = getattr(attrs, "batch_dims", 0) or 0
    if b < 0 or b > ind.ndim - 1:
        raise TypeInferenceError(f"{name}: batch_dims {b} is out of range for indices of "
                                 f"rank {ind.ndim}")
    if m + b > x.ndim:
        raise TypeInferenceError(f"{name}: {m} indexed dims after {b} batch dims exceed the "
                                 f"data's rank {x.ndim}")
    for i in range(b):
        if not dim_compatible(x.shape[i], ind.shape[1 + i]):
            raise ShapeMismatchError(f"{name}: batch dimension {i} differs: "
                                     f"{format_dim(x.shape[i])} vs "
                                     f"{format_dim(ind.shape[1 + i])}")
    return m, b


@tensor_rel("data", "indices")
def gather_nd_rel(x: TensorType, ind: TensorType, attrs: Attrs) -> Type | None:
    """``gather_nd(data, indices, batch_dims, index_rank)``: indices ``(M, Y...)`` (the index
    tuple first, as in Relay); the result ``Y... + data.shape[batch_dims + M:]``."""
    m, b = _nd_parts(x, ind, attrs, "gather_nd")
    if attrs.index_rank is not None and attrs.index_rank != m:
        raise TypeInferenceError(f"gather_nd: index_rank {attrs.index_rank} differs from the "
                                 f"index tuple length {m}")
    return TensorType(tuple(ind.shape[1:]) + tuple(x.shape[b + m:]), x.dtype)


def gather_nd_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``out[y..., x...] = data[y_0..y_{b-1}, idx[0, y...], ..., idx[M-1, y...], x...]``."""
    x, ind = args
    m, b = ind.shape[0], attrs.batch_dims
    ys = ind.shape[1:]
    grid = np.indices(ys, dtype=np.int64, sparse=True)
    coords = [grid[i] for i in range(b)]
    coords += [_fix_np(ind[k], x.shape[b + k]) for k in range(m)]
    return wrap(x[tuple(coords)], x.dtype)


def gather_nd_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``gather_nd``."""
    te = T.te_mod()
    x, ind = inputs
    xs, is_ = T.shape_of(x), T.shape_of(ind)
    m, b = int(is_[0]), attrs.batch_dims
    ny = len(is_) - 1

    def body(*o: Any) -> Any:
        y = list(o[:ny])
        idx = y[:b] + [_fix_te(ind(k, *y), xs[b + k]) for k in range(m)] + list(o[ny:])
        return x(*idx)
    return te.compute(list(is_[1:]) + list(xs[b + m:]), body, name="T_gather_nd",
                      tag="injective")


def _with_batch_coords(idx: Any, b: int, call: Any) -> Any:
    """``idx`` (M, B..., Y...) with the batch coordinates prepended: (b + M, B..., Y...)."""
    shp = tensor_type(idx).shape
    if not all(isinstance(d, int) for d in shp):
        raise GradientRuleError("the gradient of gather_nd with batch_dims needs static index "
                                "shapes", call.span)
    grid = np.indices(tuple(shp[1:]), dtype=np.int64)[:b]
    return op("concatenate", Tuple((const(grid), op("cast", idx, dtype="int64"))), axis=0)


@grad_rule
def gather_nd_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``gather_nd(x, idx)``: ``g`` scatter-added (``scatter_nd`` add) into zeros like x."""
    x, idx = call.args
    b = call.attrs.batch_dims
    full = _with_batch_coords(idx, b, call) if b else idx
    return (op("scatter_nd", op("zeros_like", x), full, g, mode="add"), zeros_for(idx))


defop("gather_nd", 2, attrs=[F("batch_dims", "int", 0, "leading batch dims of data and "
                               "indices[1:]"),
                             F("index_rank", "int?", None, "the index tuple length, if given")],
      attrs_type="GatherNDAttrs", rel=gather_nd_rel, impl=gather_nd_ref, compute=gather_nd_te,
      grad=gather_nd_grad, jvp=jvp_linear_in(0), pattern=OpPattern.INJECTIVE,
      doc="Gather slices of data at index tuples (ONNX GatherND; tuples first).")


# ----------------------------------------------------------------------------- scatter_elements
_SCATTER_MODES = ("update", "add", "mul", "min", "max")


def _check_mode(name: str, mode: str, what: str) -> None:
    if mode not in _SCATTER_MODES:
        raise TypeInferenceError(f"{name}: unknown {what} {mode!r} (expected one of "
                                 f"{', '.join(_SCATTER_MODES)})")


def scatter_elements_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``scatter_elements(data, indices, updates, axis, reduction)``: data with
    ``out[..., indices[i, j], ...] = updates[i, j]`` along ``axis`` (reduction update, add,
    mul, min, max as ONNX ScatterElements); indices and updates share a shape of data's rank."""
    ts = tensor_args(arg_types, ("data", "indices", "updates"))
    if ts is None:
        return None
    x, ind, upd = ts
    _index_dtype(ind, "scatter_elements")
    _check_mode("scatter_elements", attrs.reduction, "reduction")
    _same_dtype("scatter_elements", x, upd, "updates")
    if not (x.ndim == ind.ndim == upd.ndim) or x.ndim == 0:
        raise TypeInferenceError(f"scatter_elements: data, indices and updates must have one "
                                 f"rank (at least 1), found {x.ndim}, {ind.ndim}, {upd.ndim}")
    axis = norm_axis(attrs.axis, x.ndim)
    for i, (a, b) in enumerate(zip(ind.shape, upd.shape)):
        if not dim_compatible(a, b):
            raise ShapeMismatchError(f"scatter_elements: indices {fmt_shape(ind.shape)} and "
                                     f"updates {fmt_shape(upd.shape)} differ in dimension {i}")
    for i, (a, b) in enumerate(zip(x.shape, ind.shape)):
        if i != axis and isinstance(a, int) and isinstance(b, int) and b > a:
            raise ShapeMismatchError(f"scatter_elements: indices dimension {i} ({b}) exceeds "
                                     f"the data's ({a})")
    return x


def scatter_elements_ref(args: list, attrs: Attrs) -> np.ndarray:
    """ONNX ScatterElements (the last write wins for "update")."""
    x, ind, upd = args
    axis = norm_axis(attrs.axis, x.ndim)
    coords = list(np.indices(ind.shape, dtype=np.int64))
    coords[axis] = _fix_np(ind, x.shape[axis])
    target = np.ravel_multi_index(tuple(coords), x.shape) if x.size else np.zeros(0, np.int64)
    return _scatter_flat_np(np.array(x, copy=True), target, np.asarray(upd), attrs.reduction)


def scatter_elements_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``scatter_elements``: each element reduces the updates whose index along
    ``axis`` hits it (the last one for "update")."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, ind, upd = inputs
    xs, is_ = T.shape_of(x), T.shape_of(ind)
    axis = norm_axis(attrs.axis, len(xs))
    dt = out_type.dtype
    mode = attrs.reduction
    r = te.reduce_axis((0, is_[axis]), name="r")

    def inside(o: Sequence[Any]) -> Any:
        conds = [o[i] < is_[i] for i in range(len(xs)) if i != axis]
        return tirx.all(*conds) if conds else tirx.const(True, "bool")

    def at(o: Sequence[Any], rv: Any) -> list[Any]:
        idx = [tirx.min(o[i], is_[i] - 1) for i in range(len(xs))]
        idx[axis] = rv
        return idx

    def hit(o: Sequence[Any]) -> Any:
        # NOTE: if_then_else, not Select: data may be larger than indices, and Select reads
        # both sides (the simplifier drops the clamps of ``at`` under the guard)
        return tirx.if_then_else(inside(o), _fix_te(ind(*at(o, r)), xs[axis])
                                 == T.cast(o[axis], "int64"), tirx.const(False, "bool"))

    if mode == "update":
        last = te.compute(xs, lambda *o: te.max(tirx.Select(hit(o), T.cast(r, "int64"),
                                                            T.const(-1, "int64")), axis=r),
                          name="T_scatter_last")
        return te.compute(xs, lambda *o: tirx.Select(
            last(*o) >= T.const(0, "int64"),
            upd(*at(o, T.cast(tirx.max(last(*o), T.const(0, "int64")), T.dtype_of(r)))),
            x(*o)), name="T_scatter_elements")
    # NOTE: the reduction starts from its identity (-0.0, 1, -inf, +inf), which leaves an
    # element no update hits exactly as it was (-0.0 included)
    red = _reducer(mode)
    acc = te.compute(xs, lambda *o: red(tirx.if_then_else(hit(o), upd(*at(o, r)),
                                                          _reduction_init(mode, dt)), axis=r),
                     name="T_scatter_acc")
    return te.compute(xs, lambda *o: _combine_te(mode, x(*o), acc(*o)),
                      name="T_scatter_elements")


def _linear_scatter(call: Any, what: str) -> None:
    mode = call.attrs.reduction if what == "scatter_elements" else call.attrs.mode
    if mode not in ("update", "add"):
        raise GradientRuleError(f"{what} with {mode!r} has no derivative rule (only update "
                                "and add are differentiable)", call.span)


@grad_rule
def scatter_elements_grad(call, out, g):  # type: ignore[no-untyped-def]
    """update: ``g`` with the written positions zeroed for data, ``gather(g, idx)`` for the
    updates (distinct indices assumed: a repeated index credits every writer); add: ``g`` and
    ``gather(g, idx)``; mul, min, max: no rule (a diagnostic)."""
    _linear_scatter(call, "scatter_elements")
    x, idx, upd = call.args
    a = call.attrs
    dx = g if a.reduction == "add" else op("scatter_elements", g, idx, op("zeros_like", upd),
                                           axis=a.axis, reduction="update")
    return (dx, zeros_for(idx), op("gather", g, idx, axis=a.axis))


def scatter_elements_jvp(call, out, tangents):  # type: ignore[no-untyped-def]
    """update and add are linear in (data, updates) jointly: the op of their tangents."""
    _linear_scatter(call, "scatter_elements")
    return jvp_linear_in(0, 2)(call, out, tangents)


defop("scatter_elements", 3, attrs=[F("axis", "int", 0, "the axis indexed"),
                                    F("reduction", "str", "update",
                                      "update, add, mul, min or max")],
      attrs_type="ScatterElementsAttrs", rel=scatter_elements_rel, impl=scatter_elements_ref,
      compute=scatter_elements_te, grad=scatter_elements_grad, jvp=scatter_elements_jvp,
      pattern=OpPattern.OPAQUE,
      doc="Write (or combine) updates into data at indices along an axis (ONNX "
          "ScatterElements).")


# ----------------------------------------------------------------------------- scatter_nd
def scatter_nd_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``scatter_nd(data, indices, updates, mode)``: indices ``(M, Y...)`` (tuples first),
    updates ``Y... + data.shape[M:]``; ``out[idx[:, y]] = updates[y]`` (mode update, add,
    mul, min, max)."""
    ts = tensor_args(arg_types, ("data", "indices", "updates"))
    if ts is None:
        return None
    x, ind, upd = ts
    _check_mode("scatter_nd", attrs.mode, "mode")
    _same_dtype("scatter_nd", x, upd, "updates")
    m, _ = _nd_parts(x, ind, Attrs({"batch_dims": 0}), "scatter_nd")
    want = tuple(ind.shape[1:]) + tuple(x.shape[m:])
    if len(want) != upd.ndim or not all(dim_compatible(a, b) for a, b in zip(want, upd.shape)):
        raise ShapeMismatchError(f"scatter_nd: updates must have shape {fmt_shape(want)} "
                                 f"(indices[1:] + data[{m}:]), found {fmt_shape(upd.shape)}")
    return x


def scatter_nd_ref(args: list, attrs: Attrs) -> np.ndarray:
    """ONNX ScatterND with Relay's index layout (the last write wins for "update")."""
    x, ind, upd = args
    m = ind.shape[0]
    lead = x.shape[:m]
    inner = int(np.prod(x.shape[m:], dtype=np.int64))
    coords = tuple(_fix_np(ind[k], lead[k]) for k in range(m))
    base = np.ravel_multi_index(coords, lead) if x.size else np.zeros(ind.shape[1:], np.int64)
    target = base[..., None] * inner + np.arange(inner)
    return _scatter_flat_np(np.array(x, copy=True), target, np.asarray(upd), attrs.mode)


def scatter_nd_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``scatter_nd``: each element reduces over every update position whose
    index tuple hits it (the last one, row-major, for "update")."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, ind, upd = inputs
    xs, is_ = T.shape_of(x), T.shape_of(ind)
    m = int(is_[0])
    ys = list(is_[1:])
    dt = out_type.dtype
    mode = attrs.mode
    rs = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(ys)]

    def hit(o: Sequence[Any], r: Sequence[Any]) -> Any:
        conds = [_fix_te(ind(k, *r), xs[k]) == T.cast(o[k], "int64") for k in range(m)]
        return tirx.all(*conds) if conds else tirx.const(True, "bool")

    def linear(r: Sequence[Any]) -> Any:
        lin: Any = T.const(0, "int64")
        for v, d in zip(r, ys):
            lin = lin * T.as_expr(d, "int64") + T.cast(v, "int64")
        return lin

    def unravel(lin: Any) -> list[Any]:
        out = []
        for k in range(len(ys) - 1, -1, -1):
            d = T.as_expr(ys[k], "int64")
            out.append(tirx.truncmod(lin, d))  # NOTE: lin >= 0 (see _scan_te on floordiv)
            lin = tirx.truncdiv(lin, d)
        return [T.cast(v, "int32") for v in reversed(out)]

    def reduce(fn: Any, red: Any, o: Sequence[Any]) -> Any:
        return red(fn(rs), axis=rs) if rs else fn(rs)

    def max_red(v: Any, axis: Any) -> Any:
        return te.max(v, axis=axis)

    if mode == "update":
        # NOTE: the last writer depends only on the m indexed coordinates: found once per
        # slice, not per element
        last = te.compute(xs[:m], lambda *p: reduce(
            lambda r: tirx.Select(hit(p, r), linear(r), T.const(-1, "int64")), max_red, p),
            name="T_scatter_last")
        return te.compute(xs, lambda *o: tirx.Select(
            last(*o[:m]) >= T.const(0, "int64"),
            upd(*unravel(tirx.max(last(*o[:m]), T.const(0, "int64"))), *o[m:]), x(*o)),
            name="T_scatter_nd")
    red = _reducer(mode)  # NOTE: from the identity: elements no update hits stay as they were
    acc = te.compute(xs, lambda *o: reduce(
        lambda r: tirx.Select(hit(o, r), upd(*r, *o[m:]), _reduction_init(mode, dt)), red, o),
        name="T_scatter_acc")
    return te.compute(xs, lambda *o: _combine_te(mode, x(*o), acc(*o)), name="T_scatter_nd")


@grad_rule
def scatter_nd_grad(call, out, g):  # type: ignore[no-untyped-def]
    """update: ``g`` with the written positions zeroed for data, ``gather_nd(g, idx)`` for the
    updates (distinct index tuples assumed); add: ``g`` and ``gather_nd(g, idx)``; mul, min,
    max: no rule (a diagnostic)."""
    _linear_scatter(call, "scatter_nd")
    x, idx, upd = call.args
    dx = g if call.attrs.mode == "add" else op("scatter_nd", g, idx, op("zeros_like", upd),
                                               mode="update")
    return (dx, zeros_for(idx), op("gather_nd", g, idx))


def scatter_nd_jvp(call, out, tangents):  # type: ignore[no-untyped-def]
    """update and add are linear in (data, updates) jointly: the op of their tangents."""
    _linear_scatter(call, "scatter_nd")
    return jvp_linear_in(0, 2)(call, out, tangents)


defop("scatter_nd", 3, attrs=[F("mode", "str", "update", "update, add, mul, min or max")],
      attrs_type="ScatterNDAttrs", rel=scatter_nd_rel, impl=scatter_nd_ref,
      compute=scatter_nd_te, grad=scatter_nd_grad, jvp=scatter_nd_jvp, pattern=OpPattern.OPAQUE,
      doc="Write (or combine) update slices into data at index tuples (ONNX ScatterND; tuples "
          "first).")


# ----------------------------------------------------------------------------- one_hot
def one_hot_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``one_hot(indices, on_value, off_value, depth, axis, dtype)``: indices' shape with a
    ``depth`` axis inserted at ``axis``; on/off values are 0-d of one dtype; dtype "" keeps
    theirs. A negative index counts from ``depth``; one out of range gives all off values."""
    ts = tensor_args(arg_types, ("indices", "on_value", "off_value"))
    if ts is None:
        return None
    ind, on, off = ts
    _index_dtype(ind, "one_hot")
    ranked_arg(on, "one_hot", "on_value", 0)
    ranked_arg(off, "one_hot", "off_value", 0)
    if on.dtype != off.dtype:
        raise TypeInferenceError(f"one_hot: on_value ({on.dtype}) and off_value ({off.dtype}) "
                                 "must have one dtype")
    if attrs.depth < 0:
        raise TypeInferenceError(f"one_hot: depth must not be negative, found {attrs.depth}")
    axis = norm_axis(attrs.axis, ind.ndim, extra=1)
    shape = list(ind.shape)
    shape.insert(axis, attrs.depth)
    return TensorType(tuple(shape), check_dtype(attrs.dtype or on.dtype))


def one_hot_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``where(indices (wrapped from depth) == k, on, off)`` along the new axis."""
    ind, on, off = args
    axis = norm_axis(attrs.axis, ind.ndim, extra=1)
    i = np.asarray(ind).astype(np.int64)
    i = np.where(i < 0, i + attrs.depth, i)
    shape = [1] * (ind.ndim + 1)
    shape[axis] = attrs.depth
    hit = np.expand_dims(i, axis) == np.arange(attrs.depth).reshape(shape)
    dt = attrs.dtype or on.dtype
    return wrap(np.where(hit, on, off), dt)


def one_hot_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``one_hot``."""
    te, tirx = T.te_mod(), T.tir_mod()
    ind, on, off = inputs
    is_ = T.shape_of(ind)
    axis = norm_axis(attrs.axis, len(is_), extra=1)
    shape = list(is_)
    shape.insert(axis, attrs.depth)
    dt = out_type.dtype
    d = T.const(attrs.depth, "int64")

    def body(*o: Any) -> Any:
        i = T.cast(ind(*(o[:axis] + o[axis + 1:])), "int64")
        i = tirx.Select(i < T.const(0, "int64"), i + d, i)
        return tirx.Select(i == T.cast(o[axis], "int64"), T.cast(on(), dt), T.cast(off(), dt))
    return te.compute(shape, body, name="T_one_hot", tag="injective")


@grad_rule
def one_hot_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``d on = sum(g * mask)``, ``d off = sum(g * (1 - mask))`` (mask: the one-hot of the
    indices, as the op computes it); indices: zero."""
    idx, on, off = call.args
    dt = tensor_type(out).dtype
    one, zero = const(np.asarray(1, dt)), const(np.asarray(0, dt))
    a = call.attrs

    def masked(on_v: Any, off_v: Any) -> Any:
        mask = op("one_hot", idx, on_v, off_v, depth=a.depth, axis=a.axis, dtype=dt)
        s = op("sum", op("multiply", g, mask))
        vdt = tensor_type(on).dtype
        return s if vdt == dt else op("cast", s, dtype=vdt)
    return (zeros_for(idx), masked(one, zero), masked(zero, one))


defop("one_hot", 3, attrs=[F("depth", "int", 1, "the size of the new axis"),
                           F("axis", "int", -1, "where the new axis goes"),
                           F("dtype", "str", "", "the result dtype (\"\": the values')")],
      attrs_type="OneHotAttrs", rel=one_hot_rel, impl=one_hot_ref, compute=one_hot_te,
      grad=one_hot_grad, jvp=jvp_linear_in(1, 2), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="One-hot encoding: on_value where the index matches, off_value elsewhere.")


# ----------------------------------------------------------------------------- cumsum, cumprod
def _scan_rel(name: str):  # type: ignore[no-untyped-def]
    @tensor_rel("data")
    def rel(x: TensorType, attrs: Attrs) -> Type | None:
        axis = None if attrs.axis is None else norm_axis(attrs.axis, x.ndim)
        dt = check_dtype(attrs.dtype or x.dtype)
        if dt == "bool":
            raise TypeInferenceError(f"{name}: the result dtype must be numeric, found bool")
        if axis is None:
            return TensorType((shape_size(x.shape),), dt)
        return TensorType(x.shape, dt)
    what = "sums" if name == "cumsum" else "products"
    rel.__doc__ = (f"``{name}(data, axis, dtype, exclusive, reverse)``: running {what} along "
                   "``axis`` (None: the flattened data, a 1-D result); dtype \"\" keeps the "
                   "data's; ``exclusive`` leaves out the element itself, ``reverse`` scans "
                   "from the end (as ONNX CumSum/CumProd).")
    return rel


def _scan_ref(name: str):  # type: ignore[no-untyped-def]
    np_scan, empty = (np.cumsum, 0) if name == "cumsum" else (np.cumprod, 1)

    def ref(args: list, attrs: Attrs) -> np.ndarray:
        x = args[0]
        dt = np.dtype(attrs.dtype or x.dtype)
        if attrs.axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = norm_axis(attrs.axis, x.ndim)
        v = x.astype(dt)
        if attrs.reverse:
            v = np.flip(v, axis)
        y = np_scan(v, axis=axis, dtype=dt)
        if attrs.exclusive:
            pad = np.full_like(np.take(y, [0], axis=axis), empty)
            y = np.concatenate([pad, np.take(y, np.arange(y.shape[axis] - 1), axis=axis)], axis)
        if attrs.reverse:
            y = np.flip(y, axis)
        return wrap(np.ascontiguousarray(y), dt)
    ref.__doc__ = (f"``np.{np_scan.__name__}`` in the result dtype, shifted (with {empty}) "
                   "for exclusive, flipped for reverse.")
    return ref


# NOTE: a scan axis at least this long is computed in blocks (O(d sqrt d) work), a shorter or
# symbolic one as one masked reduction per element (O(d^2), numpy's summation order exactly)
_BLOCKED_SCAN_MIN = 64


def _scan_te(name: str):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
        te, tirx = T.te_mod(), T.tir_mod()
        x = inputs[0]
        dt = out_type.dtype
        if attrs.axis is None:
            from relay_ir.op.transform import _reshape_to
            x = _reshape_to(x, [T.shape_size(T.shape_of(x))], "T_flatten")
            axis = 0
        else:
            axis = norm_axis(attrs.axis, len(T.shape_of(x)))
        xs = T.shape_of(x)
        d = xs[axis]
        if name == "cumsum":
            ident = T.const(-0.0 if T.is_float(dt) else 0, dt)
            red = te.comm_reducer(lambda a, b: a + b,
                                  lambda t: T.const(-0.0 if T.is_float(t) else 0, t),
                                  name="cumsum")
        else:
            ident = T.const(1, dt)
            red = te.comm_reducer(lambda a, b: a * b, lambda t: T.const(1, t), name="cumprod")

        def read(o: Sequence[Any], k: Any) -> Any:
            """x at position k of the scan order (mirrored for reverse), in the result dtype."""
            idx = list(o)
            idx[axis] = (d - 1 - k) if attrs.reverse else k
            return T.cast(x(*idx), dt)

        def finish(j: Any, v: Any) -> Any:
            # NOTE: the empty sum of an exclusive scan is +0.0, as numpy's shifted scan has it
            if name == "cumsum" and attrs.exclusive and T.is_float(dt):
                return tirx.Select(j == 0, T.const(0.0, dt), v)
            return v

        def pos(o: Sequence[Any]) -> Any:
            return (d - 1 - o[axis]) if attrs.reverse else o[axis]

        if not isinstance(d, int) or d < _BLOCKED_SCAN_MIN:
            r = te.reduce_axis((0, d), name="r")

            def body(*o: Any) -> Any:
                j = pos(o)
                keep = r < j if attrs.exclusive else r <= j
                skip = ident
                if name == "cumsum" and attrs.exclusive and T.is_float(dt):
                    # NOTE: one +0.0 term makes the empty sum +0.0 (see finish)
                    skip = tirx.Select(tirx.all(j == 0, r == 0), T.const(0.0, dt), ident)
                return red(tirx.Select(keep, read(o, r), skip), axis=r)
            return te.compute(xs, body, name=f"T_{name}")
        # blocks of b elements: a scan within each block, an exclusive scan of the block
        # totals, and their combination
        b = max(int(math.isqrt(d)), 1)
        nb = -(-d // b)

        def clamp(k: Any) -> Any:
            return tirx.min(k, d - 1)
        rb = te.reduce_axis((0, b), name="rb")

        def inner(*o: Any) -> Any:
            j = o[axis]
            keep = rb < tirx.truncmod(j, b) if attrs.exclusive else rb <= tirx.truncmod(j, b)
            k = tirx.truncdiv(j, b) * b + rb
            return red(tirx.Select(keep, read(o, clamp(k)), ident), axis=rb)
        part = te.compute(xs, inner, name=f"T_{name}_block")
        rt = te.reduce_axis((0, b), name="rt")
        tshape = list(xs)
        tshape[axis] = nb

        def total(*o: Any) -> Any:
            k = o[axis] * b + rt
            return red(tirx.if_then_else(k < d, read(o, clamp(k)), ident), axis=rt)
        tot = te.compute(tshape, total, name=f"T_{name}_total")
        rc = te.reduce_axis((0, nb), name="rc")

        def before(*o: Any) -> Any:
            idx = list(o)
            idx[axis] = rc
            return red(tirx.Select(rc < o[axis], tot(*idx), ident), axis=rc)
        pre = te.compute(tshape, before, name=f"T_{name}_prefix")

        def combine(*o: Any) -> Any:
            j = pos(o)
            pi, qi = list(o), list(o)
            # NOTE: truncdiv (j >= 0): TVM 0.27 miscompiles floordiv(c - i, b) used as a
            # buffer index (wrong blocks at some i; the same value computed is right)
            pi[axis], qi[axis] = tirx.truncdiv(j, b), j
            v = pre(*pi) + part(*qi) if name == "cumsum" else pre(*pi) * part(*qi)
            return finish(j, v)
        return te.compute(xs, combine, name=f"T_{name}")
    compute.__doc__ = (f"TE compute of ``{name}``: a masked reduction per element (``O(d^2)`` "
                       "per line, numpy's order exactly) for an axis shorter than "
                       "``_BLOCKED_SCAN_MIN`` or symbolic, otherwise blocks of ``sqrt(d)``: "
                       "scans within the blocks, an exclusive scan of the block totals and "
                       "their combination (``O(d sqrt d)``); sums start from ``-0.0``, the "
                       "additive identity of IEEE floats.")
    return compute


_SCAN_ATTRS = [F("axis", "int?", None, "the axis scanned (None: flattened)"),
               F("dtype", "str", "", "the result dtype (\"\": the data's)"),
               F("exclusive", "bool", False, "leave out the element itself"),
               F("reverse", "bool", False, "scan from the end (ONNX CumSum/CumProd)")]


@grad_rule
def cumsum_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``cumsum`` is linear: its adjoint is the scan of ``g`` the other way round (same
    exclusive), reshaped (axis None) and cast back to the data's dtype."""
    x = call.args[0]
    a = call.attrs
    xt = tensor_type(x)
    dx = op("cumsum", g, axis=0 if a.axis is None else a.axis, exclusive=a.exclusive,
            reverse=not a.reverse)
    if a.axis is None:
        dx = op("reshape_like", dx, x)
    if tensor_type(out).dtype != xt.dtype:
        dx = op("cast", dx, dtype=xt.dtype)
    return (dx,)


defop("cumsum", 1, attrs=_SCAN_ATTRS, attrs_type="ScanopAttrs", rel=_scan_rel("cumsum"),
      impl=_scan_ref("cumsum"), compute=_scan_te("cumsum"), grad=cumsum_grad, jvp=jvp_linear,
      pattern=OpPattern.OPAQUE, doc="Cumulative sum along an axis.")


def _cumprod_parts(call: Any, x: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """``(z, xt, P, C, scan)`` for ``cumprod(x)``: the zero mask, x with zeros replaced by
    ones, ``cumprod(xt)`` and ``cumsum(z)`` (with the call's scan attributes), and those
    attributes (axis 0 of the flattened data for axis None)."""
    a = call.attrs
    dt = tensor_type(x).dtype
    if a.axis is None:
        x = op("reshape", x, newshape=[-1])
    scan = {"axis": 0 if a.axis is None else a.axis, "exclusive": a.exclusive,
            "reverse": a.reverse}
    z = op("equal", x, const(np.asarray(0, dt)))
    xt = op("where", z, op("ones_like", x), x)
    return (z, xt, op("cumprod", xt, **scan),
            op("cumsum", op("cast", z, dtype="int32"), **scan), scan)


def _count_is(c: Any, k: int) -> Any:
    return op("equal", c, const(np.asarray(k, "int32")))


@grad_rule
def cumprod_grad(call, out, g):  # type: ignore[no-untyped-def]
    """With zeros counted (``z = x == 0``, ``xt = where(z, 1, x)``, ``P = cumprod(xt)``,
    ``C = cumsum(z)``, same scan attributes): ``dx = where(z, S1, S0) / xt`` with
    ``S_n = cumsum(where(C == n, g * P, 0))`` scanned the other way round; exact at zeros
    (its own derivative is not, where an element is exactly zero)."""
    x = call.args[0]
    xdt = tensor_type(x).dtype
    if tensor_type(out).dtype != xdt:
        g = op("cast", g, dtype=xdt)
    z, xt, p, c, scan = _cumprod_parts(call, x)
    gp = op("multiply", g, p)
    zero = op("zeros_like", gp)
    back = dict(scan, reverse=not scan["reverse"])
    s0 = op("cumsum", op("where", _count_is(c, 0), gp, zero), **back)
    s1 = op("cumsum", op("where", _count_is(c, 1), gp, zero), **back)
    dx = op("divide", op("where", z, s1, s0), xt)
    if call.attrs.axis is None:
        dx = op("reshape_like", dx, x)
    return (dx,)


def cumprod_jvp(call, out, tangents):  # type: ignore[no-untyped-def]
    """``P * where(C == 0, cumsum(t / xt), where(C == 1, cumsum(where(z, t, 0)), 0))`` (the
    names of the gradient rule; exact at zeros), in the result dtype."""
    x, t = call.args[0], tangents[0]
    z, xt, p, c, scan = _cumprod_parts(call, x)
    if call.attrs.axis is None:
        t = op("reshape", t, newshape=[-1])
    none = op("cumsum", op("divide", t, xt), **scan)
    one = op("cumsum", op("where", z, t, op("zeros_like", t)), **scan)
    inner = op("where", _count_is(c, 0), none,
               op("where", _count_is(c, 1), one, op("zeros_like", one)))
    dy = op("multiply", p, inner)
    odt = tensor_type(out).dtype
    if odt != tensor_type(x).dtype:
        dy = op("cast", dy, dtype=odt)
    return dy


defop("cumprod", 1, attrs=_SCAN_ATTRS, attrs_type="ScanopAttrs", rel=_scan_rel("cumprod"),
      impl=_scan_ref("cumprod"), compute=_scan_te("cumprod"), grad=cumprod_grad,
      jvp=cumprod_jvp, pattern=OpPattern.OPAQUE, doc="Cumulative product along an axis.")


# ----------------------------------------------------------------------------- arange
def _arange_len(attrs: Attrs) -> int:
    if attrs.stop is None:
        raise TypeInferenceError("arange needs a stop attribute")
    if attrs.step == 0:
        raise TypeInferenceError("arange: step must not be 0")
    n = math.ceil((attrs.stop - attrs.start) / attrs.step)
    return max(int(n), 0)


def arange_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``arange(start, stop, step, dtype)`` (static attributes): a 1-D tensor of
    ``max(ceil((stop - start) / step), 0)`` values ``start + i * step``."""
    return TensorType((_arange_len(attrs),), check_dtype(attrs.dtype))


def arange_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``start + i * step`` computed in float64, converted to the dtype."""
    n = _arange_len(attrs)
    v = attrs.start + np.arange(n, dtype=np.float64) * attrs.step
    return wrap(v.astype(attrs.dtype), attrs.dtype)


def arange_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``arange`` (float64 arithmetic, then the dtype)."""
    te = T.te_mod()
    n = _arange_len(attrs)
    start, step = T.const(attrs.start, "float64"), T.const(attrs.step, "float64")
    return te.compute((n,), lambda i: T.cast(start + T.cast(i, "float64") * step, attrs.dtype),
                      name="T_arange", tag="injective")


defop("arange", 0, attrs=[F("start", "float", 0.0, "the first value"),
                          F("stop", "float", None, "the bound (excluded)"),
                          F("step", "float", 1.0, "the spacing"),
                          F("dtype", "dtype", "float32", "the result dtype")],
      attrs_type="ArangeAttrs", rel=arange_rel, impl=arange_ref, compute=arange_te,
      non_differentiable=True, pattern=OpPattern.INJECTIVE, required=("stop",),
      doc="Evenly spaced values in [start, stop) (static bounds).")


# ----------------------------------------------------------------------------- einsum
_SPARE = [chr(c) for c in range(0x3b1, 0x3c9)]  # NOTE: Greek letters stand for ellipsis dims


def parse_einsum(eq: str, ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """Operand labels and output labels of ``eq`` for operands of ``ranks``; an ellipsis
    becomes spare labels; no ``->``: the labels seen once, sorted (ellipsis dims first)."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise TypeInferenceError(f"einsum: equation {eq!r} has {len(terms)} operands, the call "
                                 f"{len(ranks)}")
    for t in terms + ([rhs] if arrow else []):
        bad = set(t.replace("...", "")) - set(string.ascii_letters)
        if bad or t.count("...") > 1:
            raise TypeInferenceError(f"einsum: bad term {t!r} in equation {eq!r} (letters and "
                                     "at most one ellipsis)")
    ell = 0
    ops: list[list[str]] = []
    for t, r in zip(terms, ranks):
        pre, dots, post = t.partition("...")
        e = r - len(pre) - len(post)
        if (not dots and e != 0) or e < 0:
            raise TypeInferenceError(f"einsum: term {t!r} does not match an operand of rank {r}")
        ell = max(ell, e)
        ops.append(list(pre) + ["..."] * e + list(post))
    spare = _SPARE[:ell]
    labels = []
    for lab in ops:
        e = lab.count("...")
        k = 0
        out = []
        for c in lab:
            if c == "...":
                out.append(spare[ell - e + k])
                k += 1
            else:
                out.append(c)
        labels.append(out)
    counts: dict[str, int] = {}
    for lab in labels:
        for c in lab:
            counts[c] = counts.get(c, 0) + 1
    if arrow:
        pre, dots, post = rhs.partition("...")
        out = list(pre) + (spare if dots else []) + list(post)
        if len(set(out)) != len(out):
            raise TypeInferenceError(f"einsum: the output {rhs!r} repeats a label")
        missing = [c for c in out if c not in counts]
        if missing:
            raise TypeInferenceError(f"einsum: output label(s) {''.join(missing)} of {eq!r} "
                                     "appear in no operand")
    else:
        out = spare + sorted(c for c, n in counts.items() if n == 1 and c not in spare)
    return labels, out


def einsum_is_matmul(equation: str, ranks: Sequence[int]) -> bool:
    """Two operands, one summed label, and a kept label of its own in each operand: a
    (batched) matmul, which the CPU lowering schedules as one (runtime/lower_tvm.py)."""
    if len(ranks) != 2:
        return False
    try:
        (a, b), out = parse_einsum(equation, ranks)
    except TypeInferenceError:
        return False
    summed = {c for c in a + b if c not in out}
    return (len(summed) == 1 and len(set(a)) == len(a) and len(set(b)) == len(b)
            and any(c in out and c not in b for c in a)
            and any(c in out and c not in a for c in b))


def _label_sizes(labels: list[list[str]], shapes: Sequence[Sequence[Dim]], eq: str
                 ) -> dict[str, Dim]:
    sizes: dict[str, Dim] = {}
    for lab, shp in zip(labels, shapes):
        for c, d in zip(lab, shp):
            if c not in sizes or is_any(sizes[c]):
                if c in sizes and not dim_compatible(sizes[c], d):
                    raise ShapeMismatchError(f"einsum: label {c} has sizes "
                                             f"{format_dim(sizes[c])} and {format_dim(d)}")
                sizes[c] = d
            elif not dim_compatible(sizes[c], d):
                raise ShapeMismatchError(f"einsum: label {c!r} of {eq!r} has sizes "
                                         f"{format_dim(sizes[c])} and {format_dim(d)}")
    return sizes


def _explicit(labels: list[list[str]], out: list[str]) -> str:
    return ",".join("".join(lab) for lab in labels) + "->" + "".join(out)


def einsum_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``einsum(data, equation)``: ``data`` a tuple of tensors of one numeric dtype; numpy's
    einsum conventions (repeated labels read diagonals, an ellipsis stands for the remaining
    dims, without ``->`` the labels seen once in alphabetical order); every occurrence of a
    label, ellipsis dims included, has one size (no broadcasting of size-1 dims)."""
    ts = tuple_of_tensors(arg_types[0], "data")
    if ts is None:
        return None
    if attrs.equation is None:
        raise TypeInferenceError("einsum needs an equation attribute")
    if not ts:
        raise TypeInferenceError("einsum needs at least one operand")
    for t in ts[1:]:
        if t.dtype != ts[0].dtype:
            raise TypeInferenceError(f"einsum: operands have dtypes {ts[0].dtype} and "
                                     f"{t.dtype}; they must have one dtype")
    if ts[0].dtype == "bool":
        raise TypeInferenceError("einsum: operands must be numeric, found bool")
    labels, out = parse_einsum(attrs.equation, [t.ndim for t in ts])
    sizes = _label_sizes(labels, [t.shape for t in ts], attrs.equation)
    return TensorType(tuple(sizes[c] for c in out), ts[0].dtype)


def einsum_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.einsum`` of the equation with explicit labels."""
    xs = list(args[0])
    labels, out = parse_einsum(attrs.equation, [x.ndim for x in xs])
    letters = {c: c for lab in labels for c in lab if c.isascii()}
    free = iter(c for c in string.ascii_letters if c not in letters)
    for lab in labels:
        for c in lab:
            if c not in letters:
                letters[c] = next(free)
    eq = _explicit([[letters[c] for c in lab] for lab in labels], [letters[c] for c in out])
    dt = xs[0].dtype
    acc = np.float32 if dt == np.float16 else dt
    return wrap(np.einsum(eq, *[x.astype(acc) for x in xs]), dt)


def einsum_te(attrs: Attrs, inputs: list, out_type: TensorType) -> Any:
    """TE compute of ``einsum``: the product of the operands indexed by label, summed over the
    labels absent from the output (float16 accumulates in float32)."""
    te = T.te_mod()
    xs = list(inputs[0])
    labels, out = parse_einsum(attrs.equation, [len(T.shape_of(x)) for x in xs])
    sizes: dict[str, Any] = {}
    for lab, x in zip(labels, xs):
        for c, d in zip(lab, T.shape_of(x)):
            sizes.setdefault(c, d)
    summed = [c for c in dict.fromkeys(c for lab in labels for c in lab) if c not in out]
    rs = {c: te.reduce_axis((0, sizes[c]), name=f"r_{ord(c)}") for c in summed}
    dt = out_type.dtype
    acc = "float32" if dt == "float16" else dt

    def body(*o: Any) -> Any:
        var = dict(zip(out, o))
        var.update(rs)
        prod: Any = None
        for lab, x in zip(labels, xs):
            v = T.cast(x(*[var[c] for c in lab]), acc)
            prod = v if prod is None else prod * v
        return te.sum(prod, axis=list(rs.values())) if rs else prod
    r = te.compute([sizes[c] for c in out], body, name="T_einsum")
    return r if acc == dt else T.cast_tensor(r, dt)


@grad_rule
def einsum_grad(call, out, g):  # type: ignore[no-untyped-def]
    """Operand k: ``einsum(g, others -> labels_k)``; labels only operand k has (summed away)
    are broadcast back. A label repeated within an operand (a diagonal) has no rule."""
    data = call.args[0]
    ts = tuple_of_tensors(type_of(data))
    labels, out_l = parse_einsum(call.attrs.equation, [t.ndim for t in ts])
    adj = []
    for k, lab in enumerate(labels):
        if len(set(lab)) != len(lab):
            raise GradientRuleError(f"einsum {call.attrs.equation!r}: no gradient rule for a "
                                    "repeated label within an operand (a diagonal)", call.span)
        others = [i for i in range(len(labels)) if i != k]
        have = set(out_l).union(*[labels[i] for i in others])
        target = [c for c in lab if c in have]
        eq = _explicit([out_l] + [labels[i] for i in others], target)
        d = op("einsum", Tuple(tuple([g] + [field(data, i) for i in others])),
               equation=_ascii_equation(eq))
        missing = [p for p, c in enumerate(lab) if c not in have]
        for p in missing:
            d = op("expand_dims", d, axis=p, num_newaxis=1)
        if missing:
            d = op("broadcast_to_like", d, field(data, k))
        adj.append(d)
    return (Tuple(tuple(adj)),)


def _ascii_equation(eq: str) -> str:
    """``eq`` with the spare (ellipsis) labels renamed to unused ASCII letters."""
    used = set(eq)
    free = iter(c for c in reversed(string.ascii_letters) if c not in used)
    ren = {c: next(free) for c in dict.fromkeys(eq) if c in _SPARE}
    return "".join(ren.get(c, c) for c in eq)


def einsum_jvp(call, out, tangents):  # type: ignore[no-untyped-def]
    """Multilinear in the operands: ``sum_k einsum(x_1, .., t_k, .., x_n)``."""
    data, t = call.args[0], tangents[0]
    ts = tuple_of_tensors(type_of(data))
    total = None
    for k in range(len(ts)):
        fields = tuple(field(t, i) if i == k else field(data, i) for i in range(len(ts)))
        term = op("einsum", Tuple(fields), equation=call.attrs.equation)
        total = term if total is None else op("add", total, term)
    return total


defop("einsum", 1, attrs=[F("equation", "str", None, "the einsum subscripts")],
      attrs_type="EinsumAttrs", rel=einsum_rel, impl=einsum_ref, compute=einsum_te,
      grad=einsum_grad, jvp=einsum_jvp, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      required=("equation",),
      doc="Einstein summation over a tuple of tensors.")


__all__ = ["parse_einsum", "einsum_is_matmul"]
