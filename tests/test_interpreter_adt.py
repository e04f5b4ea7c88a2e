"""ADT-heavy programs in Relay text on the standard prelude (RELAY_TESTS_INVENTORY.md §4).

Each program is parsed with ``prelude=True`` and run with the interpreter; the expected values
are worked out by hand. Also: text versions of the closure/ref/recursion forms, and the
differential harness in tests/util_diff.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.errors import InterpreterError
from relay_ir.runtime import ADTValue, Closure, RefValue, evaluate, format_value
from util_diff import assert_same_results, assert_values_close, random_inputs
from util_scale import shallow_stack, sizes

HEADER = '#[version = "0.0.5"]\n'


def parse(text: str, prelude: bool = True) -> rly.IRModule:
    return rly.parse(HEADER + text, prelude=prelude)


def ev(body: str, *args, defs: str = "", params: str = ""):
    """Evaluate ``body`` as the body of @main (prelude loaded)."""
    mod = parse(f"{defs}\ndef @main({params}) {{\n{body}\n}}\n")
    return evaluate(mod, *args)


def pylist(v):
    """A List ADT value as a Python list (tensors -> Python scalars, nested lists too)."""
    out = []
    while True:
        assert isinstance(v, ADTValue)
        if v.constructor.name == "Nil":
            return out
        assert v.constructor.name == "Cons"
        h = v.fields[0]
        out.append(h.item() if isinstance(h, np.ndarray) else
                   pylist(h) if isinstance(h, ADTValue) and h.constructor.name in ("Cons", "Nil")
                   else h)
        v = v.fields[1]


def nat(v) -> int:
    n = 0
    while v.constructor.name == "succ":
        n += 1
        v = v.fields[0]
    assert v.constructor.name == "zero"
    return n


def lit(xs) -> str:
    """Relay text of a List literal."""
    out = "Nil"
    for x in reversed(xs):
        out = f"Cons({x}, {out})"
    return out


# ----------------------------------------------------------------------------- nat
def test_nat_counts_and_arithmetic():
    assert nat(ev("@int_to_nat(10)")) == 10
    assert int(ev("@nat_to_int(succ(succ(zero)))")) == 2
    assert nat(ev("@nat_double(succ(zero))")) == 2
    assert nat(ev("@nat_add(succ(zero), succ(zero))")) == 2
    assert format_value(ev("succ(succ(zero))")) == "succ(succ(zero))"


def test_list_of_nat_and_repr():
    v = ev("Cons(zero, Nil)")
    assert format_value(v) == "Cons(zero, Nil)"
    assert format_value(ev(lit([1, 2]))) == "Cons(1, Cons(2, Nil))"
    assert format_value(ev(lit(["1f", "2.5f"]))) == "Cons(1f, Cons(2.5f, Nil))"


# ----------------------------------------------------------------------------- list functions
TEN = lit(range(1, 11))


def test_hd_tl_nth_update_length():
    assert int(ev(f"@hd({TEN})")) == 1
    assert pylist(ev(f"@tl({TEN})")) == list(range(2, 11))
    assert [int(ev(f"@nth({TEN}, {i})")) for i in (0, 4, 9)] == [1, 5, 10]
    assert int(ev(f"@nth(@update({TEN}, 3, 42), 3)")) == 42
    assert pylist(ev(f"@update({lit([1, 2, 3])}, 1, 9)")) == [1, 9, 3]
    assert int(ev(f"@length({lit([7, 8, 9])})")) == 3


def test_hd_of_nil_is_a_failed_match():
    with pytest.raises(InterpreterError) as ei:
        ev("@hd(Nil)")
    assert "match? failed" in ei.value.message and "Nil" in ei.value.message
    assert ei.value.span is not None and ei.value.span.line > 0
    assert "^" in str(ei.value)


def test_map_foldl_foldr_foldr1_sum():
    assert pylist(ev(f"@map(fn (%x: int32) {{ %x + 1 }}, {lit([1, 2, 3])})")) == [2, 3, 4]
    assert [nat(x) for x in _adt_list(ev(f"@map(succ, {lit(['zero', 'succ(zero)'])})"))] == \
        [1, 2]
    prepend_twice = "fn (%acc: List[int32], %x: int32) { Cons(%x, Cons(%x, %acc)) }"
    assert pylist(ev(f"@foldl({prepend_twice}, Nil, {lit([1, 2, 3])})")) == [3, 3, 2, 2, 1, 1]
    rebuild = "fn (%x: int32, %acc: List[int32]) { Cons(%x, %acc) }"
    assert pylist(ev(f"@foldr({rebuild}, Nil, {lit([1, 2, 3])})")) == [1, 2, 3]
    one, two, three = "succ(zero)", "succ(succ(zero))", "succ(succ(succ(zero)))"
    assert nat(ev(f"@foldr1(@nat_add, {lit([one, two, three])})")) == 6
    assert int(ev(f"@sum({lit([1, 2])})")) == 3


def _adt_list(v):
    out = []
    while v.constructor.name == "Cons":
        out.append(v.fields[0])
        v = v.fields[1]
    return out


def test_concat_filter_zip_rev():
    assert pylist(ev(f"@concat({lit([1, 2])}, {lit([3, 4])})")) == [1, 2, 3, 4]
    # keep the nats > 1 with a nested constructor pattern
    keep = "fn (%n: nat) { match (%n) { succ(succ(_)) => True, _ => False } }"
    n = {1: "succ(zero)", 3: "succ(succ(succ(zero)))", 5: "@int_to_nat(5)"}
    xs = lit([n[1], n[1], n[3], n[1], n[5], n[1]])
    assert [nat(x) for x in _adt_list(ev(f"@filter({keep}, {xs})"))] == [3, 5]
    pairs = ev(f"@zip({lit([1, 2, 3])}, {lit(['4f', '5f'])})")
    got = [(int(a), float(b)) for a, b in _adt_list(pairs)]
    assert got == [(1, 4.0), (2, 5.0)]
    assert len(_adt_list(ev(f"@zip({lit([1])}, {lit([1, 2, 3])})"))) == 1
    assert len(_adt_list(ev(f"@zip({lit([1, 2, 3])}, {lit([1, 2, 3])})"))) == 3
    assert pylist(ev(f"@rev({lit([1, 2, 3])})")) == [3, 2, 1]


COUNTDOWN = """fn (%n: int32) -> Option[(int32, int32)] {
  if (%n <= 0) { None } else { Some((%n - 1, %n)) }
}"""


def test_unfoldr_unfoldl():
    assert pylist(ev(f"@unfoldr({COUNTDOWN}, 3)")) == [3, 2, 1]
    assert pylist(ev(f"@unfoldl({COUNTDOWN}, 3)")) == [1, 2, 3]


def test_map_accumr_map_accuml():
    add_acc = "fn (%a: int32, %b: int32) { (%a + %b, %a + %b) }"
    acc, ys = ev(f"@map_accumr({add_acc}, 0, {lit([1, 2, 3])})")
    assert int(acc) == 6 and pylist(ys) == [6, 5, 3]
    acc, ys = ev(f"@map_accuml({add_acc}, 0, {lit([1, 2, 3])})")
    assert int(acc) == 6 and pylist(ys) == [1, 3, 6]


def test_option_matching_inside_foldr():
    f = """fn (%o: Option[int32], %acc: List[int32]) {
      match (%o) { Some(%v) => Cons(%v, %acc), None => %acc }
    }"""
    assert pylist(ev(f"@foldr({f}, Nil, {lit(['Some(3)', 'None', 'Some(1)'])})")) == [3, 1]


def test_rose_tree_tmap_and_size():
    leaf = "Rose({}, Nil)"
    tree = (f"Rose(1, {lit([leaf.format(2), leaf.format(3)])})")
    big = f"Rose(0, {lit([tree, tree, leaf.format(9)])})"  # 1 + 3 + 3 + 1 + ... = 8
    assert int(ev(f"@size({big})")) == 8
    ten = f"Rose(0, {lit([tree, tree, f'Rose(7, {lit([leaf.format(8), leaf.format(9)])})'])})"
    assert int(ev(f"@size({ten})")) == 10
    mapped = ev(f"@tmap(fn (%x: int32) {{ %x * 10 }}, {tree})")
    assert format_value(mapped) == "Rose(10, Cons(Rose(20, Nil), Cons(Rose(30, Nil), Nil)))"


def test_compose_and_iterate():
    defs = """def @inc(%x: int32) -> int32 { %x + 1 }
