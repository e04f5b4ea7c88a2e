"""Every rejection of RELAY_TEXT_FORMAT.md section 9: a ParseError at the right place."""
from __future__ import annotations

import pytest

from relay_ir.errors import DiagnosticError, ParseError
from relay_ir.parser import parse, parse_expr, parse_type

H = '#[version = "0.0.5"]\n'

# (text, line, column, message substring) -- parsed with parse_expr
EXPR_ERRORS = [
    ("1.5", 1, 1, "need an `f` suffix"),
    ("1e10", 1, 1, "need an `f` suffix"),
    ("1.2.3", 1, 1, "malformed number"),
    ("2-1", 1, 1, "malformed number"),
    ("let %x = 1+2; %x", 1, 10, "malformed number"),
    ("2147483648i32", 1, 1, "does not fit in int32"),
    ("32768i16", 1, 1, "does not fit in int16"),
    ("99999999999999999999", 1, 1, "does not fit in int64"),
    ("65505f16", 1, 1, "out of range for float16"),
    ("3.40283e+38f32", 1, 1, "out of range for float32"),
    ("5i8", 1, 1, "unrecognized int scalar width"),
    ("5f8", 1, 1, "unrecognized float scalar width"),
    ("5u8", 1, 1, "invalid numeric suffix"),
    ("-%x", 1, 1, "unary minus is not supported"),
    ("-(1)", 1, 1, "unary minus is not supported"),
    ("free_var %x: int32; %x -1", 1, 24, "negative literal"),
    ("free_var %x: int32;\n%x-1", 2, 3, "negative literal"),
    ("let @x = 1; ()", 1, 5, "not globals"),
    ("let x = 1; ()", 1, 5, "expected a local variable"),
    ("let %x = 1\n%x", 2, 1, "`;`"),
    ("fn (%x) %x", 1, 9, "need braces"),
    ("fn (%x) -> int32 %x", 1, 18, "unexpected `%x`"),
    ("if (True) 1 else { 2 }", 1, 11, "need braces"),
    ("if (True) { 1 } else 2", 1, 22, "need braces"),
    ("if (True) { 1 }", 1, 15, "`else`"),
    ("if (True) { 1 } 2", 1, 17, "`else`"),
    ("(1, 2", 1, 1, "unclosed `(`"),
    ("{ 1", 1, 1, "unclosed `{`"),
    ("fn () {\n  (1, 2)\n", 1, 7, "unclosed `{`"),
    ("let %x = 1; %x; }", 1, 17, "unmatched `}`"),
    ("(1, 2]", 1, 6, "`(` at 1:1 is still open"),
    ("free_var %t: (int32, (int32, int32)); %t.0.1", 1, 42, "invalid tuple index"),
    ("let %m = match (1) { _ => 1 }; %m", 1, 10, "wrap it in parentheses"),
    ("%y", 1, 1, "has not been previously declared"),
    ("let %x = 1;\n%z", 2, 1, "has not been previously declared"),
    ("if (True) { let %x = 1; %x } else { %x }", 1, 37, "has not been previously declared"),
    ("let %f = fn (%a) { %a }; %a", 1, 26, "has not been previously declared"),
    ("match (1) { %p => %p, _ => %p }", 1, 28, "has not been previously declared"),
    ("{ let %x = 1; %x }; %x", 1, 21, "has not been previously declared"),
    ("%3", 1, 1, "graph variable `%3` is not defined"),
    ("%0 = 1; %0 = 2; %0", 1, 9, "already defined"),
    ("foo(1)", 1, 1, "operator `foo` not found"),
    ("nn.nope(1)", 1, 1, "operator `nn.nope` not found"),
    ("match (1) { Foo => 1 }", 1, 13, "undefined constructor name `Foo`"),
    ("meta[relay.Constant][0]", 1, 1, "there is none"),
    ("meta[relay.Constant][1]\n#[metadata]\n{\"relay.Constant\": []}", 1, 1, "out of range"),
    ("meta[tir.SizeVar][0]\n#[metadata]\n{\"tir.SizeVar\": [1]}", 1, 1, "unsupported metadata"),
    ("1 $ 2", 1, 3, "unexpected character `$`"),
    ("1 & 2", 1, 3, "unexpected character `&`"),
    ("1 | 2", 1, 3, "unexpected character `|`"),
    ("\u00e9", 1, 1, "ASCII only"),
    ("a\rb", 1, 2, "carriage return"),
    ("# foo", 1, 1, "`#` must start an attribute"),
    ("#[foo]\n1", 1, 1, "unsupported attribute"),
    ('#[version = "0.0.4"]\n1', 1, 1, "invalid semantic version"),
    ("1\n#[foo]", 2, 1, "unexpected attribute"),
    ("/* unclosed /* nested */", 1, 1, "unclosed block comment"),
    ('"abc', 1, 1, "unterminated string"),
    ("%x = 1; 2", 1, 4, "let %x = ..."),
    ("1;", 1, 2, "must be followed by an expression"),
    ("1 < = 2", 1, 5, "unexpected `=`"),
    ("1 = > 2", 1, 3, "unexpected `=`"),
    ("sum(1, axis=\"a\")", 1, 8, "attribute `axis` of `sum`"),
    ("sum(1, foo=1)", 1, 8, "has no attribute `foo`"),
    ("sum(1, axis=[1], axis=[0])", 1, 18, "given twice"),
    ("sum(1, axis=foo)", 1, 13, "invalid attribute value"),
    ("(fn (%x) { %x })(1, axis=1)", 1, 21, "attrs_type_key"),
    ("(1, 2 3)", 1, 7, "unexpected `3`"),
    ("fn [A, A](%x: A) { %x }", 1, 8, "declared twice"),
    ("fn (%x: Tensor[(n), float32]) { %x }", 1, 17, "unknown dimension `n`"),
    ("fn [n](%x: n, %y: Tensor[(n), float32]) { %x }", 1, 27, "cannot be used as a dimension"),
    ("fn (%x: int32[int32]) { %x }", 1, 9, "takes no type arguments"),
    ("free_var %x: Tensor[(meta[tir.SizeVar][0]), float32]; %x", 1, 22, "not supported in shapes"),
    ("1 /* a */ */ 2", 1, 12, "unexpected `/`"),
]


