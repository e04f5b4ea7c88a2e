"""Neural-network operators (``nn.*``): dense/matmul, bias_add, activations, softmax, conv2d,
pooling, batch_flatten, layer_norm, batch_norm (inference form), dropout, pad, cross_entropy.

Layouts: ``nn.conv2d`` accepts any data layout that permutes ``NCHW`` (``NCHW``, ``NHWC``) and any
kernel layout that permutes ``OIHW`` (``OIHW``, ``HWIO``, ...); pools take ``NCHW``-style layouts.
``padding`` has 1 (all sides), 2 (top/bottom, left/right) or 4 (top, left, bottom, right)
values, as in TVM. ``nn.dense``, ``nn.bias_add``, ``nn.conv2d``, ``nn.layer_norm`` and
``nn.batch_norm`` infer the types of their parameter arguments when those are unknown.

``nn.dropout`` is the inference form: it returns ``(data, mask)`` as Relay's dropout does
(``relay.nn.dropout`` takes field 0), with ``data`` unchanged and a mask of ones.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Expr, TupleGetItem
from relay_ir.op import OpPattern
from relay_ir.op._grad import (GradientRuleError, grad_rule, op, scalar, static_shape,
                               tensor_type, zeros_for)
from relay_ir.op._rules import (F, broadcast_shapes, check_dtype, defop, def_elemwise,
                                dim_compatible, fmt_shape, is_any, norm_axis,
                                same_dtype, shape_size, tensor_arg, tensor_args, wrap)
from relay_ir.ty import (ANY, Dim, IncompleteType, TensorType, TupleType, Type, dim_add,
                         dim_div_exact, format_dim)


def _out_dtype(attrs: Attrs, dtype: str) -> str:
    return check_dtype(attrs.out_dtype, "out_dtype") if attrs.out_dtype else dtype


def _input_dtypes(a: TensorType, b: TensorType, attrs: Attrs) -> None:
    """Inputs must share a dtype unless ``out_dtype`` is given (Relay: uint8 x int8 -> int32)."""
    if not attrs.out_dtype:
        same_dtype(a, b)


def _is_unknown(t: Type) -> bool:
    return isinstance(t, IncompleteType)


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype("float32") if x.dtype == np.float16 else x


# ----------------------------------------------------------------------------- dense / matmul
def _check_inner(k1: Dim, k2: Dim, what: str) -> None:
    if not dim_compatible(k1, k2):
        raise ShapeMismatchError(f"{what}: inner dimensions do not match: {format_dim(k1)} "
                                 f"vs {format_dim(k2)}")


def _matmul_rel(arg_types: Sequence[Type], attrs: Attrs, name: str, ta: bool, tb: bool
                ) -> Type | tuple[Type, list[Type]] | None:
    data = tensor_arg(arg_types[0], "data")
    if data is None:
        return None
    if data.ndim < 1 or (ta and data.ndim != 2):
        raise TypeInferenceError(f"{name}: data must have rank >= 1 (2 with transpose_a), found "
                                 f"rank {data.ndim}")
    if ta:
        lead, k = (data.shape[1],), data.shape[0]
    else:
        lead, k = tuple(data.shape[:-1]), data.shape[-1]
    units = attrs.units
    w_t = arg_types[1]
    if _is_unknown(w_t):
        if units is None:
            return None
        w = TensorType((units, k) if tb else (k, units), data.dtype)
        return (TensorType(lead + (units,), _out_dtype(attrs, data.dtype)), [data, w])
    w = tensor_arg(w_t, "weight")
    assert w is not None
    if w.ndim != 2:
        raise TypeInferenceError(f"{name}: weight must have rank 2, found rank {w.ndim}")
    _input_dtypes(data, w, attrs)
    n, kw = (w.shape[0], w.shape[1]) if tb else (w.shape[1], w.shape[0])
    _check_inner(k, kw, name)
    if units is not None and not dim_compatible(n, units):
        raise ShapeMismatchError(f"{name}: units={units} but the weight has "
                                 f"{format_dim(n)} output units")
    return TensorType(lead + (n,), _out_dtype(attrs, data.dtype))


def dense_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.dense(x: (..., k), w: (units, k)) : (..., units)``; infers ``w`` from ``units``."""
    return _matmul_rel(arg_types, attrs, "nn.dense", False, True)


def dense_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``x @ w.T``."""
    x, w = args
    dt = attrs.out_dtype or x.dtype
    return wrap(np.matmul(_acc(x).astype(dt) if x.dtype.kind in "iu" else _acc(x),
                          (w.astype(dt) if w.dtype.kind in "iu" else _acc(w)).T), dt)


def _g_in(g: Expr, call: Any) -> Expr:
    """``g`` cast to the first argument's dtype when ``out_dtype`` changed it."""
    x = call.args[0]
    if tensor_type(x).dtype != call.checked_type.dtype:
        return op("cast_like", g, x)
    return g


def _rows(e: Expr, cols: Any) -> Expr:
    """``e`` flattened to a matrix of ``cols`` columns."""
    return op("reshape", e, newshape=(-1, cols))


@grad_rule
def dense_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``dense(x, w) = x wT``: ``dx = g w``, ``dw = gT x`` (leading dims of x flattened)."""
    x, w = call.args
    g = _g_in(g, call)
    units, k = tensor_type(w).shape
    dx = op("nn.matmul", g, w)
    dw = op("nn.matmul", _rows(g, units), _rows(x, k), transpose_a=True)
    return (dx, dw)


_DENSE_ATTRS = [F("units", "int?", None, "the number of output units"),
                F("out_dtype", "str", "", "the result dtype (\"\": the input's)")]
defop("nn.dense", 2, attrs=_DENSE_ATTRS, grad=dense_grad, attrs_type="DenseAttrs", rel=dense_rel,
      impl=dense_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Fully connected layer: ``x @ w.T``.")


def matmul_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.matmul(a, b)`` with optional transposes of either side."""
    return _matmul_rel(arg_types, attrs, "nn.matmul", attrs.transpose_a, attrs.transpose_b)


def matmul_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``op(a) @ op(b)``."""
    a, b = args
    dt = attrs.out_dtype or a.dtype
    a = _acc(a).astype(dt) if a.dtype.kind in "iu" else _acc(a)
    b = _acc(b).astype(dt) if b.dtype.kind in "iu" else _acc(b)
    if attrs.transpose_a:
        a = a.T
    if attrs.transpose_b:
        b = b.T
    return wrap(np.matmul(a, b), dt)


@grad_rule
def matmul_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``matmul(a, b) = A B`` (A, B: optionally transposed): ``dA = g BT``, ``dB = AT g``."""
    a, b = call.args
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b
    g = _g_in(g, call)
    if ta:
        da = op("nn.matmul", b, g, transpose_a=tb, transpose_b=True)
        a2, g2 = a, g
    else:
        da = op("nn.matmul", g, b, transpose_b=not tb)
        at, bt = tensor_type(a), tensor_type(b)
        n = bt.shape[0] if tb else bt.shape[1]
        a2, g2 = _rows(a, at.shape[-1]), _rows(g, n)
    if tb:
        db = op("nn.matmul", g2, a2, transpose_a=True, transpose_b=ta)
    else:
        db = op("nn.matmul", a2, g2, transpose_a=not ta)
    return (da, db)


defop("nn.matmul", 2, grad=matmul_grad, attrs=_DENSE_ATTRS + [F("transpose_a", "bool", False),
                                            F("transpose_b", "bool", False)],
      attrs_type="MatmulAttrs", rel=matmul_rel, impl=matmul_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="Matrix product with optional transposes.")


