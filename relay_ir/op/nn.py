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
from relay_ir.op import OpPattern
from relay_ir.op import _te as T
from relay_ir.op._rules import (F, broadcast_shapes, check_dtype, defop, def_elemwise,
                                dim_compatible, fmt_shape, is_any, norm_axis,
                                same_dtype, shape_size, tensor_arg, tensor_args, wrap)
from relay_ir.ty import (ANY, Dim, IncompleteType, TensorType, TupleType, Type, dim_add,
                         dim_div_exact, format_dim)


def _out_dtype(attrs: Attrs, dtype: str) -> str:
    return check_dtype(attrs.out_dtype, "out_dtype") if attrs.out_dtype else dtype


def _is_unknown(t: Type) -> bool:
    return isinstance(t, IncompleteType)


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype("float32") if x.dtype == np.float16 else x


# ----------------------------------------------------------------------------- TE computes
def _mm_dtypes(in_dt: str, out_dt: str) -> tuple[str, str]:
    """(operand cast dtype, accumulator dtype) as the references compute."""
    if in_dt == "bool":
        return "int32", "int32"  # a count of true products; nonzero is the bool result
    if T.is_int(in_dt):
        return out_dt, out_dt
    acc = "float32" if in_dt == "float16" else in_dt
    return acc, acc


def _mm_result(r: object, in_dt: str, out_dt: str) -> object:
    """The accumulator cast to the result dtype (bool inputs: or-of-ands, then converted)."""
    if in_dt == "bool":
        return T.elemwise(lambda v: T.cast(T.cast(v, "bool"), out_dt), r, name="T_mm_bool")
    return T.cast_tensor(r, out_dt)


def _matmul_te(x: object, w: object, ta: bool, tb: bool, out_dt: str, name: str) -> object:
    """``op(x) @ op(w)`` for x of rank >= 1 (rank 2 with ``ta``) and a 2-d ``w``."""
    te = T.te_mod()
    xs, ws = T.shape_of(x), T.shape_of(w)
    cdt, acc = _mm_dtypes(T.dtype_of(x), out_dt)
    if ta:
        lead, kdim = [xs[1]], xs[0]
    else:
        lead, kdim = xs[:-1], xs[-1]
    n = ws[0] if tb else ws[1]
    k = te.reduce_axis((0, kdim), name="k")
    nl = len(lead)

    def body(*o):  # type: ignore[no-untyped-def]
        xi = [k, o[0]] if ta else list(o[:nl]) + [k]
        wi = [o[nl], k] if tb else [k, o[nl]]
        return te.sum(T.cast(T.cast(x(*xi), cdt), acc) * T.cast(T.cast(w(*wi), cdt), acc),
                      axis=k)
    r = te.compute(lead + [n], body, name=name, tag="matmul")
    return _mm_result(r, T.dtype_of(x), out_dt)


def dense_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.dense`` (``x @ w.T``; float16 accumulates in float32)."""
    return _matmul_te(inputs[0], inputs[1], False, True, out_type.dtype, "T_dense")


def matmul_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.matmul``."""
    return _matmul_te(inputs[0], inputs[1], attrs.transpose_a, attrs.transpose_b,
                      out_type.dtype, "T_matmul")


