"""The canonical printer: exact text for every layout rule (RELAY_TEXT_FORMAT.md section 8).

IR is built by hand here so that these tests pin the printer alone; round trips through the
parser live in test_roundtrip.py.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from relay_ir.attrs import Attrs
from relay_ir.expr import (Call, Clause, Constant, Constructor, Function, GlobalVar, If, Let,
                           Match, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, const)
from relay_ir.module import IRModule
from relay_ir.op import get_op, get_opdef
from relay_ir.printer import astext, format_float, scalar_literal
from relay_ir.span import SourceFile, Span
from relay_ir.traversal import build_lets
from relay_ir.ty import (ANY, FuncType, GlobalTypeVar, IncompleteType, RefType, ShapeVar,
                         TensorType, TupleType, TypeCall, TypeData, TypeVar, dim_add, dim_mul,
                         scalar_type)
from util_scale import shallow_stack, sizes

H = '#[version = "0.0.5"]\n'
F32 = scalar_type("float32")


def call(name: str, *args, **attrs) -> Call:  # type: ignore[no-untyped-def]
    opdef = get_opdef(name)
    return Call(opdef.op, tuple(args), opdef.make_attrs(attrs))


def body_of(text: str) -> str:
    assert text.startswith(H)
    return text[len(H):]


# ----------------------------------------------------------------------------- scalars
@pytest.mark.parametrize("value,dtype,text", [
    (42, "int16", "42i16"), (42, "int32", "42"), (42, "int64", "42i64"),
    (3, "float16", "3f16"), (3, "float32", "3f"), (3, "float64", "3f64"),
    (True, "bool", "True"), (False, "bool", "False"),
    (-7, "int32", "-7"), (-3, "float32", "-3f"), (-0.0, "float32", "-0f"),
    (0.1, "float32", "0.1f"), (0.1, "float64", "0.1f64"), (1e11, "float32", "1e+11f"),
    (2.5e-8, "float32", "2.5e-08f"), (1e-45, "float32", "1e-45f"),
    (65504, "float16", "65500f16"), (float("inf"), "float32", "inff"),
    (-float("inf"), "float64", "-inff64"), (float("inf"), "float16", "inff16"),
    (2**31, "int64", "2147483648i64"), (-2**63, "int64", "-9223372036854775808i64"),
    (-32768, "int16", "-32768i16"), (1 / 3, "float64", "0.3333333333333333f64"),
])
def test_scalar_spellings(value: object, dtype: str, text: str) -> None:
    assert astext(const(value, dtype)) == H + text


@pytest.mark.parametrize("width,bits", [(16, np.uint16), (32, np.uint32), (64, np.uint64)])
def test_float_text_reads_back_exactly(width: int, bits: type) -> None:
    rng = np.random.default_rng(width)
    ftype = np.dtype(f"float{width}").type
    raw = rng.integers(0, np.iinfo(bits).max, size=3000, dtype=bits, endpoint=True)
    values = raw.view(f"float{width}")
    values = values[np.isfinite(values)]
    for v in values:
        text = format_float(v, f"float{width}")
        digits = text.lstrip("-").split("e")[0].replace(".", "").strip("0")
        assert len(digits) <= 17, text
        back = ftype(float(text))
        assert back.tobytes() == ftype(v).tobytes(), (v, text)


def test_constants_without_literal_form_go_to_metadata() -> None:
    assert scalar_literal(np.asarray(np.nan, "float32")) is None
    assert scalar_literal(np.asarray(3, "int8")) is None
    assert scalar_literal(np.zeros((1,), "float32")) is None
    x = Var("x", F32)
    c = Constant(np.arange(6, dtype="float32").reshape(2, 3))
    e = Function((x,), call("add", call("add", x, c), c))
    text = astext(e)
    assert text == H + (
        "fn (%x: float32) {\n"
        "  %0 = add(%x, meta[relay.Constant][0]);\n"
        "  add(%0, meta[relay.Constant][0])\n"
        "}\n"
        "#[metadata]\n"
        "{\n"
        '  "relay.Constant": [\n'
        '    {"dtype": "float32", "shape": [2, 3], '
        '"data": "AAAAAAAAgD8AAABAAABAQAAAgEAAAKBA"}\n'
        "  ]\n"
        "}")
    short = astext(e, show_meta_data=False)
    assert "#[metadata]" not in short and "relay.Constant\": [" not in short
    assert short.endswith("/* meta data section omitted: 1 constant */")
    nan = astext(Tuple((const(float("nan")), Constant(np.asarray(3, "uint8")))))
    assert body_of(nan).startswith("(meta[relay.Constant][0], meta[relay.Constant][1])\n")
    assert '"dtype": "float32", "shape": [], "data": "AADAfw=="' in nan
    assert '"dtype": "uint8", "shape": [], "data": "Aw=="' in nan


# ----------------------------------------------------------------------------- layout
def test_call_node_order() -> None:
    x, y = Var("x"), Var("y")
    prog = Call(Function((x,), x), (Call(Function((y,), y), (const(1),)),))
    assert astext(prog) == H + (
        "%0 = fn (%y) {\n"
        "  %y\n"
        "};\n"
        "%1 = %0(1);\n"
        "%2 = fn (%x) {\n"
        "  %x\n"
        "};\n"
        "%2(%1)")


def test_let_inlining() -> None:
    tup = Tuple((const(0), const(0)))
    x = Var("x")
    assert astext(Let(x, tup, tup)) == H + "%0 = (0, 0);\nlet %x = %0;\n%0"
    assert astext(Let(x, tup, x)) == H + "let %x = (0, 0);\n%x"


def test_graph_form_hoists_dataflow_and_shares() -> None:
    x = Var("x", F32)
    inner = call("multiply", x, const(2.0))
    assert astext(call("add", inner, const(1.0))) == H + (
        "free_var %x: float32;\n"
        "%0 = multiply(%x, 2f);\n"
        "add(%0, 1f)")
    a = call("add", x, x)
    mod = IRModule({"myf": Function((x,), call("add", a, a), F32)})
    assert astext(mod) == H + (
        "def @myf(%x: float32) -> float32 {\n"
        "  %0 = add(%x, %x);\n"
        "  add(%0, %0)\n"
        "}\n")


def test_names_and_temps_restart_per_def_and_scopes_get_their_own_lines() -> None:
    x, y = Var("x", F32), Var("y")
    f = Function((y,), call("negative", call("exp", y)))
    g = Function((y,), call("log", call("exp", y)))
    mod = IRModule({"b": Function((x,), Call(f, (call("exp", x),))),
                    "a": Function((x,), Call(g, (x,)))})
    assert astext(mod) == H + (
        "def @a(%x: float32) {\n"
        "  %1 = fn (%y) {\n"
        "    %0 = exp(%y);\n"
        "    log(%0)\n"
        "  };\n"
        "  %1(%x)\n"
        "}\n"
        "\n"
        "def @b(%x: float32) {\n"
        "  %0 = exp(%x);\n"
        "  %2 = fn (%y) {\n"
        "    %1 = exp(%y);\n"
        "    negative(%1)\n"
        "  };\n"
        "  %2(%0)\n"
        "}\n")


def test_shared_node_is_hoisted_to_the_block_enclosing_all_uses() -> None:
    x = Var("x", F32)
    shared = call("exp", x)
    branch = If(call("less", x, const(0.0)), call("negative", shared), call("log", shared))
    assert body_of(astext(Function((x,), branch))) == (
        "fn (%x: float32) {\n"
        "  %0 = less(%x, 0f);\n"
        "  %1 = exp(%x);\n"
        "  if (%0) {\n"
        "    negative(%1)\n"
        "  } else {\n"
        "    log(%1)\n"
        "  }\n"
        "}")
    # used in two sibling closures: bound once, before both
    y = Var("y")
    f1, f2 = Function((y,), call("add", y, shared)), Function((), shared)
    text = body_of(astext(Function((x,), Tuple((f1, f2)))))
    assert text == (
        "fn (%x: float32) {\n"
        "  %0 = exp(%x);\n"
        "  %1 = fn (%y) {\n"
        "    add(%y, %0)\n"
        "  };\n"
        "  %2 = fn () {\n"
        "    %0\n"
        "  };\n"
        "  (%1, %2)\n"
        "}")


def test_let_chains_sequences_and_paren_lets() -> None:
    x, y, z = Var("x", F32), Var("y"), Var("")
    e = Let(x, const(1.0), Let(z, RefCreate(x), Let(y, call("add", x, x), Tuple((x, y)))))
    assert body_of(astext(e)) == (
        "let %x: float32 = 1f;\n"
        "ref(%x);\n"
        "let %y = add(%x, %x);\n"
        "(%x, %y)")
    inner = Let(y, call("exp", x), call("log", y))
    e2 = Let(x, const(2.0), call("add", inner, inner))
    assert body_of(astext(e2)) == (
        "let %x: float32 = 2f;\n"
        "%0 = (\n"
        "  let %y = exp(%x);\n"
        "  log(%y)\n"
        ");\n"
        "add(%0, %0)")
    # a let as a let value is parenthesised; its hoisted lines stay inside
    v = Var("v")
    e3 = Let(v, Let(y, call("exp", call("exp", x)), y), v)
    assert body_of(astext(Function((x,), e3))) == (
        "fn (%x: float32) {\n"
        "  let %v = (\n"
        "    %0 = exp(%x);\n"
        "    let %y = exp(%0);\n"
        "    %y\n"
        "  );\n"
        "  %v\n"
        "}")


def test_anonymous_binder_that_is_used_gets_a_name() -> None:
    v = Var("")
    assert body_of(astext(Let(v, const(1), Tuple((v, v))))) == "let %v = 1;\n(%v, %v)"


def test_function_with_if_and_lets_named_twice() -> None:
    cond = Var("cond", scalar_type("bool"))
    v1, v2, v3 = Var("v"), Var("v"), Var("v")
    a = Var("a", F32)
    f = Function((cond, a), If(cond, Let(v1, call("add", a, a), v1),
                               Let(v2, call("multiply", a, a), Let(v3, call("exp", v2), v3))))
    text = body_of(astext(f))
    assert text == (
        "fn (%cond: bool, %a: float32) {\n"
        "  if (%cond) {\n"
        "    let %v = add(%a, %a);\n"
        "    %v\n"
        "  } else {\n"
        "    let %v1 = multiply(%a, %a);\n"
        "    let %v2 = exp(%v1);\n"
        "    %v2\n"
        "  }\n"
        "}")
    assert text.count("{") == 3


def test_variable_names() -> None:
    vs = [Var("1"), Var("base/x"), Var("x"), Var("x"), Var("x1"), Var("_t"), Var("a.b"), Var("")]
    text = astext(Tuple(tuple(vs)))
    decls = ["free_var %v1;", "free_var %base/x;", "free_var %x;", "free_var %x1;",
             "free_var %x11;", "free_var %_t;", "free_var %a_b;", "free_var %v;"]
    assert text == H + "\n".join(decls) + "\n(%v1, %base/x, %x, %x1, %x11, %_t, %a_b, %v)"


def test_projection_references_and_tuples() -> None:
    t = Var("t")
    e = Tuple((TupleGetItem(t, 1), TupleGetItem(Tuple((t,)), 0), Tuple(()),
               TupleGetItem(const(1), 0)))
    assert body_of(astext(e)) == (
        "free_var %t;\n"
        "%0 = %t.1;\n"
        "%1 = (%t,);\n"
        "%2 = %1.0;\n"
        "%3 = ();\n"
        "%4 = (1).0;\n"
        "(%0, %2, %3, %4)")
    r = Var("r")
    refs = Let(r, RefCreate(const(1)), RefWrite(r, call("add", RefRead(r), const(1))))
    assert body_of(astext(refs)) == (
        "let %r = ref(1);\n"
        "%0 = ref_read(%r);\n"
        "%1 = add(%0, 1);\n"
        "ref_write(%r, %1)")


# ----------------------------------------------------------------------------- attributes
def test_only_non_default_attributes_are_printed() -> None:
    x = Var("x", TensorType((2, 3, 4), "float32"))
    cases = [
        (call("nn.softmax", x), "nn.softmax(%x)"),
        (call("nn.softmax", x, axis=2), "nn.softmax(%x, axis=2)"),
        (call("nn.softmax", x, axis=-1), "nn.softmax(%x)"),
        (call("expand_dims", x, axis=0, num_newaxis=2), "expand_dims(%x, axis=0, num_newaxis=2)"),
        (call("sum", x, keepdims=True, axis=[1, 2]), "sum(%x, axis=[1, 2], keepdims=True)"),
        (call("clip", x, a_min=0.0, a_max=6.0), "clip(%x, a_min=0f, a_max=6f)"),
        (call("clip", x, a_min=0.1, a_max=1e300), "clip(%x, a_min=0.1f, a_max=1e+300f64)"),
        (call("cast", x, dtype="int8"), 'cast(%x, dtype="int8")'),
        (call("zeros", shape=[]), "zeros(shape=[])"),
        (call("take", x, x, mode="fast"), 'take(%x, %x, mode="fast")'),
        (call("nn.conv2d", x, x, channels=2, kernel_size=[3, 3], padding=[1, 1, 1, 1]),
         "nn.conv2d(%x, %x, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3])"),
    ]
    for e, expected in cases:
        assert astext(e).splitlines()[-1] == expected


def test_function_attributes_and_non_op_call_attributes() -> None:
    x = Var("x")
    f = Function((x,), x, attrs=Attrs({"Primitive": 1, "TestAttribute": None,
                                       "Composite": "foo"}))
    assert body_of(astext(f)) == (
        'fn (%x, Primitive=1, TestAttribute=None, Composite="foo") {\n  %x\n}')
    g = GlobalVar("g")
    c = Call(g, (const(1),), Attrs({"level": 2, "ratio": 0.5, "on": True}, "DictAttrs"))
    assert body_of(astext(c)) == '@g(1, attrs_type_key="DictAttrs", level=2, ratio=0.5f, on=True)'


# ----------------------------------------------------------------------------- types
def test_types() -> None:
    A, n, m = TypeVar("A"), ShapeVar("n"), ShapeVar("m")
    lst = GlobalTypeVar("List")
    cases = [
        (F32, "float32"), (TensorType((), "bfloat16"), "Tensor[(), bfloat16]"),
        (TensorType((3,), "float32"), "Tensor[(3), float32]"),
        (TensorType((ANY, 4), "float32"), "Tensor[(?, 4), float32]"),
        (TensorType((n, 4), "int8"), "Tensor[(n, 4), int8]"),
        (TensorType((dim_add(n, 1), dim_mul(2, n), dim_mul(n, m)), "float32"),
         "Tensor[(n + 1, 2*n, m*n), float32]"),
        (TupleType(()), "()"), (TupleType((F32,)), "(float32,)"),
        (TupleType((F32, scalar_type("bool"))), "(float32, bool)"),
        (FuncType((A, F32), A), "fn (A, float32) -> A"),
        (FuncType((), TupleType(())), "fn () -> ()"),
        (FuncType((A,), A, (A,)), "fn [A](A) -> A"),
        (TypeCall(lst, (A,)), "List[A]"), (lst, "List"),
        (RefType(F32), "ref(float32)"), (IncompleteType(), "_"),
    ]
    for ty, text in cases:
        assert astext(ty) == text
    # a nested binder with a name already in scope is renamed; so are dtype-like names
    inner = FuncType((A,), A, (A,))
    A2 = TypeVar("A")
    assert astext(FuncType((inner, A2), A2, (A2,))) == "fn [A](fn [A1](A1) -> A1, A) -> A"
    bad = TypeVar("int8")
    assert astext(FuncType((bad,), bad, (bad,))) == "fn [Tint8](Tint8) -> Tint8"


def test_shape_parameters_on_functions() -> None:
    n = ShapeVar("n")
    x = Var("x", TensorType((n, 4), "float32"))
    f = Function((x,), call("sum", x, axis=[1]), TensorType((n,), "float32"), (n,))
    assert body_of(astext(IRModule({"f": f}))) == (
        "def @f[n](%x: Tensor[(n, 4), float32]) -> Tensor[(n), float32] {\n"
        "  sum(%x, axis=[1])\n"
        "}\n")


def test_show_types() -> None:
    i32 = scalar_type("int32")
    one = Constant(np.asarray(1, "int32"), checked_type_=i32)
    one2 = Constant(np.asarray(1, "int32"), checked_type_=i32)
    e = Call(get_op("add"), (one, one2), get_opdef("add").make_attrs({}), checked_type_=i32)
    text = astext(e, show_types=True)
    assert body_of(text) == "add(1 /* ty=int32 */, 1 /* ty=int32 */) /* ty=int32 */"
    assert text.count("/* ty=int32 */") == 3
    assert astext(e) == H + "add(1, 1)"
    src = SourceFile("m.rly", "add(1, 1)")
    at = Constant(np.asarray(1, "int32"), checked_type_=i32, span=Span(src, 1, 5, 1, 6))
    assert astext(at, show_types=True) == H + "1 /* ty=int32 span=m.rly:1:5 */"
    x = Var("x", F32)
    a = Call(get_op("add"), (x, x), get_opdef("add").make_attrs({}), checked_type_=F32)
    b = Call(get_op("add"), (a, a), get_opdef("add").make_attrs({}), checked_type_=F32)
    text = astext(IRModule({"main": Function((x,), b, F32)}), show_types=True)
    assert "  %0 = add(%x, %x) /* ty=float32 */;\n  add(%0, %0) /* ty=float32 */\n" in text


# ----------------------------------------------------------------------------- ADTs
def _list_adt() -> tuple[TypeData, Constructor, Constructor, TypeVar]:
    A = TypeVar("A")
    lst = GlobalTypeVar("List")
    cons = Constructor("Cons", (A, TypeCall(lst, (A,))), lst, 0)
    nil = Constructor("Nil", (), lst, 1)
    return TypeData(lst, (A,), (cons, nil)), cons, nil, A


def test_patterns() -> None:
    _, cons, nil, _ = _list_adt()
    h, t = Var("h"), Var("t", F32)
    assert astext(PatternWildcard()) == "_"
    assert astext(PatternVar(t)) == "%t: float32"
    assert astext(PatternConstructor(nil)) == "Nil"
    assert astext(PatternConstructor(cons, (PatternVar(h), PatternWildcard()))) == "Cons(%h, _)"
    nested = PatternTuple((PatternConstructor(cons, (PatternVar(h), PatternConstructor(nil))),
                           PatternTuple((PatternVar(t),)), PatternTuple(())))
    assert astext(nested) == "(Cons(%h, Nil), (%t: float32,), ())"


def test_module_with_adts_match_and_constructors() -> None:
    td, cons, nil, A = _list_adt()
    B = TypeVar("B")
    opt = GlobalTypeVar("Option")
    some = Constructor("Some", (B,), opt, 0)
    none = Constructor("None", (), opt, 1)
    opt_td = TypeData(opt, (B,), (some, none))
    unit = TypeData(GlobalTypeVar("Empty"), (), ())
    A2 = TypeVar("A")
    l, h, t = Var("l", TypeCall(td.header, (A2,))), Var("h"), Var("t")
    hd = Function((l,), Match(l, (
        Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))), Call(some, (h,))),
        Clause(PatternWildcard(), Call(none, ())),
    ), complete=False), TypeCall(opt, (A2,)), (A2,))
    A3 = TypeVar("A")
    ctor_fn = Function((), cons, FuncType((A3, TypeCall(td.header, (A3,))),
                                           TypeCall(td.header, (A3,))), (A3,))
    x = Var("x")
    main = Function((x,), Call(GlobalVar("hd"), (Call(cons, (x, Call(nil, ()))),)))
    mod = IRModule({"main": main, "hd": hd, "ctor": ctor_fn},
                   {"List": td, "Option": opt_td, "Empty": unit})
    assert astext(mod) == H + (
        "type Empty {\n"
        "}\n"
        "\n"
        "type List[A] {\n"
        "  Cons(A, List[A]),\n"
        "  Nil,\n"
        "}\n"
        "\n"
        "type Option[B] {\n"
        "  Some(B),\n"
        "  None,\n"
        "}\n"
        "\n"
        "def @ctor[A]() -> fn (A, List[A]) -> List[A] {\n"
        "  Cons\n"
        "}\n"
        "\n"
        "def @hd[A](%l: List[A]) -> Option[A] {\n"
        "  match? (%l) {\n"
        "    Cons(%h, %t) => {\n"
        "      Some(%h)\n"
        "    },\n"
        "    _ => {\n"
        "      None\n"
        "    },\n"
        "  }\n"
        "}\n"
        "\n"
        "def @main(%x) {\n"
        "  %0 = Cons(%x, Nil);\n"
        "  @hd(%0)\n"
        "}\n")


def test_match_as_value_is_parenthesised_and_arms_are_blocks() -> None:
    _, cons, nil, _ = _list_adt()
    x, m, h = Var("x"), Var("m"), Var("h")
    mt = Match(x, (Clause(PatternConstructor(cons, (PatternVar(h), PatternWildcard())),
                          Let(Var("y"), call("exp", h), call("log", call("exp", h)))),
                   Clause(PatternConstructor(nil), const(0.0))))
    e = Function((x,), Let(m, mt, Tuple((m, mt))))
    assert body_of(astext(e)) == (
        "fn (%x) {\n"
        "  %1 = (match (%x) {\n"
        "    Cons(%h, _) => {\n"
        "      let %y = exp(%h);\n"
        "      %0 = exp(%h);\n"
        "      log(%0)\n"
        "    },\n"
        "    Nil => {\n"
        "      0f\n"
        "    },\n"
        "  });\n"
        "  let %m = %1;\n"
        "  (%m, %1)\n"
        "}")


# ----------------------------------------------------------------------------- deep programs
@sizes(3_000, 100_000)
def test_long_let_chain_and_dataflow_chain_print_iteratively(n: int) -> None:
    assert sys.getrecursionlimit() <= 1000
    x = Var("x", F32)
    bindings, prev = [], x
    add, one = get_opdef("add"), const(1.0)
    attrs = add.make_attrs({})
    for i in range(n):
        v = Var("v")
        bindings.append((v, Call(add.op, (prev, one), attrs)))
        prev = v
    with shallow_stack():
        text = astext(Function((x,), build_lets(bindings, prev)))
    lines = text.splitlines()
    assert len(lines) == n + 4
    assert lines[2] == "  let %v = add(%x, 1f);"
    assert lines[3] == "  let %v1 = add(%v, 1f);"
    assert lines[-2] == f"  %v{n - 1}"
    e: object = x
    exp = get_opdef("exp")
    attrs = exp.make_attrs({})
    for _ in range(n):
        e = Call(exp.op, (e,), attrs)
    with shallow_stack():
        lines = astext(e).splitlines()
    assert len(lines) == n + 2
    assert lines[2] == "%0 = exp(%x);" and lines[-2] == f"%{n - 2} = exp(%{n - 3});"
    assert lines[-1] == f"exp(%{n - 2})"