def batch_matmul_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.batch_matmul(x: (B, M, K), y: (B, N, K)) : (B, M, N)`` (default transpose_b)."""
    ts = tensor_args(arg_types, ("x", "y"))
    if ts is None:
        return None
    x, y = ts
    if x.ndim != 3 or y.ndim != 3:
        raise TypeInferenceError(f"nn.batch_matmul: both inputs must have rank 3, found ranks "
                                 f"{x.ndim} and {y.ndim}")
    _input_dtypes(x, y, attrs)
    m, k = (x.shape[2], x.shape[1]) if attrs.transpose_a else (x.shape[1], x.shape[2])
    n, k2 = (y.shape[1], y.shape[2]) if attrs.transpose_b else (y.shape[2], y.shape[1])
    _check_inner(k, k2, "nn.batch_matmul")
    (b,) = broadcast_shapes(x.shape[:1], y.shape[:1])
    return TensorType((b, m, n), _out_dtype(attrs, x.dtype))


def batch_matmul_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Batched ``matmul`` with batch broadcasting."""
    x, y = args
    dt = attrs.out_dtype or x.dtype
    x = _acc(x).astype(dt) if x.dtype.kind in "iu" else _acc(x)
    y = _acc(y).astype(dt) if y.dtype.kind in "iu" else _acc(y)
    if attrs.transpose_a:
        x = np.swapaxes(x, 1, 2)
    if attrs.transpose_b:
        y = np.swapaxes(y, 1, 2)
    return wrap(np.matmul(x, y), dt)


@grad_rule
def batch_matmul_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``batch_matmul`` per batch as :func:`matmul_grad`, summed over broadcast batches."""
    x, y = call.args
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b
    g = _g_in(g, call)
    if ta:
        dx = op("nn.batch_matmul", y, g, transpose_a=tb, transpose_b=True)
    else:
        dx = op("nn.batch_matmul", g, y, transpose_a=False, transpose_b=not tb)
    if tb:
        dy = op("nn.batch_matmul", g, x, transpose_a=True, transpose_b=ta)
    else:
        dy = op("nn.batch_matmul", x, g, transpose_a=not ta, transpose_b=False)
    shape = tuple(call.checked_type.shape)
    bx, by = tensor_type(x).shape[0], tensor_type(y).shape[0]
    # NOTE: a batch dim of ? may be a broadcast 1 at run time: collapse unless provably equal
    dx = dx if isinstance(bx, int) and bx == shape[0] else op("collapse_sum_like", dx, x)
    dy = dy if isinstance(by, int) and by == shape[0] else op("collapse_sum_like", dy, y)
    return (dx, dy)


defop("nn.batch_matmul", 2, grad=batch_matmul_grad, attrs=[F("out_dtype", "str", ""),
                                   F("transpose_a", "bool", False),
                                   F("transpose_b", "bool", True)],
      attrs_type="BatchMatmulAttrs", rel=batch_matmul_rel, impl=batch_matmul_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="Batched matrix product.")


# ----------------------------------------------------------------------------- bias_add / prelu
def _per_channel_rel(name: str, arg_types: Sequence[Type], axis_attr: int, names: Sequence[str]
                     ) -> Any:
    """data + per-channel 1-d parameters (each of size data.shape[axis]); infers them."""
    data = tensor_arg(arg_types[0], "data")
    if data is None:
        return None
    axis = norm_axis(axis_attr, data.ndim)
    c = data.shape[axis]
    want = TensorType((c,), data.dtype)
    refined: list[Type] = [data]
    changed = False
    for t, n in zip(arg_types[1:], names):
        if _is_unknown(t):
            refined.append(want)
            changed = True
            continue
        p = tensor_arg(t, n)
        assert p is not None
        if p.ndim != 1 or not dim_compatible(p.shape[0], c):
            raise ShapeMismatchError(f"{name}: {n} must have shape {fmt_shape((c,))} (axis "
                                     f"{axis_attr} of data), found {fmt_shape(p.shape)}")
        if p.dtype != data.dtype:
            raise ShapeMismatchError(f"data types {data.dtype} and {p.dtype} do not match")
        refined.append(p)
    return (data, refined) if changed else data


def bias_add_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.bias_add(x, b: (x.shape[axis],)) : type of x``."""
    return _per_channel_rel("nn.bias_add", arg_types, attrs.axis, ("bias",))


def _channel_view(p: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return p.reshape(shape)


def bias_add_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``x + b`` broadcast along ``axis``."""
    x, b = args
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    return wrap(x + _channel_view(b, x.ndim, axis), x.dtype)


def _axis_of(call: Any) -> int:
    return norm_axis(call.attrs.axis, tensor_type(call.args[0]).ndim)


def _per_channel_sum(e: Expr, axis: int) -> Expr:
    """``e`` summed over every axis but ``axis``."""
    return op("sum", e, axis=(axis,), exclude=True)


def _channel(p: Expr, ndim: int, axis: int) -> Expr:
    """A per-channel vector viewed so that it broadcasts along ``axis`` of a rank-ndim tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return op("reshape", p, newshape=tuple(shape))


@grad_rule
def bias_add_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``bias_add(x, b)``: ``g`` for x, ``g`` summed over the non-channel axes for b."""
    return (g, _per_channel_sum(g, _axis_of(call)))


defop("nn.bias_add", 2, grad=bias_add_grad, attrs=[F("axis", "int", 1, "the channel axis")],
      attrs_type="BiasAddAttrs", rel=bias_add_rel, impl=bias_add_ref,
      pattern=OpPattern.BROADCAST, doc="Add a 1-d bias along an axis.")


def prelu_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.prelu(x, alpha: (x.shape[axis],)) : type of x``."""
    return _per_channel_rel("nn.prelu", arg_types, attrs.axis, ("alpha",))


def prelu_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``x`` where positive, else ``alpha * x`` per channel."""
    x, a = args
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    return wrap(np.where(x > 0, x, _channel_view(a, x.ndim, axis) * x), x.dtype)


@grad_rule
def prelu_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``prelu(x, a)``: ``g`` (x > 0) or ``a g``; for a, ``x g`` (x <= 0) summed per channel."""
    x, a = call.args
    axis = _axis_of(call)
    pos = op("greater", x, scalar(0.0, x))
    ab = _channel(a, tensor_type(x).ndim, axis)
    dx = op("where", pos, g, op("multiply", g, ab))
    da = _per_channel_sum(op("where", pos, op("zeros_like", g), op("multiply", g, x)), axis)
    return (dx, da)


defop("nn.prelu", 2, grad=prelu_grad, attrs=[F("axis", "int", 1, "the channel axis")],
      attrs_type="PReluAttrs", rel=prelu_rel, impl=prelu_ref, pattern=OpPattern.BROADCAST,
      doc="Leaky ReLU with a learned per-channel slope.")


# ----------------------------------------------------------------------------- activations
@grad_rule
def relu_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``relu(x)``: ``g`` where ``x > 0``, else zero."""
    x = call.args[0]
    return (op("where", op("greater", x, scalar(0.0, x)), g, op("zeros_like", g)),)


@grad_rule
def leaky_relu_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``leaky_relu(x)``: ``g`` where ``x > 0``, else ``alpha g``."""
    x = call.args[0]
    return (op("where", op("greater", x, scalar(0.0, x)), g,
               op("multiply", g, scalar(call.attrs.alpha, x))),)


def_elemwise("nn.relu", lambda x: np.maximum(x, np.zeros((), x.dtype)), doc="``max(x, 0)``.",
             grad=relu_grad)
def_elemwise("nn.leaky_relu",
             lambda x, attrs: np.where(x > 0, x, x * np.asarray(attrs.alpha, x.dtype)),
             attrs=[F("alpha", "float", 0.01, "slope for x < 0")], attrs_type="LeakyReluAttrs",
             with_attrs=True, doc="``x`` if positive, else ``alpha * x``.", grad=leaky_relu_grad)


def softmax_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.softmax(x, axis)`` : type of x."""
    t = tensor_arg(arg_types[0], "data")
    if t is None:
        return None
    norm_axis(attrs.axis, t.ndim)
    return t


def softmax_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Numerically stable softmax along ``axis``."""
    x = args[0]
    xa = _acc(x)
    e = np.exp(xa - np.max(xa, axis=attrs.axis, keepdims=True))
    return wrap(e / np.sum(e, axis=attrs.axis, keepdims=True), x.dtype)


def log_softmax_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    x = args[0]
    xa = _acc(x)
    s = xa - np.max(xa, axis=attrs.axis, keepdims=True)
    return wrap(s - np.log(np.sum(np.exp(s), axis=attrs.axis, keepdims=True)), x.dtype)


@grad_rule
def softmax_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``softmax(x) = y``: ``(g - sum(g y, axis)) y``."""
    ax = (call.attrs.axis,)
    s = op("sum", op("multiply", g, out), axis=ax, keepdims=True)
    return (op("multiply", op("subtract", g, s), out),)


@grad_rule
def log_softmax_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``log_softmax(x) = y``: ``g - exp(y) sum(g, axis)``."""
    ax = (call.attrs.axis,)
    s = op("sum", g, axis=ax, keepdims=True)
    return (op("subtract", g, op("multiply", op("exp", out), s)),)


_SOFTMAX_ATTRS = [F("axis", "int", -1, "the axis normalized over")]
defop("nn.softmax", 1, attrs=_SOFTMAX_ATTRS, attrs_type="SoftmaxAttrs", rel=softmax_rel,
      grad=softmax_grad, impl=softmax_ref, pattern=OpPattern.OPAQUE,
      doc="Softmax along an axis.")
defop("nn.log_softmax", 1, attrs=_SOFTMAX_ATTRS, attrs_type="SoftmaxAttrs", rel=softmax_rel,
      grad=log_softmax_grad, impl=log_softmax_ref, pattern=OpPattern.OPAQUE,
      doc="Log of softmax along an axis.")


# ----------------------------------------------------------------------------- conv2d
def _pair(v: Sequence[int] | None, name: str, default: int) -> tuple[int, int]:
    if v is None:
        return (default, default)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) == 2:
        return (v[0], v[1])
    raise TypeInferenceError(f"{name} must have 1 or 2 values, found {len(v)}")


