"""Tests for PartialEvaluate (passes/partial_eval.py)."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from relay_ir.expr import (Call, Clause, Function, GlobalVar, If, Let, Match, Op,
                           PatternConstructor, PatternVar, PatternWildcard, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var, const)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes import (DeadRefElimination, InferType, PartialEvaluate, PassContext,
                             Sequential)
from relay_ir.passes.instrument import WellFormedCheck
from relay_ir.structural import assert_structural_equal
from relay_ir.traversal import build_lets, flatten_lets, post_order
from relay_ir.ty import TensorType, TypeCall

from util_diff import assert_same_results, list_adt
from util_scale import shallow_stack, sizes

F2 = TensorType((2,), "float32")
F0 = TensorType((), "float32")
I0 = TensorType((), "int32")
B0 = TensorType((), "bool")


def op(name, *args):
    opdef = get_opdef(name)
    return Call(opdef.op, tuple(args), opdef.make_attrs({}))


def run(mod: IRModule, **options) -> IRModule:
    # NOTE: the rules alone, on the module as given: partial-eval's required infer-type (which
    # would annotate every binder) is disabled here; test_ieee_values checks it runs
    with PassContext(instruments=[WellFormedCheck()], disabled_pass=["infer-type"]):
        return PartialEvaluate(**options)(mod)


def parse_or_skip(text: str) -> IRModule:
    from relay_ir import parser
    return parser.parse(text)


def main(params, body) -> IRModule:
    return IRModule({"main": Function(tuple(params), body)})


def count_calls(fn: Function, name: str | None = None) -> int:
    n = 0
    for node in post_order(fn.body):
        if isinstance(node, Call):
            if name is None or getattr(node.op, "name", getattr(node.op, "name_hint", "")) == name:
                n += 1
    return n


# ----------------------------------------------------------------------------- folding
def test_constant_folding_through_impl():
    # add(1, 2) * x  =>  multiply(3, x)
    x = Var("x", F0)
    mod = main([x], op("multiply", op("add", const(1.0), const(2.0)), x))
    out = run(mod)
    v = Var("v")
    expected = Function((x,), Let(v, op("multiply", const(3.0), x), v))
    assert_structural_equal(out["main"], expected, map_free_vars=True)
    assert_same_results(mod, out)


def test_fully_static_program_becomes_a_constant():
    mod = main([], op("sum", op("multiply", const(np.arange(4, dtype="float32")),
                                const(2.0))))
    out = run(mod)
    body = out["main"].body
    assert body.__class__.__name__ == "Constant"
    np.testing.assert_allclose(body.data, 12.0)


def test_static_tuple_projection_and_let():
    x = Var("x", F0)
    t, a = Var("t"), Var("a")
    mod = main([x], build_lets([(t, Tuple((const(2.0), x))), (a, TupleGetItem(t, 0))],
                               op("add", a, TupleGetItem(t, 1))))
    out = run(mod)
    v = Var("v")
    assert_structural_equal(out["main"], Function((x,), Let(v, op("add", const(2.0), x), v)),
                            map_free_vars=True)


def test_if_with_static_condition_picks_branch():
    x = Var("x", F0)
    mod = main([x], If(op("less", const(1), const(2)), op("exp", x), op("log", x)))
    out = run(mod)
    v = Var("v")
    assert_structural_equal(out["main"], Function((x,), Let(v, op("exp", x), v)),
                            map_free_vars=True)
    assert_same_results(mod, out, inputs=[np.array(2.0, "float32")])


def test_if_with_dynamic_condition_keeps_both_branches():
    x, c = Var("x", F0), Var("c", B0)
    mod = main([x, c], If(c, op("add", x, op("add", const(1.0), const(1.0))), x))
    out = run(mod)
    tv, r = Var("t"), Var("r")
    expected = Function((x, c), Let(r, If(c, Let(tv, op("add", x, const(2.0)), tv), x), r))
    assert_structural_equal(out["main"], expected, map_free_vars=True)
    for cv in (True, False):
        assert_same_results(mod, out, inputs=[np.array(1.5, "float32"), np.array(cv)])


# ----------------------------------------------------------------------------- closures
def test_known_closure_calls_are_inlined():
    x, p, f = Var("x", F0), Var("p", F0), Var("f")
    mod = main([x], Let(f, Function((p,), op("multiply", p, const(2.0))),
                        Call(f, (Call(f, (x,)),))))
    out = run(mod)
    a, b = Var("a"), Var("b")
    expected = Function((x,), build_lets([(a, op("multiply", x, const(2.0))),
                                          (b, op("multiply", a, const(2.0)))], b))
    assert_structural_equal(out["main"], expected, map_free_vars=True)
    assert_same_results(mod, out)


def test_higher_order_function_with_static_argument():
    # twice = fn(g, y) { g(g(y)) }; twice(fn(z) { z + 1 }, x)  =>  (x + 1) + 1
    x, g, y, z, tw = Var("x", F0), Var("g"), Var("y", F0), Var("z", F0), Var("twice")
    twice = Function((g, y), Call(g, (Call(g, (y,)),)))
    mod = main([x], Let(tw, twice, Call(tw, (Function((z,), op("add", z, const(1.0))), x))))
    out = run(mod)
    assert not [n for n in post_order(out["main"].body) if isinstance(n, Function)]
    assert count_calls(out["main"], "add") == 2
    assert_same_results(mod, out)


def test_global_function_specialized_on_static_arguments():
    # def @scale(%v, %k) { multiply(%v, add(%k, 1f)) }; main: @scale(x, 2f)
    v, k, x = Var("v", F0), Var("k", F0), Var("x", F0)
    scale = Function((v, k), op("multiply", v, op("add", k, const(1.0))))
    mod = IRModule({"scale": scale,
                    "main": Function((x,), Call(GlobalVar("scale"), (x, const(2.0))))})
    out = run(mod)
    r = Var("r")
    assert_structural_equal(out["main"], Function((x,), Let(r, op("multiply", x, const(3.0)),
                                                            r)), map_free_vars=True)
    assert_same_results(mod, out)


def _power_module() -> IRModule:
    # def @pow(%x, %n: int32) { if (n == 0) 1f else x * @pow(x, n - 1) }
    x, n = Var("x", F0), Var("n", I0)
    pw = GlobalVar("pow")
    body = If(op("equal", n, const(0)), const(1.0),
              op("multiply", x, Call(pw, (x, op("subtract", n, const(1))))))
    y, y2, m = Var("y", F0), Var("y", F0), Var("m", I0)
    return IRModule({"pow": Function((x, n), body, F0),
                     "main": Function((y,), Call(pw, (y, const(3)))),
                     "dyn": Function((y2, m), Call(pw, (y2, m)))})


def test_recursion_on_static_argument_is_unrolled():
    mod = _power_module()
    out = run(mod)
    fn = out["main"]
    assert count_calls(fn, "multiply") == 3
    assert not [n for n in post_order(fn.body) if isinstance(n, (If, GlobalVar))]
    pairs = assert_same_results(mod, out, inputs=[np.array(1.5, "float32")])
    np.testing.assert_allclose(pairs[0][1], 1.5 ** 3)


def test_recursion_on_dynamic_argument_stays_a_call():
    mod = _power_module()
    out = run(mod)
    fn = out["dyn"]
    # the recursive global is not unrolled on an unknown count: one residual call
    gcalls = [n for n in post_order(fn.body) if isinstance(n, Call) and
              isinstance(n.op, GlobalVar)]
    assert len(gcalls) == 1
    assert_same_results(mod, out, entry="dyn",
                        inputs=[np.array(2.0, "float32"), np.array(4, "int32")])


def test_infinite_static_recursion_terminates_with_fuel():
    # def @loop(%i: int32) { @loop(add(%i, 1)) } : every argument static, never ends
    i = Var("i", I0)
    lp = GlobalVar("loop")
    mod = IRModule({"loop": Function((i,), Call(lp, (op("add", i, const(1)),)), I0),
                    "main": Function((), Call(lp, (const(0),)))})
    out = run(mod, fuel=25)
    body = out["main"].body
    # the unrolling on trial ran out of fuel, so it was undone: one residual call of the loop
    # on its first argument, not a peel of 25 iterations
    calls = [n for n in post_order(body) if isinstance(n, Call) and isinstance(n.op, GlobalVar)]
    assert len(calls) == 1 and int(calls[0].args[0].data) == 0
    out_default = run(mod)  # default fuel/depth also terminate
    calls = [n for n in post_order(out_default["main"].body) if isinstance(n, Call)]
    assert len(calls) == 1


def test_fuel_zero_inlines_nothing():
    x, p, f = Var("x", F0), Var("p", F0), Var("f")
    mod = main([x], Let(f, Function((p,), op("negative", p)), Call(f, (x,))))
    out = run(mod, fuel=0)
    fns = [n for n in post_order(out["main"].body) if isinstance(n, Function)]
    assert len(fns) == 1  # the closure is residualized and called
    assert_same_results(mod, out)


# ----------------------------------------------------------------------------- ADTs
def test_match_on_static_constructor_picks_clause():
    td, cons, nil = list_adt()
    x, h, t = Var("x", F0), Var("h"), Var("t")
    lst = Call(cons, (x, Call(cons, (const(5.0), Call(nil, ())))))
    m = Match(lst, (Clause(PatternConstructor(nil, ()), const(0.0)),
                    Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))),
                           Match(t, (Clause(PatternConstructor(cons, (PatternVar(
                               hv := Var("h2")), PatternWildcard())), op("add", h, hv)),
                                     Clause(PatternWildcard(), h))))))
    mod = IRModule({"main": Function((x,), m)}, {"List": td})
    out = run(mod)
    r = Var("r")
    assert_structural_equal(out["main"], Function((x,), Let(r, op("add", x, const(5.0)), r)),
                            map_free_vars=True)
    assert_same_results(mod, out)


def test_match_on_dynamic_value_is_residualized():
    td, cons, nil = list_adt()
    lst_t = TypeCall(td.header, (F0,))
    xs, h = Var("xs", lst_t), Var("h")
    m = Match(xs, (Clause(PatternConstructor(cons, (PatternVar(h), PatternWildcard())),
                          op("add", h, op("add", const(1.0), const(1.0)))),
                   Clause(PatternWildcard(), const(0.0))))
    mod = IRModule({"main": Function((xs,), m)}, {"List": td})
    out = run(mod)
    body = out["main"].body
    lets, last = flatten_lets(body)
    assert isinstance(lets[0].value, Match) and len(lets[0].value.clauses) == 2
    assert count_calls(out["main"], "add") == 1  # the inner 1 + 1 was folded
    from relay_ir.runtime import interpreter as runtime
    from relay_ir.runtime import values
    val = values.ADTValue(cons, (np.array(2.0, "float32"), values.ADTValue(nil, ())))
    np.testing.assert_allclose(runtime.evaluate(out, val), 4.0)
    np.testing.assert_allclose(runtime.evaluate(mod, val), 4.0)


# ----------------------------------------------------------------------------- references
def test_reads_of_known_references_are_forwarded():
    x = Var("x", F0)
    r, a, u, b = Var("r"), Var("a"), Var("u"), Var("b")
    mod = main([x], build_lets([(r, RefCreate(const(1.0))), (a, RefRead(r)),
                                (u, RefWrite(r, op("add", a, x))), (b, RefRead(r))],
                               op("multiply", b, const(2.0))))
    out = run(mod)
    r2, v, u2, w = Var("r"), Var("v", None), Var("u"), Var("w")
    expected = Function((x,), build_lets([(r2, RefCreate(const(1.0))),
                                          (v, op("add", const(1.0), x)),
                                          (u2, RefWrite(r2, v)),
                                          (w, op("multiply", v, const(2.0)))], w))
    assert_structural_equal(out["main"], expected, map_free_vars=True)
    assert_same_results(mod, out)
    # with dead-ref elimination afterwards the reference disappears entirely
    clean = DeadRefElimination()(out)
    assert not [n for n in post_order(clean["main"].body)
                if isinstance(n, (RefCreate, RefWrite, RefRead))]
    assert_same_results(mod, clean)


def test_unknown_call_clears_the_store_and_effects_keep_their_order():
    # r := 1; g(r) (may write r); !r must be re-read after the call
    x, g = Var("x", F0), Var("g")
    r, u, k, b = Var("r"), Var("u"), Var("k"), Var("b")
    mod = main([x, g], build_lets([(r, RefCreate(x)), (u, RefWrite(r, const(1.0))),
                                   (k, Call(g, (r,))), (b, RefRead(r))], b))
    out = run(mod)
    lets, last = flatten_lets(out["main"].body)
    kinds = [type(node.value).__name__ for node in lets]
    assert kinds == ["RefCreate", "RefWrite", "Call", "RefRead"]
    assert last is lets[-1].var


def test_ref_contents_merge_after_dynamic_if():
    # r = ref(1); if (c) { r := 2 } else { () }; !r  -> the read stays (contents unknown)
    # s = ref(3); if (c) {...} else {...}; !s -> forwarded (untouched in both branches)
    c = Var("c", B0)
    r, s, i, a, b = Var("r"), Var("s"), Var("i"), Var("a"), Var("b")
    mod = main([c], build_lets([(r, RefCreate(const(1.0))), (s, RefCreate(const(3.0))),
                                (i, If(c, RefWrite(r, const(2.0)), Tuple(()))),
                                (a, RefRead(r)), (b, RefRead(s))], op("add", a, b)))
    out = run(mod)
    reads = [n for n in post_order(out["main"].body) if isinstance(n, RefRead)]
    assert len(reads) == 1
    for cv in (True, False):
        pairs = assert_same_results(mod, out, inputs=[np.array(cv)])
        np.testing.assert_allclose(pairs[0][1], 5.0 if cv else 4.0)


def test_backpropagator_chain_collapses():
    # AD-style: a ref holding a closure chain, run once at the end:
    #   bp = ref(fn() { () }); g = ref(0)
    #   k1 = !bp; bp := fn() { g := !g + x; k1() }
    #   k2 = !bp; bp := fn() { g := !g * 2; k2() }
    #   (!bp)(); !g          ==  (1 * 2) + x: the chain runs in reverse order
    x = Var("x", F0)
    bp, g, k1, k2 = Var("bp"), Var("g"), Var("k1"), Var("k2")
    u1, u2, run_, res = Var("u1"), Var("u2"), Var("run"), Var("res")
    cl1 = Function((), Let(Var("w1"), RefWrite(g, op("add", RefRead(g), x)), Call(k1, ())))
    cl2 = Function((), Let(Var("w2"), RefWrite(g, op("multiply", RefRead(g), const(2.0))),
                           Call(k2, ())))
    body = build_lets([(bp, RefCreate(Function((), Tuple(())))), (g, RefCreate(const(1.0))),
                       (k1, RefRead(bp)), (u1, RefWrite(bp, cl1)),
                       (k2, RefRead(bp)), (u2, RefWrite(bp, cl2)),
                       (run_, Call(RefRead(bp), ())), (res, RefRead(g))], res)
    mod = main([x], body)
    from relay_ir.passes import dce
    # PE forwards every read and runs the chain at compile time; the closures it had to
    # emit for the (now dead) writes are removed by DCE, then the refs by dead-ref-elim
    with PassContext(disabled_pass=["infer-type"]):  # NOTE: the rules alone, as run() does
        out = Sequential((PartialEvaluate(), DeadRefElimination(),
                          dce.DeadCodeElimination()))(mod)
    fn = out["main"]
    # what is left: one add of the folded 1 * 2 to the dynamic input; no closures, no refs
    r = Var("r")
    assert_structural_equal(fn, Function((x,), Let(r, op("add", const(2.0), x), r)),
                            map_free_vars=True)
    pairs = assert_same_results(mod, out, inputs=[np.array(3.0, "float32")])
    np.testing.assert_allclose(pairs[0][1], 1.0 * 2 + 3.0)


def test_text_before_after():
    before = parse_or_skip("""#[version = "0.0.5"]
