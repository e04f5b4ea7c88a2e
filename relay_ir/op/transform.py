"""Layout-free shape transformations: reshape (codes 0/-1/-2/-3/-4), reshape_like, transpose,
expand_dims, squeeze, concatenate, stack, split, broadcast_to(_like),
collapse_sum_like/collapse_sum_to, reverse, tile, repeat; and layout_transform between TVM
layout strings (``NCHW`` <-> ``NCHW16c``: an upper-case primal axis, ``16c`` its inner 16;
a split that does not divide its axis is zero-padded to whole blocks, as in TVM).

Relations compute with symbolic dimensions where the answer is decidable (``dim_mul`` for
sizes, ``dim_div_exact`` for ``-1``, ``dim_add`` for concatenation) and fall back to ``?``
where it is not. ``take`` and ``strided_slice`` live in :mod:`relay_ir.op.indexing`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Tuple, TupleGetItem
from relay_ir.op import OpPattern
from relay_ir.op._jvp import jvp_linear, jvp_linear_in
from relay_ir.op._grad import (GradientRuleError, field, grad_rule, op, static_shape, tensor_type,
                               zeros_for)
from relay_ir.op import _te as T
from relay_ir.op._rules import (F, defop, dim_compatible, fmt_shape, is_any, norm_axis, shape_size,
                                tensor_rel, tuple_of_tensors, wrap)
from relay_ir.ty import (ANY, Dim, TensorType, TupleType, Type, dim_add, dim_div_exact,
                         dim_mul, format_dim)


# ----------------------------------------------------------------------------- TE computes
def _static_shape(out_type: TensorType, what: str) -> list[int]:
    shape = []
    for d in out_type.shape:
        if not isinstance(d, int):
            raise TypeInferenceError(f"{what}: the TVM compute needs a static result shape, "
                                     f"found {fmt_shape(out_type.shape)}")
        shape.append(d)
    return shape


def _reshape_to(x: object, shape: Sequence[object], name: str = "T_reshape") -> object:
    """Row-major reshape of a te tensor to ``shape`` (ints or PrimExprs)."""
    te = T.te_mod()
    tirx = T.tir_mod()
    src = T.shape_of(x)

    def body(*o):  # type: ignore[no-untyped-def]
        flat: object = 0
        for d, i in zip(shape, o):
            flat = flat * d + i
        idx = []
        for d in reversed(src):
            if T.is_one(d):
                idx.append(0)
                continue
            idx.append(tirx.floormod(flat, d) if not isinstance(flat, int) else flat % d)
            flat = tirx.floordiv(flat, d) if not isinstance(flat, int) else flat // d
        return x(*reversed(idx))
    return te.compute(list(shape), body, name=name, tag="injective")


def _te_dims(x: object, out_type: TensorType, what: str) -> list[object]:
    """The result dims: static ones from ``out_type``; symbolic ones as TIR expressions when
    the kernel is lowered with symbolic shapes (``runtime.relax_shapes``)."""
    if not out_type.is_static and T.symbolic_dim(0) is not None:
        return [T.symbolic_dim(d) for d in out_type.shape]
    return _static_shape(out_type, what)


def reshape_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``reshape`` (static result shape)."""
    return _reshape_to(inputs[0], _te_dims(inputs[0], out_type, "reshape"))


def reshape_like_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``reshape_like``."""
    return _reshape_to(inputs[0], _te_dims(inputs[0], out_type, "reshape_like"))


def transpose_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``transpose``."""
    te = T.te_mod()
    x = inputs[0]
    shp = T.shape_of(x)
    perm = transpose_axes(len(shp), attrs.axes)

    def body(*o):  # type: ignore[no-untyped-def]
        idx = [None] * len(perm)
        for k, p in enumerate(perm):
            idx[p] = o[k]
        return x(*idx)
    return te.compute([shp[p] for p in perm], body, name="T_transpose", tag="injective")


def expand_dims_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``expand_dims``."""
    te = T.te_mod()
    x = inputs[0]
    shp = T.shape_of(x)
    a = norm_axis(attrs.axis, len(shp), extra=1)
    num = attrs.num_newaxis
    out = shp[:a] + [1] * num + shp[a:]
    return te.compute(out, lambda *o: x(*(list(o[:a]) + list(o[a + num:]))),
                      name="T_expand_dims", tag="broadcast")


def squeeze_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``squeeze`` (a squeezed ``?`` axis must be 1 at run time)."""
    te = T.te_mod()
    x = inputs[0]
    shp = T.shape_of(x)
    if attrs.axis is None:
        keep = [i for i, d in enumerate(shp) if not T.is_one(d)]
    else:
        drop = {norm_axis(a, len(shp)) for a in attrs.axis}
        keep = [i for i in range(len(shp)) if i not in drop]

    def body(*o):  # type: ignore[no-untyped-def]
        idx: list[object] = [0] * len(shp)
        for k, i in enumerate(keep):
            idx[i] = o[k]
        return x(*idx)
    return te.compute([shp[i] for i in keep], body, name="T_squeeze", tag="injective")


# ----------------------------------------------------------------------------- reshape
def _split_part(d0: Dim, other: int) -> Dim:
    """The ``-1`` part of a reshape ``-4`` split of ``d0`` whose other part is ``other``."""
    q = dim_div_exact(d0, other)
    if q is None:
        raise ShapeMismatchError(f"reshape: cannot split dimension {format_dim(d0)} by {other}")
    return q


