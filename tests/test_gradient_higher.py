"""Grad of grad: second and third derivatives and Hessian-vector products against FD."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from util_grad import HEADER, assert_close_tree, grad_module

S = "float64"
V3 = "Tensor[(3), float64]"

# Scalar programs f: float64 -> float64 (body of @f), the point(s) to test, and, where it is
# easy, f''' in closed form.
SCALAR = {
    "cube": ("multiply(multiply(%x, %x), %x)", lambda x: 6.0),
    "exp_times_x": ("multiply(exp(%x), %x)", lambda x: np.exp(x) * (x + 3)),
    "tanh_chain": ("tanh(multiply(tanh(%x), %x))", None),
    "log_div": ("divide(log(add(multiply(%x, %x), 1f64)), add(%x, 2f64))", None),
    "if_computed": ("if (less(%x, 0f64)) { multiply(multiply(%x, %x), %x) } "
                    "else { exp(multiply(%x, 2f64)) }", None),
    "tuple": ("let %t = (multiply(%x, %x), exp(%x)); multiply(%t.0, %t.1)", None),
    "closure": ("let %e = exp(%x); let %f = fn (%y: float64) { multiply(%y, %e) }; "
                "%f(%f(multiply(%x, %x)))", None),
    "recursion": ("@pow(%x, 4)", lambda x: 24 * x),
    "ref_loop": ("let %acc = ref(%x); "
                 "let %loop = fn (%i: int32) -> () { if (less(%i, 3)) { "
                 "let %_ = ref_write(%acc, multiply(ref_read(%acc), tanh(%x))); "
                 "%loop(add(%i, 1)) } else { () } }; let %_ = %loop(0); ref_read(%acc)", None),
    "returned_closure": ("let %g = @make(%x); %g(%g(exp(%x)))", None),
    "list_foldl": ("@foldl(fn (%a: float64, %b: float64) { multiply(%a, %b) }, 1f64, "
                   "Cons(%x, Cons(exp(%x), Cons(tanh(%x), Nil))))", None),
    "mutual_recursion": ("@even(%x, 4)", None),
}

HELPERS = f"""
def @pow(%x: {S}, %n: int32) -> {S} {{
  if (equal(%n, 0)) {{ ones_like(%x) }} else {{ multiply(%x, @pow(%x, subtract(%n, 1))) }}
}}
def @make(%w: {S}) -> fn ({S}) -> {S} {{ fn (%y: {S}) {{ multiply(tanh(%y), %w) }} }}
def @even(%x: {S}, %n: int32) -> {S} {{
  if (equal(%n, 0)) {{ %x }} else {{ @odd(multiply(%x, %x), subtract(%n, 1)) }}
}}
def @odd(%x: {S}, %n: int32) -> {S} {{ @even(tanh(%x), subtract(%n, 1)) }}
"""


def _module(body: str) -> rly.IRModule:
    text = HEADER + HELPERS + f"def @main(%x: {S}) -> {S} {{\n  {body}\n}}\n"
    return rly.parse(text, "<higher>", prelude=True)


def _add(mod: rly.IRModule, text: str) -> rly.IRModule:
    """``mod`` (printed and re-parsed, which also checks the round trip) plus ``text``."""
    return rly.parse(rly.astext(mod) + "\n" + text, "<higher>")


def _derivatives(mod: rly.IRModule) -> list[tuple[rly.IRModule, str]]:
    """[(module, entry)] computing f', f'', f''' as the first gradient of their result."""
    g1 = grad_module(mod, "main")
    m2 = _add(g1, f"def @d1(%x: {S}) -> {S} {{ let %r = @main(%x); (%r.1).0 }}")
    g2 = grad_module(m2, "d1")
    m3 = _add(g2, f"def @d2(%x: {S}) -> {S} {{ let %r = @d1(%x); (%r.1).0 }}")
    g3 = grad_module(m3, "d2")
    return [(g1, "main"), (g2, "d1"), (g3, "d2")]


def _deriv(mod: rly.IRModule, entry: str, x: float) -> tuple[float, float]:
    value, (g,) = runtime.evaluate(mod, np.array(x), entry=entry)
    return float(value), float(g)


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_second_and_third_derivatives(name: str) -> None:
    body, third = SCALAR[name]
    mod = _module(body)
    levels = _derivatives(mod)
    eps = 1e-6
    for x in (-0.6, 0.45):
        f0 = float(runtime.evaluate(mod, np.array(x)))
        ders = []
        for k, (m, entry) in enumerate(levels):
            value, d = _deriv(m, entry, x)
            # level k returns (f^(k), f^(k+1)); its value must be the previous derivative
            if k == 0:
                np.testing.assert_allclose(value, f0, rtol=1e-12)
            else:
                np.testing.assert_allclose(value, ders[-1], rtol=1e-10, atol=1e-12)
            lo = _deriv(m, entry, x - eps)[0]
            hi = _deriv(m, entry, x + eps)[0]
            np.testing.assert_allclose(d, (hi - lo) / (2 * eps), rtol=1e-5, atol=1e-6)
            ders.append(d)
        if third is not None:
            np.testing.assert_allclose(ders[2], third(x), rtol=1e-9, atol=1e-9)


# Vector programs f: Tensor[(3)] -> float64 for Hessian-vector products.
VECTOR = {
    "tanh_net": f"""
