"""Convolution and pooling operators (``nn.conv2d``, ``nn.max_pool2d``, ``nn.avg_pool2d``,
the global pools) and their gradient operators (``nn.conv2d_backward_data``/``_weight``,
``nn.max_pool2d_grad``/``_gather``, ``nn.avg_pool2d_grad``), with their TE computes.

Layouts: ``nn.conv2d`` accepts any data layout that permutes ``NCHW`` (``NCHW``, ``NHWC``) and any
kernel layout that permutes ``OIHW`` (``OIHW``, ``HWIO``, ...), optionally with a block of output
channels innermost (``OIHW16o``: a 5-d ``[O/16, I, H, W, 16]`` weight; no gradient); its data
and result, and the pools' data, may also be blocked by channels (``NCHW16c``: a 5-d
``[N, C/16, H, W, 16]`` tensor, what ``runtime.build``'s ``conv-nchwc`` lowering gives; no
gradient).
``padding`` has 1 (all sides), 2 (top/bottom, left/right) or 4 (top, left, bottom, right)
values, as in TVM.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Expr
from relay_ir.op import OpPattern
from relay_ir.op._jvp import (jvp_collapse, jvp_linear, jvp_linear_in, jvp_multilinear,
                              jvp_multilinear_in)
from relay_ir.op._grad import grad_rule, op, scalar, static_shape, zeros_for
from relay_ir.op import _te as T
from relay_ir.op._rules import (F, defop, dim_compatible, fmt_shape, grad_like_rel, is_any,
                                ranked_arg, tensor_arg, tensor_args, wrap)
from relay_ir.ty import ANY, Dim, TensorType, Type, dim_add, dim_div_exact, format_dim
from relay_ir.op.nn import _acc, _g_in, _input_dtypes, _is_unknown, _mm_result, _out_dtype


# ---------------------------------------------------------------------- TE computes: conv2d, pools
def _inv_perm(perm: Sequence[int]) -> list[int]:
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return inv


def conv2d_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.conv2d``: any NCHW/OIHW permutation, groups, dilation, out_dtype.

    A separate zero-padding stage (inlinable) feeds one reduction over (c, kh, kw).
    """
    te, tirx = T.te_mod(), T.tir_mod()
    x, w = inputs
    dt = out_type.dtype
    comp = "int32" if dt == "bool" else (
        dt if T.is_int(dt) else ("float32" if dt == "float16" else dt))
    (dn, dc, dh, dw), dblock = _data_layout(attrs.data_layout, "data_layout")
    (ko, ki, kh_, kw_), block = _kernel_layout(attrs.kernel_layout)
    (on, oc, oh_, ow_), oblock = _data_layout(attrs.out_layout or attrs.data_layout,
                                              "out_layout")
    xs, ws = T.shape_of(x), T.shape_of(w)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dlh, dlw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    h, wd = xs[dh], xs[dw]
    o, cg, kh, kw = ws[ko], ws[ki], ws[kh_], ws[kw_]
    if block:
        o = o * block
    g = attrs.groups
    og = o // g if isinstance(o, int) else tirx.floordiv(o, g)
    if pt or pl or pb or pr:
        pshape = list(xs)
        pshape[dh] = h + pt + pb
        pshape[dw] = wd + pl + pr

        def pad_body(*i):  # type: ignore[no-untyped-def]
            idx = list(i)
            idx[dh] = i[dh] - pt
            idx[dw] = i[dw] - pl
            inside = tirx.all(i[dh] >= pt, i[dh] < h + pt, i[dw] >= pl, i[dw] < wd + pl)
            return tirx.if_then_else(inside, x(*idx), T.const(0, T.dtype_of(x)))
        xp = te.compute(pshape, pad_body, name="T_pad", tag="injective,pad")
    else:
        xp = x
    ohd = (h + pt + pb - (kh - 1) * dlh - 1) // sh + 1
    owd = (wd + pl + pr - (kw - 1) * dlw - 1) // sw + 1
    oshape: list[object] = [0] * 4
    oshape[on], oshape[oc], oshape[oh_], oshape[ow_] = xs[dn], o, ohd, owd
    if oblock:
        oshape[oc] = o // oblock
        oshape.append(oblock)
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def body(*oi):  # type: ignore[no-untyped-def]
        n, co, y, xx = oi[on], oi[oc], oi[oh_], oi[ow_]
        if oblock:
            co = co * oblock + oi[4]
        cin = rc if g == 1 else tirx.floordiv(co, og) * cg + rc
        di: list[object] = [0] * 4
        di[dn], di[dc], di[dh], di[dw] = n, cin, y * sh + ry * dlh, xx * sw + rx * dlw
        if dblock and dblock == oblock and cg == 1 and og == 1:
            # NOTE: depthwise with the same block in and out: index the blocks directly (the
            # schedule then sees contiguous channel vectors; floordiv/floormod of
            # ``cb * b + c`` would not simplify)
            di[dc] = oi[oc]
            di.append(oi[4] + rc)
        elif dblock:
            di[dc] = tirx.floordiv(cin, dblock)
            di.append(tirx.floormod(cin, dblock))
        wi: list[object] = [0] * 4
        wi[ko], wi[ki], wi[kh_], wi[kw_] = co, rc, ry, rx
        if block and block == oblock:
            wi[ko] = oi[oc]
            wi.append(oi[4])
        elif block:
            wi[ko] = tirx.floordiv(co, block)
            wi.append(tirx.floormod(co, block))
        return te.sum(T.cast(xp(*di), comp) * T.cast(w(*wi), comp), axis=[rc, ry, rx])
    r = te.compute(oshape, body, name="T_conv2d", tag="conv2d")
    return _mm_result(r, "bool" if dt == "bool" else comp, dt)