def reshape_dims(ishape: Sequence[Dim], newshape: Sequence[int], allowzero: bool = False
                 ) -> tuple[Dim, ...]:
    """Relay's reshape codes applied to ``ishape`` (ints, ``?`` or symbolic dims).

    ``0`` copies the input dim at the same position (a literal 0 with ``allowzero``), ``-1``
    is inferred, ``-2`` copies the remaining dims, ``-3`` merges the next two, ``-4`` splits
    one dim into the next two codes (one of which may be ``-1``).
    """
    out: list[Dim] = []
    infer_at = -1
    src = 0
    i = 0
    n = len(newshape)
    nin = len(ishape)

    def need(k: int, code: int) -> None:
        if src + k > nin:
            raise TypeInferenceError(f"reshape code {code} in newshape {tuple(newshape)} "
                                     f"reads past the input shape {fmt_shape(ishape)}")
    while i < n:
        v = newshape[i]
        if v > 0:
            out.append(v)
            src += 1
        elif v == 0:
            if allowzero:
                out.append(0)
            else:
                need(1, 0)
                out.append(ishape[src])
            src += 1
        elif v == -1:
            if infer_at >= 0:
                raise TypeInferenceError(f"reshape: newshape {tuple(newshape)} has more than "
                                         "one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif v == -2:
            out.extend(ishape[src:])
            src = nin
        elif v == -3:
            need(2, -3)
            out.append(dim_mul(ishape[src], ishape[src + 1]))
            src += 2
        elif v == -4:
            if i + 2 >= n:
                raise TypeInferenceError("reshape: -4 must be followed by two dimensions")
            need(1, -4)
            d0 = ishape[src]
            a, b = newshape[i + 1], newshape[i + 2]
            if a < -1 or b < -1 or a == 0 or b == 0 or (a == -1 and b == -1):
                raise TypeInferenceError(f"reshape: bad split ({a}, {b}) after -4")
            if a == -1:
                a = _split_part(d0, b)  # type: ignore[assignment]
            if b == -1:
                b = _split_part(d0, a)  # type: ignore[assignment]
            if not dim_compatible(dim_mul(a, b), d0):
                raise ShapeMismatchError(f"reshape: cannot split dimension {format_dim(d0)} "
                                         f"into {format_dim(a)} and {format_dim(b)}")
            out.extend((a, b))
            src += 1
            i += 2
        else:
            raise TypeInferenceError(f"reshape: invalid code {v} in newshape {tuple(newshape)}")
        i += 1
    in_size = shape_size(ishape)
    if infer_at >= 0:
        rest = shape_size(out[:infer_at] + out[infer_at + 1:])
        q = None if rest == 0 else dim_div_exact(in_size, rest)
        if q is None:
            raise ShapeMismatchError(
                f"cannot reshape {fmt_shape(ishape)} with {format_dim(in_size)} elements: "
                f"{format_dim(rest)} does not divide it (newshape {tuple(newshape)})")
        out[infer_at] = q
    out_size = shape_size(out)
    if not dim_compatible(in_size, out_size):
        raise ShapeMismatchError(
            f"cannot reshape {fmt_shape(ishape)} with {format_dim(in_size)} elements to "
            f"{fmt_shape(out)} with {format_dim(out_size)} elements")
    return tuple(out)


@tensor_rel("data")
def reshape_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``reshape(x, newshape)`` with Relay's special codes."""
    if attrs.newshape is None:
        raise TypeInferenceError("reshape needs a newshape attribute")
    return TensorType(reshape_dims(t.shape, attrs.newshape, attrs.allowzero), t.dtype)


def reshape_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.reshape`` to the relation's shape."""
    x = args[0]
    return np.reshape(x, reshape_dims(x.shape, attrs.newshape, attrs.allowzero))


@grad_rule
def _reshape_grad(call, out, g):  # type: ignore[no-untyped-def]
    """Shape-only ops (reshape, expand_dims, squeeze...): ``g`` reshaped like the input."""
    return (op("reshape_like", g, call.args[0]),) + tuple(zeros_for(a) for a in call.args[1:])


defop("reshape", 1, grad=_reshape_grad, jvp=jvp_linear,
      attrs=[F("newshape", "ints", None, "the new shape, with codes"),
                           F("allowzero", "bool", False, "0 is a literal zero")],
      attrs_type="ReshapeAttrs", rel=reshape_rel, impl=reshape_ref, pattern=OpPattern.INJECTIVE,
      compute=reshape_te,
      doc="Reshape with Relay's codes 0, -1, -2, -3, -4.")


def _like_range(ndim: int, begin: int, end: int | None) -> tuple[int, int]:
    b = begin + ndim if begin < 0 else begin
    e = ndim if end is None else (end + ndim if end < 0 else end)
    if not (0 <= b <= e <= ndim):
        raise TypeInferenceError(f"reshape_like: range [{begin}, {end}) is out of range for a "
                                 f"tensor of rank {ndim}")
    return b, e


def reshape_like_shape(xs: Sequence[Dim], ls: Sequence[Dim], attrs: Attrs) -> tuple[Dim, ...]:
    """The shape ``reshape_like`` produces (see the op's doc)."""
    lb, le = _like_range(len(xs), attrs.lhs_begin, attrs.lhs_end)
    rb, re_ = _like_range(len(ls), attrs.rhs_begin, attrs.rhs_end)
    out = tuple(xs[:lb]) + tuple(ls[rb:re_]) + tuple(xs[le:])
    a, b = shape_size(xs), shape_size(out)
    if not dim_compatible(a, b):
        raise ShapeMismatchError(f"cannot reshape {fmt_shape(xs)} with {format_dim(a)} elements "
                                 f"to {fmt_shape(out)} with {format_dim(b)} elements")
    return out


@tensor_rel("data", "shape_like")
def reshape_like_rel(data: TensorType, shape_like: TensorType, attrs: Attrs) -> Type | None:
    """``reshape_like(x, like)``: x's dims [lhs_begin, lhs_end) replaced by like's range."""
    return TensorType(reshape_like_shape(data.shape, shape_like.shape, attrs), data.dtype)


defop("reshape_like", 2, grad=_reshape_grad, jvp=jvp_linear_in(0),
      attrs=[F("lhs_begin", "int", 0, "first dim of x replaced"),
             F("lhs_end", "int?", None, "end of x's replaced dims (None: x's rank)"),
             F("rhs_begin", "int", 0, "first dim of like used"),
             F("rhs_end", "int?", None, "end of like's dims used (None: like's rank)")],
      attrs_type="ReshapeLikeAttrs", rel=reshape_like_rel,
      impl=lambda args, attrs: np.reshape(
          args[0], reshape_like_shape(args[0].shape, args[1].shape, attrs)),
      pattern=OpPattern.INJECTIVE, doc="Reshape to (part of) another tensor's shape.",
      compute=reshape_like_te)


# ----------------------------------------------------------------------------- transpose
def transpose_axes(ndim: int, axes: Sequence[int] | None) -> tuple[int, ...]:
    """Normalized permutation (None: reverse)."""
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    if len(axes) != ndim:
        raise TypeInferenceError(f"transpose: axes {tuple(axes)} has {len(axes)} entries for a "
                                 f"tensor of rank {ndim}")
    out = tuple(norm_axis(a, ndim) for a in axes)
    for j, a in enumerate(out):
        if a in out[:j]:
            raise TypeInferenceError(f"transpose: axis {a} appears more than once in axes "
                                     f"{tuple(axes)}")
    return out


@tensor_rel("data")
def transpose_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``transpose(x, axes)``: permuted dims."""
    return TensorType(tuple(t.shape[a] for a in transpose_axes(t.ndim, attrs.axes)), t.dtype)


@grad_rule
def transpose_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``transpose(x, axes)``: ``g`` transposed by the inverse permutation."""
    perm = transpose_axes(tensor_type(call.args[0]).ndim, call.attrs.axes)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return (op("transpose", g, axes=tuple(inv)),)


defop("transpose", 1, grad=transpose_grad, jvp=jvp_linear,
      attrs=[F("axes", "ints?", None, "the permutation (None: reverse)")],
      attrs_type="TransposeAttrs", rel=transpose_rel,
      impl=lambda args, attrs: np.transpose(args[0], transpose_axes(args[0].ndim, attrs.axes)),
      pattern=OpPattern.INJECTIVE, doc="Permute the axes.", compute=transpose_te)


# ----------------------------------------------------------------------------- expand/squeeze
def expand_dims_shape(shape: Sequence[Dim], axis: int, num: int) -> tuple[Dim, ...]:
    """``num`` unit dims inserted at ``axis``."""
    if num < 0:
        raise TypeInferenceError(f"expand_dims: num_newaxis must be >= 0, found {num}")
    a = norm_axis(axis, len(shape), extra=1)
    return tuple(shape[:a]) + (1,) * num + tuple(shape[a:])


@tensor_rel("data")
def expand_dims_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``expand_dims(x, axis, num_newaxis)``: x's shape with ``num_newaxis`` unit dims
    inserted at ``axis``, x's dtype."""
    return TensorType(expand_dims_shape(t.shape, attrs.axis, attrs.num_newaxis), t.dtype)


defop("expand_dims", 1, grad=_reshape_grad,
      jvp=jvp_linear, attrs=[F("axis", "int", None, "where to insert"),
                               F("num_newaxis", "int", 1, "how many unit axes")],
      attrs_type="ExpandDimsAttrs", rel=expand_dims_rel,
      impl=lambda args, attrs: np.reshape(
          args[0], expand_dims_shape(args[0].shape, attrs.axis, attrs.num_newaxis)),
      pattern=OpPattern.BROADCAST, doc="Insert unit axes.", compute=expand_dims_te,
      required=("axis",))


def squeeze_shape(shape: Sequence[Dim], axis: Sequence[int] | None) -> tuple[Dim, ...]:
    """Drop unit dims (all static 1s, or those in ``axis``)."""
    if axis is None:
        return tuple(d for d in shape if not (isinstance(d, int) and d == 1))
    drop = set()
    for a in axis:
        na = norm_axis(a, len(shape))
        d = shape[na]
        if not (is_any(d) or (isinstance(d, int) and d == 1)):
            raise ShapeMismatchError(f"squeeze: axis {a} has size {format_dim(d)}, not 1")
        drop.add(na)
    return tuple(d for i, d in enumerate(shape) if i not in drop)


@tensor_rel("data")
def squeeze_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``squeeze(x, axis)``: x's shape without the unit dims listed in ``axis`` (every
    unit dim when None), x's dtype."""
    return TensorType(squeeze_shape(t.shape, attrs.axis), t.dtype)


