"""Dynamic-shape forms (``dyn.*``) of operators whose shape argument is a tensor.

Relay's ``DynamicToStatic`` pass rewrites ``dyn.reshape(%x, %s)`` into ``reshape`` when ``%s``
is a constant; a program that computes its shapes at run time keeps the ``dyn.*`` form. Each
op here takes the shape (``newshape``, ``shape``, ``reps``, ``begin``/``end``/``strides``,
``axis``, ``axes``, ``pad_width``) as a tensor argument instead of an attribute.

Type relations follow TVM's convention: the result has a known rank -- read from the static
length of the 1-d shape tensor -- and every dimension that depends on the tensor's values is
``?``. The shape tensor must be a 1-d integer tensor whose length is a static int (TVM: "must
have static rank"). The reference implementations read the runtime values and compute exactly
what the static form computes with those values as attributes.

The attribute records keep TVM's names (``dyn.broadcast_to`` carries ``InitOpAttrs`` with an
unused ``shape=None``, as TVM prints it), so printed TVM programs parse unchanged.

Gradients: ``dyn.zeros``/``dyn.ones`` are not differentiable; every other op is linear in its
data, and its rule is the transpose. Where no registry operator is that transpose, a helper
op computes it (``dyn.tile_grad``, ``dyn.strided_slice_grad``, ``dyn.nn.pad_grad``, like the
library's ``strided_slice_grad``), whose own rule is the forward op again, so gradients can be
differentiated again. Shape arguments get zero adjoints.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import InterpreterError, ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Call, Expr
from relay_ir.op import OpPattern
from relay_ir.op._jvp import jvp_linear_in
from relay_ir.op._rules import (F, check_dtype, defop, fmt_type, is_int_dtype, make_call,
                                tensor_arg, tensor_args, tensor_rel)
from relay_ir.op.indexing import _slices
from relay_ir.op.transform import (_check_broadcastable_to, expand_dims_shape, reshape_dims,
                                   squeeze_shape)
from relay_ir.ty import ANY, TensorType, TupleType, Type


# NOTE: why the dyn.* operators have no TVM compute (OpDef.host_only). A kernel is built for
# fixed (or symbolic) shapes, and these results' shapes are read from a tensor's values when the
# call runs; TVM itself rewrites such calls with constant shapes to the static operators
# (DynamicToStatic) and runs the rest through shape functions on the host.
_SHAPE_FROM_VALUES = ("the result's shape is read from a tensor argument's values at run time; "
                      "a kernel needs it when built (constant shapes: use the static operator)")
_GRAD_OF_HOST_ONLY = ("the gradient of a host-only dyn.* operator: its geometry (reps, begin/end, "
                      "pad widths) is tensor values, and it runs where its forward op runs")


# ----------------------------------------------------------------------------- helpers
def shape_arg_length(t: TensorType, op: str, what: str) -> int:
    """The static length of a 1-d integer shape tensor; a TypeInferenceError otherwise."""
    if not is_int_dtype(t.dtype):
        raise TypeInferenceError(f"{op}: {what} must be an integer tensor, found dtype "
                                 f"{t.dtype}")
    if t.ndim != 1:
        raise TypeInferenceError(f"{op}: {what} must be a 1-d tensor, found rank {t.ndim}")
    n = t.shape[0]
    if not isinstance(n, int):
        raise TypeInferenceError(f"{op}: the length of {what} must be static (the result rank "
                                 f"depends on it), found {n!r}")
    return n


def _scalar_int_arg(t: TensorType, op: str, what: str) -> None:
    if not is_int_dtype(t.dtype) or t.ndim != 0:
        raise TypeInferenceError(f"{op}: {what} must be a 0-d integer tensor, found "
                                 f"{fmt_type(t)}")


def _any(n: int) -> tuple[Any, ...]:
    return (ANY,) * n


def runtime_ints(v: np.ndarray, op: str, what: str, *, nonneg: bool = False
                 ) -> tuple[int, ...]:
    """The values of a shape tensor as Python ints (checked non-negative with ``nonneg``)."""
    vals = tuple(int(a) for a in np.asarray(v).reshape(-1))
    if nonneg and any(a < 0 for a in vals):
        raise InterpreterError(f"{op}: negative dimension in {what} {vals}")
    return vals


def _at_run_time(op: str, e: TypeInferenceError) -> InterpreterError:
    """A relation's complaint about runtime shape values, as an InterpreterError naming ``op``."""
    msg = e.message if e.message.startswith(op) else f"{op}: {e.message}"
    return InterpreterError(msg)


