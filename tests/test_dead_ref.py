"""Tests for DeadRefElimination (store forwarding), passes/dead_ref.py."""
from __future__ import annotations

import numpy as np
import pytest

from relay_ir.expr import (Call, Function, If, Let, RefCreate, RefRead, RefWrite, Tuple, Var,
                           const)
from relay_ir.module import IRModule
from relay_ir.op import get_op
from relay_ir.passes import DeadRefElimination, PassContext
from relay_ir.passes.instrument import WellFormedCheck
from relay_ir.structural import assert_structural_equal
from relay_ir.traversal import build_lets, flatten_lets
from relay_ir.ty import TensorType

from util_diff import assert_same_results
from util_scale import shallow_stack, sizes

F2 = TensorType((2,), "float32")
ADD = get_op("add")
MUL = get_op("multiply")


def add(a, b):
    return Call(ADD, (a, b))


def mul(a, b):
    return Call(MUL, (a, b))


def run(mod: IRModule) -> IRModule:
    with PassContext(instruments=[WellFormedCheck()]):
        return DeadRefElimination()(mod)


def parse_or_skip(text: str) -> IRModule:
    from relay_ir import parser
    return parser.parse(text)


def vs(*names):
    return [Var(n, F2) for n in names]


# ----------------------------------------------------------------------------- before/after
def test_forward_reads_and_drop_writes():
    # let r = ref(x); let a = !r; let u = r := a + 1; let b = !r; a * b
    #   => let r_val = a + 1 (with a := x); x * r_val
    x, a, b, u = vs("x", "a", "b", "u")
    r = Var("r")
    before = Function((x,), build_lets([(r, RefCreate(x)), (a, RefRead(r)),
                                        (u, RefWrite(r, add(a, const(1.0)))),
                                        (b, RefRead(r))], mul(a, b)))
    mod = IRModule({"main": before})
    out = run(mod)
    v = Var("v")  # NOTE: the ref has no annotation, so the new binding has none either
    expected = Function((x,), Let(v, add(x, const(1.0)), mul(x, v)))
    assert_structural_equal(out["main"], expected, map_free_vars=True)
    assert mod["main"] is before  # input untouched
    assert_same_results(mod, out)


def test_atomic_values_are_forwarded_without_new_bindings():
    x, y, a, u = vs("x", "y", "a", "u")
    r = Var("r")
    before = Function((x, y), build_lets([(r, RefCreate(x)), (u, RefWrite(r, y)),
                                          (a, RefRead(r))], add(a, a)))
    out = run(IRModule({"main": before}))
    assert_structural_equal(out["main"], Function((x, y), add(y, y)), map_free_vars=True)


def test_unit_result_of_dropped_write_is_replaced():
    x, u = vs("x", "u")
    u = Var("u")
    r = Var("r")
    before = Function((x,), build_lets([(r, RefCreate(x)), (u, RefWrite(r, x))],
                                       Tuple((u, RefRead(r)))))
    # the final tuple mentions r under a tuple: r escapes there (conservative), but the
    # write before it is the last one before the escape, so it stays
    out = run(IRModule({"main": before}))
    assert_structural_equal(out["main"], before, map_free_vars=True)
    before2 = Function((x,), build_lets([(r2 := Var("r"), RefCreate(x)),
                                         (u2 := Var("u"), RefWrite(r2, x))], Tuple((u2, x))))
    out2 = run(IRModule({"main": before2}))
    assert_structural_equal(out2["main"], Function((x,), Tuple((Tuple(()), x))),
                            map_free_vars=True)


def test_escaping_ref_only_changes_prefix():
    # the ref is passed to a function at the end: reads before are forwarded, the first
    # write is dead (overwritten before anything can see it), the last one stays
    x, y, a, u1, u2, c = vs("x", "y", "a", "u1", "u2", "c")
    r = Var("r")
    g = Var("g")
    before = Function((x, y, g), build_lets([
        (r, RefCreate(x)), (u1, RefWrite(r, y)), (a, RefRead(r)), (u2, RefWrite(r, add(a, a))),
        (c, Call(g, (r,)))], c))
    out = run(IRModule({"main": before}))
    r2, v, u2b, c2 = Var("r"), Var("v"), Var("u2", F2), Var("c", F2)
    expected = Function((x, y, g), build_lets([
        (r2, RefCreate(x)), (v, add(y, y)), (u2b, RefWrite(r2, v)), (c2, Call(g, (r2,)))], c2))
    assert_structural_equal(out["main"], expected, map_free_vars=True)