def @double(%x: int32) -> int32 { %x * 2 }"""
    assert int(ev("@compose(@inc, @double)(2)", defs=defs)) == 5  # inc(double(2))
    assert int(ev("@iterate(@double, 2)(3)", defs=defs)) == 12
    assert int(ev("@nat_iterate(@double, succ(succ(succ(zero))))(1)", defs=defs)) == 8
    assert isinstance(ev("@compose(@inc, @double)", defs=defs), Closure)


# ----------------------------------------------------------------------------- match forms
def test_wildcard_only_match_returns_scrutinee_and_first_clause_wins():
    assert pylist(ev(f"match ({lit([1, 2])}) {{ _ => {lit([1, 2])} }}")) == [1, 2]
    assert int(ev(f"match ({lit([1, 2])}) {{ _ => 0, Cons(_, _) => 1, Nil => 2 }}")) == 0
    assert int(ev(f"match ({lit([1, 2])}) {{ Nil => 2, Cons(_, _) => 1, _ => 0 }}")) == 1


def test_bare_var_pattern_and_nested_constructor_pattern():
    assert pylist(ev("match (Nil) { %l => %l }", )) == []
    assert pylist(ev(f"match ({lit([4, 5])}) {{ %l => %l }}")) == [4, 5]
    second = f"match ({lit([4, 5, 6])}) {{ Cons(%h1, Cons(%h2, %t)) => %h2, _ => -1 }}"
    assert int(ev(second)) == 5


def test_nested_matches_flatten_a_list_of_lists():
    defs = """def @flatten(%xss: List[List[int32]]) -> List[int32] {
  match (%xss) {
    Nil => Nil,
    Cons(%xs, %rest) => match (%xs) {
      Nil => @flatten(%rest),
      Cons(%h, %t) => Cons(%h, @flatten(Cons(%t, %rest))),
    },
  }
}"""
    xss = lit([lit([1, 2]), "Nil", lit([3]), lit([4, 5, 6])])
    assert pylist(ev(f"@flatten({xss})", defs=defs)) == [1, 2, 3, 4, 5, 6]


def test_tuple_patterns_and_failed_total_match():
    assert int(ev("match ((1, Some(2))) { (%a, Some(%b)) => %a + %b, (_, None) => 0 }")) == 3
    with pytest.raises(InterpreterError, match=r"match failed: no clause matches the value "
                                               r"None"):
        ev("match (None) { Some(%x) => %x }")


# ----------------------------------------------------------------------------- text forms
def test_text_closures_refs_and_local_recursion():
    prog = """
  let %r = ref(0);
  let %alias = %r;
  let %bump = fn (%k: int32) { ref_write(%alias, ref_read(%alias) + %k) };
  let %u1 = %bump(5);
  let %u2 = %bump(10);
  let %fact = fn (%n: int32) -> int32 { if (%n == 0) { 1 } else { %n * %fact(%n - 1) } };
  (ref_read(%r), %u1, %fact(6))
