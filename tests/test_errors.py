"""Diagnostics render the source line with a caret under the span."""
from __future__ import annotations

from relay_ir.errors import DiagnosticError, InternalError, ParseError, TypeInferenceError
from relay_ir.span import SourceFile, Span


def test_caret_under_span() -> None:
    src = SourceFile("m.rly", "line one\n  let %x = 1.5;\n")
    err = ParseError("floats need an `f` suffix", Span(src, 2, 12, 2, 15))
    text = str(err)
    lines = text.splitlines()
    assert lines[0] == "m.rly:2:12: parse error: floats need an `f` suffix"
    assert lines[1] == "   2 |   let %x = 1.5;"
    assert lines[2] == "     |            ^~~"
    assert lines[2].index("^") == lines[1].index("1.5")


def test_span_to_end_of_line_when_multiline() -> None:
    src = SourceFile("m.rly", "abc def\nxyz\n")
    err = TypeInferenceError("bad", Span(src, 1, 5, 2, 2), notes=["expected int32"])
    lines = str(err).splitlines()
    assert lines[2].endswith("^~~")
    assert lines[-1] == "note: expected int32"


def test_without_span_and_hierarchy() -> None:
    assert str(DiagnosticError("plain")) == "plain"
    assert issubclass(ParseError, DiagnosticError)
    assert issubclass(TypeInferenceError, DiagnosticError)
    assert not issubclass(InternalError, DiagnosticError)
    e = DiagnosticError("x").with_span(Span(None, 1, 1))
    assert e.span is not None and str(e).startswith("<unknown>:1:1")
