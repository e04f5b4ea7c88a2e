"""What reverse mode (``passes.gradient``) and forward mode (``passes.jvp``) share.

The type map's skeleton (``T => T'`` through tuples, functions, references and ADT twins; a
mode says what a float tensor becomes), the transform's bookkeeping (global twins queued on
first use, variable and pattern renaming, ADT helper globals, the projection of a value's
primal part) and the assembly of the output module.
"""
from __future__ import annotations

import functools
import sys
from abc import ABC, abstractmethod
from typing import Any, Callable, Generator, Iterable, Sequence, TypeVar as _TV

from relay_ir.builder import ScopeBuilder
from relay_ir.errors import DiagnosticError, InternalError, PassError
from relay_ir.functor import ExprMutator
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, Op, Pattern,
                           PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, is_atom)
from relay_ir.module import IRModule, fresh_name
from relay_ir.op import get_opdef
from relay_ir.span import Span
from relay_ir.traversal import run_generators
from relay_ir.ty import (FuncType, GlobalTypeVar, RefType, ShapeVar, TensorType, TupleType, Type,
                         TypeCall, TypeData, TypeVar, tuple_leaves)


# ----------------------------------------------------------------------------- type helpers
F = _TV("F", bound=Callable[..., Any])

def is_float(t: Type | None) -> bool:
    """True for a float tensor type (the values that carry an adjoint)."""
    return isinstance(t, TensorType) and t.dtype.startswith(("float", "bfloat"))


def has_float_leaf(t: Type) -> bool:
    """True if a tensor or tuple-of-tensors type has a float tensor leaf."""
    return any(is_float(u) for u in tuple_leaves(t))


def _tensor_tree(t: Type) -> bool:
    """True if ``t`` is a tensor or a (nested) tuple of tensors."""
    return all(isinstance(u, TensorType) for u in tuple_leaves(t))


def _type_of(e: Expr) -> Type:
    t = e.checked_type_
    if t is None and isinstance(e, Var):
        t = e.type_annotation
    if t is None and isinstance(e, Constant):
        t = TensorType(tuple(e.data.shape), str(e.data.dtype))
    if t is None:
        raise InternalError(f"gradient: no type on {type(e).__name__} {e!r}")
    return t


def _typed_const(c: Constant) -> Constant:
    if c.checked_type_ is not None:
        return c
    return Constant(c.data, span=c.span,
                    checked_type_=TensorType(tuple(c.data.shape), str(c.data.dtype)))


