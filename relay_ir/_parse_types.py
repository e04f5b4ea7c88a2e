"""Type and shape rules of the text parser's builder (a mixin of ``parser._Builder``)."""

from __future__ import annotations

from typing import Any

from lark import Token

from relay_ir._parse_lex import _INT_RE, _TParams, _canonical_dtype
from relay_ir.errors import ParseError
from relay_ir.ty import (ANY, FuncType, GlobalTypeVar, IncompleteType, Kind, RefType, ShapeVar,
                         TensorType, TupleType, Type, TypeCall, dim_add, dim_mul, dim_sub,
                         is_dtype_name)


def _negative_dim(text: str) -> str:
    # NOTE: TVM wrote -1 for an unknown dimension in some places; here that is `?`
    return (f"negative dimension `{text}`: dimensions are >= 0 (write `?` for a dimension "
            f"known only at run time)")


class _TypeBuilder:
    """Builder mixin: the type and shape rules."""

    # ---------------------------------------------------------------- types
    def tuple_type(self, c: list) -> TupleType:
        return TupleType(tuple(c[1:]))

    def func_type(self, c: list) -> FuncType:
        tps = _TParams()
        rest = c[1:]
        if rest and type(rest[0]) is _TParams:
            tps = rest[0]
            rest = rest[1:]
        type_params = self.pop_tparams(tps)
        return FuncType(tuple(rest[:-1]), rest[-1], type_params)

    def ref_type(self, c: list) -> RefType:
        return RefType(c[1])

    def tensor_type(self, c: list) -> TensorType:
        tok = c[2]
        return TensorType(c[1], _canonical_dtype(str(tok), self.tspan(tok)))

    def _type_head(self, tok: Any) -> Type:
        name = str(tok)
        st = self.tscope.get(name)
        if st:
            return st[-1].as_type(self.tspan(tok))
        if "." in name or "/" in name:
            raise ParseError(f"invalid type name `{name}`", self.tspan(tok))
        if name not in self.tmention:
            self.tmention[name] = self.tspan(tok)
        return self._gtv(name)

    def named_type(self, c: list) -> Type:
        tok = c[0]
        name = str(tok)
        if is_dtype_name(name) and not self.tscope.get(name):
            return TensorType((), _canonical_dtype(name, self.tspan(tok)))
        head = self._type_head(tok)
        if type(head) is GlobalTypeVar:
            return TypeCall(head, ())
        return head

    def type_call(self, c: list) -> TypeCall:
        tok = c[0]
        if is_dtype_name(str(tok)) and not self.tscope.get(str(tok)):
            raise ParseError(f"`{tok}` is a dtype and takes no type arguments", self.tspan(tok))
        return TypeCall(self._type_head(tok), tuple(c[1:]))

    def incomplete_type(self, c: list) -> IncompleteType:
        return IncompleteType(Kind.Type, span=self.tspan(c[0]))

    def shape(self, c: list) -> tuple:
        return tuple(c[1:])

    def dim(self, c: list) -> Any:
        # c = [BINOP?] atom (BINOP atom)*; `*` binds tighter than `+`/`-`.
        i = 0
        sign = 1
        if isinstance(c[0], Token):
            if c[0] not in ("-", "+"):
                raise ParseError(f"unexpected `{c[0]}` in a dimension", self.tspan(c[0]))
            sign = -1 if c[0] == "-" else 1
            i = 1
        terms: list = []
        cur = c[i] if sign == 1 else dim_mul(-1, c[i])
        pending = 1
        i += 1
        while i < len(c):
            tok, val = c[i], c[i + 1]
            if tok == "*":
                cur = dim_mul(cur, val)
            elif tok in ("+", "-"):
                terms.append((pending, cur))
                pending = 1 if tok == "+" else -1
                cur = val
            else:
                raise ParseError(f"`{tok}` is not allowed in a dimension (use +, - and *)",
                                 self.tspan(tok))
            i += 2
        terms.append((pending, cur))
        total: Any = 0
        for sgn, t in terms:
            if t is ANY and len(terms) > 1:
                raise ParseError("`?` cannot be part of a dimension expression",
                                 self.tspan(c[0]) if isinstance(c[0], Token) else None)
            total = dim_add(total, t) if sgn > 0 else dim_sub(total, t)
        if len(terms) == 1 and terms[0][0] > 0:
            total = terms[0][1]
        if isinstance(total, int) and total < 0:
            first = next((t for t in c if isinstance(t, Token)), None)
            raise ParseError(_negative_dim(str(total)),
                             None if first is None else self.tspan(first))
        return total

    def dim_int(self, c: list) -> int:
        tok = c[0]
        body = tok.lstrip("-")
        if not _INT_RE.match(body):
            raise ParseError(f"invalid dimension `{tok}` (dimensions are integers, `?` or "
                             f"shape variables)", self.tspan(tok))
        v = int(body)
        v = -v if (len(tok) - len(body)) % 2 else v
        if v < 0:
            raise ParseError(_negative_dim(tok), self.tspan(tok))
        return v

    def dim_name(self, c: list) -> ShapeVar:
        tok = c[0]
        st = self.tscope.get(str(tok))
        if not st:
            raise ParseError(f"unknown dimension `{tok}`: a symbolic dimension must be declared "
                             f"as a type parameter (e.g. `fn [{tok}](...)`)", self.tspan(tok))
        return st[-1].as_dim(self.tspan(tok))

    def dim_any(self, c: list) -> Any:
        return ANY

    def dim_meta(self, c: list) -> Any:
        raise ParseError("metadata references are not supported in shapes; declare a named "
                         "dimension as a type parameter instead (e.g. `fn [n](%x: Tensor[(n), "
                         "float32])`)", self.tspan(c[0]))
