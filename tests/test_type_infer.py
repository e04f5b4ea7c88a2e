"""Type inference: inferred types of every language form, the operator table, the output contract.

Expected types are written in text (``rly.parse_type``) and compared with ``structural_equal``;
generic function types (which the text format cannot write) are compared through
:func:`relay_ir.passes.type_infer.fmt_type`, whose output is the printer's.
"""
from __future__ import annotations

from typing import Any

import pytest

import relay_ir as rly
from relay_ir.expr import (Call, Constructor, Expr, Function, GlobalVar, Let, Op, Tuple, Var,
                           const)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes import InferType
from relay_ir.passes.type_infer import fmt_type, infer_type
from relay_ir.structural import structural_equal
from relay_ir.traversal import build_lets, post_order
from relay_ir.ty import (ANY, FuncType, IncompleteType, RefType, ShapeVar, TensorType,
                         TupleType, TypeVar, scalar_type)
from util_scale import shallow_stack, sizes

HEADER = '#[version = "0.0.5"]\n'


def infer(text: str, prelude: bool = False) -> IRModule:
    """Parse a module (header added) and run InferType."""
    return InferType()(rly.parse(HEADER + text, prelude=prelude))


def same(actual: object, expected_text: str) -> None:
    """``actual`` is structurally the type written ``expected_text``."""
    expected = rly.parse_type(expected_text)
    assert structural_equal(actual, expected, map_free_vars=True), \
        f"{fmt_type(actual)} != {expected_text}"


def main_type(text: str, prelude: bool = False) -> FuncType:
    return infer(text, prelude)["main"].checked_type


def call(name: str, *args: Expr, **attrs: object) -> Call:
    od = get_opdef(name)
    return Call(od.op, tuple(args), od.make_attrs(attrs))


# ----------------------------------------------------------------------------- hand-built IR
def test_hand_built_broadcast_and_type_args() -> None:
    x = Var("x", TensorType((10, 4), "float32"))
    y = Var("y", TensorType((5, 10, 1), "float32"))
    f = infer_type(Function((x, y), call("add", x, y)))
    assert fmt_type(f.checked_type) == ("fn (Tensor[(10, 4), float32], Tensor[(5, 10, 1), "
                                        "float32]) -> Tensor[(5, 10, 4), float32]")
    assert f.body.type_args == (TensorType((10, 4), "float32"), TensorType((5, 10, 1), "float32"))
    assert f.ret_type == TensorType((5, 10, 4), "float32")


def test_hand_built_let_polymorphism() -> None:
    a = TypeVar("xt")
    px = Var("x", a)
    ident = Function((px,), px, a, (a,))
    vid = Var("id")
    e = Let(vid, ident, Tuple((Call(vid, (const(1),)), Call(vid, (Tuple(()),)))))
    out = infer_type(e)
    assert out.checked_type == TupleType((scalar_type("int32"), TupleType(())))
    first = out.body.fields[0]
    assert first.type_args == (scalar_type("int32"),)
    assert out.var.type_annotation.type_params == (a,)


def test_hand_built_explicit_type_args() -> None:
    a = TypeVar("A")
    px = Var("x", a)
    ident = GlobalVar("id")
    good = Call(ident, (const(1.5),), type_args=(scalar_type("float32"),))
    mod = IRModule({"id": Function((px,), px, a, (a,)), "main": Function((), good)})
    typed = InferType()(mod)
    assert typed["main"].body.type_args == (scalar_type("float32"),)
    bad = Call(ident, (const(1.5),), type_args=(scalar_type("float32"),) * 2)
    with pytest.raises(rly.TypeInferenceError, match="wrong number of type arguments"):
        InferType()(mod.with_function("main", Function((), bad)))
    conflict = Call(ident, (const(1.5),), type_args=(scalar_type("int32"),))
    with pytest.raises(rly.TypeInferenceError, match="explicit type argument"):
        InferType()(mod.with_function("main", Function((), conflict)))


