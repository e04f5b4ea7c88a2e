"""Parser tests: every form of Relay text format v0.0.5 parses into the expected IR."""
from __future__ import annotations

import base64
import math
import os

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.attrs import Attrs
from relay_ir.errors import ParseError
from relay_ir.expr import (Call, Constant, Constructor, Function, GlobalVar, If, Let, Match,
                           Op, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var,
                           const)
from relay_ir.module import IRModule
from relay_ir.op import get_op, get_opdef
from relay_ir.parser import parse, parse_expr, parse_type
from relay_ir.structural import assert_structural_equal, structural_equal
from relay_ir.ty import (ANY, DimExpr, FuncType, GlobalTypeVar, IncompleteType, RefType,
                         ShapeVar, TensorType, TupleType, TypeCall, TypeVar, dim_add, dim_mul,
                         dim_sub, scalar_type)

DATA = os.path.join(os.path.dirname(__file__), "data")
H = '#[version = "0.0.5"]\n'


def opcall(name: str, *args, **attrs) -> Call:
    """A call of op ``name`` with its attribute record built like the parser builds it."""
    return Call(get_op(name), tuple(args), get_opdef(name).make_attrs(attrs))


def c(v, dtype=None) -> Constant:
    return const(v, dtype)


def same(a, b) -> None:
    assert_structural_equal(a, b, map_free_vars=True)


# ----------------------------------------------------------------------------- literals
@pytest.mark.parametrize("text,value,dtype", [
    ("1", 1, "int32"), ("10", 10, "int32"), ("0", 0, "int32"), ("-100", -100, "int32"),
    ("-05", -5, "int32"), ("2147483647", 2147483647, "int32"),
    ("-2147483648", -2147483648, "int32"),
    ("2147483648", 2147483648, "int64"), ("9223372036854775807", 9223372036854775807, "int64"),
    ("-42i", -42, "int32"), ("-42i16", -42, "int16"), ("-42i32", -42, "int32"),
    ("-42i64", -42, "int64"), ("32767i16", 32767, "int16"),
    ("--10", 10, "int32"), ("---10", -10, "int32"),
])
def test_int_literals(text, value, dtype):
    e = parse_expr(text)
    assert isinstance(e, Constant)
    assert e.data.shape == ()
    assert str(e.data.dtype) == dtype
    assert int(e.data) == value


@pytest.mark.parametrize("text,value,dtype", [
    ("1.0f", 1.0, "float32"), ("1.56667f", 1.56667, "float32"), ("0.0f", 0.0, "float32"),
    ("-10.0f", -10.0, "float32"), ("1e-1f", 0.1, "float32"), ("1e+1f", 10.0, "float32"),
    ("1E-1f", 0.1, "float32"), ("1E+1f", 10.0, "float32"), ("1.0e-1f", 0.1, "float32"),
    ("1.0e+1f", 10.0, "float32"), ("1.0E-1f", 0.1, "float32"), ("1.0E+1f", 10.0, "float32"),
    ("3f16", 3.0, "float16"), ("3f32", 3.0, "float32"), ("3f", 3.0, "float32"),
    ("3f64", 3.0, "float64"), ("1.5e10f", 1.5e10, "float32"), ("65504f16", 65504.0, "float16"),
    ("0.1f64", 0.1, "float64"),
])
def test_float_literals(text, value, dtype):
    e = parse_expr(text)
    assert isinstance(e, Constant)
    assert str(e.data.dtype) == dtype
    assert float(e.data) == float(np.array(value, dtype=dtype))


def test_inf_literals():
    for text, sign, dtype in [("inff", 1, "float32"), ("-inff", -1, "float32"),
                              ("inff64", 1, "float64"), ("-inff16", -1, "float16")]:
        e = parse_expr(text)
        assert str(e.data.dtype) == dtype
        assert math.isinf(float(e.data)) and np.sign(float(e.data)) == sign


def test_bool_literals():
    t, f = parse_expr("True"), parse_expr("False")
    assert t.data.dtype == np.bool_ and bool(t.data) is True
    assert f.data.dtype == np.bool_ and bool(f.data) is False