def @main(%x: float32) {
  let %f = fn (%p: float32) { multiply(%p, add(1f, 1f)) };
  %f(%f(%x))
}
""")
    expected = parse_or_skip("""#[version = "0.0.5"]
def @main(%x: float32) {
  let %a = multiply(%x, 2f);
  let %b = multiply(%a, 2f);
  %b
}
""")
    assert_structural_equal(run(before), expected, map_free_vars=True)


@sizes(3_000, 100_000)
def test_100k_binding_program(n):
    x = Var("x", F2)
    prev = x
    bindings = []
    for k in range(n):
        v = Var(f"v{k}", F2)
        # alternate static arithmetic (folded) with dynamic arithmetic (kept)
        value = op("add", prev, op("multiply", const(1.0), const(2.0))) if k % 2 == 0 \
            else op("negative", prev)
        bindings.append((v, value))
        prev = v
    mod = main([x], build_lets(bindings, prev))
    with shallow_stack():
        out = PartialEvaluate()(mod)
    lets, last = flatten_lets(out["main"].body)
    assert len(lets) == n
    assert lets[0].value.args[1].data == 2.0
    assert last is lets[-1].var


# ----------------------------------------------------------------------------- text tables
H = '#[version = "0.0.5"]\n'
TEXT_CASES = {
    # op(consts) => const
    "fold": (H + "def @main(%x: float32) { multiply(%x, add(1f, 2f)) }",
             H + "def @main(%x: float32) { let %v = multiply(%x, 3f); %v }"),
    # if (static) {a} else {b} => a
    "static-if": (H + "def @main(%x: float32) { if (less(1, 2)) { exp(%x) } else { log(%x) } }",
                  H + "def @main(%x: float32) { let %v = exp(%x); %v }"),
    # dynamic if: both branches partially evaluated
    "dynamic-if": (H + """def @main(%x: float32, %c: bool) {
                            if (%c) { add(%x, add(1f, 1f)) } else { %x } }""",
                   H + """def @main(%x: float32, %c: bool) {
                            let %r = if (%c) { let %a = add(%x, 2f); %a } else { %x }; %r }"""),
    # (a, b).0 => a
    "tuple": (H + "def @main(%x: float32) { let %t = (2f, %x); add(%t.0, %t.1) }",
              H + "def @main(%x: float32) { let %v = add(2f, %x); %v }"),
    # known closure calls are specialized
    "closure": (H + """def @main(%x: float32) {
                         let %f = fn (%p: float32) { multiply(%p, add(1f, 1f)) };
                         %f(%f(%x)) }""",
                H + """def @main(%x: float32) {
                         let %a = multiply(%x, 2f); let %b = multiply(%a, 2f); %b }"""),
    # ref_read of a known reference => its contents (the write itself is kept)
    "ref": (H + """def @main(%x: float32) {
                     let %r = ref(1f); let %a = ref_read(%r);
                     let %u = ref_write(%r, add(%a, %x));
                     multiply(ref_read(%r), 2f) }""",
            H + """def @main(%x: float32) {
                     let %r = ref(1f); let %v = add(1f, %x); let %u = ref_write(%r, %v);
                     let %w = multiply(%v, 2f); %w }"""),
    # match on a statically known ADT value picks the clause
    "match": (H + """type List[A] { Cons(A, List[A]), Nil }
                     def @main(%x: float32) {
                       match (Cons(%x, Cons(2f, Nil))) {
                         Cons(%h, Cons(%h2, _)) => add(%h, %h2),
                         _ => 0f,
                       } }""",
              H + """type List[A] { Cons(A, List[A]), Nil }
                     def @main(%x: float32) { let %v = add(%x, 2f); %v }"""),
}


@pytest.mark.parametrize("case", sorted(TEXT_CASES))
def test_text_rules(case):
    before_text, after_text = TEXT_CASES[case]
    before = parse_or_skip(before_text)
    out = run(before)
    assert_structural_equal(out, parse_or_skip(after_text), map_free_vars=True)
    if case != "dynamic-if":
        assert_same_results(before, out)
    else:
        for cv in (True, False):
            assert_same_results(before, out, inputs=[np.array(0.5, "float32"), np.array(cv)])


def test_zeros_pass_through_linear_ops():
    # matmul(z, w) => z, reshape/negative of z => z, add(v, z) => v for a symbolic AD zero z:
    # what a gradient's untouched adjoints become (reverse over reverse: test_ad_optimize)
    before = InferType()(parse_or_skip(H + """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3, 4), float32], %c: bool) {
  let %z = zeros(shape=[2, 3], dtype="float32", symbolic=True);
  let %a = nn.matmul(%z, %w);
  let %b = negative(reshape(%a, newshape=[4, 2]));
  let %s = if (%c) { add(%b, %b) } else { where(%c, %b, %b) };
  add(reshape(nn.matmul(%x, %w), newshape=[4, 2]), multiply(%s, %b))
}"""))
    out = run(before)
    calls = [n for n in post_order(out["main"]) if isinstance(n, Call) and isinstance(n.op, Op)]
    # the branches of the (now unused) if stay as symbolic zeros: no product is computed
    assert [n.op.name for n in calls if n.op.name != "zeros"] == ["nn.matmul", "reshape"]
    assert all(n.attrs.symbolic for n in calls if n.op.name == "zeros")
    for cv in (True, False):
        args = [np.ones((2, 3), "float32"), np.full((3, 4), 0.5, "float32"), np.array(cv)]
        assert_same_results(before, out, inputs=args)


def test_text_unrolling_of_a_global_recursion():
    before = parse_or_skip(H + """
