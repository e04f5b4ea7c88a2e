"""ONNX converters written as compositions of relay_ir operators (losses, Hardmax, windows,
LRN, quantization, and Compress, whose condition must be known when importing), and the ones
that map onto the indexing and scan operators: OneHot, GatherElements, GatherND, CumSum,
CumProd, Einsum, ScatterElements/Scatter, ScatterND, TensorScatter and ReverseSequence."""
from __future__ import annotations

from typing import Any

import numpy as np

from relay_ir.frontend.onnx import Graph, Node, Value, converter
from relay_ir.frontend.onnx_nn import _conv_values, _matmul_values
from relay_ir.frontend.onnx_ops import (_axis, _iota, _onnx_dtype, _round_even, _scalar,
                                        _static_shape)


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
    """``one_hot(indices, values[1], values[0], depth, axis)``: negative indices count from
    ``depth`` (the operator's rule); ``depth`` must be known when importing."""
    idx, values = n.inputs[0], n.inputs[2]
    depth = int(np.asarray(n.static(1, "depth")).reshape(-1)[0])
    axis = _axis(n.attr("axis", -1), idx.ndim + 1, n)
    if idx.dtype.startswith("float"):
        idx = g.call("cast", idx, dtype="int64")
    off = g.call("take", values, g.const(np.int64(0)), axis=0)
    on = g.call("take", values, g.const(np.int64(1)), axis=0)
    return g.call("one_hot", idx, on, off, depth=depth, axis=axis)


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


def _tuples_first(g: Graph, idx: Value) -> Value:
    """ONNX's ``(..., k)`` index tuples as Relay's ``(k, ...)``."""
    r = idx.ndim
    if r < 2:
        return idx
    return g.call("transpose", idx, axes=[r - 1] + list(range(r - 1)))


@converter("GatherElements")
def _gather_elements(g: Graph, n: Node) -> Value:
    x, idx = n.inputs[0], n.inputs[1]
    return g.call("gather", x, idx, axis=_axis(n.attr("axis", 0), x.ndim, n))


@converter("GatherND")
def _gather_nd(g: Graph, n: Node) -> Value:
    x, idx = n.inputs[0], n.inputs[1]
    return g.call("gather_nd", x, _tuples_first(g, idx), batch_dims=int(n.attr("batch_dims", 0)))


@converter("CumSum", "CumProd")
def _cumsum(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    axis = _axis(int(np.asarray(n.static(1, "axis")).reshape(-1)[0]), x.ndim, n)
    return g.call(n.op_type.lower(), x, axis=axis, exclusive=bool(n.attr("exclusive", 0)),
                  reverse=bool(n.attr("reverse", 0)))


@converter("Einsum")
def _einsum(g: Graph, n: Node) -> Value:
    eq = n.attr("equation").replace(" ", "")
    xs = [v for v in n.inputs if v is not None]
    return g.call("einsum", xs, equation=eq)


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


_SCATTER_REDUCTION = {"none": "update", "add": "add", "mul": "mul", "max": "max",
                      "min": "min"}


def _reduction(n: Node) -> str:
    red = n.attr("reduction", "none")
    if red not in _SCATTER_REDUCTION:
        raise n.error(f"unknown reduction {red!r}")
    return _SCATTER_REDUCTION[red]


@converter("ScatterElements", "Scatter")
def _scatter_elements(g: Graph, n: Node) -> Value:
    data, idx, updates = n.inputs[0], n.inputs[1], n.inputs[2]
    return g.call("scatter_elements", data, idx, updates,
                  axis=_axis(n.attr("axis", 0), data.ndim, n), reduction=_reduction(n))


@converter("ScatterND")
def _scatter_nd(g: Graph, n: Node) -> Value:
    data, idx, updates = n.inputs[0], n.inputs[1], n.inputs[2]
    return g.call("scatter_nd", data, _tuples_first(g, idx), updates, mode=_reduction(n))


@converter("TensorScatter")
def _tensor_scatter(g: Graph, n: Node) -> Value:
    """A KV-cache write: ``cache[b, ..., write_indices[b] + s, ...] = update[b, ..., s, ...]``
    (indices modulo the cache length for ``mode="circular"``), as one ``scatter_elements``."""
    cache, update, wi = n.inputs[0], n.inputs[1], n.input(2)
    axis = _axis(n.attr("axis", -2), cache.ndim, n)
    if axis == 0:
        raise n.error("TensorScatter's axis must not be the batch axis 0")
    ushape = _static_shape(update, n, "update")
    cshape = _static_shape(cache, n)
    mode = n.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise n.error(f"unknown mode {mode!r}")
    shape = [1] * cache.ndim
    shape[axis] = ushape[axis]
    idx = g.const(np.arange(ushape[axis], dtype=np.int64).reshape(shape))
    if wi is not None:
        start = wi if wi.dtype == "int64" else g.call("cast", wi, dtype="int64")
        start = g.call("reshape", start, newshape=[ushape[0]] + [1] * (cache.ndim - 1))
        idx = g.call("add", idx, start)
    if mode == "circular":
        idx = g.call("floor_mod", idx, g.const(np.int64(cshape[axis])))
    idx = g.call("broadcast_to", idx, shape=list(ushape))
    return g.call("scatter_elements", cache, idx, update, axis=axis)


@converter("ReverseSequence")
def _reverse_sequence(g: Graph, n: Node) -> Value:
    """``gather`` along the time axis at ``where(t < len[b], len[b] - 1 - t, t)``: the lengths
    may be known only at run time."""
    x, lens = n.inputs[0], n.inputs[1]
    shape = _static_shape(x, n)
    bax, tax = n.attr("batch_axis", 1), n.attr("time_axis", 0)
    tshape, bshape = [1] * x.ndim, [1] * x.ndim
    tshape[tax], bshape[bax] = shape[tax], shape[bax]
    t = g.const(np.arange(shape[tax], dtype=np.int64).reshape(tshape))
    ln = lens if lens.dtype == "int64" else g.call("cast", lens, dtype="int64")
    ln = g.call("reshape", ln, newshape=bshape)
    rev = g.call("subtract", g.call("subtract", ln, g.const(np.int64(1))), t)
    idx = g.call("where", g.call("less", t, ln), rev, t)
    return g.call("gather", x, g.call("broadcast_to", idx, shape=list(shape)), axis=tax)


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


# ---------------------------------------------------------------------------- host operators

@converter("NonZero")
def _nonzero(g: Graph, n: Node) -> Value:
    """``dyn.nonzero``: its result's length is the count of nonzero elements (a host
    operator)."""
    return g.call("dyn.nonzero", n.inputs[0], dtype="int64")


@converter("Unique")
def _unique(g: Graph, n: Node) -> list[Value]:
    """``dyn.unique``: values, first indices, inverse indices, counts (a host operator)."""
    x = n.inputs[0]
    axis = n.attr("axis")
    if axis is not None and not -x.ndim <= int(axis) < x.ndim:
        raise n.error(f"axis {axis} is out of range for rank {x.ndim}")
    out = g.call("dyn.unique", x, axis=None if axis is None else int(axis),
                 sorted=bool(n.attr("sorted", 1)))
    return [g.item(out, k) for k in range(4)]
