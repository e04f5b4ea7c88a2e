"""Printer/parser round trips: ``parse(astext(m))`` equals ``m`` and printing is idempotent.

Covers every ``.rly`` file in tests/data and examples, programs drawn by the hypothesis
strategies in tests/strategies.py (every expression, type and pattern form), and very long
or deep programs under the default recursion limit.
"""
from __future__ import annotations

import glob
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings

import relay_ir as rly
from relay_ir.expr import Call, Function, Tuple, Var, const
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.printer import astext
from relay_ir.traversal import build_lets
from relay_ir.ty import scalar_type

import strategies
from util_scale import shallow_stack, sizes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.rly"))
               + glob.glob(os.path.join(ROOT, "examples", "*.rly")))


def check_module(mod: IRModule) -> str:
    """Print, re-parse, compare; print again and compare text. Returns the text."""
    text = astext(mod)
    back = rly.parse(text, "<printed>")
    rly.assert_structural_equal(mod, back)
    again = astext(back)
    assert again == text, f"not idempotent:\n{text}\n---\n{again}"
    return text


def check_expr(e: object) -> str:
    text = astext(e)
    back = rly.parse_expr(text, "<printed>")
    rly.assert_structural_equal(e, back, map_free_vars=True)
    again = astext(back)
    assert again == text, f"not idempotent:\n{text}\n---\n{again}"
    return text


def _file_id(path: str) -> str:
    return os.path.relpath(path, ROOT)


