"""Neural-network operators (``nn.*``): dense/matmul, bias_add, activations, softmax,
batch_flatten, layer_norm, batch_norm (inference form), dropout, pad, cross_entropy.

``nn.dense``, ``nn.bias_add``, ``nn.layer_norm`` and
``nn.batch_norm`` infer the types of their parameter arguments when those are unknown.

``nn.dropout`` is the inference form: it returns ``(data, mask)`` as Relay's dropout does
(``relay.nn.dropout`` takes field 0), with ``data`` unchanged and a mask of ones.

conv2d, the pools and their gradient operators live in :mod:`relay_ir.op.conv`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Expr, Tuple, TupleGetItem
from relay_ir.op import OpPattern
from relay_ir.op._jvp import jvp_linear, jvp_multilinear, jvp_scalar, jvp_symmetric
from relay_ir.op._grad import (GradientRuleError, grad_rule, op, scalar, static_shape,
                               tensor_type, zeros_for)
from relay_ir.op import _te as T
from relay_ir.op._rules import (F, broadcast_shapes, check_dtype, def_elemwise, defop,
                                dim_compatible, fmt_shape, norm_axis, same_dtype, shape_size,
                                tensor_arg, tensor_rel, wrap)
from relay_ir.ty import (Dim, IncompleteType, TensorType, TupleType, Type, dim_add,
                         format_dim)


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
    nl = len(lead)
    if T.is_one(kdim):
        # NOTE: one term (an outer product): no reduction, so the group schedules as an
        # elementwise kernel and takes its epilogue in one pass. ``0 + x*w`` is what the sum
        # computes (-0.0 products give +0.0); the zero is opaque so that TVM's simplifier
        # keeps the addition (LLVM keeps a float add of +0.0 too).
        zero = T.opaque(T.const(0, acc))

        def one(*o):  # type: ignore[no-untyped-def]
            xi = [0, o[0]] if ta else list(o[:nl]) + [0]
            wi = [o[nl], 0] if tb else [0, o[nl]]
            return zero + T.cast(T.cast(x(*xi), cdt), acc) * T.cast(T.cast(w(*wi), cdt), acc)
        r1 = te.compute(lead + [n], one, name=name, tag="matmul")
        return _mm_result(r1, T.dtype_of(x), out_dt)
    k = te.reduce_axis((0, kdim), name="k")

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
    # NOTE: np.maximum(x, 0) as numpy computes it: NaN propagates, relu(-0.0) is 0.0
    return T.elemwise(lambda v: T.maximum(v, T.const(0, dt)), x, name="T_relu")


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
defop("nn.dense", 2, attrs=_DENSE_ATTRS, grad=dense_grad,
      jvp=jvp_multilinear, attrs_type="DenseAttrs", rel=dense_rel,
      impl=dense_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=dense_te,
      doc="Fully connected layer: ``x @ w.T``.")


def matmul_rel(arg_types: Sequence[Type], attrs: Attrs) -> Any:
    """``nn.matmul(a, b)`` with optional transposes of either side."""
    return _matmul_rel(arg_types, attrs, "nn.matmul", attrs.transpose_a, attrs.transpose_b)


def _mm_ref(args: list, attrs: Attrs, transpose: Any) -> np.ndarray:
    """``np.matmul`` of the two operands in the result dtype (integers wrap in it), each first
    passed through ``transpose`` when its ``transpose_a`` / ``transpose_b`` attribute is set."""
    a, b = args
    dt = attrs.out_dtype or a.dtype
    a, b = (_acc(v).astype(dt) if v.dtype.kind in "iu" else _acc(v) for v in (a, b))
    a = transpose(a) if attrs.transpose_a else a
    b = transpose(b) if attrs.transpose_b else b
    return wrap(np.matmul(a, b), dt)


def matmul_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``op(a) @ op(b)``."""
    return _mm_ref(args, attrs, np.transpose)


