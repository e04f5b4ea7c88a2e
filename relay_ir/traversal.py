"""Iterative traversal helpers: let spines as lists, post-order walks, free variables.

Nothing here recurses in Python: a 100,000-binding let chain or a 100,000-deep dataflow chain
is walked with an explicit stack.
"""
from __future__ import annotations

from typing import Any, Container, Generator, Iterable, Iterator, TypeVar as _TV

from relay_ir.expr import (Call, Expr, Function, If, Let, Match, Pattern, PatternConstructor,
                           PatternTuple, PatternVar, RefCreate, RefRead, RefWrite, Tuple,
                           TupleGetItem, Var)
from relay_ir.ty import (FuncType, IncompleteType, RefType, ShapeVar, TensorType, TupleType,
                         Type, TypeCall, TypeVar, dim_vars, type_children)

R = _TV("R")


def flatten_lets(e: Expr) -> tuple[list[Let], Expr]:
    """The let spine of ``e``: the Let nodes from outermost in, and the final body."""
    lets: list[Let] = []
    while isinstance(e, Let):
        lets.append(e)
        e = e.body
    return lets, e


def build_lets(bindings: Iterable[tuple[Var, Expr]], body: Expr) -> Expr:
    """``let v1 = e1; let v2 = e2; ...; body`` built from the inside out."""
    for var, value in reversed(list(bindings)):
        body = Let(var, value, body)
    return body


def dataflow_children(e: Expr) -> tuple[Expr, ...]:
    """Sub-expressions of a dataflow node (call, tuple, projection, ref ops); () otherwise."""
    t = type(e)
    if t is Call:
        return (e.op, *e.args)
    if t is Tuple:
        return e.fields
    if t is TupleGetItem:
        return (e.tuple_value,)
    if t is RefCreate:
        return (e.value,)
    if t is RefRead:
        return (e.ref,)
    if t is RefWrite:
        return (e.ref, e.value)
    return ()


_DATAFLOW_TYPES = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)


def dataflow_post_order(root: Expr, done: Container[Expr]) -> Iterator[Expr]:
    """The dataflow nodes of ``root`` (itself included) not in ``done``, children first.

    Iterative (an explicit stack). The consumer records each yielded node in ``done`` (a memo)
    before asking for the next, so a node shared in the DAG is yielded once.
    """
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in done:
            continue
        if ready:
            yield node
            continue
        stack.append((node, True))
        for c in reversed(dataflow_children(node)):
            if type(c) in _DATAFLOW_TYPES and c not in done:
                stack.append((c, False))


def same_scope_children(e: Expr, op_last: bool = False) -> tuple[Expr, ...]:
    """Sub-expressions evaluated in ``e``'s own scope, not inside a body, branch or arm.

    That is the dataflow children, an if's condition and a match's scrutinee. ``op_last``
    puts a call's callee after its arguments (the printer's hoisting order).
    """
    t = type(e)
    if t is If:
        return (e.cond,)
    if t is Match:
        return (e.data,)
    if op_last and t is Call:
        return (*e.args, e.op)
    return dataflow_children(e)


def children(e: Expr) -> tuple[Expr, ...]:
    """Every immediate sub-expression of ``e``, in evaluation order.

    Includes binders (let vars, params) and crosses into function bodies, branches and match
    arms. Pattern variables are reached through :func:`pattern_vars`.
    """
    t = type(e)
    if t is Let:
        return (e.var, e.value, e.body)
    if t is Function:
        return (*e.params, e.body)
    if t is If:
        return (e.cond, e.true_branch, e.false_branch)
    if t is Match:
        return (e.data, *(c.rhs for c in e.clauses))
    return dataflow_children(e)


def use_children(e: Expr) -> tuple[Expr, ...]:
    """The children of ``e`` that are uses: :func:`children` without let vars and params."""
    t = type(e)
    if t is Let:
        return (e.value, e.body)
    if t is Function:
        return (e.body,)
    return children(e)


