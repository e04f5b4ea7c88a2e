"""passes.gradient: every construct against central finite differences through the interpreter."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from util_grad import HEADER, assert_close_tree, check_grad, grad_module
from util_scale import shallow_stack, sizes

rng = np.random.default_rng(0)


def r(*shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype("float64")


V3 = "Tensor[(3), float64]"


# ----------------------------------------------------------------------------- basics
def test_let_and_arithmetic() -> None:
    check_grad(f"""
def @main(%x: {V3}, %y: {V3}) -> {V3} {{
  let %a = multiply(%x, %y);
  let %b = add(%a, %x);
  multiply(%b, exp(%y))
}}""", [r(3), r(3)])


def test_broadcasting_and_reduction() -> None:
    check_grad("""
def @main(%x: Tensor[(2, 3), float64], %b: Tensor[(3), float64], %s: float64) -> float64 {
  sum(multiply(add(%x, %b), %s))
}""", [r(2, 3), r(3), r()])


def test_constants_get_no_gradient_but_scale_others() -> None:
    value, grads = check_grad(f"""
def @main(%x: {V3}) -> {V3} {{
  let %c = 2.5f64;
  let %t = (%c, %x);
  multiply(%t.0, %x)
}}""", [r(3)])
    np.testing.assert_allclose(grads[0], np.full(3, 2.5))


def test_unused_parameter_gets_zeros_of_its_type() -> None:
    _, grads = check_grad(f"""
def @main(%x: {V3}, %u: Tensor[(2, 2), float64]) -> {V3} {{ exp(%x) }}""", [r(3), r(2, 2)])
    assert grads[1].shape == (2, 2) and not grads[1].any()


def test_int_and_bool_parameters_get_zeros() -> None:
    x = r(3)
    _, grads = check_grad(f"""
def @main(%x: {V3}, %n: int32, %flag: bool, %m: Tensor[(2), int64]) -> {V3} {{
  let %xn = multiply(%x, cast(%n, dtype="float64"));
  if (%flag) {{ %xn }} else {{ negative(%xn) }}
}}""", [x, np.array(3, "int32"), np.array(True), np.array([1, 2], "int64")])
    np.testing.assert_allclose(grads[0], np.full(3, 3.0))
    assert grads[1].dtype == np.int32 and grads[1] == 0
    assert grads[2].dtype == np.bool_ and not grads[2]
    assert grads[3].dtype == np.int64 and not grads[3].any()


# ----------------------------------------------------------------------------- tuples
def test_tuple_result_seeds_every_leaf() -> None:
    # Relay seeded only the first leaf (gradient 4 here); the sum of all outputs gives 6.
    x = r(3)
    value, grads = check_grad(f"""
def @main(%x: {V3}) -> ({V3}, {V3}) {{
  let %y = multiply(%x, 2f64);
  (add(%y, %y), %y)
}}""", [x])
    np.testing.assert_allclose(grads[0], np.full(3, 6.0))


def test_aliased_result_leaves_count_twice() -> None:
    _, grads = check_grad(f"""
def @main(%x: {V3}) -> ({V3}, ({V3}, {V3})) {{ (%x, (%x, exp(%x))) }}""", [r(3)])


def test_tuple_parameters_and_projection() -> None:
    check_grad(f"""
def @main(%p: ({V3}, (float64, Tensor[(2), float64])), %n: int32) -> float64 {{
  let %a = %p.0;
  let %inner = %p.1;
  add(sum(multiply(%a, %inner.0)), sum(exp(%inner.1)))
}}""", [(r(3), (r(), r(2))), np.array(1, "int32")])


def test_function_returning_tuple() -> None:
    check_grad(f"""
def @pair(%x: {V3}) -> ({V3}, {V3}) {{ (exp(%x), multiply(%x, %x)) }}
def @main(%x: {V3}) -> ({V3}, {V3}) {{
  let %t = @pair(%x);
  (multiply(%t.0, %t.1), %t.1)
}}""", [r(3)])


# ----------------------------------------------------------------------------- closures
def test_closure_capturing_a_parameter() -> None:
    check_grad(f"""
def @main(%x: {V3}, %w: {V3}) -> {V3} {{
  let %f = fn (%y: {V3}) {{ multiply(%y, %w) }};
  add(%f(%x), %f(exp(%x)))
}}""", [r(3), r(3)])


def test_closure_returned_from_one_call_and_called_elsewhere() -> None:
    check_grad(f"""
