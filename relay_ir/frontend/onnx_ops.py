"""Converters from ONNX operators (default domain, opsets 11-21) to relay_ir operators.

Each converter takes the :class:`~relay_ir.frontend.onnx.Graph` and the
:class:`~relay_ir.frontend.onnx.Node` and returns the node's output value(s). Attributes
that moved to inputs across opsets (Squeeze/Unsqueeze/Reduce* axes, Split sizes, Pad pads,
Clip bounds) are read from either place. Only operators that map onto existing relay_ir
operators are here; docs/frontend_onnx.md lists them.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.frontend.onnx import RLY_DTYPES, Graph, Node, Value, converter


# ---------------------------------------------------------------------------- helpers


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
    "BitwiseNot": "bitwise_not",
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


# ---------------------------------------------------------------------------- activations

@converter("LeakyRelu")
def _leaky_relu(g: Graph, n: Node) -> Value:
    return g.call("nn.leaky_relu", n.inputs[0], alpha=float(n.attr("alpha", 0.01)))


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


# ---------------------------------------------------------------------------- matmul / conv

@converter("Gemm")
def _gemm(g: Graph, n: Node) -> Value:
    a, b = n.inputs[0], n.inputs[1]
    c = n.input(2)
    y = g.call("nn.matmul", a, b, transpose_a=bool(n.attr("transA", 0)),
               transpose_b=bool(n.attr("transB", 0)))
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        y = g.call("multiply", y, _scalar(g, alpha, y))
    if c is not None:
        if beta != 1.0:
            c = g.call("multiply", c, _scalar(g, beta, c))
        y = g.call("add", y, c)
    return y


@converter("MatMul")
def _matmul(g: Graph, n: Node) -> Value:
    return _matmul_values(g, n, n.inputs[0], n.inputs[1])


def _matmul_values(g: Graph, n: Node, a: Value, b: Value) -> Value:
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1:
        a = g.call("expand_dims", a, axis=0)
    if b1:
        b = g.call("expand_dims", b, axis=1)
    if a.ndim == 2 and b.ndim == 2:
        y = g.call("nn.matmul", a, b)
    elif b.ndim == 2:
        k = b.shape[0]
        lead = a.shape[:-1]
        flat = g.call("reshape", a, newshape=[-1, k if isinstance(k, int) else -1])
        y = g.call("nn.matmul", flat, b)
        y = g.call("reshape", y, newshape=[*_dims_or_copy(lead), b.shape[1]])
    else:
        batch = _broadcast_shapes(a.shape[:-2], b.shape[:-2], n)
        a3 = _to_batch3(g, a, batch, n)
        b3 = _to_batch3(g, b, batch, n)
        y = g.call("nn.batch_matmul", a3, b3, transpose_b=False)
        y = g.call("reshape", y, newshape=[*batch, a.shape[-2], b.shape[-1]])
    if a1:
        y = g.call("squeeze", y, axis=[y.ndim - 2])
    if b1:
        y = g.call("squeeze", y, axis=[y.ndim - 1])
    return y


def _dims_or_copy(dims: Sequence[Any]) -> list[int]:
    # NOTE: reshape's 0 copies the input's dim at that position (leading dims line up)
    return [d if isinstance(d, int) else 0 for d in dims]


def _to_batch3(g: Graph, x: Value, batch: Sequence[int], n: Node) -> Value:
    shp = _static_shape(x, n, "MatMul operand")
    full = [*batch, *shp[-2:]]
    if list(shp) != full:
        x = g.call("broadcast_to", x, shape=full)
    return g.call("reshape", x, newshape=[-1, shp[-2], shp[-1]])


def _broadcast_shapes(a: Sequence[Any], b: Sequence[Any], n: Node) -> list[int]:
    try:
        return [int(d) for d in np.broadcast_shapes(tuple(a), tuple(b))]
    except (TypeError, ValueError):
        raise n.error(f"cannot broadcast {tuple(a)} with {tuple(b)} statically") from None


def _spatial(x: Value, n: Node, kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> list[int]:
    """Pads [begin..., end...] from ``pads`` or ``auto_pad``."""
    k = len(kernel)
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(n.attr("pads", [0] * (2 * k)))
    if auto == "VALID":
        return [0] * (2 * k)
    shp = _static_shape(x, n)[2:]
    begin, end = [], []
    for i in range(k):
        out = -(-shp[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - shp[i])
        small, big = total // 2, total - total // 2
        if auto == "SAME_UPPER":
            begin.append(small)
            end.append(big)
        else:
            begin.append(big)
            end.append(small)
    return begin + end


def _as_2d(g: Graph, x: Value, n: Node) -> tuple[Value, bool]:
    """A rank-3 (1-D spatial) input as rank 4 with H = 1; rank 4 as is."""
    if x.ndim == 3:
        return g.call("expand_dims", x, axis=2), True
    if x.ndim == 4:
        return x, False
    raise n.error(f"only 1-D and 2-D {n.op_type} is supported (input rank {x.ndim})")


@converter("Conv")
def _conv(g: Graph, n: Node) -> Value:
    return _conv_values(g, n, n.inputs[0], n.inputs[1], n.input(2))


def _conv_values(g: Graph, n: Node, x: Value, w: Value, b: Value | None) -> Value:
    kernel = list(n.attr("kernel_shape", _static_shape(w, n, "weight")[2:]))
    k = len(kernel)
    strides = list(n.attr("strides", [1] * k))
    dil = list(n.attr("dilations", [1] * k))
    pads = _spatial(x, n, kernel, strides, dil)
    if x.ndim == 5:
        y = _conv3d(g, n, x, w, kernel, strides, dil, pads)
        return y if b is None else g.call("nn.bias_add", y, b, axis=1)
    x4, one_d = _as_2d(g, x, n)
    if one_d:
        w = g.call("expand_dims", w, axis=2)
        strides, dil, kernel = [1] + strides, [1] + dil, [1] + kernel
        pads = [0, pads[0], 0, pads[1]]
    else:
        pads = [pads[0], pads[1], pads[2], pads[3]]
    y = g.call("nn.conv2d", x4, w, strides=strides, padding=pads, dilation=dil,
               groups=int(n.attr("group", 1)), kernel_size=kernel)
    if b is not None:
        y = g.call("nn.bias_add", y, b, axis=1)
    if one_d:
        y = g.call("squeeze", y, axis=[2])
    return y


@converter("ConvTranspose")
def _conv_transpose(g: Graph, n: Node) -> Value:
    """The adjoint of a convolution: ``nn.conv2d_backward_data`` with the output's shape
    given by a ``zeros`` of that shape (ONNX's W is (C_in, C_out / group, kH, kW), the
    forward convolution's OIHW weight)."""
    x, w = n.inputs[0], n.inputs[1]
    b = n.input(2)
    wshape = _static_shape(w, n, "weight")
    kernel = list(n.attr("kernel_shape", wshape[2:]))
    k = len(kernel)
    if k not in (1, 2) or x.ndim != k + 2:
        raise n.error(f"only 1-D and 2-D ConvTranspose is supported (input rank {x.ndim})")
    xs = _static_shape(x, n)
    strides = list(n.attr("strides", [1] * k))
    dil = list(n.attr("dilations", [1] * k))
    outpad = list(n.attr("output_padding", [0] * k))
    group = int(n.attr("group", 1))
    natural = [strides[i] * (xs[2 + i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1
               for i in range(k)]
    auto = n.attr("auto_pad", "NOTSET")
    out_shape = n.attr("output_shape")
    extra = [0] * k
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = list(out_shape)[-k:] if out_shape is not None else \
            [xs[2 + i] * strides[i] for i in range(k)]
        begin, end = [], []
        for i in range(k):
            total = natural[i] - want[i]
            if total < 0:  # NOTE: rows past the last tap: zeros (plus the bias)
                extra[i] = -total
                total = 0
            small, big = total // 2, total - total // 2
            if auto == "SAME_UPPER":
                begin.append(small)
                end.append(big)
            else:
                begin.append(big)
                end.append(small)
        pads = begin + end
    elif auto == "VALID":
        pads = [0] * (2 * k)
    else:
        pads = list(n.attr("pads", [0] * (2 * k)))
    spatial = [natural[i] - pads[i] - pads[i + k] for i in range(k)]
    out = [xs[0], wshape[1] * group, *spatial]
    if k == 1:
        x = g.call("expand_dims", x, axis=2)
        w = g.call("expand_dims", w, axis=2)
        strides, dil, kernel = [1] + strides, [1] + dil, [1] + kernel
        pads = [0, pads[0], 0, pads[1]]
        out = [out[0], out[1], 1, out[2]]
    like = g.call("zeros", shape=out, dtype=x.dtype)
    y = g.call("nn.conv2d_backward_data", x, w, like, strides=strides, padding=pads,
               dilation=dil, groups=group, kernel_size=kernel)
    if any(extra):
        width = [[0, 0], [0, 0]] + ([[0, 0]] if k == 1 else []) + [[0, e] for e in extra]
        y = g.call("nn.pad", y, _scalar(g, 0, y), pad_width=width)
    if b is not None:
        y = g.call("nn.bias_add", y, b, axis=1)
    if k == 1:
        y = g.call("squeeze", y, axis=[2])
    return y


def _conv3d(g: Graph, n: Node, x: Value, w: Value, kernel: list[int], strides: list[int],
            dil: list[int], pads: list[int]) -> Value:
    """A 3-D convolution as a sum over the kernel's depth of 2-D ones: tap ``kd`` convolves
    the depth slices ``od * stride + kd * dilation`` (of the depth-padded input), batched
    with the output depth folded into the batch."""
    b, c, d, h, wd = _static_shape(x, n)
    o = _static_shape(w, n, "weight")[0]
    groups = int(n.attr("group", 1))
    if pads[0] or pads[3]:
        x = g.call("nn.pad", x, _scalar(g, 0, x),
                   pad_width=[[0, 0], [0, 0], [pads[0], pads[3]], [0, 0], [0, 0]])
    dp = d + pads[0] + pads[3]
    do = (dp - (kernel[0] - 1) * dil[0] - 1) // strides[0] + 1
    acc: Value | None = None
    for kd in range(kernel[0]):
        start = kd * dil[0]
        xs = g.call("strided_slice", x, begin=[start], end=[start + (do - 1) * strides[0] + 1],
                    strides=[strides[0]], axes=[2])
        xs = g.call("transpose", xs, axes=[0, 2, 1, 3, 4])
        xs = g.call("reshape", xs, newshape=[b * do, c, h, wd])
        wk = g.call("take", w, g.const(np.int64(kd)), axis=2)
        y = g.call("nn.conv2d", xs, wk, strides=strides[1:], dilation=dil[1:],
                   padding=[pads[1], pads[2], pads[4], pads[5]], groups=groups,
                   kernel_size=kernel[1:])
        acc = y if acc is None else g.call("add", acc, y)
    assert acc is not None
    ho, wo = acc.shape[2], acc.shape[3]
    y = g.call("reshape", acc, newshape=[b, do, o, ho, wo])
    return g.call("transpose", y, axes=[0, 2, 1, 3, 4])


def _pool(kind: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        x = n.inputs[0]
        if n.num_outputs > 1:
            raise n.error("the Indices output of MaxPool is not supported")
        kernel = list(n.attr("kernel_shape"))
        k = len(kernel)
        strides = list(n.attr("strides", [1] * k))
        dil = list(n.attr("dilations", [1] * k))
        pads = _spatial(x, n, kernel, strides, dil)
        if x.ndim == 5:
            return _pool3d(g, n, kind, x, kernel, strides, dil, pads)
        x4, one_d = _as_2d(g, x, n)
        if one_d:
            strides, dil, kernel = [1] + strides, [1] + dil, [1] + kernel
            pads = [0, pads[0], 0, pads[1]]
        y = _pool2d(g, n, kind, x4, kernel, strides, dil, pads)
        if one_d:
            y = g.call("squeeze", y, axis=[2])
        return y
    return conv


def _pool2d(g: Graph, n: Node, kind: str, x: Value, kernel: list[int], strides: list[int],
            dil: list[int], pads: list[int]) -> Value:
    attrs: dict[str, Any] = dict(pool_size=kernel, strides=strides, dilation=dil,
                                 padding=pads, ceil_mode=bool(n.attr("ceil_mode", 0)))
    if kind == "avg":
        attrs["count_include_pad"] = bool(n.attr("count_include_pad", 0))
    y = g.call(f"nn.{kind}_pool2d", x, **attrs)
    if attrs["ceil_mode"]:
        y = _drop_pad_windows(g, x, y, kernel, strides, dil, pads)
    return y


def _pool3d(g: Graph, n: Node, kind: str, x: Value, kernel: list[int], strides: list[int],
            dil: list[int], pads: list[int]) -> Value:
    """A 3-D pool as two 2-D ones: over (H, W), then over D. Max and box averages are
    separable (a window's count of valid elements is the product of its per-axis counts)."""
    b, c, d, h, w = _static_shape(x, n)
    y = g.call("reshape", x, newshape=[b, c * d, h, w])
    y = _pool2d(g, n, kind, y, kernel[1:], strides[1:], dil[1:],
                [pads[1], pads[2], pads[4], pads[5]])
    h2, w2 = y.shape[2], y.shape[3]
    y = g.call("reshape", y, newshape=[b, c, d, h2 * w2])
    y = _pool2d(g, n, kind, y, [kernel[0], 1], [strides[0], 1], [dil[0], 1],
                [pads[0], 0, pads[3], 0])
    return g.call("reshape", y, newshape=[b, c, y.shape[2], h2, w2])


def _drop_pad_windows(g: Graph, x: Value, y: Value, kernel: Sequence[int],
                      strides: Sequence[int], dil: Sequence[int], pads: Sequence[int]) -> Value:
    """ONNX's ceil_mode drops a last window that would start inside the end padding."""
    end = []
    for i in range(2):
        d, o = x.shape[2 + i], y.shape[2 + i]
        if not isinstance(d, int) or not isinstance(o, int):
            return y
        if (o - 1) * strides[i] >= d + pads[i]:
            o -= 1
        end.append(o)
    if list(y.shape[2:]) == end:
        return y
    return g.call("strided_slice", y, begin=[0, 0], end=end, axes=[2, 3])


converter("MaxPool")(_pool("max"))
converter("AveragePool")(_pool("avg"))


def _global_pool(rly_op: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        x = n.inputs[0]
        return g.call(rly_op, x, axis=list(range(2, x.ndim)), keepdims=True)
    return conv


converter("GlobalAveragePool")(_global_pool("mean"))
converter("GlobalMaxPool")(_global_pool("max"))


def _channel_shape(x: Value) -> list[int]:
    return [-1] + [1] * (x.ndim - 2)


@converter("BatchNormalization")
def _batch_norm(g: Graph, n: Node) -> Value | list[Value]:
    x, scale, bias, mean, var = n.inputs[:5]
    eps = float(n.attr("epsilon", 1e-5))
    if n.attr("training_mode", 0):
        return _batch_norm_training(g, n, eps)
    if n.num_outputs > 1:
        raise n.error("the running statistics outputs need training_mode=1")
    y = g.call("nn.batch_norm", x, scale, bias, mean, var, axis=1, epsilon=eps)
    return g.item(y, 0)


def _batch_norm_training(g: Graph, n: Node, eps: float) -> list[Value]:
    """Training form: normalize with the batch statistics; the running ones are updated."""
    x, scale, bias, mean, var = n.inputs[:5]
    axes = [0] + list(range(2, x.ndim))
    cs = _channel_shape(x)
    bmean = g.call("mean", x, axis=axes, keepdims=True)
    bvar = g.call("variance", x, bmean, axis=axes, keepdims=True)
    denom = g.call("sqrt", g.call("add", bvar, _scalar(g, eps, x)))
    y = g.call("divide", g.call("subtract", x, bmean), denom)
    y = g.call("add", g.call("multiply", y, g.call("reshape", scale, newshape=cs)),
               g.call("reshape", bias, newshape=cs))
    mom = float(n.attr("momentum", 0.9))
    outs = [y]
    for run, cur in ((mean, bmean), (var, bvar)):
        cur = g.call("reshape", cur, newshape=[-1])
        outs.append(g.call("add", g.call("multiply", run, _scalar(g, mom, run)),
                           g.call("multiply", cur, _scalar(g, 1 - mom, run))))
    return outs[:n.num_outputs]


def _normalize(g: Graph, x: Value, axes: list[int], eps: float) -> tuple[Value, Value, Value]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes``; also the mean and ``1/sqrt(var+eps)``."""
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("variance", x, mean, axis=axes, keepdims=True)
    denom = g.call("sqrt", g.call("add", var, _scalar(g, eps, x)))
    y = g.call("divide", g.call("subtract", x, mean), denom)
    return y, mean, denom


@converter("InstanceNormalization")
def _instance_norm(g: Graph, n: Node) -> Value:
    x, scale, bias = n.inputs[:3]
    y, _, _ = _normalize(g, x, list(range(2, x.ndim)), float(n.attr("epsilon", 1e-5)))
    cs = _channel_shape(x)
    y = g.call("multiply", y, g.call("reshape", scale, newshape=cs))
    return g.call("add", y, g.call("reshape", bias, newshape=cs))


@converter("LayerNormalization")
def _layer_norm(g: Graph, n: Node) -> list[Value]:
    x, scale = n.inputs[:2]
    bias = n.input(2)
    axis = _axis(n.attr("axis", -1), x.ndim, n)
    y, mean, denom = _normalize(g, x, list(range(axis, x.ndim)), float(n.attr("epsilon", 1e-5)))
    y = g.call("multiply", y, scale)
    if bias is not None:
        y = g.call("add", y, bias)
    inv = g.call("divide", _scalar(g, 1, denom), denom)
    return [y, mean, inv][:n.num_outputs]


# ---------------------------------------------------------------------------- reductions

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


# ---------------------------------------------------------------------------- shapes



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
        raise n.error("training_mode=True is not supported (inference only)")
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
    if mode not in ("constant", "reflect", "edge"):
        raise n.error(f"pad mode {mode!r} is not supported")
    return g.call("nn.pad", x, cval, pad_width=width, pad_mode=mode)


@converter("Where")
def _where(g: Graph, n: Node) -> Value:
    return g.call("where", n.inputs[0], n.inputs[1], n.inputs[2])


@converter("Range")
def _range(g: Graph, n: Node) -> Value:
    start, limit, delta = (n.static(i, "start/limit/delta") for i in range(3))
    return g.const(np.arange(start, limit, delta, dtype=np.asarray(start).dtype))


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




# ---------------------------------------------------------------------------- composites

def _iota(n: int, axis: int, rank: int, dtype: str) -> np.ndarray:
    """``0 .. n-1`` laid along ``axis`` of a rank-``rank`` array of ones elsewhere."""
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n, dtype=dtype).reshape(shape)


def _nll(g: Graph, n: Node, logp: Value, target: Value, weight: Value | None) -> Value:
    """``-logp[n, target[n, ...], ...] * weight[target]`` with ONNX's reductions."""
    c = logp.shape[1]
    if not isinstance(c, int):
        raise n.error(f"the class dim must be static, found {logp.ty}")
    t = g.call("expand_dims", target, axis=1)
    mask = g.call("equal", t, g.const(_iota(c, 1, logp.ndim, target.dtype)))
    picked = g.call("sum", g.call("where", mask, logp, _scalar(g, 0, logp)), axis=[1])
    ignore = n.attr("ignore_index")
    if weight is not None:
        if ignore is not None:
            safe = g.call("where", g.call("equal", target, _scalar(g, ignore, target)),
                          _scalar(g, 0, target), target)
        else:
            safe = target
        w = g.call("take", weight, safe, axis=0)
    else:
        w = g.call("ones_like", picked)
    if ignore is not None:
        valid = g.call("not_equal", target, _scalar(g, ignore, target))
        w = g.call("where", valid, w, _scalar(g, 0, w))
    loss = g.call("multiply", g.call("negative", picked), w)
    red = n.attr("reduction", "mean")
    if red == "none":
        return loss
    total = g.call("sum", loss)
    if red == "sum":
        return total
    if red != "mean":
        raise n.error(f"unknown reduction {red!r}")
    return g.call("divide", total, g.call("sum", w))


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(g: Graph, n: Node) -> Value:
    return _nll(g, n, n.inputs[0], n.inputs[1], n.input(2))


@converter("SoftmaxCrossEntropyLoss")
def _softmax_ce(g: Graph, n: Node) -> list[Value]:
    x = n.inputs[0]
    logp = g.call("nn.log_softmax", x, axis=1)
    return [_nll(g, n, logp, n.inputs[1], n.input(2)), logp][:n.num_outputs]


@converter("Hardmax")
def _hardmax(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    if n.opset < 13:
        axis = _axis(n.attr("axis", 1), x.ndim, n)
        shp = _static_shape(x, n)
        flat = g.call("reshape", x, newshape=[int(np.prod(shp[:axis])), -1])
        y = _hardmax_axis(g, n, flat, 1)
        return g.call("reshape", y, newshape=list(shp))
    return _hardmax_axis(g, n, x, _axis(n.attr("axis", -1), x.ndim, n))


def _hardmax_axis(g: Graph, n: Node, x: Value, axis: int) -> Value:
    d = x.shape[axis]
    if not isinstance(d, int):
        raise n.error(f"Hardmax needs a static size along the axis, found {x.ty}")
    am = g.call("argmax", x, axis=[axis], keepdims=True)
    hit = g.call("equal", am, g.const(_iota(d, axis, x.ndim, am.dtype)))
    return g.call("cast", hit, dtype=x.dtype)


@converter("OneHot")
def _one_hot(g: Graph, n: Node) -> Value:
    idx, values = n.inputs[0], n.inputs[2]
    depth = int(np.asarray(n.static(1, "depth")).reshape(-1)[0])
    rank = idx.ndim + 1
    axis = _axis(n.attr("axis", -1), rank, n)
    if idx.dtype != "int64":
        idx = g.call("cast", idx, dtype="int64")
    idx = g.call("where", g.call("less", idx, _scalar(g, 0, idx)),
                 g.call("add", idx, _scalar(g, depth, idx)), idx)
    hit = g.call("equal", g.call("expand_dims", idx, axis=axis),
                 g.const(_iota(depth, axis, rank, "int64")))
    off = g.call("take", values, g.const(np.int64(0)), axis=0)
    on = g.call("take", values, g.const(np.int64(1)), axis=0)
    return g.call("where", hit, on, off)


def _window(kind: str):  # type: ignore[no-untyped-def]
    def conv(g: Graph, n: Node) -> Value:
        size = int(np.asarray(n.static(0, "size")).reshape(-1)[0])
        dt = _onnx_dtype(n.attr("output_datatype", 1), n)
        big_n = size if n.attr("periodic", 1) else size - 1
        k = np.arange(size, dtype=np.float64) * (2 * np.pi) / big_n
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(k)
        elif kind == "hamming":
            w = 25 / 46 - (21 / 46) * np.cos(k)
        else:
            w = 0.42 - 0.5 * np.cos(k) + 0.08 * np.cos(2 * k)
        return g.const(w.astype(dt))
    return conv


converter("HannWindow")(_window("hann"))
converter("HammingWindow")(_window("hamming"))
converter("BlackmanWindow")(_window("blackman"))


@converter("BitShift")
def _bit_shift(g: Graph, n: Node) -> Value:
    x, s = n.inputs[0], n.inputs[1]
    p = g.call("power", _scalar(g, 2, s), s)
    if n.attr("direction") == "LEFT":
        return g.call("multiply", x, p)
    return g.call("divide", x, p)


@converter("MeanVarianceNormalization")
def _mvn(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    axes = sorted(_axis(a, x.ndim, n) for a in n.attr("axes", [0, 2, 3]))
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("subtract", g.call("mean", g.call("multiply", x, x), axis=axes, keepdims=True),
                 g.call("multiply", mean, mean))
    std = g.call("add", g.call("sqrt", var), _scalar(g, 1e-9, x))
    return g.call("divide", g.call("subtract", x, mean), std)


@converter("LRN")
def _lrn(g: Graph, n: Node) -> Value:
    """``x / (bias + alpha/size * sum of squares over a channel window) ** beta``; the window
    sum is an average pool over (channels, 1) counting the padding, times ``size``."""
    x = n.inputs[0]
    shp = _static_shape(x, n)
    size = int(n.attr("size"))
    sq = g.call("multiply", x, x)
    sq = g.call("reshape", sq, newshape=[shp[0], 1, shp[1], int(np.prod(shp[2:]))])
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    s = g.call("nn.avg_pool2d", sq, pool_size=[size, 1], padding=[lo, 0, hi, 0],
               count_include_pad=True)
    s = g.call("reshape", s, newshape=list(shp))
    alpha, beta, bias = n.attr("alpha", 1e-4), n.attr("beta", 0.75), n.attr("bias", 1.0)
    base = g.call("add", _scalar(g, bias, x), g.call("multiply", s, _scalar(g, alpha, x)))
    return g.call("divide", x, g.call("power", base, _scalar(g, beta, x)))


def _strides(shape: Sequence[int]) -> list[int]:
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * shape[i + 1]
    return out


def _wrap_negative(g: Graph, idx: Value, dim: Any) -> Value:
    if idx.dtype != "int64":
        idx = g.call("cast", idx, dtype="int64")
    return g.call("where", g.call("less", idx, _scalar(g, 0, idx)),
                  g.call("add", idx, _scalar(g, dim, idx)), idx)


@converter("GatherElements")
def _gather_elements(g: Graph, n: Node) -> Value:
    """``out[i, j, k] = data[i, idx[i, j, k], k]`` (axis 1) as one ``take`` of the flattened
    data at ``sum(coordinate * stride)``, the coordinates along other axes constants."""
    x, idx = n.inputs[0], n.inputs[1]
    xs = _static_shape(x, n)
    ishape = _static_shape(idx, n, "indices")
    axis = _axis(n.attr("axis", 0), x.ndim, n)
    idx = _wrap_negative(g, idx, xs[axis])
    st = _strides(xs)
    flat = g.call("multiply", idx, g.const(np.int64(st[axis])))
    grid = np.indices(ishape, dtype=np.int64)
    rest = sum(grid[i] * st[i] for i in range(x.ndim) if i != axis)
    flat = g.call("add", flat, g.const(np.asarray(rest, dtype=np.int64).reshape(ishape)))
    return g.call("take", g.call("reshape", x, newshape=[-1]), flat, axis=0)


@converter("GatherND")
def _gather_nd(g: Graph, n: Node) -> Value:
    """``out[b..., i...] = data[b..., idx[b..., i..., :], ...]``: the indexed dims flattened
    into one and read with ``take``; batch dims become constant offsets."""
    x, idx = n.inputs[0], n.inputs[1]
    xs = _static_shape(x, n)
    ishape = _static_shape(idx, n, "indices")
    b = int(n.attr("batch_dims", 0))
    k = ishape[-1]
    lead = xs[:b + k]
    st = _strides(lead)
    if idx.dtype != "int64":
        idx = g.call("cast", idx, dtype="int64")
    # NOTE: negative indices count from the end of their own dim
    dims = g.const(np.asarray(xs[b:b + k], dtype=np.int64))
    idx = g.call("where", g.call("less", idx, _scalar(g, 0, idx)), g.call("add", idx, dims), idx)
    flat = g.call("sum", g.call("multiply", idx,
                                g.const(np.asarray(st[b:], dtype=np.int64))), axis=[-1])
    if b:
        grid = np.indices(ishape[:-1], dtype=np.int64)
        off = sum(grid[i] * st[i] for i in range(b))
        flat = g.call("add", flat, g.const(np.asarray(off, dtype=np.int64)))
    data = g.call("reshape", x, newshape=[int(np.prod(lead)), *xs[b + k:]])
    return g.call("take", data, flat, axis=0)


@converter("CumSum")
def _cumsum(g: Graph, n: Node) -> Value:
    """``cumsum`` as a masked sum: ``out[j] = sum_i where(mask[i, j], x[i], 0)`` with a
    triangular constant mask (strict for ``exclusive``, flipped for ``reverse``)."""
    x = n.inputs[0]
    axis = _axis(int(np.asarray(n.static(1, "axis")).reshape(-1)[0]), x.ndim, n)
    d = x.shape[axis]
    if not isinstance(d, int):
        raise n.error(f"CumSum needs a static size along the axis, found {x.ty}")
    i = np.arange(d)[:, None]
    j = np.arange(d)[None, :]
    excl, rev = n.attr("exclusive", 0), n.attr("reverse", 0)
    mask = (i > j if excl else i >= j) if rev else (i < j if excl else i <= j)
    shape = [1] * (x.ndim + 1)
    shape[axis], shape[axis + 1] = d, d
    xe = g.call("expand_dims", x, axis=axis + 1)
    picked = g.call("where", g.const(mask.reshape(shape)), xe, _scalar(g, 0, x))
    return g.call("sum", picked, axis=[axis])


def _take_flat(g: Graph, x: Value, index: np.ndarray) -> Value:
    """``x.reshape(-1)[index]`` with a constant index array."""
    return g.call("take", g.call("reshape", x, newshape=[-1]),
                  g.const(np.asarray(index, dtype=np.int64)), axis=0)


@converter("Einsum")
def _einsum(g: Graph, n: Node) -> Value:
    """Einsum as broadcast products and sums: each operand's repeated labels are read as a
    diagonal (a constant-index take), its axes are put in one global label order with
    ``transpose``/``expand_dims``, the operands multiplied, and the labels absent from the
    output summed."""
    eq = n.attr("equation").replace(" ", "")
    xs = [v for v in n.inputs if v is not None]
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise n.error(f"equation {eq!r} has {len(terms)} operands, the node {len(xs)}")
    ell = max((x.ndim - len(t.replace("...", "")) for t, x in zip(terms, xs) if "..." in t),
              default=0)
    ell_labels = [chr(0x2460 + k) for k in range(ell)]  # NOTE: labels no equation uses
    ops: list[tuple[Value, list[str]]] = []
    for t, x in zip(terms, xs):
        pre, dots, post = t.partition("...")
        e = x.ndim - len(pre) - len(post) if dots else 0
        labels = list(pre) + ell_labels[ell - e:] + list(post)
        if len(labels) != x.ndim:
            raise n.error(f"operand {t!r} does not match rank {x.ndim}")
        ops.append(_einsum_diagonal(g, n, x, labels))
    counts: dict[str, int] = {}
    for _x, labels in ops:
        for lab in labels:
            counts[lab] = counts.get(lab, 0) + 1
    if arrow:
        pre, dots, post = rhs.partition("...")
        out = list(pre) + (ell_labels if dots else []) + list(post)
    else:
        out = ell_labels + sorted(lab for lab, c in counts.items()
                                  if c == 1 and lab not in ell_labels)
    order = out + [lab for lab in counts if lab not in out]
    prod: Value | None = None
    for x, labels in ops:
        mine = [lab for lab in order if lab in labels]
        perm = [labels.index(lab) for lab in mine]
        if perm != list(range(len(perm))):
            x = g.call("transpose", x, axes=perm)
        for pos, lab in enumerate(order):
            if lab not in labels:
                x = g.call("expand_dims", x, axis=pos)
        prod = x if prod is None else g.call("multiply", prod, x)
    assert prod is not None
    summed = list(range(len(out), len(order)))
    if summed:
        return g.call("sum", prod, axis=summed)
    return prod if len(ops) > 1 else g.call("copy", prod)


def _einsum_diagonal(g: Graph, n: Node, x: Value, labels: list[str]
                     ) -> tuple[Value, list[str]]:
    uniq = list(dict.fromkeys(labels))
    if len(uniq) == len(labels):
        return x, labels
    shp = _static_shape(x, n)
    sizes = {lab: shp[k] for k, lab in enumerate(labels)}
    st = _strides(shp)
    grid = np.indices([sizes[lab] for lab in uniq], dtype=np.int64)
    flat = sum(grid[uniq.index(lab)] * st[k] for k, lab in enumerate(labels))
    return _take_flat(g, x, flat), uniq


# ---------------------------------------------------------------------------- quantization

_INT_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
              "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 1)}


def _per_axis(g: Graph, v: Value, x: Value, axis: int, n: Node) -> Value:
    """A 1-D per-axis scale or zero point shaped to broadcast along ``axis`` of ``x``."""
    if v.ndim == 1 and x.ndim > 1:
        shape = [1] * x.ndim
        shape[_axis(axis, x.ndim, n)] = -1
        return g.call("reshape", v, newshape=shape)
    return v


def _saturate(g: Graph, y: Value, dtype: str, n: Node) -> Value:
    if dtype not in _INT_RANGE:
        raise n.error(f"quantizing to {dtype} is not supported")
    lo, hi = _INT_RANGE[dtype]
    y = g.call("maximum", y, _scalar(g, lo, y))
    y = g.call("minimum", y, _scalar(g, hi, y))
    return g.call("cast", y, dtype=dtype)


def _quantize(g: Graph, n: Node, x: Value, scale: Value, zp: Value | None, dtype: str
              ) -> Value:
    """``saturate(round_half_even(x / scale) + zero_point)`` as ``dtype``."""
    if x.dtype != "float32":
        x = g.call("cast", x, dtype="float32")
    if scale.dtype != "float32":
        scale = g.call("cast", scale, dtype="float32")
    y = _round_even(g, g.call("divide", x, scale))
    if zp is not None:
        y = g.call("add", y, g.call("cast", zp, dtype="float32"))
    return _saturate(g, y, dtype, n)


@converter("QuantizeLinear")
def _quantize_linear(g: Graph, n: Node) -> Value:
    x, scale = n.inputs[0], n.inputs[1]
    zp = n.input(2)
    if n.attr("block_size", 0):
        raise n.error("blocked quantization is not supported")
    axis = n.attr("axis", 1)
    dtype = zp.dtype if zp is not None else (
        _onnx_dtype(n.attr("output_dtype"), n) if n.attr("output_dtype") else "uint8")
    scale = _per_axis(g, scale, x, axis, n)
    zp = None if zp is None else _per_axis(g, zp, x, axis, n)
    return _quantize(g, n, x, scale, zp, dtype)


@converter("DequantizeLinear")
def _dequantize_linear(g: Graph, n: Node) -> Value:
    x, scale = n.inputs[0], n.inputs[1]
    zp = n.input(2)
    if n.attr("block_size", 0):
        raise n.error("blocked quantization is not supported")
    axis = n.attr("axis", 1)
    scale = _per_axis(g, scale, x, axis, n)
    y = g.call("cast", x, dtype=scale.dtype)
    if zp is not None:
        zp = _per_axis(g, zp, x, axis, n)
        y = g.call("subtract", y, g.call("cast", zp, dtype=scale.dtype))
    return g.call("multiply", y, scale)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(g: Graph, n: Node) -> list[Value]:
    x = n.inputs[0]
    zero = _scalar(g, 0, x)
    lo = g.call("minimum", g.call("min", x), zero)
    hi = g.call("maximum", g.call("max", x), zero)
    scale = g.call("divide", g.call("subtract", hi, lo), _scalar(g, 255, x))
    zp = _saturate(g, _round_even(g, g.call("subtract", zero, g.call("divide", lo, scale))),
                   "uint8", n)
    y = _quantize(g, n, x, scale, zp, "uint8")
    return [y, scale, zp]


def _shifted(g: Graph, x: Value, zp: Value | None, x_axis: int | None, n: Node) -> Value:
    """``int32(x) - int32(zero_point)``; a 1-D zero point runs along ``x_axis``."""
    y = g.call("cast", x, dtype="int32")
    if zp is None:
        return y
    z = g.call("cast", zp, dtype="int32")
    if z.ndim == 1 and x_axis is not None and x.ndim > 1:
        z = _per_axis(g, z, x, x_axis, n)
    return g.call("subtract", y, z)


@converter("MatMulInteger")
def _matmul_integer(g: Graph, n: Node) -> Value:
    a = _shifted(g, n.inputs[0], n.input(2), -2, n)
    b = _shifted(g, n.inputs[1], n.input(3), -1, n)
    return _matmul_values(g, n, a, b)


@converter("ConvInteger")
def _conv_integer(g: Graph, n: Node) -> Value:
    x = _shifted(g, n.inputs[0], n.input(2), None, n)
    w = _shifted(g, n.inputs[1], n.input(3), 0, n)
    return _conv_values(g, n, x, w, None)


def _f32(g: Graph, *vs: Value) -> list[Value]:
    return [v if v.dtype == "float32" else g.call("cast", v, dtype="float32") for v in vs]


def _requantize(g: Graph, n: Node, acc: Value, scale: Value, zp: Value) -> Value:
    y = g.call("multiply", g.call("cast", acc, dtype="float32"), scale)
    return _quantize(g, n, y, _scalar(g, 1, y), zp, zp.dtype)


@converter("QLinearConv")
def _qlinear_conv(g: Graph, n: Node) -> Value:
    x, xs, xz, w, ws, wz, ys, yz = n.inputs[:8]
    b = n.input(8)
    acc = _conv_values(g, n, _shifted(g, x, xz, None, n), _shifted(g, w, wz, 0, n),
                       None if b is None else g.call("cast", b, dtype="int32"))
    xs, ws, ys = _f32(g, xs, _per_axis(g, ws, acc, 1, n), ys)
    scale = g.call("divide", g.call("multiply", xs, ws), ys)
    return _requantize(g, n, acc, scale, yz)


@converter("QLinearMatMul")
def _qlinear_matmul(g: Graph, n: Node) -> Value:
    a, as_, az, b, bs, bz, ys, yz = n.inputs[:8]
    acc = _matmul_values(g, n, _shifted(g, a, az, -2, n), _shifted(g, b, bz, -1, n))
    as_, bs, ys = _f32(g, as_, _per_axis(g, bs, acc, -1, n), ys)
    scale = g.call("divide", g.call("multiply", as_, bs), ys)
    return _requantize(g, n, acc, scale, yz)


# ---------------------------------------------------------------------------- known indices

def _scatter_flat(g: Graph, n: Node, data: Value, updates: Value, target: np.ndarray
                  ) -> Value:
    """``data`` with ``updates.flat[k]`` written at flat position ``target[k]`` (last write
    wins; ``reduction="add"``/``"mul"``/``"max"``/``"min"`` combine), ``target`` constant."""
    dshape = _static_shape(data, n)
    size = int(np.prod(dshape))
    target = np.asarray(target, dtype=np.int64).reshape(-1)
    red = n.attr("reduction", "none")
    flat_d = g.call("reshape", data, newshape=[-1])
    flat_u = g.call("reshape", updates, newshape=[-1])
    if red == "none":
        src = np.full(size, -1, dtype=np.int64)
        src[target] = np.arange(target.size)
        hit = g.const(src >= 0)
        picked = g.call("take", flat_u, g.const(np.maximum(src, 0)), axis=0)
        out = g.call("where", hit, picked, flat_d)
    else:
        out = flat_d
        # NOTE: one pass per write "round": the k-th write to each position
        order = np.argsort(target, kind="stable")
        rank = np.empty_like(order)
        sorted_t = target[order]
        first = np.r_[0, np.flatnonzero(np.diff(sorted_t)) + 1]
        starts = np.repeat(first, np.diff(np.r_[first, sorted_t.size]))
        rank[order] = np.arange(sorted_t.size) - starts
        combine = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}
        if red not in combine:
            raise n.error(f"reduction {red!r} is not supported")
        for r in range(int(rank.max()) + 1 if rank.size else 0):
            src = np.full(size, -1, dtype=np.int64)
            sel = rank == r
            src[target[sel]] = np.flatnonzero(sel)
            picked = g.call("take", flat_u, g.const(np.maximum(src, 0)), axis=0)
            out = g.call("where", g.const(src >= 0), g.call(combine[red], out, picked), out)
    return g.call("reshape", out, newshape=list(dshape))


@converter("ScatterElements", "Scatter")
def _scatter_elements(g: Graph, n: Node) -> Value:
    data, updates = n.inputs[0], n.inputs[2]
    idx = np.asarray(n.static(1, "indices")).astype(np.int64)
    dshape = _static_shape(data, n)
    axis = _axis(n.attr("axis", 0), data.ndim, n)
    idx = np.where(idx < 0, idx + dshape[axis], idx)
    coords = list(np.indices(idx.shape, dtype=np.int64))
    coords[axis] = idx
    return _scatter_flat(g, n, data, updates, np.ravel_multi_index(coords, dshape))


@converter("ScatterND")
def _scatter_nd(g: Graph, n: Node) -> Value:
    data, updates = n.inputs[0], n.inputs[2]
    idx = np.asarray(n.static(1, "indices")).astype(np.int64)
    dshape = _static_shape(data, n)
    k = idx.shape[-1]
    idx = np.where(idx < 0, idx + np.asarray(dshape[:k]), idx)
    inner = int(np.prod(dshape[k:]))
    base = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), dshape[:k]) * inner
    target = base[..., None] + np.arange(inner)
    return _scatter_flat(g, n, data, updates, target)


@converter("ReverseSequence")
def _reverse_sequence(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    lens = np.asarray(n.static(1, "sequence_lens")).astype(np.int64)
    shape = _static_shape(x, n)
    bax, tax = n.attr("batch_axis", 1), n.attr("time_axis", 0)
    coords = list(np.indices(shape, dtype=np.int64))
    t, b = coords[tax], coords[bax]
    ln = lens[b]
    coords[tax] = np.where(t < ln, ln - 1 - t, t)
    return _take_flat(g, x, np.ravel_multi_index(coords, shape))


@converter("Compress")
def _compress(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    cond = np.asarray(n.static(1, "condition")).astype(bool)
    keep = np.flatnonzero(cond)
    axis = n.attr("axis")
    if axis is None:
        return g.call("take", g.call("reshape", x, newshape=[-1]), g.const(keep), axis=0)
    axis = _axis(axis, x.ndim, n)
    return g.call("take", x, g.const(keep), axis=axis)