def _padding(v: Sequence[int] | None) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from 1, 2 or 4 values."""
    if v is None:
        return (0, 0, 0, 0)
    if len(v) == 1:
        return (v[0],) * 4  # type: ignore[return-value]
    if len(v) == 2:
        return (v[0], v[1], v[0], v[1])
    if len(v) == 4:
        return (v[0], v[1], v[2], v[3])
    raise TypeInferenceError(f"padding must have 1, 2 or 4 values, found {len(v)}")


def _layout(layout: str, letters: str, what: str) -> tuple[int, ...]:
    """Positions of ``letters`` in ``layout`` (which must permute them)."""
    if sorted(layout) != sorted(letters) or len(layout) != len(letters):
        raise TypeInferenceError(f"unsupported {what} {layout!r} (a permutation of "
                                 f"{letters!r} is expected)")
    return tuple(layout.index(c) for c in letters)


def _out_dim(d: Dim, pad: int, k: int, dil: int, stride: int, ceil_mode: bool = False) -> Dim:
    """``floor((d + pad - dil*(k-1) - 1) / stride) + 1`` (ceil with ``ceil_mode``)."""
    if stride <= 0 or dil <= 0:
        raise TypeInferenceError("strides and dilation must be positive")
    span = dil * (k - 1) + 1
    if is_any(d):
        return ANY
    if isinstance(d, int):
        num = d + pad - span
        if num < 0:
            raise ShapeMismatchError(f"the window (size {span} after dilation) is larger than "
                                     f"the padded input ({d + pad})")
        return (num + stride - 1) // stride + 1 if ceil_mode else num // stride + 1
    num = dim_add(d, pad - span)
    if stride == 1:
        return dim_add(num, 1)
    q = dim_div_exact(num, stride)
    return ANY if q is None else dim_add(q, 1)


def conv2d_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.conv2d``: output ``(N, O, OH, OW)`` in the data layout; infers the weight."""
    data = tensor_arg(arg_types[0], "data")
    if data is None:
        return None
    if data.ndim != 4:
        raise TypeInferenceError(f"nn.conv2d: data must have rank 4, found rank {data.ndim}")
    dn, dc, dh, dw = _layout(attrs.data_layout, "NCHW", "data_layout")
    ko, ki, kh_, kw_ = _layout(attrs.kernel_layout, "OIHW", "kernel_layout")
    out_layout = attrs.out_layout or attrs.data_layout
    on, oc, oh, ow = _layout(out_layout, "NCHW", "out_layout")
    groups = attrs.groups
    if groups < 1:
        raise TypeInferenceError(f"nn.conv2d: groups must be >= 1, found {groups}")
    c = data.shape[dc]
    if isinstance(c, int) and c % groups:
        raise ShapeMismatchError(f"nn.conv2d: {c} input channels are not divisible by "
                                 f"groups={groups}")
    c_per_group = c if groups == 1 else (dim_div_exact(c, groups) or ANY)
    w_t = arg_types[1]
    refined = None
    if _is_unknown(w_t):
        if attrs.channels is None or attrs.kernel_size is None:
            return None
        kh, kw = _pair(attrs.kernel_size, "kernel_size", 1)
        o = attrs.channels
        wshape: list[Dim] = [0, 0, 0, 0]
        wshape[ko], wshape[ki], wshape[kh_], wshape[kw_] = o, c_per_group, kh, kw
        refined = [data, TensorType(tuple(wshape), data.dtype)]
    else:
        w = tensor_arg(w_t, "weight")
        assert w is not None
        if w.ndim != 4:
            raise TypeInferenceError(f"nn.conv2d: weight must have rank 4, found rank {w.ndim}")
        _input_dtypes(data, w, attrs)
        o, i = w.shape[ko], w.shape[ki]
        kh_d, kw_d = w.shape[kh_], w.shape[kw_]
        if not dim_compatible(i, c_per_group):
            raise ShapeMismatchError(
                f"nn.conv2d: data has {format_dim(c)} input channels, but the weight expects "
                f"{format_dim(i)} per group (groups={groups})")
        if isinstance(o, int) and o % groups:
            raise ShapeMismatchError(f"nn.conv2d: {o} output channels are not divisible by "
                                     f"groups={groups}")
        if attrs.channels is not None and not dim_compatible(o, attrs.channels):
            raise ShapeMismatchError(f"nn.conv2d: channels={attrs.channels} but the weight has "
                                     f"{format_dim(o)} output channels")
        if attrs.kernel_size is not None:
            ks = _pair(attrs.kernel_size, "kernel_size", 1)
            if not (dim_compatible(ks[0], kh_d) and dim_compatible(ks[1], kw_d)):
                raise ShapeMismatchError(f"nn.conv2d: kernel_size={tuple(attrs.kernel_size)} but "
                                         f"the weight's kernel is "
                                         f"{fmt_shape((kh_d, kw_d))}")
        if not (isinstance(kh_d, int) and isinstance(kw_d, int)):
            kh = kw = -1
        else:
            kh, kw = kh_d, kw_d
    sh, sw = _pair(attrs.strides, "strides", 1)
    dh_, dw_ = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    out_h = ANY if kh < 0 else _out_dim(data.shape[dh], pt + pb, kh, dh_, sh)
    out_w = ANY if kw < 0 else _out_dim(data.shape[dw], pl + pr, kw, dw_, sw)
    oshape: list[Dim] = [0, 0, 0, 0]
    oshape[on], oshape[oc], oshape[oh], oshape[ow] = data.shape[dn], o, out_h, out_w
    out = TensorType(tuple(oshape), _out_dtype(attrs, data.dtype))
    return out if refined is None else (out, refined)


