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
from util_scale import shallow_stack, sizes

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


@sizes(3_000, 100_000)
def test_100k_chain_is_checked_iteratively(n: int) -> None:
    assert sys.getrecursionlimit() <= 1000
    x = Var("x", F32)
    bindings = []
    prev = x
    for i in range(n):
        v = Var(f"v{i}")
        bindings.append((v, make_call("add", prev, prev)))
        prev = v
    with shallow_stack():
        check(main_of(build_lets(bindings, prev), x))
    bindings.append((bindings[5][0], x))  # rebinding deep inside is found
    with shallow_stack(), pytest.raises(WellFormednessError, match="%v5 is bound more than once"):
        check(main_of(build_lets(bindings, prev), x))


def test_free_type_variable_in_an_annotation_is_caught() -> None:
    from relay_ir.ty import TypeVar
    a, b = TypeVar("A"), TypeVar("B")
    x, y = Var("x", a), Var("y", b)
    ok = IRModule({"id": Function((x,), x, a, (a,))})
    check(ok)
    # %y: B inside a function that binds only A
    bad = IRModule({"f": Function((Var("x2", a),), Let(y, const(1.0), const(1.0)), None, (a,))})
    with pytest.raises(WellFormednessError,
                       match=r"annotation of %y mentions the type variable `B`.*\(in @f\)"):
        check(bad)
    # a parameter, a return type and a nested literal's binder
    p = Var("p", b)
    with pytest.raises(WellFormednessError, match="type variable `B`"):
        check(IRModule({"g": Function((p,), p)}))
    with pytest.raises(WellFormednessError, match="return type mentions the type variable `A`"):
        check(IRModule({"h": Function((), const(1.0), a)}))
    q = Var("q", b)
    check(IRModule({"k": Function((), Function((q,), q, b, (b,)))}))  # bound by the literal
    q2 = Var("q2", b)
    inner = Function((q2,), q2, b, (b,))
    z = Var("z", b)  # B used after the literal that bound it
    with pytest.raises(WellFormednessError, match="type variable `B`"):
        check(IRModule({"k2": Function((), Let(Var("f"), inner, Let(z, const(1.0), z)))}))
    # expressions checked on their own may mention free type variables
    check(Let(y, const(1.0), y))


def test_free_type_variables_found_in_parsed_text_forms() -> None:
    from relay_ir.ty import FuncType, ShapeVar, TypeVar
    a = TypeVar("A")
    n = ShapeVar("n")
    # a `fn [A]` type binds its own A
    f = Var("f", FuncType((a,), a, (a,)))
    check(IRModule({"m": Function((f,), f)}))
    x = Var("x", TensorType((n, 4), "float32"))
    check(IRModule({"m": Function((x,), x, None, (n,))}))
    x2 = Var("x2", TensorType((n, 4), "float32"))
    with pytest.raises(WellFormednessError, match="shape variable `n`"):
        check(IRModule({"m": Function((x2,), x2)}))
    # a call's explicit type arguments are checked too
    y = Var("y", a)
    g = IRModule({"id": Function((y,), y, a, (a,))})
    call = Call(g.get_global_var("id"), (const(1.0),), None, (a,))
    with pytest.raises(WellFormednessError, match="type argument of the call"):
        check(g.with_function("main", Function((), call)))


def test_constructor_fields_use_only_their_adt_parameters() -> None:
    from relay_ir.ty import TypeData, TypeVar
    a, b = TypeVar("A"), TypeVar("B")
    gtv = GlobalTypeVar("Box")
    good = Constructor("Box1", (a,), gtv)
    check(IRModule({}, {"Box": TypeData(gtv, (a,), (good,))}))
    bad = Constructor("Box2", (a, b), gtv)
    with pytest.raises(WellFormednessError, match="constructor Box2 of type Box mentions `B`"):
        check(IRModule({}, {"Box": TypeData(gtv, (a,), (bad,))}))


def test_generic_programs_and_the_prelude_stay_well_formed() -> None:
    from relay_ir.passes import InferType
    from relay_ir.prelude import prelude_module
    mod = rly.parse(HDR + "def @main(%x: float32) { %x }", prelude=True)
    check(mod)
    check(InferType()(mod))
    check(prelude_module())
