"""ToANormalForm: the pipeline's canonical form (every non-atomic sub-expression let-bound)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generator

from relay_ir.errors import InternalError
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var,
                           with_fields, with_same_type)
from relay_ir.module import IRModule
from relay_ir.passes._analysis import fresh_copy
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.traversal import bound_vars, children, run_generators, same_scope_children

Gen = Generator[Any, Any, Any]


_ATOMS = frozenset({Var, GlobalVar, Constant, Op, Constructor})


def _is_atom(e: Expr) -> bool:
    return type(e) in _ATOMS


@dataclass(slots=True, eq=False)
class _Scope:
    """A lexical scope: a function body, an if branch, a match arm (or the top level)."""

    parent: _Scope | None
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        self.depth = 0 if self.parent is None else self.parent.depth + 1


def _lca(a: _Scope | None, b: _Scope) -> _Scope:
    if a is None or a is b:
        return b
    while a.depth > b.depth:
        a = a.parent  # type: ignore[assignment]
    while b.depth > a.depth:
        b = b.parent  # type: ignore[assignment]
    while a is not b:
        a, b = a.parent, b.parent  # type: ignore[assignment]
    return a


def _edges(e: Expr) -> list[tuple[Expr, int]]:
    """Children with a scope slot: -1 = evaluated in the parent's scope, i >= 0 = nested scope i."""
    t = type(e)
    if t is Function:
        return [] if e.is_primitive else [(e.body, 0)]  # NOTE: primitive bodies stay as is
    if t is If:
        return [(e.cond, -1), (e.true_branch, 1), (e.false_branch, 2)]
    if t is Match:
        return [(e.data, -1)] + [(c.rhs, i + 1) for i, c in enumerate(e.clauses)]
    if t is Let:
        return [(e.value, -1), (e.body, -1)]
    if t is Call:
        return [(c, -1) for c in (e.op, *e.args)]
    if t is Tuple:
        return [(c, -1) for c in e.fields]
    if t is TupleGetItem:
        return [(e.tuple_value, -1)]
    if t is RefCreate:
        return [(e.value, -1)]
    if t is RefRead:
        return [(e.ref, -1)]
    if t is RefWrite:
        return [(e.ref, -1), (e.value, -1)]
    return []


def _shares_with(fn: Function, outside: set[Expr]) -> bool:
    """True if a compound node of ``fn``'s body that binds variables is also used outside it.

    A shared node without binders is harmless (both sides compute the same pure value), and
    copying it anyway would make the pass copy the function again on every run.
    """
    seen: set[int] = set()
    stack = [fn.body]
    while stack:
        e = stack.pop()
        if type(e) in _ATOMS or id(e) in seen:
            continue
        if e in outside:
            if bound_vars(e):
                return True
            continue
        seen.add(id(e))
        stack.extend(children(e))
    return False


