"""Transposed and 1-d convolutions (``nn.conv2d_transpose``, ``nn.conv1d``,
``nn.conv1d_transpose``), instance and group normalization (``nn.instance_norm``,
``nn.group_norm``) and ``image.resize2d``.

A transposed convolution is the adjoint (in its data) of a convolution: ``conv2d_transpose(x,
w)`` is ``conv2d_backward_data`` of the convolution whose weight is ``w`` read as OIHW (Relay's
transposed weight layout IOHW: ``I`` is the transposed op's input channels, the forward
convolution's output channels). Its references and kernels are those of the conv2d gradient
operators, and its gradient is a ``conv2d`` (data) and a ``conv2d_backward_weight`` (weight).
The 1-d ops lift to their 2-d forms with a size-1 ``H`` axis inserted before ``W`` (layouts
``NCW`` -> ``NCHW``, ``OIW`` -> ``OIHW``); their gradients are the 2-d rules between
``expand_dims`` and ``squeeze``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import DiagnosticError, ShapeMismatchError, TypeInferenceError
from relay_ir.op import OpPattern, get_opdef
from relay_ir.op import _te as T
from relay_ir.op._grad import grad_rule, op, static_shape, tensor_type, zeros_for
from relay_ir.op._jvp import jvp_multilinear
from relay_ir.op._rules import (F, defop, dim_compatible, is_any, ranked_arg, tensor_arg,
                                wrap)
from relay_ir.op.conv import (_PADDING_DOC, _at, _canon, _grad_acc, _layout, _pair, _padding,
                              _tap, conv2d_backward_data_ref)
from relay_ir.op.nn import _g_in, _is_unknown
from relay_ir.ty import ANY, Dim, TensorType, Type, dim_add, dim_mul, format_dim


def _swap_io(layout: str) -> str:
    """A transposed-conv kernel layout as the forward convolution's (``I`` <-> ``O``)."""
    return layout.translate(str.maketrans("IO", "OI"))


def _rename(e: DiagnosticError, old: str, new: str) -> DiagnosticError:
    """``e`` again with operator name ``old`` in its message replaced by ``new``."""
    return type(e)(e.message.replace(old, new), e.span, e.notes)


# ----------------------------------------------------------------------------- conv2d_transpose
_CONVT_ATTRS = [F("strides", "ints", (1, 1), "step per spatial dim (h, w)"),
                F("padding", "ints", (0, 0), _PADDING_DOC + " (removed from the output)"),
                F("dilation", "ints", (1, 1), "kernel dilation per spatial dim (h, w)"),
                F("groups", "int", 1, "channel groups"),
                F("channels", "int?", None, "output channels (with kernel_size: infers weight)"),
                F("kernel_size", "ints?", None, "(kh, kw) (with channels: infers weight)"),
                F("data_layout", "str", "NCHW", "a permutation of NCHW"),
                F("kernel_layout", "str", "IOHW", "a permutation of IOHW"),
                F("out_layout", "str", "", "the result layout (\"\": data_layout)"),
                F("output_padding", "ints", (0, 0), "rows/columns added at the bottom/right "
                  "(each smaller than its stride)"),
                F("out_dtype", "str", "", "the result dtype (\"\": the input's)")]


def _conv_attrs_of(attrs: Attrs, name: str = "nn.conv2d_backward_data") -> Attrs:
    """The attributes of the convolution whose adjoint ``attrs`` (a conv2d_transpose's) is."""
    dl = attrs.data_layout
    if attrs.out_layout and attrs.out_layout != dl:
        raise TypeInferenceError(f"nn.conv2d_transpose: out_layout {attrs.out_layout!r} must "
                                 f"equal data_layout {dl!r}")
    return get_opdef(name).make_attrs({
        "strides": attrs.strides, "padding": attrs.padding, "dilation": attrs.dilation,
        "groups": attrs.groups, "data_layout": dl,
        "kernel_layout": _swap_io(attrs.kernel_layout), "out_layout": dl})


def _transpose_dim(d: Dim, stride: int, pad: int, k: Dim, dil: int, opad: int) -> Dim:
    """``(d - 1) * stride - pad + dil * (k - 1) + opad + 1``."""
    if is_any(d) or not isinstance(k, int):
        return ANY
    if stride <= 0 or dil <= 0:
        raise TypeInferenceError("strides and dilation must be positive")
    if isinstance(d, int):
        r = (d - 1) * stride - pad + dil * (k - 1) + opad + 1
        if r <= 0:
            raise ShapeMismatchError(f"nn.conv2d_transpose: the padding ({pad}) removes the "
                                     f"whole output (size {r + pad} before padding)")
        return r
    return dim_add(dim_mul(d, stride), dil * (k - 1) + opad + 1 - stride - pad)


