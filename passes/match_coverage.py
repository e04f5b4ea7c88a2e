"""The match-coverage check of type inference: every total ``match`` handles every value.

After the types are solved, :meth:`MatchCoverage.check_matches` takes each ``match`` (not
``match?``) with its resolved scrutinee type and computes the value shapes no clause covers
(Maranget's usefulness algorithm over constructor and tuple patterns); up to five are listed
in an :class:`~relay_ir.errors.IncompleteMatchError`.
"""
from __future__ import annotations

from typing import Any

from relay_ir.errors import IncompleteMatchError
from relay_ir.expr import (Expr, Match, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard)
from relay_ir.module import IRModule
from relay_ir.ty import GlobalTypeVar, TupleType, Type, TypeCall


__all__ = ["MatchCoverage"]


def _fmt_pattern(p: Any) -> str:
    """Text of a (missing-case) pattern: ``Cons(_, Nil)``, ``(_, _)``, ``_``."""
    kind = p[0]
    if kind == "_":
        return "_"
    if kind == "tuple":
        inner = [_fmt_pattern(q) for q in p[1]]
        return f"({inner[0]},)" if len(inner) == 1 else "(" + ", ".join(inner) + ")"
    name, subs = p[1], p[2]
    if not subs:
        return name
    return f"{name}({', '.join(_fmt_pattern(q) for q in subs)})"


class MatchCoverage:
    """Exhaustiveness of total matches (a mixin of the Inferencer: uses its solved types)."""

    matches: list[Match]
    types: dict[Expr, Type]
    mod: IRModule

    def check_matches(self) -> None:
        for m in self.matches:
            dt = self.resolve(self.types[m.data])
            rows = [[c.lhs] for c in m.clauses]
            missing = self._missing(rows, [dt], limit=5)
            if missing:
                cases = ", ".join(f"`{_fmt_pattern(v[0])}`" for v in missing)
                raise IncompleteMatchError(
                    f"incomplete match: the following cases are not handled: {cases} "
                    f"(add the cases, a `_` clause, or use `match?`)", m.span)

    def _adt_ctors(self, t: Type) -> tuple[list[tuple[str, list[Type]]], bool] | None:
        """Constructors of ADT type ``t`` with field types instantiated, or None."""
        if type(t) is GlobalTypeVar:
            head, args = t, ()
        elif type(t) is TypeCall and type(t.func) is GlobalTypeVar:
            head, args = t.func, t.args
        else:
            return None
        td = self.mod.type_definitions.get(head.name_hint)
        if td is None:
            return None
        m = dict(zip(td.type_params, args))
        out = []
        for c in td.constructors:
            out.append((c.name_hint, [self.substitute(ft, m) for ft in c.inputs]))
        return out, True

    def _missing(self, rows: list[list[Pattern]], tys: list[Type], limit: int) -> list[list]:
        """Value vectors (as pattern descriptions) not matched by any row (Maranget)."""
        if not tys:
            return [] if rows else [[]]
        t = self.find(tys[0])
        rest_t = tys[1:]
        heads = [r[0] for r in rows]

        def default() -> list[list]:
            sub = [r[1:] for r in rows if type(r[0]) in (PatternWildcard, PatternVar)]
            return [[("_",)] + v for v in self._missing(sub, rest_t, limit)]

        if type(t) is TupleType:
            n = len(t.fields)
            sub = []
            for r in rows:
                h = r[0]
                if type(h) is PatternTuple and len(h.patterns) == n:
                    sub.append(list(h.patterns) + r[1:])
                elif type(h) in (PatternWildcard, PatternVar):
                    sub.append([PatternWildcard()] * n + r[1:])
            out = []
            for v in self._missing(sub, list(t.fields) + rest_t, limit):
                out.append([("tuple", v[:n])] + v[n:])
            return out
        info = self._adt_ctors(t)
        if info is None or not any(type(h) is PatternConstructor for h in heads):
            if info is not None and not info[0]:
                return []  # a type without constructors has no values
            return default()
        ctors = info[0]
        out: list[list] = []
        for name, fields in ctors:
            k = len(fields)
            sub = []
            for r in rows:
                h = r[0]
                if type(h) is PatternConstructor:
                    if h.constructor.name_hint == name:
                        sub.append(list(h.patterns) + r[1:])
                elif type(h) in (PatternWildcard, PatternVar):
                    sub.append([PatternWildcard()] * k + r[1:])
            for v in self._missing(sub, fields + rest_t, limit):
                out.append([("ctor", name, v[:k])] + v[k:])
                if len(out) >= limit:
                    return out
        return out

    # ------------------------------------------------------------------ rebuild