class _ANF:
    def __init__(self, body: Expr, fresh: Callable[[], str]) -> None:
        self.fresh = fresh
        self.root = _Scope(None)
        self.scope: dict[Expr, _Scope] = {}
        self.nested: dict[tuple[int, int], _Scope] = {}
        self.uses: dict[Expr, int] = {}
        self.memo: dict[Expr, Expr] = {}
        self.open: dict[_Scope, list[tuple[Var, Expr, Expr | None]]] = {}
        self.copy_prims: set[Function] = set()
        self._assign_scopes(body)

    def _assign_scopes(self, body: Expr) -> None:
        # NOTE: a node's scope is the lowest common ancestor of the scopes of all its uses, so
        # it is computed once every parent is done: Kahn's order over the DAG (atoms skipped).
        uses = self.uses
        uses[body] = 1
        if _is_atom(body):
            return
        seen = {body}
        stack = [body]
        while stack:  # count the parents (uses) of every compound node
            node = stack.pop()
            for child, _slot in _edges(node):
                if type(child) in _ATOMS:
                    continue
                if child in seen:
                    uses[child] += 1
                else:
                    seen.add(child)
                    uses[child] = 1
                    stack.append(child)
        # NOTE: a primitive function's body is left alone; if it shares a node with the code
        # around it, ANF would bind that node's binders outside too: such a function is copied
        # with fresh binders instead.
        for node in seen:
            if type(node) is Function and node.is_primitive and _shares_with(node, seen):
                self.copy_prims.add(node)
        scope, nested = self.scope, self.nested
        scope[body] = self.root
        waiting = dict(uses)
        ready = [body]
        while ready:
            node = ready.pop()
            s = scope[node]
            for child, slot in _edges(node):
                if type(child) in _ATOMS:
                    continue
                if slot >= 0:
                    key = (id(node), slot)
                    use_scope = nested.get(key)
                    if use_scope is None:
                        use_scope = nested[key] = _Scope(s)
                else:
                    use_scope = s
                old = scope.get(child)
                scope[child] = use_scope if old is None else _lca(old, use_scope)
                left = waiting[child] - 1
                waiting[child] = left
                if left == 0:
                    ready.append(child)

    # -- filling ------------------------------------------------------------
    def fill(self, e: Expr, s: _Scope) -> Expr:
        """The let chain that computes ``e`` inside scope ``s``, ending in an atom."""
        return run_generators(self.fill_scope(e, s))

    # NOTE: fill_scope, atom, fill_let and rebuild are generators: where one needs another's
    # result it yields the sub-call (`r = yield self.atom(c)`), so nesting costs no recursion.
    def fill_scope(self, e: Expr, s: _Scope) -> Gen:
        self.open[s] = []
        result = yield self.atom(e)
        bindings = self.open.pop(s)
        for var, value, src in reversed(bindings):
            # NOTE: an original let that is already in normal form is reused (same node)
            if type(src) is Let and src.var is var and src.value is value and \
                    src.body is result:
                result = src
            else:
                result = Let(var, value, result, span=src.span if src is not None else None)
        return result

    def _emit(self, node: Expr, var: Var, value: Expr, src: Expr | None) -> None:
        s = self.scope.get(node, self.root)
        lst = self.open.get(s)
        if lst is None:
            raise InternalError("to-anf: binding placed in a scope that is not open")
        lst.append((var, value, src))

    def bind(self, node: Expr, value: Expr) -> Var:
        var = Var(self.fresh(), node.checked_type_, span=node.span)
        self._emit(node, var, value, node)
        return var

    def atom(self, e: Expr) -> Gen:
        """An atom holding the value of ``e`` (binding ``e`` and its parts where needed)."""
        if _is_atom(e):
            return e
        memo = self.memo
        if e in memo:
            return memo[e]
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            n, ready = stack.pop()
            if _is_atom(n) or n in memo:
                continue
            if type(n) is Let:
                memo[n] = yield self.fill_let(n)
                continue
            if not ready:
                stack.append((n, True))
                for c in reversed(same_scope_children(n)):
                    if not _is_atom(c) and c not in memo:
                        stack.append((c, False))
                continue
            memo[n] = self.bind(n, (yield self.rebuild(n)))
        return memo[e]

    def fill_let(self, let: Let) -> Gen:
        lets = [let]
        body = let.body
        # NOTE: a let shared with another position (a DAG node) ends the spine: it is bound once
        while type(body) is Let and self.uses.get(body, 1) <= 1 and body not in self.memo:
            lets.append(body)
            body = body.body
        home = self.scope.get(let, self.root)
        for lt in lets:
            value = lt.value
            if _is_atom(value):
                pass
            elif value in self.memo:
                value = self.memo[value]
            elif type(value) is not Let and (self.uses.get(value, 1) <= 1 or
                                             self.scope.get(value) is home):
                # NOTE: bind the let's own variable to the value; a shared value whose uses all
                # lie in this scope is first met here, so every other use is in the let body
                for c in same_scope_children(value):
                    yield self.atom(c)
                new = yield self.rebuild(value)
                if self.uses.get(value, 1) > 1:
                    self.memo[value] = lt.var
                value = new
            else:
                value = yield self.atom(value)
            self._emit(let, lt.var, value, lt)
        return (yield self.atom(body))

    def _a(self, c: Expr) -> Expr:
        return c if _is_atom(c) else self.memo[c]

    def rebuild(self, n: Expr) -> Gen:
        """``n`` with atomic children (same-scope children must already be in the memo)."""
        t = type(n)
        a = self._a
        if t is Call:
            args = tuple(a(x) for x in n.args)
            if all(x is y for x, y in zip(args, n.args)):
                args = n.args
            return with_same_type(n, op=a(n.op), args=args)
        if t is Tuple:
            fields = tuple(a(x) for x in n.fields)
            if all(x is y for x, y in zip(fields, n.fields)):
                fields = n.fields
            return with_same_type(n, fields=fields)
        if t is TupleGetItem:
            return with_same_type(n, tuple_value=a(n.tuple_value))
        if t is RefCreate:
            return with_same_type(n, value=a(n.value))
        if t is RefRead:
            return with_same_type(n, ref=a(n.ref))
        if t is RefWrite:
            return with_same_type(n, ref=a(n.ref), value=a(n.value))
        if t is If:
            tb = yield self.fill_scope(n.true_branch, self._nested(n, 1))
            fb = yield self.fill_scope(n.false_branch, self._nested(n, 2))
            return with_same_type(n, cond=a(n.cond), true_branch=tb, false_branch=fb)
        if t is Match:
            arms = []
            for i, c in enumerate(n.clauses):
                arms.append(with_fields(c, rhs=(yield self.fill_scope(c.rhs,
                                                                      self._nested(n, i + 1)))))
            clauses = tuple(arms)
            if all(a is b for a, b in zip(clauses, n.clauses)):
                clauses = n.clauses
            return with_same_type(n, data=a(n.data), clauses=clauses)
        if t is Function:
            if n.is_primitive:  # NOTE: fused (Primitive=1) functions stay dataflow, as in TVM
                return fresh_copy(n) if n in self.copy_prims else n
            return with_same_type(n, body=(yield self.fill_scope(n.body, self._nested(n, 0))))
        raise InternalError(f"to-anf: unexpected {t.__name__}")

    def _nested(self, n: Expr, slot: int) -> _Scope:
        s = self.nested.get((id(n), slot))
        if s is None:  # NOTE: an atomic child creates no scope entry; any fresh scope works
            s = self.nested[(id(n), slot)] = _Scope(self.scope.get(n, self.root))
        return s