def conv2d_transpose_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.conv2d_transpose(data, weight)``: ``(N, channels, OH, OW)`` in the data layout,
    ``OH = (H - 1) * sh - pad_h + dh * (kh - 1) + output_padding_h + 1``; the weight
    (``IOHW``: input channels, output channels per group, kh, kw) is inferred from ``channels``
    and ``kernel_size``."""
    name = "nn.conv2d_transpose"
    data = ranked_arg(arg_types[0], name, "data", 4)
    if data is None:
        return None
    dn, dc, dh, dw = _layout(attrs.data_layout, "NCHW", "data_layout")
    ki, ko, kh_, kw_ = _layout(attrs.kernel_layout, "IOHW", "kernel_layout")
    _conv_attrs_of(attrs)
    g = attrs.groups
    if g < 1:
        raise TypeInferenceError(f"{name}: groups must be >= 1, found {g}")
    c = data.shape[dc]
    if isinstance(c, int) and c % g:
        raise ShapeMismatchError(f"{name}: {c} input channels are not divisible by groups={g}")
    sh, sw = _pair(attrs.strides, "strides", 1)
    dlh, dlw = _pair(attrs.dilation, "dilation", 1)
    oph, opw = _pair(attrs.output_padding, "output_padding", 0)
    for o, s, dl, what in ((oph, sh, dlh, "h"), (opw, sw, dlw, "w")):
        if not 0 <= o < s:
            raise TypeInferenceError(f"{name}: output_padding ({o} in {what}) must be >= 0 and "
                                     f"smaller than the stride ({s})")
    pt, pl, pb, pr = _padding(attrs.padding)
    if min(pt, pl, pb, pr) < 0:
        raise TypeInferenceError(f"{name}: padding must not be negative")
    refined = None
    w_t = arg_types[1]
    if _is_unknown(w_t):
        if attrs.channels is None or attrs.kernel_size is None:
            return None
        kh, kw = _pair(attrs.kernel_size, "kernel_size", 1)
        if attrs.channels % g:
            raise ShapeMismatchError(f"{name}: channels={attrs.channels} is not divisible by "
                                     f"groups={g}")
        wshape: list[Dim] = [0, 0, 0, 0]
        wshape[ki], wshape[ko], wshape[kh_], wshape[kw_] = c, attrs.channels // g, kh, kw
        refined = [data, TensorType(tuple(wshape), data.dtype)]
        oc: Dim = attrs.channels
    else:
        w = tensor_arg(w_t, "weight")
        assert w is not None
        if w.ndim != 4:
            raise TypeInferenceError(f"{name}: weight must have rank 4, found rank {w.ndim}")
        if w.dtype != data.dtype:
            raise TypeInferenceError(f"{name}: data ({data.dtype}) and weight ({w.dtype}) "
                                     f"must have one dtype")
        if not dim_compatible(w.shape[ki], c):
            raise ShapeMismatchError(f"{name}: data has {format_dim(c)} input channels, but the "
                                     f"weight ({attrs.kernel_layout}) has "
                                     f"{format_dim(w.shape[ki])}")
        og = w.shape[ko]
        oc = og * g if isinstance(og, int) else ANY
        if attrs.channels is not None and not dim_compatible(oc, attrs.channels):
            raise ShapeMismatchError(f"{name}: channels={attrs.channels} but the weight gives "
                                     f"{format_dim(oc)} output channels (groups={g})")
        kh, kw = w.shape[kh_], w.shape[kw_]
        if attrs.kernel_size is not None:
            ks = _pair(attrs.kernel_size, "kernel_size", 1)
            if not (dim_compatible(ks[0], kh) and dim_compatible(ks[1], kw)):
                raise ShapeMismatchError(f"{name}: kernel_size={tuple(attrs.kernel_size)} but the "
                                         f"weight's kernel is ({format_dim(kh)}, {format_dim(kw)})")
    oshape: list[Dim] = [0, 0, 0, 0]
    oshape[dn], oshape[dc] = data.shape[dn], oc
    oshape[dh] = _transpose_dim(data.shape[dh], sh, pt + pb, kh, dlh, oph)
    oshape[dw] = _transpose_dim(data.shape[dw], sw, pl + pr, kw, dlw, opw)
    dt = attrs.out_dtype or data.dtype
    out = TensorType(tuple(oshape), dt)
    return out if refined is None else (out, refined)


def conv2d_transpose_ref(args: list, attrs: Attrs) -> np.ndarray:
    """The adjoint of the convolution with weight ``w`` (read as OIHW) applied to ``x``."""
    x, w = args
    dt = np.dtype(attrs.out_dtype or x.dtype)
    out_t = conv2d_transpose_rel([TensorType(x.shape, str(x.dtype)),
                                  TensorType(w.shape, str(w.dtype))], attrs)
    like = np.empty(out_t.concrete_shape, dtype=np.float64)
    r = conv2d_backward_data_ref([x.astype(np.float64), w.astype(np.float64), like],
                                 _conv_attrs_of(attrs))
    if dt.kind in "iu":
        r = np.round(r)
    return wrap(r, dt)


def conv2d_transpose_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.conv2d_transpose`` in two stages, as GEMM + col2im: ``cols[n, co,
    ky, kx, iy, ix] = sum_ci w[ci, co, ky, kx] x[n, ci, iy, ix]`` (over the group's input
    channels: a reduction whose inner loop runs along the input rows), then each output pixel
    adds the ``kh * kw`` columns that land on it (``(oy + pad - ky * dil)`` a multiple of the
    stride, inside the input): no multiply is spent on the zeros between strided taps."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, w = inputs
    dt = out_type.dtype
    acc = _grad_acc(dt)
    dp = _layout(attrs.data_layout, "NCHW", "data_layout")
    kp = _layout(attrs.kernel_layout, "IOHW", "kernel_layout")
    xs, ws = T.shape_of(x), T.shape_of(w)
    nb, ci, h, wd = _canon(dp, xs)
    _, cog, kh, kw = _canon(kp, ws)
    g = attrs.groups
    cig = ci // g if isinstance(ci, int) else tirx.floordiv(ci, g)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dlh, dlw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    oph, opw = _pair(attrs.output_padding, "output_padding", 0)
    rc = te.reduce_axis((0, cig), name="rc")

    def cols_body(n, co, ky, kx, iy, ix):  # type: ignore[no-untyped-def]
        c = rc if g == 1 else tirx.floordiv(co, cog) * cig + rc
        cw = co if g == 1 else tirx.floormod(co, cog)
        return te.sum(T.cast(x(*_at(dp, [n, c, iy, ix])), acc) *
                      T.cast(w(*_at(kp, [c, cw, ky, kx])), acc), axis=[rc])
    cols = te.compute([nb, cog * g, kh, kw, h, wd], cols_body, name="T_conv2d_transpose_cols")
    oshape = [(h - 1) * sh - pt - pb + dlh * (kh - 1) + oph + 1,
              (wd - 1) * sw - pl - pr + dlw * (kw - 1) + opw + 1]
    shape: list[object] = [0, 0, 0, 0]
    shape[dp[0]], shape[dp[1]], shape[dp[2]], shape[dp[3]] = nb, cog * g, *oshape

    def out_body(*i):  # type: ignore[no-untyped-def]
        n, co, oy, ox = _canon(dp, i)
        total = T.const(0, acc)
        for ky in range(kh):
            oky, iy = _tap(oy, ky, sh, dlh, pt, h)
            for kx in range(kw):
                okx, ix = _tap(ox, kx, sw, dlw, pl, wd)
                total = total + tirx.if_then_else(tirx.all(oky, okx),
                                                  cols(n, co, ky, kx, iy, ix),
                                                  T.const(0, acc))
        return T.cast(total, dt)
    # NOTE: the column stride, for the CPU schedule (schedules.schedule_conv_transpose: the
    # output columns split by their phase modulo the stride read contiguous columns)
    return te.compute(shape, out_body, name="T_conv2d_transpose", tag="injective",
                      attrs={"rly_stride_w": sw} if dp[3] == 3 else None)


@grad_rule
def conv2d_transpose_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``conv2d_transpose(x, w)`` (the adjoint of ``conv2d(., w)``): ``dx = conv2d(g, w)``,
    ``dw = conv2d_backward_weight(x, g, w)`` (the forward convolution's attributes)."""
    x, w = call.args
    g = _g_in(g, call)
    at = dict(_conv_attrs_of(call.attrs))
    return (op("nn.conv2d", g, w, **at), op("nn.conv2d_backward_weight", x, g, w, **at))