def batch_matmul_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.batch_matmul`` (batch broadcasting)."""
    te = T.te_mod()
    x, y = inputs
    xs, ys = T.shape_of(x), T.shape_of(y)
    out_dt = out_type.dtype
    cdt, acc = _mm_dtypes(T.dtype_of(x), out_dt)
    ta, tb = attrs.transpose_a, attrs.transpose_b
    m, kd = (xs[2], xs[1]) if ta else (xs[1], xs[2])
    n = ys[1] if tb else ys[2]
    b = T.broadcast_shape([xs[:1], ys[:1]])[0]
    k = te.reduce_axis((0, kd), name="k")

    def body(bi, i, j):  # type: ignore[no-untyped-def]
        xb = 0 if T.is_one(xs[0]) else bi
        yb = 0 if T.is_one(ys[0]) else bi
        xv = x(xb, k, i) if ta else x(xb, i, k)
        yv = y(yb, j, k) if tb else y(yb, k, j)
        return te.sum(T.cast(T.cast(xv, cdt), acc) * T.cast(T.cast(yv, cdt), acc), axis=k)
    r = te.compute([b, m, n], body, name="T_batch_matmul", tag="batch_matmul")
    return _mm_result(r, T.dtype_of(x), out_dt)


def _channel_bcast(fn, name: str):  # type: ignore[no-untyped-def]
    """Compute of ``fn(x, p1, ...)`` with 1-d parameters along ``attrs.axis``."""
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te = T.te_mod()
        x, *ps = inputs
        nd = len(x.shape)
        axis = norm_axis(attrs.axis, nd)
        dt = T.dtype_of(x)
        return te.compute(x.shape, lambda *i: fn(x(*i), *[p(i[axis]) for p in ps], dt),
                          name=f"T_{name}", tag="broadcast")
    compute.__doc__ = f"TE compute of ``nn.{name}``."
    return compute


def _bias_add_e(v, b, dt):  # type: ignore[no-untyped-def]
    return T.tir_mod().Or(v, b) if dt == "bool" else v + b


def _prelu_e(v, a, dt):  # type: ignore[no-untyped-def]
    if dt == "bool":
        return v
    return T.select(v > T.const(0, dt), v, a * v)


def relu_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.relu``."""
    x = inputs[0]
    dt = T.dtype_of(x)
    if dt == "bool" or dt.startswith("uint"):
        return T.elemwise(lambda v: v, x, name="T_relu")
    return T.elemwise(lambda v: T.tir_mod().max(v, T.const(0, dt)), x, name="T_relu")