def _namer(prefix: str = "x") -> Callable[[], str]:
    # NOTE: names need not be unique (variables are objects; the printer disambiguates)
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        return f"{prefix}{counter[0] - 1}"
    return fresh


def to_anf_function(fn: Function) -> Function:
    """A-normal form of one function (its parameters kept; primitive functions unchanged)."""
    if fn.is_primitive:
        return fn
    return _to_anf_function(fn, _namer())


def _to_anf_function(fn: Function, fresh: Callable[[], str]) -> Function:
    anf = _ANF(fn.body, fresh)
    body = anf.fill(fn.body, anf.root)
    return with_same_type(fn, body=body)


def to_anf_expr(e: Expr) -> Expr:
    """A-normal form of an expression (a let chain ending in an atom)."""
    anf = _ANF(e, _namer())
    return anf.fill(e, anf.root)


@dataclass(frozen=True)
class ToANormalForm(FunctionPass):
    """Bind every non-atomic sub-expression to a let variable, one binding per shared node.

    Rule: ``f(g(x), y)  =>  let %a = g(x); let %b = f(%a, y); %b`` -- atoms (variables, globals,
    constants, ops, constructors) stay in place; every call, tuple, projection, reference
    operation, ``if``, ``match`` and function literal gets its own ``let``; function bodies, if
    branches and match arms are scopes whose let chains end in an atom.

    Sharing becomes one ``let``, placed in the innermost scope that contains every use (so a
    value used in both branches of an ``if`` is computed once before it). Existing lets are
    kept with their variables. Types (``checked_type_``) are carried onto the new variables.
    Primitive (fused, ``Primitive=1``) functions keep their dataflow bodies, as in TVM.
    Idempotent.
    """

    name: ClassVar[str] = "to-anf"
    opt_level: ClassVar[int] = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return to_anf_function(func)

