"""The core optimization passes: before/after text, semantics, effects, idempotence, 100k programs.

Every pass run here is checked by the WellFormedCheck instrument (tests/conftest.py).
"""
from __future__ import annotations

import sys
from typing import Iterator

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.expr import Constant, Function, Let, Var, const
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.passes import (DeadCodeElimination, EliminateCommonSubexpr, FoldConstant, Inline,
                             InferType, Pass, SimplifyExpr, ToANormalForm, ToGraphNormalForm,
                             get_pass)
from relay_ir.traversal import build_lets, flatten_lets
from relay_ir.ty import TensorType
from util_diff import assert_same_results, parse_program, program_files
from util_scale import shallow_stack, sizes

HDR = '#[version = "0.0.5"]\n'


def parse(text: str) -> IRModule:
    return rly.parse(HDR + text)


def check(p: Pass, before: str, after: str, typed: bool = False,
          values: bool = True) -> IRModule:
    """Run ``p`` on ``before``; the result must equal ``after``; the input is not mutated;
    with ``values``, the result computes what ``before`` does (on random inputs)."""
    mod = parse(before)
    text0 = rly.astext(mod)
    out = p(mod)
    assert rly.astext(mod) == text0, "the pass mutated its input"
    expected = parse(after)
    if typed:
        out, expected = InferType()(out), InferType()(expected)
    rly.assert_structural_equal(out, expected, map_free_vars=True)
    if values:
        same_values(parse(before), out)
    return out


def same_values(before: IRModule, after: IRModule, **kw: object) -> None:
    assert_same_results(before, after, **kw)  # type: ignore[arg-type]


# ============================================================================ ToANormalForm
def test_anf_names_every_intermediate() -> None:
    check(ToANormalForm(), """
def @main(%x: float32) { add(multiply(%x, %x), %x) }""", """
def @main(%x: float32) {
  let %a = multiply(%x, %x);
  let %b = add(%a, %x);
  %b
}""")


def test_anf_sharing_becomes_one_let() -> None:
    check(ToANormalForm(), """
def @main(%x: float32) {
  %0 = add(%x, 1f);
  multiply(%0, %0)
}""", """
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %b = multiply(%a, %a);
  %b
}""")


def test_anf_shared_node_is_bound_in_the_innermost_dominating_scope() -> None:
    before = """
def @main(%x: float32, %c: bool) {
  %0 = add(%x, 1f);
  if (%c) { multiply(%0, 2f) } else { %0 }
}"""
    check(ToANormalForm(), before, """
def @main(%x: float32, %c: bool) {
  let %a = add(%x, 1f);
  let %r = if (%c) {
    let %m = multiply(%a, 2f);
    %m
  } else {
    %a
  };
  %r
}""")


def test_anf_unshared_value_stays_in_its_branch_and_function() -> None:
    check(ToANormalForm(), """
def @main(%x: float32, %c: bool) {
  let %f = fn (%y: float32) { add(%y, %x) };
  if (%c) { %f(subtract(%x, 1f)) } else { %x }
}""", """
def @main(%x: float32, %c: bool) {
  let %f = fn (%y: float32) {
    let %a = add(%y, %x);
    %a
  };
  let %r = if (%c) {
    let %s = subtract(%x, 1f);
    let %t = %f(%s);
    %t
  } else {
    %x
  };
  %r
}""")


def test_anf_match_arms_are_scopes() -> None:
    out = check(ToANormalForm(), """
type L { C(float32, L), N }
def @main(%x: float32) {
  match (C(%x, N)) {
    C(%h, _) => add(%h, %h),
    N => %x,
  }
}""", """
type L { C(float32, L), N }
def @main(%x: float32) {
  let %n = N;
  let %l = C(%x, %n);
  let %m = (match (%l) {
    C(%h, _) => {
      let %a = add(%h, %h);
      %a
    },
    N => %x,
  });
  %m
}""")
    assert isinstance(out["main"].body, Let)


def test_anf_keeps_types_and_spans() -> None:
    mod = InferType()(parse("def @main(%x: float32) { add(multiply(%x, %x), %x) }"))
    out = ToANormalForm()(mod)
    lets, body = flatten_lets(out["main"].body)
    assert [str(lt.var.type_annotation) for lt in lets] == ["float32", "float32"]
    assert lets[0].value.span is not None and lets[0].value.span.line == 2


