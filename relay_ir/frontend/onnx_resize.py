"""ONNX Resize (opsets 10-19) and Upsample, one axis at a time with constant maps.

ONNX's nearest, linear and cubic modes are separable: each resized axis is a linear map of
that axis. Nearest reads the source index with ``take``; linear and cubic contract the axis
with a constant (out, in) weight matrix (``nn.matmul``). The maps follow ONNX's coordinate
transformations (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners,
asymmetric, tf_crop_and_resize with its extrapolation value), nearest modes, ``cubic_coeff_a``
and ``exclude_outside``. Output sizes and scales must be known when importing;
``antialias`` and ``keep_aspect_ratio_policy`` other than ``stretch`` are not supported.
"""
from __future__ import annotations

import numpy as np

from relay_ir.frontend.onnx import Graph, Node, Value, converter
from relay_ir.frontend.onnx_ops import _axis, _static_shape


def _source_coords(n: Node, mode: str, out: int, size: int, scale: float,
                   roi: tuple[float, float]) -> np.ndarray:
    """Where each output index reads from, in input coordinates."""
    x = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adj = out / (scale * size)
        center = size / 2
        offset = center * (1 - adj)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(x)
    if mode == "align_corners":
        # NOTE: the resized length is size * scale, not the (floored) output size
        return x * (size - 1) / (size * scale - 1) if out > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out > 1:
            return start * (size - 1) + x * (end - start) * (size - 1) / (out - 1)
        return np.full_like(x, 0.5 * (start + end) * (size - 1))
    raise n.error(f"coordinate_transformation_mode {mode!r} is not supported")


def _nearest(n: Node, xo: np.ndarray, size: int) -> np.ndarray:
    mode = n.attr("nearest_mode", "round_prefer_floor")
    if mode == "round_prefer_floor":
        idx = np.where(xo == np.floor(xo) + 0.5, np.floor(xo), np.round(xo))
    elif mode == "round_prefer_ceil":
        idx = np.where(xo == np.floor(xo) + 0.5, np.ceil(xo), np.round(xo))
    elif mode == "floor":
        idx = np.floor(xo)
    elif mode == "ceil":
        idx = np.ceil(xo)
    else:
        raise n.error(f"nearest_mode {mode!r} is not supported")
    return np.clip(idx, 0, size - 1).astype(np.int64)


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """The four cubic-convolution weights of neighbours -1, 0, 1, 2 at fraction ``t``."""
    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _antialias_weights(n: Node, kind: str, xo: np.ndarray, size: int, scale: float
                       ) -> np.ndarray:
    """Downsampling with ``antialias``: the kernel stretched by ``1 / scale`` over the taps
    around each source point (edge values repeat), its weights normalized to sum 1."""
    a = float(n.attr("cubic_coeff_a", -0.75))
    reach = 1 if kind == "linear" else 2
    first = int(np.floor(-reach / scale)) + 1
    taps = np.arange(first, 1 - first + 1)  # NOTE: 2 - 2 * first taps
    x0 = np.ceil(xo).astype(np.int64) - 1  # the tap left of the point: ratio in (0, 1]
    ratio = xo - x0
    d = np.abs(taps[None, :] - ratio[:, None]) * scale
    if kind == "linear":
        w = np.clip(1 - d, 0, 1)
    else:
        w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                     np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
    w = w / w.sum(axis=1, keepdims=True)
    idx = x0[:, None] + taps[None, :]
    if n.attr("exclude_outside", 0):
        w = np.where((idx >= 0) & (idx < size), w, 0.0)
        w = w / w.sum(axis=1, keepdims=True)
    out = np.zeros((xo.size, size))
    idx = np.clip(idx, 0, size - 1)
    for k in range(taps.size):
        np.add.at(out, (np.arange(xo.size), idx[:, k]), w[:, k])
    return out


def _weights(n: Node, kind: str, xo: np.ndarray, size: int) -> np.ndarray:
    """The (out, in) matrix of a linear or cubic resize of one axis (edge values repeat)."""
    out = np.zeros((xo.size, size))
    x0 = np.floor(xo).astype(np.int64)
    t = xo - x0
    if kind == "linear":
        offsets, w = np.array([0, 1]), np.stack([1 - t, t], axis=-1)
    else:
        offsets = np.array([-1, 0, 1, 2])
        w = _cubic_weights(t, float(n.attr("cubic_coeff_a", -0.75)))
    idx = x0[:, None] + offsets[None, :]
    if kind == "cubic" and n.attr("exclude_outside", 0):
        w = np.where((idx >= 0) & (idx < size), w, 0.0)
        w = w / w.sum(axis=1, keepdims=True)
    idx = np.clip(idx, 0, size - 1)
    for k in range(len(offsets)):
        np.add.at(out, (np.arange(xo.size), idx[:, k]), w[:, k])
    return out