def _windows(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
             oh: int, ow: int) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) view of the windows of a padded NCHW input."""
    v = np.lib.stride_tricks.sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1),
                                                 axis=(2, 3))
    return v[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]


def conv2d_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Direct convolution through window views and ``tensordot``."""
    x, w = args
    dt = attrs.out_dtype or x.dtype
    x = np.transpose(x, _layout(attrs.data_layout, "NCHW", "data_layout"))
    w = np.transpose(w, _layout(attrs.kernel_layout, "OIHW", "kernel_layout"))
    comp = np.dtype(dt) if np.dtype(dt).kind in "iu" else (
        np.float32 if np.dtype(dt) == np.float16 else np.dtype(dt))
    x, w = x.astype(comp, copy=False), w.astype(comp, copy=False)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dh, dw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = _windows(xp, kh, kw, sh, sw, dh, dw, oh, ow)
    g = attrs.groups
    og = o // g
    outs = []
    for gi in range(g):
        wg = w[gi * og:(gi + 1) * og]
        xg = win[:, gi * cg:(gi + 1) * cg]
        outs.append(np.tensordot(xg, wg, axes=([1, 4, 5], [1, 2, 3])))  # (N, OH, OW, og)
    out = np.concatenate(outs, axis=3) if g > 1 else outs[0]
    out = np.transpose(out, (0, 3, 1, 2))  # NCHW
    out_layout = attrs.out_layout or attrs.data_layout
    perm = _layout(out_layout, "NCHW", "out_layout")
    inv = [0] * 4
    for k, p in enumerate(perm):
        inv[p] = k
    return wrap(np.ascontiguousarray(np.transpose(out, inv)), dt)


_CONV_ATTRS = [F("strides", "ints", (1, 1)), F("padding", "ints", (0, 0)),
               F("dilation", "ints", (1, 1)), F("groups", "int", 1),
               F("channels", "int?", None, "output channels (with kernel_size: infers weight)"),
               F("kernel_size", "ints?", None), F("data_layout", "str", "NCHW"),
               F("kernel_layout", "str", "OIHW"), F("out_layout", "str", ""),
               F("out_dtype", "str", "")]


@grad_rule
def conv2d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``conv2d(x, w)``: ``dx = conv2d_backward_data(g, w, x)``,
    ``dw = conv2d_backward_weight(g, x, w)`` (same attributes, out_dtype dropped)."""
    x, w = call.args
    g = _g_in(g, call)
    at = dict(call.attrs)
    at["out_dtype"] = ""
    return (op("nn.conv2d_backward_data", g, w, x, **at),
            op("nn.conv2d_backward_weight", g, x, w, **at))


defop("nn.conv2d", 2, grad=conv2d_grad,
      attrs=_CONV_ATTRS,
      attrs_type="Conv2DAttrs", rel=conv2d_rel, impl=conv2d_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d convolution.")


# ----------------------------------------------------------------------------- pooling
def _pool_rel(arg_types: Sequence[Type], attrs: Attrs, name: str) -> Type | None:
    data = tensor_arg(arg_types[0], "data")
    if data is None:
        return None
    if data.ndim != 4:
        raise TypeInferenceError(f"{name}: data must have rank 4, found rank {data.ndim}")
    _, _, dh, dw = _layout(attrs.layout, "NCHW", "layout")
    if attrs.out_layout and attrs.out_layout != attrs.layout:
        raise TypeInferenceError(f"{name}: out_layout {attrs.out_layout!r} must equal layout")
    kh, kw = _pair(attrs.pool_size, "pool_size", 1)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dlh, dlw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    shape = list(data.shape)
    shape[dh] = _out_dim(data.shape[dh], pt + pb, kh, dlh, sh, attrs.ceil_mode)
    shape[dw] = _out_dim(data.shape[dw], pl + pr, kw, dlw, sw, attrs.ceil_mode)
    return TensorType(tuple(shape), data.dtype)


def _pool_ref(args: list, attrs: Attrs, kind: str) -> np.ndarray:
    x = args[0]
    perm = _layout(attrs.layout, "NCHW", "layout")
    xn = np.transpose(x, perm)
    n, c, h, w = xn.shape
    kh, kw = _pair(attrs.pool_size, "pool_size", 1)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dh, dw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    oh = _out_dim(h, pt + pb, kh, dh, sh, attrs.ceil_mode)
    ow = _out_dim(w, pl + pr, kw, dw, sw, attrs.ceil_mode)
    assert isinstance(oh, int) and isinstance(ow, int)
    # NOTE: ceil_mode may need windows past the bottom/right padding: pad extra, never counted
    eh = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt + pb))
    ew = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl + pr))
    pads = ((0, 0), (0, 0), (pt, pb + eh), (pl, pr + ew))
    if kind == "max":
        fill = -np.inf if xn.dtype.kind == "f" else (
            np.iinfo(xn.dtype).min if xn.dtype.kind in "iu" else False)
        xp = np.pad(xn, pads, constant_values=fill)
        out = np.max(_windows(xp, kh, kw, sh, sw, dh, dw, oh, ow), axis=(4, 5))
    else:
        xa = _acc(xn).astype(np.float64) if xn.dtype.kind in "iub" else _acc(xn)
        xp = np.pad(xa, pads)
        total = np.sum(_windows(xp, kh, kw, sh, sw, dh, dw, oh, ow), axis=(4, 5))
        # counted region: the real input, plus the explicit padding with count_include_pad
        mask = np.zeros((1, 1, h + pt + pb + eh, w + pl + pr + ew), xa.dtype)
        if attrs.count_include_pad:
            mask[:, :, :h + pt + pb, :w + pl + pr] = 1
        else:
            mask[:, :, pt:pt + h, pl:pl + w] = 1
        count = np.sum(_windows(mask, kh, kw, sh, sw, dh, dw, oh, ow), axis=(4, 5))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = total / np.maximum(count, 1)
        if xn.dtype.kind in "iu":
            out = np.trunc(out)
    inv = [0] * 4
    for k, p in enumerate(perm):
        inv[p] = k
    return wrap(np.ascontiguousarray(np.transpose(out, inv)), x.dtype)


_POOL_ATTRS = [F("pool_size", "ints", (1, 1)), F("strides", "ints", (1, 1)),
               F("dilation", "ints", (1, 1)), F("padding", "ints", (0, 0)),
               F("layout", "str", "NCHW"), F("out_layout", "str", ""),
               F("ceil_mode", "bool", False)]


def max_pool2d_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.max_pool2d``: pooled spatial dims."""
    return _pool_rel(arg_types, attrs, "nn.max_pool2d")


def avg_pool2d_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.avg_pool2d``: pooled spatial dims."""
    return _pool_rel(arg_types, attrs, "nn.avg_pool2d")


@grad_rule
def max_pool2d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``max_pool2d(x)``: ``max_pool2d_grad(g, x)`` (g routed to each window's maximum)."""
    return (op("nn.max_pool2d_grad", g, call.args[0], **dict(call.attrs)),)


