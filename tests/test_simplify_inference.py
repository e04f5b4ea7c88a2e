"""simplify-inference: batch norm to scale and shift (folded into weights), dropout removed.

Values against the interpreter on the original program, over a table of small networks;
text before/after; the inf / nan / signed-zero cases the pass must keep or leave alone.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.passes import get_pass
from relay_ir.passes.simplify_inference import simplify_inference
from relay_ir.runtime.executor import bind_params
from relay_ir.traversal import post_order

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


def _bn_params(prefix: str, c: int) -> dict[str, np.ndarray]:
    return {f"{prefix}g": _f32(c), f"{prefix}b": _f32(c), f"{prefix}m": _f32(c),
            f"{prefix}v": (RNG.random(c) + 0.5).astype("float32")}


def _bn_sig(prefix: str, c: int) -> str:
    return ", ".join(f"%{prefix}{k}: Tensor[({c}), float32]" for k in "gbmv")


def _bn(x: str, prefix: str, extra: str = "") -> str:
    return f"nn.batch_norm({x}, %{prefix}g, %{prefix}b, %{prefix}m, %{prefix}v{extra})"


def _ops(mod: rly.IRModule) -> list[str]:
    from relay_ir.expr import Call, Op
    return sorted(n.op.name for n in post_order(mod["main"])
                  if type(n) is Call and type(n.op) is Op)


# name -> (source, params, input shape, op names left after the pass)
NETS = {
    "conv-bn-relu": (f"""
def @main(%x: Tensor[(1, 3, 9, 9), float32],
          %w: Tensor[(8, 3, 3, 3), float32], {_bn_sig("a", 8)}) {{
  %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1]);
  %1 = {_bn("%0", "a")};
  nn.relu(%1.0)
}}""", {"w": _f32(8, 3, 3, 3), **_bn_params("a", 8)}, (1, 3, 9, 9),
        ["add", "nn.conv2d", "nn.relu"]),
    "conv-bn-add-relu residual": (f"""
def @main(%x: Tensor[(2, 4, 7, 7), float32], %w1: Tensor[(4, 4, 3, 3), float32],
          %w2: Tensor[(4, 4, 1, 1), float32], {_bn_sig("a", 4)}, {_bn_sig("b", 4)}) {{
  %0 = nn.conv2d(%x, %w1, padding=[1, 1]);
  %1 = {_bn("%0", "a")};
  %2 = nn.relu(%1.0);
  %3 = nn.conv2d(%2, %w2);
  %4 = {_bn("%3", "b")};
  nn.relu(add(%4.0, %x))
}}""", {"w1": _f32(4, 4, 3, 3), "w2": _f32(4, 4, 1, 1), **_bn_params("a", 4),
        **_bn_params("b", 4)}, (2, 4, 7, 7),
        ["add", "add", "add", "nn.conv2d", "nn.conv2d", "nn.relu", "nn.relu"]),
    "depthwise-bn": (f"""
def @main(%x: Tensor[(1, 6, 14, 14), float32],
          %w: Tensor[(6, 1, 3, 3), float32], {_bn_sig("a", 6)}) {{
  %0 = nn.conv2d(%x, %w, padding=[1, 1], groups=6);
  %1 = {_bn("%0", "a")};
  clip(%1.0, a_min=0f, a_max=6f)
}}""", {"w": _f32(6, 1, 3, 3), **_bn_params("a", 6)}, (1, 6, 14, 14),
        ["add", "clip", "nn.conv2d"]),
    "dense-bn-dropout": (f"""
def @main(%x: Tensor[(3, 5), float32], %w: Tensor[(6, 5), float32], {_bn_sig("a", 6)}) {{
  %0 = nn.dense(%x, %w);
  %1 = {_bn("%0", "a", ", axis=1")};
  %2 = nn.dropout(%1.0, rate=0.3f);
  %2.0
}}""", {"w": _f32(6, 5), **_bn_params("a", 6)}, (3, 5), ["add", "nn.dense"]),
    "bn on an input, scale only": (f"""
def @main(%x: Tensor[(2, 3, 4), float32], {_bn_sig("a", 3)}) {{
  %1 = {_bn("%x", "a", ", center=False")};
  (%1.0, %1.1, %1.2)
}}""", _bn_params("a", 3), (2, 3, 4), ["multiply", "subtract"]),
    "bn shared by two users of the conv": (f"""