def _resize_axis(g: Graph, n: Node, x: Value, axis: int, out: int, scale: float,
                 roi: tuple[float, float]) -> Value:
    size = x.shape[axis]
    kind = n.attr("mode", "nearest")
    cmode = n.attr("coordinate_transformation_mode", "half_pixel")
    xo = _source_coords(n, cmode, out, size, scale, roi)
    if kind == "nearest":
        y = g.call("take", x, g.const(_nearest(n, xo, size)), axis=axis)
    elif kind in ("linear", "cubic"):
        if n.attr("antialias", 0) and scale < 1:
            m = _antialias_weights(n, kind, xo, size, scale).astype(x.dtype)
        else:
            m = _weights(n, kind, xo, size).astype(x.dtype)
        perm = [i for i in range(x.ndim) if i != axis] + [axis]
        inv = list(np.argsort(perm))
        y = g.call("transpose", x, axes=perm)
        y = g.call("nn.matmul", y, g.const(m), transpose_b=True)
        y = g.call("transpose", y, axes=[int(i) for i in inv])
    else:
        raise n.error(f"mode {kind!r} is not supported")
    if cmode == "tf_crop_and_resize":
        outside = (xo < 0) | (xo > size - 1)
        if outside.any():
            shape = [1] * x.ndim
            shape[axis] = out
            ext = np.asarray(n.attr("extrapolation_value", 0.0), dtype=x.dtype)
            y = g.call("where", g.const(outside.reshape(shape)), g.const(ext), y)
    return y


_RESIZE2D_MODES = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}
_RESIZE2D_COORDS = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")


def _as_resize2d(g: Graph, n: Node, x: Value, shape: list, axes: list[int], outs: list[int],
                 scales: list[float], roi: np.ndarray) -> Value | None:
    """``image.resize2d`` when it means the same: a rank-4 input resized in axes 2 and 3 only,
    each scale equal to output / input (resize2d's scale), no antialias and a coordinate
    mode it has; None otherwise (the per-axis maps below handle the rest)."""
    kind = n.attr("mode", "nearest")
    cmode = n.attr("coordinate_transformation_mode", "half_pixel")
    if x.ndim != 4 or kind not in _RESIZE2D_MODES or cmode not in _RESIZE2D_COORDS or \
            n.attr("antialias", 0) or (kind != "nearest" and not x.dtype.startswith("float")):
        return None
    size = list(shape[2:])
    box = [0.0, 0.0, 1.0, 1.0]
    kk = len(axes)
    for i, a in enumerate(axes):
        start, end = float(roi[i]), float(roi[i + kk])
        if a < 2:
            if outs[i] != shape[a] or scales[i] != 1.0 or \
                    (cmode == "tf_crop_and_resize" and (start, end) != (0.0, 1.0)):
                return None
            continue
        if scales[i] != outs[i] / shape[a]:
            return None
        size[a - 2] = outs[i]
        box[a - 2], box[a] = start, end
    return g.call("image.resize2d", x, size=size, roi=box, method=_RESIZE2D_MODES[kind],
                  coordinate_transformation_mode=cmode,
                  rounding_method=n.attr("nearest_mode", "round_prefer_floor"),
                  cubic_alpha=float(n.attr("cubic_coeff_a", -0.75)),
                  cubic_exclude=int(n.attr("exclude_outside", 0)),
                  extrapolation_value=float(n.attr("extrapolation_value", 0.0)))


@converter("Resize", "Upsample")
def _resize(g: Graph, n: Node) -> Value:
    x = n.inputs[0]
    shape = _static_shape(x, n)
    if n.op_type == "Upsample" or n.opset < 11:
        # NOTE: Upsample and Resize-10: scales (attribute or input 1), asymmetric coordinates
        scales = n.attr("scales")
        if scales is None:
            scales = n.static(1, "scales")
        n.attrs.setdefault("coordinate_transformation_mode", "asymmetric")
        n.attrs.setdefault("nearest_mode", "floor")
        roi_v, sizes = None, None
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    else:
        roi_v = n.static(1, "roi") if n.input(1) is not None else None
        sv = n.static(2, "scales") if n.input(2) is not None else None
        sizes = n.static(3, "sizes") if n.input(3) is not None else None
        scales = None if sv is None or np.size(sv) == 0 else [float(s) for s in
                                                             np.asarray(sv).reshape(-1)]
    axes_attr = n.attr("axes")
    axes = list(range(x.ndim)) if axes_attr is None else [_axis(a, x.ndim, n) for a in axes_attr]
    policy = n.attr("keep_aspect_ratio_policy", "stretch")
    if sizes is not None and np.size(sizes):
        outs = [int(v) for v in np.asarray(sizes).reshape(-1)]
        scales = [o / shape[a] for o, a in zip(outs, axes)]
        if policy in ("not_larger", "not_smaller"):
            s = min(scales) if policy == "not_larger" else max(scales)
            scales = [s] * len(axes)
            outs = [int(np.floor(shape[a] * s + 0.5)) for a in axes]
        elif policy != "stretch":
            raise n.error(f"keep_aspect_ratio_policy {policy!r} is not supported")
    elif scales is not None:
        outs = [int(np.floor(shape[a] * s)) for a, s in zip(axes, scales)]
    else:
        raise n.error("Resize needs scales or sizes")
    roi = np.asarray(roi_v if roi_v is not None and np.size(roi_v) else
                     [0.0] * len(axes) + [1.0] * len(axes), dtype=np.float64).reshape(-1)
    k = len(axes)
    y = _as_resize2d(g, n, x, shape, axes, outs, scales, roi)
    if y is not None:
        return y
    y = x
    for i, a in enumerate(axes):
        bounds = (float(roi[i]), float(roi[i + k]))
        if outs[i] == shape[a] and scales[i] == 1.0 and \
                n.attr("coordinate_transformation_mode") != "tf_crop_and_resize":
            continue
        y = _resize_axis(g, n, y, a, outs[i], scales[i], bounds)
    return y if y is not x else g.call("copy", x)