defop("squeeze", 1, grad=_reshape_grad, jvp=jvp_linear,
      attrs=[F("axis", "ints?", None, "axes to drop (None: every unit axis)")],
      attrs_type="SqueezeAttrs", rel=squeeze_rel,
      impl=lambda args, attrs: np.reshape(args[0], squeeze_shape(args[0].shape, attrs.axis)),
      pattern=OpPattern.INJECTIVE, doc="Remove unit axes.", compute=squeeze_te)


# ----------------------------------------------------------------------------- TE computes (2)
def _pick(pos: object, bounds: Sequence[object], read: Callable[[int], object]) -> object:
    """``read(k)`` for the piece ``k`` with ``bounds[k] <= pos < bounds[k + 1]``: a balanced
    tree of ``if_then_else`` (lazy: one load per element and log2(pieces) tests, where a
    ``select`` chain loads every piece)."""
    tirx = T.tir_mod()

    def tree(lo: int, hi: int) -> object:
        if hi - lo == 1:
            return read(lo)
        mid = (lo + hi) // 2
        return tirx.if_then_else(pos < bounds[mid], tree(lo, mid), tree(mid, hi))
    return tree(0, len(bounds) - 1)


def concatenate_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``concatenate``: each element read from its piece (see :func:`_pick`)."""
    te = T.te_mod()
    xs = inputs[0]
    shp = T.shape_of(xs[0])
    axis = norm_axis(attrs.axis, len(shp))
    sizes = [T.shape_of(x)[axis] for x in xs]
    offs: list[object] = [0]
    for s in sizes:
        offs.append(offs[-1] + s)
    out = list(shp)
    out[axis] = offs[-1]

    def body(*o):  # type: ignore[no-untyped-def]
        def read(k):  # type: ignore[no-untyped-def]
            idx = list(o)
            idx[axis] = o[axis] - offs[k]
            return xs[k](*idx)
        return _pick(o[axis], offs, read)
    return te.compute(out, body, name="T_concat", tag="injective")


def stack_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``stack`` (each element read from its piece, see :func:`_pick`)."""
    te = T.te_mod()
    xs = inputs[0]
    shp = T.shape_of(xs[0])
    axis = norm_axis(attrs.axis, len(shp), extra=1)
    out = shp[:axis] + [len(xs)] + shp[axis:]

    def body(*o):  # type: ignore[no-untyped-def]
        idx = list(o[:axis]) + list(o[axis + 1:])
        return _pick(o[axis], list(range(len(xs) + 1)), lambda k: xs[k](*idx))
    return te.compute(out, body, name="T_stack", tag="injective")