def test_input_is_not_mutated_and_every_node_typed() -> None:
    x = Var("x", TensorType((2, 3), "float32"))
    t = Var("t")
    body = Let(t, call("exp", x), Tuple((t, call("add", t, x))))
    f = Function((x,), body)
    mod = IRModule({"main": f})
    typed = InferType()(mod)
    assert mod["main"] is f and t.type_annotation is None and f.ret_type is None
    assert all(n.checked_type_ is None for n in post_order(f))
    new = typed["main"]
    assert new is not f
    for node in post_order(new):
        if isinstance(node, (Op, Constructor)):
            continue
        assert node.checked_type_ is not None, type(node).__name__
        if isinstance(node, Var):
            assert node.type_annotation == node.checked_type_
    same(new.checked_type, "fn (Tensor[(2, 3), float32]) -> (Tensor[(2, 3), float32], "
                           "Tensor[(2, 3), float32])")
    assert new.body.var.type_annotation == TensorType((2, 3), "float32")


@sizes(3_000, 100_000)
def test_deep_chain_100k_default_recursion_limit(n: int) -> None:
    x = Var("x", TensorType((4,), "float32"))
    add = get_opdef("add")
    attrs = add.make_attrs({})
    binds = []
    cur: Expr = x
    for i in range(n):
        v = Var(f"t{i}")
        binds.append((v, Call(add.op, (cur, x), attrs)))
        cur = v
    mod = IRModule({"main": Function((x,), build_lets(binds, cur))})
    with shallow_stack():
        typed = InferType()(mod)
    same(typed["main"].checked_type, "fn (Tensor[(4), float32]) -> Tensor[(4), float32]")
    e = typed["main"].body
    for _ in range(n - 1):
        e = e.body
    assert e.var.type_annotation == TensorType((4,), "float32")


@sizes(3_000, 50_000)
def test_deep_dataflow_chain(n: int) -> None:
    x = Var("x", TensorType((3,), "float32"))
    neg = get_opdef("negative")
    attrs = neg.make_attrs({})
    e: Expr = x
    for _ in range(n):
        e = Call(neg.op, (e,), attrs)
    with shallow_stack():
        typed = infer_type(Function((x,), e))
    assert typed.ret_type == TensorType((3,), "float32")


# ----------------------------------------------------------------------------- text: basics
def test_let_float64() -> None:
    same(main_type("def @main() { let %x: float64 = 1f64; %x }"), "fn () -> float64")


def test_fn_log() -> None:
    mod = infer("def @main() { fn (%x: float32) { log(%x) } }")
    same(mod["main"].checked_type, "fn () -> fn (float32) -> float32")


def test_let_chain_types() -> None:
    mod = infer("def @main(%x: Tensor[(10, 10), float32]) {\n"
                "  let %t1 = log(%x);\n  let %t2 = add(%t1, %x);\n  %t2\n}")
    body = mod["main"].body
    same(body.var.type_annotation, "Tensor[(10, 10), float32]")
    same(body.body.var.type_annotation, "Tensor[(10, 10), float32]")


def test_recursive_global() -> None:
    mod = infer("def @f(%n: int32, %data: float32) -> float32 {\n"
                "  if (%n == 0) { %data } else { @f(%n - 1, log(%data)) }\n}")
    same(mod["f"].checked_type, "fn (int32, float32) -> float32")
    assert "@f(" in rly.astext(mod)


def test_self_recursive_main() -> None:
    same(main_type("def @main(%x: float32) -> float32 { @main(%x) }"),
         "fn (float32) -> float32")


def test_mutual_recursion_unannotated_return() -> None:
    mod = infer("def @even(%n: int32) { if (%n == 0) { True } else { @odd(%n - 1) } }\n"
                "def @odd(%n: int32) { if (%n == 0) { False } else { @even(%n - 1) } }\n"
                "def @main() { @even(10) }")
    same(mod["even"].checked_type, "fn (int32) -> bool")
    same(mod["odd"].checked_type, "fn (int32) -> bool")
    same(mod["main"].checked_type, "fn () -> bool")


