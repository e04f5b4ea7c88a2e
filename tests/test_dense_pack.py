"""dense-weight-pack (llvm lowering): constant dense weights packed into column panels."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Constant
from relay_ir.runtime import target_lowering as TL
from relay_ir.runtime.kernel_cache import KernelCache
from relay_ir.traversal import post_order

HDR = '#[version = "0.0.5"]\n'


def _src(m: int, n: int, k: int) -> str:
    return HDR + f"""def @main(%x: Tensor[({m}, {k}), float32], %w: Tensor[({n}, {k}), float32],
          %b: Tensor[({n}), float32]) {{
  nn.gelu(nn.bias_add(nn.dense(%x, %w), %b))
}}"""


def _weights(n: int, k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((n, k)).astype(np.float32),
            "b": rng.standard_normal(n).astype(np.float32)}


def _ops(mod: rly.IRModule) -> list[str]:
    return [c.op.name for c in post_order(mod["main"].body) if hasattr(c, "op")
            and hasattr(c.op, "name")]


@pytest.mark.parametrize("m,n,k", [(32, 64, 40), (20, 48, 24)])
def test_packed_product_is_bitwise_the_unpacked_one(m: int, n: int, k: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
    params = _weights(n, k)
    mod = rly.parse(_src(m, n, k))
    packed = runtime.build(mod, "llvm", params=params, cache=KernelCache(use_disk=False))
    got = packed(x)
    monkeypatch.setattr(TL, "PACK_MIN_ROWS", 1 << 30)
    plain = runtime.build(mod, "llvm", params=params, cache=KernelCache(use_disk=False))
    want = plain(x)
    assert plain.num_kernels() == 1 and packed.num_kernels() > 1   # the pass did apply
    np.testing.assert_array_equal(got, want)
    ref = runtime.evaluate(mod, x, params["w"], params["b"])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_the_rewrite_and_where_it_does_not_apply() -> None:
    k = 24
    rng = np.random.default_rng(3)
    for (m, n, applies) in [(32, 64, True), (8, 64, False), (32, 40, False)]:
        w = rng.standard_normal((n, k)).astype(np.float32)
        mod = _with_const(m, k, w)
        out = TL.DenseWeightPack()(mod)
        ops = _ops(out)
        if not applies:
            assert ops == ["nn.dense"], (m, n, ops)
            continue
        assert ops == ["reshape", "nn.batch_matmul", "transpose", "reshape"], ops
        consts = [c for c in post_order(out["main"].body) if isinstance(c, Constant)]
        assert len(consts) == 1 and consts[0].data.shape == (n // 32, k, 32)
        np.testing.assert_array_equal(consts[0].data[1, :, 3], w[32 + 3])
        x = rng.standard_normal((m, k)).astype(np.float32)
        np.testing.assert_allclose(runtime.evaluate(out, x), x @ w.T, rtol=1e-5, atol=1e-5)
    # a weight that is a parameter (not a constant) is left alone
    mod = passes.InferType()(rly.parse(_src(32, 64, 24)))
    assert "nn.batch_matmul" not in _ops(TL.DenseWeightPack()(mod))


def _with_const(m: int, k: int, w: np.ndarray) -> rly.IRModule:
    """``@main(%x) { nn.dense(%x, W) }`` with ``W`` a Constant, built with the builder API."""
    from relay_ir.expr import Function, Var
    from relay_ir.module import IRModule
    from relay_ir.op._rules import make_call
    from relay_ir.ty import TensorType
    x = Var("x", TensorType((m, k), "float32"))
    body = make_call("nn.dense", x, Constant(w))
    return passes.InferType()(IRModule({"main": Function((x,), body)}))


@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_with_a_constant_weight_is_packed_too(transpose_b: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``nn.matmul(x, W)`` (ONNX MatMul's import) with ``W`` as [K, N] or, transposed, [N, K]."""
    m, n, k = 24, 48, 40
    rng = np.random.default_rng(5)
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    tb = "True" if transpose_b else "False"
    mod = rly.parse(HDR + f"""def @main(%x: Tensor[({m}, {k}), float32],
          %w: Tensor[({w.shape[0]}, {w.shape[1]}), float32]) {{
  nn.relu(nn.matmul(%x, %w, transpose_b={tb}))
}}""")
    packed = runtime.build(mod, "llvm", params={"w": w}, cache=KernelCache(use_disk=False))
    got = packed(x)
    assert "nn.batch_matmul" in rly.astext(packed.module)
    monkeypatch.setattr(TL, "PACK_MIN_ROWS", 1 << 30)
    plain = runtime.build(mod, "llvm", params={"w": w}, cache=KernelCache(use_disk=False))
    assert "nn.batch_matmul" not in rly.astext(plain.module)
    np.testing.assert_array_equal(got, plain(x))
    want = np.maximum(x @ (w.T if transpose_b else w), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
