"""Indexing operators: ``take`` and ``strided_slice``, their gradient operators
(``take_grad``, ``strided_slice_grad``: scatter-adds of the adjoint, each with its own rule so
that gradients of gradients close over this set) and their TE computes.

Relations fall back to ``?`` where a slice of a symbolic dimension is not decidable.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.op import OpPattern
from relay_ir.op._jvp import jvp_linear, jvp_linear_in
from relay_ir.op._grad import grad_rule, op, zeros_for
from relay_ir.op import _te as T
from relay_ir.op._rules import (F, defop, dim_compatible, grad_like_rel, norm_axis, tensor_rel,
                                wrap)
from relay_ir.ty import ANY, Dim, TensorType, Type, format_dim
from relay_ir.op.transform import _reshape_to, _slice_te


def strided_slice_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``strided_slice`` (static sliced dims)."""
    x = inputs[0]
    shp = T.shape_of(x)
    starts: list[object] = [0] * len(shp)
    steps = [1] * len(shp)
    out: list[object] = list(shp)
    for a, b, e, s in _slices(shp, attrs):
        d = shp[a]
        if not isinstance(d, int):
            if b == 0 and s == 1 and e is None:
                continue
            raise TypeInferenceError("strided_slice: the TVM compute needs static sliced dims")
        rng = range(*slice(b, e, s).indices(d))
        starts[a], steps[a], out[a] = (rng.start if len(rng) else 0), s, len(rng)
    return _slice_te(x, starts, steps, out, "T_strided_slice")


def _index_fixer(mode: str):  # type: ignore[no-untyped-def]
    """``(i, n) -> int64 index``: ``take``'s out-of-range rule (``wrap`` or clip) in TE."""
    tirx = T.tir_mod()

    def fix(i, n):  # type: ignore[no-untyped-def]
        i = T.cast(i, "int64")
        n = T.as_expr(n, "int64")
        if mode == "wrap":
            return tirx.floormod(i, n)
        return tirx.max(tirx.min(i, n - T.const(1, "int64")), T.const(0, "int64"))
    return fix


def take_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``take`` (clip, wrap; "fast" clips like the reference)."""
    te = T.te_mod()
    x, ind = inputs
    xs, is_ = T.shape_of(x), T.shape_of(ind)
    fix = _index_fixer(attrs.mode)
    if attrs.axis is None:
        flat = _reshape_to(x, [T.shape_size(xs)], "T_flatten")
        n = T.shape_size(xs)
        return te.compute(is_, lambda *o: flat(fix(ind(*o), n)), name="T_take",
                          tag="injective")
    axis = norm_axis(attrs.axis, len(xs))
    bd = attrs.batch_dims + len(is_) if attrs.batch_dims < 0 else attrs.batch_dims
    ni = len(is_) - bd
    out = xs[:axis] + is_[bd:] + xs[axis + 1:]

    def body(*o):  # type: ignore[no-untyped-def]
        pre = list(o[:axis])
        ii = list(o[:bd]) + list(o[axis:axis + ni])
        post = list(o[axis + ni:])
        return x(*(pre + [fix(ind(*ii), xs[axis])] + post))
    return te.compute(out, body, name="T_take", tag="injective")


# ----------------------------------------------------------------------------- take
_TAKE_MODES = ("clip", "wrap", "fast")


@tensor_rel("data", "indices")
def take_rel(x: TensorType, ind: TensorType, attrs: Attrs) -> Type | None:
    """``take(x, indices, axis, batch_dims, mode)``; axis None indexes the flattened data."""
    if not ind.dtype.startswith(("int", "uint")):
        raise TypeInferenceError(f"take: indices must have an integer dtype, found {ind.dtype}")
    if attrs.mode not in _TAKE_MODES:
        raise TypeInferenceError(f"take: unknown mode {attrs.mode!r} (expected clip, wrap or "
                                 "fast)")
    if attrs.axis is None:
        return TensorType(ind.shape, x.dtype)
    axis = norm_axis(attrs.axis, x.ndim)
    bd = _batch_dims(attrs.batch_dims, ind.ndim)
    if bd > axis:
        raise TypeInferenceError(f"take: batch_dims {attrs.batch_dims} must not exceed axis "
                                 f"{attrs.axis}")
    for i in range(bd):
        if not dim_compatible(x.shape[i], ind.shape[i]):
            raise ShapeMismatchError(f"take: batch dimension {i} differs: "
                                     f"{format_dim(x.shape[i])} vs {format_dim(ind.shape[i])}")
    shape = tuple(x.shape[:axis]) + tuple(ind.shape[bd:]) + tuple(x.shape[axis + 1:])
    return TensorType(shape, x.dtype)


def _batch_dims(bd: int, ind_ndim: int) -> int:
    b = bd + ind_ndim if bd < 0 else bd
    if not 0 <= b <= ind_ndim:
        raise TypeInferenceError(f"take: batch_dims {bd} is out of range for indices of rank "
                                 f"{ind_ndim}")
    return b


def take_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.take`` with clip/wrap modes ("fast" behaves as clip here)."""
    x, ind = args
    mode = "wrap" if attrs.mode == "wrap" else "clip"
    if attrs.axis is None:
        return wrap(np.take(x.reshape(-1), ind, mode=mode), x.dtype)
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    bd = _batch_dims(attrs.batch_dims, ind.ndim)
    if bd == 0:
        return wrap(np.take(x, ind, axis=axis, mode=mode), x.dtype)
    batch = x.shape[:bd]
    out_shape = x.shape[:axis] + ind.shape[bd:] + x.shape[axis + 1:]
    out = np.empty(out_shape, x.dtype)
    for b in np.ndindex(*batch):
        out[b] = np.take(x[b], ind[b], axis=axis - bd, mode=mode)
    return out


