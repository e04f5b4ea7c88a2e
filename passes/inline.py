"""Inline: replace calls of small, non-recursive functions by their bodies."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from relay_ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes._analysis import (call_graph, fresh_copy, occurrences_in_function,
                                       recursive_globals, ref_counts, sccs)
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.traversal import flatten_lets, post_order, use_children
from relay_ir.ty import IncompleteType, ShapeVar, ANY


def marked_inline(fn: Function) -> bool:
    """True if the function carries ``Inline=1`` (or ``inline=1``)."""
    return bool(fn.attrs.get("Inline", 0) or fn.attrs.get("inline", 0))


def never_inline(fn: Function) -> bool:
    """Primitive (fused), external or ``NoInline`` functions are never inlined."""
    a = fn.attrs
    return bool(a.get("Primitive", 0) or a.get("Compiler", None) or a.get("NoInline", 0))


def beta_reduce(fn: Function, call: Call, copy: bool = True) -> Expr:
    """``(fn (p1..pn) { b })(a1..an)  =>  let p1' = a1; ...; let pn' = an; b'`` (fresh vars).

    Type parameters are replaced by the call's type arguments when it has them, otherwise the
    annotations that mention them become incomplete (``_``; type inference fills them in).
    ``copy=False`` reuses ``fn``'s own variables: only for a function that disappears with
    this call (used once, not shared, not generic) — copying there would make inlining a
    chain of nested closures quadratic.
    """
    if not copy and not fn.type_params:
        body = fn.body
        for p, a in reversed(list(zip(fn.params, call.args))):
            body = Let(p, a, body, span=call.span)
        return body
    tmap: dict[object, object] = {}
    if fn.type_params:
        if len(call.type_args) == len(fn.type_params):
            tmap = dict(zip(fn.type_params, call.type_args))
        else:
            tmap = {tp: (ANY if isinstance(tp, ShapeVar) else IncompleteType())
                    for tp in fn.type_params}
    copy = fresh_copy(fn, tmap)  # type: ignore[arg-type]
    assert isinstance(copy, Function)
    body = copy.body
    for p, a in reversed(list(zip(copy.params, call.args))):
        body = Let(p, a, body, span=call.span)
    return body


def _references(fns: dict[str, Function]) -> tuple[dict[str, int], dict[str, int]]:
    """Per global name: all references, and references in callee position."""
    total: dict[str, int] = {}
    callee: dict[str, int] = {}
    for fn in fns.values():
        for e in post_order(fn):
            for c in use_children(e):
                if type(c) is GlobalVar:
                    total[c.name_hint] = total.get(c.name_hint, 0) + 1
                    if type(e) is Call and e.op is c:
                        callee[c.name_hint] = callee.get(c.name_hint, 0) + 1
    return total, callee


def _local_candidates(fn: Expr) -> set[Var]:
    """Let-bound functions to inline: non-recursive, only called, once or marked Inline."""
    total: dict[Var, int] = {}
    callee: dict[Var, int] = {}
    bound: dict[Var, Function] = {}
    for e in post_order(fn):
        if type(e) is Let and type(e.value) is Function:
            bound[e.var] = e.value
        for c in use_children(e):
            if type(c) is Var:
                total[c] = total.get(c, 0) + 1
                if type(e) is Call and e.op is c:
                    callee[c] = callee.get(c, 0) + 1
    out: set[Var] = set()
    fv_cache: dict[Function, list[Var]] = {}
    for var, f in bound.items():
        n, k = total.get(var, 0), callee.get(var, 0)
        if n == 0 or n != k or never_inline(f):
            continue
        if not (n == 1 or marked_inline(f)):
            continue
        if occurrences_in_function(var, f, fv_cache):
            continue  # recursive closure
        out.add(var)
    return out


class _Inliner(ExprMutator):
    """Inlines the candidates of one function.

    A local closure that is called once, from a let binding of the spine it is bound in, and
    then disappears is expanded top-down: its (not yet visited) body's bindings are walked as
    part of the enclosing spine, so a chain of nested closures (a backpropagator chain) is
    flattened in one linear walk instead of being re-spliced at every level.
    """

    def __init__(self, fn: Function, globals_: dict[str, Function]) -> None:
        super().__init__()
        self.globals = globals_
        self.candidates = _local_candidates(fn)
        self.local: dict[Var, Function] = {}    # visited candidates (copied at each call)
        self.pending: dict[Var, Function] = {}  # single-use candidates, expanded where called
        self.counts = ref_counts(fn)

    def visit_binding(self, var: Var, value: Expr
                      ) -> Generator[Expr, Any, tuple[Var, Expr] | None]:
        if var in self.candidates:
            assert isinstance(value, Function)
            if self.counts.get(value, 1) <= 1 and not marked_inline(value) and \
                    not value.type_params:
                self.pending[var] = value
            else:
                self.local[var] = yield value
            return None
        return ((yield var), (yield value))

    def visit_call(self, c: Call) -> Generator[Expr, Any, Expr]:
        new = super().visit_call(c)
        if type(new) is not Call:
            return new
        op = new.op
        if type(op) is Var and op in self.pending:  # called off the spine: visit, then reduce
            fn = yield self.pending.pop(op)
            return beta_reduce(fn, new, copy=False)  # type: ignore[arg-type]
        if type(op) is Var and op in self.local:
            return beta_reduce(self.local[op], new)
        if type(op) is GlobalVar and op.name_hint in self.globals:
            fn = self.globals[op.name_hint]
            if len(fn.params) == len(new.args):
                return beta_reduce(fn, new)
        return new

    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        # NOTE: like ExprMutator.visit_let, but inlined bodies are spliced into the spine:
        # `let r = (let p = a; b); e  =>  let p = a; let r = b; e`. Work items: (chain, var the
        # chain's result is bound to (None: the spine's own result), the binding's source).
        out_bindings: list[tuple[Var, Expr, object]] = []
        work: list[tuple[Expr, Var | None, object]] = [(let, None, None)]
        result: Expr | None = None
        while work:
            node, target, src = work.pop()
            # NOTE: a let already visited elsewhere (a shared node) ends its chain here
            if type(node) is not Let or node in self.memo:
                if target is None:
                    result = yield node
                else:
                    out_bindings.append((target, (yield node), src))
                continue
            work.append((node.body, target, src))
            value = node.value
            if type(value) is Call and type(value.op) is Var and value.op in self.pending \
                    and node.var not in self.candidates:
                fn = self.pending.pop(value.op)
                args = []
                for a in value.args:
                    args.append((yield a))
                out_bindings.extend((p, a, node.span) for p, a in zip(fn.params, args))
                work.append((fn.body, node.var, node))
                continue
            b = yield from self.visit_binding(node.var, value)
            if b is None:
                continue
            var, new = b
            # NOTE: a call node shared by several positions keeps its inlined body as one
            # shared (unspliced) let, so its variables stay bound once
            if type(new) is Let and new is not value and self.counts.get(value, 1) <= 1:
                inner, last = flatten_lets(new)
                out_bindings.extend((lt.var, lt.value, lt.span) for lt in inner)
                new = last
            out_bindings.append((var, new, node))
        out = result
        assert out is not None
        for var, value, src in reversed(out_bindings):
            if isinstance(src, Let):
                if var is src.var and value is src.value and out is src.body:
                    out = src
                else:
                    out = Let(var, value, out, span=src.span)
            else:
                out = Let(var, value, out, span=src)  # type: ignore[arg-type]
        return out


@dataclass(frozen=True)
class Inline(Pass):
    """Inline calls of non-recursive functions that are called once or marked ``Inline=1``.

    Rules:
      ``let f = fn (p) { b }; ... f(a) ...  =>  ... (let p' = a; b') ...``
          if ``f`` is only called (never passed as a value), not recursive, and called once
          or marked ``Inline=1``; the binding of ``f`` goes away;
      ``@g(a)  =>  let p' = a; b'``   for a global ``@g = fn (p) { b }`` that is called once
          (and never used as a value) or marked ``Inline=1``, and is in no recursive group.

    Inlined bodies are alpha-renamed (``b'``: fresh variables, so every variable stays bound
    once) and spliced into the enclosing let chain. Recursive groups, ``main``, primitive
    (fused) functions and functions marked ``NoInline=1`` are never inlined. Globals whose
    every call was inlined are removed when ``remove_inlined`` (default).
    """

    remove_inlined: bool = True
    name: ClassVar[str] = "inline"
    opt_level: ClassVar[int] = 1

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        graph = call_graph(mod)
        rec = recursive_globals(mod, graph)
        total, callee = _references(dict(mod.functions))
        cands = set()
        for name, fn in mod.functions.items():
            if name == "main" or name in rec or never_inline(fn):
                continue
            n, k = total.get(name, 0), callee.get(name, 0)
            if n and n == k and (n == 1 or marked_inline(fn)):
                cands.add(name)
        done: dict[str, Function] = {}
        ready: dict[str, Function] = {}  # processed candidate bodies
        for comp in sccs(graph):  # callees first
            for name in comp:
                fn = mod[name]
                new = _Inliner(fn, ready).visit(fn)
                done[name] = new  # type: ignore[assignment]
                if name in cands:
                    ready[name] = new  # type: ignore[assignment]
        changed = {n: f for n, f in done.items() if f is not mod[n]}
        out = mod.with_functions(changed) if changed else mod
        if self.remove_inlined and cands:
            still, _ = _references(dict(out.functions))
            for name in cands:
                if not still.get(name):
                    out = out.without_function(name)
        return out