def test_literal_arrays_are_read_only_and_shared():
    a = parse_expr("(1f, 1f)")
    x, y = a.fields
    assert x is not y and x.data is y.data
    assert not x.data.flags.writeable


# ----------------------------------------------------------------------------- operators
@pytest.mark.parametrize("tok,name", [
    ("*", "multiply"), ("/", "divide"), ("+", "add"), ("-", "subtract"), ("<", "less"),
    (">", "greater"), ("<=", "less_equal"), (">=", "greater_equal"), ("==", "equal"),
    ("!=", "not_equal"),
])
def test_binary_operators(tok, name):
    e = parse_expr(f"1 {tok} 2")
    assert isinstance(e, Call) and e.op is get_op(name)
    assert [int(a.data) for a in e.args] == [1, 2]
    assert e.attrs == get_opdef(name).make_attrs({})
    same(e, opcall(name, c(1), c(2)))


def test_precedence_and_associativity():
    one = c(1)
    mul = opcall("multiply", one, one)
    same(parse_expr("1 * 1 + 1"), opcall("add", mul, one))
    same(parse_expr("(1 * 1) + 1"), parse_expr("1 * 1 + 1"))
    assert not structural_equal(parse_expr("1 * (1 + 1)"), parse_expr("1 * 1 + 1"))
    same(parse_expr("1 * 1 + 1 < 1 == 1"),
         opcall("equal", opcall("less", opcall("add", mul, one), one), one))
    same(parse_expr("1 == 1 < 1 + 1 * 1"),
         opcall("equal", one, opcall("less", one, opcall("add", one, mul))))
    # all left-associative
    same(parse_expr("1 - 2 - 3"), opcall("subtract", opcall("subtract", c(1), c(2)), c(3)))
    same(parse_expr("8 / 4 * 2"), opcall("multiply", opcall("divide", c(8), c(4)), c(2)))
    same(parse_expr("1 == 2 != 3"), opcall("not_equal", opcall("equal", c(1), c(2)), c(3)))


def test_operator_calls_are_ordinary_op_calls():
    same(parse_expr("1 + 2"), parse_expr("add(1, 2)"))


# ----------------------------------------------------------------------------- names
def test_local_global_op_names():
    e = parse_expr("let %foo = (); %foo")
    assert isinstance(e, Let) and e.var.name_hint == "foo" and e.body is e.var
    g = parse_expr("@foo")
    assert isinstance(g, GlobalVar) and g.name_hint == "foo"
    assert parse_expr("add") is get_op("add")
    assert parse_expr("nn.global_avg_pool2d") is get_op("nn.global_avg_pool2d")
    assert parse_expr("let %_ = 1; %_").var.name_hint == "_"
    assert parse_expr("let %base/x = 1; %base/x").var.name_hint == "base/x"


# ----------------------------------------------------------------------------- bindings
def test_let_forms():
    e = parse_expr("let %x = 1; ()")
    assert isinstance(e, Let) and e.var.name_hint == "x" and e.var.type_annotation is None
    assert int(e.value.data) == 1 and e.body.fields == ()
    e2 = parse_expr("let %x: int32 = 1; let %y = %x; %y")
    assert e2.var.type_annotation == scalar_type("int32")
    assert e2.body.value is e2.var and e2.body.body is e2.body.var
    x = Var("x")
    same(parse_expr("let %x = 1; %x"), Let(x, c(1), x))


def test_anonymous_sequencing_uses_empty_name():
    e = parse_expr("(); 1")
    assert isinstance(e, Let) and e.var.name_hint == ""
    assert isinstance(e.value, Tuple) and int(e.body.data) == 1
    e3 = parse_expr("1; 2; 3")
    assert [int(e3.value.data), int(e3.body.value.data), int(e3.body.body.data)] == [1, 2, 3]


def test_let_var_is_in_scope_in_its_value_and_shadowing():
    e = parse_expr("let %f = fn (%n: int32) { %f(%n) }; %f")
    assert e.value.body.op is e.var
    e2 = parse_expr("let %x = 1; let %y = %x; let %x = %y * 2; %x")
    x1, y, x2 = e2.var, e2.body.var, e2.body.body.var
    assert x1 is not x2
    assert e2.body.value is x1 and e2.body.body.value.args[0] is y
    assert e2.body.body.body is x2