# ============================================================================ ToGraphNormalForm
def test_gnf_turns_pure_lets_into_sharing() -> None:
    before = """
def @main(%x: float32) {
  let %a = add(%x, %x);
  let %b = multiply(%a, %a);
  %b
}"""
    check(ToGraphNormalForm(), before, """
def @main(%x: float32) {
  %0 = add(%x, %x);
  multiply(%0, %0)
}""")


def test_gnf_keeps_effects_and_recursive_closures() -> None:
    src = """
def @main(%x: int32) {
  let %r = ref(%x);
  let %u = ref_write(%r, add(%x, 1));
  let %loop = fn (%i: int32) -> int32 { if (%i == 0) { 0 } else { %loop(%i - 1) } };
  let %v = ref_read(%r);
  add(%v, %loop(3))
}"""
    check(ToGraphNormalForm(), src, src)


# ============================================================================ DCE
def test_dce_removes_unused_pure_bindings_transitively() -> None:
    before = """
def @main(%x: float32) {
  let %a = add(%x, %x);
  let %b = multiply(%a, %a);
  let %c = subtract(%x, 1f);
  %c
}"""
    check(DeadCodeElimination(), before, """
def @main(%x: float32) {
  let %c = subtract(%x, 1f);
  %c
}""")


def test_dce_never_drops_effects() -> None:
    src = """
def @loop(%n: int32) -> int32 { if (%n <= 0) { 0 } else { @loop(%n - 1) } }
def @main(%x: int32, %f: fn (int32) -> int32) {
  let %r = ref(%x);
  let %w = ref_write(%r, 2);
  let %v = ref_read(%r);
  let %u = @loop(%x);
  let %k = %f(%x);
  %x
}"""
    check(DeadCodeElimination(), src, src, values=False)  # %f: no random closures


def test_dce_drops_calls_of_known_pure_functions_and_dead_closures() -> None:
    check(DeadCodeElimination(), """
def @sq(%y: float32) -> float32 { multiply(%y, %y) }
def @main(%x: float32) {
  let %u = @sq(%x);
  let %g = fn (%i: int32) -> int32 { %g(%i) };
  let %h = fn (%z: float32) { add(%z, %z) };
  let %k = %h(%x);
  %x
}""", """
def @sq(%y: float32) -> float32 { multiply(%y, %y) }
def @main(%x: float32) { %x }""")


def test_dce_keeps_call_of_closure_with_effects() -> None:
    src = """
def @main(%x: int32) {
  let %r = ref(%x);
  let %h = fn (%z: int32) { ref_write(%r, %z) };
  let %k = %h(3);
  ref_read(%r)
}"""
    check(DeadCodeElimination(), src, src)


def test_dce_inline_once() -> None:
    before = """
def @main(%x: float32, %c: bool) {
  let %a = add(%x, %x);
  let %b = multiply(%x, %x);
  let %d = subtract(%x, %x);
  let %e = if (%c) { %d } else { %x };
  multiply(%a, add(%b, %e))
}"""
    check(DeadCodeElimination(inline_once=True), before, """
def @main(%x: float32, %c: bool) {
  let %d = subtract(%x, %x);
  multiply(add(%x, %x), add(multiply(%x, %x), if (%c) { %d } else { %x }))
}""")


# ============================================================================ FoldConstant
def test_fold_calls_lets_tuples_and_ifs() -> None:
    before = """
def @main(%x: float32) {
  let %a = add(1f, 2f);
  let %t = (%a, %x);
  let %b = multiply(%x, %t.0);
  let %c = (4f, 5f).1;
  if (greater(%a, 0f)) { add(%b, %c) } else { %x }
}"""
    check(FoldConstant(), before, """
def @main(%x: float32) {
  let %t = (3f, %x);
  let %b = multiply(%x, 3f);
  add(%b, 5f)
}""")


def test_fold_exact_dtypes() -> None:
    mod = parse("""
def @main() {
  (add(2i64, 3i64), cast(2.5f, dtype="float16"), less(1, 2), sum(ones(shape=[2, 3], dtype="int8")))
}""")
    out = FoldConstant()(mod)
    fields = out["main"].body.fields
    assert all(isinstance(f, Constant) for f in fields)
    assert [f.data.dtype.name for f in fields] == ["int64", "float16", "bool", "int8"]
    assert [f.data.item() for f in fields] == [5, 2.5, True, 6]


