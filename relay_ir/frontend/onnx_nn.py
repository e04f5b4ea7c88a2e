"""ONNX converters: MatMul/Gemm, convolutions (1-D, 2-D, 3-D; transposed), pooling and the
normalizations, onto relay_ir's ``nn`` operators."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir.frontend.onnx import Graph, Node, Value, converter
from relay_ir.frontend.onnx_ops import (_axis, _broadcast_shapes, _channel_shape, _scalar,
                                        _static_shape)


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
        lo, hi = _split_same(total, auto)
        begin.append(lo)
        end.append(hi)
    return begin + end


def _split_same(total: int, auto: str) -> tuple[int, int]:
    """``total`` padding as (begin, end): the odd one at the end for SAME_UPPER, at the
    beginning otherwise (SAME_LOWER)."""
    small, big = total // 2, total - total // 2
    return (small, big) if auto == "SAME_UPPER" else (big, small)


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
    if x.ndim == 3:
        y = g.call("nn.conv1d", x, w, strides=strides, padding=pads, dilation=dil,
                   groups=int(n.attr("group", 1)), kernel_size=kernel)
    elif x.ndim == 4:
        y = g.call("nn.conv2d", x, w, strides=strides, padding=list(pads), dilation=dil,
                   groups=int(n.attr("group", 1)), kernel_size=kernel)
    else:
        raise n.error(f"only 1-D, 2-D and 3-D {n.op_type} is supported (input rank {x.ndim})")
    if b is not None:
        y = g.call("nn.bias_add", y, b, axis=1)
    return y


@converter("ConvTranspose")
def _conv_transpose(g: Graph, n: Node) -> Value:
    """``nn.conv1d_transpose`` / ``nn.conv2d_transpose`` (ONNX's W is (C_in, C_out / group,
    kH, kW): Relay's IOHW); an ``output_shape`` past the last tap pads zeros."""
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
            lo, hi = _split_same(total, auto)
            begin.append(lo)
            end.append(hi)
        pads = begin + end
    elif auto == "VALID":
        pads = [0] * (2 * k)
    else:
        pads = list(n.attr("pads", [0] * (2 * k)))
    # NOTE: nn.conv*_transpose take output_padding below the stride. The rest comes off the
    # end padding (the op then computes those rows), and what remains past it lies after the
    # last tap: zero rows
    opad = [min(outpad[i], strides[i] - 1) for i in range(k)]
    for i in range(k):
        more = outpad[i] - opad[i]
        take = min(more, pads[k + i])
        pads[k + i] -= take
        extra[i] += more - take
    name = "nn.conv1d_transpose" if k == 1 else "nn.conv2d_transpose"
    y = g.call(name, x, w, strides=strides, padding=pads, dilation=dil, groups=group,
               kernel_size=kernel, output_padding=opad, channels=wshape[1] * group)
    if any(extra):
        width = [[0, 0], [0, 0]] + [[0, e] for e in extra]
        y = g.call("nn.pad", y, _scalar(g, 0, y), pad_width=width)
    if b is not None:
        y = g.call("nn.bias_add", y, b, axis=1)
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
    if x.ndim < 3:
        raise n.error(f"InstanceNormalization needs an input of rank >= 3, found {x.ndim}")
    return g.call("nn.instance_norm", x, scale, bias, axis=1,
                  epsilon=float(n.attr("epsilon", 1e-5)))


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


@converter("RMSNormalization")
def _rms_norm(g: Graph, n: Node) -> Value:
    x, scale = n.inputs[0], n.inputs[1]
    axis = _axis(n.attr("axis", -1), x.ndim, n)
    ms = g.call("mean", g.call("multiply", x, x), axis=list(range(axis, x.ndim)), keepdims=True)
    denom = g.call("sqrt", g.call("add", ms, _scalar(g, float(n.attr("epsilon", 1e-5)), x)))
    return g.call("multiply", g.call("divide", x, denom), scale)