def @make(%w: {V3}) -> fn ({V3}) -> {V3} {{
  let %e = exp(%w);
  fn (%y: {V3}) {{ multiply(%y, %e) }}
}}
def @apply(%f: fn ({V3}) -> {V3}, %v: {V3}) -> {V3} {{ %f(%f(%v)) }}
def @main(%x: {V3}, %w: {V3}) -> {V3} {{
  let %f = @make(%w);
  @apply(%f, %x)
}}""", [r(3), r(3)])


def test_higher_order_function_passed_as_argument() -> None:
    check_grad(f"""
def @twice(%f: fn ({V3}) -> {V3}, %x: {V3}) -> {V3} {{ %f(%f(%x)) }}
def @main(%x: {V3}) -> {V3} {{ @twice(fn (%z: {V3}) {{ multiply(%z, exp(%z)) }}, %x) }}
""", [r(3)])


def test_closures_stored_in_tuple_and_ref() -> None:
    check_grad(f"""
def @main(%x: {V3}, %w: {V3}) -> {V3} {{
  let %fs = (fn (%y: {V3}) {{ multiply(%y, %w) }}, fn (%y: {V3}) {{ exp(%y) }});
  let %cell = ref(%fs.0);
  let %a = (%fs.1)(%x);
  let %g = ref_read(%cell);
  let %_ = ref_write(%cell, %fs.1);
  let %h = ref_read(%cell);
  add(%g(%a), %h(%w))
}}""", [r(3), r(3)])


def test_global_function_as_value() -> None:
    check_grad(f"""
def @sq(%x: {V3}) -> {V3} {{ multiply(%x, %x) }}
def @main(%x: {V3}) -> {V3} {{ let %f = @sq; %f(exp(%x)) }}
""", [r(3)])


# ----------------------------------------------------------------------------- control flow
def test_if_on_computed_condition() -> None:
    text = f"""
def @main(%x: {V3}, %y: {V3}) -> {V3} {{
  if (less(sum(%x), sum(%y))) {{ multiply(%x, %y) }} else {{ exp(subtract(%x, %y)) }}
}}"""
    x, y = r(3), r(3)
    check_grad(text, [x, y])
    check_grad(text, [y, x])


def test_recursive_power() -> None:
    x = r(3)
    _, grads = check_grad(f"""
def @pow(%x: {V3}, %n: int32) -> {V3} {{
  if (equal(%n, 0)) {{ ones_like(%x) }} else {{ multiply(%x, @pow(%x, subtract(%n, 1))) }}
}}
def @main(%x: {V3}) -> {V3} {{ @pow(%x, 5) }}""", [x])
    np.testing.assert_allclose(grads[0], 5 * x ** 4, rtol=1e-9)


def test_mutual_recursion() -> None:
    check_grad(f"""
def @even(%x: {V3}, %n: int32) -> {V3} {{
  if (equal(%n, 0)) {{ %x }} else {{ @odd(multiply(%x, 1.5f64), subtract(%n, 1)) }}
}}
def @odd(%x: {V3}, %n: int32) -> {V3} {{ @even(exp(multiply(%x, 0.5f64)), subtract(%n, 1)) }}
def @main(%x: {V3}) -> {V3} {{ @even(%x, 4) }}""", [r(3)])


def test_recursive_closure_in_let() -> None:
    check_grad(f"""
def @main(%x: {V3}) -> {V3} {{
  let %loop = fn (%i: int32, %acc: {V3}) -> {V3} {{
    if (less(%i, 3)) {{ %loop(add(%i, 1), multiply(%acc, %x)) }} else {{ %acc }}
  }};
  %loop(0, exp(%x))
}}""", [r(3)])


# ----------------------------------------------------------------------------- references
def test_reference_mutated_in_a_loop() -> None:
    x = r(3)
    _, grads = check_grad(f"""
def @main(%x: {V3}) -> {V3} {{
  let %acc = ref(ones_like(%x));
  let %loop = fn (%i: int32) -> () {{
    if (less(%i, 4)) {{
      let %_ = ref_write(%acc, multiply(ref_read(%acc), %x));
      %loop(add(%i, 1))
    }} else {{ () }}
  }};
  let %_ = %loop(0);
  ref_read(%acc)
}}""", [x])
    np.testing.assert_allclose(grads[0], 4 * x ** 3, rtol=1e-9)


def test_overwritten_reference_gets_no_gradient() -> None:
    _, grads = check_grad(f"""