def test_higher_order_unannotated_param() -> None:
    mod = infer("def @main() { fn (%x: int32, %f) -> int32 { %f(%x) } }")
    fn = mod["main"].body
    same(fn.params[1].type_annotation, "fn (int32) -> int32")


def test_polymorphic_argument_where_monomorphic_expected() -> None:
    mod = infer("def @main[b](%y: b) -> b {\n"
                "  let %ap = fn (%f: fn (b) -> b, %z: b) -> b { %f(%z) };\n"
                "  %ap(fn [a](%x: a) -> a { %x }, %y)\n}")
    assert fmt_type(mod["main"].checked_type) == "fn [b](b) -> b"


def test_returning_a_polymorphic_function() -> None:
    mod = infer("def @main[b]() -> fn (b) -> b {\n  fn (%x: b) -> b { %x }\n}")
    assert fmt_type(mod["main"].checked_type) == "fn [b]() -> fn (b) -> b"


def test_if_between_generic_identity_and_lambda() -> None:
    mod = infer("def @id[a](%x: a) -> a { %x }\n"
                "def @main(%c: bool) {\n"
                "  let %f = if (%c) { @id } else { fn (%y: int32) { %y } };\n"
                "  %f(3)\n}")
    same(mod["main"].checked_type, "fn (bool) -> int32")
    same(mod["main"].body.var.type_annotation, "fn (int32) -> int32")


def test_tuples_and_projection() -> None:
    mod = infer("def @main(%x: float32) { let %t = (%x, %x, 1); (%t.2, %t.0) }")
    same(mod["main"].checked_type, "fn (float32) -> (int32, float32)")
    same(mod["main"].body.var.type_annotation, "(float32, float32, int32)")


def test_references() -> None:
    mod = infer("def @main(%x: float32) {\n  let %r = ref(%x);\n  let %v = ref_read(%r);\n"
                "  let %u = ref_write(%r, %v);\n  (%v, %u)\n}")
    body = mod["main"].body
    assert body.var.type_annotation == RefType(scalar_type("float32"))
    same(body.body.var.type_annotation, "float32")
    same(body.body.body.var.type_annotation, "()")


def test_type_args_recorded() -> None:
    mod = infer("def @id[A](%x: A) -> A { %x }\n"
                "def @main(%a: Tensor[(10, 10), float32], %b: Tensor[(1, 10), float32],"
                " %f: float32) {\n  (add(%a, %b), @id(%f))\n}")
    add_call, id_call = mod["main"].body.fields
    same(add_call.type_args[0], "Tensor[(10, 10), float32]")
    same(add_call.type_args[1], "Tensor[(1, 10), float32]")
    assert len(id_call.type_args) == 1
    same(id_call.type_args[0], "float32")


def test_equal_is_bool() -> None:
    same(main_type("def @main(%a: int32, %b: int32) { equal(%a, %b) }"),
         "fn (int32, int32) -> bool")


def test_let_polymorphism() -> None:
    mod = infer("def @main() {\n  let %id = fn [xt](%x: xt) -> xt { %x };\n"
                "  (%id(1), %id(()))\n}")
    same(mod["main"].checked_type, "fn () -> (int32, ())")


def test_closure_captures() -> None:
    mod = infer("def @main(%x: Tensor[(3), float32]) {\n"
                "  let %add_x = fn (%y) { add(%x, %y) };\n  %add_x(%x)\n}")
    same(mod["main"].body.var.type_annotation,
         "fn (Tensor[(3), float32]) -> Tensor[(3), float32]")


def test_incomplete_annotation() -> None:
    mod = infer("def @main() { let %x: (int32, _) = (1, 2f); %x }")
    same(mod["main"].checked_type, "fn () -> (int32, float32)")


def test_dynamic_shape_any() -> None:
    mod = infer("def @main(%y: Tensor[(10), float32]) {\n"
                "  let %f = fn (%x: Tensor[(?), float32]) { add(%x, %x) };\n  %f(%y)\n}")
    same(mod["main"].checked_type, "fn (Tensor[(10), float32]) -> Tensor[(?), float32]")
    same(mod["main"].params[0].type_annotation, "Tensor[(10), float32]")