def test_graph_bindings_share_nodes():
    e = parse_expr("%0 = (); %1 = 1; (%0, %0, %1)")
    assert isinstance(e, Tuple)
    assert e.fields[0] is e.fields[1]
    assert isinstance(e.fields[0], Tuple) and int(e.fields[2].data) == 1
    e2 = parse_expr("%1 = (); %1")
    assert isinstance(e2, Tuple) and e2.fields == ()
    e3 = parse_expr("%0 = if (True) { 1 } else { 0 }; %0")
    same(e3, If(c(True), c(1), c(0)))


def test_graph_bindings_are_visible_in_nested_blocks():
    e = parse_expr("%0 = (1, 2); fn () { %0.1 }")
    assert isinstance(e, Function) and isinstance(e.body, TupleGetItem)
    assert e.body.index == 1 and isinstance(e.body.tuple_value, Tuple)


def test_free_var():
    e = parse_expr("free_var %x: float32; %x")
    assert isinstance(e, Var) and e.name_hint == "x"
    assert e.type_annotation == scalar_type("float32")
    e2 = parse_expr("free_var %x: float32; %x((%x,).0, %x)")
    assert isinstance(e2, Call) and e2.op is e2.args[1]
    assert isinstance(e2.args[0], TupleGetItem) and e2.args[0].tuple_value.fields[0] is e2.op


def test_block_expression_is_a_scope():
    e = parse_expr("{ let %x = 1; %x }")
    x = Var("x")
    same(e, Let(x, c(1), x))
    assert e.var.name_hint == "x" and e.body is e.var
    same(parse_expr("(let %y = 2; %y, { let %y = 3; %y })").fields[1], Let(x, c(3), x))


# ----------------------------------------------------------------------------- tuples
def test_tuples_and_projection():
    assert parse_expr("()").fields == ()
    t1 = parse_expr("(0,)")
    assert isinstance(t1, Tuple) and len(t1.fields) == 1
    assert len(parse_expr("(0, 1)").fields) == 2
    assert len(parse_expr("(0, 1, 2,)").fields) == 3
    p = parse_expr("(0,).0")
    assert isinstance(p, TupleGetItem) and p.index == 0
    # parenthesised expression is not a tuple
    same(parse_expr("(1)"), c(1))
    q = parse_expr("((0, (1, 2)).1).0")
    assert isinstance(q, TupleGetItem) and q.index == 0 and q.tuple_value.index == 1


# ----------------------------------------------------------------------------- functions/calls
def test_functions():
    f0 = parse_expr("fn () { 0 }")
    assert isinstance(f0, Function) and f0.params == () and int(f0.body.data) == 0
    f1 = parse_expr("fn (%x) { %x }")
    assert f1.body is f1.params[0] and f1.ret_type is None
    f2 = parse_expr("fn (%x, %y) { %x + %y }")
    x, y = Var("x"), Var("y")
    same(f2, Function((x, y), opcall("add", x, y)))
    f3 = parse_expr("fn (%x: int32) -> int32 { %x }")
    assert f3.params[0].type_annotation == scalar_type("int32")
    assert f3.ret_type == scalar_type("int32")


def test_function_type_params_and_attrs():
    f = parse_expr("fn [A, B](%x: A, %y: B) -> (A, B) { (%x, %y) }")
    a, b = f.type_params
    assert isinstance(a, TypeVar) and a.name_hint == "A" and isinstance(b, TypeVar)
    assert f.params[0].type_annotation is a and f.params[1].type_annotation is b
    assert f.ret_type == TupleType((a, b))
    g = parse_expr('fn (%x, Primitive=1, Composite="foo", relay.reshape_only=1) { %x }')
    assert dict(g.attrs) == {"Primitive": 1, "Composite": "foo", "relay.reshape_only": 1}
    assert g.is_primitive
    h = parse_expr("fn (TestAttribute=None) { 0 }")
    assert h.params == () and dict(h.attrs) == {"TestAttribute": None}