def leaky_relu_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.leaky_relu`` (alpha converted to the dtype first, like numpy)."""
    x = inputs[0]
    dt = T.dtype_of(x)
    if dt == "bool":
        alpha = T.const(attrs.alpha, "bool")
        return T.elemwise(lambda v: T.select(v, v, T.tir_mod().And(v, alpha)), x,
                          name="T_leaky_relu")
    alpha = T.const(attrs.alpha, dt)
    return T.elemwise(lambda v: T.select(v > T.const(0, dt), v, v * alpha), x,
                      name="T_leaky_relu")


def _softmax_te(log: bool):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te, tirx = T.te_mod(), T.tir_mod()
        x = inputs[0]
        dt = T.dtype_of(x)
        shp = T.shape_of(x)
        axis = norm_axis(attrs.axis, len(shp))
        acc = "float32" if dt == "float16" else dt
        if not T.is_float(acc):
            acc = "float64"
        fast = not log and T.use_fast("nn.softmax", acc)
        mx = T.reduce(x, [axis], True, "max", acc_dtype=acc, name="T_softmax_max")

        def shifted(*i):  # type: ignore[no-untyped-def]
            return T.cast(x(*i), acc) - T.bcast_index(mx, i)
        if fast:
            sh = te.compute(shp, shifted, name="T_softmax_shift")
            e = T.fast_exp_tensor(sh)
        else:
            e = te.compute(shp, lambda *i: tirx.exp(shifted(*i)), name="T_softmax_exp")
        s = T.reduce(e, [axis], True, "sum", name="T_softmax_sum")
        if log:
            return te.compute(shp, lambda *i: T.cast(shifted(*i) - tirx.log(T.bcast_index(s, i)),
                                                     dt), name="T_log_softmax")
        return te.compute(shp, lambda *i: T.cast(e(*i) / T.bcast_index(s, i), dt),
                          name="T_softmax_norm")
    compute.__doc__ = "TE compute of ``nn.%s``." % ("log_softmax" if log else "softmax")
    return compute


# ----------------------------------------------------------------------------- TE computes (2)
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
    dn, dc, dh, dw = _layout(attrs.data_layout, "NCHW", "data_layout")
    ko, ki, kh_, kw_ = _layout(attrs.kernel_layout, "OIHW", "kernel_layout")
    on, oc, oh_, ow_ = _layout(attrs.out_layout or attrs.data_layout, "NCHW", "out_layout")
    xs, ws = T.shape_of(x), T.shape_of(w)
    sh, sw = _pair(attrs.strides, "strides", 1)
    dlh, dlw = _pair(attrs.dilation, "dilation", 1)
    pt, pl, pb, pr = _padding(attrs.padding)
    h, wd = xs[dh], xs[dw]
    o, cg, kh, kw = ws[ko], ws[ki], ws[kh_], ws[kw_]
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
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def body(*oi):  # type: ignore[no-untyped-def]
        n, co, y, xx = oi[on], oi[oc], oi[oh_], oi[ow_]
        cin = rc if g == 1 else tirx.floordiv(co, og) * cg + rc
        di: list[object] = [0] * 4
        di[dn], di[dc], di[dh], di[dw] = n, cin, y * sh + ry * dlh, xx * sw + rx * dlw
        wi: list[object] = [0] * 4
        wi[ko], wi[ki], wi[kh_], wi[kw_] = co, rc, ry, rx
        return te.sum(T.cast(xp(*di), comp) * T.cast(w(*wi), comp), axis=[rc, ry, rx])
    r = te.compute(oshape, body, name="T_conv2d", tag="conv2d")
    return _mm_result(r, "bool" if dt == "bool" else comp, dt)


def _pool_te(kind: str):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        te, tirx = T.te_mod(), T.tir_mod()
        x = inputs[0]
        dt = T.dtype_of(x)
        ln, lc, lh, lw = _layout(attrs.layout, "NCHW", "layout")
        xs = T.shape_of(x)
        h, w = xs[lh], xs[lw]
        kh, kw = _pair(attrs.pool_size, "pool_size", 1)
        sh, sw = _pair(attrs.strides, "strides", 1)
        dlh, dlw = _pair(attrs.dilation, "dilation", 1)
        pt, pl, pb, pr = _padding(attrs.padding)
        oshape = list(out_type.shape)
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")

        def window(oi, ry, rx):  # type: ignore[no-untyped-def]
            y = oi[lh] * sh + ry * dlh - pt
            xx = oi[lw] * sw + rx * dlw - pl
            idx = list(oi)
            idx[lh], idx[lw] = y, xx
            inside = tirx.all(y >= 0, y < h, xx >= 0, xx < w)
            return inside, idx
        if kind == "max":
            vdt = "int8" if dt == "bool" else dt
            red = te.comm_reducer(lambda a, b: tirx.max(a, b), lambda t: T.min_value(t),
                                  name="max")

            def body(*oi):  # type: ignore[no-untyped-def]
                inside, idx = window(oi, ry, rx)
                return red(tirx.if_then_else(inside, T.cast(x(*idx), vdt), T.min_value(vdt)),
                           axis=[ry, rx])
            r = te.compute(oshape, body, name="T_max_pool2d", tag="pool_max")
            return T.cast_tensor(r, dt)
        acc = dt if dt in ("float32", "float64") else (
            "float32" if dt == "float16" else "float64")

        def sbody(*oi):  # type: ignore[no-untyped-def]
            inside, idx = window(oi, ry, rx)
            return te.sum(tirx.if_then_else(inside, T.cast(x(*idx), acc), T.const(0, acc)),
                          axis=[ry, rx])
        total = te.compute(oshape, sbody, name="T_avg_pool2d_sum", tag="pool_sum")
        if attrs.count_include_pad:
            lo_h, hi_h, lo_w, hi_w = 0, h + pt + pb, 0, w + pl + pr
        else:
            lo_h, hi_h, lo_w, hi_w = pt, pt + h, pl, pl + w

        def count(o, k, s, dl, lo, hi):  # type: ignore[no-untyped-def]
            c = T.const(0, "int32")
            for j in range(k):
                p = o * s + j * dl
                c = c + T.cast(tirx.all(p >= lo, p < hi), "int32")
            return c

        def norm(*oi):  # type: ignore[no-untyped-def]
            n = count(oi[lh], kh, sh, dlh, lo_h, hi_h) * count(oi[lw], kw, sw, dlw, lo_w, hi_w)
            v = total(*oi) / T.cast(tirx.max(n, T.const(1, "int32")), acc)
            return T.cast(v, dt)
        return te.compute(oshape, norm, name="T_avg_pool2d", tag="elemwise")
    compute.__doc__ = f"TE compute of ``nn.{kind}_pool2d``."
    return compute


def _global_te(kind: str):  # type: ignore[no-untyped-def]
    def compute(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
        x = inputs[0]
        dt = T.dtype_of(x)
        _, _, lh, lw = _layout(attrs.layout, "NCHW", "layout")
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


def batch_flatten_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.batch_flatten``."""
    from relay_ir.op.transform import _reshape_to
    x = inputs[0]
    xs = T.shape_of(x)
    return _reshape_to(x, [xs[0], T.shape_size(xs[1:])], "T_batch_flatten")


