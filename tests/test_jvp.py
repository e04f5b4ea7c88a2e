"""passes.jvp: forward-mode AD (dual numbers) over the whole language.

Every AD test program of tests/test_gradient.py also checks ``sum(result tangent) ==
<gradient, tangent>`` for random tangents (``util_grad.check_grad`` runs ``check_jvp``).
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from test_gradient_higher import VECTOR, hvp_modules
from util_grad import HEADER, W2_TEXT, assert_close_tree, check_grad, grad_module, w2_data
from util_scale import shallow_stack, sizes

V3 = "Tensor[(3), float64]"


def test_contract_and_tangent_of_a_tuple_result() -> None:
    mod = rly.parse(HEADER + f"""
def @main(%x: {V3}, %n: int32, %p: (float64, {V3})) -> ({V3}, int32) {{
  (multiply(exp(%x), %p.1), add(%n, 1))
}}""", "<t>")
    j = passes.jvp(mod)
    assert rly.astext(j["main"].checked_type_) == rly.astext(rly.parse_type(
        f"fn ({V3}, int32, (float64, {V3}), {V3}, int32, (float64, {V3})) -> "
        f"(({V3}, int32), ({V3}, int32))"))
    x, p1 = np.array([0.1, 0.2, -0.3]), np.array([1.0, 2.0, 3.0])
    tx, tp1 = np.array([1.0, 0.0, 2.0]), np.array([0.5, 0.5, 0.5])
    (y, m), (ty, tm) = runtime.evaluate(j, x, np.array(4, "int32"), (np.array(0.0), p1),
                                        tx, np.array(7, "int32"), (np.array(9.0), tp1))
    np.testing.assert_allclose(ty, np.exp(x) * tx * p1 + np.exp(x) * tp1, rtol=1e-12)
    assert int(m) == 5 and int(tm) == 0 and tm.dtype == np.int32


def test_w2_jvp_against_the_gradient() -> None:
    mod = rly.parse(W2_TEXT, "<w2>")
    data = w2_data()
    rng = np.random.default_rng(2)
    tangents = [rng.standard_normal(a.shape).astype(np.float32) for a in data]
    value, tangent = runtime.evaluate(passes.jvp(mod), *data, *tangents)
    _, grads = runtime.evaluate(passes.optimize(passes.gradient(mod)), *data)
    want = sum(float(np.sum(g.astype(np.float64) * t)) for g, t in zip(grads, tangents))
    np.testing.assert_allclose(float(tangent), want, rtol=1e-3)
    # the optimized JVP program is first-order code too
    text = rly.astext(passes.optimize(passes.jvp(mod))).split("#[metadata]")[0]
    assert "ref" not in text and "fn (" not in text


@pytest.mark.parametrize("name", sorted(VECTOR))
def test_forward_over_reverse_hvp_equals_reverse_over_reverse(name: str) -> None:
    rng = np.random.default_rng(1)
    g1, with_hv = hvp_modules(name)
    fwd_rev = passes.jvp(g1, "main")  # (x, w, v, 0) -> ((f, grads), (., (H v, H_wx v)))
    rev_rev = grad_module(with_hv, "hv")
    for sign in (1.0, -1.0):
        x = sign * rng.uniform(0.1, 0.8, 3)
        w = rng.uniform(-0.5, 0.5, (2, 3))
        v = rng.uniform(-1, 1, 3)
        (_, grads), (_, (hv_x, hv_w)) = runtime.evaluate(fwd_rev, x, w, v, np.zeros((2, 3)))
        _, (hv, hw, _) = runtime.evaluate(rev_rev, x, w, v, entry="hv")
        assert_close_tree(hv_x, hv, 1e-9, 1e-12)
        assert_close_tree(hv_w, hw, 1e-9, 1e-12)  # d/dx grad_w . v == d/dw <grad_x, v>
        assert_close_tree(grads, runtime.evaluate(g1, x, w)[1], 1e-12, 0)


def test_no_perturbation_confusion() -> None:
    # d/dx [x * (d/dy (x + y))] = 1 (Siskind and Pearlmutter's test)
    inner = passes.jvp(rly.parse(HEADER + """
def @inner(%x: float64, %y: float64) -> float64 { add(%x, %y) }""", "<i>"), "inner")
    outer = rly.parse(rly.astext(inner) + """