def @main(%x: Tensor[(1, 2, 5, 5), float32],
          %w: Tensor[(3, 2, 3, 3), float32], {_bn_sig("a", 3)}) {{
  %0 = nn.conv2d(%x, %w);
  %1 = {_bn("%0", "a")};
  add(%1.0, %0)
}}""", {"w": _f32(3, 2, 3, 3), **_bn_params("a", 3)}, (1, 2, 5, 5),
        ["add", "add", "multiply", "nn.conv2d"]),
    # ResNet v2's pre-activation: a batch norm after a one-argument op (relu), not foldable
    "bn after relu (pre-activation)": (f"""
def @main(%x: Tensor[(1, 4, 5, 5), float32],
          %w: Tensor[(4, 4, 1, 1), float32], {_bn_sig("a", 4)}) {{
  %0 = nn.relu(%x);
  %1 = {_bn("%0", "a")};
  nn.conv2d(nn.relu(%1.0), %w)
}}""", {"w": _f32(4, 4, 1, 1), **_bn_params("a", 4)}, (1, 4, 5, 5),
        ["add", "multiply", "nn.conv2d", "nn.relu", "nn.relu"]),
}


@pytest.mark.parametrize("name", list(NETS))
def test_values_kept_on_small_networks(name: str) -> None:
    src, params, shape, left = NETS[name]
    mod = rly.parse(HEADER + src)
    x = _f32(*shape)
    want = runtime.evaluate(mod, x, *params.values())
    bound = get_pass("to-anf")(bind_params(mod, "main", params))
    out = simplify_inference(bound)
    assert _ops(out) == left
    got = runtime.evaluate(out, x)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_text_before_after_and_folded_constants() -> None:
    src, params, shape, _ = NETS["conv-bn-relu"]
    out = simplify_inference(get_pass("to-anf")(bind_params(rly.parse(HEADER + src), "main",
                                                            params)))
    text = rly.astext(out)
    body = text.split("#[metadata]")[0]
    conv = ("nn.conv2d(%x, meta[relay.Constant][0], strides=[2, 2], "
            "padding=[1, 1])")
    assert body == HEADER + """\
def @main(%x: Tensor[(1, 3, 9, 9), float32]) -> Tensor[(1, 8, 5, 5), float32] {
  let %x0: Tensor[(1, 8, 5, 5), float32] = CONV;
  let %x1: Tensor[(1, 8, 5, 5), float32] = add(%x0, meta[relay.Constant][1]);
  let %x3: Tensor[(1, 8, 5, 5), float32] = nn.relu(%x1);
  %x3
}

""".replace("CONV", conv)
    from relay_ir.expr import Constant
    consts = [n.data for n in post_order(out["main"]) if type(n) is Constant]
    g, b, m, v = (params["a" + k].astype(np.float64) for k in "gbmv")
    s = g / np.sqrt(v + 1e-5)
    w = consts[0] if consts[0].ndim == 4 else consts[1]
    t = consts[1] if consts[0].ndim == 4 else consts[0]
    np.testing.assert_allclose(w, params["w"] * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(t.reshape(-1), b - m * s, rtol=1e-6, atol=1e-6)


SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.5, -2.0, 3e-40], np.float32)


def _same_ieee(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]),
                                  np.signbit(want[~np.isnan(want)]))
    np.testing.assert_array_equal(got == 0, want == 0)
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-30)


# gamma, beta, mean, center: zero means, negative zero shifts, negative scales
EDGE = {
    "zero mean and beta": ([1.0, -1.0, 2.0], [0.0, 0.0, -0.0], [0.0, 0.0, 0.0], True),
    "negative-zero beta": ([-1.0, 1.0, -3.0], [-0.0, -0.0, -0.0], [0.0, 0.0, 0.0], True),
    "no center, zero mean": ([-1.0, 1.0, 2.0], [5.0, 5.0, 5.0], [0.0, 0.0, 0.0], False),
    "no center, mean": ([-1.0, 1.0, 2.0], [5.0, 5.0, 5.0], [1.5, -2.0, 0.0], False),
    "mean equals input": ([-1.0, 2.0, 1.0], [1.0, -0.5, 0.0], [1.5, -2.0, 1.5], True),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_inf_nan_and_signed_zeros_kept(name: str) -> None:
    g, b, m, center = EDGE[name]
    src = HEADER + f"""