def _pool_te(kind: str):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te, tirx = T.te_mod(), T.tir_mod()
        x = inputs[0]
        dt = T.dtype_of(x)
        (ln, lc, lh, lw), _ = _data_layout(attrs.layout, "layout")
        xs = T.shape_of(x)
        h, w = xs[lh], xs[lw]
        kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr = _pool_geometry(attrs)
        oshape = T.out_shape(out_type)
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")

        padded = bool(pt or pl or pb or pr)

        def window(oi, ry, rx):  # type: ignore[no-untyped-def]
            y = oi[lh] * sh + ry * dlh - pt
            xx = oi[lw] * sw + rx * dlw - pl
            idx = list(oi)
            idx[lh], idx[lw] = y, xx
            inside = tirx.all(y >= 0, y < h, xx >= 0, xx < w)
            return inside, idx

        def staged(value, fill):  # type: ignore[no-untyped-def]
            """The window read ``(oi, ry, rx) -> value(x[..])``, ``fill`` outside the input.
            With padding the values come from a separate stage ``T_pad`` over the padded
            input (inlined by the generic schedules; the pool schedule computes it once per
            plane, so that the window loads carry no bounds tests)."""
            if not padded:
                def direct(oi, ry, rx):  # type: ignore[no-untyped-def]
                    inside, idx = window(oi, ry, rx)
                    return tirx.if_then_else(inside, value(x(*idx)), fill) \
                        if attrs.ceil_mode else value(x(*idx))
                return direct
            # NOTE: the stage covers every row / column a window reads (ceil_mode windows
            # may pass the bottom / right padding), starting at the top / left padding; its
            # width a multiple of the stride (the schedule may store it by column parity)
            pshape = list(xs)
            pshape[lh] = (oshape[lh] - 1) * sh + (kh - 1) * dlh + 1
            pshape[lw] = ((oshape[lw] - 1) * sw + (kw - 1) * dlw + sw) // sw * sw

            def pad_body(*i):  # type: ignore[no-untyped-def]
                idx = list(i)
                idx[lh], idx[lw] = i[lh] - pt, i[lw] - pl
                inside = tirx.all(idx[lh] >= 0, idx[lh] < h, idx[lw] >= 0, idx[lw] < w)
                return tirx.if_then_else(inside, value(x(*idx)), fill)
            xp = te.compute(pshape, pad_body, name="T_pad", tag="injective,pad")

            def read(oi, ry, rx):  # type: ignore[no-untyped-def]
                idx = list(oi)
                idx[lh], idx[lw] = oi[lh] * sh + ry * dlh, oi[lw] * sw + rx * dlw
                return xp(*idx)
            return read
        if kind == "max" and T.is_float(dt):
            # NOTE: NaN propagates as in numpy: the integer max of T.order_key (a built-in
            # reducer, vectorized), padding at the key of -inf, decoded after
            read = staged(T.order_key, T.order_key(T.const(-np.inf, dt)))

            def kbody(*oi):  # type: ignore[no-untyped-def]
                return te.max(read(oi, ry, rx), axis=[ry, rx])
            k = te.compute(oshape, kbody, name="T_max_pool2d_key", tag="pool_max")
            return te.compute(oshape, lambda *o: T.from_order_key(k(*o), dt),
                              name="T_max_pool2d", tag="elemwise")
        if kind == "max":
            vdt = "int8" if dt == "bool" else dt
            red = te.comm_reducer(lambda a, b: tirx.max(a, b), lambda t: T.min_value(t),
                                  name="max")

            read = staged(lambda v: T.cast(v, vdt), T.min_value(vdt))

            def body(*oi):  # type: ignore[no-untyped-def]
                return red(read(oi, ry, rx), axis=[ry, rx])
            r = te.compute(oshape, body, name="T_max_pool2d", tag="pool_max")
            return T.cast_tensor(r, dt)
        acc = dt if dt in ("float32", "float64") else (
            "float32" if dt == "float16" else "float64")

        sread = staged(lambda v: T.cast(v, acc), T.const(0, acc))

        def sbody(*oi):  # type: ignore[no-untyped-def]
            return te.sum(sread(oi, ry, rx), axis=[ry, rx])
        total = te.compute(oshape, sbody, name="T_avg_pool2d_sum", tag="pool_sum")
        count = _avg_count(attrs, h, w)

        def norm(*oi):  # type: ignore[no-untyped-def]
            n = count(oi[lh], oi[lw])
            v = total(*oi) / T.cast(tirx.max(n, T.const(1, "int32")), acc)
            return T.cast(v, dt)
        return te.compute(oshape, norm, name="T_avg_pool2d", tag="elemwise")
    compute.__doc__ = f"TE compute of ``nn.{kind}_pool2d``."
    return compute


def _global_te(kind: str):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        dt = T.dtype_of(x)
        (_, _, lh, lw), _ = _data_layout(attrs.layout, "layout")
        if kind == "max":
            vdt = "int8" if dt == "bool" else dt
            return T.cast_tensor(T.reduce(x, [lh, lw], True, "max", acc_dtype=vdt), dt)
        acc = dt if dt in ("float32", "float64") else (
            "float32" if dt == "float16" else "float64")
        s = T.reduce(x, [lh, lw], True, "sum", acc_dtype=acc)
        xs = T.shape_of(x)
        n = T.as_expr(xs[lh] * xs[lw], "int64")
        return T.elemwise(lambda v: T.cast(v / T.cast(n, acc), dt), s, name="T_global_avg")
    compute.__doc__ = f"TE compute of ``nn.global_{kind}_pool2d``."
    return compute


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