@pytest.mark.parametrize("text,line,col,msg", EXPR_ERRORS)
def test_expr_errors(text, line, col, msg):
    with pytest.raises(ParseError) as info:
        parse_expr(text, "bad.rly")
    err = info.value
    assert msg in err.message
    assert err.span is not None
    assert (err.span.line, err.span.column) == (line, col), str(err)
    assert err.span.source_name == "bad.rly"
    assert "^" in str(err)  # the caret under the source line


MODULE_ERRORS = [
    ("def @f() { 1 }", 1, 1, "missing version header"),
    ("// comment\n\ndef @f() { 1 }", 3, 1, "missing version header"),
    ('#[version = "0.0.4"]\n', 1, 1, "invalid semantic version"),
    ('#[version = 0.0.5]\n', 1, 1, "invalid semantic version"),
    ("#[versio]\n", 1, 1, "unsupported attribute"),
    (H + "type List { Nil }\ntype List { Nil2 }", 3, 6, "type `List` is already defined"),
    (H + "type A { X }\ntype B { X }", 3, 10, "constructor with the name `X`"),
    (H + "type A { X, X }", 2, 13, "constructor with the name `X`"),
    (H + "def @f() { 1 }\ndef @f() { 2 }", 3, 5, "`@f` is already defined"),
    (H + "extern type Foo { A }", 2, 17, "extern type"),
    (H + "def @f() { @g() }", 2, 12, "global `@g` is not defined"),
    (H + "def @f(%x: Foo) { %x }", 2, 12, "type `Foo` is not defined"),
    (H + "def @f() { Cons(1) }\ntype L { Cons(int32) }", 2, 12, "operator `Cons` not found"),
    (H + "def @f() { 1 }\n#[metadata]\n{bad", 4, 2, "malformed metadata JSON"),
    (H + "def @f() { 1 }\n#[metadata]\n[1]", 3, 1, "JSON object"),
    (H + "def @f() { 1 }\n#[metadata]\n{}\n#[metadata]\n{}", 5, 1, "only one metadata"),
    (H + "def @f() { meta[relay.Constant][0] }\n#[metadata]\n"
         '{"relay.Constant": [{"dtype": "float32", "shape": [2], "data": "AAAA"}]}',
     2, 12, "needs 8"),
    (H + "def @f() { meta[relay.Constant][0] }\n#[metadata]\n"
         '{"relay.Constant": [{"dtype": "float32", "shape": [1], "data": "!!"}]}',
     2, 12, "base64"),
    (H + "def @f() { meta[relay.Constant][0] }\n#[metadata]\n"
         '{"relay.Constant": [{"dtype": "object", "shape": [], "data": ""}]}',
     2, 12, "unsupported dtype"),
    (H + "def @f() { 1 }\n#[foo]", 3, 1, "unexpected attribute"),
    (H + "def @f() { free_var %x; %x }", 2, 12, "free_var"),
    (H + "def f() { 1 }", 2, 5, "unexpected `f`"),
    (H + "type int_list { Nil }", 2, 6, "read as dtypes"),
    (H + "def @f() { 1 }\n}", 3, 1, "unmatched `}`"),
]


@pytest.mark.parametrize("text,line,col,msg", MODULE_ERRORS)
def test_module_errors(text, line, col, msg):
    with pytest.raises(ParseError) as info:
        parse(text)
    err = info.value
    assert msg in err.message
    assert (err.span.line, err.span.column) == (line, col), str(err)


def test_def_of_init_module_name_is_an_error():
    base = parse(H + "def @f() { 1 }\ntype T { A }")
    with pytest.raises(ParseError, match="already defined in the initial module"):
        parse(H + "def @f() { 2 }", init_module=base)
    with pytest.raises(ParseError, match="type `T` is already defined"):
        parse(H + "type T { B }", init_module=base)
    with pytest.raises(ParseError, match="constructor with the name `A`"):
        parse(H + "type U { A }", init_module=base)


@pytest.mark.parametrize("text,msg", [
    ("Tensor[(1, 2), float32", "unclosed `[`"),
    ("fn (int32) int32", "unexpected `int32`"),
    ("Tensor[(x), float32]", "unknown dimension"),
    ("Tensor[(1.5), float32]", "invalid dimension"),
    ("(int32, ", "unclosed `(`"),
])
def test_type_errors(text, msg):
    with pytest.raises(ParseError, match=msg.replace("(", r"\(").replace("[", r"\[")):
        parse_type(text)


def test_parse_error_is_a_diagnostic_error_with_caret():
    with pytest.raises(DiagnosticError) as info:
        parse_expr("let %x = 1;\nlet %y = %q;\n%y", "prog.rly")
    text = str(info.value)
    assert text.startswith("prog.rly:2:10: parse error:")
    assert "let %y = %q;" in text and "         ^~" in text


def test_non_string_input_is_a_type_error():
    with pytest.raises(TypeError):
        parse_expr(b"1")  # type: ignore[arg-type]