def @g(%x: float64) -> float64 {
  let %r = @inner(%x, 1f64, 0f64, 1f64);
  multiply(%x, %r.1)
}""", "<o>")
    value, tangent = runtime.evaluate(passes.jvp(outer, "g"), np.array(3.0), np.array(1.0),
                                      entry="g")
    assert float(value) == 3.0 and float(tangent) == 1.0


def test_closures_recursion_refs_and_adts() -> None:
    # the whole language: a closure captured and returned, a recursive global, a reference
    # updated in a loop, a List built and folded, match and if on data
    check_grad(f"""
def @pow(%x: {V3}, %n: int32) -> {V3} {{
  if (equal(%n, 0)) {{ ones_like(%x) }} else {{ multiply(%x, @pow(%x, subtract(%n, 1))) }}
}}
def @make(%w: {V3}) -> fn ({V3}) -> {V3} {{ fn (%v: {V3}) {{ multiply(%v, tanh(%w)) }} }}
def @main(%x: {V3}, %w: {V3}) -> {V3} {{
  let %f = @make(%w);
  let %r = ref(%x);
  let %l = Cons(%f(%x), Cons(@pow(%x, 3), Nil));
  let %s = @foldl(fn (%acc: {V3}, %v: {V3}) {{
    ref_write(%r, multiply(ref_read(%r), %v));
    add(%acc, %v)
  }}, %w, %l);
  match (%l) {{
    Cons(%h, _) => add(multiply(%s, %h), ref_read(%r)),
    Nil => %s,
  }}
}}""", [np.array([0.3, -0.5, 0.8]), np.array([0.2, 0.1, -0.4])], prelude=True)


def test_missing_rule_and_bad_entry_are_diagnostics() -> None:
    from relay_ir.op import override_op
    mod = rly.parse(HEADER + f"def @main(%x: {V3}) -> {V3} {{\n  exp(%x)\n}}\n", "f.rly")
    with override_op("exp", jvp=None):
        with pytest.raises(rly.DiagnosticError, match="no JVP rule for operator `exp`") as ei:
            passes.jvp(mod)
    assert ei.value.span is not None and ei.value.span.line == 3
    with pytest.raises(rly.DiagnosticError, match="no global function @nope"):
        passes.jvp(mod, "nope")
    fn_param = rly.parse(HEADER + f"def @main(%f: fn ({V3}) -> {V3}, %x: {V3}) -> {V3} "
                         "{ %f(%x) }\n", "f.rly")
    with pytest.raises(rly.DiagnosticError, match="parameter %f of @main"):
        passes.jvp(fn_param)


def test_adt_parameter_and_result() -> None:
    v2 = "Tensor[(2), float64]"
    main = f"""def @main(%xs: List[({v2}, int32)], %w: {v2}) -> List[{v2}] {{
  @map(fn (%p: ({v2}, int32)) {{ multiply(tanh(%p.0), multiply(%w, cast(%p.1, dtype="float64"))) }},
       %xs)
}}
"""
    mk = f"""
def @mk(%a: {v2}, %b: {v2}) -> List[({v2}, int32)] {{ Cons((%a, 2), Cons((%b, 3), Nil)) }}
def @tot(%l: List[{v2}]) -> float64 {{ @foldl(fn (%s: float64, %v: {v2}) {{ add(%s, sum(%v)) }},
                                             0f64, %l) }}
"""
    j = passes.jvp(rly.parse(HEADER + main, "<adt>", prelude=True))
    assert {"dual_List", "primal_List", "tangent_List"} <= set(j.functions)
    use = rly.parse(rly.astext(j) + mk + f"""
def @use(%a: {v2}, %b: {v2}, %w: {v2}, %ta: {v2}, %tb: {v2}, %tw: {v2}) -> (float64, float64) {{
  let %r = @main(@mk(%a, %b), %w, @mk(%ta, %tb), %tw);
  (@tot(%r.0), @tot(%r.1))
}}""")
    orig = rly.parse(HEADER + main + mk + f"""
