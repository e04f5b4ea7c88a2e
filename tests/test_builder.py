"""ScopeBuilder: let-spines built in Python."""

import numpy as np

import relay_ir as rly
from relay_ir.builder import ScopeBuilder
from relay_ir.expr import Constant, Function, Var
from relay_ir.op._rules import make_call
from relay_ir.ty import TensorType
from util_scale import shallow_stack, sizes


def test_nested_scopes_print_as_expected():
    t = TensorType((3,), "float32")
    a = Var("a", t)
    sb = ScopeBuilder()
    x = sb.let_(make_call("exp", a), "x")
    with sb.scope():
        y = sb.let_(make_call("add", x, x), "y")
        inner = Function((), sb.build(y))
    f = Function((a,), sb.build(inner))
    expected = rly.parse_expr("fn (%a: Tensor[(3), float32]) { let %x = exp(%a); "
                              "fn () { let %y = add(%x, %x); %y } }")
    rly.assert_structural_equal(f, expected, map_free_vars=True)


def test_atoms_are_not_rebound_and_empty_scope_is_identity():
    sb = ScopeBuilder()
    c = Constant(np.array(1.0, "float32"))
    assert sb.let_(c) is c
    assert sb.build(c) is c
    v = sb.let_(c, bind_atoms=True)
    assert isinstance(v, Var) and sb.bindings == [(v, c)]


@sizes(3_000, 100_000)
def test_long_spine_without_recursion(n):
    sb = ScopeBuilder()
    x = Var("x", TensorType((), "float32"))
    cur = x
    with shallow_stack():
        for _ in range(n):
            cur = sb.let_(make_call("negative", cur), "v")
        body = sb.build(cur)
        text = rly.astext(Function((x,), body))
    assert text.count("negative(") == n