defop("nn.conv2d_transpose", 2, attrs=_CONVT_ATTRS, attrs_type="Conv2DTransposeAttrs",
      rel=conv2d_transpose_rel, impl=conv2d_transpose_ref, compute=conv2d_transpose_te,
      grad=conv2d_transpose_grad, jvp=jvp_multilinear, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="2-d transposed convolution (the data adjoint of conv2d; weight IOHW).")


# ----------------------------------------------------------------------------- 1-d convolutions
def _lift_layout(layout: str, letters: str, what: str) -> str:
    """A 1-d layout (a permutation of ``letters``) with ``H`` inserted before ``W``."""
    _layout(layout, letters, what)
    return layout.replace("W", "HW")


def _h_pos(layout: str) -> int:
    """Where the size-1 ``H`` axis goes in a 1-d tensor of ``layout``."""
    return layout.index("W")


def _one(v: Sequence[int], name: str, n: int, default: int) -> tuple[int, ...]:
    if v is None or len(v) == 0:
        return (default,) * n
    if len(v) == 1:
        return (v[0],) * n
    if len(v) == n:
        return tuple(v)
    raise TypeInferenceError(f"{name} must have 1 or {n} values, found {len(v)}")


def _attrs_2d(attrs: Attrs, name2d: str, transpose: bool) -> Attrs:
    """The 2-d attributes of a 1-d convolution's (``H``: size 1, stride 1, no padding)."""
    (s,) = _one(attrs.strides, "strides", 1, 1)
    (d,) = _one(attrs.dilation, "dilation", 1, 1)
    pl, pr = _one(attrs.padding, "padding", 2, 0)
    klet = "IOW" if transpose else "OIW"
    at: dict[str, Any] = {
        "strides": (1, s), "dilation": (1, d), "padding": (0, pl, 0, pr),
        "groups": attrs.groups, "channels": attrs.channels,
        "kernel_size": None if attrs.kernel_size is None else
        (1,) + _one(attrs.kernel_size, "kernel_size", 1, 1),
        "data_layout": _lift_layout(attrs.data_layout, "NCW", "data_layout"),
        "kernel_layout": _lift_layout(attrs.kernel_layout, klet, "kernel_layout"),
        "out_layout": (_lift_layout(attrs.out_layout, "NCW", "out_layout")
                       if attrs.out_layout else ""),
        "out_dtype": attrs.out_dtype}
    if transpose:
        (op_,) = _one(attrs.output_padding, "output_padding", 1, 0)
        at["output_padding"] = (0, op_)
    return get_opdef(name2d).make_attrs(at)


def _expand_t(t: TensorType, pos: int) -> TensorType:
    return TensorType(t.shape[:pos] + (1,) + t.shape[pos:], t.dtype)


def _squeeze_t(t: TensorType, pos: int) -> TensorType:
    return TensorType(t.shape[:pos] + t.shape[pos + 1:], t.dtype)


def _conv1d_family(name: str, name2d: str, transpose: bool) -> tuple:
    """Relation, reference and compute of the 1-d op ``name`` lifted onto ``name2d``."""
    od2 = get_opdef(name2d)
    klet = "IOW" if transpose else "OIW"

    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
        data = ranked_arg(arg_types[0], name, "data", 3)
        if data is None:
            return None
        try:
            a2 = _attrs_2d(attrs, name2d, transpose)
            dp, kp = _h_pos(attrs.data_layout), _h_pos(attrs.kernel_layout)
            wt = arg_types[1]
            if not _is_unknown(wt):
                w = ranked_arg(wt, name, "weight", 3)
                wt = _expand_t(w, kp)
            r = od2.type_rel([_expand_t(data, dp), wt], a2)
        except DiagnosticError as e:
            raise _rename(e, name2d, name) from None
        if r is None:
            return None
        op_ = _h_pos(attrs.out_layout or attrs.data_layout)
        if isinstance(r, tuple):
            out, refined = r
            return _squeeze_t(out, op_), [data, _squeeze_t(refined[1], kp)]
        return _squeeze_t(r, op_)
    rel.__doc__ = (f"``{name}(data, weight)``: the result of ``{name2d}`` on the inputs with a "
                   f"size-1 H axis (layouts NCW / {klet}), that axis removed.")

    def ref(args: list, attrs: Attrs) -> np.ndarray:
        x, w = args
        a2 = _attrs_2d(attrs, name2d, transpose)
        r = od2.impl([np.expand_dims(x, _h_pos(attrs.data_layout)),
                      np.expand_dims(w, _h_pos(attrs.kernel_layout))], a2)
        return np.squeeze(r, _h_pos(attrs.out_layout or attrs.data_layout))
    ref.__doc__ = f"``{name2d}`` of the inputs with a size-1 H axis, squeezed."

    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te = T.te_mod()
        x, w = inputs
        a2 = _attrs_2d(attrs, name2d, transpose)

        def expand(t: Any, pos: int, nm: str) -> Any:
            shp = T.shape_of(t)
            return te.compute(shp[:pos] + [1] + shp[pos:],
                              lambda *i: t(*(i[:pos] + i[pos + 1:])), name=nm,
                              tag="injective")
        x4 = expand(x, _h_pos(attrs.data_layout), "T_expand_data")
        w4 = expand(w, _h_pos(attrs.kernel_layout), "T_expand_weight")
        op_ = _h_pos(attrs.out_layout or attrs.data_layout)
        r = od2.compute(a2, [x4, w4], _expand_t(out_type, op_))
        shp = T.shape_of(r)
        zero = T.const(0, "int32")
        return te.compute(shp[:op_] + shp[op_ + 1:],
                          lambda *i: r(*(i[:op_] + (zero,) + i[op_:])), name="T_squeeze",
                          tag="injective")
    compute.__doc__ = f"TE compute of ``{name}``: ``{name2d}``'s between two reshapes."
    return rel, ref, compute