class _Types(ABC):
    """The type map ``T => T'`` with the ADT twins it needs; a mode says what a float tensor
    becomes (``float_type``) and what every function type gains (``EXTRA_ARGS``)."""

    SUFFIX = "_ad"  # NOTE: twins of ADTs and constructors are named NAME_ad / Ctor_ad
    EXTRA_ARGS: tuple[Type, ...] = ()

    def __init__(self, mod: IRModule, taken: set[str]) -> None:
        self.adt_map: dict[str, GlobalTypeVar] = {}
        self.ctor_map: dict[str, Constructor] = {}
        self.new_types: list[TypeData] = []
        self.subst: dict = {}  # type params of the global (or ADT) being mapped -> fresh ones
        tds = dict(mod.type_definitions)
        changed: set[str] = set()
        # A fixed point: an ADT changes if a field holds a float tensor, a function, or a
        # changing ADT.
        while True:
            grew = False
            for name, td in tds.items():
                if name in changed:
                    continue
                if any(self._needs_change(t, changed) for c in td.constructors for t in c.inputs):
                    changed.add(name)
                    grew = True
            if not grew:
                break
        for name in changed:
            self.adt_map[name] = GlobalTypeVar(_fresh_name(name + self.SUFFIX, taken))
        for name in tds:
            if name not in changed:
                continue
            td = tds[name]
            header = self.adt_map[name]
            params = tuple(TypeVar(tp.name_hint, tp.kind) for tp in td.type_params)
            self.subst = dict(zip(td.type_params, params))
            ctors = []
            for c in td.constructors:
                nc = Constructor(_fresh_name(c.name_hint + self.SUFFIX, taken),
                                 tuple(self.map(t) for t in c.inputs), header, c.tag,
                                 span=c.span)
                self.ctor_map[c.name_hint] = nc
                ctors.append(nc)
            self.subst = {}
            self.new_types.append(TypeData(header, params, tuple(ctors), span=td.span))

    @staticmethod
    def _needs_change(t: Type, changed: set[str]) -> bool:
        stack = [t]
        while stack:
            u = stack.pop()
            if is_float(u) or isinstance(u, FuncType):
                return True
            if isinstance(u, (TupleType,)):
                stack.extend(u.fields)
            elif isinstance(u, RefType):
                stack.append(u.value)
            elif isinstance(u, TypeCall):
                if isinstance(u.func, GlobalTypeVar) and u.func.name_hint in changed:
                    return True
                stack.extend(u.args)
            elif isinstance(u, GlobalTypeVar) and u.name_hint in changed:
                return True
        return False

    def map(self, t: Type) -> Type:
        """``T => T'`` (see the module docstring), renaming the current global's type params."""
        if self.subst:
            from relay_ir.passes._analysis import substitute_type
            t = substitute_type(t, self.subst)
        return self._map(t)

    def _map(self, t: Type) -> Type:
        if isinstance(t, TensorType):
            return self.float_type(t) if is_float(t) else t
        return run_generators(self._map_g(t))  # NOTE: nested types without recursion

    def _map_all(self, ts: tuple[Type, ...]) -> Generator[Any, Any, tuple[Type, ...]]:
        out = []
        for x in ts:
            out.append((yield self._map_g(x)))
        return tuple(out)

    def _map_g(self, t: Type) -> Generator[Any, Any, Type]:
        if isinstance(t, TensorType):
            return self.float_type(t) if is_float(t) else t
        if isinstance(t, TupleType):
            return TupleType((yield self._map_all(t.fields)))
        if isinstance(t, FuncType):
            args = yield self._map_all(t.arg_types)
            return FuncType(args + self.EXTRA_ARGS, (yield self._map_g(t.ret_type)),
                            t.type_params, t.type_constraints)
        if isinstance(t, RefType):
            return RefType((yield self._map_g(t.value)))
        if isinstance(t, TypeCall):
            func = yield self._map_g(t.func)
            return TypeCall(func, (yield self._map_all(t.args)))
        if isinstance(t, GlobalTypeVar):
            return self.adt_map.get(t.name_hint, t)
        return t

    @abstractmethod
    def float_type(self, t: TensorType) -> Type:
        """What a float tensor of type ``t`` becomes (each mode says)."""

    def ctor(self, c: Constructor) -> Constructor:
        return self.ctor_map.get(c.name_hint, c)


def _fresh_name(base: str, taken: set[str]) -> str:
    name = fresh_name(base, taken)
    taken.add(name)
    return name


class _Missing:
    __slots__ = ("op", "span")

    def __init__(self, op: str, span: Span | None) -> None:
        self.op, self.span = op, span