# ----------------------------------------------------------------------------- ADTs
BOX = "type box[T] { Box(T), }\n"


def test_constructor_types() -> None:
    mod = infer(BOX + "def @main() { (Box(()), Box(0f), Box(1)) }")
    same(mod["main"].checked_type, "fn () -> (box[()], box[float32], box[int32])")
    assert mod["main"].body.fields[1].type_args == (scalar_type("float32"),)


def test_constructor_as_value() -> None:
    mod = infer(BOX + "def @main() { let %mk = Box; %mk(1) }")
    same(mod["main"].checked_type, "fn () -> box[int32]")


def test_match_with_redundant_wildcard() -> None:
    mod = infer(BOX + "def @main(%b: box[int32]) { match (%b) { Box(%x) => (), _ => () } }")
    same(mod["main"].checked_type, "fn (box[int32]) -> ()")


def test_pattern_var_annotation_determines_param() -> None:
    mod = infer(BOX + "def @main(%b) {\n  match (%b) {\n"
                "    Box(%mv: Tensor[(2, 2), float32]) => %mv,\n  }\n}")
    same(mod["main"].checked_type,
         "fn (box[Tensor[(2, 2), float32]]) -> Tensor[(2, 2), float32]")
    clause = mod["main"].body.clauses[0]
    same(clause.lhs.patterns[0].var.type_annotation, "Tensor[(2, 2), float32]")


LIST = "type List[A] { Cons(A, List[A]), Nil, }\n"


def test_nested_and_tuple_patterns_exhaustive() -> None:
    mod = infer(LIST + "def @main(%a: List[int32], %b: List[int32]) {\n"
                "  match (%a, %b) {\n"
                "    (Cons(%x, Cons(_, _)), _) => %x,\n"
                "    (Cons(%x, Nil), _) => %x,\n"
                "    (Nil, Cons(%y, _)) => %y,\n"
                "    (Nil, Nil) => 0,\n  }\n}")
    same(mod["main"].checked_type, "fn (List[int32], List[int32]) -> int32")


def test_partial_match_needs_no_exhaustiveness() -> None:
    mod = infer(LIST + "def @main(%a: List[float32]) { match? (%a) { Cons(%x, _) => %x } }")
    same(mod["main"].checked_type, "fn (List[float32]) -> float32")


def test_nullary_adt() -> None:
    mod = infer("type Color { Red, Green, }\n"
                "def @main(%c: Color) { match (%c) { Red => Green, Green => Red } }")
    same(mod["main"].checked_type, "fn (Color) -> Color")


def test_recursive_polymorphic_global_with_adt() -> None:
    mod = infer(LIST + "def @len[A](%xs: List[A]) -> int32 {\n"
                "  match (%xs) { Cons(_, %r) => 1 + @len(%r), Nil => 0 }\n}\n"
                "def @main() { (@len(Cons(1f, Nil)), @len(Cons((), Nil))) }")
    same(mod["main"].checked_type, "fn () -> (int32, int32)")
    assert fmt_type(mod["len"].checked_type) == "fn [A](List[A]) -> int32"


# ----------------------------------------------------------------------------- symbolic dims
def test_symbolic_dims_instantiated_per_call() -> None:
    mod = infer("def @rowsum[n](%x: Tensor[(n, 4), float32]) -> Tensor[(n), float32] {\n"
                "  sum(%x, axis=[1])\n}\n"
                "def @main(%a: Tensor[(3, 4), float32], %b: Tensor[(7, 4), float32]) {\n"
                "  (@rowsum(%a), @rowsum(%b))\n}")
    same(mod["main"].checked_type, "fn (Tensor[(3, 4), float32], Tensor[(7, 4), float32]) -> "
                                   "(Tensor[(3), float32], Tensor[(7), float32])")
    assert mod["main"].body.fields[0].type_args == (3,)
    assert mod["main"].body.fields[1].type_args == (7,)
    assert fmt_type(mod["rowsum"].checked_type) == \
        "fn [n](Tensor[(n, 4), float32]) -> Tensor[(n), float32]"