def _kernel_layout(layout: str) -> tuple[tuple[int, ...], int]:
    """Positions of ``O, I, H, W`` in a conv2d kernel layout, and its output-channel block.

    A layout permutes ``OIHW`` (block 0) or is such a permutation followed by ``<b>o`` (a block
    of ``b`` output channels innermost: ``OIHW16o`` is ``[O/16, I, H, W, 16]``, weight element
    ``w[o // 16, i, h, w, o % 16]``).
    """
    block = 0
    if len(layout) > 5 and layout.endswith("o") and layout[4:-1].isdigit():
        block = int(layout[4:-1])
        if block < 1:
            raise TypeInferenceError(f"unsupported kernel_layout {layout!r} (a block of at "
                                     f"least one output channel is expected)")
        layout = layout[:4]
    return _layout(layout, "OIHW", "kernel_layout"), block


def _data_layout(layout: str, what: str) -> tuple[tuple[int, ...], int]:
    """Positions of ``N, C, H, W`` in a data layout, and its channel block.

    A layout permutes ``NCHW`` (block 0) or is such a permutation followed by ``<b>c``
    (``NCHW16c`` is ``[N, C/16, H, W, 16]``: element ``x[n, c // 16, h, w, c % 16]``; the
    positions are those of the first four dimensions, the block is the fifth).
    """
    m = re.fullmatch(r"([A-Z]{4})(\d+)c", layout or "")
    if m is None:
        return _layout(layout, "NCHW", what), 0
    block = int(m.group(2))
    if block < 1:
        raise TypeInferenceError(f"unsupported {what} {layout!r} (a block of at least one "
                                 f"channel is expected)")
    return _layout(m.group(1), "NCHW", what), block


def _unblock(x: np.ndarray, c: int, block: int) -> np.ndarray:
    """A blocked array (data ``<perm><b>c``, kernel ``<perm><b>o``: the blocked axis ``c``'s
    inner part last) as the 4-d array of the permutation ``<perm>``."""
    if not block:
        return x
    shape = list(x.shape[:4])
    shape[c] *= block
    return np.moveaxis(x, 4, c + 1).reshape(shape)


