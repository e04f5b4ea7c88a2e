"""The CPU convolution schedules against numpy over a table of shapes.

Odd widths (7, 14, 28, 56), strides, padding, dilation, groups, depthwise, batch > 1, with
the fused epilogues (bias + relu, residual add, clip); compiled through ``runtime.build`` (the
kernel cache makes reruns fast). Each NCHW case must get the schedule meant for it
(``conv-depthwise``, ``conv-gemm`` for 1x1 convolutions, ``conv-channels``), with the weights
as given and with the packed layouts ``runtime.build`` gives constant weights (``OIHW16o``,
``IHWO``), not a silent fallback; the layouts they do not cover fall back and still compute the
same values. Packed-layout programs equal the original ones (compiled and interpreted), IEEE
inf/nan/-0.0 flow as in the interpreter, and the classifier head keeps its values.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.expr import Function
from relay_ir.passes import InferType
from relay_ir.passes.fuse_ops import fuse_ops
from relay_ir.traversal import post_order

pytestmark = pytest.mark.tvm

HEADER = '#[version = "0.0.5"]\n'


def conv_np(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int,
            groups: int) -> np.ndarray:
    """NCHW / OIHW convolution in float64 with numpy (windows, then one einsum per group)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    win = np.empty((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win[:, :, i, j] = xp[:, :, i * dil: i * dil + stride * (oh - 1) + 1: stride,
                                 j * dil: j * dil + stride * (ow - 1) + 1: stride]
    og = o // groups
    out = [np.einsum("ncijyx,ocij->noyx", win[:, g * cg:(g + 1) * cg],
                     w[g * og:(g + 1) * og].astype(np.float64)) for g in range(groups)]
    return np.concatenate(out, axis=1)


# (batch, in channels, height, width, out channels, kernel, stride, padding, dilation, groups)
CASES = [
    (1, 8, 7, 7, 16, 3, 1, 1, 1, 1),
    (1, 16, 14, 14, 32, 3, 1, 1, 1, 1),
    (1, 8, 28, 28, 16, 1, 1, 0, 1, 1),
    (1, 4, 56, 56, 16, 3, 1, 1, 1, 1),
    (2, 8, 14, 14, 8, 3, 2, 1, 1, 1),
    (1, 3, 29, 29, 16, 7, 2, 3, 1, 1),
    (1, 16, 28, 28, 32, 1, 2, 0, 1, 1),
    (1, 8, 13, 11, 12, 3, 1, 2, 2, 1),
    (1, 16, 14, 14, 16, 3, 1, 1, 1, 16),
    (1, 32, 7, 7, 32, 3, 2, 1, 1, 32),
    (3, 16, 10, 10, 24, 3, 1, 1, 1, 4),
    (1, 8, 5, 9, 4, 5, 1, 0, 1, 1),
    # depthwise (conv-depthwise): MobileNet's widths and strides, odd widths, no padding,
    # a 5x5 and a dilated window, batch > 1
    (1, 16, 56, 56, 16, 3, 1, 1, 1, 16),
    (1, 8, 28, 28, 8, 3, 2, 1, 1, 8),
    (1, 16, 14, 14, 16, 3, 2, 1, 1, 16),
    (2, 4, 7, 7, 4, 3, 1, 1, 1, 4),
    (1, 8, 112, 112, 8, 3, 2, 1, 1, 8),
    (1, 4, 15, 13, 4, 3, 2, 1, 1, 4),
    (2, 6, 9, 11, 6, 5, 1, 2, 1, 6),
    (1, 4, 12, 12, 4, 3, 1, 0, 1, 4),
    (1, 4, 13, 13, 4, 3, 1, 2, 2, 4),
    (1, 4, 20, 40, 4, 3, 1, 1, 1, 4),
    # 1x1, stride 1, unpadded, pixels a multiple of 16 (conv-gemm): 56x56, 28x28, 4x8, batch 2,
    # output channels that 6 divides and that it does not
    (1, 16, 56, 56, 24, 1, 1, 0, 1, 1),
    (2, 12, 28, 28, 16, 1, 1, 0, 1, 1),
    (1, 5, 4, 8, 7, 1, 1, 0, 1, 1),
    (1, 32, 8, 4, 12, 1, 1, 0, 1, 1),
    (1, 10, 16, 16, 16, 1, 1, 0, 1, 1),     # clip epilogue
    (1, 11, 16, 16, 16, 1, 1, 0, 1, 1),     # no epilogue
    # an input larger than L2 (rows outside the channel blocks: schedules._rows_outer)
    (1, 64, 96, 96, 16, 3, 1, 1, 1, 1),
    # strided 1x1: the input subsampled first, then conv-gemm (8x8 pixels) or conv-channels
    (1, 8, 16, 16, 16, 1, 2, 0, 1, 1),
    (2, 8, 13, 13, 8, 1, 3, 0, 1, 1),
    (2, 16, 32, 32, 24, 1, 2, 0, 1, 1),     # batch 2, 16x16 pixels (32-wide panels)
    (1, 64, 28, 28, 8, 1, 1, 0, 1, 1),      # 784 pixels: 16-wide panels, 64 channels deep
    # a channel multiplier (two outputs per input channel): not depthwise, conv-channels;
    # a prime output width above 16 (no vector width divides it): conv-channels
    (1, 8, 14, 14, 16, 3, 1, 1, 1, 8),
    (1, 4, 17, 17, 4, 3, 1, 1, 1, 4),
    # few input channels (conv-rows: a stem over RGB, vectorized along the output rows):
    # MobileNet's 3x3/2 and ResNet's 7x7/2 stems (smaller), widths 28 and 7, one channel, an
    # output channel count that 8 does not divide, dilation, batch > 1, a 1x1
    (1, 3, 32, 32, 32, 3, 2, 1, 1, 1),
    (1, 3, 27, 27, 16, 7, 2, 3, 1, 1),
    (2, 3, 28, 28, 12, 3, 1, 1, 1, 1),
    (1, 1, 9, 9, 6, 3, 1, 0, 1, 1),
    (1, 2, 15, 15, 8, 3, 1, 2, 2, 1),
    (1, 3, 16, 16, 8, 1, 1, 0, 1, 1),
]


def _expected_strategy(case: tuple) -> str:
    n, c, h, w, o, k, s, p, d, g = case
    ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
    if g == c == o and ow != 17:
        return "conv-depthwise"
    if g == 1 and c <= 4 and ow != 17:
        return "conv-rows"
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    if k == 1 and p == 0 and g == 1 and (oh * ow) % 16 == 0:
        return "conv-gemm"
    return "conv-channels"


def _src(case: tuple, epilogue: str) -> str:
    n, c, h, w, o, k, s, p, d, g = case
    conv = (f"nn.conv2d(%x, %w, strides=[{s}, {s}], padding=[{p}, {p}], dilation=[{d}, {d}], "
            f"groups={g})")
    body = {"none": conv, "bias-relu": f"nn.relu(add({conv}, %b))",
            "residual": f"nn.relu(add(add({conv}, %b), %r))",
            "clip": f"clip(add({conv}, %b), a_min=0f, a_max=6f)"}[epilogue]
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
    return HEADER + (f"def @main(%x: Tensor[({n}, {c}, {h}, {w}), float32], "
                     f"%w: Tensor[({o}, {c // g}, {k}, {k}), float32], "
                     f"%b: Tensor[({o}, 1, 1), float32], "
                     f"%r: Tensor[({n}, {o}, {oh}, {ow}), float32]) {{\n  {body}\n}}")


def _strategy(src: str, params: dict | None = None) -> str:
    """The CPU schedule the (first) fused group of ``src`` gets; with ``params``: after
    binding them and the llvm target rewrites (the weight layouts ``runtime.build`` gives)."""
    from relay_ir.runtime import lower_tvm, schedules
    from relay_ir.runtime.executor import bind_params
    from relay_ir.runtime.target_lowering import target_rewrites
    mod = rly.parse(src)
    if params:
        mod = target_rewrites(InferType()(bind_params(mod, "main", params)), "llvm")
    mod = fuse_ops(InferType()(mod))
    fn = next(f for f in post_order(mod["main"])
              if type(f) is Function and f is not mod["main"])
    group = lower_tvm.lower_group(fn, [p.checked_type_ for p in fn.params])
    report: list[str] = []
    schedules.schedule_cpu(group.prim_func, group.kind, report=report)
    return report[0]


@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c)) for c in CASES])
def test_conv_matches_numpy(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_ir.runtime import target_lowering
    n, c, h, w, o, k, s, p, d, g = case
    epilogue = ("none", "bias-relu", "residual", "clip")[sum(case) % 4]
    src = _src(case, epilogue)
    assert _strategy(src) == _expected_strategy(case)
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal((o, 1, 1)).astype(np.float32)
    want = conv_np(x, wt, s, p, d, g)
    r = rng.standard_normal(want.shape).astype(np.float32)
    if epilogue == "clip":
        want = np.clip(want + b, 0, 6)
    elif epilogue != "none":
        want = np.maximum(want + b + (r if epilogue == "residual" else 0), 0)
    # constant weights: with the blocked layout (conv-nchwc, the default: every output
    # channel count 8 divides) and without it (the NCHW schedules over packed weights)
    for nchwc in (True, False):
        monkeypatch.setattr(target_lowering, "NCHWC", nchwc)
        want_strategy = "conv-nchwc" if nchwc and o % 8 == 0 else _expected_strategy(case)
        assert _strategy(src, {"w": wt}) == want_strategy
        got = runtime.build(rly.parse(src), "llvm", params={"w": wt})(x, b, r)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_layouts_it_does_not_cover_fall_back_with_the_same_values() -> None:
    # NOTE: 6 output channels (not a multiple of 4) and an NHWC convolution
    rng = np.random.default_rng(3)
    src6 = _src((1, 4, 9, 9, 6, 3, 1, 1, 1, 1), "bias-relu")
    assert _strategy(src6) != "conv-channels"
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    wt = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal((6, 1, 1)).astype(np.float32)
    r = np.zeros((1, 6, 9, 9), np.float32)
    got = runtime.build(rly.parse(src6), "llvm")(x, wt, b, r)
    np.testing.assert_allclose(got, np.maximum(conv_np(x, wt, 1, 1, 1, 1) + b, 0),
                               rtol=1e-4, atol=1e-4)
    nhwc = HEADER + """def @main(%x: Tensor[(1, 7, 7, 8), float32],
          %w: Tensor[(3, 3, 8, 16), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1], data_layout="NHWC", kernel_layout="HWIO")
}"""
    assert _strategy(nhwc) != "conv-channels"
    xh = rng.standard_normal((1, 7, 7, 8)).astype(np.float32)
    wh = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    want = conv_np(xh.transpose(0, 3, 1, 2), wh.transpose(3, 2, 0, 1), 1, 1, 1, 1)
    np.testing.assert_allclose(runtime.build(rly.parse(nhwc), "llvm")(xh, wh),
                               want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def _conv_calls(exe: object) -> list:
    return [n for n in post_order(exe.module["main"])  # type: ignore[attr-defined]
            if type(n).__name__ == "Call" and getattr(n.op, "name", "") == "nn.conv2d"]


@pytest.mark.parametrize("case, layout", [
    ((1, 8, 14, 14, 16, 3, 2, 1, 1, 2), "OIHW16o"),
    ((1, 8, 14, 14, 24, 3, 1, 1, 1, 1), "OIHW8o"),
    ((1, 4, 9, 9, 12, 3, 1, 1, 1, 1), "OIHW4o"),
    ((1, 8, 14, 14, 8, 3, 1, 1, 1, 8), "IHWO"),      # depthwise
    ((1, 4, 9, 9, 6, 3, 1, 1, 1, 1), "IHWO"),        # no block divides 6
])
def test_constant_weights_take_a_packed_layout_and_keep_values(
        case: tuple, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # NOTE: the NCHW path (conv-weight-layout alone); the blocked one is tests/test_nchwc.py
    from relay_ir.runtime import target_lowering
    monkeypatch.setattr(target_lowering, "NCHWC", False)
    n, c, h, w, o, k, s, p, d, g = case
    src = _src(case, "bias-relu")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal((o, 1, 1)).astype(np.float32)
    want = np.maximum(conv_np(x, wt, s, p, d, g) + b, 0)
    r = np.zeros(want.shape, np.float32)
    exe = runtime.build(rly.parse(src), "llvm", params={"w": wt})
    convs = _conv_calls(exe)
    assert [cv.attrs.kernel_layout for cv in convs] == [layout]
    packed = convs[0].args[1].data
    if layout == "IHWO":
        np.testing.assert_array_equal(packed, wt.transpose(1, 2, 3, 0))
    else:
        blk = int(layout[4:-1])
        assert packed.shape == (o // blk, c // g, k, k, blk)
        # w[o, i, y, x] at [o // blk, i, y, x, o % blk]
        for oo in (0, o - 1, o // 2 + 1):
            np.testing.assert_array_equal(packed[oo // blk, ..., oo % blk], wt[oo])
    np.testing.assert_allclose(exe(x, b, r), want, rtol=1e-4, atol=1e-4)


def test_packed_kernel_layouts_are_read_in_place_and_interpret_the_same() -> None:
    # the layouts conv-weight-layout gives, written in the source: scheduled without packing
    # (conv-channels), and the interpreter computes the same function as with OIHW
    case = (1, 8, 14, 14, 16, 3, 2, 1, 1, 2)
    src = _src(case, "bias-relu")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 8, 14, 14)).astype(np.float32)
    wt = rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal((16, 1, 1)).astype(np.float32)
    r = np.zeros((1, 16, 7, 7), np.float32)
    want = np.maximum(conv_np(x, wt, 2, 1, 1, 2) + b, 0)
    ihwo = src.replace("%w: Tensor[(16, 4, 3, 3), float32]",
                       "%w: Tensor[(4, 3, 3, 16), float32]").replace(
        "groups=2)", "groups=2, kernel_layout=\"IHWO\")")
    blocked = src.replace("%w: Tensor[(16, 4, 3, 3), float32]",
                          "%w: Tensor[(2, 4, 3, 3, 8), float32]").replace(
        "groups=2)", "groups=2, kernel_layout=\"OIHW8o\")")
    w8 = np.ascontiguousarray(wt.reshape(2, 8, 4, 3, 3).transpose(0, 2, 3, 4, 1))
    from relay_ir.runtime.interpreter import evaluate
    for text, weight in ((ihwo, np.ascontiguousarray(wt.transpose(1, 2, 3, 0))),
                         (blocked, w8)):
        assert _strategy(text) == "conv-channels"
        mod = rly.parse(text)
        got = runtime.build(mod, "llvm")(x, weight, b, r)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        interp = evaluate(mod, x, weight, b, r)
        np.testing.assert_allclose(np.asarray(interp), want, rtol=1e-4, atol=1e-4)


def test_blocked_kernel_layout_errors() -> None:
    from relay_ir.errors import DiagnosticError
    bad_block = HEADER + """def @main(%x: Tensor[(1, 8, 5, 5), float32],
          %w: Tensor[(2, 8, 3, 3, 4), float32]) {
  nn.conv2d(%x, %w, kernel_layout="OIHW8o")
}"""
    with pytest.raises(DiagnosticError, match="last weight dimension of 8"):
        InferType()(rly.parse(bad_block))
    bad_rank = HEADER + """def @main(%x: Tensor[(1, 8, 5, 5), float32],
          %w: Tensor[(16, 8, 3, 3), float32]) {
  nn.conv2d(%x, %w, kernel_layout="OIHW8o")
}"""
    with pytest.raises(DiagnosticError, match="rank 5"):
        InferType()(rly.parse(bad_rank))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("channels, groups, strategy", [
    (4, 4, "conv-depthwise"), (4, 1, "conv-rows"), (8, 1, "conv-channels")])
def test_convolutions_keep_ieee_values_of_the_interpreter(stride: int, channels: int,
                                                          groups: int, strategy: str) -> None:
    # inf, nan and -0.0 in the input and the weights: the padded input (staged in a buffer by
    # conv-depthwise, conv-rows and conv-channels) and the window sums give what the
    # interpreter gives (inf * 0 = nan, inf - inf = nan, the sign of zero sums)
    from util_diff import assert_same_results
    cg = channels // groups
    src = HEADER + f"""def @main(%x: Tensor[(1, {channels}, 14, 14), float32],
          %w: Tensor[(4, {cg}, 3, 3), float32]) {{
  nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[1, 1], groups={groups})
}}"""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, channels, 14, 14)).astype(np.float32)
    x[0, 0, 3, 4], x[0, 1, 0, 0], x[0, 2, 7, 7], x[0, 3, 13, 12] = np.inf, np.nan, -np.inf, np.inf
    x[0, :, 5:8, 5:8] = -0.0
    w = rng.standard_normal((4, cg, 3, 3)).astype(np.float32)
    w[0, 0, 1, 1] = 0.0        # inf * 0 at the window's centre
    w[3] = np.abs(w[3])        # -0.0 * positive weights: -0.0 sums
    mod = rly.parse(src)
    assert _strategy(src, {"w": w}) == strategy
    exe = runtime.build(mod, "llvm", params={"w": w})
    [(want, got)] = assert_same_results(mod, mod, inputs=[x, w], rtol=1e-5, atol=1e-5,
                                        run_b=lambda m, x_, w_: exe(x_))
    want, got = np.asarray(want), np.asarray(got)
    assert np.isnan(got).any() and np.isinf(got).any()
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


def test_classifier_head_is_a_row_reduction_with_the_same_values() -> None:
    # dense(x[1, K], W[N, K]) + b: one dot product per output (schedules._matrix_vector), not
    # the GEMM schedule that packs all of W per call; inf and nan propagate as in numpy
    from relay_ir.runtime import lower_tvm, schedules
    src = HEADER + """def @main(%x: Tensor[(1, 160), float32], %w: Tensor[(100, 160), float32],
          %b: Tensor[(100), float32]) {
  nn.bias_add(nn.dense(%x, %w), %b)
}"""
    mod = fuse_ops(InferType()(rly.parse(src)))
    fn = next(f for f in post_order(mod["main"]) if type(f) is Function and f is not mod["main"])
    group = lower_tvm.lower_group(fn, [p.checked_type_ for p in fn.params])
    sch_mod = schedules.schedule_cpu(group.prim_func, group.kind)
    assert "_rf" in str(sch_mod)  # the rfactored row reduction
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 160)).astype(np.float32)
    w = rng.standard_normal((100, 160)).astype(np.float32)
    b = rng.standard_normal(100).astype(np.float32)
    w[3, 7], w[5, 9], w[5, 10] = np.nan, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    got = runtime.build(rly.parse(src), "llvm", params={"w": w, "b": b})(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isnan(got[0, 3]) and np.isnan(got[0, 5])


# (kind, batch, channels, height, width, pool, stride, padding, extra attributes, schedule):
# ResNet's 3x3/2 max pool, odd widths (7, 14, 28, 56), stride 1 and 2, unpadded windows, batch
# > 1, average pools with and without the padding counted, dilation, ceil_mode; the widths no
# vector width divides (57 with ceil_mode, 17) fall back
POOLS = [
    ("max", 1, 8, 112, 112, 3, 2, 1, "", "pool-rows"),
    ("max", 2, 4, 14, 14, 3, 1, 1, "", "pool-rows"),
    ("max", 1, 4, 28, 28, 2, 2, 0, "", "pool-rows"),
    ("max", 1, 3, 7, 7, 3, 1, 1, "", "pool-rows"),
    ("max", 1, 4, 57, 57, 3, 2, 1, ", dilation=[2, 2]", "pool-rows"),
    ("max", 1, 4, 30, 30, 3, 2, 1, ", ceil_mode=True", "pool-rows"),
    ("max", 1, 3, 112, 112, 3, 2, 1, ", ceil_mode=True", "planned"),
    ("avg", 1, 8, 56, 56, 3, 1, 1, "", "pool-rows"),
    ("avg", 2, 4, 28, 28, 3, 2, 1, ", count_include_pad=True", "pool-rows"),
    ("avg", 1, 4, 14, 14, 2, 2, 0, "", "pool-rows"),
    ("avg", 1, 4, 17, 17, 3, 1, 1, "", "planned"),
]


def _pool_src(case: tuple, dtype: str = "float32", layout: str = "NCHW") -> str:
    kind, n, c, h, w, k, s, p, extra, _ = case
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    lay = "" if layout == "NCHW" else f', layout="{layout}"'
    return HEADER + (f"def @main(%x: Tensor[({', '.join(map(str, shape))}), {dtype}]) {{\n"
                     f"  nn.{kind}_pool2d(%x, pool_size=[{k}, {k}], strides=[{s}, {s}], "
                     f"padding=[{p}, {p}]{extra}{lay})\n}}")


@pytest.mark.parametrize("case", POOLS, ids=["-".join(map(str, c[:8])) + c[8].replace(
    ", ", "-").replace("=", "").replace("[", "").replace("]", "").replace(" ", "")
    for c in POOLS])
def test_pools_match_the_interpreter(case: tuple) -> None:
    # the pool schedule (pool-rows: the padded plane staged once, vectorized along output rows)
    # where it applies; values as the interpreter's, inf, nan and -0.0 included (max: NaN
    # propagates, the padding never wins, -0.0 kept; average: inf - inf = nan in the sums)
    from relay_ir.runtime.interpreter import evaluate
    kind, n, c, h, w = case[:5]
    src = _pool_src(case)
    assert _strategy(src) == case[-1]
    rng = np.random.default_rng(h * w + c)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    # NOTE: at odd indices (read by the dilated stride-2 windows too)
    x[0, 0, 1, 1], x[0, 1, 3, 5], x[-1, -1, -1, -1] = np.nan, np.inf, -np.inf
    x[0, 1, 5, 5] = -np.inf
    x[0, 2, :4, :6] = -0.0
    x[-1, 0, 2:, 3] = -np.inf          # windows of -inf only
    mod = rly.parse(src)
    got = runtime.build(mod, "llvm")(x)
    want = np.asarray(evaluate(mod, x))
    assert got.shape == want.shape
    if kind == "max":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
    assert np.isnan(got).any() and np.isinf(got).any()


@pytest.mark.parametrize("dtype", ["int32", "int8"])
def test_integer_max_pool_takes_the_pool_schedule(dtype: str) -> None:
    from relay_ir.runtime.interpreter import evaluate
    case = ("max", 1, 4, 28, 28, 3, 2, 1, "", "pool-rows")
    src = _pool_src(case, dtype)
    assert _strategy(src) == "pool-rows"
    info = np.iinfo(dtype)
    x = np.random.default_rng(2).integers(info.min, info.max, (1, 4, 28, 28)).astype(dtype)
    x[0, 0, :2, :2] = info.min     # the corner window: only the padding's minimum and info.min
    mod = rly.parse(src)
    got = runtime.build(mod, "llvm")(x)
    np.testing.assert_array_equal(got, np.asarray(evaluate(mod, x)))
    assert got[0, 0, 0, 0] == info.min


def test_nhwc_pool_falls_back_with_the_same_values() -> None:
    from relay_ir.runtime.interpreter import evaluate
    case = ("max", 1, 8, 14, 14, 3, 2, 1, "", "")
    src = _pool_src(case, layout="NHWC")
    assert _strategy(src) != "pool-rows"
    x = np.random.default_rng(4).standard_normal((1, 14, 14, 8)).astype(np.float32)
    mod = rly.parse(src)
    np.testing.assert_array_equal(runtime.build(mod, "llvm")(x), np.asarray(evaluate(mod, x)))


def conv_transpose_np(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int,
                      out_pad: int) -> np.ndarray:
    """NCHW / IOHW transposed convolution (groups 1) in float64: each input pixel scatters
    ``x[n, ci, iy, ix] * w[ci, co]`` onto the output window at ``(iy, ix) * stride``."""
    n, ci, h, wd = x.shape
    _, co, kh, kw = w.shape
    full_h = (h - 1) * stride + dil * (kh - 1) + 1 + out_pad
    full_w = (wd - 1) * stride + dil * (kw - 1) + 1 + out_pad
    out = np.zeros((n, co, full_h + pad, full_w + pad))
    for ky in range(kh):
        for kx in range(kw):
            contrib = np.einsum("nchw,co->nohw", x.astype(np.float64), w[:, :, ky, kx])
            out[:, :, ky * dil: ky * dil + stride * (h - 1) + 1: stride,
                kx * dil: kx * dil + stride * (wd - 1) + 1: stride] += contrib
    return out[:, :, pad: full_h - pad, pad: full_w - pad]


# (batch, in channels, height, width, out channels, kernel, stride, padding, dilation,
# output padding): the DCGAN-style 4x4/2, 3x3/2 with output padding, stride 1 and 3, odd
# widths (7, 14), dilation, batch > 1
CONVT_CASES = [
    (1, 16, 8, 8, 8, 4, 2, 1, 1, 0),
    (1, 32, 7, 7, 16, 4, 2, 1, 1, 0),
    (2, 8, 14, 14, 8, 3, 2, 1, 1, 1),
    (1, 8, 14, 14, 4, 3, 1, 1, 1, 0),
    (1, 4, 5, 7, 6, 3, 3, 0, 1, 0),
    (1, 6, 9, 9, 4, 3, 2, 2, 2, 0),
]


@pytest.mark.parametrize("case", CONVT_CASES, ids=["x".join(map(str, c)) for c in CONVT_CASES])
def test_conv2d_transpose_schedule_matches_numpy(case: tuple) -> None:
    # the GEMM + col2im schedule (conv-transpose), a bias + relu epilogue fused; values as
    # numpy's, and inf / nan where the interpreter has them
    from relay_ir.runtime.interpreter import evaluate
    n, c, h, w, o, k, s, p, d, op_ = case
    src = HEADER + (
        f"def @main(%x: Tensor[({n}, {c}, {h}, {w}), float32], "
        f"%w: Tensor[({c}, {o}, {k}, {k}), float32], %b: Tensor[({o}, 1, 1), float32]) {{\n"
        f"  nn.relu(add(nn.conv2d_transpose(%x, %w, channels={o}, kernel_size=[{k}, {k}], "
        f"strides=[{s}, {s}], padding=[{p}, {p}], dilation=[{d}, {d}], "
        f"output_padding=[{op_}, {op_}]), %b))\n}}")
    assert _strategy(src) == "conv-transpose"
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, o, k, k)).astype(np.float32)
    b = rng.standard_normal((o, 1, 1)).astype(np.float32)
    want = np.maximum(conv_transpose_np(x, wt, s, p, d, op_) + b, 0)
    mod = rly.parse(src)
    got = runtime.build(mod, "llvm", params={"w": wt})(x, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    x[0, 0, 1, 1], x[-1, -1, -1, -1] = np.inf, np.nan
    got = runtime.build(mod, "llvm")(x, wt, b)
    ref = np.asarray(evaluate(mod, x, wt, b))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isnan(got).any()


def test_conv2d_transpose_layouts_it_does_not_cover_fall_back() -> None:
    from relay_ir.runtime.interpreter import evaluate
    grouped = HEADER + """def @main(%x: Tensor[(1, 4, 6, 6), float32],
          %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.conv2d_transpose(%x, %w, channels=6, kernel_size=[3, 3], strides=[2, 2], groups=2)
}"""
    assert _strategy(grouped) != "conv-transpose"
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    wt = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    mod = rly.parse(grouped)
    np.testing.assert_allclose(runtime.build(mod, "llvm")(x, wt), np.asarray(evaluate(mod, x, wt)),
                               rtol=1e-4, atol=1e-4)


def _scheduled(src: str) -> object:
    """The scheduled CPU module of the (first) fused group of ``src``."""
    from relay_ir.runtime import lower_tvm, schedules
    mod = fuse_ops(InferType()(rly.parse(src)))
    fn = next(f for f in post_order(mod["main"])
              if type(f) is Function and f is not mod["main"])
    group = lower_tvm.lower_group(fn, [p.checked_type_ for p in fn.params])
    return schedules.schedule_cpu(group.prim_func, group.kind)


@pytest.mark.parametrize("case", [(1, 16, 16, 16, 24, 1, 1, 0, 1, 1),
                                  (2, 8, 28, 28, 16, 1, 1, 0, 1, 1),
                                  (1, 8, 32, 32, 12, 1, 2, 0, 1, 1),
                                  (2, 12, 24, 24, 8, 1, 3, 0, 1, 1)],
                         ids=["s1", "s1-batch2-784px", "s2", "s3-batch2"])
def test_conv_gemm_packs_the_input_per_pixel_panel_with_the_same_values(
        case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    # conv-gemm copies each pixel panel of a stride-1 input into a contiguous [N, panels, C,
    # width] buffer inside its parallel loop: bitwise the values of the schedule reading the
    # input in place, and numpy's; a strided one reads its subsampled copy (no panels)
    from relay_ir.runtime import schedules
    from relay_ir.runtime.kernel_cache import KernelCache
    n, c, h, w, o, k, s, p, d, g = case
    src = _src(case, "bias-relu")
    assert _strategy(src) == "conv-gemm"
    px = ((h - 1) // s + 1) * ((w - 1) // s + 1)
    nr = 32 if px % 32 == 0 else 16
    panel = f"T.sblock_alloc_buffer(({n}, {px // nr}, {c}, {nr})"
    assert (panel in _scheduled(src).script()) == (s == 1)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal((o, 1, 1)).astype(np.float32)
    want = np.maximum(conv_np(x, wt, s, 0, 1, 1) + b, 0)
    r = np.zeros(want.shape, np.float32)
    got = runtime.build(rly.parse(src), "llvm", params={"w": wt},
                        cache=KernelCache(use_disk=False))(x, b, r)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(schedules, "PACK_PANELS", False)
    assert panel not in _scheduled(src).script()
    before = runtime.build(rly.parse(src), "llvm", params={"w": wt},
                           cache=KernelCache(use_disk=False))(x, b, r)
    np.testing.assert_array_equal(got, before)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_gemm_keeps_ieee_values_of_the_interpreter(stride: int) -> None:
    # inf, nan and -0.0 through the packed input panels of conv-gemm: inf * 0 = nan,
    # inf - inf = nan, -0.0 sums keep their sign, as in the interpreter
    from util_diff import assert_same_results
    src = HEADER + f"""def @main(%x: Tensor[(1, 8, 16, 16), float32],
          %w: Tensor[(6, 8, 1, 1), float32]) {{
  nn.conv2d(%x, %w, strides=[{stride}, {stride}])
}}"""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    x[0, 0, 2, 4], x[0, 1, 0, 0], x[0, 2, 6, 6], x[0, 3, 14, 12] = np.inf, np.nan, -np.inf, np.inf
    x[0, 0, 8, 8], x[0, 1, 8, 8] = np.inf, -np.inf
    x[0, :, 10:14, 10:14] = -0.0
    w = np.abs(rng.standard_normal((6, 8, 1, 1))).astype(np.float32)
    w[0, 0] = 0.0              # inf * 0
    mod = rly.parse(src)
    assert _strategy(src, {"w": w}) == "conv-gemm"
    exe = runtime.build(mod, "llvm", params={"w": w})
    [(want, got)] = assert_same_results(mod, mod, inputs=[x, w], rtol=1e-5, atol=1e-5,
                                        run_b=lambda m, x_, w_: exe(x_))
    want, got = np.asarray(want), np.asarray(got)
    assert np.isnan(got).any() and np.isinf(got).any() and (want == 0).any()
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