def test_calls():
    e = parse_expr("let %id = fn (%x) { %x }; 10 * %id(10)")
    body = e.body
    assert body.op is get_op("multiply") and body.args[1].op is e.var
    e2 = parse_expr("let %constant = fn () { 0 }; %constant()")
    assert e2.body.args == () and e2.body.op is e2.var
    e3 = parse_expr("(fn (%x) { %x })(0)")
    assert isinstance(e3.op, Function) and int(e3.args[0].data) == 0
    e4 = parse_expr("let %curried_mult = fn (%x) { fn (%y) { %x * %y } }; "
                    "%curried_mult(1); %curried_mult(0)(0)")
    curried = e4.body.body
    assert isinstance(curried.op, Call) and curried.op.op is e4.var
    same(parse_expr("abs(1)"), opcall("abs", c(1)))


def test_call_attributes():
    e = parse_expr("free_var %x: Tensor[(2, 3), float32]; sum(%x, axis=[1], keepdims=True)")
    assert e.attrs.axis == (1,) and e.attrs.keepdims is True and e.attrs.exclude is False
    assert e.attrs == get_opdef("sum").make_attrs({"axis": [1], "keepdims": True})
    assert e.attrs.type_key == get_opdef("sum").attrs_type
    d = parse_expr("free_var %x; nn.softmax(%x)")
    assert d.attrs == get_opdef("nn.softmax").make_attrs({})
    cv = parse_expr('free_var %x; free_var %w; nn.conv2d(%x, %w, padding=[1, 1], '
                    'data_layout="NHWC", kernel_layout="HWIO")')
    assert cv.attrs.data_layout == "NHWC" and cv.attrs.kernel_layout == "HWIO"
    assert cv.attrs.padding == (1, 1)
    cl = parse_expr("free_var %x; clip(%x, a_min=-inff, a_max=inff)")
    assert cl.attrs.a_min == -math.inf and cl.attrs.a_max == math.inf
    cl2 = parse_expr("free_var %x; clip(%x, a_min=0f, a_max=(6))")
    assert cl2.attrs.a_min == 0.0 and cl2.attrs.a_max == 6.0
    r = parse_expr("free_var %x; reshape(%x, newshape=[-1, 2, 3])")
    assert r.attrs.newshape == (-1, 2, 3)


def test_non_op_call_attributes_need_type_key():
    e = parse_expr('let %f = fn (%x) { %x }; %f(1, attrs_type_key="DictAttrs", foo=2)')
    call = e.body
    assert isinstance(call.attrs, Attrs) and call.attrs.type_key == "DictAttrs"
    assert dict(call.attrs) == {"foo": 2}


def test_if():
    e = parse_expr("if (True) { 0 } else { 1 }")
    assert isinstance(e, If) and bool(e.cond.data) is True
    assert int(e.true_branch.data) == 0 and int(e.false_branch.data) == 1
    n = parse_expr("if (True) { 0 } else { if (False) { 1 } else { 2 } }")
    same(n, If(c(True), c(0), If(c(False), c(1), c(2))))


def test_references():
    e = parse_expr("let %r = ref(1f); ref_write(%r, 2f); ref_read(%r)")
    assert isinstance(e.value, RefCreate) and float(e.value.value.data) == 1.0
    w = e.body.value
    assert isinstance(w, RefWrite) and w.ref is e.var and float(w.value.data) == 2.0
    assert isinstance(e.body.body, RefRead) and e.body.body.ref is e.var


def test_references_in_def_graph_form():
    m = parse(H + "def @main(%x: float32) { %0 = ref(%x); ref_write(%0, 1f); ref_read(%0) }")
    body = m["main"].body
    assert isinstance(body, Let) and isinstance(body.value, RefWrite)
    assert body.value.ref is body.body.ref and isinstance(body.body.ref, RefCreate)


# ----------------------------------------------------------------------------- types
@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                  "uint32", "uint64", "float16", "float32", "float64", "bool"])
def test_scalar_dtypes(name):
    assert parse_type(name) == TensorType((), name)
    e = parse_expr(f"let %_: {name} = (); ()")
    assert e.var.type_annotation == TensorType((), name)


