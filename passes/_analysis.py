"""Shared analyses for the optimization passes: effects, reference counts, call graphs, renaming.

Everything here is iterative: no Python recursion proportional to program size.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match,
                           Op, Tuple, TupleGetItem, Var)
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.op import lookup_opdef
from relay_ir.traversal import (bound_vars, children, flatten_lets, post_order,
                                use_children)
from relay_ir.ty import Type

_ATOMS = (Var, GlobalVar, Constant, Op, Constructor)
_ATOM_SET = frozenset(_ATOMS)
_IMPURE = object()


def op_is_effectful(op: Op) -> bool:
    """True when the operator has side effects (or is unknown: assume the worst)."""
    opdef = lookup_opdef(op.name)
    return opdef is None or opdef.effectful


# ----------------------------------------------------------------------------- call graph
def global_calls(fn: Function, callees_only: bool = False) -> set[str]:
    """Names of the globals mentioned in ``fn`` (only those called directly if ``callees_only``)."""
    out: set[str] = set()
    for e in post_order(fn):
        if type(e) is GlobalVar:
            if not callees_only:
                out.add(e.name_hint)
        elif callees_only and type(e) is Call and type(e.op) is GlobalVar:
            out.add(e.op.name_hint)
    return out


def call_graph(mod: IRModule, callees_only: bool = False) -> dict[str, set[str]]:
    """Global name -> the globals its body mentions (or calls directly, if ``callees_only``)."""
    return {name: {g for g in global_calls(fn, callees_only) if g in mod}
            for name, fn in mod.functions.items()}


def sccs(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative), callees before callers."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(comp)
    return out


def recursive_globals(mod: IRModule, graph: Mapping[str, set[str]] | None = None) -> set[str]:
    """Globals that belong to a recursive group (a cycle in the call graph, self-loops too)."""
    graph = call_graph(mod) if graph is None else graph
    out: set[str] = set()
    for comp in sccs(graph):
        if len(comp) > 1 or comp[0] in graph.get(comp[0], ()):
            out.update(comp)
    return out


# ----------------------------------------------------------------------------- effects
class Effects:
    """Which expressions may have side effects (conservatively).

    Pure: variables, globals, constants, ops, constructors, closures (creating one does
    nothing), tuples and projections of pure parts, calls of non-effectful ops and of
    constructors with pure arguments, calls of functions whose body is known and pure
    (function literals, let-bound functions registered with :meth:`add_local_function`, and
    non-recursive globals with pure bodies), ``if`` and complete ``match`` with pure parts, lets
    with pure values and body. Impure: every reference operation (``ref``, ``ref_read``,
    ``ref_write``), calls of unknown functions (parameters, closures computed at run time),
    recursive functions (they may not terminate), effectful ops and ``match?``.
    """

    def __init__(self, mod: IRModule | None = None) -> None:
        self.mod = mod
        self.local_fns: dict[Var, Function] = {}
        self._memo: dict[int, bool] = {}
        self._keep: list[Expr] = []
        self._global_pure: dict[str, bool] | None = None

    def add_local_function(self, var: Var, fn: Function) -> None:
        """Record that ``var`` is let-bound to the function literal ``fn``."""
        self.local_fns[var] = fn

    def collect_local_functions(self, e: Expr) -> None:
        """Record every let-bound function literal inside ``e``."""
        for x in post_order(e):
            if type(x) is Let and type(x.value) is Function:
                self.local_fns[x.var] = x.value

    # -- globals ------------------------------------------------------------
    def global_is_pure(self, name: str) -> bool:
        """True if calling global ``name`` has no effects (and it is not recursive)."""
        if self.mod is None or name not in self.mod:
            return False
        if self._global_pure is None:
            self._global_pure = {}
            # NOTE: only direct calls can recurse here; a global passed as a value is called
            # through an unknown callee, which is an effect anyway
            graph = call_graph(self.mod, callees_only=True)
            rec = recursive_globals(self.mod, graph)
            for comp in sccs(graph):  # callees first
                for g in comp:
                    self._global_pure[g] = False
                if len(comp) == 1 and comp[0] not in rec:
                    fn = self.mod[comp[0]]
                    self.collect_local_functions(fn.body)
                    self._global_pure[comp[0]] = self.is_pure(fn.body)
        return self._global_pure.get(name, False)

    def purity_of_globals(self) -> dict[str, bool]:
        """Global name -> whether calling it is pure (computes them all)."""
        if self.mod is None:
            return {}
        return {name: self.global_is_pure(name) for name in self.mod.functions}

    # -- expressions --------------------------------------------------------
    def _deps(self, e: Expr) -> tuple[Expr, ...] | object:
        t = type(e)
        if t in _ATOMS or t is Function:
            return ()
        if t is Tuple:
            return e.fields
        if t is TupleGetItem:
            return (e.tuple_value,)
        if t is Call:
            f = e.op
            tf = type(f)
            if tf is Op:
                return _IMPURE if op_is_effectful(f) else e.args
            if tf is Constructor:
                return e.args
            if tf is GlobalVar:
                return e.args if self.global_is_pure(f.name_hint) else _IMPURE
            if tf is Function:
                return (*e.args, f.body)
            if tf is Var and f in self.local_fns:
                return (*e.args, self.local_fns[f].body)
            return _IMPURE
        if t is If:
            return (e.cond, e.true_branch, e.false_branch)
        if t is Match:
            if not e.complete:
                return _IMPURE
            return (e.data, *(c.rhs for c in e.clauses))
        if t is Let:
            lets, body = flatten_lets(e)
            return (*(lt.value for lt in lets), body)
        return _IMPURE  # RefCreate, RefRead, RefWrite

    def is_pure(self, e: Expr) -> bool:
        """True if evaluating ``e`` has no side effects (never raises, never recurses)."""
        memo = self._memo
        r = memo.get(id(e))
        if r is not None:
            return r
        # NOTE: fast path for the common case (an ANF binding: all parts atomic or known)
        deps = self._deps(e)
        if deps is _IMPURE:
            memo[id(e)] = False
            self._keep.append(e)
            return False
        atoms = _ATOM_SET
        if all(type(d) in atoms or id(d) in memo for d in deps):  # type: ignore[union-attr]
            r = all(type(d) in atoms or memo[id(d)] for d in deps)  # type: ignore[union-attr]
            memo[id(e)] = r
            self._keep.append(e)
            return r
        in_progress: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            key = id(node)
            if key in memo:
                continue
            deps = self._deps(node)
            if deps is _IMPURE:
                memo[key] = False
                self._keep.append(node)
                continue
            if ready:
                in_progress.discard(key)
                memo[key] = all(memo.get(id(d), False) for d in deps)  # type: ignore[union-attr]
                self._keep.append(node)
                continue
            if key in in_progress:  # NOTE: a cycle (recursive local function): assume effects
                memo[key] = False
                self._keep.append(node)
                continue
            in_progress.add(key)
            stack.append((node, True))
            for d in deps:  # type: ignore[union-attr]
                if id(d) not in memo:
                    if id(d) in in_progress:
                        memo[id(d)] = False
                        self._keep.append(d)
                    else:
                        stack.append((d, False))
        return memo[id(e)]


# ----------------------------------------------------------------------------- counts
def ref_counts(e: Expr, functions: dict[Var, Function] | None = None) -> dict[Expr, int]:
    """How many parents reference each node of the DAG ``e`` (binder positions excluded).

    A node shared by two parents counts 2; a variable's count is its number of uses. When
    ``functions`` is given, every let-bound function literal is recorded there (var -> fn).
    """
    counts: dict[Expr, int] = {e: 1}
    stack = [e]
    atoms = _ATOM_SET
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Let:
            if functions is not None and type(x.value) is Function:
                functions[x.var] = x.value
            kids: tuple[Expr, ...] = (x.value, x.body)
        elif t is Function:
            kids = (x.body,)
        else:
            kids = children(x)
        for c in kids:
            if c in counts:
                counts[c] += 1
            else:
                counts[c] = 1
                if type(c) not in atoms:
                    stack.append(c)
    return counts


def occurrences_in_function(var: Var, f: Function, cache: dict) -> int:
    """:func:`count_occurrences` of ``var`` in function ``f``; 0 at once when ``var`` is not
    free in ``f`` (free variables cached per function: nested functions cost linear time)."""
    from relay_ir.traversal import function_free_vars
    if var not in function_free_vars(f, cache):
        return 0
    return count_occurrences(var, f)


def count_occurrences(var: Var, e: Expr) -> int:
    """Number of uses of ``var`` in the DAG ``e`` (each shared node counted once)."""
    n = 1 if e is var else 0
    for x in post_order(e):
        for c in use_children(x):
            if c is var:
                n += 1
    return n


# ----------------------------------------------------------------------------- renaming
class Renamer(ExprMutator):
    """Copy an expression giving every variable bound inside it a fresh Var.

    ``type_map`` substitutes type parameters (TypeVar/ShapeVar -> Type) in annotations.
    Free variables are kept. The result is alpha-equivalent to the input.
    """

    def __init__(self, bound: Iterable[Var], type_map: Mapping[object, Type] | None = None):
        super().__init__()
        self.bound = set(bound)
        self.type_map = dict(type_map or {})

    def visit_var(self, v: Var) -> Expr:
        if v not in self.bound:
            return v
        ann = v.type_annotation
        if ann is not None and self.type_map:
            ann = substitute_type(ann, self.type_map)
        return Var(v.name_hint, ann, span=v.span, checked_type_=None)

    def visit_type(self, t: Type) -> Type:
        if t is not None and self.type_map:
            return substitute_type(t, self.type_map)
        return t


def fresh_copy(e: Expr, type_map: Mapping[object, Type] | None = None) -> Expr:
    """``e`` with every variable bound inside it renamed (types substituted by ``type_map``)."""
    return Renamer(bound_vars(e), type_map).visit(e)


def substitute_type(t: Type, mapping: Mapping[object, Type]) -> Type:
    """Replace type/shape variables in ``t`` by ``mapping`` (shape vars map to dims)."""
    from relay_ir.functor import TypeMutator
    from relay_ir.ty import DimExpr, ShapeVar, TensorType, TypeVar, dim_vars

    class _Sub(TypeMutator):
        def visit_type_var(self, tv: Type) -> Type:
            if isinstance(tv, TypeVar) and tv in mapping:
                return mapping[tv]
            return tv

        def visit_tensor_type(self, tt: TensorType) -> Type:
            if not any(isinstance(d, (ShapeVar, DimExpr)) for d in tt.shape):
                return tt
            new = tuple(_sub_dim(d) for d in tt.shape)
            if all(a is b for a, b in zip(new, tt.shape)):
                return tt
            return TensorType(new, tt.dtype)

    def _sub_dim(d: object) -> object:
        if isinstance(d, ShapeVar):
            return mapping.get(d, d)
        if isinstance(d, DimExpr):
            vs = dim_vars(d)
            if not any(v in mapping for v in vs):
                return d
            return _eval_dim(d, mapping)
        return d

    return _Sub().visit(t)


def _eval_dim(d: object, mapping: Mapping[object, object]) -> object:
    from relay_ir.ty import dim_add, dim_mul
    terms = getattr(d, "terms", None)
    if terms is None:
        return d
    total: object = 0
    for mono, coef in terms:
        prod: object = coef
        for v in mono:
            prod = dim_mul(prod, mapping.get(v, v))  # type: ignore[arg-type]
        total = dim_add(total, prod)  # type: ignore[arg-type]
    return total


def to_fixpoint(mod: IRModule, one_round: Callable[[IRModule, Effects], IRModule],
                max_rounds: int = 4) -> IRModule:
    """Run ``one_round(mod, effects)`` again while it changes which globals are pure.

    Removing code can make a global pure (a dead call was its only recursion), which lets a
    second round remove more; iterating makes DCE and ToGNF idempotent.
    """
    effects = Effects(mod)
    before = effects.purity_of_globals()
    for _ in range(max_rounds):
        out = one_round(mod, effects)
        if out is mod:
            return out
        effects = Effects(out)
        after = effects.purity_of_globals()
        if after == before:
            return out
        mod, before = out, after
    return mod