def _exp(e: Any, pos: int) -> Any:
    return op("expand_dims", e, axis=pos)


def _sq(e: Any, pos: int) -> Any:
    return op("squeeze", e, axis=(pos,))


@grad_rule
def conv1d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``conv1d(x, w)``: the conv2d gradient operators on the inputs with a size-1 H axis
    (``expand_dims``), squeezed back."""
    x, w = call.args
    g = _g_in(g, call)
    at = call.attrs
    a2 = dict(_attrs_2d(at, "nn.conv2d", False))
    a2["out_dtype"] = ""
    dp, kp = _h_pos(at.data_layout), _h_pos(at.kernel_layout)
    gp = _h_pos(at.out_layout or at.data_layout)
    x4, w4, g4 = _exp(x, dp), _exp(w, kp), _exp(g, gp)
    return (_sq(op("nn.conv2d_backward_data", g4, w4, x4, **a2), dp),
            _sq(op("nn.conv2d_backward_weight", g4, x4, w4, **a2), kp))


@grad_rule
def conv1d_transpose_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``conv1d_transpose(x, w)``: ``conv2d_transpose``'s rule on the inputs with a size-1 H
    axis, squeezed back."""
    x, w = call.args
    g = _g_in(g, call)
    at = call.attrs
    a2 = _attrs_2d(at, "nn.conv2d_transpose", True)
    ca = dict(_conv_attrs_of(a2))
    dp, kp = _h_pos(at.data_layout), _h_pos(at.kernel_layout)
    x4, w4, g4 = _exp(x, dp), _exp(w, kp), _exp(g, dp)
    return (_sq(op("nn.conv2d", g4, w4, **ca), dp),
            _sq(op("nn.conv2d_backward_weight", x4, g4, w4, **ca), kp))


_CONV1D_ATTRS = [F("strides", "ints", (1,), "step (w)"),
                 F("padding", "ints", (0, 0), "1 (both sides) or 2 (left, right) values"),
                 F("dilation", "ints", (1,), "kernel dilation (w)"),
                 F("groups", "int", 1, "channel groups (input and output channels split evenly)"),
                 F("channels", "int?", None, "output channels (with kernel_size: infers weight)"),
                 F("kernel_size", "ints?", None, "(kw,) (with channels: infers weight)"),
                 F("data_layout", "str", "NCW", "a permutation of NCW"),
                 F("kernel_layout", "str", "OIW", "a permutation of OIW"),
                 F("out_layout", "str", "", "the result layout (\"\": data_layout)"),
                 F("out_dtype", "str", "", "the result dtype (\"\": the input's)")]
_rel1, _ref1, _te1 = _conv1d_family("nn.conv1d", "nn.conv2d", False)
defop("nn.conv1d", 2, attrs=_CONV1D_ATTRS, attrs_type="Conv1DAttrs", rel=_rel1, impl=_ref1,
      compute=_te1, grad=conv1d_grad, jvp=jvp_multilinear,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="1-d convolution (NCW data, OIW weight).")

_CONV1DT_ATTRS = [F("strides", "ints", (1,), "step (w)"),
                  F("padding", "ints", (0, 0), "1 (both sides) or 2 (left, right) values "
                    "(removed from the output)"),
                  F("dilation", "ints", (1,), "kernel dilation (w)"),
                  F("groups", "int", 1, "channel groups"),
                  F("channels", "int?", None, "output channels (with kernel_size: infers "
                    "weight)"),
                  F("kernel_size", "ints?", None, "(kw,) (with channels: infers weight)"),
                  F("data_layout", "str", "NCW", "a permutation of NCW"),
                  F("kernel_layout", "str", "IOW", "a permutation of IOW"),
                  F("out_layout", "str", "", "the result layout (\"\": data_layout)"),
                  F("output_padding", "ints", (0,), "columns added at the right (smaller than "
                    "the stride)"),
                  F("out_dtype", "str", "", "the result dtype (\"\": the input's)")]
_rel1t, _ref1t, _te1t = _conv1d_family("nn.conv1d_transpose", "nn.conv2d_transpose", True)
defop("nn.conv1d_transpose", 2, attrs=_CONV1DT_ATTRS, attrs_type="Conv1DTransposeAttrs",
      rel=_rel1t, impl=_ref1t, compute=_te1t, grad=conv1d_transpose_grad, jvp=jvp_multilinear,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="1-d transposed convolution (NCW data, IOW weight).")


# ----------------------------------------------------------------------------- instance/group norm
# Both normalize groups of channels: group norm splits the channel axis into ``num_groups``
# groups, instance norm is group norm with one channel per group. With the channel axis ``a``
# split into ``(G, C/G)`` (a reshape ``-4``), the statistics run over every axis of the split
# tensor but the batch axis 0 and the group axis ``a``.
def _groups_of(call_or_attrs: Any, name: str, c: Dim) -> Dim:
    """The number of groups: ``num_groups`` for group norm, the channel count otherwise."""
    if name == "nn.group_norm":
        return call_or_attrs.num_groups
    return c


def _gn_rel(name: str):  # type: ignore[no-untyped-def]
    from relay_ir.op.nn import _per_channel_rel
    from relay_ir.op._rules import norm_axis

    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
        data = tensor_arg(arg_types[0], "data")
        if data is None:
            return None
        if data.ndim < 2:
            raise TypeInferenceError(f"{name}: data must have rank >= 2 (batch, channels, ...), "
                                     f"found rank {data.ndim}")
        if not data.dtype.startswith("float"):
            raise TypeInferenceError(f"{name}: data must be a float tensor, found {data.dtype}")
        axis = norm_axis(attrs.axis, data.ndim)
        if name == "nn.group_norm":
            g = attrs.num_groups
            c = data.shape[axis]
            if g < 1:
                raise TypeInferenceError(f"{name}: num_groups must be >= 1, found {g}")
            if isinstance(c, int) and c % g:
                raise ShapeMismatchError(f"{name}: {c} channels (axis {attrs.axis}) are not "
                                         f"divisible by num_groups={g}")
        return _per_channel_rel(name, arg_types, attrs.axis, ("gamma", "beta"))
    rel.__doc__ = (f"``{name}(data, gamma, beta)``: the type of data; gamma and beta of shape "
                   f"``(data.shape[axis],)``.")
    return rel