@pytest.mark.parametrize("name", ["int8x4", "uint1x4", "float16x4"])
def test_vector_dtypes_are_refused(name):
    with pytest.raises(ParseError, match="vector dtype|unknown dtype"):
        parse_type(name)


def test_tensor_types():
    assert parse_type("Tensor[(), float32]") == TensorType((), "float32")
    assert parse_type("Tensor[(1), float32]") == TensorType((1,), "float32")
    assert parse_type("Tensor[(1,), float32]") == TensorType((1,), "float32")
    assert parse_type("Tensor[(1, 1), float32]") == TensorType((1, 1), "float32")
    assert parse_type("Tensor[(?, 1), float32]") == TensorType((ANY, 1), "float32")
    assert parse_type("Tensor[(2, 3), uint8]") == TensorType((2, 3), "uint8")


def test_function_tuple_ref_incomplete_types():
    i32 = scalar_type("int32")
    assert parse_type("fn () -> int32") == FuncType((), i32)
    assert parse_type("fn (int32) -> int32") == FuncType((i32,), i32)
    assert parse_type("fn (int32, int32) -> int32") == FuncType((i32, i32), i32)
    assert parse_type("()") == TupleType(())
    assert parse_type("(int32,)") == TupleType((i32,))
    assert parse_type("(int32)") == TupleType((i32,))  # as in TVM: a parenthesised 1-tuple
    assert parse_type("(int32, int32)") == TupleType((i32, i32))
    assert parse_type("ref(int32)") == RefType(i32)
    assert isinstance(parse_type("_"), IncompleteType)
    g = parse_type("fn [A](A) -> A")
    a, = g.type_params
    assert g == FuncType((a,), a, (a,))
    e = parse_expr("let %_ : _ = (); ()")
    assert e.var.type_annotation is None  # a bare `_` annotation means "none" (as in TVM)


def test_symbolic_and_polynomial_dims():
    f = parse_expr("fn [n, m](%x: Tensor[(n, 4), float32], %y: Tensor[(m), int32]) "
                   "-> Tensor[(n + m, 2*n, n*m, n - 1, -n + 4), float32] { %x }")
    n, m = f.type_params
    assert isinstance(n, ShapeVar) and isinstance(m, ShapeVar)
    assert n.name == "n" and m.name == "m"
    assert f.params[0].type_annotation == TensorType((n, 4), "float32")
    shape = f.ret_type.shape
    assert shape[0] == dim_add(n, m)
    assert shape[1] == dim_mul(2, n)
    assert shape[2] == dim_mul(n, m)
    assert shape[3] == dim_sub(n, 1)
    assert shape[4] == dim_add(dim_mul(-1, n), 4)
    assert isinstance(shape[0], DimExpr)
    g = parse_expr("fn [A, n](%x: A, %y: Tensor[(n), float32]) { %x }")
    assert isinstance(g.type_params[0], TypeVar) and isinstance(g.type_params[1], ShapeVar)


def test_def_with_shape_params():
    m = parse(H + "def @f[n](%x: Tensor[(n, 4), float32]) -> Tensor[(n,), float32] "
                  "{ sum(%x, axis=[1]) }")
    f = m["f"]
    n, = f.type_params
    assert isinstance(n, ShapeVar)
    assert f.ret_type == TensorType((n,), "float32")


# ----------------------------------------------------------------------------- modules/ADTs
def test_def_and_recursion():
    m = parse(H + "def @id(%x: int32) -> int32 { %x }")
    assert list(m.functions) == ["id"]
    f = m["id"]
    assert f.params[0].type_annotation == scalar_type("int32") and f.body is f.params[0]
    r = parse(H + "def @id(%x: int32) -> int32 { @id(%x) }")
    call = r["id"].body
    assert isinstance(call.op, GlobalVar) and call.op is r.get_global_var("id")


def test_globals_may_be_forward_referenced():
    m = parse(H + "def @f(%x: int32) -> int32 { @g(%x) }\n"
                  "def @g(%x: int32) -> int32 { @f(%x) }")
    assert m["f"].body.op is m.get_global_var("g")
    assert m["g"].body.op is m.get_global_var("f")


