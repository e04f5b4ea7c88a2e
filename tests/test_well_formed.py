"""relay_ir.well_formed: binding, scoping, globals, constructors and type consistency."""
from __future__ import annotations

import sys

import pytest

import relay_ir as rly
from relay_ir.errors import WellFormednessError
from relay_ir.expr import (Call, Clause, Constructor, Function, GlobalVar, Let, Match,
                           PatternConstructor, PatternVar, Tuple, Var, const)
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.span import SourceFile, Span
from relay_ir.traversal import build_lets
from relay_ir.ty import GlobalTypeVar, TensorType
from relay_ir.well_formed import check, types_consistent, well_formed

HDR = '#[version = "0.0.5"]\n'
F32 = TensorType((), "float32")


def main_of(body: object, *params: Var) -> IRModule:
    return IRModule({"main": Function(tuple(params), body)})  # type: ignore[arg-type]


def test_well_formed_examples_and_typed_modules() -> None:
    import glob
    import os
    from relay_ir.passes import InferType
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sorted(glob.glob(os.path.join(root, "examples", "*.rly")))
    assert paths
    for path in paths:
        with open(path) as fh:
            mod = rly.parse(fh.read(), path)
        check(mod)
        check(InferType()(mod))


def test_var_bound_twice() -> None:
    x, y = Var("x"), Var("y")
    body = Let(y, x, Let(y, x, y))
    with pytest.raises(WellFormednessError, match=r"variable %y is bound more than once"):
        check(main_of(body, x))
    with pytest.raises(WellFormednessError, match="bound more than once"):
        check(IRModule({"main": Function((x,), x), "f": Function((x,), x)}))


def test_param_bound_twice_in_one_function() -> None:
    x = Var("x")
    assert not well_formed(main_of(x, x, x))


def test_let_var_out_of_scope() -> None:
    x, y, z = Var("x"), Var("y"), Var("z")
    body = Tuple((Let(y, x, y), y))  # %y used after its let body
    with pytest.raises(WellFormednessError, match=r"variable %y is used out of its scope"):
        check(main_of(body, x))
    with pytest.raises(WellFormednessError, match="out of its scope"):
        check(main_of(Let(y, z, y), x))  # a free variable in a global


def test_let_var_in_its_own_value_is_fine() -> None:
    mod = rly.parse(HDR + """
def @main(%n: int32) -> int32 {
  let %f = fn (%i: int32) -> int32 { if (%i == 0) { 0 } else { %f(%i - 1) } };
  %f(%n)
}""")
    check(mod)


def test_param_and_pattern_scopes() -> None:
    x, y = Var("x"), Var("y")
    f = Function((y,), y)
    with pytest.raises(WellFormednessError, match=r"%y is used out of its scope"):
        check(main_of(Tuple((f, y)), x))
    mod = rly.parse(HDR + """
type L { C(float32, L), N }
def @main(%l: L) -> float32 { match (%l) { C(%h, _) => %h, N => 0f } }""")
    check(mod)
    td = mod.type_definitions["L"]
    ctor = td.constructor("C")
    h = Var("h")
    l = Var("l")
    clause = Clause(PatternConstructor(ctor, (PatternVar(h), PatternVar(Var("t")))), h)
    bad = Tuple((Match(l, (clause,), complete=False), h))
    with pytest.raises(WellFormednessError, match=r"%h is used out of its scope"):
        check(IRModule({"main": Function((l,), bad)}, {"L": td}))


def test_free_variables_in_expressions() -> None:
    x, y = Var("x"), Var("y")
    check(make_call("add", x, y))  # free vars are fine in an expression
    with pytest.raises(WellFormednessError):
        check(make_call("add", x, y), allow_free=False)
    with pytest.raises(WellFormednessError, match="before it is bound"):
        check(Tuple((x, Let(x, const(1.0), x))))


def test_undefined_global_and_constructor() -> None:
    x = Var("x")
    with pytest.raises(WellFormednessError, match=r"global @nope is not defined"):
        check(main_of(Call(GlobalVar("nope"), (x,)), x))
    ghost = Constructor("Ghost", (), GlobalTypeVar("G"))
    with pytest.raises(WellFormednessError, match="constructor Ghost is not defined"):
        check(main_of(Call(ghost, ()), x))


def test_annotation_disagrees_with_inferred_type() -> None:
    x = Var("x", F32)
    value = make_call("add", x, x)
    typed_value = Call(value.op, value.args, value.attrs, checked_type_=F32)
    ok = Var("a", F32)
    check(main_of(Let(ok, typed_value, ok), x))
    bad = Var("b", TensorType((2,), "float32"))
    with pytest.raises(WellFormednessError, match=r"let variable %b is annotated "
                                                  r"Tensor\[\(2\), float32\] but its value has "
                                                  r"type float32"):
        check(main_of(Let(bad, typed_value, bad), x))


def test_types_consistent_rules() -> None:
    from relay_ir.ty import ANY, IncompleteType
    assert types_consistent(TensorType((ANY, 3), "float32"), TensorType((5, 3), "float32"))
    assert not types_consistent(TensorType((4, 3), "float32"), TensorType((5, 3), "float32"))
    assert not types_consistent(F32, TensorType((), "int32"))
    assert types_consistent(IncompleteType(), F32)


def test_error_carries_the_span() -> None:
    src = SourceFile("bad.rly", "let %y = %x;\n%y")
    x = Var("x")
    y = Var("y", span=Span(src, 1, 5, 1, 7))
    with pytest.raises(WellFormednessError) as info:
        check(main_of(Let(y, x, Let(y, x, y)), x))
    assert info.value.span is not None and info.value.span.line == 1
    assert "^" in str(info.value)


def test_100k_chain_is_checked_iteratively() -> None:
    assert sys.getrecursionlimit() <= 1000
    x = Var("x", F32)
    bindings = []
    prev = x
    for i in range(100_000):
        v = Var(f"v{i}")
        bindings.append((v, make_call("add", prev, prev)))
        prev = v
    check(main_of(build_lets(bindings, prev), x))
    bindings.append((bindings[5][0], x))  # rebinding deep inside is found
    with pytest.raises(WellFormednessError, match="%v5 is bound more than once"):
        check(main_of(build_lets(bindings, prev), x))
