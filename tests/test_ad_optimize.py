"""passes.optimize on gradient programs: first-order code for static control flow (issue 11).

Every program of tests/test_gradient.py is also checked optimized == raw == finite differences
(``util_grad.check_grad`` runs ``check_optimized``); this file checks the shape of the output.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Function, RefCreate, RefRead, RefWrite
from relay_ir.traversal import post_order
from util_grad import (HEADER, W2_TEXT, assert_close_tree, check_optimized, op_calls,
                       w2_data)


def _refs_and_closures(mod: rly.IRModule) -> tuple[int, int]:
    refs = closures = 0
    for fn in mod.functions.values():
        for node in post_order(fn.body):
            if isinstance(node, (RefCreate, RefRead, RefWrite)):
                refs += 1
            elif isinstance(node, Function):
                closures += 1
    return refs, closures


def test_w2_gradient_optimizes_to_first_order_code() -> None:
    fwd = rly.parse(W2_TEXT, "<w2>")
    raw = passes.gradient(fwd)
    opt = passes.optimize(raw)
    printed = rly.astext(opt)
    body = printed.split("#[metadata]")[0]
    # (a) no reference and no closure, on the printed program ...
    assert not re.search(r"\bref(_read|_write)?\(", body)
    assert not re.search(r"\bfn\b", body)
    back = rly.parse(printed, "<opt>")
    assert _refs_and_closures(back) == (0, 0)
    # ... (b) at most 3.5x the forward's primitive operator calls
    n_fwd = op_calls(rly.parse(W2_TEXT))
    n_opt = op_calls(back)
    assert n_fwd == 13
    assert n_opt <= 3.5 * n_fwd, (n_opt, n_fwd)
    # no zero adjoint is allocated and accumulated: no zeros(_like) call, no add of a zero
    assert "zeros" not in body
    # the raw program had both, and far more operator calls
    raw_refs, raw_closures = _refs_and_closures(raw)
    assert raw_refs > 50 and raw_closures > 13 and op_calls(raw) > 6 * n_fwd
    # the very same values as the raw program (float32: the same operations, same order)
    data = w2_data()
    value, grads = runtime.evaluate(raw, *data)
    ovalue, ograds = runtime.evaluate(back, *data)
    np.testing.assert_allclose(ovalue, value, rtol=1e-6)
    for a, b in zip(ograds, grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


DYNAMIC = HEADER + """
def @pow(%x: Tensor[(3), float64], %n: int32) -> Tensor[(3), float64] {
  if (equal(%n, 0)) { ones_like(%x) } else { multiply(%x, @pow(%x, subtract(%n, 1))) }
}
def @main(%x: Tensor[(3), float64], %n: int32) -> Tensor[(3), float64] {
  let %y = exp(%x);
  tanh(@pow(%y, %n))
}
"""


def test_dynamic_control_flow_keeps_closures_but_is_cleaned() -> None:
    mod = rly.parse(DYNAMIC, "<dyn>")
    raw = passes.gradient(mod)
    opt = passes.optimize(raw)
    x = np.array([0.3, -0.2, 0.5])
    for n in (0, 1, 4):
        value, grads = runtime.evaluate(raw, x, np.array(n, "int32"))
        check_optimized(raw, [x, np.array(n, "int32")], "main", value, grads)
        want = n * np.exp(x * n) * (1 - np.tanh(np.exp(x * n)) ** 2)
        np.testing.assert_allclose(grads[0], want, rtol=1e-9)
    refs, closures = _refs_and_closures(opt)
    raw_refs, raw_closures = _refs_and_closures(raw)
    assert closures > 0  # the recursion depends on %n: its backward closures stay
    assert refs < raw_refs and op_calls(opt) < op_calls(raw)


def test_fuel_grows_with_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_ir.passes import optimizer
    monkeypatch.setattr(optimizer, "MIN_FUEL", 20)  # NOTE: a small program shows the rule
    n = 30  # 60 backward closures in one chain: more than 20 units of fuel unroll
    lines = [f"  let %v{i} = multiply(sin(%v{i - 1}), %w);" for i in range(1, n)]
    text = (HEADER + "def @main(%x: float64, %w: float64) -> float64 {\n"
            "  let %v0 = add(%x, 0f64);\n" + "\n".join(lines) + f"\n  %v{n - 1}\n}}")
    raw = passes.gradient(rly.parse(text))
    assert optimizer.pipeline_fuel(raw) > 60
    opt = passes.optimize(raw)
    assert _refs_and_closures(opt) == (0, 0)
    args = [np.array(0.4), np.array(0.999)]
    assert_close_tree(runtime.evaluate(opt, *args), runtime.evaluate(raw, *args), 1e-12, 0)
    starved = passes.optimize(raw, fuel=20)  # too little fuel: closures stay, values do not move
    assert _refs_and_closures(starved)[1] > 0
    assert_close_tree(runtime.evaluate(starved, *args), runtime.evaluate(raw, *args), 1e-12, 0)