@converter("GroupNormalization")
def _group_norm(g: Graph, n: Node) -> Value:
    x, scale, bias = n.inputs[:3]
    shp = _static_shape(x, n)
    groups = int(n.attr("num_groups"))
    c = shp[1]
    if c % groups:
        raise n.error(f"{c} channels are not divisible by num_groups={groups}")
    if scale.shape[0] != c:  # NOTE: opset 18 gave one scale and bias per group
        scale = g.call("repeat", scale, repeats=c // groups, axis=0)
        bias = g.call("repeat", bias, repeats=c // groups, axis=0)
    return g.call("nn.group_norm", x, scale, bias, num_groups=groups, axis=1,
                  epsilon=float(n.attr("epsilon", 1e-5)))


@converter("TopK")
def _topk(g: Graph, n: Node) -> list[Value]:
    """``topk`` (both outputs, int64 indices; ``sorted=0`` still gives sorted outputs, one of
    the orders ONNX allows). A K (input 1 from opset 10) known only at run time gives the
    host operator ``dyn.topk``."""
    x = n.inputs[0]
    largest = bool(n.attr("largest", 1))
    if n.opset >= 10 and n.input(1) is not None and n.input(1).value is None:
        # NOTE: K computed at run time: the host operator dyn.topk (the axis becomes ?)
        axis = _axis(n.attr("axis", -1), x.ndim, n)
        both = g.call("dyn.topk", x, n.inputs[1], axis=axis, ret_type="both",
                      is_ascend=not largest, dtype="int64")
        return [g.item(both, 0), g.item(both, 1)]
    if n.opset < 10:
        k = int(n.attr("k"))
    else:
        kv = np.asarray(n.static(1, "K")).reshape(-1)
        if kv.size != 1:
            raise n.error(f"K must hold one value, found {kv.size}")
        k = int(kv[0])
    axis = _axis(n.attr("axis", -1), x.ndim, n)
    d = x.shape[axis]
    if k < 0 or (isinstance(d, int) and k > d):
        raise n.error(f"K={k} is out of range for axis {axis} (size {d})")
    if k == 0:  # NOTE: topk reads k < 1 as "all"; K=0 selects nothing
        shape = list(x.shape)
        shape[axis] = 0
        return [g.call("zeros", shape=shape, dtype=x.dtype),
                g.call("zeros", shape=shape, dtype="int64")]
    both = g.call("topk", x, k=k, axis=axis, ret_type="both",
                  is_ascend=not bool(n.attr("largest", 1)), dtype="int64")
    return [g.item(both, 0), g.item(both, 1)]


@converter("LpNormalization")
def _lp_norm(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    axis = _axis(n.attr("axis", -1), x.ndim, n)
    p = int(n.attr("p", 2))
    if p == 1:
        norm = g.call("sum", g.call("abs", x), axis=[axis], keepdims=True)
    elif p == 2:
        norm = g.call("sqrt", g.call("sum", g.call("multiply", x, x), axis=[axis],
                                     keepdims=True))
    else:
        raise n.error(f"p={p} is not supported (1 or 2)")
    # NOTE: a zero norm leaves zeros (not 0/0)
    safe = g.call("where", g.call("equal", norm, _scalar(g, 0, norm)), _scalar(g, 1, norm), norm)
    return g.call("divide", x, safe)


@converter("LpPool", "GlobalLpPool")
def _lp_pool(g: Graph, n: Node) -> Value:
    """``(sum over the window of |x|^p)^(1/p)``: an average pool counting the padding,
    times the window size."""
    x = n.inputs[0]
    p = float(n.attr("p", 2))
    xp = g.call("power", g.call("abs", x), _scalar(g, p, x))
    if n.op_type == "GlobalLpPool":
        s = g.call("sum", xp, axis=list(range(2, x.ndim)), keepdims=True)
    else:
        kernel = list(n.attr("kernel_shape"))
        k = len(kernel)
        strides = list(n.attr("strides", [1] * k))
        dil = list(n.attr("dilations", [1] * k))
        pads = _spatial(x, n, kernel, strides, dil)
        x4, one_d = _as_2d(g, xp, n)
        if one_d:
            strides, dil, kernel = [1] + strides, [1] + dil, [1] + kernel
            pads = [0, pads[0], 0, pads[1]]
        s = g.call("nn.avg_pool2d", x4, pool_size=kernel, strides=strides, dilation=dil,
                   padding=pads, ceil_mode=bool(n.attr("ceil_mode", 0)),
                   count_include_pad=True)
        s = g.call("multiply", s, _scalar(g, int(np.prod(kernel)), s))
        if one_d:
            s = g.call("squeeze", s, axis=[2])
    return g.call("power", s, _scalar(g, 1 / p, s))