def _slice_te(x: object, starts: Sequence[object], steps: Sequence[int],
              out: Sequence[object], name: str) -> object:
    te = T.te_mod()
    return te.compute(list(out), lambda *o: x(*[s + i * st for s, st, i in zip(starts, steps, o)]),
                      name=name, tag="injective")


def split_te(attrs: Attrs, inputs: list, out_type: TupleType) -> list:
    """TE compute of ``split``: one slice per section (a list of tensors)."""
    x = inputs[0]
    shp = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(shp))
    outs = []
    start: object = 0
    for k, ft in enumerate(out_type.fields):
        d = ft.shape[axis]  # type: ignore[attr-defined]
        if not isinstance(d, int):
            raise TypeInferenceError("split: the TVM compute needs static section sizes")
        o = list(shp)
        o[axis] = d
        starts = [0] * len(shp)
        starts[axis] = start
        outs.append(_slice_te(x, starts, [1] * len(shp), o, f"T_split{k}"))
        start = start + d
    return outs


def _broadcast_to(x: object, shape: Sequence[object], name: str) -> object:
    te = T.te_mod()
    return te.compute(list(shape), lambda *o: T.bcast_index(x, o), name=name, tag="broadcast")


def broadcast_to_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``broadcast_to``."""
    return _broadcast_to(inputs[0], list(attrs.shape), "T_broadcast_to")


def broadcast_to_like_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``broadcast_to_like``."""
    return _broadcast_to(inputs[0], T.shape_of(inputs[1]), "T_broadcast_to")


def _collapse_sum_te(x: object, shape: Sequence[object]) -> object:
    xs = T.shape_of(x)
    lead = len(xs) - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if T.is_one(d) and not T.is_one(xs[lead + i])]
    dt = T.dtype_of(x)
    if dt == "bool":
        s = T.reduce(x, axes, True, "max", acc_dtype="int8")
        s = T.cast_tensor(s, "bool")
    else:
        acc = "float32" if dt == "float16" else dt
        s = T.cast_tensor(T.reduce(x, axes, True, "sum", acc_dtype=acc), dt)
    return _reshape_to(s, list(shape), "T_collapse")


def collapse_sum_like_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``collapse_sum_like``."""
    return _collapse_sum_te(inputs[0], T.shape_of(inputs[1]))


def collapse_sum_to_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``collapse_sum_to``."""
    return _collapse_sum_te(inputs[0], list(attrs.shape))


def reverse_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``reverse``."""
    te = T.te_mod()
    x = inputs[0]
    shp = T.shape_of(x)
    a = norm_axis(attrs.axis, len(shp))

    def body(*o):  # type: ignore[no-untyped-def]
        idx = list(o)
        idx[a] = shp[a] - 1 - o[a]
        return x(*idx)
    return te.compute(shp, body, name="T_reverse", tag="injective")


def tile_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``tile`` (numpy semantics)."""
    te, tirx = T.te_mod(), T.tir_mod()
    x = inputs[0]
    shp = T.shape_of(x)
    reps = tuple(attrs.reps or ())
    n = max(len(reps), len(shp))
    full = [1] * (n - len(shp)) + shp
    reps = (1,) * (n - len(reps)) + reps
    lead = n - len(shp)

    def body(*o):  # type: ignore[no-untyped-def]
        return x(*[tirx.floormod(o[lead + k], d) if not T.is_one(d) else 0
                   for k, d in enumerate(shp)])
    return te.compute([d * r for d, r in zip(full, reps)], body, name="T_tile",
                      tag="injective")


def repeat_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``repeat``."""
    te, tirx = T.te_mod(), T.tir_mod()
    x = inputs[0]
    shp = T.shape_of(x)
    a = norm_axis(attrs.axis, len(shp))
    r = attrs.repeats
    out = list(shp)
    out[a] = shp[a] * r

    def body(*o):  # type: ignore[no-untyped-def]
        idx = list(o)
        idx[a] = tirx.floordiv(o[a], r)
        return x(*idx)
    return te.compute(out, body, name="T_repeat", tag="injective")


# ----------------------------------------------------------------------------- concat / stack
def _joined_fields(arg_types: Sequence[Type], name: str) -> list[TensorType] | None:
    """The tensor fields of the tuple ``name`` joins (None while unknown; at least one)."""
    fs = tuple_of_tensors(arg_types[0], "data")
    if fs is not None and not fs:
        raise TypeInferenceError(f"{name} needs at least one tensor")
    return fs


def _same_field_dtype(name: str, first: TensorType, f: TensorType, k: int) -> None:
    """Field ``k`` of a joined tuple has the dtype of field 0."""
    if f.dtype != first.dtype:
        raise ShapeMismatchError(f"{name}: data types {first.dtype} and {f.dtype} do not "
                                 f"match (input 0 and input {k})")


def concatenate_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``concatenate((a, b, ...), axis)``: dims add up along ``axis``, others agree."""
    fs = _joined_fields(arg_types, "concatenate")
    if fs is None:
        return None
    first = fs[0]
    ndim = first.ndim
    for k, f in enumerate(fs[1:], 1):
        if f.ndim != ndim:
            raise ShapeMismatchError(f"concatenate: input {k} has rank {f.ndim}, but input 0 "
                                     f"has rank {ndim}")
        _same_field_dtype("concatenate", first, f, k)
    if ndim == 0:
        raise TypeInferenceError("concatenate: cannot concatenate rank-0 tensors")
    axis = norm_axis(attrs.axis, ndim)
    out: list[Dim] = []
    for i in range(ndim):
        if i == axis:
            total: Dim = 0
            for f in fs:
                total = dim_add(total, f.shape[i])
            out.append(total)
            continue
        d = first.shape[i]
        for k, f in enumerate(fs[1:], 1):
            e = f.shape[i]
            if not dim_compatible(d, e):
                raise ShapeMismatchError(
                    f"concatenate: dimension {i} of input {k} is {format_dim(e)}, but "
                    f"{format_dim(d)} in input 0 (only axis {axis} may differ)")
            if is_any(d):
                d = e
        out.append(d)
    return TensorType(tuple(out), first.dtype)


