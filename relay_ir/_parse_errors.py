"""Syntax-error reporting of the text parser: token names, expected sets, message rules."""

from __future__ import annotations

import re
from typing import Any

from relay_ir._parse_lex import _offset_span, _pos
from relay_ir.errors import ParseError
from relay_ir.span import SourceFile, Span


# ----------------------------------------------------------------------------- syntax errors
_TOKEN_NAMES = {
    "LPAR": "`(`", "RPAR": "`)`", "SEMI": "`;`", "LBRACE": "`{`", "RBRACE": "`}`", "LSQB": "`[`",
    "RSQB": "`]`", "COMMA": "`,`", "SEMICOLON": "`;`", "EQUAL": "`=`", "COLON": "`:`",
    "DOT": "`.`", "ARROW": "`->`", "FATARROW": "`=>`", "BINOP": "an operator",
    "NUMBER": "a number", "INF": "a number", "LOCAL": "a local variable (`%x`)",
    "GRAPHVAR": "a graph variable (`%0`)", "GLOBAL": "a global (`@f`)", "IDENT": "a name",
    "STRING": "a string", "META_REF": "a `meta[...]` reference", "QMARK": "`?`",
    "UNDERSCORE": "`_`", "TENSOR": "`Tensor`", "MATCH": "`match`", "ATTRIBUTE": "`#[...]`",
    "TRUE": "`True`", "FALSE": "`False`", "$END": "end of input", "ELSE": "`else`",
}
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")": "(", "]": "[", "}": "{"}
_BRACKET_SCAN = re.compile(r'"[^"]*"|[()\[\]{}]')


def _token_name(name: str) -> str:
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    if name.isupper() and name.isalpha() or "_" in name and name.replace("_", "").isupper():
        return f"`{name.lower()}`"
    return name


def _expected_text(expected: set[str]) -> str:
    names = sorted({_token_name(x) for x in expected if not x.startswith("__")})
    if not names:
        return ""
    if len(names) > 8:
        names = names[:8] + ["..."]
    return "; expected " + (names[0] if len(names) == 1 else "one of: " + ", ".join(names))


def _open_brackets(clean: str, upto: int) -> list[tuple[str, int]]:
    stack: list[tuple[str, int]] = []
    for m in _BRACKET_SCAN.finditer(clean, 0, upto):
        ch = m.group()
        if ch in _OPEN:
            stack.append((ch, m.start()))
        elif ch in _CLOSE:
            if stack and stack[-1][0] == _CLOSE[ch]:
                stack.pop()
            else:
                break
    return stack


def _parser_expected(e: Any) -> set[str]:
    """The terminals the parser state accepts (the lexer's list also has always-accepted ones)."""
    st = getattr(e, "state", None)
    st = getattr(st, "position", st)
    from relay_ir.parser import _lark
    try:
        states = _lark().parser.parser.parser.parse_table.states
        if isinstance(st, int) and st in states:
            return {k for k in states[st] if k.isupper() or k == "$END"}
    except AttributeError:  # pragma: no cover - other Lark versions
        pass
    return set(e.expected or ()) - {"WS"}


# The syntax-error messages, as data: the first rule whose conditions all hold gives the
# message. Messages are ``str.format`` templates over ``ch`` (the unexpected character),
# ``val`` / ``shown`` (the unexpected token, whole / shortened), ``bare`` (``val`` without its
# leading minus signs) and ``expected`` ("; expected one of: ..." or "").

# (regex that must match at the unexpected character, message)
_CHAR_RULES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(rx), msg) for rx, msg in (
    (r"\r", "a carriage return (\\r) must be followed by a newline"),
    (r"#\[", "unsupported attribute here: only the version header `#[version = \"0.0.5\"]` "
              "(first line) and `#[metadata]` are allowed"),
    (r"#", "`#` must start an attribute `#[...]`"),
    (r'"', "unterminated string literal"),
    (r"[^\x00-\x7f]", "unexpected character `{ch}` (identifiers are ASCII only; non-ASCII "
                       "text is allowed in comments)"),
    (r"%[ \t]", "`%` must be followed by a variable name or a number (Relay has no `%` "
                "operator: for a remainder write `mod(a, b)`, or `floor_mod(a, b)`)"),
    (r"%", "`%` must be followed by a variable name or a number"),
    (r"@", "`@` must be followed by a global name"),
    (r"", "unexpected character `{ch}`"),
))