def _block_data(x: np.ndarray, c: int, block: int) -> np.ndarray:
    """The 4-d array ``x`` (channels at ``c``) blocked by ``block`` channels (``<perm><b>c``)."""
    if not block:
        return x
    shape = list(x.shape)
    shape[c:c + 1] = [shape[c] // block, block]
    return np.ascontiguousarray(np.moveaxis(x.reshape(shape), c + 1, 4))


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
    (dn, dc, dh, dw), dblock = _data_layout(attrs.data_layout, "data_layout")
    data = ranked_arg(arg_types[0], "nn.conv2d", "data", 5 if dblock else 4)
    if data is None:
        return None
    (ko, ki, kh_, kw_), block = _kernel_layout(attrs.kernel_layout)
    out_layout = attrs.out_layout or attrs.data_layout
    (on, oc, oh, ow), oblock = _data_layout(out_layout, "out_layout")
    groups = attrs.groups
    if groups < 1:
        raise TypeInferenceError(f"nn.conv2d: groups must be >= 1, found {groups}")
    c = data.shape[dc]
    if dblock:
        if not dim_compatible(data.shape[4], dblock):
            raise ShapeMismatchError(f"nn.conv2d: data_layout {attrs.data_layout!r} needs a "
                                     f"last data dimension of {dblock}, found "
                                     f"{format_dim(data.shape[4])}")
        c = c * dblock if isinstance(c, int) else ANY
    if isinstance(c, int) and c % groups:
        raise ShapeMismatchError(f"nn.conv2d: {c} input channels are not divisible by "
                                 f"groups={groups}")
    c_per_group = c if groups == 1 else (dim_div_exact(c, groups) or ANY)
    w_t = arg_types[1]
    refined = None
    if _is_unknown(w_t):
        if attrs.channels is None or attrs.kernel_size is None or block:
            return None
        kh, kw = _pair(attrs.kernel_size, "kernel_size", 1)
        o = attrs.channels
        wshape: list[Dim] = [0, 0, 0, 0]
        wshape[ko], wshape[ki], wshape[kh_], wshape[kw_] = o, c_per_group, kh, kw
        refined = [data, TensorType(tuple(wshape), data.dtype)]
    else:
        w = tensor_arg(w_t, "weight")
        assert w is not None
        rank = 5 if block else 4
        if w.ndim != rank:
            raise TypeInferenceError(f"nn.conv2d: weight must have rank {rank} (kernel_layout "
                                     f"{attrs.kernel_layout!r}), found rank {w.ndim}")
        _input_dtypes(data, w, attrs)
        o, i = w.shape[ko], w.shape[ki]
        if block:
            if not dim_compatible(w.shape[4], block):
                raise ShapeMismatchError(f"nn.conv2d: kernel_layout {attrs.kernel_layout!r} "
                                         f"needs a last weight dimension of {block}, found "
                                         f"{format_dim(w.shape[4])}")
            o = o * block if isinstance(o, int) else ANY
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
    if oblock:
        if isinstance(o, int) and o % oblock:
            raise ShapeMismatchError(f"nn.conv2d: out_layout {out_layout!r} needs output "
                                     f"channels divisible by {oblock}, found {o}")
        oshape[oc] = o // oblock if isinstance(o, int) else ANY
        oshape.append(oblock)
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
    dperm, dblock = _data_layout(attrs.data_layout, "data_layout")
    x = np.transpose(_unblock(x, dperm[1], dblock), dperm)
    kperm, block = _kernel_layout(attrs.kernel_layout)
    w = np.transpose(_unblock(w, kperm[0], block), kperm)
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
    perm, oblock = _data_layout(out_layout, "out_layout")
    out = np.ascontiguousarray(np.transpose(out, _inv_perm(perm)))
    return wrap(_block_data(out, perm[1], oblock), dt)


_PADDING_DOC = "1 (all sides), 2 (top/bottom, left/right) or 4 (top, left, bottom, right) values"
_CONV_ATTRS = [F("strides", "ints", (1, 1), "step per spatial dim (h, w)"),
               F("padding", "ints", (0, 0), _PADDING_DOC),
               F("dilation", "ints", (1, 1), "kernel dilation per spatial dim (h, w)"),
               F("groups", "int", 1, "channel groups (input and output channels split evenly)"),
               F("channels", "int?", None, "output channels (with kernel_size: infers weight)"),
               F("kernel_size", "ints?", None, "(kh, kw) (with channels: infers weight)"),
               F("data_layout", "str", "NCHW", "a permutation of NCHW, optionally followed by "
                 "a block of channels (NCHW16c: [N, C/16, H, W, 16])"),
               F("kernel_layout", "str", "OIHW", "a permutation of OIHW, optionally followed by "
                 "a block of output channels (OIHW16o: [O/16, I, H, W, 16])"),
               F("out_layout", "str", "", "the result layout (\"\": data_layout; may be "
                 "blocked, NCHW16c)"),
               F("out_dtype", "str", "", "the result dtype (\"\": the input's)")]


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


defop("nn.conv2d", 2, grad=conv2d_grad, jvp=jvp_multilinear,
      attrs=_CONV_ATTRS,
      attrs_type="Conv2DAttrs", rel=conv2d_rel, impl=conv2d_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d convolution.",
      compute=conv2d_te)


# ----------------------------------------------------------------------------- pooling
def _pool_rel(arg_types: Sequence[Type], attrs: Attrs, name: str) -> Type | None:
    (_, _, dh, dw), block = _data_layout(attrs.layout, "layout")
    data = ranked_arg(arg_types[0], name, "data", 5 if block else 4)
    if data is None:
        return None
    if attrs.out_layout and attrs.out_layout != attrs.layout:
        raise TypeInferenceError(f"{name}: out_layout {attrs.out_layout!r} must equal layout")
    kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr = _pool_geometry(attrs)
    shape = list(data.shape)
    shape[dh] = _out_dim(data.shape[dh], pt + pb, kh, dlh, sh, attrs.ceil_mode)
    shape[dw] = _out_dim(data.shape[dw], pl + pr, kw, dlw, sw, attrs.ceil_mode)
    return TensorType(tuple(shape), data.dtype)


def _pool_setup(x: np.ndarray, attrs: Attrs) -> tuple:
    """Canonical NCHW input, window geometry ``(kh, kw, sh, sw, dh, dw, oh, ow)`` and the pads of
    a pool (the bottom/right pads grow where ``ceil_mode`` needs windows past the padding)."""
    perm, block = _data_layout(attrs.layout, "layout")
    xn = np.transpose(_unblock(x, perm[1], block), perm)
    n, c, h, w = xn.shape
    kh, kw, sh, sw, dh, dw, pt, pl, pb, pr = _pool_geometry(attrs)
    oh = _out_dim(h, pt + pb, kh, dh, sh, attrs.ceil_mode)
    ow = _out_dim(w, pl + pr, kw, dw, sw, attrs.ceil_mode)
    assert isinstance(oh, int) and isinstance(ow, int)
    eh = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt + pb))
    ew = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl + pr))
    pads = ((0, 0), (0, 0), (pt, pb + eh), (pl, pr + ew))
    return perm, xn, (kh, kw, sh, sw, dh, dw, oh, ow), pads


def _avg_count_ref(h: int, w: int, attrs: Attrs, win: tuple, pads: tuple,
                   dtype: Any) -> np.ndarray:
    """Per pooling window: how many taps ``nn.avg_pool2d`` divides by (the real input, plus the
    explicit padding with ``count_include_pad``; the extra ``ceil_mode`` padding never counts)."""
    (pt, pbe), (pl, pre) = pads[2], pads[3]
    pb, pr = _padding(attrs.padding)[2:]
    mask = np.zeros((1, 1, h + pt + pbe, w + pl + pre), dtype)
    if attrs.count_include_pad:
        mask[:, :, :h + pt + pb, :w + pl + pr] = 1
    else:
        mask[:, :, pt:pt + h, pl:pl + w] = 1
    return np.sum(_windows(mask, *win), axis=(4, 5))


def _pool_ref(args: list, attrs: Attrs, kind: str) -> np.ndarray:
    x = args[0]
    perm, xn, win, pads = _pool_setup(x, attrs)
    if kind == "max":
        fill = -np.inf if xn.dtype.kind == "f" else (
            np.iinfo(xn.dtype).min if xn.dtype.kind in "iu" else False)
        xp = np.pad(xn, pads, constant_values=fill)
        out = np.max(_windows(xp, *win), axis=(4, 5))
    else:
        xa = _acc(xn).astype(np.float64) if xn.dtype.kind in "iub" else _acc(xn)
        total = np.sum(_windows(np.pad(xa, pads), *win), axis=(4, 5))
        count = _avg_count_ref(xn.shape[2], xn.shape[3], attrs, win, pads, xa.dtype)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = total / np.maximum(count, 1)
        if xn.dtype.kind in "iu":
            out = np.trunc(out)
    out = np.ascontiguousarray(np.transpose(out, _inv_perm(perm)))
    return wrap(_block_data(out, perm[1], _data_layout(attrs.layout, "layout")[1]), x.dtype)