# ----------------------------------------------------------------------------- the transform
class _Twin(ABC):
    """The bookkeeping both transforms share; one instance per ``gradient`` / ``jvp`` call.

    A subclass sets ``SUFFIX`` (twin globals are ``@name<SUFFIX>``), ``ERROR`` (its
    diagnostic class), ``WHAT`` (its name in messages) and defines ``function``.
    """

    SUFFIX = ""
    ERROR: type[PassError] = PassError
    WHAT = ""

    def __init__(self, mod: IRModule, types: _Types, taken: set[str]) -> None:
        self.mod = mod
        self.types = types
        self.taken = taken
        self.sb = ScopeBuilder()
        self.vmap: dict[Var, Any] = {}
        self.gmap: dict[str, GlobalVar] = {}
        self.work: list[str] = []
        self.missing: list[_Missing] = []
        self.rule_errors: list[DiagnosticError] = []
        self.helpers: dict[str, Function] = {}           # helper globals for entry ADTs
        self._helper_gv: dict[tuple[str, Type], GlobalVar] = {}
        # pairs made here: their primal atom (used instead of projecting the pair again)
        self.prims: dict[Var, Expr] = {}

    @abstractmethod
    def function(self, fn: Function, type_params: tuple | None = None) -> Function:
        """The twin of the function literal ``fn`` (each mode transforms functions its own
        way)."""

    # ---------------------------------------------------------------- globals
    def global_twin(self, gv: GlobalVar) -> GlobalVar:
        """The transformed twin of global ``gv`` (queued for transformation on first use)."""
        name = gv.name_hint
        twin = self.gmap.get(name)
        if twin is None:
            if name not in self.mod:
                raise self.ERROR(f"unknown global @{name}", gv.span)
            twin = GlobalVar(_fresh_name(name + self.SUFFIX, self.taken))
            self.gmap[name] = twin
            self.work.append(name)
        return twin

    def run_globals(self) -> dict[str, Function]:
        """Transform every queued global (and those they reach); returns twin name -> fn."""
        out: dict[str, Function] = {}
        while self.work:
            name = self.work.pop()
            fn = self.mod[name]
            fresh = tuple(ShapeVar(tp.name) if isinstance(tp, ShapeVar)
                          else TypeVar(tp.name_hint, tp.kind) for tp in fn.type_params)
            self.types.subst = dict(zip(fn.type_params, fresh))
            try:
                out[self.gmap[name].name_hint] = self.function(fn, fresh)
            finally:
                self.types.subst = {}
        return out

    # ---------------------------------------------------------------- variables
    def map_var(self, v: Var, annotate: bool) -> Var:
        """The renamed twin of ``v`` with its mapped type (annotated when ``annotate``)."""
        t = v.type_annotation if v.type_annotation is not None else v.checked_type_
        nt = self.types.map(t) if t is not None else None
        nv = Var(v.name_hint, nt if annotate else None, span=v.span, checked_type_=nt)
        self.vmap[v] = nv
        return nv

    def mapped_ret(self, fn: Function) -> Type | None:
        """The mapped result type of ``fn`` (annotated or inferred), if known."""
        if fn.ret_type is not None:
            return self.types.map(fn.ret_type)
        if isinstance(fn.checked_type_, FuncType):
            return self.types.map(fn.checked_type_.ret_type)
        return None

    def leaf_atom(self, e: Expr) -> Expr | None:
        """The twin of a variable, global or constructor; None for anything else."""
        if isinstance(e, Var):
            nv = self.vmap.get(e)
            if nv is None:
                raise InternalError(f"{self.WHAT}: unbound variable %{e.name_hint}")
            return nv
        if isinstance(e, GlobalVar):
            return self.global_twin(e)
        if isinstance(e, Constructor):
            return self.types.ctor(e)
        if isinstance(e, Op):
            raise self.ERROR(f"operator `{e.name}` used as a value (only calls of operators "
                             "can be differentiated)", e.span)
        return None

    def pattern(self, p: Pattern) -> Pattern:
        """``p`` with its variables renamed and its constructors mapped to their twins."""
        if isinstance(p, PatternWildcard):
            return p
        if isinstance(p, PatternVar):
            return PatternVar(self.map_var(p.var, annotate=p.var.type_annotation is not None),
                              span=p.span)
        if isinstance(p, PatternConstructor):
            return PatternConstructor(self.types.ctor(p.constructor),
                                      tuple(self.pattern(q) for q in p.patterns), span=p.span)
        if isinstance(p, PatternTuple):
            return PatternTuple(tuple(self.pattern(q) for q in p.patterns), span=p.span)
        raise InternalError(f"{self.WHAT}: unexpected pattern {type(p).__name__}")

    # ---------------------------------------------------------------- entry values
    def project(self, v: Expr, t: Type, index: int, known: dict, tag: str,
                other: Any) -> Expr:
        """Field ``index`` of every float pair in transformed value ``v`` of original
        tensor-tree type ``t`` (``known``: atoms recorded when the pairs were made); a leaf
        that is not a float tensor goes through ``other(v, t)``."""
        sb = self.sb
        if is_float(t):
            atom = known.get(v)
            if atom is not None:
                return atom
            return sb.let_(TupleGetItem(v, index, checked_type_=t), tag, t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fv = sb.let_(TupleGetItem(v, i), "f", self.types.map(ft))
                fields.append(self.project(fv, ft, index, known, tag, other))
            return sb.let_(Tuple(tuple(fields), checked_type_=t), tag, t)
        return other(v, t)

    def primal(self, v: Expr, t: Type) -> Expr:
        """The primal part of a transformed value ``v`` of original tensor-tree type ``t``."""
        def other(u: Expr, ut: Type) -> Expr:
            if _is_adt(ut) and self.adt_changes(ut):
                return self.sb.let_(Call(self.adt_helper("primal", ut), (u,)), "p", ut)
            return u
        return self.project(v, t, 0, self.prims, "p", other)

    @abstractmethod
    def adt_helper(self, kind: str, t: Type) -> GlobalVar:
        """The helper global ``kind`` (primal, tangent/adjoint, ...) for ADT type ``t`` (each
        mode builds its own)."""

    def adt_changes(self, t: Type) -> bool:
        """True if values of ADT type ``t`` change type under the map (they hold floats)."""
        return self.types.map(t) != t

    def adt_ctors(self, t: Type) -> list[tuple[Constructor, list[Type]]]:
        """The constructors of ADT type ``t`` with their field types at ``t``'s arguments."""
        from relay_ir.passes._analysis import substitute_type
        name, args = ((t.func.name_hint, t.args) if isinstance(t, TypeCall)  # type: ignore
                      else (t.name_hint, ()))  # type: ignore[union-attr]
        td = self.mod.get_type(name)
        sub = dict(zip(td.type_params, args))
        return [(c, [substitute_type(f, sub) if sub else f for f in c.inputs])
                for c in td.constructors]

    def helper_global(self, kind: str, t: Type) -> tuple[GlobalVar, bool]:
        """The global ``@<kind>_<ADT>`` for type ``t``, and whether it is new (to be built)."""
        key = (kind, t)
        gv = self._helper_gv.get(key)
        if gv is not None:
            return gv, False
        head = t.func.name_hint if isinstance(t, TypeCall) else t.name_hint  # type: ignore
        gv = GlobalVar(_fresh_name(f"{kind}_{head}", self.taken))
        self._helper_gv[key] = gv
        return gv, True

    # ---------------------------------------------------------------- the output module
    def output(self, mod: IRModule, entry: str, twins: dict[str, Function],
               wrapper: Function) -> IRModule:
        """The module: kept originals, the ADT twins, the twins, helpers and the new entry."""
        from relay_ir.passes.type_infer import InferType
        reserved = [getattr(k, "name_hint", k) for k in (*twins, *self.helpers)]
        out = _keep_originals(mod, entry, reserved)
        for td in self.types.new_types:
            out = out.with_type(td)
        out = out.with_functions({**twins, **self.helpers, entry: wrapper})
        try:
            return InferType()(out)
        except DiagnosticError as e:  # NOTE: our output must type-check; failing is our bug
            raise InternalError(f"{self.WHAT} produced an ill-typed program: {e}") from e

    def raise_collected(self, rule: str) -> None:
        """Report every missing ``rule`` (``grad`` / ``jvp``) at once, then rule errors."""
        if self.missing:
            raise _missing_error(self.missing, rule, self.ERROR)
        if self.rule_errors:
            first = self.rule_errors[0]
            if len(self.rule_errors) > 1:
                first.notes = first.notes + tuple(str(e) for e in self.rule_errors[1:])
            raise first


def _is_adt(t: Type) -> bool:
    return isinstance(t, (TypeCall, GlobalTypeVar))


def _missing_error(missing: Iterable[_Missing], rule: str, error: type[PassError]
                   ) -> PassError:
    items = list(missing)
    names: dict[str, None] = {}
    for m in items:
        names[m.op] = None
    first = items[0]
    where = [f"`{m.op}` at {m.span}" if m.span else f"`{m.op}`" for m in items]
    notes = []
    for m in items[1:]:
        if m.span is not None:
            ctx = m.span.print_with_context()
            notes.append(f"`{m.op}` at {m.span}" + (f"\n{ctx}" if ctx else ""))
    what = "gradient" if rule == "grad" else rule.upper()
    return error(
        f"no {what} rule for operator" + ("s " if len(names) > 1 else " ")
        + ", ".join(f"`{n}`" for n in names) + " used on a float path ("
        + "; ".join(where) + f"); give the OpDef a {rule}= rule or mark it non_differentiable",
        first.span, notes)


def _call(name: str, *args: Expr, checked_type_: Type | None = None) -> Call:
    od = get_opdef(name)
    return Call(od.op, tuple(args), od.make_attrs(), checked_type_=checked_type_)


def emit(sb: ScopeBuilder, e: Expr, done: dict[int, Expr] | None = None) -> Expr:
    """Let-bind every compound dataflow node of ``e`` (a rule's output tree), iteratively.

    A sub-expression shared inside ``e`` is bound once; so is one shared with the trees
    emitted before with the same ``done`` memo (the fields of one rule's tuple output).
    Returns the atom for ``e``.
    """
    if is_atom(e):
        return e
    if done is None:
        done = {}
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in done:
            continue
        kids = _dataflow_kids(node)
        if not expanded and kids is not None:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if not is_atom(k) and id(k) not in done)
            continue
        if kids is None:  # NOTE: functions, ifs, lets from a rule: bind as they are
            done[id(node)] = sb.let_(node, "g")
            continue
        new = _rebuild(node, [done.get(id(k), k) for k in kids])
        done[id(node)] = sb.let_(new, "g", node.checked_type_)
    return done[id(e)]


