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
from relay_ir.expr import Call, Constant, Function, Op, RefCreate, RefRead, RefWrite
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


MLP2 = HEADER + """def @main(%x: Tensor[(4, 5), float64], %w1: Tensor[(5, 6), float64],
          %w2: Tensor[(6, 3), float64]) -> float64 {
  let %h = tanh(nn.matmul(%x, %w1));
  let %o = nn.matmul(%h, %w2);
  sum(multiply(%o, %o))
}"""


def test_reverse_over_reverse_runs_no_products_of_zero_adjoints() -> None:
    # H v for w1: the gradient of <dL/dw1, v>. The first gradient also computes dx and dw2,
    # whose second-order adjoints stay zero: their backward products fold away
    g1 = passes.gradient(rly.parse(MLP2))
    hv = rly.parse(rly.astext(g1) + """
def @hv(%x: Tensor[(4, 5), float64], %w1: Tensor[(5, 6), float64],
        %w2: Tensor[(6, 3), float64], %v: Tensor[(5, 6), float64]) -> float64 {
  let %r = @main(%x, %w1, %w2);
  sum(multiply((%r.1).1, %v))
}""")
    raw = passes.gradient(hv, entry="hv")
    opt = passes.optimize(passes.optimize(raw, entry="hv"), entry="hv")
    products = [n for fn in opt.functions.values() for n in post_order(fn)
                if isinstance(n, Call) and isinstance(n.op, Op)
                and n.op.name in ("nn.matmul", "multiply")]
    assert not [n for n in products if any(isinstance(a, Constant) and not np.any(a.data)
                                           for a in n.args)]
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s) for s in ((4, 5), (5, 6), (6, 3), (5, 6))]
    want = runtime.evaluate(raw, *args, entry="hv")
    assert_close_tree(runtime.evaluate(opt, *args, entry="hv"), want, 1e-12, 1e-14)
    # the Hessian-vector product against central differences of the first gradient
    eps = 1e-6
    d = [runtime.evaluate(g1, args[0], args[1] + s * eps * args[3], args[2])[1][1]
         for s in (1, -1)]
    np.testing.assert_allclose(want[1][1], (d[0] - d[1]) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_concatenate_adjoint_is_split_once() -> None:
    # the rule projects every part from one split: emitted once, not once per part
    parts = ", ".join(f"tanh(%x{i})" for i in range(5))
    params = ", ".join(f"%x{i}: Tensor[(2, 3), float64]" for i in range(5))
    mod = rly.parse(HEADER + f"def @main({params}) -> float64 {{\n"
                    f"  let %c = concatenate(({parts}), axis=0);\n  sum(multiply(%c, %c))\n}}")
    raw = passes.gradient(mod)
    splits = [n for fn in raw.functions.values() for n in post_order(fn)
              if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "split"]
    assert len(splits) == 1
    args = [np.random.default_rng(i).standard_normal((2, 3)) for i in range(5)]
    value, grads = runtime.evaluate(raw, *args)
    for x, g in zip(args, grads):
        np.testing.assert_allclose(g, 2 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-12)
    check_optimized(raw, args, "main", value, grads)
