"""MergeContinuations: a chain of continuation closures stored in one reference becomes one.

Reverse-mode AD (``passes.gradient``) builds the backward pass as a chain of closures, one per
differentiable operator call: each reads the current backpropagator from a reference ``%bp``,
wraps it and stores the wrapper back::

    let %k = ref_read(%bp);
    let %f = fn () { <adjoints of op 1>; %k() };
    let %_ = ref_write(%bp, %f);
    ...                                        (no effect that can reach %bp)
    let %k1 = ref_read(%bp);
    let %f1 = fn () { <adjoints of op 2>; %k1() };
    let %_1 = ref_write(%bp, %f1);
      =>
    let %k = ref_read(%bp);
    ...
    let %f1 = fn () { <adjoints of op 2>; <adjoints of op 1>; %k() };
    let %_1 = ref_write(%bp, %f1);

The read ``%k1`` can only see ``%f`` (store forwarding through ``%bp``), ``%f`` is called only
there, so it is inlined at that tail call; the first write is dead (overwritten before anything
reads it) and goes. One closure per straight-line region is left instead of one per operator:
per region, one closure allocation, one invocation and one read and write of ``%bp`` instead
of one each per operator. The effects run in the same order, so values never change.

Conditions (all checked; otherwise the spine is left as is):

* ``%f`` and ``%f1`` are function literals without parameters or attributes; ``%f`` is used
  only by its ``ref_write``, whose result is unused; ``%f1`` ends in a tail call ``%k1()`` and
  ``%k1`` has no other use;
* between the first write and the second, every binding is effect-free for ``%bp``: atoms,
  tuples, projections, function literals, ``ref(...)``, calls of operators that are not
  effectful and of constructors, and reads or writes of references that cannot be ``%bp``
  (another reference type, or another reference created in scope). Any other call, ``if``
  or ``match`` ends the chain.

Then, inside every function body, a read of a reference that this spine wrote last (with no
binding in between that may write it) is replaced by the written value: merging puts the
write of an adjoint and its read in one body (``ref_write(%c, %acc); ...; ref_read(%c)``).
The write stays (another reader may follow).

The use counts are taken over the whole function once; a function whose expression graph
shares a non-atomic node is left alone (counts over a DAG would be wrong).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from relay_ir.expr import (Call, Constructor, Expr, Function, Let, Op, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var, is_atom, type_of)
from relay_ir.functor import ExprMutator, substitute
from relay_ir.module import IRModule
from relay_ir.passes._analysis import op_is_effectful
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.traversal import build_lets, flatten_lets, post_order, use_children
from relay_ir.ty import RefType


def use_counts(root: Expr) -> dict[Var, int] | None:
    """Occurrences of each variable in a use position of ``root`` (binders excluded); None
    when a non-atomic node is reachable twice (a shared node would be counted once)."""
    counts: dict[Var, int] = {}
    seen: set[int] = set()
    stack: list[Expr] = [root]
    while stack:
        node = stack.pop()
        if type(node) is Var:
            counts[node] = counts.get(node, 0) + 1
            continue
        if is_atom(node):
            continue
        if id(node) in seen:
            return None
        seen.add(id(node))
        stack.extend(use_children(node))
    return counts


def _tail_call_of(body: Expr) -> tuple[list[Let], Var] | None:
    """``(bindings, %k)`` when ``body`` is ``lets...; %k()`` or ``lets...; let %x = %k(); %x``."""
    lets, last = flatten_lets(body)
    if type(last) is Var and lets and lets[-1].var is last:
        val = lets[-1].value
        lets = lets[:-1]
    else:
        val = last
    if type(val) is Call and type(val.op) is Var and not val.args:
        return lets, val.op
    return None


def _chain_closure(e: Expr) -> bool:
    return (type(e) is Function and not e.params and not e.type_params
            and (not e.attrs or dict(e.attrs) == {"Once": 1}))


def _once(e: Expr) -> bool:
    return type(e) is Function and bool(e.attrs) and e.attrs.get("Once", 0) == 1


class _Spine:
    """Reference facts of one let spine and the spines around it."""

    def __init__(self, created: set[Var]):
        self.created = created   # variables bound to ``ref(...)`` in scope

    def may_alias(self, a: Expr, b: Var) -> bool:
        if a is b:
            return True
        if type(a) is not Var:
            return True
        if a in self.created and b in self.created:
            return False   # NOTE: two ``ref(...)`` bindings are two distinct cells
        ta, tb = type_of(a), type_of(b)
        if isinstance(ta, RefType) and isinstance(tb, RefType):
            return ta == tb
        return True

    def may_touch(self, value: Expr, r: Var) -> bool:
        """Whether evaluating ``value`` may read or write the reference ``r``."""
        t = type(value)
        if is_atom(value) or t in (Tuple, TupleGetItem, Function, RefCreate):
            return False
        if t in (RefRead, RefWrite):
            return self.may_alias(value.ref, r)
        if t is Call:
            op = value.op
            if type(op) is Op:
                return op_is_effectful(op)
            return type(op) is not Constructor
        return True

    def may_write(self, value: Expr, r: Var) -> bool:
        """Whether evaluating ``value`` may write the reference ``r`` (reads are harmless)."""
        if type(value) is RefRead:
            return False
        return self.may_touch(value, r)


def merge_spine(spine: Let, counts: dict[Var, int], facts: _Spine) -> Expr:
    """Merge the continuation chains of one let spine (see the module docstring)."""
    spine_lets, body = flatten_lets(spine)
    n = len(spine_lets)
    # NOTE: the final expression takes part as a binding of no variable (index n)
    lets: list[Any] = [*spine_lets, Let(Var("_"), body, body)]
    # per reference: (index of the live write, the closure it stored) while nothing since
    # may have touched the reference
    live: dict[Var, list] = {}   # reference -> [index of its live write, closure, reads since]
    reads: dict[Var, tuple[Var, int]] = {}    # %k1 -> (reference, index of the live write)
    drop: set[int] = set()
    merged: dict[Var, Function] = {}          # closure variable -> its merged literal
    index_of_fn: dict[Var, int] = {}

    def literal(f: Var) -> Function | None:
        if f in merged:
            return merged[f]
        return lets[index_of_fn[f]].value if f in index_of_fn else None  # type: ignore

    for i, node in enumerate(lets):
        var, val = node.var, node.value
        if i == n:
            var = None
        t = type(val)
        if t is RefRead and type(val.ref) is Var and val.ref in live:
            r = val.ref
            for r2 in [r2 for r2 in live if r2 is not r and facts.may_alias(r, r2)]:
                del live[r2]
            live[r][2] += 1
            if counts.get(var, 0) == 1 and live[r][2] == 1:
                reads[var] = (r, live[r][0])
            else:
                del live[r]   # NOTE: a second reader would see the closure a merge drops
            continue
        if t is Function:
            if var is not None and _chain_closure(val):
                index_of_fn[var] = i
                tail = _tail_call_of(val.body)
                if tail is not None and tail[1] in index_of_fn and counts.get(tail[1], 0) == 1:
                    # NOTE: the tail calls a closure of this spine that nothing else uses:
                    # inline it there (it runs at the same point)
                    inner = literal(tail[1])
                    new_body = build_lets(((b.var, b.value) for b in tail[0]), inner.body)
                    merged[var] = Function((), new_body, val.ret_type, attrs=val.attrs,
                                           span=val.span)
                    drop.add(index_of_fn.pop(tail[1]))
                    merged.pop(tail[1], None)
            continue
        if t is RefWrite and type(val.ref) is Var and type(val.value) is Var:
            r, f = val.ref, val.value
            lit = literal(f)
            tail = _tail_call_of(lit.body) if lit is not None else None
            if tail is not None and tail[1] in reads and reads[tail[1]][0] is r \
                    and r in live and live[r][0] == reads[tail[1]][1]:
                w_a, f_a = live[r][0], live[r][1]
                lit_a = literal(f_a)
                k_idx = next(j for j in range(w_a + 1, i) if lets[j].var is tail[1])
                new_body = build_lets(((b.var, b.value) for b in tail[0]), lit_a.body)
                merged[f] = Function((), new_body, lit.ret_type, attrs=lit.attrs,
                                     span=lit.span)
                drop.update((w_a, index_of_fn[f_a], k_idx))
                merged.pop(f_a, None)
            for r2 in [r2 for r2 in live if facts.may_alias(r, r2)]:
                del live[r2]
            if f in index_of_fn and counts.get(f, 0) == 1 and counts.get(var, 0) == 0:
                live[r] = [i, f, 0]
            continue
        if live and not _writes_nothing(val) or t is RefRead:
            for r in [r for r in live if facts.may_touch(val, r)]:
                del live[r]
    moved = _localize_cells(lets[:n], merged, drop, counts)
    if not merged and not moved:
        return spine
    out: Expr = body
    for i in range(n - 1, -1, -1):
        if i in drop:
            continue
        node = lets[i]
        value = merged.get(node.var, node.value)
        out = Let(node.var, value, out, span=node.span)
    return out


def _localize_cells(lets: list[Let], merged: dict[Var, Function], drop: set[int],
                    counts: dict[Var, int]) -> bool:
    """Move each ``let %c = ref(atom)`` of the spine whose every use is inside one ``Once=1``
    closure literal of the spine into that closure (then :func:`dead_ref_elim` turns it into
    lets there). Sound because such a closure value runs at most once: the cell is made, then
    used only by that one run, exactly as before. Updates ``merged`` and ``drop``; whether
    anything moved."""
    from relay_ir.passes.dead_ref import dead_ref_elim
    cells = {node.var: i for i, node in enumerate(lets)
             if i not in drop and type(node.value) is RefCreate and is_atom(node.value.value)
             and counts.get(node.var, 0) > 0}
    if not cells:
        return False
    moved = False
    for j, node in enumerate(lets):
        if j in drop:
            continue
        lit = merged.get(node.var, node.value)
        if not _once(lit):
            continue
        inner = use_counts(lit.body)
        if inner is None:
            continue
        mine = [c for c, k in inner.items() if c in cells and cells[c] < j
                and cells[c] not in drop and k == counts[c]]
        if not mine:
            continue
        body = lit.body
        for c in sorted(mine, key=lambda c: -cells[c]):
            body = Let(c, lets[cells[c]].value, body, span=lets[cells[c]].span)
            drop.add(cells[c])
        new = Function(lit.params, body, lit.ret_type, lit.type_params, lit.attrs,
                       span=lit.span)
        merged[node.var] = dead_ref_elim(new)  # type: ignore[assignment]
        moved = True
    return moved


class _LastWrites:
    """The value last written to each reference of a spine, killed in amortized O(1): by
    type buckets (cells made by ``ref(...)`` in scope never alias one another)."""

    def __init__(self, facts: _Spine):
        self.facts = facts
        self.value: dict[Var, Expr] = {}
        self.buckets: dict[tuple[Any, bool], set[Var]] = {}

    def _key(self, r: Var) -> tuple[Any, bool]:
        t = type_of(r)
        return (t if isinstance(t, RefType) else None, r in self.facts.created)

    def _kill(self, key: tuple[Any, bool]) -> None:
        for r in self.buckets.pop(key, ()):
            self.value.pop(r, None)

    def kill_all(self) -> None:
        self.value.clear()
        self.buckets.clear()

    def write(self, r: Expr, v: Expr | None) -> None:
        """A write of ``v`` (None: unknown) to ``r``: kill what may alias it, then record."""
        if type(r) is not Var or self._key(r)[0] is None:
            self.kill_all()
        else:
            t, made = self._key(r)
            self.value.pop(r, None)
            self.buckets.get((t, made), set()).discard(r)
            self._kill((t, False))      # NOTE: another variable may hold the same cell
            self._kill((None, False))
            self._kill((None, True))
            if not made:
                self._kill((t, True))
        if v is not None and type(r) is Var and self._key(r)[0] is not None:
            self.value[r] = v
            self.buckets.setdefault(self._key(r), set()).add(r)


def _writes_nothing(val: Expr) -> bool:
    """Whether evaluating ``val`` cannot write any reference."""
    t = type(val)
    if is_atom(val) or t in (Tuple, TupleGetItem, Function, RefCreate, RefRead):
        return True
    if t is Call:
        op = val.op
        if type(op) is Op:
            return not op_is_effectful(op)
        return type(op) is Constructor
    return False


def forward_reads(spine: Let, facts: _Spine) -> Expr:
    """Within one spine: ``ref_write(%r, %v); ...; let %x = ref_read(%r)`` => ``%x := %v``
    when no binding in between may write ``%r``."""
    lets, body = flatten_lets(spine)
    last = _LastWrites(facts)
    subst: dict[Var, Expr] = {}
    out: list[Let] = []
    for node in lets:
        val = node.value
        t = type(val)
        if t is RefRead and type(val.ref) is Var and val.ref in last.value:
            subst[node.var] = last.value[val.ref]
            continue
        if t is RefWrite:
            v = val.value
            if type(v) is Var:
                v = subst.get(v, v)
            last.write(val.ref, v if is_atom(v) else None)
        elif not _writes_nothing(val):
            last.kill_all()
        out.append(node)
    if not subst:
        return spine
    new: Expr = body
    for node in reversed(out):
        new = Let(node.var, node.value, new, span=node.span)
    return substitute(new, subst)


class _Merge(ExprMutator):
    def __init__(self, counts: dict[Var, int], facts: _Spine):
        super().__init__()
        self.counts, self.facts = counts, facts

    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        new = yield from super().visit_let(let)
        if type(new) is Let:
            new = merge_spine(new, self.counts, self.facts)
        return new


class _Forward(ExprMutator):
    def __init__(self, facts: _Spine):
        super().__init__()
        self.facts = facts

    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        new = yield from super().visit_let(let)
        if type(new) is Let:
            new = forward_reads(new, self.facts)
        return new


def merge_continuations(func: Expr) -> Expr:
    """Apply :class:`MergeContinuations`'s rules to one expression."""
    nodes = list(post_order(func))
    if not any(type(n) is RefWrite for n in nodes):
        return func
    counts = use_counts(func)
    if counts is None:
        return func
    created = {n.var for n in nodes if type(n) is Let and type(n.value) is RefCreate}
    facts = _Spine(created)
    new = _Merge(counts, facts).visit(func)
    if new is func:
        return func
    return _Forward(facts).visit(new)


@dataclass(frozen=True)
class MergeContinuations(FunctionPass):
    """``let %k1 = ref_read(%bp); let %f1 = fn () { A; %k1() }`` after ``ref_write(%bp, %f)``
    with ``%f = fn () { B }`` => ``let %f1 = fn () { A; B }``: the backpropagator closures of
    a straight-line region become one (the effects keep their order)."""

    name: ClassVar[str] = "merge-continuations"
    opt_level: ClassVar[int] = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return merge_continuations(func)  # type: ignore[return-value]
