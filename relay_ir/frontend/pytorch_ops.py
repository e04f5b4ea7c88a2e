"""Converters from core ATen operators (``torch.export`` after ``run_decompositions()``) to
relay_ir operators.

Each converter takes the :class:`~relay_ir.frontend._importer.Graph` and the
:class:`~relay_ir.frontend.pytorch.TNode` (converted arguments: tensors as
:class:`~relay_ir.frontend._importer.Value`, lists as lists, symbolic sizes as relay_ir
dims) and returns a Value, or a list of Values for ATen operators with several outputs (None
where an output is not computed: reading it is an error naming the node).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from relay_ir.frontend._importer import Graph, Value
from relay_ir.frontend.onnx_nn import _drop_pad_windows
from relay_ir.frontend.onnx_ops import _round_even
from relay_ir.frontend.pytorch import TNode, converter, rly_dtype
from relay_ir.ty import dim_add, dim_div_exact, dim_mul, dim_sub

_BIG = 2 ** 62  # NOTE: slice ends at or past this are "to the end" (torch uses INT64_MAX)


# ---------------------------------------------------------------------------- helpers

def _axis(a: int, ndim: int) -> int:
    if not -max(ndim, 1) <= a < max(ndim, 1):
        raise ValueError(f"dim {a} is out of range for rank {ndim}")
    return a + ndim if a < 0 else a


def _axes(dims: Any, ndim: int) -> list[int] | None:
    """A reduction's dims: None or [] (torch: every axis) -> None."""
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return None
    return sorted(_axis(int(d), ndim) for d in dims)


def _const(g: Graph, v: Any, dtype: str) -> Value:
    return g.const(np.asarray(v, dtype=dtype))


def _tensor(g: Graph, v: Any, dtype: str) -> Value:
    """``v`` (a Value or a Python number) as a tensor of ``dtype``."""
    if isinstance(v, Value):
        return v if v.dtype == dtype else g.call("cast", v, dtype=dtype)
    if isinstance(v, bool) and dtype != "bool":
        v = int(v)
    return _const(g, v, dtype)


def _cast(g: Graph, v: Value, dtype: str) -> Value:
    return v if v.dtype == dtype else g.call("cast", v, dtype=dtype)


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _promoted(n: TNode, *ks: int) -> str:
    """The dtype torch computes arguments ``ks`` in (``torch.result_type``)."""
    import torch
    raw = [n.raw_arg(k) for k in ks]
    try:
        if len(raw) == 1:
            return rly_dtype(raw[0].dtype)
        dt = torch.result_type(raw[0], raw[1])
        for r in raw[2:]:
            dt = torch.promote_types(dt, r.dtype if isinstance(r, torch.Tensor) else
                                     torch.result_type(torch.empty(0, dtype=dt), r))
        return rly_dtype(dt)
    except (TypeError, RuntimeError, AttributeError):
        vals = [a for a in (n.args[k] for k in ks) if isinstance(a, Value)]
        return vals[0].dtype


def _pair(v: Any, k: int = 2) -> list[int]:
    if isinstance(v, int):
        return [v] * k
    v = [int(x) for x in v]
    return v * k if len(v) == 1 else v


def _static_dims(x: Value, n: TNode, what: str = "input") -> list[int]:
    if not all(isinstance(d, int) for d in x.shape):
        raise n.error(f"{what} needs a static shape (has {x.ty})")
    return [int(d) for d in x.shape]


# ---------------------------------------------------------------------------- elementwise

def _unary(op: str, float_only: bool = False):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: TNode) -> Value:
        x = n.args[0]
        if float_only or _is_float(n.out_dtype):
            x = _cast(g, x, n.out_dtype)
        return g.call(op, x)
    return conv


for _t, _op in {"relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp",
                "log": "log", "log2": "log2", "log10": "log10", "sqrt": "sqrt",
                "rsqrt": "rsqrt", "abs": "abs", "neg": "negative", "ceil": "ceil",
                "floor": "floor", "trunc": "trunc", "sin": "sin", "cos": "cos", "tan": "tan",
                "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
                "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sign": "sign",
                "bitwise_not": "bitwise_not"}.items():
    converter(f"aten.{_t}.default")(_unary(_op))
converter("aten.erf.default", needs=["erf"])(_unary("erf"))


@converter("aten.round.default")
def _round(g: Graph, n: TNode) -> Value:
    return _round_even(g, n.args[0])  # NOTE: torch rounds halves to even


@converter("aten.reciprocal.default")
def _reciprocal(g: Graph, n: TNode) -> Value:
    x = _cast(g, n.args[0], n.out_dtype)
    return g.call("divide", _const(g, 1, x.dtype), x)


@converter("aten.isnan.default", "aten.isinf.default")
def _isnan(g: Graph, n: TNode) -> Value:
    return g.call("isnan" if "isnan" in n.target else "isinf", n.args[0])


@converter("aten.logical_not.default")
def _logical_not(g: Graph, n: TNode) -> Value:
    return g.call("logical_not", _as_bool(g, n.args[0]))


def _as_bool(g: Graph, x: Value) -> Value:
    if x.dtype == "bool":
        return x
    return g.call("not_equal", x, _const(g, 0, x.dtype))


_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
           "maximum": "maximum", "minimum": "minimum", "remainder": "floor_mod",
           "fmod": "mod", "floor_divide": "floor_divide", "pow": "power",
           "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
           "bitwise_xor": "bitwise_xor"}