@grad_rule
def concatenate_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``concatenate((a, b, ...), axis)``: ``g`` split back at the inputs' sizes."""
    data = call.args[0]
    fields = data.checked_type.fields
    axis = call.attrs.axis
    idx, at = [], 0
    for ft in fields[:-1]:
        d = ft.shape[axis]
        if not isinstance(d, int):
            raise GradientRuleError("the gradient of `concatenate` needs static sizes along "
                                    f"axis {axis}", call.span)
        at += d
        idx.append(at)
    parts = op("split", g, indices_or_sections=tuple(idx), axis=axis)
    return (Tuple(tuple(TupleGetItem(parts, i) for i in range(len(fields)))),)


defop("concatenate", 1, grad=concatenate_grad, jvp=jvp_linear,
      attrs=[F("axis", "int", 0, "the axis to join along")],
      attrs_type="ConcatenateAttrs", rel=concatenate_rel,
      impl=lambda args, attrs: np.concatenate(args[0], axis=attrs.axis),
      pattern=OpPattern.INJECTIVE, doc="Join a tuple of tensors along an existing axis.",
      compute=concatenate_te)


def stack_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``stack((a, b, ...), axis)``: equal types, a new axis of size len(fields)."""
    fs = _joined_fields(arg_types, "stack")
    if fs is None:
        return None
    first = fs[0]
    shape = list(first.shape)
    for k, f in enumerate(fs[1:], 1):
        _same_field_dtype("stack", first, f, k)
        if f.ndim != first.ndim or not all(dim_compatible(a, b)
                                           for a, b in zip(shape, f.shape)):
            raise ShapeMismatchError(f"stack: input {k} has shape {fmt_shape(f.shape)}, but "
                                     f"input 0 has {fmt_shape(first.shape)}")
        shape = [b if is_any(a) else a for a, b in zip(shape, f.shape)]
    axis = norm_axis(attrs.axis, first.ndim, extra=1)
    return TensorType(tuple(shape[:axis]) + (len(fs),) + tuple(shape[axis:]), first.dtype)


@grad_rule
def stack_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``stack((a, b, ...), axis)``: ``g`` split into sections, the new axis squeezed."""
    data = call.args[0]
    n = len(data.checked_type.fields)
    parts = op("split", g, indices_or_sections=n, axis=call.attrs.axis)
    return (Tuple(tuple(op("reshape_like", TupleGetItem(parts, i), field(data, i))
                        for i in range(n))),)


defop("stack", 1, grad=stack_grad,
      jvp=jvp_linear, attrs=[F("axis", "int", 0, "where the new axis goes")],
      attrs_type="StackAttrs", rel=stack_rel,
      impl=lambda args, attrs: np.stack(args[0], axis=attrs.axis),
      pattern=OpPattern.INJECTIVE, doc="Join a tuple of equal tensors along a new axis.",
      compute=stack_te)


# ----------------------------------------------------------------------------- split
def split_sizes(d: Dim, ios: Any, axis: int) -> list[Dim]:
    """Section sizes of a dimension ``d`` (``ios``: a section count or split indices)."""
    if isinstance(ios, int):
        if ios <= 0:
            raise TypeInferenceError(f"split: indices_or_sections must be positive, found {ios}")
        if is_any(d):
            return [ANY] * ios
        q = dim_div_exact(d, ios)
        if q is None:
            raise ShapeMismatchError(f"split: cannot split axis {axis} of size {format_dim(d)} "
                                     f"into {ios} equal sections")
        return [q] * ios
    prev = 0
    out: list[Dim] = []
    for idx in ios:
        if idx < prev:
            raise TypeInferenceError(f"split: indices {tuple(ios)} must be ascending")
        if isinstance(d, int) and idx > d:
            raise ShapeMismatchError(f"split: index {idx} is beyond axis {axis} of size {d}")
        out.append(idx - prev)
        prev = idx
    out.append(ANY if is_any(d) else dim_add(d, -prev))
    return out


@tensor_rel("data")
def split_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``split(x, indices_or_sections, axis)``: a tuple of tensors."""
    axis = norm_axis(attrs.axis, t.ndim)
    sizes = split_sizes(t.shape[axis], attrs.indices_or_sections, attrs.axis)
    fields = []
    for s in sizes:
        shape = list(t.shape)
        shape[axis] = s
        fields.append(TensorType(tuple(shape), t.dtype))
    return TupleType(tuple(fields))


def split_ref(args: list, attrs: Attrs) -> tuple:
    """``np.split`` (sections or indices)."""
    x = args[0]
    ios = attrs.indices_or_sections
    return tuple(np.split(x, ios if isinstance(ios, int) else list(ios), axis=attrs.axis))


@grad_rule
def split_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``split(x)``: the adjoints of the pieces concatenated back."""
    n = len(call.checked_type.fields)
    return (op("concatenate", Tuple(tuple(field(g, i) for i in range(n))),
               axis=call.attrs.axis),)


