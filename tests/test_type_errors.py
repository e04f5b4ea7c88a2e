"""Type errors: each diagnostic's class, message and the span (line, column) it points at."""
from __future__ import annotations

import pytest

import relay_ir as rly
from relay_ir.errors import (ShapeMismatchError, TypeInferenceError, UnboundVarError,
                             UnificationError)
from relay_ir.expr import Function, Var
from relay_ir.module import IRModule
from relay_ir.passes import InferType
from relay_ir.span import SourceFile, Span
from relay_ir.ty import TypeVar

HEADER = '#[version = "0.0.5"]\n'
LIST = "type List[A] { Cons(A, List[A]), Nil, }\n"
BOX = "type box[T] { Box(T), }\n"


# NOTE: a variable node is shared by its binding and its uses, so a problem with a variable
# used as an argument / condition / value is reported at the enclosing expression.


def position(text: str, marker: str, nth: int = 0) -> tuple[int, int]:
    """1-based (line, column) of the ``nth`` occurrence of ``marker`` in ``text``."""
    at = -1
    for _ in range(nth + 1):
        at = text.index(marker, at + 1)
    line = text.count("\n", 0, at) + 1
    col = at - (text.rfind("\n", 0, at) + 1) + 1
    return line, col


def check(text: str, cls: type, message: str, marker: str, nth: int = 0,
          prelude: bool = False) -> TypeInferenceError:
    """Type-checking ``text`` raises ``cls`` with ``message`` at ``marker``."""
    full = HEADER + text
    mod = rly.parse(full, source_name="bad.rly", prelude=prelude)
    with pytest.raises(cls) as info:
        InferType()(mod)
    err = info.value
    assert isinstance(err, TypeInferenceError)
    assert message in err.message, err.message
    assert err.span is not None, err.message
    assert (err.span.line, err.span.column) == position(full, marker, nth), str(err)
    shown = str(err)
    assert "^" in shown and "bad.rly" in shown
    return err


def test_broadcast_mismatch() -> None:
    err = check("def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(3, 2), float32]) {\n"
                "  add(%a, %b)\n}", ShapeMismatchError, "incompatible broadcast", "add(")
    assert "(2, 3)" in err.message and "(3, 2)" in err.message


def test_dtype_mismatch_in_operator() -> None:
    err = check("def @main() {\n  add(1, 1f)\n}", ShapeMismatchError, "data types", "add(")
    assert "int32" in err.message and "float32" in err.message


def test_dtype_mismatch_in_unification() -> None:
    err = check("def @main(%y: Tensor[(2), float32]) {\n  let %x: Tensor[(2), int32] = %y;\n"
                "  %x\n}", UnificationError, "dtype mismatch", "let %x")
    assert "expected `Tensor[(2), int32]`, found `Tensor[(2), float32]`" in err.message


def test_rank_mismatch() -> None:
    err = check("def @f(%x: Tensor[(6), float32]) { %x }\n"
                "def @main(%y: Tensor[(2, 3), float32]) {\n  @f(%y)\n}",
                UnificationError, "rank mismatch", "@f(%y)")
    assert "has 1 dimension(s)" in err.message and "has 2" in err.message


def test_dimension_mismatch() -> None:
    check("def @f(%x: Tensor[(2, 4), float32]) { %x }\n"
          "def @main(%y: Tensor[(2, 3), float32]) {\n  @f(%y)\n}",
          UnificationError, "dimension 1 conflicts: 4 does not match 3", "@f(%y)")


def test_wrong_argument_count() -> None:
    err = check("def @f(%x: int32) { %x }\ndef @main() {\n  @f(1, 2)\n}",
                TypeInferenceError, "wrong argument count", "@f(1")
    assert "too many" in err.message and "expected 1, found 2" in err.message
    err = check("def @f(%x: int32) { %x }\ndef @main() {\n  @f()\n}",
                TypeInferenceError, "wrong argument count", "@f()")
    assert "too few" in err.message