def test_fold_never_folds_effects() -> None:
    src = """
def @main() {
  let %r = ref(1f);
  let %w = ref_write(%r, add(1f, 1f));
  ref_read(%r)
}"""
    out = check(FoldConstant(), src, """
def @main() {
  let %r = ref(1f);
  let %w = ref_write(%r, 2f);
  ref_read(%r)
}""", values=False)
    same_values(parse(src), out, inputs=())


def test_fold_symbolic_or_unknown_stays() -> None:
    src = "def @main(%x: Tensor[(2), float32]) { add(%x, ones_like(%x)) }"
    check(FoldConstant(), src, src)


# ============================================================================ Inline
def test_inline_global_called_once_and_removes_it() -> None:
    before = """
def @sq(%y: float32) -> float32 { multiply(%y, %y) }
def @main(%x: float32) -> float32 { let %r = @sq(%x); add(%r, 1f) }"""
    check(Inline(), before, """
def @main(%x: float32) -> float32 {
  let %y: float32 = %x;
  let %r = multiply(%y, %y);
  add(%r, 1f)
}""")


def test_inline_marked_global_called_twice_renames_binders() -> None:
    before = """
def @f(%y: float32, Inline=1) -> float32 { let %t = add(%y, %y); %t }
def @main(%x: float32) -> float32 { multiply(@f(%x), @f(2f)) }"""
    check(Inline(), before, """
def @main(%x: float32) -> float32 {
  multiply((let %y1: float32 = %x; let %t1 = add(%y1, %y1); %t1),
           (let %y2: float32 = 2f; let %t2 = add(%y2, %y2); %t2))
}""")


def test_inline_keeps_unmarked_global_called_twice_and_recursion() -> None:
    src = """
def @f(%y: float32) -> float32 { add(%y, %y) }
def @fact(%n: int32) -> int32 { if (%n <= 1) { 1 } else { %n * @fact(%n - 1) } }
def @even(%n: int32, Inline=1) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }
def @odd(%n: int32, Inline=1) -> bool { if (%n == 0) { False } else { @even(%n - 1) } }
def @main(%x: float32) { (@f(%x), @f(1f), @fact(4), @even(3)) }"""
    check(Inline(), src, src)


def test_inline_let_bound_functions() -> None:
    before = """
def @main(%x: float32) {
  let %once = fn (%y: float32) { add(%y, 1f) };
  let %twice = fn (%z: float32, Inline=1) { multiply(%z, %z) };
  let %loop = fn (%i: int32) -> int32 { if (%i == 0) { 0 } else { %loop(%i - 1) } };
  let %a = %once(%x);
  let %b = %twice(%a);
  (%twice(%b), %loop(2))
}"""
    check(Inline(), before, """
def @main(%x: float32) {
  let %loop = fn (%i: int32) -> int32 { if (%i == 0) { 0 } else { %loop(%i - 1) } };
  let %y: float32 = %x;
  let %a = add(%y, 1f);
  let %z1: float32 = %a;
  let %b = multiply(%z1, %z1);
  ((let %z2: float32 = %b; multiply(%z2, %z2)), %loop(2))
}""")


def test_inline_polymorphic_global_substitutes_type_arguments() -> None:
    before = """
def @id[A](%v: A) -> A { %v }
def @main(%x: Tensor[(2), float32]) { @id(%x) }"""
    out = Inline()(InferType()(parse(before)))
    assert list(out.functions) == ["main"]
    lets, _ = flatten_lets(out["main"].body)
    assert str(lets[0].var.type_annotation) == "Tensor[(2), float32]"
    same_values(parse(before), out)


# ============================================================================ CSE
def test_cse_shares_identical_bindings_and_dataflow() -> None:
    before = """
def @main(%x: float32, %y: float32) {
  let %a = add(%x, %y);
  let %b = add(%x, %y);
  let %c = (%a, %b);
  let %d = (%a, %b);
  multiply(subtract(%c.0, %d.1), subtract(%c.0, %d.1))
}"""
    check(EliminateCommonSubexpr(), before, """
def @main(%x: float32, %y: float32) {
  let %a = add(%x, %y);
  let %c = (%a, %a);
  %0 = subtract(%c.0, %c.1);
  multiply(%0, %0)
}""")