def _dataflow_kids(e: Expr) -> list[Expr] | None:
    if isinstance(e, Call):
        return list(e.args) if isinstance(e.op, (Op, Constructor, GlobalVar, Var)) else None
    if isinstance(e, Tuple):
        return list(e.fields)
    if isinstance(e, TupleGetItem):
        return [e.tuple_value]
    if isinstance(e, RefCreate):
        return [e.value]
    if isinstance(e, RefRead):
        return [e.ref]
    if isinstance(e, RefWrite):
        return [e.ref, e.value]
    return None


def _rebuild(e: Expr, kids: Sequence[Expr]) -> Expr:
    ct = e.checked_type_
    if isinstance(e, Call):
        return Call(e.op, tuple(kids), e.attrs, e.type_args, span=e.span, checked_type_=ct)
    if isinstance(e, Tuple):
        return Tuple(tuple(kids), span=e.span, checked_type_=ct)
    if isinstance(e, TupleGetItem):
        return TupleGetItem(kids[0], e.index, span=e.span, checked_type_=ct)
    if isinstance(e, RefCreate):
        return RefCreate(kids[0], span=e.span, checked_type_=ct)
    if isinstance(e, RefRead):
        return RefRead(kids[0], span=e.span, checked_type_=ct)
    return RefWrite(kids[0], kids[1], span=e.span, checked_type_=ct)