def @main(%x: {V3}, %y: {V3}) -> {V3} {{
  let %c = ref(exp(%x));
  let %_ = ref_write(%c, multiply(%y, %y));
  ref_read(%c)
}}""", [r(3), r(3)])
    assert not grads[0].any()


# ----------------------------------------------------------------------------- ADTs
def test_match_on_list_with_generic_map_and_foldl() -> None:
    check_grad(f"""
def @main(%a: {V3}, %b: {V3}, %w: {V3}) -> {V3} {{
  let %l = Cons(%a, Cons(%b, Cons(exp(%a), Nil)));
  let %m = @map(fn (%v: {V3}) {{ multiply(%v, %w) }}, %l);
  let %s = @foldl(fn (%acc: {V3}, %v: {V3}) {{ add(multiply(%acc, %v), %v) }}, %w, %m);
  match (%m) {{
    Cons(%h, _) => add(%s, %h),
    Nil => %s,
  }}
}}""", [r(3), r(3), r(3)], prelude=True)


def test_generic_function_called_at_float_type() -> None:
    check_grad(f"""
def @twice[A](%f: fn (A) -> A, %x: A) -> A {{ %f(%f(%x)) }}
def @main(%x: {V3}, %y: float64) -> ({V3}, float64) {{
  let %sq = fn (%s: float64) {{ multiply(%s, %s) }};
  (@twice(fn (%v: {V3}) {{ exp(%v) }}, %x), @id(@twice(%sq, %y)))
}}""", [r(3), np.array(0.7)], prelude=True)


def test_adt_with_tensor_and_function_fields() -> None:
    check_grad(f"""
type Tree {{
  Leaf({V3}),
  Node(Tree, Tree),
  Scale(fn ({V3}) -> {V3}, Tree),
}}
def @eval(%t: Tree) -> {V3} {{
  match (%t) {{
    Leaf(%v) => %v,
    Node(%l, %r) => multiply(@eval(%l), @eval(%r)),
    Scale(%f, %s) => %f(@eval(%s)),
  }}
}}
def @main(%x: {V3}, %y: {V3}, %w: {V3}) -> {V3} {{
  let %f = fn (%v: {V3}) {{ multiply(%v, %w) }};
  @eval(Node(Leaf(%x), Scale(%f, Node(Leaf(%y), Leaf(exp(%x))))))
}}""", [r(3), r(3), r(3)])


def test_closure_stored_in_adt_called_later() -> None:
    check_grad(f"""
def @main(%x: {V3}, %w: {V3}) -> {V3} {{
  let %o = Some(fn (%v: {V3}) {{ multiply(exp(%v), %w) }});
  let %y = exp(%x);
  match (%o) {{
    Some(%f) => %f(%y),
    None => %y,
  }}
}}""", [r(3), r(3)], prelude=True)


def test_rnn_over_a_list() -> None:
    H, I = 4, 3
    check_grad(f"""
def @cell(%wx: Tensor[({H}, {I}), float64], %wh: Tensor[({H}, {H}), float64],
          %h: Tensor[(1, {H}), float64], %x: Tensor[(1, {I}), float64]
          ) -> Tensor[(1, {H}), float64] {{
  tanh(add(nn.dense(%x, %wx), nn.dense(%h, %wh)))
}}
def @main(%x0: Tensor[(1, {I}), float64], %x1: Tensor[(1, {I}), float64],
          %x2: Tensor[(1, {I}), float64], %wx: Tensor[({H}, {I}), float64],
          %wh: Tensor[({H}, {H}), float64]) -> float64 {{
  let %xs = Cons(%x0, Cons(%x1, Cons(%x2, Nil)));
  let %h0 = zeros(shape=[1, {H}], dtype="float64");
  let %h = @foldl(fn (%h: Tensor[(1, {H}), float64], %x: Tensor[(1, {I}), float64]) {{
    @cell(%wx, %wh, %h, %x)
  }}, %h0, %xs);
  sum(multiply(%h, %h))
}}""", [r(1, I), r(1, I), r(1, I), r(H, I), r(H, H)], prelude=True)


def test_mlp_softmax_cross_entropy() -> None:
    B, D, Hd, C = 4, 5, 6, 3
    labels = np.eye(C)[[0, 2, 1, 2]].astype("float64")
    check_grad(f"""
