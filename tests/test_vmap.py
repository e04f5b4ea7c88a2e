"""passes.vmap and the per-operator batching rules: batched programs equal a loop over instances."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Function
from relay_ir.module import IRModule
from relay_ir.passes.vmap import VmapError, vmap_function
from relay_ir.traversal import post_order

HDR = '#[version = "0.0.5"]\n'


def _parse(text: str) -> IRModule:
    return passes.InferType()(rly.parse(HDR + text))


def _rand(shape, dtype="float32", seed=0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(0, 3, size=shape).astype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def _instance(x: np.ndarray, axis: int | None, i: int) -> np.ndarray:
    return x if axis is None else np.take(x, i, axis=axis)


def _leaves(v):  # type: ignore[no-untyped-def]
    if isinstance(v, tuple):
        return [x for f in v for x in _leaves(f)]
    return [np.asarray(v)]


def assert_loop_equal(mod: IRModule, bmod: IRModule, args: list, in_axes, n: int,
                      rtol: float = 1e-5, atol: float = 1e-6, entry: str = "main") -> None:
    """The batched module on ``args`` equals the original on each instance (interpreter)."""
    got = _leaves(runtime.evaluate(bmod, *args, entry=entry))
    for i in range(n):
        inst = [_instance(a, ax, i) for a, ax in zip(args, in_axes)]
        want = _leaves(runtime.evaluate(mod, *inst, entry=entry))
        assert len(want) == len(got)
        for g, w in zip(got, want):
            assert g.shape[0] == n
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g[i], w, rtol=rtol, atol=atol, equal_nan=True)


# ----------------------------------------------------------------------------- vmap_function
def _primitives(mod: IRModule) -> list[Function]:
    fused = passes.FuseOps()(passes.InferType()(passes.ToANormalForm()(mod)))
    return [e for e in post_order(fused["main"].body)
            if isinstance(e, Function) and e.is_primitive]


MLP_GROUP = """
def @main(%x: Tensor[(3,), float32], %w: Tensor[(4, 3), float32], %b: Tensor[(4,), float32]) {
  let %h = nn.dense(%x, %w);
  let %y = add(%h, %b);
  tanh(%y)
}
"""


@pytest.mark.tvm
@pytest.mark.parametrize("batch_size", [None, 5])
def test_vmap_function_of_a_fused_group_builds_and_equals_a_numpy_loop(batch_size):
    (prim,) = _primitives(_parse(MLP_GROUP))
    bf = vmap_function(prim, (0, None, None), batch_size=batch_size)
    assert bf.is_primitive and bf.ret_type is not None
    # a dataflow graph like the group it came from: no let bindings
    assert "let" not in rly.astext(bf)
    dims = [p.checked_type.shape for p in bf.params]
    assert dims[1:] == [(4, 3), (4,)]
    assert dims[0][1:] == (3,) and (dims[0][0] == 5 if batch_size else dims[0][0] != 5)
    m = IRModule({"main": Function(bf.params, bf.body, bf.ret_type, bf.type_params)})
    exe = runtime.build(m, target="llvm")
    x, w, b = _rand((5, 3)), _rand((4, 3), seed=1), _rand((4,), seed=2)
    want = np.stack([np.tanh(w @ x[i] + b) for i in range(5)])
    np.testing.assert_allclose(exe(x, w, b), want, rtol=1e-5, atol=1e-6)
    from relay_ir.runtime.lower_tvm import lower_group
    if batch_size:
        g = lower_group(bf, [p.checked_type for p in bf.params])
        assert [t.shape for t in g.out_types] == [(5, 4)]


def test_vmap_function_tuple_output_and_batch_axis_one():
    mod = _parse("""
def @main(%x: Tensor[(3, 2), float32], %y: Tensor[(2,), float32]) {
  let %a = multiply(%x, %y);
  (sum(%a, axis=[1]), exp(%y))
}""")
    bf = vmap_function(mod["main"], (1, None), batch_size=4)
    m = IRModule({"main": Function(bf.params, bf.body, bf.ret_type, bf.type_params)})
    x, y = _rand((3, 4, 2)), _rand((2,))
    s, e = runtime.evaluate(m, x, y)
    assert s.shape == (4, 3) and e.shape == (4, 2)
    for i in range(4):
        np.testing.assert_allclose(s[i], (x[:, i, :] * y).sum(axis=1), rtol=1e-6)
        np.testing.assert_array_equal(e[i], np.exp(y))


# ----------------------------------------------------------------------------- programs
def test_mlp_symbolic_batch_equals_loop():
    mod = _parse("""
def @main(%x: Tensor[(3,), float32], %w1: Tensor[(8, 3), float32], %b1: Tensor[(8,), float32],
          %w2: Tensor[(2, 8), float32]) {
  let %h = nn.relu(nn.bias_add(nn.dense(%x, %w1), %b1, axis=-1));
  let %o = nn.dense(%h, %w2);
  (nn.softmax(%o), sum(%o))
}""")
    bm = passes.vmap(mod, in_axes=(0, None, None, None))
    assert "def @main[batch](%x: Tensor[(batch, 3), float32]" in rly.astext(bm)
    args = [_rand((6, 3)), _rand((8, 3), seed=1), _rand((8,), seed=2), _rand((2, 8), seed=3)]
    assert_loop_equal(mod, bm, args, (0, None, None, None), 6)