@grad_rule
def avg_pool2d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``avg_pool2d(x)``: ``avg_pool2d_grad(g, x)`` (g spread evenly over each window)."""
    return (op("nn.avg_pool2d_grad", g, call.args[0], **dict(call.attrs)),)


defop("nn.max_pool2d", 1, grad=max_pool2d_grad,
      attrs=_POOL_ATTRS, attrs_type="MaxPool2DAttrs", rel=max_pool2d_rel,
      impl=lambda args, attrs: _pool_ref(args, attrs, "max"),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d max pooling.")
defop("nn.avg_pool2d", 1, grad=avg_pool2d_grad,
      attrs=_POOL_ATTRS + [F("count_include_pad", "bool", False)],
      attrs_type="AvgPool2DAttrs", rel=avg_pool2d_rel,
      impl=lambda args, attrs: _pool_ref(args, attrs, "avg"),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d average pooling.")


def global_pool_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.global_*_pool2d``: spatial dims become 1."""
    data = tensor_arg(arg_types[0], "data")
    if data is None:
        return None
    if data.ndim != 4:
        raise TypeInferenceError(f"global pooling: data must have rank 4, found rank "
                                 f"{data.ndim}")
    _, _, dh, dw = _layout(attrs.layout, "NCHW", "layout")
    shape = list(data.shape)
    shape[dh] = shape[dw] = 1
    return TensorType(tuple(shape), data.dtype)


def _global_ref(kind: str):  # type: ignore[no-untyped-def]
    def impl(args: list, attrs: Attrs) -> np.ndarray:
        x = args[0]
        _, _, dh, dw = _layout(attrs.layout, "NCHW", "layout")
        if kind == "max":
            return wrap(np.max(x, axis=(dh, dw), keepdims=True), x.dtype)
        m = np.mean(_acc(x), axis=(dh, dw), keepdims=True)
        return wrap(np.trunc(m) if x.dtype.kind in "iu" else m, x.dtype)
    return impl


def _count_ratio(x: Expr, out: Expr, call: Any) -> int:
    """How many input elements feed one output element (static shapes)."""
    n = int(np.prod(static_shape(x, call)))
    m = int(np.prod(static_shape(out, call)))
    return n // max(m, 1)


@grad_rule
def global_avg_pool2d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``global_avg_pool2d(x)``: ``g / (H W)`` broadcast over the spatial dims."""
    x = call.args[0]
    n = _count_ratio(x, out, call)
    return (op("broadcast_to_like", op("multiply", g, scalar(1.0 / max(n, 1), x)), x),)


@grad_rule
def global_max_pool2d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``global_max_pool2d(x)``: ``g`` split evenly among each window's maxima."""
    x = call.args[0]
    ind = op("where", op("equal", x, out), op("ones_like", x), op("zeros_like", x))
    count = op("collapse_sum_like", ind, out)
    return (op("multiply", ind, op("divide", g, count)),)