defop("split", 1, grad=split_grad,
      jvp=jvp_linear, attrs=[F("indices_or_sections", "int_or_ints", None,
                           "a section count or the split indices"),
                         F("axis", "int", 0, "the axis to split")],
      attrs_type="SplitAttrs", rel=split_rel, impl=split_ref, pattern=OpPattern.INJECTIVE,
      doc="Split into a tuple of tensors.",
      compute=split_te,
      required=("indices_or_sections",))


# ----------------------------------------------------------------------------- broadcast / collapse
def _check_broadcastable_to(src: Sequence[Dim], dst: Sequence[Dim], what: str) -> None:
    if len(src) > len(dst):
        raise ShapeMismatchError(f"{what}: cannot broadcast {fmt_shape(src)} to the smaller "
                                 f"rank shape {fmt_shape(dst)}")
    off = len(dst) - len(src)
    for i, d in enumerate(src):
        e = dst[off + i]
        if not ((isinstance(d, int) and d == 1) or dim_compatible(d, e)):
            raise ShapeMismatchError(f"{what}: cannot broadcast {fmt_shape(src)} to "
                                     f"{fmt_shape(dst)}")


def _shape_attr_rel(t: TensorType, attrs: Attrs, name: str, collapse: bool) -> Type:
    """``name(x, shape)``: ``shape`` with x's dtype; x broadcasts to ``shape`` (``collapse``:
    ``shape`` broadcasts to x)."""
    if attrs.shape is None:
        raise TypeInferenceError(f"{name} needs a shape attribute")
    src, dst = (attrs.shape, t.shape) if collapse else (t.shape, attrs.shape)
    _check_broadcastable_to(src, dst, name)
    return TensorType(tuple(attrs.shape), t.dtype)


@tensor_rel("data")
def broadcast_to_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``broadcast_to(x, shape)``: ``Tensor[shape, x.dtype]``; x's shape must broadcast to
    ``shape``."""
    return _shape_attr_rel(t, attrs, "broadcast_to", collapse=False)


@grad_rule
def _broadcast_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``broadcast_to(x, ..)``/``broadcast_to_like(x, like)``: ``g`` collapse-summed to x."""
    x = call.args[0]
    return (op("collapse_sum_like", g, x),) + tuple(zeros_for(a) for a in call.args[1:])


@grad_rule
def _collapse_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``collapse_sum_like(x, like)``/``collapse_sum_to(x)``: ``g`` broadcast back to x."""
    x = call.args[0]
    return (op("broadcast_to_like", g, x),) + tuple(zeros_for(a) for a in call.args[1:])


defop("broadcast_to", 1, grad=_broadcast_grad,
      jvp=jvp_linear, attrs=[F("shape", "ints", None, "the target shape")],
      attrs_type="InitOpAttrs", rel=broadcast_to_rel,
      impl=lambda args, attrs: np.array(np.broadcast_to(args[0], attrs.shape)),
      pattern=OpPattern.BROADCAST, doc="Broadcast to a given shape.",
      compute=broadcast_to_te)


@tensor_rel("data", "broadcast_type")
def broadcast_to_like_rel(data: TensorType, broadcast_type: TensorType,
                          attrs: Attrs) -> Type | None:
    """``broadcast_to_like(x, like)``: like's shape, x's dtype."""
    _check_broadcastable_to(data.shape, broadcast_type.shape, "broadcast_to_like")
    return TensorType(broadcast_type.shape, data.dtype)


defop("broadcast_to_like", 2, grad=_broadcast_grad, jvp=jvp_linear_in(0), rel=broadcast_to_like_rel,
      impl=lambda args, attrs: np.array(np.broadcast_to(args[0], args[1].shape)),
      pattern=OpPattern.BROADCAST, doc="Broadcast to another tensor's shape.",
      compute=broadcast_to_like_te)


def collapse_sum(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Sum ``x`` down to ``shape`` (the reverse of broadcasting ``shape`` to ``x.shape``)."""
    lead = x.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and x.shape[lead + i] != 1]
    s = np.sum(x, axis=tuple(axes), keepdims=True, dtype=x.dtype) if axes else x
    return wrap(np.reshape(s, shape), x.dtype)


@tensor_rel("data", "collapse_type")
def collapse_sum_like_rel(data: TensorType, collapse_type: TensorType, attrs: Attrs) -> Type | None:
    """``collapse_sum_like(x, like)``: like's shape (which must broadcast to x's), x's dtype."""
    _check_broadcastable_to(collapse_type.shape, data.shape, "collapse_sum_like")
    return TensorType(collapse_type.shape, data.dtype)


defop("collapse_sum_like", 2, grad=_collapse_grad, jvp=jvp_linear_in(0), rel=collapse_sum_like_rel,
      impl=lambda args, attrs: collapse_sum(args[0], args[1].shape),
      pattern=OpPattern.COMM_REDUCE, doc="Sum over the axes that broadcasting ``like`` added.",
      compute=collapse_sum_like_te)


@tensor_rel("data")
def collapse_sum_to_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``collapse_sum_to(x, shape)``: ``Tensor[shape, x.dtype]``; ``shape`` must broadcast
    to x's shape."""
    return _shape_attr_rel(t, attrs, "collapse_sum_to", collapse=True)


defop("collapse_sum_to", 1, grad=_collapse_grad, jvp=jvp_linear,
      attrs=[F("shape", "ints", None, "the target shape")],
      attrs_type="InitOpAttrs", rel=collapse_sum_to_rel,
      impl=lambda args, attrs: collapse_sum(args[0], attrs.shape),
      pattern=OpPattern.COMM_REDUCE, doc="Sum down to a shape that broadcasts to the input.",
      compute=collapse_sum_to_te)