def post_order(e: Expr) -> Iterator[Expr]:
    """Every node reachable from ``e`` once, children before parents (a DAG walk)."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for c in reversed(children(node)):
            if id(c) not in seen:
                stack.append((c, False))


def pattern_vars(p: Pattern) -> list[Var]:
    """The variables bound by pattern ``p``, left to right."""
    out: list[Var] = []
    stack = [p]
    while stack:
        q = stack.pop()
        if isinstance(q, PatternVar):
            out.append(q.var)
        elif isinstance(q, (PatternConstructor, PatternTuple)):
            stack.extend(reversed(q.patterns))
    return out


def bound_vars(e: Expr) -> list[Var]:
    """Every variable bound inside ``e`` (let vars, parameters, pattern variables)."""
    out: list[Var] = []
    for node in post_order(e):
        if isinstance(node, Let):
            out.append(node.var)
        elif isinstance(node, Function):
            out.extend(node.params)
        elif isinstance(node, Match):
            for c in node.clauses:
                out.extend(pattern_vars(c.lhs))
    return out


def vars_in(roots: Iterable[Expr]) -> list[Var]:
    """Every variable occurring in ``roots`` (binders too), once, in pre-order; DAG-aware."""
    out: list[Var] = []
    seen: set[int] = set()
    stack = list(roots)[::-1]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node) is Var:
            out.append(node)
            continue
        stack.extend(reversed(children(node)))
    return out


def free_vars(e: Expr) -> list[Var]:
    """Variables used in ``e`` but not bound in it, in order of first use (pre-order)."""
    bound = set(bound_vars(e))
    return [v for v in vars_in((e,)) if v not in bound]


def free_type_vars(t: Type) -> list[TypeVar | ShapeVar]:
    """Type and shape variables occurring free in ``t``."""
    out: dict = {}
    stack: list[tuple[Type, frozenset]] = [(t, frozenset())]
    while stack:
        ty, bound = stack.pop()
        if isinstance(ty, TypeVar):
            if ty not in bound:
                out[ty] = None
        elif isinstance(ty, TensorType):
            for d in ty.shape:
                for v in dim_vars(d):
                    if v not in bound:
                        out[v] = None
        elif isinstance(ty, FuncType):
            inner = bound | frozenset(ty.type_params)
            stack.extend((a, inner) for a in reversed((*ty.arg_types, ty.ret_type)))
        elif isinstance(ty, TupleType):
            stack.extend((f, bound) for f in reversed(ty.fields))
        elif isinstance(ty, RefType):
            stack.append((ty.value, bound))
        elif isinstance(ty, TypeCall):
            stack.extend((a, bound) for a in reversed((ty.func, *ty.args)))
    return list(out)


def has_incomplete(t: Type) -> bool:
    """True if ``t`` still contains an IncompleteType."""
    stack = [t]
    while stack:
        ty = stack.pop()
        if type(ty) is IncompleteType:
            return True
        stack.extend(type_children(ty))
    return False


def run_generators(gen: Generator[Any, Any, R]) -> R:
    """Run a recursive computation written as generators, without Python recursion.

    A recursive function becomes a generator that, where it used to call itself, yields the
    generator of the sub-call and receives its result: ``r = yield self.walk(child)``. One
    loop drives the stack of suspended generators, so nesting depth costs list entries, not
    Python frames. Exceptions raised in a sub-call propagate into the yielding generator
    (``try``/``finally`` around a ``yield`` works as it would around a call).
    """
    stack: list[Generator[Any, Any, Any]] = [gen]
    send: Any = None
    exc: BaseException | None = None
    while True:
        top = stack[-1]
        try:
            if exc is None:
                sub = top.send(send)
            else:
                e, exc = exc, None
                sub = top.throw(e)
        except StopIteration as stop:
            stack.pop()
            if not stack:
                return stop.value
            send = stop.value
            continue
        except BaseException as e:  # noqa: B902 - re-raised into the caller generator
            stack.pop()
            if not stack:
                raise
            exc = e
            continue
        stack.append(sub)
        send = None


def function_free_vars(root: Function, cache: dict[Function, list[Var]]) -> list[Var]:
    """:func:`free_vars` of ``root``, computing (and caching) that of every nested function.

    Each function's own scope is walked once; a nested function contributes its cached free
    variables instead of being walked again, so a program of N nested functions costs O(N)
    rather than O(N^2). The order is that of :func:`free_vars` (first use, pre-order).
    """
    if root in cache:
        return cache[root]
    order: list[Function] = []
    stack: list[tuple[Function, bool]] = [(root, False)]
    while stack:
        f, ready = stack.pop()
        if ready:
            order.append(f)
        elif f not in cache:
            stack.append((f, True))
            stack.extend((g, False) for g in _scope_walk(f, cache)[1] if g not in cache)
    for f in order:
        if f not in cache:
            cache[f] = _scope_walk(f, cache)[0]
    return cache[root]


def _scope_walk(f: Function, cache: dict[Function, list[Var]]
                ) -> tuple[list[Var], list[Function]]:
    """The free variables of ``f`` (nested functions read from ``cache``) and the nested
    functions missing from ``cache``, walking ``f``'s own scope once in pre-order."""
    seen_vars: dict[Var, None] = {}
    bound: set[Var] = set(f.params)
    missing: list[Function] = []
    seen: set[int] = {id(f)}
    stack: list[Expr] = [f.body]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        t = type(node)
        if t is Var:
            seen_vars[node] = None
            continue
        if t is Function:
            inner = cache.get(node)
            if inner is None:
                missing.append(node)
            else:
                for v in inner:
                    seen_vars[v] = None
            continue
        if t is Let:
            bound.add(node.var)
        elif t is Match:
            for c in node.clauses:
                bound.update(pattern_vars(c.lhs))
        stack.extend(reversed(children(node)))
    return [v for v in seen_vars if v not in bound], missing
