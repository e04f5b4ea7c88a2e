"""annotation.checkpoint: the marked call is recomputed in the backward pass (rematerialization).

``annotation.checkpoint(@block(%h, %w))`` makes the gradient's forward pass run the original
``@block`` on primal values (no adjoint cells, no backward closures: its intermediates are freed
when it returns) and its backward step re-run ``@block_grad`` with a private chain.
"""
from __future__ import annotations

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime
from util_grad import HEADER, assert_close_tree, check_grad, wl

rng = np.random.default_rng(11)


def mlp(layers: int, per_block: int, width: int, batch: int, checkpoint: bool,
        dtype: str = "float64") -> str:
    """``layers`` tanh layers in blocks of ``per_block`` (a global each call marks or not)."""
    return wl.blocked_mlp(layers, per_block, width, batch, checkpoint, dtype=dtype, act="tanh",
                          bias=False, loss="sum")


def _args(layers: int, width: int, batch: int, dtype: str = "float64") -> list[np.ndarray]:
    out = [rng.standard_normal((batch, width)).astype(dtype)]
    out += [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(dtype)
            for _ in range(layers)]
    return out


def test_identical_gradients_with_and_without() -> None:
    args = _args(4, 3, 2)
    ck = rly.parse(mlp(4, 2, 3, 2, True))
    plain = rly.parse(mlp(4, 2, 3, 2, False))
    g_ck, g_plain = passes.gradient(ck), passes.gradient(plain)
    v1, d1 = runtime.evaluate(g_ck, *args)
    v2, d2 = runtime.evaluate(g_plain, *args)
    assert_close_tree(v1, v2, 0, 0)
    assert_close_tree(d1, d2, 0, 0)  # the same operations in the same order: bit for bit
    # the forward pass calls the original @block (no tape); @block_grad runs in the backward
    twin = _main_grad_text(g_ck)
    assert twin.count("= @block(") == 2 and twin.count("@block_grad(") == 2
    twin = _main_grad_text(g_plain)
    assert twin.count("= @block(") == 0 and twin.count("@block_grad(") == 2


def _main_grad_text(g: rly.IRModule) -> str:
    text = rly.astext(g)
    twin = text[text.index("def @main_grad"):]
    return twin[:twin.index("\n}\n")]


def test_against_finite_differences_and_through_the_optimizer() -> None:
    check_grad(mlp(4, 2, 3, 2, True)[len(HEADER):], _args(4, 3, 2))


def test_checkpoint_of_anything_else_is_the_identity() -> None:
    check_grad("""
def @main(%x: Tensor[(3), float64]) -> Tensor[(3), float64] {
  let %f = fn (%v: Tensor[(3), float64]) { exp(%v) };
  let %y = annotation.checkpoint(%f(tanh(%x)));
  annotation.checkpoint(multiply(%y, %x))
}""", [rng.standard_normal(3)])


def test_checkpointing_lowers_peak_memory() -> None:
    layers, width, batch = 16, 64, 128
    args = _args(layers, width, batch, "float32")
    g_plain = passes.gradient(rly.parse(mlp(layers, 4, width, batch, False, "float32")))
    g_ck = passes.gradient(rly.parse(mlp(layers, 4, width, batch, True, "float32")))
    p_plain, p_ck = wl.peak_memory(g_plain, args), wl.peak_memory(g_ck, args)
    assert p_ck < 0.6 * p_plain, (p_ck, p_plain)
    _, d1 = runtime.evaluate(g_ck, *args)
    _, d2 = runtime.evaluate(g_plain, *args)
    assert_close_tree(d1, d2, 0, 0)


def test_a_global_marked_checkpoint_has_every_call_recomputed() -> None:
    # the function form: `Checkpoint=1` on @block marks each of its calls
    plain = mlp(4, 2, 3, 2, False)
    head = next(ln for ln in plain.splitlines() if ln.startswith("def @block"))
    marked = plain.replace(head, head.replace(") -> ", ", Checkpoint=1) -> "), 1)
    assert marked != plain
    args = _args(4, 3, 2)
    g_marked = passes.gradient(rly.parse(marked))
    twin = _main_grad_text(g_marked)
    assert twin.count("= @block(") == 2 and twin.count("@block_grad(") == 2
    _, d1 = runtime.evaluate(g_marked, *args)
    _, d2 = runtime.evaluate(passes.gradient(rly.parse(plain)), *args)
    assert_close_tree(d1, d2, 0, 0)