def test_symbolic_concatenate_and_dense() -> None:
    mod = infer("def @cat[n, m](%a: Tensor[(n, 4), float32], %b: Tensor[(m, 4), float32]) {\n"
                "  concatenate((%a, %b), axis=0)\n}\n"
                "def @lin[n](%x: Tensor[(n, 5), float32], %w: Tensor[(3, 5), float32]) {\n"
                "  nn.dense(%x, %w)\n}\n"
                "def @main(%a: Tensor[(2, 4), float32], %b: Tensor[(6, 4), float32],"
                " %x: Tensor[(9, 5), float32], %w: Tensor[(3, 5), float32]) {\n"
                "  (@cat(%a, %b), @lin(%x, %w))\n}")
    cat = mod["cat"].checked_type
    n, m = cat.type_params
    assert isinstance(n, ShapeVar) and isinstance(m, ShapeVar)
    assert fmt_type(cat.ret_type) == "Tensor[(m + n, 4), float32]"
    assert fmt_type(mod["lin"].checked_type.ret_type) == "Tensor[(n, 3), float32]"
    same(mod["main"].checked_type.ret_type,
         "(Tensor[(8, 4), float32], Tensor[(9, 3), float32])")


def test_symbolic_dims_broadcast_in_body() -> None:
    mod = infer("def @f[n](%x: Tensor[(n, 1), float32], %y: Tensor[(1, n), float32]) {\n"
                "  add(%x, %y)\n}")
    assert fmt_type(mod["f"].checked_type.ret_type) == "Tensor[(n, n), float32]"


def test_symbolic_dim_solved_from_expression() -> None:
    mod = infer("def @pair[n](%x: Tensor[(n), float32], %y: Tensor[(n + 1), float32]) {\n"
                "  (%x, %y)\n}\n"
                "def @main(%a: Tensor[(4), float32], %b: Tensor[(5), float32]) {\n"
                "  @pair(%a, %b)\n}")
    same(mod["main"].checked_type.ret_type, "(Tensor[(4), float32], Tensor[(5), float32])")