_TAKE_ATTRS = [F("axis", "int?", None, "the axis to index (None: flattened)"),
               F("batch_dims", "int", 0, "leading batch dims shared with indices"),
               F("mode", "str", "clip", "out-of-bounds handling: clip, wrap, fast")]


@grad_rule
def take_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``take(x, idx)``: ``g`` scatter-added into zeros like x (repeated indices add up)."""
    x, idx = call.args
    return (op("take_grad", g, x, idx, **dict(call.attrs)), zeros_for(idx))


take_grad_rel = grad_like_rel("take_grad", 1, None,
                              lambda ts, attrs: take_rel(ts[1:], attrs))


def take_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Scatter-add of ``out_grad`` at the positions ``take`` reads (after clip/wrap)."""
    g, like, ind = args
    acc = np.zeros(like.shape, np.float64)
    gg = g.astype(np.float64)
    if attrs.axis is None:
        n = like.size
        flat = np.zeros(n, np.float64)
        np.add.at(flat, _norm_index(ind, n, attrs.mode), gg)
        return wrap(flat.reshape(like.shape), g.dtype)
    axis = attrs.axis + like.ndim if attrs.axis < 0 else attrs.axis
    bd = _batch_dims(attrs.batch_dims, ind.ndim)
    d = like.shape[axis]
    ax = axis - bd
    for b in np.ndindex(*like.shape[:bd]):
        ib = _norm_index(ind[b], d, attrs.mode)
        k = ib.ndim
        # NOTE: the indexed axis first in acc, the index dims first in g: then add.at lines up
        moved = np.moveaxis(acc[b], ax, 0)
        np.add.at(moved, ib, np.moveaxis(gg[b], tuple(range(ax, ax + k)), tuple(range(k))))
    return wrap(acc, g.dtype)


def _norm_index(ind: np.ndarray, n: int, mode: str) -> np.ndarray:
    i = ind.astype(np.int64)
    if mode == "wrap":
        return np.mod(i, n)
    return np.clip(i, 0, n - 1)