def @pow(%x: float32, %n: int32) -> float32 {
  if (equal(%n, 0)) { 1f } else { multiply(%x, @pow(%x, subtract(%n, 1))) }
}
def @main(%y: float32) { @pow(%y, 3) }
""")
    out = run(before)
    expected = parse_or_skip(H + """
def @main(%y: float32) {
  let %a = multiply(%y, 1f);
  let %b = multiply(%y, %a);
  let %c = multiply(%y, %b);
  %c
}
""")
    assert_structural_equal(out["main"], expected["main"], map_free_vars=True)
    pairs = assert_same_results(before, out, inputs=[np.array(1.25, "float32")])
    np.testing.assert_allclose(pairs[0][1], 1.25 ** 3, rtol=1e-6)


def test_typed_input_keeps_annotations_and_type_checks():
    from relay_ir.passes import type_infer
    before = parse_or_skip(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %id = fn [A](%a: A) -> A { %a };
  let %f = fn (%p: Tensor[(2), float32]) { multiply(%id(%p), add(1f, 1f)) };
  if (%c) { %f(%f(%x)) } else { %id(%x) }
}
""")
    typed = type_infer.InferType()(before)
    out = run(typed)
    # the polymorphic identity was inlined away; no binder mentions its type parameter
    for node in post_order(out["main"].body):
        if isinstance(node, Let):
            ann = node.var.type_annotation
            assert ann is None or ann == F2, ann
    again = type_infer.InferType()(out)
    assert again["main"].checked_type == typed["main"].checked_type
    for cv in (True, False):
        assert_same_results(typed, out, inputs=[np.array([1.0, -2.0], "float32"), np.array(cv)])