_POOL_ATTRS = [F("pool_size", "ints", (1, 1), "window size (h, w)"),
               F("strides", "ints", (1, 1), "window step (h, w)"),
               F("dilation", "ints", (1, 1), "window dilation (h, w)"),
               F("padding", "ints", (0, 0), _PADDING_DOC),
               F("layout", "str", "NCHW", "a permutation of NCHW, optionally blocked (NCHW16c)"),
               F("out_layout", "str", "", "must be layout (\"\": layout)"),
               F("ceil_mode", "bool", False, "round the output size up")]


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


def max_pool2d_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """``max_pool2d(x)``: the tangent at each window's maximum of ``x``."""
    return op("nn.max_pool2d_gather", call.args[0], t[0], **dict(call.attrs))


defop("nn.max_pool2d", 1, grad=max_pool2d_grad, jvp=max_pool2d_jvp,
      attrs=_POOL_ATTRS, attrs_type="MaxPool2DAttrs", rel=max_pool2d_rel,
      impl=lambda args, attrs: _pool_ref(args, attrs, "max"),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d max pooling.",
      compute=_pool_te("max"))
defop("nn.avg_pool2d", 1, grad=avg_pool2d_grad, jvp=jvp_linear,
      attrs=_POOL_ATTRS + [F("count_include_pad", "bool", False,
                             "padding counts in the divisor")],
      attrs_type="AvgPool2DAttrs", rel=avg_pool2d_rel,
      impl=lambda args, attrs: _pool_ref(args, attrs, "avg"),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d average pooling.",
      compute=_pool_te("avg"))


def global_pool_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.global_*_pool2d``: spatial dims become 1."""
    (_, _, dh, dw), block = _data_layout(attrs.layout, "layout")
    data = ranked_arg(arg_types[0], "global pooling", "data", 5 if block else 4)
    if data is None:
        return None
    shape = list(data.shape)
    shape[dh] = shape[dw] = 1
    return TensorType(tuple(shape), data.dtype)


def _global_ref(kind: str):  # type: ignore[no-untyped-def]
    def impl(args: list, attrs: Attrs) -> np.ndarray:
        x = args[0]
        (_, _, dh, dw), _ = _data_layout(attrs.layout, "layout")
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


_GLOBAL_ATTRS = [F("layout", "str", "NCHW", "a permutation of NCHW, optionally blocked "
                   "(NCHW16c)"),
                 F("out_layout", "str", "", "accepted for TVM; the result keeps layout")]
defop("nn.global_avg_pool2d", 1, grad=global_avg_pool2d_grad, jvp=jvp_linear,
      attrs=_GLOBAL_ATTRS, attrs_type="GlobalPool2DAttrs",
      rel=global_pool_rel, impl=_global_ref("avg"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Average over the spatial dims.",
      compute=_global_te("avg"))
defop("nn.global_max_pool2d", 1, grad=global_max_pool2d_grad, jvp=jvp_collapse,
      attrs=_GLOBAL_ATTRS, attrs_type="GlobalPool2DAttrs",
      rel=global_pool_rel, impl=_global_ref("max"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Maximum over the spatial dims.",
      compute=_global_te("max"))


# ----------------------------------------------------------------------------- gradient operators
# The adjoints of conv2d and of the pools, as operators of their own (each linear in its first
# argument, with its own rule, so that gradients of gradients close over this set).
# (``_inv_perm`` is shared with the TE computes above.)


def _conv_geometry(attrs: Attrs) -> tuple[int, int, int, int, int, int, int, int]:
    """(sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right) of a conv2d call."""
    sh, sw = _pair(attrs.strides, "strides", 1)
    dh, dw = _pair(attrs.dilation, "dilation", 1)
    return (sh, sw, dh, dw) + _padding(attrs.padding)


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


def _conv_adjoint_grad(wrt_data: bool, doc: str):  # type: ignore[no-untyped-def]
    """The gradient rule of ``bd(g, a, like)`` (``wrt_data``: ``a`` is the weight) or of
    ``bw(g, a, like)`` (``a`` is the data): ``dg = conv2d`` of ``h`` with ``a``, ``da`` the other
    adjoint ``(g, h, a)``, zero for ``like``."""
    other = "nn.conv2d_backward_weight" if wrt_data else "nn.conv2d_backward_data"

    def rule(call, out, h):  # type: ignore[no-untyped-def]
        g, a, like = call.args
        at = dict(call.attrs)
        fwd = op("nn.conv2d", h, a, **at) if wrt_data else op("nn.conv2d", a, h, **at)
        return (fwd, op(other, g, h, a, **at), zeros_for(like))
    rule.__name__ = f"conv2d_backward_{'data' if wrt_data else 'weight'}_grad"
    rule.__doc__ = doc
    return grad_rule(rule)


conv2d_backward_data_grad = _conv_adjoint_grad(
    True, "``bd(g, w, like)``: ``dg = conv2d(h, w)``, ``dw = bw(g, h)``, zero for ``like``.")
conv2d_backward_weight_grad = _conv_adjoint_grad(
    False, "``bw(g, x, like)``: ``dg = conv2d(x, h)``, ``dx = bd(g, h)``, zero for ``like``.")


# ------------------------------------------------------------ TE computes: gradient operators
# The gradient operators as kernels: each output element gathers the contributions the numpy
# references scatter (no atomics), in the layouts of the forward op.
def _at(perm: Sequence[int], canon: Sequence[object]) -> list[object]:
    """An index in layout order from canonical (N, C, H, W) coordinates."""
    idx: list[object] = [0] * 4
    for k, p in enumerate(perm):
        idx[p] = canon[k]
    return idx


def _canon(perm: Sequence[int], idx: Sequence[object]) -> list[object]:
    """Canonical (N, C, H, W) coordinates of a layout-order index."""
    return [idx[p] for p in perm]


def _grad_acc(dt: str) -> str:
    return "float64" if dt == "float64" else ("float32" if T.is_float(dt) else "int64")


def _tap(y: object, k: int, s: int, dl: int, lo: int, n: object) -> tuple:
    """(valid, window) for input row ``y`` reached by tap ``k`` of a window: ``y = w*s+k*dl-lo``."""
    tirx = T.tir_mod()
    num = y + lo - k * dl
    q = tirx.floordiv(num, s)
    ok = tirx.all(num >= 0, tirx.floormod(num, s) == 0, q < n)
    return ok, tirx.max(tirx.min(q, n - 1), 0)


def _per_group(channels: object, groups: int) -> object:
    """``channels // groups`` (a TE expression when ``channels`` is symbolic)."""
    return channels // groups if isinstance(channels, int) else \
        T.tir_mod().floordiv(channels, groups)