def test_cse_respects_attrs_refs_and_scopes() -> None:
    src = """
def @main(%x: Tensor[(2, 2), float32], %c: bool) {
  let %s0 = sum(%x, axis=[0]);
  let %s1 = sum(%x, axis=[1]);
  let %r1 = ref(%x);
  let %r2 = ref(%x);
  let %w = ref_write(%r1, negative(%x));
  let %b = if (%c) { let %p = negative(%s0); %p } else { let %q = negative(%s0); %q };
  (%s1, ref_read(%r2), %b)
}"""
    check(EliminateCommonSubexpr(), src, src)


def test_cse_reuses_dominating_binding_inside_branch() -> None:
    check(EliminateCommonSubexpr(), """
def @main(%x: float32, %c: bool) {
  let %a = negative(%x);
  if (%c) { let %b = negative(%x); add(%b, %a) } else { %a }
}""", """
def @main(%x: float32, %c: bool) {
  let %a = negative(%x);
  if (%c) { add(%a, %a) } else { %a }
}""")


# ============================================================================ SimplifyExpr
def test_simplify_identities() -> None:
    before = """
def @main(%x: Tensor[(2, 3), float32], %i: int32) {
  let %a = multiply(%x, 1f);
  let %b = add(zeros(shape=[2, 3], symbolic=True), %a);
  let %c = negative(negative(%b));
  let %d = divide(%c, ones(shape=[2, 3], dtype="float32"));
  let %e = subtract(%d, 0f);
  let %f = reshape(reshape(%e, newshape=[6]), newshape=[3, 2]);
  let %g = reshape(%x, newshape=[2, 3]);
  (%f, add(%i, 0), multiply(%g, zeros(shape=[2, 3], symbolic=True)), subtract(-0f, %x),
   multiply(%x, 0f), add(%x, 0f), subtract(0f, %x))
}"""
    # x*0, x+0 and 0-x stay for a user's float zero (IEEE: inf*0 is nan, -0+0 is +0, 0-0 is
    # +0 but negative(0) is -0); symbolic AD zeros, -0.0 and integer zeros simplify
    check(SimplifyExpr(), before, """
def @main(%x: Tensor[(2, 3), float32], %i: int32) {
  let %f = reshape(%x, newshape=[3, 2]);
  (%f, %i, zeros(shape=[2, 3], symbolic=True), negative(%x),
   multiply(%x, 0f), add(%x, 0f), subtract(0f, %x))
}""", typed=True)


def test_simplify_only_when_type_is_unchanged() -> None:
    src = """
def @main(%x: float32, %y: Tensor[(3), float32]) {
  (multiply(%x, ones(shape=[3], dtype="float32")), add(%x, zeros(shape=[3], dtype="float32")),
   multiply(%y, 1f), divide(2f, 1f))
}"""
    out = SimplifyExpr()(parse(src))
    fields = out["main"].body.fields
    assert [type(f).__name__ for f in fields] == ["Call", "Call", "Var", "Constant"]
    same_values(parse(src), out)


def test_simplify_rule_table_is_documented() -> None:
    from relay_ir.passes import simplify_expr
    src = open(simplify_expr.__file__).read()
    table = src[src.index("RULES: list"):src.index("def _neg_neg")]
    comments = [ln for ln in table.splitlines() if ln.strip().startswith("# ")]
    assert len(comments) == len(simplify_expr.RULES) and all("->" in c for c in comments)


# ============================================================================ idempotence
IDEMPOTENT = ["to-anf", "to-gnf", "dce", "cse", "fold-constant"]


@pytest.mark.parametrize("name", IDEMPOTENT)
def test_idempotent_on_examples(name: str) -> None:
    p = get_pass(name)
    for path in program_files():
        once = p(parse_program(path))
        twice = p(once)
        assert rly.structural_equal(once, twice, map_free_vars=True), (name, path)
        if name == "to-anf":
            assert twice is once, path  # normal form already: the very same module


@pytest.mark.parametrize("name", ["to-anf", "to-gnf", "dce", "fold-constant", "inline", "cse",
                                  "simplify-expr"])
def test_semantics_on_examples(name: str) -> None:
    p = get_pass(name)
    for path in program_files():
        mod = parse_program(path)
        assert_same_results(mod, p(mod), runs=2)


# ============================================================================ 100k programs
N = 100_000


@pytest.fixture(scope="module", params=[
    pytest.param(3_000, id="3000"), pytest.param(N, id=f"{N}", marks=pytest.mark.stress)])