# ----------------------------------------------------------------------------- reverse/tile/repeat
@tensor_rel("data")
def reverse_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``reverse(x, axis)``: same type."""
    norm_axis(attrs.axis, t.ndim)
    return t


@grad_rule
def reverse_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``reverse(x, axis)``: ``g`` reversed along the same axis."""
    return (op("reverse", g, axis=call.attrs.axis),)


defop("reverse", 1, grad=reverse_grad,
      jvp=jvp_linear, attrs=[F("axis", "int", 0, "the axis to flip")],
      attrs_type="ReverseAttrs", rel=reverse_rel,
      impl=lambda args, attrs: np.flip(args[0], attrs.axis).copy(),
      pattern=OpPattern.INJECTIVE, doc="Reverse the order along an axis.",
      compute=reverse_te)


@tensor_rel("data")
def tile_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``tile(x, reps)``: numpy semantics (shapes right-aligned, padded with 1)."""
    reps = tuple(attrs.reps or ())
    if any(r < 0 for r in reps):
        raise TypeInferenceError(f"tile: negative repetition in {reps}")
    n = max(len(reps), t.ndim)
    shape = (1,) * (n - t.ndim) + tuple(t.shape)
    reps = (1,) * (n - len(reps)) + reps
    return TensorType(tuple(dim_mul(d, r) for d, r in zip(shape, reps)), t.dtype)


@grad_rule
def tile_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``tile(x, reps)``: ``g`` viewed as (r0, d0, r1, d1, ...) summed over the r axes."""
    x = call.args[0]
    shape = static_shape(x, call)
    reps = tuple(call.attrs.reps)
    m = max(len(shape), len(reps))
    xs = (1,) * (m - len(shape)) + shape
    rs = (1,) * (m - len(reps)) + reps
    inter = tuple(v for r, d in zip(rs, xs) for v in (r, d))
    summed = op("sum", op("reshape", g, newshape=inter), axis=tuple(range(0, 2 * m, 2)))
    return (op("reshape_like", summed, x),)


defop("tile", 1, grad=tile_grad,
      jvp=jvp_linear, attrs=[F("reps", "ints", None, "repetitions per axis")],
      attrs_type="TileAttrs", rel=tile_rel,
      impl=lambda args, attrs: np.tile(args[0], attrs.reps),
      pattern=OpPattern.INJECTIVE, doc="Repeat the whole tensor along each axis.",
      compute=tile_te,
      required=("reps",))


@tensor_rel("data")
def repeat_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``repeat(x, repeats, axis)``: every element repeated along ``axis``."""
    if attrs.repeats < 0:
        raise TypeInferenceError(f"repeat: repeats must be >= 0, found {attrs.repeats}")
    axis = norm_axis(attrs.axis, t.ndim)
    shape = list(t.shape)
    shape[axis] = dim_mul(shape[axis], attrs.repeats)
    return TensorType(tuple(shape), t.dtype)


@grad_rule
def repeat_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``repeat(x, k, axis)``: ``g`` viewed with a (d, k) pair at ``axis``, summed over k."""
    x = call.args[0]
    shape = static_shape(x, call)
    axis = norm_axis(call.attrs.axis, len(shape))
    inter = shape[:axis] + (shape[axis], call.attrs.repeats) + shape[axis + 1:]
    return (op("sum", op("reshape", g, newshape=inter), axis=(axis + 1,)),)


defop("repeat", 1, grad=repeat_grad, jvp=jvp_linear, attrs=[F("repeats", "int", None, "how often"),
                          F("axis", "int", 0, "the axis")],
      attrs_type="RepeatAttrs", rel=repeat_rel,
      impl=lambda args, attrs: np.repeat(args[0], attrs.repeats, axis=attrs.axis),
      pattern=OpPattern.INJECTIVE, doc="Repeat every element along an axis.",
      compute=repeat_te,
      required=("repeats",))


# ----------------------------------------------------------------------------- layout_transform
def parse_layout(layout: str) -> list[tuple[str, int | None]]:
    """TVM layout string -> axes: ``"NCHW16c"`` -> ``[N, C, H, W, (c, 16)]``.

    An upper-case letter is a primal axis; ``<factor><lower-case letter>`` is a sub-axis: the
    inner ``factor`` elements of the primal axis with the same letter (which must be present).
    """
    axes: list[tuple[str, int | None]] = []
    i, n = 0, len(layout)
    while i < n:
        j = i
        while j < n and layout[j].isdigit():
            j += 1
        if j >= n or not layout[j].isascii() or not layout[j].isalpha():
            raise TypeInferenceError(f"invalid layout {layout!r}: expected an axis letter at "
                                     f"position {j}")
        c = layout[j]
        if c.isupper():
            if j > i:
                raise TypeInferenceError(f"invalid layout {layout!r}: primal axis {c} cannot "
                                         "have a factor")
            axes.append((c, None))
        else:
            if j == i or int(layout[i:j]) <= 0:
                raise TypeInferenceError(f"invalid layout {layout!r}: sub-axis {c} needs a "
                                         "positive factor (e.g. 16c)")
            axes.append((c, int(layout[i:j])))
        i = j + 1
    letters = [a for a, _ in axes]
    for a in letters:
        if letters.count(a) > 1:
            raise TypeInferenceError(f"invalid layout {layout!r}: axis {a} appears twice")
    for a, f in axes:
        if f is not None and a.upper() not in letters:
            raise TypeInferenceError(f"invalid layout {layout!r}: sub-axis {a} has no primal "
                                     f"axis {a.upper()}")
    return axes