def @main(%x: Tensor[({B}, {D}), float64], %y: Tensor[({B}, {C}), float64],
          %w1: Tensor[({Hd}, {D}), float64], %b1: Tensor[({Hd}), float64],
          %w2: Tensor[({C}, {Hd}), float64], %b2: Tensor[({C}), float64]) -> float64 {{
  let %h = nn.relu(nn.bias_add(nn.dense(%x, %w1), %b1));
  let %logits = add(nn.dense(%h, %w2), %b2);
  let %p = nn.softmax(%logits);
  negative(mean(sum(multiply(%y, log(%p)), axis=[1])))
}}""", [r(B, D), labels, r(Hd, D), r(Hd), r(C, Hd), r(C)])


# ----------------------------------------------------------------------------- scale
@sizes(2_000, 10_000)
def test_ten_thousand_bindings_at_default_recursion_limit(n: int) -> None:
    lines = [f"  let %v{i} = multiply(%v{i - 1}, 1.0001f64);" for i in range(1, n)]
    text = ("def @main(%x: float64) -> float64 {\n  let %v0 = add(%x, 0f64);\n"
            + "\n".join(lines) + f"\n  %v{n - 1}\n}}")
    with shallow_stack():
        mod = rly.parse(HEADER + text)
        g = passes.gradient(mod)
        printed = rly.astext(g)
        assert printed.count("ref_write") >= n
        value, (gx,) = runtime.evaluate(g, np.array(0.5))
    np.testing.assert_allclose(value, 0.5 * 1.0001 ** (n - 1), rtol=1e-9)
    np.testing.assert_allclose(gx, 1.0001 ** (n - 1), rtol=1e-9)


# ----------------------------------------------------------------------------- bad input
def _parse(text: str, prelude: bool = False) -> rly.IRModule:
    return rly.parse(HEADER + text, "bad.rly", prelude=prelude)


def test_unknown_entry() -> None:
    mod = _parse(f"def @main(%x: {V3}) -> {V3} {{ exp(%x) }}")
    with pytest.raises(rly.DiagnosticError, match=r"no global function @loss.*@main"):
        passes.gradient(mod, entry="loss")


def test_non_function_entry() -> None:
    mod = _parse(f"def @main(%x: {V3}) -> {V3} {{ exp(%x) }}", prelude=True)
    with pytest.raises(rly.DiagnosticError, match="`List` is an ADT, not a function"):
        passes.gradient(mod, entry="List")
    with pytest.raises(rly.DiagnosticError, match="`Cons` is a constructor"):
        passes.gradient(mod, entry="Cons")


def test_entry_taking_a_function_is_rejected_with_span() -> None:
    mod = _parse(f"def @main(%f: fn ({V3}) -> {V3}, %x: {V3}) -> {V3} {{ %f(%x) }}")
    with pytest.raises(rly.DiagnosticError, match="parameter %f of @main") as ei:
        passes.gradient(mod)
    assert ei.value.span is not None and ei.value.span.line == 2


def test_unknown_mode() -> None:
    mod = _parse(f"def @main(%x: {V3}) -> {V3} {{ exp(%x) }}")
    with pytest.raises(rly.DiagnosticError, match="unknown gradient mode"):
        passes.gradient(mod, mode="sideways")


def test_every_op_without_rule_is_named_with_its_span() -> None:
    from relay_ir.op import override_op
    with override_op("exp", grad=None), override_op("tanh", grad=None):
        _check_missing_rules_named()


def _check_missing_rules_named() -> None:
    mod = _parse(f"""def @f(%x: {V3}) -> {V3} {{
  tanh(%x)
}}
def @main(%x: {V3}, %n: int32) -> {V3} {{
  let %a = exp(%x);
  let %i = add(%n, 1);
  @f(%a)
}}""")
    with pytest.raises(rly.DiagnosticError) as ei:
        passes.gradient(mod)
    err = ei.value
    msg = str(err)
    assert "`exp`" in err.message and "`tanh`" in err.message
    assert "bad.rly:6" in err.message and "bad.rly:3" in err.message
    assert err.span is not None and "^" in msg


def test_ops_on_int_paths_need_no_rule() -> None:
    from relay_ir.op import override_op
    with override_op("subtract", grad=None), override_op("argmax", grad=None):
        check_grad(f"""