def test_effects_on_unknown_references_stay_in_order():
    # writes and reads through a parameter reference cannot be forwarded or reordered
    before = parse_or_skip(H + """
def @main(%r: ref(float32), %x: float32) {
  let %a = ref_read(%r);
  let %u = ref_write(%r, add(%a, 1f));
  let %b = ref_read(%r);
  let %v = ref_write(%r, multiply(%b, %x));
  ref_read(%r)
}
""")
    out = run(before)
    lets, last = flatten_lets(out["main"].body)
    kinds = [type(node.value).__name__ for node in lets]
    assert kinds == ["RefRead", "Call", "RefWrite", "RefRead", "Call", "RefWrite", "RefRead"]
    from relay_ir.runtime import values
    from relay_ir.runtime import interpreter as interp
    for mod in (before, out):
        cell = values.RefValue(np.array(2.0, "float32"))
        res = interp.evaluate(mod, cell, np.array(3.0, "float32"))
        np.testing.assert_allclose(res, 9.0)
        np.testing.assert_allclose(cell.value, 9.0)


@sizes(3_000, 100_000)
def test_deep_dataflow_chain_in_graph_form(n):
    # 100,000 nested calls with no lets at all (graph normal form)
    x = Var("x", F2)
    e = x
    for k in range(n):
        e = op("negative", e) if k % 2 else op("add", e, op("add", const(1.0), const(1.0)))
    with shallow_stack():
        out = PartialEvaluate()(main([x], e))
    lets, last = flatten_lets(out["main"].body)
    assert len(lets) == n
    assert lets[0].value.args[1].data == 2.0 and last is lets[-1].var


