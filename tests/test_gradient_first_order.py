"""passes.gradient(mode="first_order"): the direct reverse sweep of pure dataflow entries.

Agreement with the higher-order mode is checked on every AD test program that is pure dataflow
(``util_grad.check_grad`` runs ``check_first_order``); this file checks the W2 loss, the output's
shape and every rejection.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Function, RefCreate, RefRead, RefWrite
from relay_ir.traversal import post_order
from util_grad import HEADER, W2_TEXT, assert_close_tree, check_grad, op_calls, w2_data

V3 = "Tensor[(3), float64]"
rng = np.random.default_rng(5)


def test_w2_first_order_matches_higher_order_and_is_clean() -> None:
    mod = rly.parse(W2_TEXT, "<w2>")
    fo = passes.gradient(mod, mode="first_order")
    assert not any(isinstance(n, (Function, RefCreate, RefRead, RefWrite))
                   for n in post_order(fo["main"].body))
    assert op_calls(fo) <= 4 * op_calls(mod)
    data = w2_data()
    v1, g1 = runtime.evaluate(fo, *data)
    v2, g2 = runtime.evaluate(passes.gradient(mod), *data)
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    # wrt works in this mode too
    _, (db3, dw3) = runtime.evaluate(passes.gradient(mod, mode="first_order",
                                                     wrt=("b3", "w3")), *data)
    assert_close_tree((db3, dw3), (g1[7], g1[6]), 0, 0)


def test_tuples_fan_out_and_int_values() -> None:
    # a value used many times, tuple parameters and results, projections, an int path
    check_grad(f"""
def @main(%p: ({V3}, {V3}), %n: int32, %s: float64) -> ({V3}, float64) {{
  let %a = %p.0;
  let %t = (multiply(%a, %a), tanh(%p.1));
  let %c = cast(%n, dtype="float64");
  let %u = add(%t.0, multiply(%t.1, %c));
  (multiply(%u, %a), multiply(%s, sum(%u)))
}}""", [(rng.standard_normal(3), rng.standard_normal(3)), np.array(3, "int32"),
        np.array(0.3)])


@pytest.mark.parametrize("body, construct, line", [
    (f"if (greater(sum(%x), 0f64)) {{ exp(%x) }} else {{ %x }}", "`if`", 4),
    (f"let %f = fn (%v: {V3}) {{ exp(%v) }};\n  %f(%x)", "a function literal (closure)", 4),
    ("let %r = ref(%x);\n  ref_read(%r)", "a reference (`ref`)", 4),
    ("@g(%x)", "a call of the global @g", 4),
    ("match (Some(%x)) {\n    Some(%v) => %v,\n    None => %x,\n  }",
     "a call of constructor `Some`", 4),
])
def test_every_other_construct_is_named_with_its_span(body: str, construct: str,
                                                      line: int) -> None:
    text = (f"def @g(%v: {V3}) -> {V3} {{ exp(%v) }}\n"
            f"def @main(%x: {V3}) -> {V3} {{\n  {body}\n}}\n")
    mod = rly.parse(HEADER + text, "f.rly", prelude="Some" in body)
    with pytest.raises(rly.DiagnosticError) as ei:
        passes.gradient(mod, mode="first_order")
    err = ei.value
    assert construct in err.message and "pure dataflow only" in err.message
    assert err.span is not None and err.span.line == line, (err.span, line)
    assert "f.rly:" in str(err) and "^" in str(err)
    passes.gradient(mod)  # the higher-order mode takes it


def test_adt_parameter_is_rejected() -> None:
    mod = rly.parse(HEADER + f"def @main(%l: List[{V3}]) -> {V3} {{\n  @hd(%l)\n}}\n",
                    "f.rly", prelude=True)
    with pytest.raises(rly.DiagnosticError, match="parameter %l of type List"):
        passes.gradient(mod, mode="first_order")