def @main(%x: Tensor[(1, 3, 8), float32], {_bn_sig("a", 3)}) {{
  %1 = {_bn("%x", "a", "" if center else ", center=False")};
  %1.0
}}"""
    params = {"ag": np.array(g, np.float32), "ab": np.array(b, np.float32),
              "am": np.array(m, np.float32), "av": np.array([1.0, 0.25, 4.0], np.float32)}
    mod = rly.parse(src)
    x = np.broadcast_to(SPECIAL, (1, 3, 8)).copy()
    want = runtime.evaluate(mod, x, *params.values())
    out = simplify_inference(get_pass("to-anf")(bind_params(mod, "main", params)))
    assert "nn.batch_norm" not in _ops(out)
    _same_ieee(runtime.evaluate(out, x), want)


def test_left_alone_when_the_scale_is_not_finite() -> None:
    # NOTE: var = -eps: the scale is inf; (x - m) * inf differs from x * inf - m * inf
    src = HEADER + f"""
def @main(%x: Tensor[(1, 2, 3), float32], {_bn_sig("a", 2)}) {{
  %1 = {_bn("%x", "a", ", epsilon=0.25f")};
  %1.0
}}"""
    params = {"ag": np.ones(2, np.float32), "ab": np.zeros(2, np.float32),
              "am": np.ones(2, np.float32), "av": np.array([-0.25, 1.0], np.float32)}
    out = simplify_inference(get_pass("to-anf")(bind_params(rly.parse(src), "main", params)))
    assert "nn.batch_norm" in _ops(out)


def test_negative_zero_shift_keeps_the_scale_out_of_the_weights() -> None:
    # NOTE: conv(0, w) sums +0 and -0 terms to +0; times a negative scale that is -0, and
    # -0 + -0 stays -0. Scaled weights would give +0: the multiply stays.
    src = HEADER + f"""
def @main(%x: Tensor[(1, 1, 3, 3), float32],
          %w: Tensor[(2, 1, 2, 2), float32], {_bn_sig("a", 2)}) {{
  %0 = nn.conv2d(%x, %w);
  %1 = {_bn("%0", "a")};
  %1.0
}}"""
    params = {"w": np.array([1, -1, 1, -1, 2, -2, 2, -2], np.float32).reshape(2, 1, 2, 2),
              "ag": np.array([-1.0, 2.0], np.float32), "ab": np.array([-0.0, 1.0], np.float32),
              "am": np.zeros(2, np.float32), "av": np.ones(2, np.float32)}
    mod = rly.parse(src)
    out = simplify_inference(get_pass("to-anf")(bind_params(mod, "main", params)))
    assert _ops(out) == ["add", "multiply", "nn.conv2d"]
    x = np.zeros((1, 1, 3, 3), np.float32)
    _same_ieee(runtime.evaluate(out, x), runtime.evaluate(mod, x, *params.values()))


def test_build_with_params_folds_batch_norm_and_keeps_values() -> None:
    src, params, shape, _ = NETS["conv-bn-add-relu residual"]
    mod = rly.parse(HEADER + src)
    x = _f32(*shape)
    exe = runtime.build(mod, "llvm", params=params)
    names = [n.op.name for n in post_order(exe.module["main"])
             if type(n).__name__ == "Call" and type(n.op).__name__ == "Op"]
    assert "nn.batch_norm" not in names and "multiply" not in names
    np.testing.assert_allclose(exe(x), runtime.evaluate(mod, x, *params.values()),
                               rtol=2e-5, atol=2e-5)


def test_batch_norm_inside_deep_nesting_needs_no_recursion() -> None:
    # the rewrite's binding handler is a generator: a batch norm under 400 nested ifs folds
    # with only 250 Python frames to spare
    import inspect
    import sys
    body = _bn("%x", "a") + ".0"
    for _ in range(400):
        body = f"if (%c) {{ {body} }} else {{ %x }}"
    src = f"def @main(%c: bool, %x: Tensor[(1, 2, 3, 3), float32], {_bn_sig('a', 2)}) {{ {body} }}"
    mod = rly.parse(HEADER + src)
    bound = get_pass("to-anf")(bind_params(mod, "main", _bn_params("a", 2)))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 250)
    try:
        out = simplify_inference(bound)
    finally:
        sys.setrecursionlimit(old)
    assert "nn.batch_norm" not in _ops(out)
    x = _f32(1, 2, 3, 3)
    for c in (True, False):
        np.testing.assert_allclose(runtime.evaluate(out, np.array(c), x),
                                   runtime.evaluate(bound, np.array(c), x), rtol=1e-5)