def big(request: pytest.FixtureRequest) -> tuple[IRModule, int]:
    """``let v_i = add(v_(i-1), 1f)`` x n; every other binding is dead and duplicated."""
    n = request.param
    x = Var("x", TensorType((), "float32"))
    one = const(1.0)
    bindings = []
    prev = x
    for i in range(n):
        v = Var(f"v{i}")
        bindings.append((v, make_call("add", prev, one)))
        if i % 2 == 0:
            prev = v
    return IRModule({"main": Function((x,), build_lets(bindings, prev))}), n


@pytest.mark.parametrize("name", ["to-anf", "to-gnf", "dce", "fold-constant", "inline", "cse",
                                  "simplify-expr"])
def test_100k_bindings(big: tuple[IRModule, int], name: str) -> None:
    mod, n = big
    assert sys.getrecursionlimit() <= 1000
    from relay_ir.passes import PassContext, run_pass
    with shallow_stack():  # NOTE: untyped: no infer-type
        out = run_pass(get_pass(name), mod, PassContext.current())
    body = out["main"].body
    if name == "dce":
        assert len(flatten_lets(body)[0]) == n // 2
    elif name == "cse":
        assert len(flatten_lets(body)[0]) == n // 2 + 1
    elif name == "to-gnf":
        assert not isinstance(body, Let)
    else:
        assert len(flatten_lets(body)[0]) == n


def test_100k_result_value(big: tuple[IRModule, int]) -> None:
    mod, n = big
    from relay_ir.runtime import evaluate
    with shallow_stack():
        out = DeadCodeElimination()(mod)
        value = float(evaluate(out, np.float32(0.5)))
    assert value == pytest.approx(0.5 + n // 2)


# ============================================================================ more effects
@pytest.fixture()
def negative_is_effectful() -> Iterator[None]:
    """Pretend ``negative`` has side effects (no registered op has), through the registry."""
    from relay_ir.op import override_op
    with override_op("negative", effectful=True):
        yield


def test_effectful_ops_are_never_dropped_merged_or_folded(negative_is_effectful: None) -> None:
    src = """
def @main(%x: float32) {
  let %a = negative(%x);
  let %b = negative(%x);
  let %c = negative(1f);
  %x
}"""
    for p in (DeadCodeElimination(), EliminateCommonSubexpr(), FoldConstant(),
              ToGraphNormalForm()):
        check(p, src, src)


def test_dce_in_nested_scopes() -> None:
    before = """
type L { C(float32, L), N }
def @main(%x: float32, %c: bool, %l: L) {
  let %f = fn (%y: float32) { let %d1 = add(%y, %y); %y };
  let %m = (match (%l) { C(%h, _) => { let %d2 = negative(%h); %h }, N => %x });
  if (%c) { let %d3 = multiply(%x, %x); %f(%m) } else { %x }
}"""
    out = check(DeadCodeElimination(), before, """
type L { C(float32, L), N }
def @main(%x: float32, %c: bool, %l: L) {
  let %f = fn (%y: float32) { %y };
  let %m = (match (%l) { C(%h, _) => %h, N => %x });
  if (%c) { %f(%m) } else { %x }
}""", values=False)
    same_values(parse(before), out, inputs=(np.float32(2.0), np.True_, _nil(out)))


def _nil(mod: IRModule) -> object:
    from relay_ir.runtime.values import ADTValue
    return ADTValue(mod.get_constructor("N"), ())


def test_anf_of_function_in_call_position_and_nested_lets() -> None:
    before = """
def @main(%x: float32) {
  let %a = (let %b = add(%x, 1f); multiply(%b, %b));
  (fn (%y: float32) { negative(%y) })(%a)
}"""
    check(ToANormalForm(), before, """
def @main(%x: float32) {
  let %b = add(%x, 1f);
  let %m = multiply(%b, %b);
  let %a = %m;
  let %f = fn (%y: float32) { let %n = negative(%y); %n };
  let %r = %f(%a);
  %r
}""")


def test_inline_global_called_inside_a_closure() -> None:
    before = """
def @sq(%y: float32) -> float32 { multiply(%y, %y) }
def @main(%x: float32) {
  let %g = fn (%z: float32) { add(@sq(%z), 1f) };
  (%g(%x), %g(2f))
}"""
    check(Inline(), before, """
def @main(%x: float32) {
  let %g = fn (%z: float32) { add((let %y: float32 = %z; multiply(%y, %y)), 1f) };
  (%g(%x), %g(2f))
}""")


def test_fold_inside_functions_and_branches() -> None:
    before = """
def @main(%x: float32, %c: bool) {
  let %f = fn (%y: float32) { multiply(%y, add(1f, 1f)) };
  if (%c) { %f(subtract(3f, 1f)) } else { if (True) { %x } else { negative(%x) } }
}"""
    check(FoldConstant(), before, """
def @main(%x: float32, %c: bool) {
  let %f = fn (%y: float32) { multiply(%y, 2f) };
  if (%c) { %f(2f) } else { %x }
}""")


def test_anf_leaves_primitive_functions_alone() -> None:
    src = """
def @main(%x: float32) {
  let %f = fn (%y: float32, Primitive=1) { add(multiply(%y, %y), %y) };
  %f(%x)
}"""
    check(ToANormalForm(), src, """
def @main(%x: float32) {
  let %f = fn (%y: float32, Primitive=1) { add(multiply(%y, %y), %y) };
  let %r = %f(%x);
  %r
}""")


@sizes(3_000, N)
def test_100k_typed_simplify_chain(n: int) -> None:
    """``let v_i = multiply(v_(i-1), 1f)`` x 100k, typed by hand: everything folds back to %x."""
    from relay_ir.expr import Call
    from relay_ir.passes import PassContext, run_pass
    f32 = TensorType((), "float32")
    x = Var("x", f32)
    one = const(1.0)
    proto = make_call("multiply", x, one)
    bindings = []
    prev = x
    for i in range(n):
        v = Var(f"v{i}", f32)
        bindings.append((v, Call(proto.op, (prev, one), proto.attrs, checked_type_=f32)))
        prev = v
    mod = IRModule({"main": Function((x,), build_lets(bindings, prev))})
    with shallow_stack():
        out = run_pass(SimplifyExpr(), mod, PassContext.current())
    assert out["main"].body is x


# ============================================================================ generated programs
def is_anf(e: object) -> bool:
    """Every call/tuple/projection/ref/if/match/fn is the value of a let; scopes end in atoms."""
    from relay_ir.expr import Call, If, Match, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem
    from relay_ir.expr import is_atom
    compound = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite, If, Match, Function)
    stack: list[tuple[object, bool]] = [(e, False)]  # (node, in a scope-result position)
    while stack:
        node, scope_pos = stack.pop()
        if isinstance(node, Let):
            lets, body = flatten_lets(node)
            for lt in lets:
                if isinstance(lt.value, Let):
                    return False
                stack.append((lt.value, False))
            stack.append((body, True))
            continue
        if scope_pos and not is_atom(node):
            return False
        if isinstance(node, Function):
            if not node.is_primitive:
                stack.append((node.body, True))
            continue
        if isinstance(node, If):
            kids = [node.cond]
            stack.extend([(node.true_branch, True), (node.false_branch, True)])
        elif isinstance(node, Match):
            kids = [node.data]
            stack.extend((c.rhs, True) for c in node.clauses)
        else:
            from relay_ir.traversal import children
            kids = list(children(node))
        for k in kids:
            if isinstance(k, compound) or isinstance(k, Let):
                return False
    return True