def _backprop_chain(n: int) -> IRModule:
    # bp = ref(fn() { () }); g = ref(0); then n times:
    #   k_i = !bp; bp := fn() { g := !g * 0.5 + x; k_i() }    (a backpropagator chain)
    # finally (!bp)(); !g
    x = Var("x", F0)
    bp, g = Var("bp"), Var("g")
    bindings = [(bp, RefCreate(Function((), Tuple(())))), (g, RefCreate(const(0.0)))]
    for i in range(n):
        k, u = Var(f"k{i}"), Var(f"u{i}")
        upd = RefWrite(g, op("add", op("multiply", RefRead(g), const(0.5)), x))
        cl = Function((), Let(Var(f"w{i}"), upd, Call(k, ())))
        bindings += [(k, RefRead(bp)), (u, RefWrite(bp, cl))]
    bindings += [(Var("run"), Call(RefRead(bp), ())), (res := Var("res"), RefRead(g))]
    return main([x], build_lets(bindings, res))


def test_long_backpropagator_chain_is_unrolled_without_deep_recursion():
    n = 300
    mod = _backprop_chain(n)
    out = PartialEvaluate(fuel=2 * n)(mod)
    from relay_ir.passes import dce
    clean = Sequential((DeadRefElimination(), dce.DeadCodeElimination()))(out)
    fn = clean["main"]
    assert not [nd for nd in post_order(fn.body) if isinstance(nd, (Function, RefCreate))]
    # g = 0 folded: the first step is 0 * 2 + x -> multiply folded away, leaving add(0, x)
    assert count_calls(fn, "add") == n and count_calls(fn, "multiply") == n - 1
    pairs = assert_same_results(mod, clean, inputs=[np.array(3.0, "float32")])
    expected = 0.0
    for _ in range(n):
        expected = expected * 0.5 + 3.0
    np.testing.assert_allclose(pairs[0][1], expected, rtol=1e-5)


_ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
_EXAMPLES = sorted(glob.glob(os.path.join(_ROOT, "examples", "*.rly"))
                   + glob.glob(os.path.join(_ROOT, "tests", "data", "*.rly")))


@pytest.mark.parametrize("path", _EXAMPLES, ids=lambda p: p.rsplit("/", 1)[-1])
def test_examples_through_pe_lift_and_dead_ref(path):
    """Every example program: well formed after each pass, still type checks, same values."""
    from relay_ir.passes import InferType, LambdaLift
    from relay_ir import parser
    with open(path, encoding="utf-8") as f:
        text = f.read()
    mod = InferType()(parser.parse(text, source_name=path))
    for p in (PartialEvaluate(), LambdaLift(), DeadRefElimination()):
        with PassContext(instruments=[WellFormedCheck()]):
            out = p(mod)
        InferType()(out)
        assert_same_results(mod, out, runs=1)


def test_recursion_on_dynamic_data_with_a_static_closure_is_not_unrolled():
    before = parse_or_skip(H + """
type List[A] { Cons(A, List[A]), Nil }
def @map(%f, %xs: List[float32]) -> List[float32] {
  match (%xs) { Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)), Nil => Nil }
}
def @main(%xs: List[float32]) -> List[float32] {
  @map(fn (%x: float32) { add(%x, add(1f, 1f)) }, %xs)
}
""")
    out = run(before)
    main_fn = out["main"]
    assert not [n for n in post_order(main_fn.body) if isinstance(n, Match)]
    lets, last = flatten_lets(main_fn.body)
    assert isinstance(lets[0].value, Function) and count_calls(main_fn, "add") == 1
    from relay_ir.runtime import values
    from relay_ir.runtime import interpreter as interp
    cons, nil = before.get_constructor("Cons"), before.get_constructor("Nil")
    xs = values.ADTValue(cons, (np.array(1.0, "float32"),
                                values.ADTValue(cons, (np.array(5.0, "float32"),
                                                       values.ADTValue(nil, ())))))
    for mod in (before, out):
        res = interp.evaluate(mod, xs)
        assert res.constructor.name_hint == "Cons"
        np.testing.assert_allclose(res.fields[0], 3.0)
        np.testing.assert_allclose(res.fields[1].fields[0], 7.0)


def test_spans_of_residual_code_point_at_the_source():
    before = parse_or_skip(H + """def @main(%x: float32) {
  let %f = fn (%p: float32) { multiply(%p, add(1f, 1f)) };
  %f(%x)
}
""")
    out = run(before)
    lets, _ = flatten_lets(out["main"].body)
    mul = lets[0].value
    assert mul.op.name == "multiply"
    assert mul.span is not None and (mul.span.line, mul.span.column) == (3, 31)
    # NOTE: residual lets are built by ScopeBuilder; the binder carries the source span
    assert lets[0].var.span is not None and lets[0].var.span.line == 3


def test_inlined_polymorphic_global_leaves_no_unbound_type_variables():
    from relay_ir.passes import type_infer
    before = type_infer.InferType()(parse_or_skip(H + """
def @wrap[A](%x: A, %k: fn (fn (A) -> A) -> A) -> A {
  let %g = fn (%y: A) -> A { %y };
  %k(%g)
}
def @main(%z: float32, %k2: fn (fn (float32) -> float32) -> float32) -> float32 {
  @wrap(%z, %k2)
}
"""))
    out = run(before)
    # @main got @wrap's body; the closure passed to %k2 has `A` replaced by the call's type
    # argument (float32), never the unbound `A`
    fns = [n for n in post_order(out["main"].body) if isinstance(n, Function)]
    assert len(fns) == 1 and fns[0].params[0].type_annotation == TensorType((), "float32")
    assert fns[0].ret_type == TensorType((), "float32")
    # @wrap itself keeps its annotations (A is bound there)
    wrap_fns = [n for n in post_order(out["wrap"].body) if isinstance(n, Function)]
    assert wrap_fns[0].ret_type is not None
    typed = type_infer.InferType()(out)
    assert typed["main"].checked_type == before["main"].checked_type


