"""Converters from ONNX operators (default domain, opsets 11-21) to relay_ir operators:
elementwise math, activations, reductions and the shape operators, and the helpers the other
converter modules share.

Each converter takes the :class:`~relay_ir.frontend.onnx.Graph` and the
:class:`~relay_ir.frontend.onnx.Node` and returns the node's output value(s). Attributes
that moved to inputs across opsets (Squeeze/Unsqueeze/Reduce* axes, Split sizes, Pad pads,
Clip bounds) are read from either place. Only operators that map onto existing relay_ir
operators are here (:mod:`~relay_ir.frontend.onnx_nn`: matmul, convolution, pooling,
normalization; :mod:`~relay_ir.frontend.onnx_extra`: composites, quantization, operators with
known indices); docs/frontend_onnx.md lists them.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.frontend.onnx import RLY_DTYPES, Graph, Node, OnnxImportError, Value, converter


def _axis(a: int, ndim: int, node: Node) -> int:
    if not -ndim <= a < max(ndim, 1):
        raise node.error(f"axis {a} is out of range for rank {ndim}")
    return a + ndim if a < 0 else a


def _ints(v: Any) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _static_shape(x: Value, node: Node, what: str = "input") -> tuple[int, ...]:
    for d in x.shape:
        if not isinstance(d, int):
            raise node.error(f"the {what} needs a static shape, found {x.ty}")
    return tuple(int(d) for d in x.shape)


def _scalar(g: Graph, v: float, like: Value) -> Value:
    return g.const(np.asarray(v, dtype=like.dtype))


def _float(x: Value) -> bool:
    return x.dtype.startswith(("float", "bfloat"))


def _broadcast_shapes(a: Sequence[Any], b: Sequence[Any], n: Node) -> list[int]:
    try:
        return [int(d) for d in np.broadcast_shapes(tuple(a), tuple(b))]
    except (TypeError, ValueError):
        raise n.error(f"cannot broadcast {tuple(a)} with {tuple(b)} statically") from None


def _channel_shape(x: Value) -> list[int]:
    return [-1] + [1] * (x.ndim - 2)


def _onnx_dtype(code: int, n: Node) -> str:
    from onnx import helper
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))
    except Exception:
        raise n.error(f"unsupported element type {code}") from None
    name = "bool" if dt == np.bool_ else dt.name
    if name not in RLY_DTYPES:
        raise n.error(f"unsupported element type {name}")
    return name


def _iota(n: int, axis: int, rank: int, dtype: str) -> np.ndarray:
    """``0 .. n-1`` laid along ``axis`` of a rank-``rank`` array of ones elsewhere."""
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n, dtype=dtype).reshape(shape)


def _strides(shape: Sequence[int]) -> list[int]:
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * shape[i + 1]
    return out


def _take_flat(g: Graph, x: Value, index: np.ndarray) -> Value:
    """``x.reshape(-1)[index]`` with a constant index array."""
    return g.call("take", g.call("reshape", x, newshape=[-1]),
                  g.const(np.asarray(index, dtype=np.int64)), axis=0)


def _unary(rly_op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        return g.call(rly_op, n.inputs[0])
    return conv


for _onnx, _rly in {
    "Abs": "abs", "Acos": "acos", "Acosh": "acosh", "Asin": "asin", "Asinh": "asinh",
    "Atan": "atan", "Atanh": "atanh", "Ceil": "ceil", "Cos": "cos", "Cosh": "cosh",
    "Exp": "exp", "Floor": "floor", "Log": "log", "Neg": "negative", "Sigmoid": "sigmoid",
    "Sign": "sign", "Sin": "sin", "Sinh": "sinh", "Sqrt": "sqrt", "Tan": "tan", "Tanh": "tanh",
    "Relu": "nn.relu", "Not": "logical_not", "IsNaN": "isnan",
    "BitwiseNot": "bitwise_not", "Erf": "erf",
}.items():
    converter(_onnx)(_unary(_rly))


def _binary(rly_op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        return g.call(rly_op, n.inputs[0], n.inputs[1])
    return conv


for _onnx, _rly in {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
    "Equal": "equal", "Greater": "greater", "Less": "less", "GreaterOrEqual": "greater_equal",
    "LessOrEqual": "less_equal", "And": "logical_and", "Or": "logical_or",
    "Xor": "logical_xor", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}.items():
    converter(_onnx)(_binary(_rly))


@converter("Pow")
def _pow(g: Graph, n: Node) -> Value:
    x, y = n.inputs[0], n.inputs[1]
    if y.dtype != x.dtype:
        y = g.call("cast", y, dtype=x.dtype)
    return g.call("power", x, y)


@converter("Mod")
def _mod(g: Graph, n: Node) -> Value:
    op = "mod" if n.attr("fmod", 0) else "floor_mod"
    return g.call(op, n.inputs[0], n.inputs[1])


@converter("Round")
def _round(g: Graph, n: Node) -> Value:
    return _round_even(g, n.inputs[0])


def _round_even(g: Graph, x: Value) -> Value:
    """ONNX rounds halves to even; relay_ir's ``round`` rounds them away from zero."""
    r = g.call("round", x)
    half = g.call("equal", g.call("abs", g.call("subtract", x, g.call("trunc", x))),
                  _scalar(g, 0.5, x))
    two = _scalar(g, 2, x)
    even = g.call("multiply", two, g.call("round", g.call("divide", x, two)))
    return g.call("where", half, even, r)