def test_type_definitions():
    m = parse(H + "type Ayy { Nil }")
    td = m.get_type("Ayy")
    assert td.header == GlobalTypeVar("Ayy") and td.type_params == ()
    assert [k.name_hint for k in td.constructors] == ["Nil"]
    assert parse(H + "type Ayy { }").get_type("Ayy").constructors == ()
    lst = parse(H + "type List[A] { Cons(A, List[A]), Nil, }").get_type("List")
    a, = lst.type_params
    cons, nil = lst.constructors
    assert cons.inputs == (a, TypeCall(GlobalTypeVar("List"), (a,)))
    assert nil.inputs == () and (cons.tag, nil.tag) == (0, 1)
    assert cons.belong_to == GlobalTypeVar("List")
    e = parse(H + "type Either[A, B] { Left(A), Right(B) }").get_type("Either")
    a, b = e.type_params
    assert [k.inputs for k in e.constructors] == [(a,), (b,)]
    d = parse(H + "type D { my_cons(Tensor[(?, 1), uint16]) }").get_type("D")
    assert d.constructors[0].inputs == (TensorType((ANY, 1), "uint16"),)
    n = parse(H + "type nat_ { zero, succ(nat_) }").get_type("nat_")
    assert n.constructors[1].inputs == (TypeCall(GlobalTypeVar("nat_"), ()),)
    g = parse(H + "type GradCell[T] { Raw(T), One(fn () -> T) }").get_type("GradCell")
    t, = g.type_params
    assert g.constructors[1].inputs == (FuncType((), t),)


def test_extern_type_anywhere():
    m = parse(H + "extern type T[A]\ndef @f() { 1 }\nextern type Storage\n")
    assert m.get_type("T").constructors == () and len(m.get_type("T").type_params) == 1
    assert m.get_type("Storage").constructors == ()
    assert "f" in m


def test_constructors_in_expressions():
    m = parse(H + "type List[A] { Cons(A, List[A]), Nil }\n"
                  "def @main() { Cons(1, Nil) }\n"
                  "def @nil() { Nil() }\n"
                  "def @first_class() { Cons }")
    cons, nil = m.get_type("List").constructors
    body = m["main"].body
    assert body.op is cons and isinstance(body.args[1], Call) and body.args[1].op is nil
    assert body.args[1].args == ()
    nb = m["nil"].body
    assert isinstance(nb, Call) and nb.op is nil and nb.args == ()
    assert m["first_class"].body is cons


def test_lowercase_constructor_and_graph_bound_constructor_calls():
    m = parse(H + "type Box[T] { constructor(T) }\n"
                  "def @main() { %1 = constructor(1); %2 = constructor(2); (%1, %2,) }")
    t = m["main"].body
    assert isinstance(t, Tuple) and t.fields[0].op.name_hint == "constructor"


LENGTH = """
type List[A] { Cons(A, List[A]), Nil }
def @length[A](%xs: List[A]) -> int32 {
  MATCH (%xs) {
    Cons(_, %rest : List[A]) => {
      ();
      1 + @length(%rest)
    },
    Nil => 0,
  }
}
"""


@pytest.mark.parametrize("kw,complete", [("match", True), ("match?", False)])
def test_match(kw, complete):
    m = parse(H + LENGTH.replace("MATCH", kw))
    f = m["length"]
    mt = f.body
    assert isinstance(mt, Match) and mt.complete is complete and mt.data is f.params[0]
    c1, c2 = mt.clauses
    assert isinstance(c1.lhs, PatternConstructor) and c1.lhs.constructor.name_hint == "Cons"
    wild, pv = c1.lhs.patterns
    assert isinstance(wild, PatternWildcard) and isinstance(pv, PatternVar)
    a, = f.type_params
    assert pv.var.type_annotation == TypeCall(GlobalTypeVar("List"), (a,))
    # the arm body: `(); 1 + @length(%rest)`
    assert isinstance(c1.rhs, Let) and c1.rhs.var.name_hint == ""
    assert c1.rhs.body.args[1].args[0] is pv.var
    assert isinstance(c2.lhs, PatternConstructor) and c2.lhs.patterns == ()
    assert int(c2.rhs.data) == 0


