"""Source spans: where a node came from, and how to show it with a caret."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# C0 controls except tab and newline, DEL and C1 controls: never echoed raw to a terminal
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape_char(m: re.Match) -> str:
    return f"\\x{ord(m.group()):02x}"


def escape_control(text: str) -> str:
    """``text`` with raw control characters (NUL, ESC, BEL, ...) shown as ``\\xNN``."""
    if _CONTROL_RE.search(text) is None:
        return text
    return _CONTROL_RE.sub(_escape_char, text)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A named source text; spans point into it to print the offending line."""

    name: str
    text: str = field(repr=False)
    _lines: list[str] | None = field(default=None, repr=False, compare=False)

    def line(self, lineno: int) -> str | None:
        """Return line ``lineno`` (1-based) without its newline, or None."""
        lines = self._lines
        if lines is None:  # NOTE: split once; error reports may ask for many lines
            lines = self.text.splitlines()
            object.__setattr__(self, "_lines", lines)
        if 1 <= lineno <= len(lines):
            return lines[lineno - 1]
        return None


@dataclass(frozen=True, slots=True)
class Span:
    """A 1-based (line, column) .. (end_line, end_column) range in a source file."""

    source: SourceFile | None
    line: int
    column: int
    end_line: int = -1
    end_column: int = -1

    @property
    def source_name(self) -> str:
        return self.source.name if self.source is not None else "<unknown>"

    def __str__(self) -> str:
        return f"{self.source_name}:{self.line}:{self.column}"

    def merge(self, other: Span | None) -> Span:
        """The smallest span covering ``self`` and ``other``."""
        if other is None:
            return self
        start = min((self.line, self.column), (other.line, other.column))
        end = max((self.end_line, self.end_column), (other.end_line, other.end_column))
        return Span(self.source, start[0], start[1], end[0], end[1])

    def print_with_context(self) -> str:
        """The source line of the span with a caret (``^~~~``) under it."""
        if self.source is None:
            return ""
        text = self.source.line(self.line)
        if text is None:
            return ""
        start = max(self.column - 1, 0)
        if self.end_line == self.line and self.end_column > self.column:
            width = self.end_column - self.column
        else:
            width = max(len(text) - start, 1)
        width = max(1, min(width, max(len(text) - start, 1)))
        # NOTE: control characters are escaped, so the caret is placed by escaped widths
        shown = escape_control(text)
        if shown is not text:
            width = max(1, len(escape_control(text[start:start + width])))
            start = len(escape_control(text[:start]))
        gutter = f"{self.line:>4} | "
        caret = " " * (len(gutter) - 2) + "| " + " " * start + "^" + "~" * (width - 1)
        return f"{gutter}{shown}\n{caret}"