@dataclass(frozen=True, slots=True)
class _ConvGradSetup:
    """What the two conv2d gradient kernels share: the accumulator dtype, the data / kernel /
    output layout permutations, the window ``(kh, kw, sh, sw, dlh, dlw, pt, pl)``, the canonical
    kernel channels ``o`` and ``cg`` (per group), ``og = o // groups`` and the output ``oh, ow``."""

    acc: str
    dp: tuple[int, ...]
    kp: tuple[int, ...]
    op_: tuple[int, ...]
    win: tuple
    o: object
    cg: object
    og: object
    oh: object
    ow: object


def _conv_grad_setup(attrs: Attrs, g: object, kernel: object, dt: str) -> _ConvGradSetup:
    """The set-up of a conv2d gradient kernel from ``g`` (output-shaped) and a kernel-shaped
    input, for an output of dtype ``dt``."""
    dp = _layout(attrs.data_layout, "NCHW", "data_layout")
    kp = _layout(attrs.kernel_layout, "OIHW", "kernel_layout")
    op_ = _layout(attrs.out_layout or attrs.data_layout, "NCHW", "out_layout")
    sh, sw, dlh, dlw, pt, pl, _, _ = _conv_geometry(attrs)
    o, cg, kh, kw = _canon(kp, T.shape_of(kernel))
    oh, ow = _canon(op_, T.shape_of(g))[2:]
    return _ConvGradSetup(_grad_acc(dt), dp, kp, op_, (kh, kw, sh, sw, dlh, dlw, pt, pl),
                          o, cg, _per_group(o, attrs.groups), oh, ow)


def _gather_windows(shape: Sequence[object], perm: Sequence[int], win: tuple,
                    out_hw: Sequence[object], acc: str, dt: str, term: Any, name: str, tag: str,
                    lead: Sequence[tuple[str, object]] = ()) -> object:
    """A gradient kernel of ``shape`` (layout ``perm``): each element, at canonical
    ``(n, c, y, x)``, sums ``term(n, c, wy, wx, *axes)`` in ``acc`` over the taps ``(ry, rx)`` of
    the ``win = (kh, kw, sh, sw, dlh, dlw, pt, pl)`` windows ``(wy, wx)`` of the ``out_hw`` output
    that reach it; ``term`` returns ``(condition or None, value)``, and ``lead`` names reduce
    axes ``(name, extent)`` summed before the taps. The result is cast to ``dt``."""
    te, tirx = T.te_mod(), T.tir_mod()
    kh, kw, sh, sw, dlh, dlw, pt, pl = win
    oh, ow = out_hw
    axes = [te.reduce_axis((0, ext), name=nm) for nm, ext in lead]
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    axes += [ry, rx]

    def body(*i):  # type: ignore[no-untyped-def]
        n, c, y, x = _canon(perm, i)
        oky, wy = _tap(y, ry, sh, dlh, pt, oh)
        okx, wx = _tap(x, rx, sw, dlw, pl, ow)
        cond, v = term(n, c, wy, wx, *axes)
        ok = tirx.all(oky, okx) if cond is None else tirx.all(oky, okx, cond)
        return te.sum(tirx.if_then_else(ok, v, T.const(0, acc)), axis=axes)
    return T.cast_tensor(te.compute(list(shape), body, name=name, tag=tag), dt)


