"""Winograd 3x3 convolutions (``runtime/winograd.py``): opt-in with ``fast_math=True``.

The transform matrices against the direct 1-d correlation; the rewritten convolution against
numpy (float64) over a table of shapes (channels 3..256, widths 7, 14, 28, 56 and odd ones,
padding 0/1, batch > 1, bias/relu/residual epilogues) within the documented tolerance, for
both tiles (forced: ``FORCE_TILE``); the cost rule's choices; the default build never rewrites
(the module keeps its ``nn.conv2d``) and keeps the interpreter's inf/nan values; convolutions
it does not cover are left alone; with the opt-in an inf in the input makes NaN of its output
tile (documented).
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime import winograd
from relay_ir.traversal import post_order

from test_conv_schedules import HEADER, conv_np

pytestmark = pytest.mark.tvm

# relative to the output's largest magnitude (documented in docs/op_compute.md)
TOL = {2: 1e-5, 4: 1e-4}


def _ops(exe: object) -> list[str]:
    return [n.op.name for n in post_order(exe.module["main"])  # type: ignore[attr-defined]
            if type(n).__name__ == "Call" and hasattr(n.op, "name")]


def _src(n: int, c: int, h: int, w: int, k: int, pad: int, epilogue: str,
         stride: int = 1, groups: int = 1, dil: int = 1) -> str:
    conv = (f"nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}], "
            f"dilation=[{dil}, {dil}], groups={groups})")
    body = {"none": conv, "bias-relu": f"nn.relu(add({conv}, %b))",
            "residual": f"nn.relu(add(add({conv}, %b), %r))"}[epilogue]
    oh = (h + 2 * pad - dil * 2 - 1) // stride + 1
    ow = (w + 2 * pad - dil * 2 - 1) // stride + 1
    return HEADER + (f"def @main(%x: Tensor[({n}, {c}, {h}, {w}), float32], "
                     f"%w: Tensor[({k}, {c // groups}, 3, 3), float32], "
                     f"%b: Tensor[({k}, 1, 1), float32], "
                     f"%r: Tensor[({n}, {k}, {oh}, {ow}), float32]) {{\n  {body}\n}}")


@pytest.fixture
def force_tile():
    def set_(m: int | None) -> None:
        winograd.FORCE_TILE[0] = m
    yield set_
    winograd.FORCE_TILE[0] = None


@pytest.mark.parametrize("m", [2, 4])
def test_transforms_compute_the_correlation(m: int) -> None:
    bt, g, at = winograd.TRANSFORMS[m]
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, w = rng.standard_normal(m + 2), rng.standard_normal(3)
        want = np.array([d[i:i + 3] @ w for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), want, rtol=1e-12, atol=1e-12)
    # 2-d: the weight transform the rewrite uses, nested
    d2, w2 = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((1, 1, 3, 3))
    u = winograd.transform_weight(w2.astype(np.float32), m).reshape(m + 2, m + 2)
    y = at @ (u * (bt @ d2 @ bt.T)) @ at.T
    want = np.array([[np.sum(d2[i:i + 3, j:j + 3] * w2[0, 0]) for j in range(m)]
                     for i in range(m)])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


# (batch, in channels, height, width, out channels, padding, epilogue)
CASES = [
    (1, 3, 7, 7, 8, 1, "bias-relu"),
    (1, 16, 14, 14, 32, 1, "none"),
    (2, 8, 13, 11, 16, 1, "residual"),
    (1, 32, 28, 28, 16, 0, "bias-relu"),
    (1, 8, 56, 56, 8, 1, "none"),
    (3, 12, 9, 15, 4, 0, "residual"),
    (1, 256, 7, 7, 32, 1, "bias-relu"),
]


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:6])) + c[6] for c in CASES])
def test_winograd_matches_numpy(case: tuple, m: int, force_tile) -> None:
    n, c, h, w, k, pad, epilogue = case
    force_tile(m)
    src = _src(n, c, h, w, k, pad, epilogue)
    rng = np.random.default_rng(sum(case[:6]) + m)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal((k, 1, 1)).astype(np.float32)
    want = conv_np(x, wt, 1, pad, 1, 1)
    r = rng.standard_normal(want.shape).astype(np.float32)
    if epilogue != "none":
        want = np.maximum(want + b + (r if epilogue == "residual" else 0), 0)
    exe = runtime.build(rly.parse(src), "llvm", params={"w": wt}, fast_math=True)
    ops = _ops(exe)
    assert "nn.conv2d" not in ops and "nn.batch_matmul" in ops
    got = exe(x, b, r)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL[m] * scale
    # the opt-in changes values by rounding: not bitwise the direct convolution's
    direct = runtime.build(rly.parse(src), "llvm", params={"w": wt})
    assert "nn.conv2d" in _ops(direct)


def test_cost_rule_chooses_measured_layers(force_tile) -> None:
    # measured (runtime/winograd.py, benchmarks/RESULTS.md): 256 channels at 28x28 won; none
    # of ResNet-50's 3x3 stride-1 layers wins in the model
    assert winograd.winograd_tile(1, 256, 256, 28, 28) == 4
    assert winograd.winograd_tile(1, 256, 256, 14, 14) == 0   # 16 tiles: weight-bound
    assert winograd.winograd_tile(2, 256, 256, 14, 14) == 4   # 32 tiles over the batch
    assert winograd.winograd_tile(1, 512, 512, 14, 14) == 0
    assert winograd.winograd_tile(1, 64, 64, 56, 56) == 0
    assert winograd.winograd_tile(1, 128, 128, 28, 28) == 0
    assert winograd.winograd_tile(1, 512, 512, 7, 7) == 0     # 4 tiles: too few rows
    assert winograd.winograd_tile(1, 3, 64, 224, 224) == 0
    force_tile(2)
    assert winograd.winograd_tile(1, 3, 64, 224, 224) == 2


def test_cost_rule_applies_in_the_opt_in_build_only() -> None:
    src = _src(1, 256, 28, 28, 256, 1, "bias-relu")
    rng = np.random.default_rng(3)
    wt = (rng.standard_normal((256, 256, 3, 3)) / 48).astype(np.float32)
    x = rng.standard_normal((1, 256, 28, 28)).astype(np.float32)
    b = rng.standard_normal((256, 1, 1)).astype(np.float32)
    r = np.zeros((1, 256, 28, 28), np.float32)
    fast = runtime.build(rly.parse(src), "llvm", params={"w": wt}, fast_math=True)
    assert "nn.conv2d" not in _ops(fast)
    for opt in (None, False):
        assert "nn.conv2d" in _ops(runtime.build(rly.parse(src), "llvm", params={"w": wt},
                                                 fast_math=opt))
    want = np.maximum(conv_np(x, wt, 1, 1, 1, 1) + b, 0)
    assert np.abs(fast(x, b, r) - want).max() <= TOL[4] * float(np.abs(want).max())


@pytest.mark.parametrize("stride, groups, dil", [(2, 1, 1), (1, 2, 1), (1, 1, 2)])
def test_convolutions_it_does_not_cover_are_left_alone(stride: int, groups: int, dil: int,
                                                       force_tile) -> None:
    force_tile(4)
    src = _src(1, 8, 14, 14, 8, 1, "none", stride=stride, groups=groups, dil=dil)
    rng = np.random.default_rng(5)
    wt = rng.standard_normal((8, 8 // groups, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 8, 14, 14)).astype(np.float32)
    exe = runtime.build(rly.parse(src), "llvm", params={"w": wt}, fast_math=True)
    assert "nn.conv2d" in _ops(exe) and "nn.batch_matmul" not in _ops(exe)
    oh = (14 + 2 - dil * 2 - 1) // stride + 1
    got = exe(x, np.zeros((8, 1, 1), np.float32), np.zeros((1, 8, oh, oh), np.float32))
    np.testing.assert_allclose(got, conv_np(x, wt, stride, 1, dil, groups), rtol=1e-4,
                               atol=1e-4)


def test_weights_that_are_not_constants_are_left_alone(force_tile) -> None:
    force_tile(2)
    src = _src(1, 8, 14, 14, 8, 1, "none")
    exe = runtime.build(rly.parse(src), "llvm", fast_math=True)
    assert "nn.conv2d" in _ops(exe)


def test_default_build_keeps_ieee_values_and_opt_in_spreads_nan(force_tile) -> None:
    # even with a tile forced, the default build never rewrites: inf/nan as the interpreter
    force_tile(2)
    src = HEADER + """def @main(%x: Tensor[(1, 8, 8, 8), float32],
          %w: Tensor[(8, 8, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1])
}"""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
    x[0, 2, 3, 3] = np.inf
    w = np.abs(rng.standard_normal((8, 8, 3, 3))).astype(np.float32)
    mod = rly.parse(src)
    want = np.asarray(runtime.evaluate(mod, x, w))
    default = runtime.build(mod, "llvm", params={"w": w})
    assert "nn.conv2d" in _ops(default)
    got = default(x)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert not np.isnan(want).any() and np.isinf(want).sum() == 8 * 9
    fast = runtime.build(rly.parse(src), "llvm", params={"w": w}, fast_math=True)
    assert "nn.conv2d" not in _ops(fast)
    out = fast(x)
    # inf - inf in the input transform: NaN over whole output tiles, not only the window
    assert np.isnan(out).sum() > 0 and (np.isnan(out) | np.isinf(out)).sum() > 8 * 9
    finite = np.isfinite(want) & np.isfinite(out)
    np.testing.assert_allclose(out[finite], want[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [2, 4])
def test_sums_of_slices_form_matches_numpy(m: int, force_tile, monkeypatch) -> None:
    # the first form (TRANSFORM_MATMUL False), kept for comparison: same values
    monkeypatch.setattr(winograd, "TRANSFORM_MATMUL", [False])
    force_tile(m)
    src = _src(2, 8, 9, 10, 16, 1, "bias-relu")
    rng = np.random.default_rng(m)
    x = rng.standard_normal((2, 8, 9, 10)).astype(np.float32)
    wt = (rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32)
    b = rng.standard_normal((16, 1, 1)).astype(np.float32)
    r = np.zeros((2, 16, 9, 10), np.float32)
    exe = runtime.build(rly.parse(src), "llvm", params={"w": wt}, fast_math=True)
    assert "nn.conv2d" not in _ops(exe) and "nn.matmul" not in _ops(exe)
    want = np.maximum(conv_np(x, wt, 1, 1, 1, 1) + b, 0)
    assert np.abs(exe(x, b, r) - want).max() <= TOL[m] * float(np.abs(want).max())