@pytest.mark.parametrize("path", FILES, ids=[_file_id(p) for p in FILES])
def test_files_round_trip(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        mod = rly.parse(f.read(), path)
    check_module(mod)


def test_file_list_is_collected() -> None:
    # NOTE: an empty list is legal (examples may not exist yet); the glob must still work.
    assert all(p.endswith(".rly") and os.path.isfile(p) for p in FILES)


@settings(max_examples=500, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(strategies.modules())
def test_generated_modules_round_trip(mod: IRModule) -> None:
    check_module(mod)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(strategies.exprs())
def test_generated_exprs_round_trip(e: object) -> None:
    check_expr(e)


@settings(max_examples=150, deadline=None, database=None)
@given(strategies.types())
def test_generated_types_round_trip(t: object) -> None:
    text = astext(t)
    back = rly.parse_type(text)
    assert rly.structural_equal(t, back, map_free_vars=True), (text, astext(back))
    assert astext(back) == text


@sizes(3_000, 100_000)
def test_100k_let_chain_round_trips(n: int) -> None:
    assert sys.getrecursionlimit() <= 1000
    f32 = scalar_type("float32")
    add = get_opdef("add")
    x = Var("x", f32)
    bindings, prev = [], x
    attrs = add.make_attrs({})
    consts = [const(float(i)) for i in range(7)]
    for i in range(n):
        v = Var("v")
        bindings.append((v, Call(add.op, (prev, consts[i % 7]), attrs)))
        prev = v
    mod = IRModule({"main": Function((x,), build_lets(bindings, prev), f32)})
    with shallow_stack():
        text = check_module(mod)
    assert text.count("\n") == n + 4


def test_5000_deep_nested_expression_round_trips() -> None:
    x = Var("x", scalar_type("float32"))
    e: object = x
    mul = get_opdef("multiply")
    for i in range(5000):
        e = Tuple((Call(mul.op, (e, const(i)), mul.make_attrs({})),)) if i % 2 else \
            Call(mul.op, (e, e), mul.make_attrs({}))
    text = check_module(IRModule({"main": Function((x,), e)}))
    assert text.count("\n") == 7500 + 3  # 7,499 hoisted lines, the result, header, braces


# ----------------------------------------------------------------------------- text -> text
@pytest.mark.parametrize("source,canonical", [
    ("free_var %x: float32; %x - -3f", "free_var %x: float32;\nsubtract(%x, -3f)"),
    ("free_var %x: float32; add(-3f, %x) * 2f",
     "free_var %x: float32;\n%0 = add(-3f, %x);\nmultiply(%0, 2f)"),
    ("(1, -2i16, --10, ---10i64, -0f, -inff, 1E+1f, 1.5e10f64)",
     "(1, -2i16, 10, -10i64, -0f, -inff, 10f, 1.5e+10f64)"),
    ("2147483648", "2147483648i64"),
    ("free_var %t; (%t.0).1", "free_var %t;\n%0 = %t.0;\n%0.1"),
    ("let %x = 1; let %y = %x; let %x = (%y, %y); %x",
     "let %x = 1;\nlet %y = %x;\nlet %x1 = (%y, %y);\n%x1"),
    ("%0 = (0, 0); let %x = %0; %0", "%0 = (0, 0);\nlet %x = %0;\n%0"),
    ("1; 2", "1;\n2"),
    ("free_var %b: bool; if (%b) { 1 } else { 2 }",
     "free_var %b: bool;\nif (%b) {\n  1\n} else {\n  2\n}"),
    ("fn [A](%x: A, Primitive=1) -> A { %x }", "fn [A](%x: A, Primitive=1) -> A {\n  %x\n}"),
])
def test_text_prints_canonically(source: str, canonical: str) -> None:
    e = rly.parse_expr(source)
    text = check_expr(e)
    assert text == '#[version = "0.0.5"]\n' + canonical


def test_module_text_with_adts_and_metadata_round_trips() -> None:
    src = '''#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @length[A](%l: List[A]) -> int32 {
  match (%l) { Cons(_, %t) => add(1, @length(%t)), Nil => 0 }
}
def @main() -> (int32, Tensor[(2), float32]) {
  (@length(Cons(1, Cons(2, Nil))), meta[relay.Constant][0])
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}]}
'''
    text = check_module(rly.parse(src))
    assert text == '''#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @length[A](%l: List[A]) -> int32 {
  match (%l) {
    Cons(_, %t) => {
      %0 = @length(%t);
      add(1, %0)
    },
    Nil => {
      0
    },
  }
}

def @main() -> (int32, Tensor[(2), float32]) {
  %0 = Cons(2, Nil);
  %1 = Cons(1, %0);
  %2 = @length(%1);
  (%2, meta[relay.Constant][0])
}

#[metadata]
{
  "relay.Constant": [
    {"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}
  ]
}
'''


# ----------------------------------------------------------------------------- coverage
def _forms(mod: IRModule) -> set[str]:
    """Names of the expression, type, pattern and literal forms occurring in ``mod``."""
    from relay_ir.attrs import Attrs  # noqa: F401
    from relay_ir.expr import (Constant, Constructor, GlobalVar, Let, Match, Op,
                               PatternConstructor, PatternTuple, PatternVar)
    from relay_ir.traversal import children, post_order
    from relay_ir.ty import (FuncType, TensorType, type_children)
    out: set[str] = set()
    types: list = []
    for td in mod.type_definitions.values():
        if td.type_params:
            out.add("adt_with_type_params")
        for c in td.constructors:
            types.extend(c.inputs)
    for fn in mod.functions.values():
        counts: dict = {}
        for node in post_order(fn):
            name = type(node).__name__
            out.add(name)
            for c in children(node):
                counts[c] = counts.get(c, 0) + 1
            if isinstance(node, Let):
                out.add("seq" if node.var.name_hint == "" else "let")
                if node.var.type_annotation is not None:
                    types.append(node.var.type_annotation)
            elif isinstance(node, Function):
                types.extend(p.type_annotation for p in node.params if p.type_annotation)
                if node.ret_type is not None:
                    types.append(node.ret_type)
                    out.add("fn_ret_type")
                if node.attrs:
                    out.add("fn_attrs")
                for tp in node.type_params:
                    out.add("fn_" + type(tp).__name__)
            elif isinstance(node, Call):
                out.add("call_" + type(node.op).__name__)
                if isinstance(node.op, Op) and node.op.opdef.non_default_attrs(node.attrs):
                    out.add("op_non_default_attrs")
                if node.attrs.type_key and not isinstance(node.op, Op):
                    out.add("attrs_type_key")
            elif isinstance(node, Match):
                out.add("match" if node.complete else "match?")
                stack = [c.lhs for c in node.clauses]
                while stack:
                    p = stack.pop()
                    out.add(type(p).__name__)
                    if isinstance(p, PatternVar) and p.var.type_annotation is not None:
                        types.append(p.var.type_annotation)
                    if isinstance(p, (PatternConstructor, PatternTuple)):
                        if any(isinstance(q, (PatternConstructor, PatternTuple))
                               for q in p.patterns):
                            out.add("nested_pattern")
                        stack.extend(p.patterns)
            elif isinstance(node, Constant):
                if node.data.ndim or str(node.data.dtype) not in (
                        "int16", "int32", "int64", "float16", "float32", "float64", "bool"):
                    out.add("meta_constant")
                else:
                    out.add("lit_" + str(node.data.dtype))
                    if node.data.dtype != bool and node.data < 0:
                        out.add("negative_literal")
        if any(n > 1 for c, n in counts.items() if not isinstance(
                c, (Var, GlobalVar, Constant, Op, Constructor))):
            out.add("shared_node")
    while types:
        t = types.pop()
        out.add(type(t).__name__)
        if isinstance(t, FuncType) and t.type_params:
            out.add("generic_fn_type")
        if isinstance(t, TensorType):
            for d in t.shape:
                out.add("dim_" + type(d).__name__)
        types.extend(type_children(t))
    return out


REQUIRED_FORMS = {
    "Var", "GlobalVar", "Constant", "Op", "Constructor", "Tuple", "TupleGetItem", "Let",
    "Function", "Call", "If", "RefCreate", "RefRead", "RefWrite", "Match",
    "let", "seq", "fn_ret_type", "fn_attrs", "fn_TypeVar", "fn_ShapeVar",
    "call_Op", "call_GlobalVar", "call_Var", "call_Function", "call_Constructor",
    "op_non_default_attrs", "attrs_type_key", "match", "match?",
    "PatternWildcard", "PatternVar", "PatternConstructor", "PatternTuple", "nested_pattern",
    "meta_constant", "negative_literal", "shared_node", "adt_with_type_params",
    *(f"lit_{d}" for d in ("int16", "int32", "int64", "float16", "float32", "float64", "bool")),
    "TensorType", "TupleType", "FuncType", "generic_fn_type", "RefType", "TypeVar", "TypeCall",
    "IncompleteType", "dim_int", "dim_AnyDim", "dim_ShapeVar", "dim_DimExpr",
}


def test_strategy_covers_every_form() -> None:
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.modules())
    def collect(mod: IRModule) -> None:
        seen.update(_forms(mod))

    collect()
    assert REQUIRED_FORMS <= seen, sorted(REQUIRED_FORMS - seen)


# ----------------------------------------------------------------------------- typed programs
def _strip_type_args(mod: IRModule) -> IRModule:
    from relay_ir.expr import with_fields
    from relay_ir.functor import ExprMutator

    class Strip(ExprMutator):
        def visit_call(self, c: Call) -> Call:  # type: ignore[override]
            return with_fields(super().visit_call(c), type_args=())

    return IRModule({k: Strip().visit(v) for k, v in mod.functions.items()},
                    dict(mod.type_definitions))


def test_prelude_round_trips() -> None:
    from relay_ir import prelude
    text = check_module(prelude.prelude_module())
    assert "def @map[A, B](" in text and "type List[A] {" in text


@pytest.mark.parametrize("path", FILES, ids=[_file_id(p) for p in FILES])
def test_typed_files_round_trip(path: str) -> None:
    """After InferType every binder is annotated; the text keeps every type.

    Call ``type_args`` (instantiations of polymorphic calls) have no syntax, so they are the
    one thing re-parsing does not bring back.
    """
    from relay_ir import passes
    with open(path, encoding="utf-8") as f:
        typed = passes.InferType()(rly.parse(f.read(), path))
    text = astext(typed)
    back = rly.parse(text, "<printed>")
    rly.assert_structural_equal(_strip_type_args(typed), back)
    assert astext(back) == text
    with_types = astext(typed, show_types=True)
    assert "/* ty=" in with_types
    rly.assert_structural_equal(back, rly.parse(with_types, "<printed>"))


def test_hand_built_layouts_round_trip() -> None:
    """Sharing across branches and closures, parenthesised lets, a match used as a value."""
    from relay_ir.expr import (Clause, Constructor, If, Let, Match, PatternConstructor,
                               PatternVar, PatternWildcard, TupleGetItem)
    from relay_ir.ty import GlobalTypeVar, TypeCall, TypeData, TypeVar

    f32 = scalar_type("float32")

    def op(name: str, *args: object) -> Call:
        d = get_opdef(name)
        return Call(d.op, tuple(args), d.make_attrs({}))  # type: ignore[arg-type]

    x, y, v = Var("x", f32), Var("y"), Var("v")
    shared = op("exp", x)
    check_expr(Function((x,), If(op("less", x, const(0.0)), op("negative", shared),
                                 op("log", shared))))
    check_expr(Function((x,), Tuple((Function((y,), op("add", y, shared)),
                                     Function((), shared)))))
    inner = Let(y, op("exp", x), op("log", y))
    check_expr(Let(x, const(2.0), op("add", inner, inner)))
    check_expr(Function((x,), Let(v, Let(y, op("exp", op("exp", x)), y), v)))
    t = Var("t")
    check_expr(Tuple((TupleGetItem(t, 1), TupleGetItem(Tuple((t,)), 0), Tuple(()),
                      TupleGetItem(const(1), 0))))
    a = TypeVar("A")
    lst = GlobalTypeVar("List")
    cons = Constructor("Cons", (a, TypeCall(lst, (a,))), lst, 0)
    nil = Constructor("Nil", (), lst, 1)
    h, m, d = Var("h"), Var("m"), Var("d")
    mt = Match(d, (Clause(PatternConstructor(cons, (PatternVar(h), PatternWildcard())),
                          Let(Var("z"), op("exp", h), op("log", op("exp", h)))),
                   Clause(PatternConstructor(nil), const(0.0))))
    text = check_module(IRModule({"main": Function((d,), Let(m, mt, Tuple((m, mt))))},
                                 {"List": TypeData(lst, (a,), (cons, nil))}))
    assert "  %1 = (match (%d) {\n" in text and "  let %m = %1;\n  (%m, %1)\n" in text