def test_is_anf_checker_itself() -> None:
    assert is_anf(parse("def @main(%x: float32) { let %a = add(%x, %x); %a }")["main"])
    assert not is_anf(parse("def @main(%x: float32) { add(%x, %x) }")["main"])
    assert not is_anf(parse(
        "def @main(%x: float32) { let %a = add(negative(%x), %x); %a }")["main"])


try:
    from hypothesis import HealthCheck, given, settings
    from strategies import modules
    HAVE_HYPOTHESIS = True
except ImportError:  # pragma: no cover
    HAVE_HYPOTHESIS = False


if HAVE_HYPOTHESIS:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True, database=None)
    @given(modules())
    def test_generated_modules_stay_well_formed(mod: IRModule) -> None:
        """Random well-scoped programs (not necessarily typed): every pass keeps them well formed
        (the instrument checks), ANF is ANF, and the idempotent passes are idempotent."""
        text = rly.astext(mod)
        anf = ToANormalForm()(mod)
        assert all(is_anf(f) for f in anf.functions.values())
        assert ToANormalForm()(anf) is anf
        for p in (ToGraphNormalForm(), DeadCodeElimination(), EliminateCommonSubexpr(),
                  FoldConstant()):
            once = p(anf)
            assert rly.structural_equal(p(once), once, map_free_vars=True), p.name
        Inline()(mod)
        DeadCodeElimination(inline_once=True)(anf)
        assert rly.astext(mod) == text
