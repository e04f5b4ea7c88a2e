"""Blocked channel layouts (``NCHW<b>c``, ``conv-nchwc``: runtime/nchwc.py).

The layout-transformed programs equal the original ones (the interpreter) on a table of small
networks: convolution chains with residual adds, pooling, depthwise and grouped
convolutions, channels no block divides, batch > 1, odd widths, strides, padding, dilation;
layouts change only where they must (no ``layout_transform`` between two blocked ops); the
blocked operators compute what their NCHW forms compute; the blocked kernels get the blocked
schedules; inf / nan flow as in the interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.errors import DiagnosticError
from relay_ir.expr import Call, Function, Op
from relay_ir.passes import InferType
from relay_ir.passes.fuse_ops import fuse_ops
from relay_ir.traversal import post_order

pytestmark = pytest.mark.tvm

HEADER = '#[version = "0.0.5"]\n'


@pytest.fixture
def nchwc(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_ir.runtime import target_lowering
    monkeypatch.setattr(target_lowering, "NCHWC", True)


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)


def _b(rng: np.random.Generator, c: int) -> np.ndarray:
    return rng.standard_normal((c, 1, 1)).astype(np.float32)


# name -> (source, input shape, {param: shape}, layout_transforms expected after conv-nchwc)
NETS: dict[str, tuple[str, tuple[int, ...], dict[str, tuple[int, ...]], int]] = {
    # a ResNet block: 3x3 then 1x1 with a 1x1 shortcut, residual add, relu, max pool with
    # padding, global average pool, flatten (the only op that needs NCHW back)
    "resblock": ("""def @main(%x: Tensor[(1, 16, 14, 14), float32], %w1, %b1, %w2, %b2, %ws) {
  %0 = nn.relu(add(nn.conv2d(%x, %w1, padding=[1, 1]), %b1));
  %1 = add(nn.conv2d(%0, %w2), %b2);
  %2 = nn.relu(add(%1, nn.conv2d(%x, %ws)));
  %3 = nn.max_pool2d(%2, pool_size=[3, 3], strides=[2, 2], padding=[1, 1]);
  nn.batch_flatten(nn.global_avg_pool2d(%3))
}""", (1, 16, 14, 14), {"w1": (32, 16, 3, 3), "b1": (32, 1, 1), "w2": (32, 32, 1, 1),
                        "b2": (32, 1, 1), "ws": (32, 16, 1, 1)}, 1),
    # MobileNet-like, batch 2: a strided stem over 3 channels, depthwise stride 1 and 2 with
    # clip, 1x1 projections to 24 channels (block 8) and back, a residual add, an average pool
    "mobile": ("""def @main(%x: Tensor[(2, 3, 28, 28), float32], %w0, %b0, %wd, %bd, %wp, %bp,
          %we, %be, %wd2, %bd2) {
  %0 = clip(add(nn.conv2d(%x, %w0, strides=[2, 2], padding=[1, 1]), %b0), a_min=0f, a_max=6f);
  %1 = clip(add(nn.conv2d(%0, %wd, padding=[1, 1], groups=16), %bd), a_min=0f, a_max=6f);
  %2 = add(nn.conv2d(%1, %wp), %bp);
  %3 = clip(add(nn.conv2d(%2, %we), %be), a_min=0f, a_max=6f);
  %4 = add(nn.conv2d(%3, %wd2, padding=[1, 1], groups=48), %bd2);
  %5 = add(%4, %3);
  %6 = clip(add(nn.conv2d(%5, %wd2, strides=[2, 2], padding=[1, 1], groups=48), %bd2),
            a_min=0f, a_max=6f);
  nn.avg_pool2d(%6, pool_size=[2, 2], strides=[2, 2], padding=[1, 1], count_include_pad=True)
}""", (2, 3, 28, 28), {"w0": (16, 3, 3, 3), "b0": (16, 1, 1), "wd": (16, 1, 3, 3),
                       "bd": (16, 1, 1), "wp": (24, 16, 1, 1), "bp": (24, 1, 1),
                       "we": (48, 24, 1, 1), "be": (48, 1, 1), "wd2": (48, 1, 3, 3),
                       "bd2": (48, 1, 1)}, 1),
    # 12 input channels (no block divides them: read NCHW), dilation 2, a grouped convolution
    # (4 groups), odd width 7, 6 output channels at the end (stays NCHW: one transform before)
    "grouped": ("""def @main(%x: Tensor[(1, 12, 7, 7), float32], %w1, %w2, %b2, %w3) {
  %0 = nn.relu(nn.conv2d(%x, %w1, padding=[2, 2], dilation=[2, 2]));
  %1 = nn.relu(add(nn.conv2d(%0, %w2, padding=[1, 1], groups=4), %b2));
  nn.conv2d(%1, %w3, padding=[1, 1])
}""", (1, 12, 7, 7), {"w1": (16, 12, 3, 3), "w2": (32, 4, 3, 3), "b2": (32, 1, 1),
                      "w3": (6, 32, 3, 3)}, 1),
    # 56-wide maps, a strided 1x1, bias_add and a per-channel multiply, a 7x7 stride-2
    # convolution, concatenate on channels (blocked), a convolution after
    "wide": ("""def @main(%x: Tensor[(1, 4, 56, 56), float32], %w1, %b1, %w2, %s2, %w3, %w4) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w1, padding=[1, 1]), %b1));
  %1 = multiply(nn.conv2d(%0, %w2, strides=[2, 2]), %s2);
  %2 = nn.conv2d(%0, %w3, strides=[2, 2], padding=[3, 3]);
  nn.conv2d(concatenate((%1, %2), axis=1), %w4, padding=[1, 1])
}""", (1, 4, 56, 56), {"w1": (16, 4, 3, 3), "b1": (16,), "w2": (16, 16, 1, 1),
                       "s2": (16, 1, 1), "w3": (16, 16, 7, 7), "w4": (16, 32, 3, 3)}, 1),
}


def _net(name: str, seed: int = 0) -> tuple[rly.IRModule, np.ndarray, dict]:
    src, xshape, pshapes, _ = NETS[name]
    # NOTE: the parameters' types filled in from the table (in the header only)
    head, body = src.split(") {\n", 1)
    for p, shape in pshapes.items():
        ty = f"%{p}: Tensor[({', '.join(map(str, shape))}), float32]"
        head = head.replace(f"%{p},", ty + ",", 1) if f"%{p}," in head else \
            head.replace(f"%{p}", ty, 1)
    src = head + ") {\n" + body
    rng = np.random.default_rng(seed)
    params = {p: (_w(rng, *s) if len(s) == 4 else rng.standard_normal(s).astype(np.float32))
              for p, s in pshapes.items()}
    x = rng.standard_normal(xshape).astype(np.float32)
    return rly.parse(HEADER + src), x, params


def _lowered(mod: rly.IRModule, params: dict) -> rly.IRModule:
    from relay_ir.runtime.executor import bind_params
    from relay_ir.runtime.target_lowering import target_rewrites
    return target_rewrites(InferType()(bind_params(mod, "main", params)), "llvm")


def _calls(mod: rly.IRModule, name: str) -> list[Call]:
    return [c for c in post_order(mod["main"])
            if type(c) is Call and type(c.op) is Op and c.op.name == name]


@pytest.mark.parametrize("name", list(NETS))
def test_blocked_networks_equal_the_interpreter(name: str, nchwc: None) -> None:
    mod, x, params = _net(name)
    want = runtime.evaluate(mod, x, *params.values())
    got = runtime.build(mod, "llvm", params=params)(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("name", list(NETS))
def test_layouts_change_only_where_they_must(name: str, nchwc: None) -> None:
    mod, _, params = _net(name)
    low = _lowered(mod, params)
    convs = _calls(low, "nn.conv2d")
    blocked = [c for c in convs if c.attrs.out_layout.endswith("c")]
    assert blocked and all(c.attrs.kernel_layout == f"OIHW{c.attrs.out_layout[4:-1]}o"
                           for c in blocked)
    transforms = _calls(low, "layout_transform")
    assert len(transforms) == NETS[name][3]
    # every transform takes a blocked value back to NCHW, for an op without a blocked form
    assert all(t.attrs.dst_layout == "NCHW" for t in transforms)
    consumers = [c for c in post_order(low["main"]) if type(c) is Call
                 and any(a in transforms for a in c.args)]
    assert all(type(c.op) is not Op or c.op.name in ("nn.batch_flatten", "nn.conv2d")
               for c in consumers)
    # the interpreter runs the lowered (blocked) program to the same values
    mod0, x, _ = _net(name)
    np.testing.assert_allclose(runtime.evaluate(low, x), runtime.evaluate(mod0, x,
                                                                          *params.values()),
                               rtol=1e-5, atol=1e-5)


def test_blocks_follow_the_channels_and_the_target(nchwc: None) -> None:
    from relay_ir.runtime.nchwc import target_block
    assert target_block({"kind": "llvm", "mcpu": "haswell"}) == (8,)
    assert target_block({"kind": "llvm", "mcpu": "skylake-avx512"}) == (16, 8)
    mod, _, params = _net("mobile")
    low = _lowered(mod, params)
    outs = {c.checked_type_.shape[1] * c.checked_type_.shape[-1]: c.attrs.out_layout
            for c in _calls(low, "nn.conv2d")}
    want = {16: "NCHW16c", 24: "NCHW8c", 48: "NCHW16c"} if 16 in target_block() else \
        {16: "NCHW8c", 24: "NCHW8c", 48: "NCHW8c"}
    assert outs == want
    # the 24-channel result read by a convolution blocked by 16: read as it is (NCHW8c)
    ins = {c.attrs.data_layout for c in _calls(low, "nn.conv2d")}
    assert "NCHW8c" in ins and "NCHW" in ins


def _strategies(low: rly.IRModule) -> list[tuple[str, str]]:
    from relay_ir.runtime import lower_tvm, schedules
    mod = fuse_ops(InferType()(low))
    out = []
    for fn in post_order(mod["main"]):
        if type(fn) is not Function or fn is mod["main"]:
            continue
        group = lower_tvm.lower_group(fn, [p.checked_type_ for p in fn.params])
        report: list[str] = []
        schedules.schedule_cpu(group.prim_func, group.kind, report=report)
        out.append((group.kind, report[0]))
    return out


def test_blocked_kernels_get_the_blocked_schedules(nchwc: None) -> None:
    mod, _, params = _net("resblock")
    got = _strategies(_lowered(mod, params))
    assert [s for k, s in got if k == "conv"] == ["conv-nchwc"] * 3
    assert ("pool", "pool-nchwc") in got


@pytest.mark.parametrize("data, out, groups", [
    ("NCHW16c", "NCHW8c", 2), ("NCHW", "NCHW16c", 1), ("NCHW8c", "NCHW", 1),
    ("NCHW16c", "NCHW16c", 32), ("NCHW8c", "NCHW16c", 32), ("NCHW16c", "NCHW16c", 16)])
def test_blocked_conv2d_computes_as_nchw(data: str, out: str, groups: int) -> None:
    # the operator itself (no pass): compiled and interpreted against numpy's NCHW result
    from relay_ir.op.conv import _block_data, _data_layout
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 32, 9, 9)).astype(np.float32)
    w = rng.standard_normal((32, 32 // groups, 3, 3)).astype(np.float32)
    nchw = runtime.evaluate(rly.parse(HEADER + f"""def @main(%x: Tensor[(2, 32, 9, 9), float32],
          %w: Tensor[(32, {32 // groups}, 3, 3), float32]) {{
  nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1], groups={groups})
}}"""), x, w)
    db, ob = _data_layout(data, "")[1], _data_layout(out, "")[1]
    xb = _block_data(x, 1, db)
    shape = ", ".join(map(str, xb.shape))
    mod = rly.parse(HEADER + f"""def @main(%x: Tensor[({shape}), float32],
          %w: Tensor[(32, {32 // groups}, 3, 3), float32]) {{
  nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1], groups={groups}, data_layout="{data}",
            out_layout="{out}")
}}""")
    want = _block_data(np.asarray(nchw), 1, ob)
    np.testing.assert_allclose(runtime.evaluate(mod, xb, w), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runtime.build(mod, "llvm")(xb, w), want, rtol=1e-5, atol=1e-5)


def test_blocked_layout_errors() -> None:
    bad = HEADER + """def @main(%x: Tensor[(1, 2, 9, 9, 8), float32],
          %w: Tensor[(16, 16, 3, 3), float32]) {
  nn.conv2d(%x, %w, data_layout="NCHW16c")
}"""
    with pytest.raises(DiagnosticError, match="last data dimension of 16"):
        InferType()(rly.parse(bad))
    odd = HEADER + """def @main(%x: Tensor[(1, 16, 9, 9), float32],
          %w: Tensor[(12, 16, 3, 3), float32]) {
  nn.conv2d(%x, %w, out_layout="NCHW8c")
}"""
    with pytest.raises(DiagnosticError, match="divisible by 8"):
        InferType()(rly.parse(odd))


def test_blocked_networks_keep_ieee_values(nchwc: None) -> None:
    # inf, nan and -0.0 through blocked convolutions, depthwise ones, the residual add, the
    # pools: the same values as the interpreter, NaN where it has NaN
    mod, x, params = _net("mobile", seed=3)
    x[0, 0, 3, 4], x[0, 1, 0, 0], x[1, 2, 7, 7], x[1, 0, 20, 21] = np.inf, np.nan, -np.inf, np.inf
    x[:, :, 10:14, 10:14] = -0.0
    want = np.asarray(runtime.evaluate(mod, x, *params.values()))
    got = runtime.build(mod, "llvm", params=params)(x)
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-5, atol=2e-5)


def test_ops_with_axes_or_shapes_read_nchw(nchwc: None) -> None:
    # broadcast_to (a shape) and nn.prelu (an axis) have no blocked form here: their blocked
    # operand goes back to NCHW; leaky_relu (position-free) stays blocked
    src = HEADER + """def @main(%x: Tensor[(1, 8, 6, 6), float32],
          %w: Tensor[(16, 8, 3, 3), float32], %a: Tensor[(16), float32]) {
  %0 = nn.leaky_relu(nn.conv2d(%x, %w, padding=[1, 1]), alpha=0.1f);
  %1 = nn.prelu(%0, %a);
  add(%1, broadcast_to(%0, shape=[1, 16, 6, 6]))
}"""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    params = {"w": _w(rng, 16, 8, 3, 3), "a": rng.standard_normal(16).astype(np.float32)}
    mod = rly.parse(src)
    low = _lowered(mod, params)
    assert len(_calls(low, "layout_transform")) == 1
    from relay_ir.runtime.nchwc import target_block
    b = target_block()[0]
    assert _calls(low, "nn.leaky_relu")[0].checked_type_.shape == (1, 16 // b, 6, 6, b)
    want = runtime.evaluate(mod, x, *params.values())
    np.testing.assert_allclose(runtime.build(mod, "llvm", params=params)(x), want,
                               rtol=2e-5, atol=2e-5)


def test_branches_and_tuples_get_nchw_values(nchwc: None) -> None:
    # blocked values leaving through an if's branches, a tuple and the result: NCHW there
    src = HEADER + """def @main(%x: Tensor[(1, 8, 6, 6), float32], %c: bool,
          %w: Tensor[(16, 8, 3, 3), float32], %v: Tensor[(16, 16, 1, 1), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w, padding=[1, 1]));
  %1 = if (%c) { add(%0, 1f) } else { nn.relu(nn.conv2d(%0, %v)) };
  (%1, %0)
}"""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    params = {"w": _w(rng, 16, 8, 3, 3), "v": _w(rng, 16, 16, 1, 1)}
    mod = rly.parse(src)
    exe = runtime.build(mod, "llvm", params=params)
    for c in (True, False):
        want = runtime.evaluate(mod, x, np.array(c), *params.values())
        got = exe(x, np.array(c))
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g, w_, rtol=2e-5, atol=2e-5)


def test_an_avx2_target_blocks_by_8(nchwc: None) -> None:
    # a target without AVX-512 (haswell: AVX2) gets blocks of 8 everywhere, same values
    from relay_ir.runtime.executor import bind_params
    from relay_ir.runtime.target_lowering import target_rewrites
    mod, x, params = _net("resblock")
    target = {"kind": "llvm", "mcpu": "haswell"}
    low = target_rewrites(InferType()(bind_params(mod, "main", params)), target)
    assert {c.attrs.out_layout for c in _calls(low, "nn.conv2d")} == {"NCHW8c"}
    want = runtime.evaluate(mod, x, *params.values())
    got = runtime.build(mod, target, params=params)(x)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))