def test_nested_and_tuple_patterns():
    m = parse(H + "type List[A] { Cons(A, List[A]), Nil }\n"
                  "def @f(%p: (List[int32], int32)) {\n"
                  "  match %p { (Cons(%x, Cons(%y: int32, _)), %z) => %x + %y + %z, _ => 0 }\n"
                  "}")
    mt = m["f"].body
    pt = mt.clauses[0].lhs
    assert isinstance(pt, PatternTuple) and len(pt.patterns) == 2
    inner = pt.patterns[0].patterns[1]
    assert isinstance(inner, PatternConstructor) and inner.patterns[0].var.name_hint == "y"
    x = pt.patterns[0].patterns[0].var
    y = inner.patterns[0].var
    z = pt.patterns[1].var
    same(mt.clauses[0].rhs, opcall("add", opcall("add", x, y), z))
    assert isinstance(mt.clauses[1].lhs, PatternWildcard)


def test_match_scrutinee_tuple():
    e = parse_expr("match (1, 2) { (%a, %b) => %a + %b }")
    assert isinstance(e.data, Tuple) and len(e.data.fields) == 2
    assert e.clauses[0].rhs.args[0] is e.clauses[0].lhs.patterns[0].var


def test_match_as_let_value_in_parentheses():
    e = parse_expr("let %m = (match (1) { _ => 2 }); %m")
    assert isinstance(e.value, Match) and e.body is e.var and e.var.name_hint == "m"
    assert int(e.value.data.data) == 1 and len(e.value.clauses) == 1
    clause = e.value.clauses[0]
    assert isinstance(clause.lhs, PatternWildcard) and int(clause.rhs.data) == 2
    same(parse_expr(rly.astext(e)), e)


def test_comments():
    e = parse_expr("/* a /* nested */ comment */ 1 // line\n + /* **/ 2 /* ty=int32 */")
    same(e, opcall("add", c(1), c(2)))
    e2 = parse_expr("/* héllo ünïcode */ 3")
    assert int(e2.data) == 3


def test_whitespace_and_crlf():
    e = parse_expr("let %x = 1;\r\n%x")
    x = Var("x")
    same(e, Let(x, c(1), x))
    assert e.body is e.var
    e2 = parse_expr("let %x = 1;\r\n  negative(%x)")
    assert e2.body.span.line == 2 and e2.body.span.column == 3   # CRLF ends a line


def test_header_optional_in_parse_expr_and_checked():
    assert int(parse_expr(H + "1").data) == 1
    m = parse('  \n#[version = "0.0.5"]\n')
    assert len(m.functions) == 0


# ----------------------------------------------------------------------------- metadata
def _meta_json(arr: np.ndarray) -> str:
    b64 = base64.b64encode(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"))
                           .tobytes()).decode()
    return ('{"relay.Constant": [{"dtype": "%s", "shape": %s, "data": "%s"}]}'
            % (arr.dtype, list(arr.shape), b64))


def test_metadata_constant():
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    m = parse(H + "def @main() { meta[relay.Constant][0] }\n#[metadata]\n" + _meta_json(arr))
    k = m["main"].body
    assert isinstance(k, Constant) and k.data.dtype == np.float32
    np.testing.assert_array_equal(k.data, arr)
    i8 = np.array([[1, -2], [3, 4]], dtype="int8")
    e = parse_expr("add(meta[relay.Constant][0], meta[relay.Constant][0])\n#[metadata]\n"
                   + _meta_json(i8))
    np.testing.assert_array_equal(e.args[0].data, i8)
    assert e.args[0].data.dtype == np.int8


def test_metadata_sample_file():
    with open(os.path.join(DATA, "mlp.rly")) as f:
        m = parse(f.read(), "mlp.rly")
    consts = [n for n in rly.traversal.post_order(m["main"]) if isinstance(n, Constant)
              and n.data.ndim == 2]
    assert len(consts) == 1
    np.testing.assert_array_equal(consts[0].data, np.arange(6, dtype="float32").reshape(2, 3))