# ----------------------------------------------------------------------------- reshape
@tensor_rel("data", "newshape")
def dyn_reshape_rel(x: TensorType, s: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.reshape(x, newshape: Tensor[(k), int]) : Tensor[(?, ..k times), x.dtype]``."""
    return TensorType(_any(shape_arg_length(s, "dyn.reshape", "newshape")), x.dtype)


def dyn_reshape_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``reshape`` with the runtime newshape (codes 0, -1, -3; -2 and -4 change the rank)."""
    x, s = args
    codes = runtime_ints(s, "dyn.reshape", "newshape")
    bad = [c for c in codes if c in (-2, -4)]
    if bad:
        raise InterpreterError(f"dyn.reshape: code {bad[0]} in newshape {codes} is not allowed "
                               "(the result rank must equal the length of newshape)")
    try:
        shape = reshape_dims(x.shape, codes, attrs.allowzero)
    except TypeInferenceError as e:
        raise _at_run_time("dyn.reshape", e) from None
    return np.reshape(x, shape)


def _linear_jvp(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """Linear in the data: the op applied to the data's tangent with the same shape arguments."""
    return Call(call.op, (tangents[0],) + tuple(call.args[1:]), call.attrs)


def _reshape_back_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    # d/dx reshape(x, s) => reshape_like(g, x); the shape argument gets zeros
    x, s = call.args[0], call.args[1]
    return (make_call("reshape_like", g, x), make_call("zeros_like", s))


def _def_linear_dyn(name: str, num_inputs: int, grad: Any, *,
                    pattern: OpPattern = OpPattern.INJECTIVE, **fields: Any) -> None:
    """Register a ``dyn.*`` op linear in its data (JVP: :func:`_linear_jvp`) whose result shape
    is read from an argument's values (no kernel: ``host_only``)."""
    defop(name, num_inputs, pattern=pattern, grad=grad, jvp=_linear_jvp,
          host_only=_SHAPE_FROM_VALUES, **fields)


_def_linear_dyn("dyn.reshape", 2, _reshape_back_grad,
                attrs=[F("newshape", "ints?", None, "unused (the shape is an argument)"),
                       F("allowzero", "bool", False, "0 is a literal zero")],
                attrs_type="ReshapeAttrs", rel=dyn_reshape_rel, impl=dyn_reshape_ref,
                doc="Reshape to a shape given as a 1-d integer tensor.")


# ----------------------------------------------------------------------------- broadcast_to
@tensor_rel("data", "shape")
def dyn_broadcast_to_rel(x: TensorType, s: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.broadcast_to(x, shape: Tensor[(k), int]) : Tensor[(?, ..k times), x.dtype]``."""
    k = shape_arg_length(s, "dyn.broadcast_to", "shape")
    if k < x.ndim:
        raise ShapeMismatchError(f"dyn.broadcast_to: cannot broadcast a tensor of rank {x.ndim} "
                                 f"to a shape of length {k}")
    return TensorType(_any(k), x.dtype)


def dyn_broadcast_to_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.broadcast_to`` the runtime shape, copied."""
    x, s = args
    shape = runtime_ints(s, "dyn.broadcast_to", "shape", nonneg=True)
    try:
        _check_broadcastable_to(x.shape, shape, "dyn.broadcast_to")
    except ShapeMismatchError as e:
        raise _at_run_time("dyn.broadcast_to", e) from None
    return np.array(np.broadcast_to(x, shape))


def _broadcast_to_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    # d/dx broadcast_to(x, s) => collapse_sum_like(g, x); the shape argument gets zeros
    x, s = call.args[0], call.args[1]
    return (make_call("collapse_sum_like", g, x), make_call("zeros_like", s))


_def_linear_dyn("dyn.broadcast_to", 2, _broadcast_to_grad, pattern=OpPattern.BROADCAST,
                attrs=[F("shape", "ints?", None, "unused (an argument here)")],
                attrs_type="InitOpAttrs", rel=dyn_broadcast_to_rel, impl=dyn_broadcast_to_ref,
                doc="Broadcast to a shape given as a 1-d integer tensor.")


# ----------------------------------------------------------------------------- zeros/ones/full
def _dyn_init_rel(name: str):  # type: ignore[no-untyped-def]
    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
        s = tensor_arg(arg_types[0], "shape")
        if s is None:
            return None
        return TensorType(_any(shape_arg_length(s, name, "shape")), check_dtype(attrs.dtype))
    rel.__doc__ = f"``{name}(shape: Tensor[(k), int], dtype) : Tensor[(?, ..k times), dtype]``."
    return rel


def _dyn_init_ref(name: str, fill: int):  # type: ignore[no-untyped-def]
    def impl(args: list, attrs: Attrs) -> np.ndarray:
        shape = runtime_ints(args[0], name, "shape", nonneg=True)
        return np.full(shape, fill, dtype=attrs.dtype)
    impl.__doc__ = f"Reference implementation of ``{name}``."
    return impl


_DYN_INIT_ATTRS = [F("shape", "ints?", None, "unused (the shape is an argument)"),
                   F("dtype", "dtype", "float32", "the result dtype")]
defop("dyn.zeros", 1, attrs=_DYN_INIT_ATTRS, attrs_type="InitOpAttrs",
      rel=_dyn_init_rel("dyn.zeros"), impl=_dyn_init_ref("dyn.zeros", 0),
      pattern=OpPattern.ELEMWISE, non_differentiable=True,
      doc="Zeros of a shape given as a 1-d integer tensor.", host_only=_SHAPE_FROM_VALUES)
defop("dyn.ones", 1, attrs=_DYN_INIT_ATTRS, attrs_type="InitOpAttrs",
      rel=_dyn_init_rel("dyn.ones"), impl=_dyn_init_ref("dyn.ones", 1),
      pattern=OpPattern.ELEMWISE, non_differentiable=True,
      doc="Ones of a shape given as a 1-d integer tensor.", host_only=_SHAPE_FROM_VALUES)


@tensor_rel("fill_value", "shape")
def dyn_full_rel(v: TensorType, s: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.full(value: 0-d, shape: Tensor[(k), int], dtype)``; dtype "" is the value's."""
    if v.ndim != 0:
        raise TypeInferenceError(f"dyn.full: fill_value must be a scalar, found rank {v.ndim}")
    k = shape_arg_length(s, "dyn.full", "shape")
    return TensorType(_any(k), check_dtype(attrs.dtype or v.dtype))


def dyn_full_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.full`` with the runtime shape."""
    v, s = args
    shape = runtime_ints(s, "dyn.full", "shape", nonneg=True)
    return np.full(shape, v, dtype=attrs.dtype or v.dtype)


def _full_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    # d/dv full(v, s) => sum(g) in v's dtype; the shape argument gets zeros
    v, s = call.args[0], call.args[1]
    return (make_call("cast_like", make_call("sum", g), v), make_call("zeros_like", s))


defop("dyn.full", 2, attrs=[F("shape", "ints?", None, "unused (the shape is an argument)"),
                            F("dtype", "dtype", "", "the result dtype (\"\": the value's)")],
      attrs_type="InitOpAttrs", rel=dyn_full_rel, impl=dyn_full_ref,
      pattern=OpPattern.ELEMWISE, grad=_full_grad, jvp=jvp_linear_in(0),
      doc="A scalar filled into a shape given as a tensor.", host_only=_SHAPE_FROM_VALUES)


# ----------------------------------------------------------------------------- tile
@tensor_rel("data", "reps")
def dyn_tile_rel(x: TensorType, r: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.tile(x, reps: Tensor[(k), int])``: rank ``max(rank x, k)``, every dim ``?``."""
    k = shape_arg_length(r, "dyn.tile", "reps")
    return TensorType(_any(max(x.ndim, k)), x.dtype)


def dyn_tile_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.tile`` with the runtime repetitions."""
    x, r = args
    reps = runtime_ints(r, "dyn.tile", "reps", nonneg=True)
    return np.tile(x, reps) if reps else np.array(x, copy=True)


def _tile_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    # dyn.tile(x, reps) => (dyn.tile_grad(g, x, reps), zeros): the tiles summed
    x, r = call.args
    return (make_call("dyn.tile_grad", g, x, r), make_call("zeros_like", r))


_def_linear_dyn("dyn.tile", 2, _tile_grad,
                attrs=[F("reps", "ints?", None, "unused (the reps are an argument)")],
                attrs_type="TileAttrs", rel=dyn_tile_rel, impl=dyn_tile_ref,
                doc="Tile with repetitions given as a 1-d integer tensor.")


def _like_rel(arg_types: Sequence[Type]) -> Type | None:
    """``helper(out_grad, data_like, ...)``: data_like's shape, out_grad's dtype."""
    ts = tensor_args(arg_types[:2], ("out_grad", "data_like"))
    if ts is None:
        return None
    for t in arg_types[2:]:
        if tensor_arg(t) is None:
            return None
    return TensorType(ts[1].shape, ts[0].dtype)


def dyn_tile_grad_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``dyn.tile_grad(g, data_like, reps)``: the type of data_like, g's dtype."""
    return _like_rel(arg_types)


def dyn_tile_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Sum ``g`` over the tiles: split every axis into (reps, dim) and sum the reps parts."""
    g, like, r = args
    reps = runtime_ints(r, "dyn.tile_grad", "reps", nonneg=True)
    n = max(like.ndim, len(reps))
    dims = (1,) * (n - like.ndim) + tuple(like.shape)
    reps = (1,) * (n - len(reps)) + tuple(reps)
    split = [v for pair in zip(reps, dims) for v in pair]
    s = np.sum(np.reshape(g, split), axis=tuple(range(0, 2 * n, 2)), dtype=g.dtype)
    return np.reshape(s, like.shape).astype(g.dtype, copy=False)


def _tile_grad_grad(call: Any, out: Expr, h: Expr) -> tuple[Expr, ...]:
    # dyn.tile_grad is linear in g, the transpose of dyn.tile: dg = dyn.tile(h, reps)
    g, like, r = call.args
    return (make_call("dyn.tile", h, r), make_call("zeros_like", like),
            make_call("zeros_like", r))


defop("dyn.tile_grad", 3, rel=dyn_tile_grad_rel, impl=dyn_tile_grad_ref,
      pattern=OpPattern.OPAQUE, grad=_tile_grad_grad, jvp=jvp_linear_in(0),
      doc="Gradient of dyn.tile: (out_grad, data_like, reps) -> the tiles of out_grad summed.",
      host_only=_GRAD_OF_HOST_ONLY)


# ----------------------------------------------------------------------------- strided_slice
def dyn_strided_slice_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``dyn.strided_slice(x, begin, end, strides)``: the first ``len(begin)`` dims become ``?``.

    ``begin``, ``end`` and ``strides`` are 1-d integer tensors of one static length ``k`` with
    ``k <= rank x``; the remaining dims are kept.
    """
    ts = tensor_args(arg_types, ("data", "begin", "end", "strides"))
    if ts is None:
        return None
    x = ts[0]
    op = "dyn.strided_slice"
    k = shape_arg_length(ts[1], op, "begin")
    for t, what in zip(ts[2:], ("end", "strides")):
        if shape_arg_length(t, op, what) != k:
            raise ShapeMismatchError(f"{op}: begin, end and strides must have the same length "
                                     f"({k} for begin, {t.shape[0]} for {what})")
    if k > x.ndim:
        raise ShapeMismatchError(f"{op}: {k} sliced axes for a tensor of rank {x.ndim}")
    if attrs.slice_mode not in ("end", "size"):
        raise TypeInferenceError(f"{op}: unknown slice_mode {attrs.slice_mode!r}")
    return TensorType(_any(k) + tuple(x.shape[k:]), x.dtype)


def dyn_strided_slice_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``strided_slice`` with the runtime begin/end/strides as its attributes."""
    x = args[0]
    return np.array(x[_dyn_index(x.shape, args[1:], attrs, "dyn.strided_slice")], copy=True)


_DYN_SLICE_ATTRS = [F("begin", "ints?", None, "unused (an argument here)"),
                    F("end", "ints?", None, "unused (an argument here)"),
                    F("strides", "ints?", None, "unused (an argument here)"),
                    F("axes", "ints?", None, "unused"),
                    F("slice_mode", "str", "end", "\"end\" or \"size\"")]


def _dyn_index(x_shape: Sequence[int], args: list, attrs: Attrs, op: str) -> tuple[Any, ...]:
    """The numpy index of a dyn.strided_slice with runtime begin/end/strides ``args``."""
    b, e, st = args
    static = attrs.with_changes(begin=runtime_ints(b, op, "begin"),
                                end=runtime_ints(e, op, "end"),
                                strides=runtime_ints(st, op, "strides"), axes=None)
    try:
        slices = _slices(x_shape, static)
    except TypeInferenceError as err:
        raise _at_run_time(op, err) from None
    idx: list[Any] = [slice(None)] * len(x_shape)
    for a, lo, hi, step in slices:
        idx[a] = slice(lo, hi, step)
    return tuple(idx)


def _strided_slice_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    # dyn.strided_slice(x, b, e, s) => g written into zeros like x; zeros for b, e, s
    x, b, e, st = call.args
    return (make_call("dyn.strided_slice_grad", g, x, b, e, st,
                      slice_mode=call.attrs.slice_mode),
            make_call("zeros_like", b), make_call("zeros_like", e), make_call("zeros_like", st))


_def_linear_dyn("dyn.strided_slice", 4, _strided_slice_grad,
                attrs=_DYN_SLICE_ATTRS, attrs_type="StridedSliceAttrs",
                rel=dyn_strided_slice_rel, impl=dyn_strided_slice_ref,
                doc="Strided slice with begin/end/strides given as tensors.")


def dyn_strided_slice_grad_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``dyn.strided_slice_grad(g, data_like, begin, end, strides)``: data_like's type."""
    return _like_rel(arg_types)


def dyn_strided_slice_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Zeros like ``data_like`` with ``g`` at the sliced positions."""
    g, like = args[0], args[1]
    out = np.zeros(like.shape, g.dtype)
    out[_dyn_index(like.shape, args[2:], attrs, "dyn.strided_slice_grad")] = g
    return out


def _strided_slice_grad_grad(call: Any, out: Expr, h: Expr) -> tuple[Expr, ...]:
    # linear in g, the transpose of dyn.strided_slice: dg = dyn.strided_slice(h, b, e, s)
    g, like, b, e, st = call.args
    return (make_call("dyn.strided_slice", h, b, e, st, slice_mode=call.attrs.slice_mode),
            make_call("zeros_like", like), make_call("zeros_like", b),
            make_call("zeros_like", e), make_call("zeros_like", st))


defop("dyn.strided_slice_grad", 5, attrs=_DYN_SLICE_ATTRS, attrs_type="StridedSliceAttrs",
      rel=dyn_strided_slice_grad_rel, impl=dyn_strided_slice_grad_ref,
      pattern=OpPattern.OPAQUE, grad=_strided_slice_grad_grad, jvp=jvp_linear_in(0),
      doc="Gradient of dyn.strided_slice: out_grad placed into zeros like the data.",
      host_only=_GRAD_OF_HOST_ONLY)


# ----------------------------------------------------------------------------- expand/squeeze
@tensor_rel("data", "axis")
def dyn_expand_dims_rel(x: TensorType, a: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.expand_dims(x, axis: 0-d int, num_newaxis)``: rank + num_newaxis, dims ``?``."""
    _scalar_int_arg(a, "dyn.expand_dims", "axis")
    if attrs.num_newaxis < 0:
        raise TypeInferenceError(f"dyn.expand_dims: num_newaxis must be >= 0, found "
                                 f"{attrs.num_newaxis}")
    return TensorType(_any(x.ndim + attrs.num_newaxis), x.dtype)


def dyn_expand_dims_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``expand_dims`` at the runtime axis."""
    x, a = args
    try:
        shape = expand_dims_shape(x.shape, int(a), attrs.num_newaxis)
    except TypeInferenceError as e:
        raise _at_run_time("dyn.expand_dims", e) from None
    return np.reshape(x, shape)


_def_linear_dyn("dyn.expand_dims", 2, _reshape_back_grad,
                attrs=[F("num_newaxis", "int", 1, "how many unit axes")],
                attrs_type="DynExpandDimsAttrs", rel=dyn_expand_dims_rel,
                impl=dyn_expand_dims_ref,
                doc="Insert unit axes at an axis given as a 0-d tensor.")


@tensor_rel("data", "axes")
def dyn_squeeze_rel(x: TensorType, a: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.squeeze(x, axes: Tensor[(k), int])``: rank ``rank x - k``, dims ``?``."""
    k = shape_arg_length(a, "dyn.squeeze", "axes")
    if k > x.ndim:
        raise ShapeMismatchError(f"dyn.squeeze: {k} axes to remove from a tensor of rank "
                                 f"{x.ndim}")
    return TensorType(_any(x.ndim - k), x.dtype)


def dyn_squeeze_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``squeeze`` of the runtime axes (distinct unit axes)."""
    x, a = args
    axes = runtime_ints(a, "dyn.squeeze", "axes")
    norm = {ax + x.ndim if ax < 0 else ax for ax in axes}
    if len(norm) != len(axes):
        raise InterpreterError(f"dyn.squeeze: axes {axes} name an axis twice")
    try:
        shape = squeeze_shape(x.shape, axes)
    except TypeInferenceError as e:
        raise _at_run_time("dyn.squeeze", e) from None
    return np.reshape(x, shape)


_def_linear_dyn("dyn.squeeze", 2, _reshape_back_grad,
                attrs=[F("axis", "ints?", None, "unused (the axes are an argument)")],
                attrs_type="SqueezeAttrs", rel=dyn_squeeze_rel, impl=dyn_squeeze_ref,
                doc="Remove the unit axes given as a 1-d integer tensor.")


# ----------------------------------------------------------------------------- nn.pad
@tensor_rel("data", "pad_width", "pad_value")
def dyn_pad_rel(x: TensorType, pw: TensorType, v: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.nn.pad(x, pad_width: Tensor[(rank x, 2), int], pad_value: 0-d)``: dims ``?``."""
    op = "dyn.nn.pad"
    if not is_int_dtype(pw.dtype):
        raise TypeInferenceError(f"{op}: pad_width must be an integer tensor, found dtype "
                                 f"{pw.dtype}")
    if pw.ndim != 2 or not all(isinstance(d, int) for d in pw.shape) or (
            tuple(pw.shape) != (x.ndim, 2)):
        raise TypeInferenceError(f"{op}: pad_width must have shape ({x.ndim}, 2) (one "
                                 f"(before, after) pair per axis), found {pw.shape}")
    if v.ndim != 0:
        raise TypeInferenceError(f"{op}: pad_value must be a scalar, found rank {v.ndim}")
    if attrs.pad_mode not in ("constant", "edge", "reflect"):
        raise TypeInferenceError(f"{op}: unknown pad_mode {attrs.pad_mode!r}")
    return TensorType(_any(x.ndim), x.dtype)


def dyn_pad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.pad`` with the runtime pad widths (constant, edge or reflect)."""
    x, pw, v = args
    flat = runtime_ints(pw, "dyn.nn.pad", "pad_width", nonneg=True)
    widths = [(flat[2 * i], flat[2 * i + 1]) for i in range(x.ndim)]
    if attrs.pad_mode == "constant":
        return np.pad(x, widths, constant_values=np.asarray(v, x.dtype))
    return np.pad(x, widths, mode=attrs.pad_mode)


def _pad_jvp(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    # pad is linear in (data, pad_value) jointly: pad(dx, pad_width, dv)
    return Call(call.op, (tangents[0], call.args[1], tangents[2]), call.attrs)


def _pad_grad(call: Any, out: Expr, g: Expr) -> tuple[Expr, ...]:
    # dyn.nn.pad(x, pw, v) => (pad_grad(g, x, pw), zeros, sum of the border for v)
    x, pw, v = call.args
    mode = call.attrs.pad_mode
    gx = make_call("dyn.nn.pad_grad", g, x, pw, pad_mode=mode)
    if mode == "constant":
        border = make_call("subtract", make_call("sum", g), make_call("sum", gx))
        gv = make_call("cast_like", border, v)
    else:
        gv = make_call("zeros_like", v)
    return (gx, make_call("zeros_like", pw), gv)


_PAD_ATTRS = [F("pad_width", "any", None, "unused (an argument here)"),
              F("pad_mode", "str", "constant", "constant, edge or reflect")]
defop("dyn.nn.pad", 3, attrs=_PAD_ATTRS,
      attrs_type="PadAttrs", rel=dyn_pad_rel, impl=dyn_pad_ref, pattern=OpPattern.INJECTIVE,
      grad=_pad_grad, jvp=_pad_jvp, doc="Pad with widths given as an (N, 2) integer tensor.",
      host_only=_SHAPE_FROM_VALUES)


def dyn_pad_grad_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``dyn.nn.pad_grad(g, data_like, pad_width)``: data_like's type."""
    return _like_rel(arg_types)


def dyn_pad_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """The transpose of padding: every element of ``g`` added to the data element it copies.

    The padded positions are found by padding an array of element numbers (constant mode
    pads with -1: those positions copy the pad value, not the data).
    """
    g, like, pw = args
    flat = runtime_ints(pw, "dyn.nn.pad_grad", "pad_width", nonneg=True)
    widths = [(flat[2 * i], flat[2 * i + 1]) for i in range(like.ndim)]
    ids = np.arange(like.size, dtype=np.int64).reshape(like.shape)
    if attrs.pad_mode == "constant":
        src = np.pad(ids, widths, constant_values=-1)
    else:
        src = np.pad(ids, widths, mode=attrs.pad_mode)
    keep = src >= 0
    out = np.zeros(like.size, g.dtype)
    np.add.at(out, src[keep], g[keep])
    return out.reshape(like.shape)


def _pad_grad_grad(call: Any, out: Expr, h: Expr) -> tuple[Expr, ...]:
    # linear in g, the transpose of padding with a zero pad value: dg = dyn.nn.pad(h, pw, 0)
    g, like, pw = call.args
    zero = make_call("sum", make_call("zeros_like", h))
    return (make_call("dyn.nn.pad", h, pw, zero, pad_mode=call.attrs.pad_mode),
            make_call("zeros_like", like), make_call("zeros_like", pw))


defop("dyn.nn.pad_grad", 3, attrs=_PAD_ATTRS, attrs_type="PadAttrs", rel=dyn_pad_grad_rel,
      impl=dyn_pad_grad_ref, pattern=OpPattern.OPAQUE, grad=_pad_grad_grad, jvp=jvp_linear_in(0),
      doc="Gradient of dyn.nn.pad: out_grad folded back onto the data positions.",
      host_only=_GRAD_OF_HOST_ONLY)


# ----------------------------------------------------------------------------- value-shaped results
# NOTE: nonzero and unique have results whose shapes are their data's values (how many
# elements are nonzero or distinct): no kernel can be built before the call runs, so they run
# on the host (numpy) on every executor, like ONNX runtimes' own CPU fallbacks.
_COUNT_FROM_VALUES = ("the result's length counts the data's nonzero (distinct) elements, known "
                      "only when the call runs; it runs on the host (numpy)")


@tensor_rel("data")
def dyn_nonzero_rel(x: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.nonzero(x)``: ``Tensor[(rank x, ?), dtype]``, the indices of the nonzero elements
    (ONNX's NonZero layout: one row per axis, row-major order)."""
    if attrs.dtype not in ("int32", "int64"):
        raise TypeInferenceError(f"dyn.nonzero: dtype must be int32 or int64, found "
                                 f"{attrs.dtype}")
    return TensorType((x.ndim, ANY), attrs.dtype)


def dyn_nonzero_ref(args: list, attrs: Attrs) -> np.ndarray:
    x = np.asarray(args[0])
    if x.ndim == 0:  # NOTE: no axes, so no rows; one column if the scalar is nonzero
        return np.zeros((0, int(bool(x))), dtype=attrs.dtype)
    return np.array(np.nonzero(x), dtype=attrs.dtype).reshape(x.ndim, -1)


defop("dyn.nonzero", 1, attrs=[F("dtype", "dtype", "int64", "the indices' dtype (int32 or "
                                 "int64)")],
      attrs_type="NonZeroAttrs", rel=dyn_nonzero_rel, impl=dyn_nonzero_ref,
      pattern=OpPattern.OPAQUE, non_differentiable=True, host_only=_COUNT_FROM_VALUES,
      doc="The indices of the nonzero elements, shape (rank, count) (ONNX NonZero).")


@tensor_rel("data")
def dyn_unique_rel(x: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.unique(x, axis, sorted)``: ``(values, indices, inverse_indices, counts)``.

    Without an axis the data is flattened and ``values`` is ``Tensor[(?), dtype]``; with one,
    ``values`` has the data's shape with a ``?`` at the axis. ``indices`` (first occurrences)
    and ``counts`` are ``Tensor[(?), int64]``; ``inverse_indices`` has one entry per element
    (slice) of the data.
    """
    if attrs.axis is None:
        n: Any = 1
        for d in x.shape:
            n = n * d if isinstance(n, int) and isinstance(d, int) else ANY
        vals = TensorType((ANY,), x.dtype)
    else:
        a = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
        if not 0 <= a < x.ndim:
            raise TypeInferenceError(f"dyn.unique: axis {attrs.axis} is out of range for rank "
                                     f"{x.ndim}")
        n = x.shape[a]
        vals = TensorType(tuple(ANY if k == a else d for k, d in enumerate(x.shape)), x.dtype)
    idx = TensorType((ANY,), "int64")
    return TupleType((vals, idx, TensorType((n,), "int64"), idx))


def dyn_unique_ref(args: list, attrs: Attrs) -> tuple[np.ndarray, ...]:
    """``numpy.unique`` (sorted: ascending, slices lexicographically); unsorted: in order of
    first occurrence."""
    x = np.asarray(args[0])
    if attrs.axis is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    vals, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                             return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs.sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        vals = np.take(vals, order, axis=axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    i64 = np.int64
    return (np.ascontiguousarray(vals), first.astype(i64), inverse.astype(i64),
            counts.astype(i64))


defop("dyn.unique", 1, attrs=[F("axis", "int?", None, "the axis whose slices are compared "
                                "(None: the flattened elements)"),
                              F("sorted", "bool", True, "ascending order (False: order of first "
                                "occurrence)")],
      attrs_type="UniqueAttrs", rel=dyn_unique_rel, impl=dyn_unique_ref,
      pattern=OpPattern.OPAQUE, non_differentiable=True, host_only=_COUNT_FROM_VALUES,
      doc="The distinct elements (slices along an axis) with their first indices, inverse "
          "indices and counts (ONNX Unique).")


_K_FROM_VALUES = ("the result's length along the axis is the value of k, known only when the "
                  "call runs; it runs on the host (numpy)")


@tensor_rel("data", "k")
def dyn_topk_rel(x: TensorType, k: TensorType, attrs: Attrs) -> Type | None:
    """``dyn.topk(data, k)``: ``topk`` with ``k`` a one-element integer tensor known at run
    time: the selected axis is ``?`` (ONNX TopK with a computed K)."""
    if k.dtype not in ("int32", "int64") or k.ndim > 1 or (k.ndim == 1 and k.shape[0] not in
                                                            (1, ANY)):
        raise TypeInferenceError(f"dyn.topk: k must be one int32/int64 value (a scalar or a "
                                 f"1-element tensor), found {k}")
    if x.ndim == 0:
        raise TypeInferenceError("dyn.topk: data must have rank >= 1, found a scalar")
    if attrs.dtype not in ("int32", "int64"):
        raise TypeInferenceError(f"dyn.topk: dtype (of the indices) must be int32 or int64, "
                                 f"found {attrs.dtype!r}")
    if attrs.ret_type not in ("both", "values", "indices"):
        raise TypeInferenceError(f"dyn.topk: ret_type must be both, values or indices, found "
                                 f"{attrs.ret_type!r}")
    a = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    if not 0 <= a < x.ndim:
        raise TypeInferenceError(f"dyn.topk: axis {attrs.axis} is out of range for rank "
                                 f"{x.ndim}")
    shape = tuple(ANY if i == a else d for i, d in enumerate(x.shape))
    vals, idx = TensorType(shape, x.dtype), TensorType(shape, attrs.dtype)
    return {"both": TupleType((vals, idx)), "values": vals, "indices": idx}[attrs.ret_type]


def dyn_topk_ref(args: list, attrs: Attrs) -> Any:
    """``topk``'s reference with ``k`` read from the tensor (``k`` = 0 selects nothing)."""
    from relay_ir.op.sorting import topk_ref
    x = np.asarray(args[0])
    k = int(np.asarray(args[1]).reshape(-1)[0])
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    if not 0 <= k <= x.shape[axis]:
        raise InterpreterError(f"dyn.topk: k={k} is out of range for axis {axis} (size "
                              f"{x.shape[axis]})")
    if k == 0:
        shape = x.shape[:axis] + (0,) + x.shape[axis + 1:]
        vals, idx = np.zeros(shape, x.dtype), np.zeros(shape, attrs.dtype)
        return {"both": (vals, idx), "values": vals, "indices": idx}[attrs.ret_type]
    fields = {f: getattr(attrs, f) for f in ("axis", "ret_type", "is_ascend", "dtype")}
    return topk_ref([x], Attrs(dict(fields, k=k), "TopKAttrs"))


defop("dyn.topk", 2, attrs=[F("axis", "int", -1, "the axis to select along"),
                            F("ret_type", "str", "both", "both (values, indices), values or "
                              "indices"),
                            F("is_ascend", "bool", False, "the smallest (True) or largest"),
                            F("dtype", "dtype", "int32", "the indices' dtype (int32 or int64)")],
      attrs_type="DynTopKAttrs", rel=dyn_topk_rel, impl=dyn_topk_ref,
      pattern=OpPattern.OPAQUE, non_differentiable=True, host_only=_K_FROM_VALUES,
      doc="topk with k a tensor known at run time (ONNX TopK with a computed K).")


__all__ = ["shape_arg_length", "runtime_ints"]