# ----------------------------------------------------------------------------- entries
def _liftable(t: Type, mod: IRModule) -> bool:
    """True if values of ``t`` are built only of tensors, tuples and ADTs (no functions, refs)."""
    from relay_ir.passes._analysis import substitute_type
    seen: set[Type] = set()
    stack = [t]
    while stack:
        u = stack.pop()
        if isinstance(u, TensorType):
            continue
        if isinstance(u, TupleType):
            stack.extend(u.fields)
        elif isinstance(u, (TypeCall, GlobalTypeVar)):
            if u in seen:
                continue
            seen.add(u)
            head = u.func if isinstance(u, TypeCall) else u
            if not isinstance(head, GlobalTypeVar) or head.name_hint not in mod.type_definitions:
                return False
            td = mod.get_type(head.name_hint)
            sub = dict(zip(td.type_params, u.args if isinstance(u, TypeCall) else ()))
            for c in td.constructors:
                stack.extend(substitute_type(f, sub) if sub else f for f in c.inputs)
        else:
            return False
    return True


def _check_signature(fn: Function, entry: str, mod: IRModule, error: type, what: str,
                     returns: str) -> tuple[list[Type], Type]:
    """The entry's parameter and result types; ``error`` if it is generic or takes or returns
    anything but tensors, tuples and ADTs of them (``returns``: the rule for the result)."""
    ft = fn.checked_type_
    if not isinstance(ft, FuncType):
        raise InternalError(f"{what}: @{entry} has no inferred function type")
    if fn.type_params:
        raise error(f"the entry @{entry} is generic ({len(fn.type_params)} type parameters); "
                    "differentiate a function with concrete types, e.g. a wrapper that calls "
                    "it at float types", fn.span)
    for p, t in zip(fn.params, ft.arg_types):
        if not _liftable(t, mod):
            raise error(f"parameter %{p.name_hint} of @{entry} has type {t!r}; the {what} entry "
                        "takes tensors, tuples and ADTs of them (no functions or references)",
                        p.span or fn.span)
    if not _liftable(ft.ret_type, mod):
        raise error(f"@{entry} returns {ft.ret_type!r}; {returns}", fn.span)
    return list(ft.arg_types), ft.ret_type