# (source, error class, message, where the caret points, more text the message must hold)
SIMPLE_CASES = {
    "operator_argument_count": (
        "def @main(%x: float32) {\n  add(%x)\n}", TypeInferenceError,
        "operator `add` is given too few arguments: expected 2, found 1", "add(", ""),
    "calling_a_non_function": (
        "def @main() {\n  let %x = 1;\n  %x(2)\n}", TypeInferenceError,
        "calling a non-function", "%x(2)", "`%x` has type `int32`"),
    "branch_type_mismatch": (
        "def @main(%c: bool) {\n  if (%c) { 1 } else { 1f }\n}", UnificationError,
        "branches of `if` have different types", "1f", "expected `int32`, found `float32`"),
    "return_annotation_mismatch": (
        "def @f() -> float32 {\n  1\n}", UnificationError,
        "return annotation mismatch", "1\n", "expected `float32`, found `int32`"),
}


@pytest.mark.parametrize("case", sorted(SIMPLE_CASES))
def test_simple_type_errors(case: str) -> None:
    src, cls, msg, marker, more = SIMPLE_CASES[case]
    err = check(src, cls, msg, marker)
    assert more in err.message


def test_non_bool_if_condition() -> None:
    err = check("def @main() {\n  if (1) { 2 } else { 3 }\n}", UnificationError,
                "condition of `if` must have type `bool`", "1)")
    assert "found `int32`" in err.message
    check("def @main(%c: Tensor[(1), bool]) {\n  if (%c) { 2 } else { 3 }\n}", UnificationError,
          "found `Tensor[(1), bool]`", "if (%c)")


def test_incomplete_match() -> None:
    err = check(LIST + "def @main(%l: List[int32]) {\n  match (%l) {\n"
                "    Cons(%x, Nil) => %x,\n  }\n}", TypeInferenceError, "incomplete match",
                "match")
    assert "`Cons(_, Cons(_, _))`" in err.message and "`Nil`" in err.message


def test_incomplete_match_on_tuples() -> None:
    err = check(LIST + "def @main(%a: List[int32], %b: List[int32]) {\n  match (%a, %b) {\n"
                "    (Nil, _) => 0,\n    (_, Nil) => 1,\n  }\n}", TypeInferenceError,
                "incomplete match", "match")
    assert "`(Cons(_, _), Cons(_, _))`" in err.message


def test_pattern_arity() -> None:
    err = check(LIST + "def @main(%l: List[int32]) {\n  match? (%l) {\n"
                "    Cons(%x) => %x,\n  }\n}", TypeInferenceError, "pattern arity", "Cons(%x)")
    assert "has 2 field(s), but the pattern gives 1" in err.message


def test_tuple_pattern_arity_and_non_tuple() -> None:
    check("def @main(%t: (int32, int32)) {\n  match (%t) {\n    (%a, %b, %c) => %a,\n  }\n}",
          TypeInferenceError, "pattern arity", "(%a, %b, %c)")
    check("def @main(%t: int32) {\n  match (%t) {\n    (%a, %b) => %a,\n  }\n}",
          UnificationError, "a tuple pattern needs a tuple", "(%a, %b)")


def test_pattern_of_another_adt() -> None:
    check(LIST + BOX + "def @main(%l: List[int32]) {\n  match (%l) {\n    Box(%x) => 0,\n  }\n}",
          UnificationError, "the pattern `Box` builds", "Box(%x)")


def test_tuple_index_out_of_range() -> None:
    err = check("def @main() {\n  let %t = (1, 2);\n  %t.2\n}", TypeInferenceError,
                "tuple index out of range", "%t.2")
    assert "`.2` of a tuple with 2 field(s)" in err.message


def test_projection_of_non_tuple() -> None:
    check("def @main(%x: float32) {\n  %x.0\n}", TypeInferenceError,
          "tuple projection `.0` needs a tuple, found `float32`", "%x.0")