class _Rule:
    """One syntax-error rule: conditions on the unexpected token and the parser's expectations.

    ``types`` / ``values``: the token's type / text is one of these; ``neg``: its text starts
    with ``-``; ``expected_is``: the expected-terminal set equals one of these sets; ``needs``:
    all of these are expected; ``needs_any``: one of these is expected; ``lacks``: none of these
    is expected; ``before``: the text before the token matches this regex (at its end);
    ``ends``: at end of input, the text ends with this string; ``brackets``: the rule is the
    bracket-matching check (computed, see :func:`_bracket_error`).
    """

    __slots__ = ("message", "types", "values", "neg", "expected_is", "needs", "needs_any",
                 "lacks", "before", "ends", "brackets")

    def __init__(self, message: str, *, types: tuple[str, ...] = (),
                 values: tuple[str, ...] = (), neg: bool = False,
                 expected_is: tuple[frozenset[str], ...] = (), needs: tuple[str, ...] = (),
                 needs_any: tuple[str, ...] = (), lacks: tuple[str, ...] = (),
                 before: str | None = None, ends: str | None = None, brackets: bool = False):
        self.message = message
        self.types = frozenset(types)
        self.values = frozenset(values)
        self.neg = neg
        self.expected_is = expected_is
        self.needs = frozenset(needs)
        self.needs_any = frozenset(needs_any)
        self.lacks = frozenset(lacks)
        self.before = re.compile(before + r"\Z") if before is not None else None
        self.ends = ends
        self.brackets = brackets

    def matches(self, ttype: str, val: str, expected: set[str], before: str) -> bool:
        """True if every condition of the rule holds."""
        return ((not self.types or ttype in self.types)
                and (not self.values or val in self.values)
                and (not self.neg or val.startswith("-"))
                and (not self.expected_is or expected in self.expected_is)
                and self.needs <= expected
                and (not self.needs_any or not self.needs_any.isdisjoint(expected))
                and self.lacks.isdisjoint(expected)
                and (self.before is None or self.before.search(before) is not None)
                and (self.ends is None or before.endswith(self.ends)))


_EXPR_START = ("LOCAL", "NUMBER", "GLOBAL", "FN")
_ELSE_ONLY = (frozenset({"ELSE"}),)

# At end of input (``before`` is the text without trailing whitespace).
_END_RULES: tuple[_Rule, ...] = (
    _Rule("", brackets=True),
    _Rule("the input ends where `else` is expected: an `if` needs an `else` branch "
          "(`if (c) {{ a }} else {{ b }}`)", expected_is=_ELSE_ONLY),
    _Rule("the input ends after `;`: a `let`, graph binding or `a;` statement must be followed "
          "by an expression", ends=";"),
    _Rule("unexpected end of input{expected}"),
)

