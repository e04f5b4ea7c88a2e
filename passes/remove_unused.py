"""RemoveUnusedFunctions: drop the globals and type definitions the entry cannot reach.

``mod = {@main, @f, @g, type T, type U}  =>  {@main, @f, type T}``   when ``@main`` reaches
only ``@f`` (by a call or as a value) and only ``T`` is mentioned (a constructor, a pattern
or a type) by what is kept.

Reachability is a worklist over the globals (no recursion): a global is kept when the entry
mentions it, directly or through kept globals. A type definition is kept when a kept global
mentions one of its constructors (in an expression or a pattern) or its name in a type
(annotations, return types, type arguments, inferred types), or when a kept type definition's
constructor fields mention it. A module without the entry is returned unchanged (there is no
root to keep).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable

from relay_ir.expr import Call, Constructor, Function, GlobalVar, Match, Var
from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.traversal import pattern_vars, post_order
from relay_ir.ty import GlobalTypeVar, Type, type_children


def _type_names(types: Iterable[Type | None], out: set[str]) -> None:
    """Add the ADT names (``GlobalTypeVar``) mentioned in ``types`` to ``out``."""
    stack = [t for t in types if t is not None]
    while stack:
        t = stack.pop()
        if isinstance(t, GlobalTypeVar):
            out.add(t.name_hint)
        elif isinstance(t, Type):
            stack.extend(type_children(t))


def _mentions(fn: Function) -> tuple[set[str], set[str]]:
    """The global names and the ADT names that ``fn`` mentions."""
    globals_: set[str] = set()
    adts: set[str] = set()
    types: list[Type | None] = []
    for node in post_order(fn):
        t = type(node)
        types.append(node.checked_type_)
        if t is GlobalVar:
            globals_.add(node.name_hint)
        elif t is Constructor:
            adts.add(node.belong_to.name_hint)
        elif t is Var:
            types.append(node.type_annotation)
        elif t is Function:
            types.append(node.ret_type)
        elif t is Call:
            types.extend(a for a in node.type_args if isinstance(a, Type))
        elif t is Match:
            for clause in node.clauses:
                stack = [clause.lhs]
                while stack:
                    p = stack.pop()
                    con = getattr(p, "constructor", None)
                    if con is not None:
                        adts.add(con.belong_to.name_hint)
                    stack.extend(getattr(p, "patterns", ()))
                types.extend(v.type_annotation for v in pattern_vars(clause.lhs))
    _type_names(types, adts)
    return globals_, adts


def reachable(mod: IRModule, entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """The global names and the ADT names reachable from ``entries``, in definition order."""
    keep_fns: set[str] = set()
    keep_adts: set[str] = set()
    work = [e for e in entries if e in mod]
    adt_work: list[str] = []
    while work:
        name = work.pop()
        if name in keep_fns:
            continue
        keep_fns.add(name)
        gs, adts = _mentions(mod[name])
        work.extend(g for g in gs if g in mod and g not in keep_fns)
        adt_work.extend(adts)
    types = mod.type_definitions
    while adt_work:
        name = adt_work.pop()
        if name in keep_adts or name not in types:
            continue
        keep_adts.add(name)
        more: set[str] = set()
        for c in types[name].constructors:
            _type_names(c.inputs, more)
        adt_work.extend(more - keep_adts)
    return ([n for n in mod.functions if n in keep_fns],
            [n for n in types if n in keep_adts])


@dataclass(frozen=True)
class RemoveUnusedFunctions(Pass):
    """Keep the entry and what it reaches: ``{@main, @dead, type U} => {@main}``.

    ``entry`` (default ``"main"``) names the root global; more roots may be listed in
    ``keep``. Unreachable globals and type definitions are removed; a module without the entry
    is returned unchanged.
    """

    entry: str = "main"
    keep: tuple[str, ...] = ()

    name: ClassVar[str] = "remove-unused-functions"
    opt_level: ClassVar[int] = 1

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if self.entry not in mod:
            return mod
        fns, adts = reachable(mod, (self.entry, *self.keep))
        if len(fns) == len(mod.functions) and len(adts) == len(mod.type_definitions):
            return mod
        gvs = mod.global_vars
        types = mod.type_definitions
        out = IRModule({gvs[n]: mod[n] for n in fns},
                       {types[n].header: types[n] for n in adts},
                       source=mod.source, attrs=mod.attrs)
        return out


def remove_unused_functions(mod: IRModule, entry: str = "main") -> IRModule:
    """``RemoveUnusedFunctions(entry)(mod)``."""
    return RemoveUnusedFunctions(entry)(mod)