def _mm_adjoints(name: str, a: Expr, b: Expr, g: Expr, ta: bool, tb: bool,
                 rows: Any = None) -> tuple[Expr, Expr]:
    """``(dA, dB)`` of ``name(a, b) = A B`` (A, B: ``a``, ``b`` optionally transposed):
    ``dA = g BT``, ``dB = AT g``, each written as one ``name`` call with transpose flags.
    ``rows(a, g)``, when given, reshapes ``a`` and ``g`` for ``dB`` where ``a`` is untransposed."""
    def mm(lhs: Expr, rhs: Expr, t_l: bool, t_r: bool) -> Expr:
        return op(name, lhs, rhs, transpose_a=t_l, transpose_b=t_r)
    da = mm(b, g, tb, True) if ta else mm(g, b, False, not tb)
    if not ta and rows is not None:
        a, g = rows(a, g)
    db = mm(g, a, True, ta) if tb else mm(a, g, not ta, False)
    return da, db


@grad_rule
def matmul_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``matmul(a, b) = A B`` (A, B: optionally transposed): ``dA = g BT``, ``dB = AT g``."""
    a, b = call.args
    tb = call.attrs.transpose_b

    def rows(a: Expr, g: Expr) -> tuple[Expr, Expr]:
        at, bt = tensor_type(a), tensor_type(b)
        n = bt.shape[0] if tb else bt.shape[1]
        return _rows(a, at.shape[-1]), _rows(g, n)
    return _mm_adjoints("nn.matmul", a, b, _g_in(g, call), call.attrs.transpose_a, tb, rows)


defop("nn.matmul", 2, grad=matmul_grad,
      jvp=jvp_multilinear, attrs=_DENSE_ATTRS + [
          F("transpose_a", "bool", False, "use the first argument transposed"),
          F("transpose_b", "bool", False, "use the second argument transposed")],
      attrs_type="MatmulAttrs", rel=matmul_rel, impl=matmul_ref,
      pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc="Matrix product with optional transposes.",
      compute=matmul_te)


@tensor_rel("x", "y")
def batch_matmul_rel(x: TensorType, y: TensorType, attrs: Attrs) -> Type | None:
    """``nn.batch_matmul(x: (B, M, K), y: (B, N, K)) : (B, M, N)`` (default transpose_b)."""
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
    return _mm_ref(args, attrs, lambda v: np.swapaxes(v, 1, 2))


@grad_rule
def batch_matmul_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``batch_matmul`` per batch as :func:`matmul_grad`, summed over broadcast batches."""
    x, y = call.args
    dx, dy = _mm_adjoints("nn.batch_matmul", x, y, _g_in(g, call), call.attrs.transpose_a,
                          call.attrs.transpose_b)
    shape = tuple(call.checked_type.shape)
    bx, by = tensor_type(x).shape[0], tensor_type(y).shape[0]
    # NOTE: a batch dim of ? may be a broadcast 1 at run time: collapse unless provably equal
    dx = dx if isinstance(bx, int) and bx == shape[0] else op("collapse_sum_like", dx, x)
    dy = dy if isinstance(by, int) and by == shape[0] else op("collapse_sum_like", dy, y)
    return (dx, dy)