# ----------------------------------------------------------------------------- operator table
T = "float32"
OP_TABLE = [
    ("add(%a, %b)", ["Tensor[(1, 3), float32]", "Tensor[(4, 1), float32]"],
     "Tensor[(4, 3), float32]"),
    ("add(%a, %b)", ["Tensor[(10, 4), float32]", "Tensor[(5, 10, 1), float32]"],
     "Tensor[(5, 10, 4), float32]"),
    ("add(%a, 1f)", ["Tensor[(2, 3), float32]"], "Tensor[(2, 3), float32]"),
    ("add(%a, %b)", ["Tensor[(?, 3), float32]", "Tensor[(4, 1), float32]"],
     "Tensor[(4, 3), float32]"),
    ("less(%a, %b)", ["Tensor[(2, 1), float32]", "Tensor[(3), float32]"], "Tensor[(2, 3), bool]"),
    ("nn.dense(%a, %b)", ["Tensor[(2, 5), float32]", "Tensor[(3, 5), float32]"],
     "Tensor[(2, 3), float32]"),
    ("nn.dense(%a, %b)", ["Tensor[(4, 2, 5), float32]", "Tensor[(3, 5), float32]"],
     "Tensor[(4, 2, 3), float32]"),
    ("reshape(%a, newshape=[-1, 4])", ["Tensor[(2, 3, 4), float32]"], "Tensor[(6, 4), float32]"),
    ("reshape(%a, newshape=[0, -1])", ["Tensor[(2, 3, 4), float32]"],
     "Tensor[(2, 12), float32]"),
    ("reshape(%a, newshape=[4, 0, 2])", ["Tensor[(2, 3, 4), float32]"],
     "Tensor[(4, 3, 2), float32]"),
    ("reshape(%a, newshape=[-2])", ["Tensor[(2, 3, 4), float32]"],
     "Tensor[(2, 3, 4), float32]"),
    ("reshape(%a, newshape=[-3, 4])", ["Tensor[(2, 3, 4), float32]"], "Tensor[(6, 4), float32]"),
    ("reshape(%a, newshape=[-4, 1, 2, -2])", ["Tensor[(2, 3, 4), float32]"],
     "Tensor[(1, 2, 3, 4), float32]"),
    ("sum(%a, axis=[1])", ["Tensor[(2, 3, 4), float32]"], "Tensor[(2, 4), float32]"),
    ("sum(%a, axis=[1], keepdims=True)", ["Tensor[(2, 3, 4), float32]"],
     "Tensor[(2, 1, 4), float32]"),
    ("sum(%a, axis=[0, 2])", ["Tensor[(2, 3, 4), float32]"], "Tensor[(3), float32]"),
    ("sum(%a, axis=[-1])", ["Tensor[(2, 3, 4), float32]"], "Tensor[(2, 3), float32]"),
    ("sum(%a)", ["Tensor[(2, 3, 4), float32]"], "float32"),
    ("sum(%a, axis=[1], exclude=True)", ["Tensor[(2, 3, 4), float32]"], "Tensor[(3), float32]"),
    ("argmax(%a, axis=[1])", ["Tensor[(2, 3), float32]"], "Tensor[(2), int32]"),
    ("concatenate((%a, %b), axis=0)", ["Tensor[(2, 3), float32]", "Tensor[(4, 3), float32]"],
     "Tensor[(6, 3), float32]"),
    ("concatenate((%a, %b), axis=-1)", ["Tensor[(2, 3), float32]", "Tensor[(2, 5), float32]"],
     "Tensor[(2, 8), float32]"),
    ("nn.conv2d(%a, %b)", ["Tensor[(1, 3, 32, 32), float32]", "Tensor[(8, 3, 3, 3), float32]"],
     "Tensor[(1, 8, 30, 30), float32]"),
    ("nn.conv2d(%a, %b, padding=[1, 1])",
     ["Tensor[(1, 3, 32, 32), float32]", "Tensor[(8, 3, 3, 3), float32]"],
     "Tensor[(1, 8, 32, 32), float32]"),
    ("nn.conv2d(%a, %b, strides=[2, 2], padding=[1, 1])",
     ["Tensor[(1, 3, 32, 32), float32]", "Tensor[(8, 3, 3, 3), float32]"],
     "Tensor[(1, 8, 16, 16), float32]"),
    ('nn.conv2d(%a, %b, data_layout="NHWC", kernel_layout="HWIO")',
     ["Tensor[(1, 32, 32, 3), float32]", "Tensor[(3, 3, 3, 8), float32]"],
     "Tensor[(1, 30, 30, 8), float32]"),
    ("transpose(%a, axes=[2, 0, 1])", ["Tensor[(2, 3, 4), float32]"],
     "Tensor[(4, 2, 3), float32]"),
    ("transpose(%a)", ["Tensor[(2, 3, 4), float32]"], "Tensor[(4, 3, 2), float32]"),
    ("take(%a, %b, axis=0)", ["Tensor[(5, 4), float32]", "Tensor[(3), int32]"],
     "Tensor[(3, 4), float32]"),
    ("take(%a, %b, axis=1)", ["Tensor[(5, 4), float32]", "Tensor[(2, 2), int32]"],
     "Tensor[(5, 2, 2), float32]"),
    ("take(%a, %b)", ["Tensor[(5, 4), float32]", "Tensor[(3), int32]"], "Tensor[(3), float32]"),
    ("split(%a, indices_or_sections=3, axis=0)", ["Tensor[(6, 4), float32]"],
     "(Tensor[(2, 4), float32], Tensor[(2, 4), float32], Tensor[(2, 4), float32])"),
    ("split(%a, indices_or_sections=[1, 4], axis=0)", ["Tensor[(6, 4), float32]"],
     "(Tensor[(1, 4), float32], Tensor[(3, 4), float32], Tensor[(2, 4), float32])"),
    ("expand_dims(%a, axis=1, num_newaxis=2)", ["Tensor[(3, 4), float32]"],
     "Tensor[(3, 1, 1, 4), float32]"),
    ("squeeze(%a, axis=[0])", ["Tensor[(1, 3, 1), float32]"], "Tensor[(3, 1), float32]"),
    ("squeeze(%a)", ["Tensor[(1, 3, 1), float32]"], "Tensor[(3), float32]"),
    ('cast(%a, dtype="int8")', ["Tensor[(2, 3), float32]"], "Tensor[(2, 3), int8]"),
    ("nn.softmax(%a, axis=-1)", ["Tensor[(2, 3), float32]"], "Tensor[(2, 3), float32]"),
    ("nn.relu(%a)", ["Tensor[(2, 3), float32]"], "Tensor[(2, 3), float32]"),
    ("exp(%a)", ["Tensor[(2, 3), float32]"], "Tensor[(2, 3), float32]"),
    ("negative(%a)", ["Tensor[(2, 3), float32]"], "Tensor[(2, 3), float32]"),
    ("where(%a, %b, %c)", ["Tensor[(2, 1), bool]", "Tensor[(3), float32]", "float32"],
     "Tensor[(2, 3), float32]"),
]


