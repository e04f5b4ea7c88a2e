"""PartialEvaluate: online partial evaluation (Relay's PE design, in pure Python).

Every expression is evaluated to a *partial value*: a static part (what is known at compile
time) plus, when needed, an atom of the residual program that computes the same value.

Static values: tensor constants; tuples of partial values; closures (a function literal plus
the environment it was created in); global functions; operators; constructors and ADT values
built by a constructor; references created in the program (the contents are tracked in a
compile-time store).

Rules:

* ``op(c1, ..., cn) => constant`` when every argument is a static tensor (or tuple of them)
  and the op is not effectful: folded through ``OpDef.impl``.
* ``add(0, x) => x`` (and ``x + 0``, ``x - 0``, ``1 * x``, ``x * 1``, ``x / 1``) when the
  constant is static and ``x`` has exactly the call's tensor type (no broadcast is lost).
* ``(e1, ..., en).i => ei`` on a static tuple; ``if (static c) {a} else {b} => a`` or ``b``;
  ``match`` on a statically known constructor/tuple picks the clause and binds its fields.
* ``ref_read(r) =>`` the value last stored in ``r`` when ``r`` was created in the program
  and no unknown code ran since (store forwarding; every ``ref``/``ref_write`` is still
  emitted in order, so effects are preserved — run dead-ref-elim and DCE afterwards).
* ``f(a1..an)`` with ``f`` a known closure or global is specialized by evaluating the body
  with the arguments bound (inlining/unrolling). A recursive function is unrolled only while
  some argument is static data (a tensor, an ADT value, or a tuple holding one) and the call
  is not reached through a branch on dynamic data since the function was entered (nothing
  static could end that unrolling: ``for i in range(n)`` with a dynamic ``n``); calls in
  tail position (``f(x)``, ``let %r = f(x); %r``, and the branches of
  ``let %r = if (c) {..} else {..}; %r``) are unrolled in a loop, so long chains of closures
  and long loops do not grow the stack. Each unrolling costs one unit of ``fuel`` (per global
  function, default 1000; ``passes.optimize`` gives at least 4096, more to larger programs);
  nesting is also capped at ``max_depth`` (default 40) so Python's stack stays small. Out of
  fuel, the call is left as a residual call: every program terminates, including infinite
  static recursion.
* A recursive function entered from outside it (a loop) is unrolled *on trial*, all or
  nothing: if the unrolling ends within the fuel, the depth bound and ``unroll_budget``
  residual bindings (default :data:`UNROLL_BUDGET`, 16384), the loop becomes straight-line
  code (a static trip count: AD's tape loops then unroll too); otherwise everything emitted
  since the entry is undone and the entry stays one call on its original arguments, instead of
  a peel of its first iterations.
* Anything else is *residualized*: emitted as a ``let`` in evaluation order (the output is in
  A-normal form with fresh binders); a dynamic ``if``/``match`` gets both branches partially
  evaluated, each with its own copy of the store, and the stores are merged afterwards. A
  call of unknown code clears the store. A static closure that reaches residual code is
  emitted as a function literal whose body is partially evaluated with unknown parameters
  (recursive calls inside it stay calls).

Let spines and dataflow chains are walked iteratively (100,000 bindings under the default
recursion limit); function, if and match nesting and unrolling (bounded by ``max_depth``) are
evaluated as generators, without Python recursion. The input is never mutated; emitted nodes
keep the spans of the nodes they came from.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generator, Iterator

import numpy as np

from relay_ir.builder import ScopeBuilder
from relay_ir.errors import InternalError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, Pattern, PatternConstructor, PatternTuple,
                           PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Tuple,
                           TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef, lookup_opdef
from relay_ir.op._jvp import linearity
from relay_ir.passes._zeros import absorbing_zero, additive_zero, subtractive_zero, unsafe_math
from relay_ir.passes.fold_constant import may_fold
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.span import Span
from relay_ir.traversal import (dataflow_children as _dataflow_children, flatten_lets,
                                run_generators,
                                free_type_vars, free_vars, post_order)
from relay_ir.passes._analysis import substitute_type
from relay_ir.ty import TensorType, Type

Gen = Generator[Any, Any, Any]
_DATAFLOW = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)
_TAIL_VALUES = (Call, If, Match)

# Residual bindings a recursion with static control may unroll to (all or nothing, per
# recursion entered): 2**14, about 50 times the code of a small loop body of 300 nodes.
UNROLL_BUDGET = 16384
_LEAF = (Var, Constant, GlobalVar, Op, Constructor)


# ----------------------------------------------------------------------------- values
_value = dataclass(slots=True, eq=False)


@_value
class STensor:
    """A tensor known at compile time (``zero``: whether it is all zeros, once asked;
    ``symbolic``: an AD "no contribution" zero, ``zeros(..., symbolic=True)``)."""

    data: np.ndarray
    zero: bool | None = None
    symbolic: bool = False


@_value
class STuple:
    """A tuple whose fields are partial values."""

    fields: list[PValue]


@_value
class SClosure:
    """A function literal and the environment it was created in."""

    func: Function
    env: Env


@_value
class SGlobal:
    """A global function of the module."""

    gv: GlobalVar


@_value
class SOp:
    """A primitive operator."""

    op: Op


@_value
class SConFn:
    """A constructor not applied yet."""

    con: Constructor


@_value
class SCon:
    """An ADT value built by a constructor from partial values."""

    con: Constructor
    fields: list[PValue]


@_value
class SRef:
    """A reference created in the program; its contents live in the compile-time store."""

    key: int


@_value
class PValue:
    """A partial value: static part (or None) and the residual atom computing it (or None).

    ``scope`` is the residual scope the atom is bound in (the binding list of a
    :class:`~relay_ir.builder.ScopeBuilder` scope; None: valid everywhere).
    """

    static: Any
    dyn: Expr | None = None
    scope: list | None = None


class Env:
    """Variable environment (a chain of dicts) plus the memo of evaluated shared nodes.

    ``tsub`` maps the type (and shape) parameters of the function being specialized to the
    types they stand for at the call site, in the residual program's terms (``None``: not
    known, so annotations that mention it are dropped). It is inherited from ``parent``.
    """

    __slots__ = ("vars", "memo", "parent", "tsub", "memoized")

    def __init__(self, parent: Env | None = None, tsub: dict[Any, Any] | None = None):
        self.vars: dict[Var, PValue] = {}
        self.memo: dict[Expr, PValue] = {}
        self.parent = parent
        # NOTE: every node memoized anywhere in this chain's tree: a node never evaluated
        # misses at once instead of walking the whole chain (deep nesting stays linear)
        self.memoized: set[Expr] = parent.memoized if parent is not None else set()
        if tsub is None:
            tsub = parent.tsub if parent is not None else {}
        self.tsub = tsub

    def lookup(self, v: Var) -> PValue | None:
        """The value bound to ``v`` here or in an enclosing environment."""
        pv = self.vars.get(v)
        if pv is not None:
            return pv
        path = []
        e = self.parent
        while e is not None:
            pv = e.vars.get(v)
            if pv is not None:
                # NOTE: remembered on the way (binders are unique, so nothing between can
                # shadow it): lookups from deeply nested environments stay O(1)
                for p in path:
                    p.vars[v] = pv
                self.vars[v] = pv
                return pv
            path.append(e)
            e = e.parent
        return None

    def memo_get(self, node: Expr) -> PValue | None:
        """The value memoized for the shared node ``node`` here or in an enclosing one."""
        if node not in self.memoized:
            return None
        return self._find("memo", node)

    def memo_set(self, node: Expr, pv: PValue) -> None:
        self.memo[node] = pv
        self.memoized.add(node)

    def _find(self, table: str, key: Any) -> PValue | None:
        e: Env | None = self
        while e is not None:
            pv = getattr(e, table).get(key)
            if pv is not None:
                return pv
            e = e.parent
        return None


_UNKNOWN = object()


@_value
class _TailCall:
    """A call in tail position that the enclosing :meth:`_PE._inline` loop should unroll."""

    func: Function
    env: Env
    args: list[PValue]


class _Trial:
    """A recursive function being unrolled on trial: what to restore if it does not fit.

    ``funcs`` the functions of the loop (its entry and those it tail-calls); ``limit`` the
    residual binding count past which the unrolling is abandoned; ``mark`` the length of the
    residual scope ``bindings`` when it began; ``jmark`` that of the evaluator's journal.
    """

    __slots__ = ("funcs", "limit", "emitted", "fuel", "store", "bindings", "mark", "jmark")

    def __init__(self, func: Function, pe: _PE):
        self.funcs = {func}
        self.emitted = pe.emitted
        self.limit = pe.emitted + pe.unroll_budget
        self.fuel = pe.fuel
        self.store = dict(pe.store)
        self.bindings = pe.sb.bindings
        self.mark = len(pe.sb.bindings)
        self.jmark = len(pe.journal)


class _Rollback(Exception):
    """Unwinds the generators of a trial unrolling back to its start (:meth:`_PE._trial`)."""

    def __init__(self, trial: _Trial):
        super().__init__()
        self.trial = trial


# ----------------------------------------------------------------------------- evaluator
class _PE:
    def __init__(self, mod: IRModule, fuel: int, max_depth: int, unsafe: bool = False,
                 unroll_budget: int = UNROLL_BUDGET):
        self.mod = mod
        self.unsafe = unsafe  # NOTE: unsafe_math: every zero absorbs (see passes._zeros)
        self.fuel = fuel
        self.max_depth = max_depth
        # NOTE: recursion entered from outside is unrolled on trial (all or nothing): at most
        # `unroll_budget` residual bindings; `emitted` counts every residual binding
        self.unroll_budget = unroll_budget
        self.trials: list[_Trial] = []
        self.emitted = 0
        # NOTE: while a trial runs, the partial values given residual atoms, with what they
        # held before (`(pvalue, dyn, scope)`): a failed trial puts those back
        self.journal: list[tuple[PValue, Expr | None, list | None]] = []
        self.depth = 0
        self.store: dict[int, PValue] = {}
        self.next_key = 0
        self.active: list[Function] = []
        # NOTE: dynamic branches entered so far (`dyn`), and its value when each active function
        # was entered: a recursive call reached through a dynamic branch is not unrolled
        self.dyn = 0
        self.active_dyn: list[int] = []
        self.reifying = 0
        self.bound_tvars: set = set()
        self.tsub: dict[Any, Any] = {}
        # NOTE: residual let-spines are built with one ScopeBuilder; `open` holds the binding
        # lists of its open scopes (outermost first), which identify where an atom is bound.
        self.sb = ScopeBuilder()
        self.open: list[list] = [self.sb.bindings]
        self.open_ids: set[int] = {id(self.sb.bindings)}  # NOTE: O(1) `_valid`
        self._recursive: dict[Function, bool] = {}
        self._recursive_globals: set[str] | None = None

    # -- emitting ----------------------------------------------------------------------
    def emit(self, value: Expr, hint: Var | None = None, span: Span | None = None,
             ty: Type | None = None) -> PValue:
        ann = hint.type_annotation if hint is not None else None
        if ann is None:
            ann = ty
        ann = self._closed_type(ann)
        if hint is not None:
            var = Var(hint.name_hint, ann, span=hint.span)
        else:
            var = Var("x", ann, span=span)
        self.sb.bind(var, value)
        self.emitted += 1
        if self.trials and self.emitted > self.trials[0].limit:
            raise _Rollback(self.trials[0])
        return PValue(None, var, self.open[-1])

    def _closed_type(self, t: Type | None) -> Type | None:
        """``t`` with the current type substitution applied, if the result is closed, else None.

        ``t`` comes from the body being evaluated: in an inlined polymorphic global it mentions
        that global's type parameters, which stand for the call's type arguments
        (``self.tsub``). The result may only mention type variables bound where the residual
        code goes (``self.bound_tvars``); an annotation that cannot be expressed there is
        dropped (type inference recomputes it).
        """
        if t is None:
            return None
        ftv = free_type_vars(t)
        if not ftv:
            return t
        sub = self.tsub
        if sub and any(tv in sub for tv in ftv):
            if any(tv in sub and sub[tv] is None for tv in ftv):
                return None
            t = substitute_type(t, {tv: sub[tv] for tv in ftv if tv in sub})
            ftv = free_type_vars(t)
        for tv in ftv:
            if tv not in self.bound_tvars:
                return None
        return t

    def _call_tsub(self, g: Function, call: Call) -> dict[Any, Any]:
        """The type substitution for inlining global ``g`` at ``call``.

        ``@g[A, n](...)`` called with type arguments ``[T1, d1]`` maps ``A -> T1`` and ``n -> d1``
        (in the residual program's terms); without type arguments (an untyped module), or with
        one that mentions a type variable not bound here, the parameter maps to ``None`` and
        annotations that mention it are dropped.
        """
        if not g.type_params:
            return {}
        if len(call.type_args) != len(g.type_params):
            return {tp: None for tp in g.type_params}
        out: dict[Any, Any] = {}
        for tp, ta in zip(g.type_params, call.type_args):
            if isinstance(ta, Type):
                out[tp] = self._closed_type(ta)
            else:
                c = self._closed_type(TensorType((ta,), "int32"))
                out[tp] = c.shape[0] if c is not None else None  # type: ignore[attr-defined]
        return out

    def _closed_type_args(self, targs: tuple) -> tuple:
        """A call's type arguments in the residual program's terms; ``()`` if one is not."""
        out = []
        for ta in targs:
            if isinstance(ta, Type):
                c = self._closed_type(ta)
                if c is None:
                    return ()
                out.append(c)
            else:  # NOTE: a shape argument is a Dim
                c = self._closed_type(TensorType((ta,), "int32"))
                if c is None:
                    return ()
                out.append(c.shape[0])  # type: ignore[attr-defined]
        return tuple(out)

    def _valid(self, pv: PValue) -> bool:
        if pv.dyn is None:
            return False
        scope = pv.scope
        return scope is None or id(scope) in self.open_ids

    @contextmanager
    def _nested(self) -> Iterator[None]:
        """A residual scope nested in the current one (close it with ``self.sb.build``)."""
        with self.sb.scope():
            self.open.append(self.sb.bindings)
            self.open_ids.add(id(self.sb.bindings))
            try:
                yield
            except BaseException:
                self.sb.bindings.clear()  # NOTE: drop the unfinished scope, keep the error
                raise
            finally:
                self.open_ids.discard(id(self.open.pop()))

    def reify(self, pv: PValue) -> Expr:
        """An atom (or ``()``) of the residual program computing ``pv``, emitting as needed."""
        if self._valid(pv):
            return pv.dyn  # type: ignore[return-value]
        return run_generators(self._reify(pv))

    def _reify_all(self, pvs: list[PValue]) -> Gen:
        out = []
        for p in pvs:
            out.append(p.dyn if self._valid(p) else (yield self._reify(p)))
        return tuple(out)

    def _reify(self, pv: PValue) -> Gen:
        """:meth:`reify` as a generator (a closure's body is evaluated as a sub-step)."""
        if self._valid(pv):
            return pv.dyn  # type: ignore[return-value]
        stack: list[tuple[PValue, bool]] = [(pv, False)]
        while stack:
            p, ready = stack.pop()
            if self._valid(p):
                continue
            s = p.static
            if not ready and isinstance(s, (STuple, SCon)):
                stack.append((p, True))
                for f in s.fields:
                    if not self._valid(f):
                        stack.append((f, False))
                continue
            if isinstance(s, SClosure):
                yield self._reify_closure(p, s)
            else:
                self._reify_one(p)
        return pv.dyn  # type: ignore[return-value]

    def _journal(self, p: PValue) -> None:
        """Remember ``p``'s residual atom before it changes, if a trial may have to undo it."""
        if self.trials:
            self.journal.append((p, p.dyn, p.scope))

    def _reify_one(self, p: PValue) -> None:
        s = p.static
        self._journal(p)
        if isinstance(s, STensor):
            if s.symbolic:  # NOTE: stays marked, so later passes may still drop it
                od = get_opdef("zeros")
                t = TensorType(tuple(s.data.shape), str(s.data.dtype))
                call = Call(od.op, (), od.make_attrs({  # type: ignore[arg-type]
                    "shape": list(s.data.shape), "dtype": str(s.data.dtype), "symbolic": True}),
                    checked_type_=t)
                r = self.emit(call, None, None, t)
                p.dyn, p.scope = r.dyn, r.scope
            else:
                p.dyn, p.scope = Constant(s.data), None
        elif isinstance(s, STuple):
            if not s.fields:
                p.dyn, p.scope = Tuple(()), None
            else:
                r = self.emit(Tuple(tuple(f.dyn for f in s.fields)))  # type: ignore[misc]
                p.dyn, p.scope = r.dyn, r.scope
        elif isinstance(s, SCon):
            r = self.emit(Call(s.con, tuple(f.dyn for f in s.fields)))  # type: ignore[misc]
            p.dyn, p.scope = r.dyn, r.scope
        elif isinstance(s, SGlobal):
            p.dyn, p.scope = s.gv, None
        elif isinstance(s, SOp):
            p.dyn, p.scope = s.op, None
        elif isinstance(s, SConFn):
            p.dyn, p.scope = s.con, None
        else:
            raise InternalError("partial evaluation: a residual value is used out of its scope")

    def _reify_closure(self, p: PValue, clo: SClosure) -> Gen:
        f = clo.func
        saved_tsub = self.tsub
        self.tsub = clo.env.tsub
        var = Var("f", self._closed_type(f.checked_type_), span=f.span)
        self.tsub = saved_tsub
        self._journal(p)
        p.dyn, p.scope = var, self.open[-1]  # NOTE: set first: recursive references use `var`
        env = Env(clo.env)
        saved_tvars, saved_tsub = self.bound_tvars, self.tsub
        self.tsub = clo.env.tsub
        self.bound_tvars = saved_tvars | set(f.type_params)
        params = tuple(Var(q.name_hint, self._closed_type(q.type_annotation), span=q.span)
                       for q in f.params)
        ret_type = self._closed_type(f.ret_type)
        for q, nq in zip(f.params, params):
            env.vars[q] = PValue(None, nq, None)
        saved_store, self.store = self.store, {}
        self.active.append(f)
        self.active_dyn.append(self.dyn)
        self.depth += 1
        self.reifying += 1
        try:
            with self._nested():
                body = self.sb.build((yield self._reify((yield self._ev(f.body, env)))))
        finally:
            self.bound_tvars, self.tsub = saved_tvars, saved_tsub
            self.reifying -= 1
            self.depth -= 1
            self.active.pop()
            self.active_dyn.pop()
            self.store = saved_store
        self.sb.bind(var, Function(params, body, ret_type, f.type_params, f.attrs, span=f.span))

    # -- evaluation --------------------------------------------------------------------
    def eval(self, e: Expr, env: Env, hint: Var | None = None, tail: bool = False) -> Any:
        """The partial value of ``e``; with ``tail``, possibly a :class:`_TailCall` instead."""
        return run_generators(self._ev(e, env, hint, tail))

    # NOTE: the evaluation methods below are generators: a sub-evaluation is yielded
    # (`pv = yield self._ev(c, env)`), so nesting costs no Python recursion.
    def _ev(self, e: Expr, env: Env, hint: Var | None = None, tail: bool = False) -> Gen:
        t = type(e)
        if t is Var:
            pv = env.lookup(e)
            return pv if pv is not None else PValue(None, e, None)
        if t is Constant:
            return PValue(STensor(e.data), e, None)
        if t is GlobalVar:
            return PValue(SGlobal(e), e, None)
        if t is Op:
            return PValue(SOp(e), e, None)
        if t is Constructor:
            if not e.inputs:
                return PValue(SCon(e, []), e, None)
            return PValue(SConFn(e), e, None)
        memo = env.memo_get(e)
        if memo is not None:
            return memo
        if t in _DATAFLOW:
            return (yield self._eval_dataflow(e, env, hint, tail))
        if t is Let:
            out = yield self._eval_spine(e, env, hint, tail)
        elif t is Function:
            out = PValue(None, e, None) if e.is_primitive else PValue(SClosure(e, env))
        elif t is If:
            out = yield self._eval_if(e, env, hint, tail)
        elif t is Match:
            out = yield self._eval_match(e, env, hint, tail)
        else:
            raise InternalError(f"partial evaluation: unexpected node {t.__name__}")
        if type(out) is not _TailCall:
            env.memo_set(e, out)
        return out

    def _eval_spine(self, let: Let, env: Env, hint: Var | None, tail: bool) -> Gen:
        lets, body = flatten_lets(let)
        if tail and lets and body is lets[-1].var and type(lets[-1].value) in _TAIL_VALUES:
            # NOTE: ``let %x = %f(); %x`` (a call in tail position, as A-normal form writes
            # it: an AD backpropagator chain, a loop's recursive call) is a tail call too, and
            # so are the branches of ``let %x = if (c) {..} else {..}; %x``: unrolled by the
            # trampoline in _inline without recursion.
            for node in lets[:-1]:
                env.vars[node.var] = yield self._ev(node.value, env, node.var)
            last = lets[-1]
            out = yield self._ev(last.value, env, last.var, True)
            if type(out) is not _TailCall:
                env.vars[last.var] = out
            return out
        for node in lets:
            env.vars[node.var] = yield self._ev(node.value, env, node.var)
        return (yield self._ev(body, env, hint, tail))

    def _eval_dataflow(self, root: Expr, env: Env, hint: Var | None, tail: bool) -> Gen:
        memo = env.memo
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if ready:
                if node is root:
                    r = yield self._eval_node(node, env, hint, tail)
                    if type(r) is _TailCall:
                        return r
                    env.memo_set(node, r)
                else:
                    env.memo_set(node, (yield self._eval_node(node, env, None, False)))
                continue
            if env.memo_get(node) is not None:
                continue
            stack.append((node, True))
            for c in _dataflow_children(node):
                if type(c) in _DATAFLOW and env.memo_get(c) is None:
                    stack.append((c, False))
        return memo[root]

    def _evs(self, es: tuple[Expr, ...], env: Env) -> Gen:
        out = []
        for x in es:
            out.append((yield self._ev(x, env)))
        return out

    def _eval_node(self, e: Expr, env: Env, hint: Var | None, tail: bool) -> Gen:
        t = type(e)
        if t is Call:
            callee = yield self._ev(e.op, env)
            args = yield self._evs(e.args, env)
            return (yield self._apply(callee, args, e, hint, tail))
        if t is Tuple:
            return PValue(STuple((yield self._evs(e.fields, env))))
        if t is TupleGetItem:
            tv = yield self._ev(e.tuple_value, env)
            if isinstance(tv.static, STuple) and e.index < len(tv.static.fields):
                return tv.static.fields[e.index]
            base = yield self._reify(tv)
            return self.emit(TupleGetItem(base, e.index, span=e.span), hint, e.span,
                             e.checked_type_)
        if t is RefCreate:
            v = yield self._ev(e.value, env)
            r = self.emit(RefCreate((yield self._reify(v)), span=e.span), hint, e.span,
                          e.checked_type_)
            key = self.next_key
            self.next_key += 1
            self.store[key] = v
            return PValue(SRef(key), r.dyn, r.scope)
        if t is RefRead:
            r = yield self._ev(e.ref, env)
            if isinstance(r.static, SRef) and r.static.key in self.store:
                return self.store[r.static.key]
            out = self.emit(RefRead((yield self._reify(r)), span=e.span), hint, e.span,
                            e.checked_type_)
            if isinstance(r.static, SRef):
                self.store[r.static.key] = out
            return out
        if t is RefWrite:
            r = yield self._ev(e.ref, env)
            v = yield self._ev(e.value, env)
            rr, rv = yield self._reify_all([r, v])
            self.emit(RefWrite(rr, rv, span=e.span), hint, e.span,
                      e.checked_type_)
            if isinstance(r.static, SRef):
                self.store[r.static.key] = v
            else:
                self.store = {}  # NOTE: an unknown reference may alias any known one
            return PValue(STuple([]))
        raise InternalError(f"partial evaluation: unexpected node {t.__name__}")

    # -- calls -------------------------------------------------------------------------
    def _apply(self, callee: PValue, args: list[PValue], call: Call, hint: Var | None,
               tail: bool = False) -> Gen:
        s = callee.static
        if isinstance(s, SOp):
            zero = _absorb(s.op, args, call, self.unsafe)
            if zero is not None:
                return zero
            folded = self._fold(s.op, args, call)
            if folded is not None:
                return folded
            same = _identity(s.op, args, call, hint, self.unsafe)
            if same is not None:
                return same
            return self.emit(Call(s.op, (yield self._reify_all(args)), call.attrs,
                                  self._closed_type_args(call.type_args), span=call.span),
                             hint, call.span, call.checked_type_)
        if isinstance(s, SConFn):
            return PValue(SCon(s.con, list(args)))
        if isinstance(s, SCon) and not s.fields and not args:
            return PValue(SCon(s.con, []))
        func: Function | None = None
        env: Env | None = None
        recursive = False
        if isinstance(s, SClosure):
            func, env = s.func, s.env
            recursive = self._is_recursive_closure(func, env)
        elif isinstance(s, SGlobal) and s.gv.name_hint in self.mod:
            g = self.mod[s.gv.name_hint]
            if not g.is_primitive:
                func, env = g, Env(None, self._call_tsub(g, call))
                recursive = s.gv.name_hint in self._globals_in_cycles()
        if func is not None and env is not None and len(func.params) == len(args) \
                and self._should_inline(callee, func, args, recursive):
            if recursive and func not in self.active and \
                    not any(func in t.funcs for t in self.trials):
                out = yield self._trial(func, env, args)
                if out is not None:
                    return out
            elif tail:
                return _TailCall(func, env, args)
            else:
                return (yield self._inline(func, env, args))
        targs = self._closed_type_args(call.type_args) if isinstance(s, SGlobal) else ()
        rc = yield self._reify(callee)
        out = self.emit(Call(rc, (yield self._reify_all(args)),
                             call.attrs, targs, span=call.span), hint, call.span,
                        call.checked_type_)
        self.store = {}  # NOTE: unknown code may read or write any reference
        return out

    def _trial(self, func: Function, env: Env, args: list[PValue]) -> Gen:
        """``func`` (recursive, entered from outside) inlined if its unrolling ends within the
        budget, else None with everything emitted since undone (the caller emits the call).

        NOTE: all or nothing: a loop whose trip count is static unrolls whole (the tape rule's
        forward and backward loops then become straight-line code), and a longer one stays one
        call instead of being peeled up to the fuel or depth bound.
        """
        trial = _Trial(func, self)
        self.trials.append(trial)
        try:
            out = yield self._inline(func, env, args)
        except _Rollback as e:
            if e.trial is not trial:
                raise
            del trial.bindings[trial.mark:]
            for p, dyn, scope in reversed(self.journal[trial.jmark:]):
                p.dyn, p.scope = dyn, scope
            del self.journal[trial.jmark:]
            self.store = trial.store
            self.fuel = trial.fuel
            self.emitted = trial.emitted
            return None
        finally:
            self.trials.pop()
            if not self.trials:  # NOTE: kept while an enclosing trial may still fail
                self.journal.clear()
        return out

    def _inline(self, func: Function, env: Env, args: list[PValue]) -> Gen:
        """Evaluate ``func``'s body on ``args``; calls in tail position loop here (trampoline).

        NOTE: a chain of closures each ending in a call of the next (an AD backpropagator) is
        unrolled without growing the Python stack.
        """
        self.depth += 1
        self.active.append(func)
        self.active_dyn.append(self.dyn)
        saved_tsub = self.tsub
        try:
            while True:
                self.fuel -= 1
                self.tsub = env.tsub
                body_env = Env(env)
                for p, a in zip(func.params, args):
                    body_env.vars[p] = a
                r = yield self._ev(func.body, body_env, None, True)
                if type(r) is not _TailCall:
                    return r
                func, env, args = r.func, r.env, r.args
                self.active[-1] = func
                if self.trials:
                    self.trials[-1].funcs.add(func)
        finally:
            self.tsub = saved_tsub
            self.active.pop()
            self.active_dyn.pop()
            self.depth -= 1

    def _should_inline(self, callee: PValue, func: Function, args: list[PValue],
                       recursive: bool) -> bool:
        if not self._would_inline(callee, func, args, recursive):
            return False
        if self.fuel <= 0 or self.depth >= self.max_depth:
            if self.trials:  # NOTE: the unrolling on trial does not end within the bounds
                raise _Rollback(self.trials[-1])
            return False
        return True

    def _would_inline(self, callee: PValue, func: Function, args: list[PValue],
                      recursive: bool) -> bool:
        if func.attrs.get("NoInline", 0):
            # NOTE: as the inline pass: e.g. AD's backward loop over a tape (passes/loop_ad.py),
            # whose caller must not hold a record while the loop frees them -- unless the
            # whole tape is known here (a static trip count): the loop then unrolls to its
            # end and no tape is left at run time
            return bool(func.attrs.get("TapeLoop", 0)) and bool(args) and \
                self._whole_tape(args[0])
        if self.reifying and isinstance(callee.static, SClosure) and self._valid(callee):
            # NOTE: inside a residual function body, call a closure that already has residual
            # code instead of copying its body again (keeps the output linear).
            return False
        if func in self.active:
            # NOTE: reached through a branch on dynamic data since the innermost activation
            # of `func`: no static fact ends such an unrolling (`for i in range(n)` with a
            # dynamic n would unroll max_depth levels), so the call stays a call
            inner = len(self.active) - 1 - self.active[::-1].index(func)
            if self.active_dyn[inner] < self.dyn:
                return False
        if recursive or func in self.active:
            return any(_decisive(a) for a in args)
        return True

    def _whole_tape(self, cell: PValue) -> bool:
        """Whether ``cell`` is a reference whose contents are known here down to the end of
        the list (a chain of constructors whose last field is the rest, ending in one without
        fields): the tape of a loop whose trip count is static (passes/loop_ad.py)."""
        s = cell.static
        if not isinstance(s, SRef) or s.key not in self.store:
            return False
        cur = self.store[s.key]
        for _ in range(max(self.fuel, 0) + 1):
            c = cur.static
            if not isinstance(c, SCon):
                return False
            if not c.fields:
                return True
            cur = c.fields[-1]
        return False

    def _is_recursive_closure(self, func: Function, env: Env) -> bool:
        r = self._recursive.get(func)
        if r is None:
            r = False
            for v in free_vars(func):
                pv = env.lookup(v)
                if pv is not None and isinstance(pv.static, SClosure) and pv.static.func is func:
                    r = True
                    break
            self._recursive[func] = r
        return r

    def _globals_in_cycles(self) -> set[str]:
        if self._recursive_globals is None:
            graph: dict[str, set[str]] = {}
            for name, fn in self.mod.functions.items():
                graph[name] = {n.name_hint for n in post_order(fn) if type(n) is GlobalVar}
            cyclic: set[str] = set()
            for start in graph:
                seen: set[str] = set()
                stack = list(graph[start])
                while stack:
                    g = stack.pop()
                    if g == start:
                        cyclic.add(start)
                        break
                    if g in seen or g not in graph:
                        continue
                    seen.add(g)
                    stack.extend(graph[g])
            self._recursive_globals = cyclic
        return self._recursive_globals

    def _fold(self, op: Op, args: list[PValue], call: Call) -> PValue | None:
        """``op(static args) => static result``, under FoldConstant's size policy
        (:func:`~relay_ir.passes.fold_constant.may_fold`; symbolic zeros count as no data:
        they are never emitted as constants)."""
        opdef = lookup_opdef(op.name)
        if opdef is None or opdef.impl is None or opdef.effectful:
            return None
        vals = []
        for a in args:
            v = _static_array(a)
            if v is None:
                return None
            vals.append(v)
        symbolic_zeros = op.name == "zeros" and bool(call.attrs.get("symbolic", False))
        all_symbolic = bool(args) and all(isinstance(a.static, STensor) and a.static.symbolic
                                          for a in args)
        n_in = sum(_data_size(a) for a in args)
        t = call.checked_type_
        if not (symbolic_zeros or all_symbolic) and isinstance(t, TensorType) and \
                t.is_static and not may_fold(int(np.prod(t.shape, dtype=np.int64)), n_in):
            return None  # NOTE: known too big before computing it
        try:
            with np.errstate(all="ignore"):
                res = opdef.impl(vals, call.attrs)
        except Exception:  # NOTE: a failing op stays in the program, to fail at run time
            return None
        out = _to_pvalue(res)
        if out is None:
            return None
        if isinstance(out.static, STensor) and (
                symbolic_zeros or (all_symbolic and _is_zeros(out, True))):
            # NOTE: zeros computed from symbolic zeros alone (`expand_dims(z)`, `z + z`) are
            # still "no contribution"; they are never emitted as constants
            out.static.symbolic = True
            return out
        if not may_fold(_data_size(out), n_in):
            return None
        return out

    # -- control flow ------------------------------------------------------------------
    def _branch(self, e: Expr, env: Env, store: dict[int, PValue],
                bind: dict[Var, PValue] | None = None) -> Gen:
        self.store = dict(store)
        benv = Env(env)
        if bind:
            benv.vars.update(bind)
        self.dyn += 1
        try:
            with self._nested():
                body = self.sb.build((yield self._reify((yield self._ev(e, benv)))))
        finally:
            self.dyn -= 1
        return body, self.store

    @staticmethod
    def _merge(stores: list[dict[int, PValue]]) -> dict[int, PValue]:
        first = stores[0]
        return {k: v for k, v in first.items() if all(s.get(k) is v for s in stores[1:])}

    def _eval_if(self, e: If, env: Env, hint: Var | None, tail: bool) -> Gen:
        c = yield self._ev(e.cond, env)
        if isinstance(c.static, STensor) and c.static.data.size == 1:
            taken = e.true_branch if bool(c.static.data.reshape(()).item()) else e.false_branch
            return (yield self._ev(taken, env, hint, tail))
        cond = yield self._reify(c)
        saved = self.store
        tb, ts = yield self._branch(e.true_branch, env, saved)
        fb, fs = yield self._branch(e.false_branch, env, saved)
        self.store = self._merge([ts, fs])
        return self.emit(If(cond, tb, fb, span=e.span), hint, e.span, e.checked_type_)

    def _eval_match(self, m: Match, env: Env, hint: Var | None, tail: bool) -> Gen:
        d = yield self._ev(m.data, env)
        first_unknown = len(m.clauses)
        for i, clause in enumerate(m.clauses):
            r = self._static_match(clause.lhs, d)
            if r is None:
                continue
            if r is _UNKNOWN:
                first_unknown = i
                break
            benv = Env(env)
            benv.vars.update(r)  # type: ignore[arg-type]
            return (yield self._ev(clause.rhs, benv, hint, tail))
        clauses = m.clauses[first_unknown:] if first_unknown < len(m.clauses) else m.clauses
        data = yield self._reify(d)
        saved = self.store
        new_clauses = []
        stores = []
        for clause in clauses:
            bind: dict[Var, PValue] = {}
            lhs = _fresh_pattern(clause.lhs, bind, self._closed_type)
            rhs, st = yield self._branch(clause.rhs, env, saved, bind)
            stores.append(st)
            new_clauses.append(Clause(lhs, rhs, span=clause.span))
        self.store = self._merge(stores) if stores else saved
        return self.emit(Match(data, tuple(new_clauses), m.complete, span=m.span), hint, m.span,
                         m.checked_type_)

    def _static_match(self, p: Pattern, v: PValue) -> Any:
        """Bindings if ``p`` surely matches ``v``, None if it surely fails, else _UNKNOWN."""
        if isinstance(p, PatternWildcard):
            return {}
        if isinstance(p, PatternVar):
            return {p.var: v}
        s = v.static
        if isinstance(p, PatternTuple):
            if isinstance(s, STuple) and len(s.fields) == len(p.patterns):
                return self._match_all(p.patterns, s.fields)
            if s is None and _irrefutable(p):
                out: dict[Var, PValue] = {}
                base = self.reify(v)
                for i, q in enumerate(p.patterns):
                    item = self.emit(TupleGetItem(base, i, span=p.span), None, p.span)
                    out.update(self._static_match(q, item))
                return out
            return _UNKNOWN
        if isinstance(p, PatternConstructor):
            if not isinstance(s, SCon):
                return _UNKNOWN
            if s.con.name_hint != p.constructor.name_hint or len(s.fields) != len(p.patterns):
                return None
            return self._match_all(p.patterns, s.fields)
        return _UNKNOWN

    def _match_all(self, patterns: tuple[Pattern, ...], fields: list[PValue]) -> Any:
        """:meth:`_static_match` of each pattern against its field, the bindings merged."""
        out: dict[Var, PValue] = {}
        for q, f in zip(patterns, fields):
            r = self._static_match(q, f)
            if r is None or r is _UNKNOWN:
                return r
            out.update(r)
        return out


def _decisive(pv: PValue) -> bool:
    """Static data that can decide control flow (a tensor or ADT value, or a tuple holding one).

    Recursion is unrolled only on such arguments: a static closure or reference passed along
    unchanged (``map(f, xs)``, a backpropagator cell) does not make a loop on dynamic data end.
    """
    s = pv.static
    if isinstance(s, (STensor, SCon)):
        return True
    if isinstance(s, STuple):
        return any(isinstance(f.static, (STensor, SCon)) for f in s.fields)
    return False


def _irrefutable(p: Pattern) -> bool:
    stack = [p]
    while stack:
        q = stack.pop()
        if isinstance(q, PatternConstructor):
            return False
        if isinstance(q, PatternTuple):
            stack.extend(q.patterns)
    return True


def _fresh_pattern(p: Pattern, bind: dict[Var, PValue],
                   closed: Callable[[Type | None], Type | None]) -> Pattern:
    """``p`` with fresh pattern variables (annotations through ``closed``), bound in ``bind``."""
    if isinstance(p, PatternVar):
        nv = Var(p.var.name_hint, closed(p.var.type_annotation), span=p.var.span)
        bind[p.var] = PValue(None, nv, None)
        return PatternVar(nv, span=p.span)
    if isinstance(p, PatternConstructor):
        return PatternConstructor(p.constructor, tuple(_fresh_pattern(q, bind, closed)
                                                       for q in p.patterns), span=p.span)
    if isinstance(p, PatternTuple):
        return PatternTuple(tuple(_fresh_pattern(q, bind, closed) for q in p.patterns),
                            span=p.span)
    return p


# op name -> (argument that may be the neutral constant, neutral value, the other argument)
_NEUTRAL: dict[str, tuple[tuple[int, float, int], ...]] = {
    "add": ((0, 0.0, 1), (1, 0.0, 0)),
    "subtract": ((1, 0.0, 0),),
    "multiply": ((0, 1.0, 1), (1, 1.0, 0)),
    "divide": ((1, 1.0, 0),),
}


def _is_zeros(pv: PValue, unsafe: bool = False) -> bool:
    """``pv`` is a zero that absorbs a linear operator (passes._zeros.absorbing_zero)."""
    s = pv.static
    if not isinstance(s, STensor):
        return False
    if s.zero is None:
        s.zero = s.data.size > 0 and not np.any(s.data)
    return s.zero and absorbing_zero(s.data, s.symbolic, unsafe)


def _absorb(op: Op, args: list[PValue], call: Call, unsafe: bool = False) -> PValue | None:
    """``matmul(z, x) => z``: zeros pass through an operator its JVP rule declares linear
    (``op._jvp.linearity``: in any one of the arguments for multilinear operators, in all of
    them for jointly linear ones), when the result type is static.

    Only zeros that keep every value exact absorb (``inf * 0`` is nan): symbolic AD zeros
    (``zeros(..., symbolic=True)``: in a gradient program the adjoints nothing was accumulated
    into, "no contribution" as JAX's symbolic Zero -- reverse over reverse otherwise runs whole
    backward products on them), integer zeros, and any zero under ``unsafe_math``. The result
    is symbolic when an absorbing argument was.
    """
    od = lookup_opdef(op.name)
    rule = linearity(od.jvp) if od is not None else None
    if rule is None:
        return None
    t = call.checked_type_
    if not isinstance(t, TensorType) or not all(type(d) is int for d in t.shape):
        return None
    mode, positions = rule
    ks = [k for k in (range(len(args)) if positions is None else positions) if k < len(args)]
    zero = [_is_zeros(args[k], unsafe) for k in ks]
    if not ks or not (any(zero) if mode == "any" else all(zero)):
        return None
    symbolic = any(z and args[k].static.symbolic  # type: ignore[union-attr]
                   for k, z in zip(ks, zero))
    return PValue(STensor(np.zeros(t.shape, t.dtype), zero=True, symbolic=symbolic))


def _known_type(e: Expr, pv: PValue | None = None) -> Type | None:
    t = e.checked_type_
    if t is None and type(e) is Var:
        t = e.type_annotation
    if t is None and pv is not None and type(pv.dyn) is Var:
        t = pv.dyn.type_annotation
    return t


def _identity(op: Op, args: list[PValue], call: Call, hint: Var | None,
              unsafe: bool = False) -> PValue | None:
    """``add(z, x) => x``, ``x - z``, ``1 * x``, ``x * 1``, ``x / 1 => x``.

    Only when the constant is static and ``x`` has exactly the call's (tensor) type, so no
    broadcast is lost, and only with a zero that keeps every value exact (passes._zeros):
    ``x + z`` for a symbolic AD zero, ``-0.0`` or an integer zero, ``x - z`` for a symbolic
    zero, ``+0.0`` or an integer zero (any zero under ``unsafe_math``). This is what makes a
    gradient's adjoints start lazily: a cell's first accumulation ``add(zeros, g)`` of its
    symbolic zero becomes ``g``, with no zero buffer behind it.
    """
    rules = _NEUTRAL.get(op.name)
    if rules is None or len(args) != 2:
        return None
    out_t = call.checked_type_
    if out_t is None and hint is not None:
        out_t = hint.type_annotation
    if not isinstance(out_t, TensorType):
        return None
    for k, neutral, other in rules:
        c = args[k].static
        if not isinstance(c, STensor) or c.data.size == 0 or c.data.dtype == np.bool_:
            continue
        if _known_type(call.args[other], args[other]) != out_t \
                or not np.all(c.data == neutral):
            continue
        if neutral == 0.0:
            exact = additive_zero if op.name == "add" else subtractive_zero
            if not exact(c.data, c.symbolic, unsafe):
                continue
        return args[other]
    return None


def _data_size(pv: PValue) -> int:
    """Elements of program data a static value stands for (symbolic zeros: none)."""
    s = pv.static
    if isinstance(s, STensor):
        return 0 if s.symbolic else int(s.data.size)
    if isinstance(s, STuple):
        return sum(_data_size(f) for f in s.fields)
    return 0


def _static_array(pv: PValue) -> Any:
    s = pv.static
    if isinstance(s, STensor):
        return s.data
    if isinstance(s, STuple):
        out = []
        for f in s.fields:
            if not isinstance(f.static, STensor):
                return None
            out.append(f.static.data)
        return tuple(out)
    return None


def _to_pvalue(res: Any) -> PValue | None:
    if isinstance(res, (tuple, list)):
        fields = []
        for r in res:
            if not isinstance(r, np.ndarray) and not np.isscalar(r):
                return None
            fields.append(PValue(STensor(np.asarray(r))))
        return PValue(STuple(fields))
    if isinstance(res, np.ndarray) or np.isscalar(res):
        return PValue(STensor(np.asarray(res)))
    return None


# ----------------------------------------------------------------------------- the pass
@dataclass(frozen=True)
class PartialEvaluate(FunctionPass):
    """Online partial evaluation with a fuel bound (see the module docstring for the rules).

    ``op(consts) => const``; ``if (static) {a} else {b} => a|b``; ``match`` on a known value
    picks the clause; ``ref_read`` of a known reference => its contents; calls of known
    functions are specialized (recursion unrolled while arguments are static, at most
    ``fuel`` unrollings per global); everything else is emitted in A-normal form.
    """

    fuel: int = 1000
    max_depth: int = 40
    unroll_budget: int = UNROLL_BUDGET

    name: ClassVar[str] = "partial-eval"
    opt_level: ClassVar[int] = 1
    # NOTE: its zero and identity rules read the calls' checked types (static result types)
    required: ClassVar[tuple[str, ...]] = ("infer-type",)

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        """``func`` partially evaluated (primitive functions are kept as they are)."""
        if func.is_primitive:
            return func
        budget = ctx.config_int("partial-eval.unroll_budget", self.unroll_budget)
        return partial_eval_function(func, mod, fuel=self.fuel, max_depth=self.max_depth,
                                     unroll_budget=budget,
                                     unsafe_math=unsafe_math(ctx))


def partial_eval_function(fn: Function, mod: IRModule | None = None, *, fuel: int = 1000,
                          max_depth: int = 40, unsafe_math: bool = False,
                          unroll_budget: int = UNROLL_BUDGET) -> Function:
    """Partially evaluate one function (its parameters are unknown)."""
    pe = _PE(mod if mod is not None else IRModule(), fuel, max_depth, unsafe_math,
             unroll_budget)
    pe.bound_tvars = set(fn.type_params)
    env = Env(None)
    for p in fn.params:
        env.vars[p] = PValue(None, p, None)
    pe.active.append(fn)
    pe.active_dyn.append(0)
    body = pe.sb.build(pe.reify(pe.eval(fn.body, env)))
    return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)


def partial_eval_expr(expr: Expr, mod: IRModule | None = None, *, fuel: int = 1000,
                      max_depth: int = 40, unroll_budget: int = UNROLL_BUDGET) -> Expr:
    """Partially evaluate a closed (or free-variable) expression."""
    pe = _PE(mod if mod is not None else IRModule(), fuel, max_depth, False, unroll_budget)
    return pe.sb.build(pe.reify(pe.eval(expr, Env(None))))