def pad_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.pad`` (constant, edge, reflect like ``np.pad``)."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, v = inputs
    dt = T.dtype_of(x)
    xs = T.shape_of(x)
    pw = [tuple(p) for p in attrs.pad_width]
    out = [d + a + b for d, (a, b) in zip(xs, pw)]
    mode = attrs.pad_mode

    def src(i, n, before):  # type: ignore[no-untyped-def]
        j = i - before
        if mode == "edge":
            return tirx.max(tirx.min(j, n - 1), 0)
        if isinstance(n, int) and n == 1:
            return j * 0
        p = 2 * (n - 1)
        m = tirx.floormod(j, p)
        return T.select(m < n, m, p - m)

    def body(*o):  # type: ignore[no-untyped-def]
        if mode == "constant":
            idx = [i - a for i, (a, _) in zip(o, pw)]
            conds = [c for i, d, (a, _) in zip(o, xs, pw) if a or _
                     for c in (i >= a, i < d + a)]
            if not conds:
                return x(*idx)
            return tirx.if_then_else(tirx.all(*conds), x(*idx), T.cast(v(), dt))
        return x(*[src(i, d, a) for i, d, (a, _) in zip(o, xs, pw)])
    return te.compute(out, body, name="T_pad", tag="injective,pad")


def _norm_acc(dt: str) -> str:
    return "float32" if dt == "float16" else (dt if T.is_float(dt) else "float64")


def layer_norm_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.layer_norm`` (two reductions, then one normalizing stage)."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, gm, bt = inputs
    dt = T.dtype_of(x)
    acc = _norm_acc(dt)
    xs = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(xs))
    n = T.as_expr(xs[axis], "int64")
    s = T.reduce(x, [axis], True, "sum", acc_dtype=acc, name="T_ln_sum")
    mean = T.elemwise(lambda u: u / T.cast(n, acc), s, name="T_ln_mean")

    def dev(*i):  # type: ignore[no-untyped-def]
        d = T.cast(x(*i), acc) - T.bcast_index(mean, i)
        return d * d
    vs = T.reduce(x, [axis], True, "sum", acc_dtype=acc, fn=dev, name="T_ln_var")
    eps = T.const(T.const_value(attrs.epsilon, dt if not T.is_float(dt) else acc), acc)

    def body(*i):  # type: ignore[no-untyped-def]
        var = T.bcast_index(vs, i) / T.cast(n, acc)
        r = (T.cast(x(*i), acc) - T.bcast_index(mean, i)) / tirx.sqrt(var + eps)
        if attrs.scale:
            r = r * T.cast(gm(i[axis]), acc)
        if attrs.center:
            r = r + T.cast(bt(i[axis]), acc)
        return T.cast(r, dt)
    return te.compute(xs, body, name="T_layer_norm", tag="elemwise")


def batch_norm_te(attrs: Attrs, inputs: list, out_type: TupleType) -> list:
    """TE compute of ``nn.batch_norm`` (inference form): ``[out, mean copy, var copy]``."""
    te, tirx = T.te_mod(), T.tir_mod()
    x, gm, bt, mm, mv = inputs
    dt = T.dtype_of(x)
    acc = _norm_acc(dt)
    xs = T.shape_of(x)
    axis = norm_axis(attrs.axis, len(xs))
    eps = T.const(T.const_value(attrs.epsilon, dt if not T.is_float(dt) else acc), acc)

    def body(*i):  # type: ignore[no-untyped-def]
        c = i[axis]
        r = (T.cast(x(*i), acc) - T.cast(mm(c), acc)) / tirx.sqrt(T.cast(mv(c), acc) + eps)
        if attrs.scale:
            r = r * T.cast(gm(c), acc)
        if attrs.center:
            r = r + T.cast(bt(c), acc)
        return T.cast(r, dt)
    out = te.compute(xs, body, name="T_batch_norm", tag="broadcast")
    return [out, T.elemwise(lambda u: u, mm, name="T_bn_mean"),
            T.elemwise(lambda u: u, mv, name="T_bn_var")]


def dropout_te(attrs: Attrs, inputs: list, out_type: TupleType) -> list:
    """TE compute of ``nn.dropout`` (inference form): ``[copy, ones]``."""
    x = inputs[0]
    dt = T.dtype_of(x)
    return [T.elemwise(lambda u: u, x, name="T_dropout"),
            T.elemwise(lambda u: T.const(1, dt), x, name="T_dropout_mask")]