def _layout_pair(src: str | None, dst: str | None
                 ) -> tuple[list[tuple[str, int | None]], list[tuple[str, int | None]]]:
    if not src or not dst:
        raise TypeInferenceError("layout_transform needs src_layout and dst_layout")
    s, d = parse_layout(src), parse_layout(dst)
    ps = sorted(a for a, f in s if f is None)
    pd = sorted(a for a, f in d if f is None)
    if ps != pd:
        raise TypeInferenceError(f"layout_transform: {src!r} and {dst!r} do not have the same "
                                 "primal axes")
    return s, d


def _primal_extents(axes: list[tuple[str, int | None]], shape: Sequence[Dim], layout: str
                    ) -> dict[str, Dim]:
    """Each primal axis' full extent: its dim times its sub-axis factor."""
    if len(shape) != len(axes):
        raise ShapeMismatchError(f"layout_transform: a tensor of rank {len(shape)} cannot have "
                                 f"layout {layout!r} ({len(axes)} axes)")
    full: dict[str, Dim] = {a: d for (a, f), d in zip(axes, shape) if f is None}
    for (a, f), d in zip(axes, shape):
        if f is None:
            continue
        if isinstance(d, int) and d != f:
            raise ShapeMismatchError(f"layout_transform: axis {f}{a} of layout {layout!r} has "
                                     f"size {d}, not {f}")
        full[a.upper()] = dim_mul(full[a.upper()], f)
    return full


def layout_transform_shape(shape: Sequence[Dim], src: str, dst: str) -> tuple[Dim, ...]:
    """The shape of a ``src``-layout tensor of ``shape`` once transformed to ``dst``.

    A split that does not divide its axis rounds the block count up (TVM pads with zeros).
    """
    s, d = _layout_pair(src, dst)
    full = _primal_extents(s, shape, src)
    factors = {a.upper(): f for a, f in d if f is not None}
    out: list[Dim] = []
    for a, f in d:
        if f is not None:
            out.append(f)
            continue
        ext = full[a]
        if a not in factors or is_any(ext):
            out.append(ext)
            continue
        if isinstance(ext, int):
            out.append(-(-ext // factors[a]))  # as TVM: the last block is padded with zeros
            continue
        q = dim_div_exact(ext, factors[a])
        out.append(ANY if q is None else q)  # symbolic, not provably divisible: run time
    return tuple(out)


@tensor_rel("data")
def layout_transform_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``layout_transform(x, src_layout, dst_layout)``: same elements in the new layout."""
    return TensorType(layout_transform_shape(t.shape, attrs.src_layout, attrs.dst_layout),
                      t.dtype)


def _to_primal_order(axes: list[tuple[str, int | None]]) -> list[int]:
    """Positions of the axes ordered primal letter by letter, outer part before inner part."""
    order: list[int] = []
    for a in sorted(x for x, f in axes if f is None):
        order.append(next(i for i, (x, f) in enumerate(axes) if x == a))
        inner = [i for i, (x, f) in enumerate(axes) if f is not None and x.upper() == a]
        order.extend(inner)
    return order


def layout_transform_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Transpose to (outer, inner) pairs in primal order, merge, split again, transpose."""
    x = args[0]
    src, dst = attrs.src_layout, attrs.dst_layout
    out_shape = layout_transform_shape(x.shape, src, dst)
    s, d = _layout_pair(src, dst)
    so = _to_primal_order(s)
    full = _primal_extents(s, x.shape, src)
    primal = np.reshape(np.transpose(x, so), [full[a] for a in sorted(full)])
    do = _to_primal_order(d)
    split_shape = [out_shape[i] for i in do]
    # NOTE: a split that does not divide its axis pads the axis with zeros up to whole blocks
    padded = [shape_size([out_shape[i] for i, (ax, _) in enumerate(d) if ax.upper() == a])
              for a in sorted(full)]
    if list(primal.shape) != padded:
        primal = np.pad(primal, [(0, p - n) for p, n in zip(padded, primal.shape)])
    y = np.reshape(primal, split_shape)
    inv = [0] * len(do)
    for k, p in enumerate(do):
        inv[p] = k
    return np.ascontiguousarray(np.transpose(y, inv))


def layout_transform_grad(call: Any, out: Any, g: Any) -> tuple[Any, ...]:
    """``g => layout_transform(g, dst, src)``, cut to x's shape where the split padded x."""
    from relay_ir.op._rules import make_call
    a = call.attrs
    back = make_call("layout_transform", g, src_layout=a.dst_layout, dst_layout=a.src_layout)
    shape = tuple(tensor_type(call.args[0]).shape)
    if any(not isinstance(d, int) for d in shape):
        return (back,)
    fwd = layout_transform_shape(shape, a.src_layout, a.dst_layout)
    if layout_transform_shape(fwd, a.dst_layout, a.src_layout) == shape:
        return (back,)
    # NOTE: the padding zeros of a non-dividing split get no gradient: slice them off
    return (make_call("strided_slice", back, begin=[0] * len(shape), end=list(shape)),)


def layout_transform_jvp(call: Any, out: Any, tangents: Sequence[Any]) -> Any:
    """Linear: the tangent is transformed like the value."""
    from relay_ir.op._rules import make_call
    a = call.attrs
    return make_call("layout_transform", tangents[0], src_layout=a.src_layout,
                     dst_layout=a.dst_layout)


def layout_transform_compute(attrs: Attrs, inputs: list, out_type: Type) -> Any:
    """TOPI's ``layout_transform`` (the same layout strings)."""
    from tvm import topi
    return topi.layout_transform(inputs[0], attrs.src_layout, attrs.dst_layout)


defop("layout_transform", 1, attrs=[F("src_layout", "str", None, "the layout of the input"),
                                    F("dst_layout", "str", None, "the layout of the result")],
      attrs_type="LayoutTransformAttrs", rel=layout_transform_rel, impl=layout_transform_ref,
      pattern=OpPattern.INJECTIVE, doc="Change the data layout (``NCHW`` <-> ``NCHW16c``).",
      required=("src_layout", "dst_layout"), grad=layout_transform_grad,
      jvp=layout_transform_jvp, compute=layout_transform_compute)