"""
    r, unit, fact = ev(prog)
    assert int(r) == 15 and unit == () and int(fact) == 720


@sizes(3_000, 100_000)
def test_text_deep_fold_over_100000_elements(n):
    defs = """def @build(%n: int32, %acc: List[int32]) -> List[int32] {
  if (%n == 0) { %acc } else { @build(%n - 1, Cons(mod(%n, 7), %acc)) }
}"""
    expected = sum(i % 7 for i in range(1, n + 1))
    body = """let %l = @build(%n, Nil);
  (@sum(%l), @foldr(fn (%x: int32, %a: int32) { %x + %a }, 0, %l), @length(%l))"""
    with shallow_stack():
        s, total, length = ev(body, np.int32(n), defs=defs, params="%n: int32")
    assert (int(s), int(total), int(length)) == (expected, expected, n)


def test_unannotated_params_are_typed_by_inference():
    mod = parse("def @main(%x, %y: Tensor[(2,), float32]) -> Tensor[(2,), float32] { "
                "let %z = add(%x, %y); %x }", prelude=False)
    # %x's type comes from InferType (the return type): Python lists are converted to float32
    r = evaluate(mod, [1, 2], np.array([0.5, 0.5], "float32"))
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, [1.0, 2.0])
    with pytest.raises(InterpreterError, match=r"argument 1 \(%x\): expected "
                                               r"Tensor\[\(2\), float32\]"):
        evaluate(mod, np.zeros(3, "float32"), np.zeros(2, "float32"))


def test_type_errors_propagate_from_inference():
    mod = parse("def @main(%x) { add(%x, (1, 2)) }", prelude=False)
    with pytest.raises(rly.TypeInferenceError):
        evaluate(mod, np.float32(1))


# ----------------------------------------------------------------------------- differential
def test_assert_same_results_agrees_and_detects_differences():
    a = parse("def @main(%x: Tensor[(2, 3), float32], %n: int32) { "
              "(multiply(%x, 2f), %n + 1) }", prelude=False)
    b = parse("def @main(%x: Tensor[(2, 3), float32], %n: int32) { "
              "(add(%x, %x), 1 + %n) }", prelude=False)
    pairs = assert_same_results(a, b, runs=3)
    assert len(pairs) == 3 and pairs[0][0][0].shape == (2, 3)
    c = parse("def @main(%x: Tensor[(2, 3), float32], %n: int32) { "
              "(add(%x, %x), %n + 2) }", prelude=False)
    with pytest.raises(AssertionError, match=r"run 0: the two executions disagree.*\.1"):
        assert_same_results(a, c)
    d = parse("def @main(%x: Tensor[(2, 3), float32], %n: int32) { "
              "(add(%x, 0.001f), %n + 1) }", prelude=False)
    with pytest.raises(AssertionError):
        assert_same_results(a, d)


def test_random_inputs_follow_param_types_and_symbolic_dims():
    mod = parse("def @main[n](%a: Tensor[(n, 3), float32], %b: Tensor[(n,), int64], "
                "%c: (bool, Tensor[(?,), float16])) { %a }", prelude=False)
    x1 = random_inputs(mod, seed=1)
    x2 = random_inputs(mod, seed=1)
    assert x1[0].shape[0] == x1[1].shape[0] and x1[0].shape[1] == 3
    assert x1[0].dtype == np.float32 and x1[1].dtype == np.int64
    assert x1[2][0].dtype == np.bool_ and x1[2][1].dtype == np.float16
    np.testing.assert_array_equal(x1[0], x2[0])
    evaluate(mod, *x1)  # the generated inputs pass the argument checks


def test_assert_values_close_compares_structure():
    v = ev(f"({lit([1, 2])}, ref(1f))")
    w = ev(f"({lit([1, 2])}, ref(1f))")
    assert_values_close(v, w)
    z = ev(f"({lit([1, 3])}, ref(1f))")
    with pytest.raises(AssertionError, match=r"Cons\[1\]/Cons\[0\]"):
        assert_values_close(v, z)
    assert isinstance(v[1], RefValue)
    with pytest.raises(AssertionError, match="dtype/shape differ"):
        assert_values_close(np.float32(1), np.float64(1))


def test_typed_module_evaluates_like_the_untyped_one():
    from relay_ir.passes import InferType
    mod = parse(f"""def @main(%n: int32, %x: Tensor[(3,), float32]) {{
  let %l = @map(fn (%i: int32) {{ multiply(%x, cast(%i, dtype="float32")) }},
                @unfoldr({COUNTDOWN}, %n));
  (@foldl(fn (%a: Tensor[(3,), float32], %b: Tensor[(3,), float32]) {{ add(%a, %b) }},
          zeros(shape=[3], dtype="float32"), %l), @length(%l), @rev(%l))
}}""")
    typed = InferType()(mod)
    x = np.array([1.0, -2.0, 0.5], "float32")
    (va, vb), = assert_same_results(mod, typed, inputs=(np.int32(4), x))
    np.testing.assert_allclose(va[0], x * (4 + 3 + 2 + 1), rtol=1e-6)
    assert int(va[1]) == 4
    # random inputs from the parameter types (n in [-5, 5]: empty lists for n <= 0)
    assert_same_results(mod, typed, runs=4, seed=3)


def test_global_as_a_value_prints_its_name():
    v = ev("@id")
    assert isinstance(v, Closure) and format_value(v) == "<closure @id fn (%x) ...>"
    assert int(v(np.int32(3))) == 3