def _callers_of(mod: IRModule, entry: str) -> set[str]:
    """Globals other than ``entry`` that (transitively) refer to ``entry``."""
    from relay_ir.passes._analysis import call_graph
    graph = call_graph(mod)
    bad = {entry}
    grew = True
    while grew:
        grew = False
        for name, callees in graph.items():
            if name not in bad and callees & bad:
                bad.add(name)
                grew = True
    return bad - {entry}


def _keep_originals(mod: IRModule, entry: str, reserved: Iterable[str] = ()) -> IRModule:
    """``mod`` where the globals that refer to ``entry`` refer to a copy of it instead.

    The transform replaces ``@entry`` (its type changes), so a global calling it would no
    longer type-check. Such callers keep the original meaning through ``@<entry>_primal`` (a
    fresh name: ``_primal1``... if taken), the original entry with its self-references
    renamed too. Without callers the module is returned unchanged.
    """
    callers = _callers_of(mod, entry)
    if not callers:
        return mod
    taken = set(mod.functions) | set(mod.type_definitions) | set(mod.constructors)
    taken |= set(reserved)
    name = fresh_name(f"{entry}_primal", taken)
    copy = GlobalVar(name)

    class Rename(ExprMutator):
        def visit_global_var(self, g: GlobalVar) -> Expr:  # type: ignore[override]
            return copy if g.name_hint == entry else g

    renamed = {c: Rename().visit(mod[c]) for c in callers}
    renamed[name] = Rename().visit(mod[entry])
    return mod.with_functions({**{mod.get_global_var(c): f for c, f in renamed.items()
                                  if c != name}, copy: renamed[name]})


def depth_limited(error: Callable[[str], Exception]) -> Callable[[F], F]:
    """Turn a RecursionError left in a transform into a one-line ``error`` naming the limit.

    Nesting of code (functions, branches, arms) and of the program's types is walked without
    recursion; what remains recursive is the per-type helpers of the entry's parameters and
    result (seeding, projection), bounded by Python's recursion limit.
    """
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except RecursionError:
                raise error(
                    f"the entry's parameter or result types nest deeper than this transform "
                    f"supports (Python's recursion limit, {sys.getrecursionlimit()})") from None
        return run  # type: ignore[return-value]
    return wrap