def cross_entropy_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.cross_entropy``: ``-sum(log(p) * t) / batch``."""
    tirx = T.tir_mod()
    p, t = inputs
    dt = T.dtype_of(p)
    acc = _norm_acc(dt)
    ps = T.shape_of(p)
    s = T.reduce(p, [0, 1], False, "sum", acc_dtype=acc,
                 fn=lambda i, j: tirx.log(T.cast(p(i, j), acc)) * T.cast(t(i, j), acc))
    n = T.as_expr(ps[0], "int64")
    return T.elemwise(lambda u: T.cast(-u / T.cast(n, acc), dt), s, name="T_cross_entropy")


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
    same_dtype(data, w)
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


_DENSE_ATTRS = [F("units", "int?", None, "the number of output units"),
                F("out_dtype", "str", "", "the result dtype (\"\": the input's)")]
defop("nn.dense", 2, attrs=_DENSE_ATTRS, attrs_type="DenseAttrs", rel=dense_rel,
      impl=dense_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=dense_te,
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


defop("nn.matmul", 2, attrs=_DENSE_ATTRS + [F("transpose_a", "bool", False),
                                            F("transpose_b", "bool", False)],
      attrs_type="MatmulAttrs", rel=matmul_rel, impl=matmul_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="Matrix product with optional transposes.",
      compute=matmul_te)


def batch_matmul_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.batch_matmul(x: (B, M, K), y: (B, N, K)) : (B, M, N)`` (default transpose_b)."""
    ts = tensor_args(arg_types, ("x", "y"))
    if ts is None:
        return None
    x, y = ts
    if x.ndim != 3 or y.ndim != 3:
        raise TypeInferenceError(f"nn.batch_matmul: both inputs must have rank 3, found ranks "
                                 f"{x.ndim} and {y.ndim}")
    same_dtype(x, y)
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


defop("nn.batch_matmul", 2, attrs=[F("out_dtype", "str", ""),
                                   F("transpose_a", "bool", False),
                                   F("transpose_b", "bool", True)],
      attrs_type="BatchMatmulAttrs", rel=batch_matmul_rel, impl=batch_matmul_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="Batched matrix product.",
      compute=batch_matmul_te)


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


defop("nn.bias_add", 2, attrs=[F("axis", "int", 1, "the channel axis")],
      attrs_type="BiasAddAttrs", rel=bias_add_rel, impl=bias_add_ref,
      pattern=OpPattern.BROADCAST, doc="Add a 1-d bias along an axis.",
      compute=_channel_bcast(_bias_add_e, "bias_add"))


def prelu_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.prelu(x, alpha: (x.shape[axis],)) : type of x``."""
    return _per_channel_rel("nn.prelu", arg_types, attrs.axis, ("alpha",))


def prelu_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``x`` where positive, else ``alpha * x`` per channel."""
    x, a = args
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    return wrap(np.where(x > 0, x, _channel_view(a, x.ndim, axis) * x), x.dtype)


defop("nn.prelu", 2, attrs=[F("axis", "int", 1, "the channel axis")],
      attrs_type="PReluAttrs", rel=prelu_rel, impl=prelu_ref, pattern=OpPattern.BROADCAST,
      compute=_channel_bcast(_prelu_e, "prelu"),
      doc="Leaky ReLU with a learned per-channel slope.")


# ----------------------------------------------------------------------------- activations
def_elemwise("nn.relu", lambda x: np.maximum(x, np.zeros((), x.dtype)), doc="``max(x, 0)``.",
             compute=relu_te)
def_elemwise("nn.leaky_relu",
             lambda x, attrs: np.where(x > 0, x, x * np.asarray(attrs.alpha, x.dtype)),
             attrs=[F("alpha", "float", 0.01, "slope for x < 0")], attrs_type="LeakyReluAttrs",
             with_attrs=True, doc="``x`` if positive, else ``alpha * x``.",
             compute=leaky_relu_te)


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


_SOFTMAX_ATTRS = [F("axis", "int", -1, "the axis normalized over")]
defop("nn.softmax", 1, attrs=_SOFTMAX_ATTRS, attrs_type="SoftmaxAttrs", rel=softmax_rel,
      impl=softmax_ref, pattern=OpPattern.OPAQUE, doc="Softmax along an axis.",
      compute=_softmax_te(False))
defop("nn.log_softmax", 1, attrs=_SOFTMAX_ATTRS, attrs_type="SoftmaxAttrs", rel=softmax_rel,
      impl=log_softmax_ref, pattern=OpPattern.OPAQUE, doc="Log of softmax along an axis.",
      compute=_softmax_te(True))


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
        same_dtype(data, w)
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