@grad_rule
def take_grad_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``take_grad(g, like, idx)`` is linear in g: ``dg = take(h, idx)``; zero for the rest."""
    g, like, idx = call.args
    return (op("take", h, idx, **dict(call.attrs)), zeros_for(like), zeros_for(idx))


def take_grad_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``take_grad``: each element sums the ``g`` entries whose index hits it."""
    te, tirx = T.te_mod(), T.tir_mod()
    g, like, ind = inputs
    xs, is_ = T.shape_of(like), T.shape_of(ind)
    dt = out_type.dtype
    acc = "float64" if T.is_float(dt) else "int64"
    fix = _index_fixer(attrs.mode)
    if attrs.axis is None:
        axis, bd, n = None, 0, T.shape_size(xs)
    else:
        axis = norm_axis(attrs.axis, len(xs))
        bd = attrs.batch_dims + len(is_) if attrs.batch_dims < 0 else attrs.batch_dims
        n = xs[axis]
    rs = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(is_[bd:])]

    def body(*o):  # type: ignore[no-untyped-def]
        if axis is None:
            flat: object = T.const(0, "int64")
            for d, v in zip(xs, o):
                flat = flat * T.as_expr(d, "int64") + T.cast(v, "int64")
            target, ii, gi = flat, list(rs), list(rs)
        else:
            target = T.cast(o[axis], "int64")
            ii = list(o[:bd]) + list(rs)
            gi = list(o[:axis]) + list(rs) + list(o[axis + 1:])
        hit = fix(ind(*ii), n) == target
        v = tirx.if_then_else(hit, T.cast(g(*gi), acc), T.const(0, acc))
        return te.sum(v, axis=rs) if rs else v
    r = te.compute(xs, body, name="T_take_grad")
    return T.cast_tensor(r, dt)


defop("take_grad", 3, attrs=_TAKE_ATTRS, attrs_type="TakeAttrs", rel=take_grad_rel,
      impl=take_grad_ref, grad=take_grad_grad, jvp=jvp_linear_in(0), pattern=OpPattern.OPAQUE,
      doc="Gradient of take: (out_grad, data_like, indices) -> out_grad scatter-added.",
      compute=take_grad_te)


defop("take", 2, grad=take_grad, jvp=jvp_linear_in(0), attrs=_TAKE_ATTRS,
      attrs_type="TakeAttrs", rel=take_rel, impl=take_ref, pattern=OpPattern.INJECTIVE,
      doc="Gather elements along an axis.",
      compute=take_te)


# ----------------------------------------------------------------------------- strided_slice
def _slices(shape: Sequence[Dim], attrs: Attrs) -> list[tuple[int, Any, Any, Any]]:
    """(axis, begin, end, stride) per sliced axis, in Python-slice terms."""
    begin, end, strides, axes = attrs.begin, attrs.end, attrs.strides, attrs.axes
    ndim = len(shape)
    if begin is None or end is None:
        raise TypeInferenceError("strided_slice needs begin and end attributes")
    if axes is None:
        axes = tuple(range(len(begin)))
        if len(begin) > ndim:
            raise TypeInferenceError(f"strided_slice: begin {tuple(begin)} has more entries "
                                     f"than the rank {ndim}")
    else:
        if len(begin) != len(axes):
            raise TypeInferenceError("strided_slice: begin and axes have different lengths")
        axes = tuple(norm_axis(a, ndim) for a in axes)
    size_mode = attrs.slice_mode == "size"
    if attrs.slice_mode not in ("end", "size"):
        raise TypeInferenceError(f"strided_slice: unknown slice_mode {attrs.slice_mode!r}")
    out = []
    for k, a in enumerate(axes):
        b = begin[k]
        e = end[k] if k < len(end) else None
        # NOTE: as in TVM, missing strides are 1 (a single stride is not broadcast)
        s = 1 if size_mode or strides is None or k >= len(strides) else strides[k]
        if s == 0:
            raise TypeInferenceError("strided_slice: a stride is 0")
        if size_mode and e is not None:
            if e < 0:
                e = None
            else:
                e = b + e if b >= 0 or b + e < 0 else None
        out.append((a, b, e, s))
    return out


@tensor_rel("data")
def strided_slice_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``strided_slice(x, begin, end, strides, axes, slice_mode)``: Python slice semantics."""
    shape = list(t.shape)
    for a, b, e, s in _slices(shape, attrs):
        d = shape[a]
        if isinstance(d, int):
            shape[a] = len(range(*slice(b, e, s).indices(d)))
        elif b == 0 and s == 1 and e is None:
            pass
        else:
            shape[a] = ANY
    return TensorType(tuple(shape), t.dtype)


def strided_slice_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Basic numpy slicing, copied."""
    x = args[0]
    idx: list[Any] = [slice(None)] * x.ndim
    for a, b, e, s in _slices(x.shape, attrs):
        idx[a] = slice(b, e, s)
    return np.array(x[tuple(idx)], copy=True)