@pytest.mark.parametrize("expr,args,result", OP_TABLE, ids=[r[0] for r in OP_TABLE])
def test_operator_table(expr: str, args: list[str], result: str) -> None:
    params = ", ".join(f"%{n}: {t}" for n, t in zip("abc", args))
    same(main_type(f"def @main({params}) {{ {expr} }}").ret_type, result)


def test_dense_infers_weight_from_units() -> None:
    mod = infer("def @main(%x: Tensor[(2, 5), float32], %w) { nn.dense(%x, %w, units=3) }")
    same(mod["main"].checked_type,
         "fn (Tensor[(2, 5), float32], Tensor[(3, 5), float32]) -> Tensor[(2, 3), float32]")


def test_conv2d_infers_weight() -> None:
    mod = infer("def @main(%x: Tensor[(1, 3, 32, 32), float32], %w) {\n"
                "  nn.conv2d(%x, %w, channels=8, kernel_size=[3, 3])\n}")
    same(mod["main"].params[1].type_annotation, "Tensor[(8, 3, 3, 3), float32]")
    same(mod["main"].checked_type.ret_type, "Tensor[(1, 8, 30, 30), float32]")


def test_relation_deferred_until_argument_known() -> None:
    # %w's type is only known after the second binding; the first relation waits for it.
    mod = infer("def @main(%x: Tensor[(2, 5), float32], %w) {\n"
                "  let %y = nn.relu(%w);\n  let %z = nn.dense(%x, %w, units=3);\n  (%y, %z)\n}")
    same(mod["main"].body.var.type_annotation, "Tensor[(3, 5), float32]")


# ----------------------------------------------------------------------------- printer round trip
def test_types_round_trip_through_printer() -> None:
    src = (LIST + "def @f[n](%x: Tensor[(n, 4), float32]) -> Tensor[(n), float32] {\n"
           "  sum(%x, axis=[1])\n}\n"
           "def @main(%a: Tensor[(3, 4), float32], %l: List[int32]) {\n"
           "  let %t = (@f(%a), %l);\n  match (%l) { Cons(%h, _) => (%t, %h), Nil => (%t, 0) }\n}")
    typed = infer(src)
    text = rly.astext(typed)
    reparsed = rly.parse(text)
    # annotations printed by astext re-parse to the same types
    assert structural_equal(reparsed["main"].params[1].type_annotation,
                            typed["main"].params[1].type_annotation)
    again = InferType()(reparsed)
    for name in typed.functions:
        assert structural_equal(again[name].checked_type, typed[name].checked_type,
                                map_free_vars=True), name
    assert rly.astext(again) == text


def test_infer_type_twice_is_stable() -> None:
    typed = infer("def @main(%x: Tensor[(2, 2), float32]) { let %y = add(%x, %x); (%y, 1) }")
    again = InferType()(typed)
    assert structural_equal(again["main"], typed["main"])