defop("nn.conv2d", 2,
      attrs=[F("strides", "ints", (1, 1)), F("padding", "ints", (0, 0)),
             F("dilation", "ints", (1, 1)), F("groups", "int", 1),
             F("channels", "int?", None, "output channels (with kernel_size: infers weight)"),
             F("kernel_size", "ints?", None), F("data_layout", "str", "NCHW"),
             F("kernel_layout", "str", "OIHW"), F("out_layout", "str", ""),
             F("out_dtype", "str", "")],
      attrs_type="Conv2DAttrs", rel=conv2d_rel, impl=conv2d_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d convolution.",
      compute=conv2d_te)


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


defop("nn.max_pool2d", 1, attrs=_POOL_ATTRS, attrs_type="MaxPool2DAttrs", rel=max_pool2d_rel,
      impl=lambda args, attrs: _pool_ref(args, attrs, "max"),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d max pooling.",
      compute=_pool_te("max"))
defop("nn.avg_pool2d", 1, attrs=_POOL_ATTRS + [F("count_include_pad", "bool", False)],
      attrs_type="AvgPool2DAttrs", rel=avg_pool2d_rel,
      impl=lambda args, attrs: _pool_ref(args, attrs, "avg"),
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="2-d average pooling.",
      compute=_pool_te("avg"))


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


_GLOBAL_ATTRS = [F("layout", "str", "NCHW"), F("out_layout", "str", "")]
defop("nn.global_avg_pool2d", 1, attrs=_GLOBAL_ATTRS, attrs_type="GlobalPool2DAttrs",
      rel=global_pool_rel, impl=_global_ref("avg"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Average over the spatial dims.",
      compute=_global_te("avg"))
defop("nn.global_max_pool2d", 1, attrs=_GLOBAL_ATTRS, attrs_type="GlobalPool2DAttrs",
      rel=global_pool_rel, impl=_global_ref("max"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
      doc="Maximum over the spatial dims.",
      compute=_global_te("max"))


# ----------------------------------------------------------------------------- flatten / pad
def batch_flatten_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.batch_flatten(x: (N, ...)) : (N, prod(...))``."""
    t = tensor_arg(arg_types[0], "data")
    if t is None:
        return None
    if t.ndim < 1:
        raise TypeInferenceError("nn.batch_flatten: data must have rank >= 1")
    return TensorType((t.shape[0], shape_size(t.shape[1:])), t.dtype)


defop("nn.batch_flatten", 1, rel=batch_flatten_rel,
      impl=lambda args, attrs: np.reshape(args[0], (args[0].shape[0], -1)
                                          if args[0].shape[0] else (0, int(np.prod(
                                              args[0].shape[1:])))),
      pattern=OpPattern.INJECTIVE, doc="Flatten all but the first axis.",
      compute=batch_flatten_te)


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


defop("nn.pad", 2, attrs=[F("pad_width", "any", None, "((before, after), ...) per axis"),
                          F("pad_mode", "str", "constant", "constant, edge or reflect")],
      attrs_type="PadAttrs", rel=pad_rel, impl=pad_ref, pattern=OpPattern.INJECTIVE,
      doc="Pad with a value (or by edge/reflection).",
      compute=pad_te,
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
defop("nn.layer_norm", 3, attrs=[F("axis", "int", -1)] + _NORM_ATTRS,
      attrs_type="LayerNormAttrs", rel=layer_norm_rel, impl=layer_norm_ref,
      pattern=OpPattern.OPAQUE, doc="Layer normalization.",
      compute=layer_norm_te)


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


defop("nn.batch_norm", 5, attrs=[F("axis", "int", 1)] + _NORM_ATTRS,
      attrs_type="BatchNormAttrs", rel=batch_norm_rel, impl=batch_norm_ref,
      pattern=OpPattern.OPAQUE, doc="Batch normalization (inference form).",
      compute=batch_norm_te)


def dropout_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.dropout(x)`` : ``(type of x, type of x)`` (output and mask)."""
    t = tensor_arg(arg_types[0], "data")
    return None if t is None else TupleType((t, t))


defop("nn.dropout", 1, attrs=[F("rate", "float", 0.5, "drop probability (training only)")],
      attrs_type="DropoutAttrs", rel=dropout_rel,
      impl=lambda args, attrs: (np.array(args[0], copy=True), np.ones_like(args[0])),
      pattern=OpPattern.OPAQUE, doc="Dropout, inference form: (data, ones mask).",
      compute=dropout_te)


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


defop("nn.cross_entropy", 2, rel=cross_entropy_rel, impl=cross_entropy_ref,
      pattern=OpPattern.OPAQUE, doc="Cross entropy of probabilities against targets.",
      compute=cross_entropy_te)

