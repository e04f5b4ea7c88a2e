"""EliminateCommonSubexpr: compute identical pure expressions once."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar, Generator, Iterator

from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let,
                           Match, Op, Tuple, TupleGetItem, Var, with_fields)
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes._analysis import fresh_copy, op_is_effectful
from relay_ir.passes.pass_manager import FunctionPass, PassContext


def _atom_key(e: Expr) -> Any:
    t = type(e)
    if t is Constant:
        d = e.data
        return ("const", d.dtype.str, d.shape, d.tobytes())
    if t is GlobalVar:
        return ("global", e.name_hint)
    if t is Op:
        return ("op", e.name)
    if t is Constructor:
        return ("ctor", e.name_hint)
    return ("node", id(e))  # NOTE: Vars and already-canonical compound nodes, by identity


_MISSING = object()


class _CSE(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.table: dict[Any, Expr] = {}
        self.undo: list[list[Any]] = [[]]
        self.memo_marks: list[int] = []
        self.keys: dict[Expr, Any] = {}
        self.keep: list[Expr] = []  # keeps nodes alive so id-based keys stay valid
        self.first: dict[Expr, Expr] = {}  # function / match node -> its first rewrite
        self.bound: set[Var] = set()  # let variables bound by the output so far

    def once_bound(self, node: Expr, new: Expr) -> Expr:
        """``new``, alpha-renamed if ``node`` (which binds variables) was rewritten before.

        NOTE: a node shared between sibling scopes is rewritten once per scope (see ``pop``);
        when it binds variables, two different rewrites would bind the same variables twice.
        """
        prev = self.first.get(node)
        if prev is None:
            self.first[node] = new
            return new
        if new is prev:
            return new
        return fresh_copy(new)

    # -- scoped table ---------------------------------------------------------
    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A nested scope: what is remembered inside is forgotten at its end."""
        self.push()
        try:
            yield
        finally:
            self.pop()

    def push(self) -> None:
        self.undo.append([])
        self.memo_marks.append(len(self.memo))

    def pop(self) -> None:
        for key, old in reversed(self.undo.pop()):
            if old is None:
                self.table.pop(key, None)
            else:
                self.table[key] = old
        # NOTE: results memoized inside the scope may mention its variables; a node shared
        # with a sibling scope must be rewritten again there (memo is insertion-ordered).
        mark = self.memo_marks.pop()
        memo = self.memo
        while len(memo) > mark:
            memo.popitem()

    def remember(self, key: Any, e: Expr) -> None:
        self.undo[-1].append((key, self.table.get(key)))
        self.table[key] = e
        self.keep.append(e)

    def key(self, e: Expr) -> Any:
        """The structural key of a pure, mergeable node (None if it must not be merged)."""
        k = self.keys.get(e, _MISSING)
        if k is _MISSING:
            k = self.keys[e] = self._key(e)
        return k

    def _key(self, e: Expr) -> Any:
        t = type(e)
        if t is Call:
            if type(e.op) is Op:
                if op_is_effectful(e.op):
                    return None
            elif type(e.op) is not Constructor:
                return None
            return ("call", _atom_key(e.op), tuple(_atom_key(a) for a in e.args), e.attrs,
                    e.type_args)
        if t is Tuple:
            return ("tuple", tuple(_atom_key(f) for f in e.fields))
        if t is TupleGetItem:
            return ("proj", _atom_key(e.tuple_value), e.index)
        return None

    def canonical(self, e: Expr) -> Expr:
        k = self.key(e)
        if k is None:
            return e
        try:
            hit = self.table.get(k)
        except TypeError:  # NOTE: unhashable attribute value: do not merge
            return e
        if hit is not None:
            return hit
        self.remember(k, e)
        return e

    # -- nodes --------------------------------------------------------------
    def visit_call(self, c: Call) -> Expr:
        return self.canonical(super().visit_call(c))

    def visit_tuple(self, t: Tuple) -> Expr:
        return self.canonical(super().visit_tuple(t))

    def visit_tuple_get_item(self, t: TupleGetItem) -> Expr:
        return self.canonical(super().visit_tuple_get_item(t))

    def visit_binding(self, var: Var, value: Expr
                      ) -> Generator[Expr, Any, tuple[Var, Expr] | None]:
        if var in self.bound:
            # NOTE: a let of a node shared between sibling scopes, rewritten a second time:
            # bind a fresh variable so the output binds each variable once
            self.memo[var] = Var(var.name_hint, var.type_annotation, span=var.span)
        else:
            self.bound.add(var)
        new = yield value
        if type(new) is Var and new is not value and self.key(value) is not None:
            self.memo[var] = new  # NOTE: `let y = e` after `let x = e`: y := x
            return None
        k = self.key(new)
        if k is not None and self.table.get(k) is new:
            self.remember(k, var)  # later copies of the value become the var
        return (yield var), new

    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        # NOTE: a let nested in a value or argument is a scope of its own: its bindings are not
        # available after it (for a function body or branch this changes nothing)
        with self.scope():
            return (yield from super().visit_let(let))

    def visit_function(self, f: Function) -> Generator[Expr, Any, Expr]:
        with self.scope():
            new = yield from super().visit_function(f)
        return self.once_bound(f, new)

    def visit_if(self, i: If) -> Generator[Expr, Any, Expr]:
        cond = yield i.cond
        with self.scope():
            tb = yield i.true_branch
        with self.scope():
            fb = yield i.false_branch
        return with_fields(i, cond=cond, true_branch=tb, false_branch=fb)

    def visit_clause(self, c: Clause) -> Generator[Expr, Any, Clause]:
        with self.scope():
            return (yield from super().visit_clause(c))

    def visit_match(self, m: Match) -> Generator[Expr, Any, Expr]:
        return self.once_bound(m, (yield from super().visit_match(m)))


@dataclass(frozen=True)
class EliminateCommonSubexpr(FunctionPass):
    """Share identical pure computations that are already available in a dominating scope.

    Rules:
      ``let x = e; ... let y = e'; b  =>  let x = e; ... b[y := x]``
      ``f(e, e')  =>  f(e, e)`` (dataflow: one node)
    when ``e'`` has the same structural key as ``e``: the same op (or constructor), equal
    attributes and type arguments, and identical arguments after canonicalization (the same
    variables, equal constants). Only pure op calls, constructor calls, tuples and projections
    are merged; reference operations (``ref`` allocates a new cell each time), calls of
    functions and effectful ops never are. A binding is visible in the rest of its let body
    and in nested functions, branches and match arms, not in sibling branches.
    """

    name: ClassVar[str] = "cse"
    opt_level: ClassVar[int] = 3

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return _CSE().visit(func)  # type: ignore[return-value]