_GLOBAL_ATTRS = [F("layout", "str", "NCHW"), F("out_layout", "str", "")]
defop("nn.global_avg_pool2d", 1, grad=global_avg_pool2d_grad,
      attrs=_GLOBAL_ATTRS, attrs_type="GlobalPool2DAttrs",
      rel=global_pool_rel, impl=_global_ref("avg"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Average over the spatial dims.")
defop("nn.global_max_pool2d", 1, grad=global_max_pool2d_grad,
      attrs=_GLOBAL_ATTRS, attrs_type="GlobalPool2DAttrs",
      rel=global_pool_rel, impl=_global_ref("max"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Maximum over the spatial dims.")


# ----------------------------------------------------------------------------- flatten / pad
def batch_flatten_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.batch_flatten(x: (N, ...)) : (N, prod(...))``."""
    t = tensor_arg(arg_types[0], "data")
    if t is None:
        return None
    if t.ndim < 1:
        raise TypeInferenceError("nn.batch_flatten: data must have rank >= 1")
    return TensorType((t.shape[0], shape_size(t.shape[1:])), t.dtype)


@grad_rule
def batch_flatten_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``batch_flatten(x)``: ``g`` reshaped like x."""
    return (op("reshape_like", g, call.args[0]),)


defop("nn.batch_flatten", 1, grad=batch_flatten_grad, rel=batch_flatten_rel,
      impl=lambda args, attrs: np.reshape(args[0], (args[0].shape[0], -1)
                                          if args[0].shape[0] else (0, int(np.prod(
                                              args[0].shape[1:])))),
      pattern=OpPattern.INJECTIVE, doc="Flatten all but the first axis.")


def _pad_width(pw: Any, ndim: int) -> list[tuple[int, int]]:
    if pw is None or not isinstance(pw, tuple) or len(pw) != ndim:
        raise TypeInferenceError(f"nn.pad: pad_width must have one (before, after) pair per "
                                 f"axis ({ndim}), found {pw!r}")
    out = []
    for p in pw:
        if (not isinstance(p, tuple) or len(p) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in p)):
            raise TypeInferenceError(f"nn.pad: bad pad_width entry {p!r}")
        if p[0] < 0 or p[1] < 0:
            raise TypeInferenceError(f"nn.pad: negative padding {p!r}")
        out.append((p[0], p[1]))
    return out


def pad_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.pad(x, pad_value, pad_width, pad_mode)``."""
    ts = tensor_args(arg_types, ("data", "pad_value"))
    if ts is None:
        return None
    x, v = ts
    if v.ndim != 0:
        raise TypeInferenceError("nn.pad: pad_value must be a scalar")
    if attrs.pad_mode not in ("constant", "edge", "reflect"):
        raise TypeInferenceError(f"nn.pad: unknown pad_mode {attrs.pad_mode!r}")
    pw = _pad_width(attrs.pad_width, x.ndim)
    return TensorType(tuple(dim_add(d, a + b) for d, (a, b) in zip(x.shape, pw)), x.dtype)


def pad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``np.pad`` (constant, edge or reflect)."""
    x, v = args
    pw = [tuple(p) for p in attrs.pad_width]
    if attrs.pad_mode == "constant":
        return wrap(np.pad(x, pw, constant_values=np.asarray(v, x.dtype)), x.dtype)
    return np.pad(x, pw, mode=attrs.pad_mode)


@grad_rule
def pad_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``pad(x, v)`` (constant mode): the interior of ``g`` for x; the border's sum for v.

    Edge and reflect modes fold the border back onto the interior (as reversed slices added
    to the edge rows), axis by axis from the last one.
    """
    x, v = call.args
    shape = static_shape(x, call)
    pw = [tuple(p) for p in call.attrs.pad_width]
    mode = call.attrs.pad_mode
    if mode == "constant":
        inner = op("strided_slice", g, begin=tuple(b for b, _ in pw),
                   end=tuple(b + d for (b, _), d in zip(pw, shape)))
        dv = op("subtract", op("sum", g), op("sum", inner))
        return (inner, op("cast_like", dv, v))
    if mode == "reflect" and any(max(p) > d - 1 for p, d in zip(pw, shape)):
        raise GradientRuleError("the gradient of `nn.pad` in reflect mode needs every padding "
                                "to be smaller than its axis", call.span)
    acc = g
    for axis in range(len(shape) - 1, -1, -1):
        acc = _fold_axis(acc, x, axis, shape[axis], pw[axis], mode)
    return (acc, zeros_for(v))


def _fold_axis(g: Expr, x: Expr, axis: int, d: int, pads: tuple[int, int], mode: str) -> Expr:
    """The adjoint of edge/reflect padding along one axis: border slices added back."""
    ndim = tensor_type(x).ndim
    before_n, after_n = pads

    def sl(b: int, e: int) -> Expr:
        return op("strided_slice", g, begin=(b,), end=(e,), axes=(axis,))

    def place(e: Expr, lo: int, hi: int) -> Expr:
        width = tuple((lo, hi) if i == axis else (0, 0) for i in range(ndim))
        return op("nn.pad", e, scalar(0.0, x), pad_width=width)

    out = sl(before_n, before_n + d)
    if before_n:
        head = sl(0, before_n)
        if mode == "edge":  # every padded position copies the first interior row
            out = op("add", out, place(op("sum", head, axis=(axis,), keepdims=True), 0, d - 1))
        else:  # reflect: padded position i mirrors interior index before_n - i
            out = op("add", out, place(op("reverse", head, axis=axis), 1, d - 1 - before_n))
    if after_n:
        tail = sl(before_n + d, before_n + d + after_n)
        if mode == "edge":
            out = op("add", out, place(op("sum", tail, axis=(axis,), keepdims=True), d - 1, 0))
        else:
            out = op("add", out, place(op("reverse", tail, axis=axis), d - 1 - after_n, 1))
    return out


defop("nn.pad", 2, grad=pad_grad,
      attrs=[F("pad_width", "any", None, "((before, after), ...) per axis"),
                          F("pad_mode", "str", "constant", "constant, edge or reflect")],
      attrs_type="PadAttrs", rel=pad_rel, impl=pad_ref, pattern=OpPattern.INJECTIVE,
      doc="Pad with a value (or by edge/reflection).",
      required=("pad_width",))


# ----------------------------------------------------------------------------- normalization
def layer_norm_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.layer_norm(x, gamma, beta)``: type of x; gamma, beta of shape (x.shape[axis],)."""
    return _per_channel_rel("nn.layer_norm", arg_types, attrs.axis, ("gamma", "beta"))


def layer_norm_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` along ``axis``."""
    x, g, b = args
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    xa = _acc(x)
    m = np.mean(xa, axis=axis, keepdims=True)
    v = np.mean((xa - m) ** 2, axis=axis, keepdims=True)
    out = (xa - m) / np.sqrt(v + np.asarray(attrs.epsilon, xa.dtype))
    if attrs.scale:
        out = out * _channel_view(_acc(g), x.ndim, axis)
    if attrs.center:
        out = out + _channel_view(_acc(b), x.ndim, axis)
    return wrap(out, x.dtype)


_NORM_ATTRS = [F("epsilon", "float", 1e-5), F("center", "bool", True),
               F("scale", "bool", True)]
def _mul(a: Expr, b: Expr) -> Expr:
    return op("multiply", a, b)


@grad_rule
def layer_norm_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``layer_norm(x, gamma, beta)`` with ``xh = (x - mean) rstd``, ``dxh = g gamma``:
    ``dx = rstd (dxh - mean(dxh) - xh mean(dxh xh))``, ``dgamma = sum(g xh)``,
    ``dbeta = sum(g)`` (sums over the non-normalized axes)."""
    x, gamma, beta = call.args
    at = call.attrs
    nd = tensor_type(x).ndim
    axis = _axis_of(call)
    ax = (axis,)
    xc = op("subtract", x, op("mean", x, axis=ax, keepdims=True))
    var = op("mean", _mul(xc, xc), axis=ax, keepdims=True)
    rstd = op("rsqrt", op("add", var, scalar(at.epsilon, x)))
    xh = _mul(xc, rstd)
    dxh = _mul(g, _channel(gamma, nd, axis)) if at.scale else g
    dx = _mul(rstd, op("subtract", op("subtract", dxh, op("mean", dxh, axis=ax, keepdims=True)),
                       _mul(xh, op("mean", _mul(dxh, xh), axis=ax, keepdims=True))))
    dgamma = _per_channel_sum(_mul(g, xh), axis) if at.scale else zeros_for(gamma)
    dbeta = _per_channel_sum(g, axis) if at.center else zeros_for(beta)
    return (dx, dgamma, dbeta)


defop("nn.layer_norm", 3, grad=layer_norm_grad, attrs=[F("axis", "int", -1)] + _NORM_ATTRS,
      attrs_type="LayerNormAttrs", rel=layer_norm_rel, impl=layer_norm_ref,
      pattern=OpPattern.OPAQUE, doc="Layer normalization.")


def batch_norm_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.batch_norm(x, gamma, beta, mean, var)`` : ``(type of x, (C,), (C,))``."""
    r = _per_channel_rel("nn.batch_norm", arg_types, attrs.axis,
                         ("gamma", "beta", "moving_mean", "moving_var"))
    if r is None:
        return None
    data, refined = (r if isinstance(r, tuple) else (r, None))
    c = data.shape[norm_axis(attrs.axis, data.ndim)]
    vec = TensorType((c,), data.dtype)
    out = TupleType((data, vec, vec))
    return out if refined is None else (out, refined)


def batch_norm_ref(args: list, attrs: Attrs) -> tuple:
    """Inference form: normalize with the moving statistics; returns (out, mean, var)."""
    x, g, b, mm, mv = args
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    xa = _acc(x)

    def cv(p: np.ndarray) -> np.ndarray:
        return _channel_view(_acc(p), x.ndim, axis)
    out = (xa - cv(mm)) / np.sqrt(cv(mv) + np.asarray(attrs.epsilon, xa.dtype))
    if attrs.scale:
        out = out * cv(g)
    if attrs.center:
        out = out + cv(b)
    return (wrap(out, x.dtype), np.array(mm, copy=True), np.array(mv, copy=True))


@grad_rule
def batch_norm_grad(call, out, g):  # type: ignore[no-untyped-def]
    """Inference-form ``batch_norm(x, gamma, beta, m, v)`` (all five are inputs):
    ``y = (x - m) rstd gamma + beta`` with ``rstd = (v + eps)^-1/2``; the pass-through
    outputs 1 and 2 add their adjoints to m and v."""
    x, gamma, beta, m, v = call.args
    at = call.attrs
    nd = tensor_type(x).ndim
    axis = _axis_of(call)
    gy, gm, gv = TupleGetItem(g, 0), TupleGetItem(g, 1), TupleGetItem(g, 2)
    rstd = op("rsqrt", op("add", v, scalar(at.epsilon, x)))
    xc = op("subtract", x, _channel(m, nd, axis))
    gs = _mul(gy, _channel(gamma, nd, axis)) if at.scale else gy
    dx = _mul(gs, _channel(rstd, nd, axis))
    dgamma = (_mul(_per_channel_sum(_mul(gy, xc), axis), rstd) if at.scale
              else zeros_for(gamma))
    dbeta = _per_channel_sum(gy, axis) if at.center else zeros_for(beta)
    dm = op("add", op("negative", _per_channel_sum(dx, axis)), gm)
    r3 = _mul(rstd, _mul(rstd, rstd))
    dv = op("add", _mul(_per_channel_sum(_mul(gs, xc), axis), _mul(scalar(-0.5, x), r3)), gv)
    return (dx, dgamma, dbeta, dm, dv)


defop("nn.batch_norm", 5, grad=batch_norm_grad, attrs=[F("axis", "int", 1)] + _NORM_ATTRS,
      attrs_type="BatchNormAttrs", rel=batch_norm_rel, impl=batch_norm_ref,
      pattern=OpPattern.OPAQUE, doc="Batch normalization (inference form).")


def dropout_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.dropout(x)`` : ``(type of x, type of x)`` (output and mask)."""
    t = tensor_arg(arg_types[0], "data")
    return None if t is None else TupleType((t, t))


@grad_rule
def dropout_grad(call, out, g):  # type: ignore[no-untyped-def]
    """Inference-form ``dropout(x) = (x, ones)``: the adjoint of output 0 (identity)."""
    return (TupleGetItem(g, 0),)


defop("nn.dropout", 1, grad=dropout_grad,
      attrs=[F("rate", "float", 0.5, "drop probability (training only)")],
      attrs_type="DropoutAttrs", rel=dropout_rel,
      impl=lambda args, attrs: (np.array(args[0], copy=True), np.ones_like(args[0])),
      pattern=OpPattern.OPAQUE, doc="Dropout, inference form: (data, ones mask).")


def cross_entropy_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.cross_entropy(pred, target)``: equal 2-d types; a scalar result."""
    ts = tensor_args(arg_types, ("predictions", "targets"))
    if ts is None:
        return None
    p, t = ts
    same_dtype(p, t)
    if p.ndim != 2 or t.ndim != 2 or not all(dim_compatible(a, b)
                                             for a, b in zip(p.shape, t.shape)):
        raise ShapeMismatchError(f"nn.cross_entropy: predictions {fmt_shape(p.shape)} and "
                                 f"targets {fmt_shape(t.shape)} must be equal 2-d shapes")
    return TensorType((), p.dtype)


def cross_entropy_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``-sum(log(p) * t) / batch``."""
    p, t = args
    with np.errstate(divide="ignore", invalid="ignore"):
        return wrap(-np.sum(np.log(_acc(p)) * _acc(t)) / p.shape[0], p.dtype)


@grad_rule
def cross_entropy_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``cross_entropy(p, t) = -sum(log(p) t) / N``: ``dp = -g t / (p N)``,
    ``dt = -g log(p) / N``."""
    p, t = call.args
    n = static_shape(p, call)[0]
    c = _mul(g, scalar(-1.0 / max(n, 1), p))
    return (_mul(c, op("divide", t, p)), _mul(c, op("log", p)))


defop("nn.cross_entropy", 2, grad=cross_entropy_grad, rel=cross_entropy_rel, impl=cross_entropy_ref,
      pattern=OpPattern.OPAQUE, doc="Cross entropy of probabilities against targets.")



# ----------------------------------------------------------------------------- gradient operators
# The adjoints of conv2d and of the pools, as operators of their own (each linear in its first
# argument, with its own rule, so that gradients of gradients close over this set).
def _inv_perm(perm: Sequence[int]) -> list[int]:
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return inv


def _conv_geometry(attrs: Attrs) -> tuple[int, int, int, int, int, int, int, int]:
    """(sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right) of a conv2d call."""
    sh, sw = _pair(attrs.strides, "strides", 1)
    dh, dw = _pair(attrs.dilation, "dilation", 1)
    return (sh, sw, dh, dw) + _padding(attrs.padding)


def _grad_like_rel(name: str, like_index: int, ranks: Sequence[int],
                   forward: Any) -> Any:
    """Relation: the type of argument ``like_index`` with the dtype of argument 0.

    ``forward(arg_types, attrs)`` is the type the matching forward op gives; argument 0 (the
    output gradient) must have its shape.
    """
    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
        ts = tensor_args(arg_types, [f"argument {i}" for i in range(len(arg_types))])
        if ts is None:
            return None
        for k, (t, r) in enumerate(zip(ts, ranks)):
            if t.ndim != r:
                raise TypeInferenceError(f"{name}: argument {k} must have rank {r}, found "
                                         f"rank {t.ndim}")
        fwd = forward(ts, attrs)
        if isinstance(fwd, tuple):
            fwd = fwd[0]
        if fwd is not None and not all(dim_compatible(a, b)
                                       for a, b in zip(fwd.shape, ts[0].shape)):
            raise ShapeMismatchError(f"{name}: the output gradient has shape "
                                     f"{fmt_shape(ts[0].shape)}, the forward result "
                                     f"{fmt_shape(fwd.shape)}")
        return TensorType(ts[like_index].shape, ts[0].dtype)
    rel.__doc__ = f"``{name}``: the type of argument {like_index} (dtype of argument 0)."
    return rel


def _conv_canon(g: np.ndarray, attrs: Attrs) -> np.ndarray:
    return np.transpose(g, _layout(attrs.out_layout or attrs.data_layout, "NCHW", "out_layout"))


def conv2d_backward_data_ref(args: list, attrs: Attrs) -> np.ndarray:
    """The adjoint of ``conv2d`` in its data: ``<bd(g, w), x> = <g, conv2d(x, w)>``."""
    g, w, like = args
    dperm = _layout(attrs.data_layout, "NCHW", "data_layout")
    gn = _acc(_conv_canon(g, attrs)).astype(np.float64)
    wn = np.transpose(w, _layout(attrs.kernel_layout, "OIHW", "kernel_layout")).astype(
        np.float64)
    n, c, h, wd = np.transpose(like, dperm).shape
    sh, sw, dh, dw, pt, pl, pb, pr = _conv_geometry(attrs)
    o, cg, kh, kw = wn.shape
    oh, ow = gn.shape[2], gn.shape[3]
    groups = attrs.groups
    og = o // groups
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    for gi in range(groups):
        gg = gn[:, gi * og:(gi + 1) * og]
        wg = wn[gi * og:(gi + 1) * og]
        for i in range(kh):
            for j in range(kw):
                xp[:, gi * cg:(gi + 1) * cg, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                   j * dw:j * dw + (ow - 1) * sw + 1:sw] += np.einsum(
                    "nohw,oc->nchw", gg, wg[:, :, i, j])
    out = xp[:, :, pt:pt + h, pl:pl + wd]
    return wrap(np.ascontiguousarray(np.transpose(out, _inv_perm(dperm))), g.dtype)


def conv2d_backward_weight_ref(args: list, attrs: Attrs) -> np.ndarray:
    """The adjoint of ``conv2d`` in its weight: ``<bw(g, x), w> = <g, conv2d(x, w)>``."""
    g, x, like = args
    kperm = _layout(attrs.kernel_layout, "OIHW", "kernel_layout")
    gn = _conv_canon(g, attrs).astype(np.float64)
    xn = np.transpose(x, _layout(attrs.data_layout, "NCHW", "data_layout")).astype(np.float64)
    o, cg, kh, kw = np.transpose(like, kperm).shape
    sh, sw, dh, dw, pt, pl, pb, pr = _conv_geometry(attrs)
    oh, ow = gn.shape[2], gn.shape[3]
    xp = np.pad(xn, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    groups = attrs.groups
    og = o // groups
    out = np.zeros((o, cg, kh, kw))
    for gi in range(groups):
        gg = gn[:, gi * og:(gi + 1) * og]
        for i in range(kh):
            for j in range(kw):
                xs = xp[:, gi * cg:(gi + 1) * cg, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                        j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[gi * og:(gi + 1) * og, :, i, j] = np.einsum("nohw,nchw->oc", gg, xs)
    return wrap(np.ascontiguousarray(np.transpose(out, _inv_perm(kperm))), g.dtype)


def _conv_attrs(call: Any) -> dict[str, Any]:
    return dict(call.attrs)


@grad_rule
def conv2d_backward_data_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``bd(g, w, like)``: ``dg = conv2d(h, w)``, ``dw = bw(g, h)``, zero for ``like``."""
    g, w, like = call.args
    at = _conv_attrs(call)
    return (op("nn.conv2d", h, w, **at), op("nn.conv2d_backward_weight", g, h, w, **at),
            zeros_for(like))


@grad_rule
def conv2d_backward_weight_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``bw(g, x, like)``: ``dg = conv2d(x, h)``, ``dx = bd(g, h)``, zero for ``like``."""
    g, x, like = call.args
    at = _conv_attrs(call)
    return (op("nn.conv2d", x, h, **at), op("nn.conv2d_backward_data", g, h, x, **at),
            zeros_for(like))


defop("nn.conv2d_backward_data", 3, attrs=_CONV_ATTRS, attrs_type="Conv2DAttrs",
      rel=_grad_like_rel("nn.conv2d_backward_data", 2, (4, 4, 4),
                          lambda ts, at: conv2d_rel([ts[2], ts[1]], at)),
      impl=conv2d_backward_data_ref, grad=conv2d_backward_data_grad,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Gradient of conv2d in its data: (out_grad, weight, data_like) -> data's type.")
defop("nn.conv2d_backward_weight", 3, attrs=_CONV_ATTRS, attrs_type="Conv2DAttrs",
      rel=_grad_like_rel("nn.conv2d_backward_weight", 2, (4, 4, 4),
                          lambda ts, at: conv2d_rel([ts[1], ts[2]], at)),
      impl=conv2d_backward_weight_ref, grad=conv2d_backward_weight_grad,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Gradient of conv2d in its weight: (out_grad, data, weight_like) -> weight's type.")


def _pool_setup(x: np.ndarray, attrs: Attrs) -> tuple:
    """Canonical NCHW input, geometry and the padded shape of a pool (as ``_pool_ref``)."""
    perm = _layout(attrs.layout, "NCHW", "layout")
    xn = np.transpose(x, perm)
    n, c, h, w = xn.shape
    kh, kw = _pair(attrs.pool_size, "pool_size", 1)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dh, dw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    oh = _out_dim(h, pt + pb, kh, dh, sh, attrs.ceil_mode)
    ow = _out_dim(w, pl + pr, kw, dw, sw, attrs.ceil_mode)
    eh = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt + pb))
    ew = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl + pr))
    pads = ((0, 0), (0, 0), (pt, pb + eh), (pl, pr + ew))
    return perm, xn, (kh, kw, sh, sw, dh, dw, oh, ow), pads


def _argmax_positions(x: np.ndarray, attrs: Attrs) -> tuple:
    """For each pooling window: the padded (row, col) of its first maximum."""
    perm, xn, (kh, kw, sh, sw, dh, dw, oh, ow), pads = _pool_setup(x, attrs)
    xp = np.pad(xn.astype(np.float64), pads, constant_values=-np.inf)
    win = _windows(xp, kh, kw, sh, sw, dh, dw, oh, ow)
    n, c = xn.shape[:2]
    flat = win.reshape(n, c, oh, ow, kh * kw)
    k = np.argmax(flat, axis=-1)
    rows = np.arange(oh)[:, None] * sh + (k // kw) * dh
    cols = np.arange(ow)[None, :] * sw + (k % kw) * dw
    return perm, xn, xp.shape, pads, rows, cols


def max_pool2d_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``g`` scattered (added) to each window's first maximum of ``x``."""
    g, x = args
    perm, xn, pshape, pads, rows, cols = _argmax_positions(x, attrs)
    gn = np.transpose(g, perm).astype(np.float64)
    n, c = xn.shape[:2]
    acc = np.zeros(pshape)
    ni, ci = np.arange(n)[:, None, None, None], np.arange(c)[None, :, None, None]
    np.add.at(acc, (ni, ci, rows, cols), gn)
    h, w = xn.shape[2:]
    out = acc[:, :, pads[2][0]:pads[2][0] + h, pads[3][0]:pads[3][0] + w]
    return wrap(np.ascontiguousarray(np.transpose(out, _inv_perm(perm))), g.dtype)


def max_pool2d_gather_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``v`` read at each window's first maximum of ``x`` (pooled shape)."""
    x, v = args
    perm, xn, pshape, pads, rows, cols = _argmax_positions(x, attrs)
    vp = np.pad(np.transpose(v, perm).astype(np.float64), pads)
    n, c = xn.shape[:2]
    ni, ci = np.arange(n)[:, None, None, None], np.arange(c)[None, :, None, None]
    out = vp[ni, ci, rows, cols]
    return wrap(np.ascontiguousarray(np.transpose(out, _inv_perm(perm))), v.dtype)


def avg_pool2d_grad_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``g / count`` spread over each window (the adjoint of ``avg_pool2d``)."""
    g, x = args
    perm, xn, (kh, kw, sh, sw, dh, dw, oh, ow), pads = _pool_setup(x, attrs)
    n, c, h, w = xn.shape
    pt, pl = pads[2][0], pads[3][0]
    ph, pw = h + pads[2][0] + pads[2][1], w + pads[3][0] + pads[3][1]
    mask = np.zeros((1, 1, ph, pw))
    if attrs.count_include_pad:
        mask[:, :, :ph - (pads[2][1] - _padding(attrs.padding)[2]),
             :pw - (pads[3][1] - _padding(attrs.padding)[3])] = 1
    else:
        mask[:, :, pt:pt + h, pl:pl + w] = 1
    count = np.sum(_windows(mask, kh, kw, sh, sw, dh, dw, oh, ow), axis=(4, 5))
    gn = np.transpose(g, perm).astype(np.float64) / np.maximum(count, 1)
    acc = np.zeros((n, c, ph, pw))
    for i in range(kh):
        for j in range(kw):
            acc[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                j * dw:j * dw + (ow - 1) * sw + 1:sw] += gn
    out = acc[:, :, pt:pt + h, pl:pl + w]
    return wrap(np.ascontiguousarray(np.transpose(out, _inv_perm(perm))), g.dtype)


def _pool_attrs(call: Any) -> dict[str, Any]:
    return dict(call.attrs)


@grad_rule
def max_pool2d_grad_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``max_pool2d_grad(g, x)``: ``dg = max_pool2d_gather(x, h)``; zero for x."""
    g, x = call.args
    return (op("nn.max_pool2d_gather", x, h, **_pool_attrs(call)), zeros_for(x))


@grad_rule
def max_pool2d_gather_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``max_pool2d_gather(x, v)``: zero for x; ``dv = max_pool2d_grad(h, x)``."""
    x, v = call.args
    return (zeros_for(x), op("nn.max_pool2d_grad", h, x, **_pool_attrs(call)))


@grad_rule
def avg_pool2d_grad_grad(call, out, h):  # type: ignore[no-untyped-def]
    """``avg_pool2d_grad(g, x)``: ``dg = avg_pool2d(h)``; zero for x."""
    g, x = call.args
    return (op("nn.avg_pool2d", h, **_pool_attrs(call)), zeros_for(x))


def _max_pool_gather_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.max_pool2d_gather(x, v)``: the pooled type of x, v of x's shape."""
    ts = tensor_args(arg_types, ("data", "values"))
    if ts is None:
        return None
    if ts[0].shape != ts[1].shape:
        raise ShapeMismatchError("nn.max_pool2d_gather: data and values must have one shape")
    t = _pool_rel(arg_types[:1], attrs, "nn.max_pool2d_gather")
    return None if t is None else TensorType(t.shape, ts[1].dtype)  # type: ignore[union-attr]


defop("nn.max_pool2d_grad", 2, attrs=_POOL_ATTRS, attrs_type="MaxPool2DAttrs",
      rel=_grad_like_rel("nn.max_pool2d_grad", 1, (4, 4),
                          lambda ts, at: _pool_rel(ts[1:], at, "nn.max_pool2d_grad")),
      impl=max_pool2d_grad_ref,
      grad=max_pool2d_grad_grad, pattern=OpPattern.OPAQUE,
      doc="Gradient of max_pool2d: (out_grad, data) -> out_grad routed to each window's max.")
defop("nn.max_pool2d_gather", 2, attrs=_POOL_ATTRS, attrs_type="MaxPool2DAttrs",
      rel=_max_pool_gather_rel, impl=max_pool2d_gather_ref, grad=max_pool2d_gather_grad,
      pattern=OpPattern.OPAQUE,
      doc="(data, values) -> values at each max_pool2d window's maximum of data (pooled).")
defop("nn.avg_pool2d_grad", 2, attrs=_POOL_ATTRS + [F("count_include_pad", "bool", False)],
      attrs_type="AvgPool2DAttrs",
      rel=_grad_like_rel("nn.avg_pool2d_grad", 1, (4, 4),
                         lambda ts, at: _pool_rel(ts[1:], at, "nn.avg_pool2d_grad")),
      impl=avg_pool2d_grad_ref, grad=avg_pool2d_grad_grad, pattern=OpPattern.OPAQUE,
      doc="Gradient of avg_pool2d: (out_grad, data) -> out_grad spread over each window.")