# At an unexpected token.
_TOKEN_RULES: tuple[_Rule, ...] = (
    _Rule("unary minus is not supported; use negative(...) (or glue `-` to a number literal: "
          "`-1f`)", types=("BINOP",), values=("-",), needs_any=_EXPR_START),
    _Rule("`{val}` reads as a negative literal; to subtract, put a space after the minus: "
          "`- {bare}`", types=("NUMBER", "INF"), neg=True, needs=("BINOP",)),
    _Rule("`let` binds local variables (`%x`), not globals", types=("GLOBAL",),
          expected_is=(frozenset({"LOCAL"}),)),
    _Rule("expected a local variable (`%x`) but found `{shown}`",
          expected_is=(frozenset({"LOCAL"}),)),
    _Rule("a `{{ ... }}` block cannot be used directly as a let or graph binding value; wrap it "
          "in parentheses", types=("LBRACE",), needs_any=_EXPR_START),
    _Rule("expected `{{` but found `{shown}`: function bodies and if/else branches need braces "
          "`{{ ... }}`", expected_is=(frozenset({"LBRACE"}), frozenset({"LBRACE", "ARROW"}))),
    _Rule("expected `else` but found `{shown}`: an `if` needs an `else` branch "
          "(`if (c) {{ a }} else {{ b }}`)", expected_is=_ELSE_ONLY),
    _Rule("an `extern type` has no constructors (drop the `{{ ... }}`)", types=("LBRACE",),
          needs=("DEF",)),
    _Rule("unexpected `=`: bind a local variable with `let %x = ...;` (only graph variables "
          "`%0 = ...;` are bound without `let`)", types=("EQUAL",),
          before=r"%[A-Za-z_][A-Za-z0-9_/]*\s*"),
    _Rule("unexpected attribute: the version header `#[version = \"0.0.5\"]` must come first, "
          "and `#[metadata]` last", types=("ATTRIBUTE",)),
    _Rule("", brackets=True),
    _Rule("unexpected `;`{expected} (a `let` or `a;` statement must be followed by an "
          "expression)", types=("SEMI",), lacks=("SEMI",)),
    _Rule("expected `;` after the bound value, found `{shown}`", needs=("SEMI", "BINOP"),
          before=r"(?:\blet\s+%[A-Za-z_][A-Za-z0-9_/]*[^=;]*|%[0-9]+\s*)=[^;(){}\[\]=]*"),
    _Rule("unexpected `{shown}`{expected}"),
)


def _bracket_error(clean: str, upto: int, val: str | None, expected: set[str],
                   src: SourceFile, sp: Span) -> ParseError | None:
    """An error about an unclosed / mismatched bracket before offset ``upto``, if there is one.

    ``val`` is the unexpected token's text (None at end of input).
    """
    if val is None:
        stack = _open_brackets(clean, upto)
        if not stack:
            return None
        ch, off = stack[-1]
        return ParseError(f"unclosed `{ch}`: the input ends before its matching `{_OPEN[ch]}`",
                          _offset_span(src, off, off + 1))
    if val not in _CLOSE:
        return None
    stack = _open_brackets(clean, upto)
    if stack and _OPEN[stack[-1][0]] != val:
        ch, off = stack[-1]
        line, col = _pos(src.text, off)
        return ParseError(f"unexpected `{val}`: the `{ch}` at {line}:{col} is still open"
                          + _expected_text(expected), sp)
    if not stack:
        return ParseError(f"unmatched `{val}`", sp)
    return None


def _syntax_error(e: Any, clean: str, src: SourceFile) -> ParseError:
    """The ParseError for a Lark syntax error: the first matching rule of the tables above."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream
        ch = clean[pos] if 0 <= pos < len(clean) else ""
        sp = _offset_span(src, pos, pos + 1)
        for rx, msg in _CHAR_RULES:
            if rx.match(clean, pos) is not None:
                return ParseError(msg.format(ch=ch), sp)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _parser_expected(e)
        ttype = tok.type
        if ttype == "$END":
            end = len(clean.rstrip())
            sp = _offset_span(src, max(end - 1, 0), end)
            rules, val, before = _END_RULES, None, clean[:end]
            upto = len(clean)
        else:
            sp = Span(src, tok.line, tok.column, tok.end_line, tok.end_column)
            val = str(tok)
            upto = tok.start_pos if tok.start_pos is not None else 0
            rules, before = _TOKEN_RULES, clean[:upto]
        text = val or ""
        fields = {"val": text, "shown": text if len(text) <= 40 else text[:37] + "...",
                  "bare": text.lstrip("-"), "expected": _expected_text(expected)}
        for rule in rules:
            if not rule.matches(ttype, text, expected, before):
                continue
            if rule.brackets:
                err = _bracket_error(clean, upto, val, expected, src, sp)
                if err is not None:
                    return err
                continue
            return ParseError(rule.message.format(**fields), sp)
    return ParseError(f"syntax error: {e}", _offset_span(src, 0))
