"""DeadCodeElimination: drop let bindings nobody uses, unless they may have effects."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from relay_ir.expr import Expr, Function, If, Let, Match, Var
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes._analysis import (Effects, occurrences_in_function, ref_counts,
                                       to_fixpoint)
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.traversal import children, use_children


class _DCE(ExprMutator):
    def __init__(self, root: Expr, effects: Effects, inline_once: bool) -> None:
        super().__init__()
        self.counts = ref_counts(root, effects.local_fns)
        self.fv_cache: dict[Function, list[Var]] = {}
        self.effects = effects
        self.inline_once = inline_once
        self.inlined: dict[Var, Expr] = {}
        if inline_once:
            self.depth_ok = _same_function_uses(root)

    def release(self, e: Expr) -> None:
        """Forget one reference to ``e`` (and, when it dies, to its children)."""
        counts = self.counts
        stack = [e]
        while stack:
            x = stack.pop()
            n = counts.get(x, 0) - 1
            counts[x] = n
            if n == 0:
                stack.extend(use_children(x))

    def is_dead(self, var: Var, value: Expr) -> bool:
        n = self.counts.get(var, 0)
        if n and type(value) is Function:
            # NOTE: a recursive closure's own calls
            n -= occurrences_in_function(var, value, self.fv_cache)
        return n <= 0 and self.effects.is_pure(value)

    def visit_var(self, v: Var) -> Expr:
        # NOTE: inlined values were rewritten at their binding: no recursion through chains.
        return self.inlined.get(v, v)

    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        lets = [let]
        body = let.body
        # NOTE: a let shared with another position (a DAG node) ends the spine: rewritten once
        while type(body) is Let and self.counts.get(body, 1) <= 1:
            lets.append(body)
            body = body.body
        # NOTE: not visit_binding: liveness is decided from the last binding backwards, after
        # everything below it is rewritten (so a binding used only by dead ones is dead too).
        # Inline-once needs uses visited after their binding, so that mode walks forwards.
        if self.inline_once:
            return (yield from self._forward(lets, body))
        out = yield body
        for node in reversed(lets):
            if self.is_dead(node.var, node.value):
                self.release(node.value)
                continue
            value = yield node.value
            if value is node.value and out is node.body:
                out = node
            else:
                out = Let(node.var, value, out, span=node.span)
        return out

    def _forward(self, lets: list[Let], body: Expr) -> Generator[Expr, Any, Expr]:
        kept: list[tuple[Let, Expr]] = []
        for node in lets:
            var, value = node.var, node.value
            if self.is_dead(var, value):
                self.release(value)
                continue
            if (self.counts.get(var, 0) == 1 and type(value) is not Function
                    and self.depth_ok.get(var, False) and self.effects.is_pure(value)):
                self.inlined[var] = yield value
                continue
            kept.append((node, (yield value)))
        out = yield body
        for node, value in reversed(kept):
            if value is node.value and out is node.body:
                out = node
            else:
                out = Let(node.var, value, out, span=node.span)
        return out


def _same_function_uses(root: Expr) -> dict[Var, bool]:
    """Let var -> True when its uses are all in the scope that binds it (iterative)."""
    depth_of_binding: dict[Var, int] = {}
    ok: dict[Var, bool] = {}
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Expr, int]] = [(root, 0)]
    while stack:
        e, d = stack.pop()
        if (id(e), d) in seen:
            continue
        seen.add((id(e), d))
        t = type(e)
        if t is Var:
            if e in depth_of_binding and depth_of_binding[e] != d:
                ok[e] = False
            continue
        if t is Let:
            depth_of_binding[e.var] = d
            ok.setdefault(e.var, True)
            stack.append((e.body, d))
            stack.append((e.value, d))
            continue
        if t is Function:
            stack.append((e.body, d + 1))
            continue
        # NOTE: if branches and match arms count as deeper scopes too: a value is not moved
        # into a branch (it would be computed on one path only, or under a function per call).
        if t is If:
            stack.append((e.cond, d))
            stack.append((e.true_branch, d + 1))
            stack.append((e.false_branch, d + 1))
            continue
        if t is Match:
            stack.append((e.data, d))
            for c in e.clauses:
                stack.append((c.rhs, d + 1))
            continue
        for c in children(e):
            stack.append((c, d))
    return ok


@dataclass(frozen=True)
class DeadCodeElimination(Pass):
    """Remove let bindings whose variable is unused and whose value is pure.

    Rule: ``let x = e; b  =>  b   if x is not free in b and e is pure``.

    Effect-aware: references (``ref``, ``ref_read``, ``ref_write``), calls of unknown or
    recursive functions and effectful ops are never dropped (see
    :class:`relay_ir.passes._analysis.Effects`). A binding used only by dead bindings is dead
    too. With ``inline_once=True`` (TVM's option) a pure, non-function value used exactly once,
    in the same scope, is also substituted for its use:
    ``let x = e; b  =>  b[x := e]   if x occurs once in b (not under fn/if/match)``.
    """

    inline_once: bool = False
    name: ClassVar[str] = "dce"
    opt_level: ClassVar[int] = 1

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        def one_fn(fn: Function, effects: Effects) -> Function:
            new = _DCE(fn, effects, False).visit(fn)
            return _DCE(new, effects, True).visit(new) if self.inline_once else new
        return to_fixpoint(mod, lambda m, effects: m.map_functions(lambda f: one_fn(f, effects)))


def dead_code_elimination(expr: Expr, mod: IRModule | None = None, inline_once: bool = False
                          ) -> Expr:
    """DCE on one expression (``mod`` tells which globals are pure)."""
    effects = Effects(mod)
    out = _DCE(expr, effects, False).visit(expr)
    return _DCE(out, effects, True).visit(out) if inline_once else out