def _binary(name: str):  # type: ignore[no-untyped-def]
    op = _BINARY[name]

    def conv(g: Graph, n: TNode) -> Value:
        dt = n.out_dtype
        a, b = n.args[0], n.args[1]
        if name in ("add", "sub"):
            alpha = n.arg(2, "alpha", 1)
            if alpha != 1:
                b = g.call("multiply", _tensor(g, b, dt), _const(g, alpha, dt))
        return g.call(op, _tensor(g, a, dt), _tensor(g, b, dt))
    return conv


for _name in _BINARY:
    for _ov in ("Tensor", "Scalar", "default", "Tensor_Scalar", "Tensor_Tensor"):
        converter(f"aten.{_name}.{_ov}")(_binary(_name))


@converter("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    b = _tensor(g, n.args[1], dt)
    a = _tensor(g, n.args[0], dt)
    alpha = n.arg(2, "alpha", 1)
    if alpha != 1:
        a = g.call("multiply", a, _const(g, alpha, dt))
    return g.call("subtract", b, a)


@converter("aten.pow.Scalar")
def _pow_scalar(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    return g.call("power", _tensor(g, n.args[0], dt), _tensor(g, n.args[1], dt))


@converter("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(g: Graph, n: TNode) -> Value:
    mode = n.arg(2, "rounding_mode")
    dt = n.out_dtype
    a, b = _tensor(g, n.args[0], dt), _tensor(g, n.args[1], dt)
    if mode is None:
        return g.call("divide", a, b)
    if mode == "floor":
        return g.call("floor_divide", a, b)
    if _is_float(dt):
        return g.call("trunc", g.call("divide", a, b))
    # NOTE: integers: the truncated quotient (division rounding toward zero)
    q = g.call("floor_divide", a, b)
    r = g.call("floor_mod", a, b)
    zero = _const(g, 0, dt)
    fix = g.call("logical_and", g.call("not_equal", r, zero),
                 g.call("less", g.call("multiply", a, b), zero))
    return g.call("add", q, g.call("cast", fix, dtype=dt))


_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}


def _compare(name: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: TNode) -> Value:
        dt = _promoted(n, 0, 1)
        return g.call(_COMPARE[name], _tensor(g, n.args[0], dt), _tensor(g, n.args[1], dt))
    return conv


for _name in _COMPARE:
    converter(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(_name))


def _logical(op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: TNode) -> Value:
        return g.call(op, _as_bool(g, n.args[0]), _as_bool(g, n.args[1]))
    return conv


for _name in ("and", "or", "xor"):
    converter(f"aten.logical_{_name}.default")(_logical(f"logical_{_name}"))


@converter("aten.where.self")
def _where(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    return g.call("where", _as_bool(g, n.args[0]), _tensor(g, n.args[1], dt),
                  _tensor(g, n.args[2], dt))


@converter("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default",
           "aten.clamp_max.default", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor",
           "aten.hardtanh.default")
def _clamp(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    x = _cast(g, n.args[0], dt)
    if "clamp_min" in n.target:
        lo, hi = n.args[1], None
    elif "clamp_max" in n.target:
        lo, hi = None, n.args[1]
    elif "hardtanh" in n.target:
        lo, hi = n.arg(1, "min_val", -1.0), n.arg(2, "max_val", 1.0)
    else:
        lo, hi = n.arg(1, "min"), n.arg(2, "max")
    if _is_float(dt) and not isinstance(lo, Value) and not isinstance(hi, Value):
        return g.call("clip", x, a_min=-math.inf if lo is None else float(lo),
                      a_max=math.inf if hi is None else float(hi))
    # NOTE: tensor bounds, and integer tensors (clip's bounds are floats)
    if lo is not None:
        x = g.call("maximum", x, _tensor(g, lo, dt))
    if hi is not None:
        x = g.call("minimum", x, _tensor(g, hi, dt))
    return x


@converter("aten.leaky_relu.default")
def _leaky_relu(g: Graph, n: TNode) -> Value:
    return g.call("nn.leaky_relu", n.args[0], alpha=float(n.arg(1, "negative_slope", 0.01)))


@converter("aten.elu.default")
def _elu(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    alpha, scale, iscale = (float(n.arg(1, "alpha", 1.0)), float(n.arg(2, "scale", 1.0)),
                            float(n.arg(3, "input_scale", 1.0)))
    dt = x.dtype
    xi = x if iscale == 1.0 else g.call("multiply", x, _const(g, iscale, dt))
    neg = g.call("multiply", g.call("subtract", g.call("exp", xi), _const(g, 1, dt)),
                 _const(g, alpha * scale, dt))
    pos = x if scale == 1.0 else g.call("multiply", x, _const(g, scale, dt))
    return g.call("where", g.call("greater", x, _const(g, 0, dt)), pos, neg)


@converter("aten.hardsigmoid.default")
def _hardsigmoid(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    y = g.call("add", g.call("divide", x, _const(g, 6, x.dtype)), _const(g, 0.5, x.dtype))
    return g.call("clip", y, a_min=0.0, a_max=1.0)


@converter("aten.hardswish.default")
def _hardswish(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    y = g.call("clip", g.call("add", x, _const(g, 3, x.dtype)), a_min=0.0, a_max=6.0)
    return g.call("divide", g.call("multiply", x, y), _const(g, 6, x.dtype))


@converter("aten.silu.default")
def _silu(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    return g.call("multiply", x, g.call("sigmoid", x))


@converter("aten.gelu.default", needs=["nn.gelu"])
def _gelu(g: Graph, n: TNode) -> Value:
    return g.call("nn.gelu", n.args[0], approximate=str(n.arg(1, "approximate", "none")))


@converter("aten._softmax.default", "aten._log_softmax.default")
def _softmax(g: Graph, n: TNode) -> Value:
    x = _cast(g, n.args[0], n.out_dtype)
    op = "nn.log_softmax" if "log_softmax" in n.target else "nn.softmax"
    return g.call(op, x, axis=_axis(int(n.args[1]), x.ndim))


# ---------------------------------------------------------------------------- reductions

def _reduce(op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: TNode) -> Value:
        x = n.args[0]
        if n.target.endswith(".default") and op in ("sum", "mean", "prod"):
            axes, keep = None, False  # NOTE: sum.default(x, dtype=None)
        else:
            axes, keep = _axes(n.arg(1, "dim"), x.ndim), bool(n.arg(2, "keepdim", False))
        if op in ("sum", "mean", "prod"):
            x = _cast(g, x, n.out_dtype)
        if op in ("any", "all"):
            x = _as_bool(g, x)
        if x.ndim == 0:
            return x
        return g.call(op, x, axis=axes, keepdims=keep)
    return conv


for _t, _op in {"sum.dim_IntList": "sum", "sum.default": "sum", "mean.dim": "mean",
                "mean.default": "mean", "amax.default": "max", "amin.default": "min",
                "prod.dim_int": "prod", "prod.default": "prod", "any.dim": "any",
                "any.dims": "any", "any.default": "any", "all.dim": "all", "all.dims": "all",
                "all.default": "all"}.items():
    converter(f"aten.{_t}")(_reduce(_op))


@converter("aten.max.dim", "aten.min.dim")
def _max_dim(g: Graph, n: TNode) -> list[Value | None]:
    x = n.args[0]
    axis, keep = _axis(int(n.args[1]), x.ndim), bool(n.arg(2, "keepdim", False))
    kind = "max" if "max" in n.target else "min"
    out: list[Value | None] = [None, None]
    if 0 in n.used_outputs or not n.used_outputs:
        out[0] = g.call(kind, x, axis=[axis], keepdims=keep)
    if 1 in n.used_outputs:
        out[1] = _cast(g, g.call(f"arg{kind}", x, axis=[axis], keepdims=keep), "int64")
    return out


@converter("aten.max.default", "aten.min.default")
def _max_all(g: Graph, n: TNode) -> Value:
    return g.call("max" if "max" in n.target else "min", n.args[0])


@converter("aten.argmax.default", "aten.argmin.default")
def _argmax(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    dim, keep = n.arg(1, "dim"), bool(n.arg(2, "keepdim", False))
    op = "argmax" if "argmax" in n.target else "argmin"
    if dim is None:
        y = g.call(op, g.call("reshape", x, newshape=[-1]), axis=[0], keepdims=False)
        if keep:
            y = g.call("reshape", y, newshape=[1] * x.ndim)
    else:
        y = g.call(op, x, axis=[_axis(int(dim), x.ndim)], keepdims=keep)
    return _cast(g, y, "int64")


@converter("aten.var.correction", "aten.var.dim")
def _var(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    axes = _axes(n.arg(1, "dim"), x.ndim)
    if n.target == "aten.var.dim":
        unbiased = bool(n.arg(2, "unbiased", True))
        keep = bool(n.arg(3, "keepdim", False))
    else:
        corr = n.kwargs.get("correction", n.args[2] if len(n.args) > 2 else None)
        keep = bool(n.kwargs.get("keepdim", n.args[3] if len(n.args) > 3 else False))
        corr = 1 if corr is None else corr
        if corr not in (0, 1):
            raise n.error(f"correction={corr} is not supported (0 or 1)")
        unbiased = corr == 1
    mean = g.call("mean", x, axis=axes, keepdims=True)
    return g.call("variance", x, mean, axis=axes, keepdims=keep, unbiased=unbiased)


# ---------------------------------------------------------------------------- shapes

def _newshape(x: Value, shape: Sequence[Any], n: TNode) -> tuple[list[int] | None, bool]:
    """torch's target ``shape`` as a ``reshape`` newshape: symbolic sizes become Relay's 0
    (copy the input's dim at that position) or -1 (inferred; at most one); None when that
    cannot express it."""
    out: list[int] = []
    inferred = False
    allowzero = any(isinstance(d, int) and d == 0 for d in shape)
    for i, d in enumerate(shape):
        if isinstance(d, int):
            if d == -1:
                inferred = True
            out.append(int(d))
        elif not allowzero and i < x.ndim and x.shape[i] == d:
            out.append(0)
        elif not inferred:
            out.append(-1)
            inferred = True
        else:
            return None, allowzero  # NOTE: two unknown sizes: reshape_like instead
    return out, allowzero


@converter("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
           "aten.view_copy.default")
def _view(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    shape, allowzero = _newshape(x, n.args[1], n)
    if list(x.shape) == list(n.args[1]):
        return x
    if shape is None:
        return g.call("reshape_like", x, _like(g, n, n.args[1], x.dtype))
    return g.call("reshape", x, newshape=shape, allowzero=allowzero)


@converter("aten.permute.default", "aten.permute_copy.default")
def _permute(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    axes = [_axis(int(a), x.ndim) for a in n.args[1]]
    if axes == list(range(x.ndim)):
        return x
    return g.call("transpose", x, axes=axes)


@converter("aten.t.default", "aten.numpy_T.default")
def _t(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    return x if x.ndim < 2 else g.call("transpose", x, axes=list(range(x.ndim))[::-1])


@converter("aten.transpose.int")
def _transpose(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    axes = list(range(x.ndim))
    a, b = _axis(int(n.args[1]), x.ndim), _axis(int(n.args[2]), x.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return g.call("transpose", x, axes=axes)


@converter("aten.expand.default", "aten.expand_copy.default")
def _expand(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    size = list(n.args[1])
    lead = len(size) - x.ndim
    target: list[Any] = []
    for i, d in enumerate(size):
        if isinstance(d, int) and d == -1:
            target.append(x.shape[i - lead])
        else:
            target.append(d)
    if target == list(x.shape):
        return x
    if not all(isinstance(d, int) for d in target):
        return g.call("broadcast_to_like", x, _like(g, n, target, x.dtype))
    return g.call("broadcast_to", x, shape=[int(d) for d in target])


@converter("aten.unsqueeze.default")
def _unsqueeze(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    return g.call("expand_dims", x, axis=_axis(int(n.args[1]), x.ndim + 1))


@converter("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    if n.target == "aten.squeeze.default":
        dims = list(range(x.ndim))
    elif n.target == "aten.squeeze.dim":
        dims = [n.args[1]]
    else:
        dims = list(n.args[1])
    dims = sorted({_axis(int(d), x.ndim) for d in dims}) if x.ndim else []
    axes = [d for d in dims if isinstance(x.shape[d], int) and x.shape[d] == 1]
    if not axes:
        return x
    return g.call("squeeze", x, axis=axes)


@converter("aten.clone.default", "aten.alias.default", "aten.detach.default",
           "aten.lift_fresh_copy.default", "aten.contiguous.default",
           "aten.dropout.default", "aten.alias_copy.default")
def _identity(g: Graph, n: TNode) -> Value:
    return n.args[0]


@converter("aten._to_copy.default", "aten.to.dtype", "aten._to_dtype.default")
def _to_copy(g: Graph, n: TNode) -> Value:
    return _cast(g, n.args[0], n.out_dtype)


@converter("aten.cat.default")
def _cat(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    xs = [_cast(g, x, dt) for x in n.args[0]
          if not (x.ndim == 1 and x.shape[0] == 0)]  # NOTE: torch skips empty 1-D tensors
    if len(xs) == 1:
        return xs[0]
    return g.call("concatenate", xs, axis=_axis(int(n.arg(1, "dim", 0)), xs[0].ndim))


@converter("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    dim = _axis(int(n.arg(1, "dim", 0)), x.ndim)
    start, end, step = n.arg(2, "start"), n.arg(3, "end"), int(n.arg(4, "step", 1))
    size = x.shape[dim]
    start = 0 if start is None else start
    if not isinstance(start, int) or (end is not None and not isinstance(end, int)):
        raise n.error("slice bounds must be static")
    if end is None or end >= _BIG:
        if not isinstance(size, int):
            if start == 0 and step == 1:
                return x
            raise n.error(f"slicing the symbolic dim {size} needs a static end")
        end = size
    if isinstance(size, int):
        start = max(0, min(size, start + size if start < 0 else start))
        end = max(start, min(size, end + size if end < 0 else end))
        if start == 0 and end == size and step == 1:
            return x
    return g.call("strided_slice", x, begin=[start], end=[end], strides=[step], axes=[dim])


@converter("aten.select.int", "aten.select_copy.int")
def _select(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    dim = _axis(int(n.args[1]), x.ndim)
    i = int(n.args[2])
    size = x.shape[dim]
    if i < 0:
        if not isinstance(size, int):
            raise n.error("a negative index into a symbolic dim")
        i += size
    y = g.call("strided_slice", x, begin=[i], end=[i + 1], strides=[1], axes=[dim])
    return g.call("squeeze", y, axis=[dim])


@converter("aten.split_with_sizes.default", "aten.split.Tensor",
           "aten.split_with_sizes_copy.default", "aten.split_copy.Tensor")
def _split(g: Graph, n: TNode) -> list[Value | None]:
    x = n.args[0]
    dim = _axis(int(n.arg(2, "dim", 0)), x.ndim)
    size = x.shape[dim]
    if not isinstance(size, int):
        raise n.error("splitting a symbolic dim")
    if "with_sizes" in n.target:
        sizes = [int(s) for s in n.args[1]]
    else:
        step = int(n.args[1])
        sizes = [min(step, size - s) for s in range(0, size, step)] or [0]
    out: list[Value | None] = []
    begin = 0
    for k, s in enumerate(sizes):
        if k in n.used_outputs:
            out.append(g.call("strided_slice", x, begin=[begin], end=[begin + s], strides=[1],
                              axes=[dim]))
        else:
            out.append(None)
        begin += s
    return out


@converter("aten.unbind.int")
def _unbind(g: Graph, n: TNode) -> list[Value | None]:
    x = n.args[0]
    dim = _axis(int(n.arg(1, "dim", 0)), x.ndim)
    size = x.shape[dim]
    if not isinstance(size, int):
        raise n.error("unbinding a symbolic dim")
    out: list[Value | None] = []
    for i in range(size):
        if i in n.used_outputs:
            y = g.call("strided_slice", x, begin=[i], end=[i + 1], strides=[1], axes=[dim])
            out.append(g.call("squeeze", y, axis=[dim]))
        else:
            out.append(None)
    return out


@converter("aten.flip.default")
def _flip(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    for d in n.args[1]:
        x = g.call("reverse", x, axis=_axis(int(d), x.ndim))
    return x


@converter("aten.repeat.default")
def _repeat(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    reps = [int(r) for r in n.args[1]]
    while x.ndim < len(reps):
        x = g.call("expand_dims", x, axis=0)
    return g.call("tile", x, reps=reps)


@converter("aten.constant_pad_nd.default")
def _constant_pad(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    pad = [int(p) for p in n.args[1]]
    value = n.arg(2, "value", 0)
    width = [[0, 0] for _ in range(x.ndim)]
    for k in range(len(pad) // 2):
        width[x.ndim - 1 - k] = [pad[2 * k], pad[2 * k + 1]]
    # NOTE: negative pads crop
    begin, end, crop = [], [], False
    for d, (lo, hi) in enumerate(width):
        size = x.shape[d]
        if lo < 0 or hi < 0:
            if not isinstance(size, int):
                raise n.error("cropping a symbolic dim")
            crop = True
        begin.append(max(0, -lo))
        end.append(size - max(0, -hi) if isinstance(size, int) else _BIG)
    if crop:
        x = g.call("strided_slice", x, begin=begin, end=end, strides=[1] * x.ndim,
                   axes=list(range(x.ndim)))
    width = [[max(0, lo), max(0, hi)] for lo, hi in width]
    if not any(lo or hi for lo, hi in width):
        return x
    return g.call("nn.pad", x, _const(g, value, x.dtype), pad_width=width)


@converter("aten.reflection_pad2d.default", "aten.reflection_pad1d.default",
           "aten.replication_pad2d.default", "aten.replication_pad1d.default")
def _reflect_pad(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    pad = [int(p) for p in n.args[1]]
    width = [[0, 0] for _ in range(x.ndim)]
    for k in range(len(pad) // 2):
        width[x.ndim - 1 - k] = [pad[2 * k], pad[2 * k + 1]]
    mode = "reflect" if "reflection" in n.target else "edge"
    return g.call("nn.pad", x, _const(g, 0, x.dtype), pad_width=width, pad_mode=mode)


# ---------------------------------------------------------------------------- indexing

@converter("aten.embedding.default")
def _embedding(g: Graph, n: TNode) -> Value:
    w, idx = n.args[0], n.args[1]
    return g.call("take", w, idx, axis=0, mode="clip")


@converter("aten.index_select.default")
def _index_select(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    return g.call("take", x, n.args[2], axis=_axis(int(n.args[1]), x.ndim), mode="wrap")


@converter("aten.index.Tensor")
def _index(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    idx = list(n.args[1])
    used = [k for k, i in enumerate(idx) if i is not None]
    if len(used) != 1 or idx[used[0]].dtype == "bool":
        raise n.error("only indexing one dim with an integer tensor is supported")
    k = used[0]
    # NOTE: negative indices count from the end: take's "wrap" mode
    return g.call("take", x, idx[k], axis=k, mode="wrap")


@converter("aten.gather.default", needs=["gather"])
def _gather(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    return g.call("gather", x, n.args[2], axis=_axis(int(n.args[1]), x.ndim))


@converter("aten.cumsum.default", needs=["cumsum"])
def _cumsum(g: Graph, n: TNode) -> Value:
    x = _cast(g, n.args[0], n.out_dtype)
    return g.call("cumsum", x, axis=_axis(int(n.args[1]), x.ndim))


# ---------------------------------------------------------------------------- creation

def _factors(d: Any) -> list[Any] | None:
    """A dim as a product of an int and symbolic dims (``4*batch`` -> [4, batch]); None for
    sums."""
    from relay_ir.ty import DimExpr, ShapeVar
    if isinstance(d, int) or isinstance(d, ShapeVar):
        return [d]
    if isinstance(d, DimExpr) and len(d.terms) == 1:
        (mono, c), = d.terms
        return ([c] if c != 1 else []) + list(mono)
    return None


def _like(g: Graph, n: TNode, shape: Sequence[Any], dtype: str) -> Value:
    """Zeros of ``shape``, whose symbolic dims are read from the user inputs that have them
    (``broadcast_to`` takes only static shapes): static zeros broadcast against, per symbolic
    dim, a zeroed (1, .., d, .., 1) slice of its input; a product dim (``4*batch``) is made
    as one axis per factor, then merged (``reshape`` code -3)."""
    sources = getattr(g, "dim_sources", {})
    groups = []
    for d in shape:
        f = _factors(d)
        if f is None:
            raise n.error(f"the symbolic size {d} of {list(shape)} is not supported")
        groups.append(f)
    flat = [f for grp in groups for f in grp]
    rank = len(flat)
    like = g.call("zeros", shape=[d if isinstance(d, int) else 1 for d in flat], dtype=dtype)
    for i, d in enumerate(flat):
        if isinstance(d, int):
            continue
        if d not in sources:
            raise n.error(f"the symbolic size {d} of {list(shape)} is not an input's dim")
        src, axis = sources[d]
        col = g.call("strided_slice", src, begin=[0] * src.ndim,
                     end=[_BIG if k == axis else 1 for k in range(src.ndim)],
                     strides=[1] * src.ndim, axes=list(range(src.ndim)))
        col = g.call("reshape", col, newshape=[1] * i + [-1] + [1] * (rank - i - 1))
        col = g.call("zeros_like", _cast(g, col, dtype))
        like = g.call("add", like, col)
    pos = 0
    for grp in groups:
        for _ in range(len(grp) - 1):
            like = g.call("reshape", like,
                          newshape=[0] * pos + [-3] + [0] * (like.ndim - pos - 2))
        pos += 1
    return like


def _size(shape: Sequence[Any], n: TNode) -> list[int]:
    if not all(isinstance(d, int) for d in shape):
        raise n.error(f"creating a tensor of symbolic shape {list(shape)} is not supported")
    return [int(d) for d in shape]


@converter("aten.full.default")
def _full(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    if not all(isinstance(d, int) for d in n.args[0]):
        return g.call("full_like", _like(g, n, n.args[0], dt), _const(g, n.args[1], dt))
    shape = _size(n.args[0], n)
    value = _const(g, n.args[1], dt)
    if int(np.prod(shape)) <= 1:
        return g.const(np.full(shape, n.args[1], dtype=dt))
    return g.call("full", value, shape=shape, dtype=dt, fold=False)


@converter("aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default")
def _full_like(g: Graph, n: TNode) -> Value:
    dt = n.out_dtype
    x = _cast(g, n.args[0], dt)
    v = {"aten.zeros_like.default": 0, "aten.ones_like.default": 1}.get(n.target)
    if v is None:
        v = n.args[1]
    return g.call("full_like", x, _const(g, v, dt))


@converter("aten.scalar_tensor.default")
def _scalar_tensor(g: Graph, n: TNode) -> Value:
    return _const(g, n.args[0], n.out_dtype)


@converter("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(g: Graph, n: TNode) -> Value:
    args = list(n.args)
    if not all(isinstance(a, (int, float)) for a in args):
        raise n.error("arange needs static bounds")
    return g.const(np.arange(*args, dtype=n.out_dtype))


# ---------------------------------------------------------------------------- nn

@converter("aten.convolution.default")
def _convolution(g: Graph, n: TNode) -> Value:
    x, w, b = n.args[0], n.args[1], n.args[2]
    stride, padding, dilation = n.args[3], n.args[4], n.args[5]
    transposed, out_pad, groups = bool(n.args[6]), n.args[7], int(n.args[8])
    k = x.ndim - 2
    if k not in (1, 2):
        raise n.error(f"only 1-D and 2-D convolutions are supported (input rank {x.ndim})")
    stride, padding, dilation = _pair(stride, k), _pair(padding, k), _pair(dilation, k)
    out_pad = _pair(out_pad, k)
    if k == 1:
        x = g.call("expand_dims", x, axis=2)
        w = g.call("expand_dims", w, axis=2)
        stride, padding, dilation, out_pad = ([1] + stride, [0] + padding, [1] + dilation,
                                              [0] + out_pad)
    kernel = [int(d) for d in w.shape[2:]]
    pads = padding + padding
    if transposed:
        # NOTE: the adjoint of a convolution (torch's weight is (C_in, C_out / groups, kH,
        # kW), the forward convolution's OIHW weight); conv2d_backward_data gives the shape
        # of its third argument
        out = list(n.out_shape())
        if k == 1:
            out = [out[0], out[1], 1, out[2]]
        like = g.call("zeros", shape=_size(out, n), dtype=x.dtype)
        y = g.call("nn.conv2d_backward_data", x, w, like, strides=stride, padding=pads,
                   dilation=dilation, groups=groups, kernel_size=kernel)
    else:
        y = g.call("nn.conv2d", x, w, strides=stride, padding=pads, dilation=dilation,
                   groups=groups, kernel_size=kernel)
    if b is not None:
        y = g.call("nn.bias_add", y, b, axis=1)
    if k == 1:
        y = g.call("squeeze", y, axis=[2])
    return y


@converter("aten.addmm.default")
def _addmm(g: Graph, n: TNode) -> Value:
    c, a, b = n.args[0], n.args[1], n.args[2]
    beta, alpha = n.arg(3, "beta", 1), n.arg(4, "alpha", 1)
    y = g.call("nn.matmul", a, b)
    if alpha != 1:
        y = g.call("multiply", y, _const(g, alpha, y.dtype))
    if beta == 0:
        return y
    if beta != 1:
        c = g.call("multiply", c, _const(g, beta, c.dtype))
    return g.call("add", y, c)


@converter("aten.mm.default")
def _mm(g: Graph, n: TNode) -> Value:
    return g.call("nn.matmul", n.args[0], n.args[1])


@converter("aten.bmm.default")
def _bmm(g: Graph, n: TNode) -> Value:
    return g.call("nn.batch_matmul", n.args[0], n.args[1], transpose_b=False)


def _ones_or(g: Graph, v: Value | None, c: Any, fill: float, dtype: str) -> Value:
    if v is not None:
        return v
    if not isinstance(c, int):
        raise ValueError("the channel count must be static")
    return g.const(np.full((c,), fill, dtype=dtype))


@converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(g: Graph, n: TNode) -> list[Value | None]:
    x, w, b, mean, var = n.args[:5]
    eps = float(n.arg(6, "eps", 1e-5))
    if n.used_outputs - {0}:
        raise n.error("only the normalized output of batch norm is supported")
    c = x.shape[1]
    w = _ones_or(g, w, c, 1.0, x.dtype)
    b = _ones_or(g, b, c, 0.0, x.dtype)
    y = g.call("nn.batch_norm", x, w, b, mean, var, axis=1, epsilon=eps)
    return [g.item(y, 0), None, None]


@converter("aten.native_layer_norm.default")
def _layer_norm(g: Graph, n: TNode) -> list[Value | None]:
    x, shape, w, b = n.args[0], list(n.args[1]), n.args[2], n.args[3]
    eps = float(n.args[4])
    k = len(shape)
    if k == 1 and not (n.used_outputs - {0}):
        c = x.shape[-1]
        y = g.call("nn.layer_norm", x, _ones_or(g, w, c, 1.0, x.dtype),
                   _ones_or(g, b, c, 0.0, x.dtype), axis=-1, epsilon=eps)
        return [y, None, None]
    axes = list(range(x.ndim - k, x.ndim))
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("variance", x, mean, axis=axes, keepdims=True)
    rstd = g.call("rsqrt", g.call("add", var, _const(g, eps, x.dtype)))
    y = g.call("multiply", g.call("subtract", x, mean), rstd)
    if w is not None:
        y = g.call("multiply", y, w)
    if b is not None:
        y = g.call("add", y, b)
    return [y, mean, rstd]


@converter("aten.native_group_norm.default", needs=["nn.group_norm"])
def _group_norm(g: Graph, n: TNode) -> list[Value | None]:
    x, w, b = n.args[0], n.args[1], n.args[2]
    groups, eps = int(n.args[6]), float(n.args[7])
    if n.used_outputs - {0}:
        raise n.error("only the normalized output of group norm is supported")
    c = x.shape[1]
    y = g.call("nn.group_norm", x, _ones_or(g, w, c, 1.0, x.dtype),
               _ones_or(g, b, c, 0.0, x.dtype), num_groups=groups, axis=1, epsilon=eps)
    return [y, None, None]


def _pool_args(n: TNode, x: Value, kernel: Any, stride: Any, padding: Any
               ) -> tuple[list[int], list[int], list[int]]:
    kernel = _pair(kernel)
    stride = _pair(stride) if stride else list(kernel)
    return kernel, stride, _pair(padding)


def _batched4(g: Graph, x: Value) -> tuple[Value, bool]:
    """An unbatched (C, H, W) input as (1, C, H, W)."""
    if x.ndim == 3:
        return g.call("expand_dims", x, axis=0), True
    return x, False


@converter("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def _max_pool(g: Graph, n: TNode) -> Any:
    x0 = n.args[0]
    kernel, stride, pad = _pool_args(n, x0, n.args[1], n.arg(2, "stride"),
                                     n.arg(3, "padding", 0))
    dil = _pair(n.arg(4, "dilation", 1))
    ceil = bool(n.arg(5, "ceil_mode", False))
    if "indices" in n.target and n.used_outputs - {0}:
        raise n.error("the indices output of max pooling is not supported")
    x, unbatched = _batched4(g, x0)
    pads = pad + pad
    y = g.call("nn.max_pool2d", x, pool_size=kernel, strides=stride, dilation=dil,
               padding=pads, ceil_mode=ceil)
    if ceil:
        y = _drop_pad_windows(g, x, y, kernel, stride, dil, pads)
    if unbatched:
        y = g.call("squeeze", y, axis=[0])
    return [y, None] if "indices" in n.target else y


@converter("aten.avg_pool2d.default")
def _avg_pool(g: Graph, n: TNode) -> Value:
    x0 = n.args[0]
    kernel, stride, pad = _pool_args(n, x0, n.args[1], n.arg(2, "stride"),
                                     n.arg(3, "padding", 0))
    ceil = bool(n.arg(4, "ceil_mode", False))
    include = bool(n.arg(5, "count_include_pad", True))
    if n.arg(6, "divisor_override") is not None:
        raise n.error("divisor_override is not supported")
    x, unbatched = _batched4(g, x0)
    pads = pad + pad
    y = g.call("nn.avg_pool2d", x, pool_size=kernel, strides=stride, dilation=[1, 1],
               padding=pads, ceil_mode=ceil, count_include_pad=include)
    if ceil:
        y = _drop_pad_windows(g, x, y, kernel, stride, [1, 1], pads)
    if unbatched:
        y = g.call("squeeze", y, axis=[0])
    return y


@converter("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg_pool(g: Graph, n: TNode) -> Value:
    x0 = n.args[0]
    out = _pair(n.args[1])
    x, unbatched = _batched4(g, x0)
    h, w = x.shape[2], x.shape[3]
    if out == [1, 1]:
        y = g.call("nn.global_avg_pool2d", x)
    elif isinstance(h, int) and isinstance(w, int) and h % out[0] == 0 and w % out[1] == 0:
        kh, kw = h // out[0], w // out[1]
        y = g.call("nn.avg_pool2d", x, pool_size=[kh, kw], strides=[kh, kw])
    else:
        raise n.error(f"adaptive average pooling from {(h, w)} to {tuple(out)} (sizes that "
                      "do not divide) is not supported")
    if unbatched:
        y = g.call("squeeze", y, axis=[0])
    return y


# ---------------------------------------------------------------------------- symbolic sizes

@converter("aten.sym_size.int")
def _sym_size(g: Graph, n: TNode) -> Any:
    x = n.args[0]
    return x.shape[_axis(int(n.args[1]), x.ndim)]


def _sym_arith(fn: Any):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: TNode) -> Any:
        a, b = n.args[0], n.args[1]
        if isinstance(a, int) and isinstance(b, int):
            return fn[0](a, b)
        out = fn[1](a, b)
        if out is None:
            raise n.error(f"cannot compute {a} {n.target} {b} on symbolic sizes")
        return out
    return conv


converter("<built-in function mul>")(_sym_arith((lambda a, b: a * b, dim_mul)))
converter("<built-in function add>")(_sym_arith((lambda a, b: a + b, dim_add)))
converter("<built-in function sub>")(_sym_arith((lambda a, b: a - b, dim_sub)))
converter("<built-in function floordiv>")(_sym_arith((lambda a, b: a // b, dim_div_exact)))


# ---------------------------------------------------------------------------- upsampling

def _upsample_scale(n: TNode, k: int, size: int, out: int) -> float:
    """torch's source step of spatial axis ``k``: 1 / scale_factor when given, else in/out."""
    scales = n.args[-1] if n.target.endswith(".vec") else None
    if scales:
        return 1.0 / float(scales[k])
    return size / out


def _upsample_axis(g: Graph, x: Value, axis: int, out: int, step: float, mode: str,
                   align: bool) -> Value:
    """One spatial axis resized with constant maps (the nearest source index with ``take``;
    bilinear as an (out, in) weight matrix contracted with ``nn.matmul``)."""
    size = int(x.shape[axis])
    dst = np.arange(out, dtype=np.float64)
    if mode == "nearest":
        # NOTE: torch computes the source index in float32
        idx = np.minimum(np.floor(dst.astype(np.float32) * np.float32(step)), size - 1)
        idx = idx.astype(np.int64)
        return g.call("take", x, g.const(idx), axis=axis)
    if align:
        src = dst * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
    else:
        src = np.maximum((dst + 0.5) * step - 0.5, 0.0)
    x0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    x1 = np.minimum(x0 + 1, size - 1)
    t = src - x0
    m = np.zeros((out, size))
    np.add.at(m, (np.arange(out), x0), 1 - t)
    np.add.at(m, (np.arange(out), x1), t)
    perm = [i for i in range(x.ndim) if i != axis] + [axis]
    inv = [int(i) for i in np.argsort(perm)]
    y = g.call("transpose", x, axes=perm)
    y = g.call("nn.matmul", y, g.const(m.astype(x.dtype)), transpose_b=True)
    return g.call("transpose", y, axes=inv)


@converter("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default",
           "aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default")
def _upsample(g: Graph, n: TNode) -> Value:
    x = n.args[0]
    mode = "nearest" if "nearest" in n.target else "bilinear"
    align = bool(n.args[2]) if mode == "bilinear" and len(n.args) > 2 else False
    out = n.out_shape()
    _static_dims(x, n)
    if not all(isinstance(d, int) for d in out):
        raise n.error("upsampling needs static sizes")
    for k, axis in enumerate((x.ndim - 2, x.ndim - 1)):
        size, o = int(x.shape[axis]), int(out[axis])
        if size != o or mode == "bilinear" and not align and \
                _upsample_scale(n, k, size, o) != 1.0:
            x = _upsample_axis(g, x, axis, o, _upsample_scale(n, k, size, o), mode, align)
    return x


# ---------------------------------------------------------------------------- sorting

@converter("aten.topk.default", needs=["topk"])
def _topk(g: Graph, n: TNode) -> list[Value | None]:
    x = n.args[0]
    k = n.args[1]
    if not isinstance(k, int):
        raise n.error("topk needs a static k")
    axis = _axis(int(n.arg(2, "dim", -1)), x.ndim)
    largest = bool(n.arg(3, "largest", True))
    both = g.call("topk", x, k=k, axis=axis, ret_type="both", is_ascend=not largest,
                  dtype="int64")
    return [g.item(both, 0), g.item(both, 1)]


@converter("aten.sort.default", "aten.sort.stable", needs=["sort", "argsort"])
def _sort(g: Graph, n: TNode) -> list[Value | None]:
    x = n.args[0]
    if n.target == "aten.sort.stable":
        dim, desc = n.kwargs.get("dim", -1), bool(n.kwargs.get("descending", False))
    else:
        dim, desc = n.arg(1, "dim", -1), bool(n.arg(2, "descending", False))
    axis = _axis(int(dim), x.ndim)
    out: list[Value | None] = [None, None]
    if 0 in n.used_outputs or not n.used_outputs:
        out[0] = g.call("sort", x, axis=axis, is_ascend=not desc)
    if 1 in n.used_outputs:
        out[1] = g.call("argsort", x, axis=axis, is_ascend=not desc, dtype="int64")
    return out