def test_reshape_size() -> None:
    err = check("def @main(%x: Tensor[(2, 3), float32]) {\n  reshape(%x, newshape=[4, 2])\n}",
                ShapeMismatchError, "cannot reshape (2, 3)", "reshape(")
    assert "6 elements" in err.message and "8 elements" in err.message


def test_concatenate_dims() -> None:
    check("def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(2, 4), float32]) {\n"
          "  concatenate((%a, %b), axis=0)\n}", ShapeMismatchError,
          "concatenate: dimension 1 of input 1 is 4, but 3 in input 0", "concatenate(")


def test_axis_out_of_range() -> None:
    check("def @main(%x: Tensor[(2, 3), float32]) {\n  sum(%x, axis=[2])\n}",
          TypeInferenceError, "axis 2 is out of range for a tensor of rank 2", "sum(")


def test_conflicting_type_parameter() -> None:
    err = check("def @f[A](%x: A, %y: A) -> A { %x }\ndef @main() {\n  @f(1, 2f)\n}",
                UnificationError, "conflicting type parameter", "2f")
    assert "`A`" in err.message and "`int32`" in err.message and "`float32`" in err.message


def test_unresolvable_type() -> None:
    err = check("def @main(%x) {\n  %x\n}", TypeInferenceError, "unable to infer a type", "%x")
    assert "`%x`" in err.message


def test_unresolved_polymorphic_instance() -> None:
    check(LIST + "def @main() {\n  Nil\n}", TypeInferenceError, "unable to infer a type", "Nil",
          nth=1)


def test_occurs_check() -> None:
    check("def @main() {\n  fn (%f) { %f(%f) }\n}", UnificationError, "occurs check", "%f(%f)")


def test_ref_errors() -> None:
    check("def @main(%x: float32) {\n  ref_read(%x)\n}", UnificationError,
          "`ref_read` needs a reference", "ref_read")
    check("def @main(%x: float32) {\n  let %r = ref(%x);\n  ref_write(%r, 1)\n}",
          UnificationError, "`ref_write` stores a value of another type", "1)")


def test_argument_type_mismatch_names_both_types() -> None:
    err = check("def @f(%x: int32) { %x }\ndef @main() {\n  @f(1f)\n}", UnificationError,
                "argument 1 of the function `@f` has the wrong type", "1f")
    assert "expected `int32`, found `float32`" in err.message


def test_tuple_versus_tensor_and_adt_versus_tensor() -> None:
    check("def @f(%x: int32) { %x }\ndef @main() {\n  @f((1, 2))\n}", UnificationError,
          "expected `int32`, found `(int32, int32)`", "(1, 2)")
    check(LIST + "def @f(%x: int32) { %x }\ndef @main() {\n  @f(Nil)\n}", UnificationError,
          "expected `int32`, found `List[", "Nil", nth=1)


def test_match_arms_differ() -> None:
    check(LIST + "def @main(%l: List[int32]) {\n  match (%l) {\n    Cons(%x, _) => %x,\n"
          "    Nil => 1f,\n  }\n}", UnificationError, "the arms of `match` have different types",
          "1f")


def test_unbound_type_variable() -> None:
    # The parser rejects unknown names in text; IR built in Python can still hold a type
    # variable that no enclosing type parameter list binds.
    src = SourceFile("hand.rly", "fn (%x: A) { %x }")
    a = TypeVar("A")
    x = Var("x", a, span=Span(src, 1, 5, 1, 7))
    mod = IRModule({"main": Function((x,), x, span=Span(src, 1, 1, 1, 18))})
    with pytest.raises(UnboundVarError) as info:
        InferType()(mod)
    assert "type variable `A` is not bound" in info.value.message
    assert (info.value.span.line, info.value.span.column) == (1, 5)


def test_error_text_has_caret_under_source_line() -> None:
    err = check("def @main() {\n  add(1, 1f)\n}", ShapeMismatchError, "data types", "add(")
    lines = str(err).splitlines()
    assert lines[0].startswith("bad.rly:3:3: type error:")
    assert lines[1].endswith("  add(1, 1f)")
    assert lines[2].index("^") == lines[1].index("add(")