def @main(%x: {V3}, %n: Tensor[(3), int32]) -> {V3} {{
  let %m = subtract(%n, argmax(%x));
  multiply(%x, cast(%m, dtype="float64"))
}}""", [r(3), np.array([1, 2, 3], "int32")])


def test_input_is_not_mutated() -> None:
    mod = _parse(f"def @main(%x: {V3}) -> {V3} {{ exp(%x) }}")
    before = rly.astext(mod)
    grad_module(mod)
    assert rly.astext(mod) == before


def test_ops_taking_and_returning_tuples() -> None:
    check_grad(f"""
def @main(%x: {V3}, %y: Tensor[(2), float64]) -> Tensor[(2), float64] {{
  let %c = concatenate((exp(%x), %y, %x));
  let %parts = split(%c, indices_or_sections=[2, 5]);
  add(multiply(%parts.0, %y), sum(%parts.2))
}}""", [r(3), r(2)])


def test_w6_scalar_loop_gradient() -> None:
    # WORKLOADS.md W6 with 50 terms: d/dx sum_i sin(x * i) * 0.001 = sum_i 0.001 * i * cos(x * i)
    value, (gx,) = check_grad("""
def @w6(%i: float64, %x: float64, %acc: float64) -> float64 {
  if (greater_equal(%i, 50f64)) { %acc } else {
    @w6(add(%i, 1f64), %x, add(%acc, multiply(sin(multiply(%x, %i)), 0.001f64)))
  }
}
def @main(%x: float64) -> float64 { @w6(0f64, %x, 0f64) }""", [np.array(0.5)])
    i = np.arange(50)
    np.testing.assert_allclose(gx, np.sum(0.001 * i * np.cos(0.5 * i)), rtol=1e-10)


def test_int_cast_blocks_the_gradient() -> None:
    # Relay's cast rule cast the adjoint back to int; here an int value carries no adjoint.
    x = np.array([0.5, 1.7, -2.2])
    _, (gx,) = check_grad(f"""
def @main(%x: {V3}) -> {V3} {{
  multiply(%x, cast(cast(%x, dtype="int32"), dtype="float64"))
}}""", [x])
    np.testing.assert_allclose(gx, np.trunc(x))


@pytest.mark.parametrize("text", [
    f"""def @main(%x: {V3}, %w: {V3}) -> float64 {{
  let %f = fn (%y: {V3}) {{ multiply(%y, %w) }};
  sum(exp(%f(%x)))
}}""",
    f"""def @main(%x: {V3}, %w: {V3}) -> {V3} {{
  let %acc = ref(%w);
  let %loop = fn (%i: int32) -> () {{
    if (less(%i, 3)) {{
      let %_ = ref_write(%acc, multiply(ref_read(%acc), %x));
      %loop(add(%i, 1))
    }} else {{ () }}
  }};
  let %_ = %loop(0);
  ref_read(%acc)
}}"""], ids=["closure", "ref_loop"])
def test_optimizer_keeps_every_gradient_write(text: str) -> None:
    """The default pipeline (effect-aware DCE, partial evaluation) keeps the ref writes."""
    mod = _parse(text)
    g = grad_module(mod)
    x, w = r(3), r(3)
    want = runtime.evaluate(g, x, w)
    got = runtime.evaluate(passes.optimize(g), x, w)
    assert_close_tree(got, want, 1e-12, 1e-14)


def test_generic_adt_with_a_float_field_and_recursive_entry() -> None:
    check_grad(f"""
type Tagged[A] {{
  Tag(A, {V3}),
}}
def @main(%x: {V3}, %n: int32) -> {V3} {{
  let %t = Tag(%n, exp(%x));
  match (%t) {{
    Tag(%k, %v) => if (less(%k, 1)) {{ %v }} else {{ multiply(%v, @main(%x, subtract(%k, 1))) }},
  }}
}}""", [r(3), np.array(2, "int32")])


EXAMPLES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "examples", "*.rly")))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.rsplit("/", 1)[-1])
def test_every_example_differentiates_or_says_why(path: str) -> None:
    """Each example's gradient builds, round-trips and runs, giving the forward value."""
    with open(path, encoding="utf-8") as f:
        mod = rly.parse(f.read(), path, prelude=True)
    typed = passes.InferType()(mod)
    if "symbolic" in path:  # concatenate at a symbolic size: its rule needs static sizes
        with pytest.raises(rly.DiagnosticError, match="needs static sizes"):
            passes.gradient(typed)
        return
    g = grad_module(typed)
    args = []
    for t in typed["main"].checked_type.arg_types:
        assert isinstance(t, rly.TensorType)
        shape = tuple(int(d) for d in t.shape)
        if t.dtype.startswith("float"):
            args.append(rng.uniform(-1, 1, shape).astype(t.dtype))
        else:
            args.append(np.full(shape, 4, dtype=t.dtype))
    value, grads = runtime.evaluate(g, *args)
    assert_close_tree(value, runtime.evaluate(typed, *args), 1e-6, 1e-6)
    for a, d in zip(args, grads):
        assert d.shape == a.shape and d.dtype == a.dtype
        if not a.dtype.kind == "f":
            assert not d.any()


