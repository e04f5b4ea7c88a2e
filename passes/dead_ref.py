"""DeadRefElimination: store-to-load forwarding for references that do not escape.

Rules, applied to every let spine (a straight-line sequence of bindings):

* A reference ``let %r = ref(v)`` whose only uses are direct ``ref_read(%r)`` /
  ``ref_write(%r, e)`` binding values (or the spine's final expression) in the *same* spine
  becomes plain lets::

      let %r = ref(%a); let %x = ref_read(%r); let %u = ref_write(%r, %b);
      let %y = ref_read(%r); body
        =>  body[%x := %a, %y := %b, %u := ()]

  Reads are replaced by the last value written (store forwarding); every write and the
  creation are dropped. A non-atomic stored value is let-bound once first, so nothing is
  duplicated.
* A reference that *does* escape (it is captured by a closure, passed to a call, stored,
  put in a tuple, aliased, or used under ``if``/``match``/a nested scope) is treated
  conservatively: only the part of the spine *before* its first such use changes. There,
  reads are forwarded, and writes are dropped except the last one before the escape (earlier
  writes are dead: nothing can observe them).

When forwarding removed writes, unused bindings of function literals, atoms and tuples of atoms
left in the spine are dropped too (they may have been the only thing pinning another
reference), and the spine is processed again, to a fixpoint.

Everything after a reference escapes, and every reference not created by ``ref(...)`` in the
spine (parameters, call results), is left alone. Effects other than reference operations are
untouched. The pass is idempotent and never mutates its input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from relay_ir.expr import (Expr, Function, Let, RefCreate, RefRead, RefWrite, Tuple, Var,
                           is_atom, with_fields)
from relay_ir.functor import ExprMutator, substitute
from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.span import Span
from relay_ir.traversal import flatten_lets, post_order, vars_in
from relay_ir.ty import RefType

_NEVER = 1 << 62


def _fresh(r: Var, suffix: str) -> Var:
    ann = r.type_annotation
    inner = ann.value if isinstance(ann, RefType) else None
    return Var(f"{r.name_hint}_{suffix}", inner, span=r.span)


def forward_spine(spine: Let) -> Expr:
    """Apply the rules to one let spine (nested spines must have been handled already)."""
    lets, body = flatten_lets(spine)
    cands: dict[Var, int] = {}
    for i, node in enumerate(lets):
        if type(node.value) is RefCreate:
            cands[node.var] = i
    if not cands:
        return spine
    n = len(lets)
    escape = {r: _NEVER for r in cands}
    last_write: dict[Var, int] = {}

    def note_escapes(roots: list[Expr], i: int) -> None:
        for u in vars_in(roots):
            if u in cands and escape[u] > i:
                escape[u] = i

    for i, node in enumerate(lets):
        val = node.value
        t = type(val)
        if t is RefRead and val.ref in cands:
            continue
        if t is RefWrite and val.ref in cands:
            note_escapes([val.value], i)
            if escape[val.ref] > i:
                last_write[val.ref] = i
            continue
        note_escapes([val], i)
    if type(body) is RefRead and body.ref in cands:
        pass
    elif type(body) is RefWrite and body.ref in cands:
        note_escapes([body.value], n)
    else:
        note_escapes([body], n)
    # NOTE: last_write was recorded while escape points were still being discovered.
    last_write = {r: i for r, i in last_write.items() if i < escape[r]}
    for r in list(last_write):
        best = -1
        for i in range(cands[r] + 1, min(escape[r], n)):
            v = lets[i].value
            if type(v) is RefWrite and v.ref is r:
                best = i
        last_write[r] = best

    subst: dict[Var, Expr] = {}
    cur: dict[Var, Expr] = {}
    out: list[tuple[Var, Expr, Span | None]] = []
    changed = False

    def res(a: Expr) -> Expr:
        return subst.get(a, a) if type(a) is Var else a  # type: ignore[arg-type]

    def atomize(value: Expr, r: Var, suffix: str, span: Span | None) -> Expr:
        if is_atom(value):
            return res(value)
        fresh = _fresh(r, suffix)
        out.append((fresh, value, span))
        return fresh

    for i, node in enumerate(lets):
        var, val, span = node.var, node.value, node.span
        t = type(val)
        if t is RefCreate and var in cands:
            full = escape[var] == _NEVER
            if full or not is_atom(val.value):
                changed = True
            init = atomize(val.value, var, "init", span)
            cur[var] = init
            if not full:
                out.append((var, with_fields(val, value=init), span))
            continue
        if t is RefRead and val.ref in cands and i < escape[val.ref]:
            subst[var] = cur[val.ref]
            changed = True
            continue
        if t is RefWrite and val.ref in cands and i < escape[val.ref]:
            r = val.ref
            nv = atomize(val.value, r, "val", span)
            cur[r] = nv
            if escape[r] == _NEVER or i != last_write.get(r):
                subst[var] = Tuple((), span=span)
                changed = True
                continue
            out.append((var, with_fields(val, value=nv), span))
            continue
        out.append((var, val, span))
    if type(body) is RefRead and body.ref in cands and n < escape[body.ref]:
        body = cur[body.ref]
        changed = True
    elif type(body) is RefWrite and body.ref in cands and n < escape[body.ref]:
        changed = True
        nv = atomize(body.value, body.ref, "val", body.span)
        body = Tuple((), span=body.span)
    if not changed:
        return spine
    new: Expr = body
    for var, val, span in reversed(out):
        new = Let(var, val, new, span=span)
    if subst:
        new = substitute(new, subst)
    return new


def _pure_literal(e: Expr) -> bool:
    if is_atom(e) or type(e) is Function:
        return True
    return type(e) is Tuple and all(is_atom(f) for f in e.fields)


def drop_dead_literals(spine: Let) -> Expr:
    """Drop unused bindings of function literals, atoms and tuples of atoms (one backward pass).

    Forwarding a reference drops its writes, which can leave the stored closures unused; while
    they stay bound they still capture (and so pin) other references.
    """
    lets, body = flatten_lets(spine)
    used: set[Var] = set()

    def note(e: Expr) -> None:
        used.update(vars_in((e,)))
    note(body)
    keep: list[bool] = [True] * len(lets)
    for i in range(len(lets) - 1, -1, -1):
        node = lets[i]
        if node.var not in used and _pure_literal(node.value):
            keep[i] = False
        else:
            note(node.value)
    if all(keep):
        return spine
    out: Expr = body
    for node, k in zip(reversed(lets), reversed(keep)):
        if k:
            out = Let(node.var, node.value, out, span=node.span)
    return out


class _DeadRef(ExprMutator):
    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        new = yield from super().visit_let(let)
        for _ in range(8):  # NOTE: each round can only remove bindings; a few reach a fixpoint
            if not isinstance(new, Let):
                break
            fwd = forward_spine(new)
            if fwd is new:
                break
            new = drop_dead_literals(fwd) if isinstance(fwd, Let) else fwd
        return new


@dataclass(frozen=True)
class DeadRefElimination(FunctionPass):
    """Store forwarding: a ``ref`` that never escapes its let spine becomes plain lets.

    ``let %r = ref(a); ...ref_read(%r)...ref_write(%r, b)...ref_read(%r)... =>`` the reads
    replaced by the last written value, the writes and the creation dropped; for a reference
    that escapes, only reads and dead writes before its first escaping use change.
    """

    name: ClassVar[str] = "dead-ref-elim"
    opt_level: ClassVar[int] = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if not any(type(n) is RefCreate for n in post_order(func.body)):
            return func  # NOTE: a cheap scan; most programs have no references at all
        return _DeadRef().visit(func)  # type: ignore[return-value]


def dead_ref_elim(expr: Expr) -> Expr:
    """Apply :class:`DeadRefElimination`'s rules to one expression."""
    return _DeadRef().visit(expr)
