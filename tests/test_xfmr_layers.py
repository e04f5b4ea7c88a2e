"""The transformer layers of benchmarks/nets.py (BERT encoder layer, GPT-2 block), small:
compiled with their weights bound equals the interpreter; and the row-wise (softmax) schedule
over 3-d attention scores."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime.kernel_cache import KernelCache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench_models():  # type: ignore[no-untyped-def]
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import nets
    return nets


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_small_layer_compiled_equals_interpreter(kind: str) -> None:
    M = _bench_models()
    net = M.Transformer(f"small_{kind}", kind, seq=32, hidden=64, heads=4, ffn=128)
    mod = rly.parse(net.rly())
    x = net.input()
    exe = runtime.build(mod, "llvm", params=net.weights)
    got = exe(x)
    want = runtime.evaluate(mod, x, *net.weights.values())
    assert got.shape == (32, 64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    ops = rly.astext(exe.module)
    assert "nn.gelu" in ops and "nn.batch_matmul" in ops     # dense-weight-pack applied


def test_small_gpt2_block_is_causal() -> None:
    """Changing the last position's input changes no earlier position's output."""
    M = _bench_models()
    net = M.Transformer("small_gpt2", "gpt2", seq=16, hidden=32, heads=2, ffn=64)
    exe = runtime.build(rly.parse(net.rly()), "llvm", params=net.weights)
    x = net.input()
    y = x.copy()
    y[-1] += 1.0
    a, b = exe(x), exe(y)
    np.testing.assert_array_equal(a[:-1], b[:-1])
    assert np.abs(a[-1] - b[-1]).max() > 1e-3


@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
def test_rowwise_3d_scores_no_gathers(op: str) -> None:
    """Attention scores (heads, rows, cols): all rows one parallel loop, vector loads (no
    gathers), values as the interpreter's with NaN and inf rows."""
    m = rly.parse('#[version = "0.0.5"]\n'
                  f"def @main(%x: Tensor[(4, 32, 64), float32]) {{ {op}(%x, axis=-1) }}")
    x = (np.random.default_rng(0).standard_normal((4, 32, 64)) * 5).astype(np.float32)
    x[0, 1, 3] = np.nan
    x[1, 2, 5] = np.inf
    exe = runtime.build(m, "llvm", cache=KernelCache(use_disk=False))
    np.testing.assert_allclose(exe(x), runtime.evaluate(m, x), rtol=1e-5, atol=1e-6)
    ll = "\n".join(exe.kernel_sources())
    assert "gather" not in ll
    assert re.search(r"<(8|16) x float>", ll)


@pytest.mark.parametrize("src,shapes", [
    ("nn.layer_norm(%x, %g, %b)", [(12, 96), (96,), (96,)]),
    ("nn.log_softmax(%x)", [(3, 4, 64)]),
    ("nn.cross_entropy(nn.softmax(%x), %g)", [(8, 96), (8, 96)]),
])
def test_rowwise_lane_accumulators_are_vector_code(src: str, shapes: list) -> None:
    """The rfactor lanes of each row reduction are one vector: no scalar lane loop."""
    names = ["x", "g", "b"][:len(shapes)]
    params = ", ".join(f"%{n}: Tensor[({', '.join(map(str, s))}), float32]"
                       for n, s in zip(names, shapes))
    m = rly.parse(f'#[version = "0.0.5"]\ndef @main({params}) {{ {src} }}')
    rng = np.random.default_rng(4)
    args = [np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes]
    exe = runtime.build(m, "llvm", cache=KernelCache(use_disk=False))
    np.testing.assert_allclose(exe(*args), runtime.evaluate(m, *args), rtol=1e-5, atol=1e-5)
    ll = "\n".join(exe.kernel_sources())
    # the lane accumulators: a vector fadd (sum) or a vector integer max (max keys)
    assert re.search(r"fadd <16 x float>|fadd reassoc[^\n]*<16 x float>", ll)