# Issue 8: a generic global specialized inside another generic function.
GENERIC_FOLD = H + """
type L[A] { C(A, L[A]), N }
def @fold[A, B](%f: fn (A, B) -> A, %acc: A, %xs: L[B]) -> A {
  match (%xs) { C(%x, %r) => @fold(%f, %f(%acc, %x), %r), N => %acc }
}
def @count[T](%xs: L[T]) -> int32 { @fold(fn (%a: int32, %x: T) { %a + 1 }, 0, %xs) }
def @main(%a: L[int32], %b: L[float32]) -> (int32, int32) { (@count(%a), @count(%b)) }
"""


def _adt_list(mod: IRModule, items: list) -> object:
    from relay_ir.runtime import values
    out = values.ADTValue(mod.get_constructor("N"), ())
    for x in reversed(items):
        out = values.ADTValue(mod.get_constructor("C"), (x, out))
    return out


def test_specialized_generic_callee_type_variables_are_substituted():
    from relay_ir import astext, parse
    from relay_ir.passes import InferType
    from relay_ir.runtime import evaluate
    from relay_ir.traversal import free_type_vars, pattern_vars
    typed = InferType()(parse(GENERIC_FOLD))
    out = run(typed)  # the WellFormedCheck instrument rejects free type variables
    count = out["count"]
    (t,) = count.type_params
    # every annotation in @count is in @count's own terms: B => T, A => int32
    seen = []
    for node in post_order(count.body):
        vs = [node.var] if isinstance(node, Let) else []
        if isinstance(node, Match):
            for c in node.clauses:
                vs.extend(pattern_vars(c.lhs))
        for v in vs:
            if v.type_annotation is not None:
                seen.extend(free_type_vars(v.type_annotation))
    assert seen and set(seen) == {t}
    text = astext(out)
    count_text = text[text.index("def @count"):text.index("def @fold")]
    assert ": B" not in count_text and "L[B]" not in count_text and ": T" in count_text
    again = InferType()(parse(text))  # re-parses and type-checks
    from relay_ir.structural import structural_equal
    assert structural_equal(again["count"].checked_type, typed["count"].checked_type,
                            map_free_vars=True)
    a = _adt_list(typed, [np.array(i, "int32") for i in range(5)])
    b = _adt_list(typed, [np.array(0.5, "float32")] * 45)  # longer than the unrolling depth
    res = evaluate(again, a, b)
    assert [int(r) for r in res] == [5, 45]
    res0 = evaluate(typed, a, b)
    assert [int(r) for r in res0] == [5, 45]


def test_specialization_without_type_arguments_drops_the_annotations():
    from relay_ir import parse
    from relay_ir.traversal import free_type_vars
    mod = parse(GENERIC_FOLD)  # untyped: the calls carry no type arguments
    out = run(mod)
    for node in post_order(out["main"].body):
        if isinstance(node, Let) and node.var.type_annotation is not None:
            assert not free_type_vars(node.var.type_annotation)
    from relay_ir.passes import InferType
    InferType()(out)