defop("nn.batch_matmul", 2, grad=batch_matmul_grad,
      jvp=jvp_multilinear, attrs=[
          F("out_dtype", "str", "", "the result dtype (\"\": the input's)"),
          F("transpose_a", "bool", False, "use x transposed in its last two dims"),
          F("transpose_b", "bool", True, "use y transposed in its last two dims ((B, N, K))")],
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


defop("nn.bias_add", 2, grad=bias_add_grad,
      jvp=jvp_linear, attrs=[F("axis", "int", 1, "the channel axis")],
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


def prelu_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """``prelu(x, a)``: ``t_x`` (x > 0) or ``a t_x + x t_a`` (per-channel ``a``, ``t_a``)."""
    x, a = call.args
    axis, n = _axis_of(call), tensor_type(x).ndim
    neg = op("add", op("multiply", t[0], _channel(a, n, axis)),
             op("multiply", x, _channel(t[1], n, axis)))
    return op("where", op("greater", x, scalar(0.0, x)), t[0], neg)


defop("nn.prelu", 2, grad=prelu_grad, jvp=prelu_jvp,
      attrs=[F("axis", "int", 1, "the channel axis")],
      attrs_type="PReluAttrs", rel=prelu_rel, impl=prelu_ref, pattern=OpPattern.BROADCAST,
      compute=_channel_bcast(_prelu_e, "prelu"),
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
             grad=relu_grad, jvp=jvp_symmetric, compute=relu_te)
def_elemwise("nn.leaky_relu",
             lambda x, attrs: np.where(x > 0, x, x * np.asarray(attrs.alpha, x.dtype)),
             attrs=[F("alpha", "float", 0.01, "slope for x < 0")], attrs_type="LeakyReluAttrs",
             with_attrs=True, doc="``x`` if positive, else ``alpha * x``.", grad=leaky_relu_grad,
             jvp=jvp_symmetric,
             compute=leaky_relu_te)


# ----------------------------------------------------------------------------- gelu
_GELU_MODES = ("none", "tanh")
_SQRT_HALF = float(np.sqrt(0.5))
_INV_SQRT_2PI = float(1.0 / np.sqrt(2.0 * np.pi))
_GELU_K = float(np.sqrt(2.0 / np.pi))   # tanh form: tanh(K (x + C x^3))
_GELU_C = 0.044715


@tensor_rel("data")
def gelu_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``nn.gelu(x, approximate)`` : type of x (a float dtype; approximate "none" or "tanh")."""
    if attrs.approximate not in _GELU_MODES:
        raise TypeInferenceError(f"nn.gelu: approximate must be \"none\" or \"tanh\", not "
                                 f"{attrs.approximate!r}")
    if not t.dtype.startswith("float"):
        raise TypeInferenceError(f"nn.gelu needs a float tensor, not {t.dtype}")
    return t


def gelu_ref(args: list, attrs: Attrs) -> np.ndarray:
    """``x * Phi(x)`` in float64, rounded once: ``Phi(x) = erfc(-x / sqrt 2) / 2`` ("none",
    accurate for large negative x too), or ``Phi ~ sigmoid(2 K (x + C x^3))`` ("tanh": the
    same number as ``(1 + tanh(K (x + C x^3))) / 2``). ``gelu(-inf)`` is NaN (``-inf * 0``, as
    the formula evaluates), ``gelu(inf) = inf``."""
    from relay_ir.op.tensor import erfc_f64
    x = args[0]
    if attrs.approximate not in _GELU_MODES:
        raise ValueError(f"nn.gelu: approximate must be 'none' or 'tanh', not "
                         f"{attrs.approximate!r}")
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if attrs.approximate == "none":
            phi = 0.5 * erfc_f64(-xd * _SQRT_HALF)
        else:
            u = 2.0 * _GELU_K * (xd + _GELU_C * xd * xd * xd)
            e = np.exp(-np.abs(u))
            phi = np.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
            phi = np.where(np.isnan(u), np.nan, phi)
        return wrap(xd * phi, x.dtype)


def gelu_te(attrs: Attrs, inputs: list, out_type: TensorType) -> object:
    """TE compute of ``nn.gelu``: float32 (and float16, through float32) with a vectorized
    rational erf (``0.5 x (1 + erf(x / sqrt 2))``) or a fast exp (``x / (1 + exp(-2u))``,
    ``u = K (x + C x^3)``); float64 (or fast math off) with TVM's ``erf`` / ``exp``."""
    te, tirx = T.te_mod(), T.tir_mod()
    x = inputs[0]
    dt = T.dtype_of(x)
    cdt = "float32" if dt == "float16" else dt
    fast = dt == "float16" or T.use_fast("nn.gelu", cdt)

    def xc(*i):  # type: ignore[no-untyped-def]
        return T.cast(x(*i), cdt)

    def c(v: float) -> Any:
        return T.const(v, cdt)
    if attrs.approximate == "none":
        h = te.compute(x.shape, lambda *i: xc(*i) * c(_SQRT_HALF), name="T_gelu_arg")
        if fast:
            from tvm import topi
            e = topi.fast_erf(h)
        else:
            e = te.compute(x.shape, lambda *i: tirx.erf(h(*i)), name="T_gelu_erf")
        return te.compute(x.shape, lambda *i: T.cast(
            c(0.5) * xc(*i) * (c(1.0) + e(*i)), dt), name="T_gelu", tag="elemwise")
    neg2u = te.compute(x.shape, lambda *i: c(-2.0 * _GELU_K) * (
        xc(*i) + c(_GELU_C) * xc(*i) * xc(*i) * xc(*i)), name="T_gelu_arg")
    if fast:
        e = T.fast_exp_tensor(neg2u)
    else:
        e = te.compute(x.shape, lambda *i: tirx.exp(neg2u(*i)), name="T_gelu_exp")
    return te.compute(x.shape, lambda *i: T.cast(xc(*i) / (c(1.0) + e(*i)), dt),
                      name="T_gelu", tag="elemwise")


@grad_rule
def gelu_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``gelu(x)``: "none": ``g (Phi(x) + x phi(x))`` with ``Phi = (1 + erf(x / sqrt 2)) / 2``
    and ``phi = exp(-x^2 / 2) / sqrt(2 pi)``; "tanh": with ``s = sigmoid(2u)``,
    ``u = K (x + C x^3)``: ``g (s + 2 x s (1 - s) K (1 + 3 C x^2))``."""
    x = call.args[0]

    def mul(*a: Expr) -> Expr:
        r = a[0]
        for b in a[1:]:
            r = op("multiply", r, b)
        return r

    def add(a: Expr, b: Expr) -> Expr:
        return op("add", a, b)
    x2 = mul(x, x)
    if call.attrs.approximate == "none":
        cdf = mul(scalar(0.5, x), add(scalar(1.0, x), op("erf", mul(x, scalar(_SQRT_HALF, x)))))
        pdf = mul(scalar(_INV_SQRT_2PI, x), op("exp", mul(scalar(-0.5, x), x2)))
        return (mul(g, add(cdf, mul(x, pdf))),)
    u2 = mul(scalar(2.0 * _GELU_K, x), add(x, mul(scalar(_GELU_C, x), x2, x)))
    s = op("sigmoid", u2)
    du2 = mul(scalar(2.0 * _GELU_K, x), add(scalar(1.0, x), mul(scalar(3.0 * _GELU_C, x), x2)))
    return (mul(g, add(s, mul(x, s, op("subtract", scalar(1.0, x), s), du2))),)


defop("nn.gelu", 1, attrs=[F("approximate", "str", "none",
                              '"none": x Phi(x) with the exact normal CDF (erf); "tanh": '
                              "Phi(x) ~ (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2")],
      attrs_type="GeluAttrs", rel=gelu_rel, impl=gelu_ref, pattern=OpPattern.ELEMWISE,
      doc="Gaussian error linear unit ``x * Phi(x)`` (Hendrycks and Gimpel 2016), as "
          "``torch.nn.functional.gelu`` and ONNX ``Gelu``; float dtypes. float32 kernels use a "
          "vectorized erf (max relative error 3.7e-7) or fast exp.",
      grad=gelu_grad, jvp=jvp_symmetric, compute=gelu_te)


@tensor_rel("data")
def softmax_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``op(x, axis)`` : type of x (``axis`` must be in range)."""
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


def log_softmax_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """``log_softmax(x) = y``: ``t - sum(exp(y) t, axis)``."""
    s = op("sum", op("multiply", op("exp", out), t[0]), axis=(call.attrs.axis,), keepdims=True)
    return op("subtract", t[0], s)


_SOFTMAX_ATTRS = [F("axis", "int", -1, "the axis normalized over")]
defop("nn.softmax", 1, attrs=_SOFTMAX_ATTRS, attrs_type="SoftmaxAttrs", rel=softmax_rel,
      grad=softmax_grad, jvp=jvp_symmetric, impl=softmax_ref, pattern=OpPattern.OPAQUE,
      doc="Softmax along an axis.", compute=_softmax_te(False))
defop("nn.log_softmax", 1, attrs=_SOFTMAX_ATTRS, attrs_type="SoftmaxAttrs", rel=softmax_rel,
      grad=log_softmax_grad, jvp=log_softmax_jvp, impl=log_softmax_ref, pattern=OpPattern.OPAQUE,
      doc="Log of softmax along an axis.", compute=_softmax_te(True))


# ----------------------------------------------------------------------------- flatten / pad
@tensor_rel("data")
def batch_flatten_rel(t: TensorType, attrs: Attrs) -> Type | None:
    """``nn.batch_flatten(x: (N, ...)) : (N, prod(...))``."""
    if t.ndim < 1:
        raise TypeInferenceError("nn.batch_flatten: data must have rank >= 1")
    return TensorType((t.shape[0], shape_size(t.shape[1:])), t.dtype)


@grad_rule
def batch_flatten_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``batch_flatten(x)``: ``g`` reshaped like x."""
    return (op("reshape_like", g, call.args[0]),)


defop("nn.batch_flatten", 1, grad=batch_flatten_grad, jvp=jvp_linear, rel=batch_flatten_rel,
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


@tensor_rel("data", "pad_value")
def pad_rel(x: TensorType, v: TensorType, attrs: Attrs) -> Type | None:
    """``nn.pad(x, pad_value, pad_width, pad_mode)``: every dim grows by its ``(before,
    after)`` widths, x's dtype; ``pad_value`` is 0-d."""
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


defop("nn.pad", 2, grad=pad_grad, jvp=jvp_linear,
      attrs=[F("pad_width", "any", None, "((before, after), ...) per axis"),
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


_NORM_ATTRS = [F("epsilon", "float", 1e-5, "added to the variance before the square root"),
               F("center", "bool", True, "add beta (False: beta is ignored)"),
               F("scale", "bool", True, "multiply by gamma (False: gamma is ignored)")]
def _mul(a: Expr, b: Expr) -> Expr:
    return op("multiply", a, b)


def _layer_norm_parts(call):  # type: ignore[no-untyped-def]
    """What both derivative rules of ``layer_norm`` start from: ``gamma``, ``beta``, the
    attrs, rank, axis (and as a tuple), ``rstd = rsqrt(var + eps)`` and ``xh = (x - mean)
    rstd`` over the normalized axis."""
    x, gamma, beta = call.args
    at = call.attrs
    axis = _axis_of(call)
    ax = (axis,)
    xc = op("subtract", x, op("mean", x, axis=ax, keepdims=True))
    var = op("mean", _mul(xc, xc), axis=ax, keepdims=True)
    rstd = op("rsqrt", op("add", var, scalar(at.epsilon, x)))
    return gamma, beta, at, tensor_type(x).ndim, axis, ax, rstd, _mul(xc, rstd)


@grad_rule
def layer_norm_grad(call, out, g):  # type: ignore[no-untyped-def]
    """``layer_norm(x, gamma, beta)`` with ``xh = (x - mean) rstd``, ``dxh = g gamma``:
    ``dx = rstd (dxh - mean(dxh) - xh mean(dxh xh))``, ``dgamma = sum(g xh)``,
    ``dbeta = sum(g)`` (sums over the non-normalized axes)."""
    gamma, beta, at, nd, axis, ax, rstd, xh = _layer_norm_parts(call)
    dxh = _mul(g, _channel(gamma, nd, axis)) if at.scale else g
    dx = _mul(rstd, op("subtract", op("subtract", dxh, op("mean", dxh, axis=ax, keepdims=True)),
                       _mul(xh, op("mean", _mul(dxh, xh), axis=ax, keepdims=True))))
    dgamma = _per_channel_sum(_mul(g, xh), axis) if at.scale else zeros_for(gamma)
    dbeta = _per_channel_sum(g, axis) if at.center else zeros_for(beta)
    return (dx, dgamma, dbeta)


def layer_norm_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """``layer_norm(x, gamma, beta)``: ``dxh = rstd (tx - mean(tx) - xh mean(xh tx))``, then
    ``dy = dxh gamma + xh t_gamma + t_beta`` (per-channel ``gamma``, ``beta`` broadcast)."""
    gamma, beta, at, nd, axis, ax, rstd, xh = _layer_norm_parts(call)
    dxh = _mul(rstd, op("subtract", op("subtract", t[0], op("mean", t[0], axis=ax, keepdims=True)),
                        _mul(xh, op("mean", _mul(xh, t[0]), axis=ax, keepdims=True))))
    dy = dxh
    if at.scale:
        dy = op("add", _mul(dxh, _channel(gamma, nd, axis)), _mul(xh, _channel(t[1], nd, axis)))
    if at.center:
        dy = op("add", dy, _channel(t[2], nd, axis))
    return dy


defop("nn.layer_norm", 3, grad=layer_norm_grad, jvp=layer_norm_jvp,
      attrs=[F("axis", "int", -1, "the normalized axis")] + _NORM_ATTRS,
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


def batch_norm_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """Inference-form ``batch_norm``: ``y = (x - m) rstd gamma + beta`` differentiated in all
    five inputs (``d rstd = -rstd^3 t_v / 2``); the pass-through outputs get ``t_m``, ``t_v``."""
    x, gamma, beta, m, v = call.args
    at = call.attrs
    nd = tensor_type(x).ndim
    axis = _axis_of(call)
    tx, tg, tb, tm, tv = t
    rstd = op("rsqrt", op("add", v, scalar(at.epsilon, x)))
    xc = op("subtract", x, _channel(m, nd, axis))
    drstd = _mul(_mul(scalar(-0.5, x), _mul(rstd, _mul(rstd, rstd))), tv)
    dxh = op("add", _mul(op("subtract", tx, _channel(tm, nd, axis)), _channel(rstd, nd, axis)),
             _mul(xc, _channel(drstd, nd, axis)))
    dy = dxh
    if at.scale:
        xh = _mul(xc, _channel(rstd, nd, axis))
        dy = op("add", _mul(dxh, _channel(gamma, nd, axis)), _mul(xh, _channel(tg, nd, axis)))
    if at.center:
        dy = op("add", dy, _channel(tb, nd, axis))
    return Tuple((dy, tm, tv))


defop("nn.batch_norm", 5, grad=batch_norm_grad, jvp=batch_norm_jvp,
      attrs=[F("axis", "int", 1, "the channel axis")] + _NORM_ATTRS,
      attrs_type="BatchNormAttrs", rel=batch_norm_rel, impl=batch_norm_ref,
      pattern=OpPattern.OPAQUE, doc="Batch normalization (inference form).",
      compute=batch_norm_te)


def dropout_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``nn.dropout(x)`` : ``(type of x, type of x)`` (output and mask)."""
    t = tensor_arg(arg_types[0], "data")
    return None if t is None else TupleType((t, t))


@grad_rule
def dropout_grad(call, out, g):  # type: ignore[no-untyped-def]
    """Inference-form ``dropout(x) = (x, ones)``: the adjoint of output 0 (identity)."""
    return (TupleGetItem(g, 0),)


def dropout_jvp(call, out, t):  # type: ignore[no-untyped-def]
    """Inference-form ``dropout(x) = (x, ones)``: ``(t, 0)``."""
    return Tuple((t[0], op("zeros_like", TupleGetItem(out, 1))))


defop("nn.dropout", 1, grad=dropout_grad, jvp=dropout_jvp,
      attrs=[F("rate", "float", 0.5, "drop probability (training only)")],
      attrs_type="DropoutAttrs", rel=dropout_rel,
      impl=lambda args, attrs: (np.array(args[0], copy=True), np.ones_like(args[0])),
      pattern=OpPattern.OPAQUE, doc="Dropout, inference form: (data, ones mask).",
      compute=dropout_te)


@tensor_rel("predictions", "targets")
def cross_entropy_rel(p: TensorType, t: TensorType, attrs: Attrs) -> Type | None:
    """``nn.cross_entropy(pred, target)``: equal 2-d types; a scalar result."""
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


defop("nn.cross_entropy", 2, grad=cross_entropy_grad,
      jvp=jvp_scalar, rel=cross_entropy_rel, impl=cross_entropy_ref,
      pattern=OpPattern.OPAQUE, doc="Cross entropy of probabilities against targets.",
      compute=cross_entropy_te)