@pytest.mark.parametrize("kind", ["if", "closure", "alias", "stored"])
def test_conservative_cases_unchanged(kind):
    x, a, u, c = vs("x", "a", "u", "c")
    r = Var("r")
    cond = Var("cond", TensorType((), "bool"))
    if kind == "if":
        use = If(cond, RefRead(r), x)
    elif kind == "closure":
        use = Function((), RefRead(r))
    elif kind == "alias":
        use = r
    else:
        use = RefCreate(r)
    before = Function((x, cond), build_lets([(r, RefCreate(x)), (c, use)], c))
    mod = IRModule({"main": before})
    assert run(mod) is mod


def test_reads_after_escape_are_kept():
    x, y, a, b = vs("x", "y", "a", "b")
    r, g, k = Var("r"), Var("g"), Var("k")
    before = Function((x, g), build_lets([
        (r, RefCreate(x)), (a, RefRead(r)), (k, Call(g, (r,))), (b, RefRead(r))], add(a, b)))
    out = run(IRModule({"main": before}))
    r2, k2, b2 = Var("r"), Var("k"), Var("b", F2)  # noqa: F841
    expected = Function((x, g), build_lets([
        (r2, RefCreate(x)), (k2, Call(g, (r2,))), (b2, RefRead(r2))], add(x, b2)))
    assert_structural_equal(out["main"], expected, map_free_vars=True)


def test_nested_function_spines_are_handled():
    x, a, p = vs("x", "a", "p")
    r = Var("r")
    inner = Function((p,), build_lets([(r, RefCreate(p)), (a, RefRead(r))], add(a, x)))
    f = Var("f")
    before = Function((x,), Let(f, inner, Call(f, (x,))))
    out = run(IRModule({"main": before}))
    f2, p2 = Var("f"), Var("p", F2)
    expected = Function((x,), Let(f2, Function((p2,), add(p2, x)), Call(f2, (x,))))
    assert_structural_equal(out["main"], expected, map_free_vars=True)


def test_idempotent():
    x, y, a, u1, u2, c = vs("x", "y", "a", "u1", "u2", "c")
    r, g = Var("r"), Var("g")
    before = Function((x, y, g), build_lets([
        (r, RefCreate(x)), (u1, RefWrite(r, y)), (a, RefRead(r)), (u2, RefWrite(r, add(a, a))),
        (c, Call(g, (r,)))], c))
    once = run(IRModule({"main": before}))
    twice = run(once)
    assert twice is once


def test_text_before_after():
    before = parse_or_skip("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  let %r = ref(%x);
  let %a = ref_read(%r);
  let %u = ref_write(%r, add(%a, 1f));
  let %b = ref_read(%r);
  multiply(%a, %b)
}
""")
    expected = parse_or_skip("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  let %v = add(%x, 1f);
  multiply(%x, %v)
}
""")
    assert_structural_equal(run(before), expected, map_free_vars=True)


# ----------------------------------------------------------------------------- semantics
def test_semantics_counter_loop_unrolled():
    # acc = ref(x); acc := acc * 2 (five times); then read — all forwarded
    x = Var("x", F2)
    r = Var("acc")
    bindings = [(r, RefCreate(x))]
    for i in range(5):
        t, u = Var(f"t{i}", F2), Var(f"u{i}")
        bindings += [(t, RefRead(r)), (u, RefWrite(r, mul(t, const(2.0))))]
    res = Var("res", F2)
    bindings.append((res, RefRead(r)))
    mod = IRModule({"main": Function((x,), build_lets(bindings, res))})
    out = run(mod)
    lets, body = flatten_lets(out["main"].body)
    assert len(lets) == 5 and all(isinstance(node.value, Call) for node in lets)
    pairs = assert_same_results(mod, out, inputs=[np.array([1.0, -3.0], "float32")])
    np.testing.assert_allclose(pairs[0][1], [32.0, -96.0])


@sizes(3_000, 100_000)
def test_100k_binding_program(n):
    x = Var("x", F2)
    r = Var("r")
    bindings = [(r, RefCreate(x))]
    for i in range(n // 2):
        t, u = Var(f"t{i}", F2), Var(f"u{i}")
        bindings += [(t, RefRead(r)), (u, RefWrite(r, add(t, const(1.0))))]
    res = Var("res", F2)
    bindings.append((res, RefRead(r)))
    mod = IRModule({"main": Function((x,), build_lets(bindings, res))})
    with shallow_stack():
        out = DeadRefElimination()(mod)
    lets, body = flatten_lets(out["main"].body)
    assert len(lets) == n // 2
    assert body is lets[-1].var
    assert lets[0].value.args[0] is x and lets[1].value.args[0] is lets[0].var