def test_metadata_parameter_and_init_module():
    arr = np.ones((2, 2), dtype="float32")
    e = parse_expr("meta[relay.Constant][0]", metadata={"relay.Constant": [arr]})
    np.testing.assert_array_equal(e.data, arr)
    base = parse(H + "type List[A] { Cons(A, List[A]), Nil }\n"
                     "def @one() -> int32 { 1 }")
    m = parse(H + "def @main() { (Cons(@one(), Nil), @one()) }", init_module=base)
    assert set(m.functions) == {"one", "main"}
    assert m.get_type("List") is base.get_type("List")
    assert m["main"].body.fields[0].op is base.get_constructor("Cons")
    assert m["main"].body.fields[1].op is base.get_global_var("one")
    e2 = parse_expr("Nil", init_module=base)
    assert e2.op is base.get_constructor("Nil")


def test_prelude_flag():
    m = parse(H + "def @main() -> int32 { @length(Cons(1, Nil)) }", prelude=True)
    assert "length" in m and "main" in m and "List" in m.type_definitions
    assert m["main"].body.op is m.get_global_var("length")


# ----------------------------------------------------------------------------- spans
def test_spans():
    text = H + "def @main(%x: int32) -> int32 {\n  let %y = add(%x, 1);\n  %y\n}\n"
    m = parse(text, "spans.rly")
    f = m["main"]
    assert f.span.source.name == "spans.rly"
    assert (f.span.line, f.span.column) == (2, 1)
    let = f.body
    assert (let.span.line, let.span.column) == (3, 3)
    call = let.value
    assert (call.span.line, call.span.column, call.span.end_line, call.span.end_column) == \
        (3, 12, 3, 22)
    assert (let.var.span.line, let.var.span.column) == (3, 7)
    assert (call.args[1].span.line, call.args[1].span.column) == (3, 20)
    assert (f.params[0].span.line, f.params[0].span.column) == (2, 11)


def test_every_node_has_a_span():
    with open(os.path.join(DATA, "adt_list.rly")) as fh:
        m = parse(fh.read(), "adt_list.rly")
    from relay_ir.traversal import post_order
    for name, fn in m.functions.items():
        for node in post_order(fn):
            if isinstance(node, (Op, GlobalVar, Constructor)):
                continue  # shared leaves
            assert node.span is not None, (name, type(node).__name__)
            assert node.span.line >= 1 and node.span.column >= 1


# ----------------------------------------------------------------------------- samples
@pytest.mark.parametrize("name,globals_,main_type", [
    ("adt_list", ["hd", "length", "main", "map"], "fn () -> int32"),
    ("mlp", ["main"], "fn (Tensor[(1, 4), float32], Tensor[(8, 4), float32], "
                      "Tensor[(8), float32], Tensor[(2, 3), float32]) -> Tensor[(1, 8), float32]"),
    ("control", ["counter", "fact", "main", "twice"], "fn () -> (int32, int32)"),
])
def test_sample_programs(name, globals_, main_type):
    from relay_ir.passes import InferType
    with open(os.path.join(DATA, f"{name}.rly")) as f:
        m = parse(f.read(), f"{name}.rly")
    assert isinstance(m, IRModule) and sorted(m.functions) == globals_
    assert rly.astext(InferType()(m)["main"].checked_type) == main_type
    assert_structural_equal(parse(rly.astext(m)), m)


def test_sample_values():
    with open(os.path.join(DATA, "control.rly")) as f:
        m = parse(f.read())
    fact = m["fact"]
    assert isinstance(fact.body, If)
    assert fact.body.cond.op is get_op("less_equal")
    twice = m["twice"]
    n, = twice.type_params
    assert twice.ret_type == TensorType((dim_mul(2, n), 4), "float32")
    assert twice.body.attrs.axis == 0
    counter = m["counter"].body
    loop_var = counter.body.var
    inner = counter.body.value.body.false_branch
    assert isinstance(inner, Let) and inner.body.op is loop_var