def @f(%x: {V3}, %w: Tensor[(2, 3), float64]) -> float64 {{
  let %h = tanh(nn.dense(expand_dims(%x, axis=0), %w));
  sum(multiply(%h, %h))
}}""",
    "if_and_recursion": f"""
def @rec(%x: {V3}, %n: int32) -> {V3} {{
  if (equal(%n, 0)) {{ %x }} else {{ multiply(@rec(%x, subtract(%n, 1)), tanh(%x)) }}
}}
def @f(%x: {V3}, %w: Tensor[(2, 3), float64]) -> float64 {{
  let %s = sum(%x);
  let %y = if (less(%s, 0f64)) {{ @rec(%x, 2) }} else {{ exp(multiply(%x, sum(%w))) }};
  sum(multiply(%y, %x))
}}""",
    "closure_in_list": f"""
def @f(%x: {V3}, %w: Tensor[(2, 3), float64]) -> float64 {{
  let %fs = Cons(fn (%v: {V3}) {{ multiply(%v, exp(%x)) }},
                 Cons(fn (%v: {V3}) {{ tanh(%v) }}, Nil));
  let %y = @foldl(fn (%acc: {V3}, %g: fn ({V3}) -> {V3}) {{ %g(%acc) }}, %x, %fs);
  sum(multiply(%y, %y))
}}""",
}


def hvp_modules(name: str) -> tuple[rly.IRModule, rly.IRModule]:
    """For ``VECTOR[name]``: the gradient module of ``@main(x, w) = @f(x, w)``, and that module
    plus ``@hv(x, w, v) = <grad_x f, v>`` (whose gradient in ``x`` is a Hessian-vector product)."""
    text = HEADER + VECTOR[name] + f"""
def @main(%x: {V3}, %w: Tensor[(2, 3), float64]) -> float64 {{ @f(%x, %w) }}
"""
    g1 = grad_module(rly.parse(text, "<hvp>", prelude=True), "main")
    return g1, _add(g1, f"""
def @hv(%x: {V3}, %w: Tensor[(2, 3), float64], %v: {V3}) -> float64 {{
  let %r = @main(%x, %w);
  sum(multiply((%r.1).0, %v))
}}""")


@pytest.mark.parametrize("name", sorted(VECTOR))
def test_hessian_vector_product(name: str) -> None:
    rng = np.random.default_rng(1)
    g1, m2 = hvp_modules(name)
    g2 = grad_module(m2, "hv")
    for sign in (1.0, -1.0):
        x = sign * rng.uniform(0.1, 0.8, 3)
        w = rng.uniform(-0.5, 0.5, (2, 3))
        v = rng.uniform(-1, 1, 3)
        gv, (hv, hw, gx) = runtime.evaluate(g2, x, w, v, entry="hv")
        grad_x = runtime.evaluate(g1, x, w)[1][0]
        # d/dv <grad f, v> = grad f
        assert_close_tree(gx, grad_x, 1e-10, 1e-12)
        np.testing.assert_allclose(gv, np.dot(grad_x, v), rtol=1e-10)
        eps = 1e-6
        hi = runtime.evaluate(g1, x + eps * v, w)[1][0]
        lo = runtime.evaluate(g1, x - eps * v, w)[1][0]
        np.testing.assert_allclose(hv, (hi - lo) / (2 * eps), rtol=1e-5, atol=1e-6)
        # mixed second derivative d/dw <grad_x f, v> against FD in w along a direction
        dw = rng.uniform(-1, 1, (2, 3))
        hi = runtime.evaluate(g1, x, w + eps * dw)[1][0]
        lo = runtime.evaluate(g1, x, w - eps * dw)[1][0]
        np.testing.assert_allclose(np.sum(hw * dw), np.dot((hi - lo) / (2 * eps), v),
                                   rtol=1e-5, atol=1e-6)