def conv2d_backward_data_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.conv2d_backward_data``: each input pixel sums its output taps."""
    tirx = T.tir_mod()
    g, w, like = inputs
    s = _conv_grad_setup(attrs, g, w, out_type.dtype)

    def term(n, c, wy, wx, rq, ry, rx):  # type: ignore[no-untyped-def]
        co = tirx.floordiv(c, s.cg) * s.og + rq
        return None, T.cast(g(*_at(s.op_, [n, co, wy, wx])), s.acc) * \
            T.cast(w(*_at(s.kp, [co, tirx.floormod(c, s.cg), ry, rx])), s.acc)
    return _gather_windows(T.shape_of(like), s.dp, s.win, (s.oh, s.ow), s.acc, out_type.dtype,
                           term, "T_conv2d_backward_data", "conv2d_grad", lead=[("rq", s.og)])


def conv2d_backward_weight_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.conv2d_backward_weight``: ``sum_{n,y,x} g * shifted data``."""
    te, tirx = T.te_mod(), T.tir_mod()
    g, x, like = inputs
    s = _conv_grad_setup(attrs, g, like, out_type.dtype)
    _, _, sh, sw, dlh, dlw, pt, pl = s.win
    nb, _, h, wd = _canon(s.dp, T.shape_of(x))
    rn = te.reduce_axis((0, nb), name="rn")
    ry = te.reduce_axis((0, s.oh), name="ry")
    rx = te.reduce_axis((0, s.ow), name="rx")

    def body(*i):  # type: ignore[no-untyped-def]
        co, ci, ky, kx = _canon(s.kp, i)
        y = ry * sh + ky * dlh - pt
        xx = rx * sw + kx * dlw - pl
        inside = tirx.all(y >= 0, y < h, xx >= 0, xx < wd)
        cin = tirx.floordiv(co, s.og) * s.cg + ci
        yc = tirx.max(tirx.min(y, h - 1), 0)
        xc = tirx.max(tirx.min(xx, wd - 1), 0)
        v = T.cast(g(*_at(s.op_, [rn, co, ry, rx])), s.acc) * \
            T.cast(x(*_at(s.dp, [rn, cin, yc, xc])), s.acc)
        return te.sum(tirx.if_then_else(inside, v, T.const(0, s.acc)), axis=[rn, ry, rx])
    r = te.compute(T.shape_of(like), body, name="T_conv2d_backward_weight", tag="conv2d_grad")
    return T.cast_tensor(r, out_type.dtype)


def _pool_geometry(attrs: Attrs) -> tuple[int, ...]:
    """``(kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr)`` of a pooling operator's attributes."""
    kh, kw = _pair(attrs.pool_size, "pool_size", 1)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dlh, dlw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    return kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr


def _avg_count(attrs: Attrs, h: object, w: object):  # type: ignore[no-untyped-def]
    """``(oy, ox) -> int32``: how many taps of the window at ``(oy, ox)`` ``nn.avg_pool2d``
    divides by (padding counts only with ``count_include_pad``)."""
    tirx = T.tir_mod()
    kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr = _pool_geometry(attrs)
    if attrs.count_include_pad:
        bh, bw = (0, h + pt + pb), (0, w + pl + pr)  # type: ignore[operator]
    else:
        bh, bw = (pt, pt + h), (pl, pl + w)  # type: ignore[operator]

    def taps(o, k, s, dl, lo, hi):  # type: ignore[no-untyped-def]
        c = T.const(0, "int32")
        for j in range(k):
            p = o * s + j * dl
            c = c + T.cast(tirx.all(p >= lo, p < hi), "int32")
        return c
    return lambda oy, ox: taps(oy, kh, sh, dlh, *bh) * taps(ox, kw, sw, dlw, *bw)


def _first_max_tap(x: object, attrs: Attrs, pooled: Sequence[object]) -> object:
    """Per pooling window: the tap ``ky * kw + kx`` of its first maximum (padding is -inf)."""
    te, tirx = T.te_mod(), T.tir_mod()
    lp = _layout(attrs.layout, "NCHW", "layout")
    kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr = _pool_geometry(attrs)
    vdt = "float64"
    h, w = _canon(lp, T.shape_of(x))[2:]

    def combine(lhs, rhs):  # type: ignore[no-untyped-def]
        (li, lv), (ri, rv) = lhs, rhs
        take_r = tirx.Or(rv > lv, tirx.And(tirx.EQ(rv, lv), ri < li))
        return (T.select(take_r, ri, li), T.select(take_r, rv, lv))

    def ident(t0, t1):  # type: ignore[no-untyped-def]
        return (T.const(kh * kw, t0), T.min_value(t1))
    red = te.comm_reducer(combine, ident, name="first_max")
    r = te.reduce_axis((0, kh * kw), name="rk")

    def body(*oi):  # type: ignore[no-untyped-def]
        n, c, oy, ox = _canon(lp, oi)
        y = oy * sh + tirx.floordiv(r, kw) * dlh - pt
        xx = ox * sw + tirx.floormod(r, kw) * dlw - pl
        inside = tirx.all(y >= 0, y < h, xx >= 0, xx < w)
        yc, xc = tirx.max(tirx.min(y, h - 1), 0), tirx.max(tirx.min(xx, w - 1), 0)
        v = tirx.if_then_else(inside, T.cast(x(*_at(lp, [n, c, yc, xc])), vdt),
                              T.min_value(vdt))
        return red((T.cast(r, "int32"), v), axis=[r])
    return te.compute(list(pooled), body, name="T_pool_argmax")[0]