def test_adt_parameter_gets_an_adt_gradient() -> None:
    """A List parameter: its gradient is a List of the same shape (zeros on int leaves)."""
    from util_grad import finite_differences, objective
    v2 = "Tensor[(2), float64]"
    fold = f"""def @main(%xs: List[({v2}, int32)], %w: {v2}) -> float64 {{
  let %step = fn (%acc: {v2}, %p: ({v2}, int32)) {{
    add(multiply(%acc, %w), multiply(tanh(%p.0), cast(%p.1, dtype="float64")))
  }};
  sum(@foldl(%step, %w, %xs))
}}
"""
    mk = f"""
def @mk(%a: {v2}, %b: {v2}) -> List[({v2}, int32)] {{ Cons((%a, 2), Cons((%b, 3), Nil)) }}
"""
    g = grad_module(rly.parse(HEADER + fold, "<adt>", prelude=True))
    assert "lift_List" in g.functions and "grad_List" in g.functions
    use = rly.parse(rly.astext(g) + mk + f"""
def @use(%a: {v2}, %b: {v2}, %w: {v2}) {{ @main(@mk(%a, %b), %w) }}""")
    a, b, w = r(2), r(2), r(2)
    value, (glist, gw) = runtime.evaluate(use, a, b, w, entry="use")
    orig = rly.parse(HEADER + fold + mk + f"""
def @use(%a: {v2}, %b: {v2}, %w: {v2}) -> float64 {{ @main(@mk(%a, %b), %w) }}""",
                     "<adt>", prelude=True)
    want_a, want_b, want_w = finite_differences(objective(orig, "use"), [a, b, w])
    np.testing.assert_allclose(value, runtime.evaluate(orig, a, b, w, entry="use"), rtol=1e-12)
    np.testing.assert_allclose(gw, want_w, rtol=1e-6, atol=1e-8)
    assert glist.constructor.name == "Cons"
    (ga, na), rest = glist.fields
    (gb, nb), nil = rest.fields
    assert nil.constructor.name == "Nil" and na == 0 and nb == 0 and na.dtype == np.int32
    np.testing.assert_allclose(ga, want_a, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, want_b, rtol=1e-6, atol=1e-8)


def test_parameter_holding_a_function_is_rejected() -> None:
    mod = _parse(f"""def @main(%o: Option[fn ({V3}) -> {V3}], %x: {V3}) -> {V3} {{ %x }}""",
                 prelude=True)
    with pytest.raises(rly.DiagnosticError, match="parameter %o of @main"):
        passes.gradient(mod)


def test_adt_result_seeds_every_float_leaf() -> None:
    """A List result: the objective is the sum of every float element in it."""
    x = r(3)
    text = f"""def @main(%x: {V3}, %n: int32) -> List[({V3}, int32)] {{
  @map(fn (%v: {V3}) {{ (exp(%v), %n) }}, Cons(%x, Cons(multiply(%x, %x), Nil)))
}}"""
    g = grad_module(rly.parse(HEADER + text, "<adt>", prelude=True))
    value, (gx, gn) = runtime.evaluate(g, x, np.array(3, "int32"))
    assert value.constructor.name == "Cons"
    (e1, n1), rest = value.fields
    (e2, n2), _ = rest.fields
    np.testing.assert_allclose(e1, np.exp(x), rtol=1e-12)
    np.testing.assert_allclose(e2, np.exp(x * x), rtol=1e-12)
    assert n1 == 3 and n2 == 3
    np.testing.assert_allclose(gx, np.exp(x) + np.exp(x * x) * 2 * x, rtol=1e-10)
    assert gn == 0 and gn.dtype == np.int32