def test_types_are_plain_values() -> None:
    mod = infer("def @main(%x: Tensor[(2, ?), float32]) { %x }")
    t = mod["main"].checked_type
    assert t.arg_types[0] == TensorType((2, ANY), "float32")
    assert t.ret_type is t.arg_types[0] or t.ret_type == t.arg_types[0]
    assert not isinstance(t.ret_type, IncompleteType)


# ----------------------------------------------------------------------------- custom relations
_TEST_OP = "a type-relation test operator (registered by tests/test_type_infer.py)"


@pytest.fixture
def test_ops() -> Any:
    """The test operators, registered for one test and removed after it (registry-wide tests
    such as every operator having a batching rule must not see them)."""
    from relay_ir.op import _REGISTRY
    _register_test_ops()
    yield
    for name in ("test.identity", "test.broadcast", "test.never", "test.first_dim"):
        _REGISTRY.pop(name, None)


def _register_test_ops() -> None:
    from relay_ir.op import OpDef, lookup_opdef, register_op
    from relay_ir.op._rules import broadcast_rel, identity_rel
    if lookup_opdef("test.identity") is not None:
        return
    register_op(OpDef(name="test.identity", num_inputs=1, type_rel=identity_rel,
                      host_only=_TEST_OP))
    register_op(OpDef(name="test.broadcast", num_inputs=2, type_rel=broadcast_rel,
                      host_only=_TEST_OP))
    register_op(OpDef(name="test.never", num_inputs=1, type_rel=lambda args, attrs: None,
                      host_only=_TEST_OP))

    def first_dim_rel(args, attrs):  # type: ignore[no-untyped-def]
        t = args[0]
        if isinstance(t, IncompleteType):
            return None
        return TensorType((t.shape[0],), "int64")
    register_op(OpDef(name="test.first_dim", num_inputs=1, type_rel=first_dim_rel,
                      host_only=_TEST_OP))


def test_python_defined_relations(test_ops: Any) -> None:
    mod = infer("def @main(%a: Tensor[(3, 1), float32], %b: Tensor[(4), float32]) {\n"
                "  (test.identity(%a), test.broadcast(%a, %b), test.first_dim(%b))\n}")
    same(mod["main"].checked_type.ret_type,
         "(Tensor[(3, 1), float32], Tensor[(3, 4), float32], Tensor[(4), int64])")


def test_relation_that_never_resolves_is_reported(test_ops: Any) -> None:
    with pytest.raises(rly.TypeInferenceError,
                       match=r"unable to resolve the type relation of `test.never` for argument "
                             r"types \(Tensor\[\(2\), float32\]\)"):
        infer("def @main(%a: Tensor[(2), float32]) { test.never(%a) }")


def test_undetermined_type_parameter_is_reported() -> None:
    with pytest.raises(rly.TypeInferenceError,
                       match="this call of `@f`: its type parameter `A` is only known to be `_`"):
        infer("def @f[A]() -> float32 { 1f }\ndef @main() { @f() }")


def test_conv2d_with_any_input_dims() -> None:
    mod = infer("def @main(%x: Tensor[(?, ?, ?, ?), float32], %w: Tensor[(8, 3, 3, 3), float32])"
                " {\n  nn.conv2d(%x, %w)\n}")
    same(mod["main"].checked_type.ret_type, "Tensor[(?, 8, ?, ?), float32]")


def test_recursive_let_bound_polymorphic_function() -> None:
    mod = infer("def @main() {\n"
                "  let %f = fn [T](%n: int32, %v: T) -> T {\n"
                "    if (%n == 0) { %v } else { %f(%n - 1, %v) }\n  };\n"
                "  (%f(3, 1f), %f(2, ()))\n}")
    same(mod["main"].checked_type, "fn () -> (float32, ())")


def test_type_parameter_scoped_over_nested_function() -> None:
    mod = infer("def @f[A](%x: A) {\n  let %g = fn (%y: A) { %y };\n  %g(%x)\n}")
    assert fmt_type(mod["f"].checked_type) == "fn [A](A) -> A"