def test_cli_opt_partial_eval_output_type_checks(tmp_path, capsys, monkeypatch):
    import io
    import sys
    from relay_ir.cli import main as cli_main
    path = tmp_path / "fold.rly"
    path.write_text(GENERIC_FOLD)
    assert cli_main(["opt", "--passes", "infer-type,partial-eval", str(path)]) == 0
    optimized, err = capsys.readouterr()
    assert err == ""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(optimized.encode())))
    assert cli_main(["check", "-"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "@count: fn [T](L[T]) -> int32" in out
    assert "@main: fn (L[int32], L[float32]) -> (int32, int32)" in out


LOOP = '''#[version = "0.0.5"]
def @main(%n: int32, %x: float32) -> float32 {
  let %loop = fn (%i: int32, %acc: float32) -> float32 {
    if (%i < BOUND) { %loop(%i + 1, %acc * 2f) } else { %acc }
  };
  %loop(0, %x)
}'''


def _ifs(mod: IRModule) -> int:
    return sum(type(n) is If for fn in mod.functions.values() for n in post_order(fn))


def test_a_loop_with_a_dynamic_bound_is_not_unrolled() -> None:
    # the counter is static (0, 1, ...) but `%i < %n` is not: unrolling could never end on a
    # static fact, so the recursive call under the dynamic branch stays a call (it used to be
    # unrolled max_depth = 40 levels deep)
    from relay_ir import parse, runtime
    mod = InferType()(parse(LOOP.replace("BOUND", "%n")))
    out = run(mod)
    assert _ifs(out) == 2       # the first iteration peeled, then the loop itself
    for n in (0, 3, 45):
        assert_same_results(mod, out, (np.array(n, "int32"), np.array(1.5, "float32")))


def test_a_loop_with_a_static_bound_still_unrolls() -> None:
    from relay_ir import parse
    mod = InferType()(parse(LOOP.replace("BOUND", "5")))
    out = run(mod)
    assert _ifs(out) == 0
    assert_same_results(mod, out, (np.array(7, "int32"), np.array(1.5, "float32")))


# ----------------------------------------------------------------------------- loop unrolling
# A recursion entered from outside with static control is unrolled on trial: whole when it ends
# within the fuel, depth and `unroll_budget` bounds, else undone and left as one call.
def _loop_mod(n: int) -> IRModule:
    from relay_ir import parser
    from relay_ir.passes import ToANormalForm
    from util_grad import wl
    # NOTE: W6's loop (benchmarks/workloads.py) with trip count n; A-normal form writes the
    # recursive call as `let %r = if (..) {..}; %r`, the form the default pipeline hands to
    # partial evaluation
    return ToANormalForm()(parser.parse(wl.w6_source(f"{n}f")))


def _global_calls(fn: Function) -> list[Call]:
    return [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, GlobalVar)]


def test_static_loop_in_a_normal_form_unrolls_whole():
    mod = _loop_mod(300)  # far past max_depth (40): the branches' tail calls are trampolined
    out = run(mod, fuel=1000)
    assert not _global_calls(out["main"])
    assert count_calls(out["main"], "sin") == 300
    assert_same_results(mod, out, inputs=[np.array(0.5, "float32")])


def test_loop_past_the_budget_stays_one_call_with_nothing_peeled():
    mod = _loop_mod(300)
    for options in ({"unroll_budget": 500}, {"fuel": 100}, {"unroll_budget": 0}):
        out = run(mod, **options)
        calls = _global_calls(out["main"])
        assert len(calls) == 1 and calls[0].op.name_hint == "loop", options
        assert [float(a.data) for a in calls[0].args[1:]] == [0.0, 0.0], options
        assert count_calls(out["main"], "sin") == 0, options
        assert_same_results(mod, out, inputs=[np.array(0.5, "float32")])


def test_undone_unrolling_restores_values_it_had_emitted():
    # the closure %f and the static tuple %t come from outside the loop and get residual atoms
    # inside its unrolling (passed to @apply, which is not inlined); when the unrolling is
    # undone those atoms are gone, and the residual call must emit them again
    from relay_ir import parser
    from relay_ir.passes import ToANormalForm
    src = """#[version = "0.0.5"]
def @loop(%f: fn (float32) -> float32, %t: (float32, float32), %i: float32, %acc: float32)
    -> float32 {
  if (%i >= 200f) {
    %acc
  } else {
    let %s: (float32, float32) = (%t.1, %t.0);
    @loop(%f, %s, %i + 1f, %acc + @apply(%f, %t, %acc) * %t.0)
  }
}

def @apply(%g: fn (float32) -> float32, %u: (float32, float32), %v: float32, NoInline=1)
    -> float32 {
  %g(%v) * 0.001f + %u.1 * 0.001f
}

def @main(%x: float32) -> float32 {
  let %f = fn (%y: float32) -> float32 { %y * %x + 1f };
  let %t = (2f, 3f);
  @loop(%f, %t, 0f, %x)
}"""
    mod = ToANormalForm()(parser.parse(src))
    for budget in (40, 150, 1000):
        out = run(mod, unroll_budget=budget)
        assert_same_results(mod, out, inputs=[np.array(0.25, "float32")], rtol=1e-4)
    whole = run(mod, unroll_budget=100000)["main"]
    assert {c.op.name_hint for c in _global_calls(whole)} == {"apply"}  # no @loop left


def test_nested_loops_keep_the_inner_unrolling_when_the_outer_is_undone():
    from relay_ir import parser
    from relay_ir.passes import ToANormalForm
    src = """#[version = "0.0.5"]
def @inner(%x: float32, %j: float32, %acc: float32) -> float32 {
  if (%j >= 3f) { %acc } else { @inner(%x, %j + 1f, %acc * %x + %j) }
}

def @outer(%x: float32, %i: float32, %acc: float32) -> float32 {
  if (%i >= 5000f) { %acc } else { @outer(%x, %i + 1f, @inner(%x, 0f, %acc) * 0.5f) }
}

def @main(%x: float32) -> float32 {
  let %a = @inner(%x, 0f, 1f);
  @outer(%x, 0f, %a)
}"""
    mod = ToANormalForm()(parser.parse(src))
    # NOTE: 5000 outer steps do not fit the default budget either, so the suite-wide
    # differential tests compile this program as a loop
    out = run(mod, unroll_budget=200)
    calls = _global_calls(out["main"])
    assert [c.op.name_hint for c in calls] == ["outer"]  # @inner(%x, 0f, 1f) unrolled
    assert_structural_equal(run(mod)["main"].body, out["main"].body, map_free_vars=True)
    assert_same_results(mod, out, inputs=[np.array(0.5, "float32")])
    whole = run(mod, unroll_budget=200000, fuel=200000)
    assert not _global_calls(whole["main"])
    assert_same_results(mod, whole, inputs=[np.array(0.5, "float32")])
