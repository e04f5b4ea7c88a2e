"""Issue 8, text front end: dtypes, `_` annotations, parameter attributes, metadata references,
control bytes and BOMs in diagnostics, lowering-internal names, and the syntax-error table."""
from __future__ import annotations

import re

import pytest

import relay_ir.parser as P
from relay_ir.errors import ParseError
from relay_ir.expr import Let
from relay_ir.parser import parse, parse_expr, parse_type
from relay_ir.printer import astext
from relay_ir.structural import structural_equal
from relay_ir.tvm_metadata import MetaRef
from relay_ir.ty import TensorType

H = '#[version = "0.0.5"]\n'
KNOWN = ("bfloat16, bool, float16, float32, float64, int16, int32, int64, int8, uint16, uint32, "
         "uint64, uint8")


def _error(fn, text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        fn(text)
    return info.value


# ----------------------------------------------------------------------------- 1. unknown dtypes
@pytest.mark.parametrize("text, col, name", [
    ("Tensor[(2, 3), float33]", 16, "float33"),
    ("Tensor[(2, 3), banana]", 16, "banana"),
    ("float33", 1, "float33"),
    ("integer", 1, "integer"),
    ("(int32, uint7)", 9, "uint7"),
    ("Tensor[(1), a.b]", 13, "a.b"),
])
def test_unknown_dtype_is_a_parse_error_listing_known_dtypes(text, col, name):
    err = _error(parse_type, text)
    assert err.message.startswith(f"unknown dtype `{name}` (known dtypes: {KNOWN}")
    assert (err.span.line, err.span.column) == (1, col)
    assert err.span.end_column - err.span.column == len(name)


def test_bare_unknown_type_name_lists_known_dtypes():
    err = _error(parse, H + "def @main(%x: banana) { %x }")
    assert err.message == (f"type `banana` is not defined: it is not a type parameter in scope, "
                           f"a type definition or a dtype (known dtypes: {KNOWN})")
    assert (err.span.line, err.span.column, err.span.end_column) == (2, 15, 21)


def test_unknown_dtype_in_a_module_annotation():
    err = _error(parse, H + "def @main(%x: Tensor[(2, 3), float33]) { %x }")
    assert "unknown dtype `float33`" in err.message
    assert (err.span.line, err.span.column) == (2, 30)
    assert str(err).splitlines()[-1] == "     |" + " " * 30 + "^~~~~~~"


# ----------------------------------------------------------------------------- 2. dtype aliases
@pytest.mark.parametrize("alias, canonical", [
    ("int", "int32"), ("float", "float32"), ("uint", "uint32"), ("bool", "bool"),
    ("int0", "int32"), ("float32x1", "float32"), ("int064", "int64"), ("int8", "int8"),
])
def test_dtype_aliases_read_as_tvm_reads_them(alias, canonical):
    assert parse_type(alias) == TensorType((), canonical)
    assert parse_type(f"Tensor[(2), {alias}]") == TensorType((2,), canonical)
    f = parse_expr(f"fn (%n: {alias}) {{ %n }}")
    assert f.params[0].type_annotation == TensorType((), canonical)
    assert astext(f) == H + f"fn (%n: {canonical}) {{\n  %n\n}}"


def test_int_alias_type_checks_against_int32_literals():
    from relay_ir.passes import InferType
    m = parse(H + "def @f(%n: int) -> bool { %n == 0 }")
    m = InferType()(m)
    assert m["f"].params[0].type_annotation == TensorType((), "int32")


@pytest.mark.parametrize("text, msg", [
    ("int32x4", "vector dtype `int32x4` (4 lanes) is not supported"),
    ("Tensor[(2), float16x8]", "vector dtype `float16x8` (8 lanes)"),
    ("int8x", "invalid lanes in dtype `int8x`"),
    ("floatx", "invalid lanes in dtype `floatx`"),
    ("int8x0", "invalid lanes in dtype `int8x0`"),
    ("int33", "unknown dtype `int33`"),
    ("uint1", "unknown dtype `uint1`"),
    ("Tensor[(1), Int32]", "unknown dtype `Int32`"),
])
def test_dtypes_tvm_or_relay_ir_cannot_represent_are_refused(text, msg):
    assert msg in _error(parse_type, text).message


# ----------------------------------------------------------------------------- 3. `_` annotations
def test_underscore_annotation_means_no_annotation():
    a = parse_expr("let %_ : _ = (); ()")
    b = parse_expr("let %_ = (); ()")
    assert isinstance(a, Let) and a.var.type_annotation is None
    assert structural_equal(a, b)
    f = parse_expr("fn (%x: _, %y: (_, int32)) { match (%y) { (%a: _, _) => %x } }")
    assert f.params[0].type_annotation is None
    assert f.params[1].type_annotation is not None  # a nested `_` is an incomplete type
    assert "%x, %y: (_, int32)" in astext(f) and "(%a, _)" in astext(f)


def test_printer_keeps_underscore_names():
    e = parse_expr("let %_ : _ = (); ()")
    assert astext(e) == H + "let %_ = ();\n()"
    assert structural_equal(parse_expr(astext(e)), e)
    assert astext(parse_expr("fn (%_x) { %_x }")) == H + "fn (%_x) {\n  %_x\n}"


# ----------------------------------------------------------------------------- 5. control bytes
@pytest.mark.parametrize("raw, shown", [("\x1b", "\\x1b"), ("\x00", "\\x00"), ("\x07", "\\x07"),
                                        ("\x7f", "\\x7f")])
def test_diagnostics_escape_control_bytes_and_keep_the_caret(raw, shown):
    text = f"let %x = 1; {raw}[31m %y"
    err = _error(parse_expr, text)
    out = str(err)
    assert raw not in out
    lines = out.splitlines()
    assert lines[0] == f"<string>:1:13: parse error: unexpected character `{shown}`"
    assert lines[1] == f"   1 | let %x = 1; {shown}[31m %y"
    assert lines[2] == "     |" + " " * 13 + "^" + "~" * (len(shown) - 1)


def test_caret_after_a_control_byte_stays_under_its_token():
    err = _error(parse_expr, "let %x\x07 = 1; %zz")
    lines = str(err).splitlines()
    assert lines[1] == "   1 | let %x\\x07 = 1; %zz"
    assert lines[2].index("^") == lines[1].index("\\x07")
    err = _error(parse_expr, "free_var %a: int32; /*\x1b\x1b*/ %a + %q")
    lines = str(err).splitlines()
    assert lines[1][lines[2].index("^"):].startswith("%q")
    assert lines[2].endswith("^~")


# ----------------------------------------------------------------------------- 6. BOM
def test_a_leading_byte_order_mark_is_accepted():
    m = parse("\ufeff" + H + "def @main() { 1 }")
    assert structural_equal(m, parse(H + "def @main() { 1 }"))
    # NOTE: the BOM is dropped before lexing, so columns on line 1 count from after it
    err = _error(parse_expr, "\ufefflet %x = 1; %y")
    assert (err.span.line, err.span.column) == (1, 13)
    assert "\ufeff" not in str(err)


# ----------------------------------------------------------------------------- 7. names and `%`
def test_undefined_constructor_is_constructor_or_operator():
    err = _error(parse, H + "def @f() { Cons(1) }")
    assert err.message.startswith("constructor or operator `Cons` not found")
    assert (err.span.line, err.span.column) == (2, 12)
    assert _error(parse_expr, "ad(1, 2)").message == (
        "constructor or operator `ad` not found (did you mean `add`?)")
    assert _error(parse_expr, "nn.nope(1)").message.startswith("operator `nn.nope` not found")


def test_percent_operator_hints_at_mod():
    err = _error(parse_expr, "free_var %i: int32; %i % 2")
    assert "`mod(a, b)`" in err.message and "`floor_mod(a, b)`" in err.message
    assert (err.span.line, err.span.column) == (1, 24)


# ----------------------------------------------------------------------------- 8. lowering names
@pytest.mark.parametrize("name", ["memory.alloc_storage", "memory.kill", "vm.invoke_tvm_op",
                                  "vm.shape_of"])
def test_lowering_internal_ops_are_named(name):
    err = _error(parse_expr, f"{name}(1)")
    assert err.message == (f"operator `{name}` is internal to TVM's lowering (memory planning "
                           f"and the VM); relay_ir programs cannot use it")
    assert err.span.end_column - err.span.column == len(name)


def test_storage_type_is_named_as_lowering_internal():
    err = _error(parse, H + "def @f(%s: Storage) { %s }")
    assert err.message.startswith("type `Storage` is internal to TVM's lowering")
    assert (err.span.line, err.span.column) == (2, 12)


# ----------------------------------------------------------------------------- 10. error table
SYNTAX_SAMPLES = [
    "1 $ 2", "let %x = 1;\r %x", "1 #[foo]", "1 #[foo\n", "1 # 2", '"abc', "1 + é", "let %é = 1; 1",
    "1 + % 2", "@ 1", "let %x = -1; negative(- 1)", "free_var %x: int32; %x -1",
    "let @f = 1; 1", "let 1 = 1; 1", "let %m = match (1) { _ => 1 }; %m", "let %m = match? (1) { _ => 1 }; %m",
    "let %b = { 1 }; %b", "fn (%x) %x", "if (True) { 1 } 2", "%x = 1; %x", "(1, 2]",
    "let %x = 1; %x; }", "1;;", "let %x = 1 2", "1 2", "{ 1", "if (True) { 1 }", "1;",
    "(1 +", "1 +", "let %x = (1, 2) %x",
]
MODULE_SAMPLES = [H + "extern type Foo { A }", H + "def @f() { 1 }\n#[foo]"]


def test_every_syntax_error_rule_is_reachable():
    seen: set[str] = set()
    for text in SYNTAX_SAMPLES:
        seen.add(_error(parse_expr, text).message)
    for text in MODULE_SAMPLES:
        seen.add(_error(parse, text).message)
    templates = ([m for _, m in P._CHAR_RULES]
                 + [r.message for r in P._TOKEN_RULES + P._END_RULES if not r.brackets])
    for tpl in templates:
        pattern = re.escape(tpl)
        pattern = re.sub(r"\\\{\\\{|\\\}\\\}", lambda m: m.group()[:2], pattern)
        pattern = re.sub(r"\\\{[a-z]+\\\}|\{[a-z]+\}", ".*", pattern)
        assert any(re.fullmatch(pattern, m, re.S) for m in seen), tpl
    assert any("is still open" in m for m in seen) and any("unmatched" in m for m in seen)
    assert any(m.startswith("unclosed `{`") for m in seen)


# ----------------------------------------------------------------------------- 4. attributes
VD = ('#[metadata]\n{"VirtualDevice": [{"device_type_int": 1, "virtual_device_id": 0, '
      '"memory_scope": ""}, {"device_type_int": 2, "virtual_device_id": 0, '
      '"memory_scope": "global"}]}\n')
PARAM_ATTRS = (H + "def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32], "
               "%y {}: float32, %z {a=1, b=\"s\"}, virtual_device=meta[VirtualDevice][1]) {\n"
               "  add(%x, %y)\n}\n" + VD)


def test_parameter_attributes_are_kept_on_the_var():
    f = parse(PARAM_ATTRS)["main"]
    x, y, z = f.params
    ref = x.attrs["virtual_device"]
    assert isinstance(ref, MetaRef) and (ref.key, ref.index) == ("VirtualDevice", 0)
    assert ref.value == {"device_type_int": 1, "virtual_device_id": 0, "memory_scope": ""}
    assert x.type_annotation == TensorType((2,), "float32")
    assert not y.attrs and y.type_annotation == TensorType((), "float32")
    assert dict(z.attrs) == {"a": 1, "b": "s"} and z.type_annotation is None
    assert f.attrs["virtual_device"].value["memory_scope"] == "global"


def test_parameter_attributes_and_metadata_refs_print_back():
    m = parse(PARAM_ATTRS)
    text = astext(m)
    assert text.splitlines()[1] == (
        "def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32], "
        "%y: float32, %z {a=1, b=\"s\"}, virtual_device=meta[VirtualDevice][1]) {")
    assert text.endswith(
        '#[metadata]\n{\n  "VirtualDevice": [\n'
        '    {"device_type_int": 1, "virtual_device_id": 0, "memory_scope": ""},\n'
        '    {"device_type_int": 2, "virtual_device_id": 0, "memory_scope": "global"}\n'
        '  ]\n}\n')
    again = parse(text)
    assert structural_equal(again, m) and astext(again) == text
    assert again["main"].params[0].attrs == m["main"].params[0].attrs


def test_var_attrs_are_not_compared_structurally():
    # NOTE: the documented choice: like spans, parameter attributes are annotations
    a = parse_expr("fn (%x {virtual_device=meta[VirtualDevice][0]}) { %x }\n" + VD)
    b = parse_expr("fn (%x) { %x }")
    assert structural_equal(a, b)
    from relay_ir.structural import structural_hash
    assert structural_hash(a) == structural_hash(b)


def test_metadata_refs_in_call_attrs_print_back_with_their_index():
    text = (H + "def @f(%x: int32) { %x }\n"
            "def @main() { @f(1, attrs_type_key=\"DictAttrs\", "
            "virtual_device=meta[VirtualDevice][1]) }\n" + VD)
    m = parse(text)
    call = m["main"].body
    assert call.attrs["virtual_device"] == MetaRef("VirtualDevice", 1)
    out = astext(m)
    assert "virtual_device=meta[VirtualDevice][1])" in out
    # the unreferenced slot 0 is kept as null so that the index stays right
    assert '"VirtualDevice": [\n    null,\n    {"device_type_int": 2' in out
    assert structural_equal(parse(out), m)


@pytest.mark.parametrize("text, msg", [
    ("fn (%x {vd=meta[VirtualDevice][0]}) { %x }", "there is none"),
    ("fn (%x {vd=meta[VirtualDevice][2]}) { %x }\n" + VD, "out of range"),
    ("fn (%x {vd=meta[Target][0]}) { %x }\n" + VD, "no `Target` entries"),
    ("fn (%x {vd=meta[relay.Constant][0]}) { %x }\n" + VD, "cannot be an attribute value"),
    ("fn (%x {a=1, a=2}) { %x }", "attribute `a` is given twice"),
    ("fn (%x {a}) { %x }", "unexpected"),
])
def test_bad_parameter_attributes(text, msg):
    assert msg in _error(parse_expr, text).message


def test_tvm_metadata_virtual_devices_are_read():
    # NOTE: the object-graph JSON layout TVM's printer writes (String nodes for the scope)
    meta = ('{"root": 1, "nodes": [{"type_key": ""}, '
            '{"type_key": "Map", "keys": ["VirtualDevice"], "data": [2]}, '
            '{"type_key": "Array", "data": [3]}, '
            '{"type_key": "VirtualDevice", "attrs": {"device_type_int": "2", '
            '"virtual_device_id": "1", "target": "0", "memory_scope": "4"}}, '
            '{"type_key": "runtime.String", "repr_str": "global"}], '
            '"b64ndarrays": [], "attrs": {"tvm_version": "0.9.0"}}')
    f = parse_expr("fn (%x {virtual_device=meta[VirtualDevice][0]}) { %x }\n#[metadata]\n" + meta)
    assert f.params[0].attrs["virtual_device"].value == {
        "device_type_int": 2, "virtual_device_id": 1, "memory_scope": "global"}


# ----------------------------------------------------------------------------- 9. negative zero
def test_printer_keeps_the_sign_of_negative_zero():
    import numpy as np
    from relay_ir.expr import const
    for dtype, suffix in (("float32", "f"), ("float16", "f16"), ("float64", "f64")):
        text = astext(const(np.array(-0.0, dtype=dtype)))
        assert text == H + f"-0{suffix}"
        back = parse_expr(text).data
        assert back.dtype == dtype and float(back) == 0.0 and np.signbit(back)


def test_only_parameters_print_their_attributes():
    from relay_ir.attrs import Attrs
    from relay_ir.expr import Function, Let, Tuple, Var
    a = Var("a", attrs=Attrs({"k": 1}))
    b = Var("b", attrs=Attrs({"k": 2}))
    f = Function((a,), Let(b, a, b))
    # NOTE: the text format has attribute syntax for parameters only; a let binder's are dropped
    assert astext(f) == H + "fn (%a {k=1}) {\n  let %b = %a;\n  %b\n}"
    assert astext(Tuple((b,))) == H + "free_var %b;\n(%b,)"


def test_messages_and_notes_never_carry_raw_control_bytes():
    from relay_ir.errors import DiagnosticError
    err = DiagnosticError("bad `\x1b[2J`", None, notes=("see \x07 here",))
    assert str(err) == "bad `\\x1b[2J`\nnote: see \\x07 here"