def _split_shape(shape: Sequence[int], axis: int, groups: int) -> tuple[int, ...]:
    c = shape[axis]
    return tuple(shape[:axis]) + (groups, c // groups) + tuple(shape[axis + 1:])


def _stat_axes(ndim: int, axis: int) -> tuple[int, ...]:
    """The statistics' axes of the split (rank ``ndim + 1``) tensor."""
    return tuple(i for i in range(ndim + 1) if i != 0 and i != axis) if axis else \
        tuple(range(1, ndim + 1))


def _gn_ref(name: str):  # type: ignore[no-untyped-def]
    from relay_ir.op.nn import _acc, _channel_view

    def ref(args: list, attrs: Attrs) -> np.ndarray:
        x, gm, bt = args
        axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
        c = x.shape[axis]
        g = attrs.num_groups if name == "nn.group_norm" else c
        xa = _acc(x)
        xr = xa.reshape(_split_shape(x.shape, axis, g))
        ax = _stat_axes(x.ndim, axis)
        m = np.mean(xr, axis=ax, keepdims=True)
        v = np.mean((xr - m) ** 2, axis=ax, keepdims=True)
        out = ((xr - m) / np.sqrt(v + np.asarray(attrs.epsilon, xa.dtype))).reshape(x.shape)
        if attrs.scale:
            out = out * _channel_view(_acc(gm), x.ndim, axis)
        if attrs.center:
            out = out + _channel_view(_acc(bt), x.ndim, axis)
        return wrap(out, x.dtype)
    ref.__doc__ = (f"``{name}``: ``(x - mean) / sqrt(var + eps) * gamma + beta``, the statistics "
                   f"per batch and {'group' if name == 'nn.group_norm' else 'channel'}.")
    return ref


def _gn_te(name: str):  # type: ignore[no-untyped-def]
    from relay_ir.op._rules import norm_axis
    from relay_ir.op.nn import _norm_acc

    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te, tirx = T.te_mod(), T.tir_mod()
        x, gm, bt = inputs
        dt = T.dtype_of(x)
        acc = _norm_acc(dt)
        xs = T.shape_of(x)
        nd = len(xs)
        axis = norm_axis(attrs.axis, nd)
        c = xs[axis]
        g = attrs.num_groups if name == "nn.group_norm" else c
        cpg = c // g if isinstance(c, int) and isinstance(g, int) else tirx.floordiv(c, g)
        rshape = xs[:axis] + [g, cpg] + xs[axis + 1:]

        def split_index(i: Sequence[Any]) -> list[Any]:
            return list(i[:axis]) + [tirx.floordiv(i[axis], cpg), tirx.floormod(i[axis], cpg)] \
                + list(i[axis + 1:])

        def merge_index(j: Sequence[Any]) -> list[Any]:
            return list(j[:axis]) + [j[axis] * cpg + j[axis + 1]] + list(j[axis + 2:])
        xr = te.compute(rshape, lambda *j: x(*merge_index(j)), name="T_gn_split",
                        tag="injective")
        ax = list(_stat_axes(nd, axis))
        count = T.as_expr(T.shape_size([rshape[a] for a in ax]), "int64")
        s = T.reduce(xr, ax, True, "sum", acc_dtype=acc, name="T_gn_sum")
        mean = T.elemwise(lambda u: u / T.cast(count, acc), s, name="T_gn_mean")

        def dev(*j):  # type: ignore[no-untyped-def]
            d = T.cast(xr(*j), acc) - T.bcast_index(mean, j)
            return d * d
        vs = T.reduce(xr, ax, True, "sum", acc_dtype=acc, fn=dev, name="T_gn_var")
        eps = T.const(T.const_value(attrs.epsilon, acc), acc)

        def body(*i):  # type: ignore[no-untyped-def]
            j = split_index(i)
            var = T.bcast_index(vs, j) / T.cast(count, acc)
            r = (T.cast(x(*i), acc) - T.bcast_index(mean, j)) / tirx.sqrt(var + eps)
            if attrs.scale:
                r = r * T.cast(gm(i[axis]), acc)
            if attrs.center:
                r = r + T.cast(bt(i[axis]), acc)
            return T.cast(r, dt)
        return te.compute(xs, body, name="T_" + name.split(".")[-1], tag="elemwise")
    compute.__doc__ = f"TE compute of ``{name}`` (two reductions over the split channel axis)."
    return compute


def _gn_parts(call: Any, name: str):  # type: ignore[no-untyped-def]
    """What both derivative rules start from: the split ``reshape`` codes, the statistics'
    axes, ``rstd`` and the split ``xh = (x - mean) rstd``."""
    from relay_ir.op._grad import scalar
    from relay_ir.op.nn import _axis_of
    x = call.args[0]
    nd = tensor_type(x).ndim
    axis = _axis_of(call)
    c = tensor_type(x).shape[axis]
    g = call.attrs.num_groups if name == "nn.group_norm" else c
    if not isinstance(g, int):
        static_shape(x, call)  # NOTE: raises the "needs static shapes" diagnostic
    codes = (0,) * axis + (-4, g, -1) + (0,) * (nd - axis - 1)
    ax = _stat_axes(nd, axis)

    def split(e: Any) -> Any:
        return op("reshape", e, newshape=codes)
    xr = split(x)
    xc = op("subtract", xr, op("mean", xr, axis=ax, keepdims=True))
    var = op("mean", op("multiply", xc, xc), axis=ax, keepdims=True)
    rstd = op("rsqrt", op("add", var, scalar(call.attrs.epsilon, x)))
    return nd, axis, ax, split, rstd, op("multiply", xc, rstd)


def _gn_dxhat(split: Any, ax: tuple, rstd: Any, xhr: Any, d: Any) -> Any:
    """``rstd (d - mean(d) - xh mean(d xh))`` on the split ``d``: the normalization's
    (symmetric) Jacobian applied to ``d``."""
    dr = split(d)
    return op("multiply", rstd, op("subtract",
                                   op("subtract", dr, op("mean", dr, axis=ax, keepdims=True)),
                                   op("multiply", xhr, op("mean", op("multiply", dr, xhr),
                                                          axis=ax, keepdims=True))))


def _gn_grad(name: str):  # type: ignore[no-untyped-def]
    from relay_ir.op.nn import _channel, _per_channel_sum

    @grad_rule
    def rule(call, out, g):  # type: ignore[no-untyped-def]
        x, gamma, beta = call.args
        at = call.attrs
        nd, axis, ax, split, rstd, xhr = _gn_parts(call, name)
        xh = op("reshape_like", xhr, x)
        dxh = op("multiply", g, _channel(gamma, nd, axis)) if at.scale else g
        dx = op("reshape_like", _gn_dxhat(split, ax, rstd, xhr, dxh), x)
        dgamma = (_per_channel_sum(op("multiply", g, xh), axis) if at.scale
                  else zeros_for(gamma))
        dbeta = _per_channel_sum(g, axis) if at.center else zeros_for(beta)
        return (dx, dgamma, dbeta)
    rule.__doc__ = (f"``{name}(x, gamma, beta)``: with the split ``xh = (x - mean) rstd`` and "
                    f"``dxh = g gamma``: ``dx = rstd (dxh - mean(dxh) - xh mean(dxh xh))`` over "
                    f"the statistics' axes, ``dgamma = sum(g xh)``, ``dbeta = sum(g)``.")
    return rule


def _gn_jvp(name: str):  # type: ignore[no-untyped-def]
    from relay_ir.op.nn import _channel

    def rule(call, out, t):  # type: ignore[no-untyped-def]
        x = call.args[0]
        gamma = call.args[1]
        at = call.attrs
        nd, axis, ax, split, rstd, xhr = _gn_parts(call, name)
        dy = op("reshape_like", _gn_dxhat(split, ax, rstd, xhr, t[0]), x)
        if at.scale:
            xh = op("reshape_like", xhr, x)
            dy = op("add", op("multiply", dy, _channel(gamma, nd, axis)),
                    op("multiply", xh, _channel(t[1], nd, axis)))
        if at.center:
            dy = op("add", dy, _channel(t[2], nd, axis))
        return dy
    rule.__doc__ = (f"``{name}(x, gamma, beta)``: ``dy = J(tx) gamma + xh t_gamma + t_beta`` "
                    f"with ``J`` the normalization's Jacobian (see the gradient rule).")
    return rule


_GN_COMMON = [F("epsilon", "float", 1e-5, "added to the variance before the square root"),
              F("center", "bool", True, "add beta (False: beta is ignored)"),
              F("scale", "bool", True, "multiply by gamma (False: gamma is ignored)")]
defop("nn.instance_norm", 3, attrs=[F("axis", "int", 1, "the channel axis")] + _GN_COMMON,
      attrs_type="InstanceNormAttrs", rel=_gn_rel("nn.instance_norm"),
      impl=_gn_ref("nn.instance_norm"), compute=_gn_te("nn.instance_norm"),
      grad=_gn_grad("nn.instance_norm"), jvp=_gn_jvp("nn.instance_norm"),
      pattern=OpPattern.OPAQUE,
      doc="Instance normalization: per batch and channel over the other axes.")
defop("nn.group_norm", 3, attrs=[F("num_groups", "int", 0, "channel groups (required, >= 1)"),
                                 F("axis", "int", 1, "the channel axis")] + _GN_COMMON,
      attrs_type="GroupNormAttrs", rel=_gn_rel("nn.group_norm"), impl=_gn_ref("nn.group_norm"),
      compute=_gn_te("nn.group_norm"), grad=_gn_grad("nn.group_norm"),
      jvp=_gn_jvp("nn.group_norm"), pattern=OpPattern.OPAQUE,
      doc="Group normalization: per batch and channel group over the group and other axes.")


# ----------------------------------------------------------------------------- image.resize2d
# Each resized axis is a linear map of that axis: output index ``o`` reads input coordinate
# ``c(o)`` (the coordinate transformation; ``scale = out / in``), and the method turns ``c``
# into taps: nearest one (rounded, clamped), linear two, cubic four (``floor(c) - 1 ..
# floor(c) + 2``, Keys' kernel with ``cubic_alpha``; ``cubic_exclude`` drops the taps outside
# the input and renormalizes). Taps outside the input read the edge. ``tf_crop_and_resize``
# reads ``roi`` and writes ``extrapolation_value`` where a coordinate leaves ``[0, in - 1]``.
_RESIZE_METHODS = ("nearest_neighbor", "linear", "cubic")
_COORD_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                "tf_half_pixel_for_nn", "tf_crop_and_resize")
_ROUNDING = ("", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_axes(layout: str) -> tuple[int, int]:
    _, _, h, w = _layout(layout, "NCHW", "layout")
    return h, w


def resize2d_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``image.resize2d(data)``: data's shape with H, W = ``size`` (dtype ``out_dtype``)."""
    name = "image.resize2d"
    data = ranked_arg(arg_types[0], name, "data", 4)
    if data is None:
        return None
    h, w = _resize_axes(attrs.layout)
    size = attrs.size
    if size is None or len(size) != 2 or min(size) < 1:
        raise TypeInferenceError(f"{name}: size must be two positive integers (h, w), found "
                                 f"{size!r}")
    for what, v, allowed in (("method", attrs.method, _RESIZE_METHODS),
                             ("coordinate_transformation_mode",
                              attrs.coordinate_transformation_mode, _COORD_MODES),
                             ("rounding_method", attrs.rounding_method, _ROUNDING)):
        if v not in allowed:
            raise TypeInferenceError(f"{name}: unknown {what} {v!r} (expected one of "
                                     f"{', '.join(repr(a) for a in allowed)})")
    if len(attrs.roi) != 4:
        raise TypeInferenceError(f"{name}: roi must have 4 values (start_h, start_w, end_h, "
                                 f"end_w), found {len(attrs.roi)}")
    dt = attrs.out_dtype or data.dtype
    if attrs.method != "nearest_neighbor" and not (data.dtype.startswith("float")
                                                    and dt.startswith("float")):
        raise TypeInferenceError(f"{name}: {attrs.method} resizing needs float data and result "
                                 f"(found {data.dtype} -> {dt}); nearest_neighbor takes any")
    for d, what in ((data.shape[h], "H"), (data.shape[w], "W")):
        if isinstance(d, int) and d < 1:
            raise ShapeMismatchError(f"{name}: the input's {what} axis is empty")
    shape = list(data.shape)
    shape[h], shape[w] = size
    return TensorType(tuple(shape), dt)


def _rounding(attrs: Attrs) -> str:
    if attrs.rounding_method:
        return attrs.rounding_method
    return "round" if attrs.coordinate_transformation_mode == "align_corners" else "floor"


def _coords(attrs: Attrs, n: int, m: int, k: int) -> np.ndarray:
    """Input coordinates of the ``m`` outputs of spatial axis ``k`` (0: H, 1: W), float64,
    in the operation order the TE compute uses."""
    mode = attrs.coordinate_transformation_mode
    o = np.arange(m, dtype=np.float64)
    scale = float(m) / float(n)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if m > 1 else np.zeros(m)
    if mode == "align_corners":
        return o * float(n - 1) / float(m - 1) if m > 1 else np.zeros(m)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    start, end = float(attrs.roi[k]), float(attrs.roi[k + 2])
    if m > 1:
        return start * float(n - 1) + o * ((end - start) * float(n - 1)) / float(m - 1)
    return np.full(m, 0.5 * (start + end) * float(n - 1))


def _cubic(t: np.ndarray, a: float) -> list[np.ndarray]:
    """Keys' cubic weights of the taps at distances ``t + 1, t, 1 - t, 2 - t``."""
    def inner(d):  # type: ignore[no-untyped-def]
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def outer(d):  # type: ignore[no-untyped-def]
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [outer(t + 1), inner(t), inner(1 - t), outer(2 - t)]


def _round(c: np.ndarray, how: str) -> np.ndarray:
    fl = np.floor(c)
    half = (c - fl) == 0.5
    if how == "floor":
        return fl
    if how == "ceil":
        return np.ceil(c)
    if how == "round_prefer_ceil":
        return np.where(half, fl + 1, np.floor(c + 0.5))
    if how == "round_prefer_floor":
        return np.where(half, fl, np.floor(c + 0.5))
    return np.where(half, np.where(c < 0, fl, fl + 1), np.floor(c + 0.5))  # half away from 0


def resize_matrix(attrs: Attrs, n: int, m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(m, n)`` float64 map of spatial axis ``k`` (0: H, 1: W) of size ``n`` resized to
    ``m``, and the ``(m,)`` mask of the outputs that ``tf_crop_and_resize`` extrapolates."""
    c = _coords(attrs, n, m, k)
    rows = np.arange(m)
    mat = np.zeros((m, n))
    if attrs.method == "nearest_neighbor":
        idx = np.clip(_round(c, _rounding(attrs)), 0, n - 1).astype(np.int64)
        mat[rows, idx] = 1.0
    else:
        fl = np.floor(c)
        t = c - fl
        if attrs.method == "linear":
            offs, ws = (0, 1), [1 - t, t]
        else:
            offs, ws = (-1, 0, 1, 2), _cubic(t, float(attrs.cubic_alpha))
        taps = [fl.astype(np.int64) + o for o in offs]
        if attrs.method == "cubic" and attrs.cubic_exclude:
            ws = [np.where((i >= 0) & (i < n), w, 0.0) for i, w in zip(taps, ws)]
            total = sum(ws)
            ws = [w / total for w in ws]
        for i, w in zip(taps, ws):
            np.add.at(mat, (rows, np.clip(i, 0, n - 1)), w)
    if attrs.coordinate_transformation_mode == "tf_crop_and_resize":
        outside = (c < 0) | (c > n - 1)
    else:
        outside = np.zeros(m, bool)
    return mat, outside


def resize2d_ref(args: list, attrs: Attrs) -> np.ndarray:
    """Both axis maps applied (float64), extrapolated outputs set, cast to the result dtype."""
    x = args[0]
    h, w = _resize_axes(attrs.layout)
    mh, oh = resize_matrix(attrs, x.shape[h], attrs.size[0], 0)
    mw, ow = resize_matrix(attrs, x.shape[w], attrs.size[1], 1)
    dt = np.dtype(attrs.out_dtype or x.dtype)
    if attrs.method == "nearest_neighbor":  # NOTE: exact for every dtype: a gather
        r = np.take(np.take(x, np.argmax(mh, axis=1), axis=h), np.argmax(mw, axis=1), axis=w)
    else:
        xt = np.moveaxis(x.astype(np.float64), (h, w), (-2, -1))
        r = np.moveaxis(mh @ xt @ mw.T, (-2, -1), (h, w))
    if oh.any() or ow.any():
        shape_h = [1] * 4
        shape_h[h] = -1
        shape_w = [1] * 4
        shape_w[w] = -1
        outside = oh.reshape(shape_h) | ow.reshape(shape_w)
        r = np.where(outside, np.asarray(attrs.extrapolation_value).astype(r.dtype), r)
    return wrap(r, dt)


def _te_taps(attrs: Attrs, o: Any, n: Any, m: int, k: int) -> tuple[list, Any]:
    """TIR taps ``[(index, weight or None)]`` of output index ``o`` of spatial axis ``k`` and
    the "extrapolate" condition (None when never), mirroring :func:`resize_matrix`."""
    tirx = T.tir_mod()
    f64 = "float64"
    of = T.cast(o, f64)
    nf = T.const(float(n), f64) if isinstance(n, int) else T.cast(n, f64)
    mode = attrs.coordinate_transformation_mode
    scale = float(m) / nf

    def cst(v: float) -> Any:
        return T.const(v, f64)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        c = (of + cst(0.5)) / scale - cst(0.5)
        if mode == "pytorch_half_pixel" and m == 1:
            c = cst(0.0)
    elif mode == "align_corners":
        c = of * (nf - cst(1.0)) / cst(float(m - 1)) if m > 1 else cst(0.0)
    elif mode == "asymmetric":
        c = of / scale
    elif mode == "tf_half_pixel_for_nn":
        c = (of + cst(0.5)) / scale
    else:
        start, end = float(attrs.roi[k]), float(attrs.roi[k + 2])
        if m > 1:
            c = cst(start) * (nf - cst(1.0)) + of * ((cst(end - start)) * (nf - cst(1.0))) / \
                cst(float(m - 1))
        else:
            c = cst(0.5 * (start + end)) * (nf - cst(1.0))
    outside = None
    if mode == "tf_crop_and_resize":
        outside = tirx.any(c < cst(0.0), c > nf - cst(1.0))
    n64 = T.const(n, "int64") if isinstance(n, int) else T.cast(n, "int64")

    def clamp(i: Any) -> Any:
        return tirx.max(tirx.min(i, n64 - T.const(1, "int64")), T.const(0, "int64"))
    fl = tirx.floor(c)
    if attrs.method == "nearest_neighbor":
        how = _rounding(attrs)
        half = tirx.EQ(c - fl, cst(0.5))
        up = tirx.floor(c + cst(0.5))
        if how == "floor":
            r = fl
        elif how == "ceil":
            r = tirx.ceil(c)
        elif how == "round_prefer_ceil":
            r = tirx.Select(half, fl + cst(1.0), up)
        elif how == "round_prefer_floor":
            r = tirx.Select(half, fl, up)
        else:
            r = tirx.Select(half, tirx.Select(c < cst(0.0), fl, fl + cst(1.0)), up)
        return [(clamp(T.cast(r, "int64")), None)], outside
    t = c - fl
    base = T.cast(fl, "int64")
    if attrs.method == "linear":
        offs, ws = (0, 1), [cst(1.0) - t, t]
    else:
        offs, ws = (-1, 0, 1, 2), _cubic(t, float(attrs.cubic_alpha))  # type: ignore[arg-type]
    idx = [base + T.const(off, "int64") for off in offs]
    if attrs.method == "cubic" and attrs.cubic_exclude:
        ws = [tirx.Select(tirx.all(i >= T.const(0, "int64"), i < n64), wt, cst(0.0))
              for i, wt in zip(idx, ws)]
        total = ws[0] + ws[1] + ws[2] + ws[3]
        ws = [wt / total for wt in ws]
    return [(clamp(i), wt) for i, wt in zip(idx, ws)], outside


def resize2d_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``image.resize2d``: per output, the taps of both axes (float64
    coordinates, as the reference), weighted and summed."""
    te, tirx = T.te_mod(), T.tir_mod()
    x = inputs[0]
    xs = T.shape_of(x)
    h, w = _resize_axes(attrs.layout)
    dt = out_type.dtype
    mh, mw = attrs.size
    acc = "float64"

    def body(*i):  # type: ignore[no-untyped-def]
        th, oh = _te_taps(attrs, i[h], xs[h], mh, 0)
        tw, ow = _te_taps(attrs, i[w], xs[w], mw, 1)
        total = None
        for ih, wh in th:
            for iw, ww in tw:
                idx = list(i)
                idx[h], idx[w] = ih, iw
                v = x(*idx)
                if wh is None:
                    term = v
                else:
                    term = T.cast(v, acc) * wh * ww
                total = term if total is None else total + term
        r = T.cast(total, dt)
        conds = [c for c in (oh, ow) if c is not None]
        if conds:
            ext = T.const(T.const_value(attrs.extrapolation_value, dt), dt)
            r = tirx.Select(tirx.any(*conds) if len(conds) > 1 else conds[0], ext, r)
        return r
    return te.compute(list(out_type.shape), body, name="T_resize2d", tag="injective")


def _resize_apply(e: Any, call: Any, adjoint: bool) -> Any:
    """``A_h e A_w^T`` over the spatial axes of ``e`` (the adjoint: ``A_h^T e A_w``), with the
    call's constant axis maps (extrapolated outputs: zero rows)."""
    from relay_ir.expr import const
    x = call.args[0]
    at = call.attrs
    shape = static_shape(x, call)
    h, w = _resize_axes(at.layout)
    dt = tensor_type(x).dtype
    mats = []
    for k, ax in enumerate((h, w)):
        mat, outside = resize_matrix(at, shape[ax], at.size[k], k)
        mats.append(np.where(outside[:, None], 0.0, mat))
    perm = [i for i in range(4) if i not in (h, w)] + [h, w]
    inv = [perm.index(i) for i in range(4)]
    y = op("transpose", e, axes=tuple(perm))
    ah, aw = mats
    if adjoint:
        ah, aw = ah.T, aw.T
    # NOTE: (.., H, W) @ aw^T contracts W; then H, by the same product on the swapped axes
    y = op("nn.matmul", y, const(np.ascontiguousarray(aw.T).astype(dt)))
    y = op("transpose", y, axes=(0, 1, 3, 2))
    y = op("nn.matmul", y, const(np.ascontiguousarray(ah.T).astype(dt)))
    y = op("transpose", y, axes=(0, 1, 3, 2))
    return op("transpose", y, axes=tuple(inv))


@grad_rule
def resize2d_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``resize2d(x)`` (linear in x, extrapolated outputs constant): ``dx = A_h^T g A_w``."""
    return (_resize_apply(g, call, True),)


def resize2d_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """``resize2d(x)``: ``A_h t A_w^T`` (extrapolated outputs: zero)."""
    return _resize_apply(t[0], call, False)


defop("image.resize2d", 1,
      attrs=[F("size", "ints", None, "the output (h, w)"),
             F("roi", "floats", (0.0, 0.0, 0.0, 0.0), "(start_h, start_w, end_h, end_w), "
               "normalized (tf_crop_and_resize)"),
             F("layout", "str", "NCHW", "a permutation of NCHW"),
             F("method", "str", "linear", "nearest_neighbor, linear or cubic"),
             F("coordinate_transformation_mode", "str", "half_pixel",
               "half_pixel, align_corners, asymmetric, pytorch_half_pixel, "
               "tf_half_pixel_for_nn or tf_crop_and_resize"),
             F("rounding_method", "str", "", "nearest: round (half away from zero), "
               "round_prefer_floor, round_prefer_ceil, floor, ceil (\"\": round for "
               "align_corners, else floor)"),
             F("cubic_alpha", "float", -0.5, "the cubic kernel's coefficient"),
             F("cubic_exclude", "int", 0, "1: cubic taps outside the input get no weight"),
             F("extrapolation_value", "float", 0.0, "tf_crop_and_resize: the value outside"),
             F("out_dtype", "str", "", "the result dtype (\"\": the input's)")],
      attrs_type="Resize2DAttrs", rel=resize2d_rel, impl=resize2d_ref, compute=resize2d_te,
      grad=resize2d_grad, jvp=resize2d_jvp, pattern=OpPattern.INJECTIVE, required=("size",),
      doc="Resize the H and W axes (nearest, linear or cubic; ONNX coordinate modes).")