_SLICE_ATTRS = [F("begin", "ints?", None, "first index per axis"),
                F("end", "ints?", None, "end index (or size) per axis"),
                F("strides", "ints?", None, "step per axis (default 1)"),
                F("axes", "ints?", None, "the axes sliced (None: the leading ones)"),
                F("slice_mode", "str", "end", "\"end\" or \"size\"")]


@grad_rule
def strided_slice_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``strided_slice(x)``: ``g`` written into the sliced positions of zeros like x."""
    return (op("strided_slice_grad", g, call.args[0], **dict(call.attrs)),)


strided_slice_grad_rel = grad_like_rel("strided_slice_grad", 1, None,
                                       lambda ts, attrs: strided_slice_rel(ts[1:], attrs))


def strided_slice_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Zeros like ``data_like`` with ``out_grad`` at the sliced positions."""
    g, like = args
    out = np.zeros(like.shape, g.dtype)
    idx: list[Any] = [slice(None)] * like.ndim
    for a, b, e, s in _slices(like.shape, attrs):
        idx[a] = slice(b, e, s)
    out[tuple(idx)] = g
    return out


@grad_rule
def strided_slice_grad_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``strided_slice_grad(g, like)`` is linear in g: ``dg = strided_slice(h)``."""
    g, like = call.args
    return (op("strided_slice", h, **dict(call.attrs)), zeros_for(like))


def strided_slice_grad_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``strided_slice_grad``: ``g`` where the index lies on the slice, else 0."""
    te, tirx = T.te_mod(), T.tir_mod()
    g, like = inputs
    shp = T.shape_of(like)
    sl: dict[int, tuple[int, int, int]] = {}
    for a, b, e, s in _slices(shp, attrs):
        d = shp[a]
        if not isinstance(d, int):
            if b == 0 and s == 1 and e is None:
                continue
            raise TypeInferenceError("strided_slice_grad: the TVM compute needs static sliced "
                                     "dims")
        rng = range(*slice(b, e, s).indices(d))
        sl[a] = (rng.start, s, len(rng))
    dt = out_type.dtype

    def body(*i):  # type: ignore[no-untyped-def]
        conds, gi = [], list(i)
        for a, (start, step, n) in sl.items():
            # NOTE: the distance from start along the step's direction, divided with truncdiv
            # only where it is >= 0: TVM 0.27's FlattenBuffer miscompiles an index
            # floordiv(i - c, step) for a negative step (and floordiv(c - i, k)): it read the
            # neighbouring element at some i
            off = (i[a] - start) if step > 0 else (start - i[a])
            k = tirx.truncdiv(off, abs(step))
            conds.append(tirx.all(off >= 0, tirx.truncmod(off, abs(step)) == 0, k < n))
            gi[a] = tirx.max(tirx.min(k, max(n - 1, 0)), 0)
        if not conds:
            return g(*gi)
        return tirx.if_then_else(tirx.all(*conds), g(*gi), T.const(0, dt))
    return te.compute(shp, body, name="T_strided_slice_grad", tag="injective")


defop("strided_slice_grad", 2, attrs=_SLICE_ATTRS, attrs_type="StridedSliceAttrs",
      rel=strided_slice_grad_rel, impl=strided_slice_grad_ref, grad=strided_slice_grad_grad,
      jvp=jvp_linear_in(0),
      pattern=OpPattern.INJECTIVE, required=("begin", "end"),
      doc="Gradient of strided_slice: (out_grad, data_like) -> out_grad placed in zeros.",
      compute=strided_slice_grad_te)


defop("strided_slice", 1, grad=strided_slice_grad, jvp=jvp_linear,
      attrs=_SLICE_ATTRS,
      attrs_type="StridedSliceAttrs", rel=strided_slice_rel, impl=strided_slice_ref,
      pattern=OpPattern.INJECTIVE, doc="Python-style strided slicing.",
      compute=strided_slice_te,
      required=("begin", "end"))