def @f(%a: {v2}, %b: {v2}, %w: {v2}) -> float64 {{ @tot(@main(@mk(%a, %b), %w)) }}""",
                     "<adt>", prelude=True)
    rng = np.random.default_rng(4)
    a, b, w, ta, tb, tw = (rng.uniform(-1, 1, 2) for _ in range(6))
    value, tangent = runtime.evaluate(use, a, b, w, ta, tb, tw, entry="use")
    np.testing.assert_allclose(value, runtime.evaluate(orig, a, b, w, entry="f"), rtol=1e-12)
    eps = 1e-6
    hi = runtime.evaluate(orig, a + eps * ta, b + eps * tb, w + eps * tw, entry="f")
    lo = runtime.evaluate(orig, a - eps * ta, b - eps * tb, w - eps * tw, entry="f")
    np.testing.assert_allclose(tangent, (hi - lo) / (2 * eps), rtol=1e-6)


@sizes(2_000, 10_000)
def test_long_program_at_default_recursion_limit(n: int) -> None:
    lines = [f"  let %v{i} = multiply(%v{i - 1}, 1.0001f64);" for i in range(1, n)]
    text = (HEADER + "def @main(%x: float64) -> float64 {\n  let %v0 = add(%x, 0f64);\n"
            + "\n".join(lines) + f"\n  %v{n - 1}\n}}")
    with shallow_stack():
        j = passes.jvp(rly.parse(text))
        value, tangent = runtime.evaluate(j, np.array(0.5), np.array(2.0))
    np.testing.assert_allclose(value, 0.5 * 1.0001 ** (n - 1), rtol=1e-9)
    np.testing.assert_allclose(tangent, 2 * 1.0001 ** (n - 1), rtol=1e-9)


# ----------------------------------------------------------------------------- every op's rule
def _jvp_cases() -> list:
    from test_op_grad import CASES
    from relay_ir.op import get_opdef
    return [c for c in CASES if get_opdef(c.name).jvp is not None]


@pytest.mark.parametrize("case", _jvp_cases(), ids=lambda c: c.id)
def test_op_jvp_rule_against_finite_differences(case) -> None:  # type: ignore[no-untyped-def]
    """Each op's ``jvp=`` rule, run by the interpreter, against central differences of its
    numpy implementation along a random direction (the cases of tests/test_op_grad.py)."""
    from relay_ir.expr import Function, Var
    from relay_ir.op import get_opdef
    from relay_ir.passes.type_infer import infer_type
    from test_op_grad import EPS, STOP
    from util_ad import is_float, leaves, op_value, rebuild, run, typed_call
    params, call, out_t = typed_call(case.name, case.args, case.attrs)
    out = Var("out", out_t)
    tparams = [Var(f"t{i}", p.checked_type_) for i, p in enumerate(params)]
    body = get_opdef(case.name).jvp(call, out, list(tparams))
    fn = infer_type(Function(tuple(params) + (out,) + tuple(tparams), body))
    r = np.random.default_rng(12)
    dirs = [rebuild(a, [r.standard_normal(v.shape).astype(v.dtype) if is_float(v)
                        else np.zeros_like(v) for v in leaves(a)]) for a in case.args]
    y = op_value(case.name, case.args, case.attrs)
    got = run(fn, *case.args, y, *dirs)

    def f(t: float) -> list:
        moved = [rebuild(a, [v.astype("float64") + t * d if is_float(v) else v
                             for v, d in zip(leaves(a), leaves(da))])
                 for a, da in zip(case.args, dirs)]
        if case.name == STOP:
            return [0 * moved[0]]
        return leaves(op_value(case.name, moved, case.attrs))

    tol = 1e-3 if any(v.dtype == np.float32 for v in leaves(tuple(case.args))) else 1e-5
    for g, hi, lo in zip(leaves(got), f(EPS), f(-EPS)):
        if not is_float(np.asarray(hi)):
            continue
        np.testing.assert_allclose(g, (hi - lo) / (2 * EPS), rtol=tol, atol=tol)


def test_every_differentiable_op_has_a_jvp_rule() -> None:
    from relay_ir.op import list_ops
    missing = [o.name for o in list_ops()
               if not o.non_differentiable and o.grad is not None and o.jvp is None]
    assert missing == []


def test_w7_hessian_vector_product_forward_over_reverse_equals_reverse_over_reverse() -> None:
    # the benchmark's two compiled H v programs (benchmarks/workloads.py, W7) agree
    import workloads as wl
    fwd, args = wl.w7_relay_fwd_exe()
    rev, args2 = wl.w7_relay_exe()
    hv = np.asarray(fwd(*args), np.float64)
    np.testing.assert_allclose(hv, np.asarray(rev(*args2)[1], np.float64), rtol=1e-4, atol=1e-7)
    assert abs(np.linalg.norm(hv) - 0.8560113) < 1e-6  # WORKLOADS.md's check value