def max_pool2d_grad_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.max_pool2d_grad``: each pixel sums ``g`` of windows whose max it is."""
    g, x = inputs
    acc = _grad_acc(out_type.dtype)
    lp = _layout(attrs.layout, "NCHW", "layout")
    win = _pool_geometry(attrs)[:8]
    kw = win[1]
    arg = _first_max_tap(x, attrs, T.shape_of(g))

    def term(n, c, wy, wx, ry, rx):  # type: ignore[no-untyped-def]
        at = _at(lp, [n, c, wy, wx])
        return arg(*at) == T.cast(ry * kw + rx, "int32"), T.cast(g(*at), acc)
    return _gather_windows(T.shape_of(x), lp, win, _canon(lp, T.shape_of(g))[2:], acc,
                           out_type.dtype, term, "T_max_pool2d_grad", "pool_grad")


def max_pool2d_gather_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.max_pool2d_gather``: ``v`` at each window's first maximum of ``x``."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, v = inputs
    dt = out_type.dtype
    lp = _layout(attrs.layout, "NCHW", "layout")
    kh, kw, sh, sw, dlh, dlw, pt, pl, pb, pr = _pool_geometry(attrs)
    h, w = _canon(lp, T.shape_of(x))[2:]
    pooled = T.out_shape(out_type)
    arg = _first_max_tap(x, attrs, pooled)

    def body(*oi):  # type: ignore[no-untyped-def]
        n, c, oy, ox = _canon(lp, oi)
        k = arg(*oi)
        y = oy * sh + tirx.floordiv(k, kw) * dlh - pt
        xx = ox * sw + tirx.floormod(k, kw) * dlw - pl
        inside = tirx.all(k < kh * kw, y >= 0, y < h, xx >= 0, xx < w)
        yc, xc = tirx.max(tirx.min(y, h - 1), 0), tirx.max(tirx.min(xx, w - 1), 0)
        return tirx.if_then_else(inside, v(*_at(lp, [n, c, yc, xc])), T.const(0, dt))
    return te.compute(pooled, body, name="T_max_pool2d_gather", tag="injective")


def avg_pool2d_grad_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.avg_pool2d_grad``: each pixel sums ``g / count`` of its windows."""
    tirx = T.tir_mod()
    g, x = inputs
    dt = out_type.dtype
    acc = "float64" if dt == "float64" else "float32"
    lp = _layout(attrs.layout, "NCHW", "layout")
    h, w = _canon(lp, T.shape_of(x))[2:]
    count = _avg_count(attrs, h, w)

    def term(n, c, wy, wx, ry, rx):  # type: ignore[no-untyped-def]
        return None, T.cast(g(*_at(lp, [n, c, wy, wx])), acc) / \
            T.cast(tirx.max(count(wy, wx), T.const(1, "int32")), acc)
    return _gather_windows(T.shape_of(x), lp, _pool_geometry(attrs)[:8],
                           _canon(lp, T.shape_of(g))[2:], acc, dt, term, "T_avg_pool2d_grad",
                           "pool_grad")


defop("nn.conv2d_backward_data", 3, attrs=_CONV_ATTRS, attrs_type="Conv2DAttrs",
      rel=grad_like_rel("nn.conv2d_backward_data", 2, (4, 4, 4),
                          lambda ts, at: conv2d_rel([ts[2], ts[1]], at)),
      impl=conv2d_backward_data_ref, grad=conv2d_backward_data_grad, jvp=jvp_multilinear_in(0, 1),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Gradient of conv2d in its data: (out_grad, weight, data_like) -> data's type.",
      compute=conv2d_backward_data_te)
defop("nn.conv2d_backward_weight", 3, attrs=_CONV_ATTRS, attrs_type="Conv2DAttrs",
      rel=grad_like_rel("nn.conv2d_backward_weight", 2, (4, 4, 4),
                          lambda ts, at: conv2d_rel([ts[1], ts[2]], at)),
      impl=conv2d_backward_weight_ref, grad=conv2d_backward_weight_grad,
      jvp=jvp_multilinear_in(0, 1),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Gradient of conv2d in its weight: (out_grad, data, weight_like) -> weight's type.",
      compute=conv2d_backward_weight_te)


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
    count = _avg_count_ref(h, w, attrs, (kh, kw, sh, sw, dh, dw, oh, ow), pads, np.float64)
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
      rel=grad_like_rel("nn.max_pool2d_grad", 1, (4, 4),
                          lambda ts, at: _pool_rel(ts[1:], at, "nn.max_pool2d_grad")),
      impl=max_pool2d_grad_ref,
      grad=max_pool2d_grad_grad, jvp=jvp_linear_in(0), pattern=OpPattern.OPAQUE,
      doc="Gradient of max_pool2d: (out_grad, data) -> out_grad routed to each window's max.",
      compute=max_pool2d_grad_te)
defop("nn.max_pool2d_gather", 2, attrs=_POOL_ATTRS, attrs_type="MaxPool2DAttrs",
      rel=_max_pool_gather_rel, impl=max_pool2d_gather_ref, grad=max_pool2d_gather_grad,
      jvp=jvp_linear_in(1),
      pattern=OpPattern.OPAQUE,
      doc="(data, values) -> values at each max_pool2d window's maximum of data (pooled).",
      compute=max_pool2d_gather_te)
defop("nn.avg_pool2d_grad", 2, attrs=_POOL_ATTRS + [F("count_include_pad", "bool", False,
                                                       "padding counts in the divisor")],
      attrs_type="AvgPool2DAttrs",
      rel=grad_like_rel("nn.avg_pool2d_grad", 1, (4, 4),
                         lambda ts, at: _pool_rel(ts[1:], at, "nn.avg_pool2d_grad")),
      impl=avg_pool2d_grad_ref, grad=avg_pool2d_grad_grad,
      jvp=jvp_linear_in(0), pattern=OpPattern.OPAQUE,
      doc="Gradient of avg_pool2d: (out_grad, data) -> out_grad spread over each window.",
      compute=avg_pool2d_grad_te)
