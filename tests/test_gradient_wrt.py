"""passes.gradient(..., wrt=(names)): gradients of the named parameters only, in that order."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from util_grad import HEADER, assert_close_tree, finite_differences, objective, op_calls

rng = np.random.default_rng(3)

MLP = HEADER + """def @main(%x: Tensor[(4, 5), float64], %w1: Tensor[(5, 6), float64],
          %b1: Tensor[(6), float64], %w2: Tensor[(6, 2), float64], %n: int32) -> float64 {
  let %h = tanh(add(nn.matmul(%x, %w1), %b1));
  sum(multiply(nn.matmul(%h, %w2), cast(%n, dtype="float64")))
}
"""


def _args() -> list[np.ndarray]:
    return [rng.standard_normal(s) for s in [(4, 5), (5, 6), (6,), (6, 2)]] + [np.array(2, "int32")]


def test_wrt_returns_the_named_gradients_in_order() -> None:
    mod = rly.parse(MLP, "<mlp>")
    args = _args()
    full = passes.gradient(mod)
    value, grads = runtime.evaluate(full, *args)
    want = finite_differences(objective(mod, "main"), args)
    assert_close_tree(grads, tuple(want), 1e-5, 1e-6)
    g = passes.gradient(mod, wrt=("b1", "w1"))
    ft = g["main"].checked_type_
    assert isinstance(ft, rly.FuncType)
    assert rly.astext(ft.ret_type) == rly.astext(rly.parse_type(
        "(float64, (Tensor[(6), float64], Tensor[(5, 6), float64]))"))
    v2, (db1, dw1) = runtime.evaluate(g, *args)
    assert_close_tree(v2, value, 1e-12, 0)
    assert_close_tree((db1, dw1), (grads[2], grads[1]), 1e-12, 0)
    v3, none = runtime.evaluate(passes.gradient(mod, wrt=()), *args)
    assert none == () and np.allclose(v3, value)


def test_wrt_lets_the_optimizer_drop_the_data_gradient() -> None:
    mod = rly.parse(MLP, "<mlp>")
    args = _args()
    opt_full = passes.optimize(passes.gradient(mod))
    opt_w = passes.optimize(passes.gradient(mod, wrt=["w1", "b1", "w2"]))
    # d/dx is one matmul of the backward pass: it is gone
    assert op_calls(opt_w) < op_calls(opt_full)
    text = rly.astext(opt_w)
    assert text.count("nn.matmul") == 2 + 3  # forward 2; backward dw1, dw2 and dh
    _, full = runtime.evaluate(opt_full, *args)
    _, some = runtime.evaluate(opt_w, *args)
    assert_close_tree(some, (full[1], full[2], full[3]), 1e-12, 0)


@pytest.mark.parametrize("wrt, message", [
    (("w1", "q"), r"wrt names `q`, which is not a parameter of @main \(parameters: %x, %w1"),
    (("w1", "w1"), r"wrt names parameter `w1` twice"),
])
def test_bad_wrt_is_a_diagnostic(wrt: tuple[str, ...], message: str) -> None:
    mod = rly.parse(MLP, "mlp.rly")
    with pytest.raises(rly.DiagnosticError, match=message) as ei:
        passes.gradient(mod, wrt=wrt)
    assert ei.value.span is not None and ei.value.span.line == 2