@converter("Reciprocal")
def _reciprocal(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    return g.call("divide", _scalar(g, 1, x), x)


@converter("IsInf")
def _isinf(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    neg, pos = n.attr("detect_negative", 1), n.attr("detect_positive", 1)
    inf = g.call("isinf", x)
    if neg and pos:
        return inf
    zero = _scalar(g, 0, x)
    if pos:
        return g.call("logical_and", inf, g.call("greater", x, zero))
    if neg:
        return g.call("logical_and", inf, g.call("less", x, zero))
    return g.call("logical_and", inf, g.call("logical_not", inf))


def _variadic(rly_op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        xs = [v for v in n.inputs if v is not None]
        out = xs[0]
        for x in xs[1:]:
            out = g.call(rly_op, out, x)
        if len(xs) == 1:
            out = g.call("copy", out)
        return out
    return conv


converter("Sum")(_variadic("add"))


converter("Max")(_variadic("maximum"))


converter("Min")(_variadic("minimum"))


@converter("Mean")
def _mean(g: Graph, n: Node) -> Value:
    s = _variadic("add")(g, n)
    return g.call("divide", s, _scalar(g, len([v for v in n.inputs if v is not None]), s))


@converter("LeakyRelu")
def _leaky_relu(g: Graph, n: Node) -> Value:
    return g.call("nn.leaky_relu", n.inputs[0], alpha=float(n.attr("alpha", 0.01)))


@converter("Gelu")
def _gelu(g: Graph, n: Node) -> Value:
    mode = n.attr("approximate", "none")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("none", "tanh"):
        raise OnnxImportError(f"Gelu: approximate must be 'none' or 'tanh', not {mode!r}")
    return g.call("nn.gelu", n.inputs[0], approximate=mode)


@converter("Elu")
def _elu(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    a = _scalar(g, n.attr("alpha", 1.0), x)
    neg = g.call("multiply", a, g.call("subtract", g.call("exp", x), _scalar(g, 1, x)))
    return g.call("where", g.call("less", x, _scalar(g, 0, x)), neg, x)


@converter("Celu")
def _celu(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    a = _scalar(g, n.attr("alpha", 1.0), x)
    e = g.call("subtract", g.call("exp", g.call("divide", x, a)), _scalar(g, 1, x))
    zero = _scalar(g, 0, x)
    return g.call("add", g.call("maximum", x, zero),
                  g.call("minimum", zero, g.call("multiply", a, e)))


@converter("Selu")
def _selu(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    a = _scalar(g, n.attr("alpha", 1.67326319217681884765625), x)
    gamma = _scalar(g, n.attr("gamma", 1.05070102214813232421875), x)
    neg = g.call("subtract", g.call("multiply", a, g.call("exp", x)), a)
    y = g.call("where", g.call("less_equal", x, _scalar(g, 0, x)), neg, x)
    return g.call("multiply", gamma, y)


@converter("Softplus")
def _softplus(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    return g.call("log", g.call("add", g.call("exp", x), _scalar(g, 1, x)))


@converter("Softsign")
def _softsign(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    return g.call("divide", x, g.call("add", g.call("abs", x), _scalar(g, 1, x)))


@converter("HardSigmoid")
def _hard_sigmoid(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    y = g.call("add", g.call("multiply", x, _scalar(g, n.attr("alpha", 0.2), x)),
               _scalar(g, n.attr("beta", 0.5), x))
    return g.call("clip", y, a_min=0.0, a_max=1.0)


@converter("HardSwish")
def _hard_swish(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    y = g.call("add", g.call("multiply", x, _scalar(g, 1 / 6, x)), _scalar(g, 0.5, x))
    return g.call("multiply", x, g.call("clip", y, a_min=0.0, a_max=1.0))


@converter("ThresholdedRelu")
def _thresholded_relu(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    cond = g.call("greater", x, _scalar(g, n.attr("alpha", 1.0), x))
    return g.call("where", cond, x, _scalar(g, 0, x))


@converter("PRelu")
def _prelu(g: Graph, n: Node) -> Value:
    x, slope = n.inputs[0], n.inputs[1]
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        # NOTE: a per-channel slope as older exporters write it (channel axis 1)
        slope = g.call("reshape", slope, newshape=_channel_shape(x))
    cond = g.call("less", x, _scalar(g, 0, x))
    return g.call("where", cond, g.call("multiply", x, slope), x)


@converter("Mish")
def _mish(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    sp = g.call("log", g.call("add", g.call("exp", x), _scalar(g, 1, x)))
    return g.call("multiply", x, g.call("tanh", sp))


@converter("Shrink")
def _shrink(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    lam, bias = n.attr("lambd", 0.5), n.attr("bias", 0.0)
    lo = g.call("less", x, _scalar(g, -lam, x))
    hi = g.call("greater", x, _scalar(g, lam, x))
    zero = _scalar(g, 0, x)
    return g.call("where", lo, g.call("add", x, _scalar(g, bias, x)),
                  g.call("where", hi, g.call("subtract", x, _scalar(g, bias, x)), zero))


@converter("Clip")
def _clip(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    if n.opset < 11:
        lo, hi = n.attr("min"), n.attr("max")
        lo_v = None if lo is None else _scalar(g, lo, x)
        hi_v = None if hi is None else _scalar(g, hi, x)
    else:
        lo_v, hi_v = n.input(1), n.input(2)
    out = x
    if lo_v is not None:
        out = g.call("maximum", out, lo_v)
    if hi_v is not None:
        out = g.call("minimum", out, hi_v)
    return out if out is not x else g.call("copy", x)


def _softmax_like(rly_op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        x = n.inputs[0]
        if n.opset >= 13:
            return g.call(rly_op, x, axis=_axis(n.attr("axis", -1), x.ndim, n))
        # NOTE: before opset 13 the input is coerced to 2-D at ``axis``
        axis = _axis(n.attr("axis", 1), x.ndim, n)
        shp = _static_shape(x, n)
        flat = g.call("reshape", x, newshape=[int(np.prod(shp[:axis])), -1])
        y = g.call(rly_op, flat, axis=-1)
        return g.call("reshape", y, newshape=list(shp))
    return conv


converter("Softmax")(_softmax_like("nn.softmax"))


converter("LogSoftmax")(_softmax_like("nn.log_softmax"))


def _reduce_axes(g: Graph, n: Node, x: Value, axes_from_input: bool) -> list[int] | None:
    if axes_from_input:
        v = n.static(1, "axes")
        axes = None if v is None else _ints(v)
    else:
        a = n.attr("axes")
        axes = None if a is None else [int(i) for i in a]
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None:
        if n.attr("noop_with_empty_axes", 0):
            return []
        return list(range(x.ndim))
    return sorted(_axis(a, x.ndim, n) for a in axes)


def _limit(dt: np.dtype, high: bool) -> Any:
    if dt.kind == "f":
        return np.inf if high else -np.inf
    info = np.iinfo(dt) if dt.kind in "iu" else None
    return (info.max if high else info.min) if info is not None else high


_EMPTY = {"sum": lambda dt: 0, "mean": lambda dt: np.nan, "prod": lambda dt: 1,
          "max": lambda dt: _limit(dt, False), "min": lambda dt: _limit(dt, True)}


def _reduce(rly_op: str, pre: str | None = None, post: str | None = None,
            input_from: int = 18):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        x = n.inputs[0]
        axes = _reduce_axes(g, n, x, n.opset >= input_from)
        keep = bool(n.attr("keepdims", 1))
        if pre == "abs":
            x = g.call("abs", x)
        elif pre == "square":
            x = g.call("multiply", x, x)
        elif pre == "exp":
            x = g.call("exp", x)
        if not axes:
            y = g.call("copy", x)
        elif any(x.shape[a] == 0 for a in axes) and all(isinstance(d, int) for d in x.shape):
            # NOTE: an empty reduction is the operation's identity (max: -inf, min: inf)
            shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
            y = g.const(np.full(shape, _EMPTY[rly_op](np.dtype(x.dtype)), dtype=x.dtype))
        else:
            y = g.call(rly_op, x, axis=axes, keepdims=keep)
        if post == "sqrt":
            y = g.call("sqrt", y)
        elif post == "log":
            y = g.call("log", y)
        return y
    return conv


converter("ReduceSum")(_reduce("sum", input_from=13))


converter("ReduceMean")(_reduce("mean"))


converter("ReduceMax")(_reduce("max"))


converter("ReduceMin")(_reduce("min"))


converter("ReduceProd")(_reduce("prod"))


converter("ReduceL1")(_reduce("sum", pre="abs"))


converter("ReduceL2")(_reduce("sum", pre="square", post="sqrt"))


converter("ReduceSumSquare")(_reduce("sum", pre="square"))


converter("ReduceLogSum")(_reduce("sum", post="log"))


converter("ReduceLogSumExp")(_reduce("sum", pre="exp", post="log"))


def _arg(rly_op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        x = n.inputs[0]
        y = g.call(rly_op, x, axis=[_axis(n.attr("axis", 0), x.ndim, n)],
                   keepdims=bool(n.attr("keepdims", 1)),
                   select_last_index=bool(n.attr("select_last_index", 0)))
        return g.call("cast", y, dtype="int64")
    return conv


converter("ArgMax")(_arg("argmax"))


converter("ArgMin")(_arg("argmin"))


@converter("Cast")
def _cast(g: Graph, n: Node) -> Value:
    return g.call("cast", n.inputs[0], dtype=_onnx_dtype(n.attr("to"), n))


@converter("CastLike")
def _cast_like(g: Graph, n: Node) -> Value:
    return g.call("cast", n.inputs[0], dtype=n.inputs[1].dtype)


@converter("Identity")
def _identity(g: Graph, n: Node) -> Value:
    return n.inputs[0]


@converter("Dropout")
def _dropout(g: Graph, n: Node) -> list[Value]:
    x = n.inputs[0]
    training = n.static(2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        ratio = n.static(1, "ratio")
        if ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
            raise n.error("training_mode=True with a nonzero ratio is not supported (random)")
    outs = [x]
    if n.num_outputs > 1:
        outs.append(g.const(np.ones(_static_shape(x, n), dtype=bool)))
    return outs


@converter("Constant")
def _constant(g: Graph, n: Node) -> Value:
    from onnx import numpy_helper
    a = n.attrs
    if "value" in a:
        return g.const(numpy_helper.to_array(a["value"]))
    if "value_float" in a:
        return g.const(np.float32(a["value_float"]))
    if "value_floats" in a:
        return g.const(np.asarray(a["value_floats"], dtype=np.float32))
    if "value_int" in a:
        return g.const(np.int64(a["value_int"]))
    if "value_ints" in a:
        return g.const(np.asarray(a["value_ints"], dtype=np.int64))
    raise n.error(f"unsupported Constant attribute(s) {sorted(a)}")


@converter("ConstantOfShape")
def _constant_of_shape(g: Graph, n: Node) -> Value:
    from onnx import numpy_helper
    shp = _ints(n.static(0, "shape"))
    v = n.attrs.get("value")
    fill = numpy_helper.to_array(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    return g.const(np.full(shp, fill[0], dtype=fill.dtype))


@converter("Shape")
def _shape(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    start = n.attr("start", 0)
    end = n.attr("end", None)
    dims = list(x.shape)[slice(start, end)]
    if all(isinstance(d, int) for d in dims):
        return g.const(np.asarray(dims, dtype=np.int64))
    s = g.call("shape_of", x, dtype="int64")
    if start == 0 and end is None:
        return s
    b, e, _ = slice(start, end).indices(x.ndim)
    return g.call("strided_slice", s, begin=[b], end=[max(e, b)])


@converter("Size")
def _size(g: Graph, n: Node) -> Value:
    shp = _static_shape(n.inputs[0], n)
    return g.const(np.int64(int(np.prod(shp))))


@converter("Reshape")
def _reshape(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    shp = _ints(n.static(1, "shape"))
    return g.call("reshape", x, newshape=shp, allowzero=bool(n.attr("allowzero", 0)))


@converter("Flatten")
def _flatten(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    axis = n.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    before, after = x.shape[:axis], x.shape[axis:]
    if all(isinstance(d, int) for d in after) and (axis > 0 or not before):
        return g.call("reshape", x, newshape=[-1 if axis else 1, int(np.prod(after))])
    if all(isinstance(d, int) for d in before):
        return g.call("reshape", x, newshape=[int(np.prod(before)), -1])
    raise n.error(f"Flatten at axis {axis} needs static dims on one side, found {x.ty}")


@converter("Transpose")
def _transpose(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    perm = n.attr("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    return g.call("transpose", x, axes=perm)


def _axes_arg(n: Node, k: int, attr_before: int) -> list[int] | None:
    if n.opset < attr_before:
        a = n.attr("axes")
        return None if a is None else [int(i) for i in a]
    v = n.static(k, "axes")
    return None if v is None else _ints(v)


@converter("Squeeze")
def _squeeze(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    axes = _axes_arg(n, 1, 13)
    if axes is None:
        return g.call("squeeze", x)
    return g.call("squeeze", x, axis=sorted(_axis(a, x.ndim, n) for a in axes))


@converter("Unsqueeze")
def _unsqueeze(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    axes = _axes_arg(n, 1, 13) or []
    out_rank = x.ndim + len(axes)
    for a in sorted(_axis(a, out_rank, n) for a in axes):
        x = g.call("expand_dims", x, axis=a)
    return x


@converter("Concat")
def _concat(g: Graph, n: Node) -> Value:
    xs = [v for v in n.inputs if v is not None]
    xs = [v for v in xs if not (v.ndim == 1 and v.shape[0] == 0)] or xs[:1]
    return g.call("concatenate", xs, axis=_axis(n.attr("axis"), xs[0].ndim, n))


@converter("Split")
def _split(g: Graph, n: Node) -> list[Value]:
    x = n.inputs[0]
    axis = _axis(n.attr("axis", 0), x.ndim, n)
    if n.opset < 13:
        sizes = n.attr("split")
        sizes = None if sizes is None else [int(s) for s in sizes]
    else:
        v = n.static(1, "split")
        sizes = None if v is None else _ints(v)
    d = x.shape[axis]
    if sizes is None:
        k = n.attr("num_outputs", n.num_outputs)
        if not isinstance(d, int):
            raise n.error("an even split needs a static size along the axis")
        part = -(-d // k)
        sizes = [min(part, d - i * part) for i in range(k)]
    if len(sizes) == 1:
        return [g.call("copy", x)]
    idx = list(np.cumsum(sizes)[:-1])
    tup = g.call("split", x, indices_or_sections=[int(i) for i in idx], axis=axis)
    return [g.item(tup, i) for i in range(len(sizes))]


@converter("Slice")
def _slice(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    if n.opset < 10:
        starts, ends = list(n.attr("starts")), list(n.attr("ends"))
        axes = n.attr("axes")
        steps = None
    else:
        if n.inputs[1].value is None or n.inputs[2].value is None:
            return _dyn_slice(g, n)
        starts = _ints(n.static(1, "starts"))
        ends = _ints(n.static(2, "ends"))
        av, sv = n.static(3, "axes"), n.static(4, "steps")
        axes = None if av is None else _ints(av)
        steps = None if sv is None else _ints(sv)
    axes = list(range(len(starts))) if axes is None else [_axis(a, x.ndim, n) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    begin, end = [], []
    for a, b, e, s in zip(axes, starts, ends, steps):
        d = x.shape[a]
        if isinstance(d, int):
            # NOTE: clamp to the dim (ONNX ends may be INT64_MAX); for a negative step an end
            # of -1 after ``indices`` means "before 0", written -(d + 1)
            b, e, _ = slice(b, e, s).indices(d)
            if s < 0 and e < 0:
                e = -(d + 1)
        begin.append(b)
        end.append(e)
    return g.call("strided_slice", x, begin=begin, end=end, strides=steps, axes=axes)


def _dyn_slice(g: Graph, n: Node) -> Value:
    """Slice with starts/ends known only at run time (a Loop's iteration number): a
    ``dyn.strided_slice`` over the leading axes up to the last sliced one (the others whole);
    axes and steps must be static. The sliced dims become ``?``."""
    x = n.inputs[0]
    k = int(n.inputs[1].shape[0]) if isinstance(n.inputs[1].shape[0], int) else None
    if k is None:
        raise n.error("starts of unknown length")
    av, sv = n.static(3, "axes"), n.static(4, "steps")
    axes = list(range(k)) if av is None else [_axis(a, x.ndim, n) for a in _ints(av)]
    steps = [1] * k if sv is None else _ints(sv)
    if len(set(axes)) != len(axes) or len(axes) != k or len(steps) != k:
        raise n.error("starts, ends, axes and steps must have one length, axes distinct")
    big = np.iinfo(np.int64).max
    parts: dict[str, list[Value]] = {"begin": [], "end": []}
    for which, inp, default in (("begin", n.inputs[1], 0), ("end", n.inputs[2], big)):
        v = inp if inp.dtype == "int64" else g.call("cast", inp, dtype="int64")
        for d in range(max(axes) + 1):
            if d in axes:
                j = axes.index(d)
                parts[which].append(g.call("strided_slice", v, begin=[j], end=[j + 1]))
            else:
                parts[which].append(g.const(np.array([default], dtype="int64")))
    strides = [steps[axes.index(d)] if d in axes else 1 for d in range(max(axes) + 1)]
    begin = g.call("concatenate", parts["begin"], axis=0)
    end = g.call("concatenate", parts["end"], axis=0)
    return g.call("dyn.strided_slice", x, begin, end, g.const(np.array(strides, dtype="int64")))


@converter("Gather")
def _gather(g: Graph, n: Node) -> Value:
    x, idx = n.inputs[0], n.inputs[1]
    axis = _axis(n.attr("axis", 0), x.ndim, n)
    d = x.shape[axis]
    if idx.is_const and isinstance(d, int):
        arr = np.asarray(idx.value).astype(np.int64)
        idx = g.const(np.where(arr < 0, arr + d, arr))
    else:
        # NOTE: negative indices count from the end (take's clip mode would clamp them to 0)
        size = g.call("take", g.call("shape_of", x, dtype=idx.dtype), g.const(
            np.asarray(axis, dtype=idx.dtype)), axis=0)
        neg = g.call("less", idx, _scalar(g, 0, idx))
        idx = g.call("where", neg, g.call("add", idx, size), idx)
    return g.call("take", x, idx, axis=axis)


@converter("Expand")
def _expand(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    shp = _ints(n.static(1, "shape"))
    xs = _static_shape(x, n)
    return g.call("broadcast_to", x, shape=_broadcast_shapes(xs, shp, n))


@converter("Tile")
def _tile(g: Graph, n: Node) -> Value:
    return g.call("tile", n.inputs[0], reps=_ints(n.static(1, "repeats")))


@converter("Pad")
def _pad(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    mode = n.attr("mode", "constant")
    if n.opset < 11:
        pads = [int(p) for p in n.attr("pads")]
        cval: Value = _scalar(g, n.attr("value", 0.0), x)
    else:
        pads = _ints(n.static(1, "pads"))
        cv = n.input(2)
        cval = _scalar(g, 0, x) if cv is None else cv
        if cval.ndim:
            cval = g.call("reshape", cval, newshape=[])
    av = n.static(3, "axes") if n.opset >= 18 else None
    axes = list(range(x.ndim)) if av is None else [_axis(a, x.ndim, n) for a in _ints(av)]
    k = len(axes)
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + k]]
    if any(p < 0 for w in width for p in w):
        raise n.error("negative pads are not supported")
    if mode == "wrap":
        # NOTE: wrap-around padding as slices of the other end, concatenated
        for a, (before, after) in enumerate(width):
            if not before and not after:
                continue
            d = x.shape[a]
            if not isinstance(d, int) or before > d or after > d:
                raise n.error("wrap padding needs a static dim at least as large as the pads")
            parts = []
            if before:
                parts.append(g.call("strided_slice", x, begin=[d - before], end=[d], axes=[a]))
            parts.append(x)
            if after:
                parts.append(g.call("strided_slice", x, begin=[0], end=[after], axes=[a]))
            x = g.call("concatenate", parts, axis=a)
        return x
    if mode not in ("constant", "reflect", "edge"):
        raise n.error(f"pad mode {mode!r} is not supported")
    return g.call("nn.pad", x, cval, pad_width=width, pad_mode=mode)


@converter("Where")
def _where(g: Graph, n: Node) -> Value:
    return g.call("where", n.inputs[0], n.inputs[1], n.inputs[2])


@converter("Range")
def _range(g: Graph, n: Node) -> Value:
    start, limit, delta = (np.asarray(n.static(i, "start/limit/delta")).reshape(())
                           for i in range(3))
    return g.call("arange", start=float(start), stop=float(limit), step=float(delta),
                  dtype=_np_dtype_name(start.dtype))


def _np_dtype_name(dt: Any) -> str:
    return "bool" if np.dtype(dt) == np.bool_ else np.dtype(dt).name


@converter("EyeLike")
def _eye_like(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    shp = _static_shape(x, n)
    dt = x.dtype if n.attr("dtype") is None else _onnx_dtype(n.attr("dtype"), n)
    return g.const(np.eye(shp[0], shp[1], k=int(n.attr("k", 0)), dtype=dt))


@converter("Trilu")
def _trilu(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    shp = _static_shape(x, n)
    kv = n.static(1, "k")
    k = 0 if kv is None else int(np.asarray(kv).reshape(-1)[0])
    ones = np.ones(shp[-2:], dtype=bool)
    mask = np.triu(ones, k) if n.attr("upper", 1) else np.tril(ones, k)
    return g.call("where", g.const(mask), x, _scalar(g, 0, x))


@converter("DepthToSpace", "SpaceToDepth")
def _depth_space(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    b, c, h, w = _static_shape(x, n)
    bs = int(n.attr("blocksize"))
    if n.op_type == "SpaceToDepth":
        y = g.call("reshape", x, newshape=[b, c, h // bs, bs, w // bs, bs])
        y = g.call("transpose", y, axes=[0, 3, 5, 1, 2, 4])
        return g.call("reshape", y, newshape=[b, c * bs * bs, h // bs, w // bs])
    if n.attr("mode", "DCR") == "DCR":
        y = g.call("reshape", x, newshape=[b, bs, bs, c // (bs * bs), h, w])
        y = g.call("transpose", y, axes=[0, 3, 4, 1, 5, 2])
    else:
        y = g.call("reshape", x, newshape=[b, c // (bs * bs), bs, bs, h, w])
        y = g.call("transpose", y, axes=[0, 1, 4, 2, 5, 3])
    return g.call("reshape", y, newshape=[b, c // (bs * bs), h * bs, w * bs])


@converter("Swish")
def _swish(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    return g.call("multiply", x, g.call("sigmoid", g.call("multiply", x, _scalar(
        g, n.attr("alpha", 1.0), x))))
