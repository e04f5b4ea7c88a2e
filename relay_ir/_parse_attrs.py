"""Attribute rules of the text parser's builder (a mixin of ``parser._Builder``)."""

from __future__ import annotations

from typing import Any

from relay_ir._parse_lex import _ATTR_NUMBERS, _META_TOKEN_RE, _NOT_CACHED, _Attr, _number_value
from relay_ir.errors import ParseError
from relay_ir.span import Span
from relay_ir.tvm_metadata import MetaRef


class _AttrBuilder:
    """Builder mixin: the attribute rules (`key=value` in calls, metadata references)."""

    def attr(self, c: list) -> _Attr:
        tok = c[0]
        return _Attr(str(tok), c[1], self.tspan(tok))

    def attr_number(self, c: list) -> int | float:
        tok = c[0]
        v = _ATTR_NUMBERS.get(tok.value, _NOT_CACHED)
        if v is _NOT_CACHED:
            try:
                v, dtype = _number_value(tok)
            except ValueError as e:
                raise ParseError(str(e), self.tspan(tok)) from None
            if len(_ATTR_NUMBERS) < 100_000:
                _ATTR_NUMBERS[tok.value] = v
        return v

    def attr_true(self, c: list) -> bool:
        return True

    def attr_false(self, c: list) -> bool:
        return False

    def attr_string(self, c: list) -> str:
        return c[0][1:-1]

    def attr_ident(self, c: list) -> None:
        tok = c[0]
        if tok in ("None", "nullptr"):
            return None
        raise ParseError(f"invalid attribute value `{tok}`: attribute values are numbers, "
                         f"True/False, \"strings\", [lists] or None", self.tspan(tok))

    def attr_meta(self, c: list) -> MetaRef:
        tok = c[0]
        m = _META_TOKEN_RE.match(tok)
        assert m is not None
        key, idx = m.group(1), int(m.group(2))
        sp = self.tspan(tok)
        if key == "relay.Constant":
            raise ParseError("a `relay.Constant` cannot be an attribute value (attribute "
                             "metadata references name other entries, e.g. "
                             "`meta[VirtualDevice][0]`)", sp)
        return MetaRef(key, idx, self._meta_entry(tok, key, idx, sp))

    def _meta_entry(self, tok: Any, key: str, idx: int, sp: Span) -> Any:
        """Entry ``idx`` of metadata list ``key``; a ParseError if there is none."""
        if not self.meta:
            raise ParseError(f"`{tok}` refers to the metadata section, but there is none "
                             f"(add `#[metadata]` and a JSON table at the end)", sp)
        items = self.meta.get(key)
        if items is None:
            raise ParseError(f"the metadata section has no `{key}` entries", sp)
        if idx >= len(items):
            raise ParseError(f"`{tok}` is out of range: the metadata section has {len(items)} "
                             f"`{key}` entries", sp)
        return items[idx]

    def attr_list(self, c: list) -> tuple:
        return tuple(c[1:])

    # ---------------------------------------------------------------- atoms
