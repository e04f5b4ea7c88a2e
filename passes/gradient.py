"""Reverse-mode automatic differentiation: ``gradient(mod, entry)``.

The transform is the reference-based one of "Demystifying Differentiable Programming" as Relay
built it (../shared/AD_NOTES.md, section a), with the slips listed there avoided::

    def @f(%x: T, ...) -> R { body }
        =>  def @f_grad(%x: T', ..., %bp: ref(fn () -> ())) -> R' { body' }
    def @main(%p1: T1, ..., %pn: Tn) -> R
        =>  def @main(%p1: T1, ..., %pn: Tn) -> (R, (T1, ..., Tn))

Types map as ``T => T'``: a float tensor becomes the pair ``(T, ref(T))`` of its value and a
reference to its adjoint; int and bool tensors stay as they are (they are never differentiated);
tuples, references and ADT arguments map field by field; a function type gains the
backpropagator parameter ``ref(fn () -> ())`` and has its argument *and* result types mapped; an
ADT whose constructors hold float tensors or functions gets a transformed twin definition.

Expressions map structurally, except:

* ``op(a1..an)`` => ``let %y = op(primal(a1)..primal(an)); (%y, ref(zeros_like(%y)))`` and,
  when some argument is a float value and the result has a float leaf, the backpropagator cell
  is extended: ``let %k = !bp; bp := fn () { adjoints of the op's OpDef.grad rule, given the
  let-bound ``%y`` (never a recomputation), are added into the arguments' cells; %k() }``;
* every other call ``f(args)`` => ``f'(args', bp)``: the *current* backpropagator is passed at
  call time, so closures called far from where they were made, recursion and mutual recursion
  through globals extend the caller's chain;
* ``fn (x) { e }`` => ``fn (x', bp2) { e' }`` where ``e'`` uses ``bp2``;
* a float constant ``c`` used as a value => ``(c, ref(zeros_like(c)))``; as an operator argument
  it is used as is (its adjoint is never read);
* ``if`` conditions and ``match`` scrutinee tags are not differentiated;
* ``annotation.checkpoint(@g(a..))`` (a call of a global on tensor trees, marked for
  rematerialization; a global declared with the attribute ``Checkpoint=1`` has every call
  marked) => the forward pass calls the *original* ``@g`` on the primal values (no
  cells, no closures: its intermediates die when it returns) and pairs the result with fresh
  cells; the backward step re-runs ``@g_grad(a'.., bp2)`` on the same AD arguments with a
  private chain ``bp2``, adds the result's adjoint into the new result cells, runs ``bp2``
  (which accumulates into the arguments' cells) and continues with the outer chain. The
  ``annotation.checkpoint`` call itself is the identity on AD values; around anything else it
  is just that identity.

Adjoint cells start from ``zeros(shape, dtype)``: one buffer per static type and scope, shared by
every cell of that type (values are immutable, a cell is only ever overwritten), so a function
holds one zero buffer per type rather than one per intermediate.

The new entry makes the empty chain ``ref(fn () { () })``, pairs every float parameter with a
zero adjoint cell, calls the transformed entry, adds ``ones_like`` into the cell of **every**
float leaf of the result (so the objective is the sum of all output elements, aliasing
included), runs the chain once, and returns the primal result with one gradient per parameter
(zeros for int and bool parameters, tuples for tuple parameters).

Everything is walked iteratively along let spines (ScopeBuilder); Python recursion only follows
the nesting of functions, branches and match arms.

First-order mode (``mode="first_order"``), for pure dataflow entries (operator calls, tuples,
projections, lets, variables and constants; tensor and tuple parameters and results)::

    def @f(%p..) { let %y1 = e1; ...; let %yn = en; %r }
        =>  def @f(%p..) { let %y1 = e1; ...; let %yn = en;
                           <adjoints of %yn .. %y1, in that order>; (%r, (adjoint of %p..)) }

The forward bindings are kept; then, from the last binding to the first, each binding whose
adjoint is non-zero pushes it to its operands (an op's OpDef.grad rule given the bound ``%y``;
a tuple splits it field by field; a projection adds into one field). Adjoints are trees of
atoms that start absent (zero) and are summed with ``add`` on a second contribution, so nothing
is allocated for values that get no gradient and no reference or closure is emitted; only values
that depend on a parameter named by ``wrt`` get an adjoint. Any
other construct (``if``, ``match``, function literal, reference, call of a global or of a
closure, constructor, ADT parameter) is a ``GradientError`` naming it, with its span.
"""
from __future__ import annotations

from typing import Any, Generator, Sequence

from relay_ir.attrs import Attrs
from relay_ir.builder import ScopeBuilder
from relay_ir.errors import DiagnosticError, InternalError, PassError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, PatternConstructor, PatternVar, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes._ad_common import depth_limited
from relay_ir.passes._ad_common import (_Missing, _tensor_tree, _Twin, _Types, _call,
                                        _check_signature, _keep_originals, _missing_error,
                                        _type_of, _typed_const, emit, has_float_leaf, is_float)
from relay_ir.span import Span
from relay_ir.traversal import run_generators
from relay_ir.ty import (UNIT, FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type,
                         TypeCall)

Gen = Generator[Any, Any, Any]

__all__ = ["gradient", "GradientError"]

# the rule for what the entry returns (its error message)
_RETURNS = ("the objective must be built of tensors, tuples and ADTs (every float element is "
            "summed), not functions or references")

# The backpropagator cell: a reference to the closure that runs the rest of the backward pass.
BP_TYPE: Type = RefType(FuncType((), UNIT))
MODES = ("higher_order", "first_order")

# A backward step is invoked at most once per value (the chain runs once: the entry's
# ``ref_read(%bp)()``, or a checkpoint's private chain): ``Once=1`` says so to the optimizer
# (merge-continuations moves a cell used only inside such a closure into it)
ONCE = Attrs({"Once": 1})


class GradientError(PassError):
    """The program cannot be differentiated (no rule for an op, unsupported entry, ...)."""

    kind = "gradient error"

    def __init__(self, message: str, span: Span | None = None, notes: Sequence[str] = ()):
        super().__init__(message, span, notes, pass_name="gradient")


# ----------------------------------------------------------------------------- the transform
class _GradTypes(_Types):
    """``T => T'`` for reverse mode: a float tensor becomes ``(value, ref(adjoint))`` and every
    function gains the backpropagator cell ``bp``."""

    EXTRA_ARGS = (BP_TYPE,)

    def float_type(self, t: TensorType) -> Type:
        return TupleType((t, RefType(t)))


class _AD(_Twin):
    """The expression transform; one instance per ``gradient`` call."""

    SUFFIX = "_grad"
    ERROR = GradientError
    WHAT = "gradient"

    def __init__(self, mod: IRModule, types: _Types, taken: set[str]) -> None:
        super().__init__(mod, types, taken)
        # AD pairs made here also record their adjoint cell, bound just before the pair (so
        # visible wherever it is), used instead of projecting the pair again.
        self.cells: dict[Var, Var] = {}
        self._add = get_opdef("add").op
        self._add_attrs = get_opdef("add").make_attrs()
        self._zeros: dict[Type, tuple[list, Expr]] = {}  # type -> (scope bindings, zero atom)

    # ---------------------------------------------------------------- scopes
    def function(self, fn: Function, type_params: tuple | None = None) -> Function:
        """See :meth:`_function`."""
        return run_generators(self._function(fn, type_params))

    # NOTE: _function, scope and value are generators: a nested function, branch or arm is
    # yielded (`body = yield self.scope(...)`), so nesting costs no Python recursion.
    def _function(self, fn: Function, type_params: tuple | None = None) -> Gen:
        """``fn (x: T) -> R { e }`` => ``fn (x: T', bp: ref(fn () -> ())) -> R' { e' }``."""
        params = tuple(self.map_var(p, annotate=True) for p in fn.params)
        bp = Var("bp", BP_TYPE, checked_type_=BP_TYPE)
        ret = self.mapped_ret(fn)
        body = yield self.scope(fn.body, bp)
        tps = fn.type_params if type_params is None else type_params
        return Function(params + (bp,), body, ret, tps, fn.attrs, span=fn.span)

    def scope(self, e: Expr, bp: Var) -> Gen:
        """Transform a let spine (a function body, branch or arm) in a fresh scope."""
        sb = self.sb
        marked = _checkpointed(e)
        with sb.scope():
            while isinstance(e, Let):
                nv = self.map_var(e.var, annotate=e.var.type_annotation is not None)
                if (e.var in marked or self.marked_global(e.value)) \
                        and self.can_checkpoint(e.value):
                    value = self.checkpoint_call(e.value, bp)  # type: ignore[arg-type]
                else:
                    value = yield self.value(e.value, bp)
                if isinstance(value, (Var, GlobalVar, Constant, Constructor)):
                    self.vmap[e.var] = value  # type: ignore[assignment]  # NOTE: alias atoms
                else:
                    sb.bind(nv, value)
                e = e.body
            tail = self.atom(e, bp)
            return sb.build(tail)

    # ---------------------------------------------------------------- checkpointing
    def marked_global(self, e: Expr) -> bool:
        """``e`` calls a global marked ``Checkpoint=1`` (every call of it is checkpointed)."""
        if not (isinstance(e, Call) and isinstance(e.op, GlobalVar) and e.op.name_hint in self.mod):
            return False
        fn = self.mod[e.op.name_hint]
        return bool(getattr(fn, "attrs", None) and fn.attrs.get("Checkpoint", 0))

    def can_checkpoint(self, e: Expr) -> bool:
        """``e`` is a call of a global on tensor trees returning a tensor tree."""
        if not (isinstance(e, Call) and isinstance(e.op, GlobalVar)
                and e.op.name_hint in self.mod):
            return False
        return all(_tensor_tree(_type_of(a)) for a in e.args) and _tensor_tree(_type_of(e))

    def checkpoint_call(self, e: Call, bp: Var) -> Expr:
        """``annotation.checkpoint(@g(a..))``: the forward pass runs the *original* ``@g`` on
        the primal values (no adjoint cells, no closures: its intermediates are freed); the
        backward step re-runs ``@g_grad`` on the same AD arguments with a private chain, seeds
        its result with the adjoint of the call, runs that chain, then the rest."""
        sb = self.sb
        arg_types = [_type_of(a) for a in e.args]
        out_t = _type_of(e)
        ad_args = [self.atom(a, bp) for a in e.args]
        prims = [self.primal(v, t) for v, t in zip(ad_args, arg_types)]
        y = sb.let_(Call(e.op, tuple(prims), e.attrs, e.type_args, span=e.span,
                         checked_type_=out_t), "y", out_t)
        result = self.lift_new(y, out_t)
        if not has_float_leaf(out_t):
            return result
        twin = self.global_twin(e.op)  # type: ignore[arg-type]
        k = sb.let_(RefRead(bp), "k", FuncType((), UNIT))
        with sb.scope():
            with sb.scope():
                unit_body = sb.build(Tuple((), checked_type_=UNIT))
            empty = sb.let_(Function((), unit_body, UNIT), "empty", FuncType((), UNIT))
            bp2 = sb.let_(RefCreate(empty), "bp", BP_TYPE)
            again = sb.let_(Call(twin, tuple(ad_args) + (bp2,), span=e.span), "again",
                            self.types.map(out_t))
            dy = self.read_adjoint(result, y, out_t)
            self.accumulate(again, dy, out_t)
            k2 = sb.let_(RefRead(bp2), "k", FuncType((), UNIT))
            sb.let_(Call(k2, ()), "_", UNIT)
            back_body = sb.build(Call(k, (), span=e.span))
        back = sb.let_(Function((), back_body, UNIT, attrs=ONCE, span=e.span), "back",
                       FuncType((), UNIT))
        sb.let_(RefWrite(bp, back), "_", UNIT)
        return result

    # ---------------------------------------------------------------- atoms and values
    def atom(self, e: Expr, bp: Var) -> Expr:
        """The AD value of ``e`` as an atom (binding it when needed)."""
        if isinstance(e, Constant):
            c = _typed_const(e)
            t = _type_of(c)
            return self.pair(c, t) if is_float(t) else c
        leaf = self.leaf_atom(e)
        if leaf is not None:
            return leaf
        return self.sb.let_(run_generators(self.value(e, bp)), "v")

    def pair(self, y: Expr, t: Type) -> Var:
        """``(y, ref(zeros_like(y)))`` for a float tensor ``y`` of type ``t``."""
        sb = self.sb
        z = self.zero_of(y, t)
        cell = sb.let_(RefCreate(z), "cell", RefType(t))
        ad = sb.let_(Tuple((y, cell)), "ad", TupleType((t, RefType(t))))
        self.prims[ad] = y  # type: ignore[index]
        self.cells[ad] = cell  # type: ignore[index,assignment]
        return ad  # type: ignore[return-value]

    def zero_of(self, y: Expr, t: Type) -> Expr:
        """A zero tensor of ``t`` to start an adjoint cell from.

        Values are immutable (a cell is overwritten, never updated in place), so every cell of
        one static type in scope shares a single ``zeros(shape, dtype)`` buffer: a function
        holds one zero buffer per type, not one per intermediate (the interpreter keeps every
        let-bound value of an activation alive until it returns).
        """
        sb = self.sb
        static = isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape)
        if not static:
            return sb.let_(_call("zeros_like", y), "z", t)
        hit = self._zeros.get(t)
        if hit is not None and any(hit[0] is s for s in sb._scopes):  # NOTE: still open
            return hit[1]
        od = get_opdef("zeros")
        z = sb.let_(Call(od.op, (), od.make_attrs({"shape": list(t.shape),  # type: ignore
                                                    "dtype": t.dtype, "symbolic": True}),
                         checked_type_=t), "z", t)
        self._zeros[t] = (sb.bindings, z)
        return z

    def cell_of(self, v: Expr, t: Type) -> Expr:
        """The adjoint cell of the AD value ``v`` of float type ``t``."""
        cell = self.cells.get(v)  # type: ignore[call-overload]
        if cell is not None:
            return cell
        return self.sb.let_(TupleGetItem(v, 1), "cell", RefType(t))

    def value(self, e: Expr, bp: Var) -> Gen:
        """The transformed value of a let binding (not necessarily an atom)."""
        if isinstance(e, (Var, GlobalVar, Constructor, Constant, Op)):
            return self.atom(e, bp)
        if isinstance(e, Call):
            return self.call(e, bp)
        if isinstance(e, Tuple):
            return Tuple(tuple(self.atom(f, bp) for f in e.fields), span=e.span)
        if isinstance(e, TupleGetItem):
            return TupleGetItem(self.atom(e.tuple_value, bp), e.index, span=e.span)
        if isinstance(e, Function):
            if e.is_primitive:
                raise GradientError("primitive (fused) functions cannot be differentiated; "
                                    "differentiate before fusion", e.span)
            return (yield self._function(e))
        if isinstance(e, If):
            cond = self.atom(e.cond, bp)
            tb = yield self.scope(e.true_branch, bp)
            fb = yield self.scope(e.false_branch, bp)
            return If(cond, tb, fb, span=e.span)
        if isinstance(e, Match):
            data = self.atom(e.data, bp)
            arms = []
            for c in e.clauses:
                arms.append(Clause(self.pattern(c.lhs), (yield self.scope(c.rhs, bp)),
                                   span=c.span))
            clauses = tuple(arms)
            return Match(data, clauses, e.complete, span=e.span)
        if isinstance(e, RefCreate):
            return RefCreate(self.atom(e.value, bp), span=e.span)
        if isinstance(e, RefRead):
            return RefRead(self.atom(e.ref, bp), span=e.span)
        if isinstance(e, RefWrite):
            return RefWrite(self.atom(e.ref, bp), self.atom(e.value, bp), span=e.span)
        if isinstance(e, Let):
            return (yield self.scope(e, bp))
        raise InternalError(f"gradient: unexpected node {type(e).__name__}")

    # ---------------------------------------------------------------- calls
    def call(self, e: Call, bp: Var) -> Expr:
        callee = e.op
        if isinstance(callee, Op):
            return self.op_call(e, bp)
        if isinstance(callee, Constructor):
            return Call(self.types.ctor(callee), tuple(self.atom(a, bp) for a in e.args),
                        span=e.span)
        f = self.atom(callee, bp)
        args = tuple(self.atom(a, bp) for a in e.args)
        return Call(f, args + (bp,), span=e.span)

    def op_call(self, e: Call, bp: Var) -> Expr:
        """``op(a..)`` => forward value paired with cells; the backward step pushed on ``bp``."""
        sb = self.sb
        opdef = get_opdef(e.op.name)  # type: ignore[union-attr]
        if opdef.name == "annotation.checkpoint" and len(e.args) == 1 \
                and not isinstance(e.args[0], Constant):
            # NOTE: an identity whose adjoint passes through: the AD value itself (the marked
            # call was transformed by checkpoint_call); no second pair, cell or step.
            return self.atom(e.args[0], bp)
        prim_args: list[Expr] = []
        ad_args: list[Expr | None] = []   # AD value of each float-carrying argument, else None
        arg_types: list[Type] = []
        for a in e.args:
            if isinstance(a, Constant):
                c = _typed_const(a)
                prim_args.append(c)
                ad_args.append(None)
                arg_types.append(_type_of(c))
                continue
            t = _type_of(a)
            arg_types.append(t)
            v = self.atom(a, bp)
            if has_float_leaf(t):
                prim_args.append(self.primal(v, t))
                ad_args.append(v)
            else:
                prim_args.append(v)
                ad_args.append(None)
        out_t = _type_of(e)
        prim_call = Call(e.op, tuple(prim_args), e.attrs, e.type_args, span=e.span,
                         checked_type_=out_t)
        y = sb.let_(prim_call, "y", out_t, bind_atoms=True)
        result = self.lift_new(y, out_t)
        if not has_float_leaf(out_t) or all(a is None for a in ad_args) \
                or opdef.non_differentiable:
            return result
        if opdef.grad is None:
            self.missing.append(_Missing(opdef.name, e.span))
            return result
        # Push the backward step: bp := fn () { accumulate rule(call, y, dy); k() }.
        k = sb.let_(RefRead(bp), "k", FuncType((), UNIT))
        with sb.scope():
            dy = self.read_adjoint(result, y, out_t)
            try:
                grads = opdef.grad(prim_call, y, dy)
            except DiagnosticError as err:  # NOTE: report it with every other problem
                self.rule_errors.append(err.with_span(e.span))
                grads = (None,) * len(e.args)
            if len(grads) != len(e.args):
                raise InternalError(f"gradient rule of `{opdef.name}` returned {len(grads)} "
                                    f"adjoints for {len(e.args)} arguments")
            for v, g, t in zip(ad_args, grads, arg_types):
                if v is not None and g is not None:
                    self.accumulate(v, g, t)
            back_body = sb.build(Call(k, (), span=e.span))
        back = sb.let_(Function((), back_body, UNIT, attrs=ONCE, span=e.span), "back",
                       FuncType((), UNIT))
        sb.let_(RefWrite(bp, back), "_", UNIT)
        return result

    # ---------------------------------------------------------------- lifting helpers
    def lift_new(self, y: Expr, t: Type) -> Expr:
        """AD value of a fresh primal tensor tree ``y``: a zero adjoint cell on each float leaf."""
        sb = self.sb
        if is_float(t):
            return self.pair(y, t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fy = sb.let_(TupleGetItem(y, i, checked_type_=ft), "f", ft)
                fields.append(self.lift_new(fy, ft))
            return sb.let_(Tuple(tuple(fields)), "ad", self.types.map(t))
        if isinstance(t, (TypeCall, GlobalTypeVar)):
            return sb.let_(Call(self.adt_helper("lift", t), (y,)), "ad", self.types.map(t))
        return y

    # ---------------------------------------------------------------- ADT parameters
    def adt_helper(self, kind: str, t: Type) -> GlobalVar:
        """A global for a concrete ADT type ``t`` of the entry's parameters or result.

        ``lift: t -> t'`` (zero cells on float leaves), ``grad: t' -> t`` (the cells read),
        ``primal: t' -> t`` (the values) and ``seed: t' -> ()`` (ones added into every cell).
        """
        gv, new = self.helper_global(kind, t)
        if not new:
            return gv
        sb = self.sb
        mapped = self.types.map(t)
        arg_t, ret_t = {"lift": (t, mapped), "seed": (mapped, UNIT)}.get(kind, (mapped, t))
        v = Var("v", arg_t, checked_type_=arg_t)
        clauses = []
        for c, ftypes in self.adt_ctors(t):
            fvars = [Var("f", ft if kind == "lift" else self.types.map(ft),
                         checked_type_=ft if kind == "lift" else self.types.map(ft))
                     for ft in ftypes]
            with sb.scope():
                pc = self.types.ctor(c)
                if kind == "lift":
                    outs = [self.lift_new(fv, ft) for fv, ft in zip(fvars, ftypes)]
                    body = sb.build(Call(self.types.ctor(c), tuple(outs)))
                    pc = c
                elif kind == "grad":
                    outs = [_read_grad(self, fv, fv, ft) for fv, ft in zip(fvars, ftypes)]
                    body = sb.build(Call(c, tuple(outs)))
                elif kind == "primal":
                    outs = [self.primal(fv, ft) for fv, ft in zip(fvars, ftypes)]
                    body = sb.build(Call(c, tuple(outs)))
                else:
                    for fv, ft in zip(fvars, ftypes):
                        _seed(self, fv, ft)
                    body = sb.build(Tuple(()))
            pat = PatternConstructor(pc, tuple(PatternVar(fv) for fv in fvars))
            clauses.append(Clause(pat, body))
        self.helpers[gv.name_hint] = Function((v,), Match(v, tuple(clauses)), ret_t)
        return gv

    def read_adjoint(self, v: Expr, y: Expr, t: Type) -> Expr:
        """The adjoint of AD value ``v`` (primal ``y``): cells read; zeros on int leaves."""
        sb = self.sb
        if is_float(t):
            cell = self.cell_of(v, t)
            return sb.let_(RefRead(cell, checked_type_=t), "dy", t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fv = sb.let_(TupleGetItem(v, i), "f", self.types.map(ft))
                fy = sb.let_(TupleGetItem(y, i, checked_type_=ft), "f", ft)
                fields.append(self.read_adjoint(fv, fy, ft))
            return sb.let_(Tuple(tuple(fields), checked_type_=t), "dy", t)
        return sb.let_(_call("zeros_like", y, checked_type_=t), "dy", t)

    def accumulate(self, v: Expr, g: Expr, t: Type, done: dict[int, Expr] | None = None
                   ) -> None:
        """``v.cell := !v.cell + g`` on every float leaf of AD value ``v`` of type ``t``.

        ``done``: the emit memo shared by the fields of one tuple ``g`` (``concatenate``'s
        adjoint projects every field from one ``split``, which must be emitted once).
        """
        sb = self.sb
        if done is None:
            done = {}
        if is_float(t):
            ga = emit(sb, g, done)
            cell = self.cell_of(v, t)
            old = sb.let_(RefRead(cell), "old", t)
            new = sb.let_(Call(self._add, (old, ga), self._add_attrs), "acc", t)
            sb.let_(RefWrite(cell, new), "_", UNIT)
        elif isinstance(t, TupleType):
            for i, ft in enumerate(t.fields):
                if not has_float_leaf(ft):
                    continue
                fv = sb.let_(TupleGetItem(v, i), "f", self.types.map(ft))
                if isinstance(g, Tuple):
                    fg: Expr = g.fields[i]
                else:
                    fg = sb.let_(TupleGetItem(emit(sb, g, done), i), "g", ft)
                self.accumulate(fv, fg, ft, done)


def _checkpointed(e: Expr) -> set[Var]:
    """Variables of this let spine that are the argument of ``annotation.checkpoint``."""
    out: set[Var] = set()
    while isinstance(e, Let):
        v = e.value
        if isinstance(v, Call) and isinstance(v.op, Op) and v.op.name == "annotation.checkpoint" \
                and v.args and isinstance(v.args[0], Var):
            out.add(v.args[0])
        e = e.body
    return out


# ----------------------------------------------------------------------------- entry wrapper
def _check_entry(mod: IRModule, entry: str) -> Function:
    if entry not in mod:
        if entry in mod.type_definitions or entry in mod.constructors:
            what = "an ADT" if entry in mod.type_definitions else "a constructor"
            span = getattr(mod.type_definitions.get(entry), "span", None)
            raise GradientError(f"the entry `{entry}` is {what}, not a function; gradient "
                                "needs a global function", span)
        known = ", ".join(f"@{n}" for n in mod.functions) or "none"
        raise GradientError(f"no global function @{entry} to differentiate (globals: {known})")
    fn = mod[entry]
    if not isinstance(fn, Function):
        raise GradientError(f"the entry @{entry} is not a function", getattr(fn, "span", None))
    return fn


def _wrapper(ad: _AD, fn: Function, twin: GlobalVar, arg_types: list[Type], ret: Type,
             wrt: Sequence[int]) -> Function:
    """The new entry: cells for the parameters, call, seed every float leaf, run the chain."""
    sb = ad.sb
    params = tuple(Var(p.name_hint, t, span=p.span, checked_type_=t)
                   for p, t in zip(fn.params, arg_types))
    with sb.scope():
        with sb.scope():
            unit_body = sb.build(Tuple((), checked_type_=UNIT))
        empty = sb.let_(Function((), unit_body, UNIT), "empty", FuncType((), UNIT))
        bp = sb.let_(RefCreate(empty), "bp", BP_TYPE)
        ad_params = [ad.lift_new(p, t) for p, t in zip(params, arg_types)]
        r = sb.let_(Call(twin, tuple(ad_params) + (bp,)), "r", ad.types.map(ret))
        _seed(ad, r, ret)
        k = sb.let_(RefRead(bp), "k", FuncType((), UNIT))
        sb.let_(Call(k, ()), "_", UNIT)
        value = ad.primal(r, ret)
        grads = [_read_grad(ad, ad_params[i], params[i], arg_types[i]) for i in wrt]
        wrt_types = TupleType(tuple(arg_types[i] for i in wrt))
        gt = sb.let_(Tuple(tuple(grads)), "grads", wrt_types)
        out = sb.let_(Tuple((value, gt)), "out")
        body = sb.build(out)
    rt = TupleType((ret, wrt_types))
    return Function(params, body, rt, span=fn.span)


def _seed(ad: _AD, v: Expr, t: Type) -> None:
    sb = ad.sb
    if is_float(t):
        p = ad.primal(v, t)
        ones = sb.let_(_call("ones_like", p), "one", t)
        ad.accumulate(v, ones, t)
    elif isinstance(t, TupleType):
        for i, ft in enumerate(t.fields):
            if not (_tensor_tree(ft) and not has_float_leaf(ft)):
                _seed(ad, sb.let_(TupleGetItem(v, i), "f", ad.types.map(ft)), ft)
    elif isinstance(t, (TypeCall, GlobalTypeVar)):
        sb.let_(Call(ad.adt_helper("seed", t), (v,)), "_", UNIT)


def _read_grad(ad: _AD, v: Expr, p: Expr, t: Type) -> Expr:
    sb = ad.sb
    if is_float(t):
        return sb.let_(RefRead(ad.cell_of(v, t)), "grad", t)
    if isinstance(t, TupleType):
        fields = []
        for i, ft in enumerate(t.fields):
            fv = sb.let_(TupleGetItem(v, i), "f", ad.types.map(ft))
            fp = sb.let_(TupleGetItem(p, i), "f", ft)
            fields.append(_read_grad(ad, fv, fp, ft))
        return sb.let_(Tuple(tuple(fields)), "grad", t)
    if isinstance(t, (TypeCall, GlobalTypeVar)):
        return sb.let_(Call(ad.adt_helper("grad", t), (v,)), "grad", t)
    return sb.let_(_call("zeros_like", p), "grad", t)


# ----------------------------------------------------------------------------- first order
_CONSTRUCT_NAMES: dict[type, str] = {
    If: "`if`", Match: "`match`", Function: "a function literal (closure)",
    RefCreate: "a reference (`ref`)", RefRead: "a reference read (`ref_read`)",
    RefWrite: "a reference write (`ref_write`)",
}


def _first_order_reject(what: str, span: Span | None, entry: str) -> GradientError:
    return GradientError(f"first_order mode differentiates pure dataflow only: {what} in @{entry}"
                         " is not supported (use mode='higher_order', which covers every "
                         "program)", span)


def _dataflow_spine(fn: Function, entry: str) -> tuple[list[tuple[Var, Expr]], Expr]:
    """The bindings and result atom of a pure dataflow body (A-normal form, nested lets
    flattened); the first unsupported construct is a :class:`GradientError` with its span."""
    binds: list[tuple[Var, Expr]] = []
    e: Expr = fn.body
    pending: list[tuple[Var, Expr]] = []  # NOTE: a let whose value is itself a let spine
    while True:
        while isinstance(e, Let):
            if isinstance(e.value, Let):
                pending.append((e.var, e.body))
                e = e.value
                continue
            binds.append((e.var, e.value))
            e = e.body
        if not pending:
            break
        var, rest = pending.pop()
        binds.append((var, e))
        e = rest
    for _, v in binds + [(None, e)]:  # type: ignore[list-item]
        nodes = [v] if not isinstance(v, (Call, Tuple, TupleGetItem)) else \
            [v] + (list(v.args) if isinstance(v, Call) else list(v.fields)
                   if isinstance(v, Tuple) else [v.tuple_value])
        for n in nodes:
            what = _CONSTRUCT_NAMES.get(type(n))
            if what is None and isinstance(n, Call) and not isinstance(n.op, Op):
                op = n.op
                what = (f"a call of the global @{op.name_hint}" if isinstance(op, GlobalVar)
                        else f"a call of constructor `{op.name_hint}` (an ADT value)"
                        if isinstance(op, Constructor)
                        else "a call of a local function (closure)")
            elif what is None and isinstance(n, GlobalVar):
                what = f"the global @{n.name_hint} used as a value"
            elif what is None and isinstance(n, Constructor):
                what = f"constructor `{n.name_hint}` (an ADT value)"
            elif what is None and isinstance(n, Op) and n is not getattr(v, "op", None):
                what = f"operator `{n.name}` used as a value"
            if what is not None:
                raise _first_order_reject(what, n.span or v.span or fn.span, entry)
    return binds, e


class _Adj:
    """Adjoint trees of a first-order sweep: a tensor leaf is an atom or None (zero so far)."""

    def __init__(self, sb: ScopeBuilder) -> None:
        self.sb = sb
        self.adj: dict[Var, object] = {}
        self._add = get_opdef("add")

    def get(self, v: Var) -> object:
        return self.adj.get(v)

    def add(self, v: Var, g: object, t: Type) -> None:
        """Accumulate the adjoint tree ``g`` (of type ``t``) into ``v``'s."""
        self.adj[v] = self._sum(self.adj.get(v), g, t)

    def _sum(self, a: object, b: object, t: Type) -> object:
        if b is None:
            return a
        if a is None:
            return b
        if isinstance(t, TupleType):
            return [self._sum(x, y, ft) for x, y, ft in zip(a, b, t.fields)]  # type: ignore
        return self.sb.let_(Call(self._add.op, (a, b), self._add.make_attrs(),  # type: ignore
                                 checked_type_=t), "acc", t)

    def tree(self, e: Expr, t: Type) -> object:
        """The adjoint tree of an expression of type ``t`` (a rule's output)."""
        if isinstance(t, TupleType):
            if isinstance(e, Tuple):
                return [self.tree(f, ft) for f, ft in zip(e.fields, t.fields)]
            a = emit(self.sb, e)
            return [self.tree(self.sb.let_(TupleGetItem(a, i, checked_type_=ft), "g", ft), ft)
                    for i, ft in enumerate(t.fields)]
        if not has_float_leaf(t):
            return None
        return emit(self.sb, e)

    def materialize(self, g: object, primal: Expr, t: Type) -> Expr:
        """An expression for the adjoint tree ``g``: zeros where nothing was accumulated."""
        sb = self.sb
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                sub = g[i] if g is not None else None  # type: ignore[index]
                fp = sb.let_(TupleGetItem(primal, i, checked_type_=ft), "p", ft)
                fields.append(self.materialize(sub, fp, ft))
            return sb.let_(Tuple(tuple(fields), checked_type_=t), "dt", t)
        if g is None or not is_float(t):
            return sb.let_(_call("zeros_like", primal, checked_type_=t), "z", t)
        return g  # type: ignore[return-value]


def _ones_tree(sb: ScopeBuilder, primal: Expr, t: Type) -> object:
    if isinstance(t, TupleType):
        return [_ones_tree(sb, sb.let_(TupleGetItem(primal, i, checked_type_=ft), "p", ft), ft)
                for i, ft in enumerate(t.fields)]
    if not is_float(t):
        return None
    return sb.let_(_call("ones_like", primal, checked_type_=t), "one", t)


def _first_order(fn: Function, entry: str, arg_types: list[Type], ret: Type,
                 wrt: Sequence[int], mod: IRModule) -> Function:
    """The direct reverse sweep of a pure dataflow entry (module docstring, first order)."""
    for p, t in zip(fn.params, list(arg_types) + [ret]):
        if not _tensor_tree(t):
            raise _first_order_reject(f"parameter %{p.name_hint} of type {t!r} (an ADT)",
                                      p.span or fn.span, entry)
    if not _tensor_tree(ret):
        raise _first_order_reject(f"a result of type {ret!r} (an ADT)", fn.span, entry)
    binds, result = _dataflow_spine(fn, entry)
    sb = ScopeBuilder()
    vmap: dict[Var, Expr] = {}
    types: dict[Var, Type] = {}
    params = []
    for p, t in zip(fn.params, arg_types):
        np_ = Var(p.name_hint, t, span=p.span, checked_type_=t)
        vmap[p], types[np_] = np_, t
        params.append(np_)

    def atom(a: Expr) -> Expr:
        if isinstance(a, Var):
            return vmap[a]
        if isinstance(a, Constant):
            return _typed_const(a)
        return a

    missing: list[_Missing] = []
    rule_errors: list[DiagnosticError] = []
    forward: list[tuple[Var, Expr]] = []   # (new var, new value)
    # NOTE: values that depend on a parameter in ``wrt``: the only ones whose adjoint is needed
    # (with wrt=, nothing is emitted for the data's gradient)
    live: set[Var] = {params[i] for i in wrt}
    with sb.scope():
        for v, value in binds:
            t = _type_of(value) if value.checked_type_ is not None else \
                (v.type_annotation or v.checked_type_)
            if t is None:
                raise InternalError(f"gradient: no type on %{v.name_hint}")
            if isinstance(value, (Var, Constant)):
                vmap[v] = atom(value)
                continue
            if isinstance(value, Call):
                nv: Expr = Call(value.op, tuple(atom(a) for a in value.args), value.attrs,
                                value.type_args, span=value.span, checked_type_=t)
            elif isinstance(value, Tuple):
                nv = Tuple(tuple(atom(f) for f in value.fields), span=value.span,
                           checked_type_=t)
            else:
                nv = TupleGetItem(atom(value.tuple_value), value.index,  # type: ignore
                                  span=value.span, checked_type_=t)
            y = Var(v.name_hint, t, span=v.span, checked_type_=t)
            sb.bind(y, nv)
            vmap[v], types[y] = y, t
            forward.append((y, nv))
            kids = nv.args if isinstance(nv, Call) else nv.fields if isinstance(nv, Tuple) \
                else (nv.tuple_value,)  # type: ignore[union-attr]
            if any(k in live for k in kids if isinstance(k, Var)):
                live.add(y)
        res = atom(result)
        res_t = ret
        adj = _Adj(sb)
        if isinstance(res, Var) and res in types:
            adj.add(res, _ones_tree(sb, res, res_t), res_t)
        for y, nv in reversed(forward):
            g = adj.get(y)
            if g is None:
                continue
            t = types[y]
            if isinstance(nv, Tuple):
                for f, ft, gf in zip(nv.fields, t.fields, g):  # type: ignore
                    if isinstance(f, Var) and f in live and has_float_leaf(ft):
                        adj.add(f, gf, ft)  # type: ignore[arg-type]
                continue
            if isinstance(nv, TupleGetItem):
                src = nv.tuple_value
                if isinstance(src, Var) and src in live:
                    st = types[src]
                    tree = [g if i == nv.index else None for i in range(len(st.fields))]
                    adj.add(src, tree, st)
                continue
            call: Call = nv  # type: ignore[assignment]
            opdef = get_opdef(call.op.name)  # type: ignore[union-attr]
            arg_ts = [types.get(a, None) if isinstance(a, Var) else _type_of(a)
                      for a in call.args]
            if opdef.non_differentiable or not has_float_leaf(t) or not any(
                    isinstance(a, Var) and a in live and has_float_leaf(at)
                    for a, at in zip(call.args, arg_ts)):
                continue
            if opdef.grad is None:
                missing.append(_Missing(opdef.name, call.span))
                continue
            dy = adj.materialize(g, y, t)
            try:
                grads = opdef.grad(call, y, dy)
            except DiagnosticError as err:
                rule_errors.append(err.with_span(call.span))
                continue
            if len(grads) != len(call.args):
                raise InternalError(f"gradient rule of `{opdef.name}` returned {len(grads)} "
                                    f"adjoints for {len(call.args)} arguments")
            for a, ga, at in zip(call.args, grads, arg_ts):
                if ga is None or not isinstance(a, Var) or a not in live \
                        or not has_float_leaf(at):
                    continue
                adj.add(a, adj.tree(ga, at), at)  # type: ignore[arg-type]
        if missing:
            raise _missing_error(missing, "grad", GradientError)
        if rule_errors:
            first = rule_errors[0]
            first.notes = first.notes + tuple(str(e) for e in rule_errors[1:])
            raise first
        grads_out = [adj.materialize(adj.get(params[i]), params[i], arg_types[i]) for i in wrt]
        wrt_types = TupleType(tuple(arg_types[i] for i in wrt))
        gt = sb.let_(Tuple(tuple(grads_out), checked_type_=wrt_types), "grads", wrt_types)
        out_t = TupleType((ret, wrt_types))
        out = sb.let_(Tuple((res, gt), checked_type_=out_t), "out", out_t)
        body = sb.build(out)
    return Function(tuple(params), body, out_t, span=fn.span)


# ----------------------------------------------------------------------------- public entry
@depth_limited(lambda msg: GradientError(msg))
def gradient(mod: IRModule, entry: str = "main", mode: str = "higher_order",
             wrt: Sequence[str] | None = None, loop_rule: bool | None = None) -> IRModule:
    """``def @entry(p..) -> R`` => ``def @entry(p..) -> (R, (grad p..))`` by reverse-mode AD.

    See the module docstring for the rules. The input is type-checked (when untyped) and
    brought to A-normal form first; the output is type-checked, and the original functions
    other than the entry are kept: those that call the entry (directly or not) call
    ``@<entry>_primal``, a copy of the original entry, so they keep their type and meaning.
    ``wrt=("w1", "b1")`` returns the gradients of the named
    parameters only, in that order (``(R, (grad w1, grad b1))``); the default is one per
    parameter. ``mode="first_order"`` is the direct reverse sweep for pure dataflow entries
    (see :mod:`relay_ir.passes.gradient` docstring, "First-order mode").
    ``loop_rule`` (default: on unless the environment sets ``RELAY_IR_LOOP_AD=0``) gives each
    self-tail-recursive first-order global a first-order tape instead of backward closures
    (:mod:`relay_ir.passes.loop_ad`); ``False`` keeps the reference-based rule everywhere.
    """
    from relay_ir.passes.loop_ad import apply_loop_rule, lift_local_loops, loop_rule_enabled
    from relay_ir.passes.to_anf import ToANormalForm
    from relay_ir.passes.type_infer import InferType

    if mode not in MODES:
        raise GradientError(f"unknown gradient mode {mode!r}; expected one of "
                            + ", ".join(repr(m) for m in MODES))
    if not isinstance(entry, str):
        entry = getattr(entry, "name_hint", str(entry))
    _check_entry(mod, entry)
    if any(f.checked_type_ is None for f in mod.functions.values()):
        mod = InferType()(mod)
    mod = ToANormalForm()(mod)
    if mode != "first_order" and loop_rule_enabled(loop_rule):
        lifted = lift_local_loops(mod)
        if lifted is not mod:
            mod = ToANormalForm()(InferType()(lifted))
    fn = _check_entry(mod, entry)
    wrt_idx = _wrt_indices(fn, entry, wrt)
    arg_types, ret = _check_signature(fn, entry, mod, GradientError, "gradient", _RETURNS)

    if mode == "first_order":
        first = _first_order(fn, entry, arg_types, ret, wrt_idx, mod)
        out = _keep_originals(mod, entry).with_functions({entry: first})
        try:
            return InferType()(out)
        except DiagnosticError as e:  # NOTE: our output must type-check; failing is our bug
            raise InternalError(f"gradient produced an ill-typed program: {e}") from e

    taken = set(mod.functions) | set(mod.type_definitions) | set(mod.constructors)
    ad = _AD(mod, _GradTypes(mod, taken), taken)
    twin = ad.global_twin(mod.get_global_var(entry))
    twins = ad.run_globals()
    ad.raise_collected("grad")
    if loop_rule_enabled(loop_rule):
        apply_loop_rule(ad, twins, taken)
    return ad.output(mod, entry, twins, _wrapper(ad, fn, twin, arg_types, ret, wrt_idx))


def _wrt_indices(fn: Function, entry: str, wrt: Sequence[str] | None) -> list[int]:
    """Positions of the parameters named by ``wrt`` (all parameters when ``None``)."""
    if wrt is None:
        return list(range(len(fn.params)))
    if isinstance(wrt, str):
        wrt = [w for w in wrt.split(",") if w]
    names = [p.name_hint for p in fn.params]
    out: list[int] = []
    for w in wrt:
        w = w.lstrip("%").strip()
        if w not in names:
            known = ", ".join(f"%{n}" for n in names) or "none"
            raise GradientError(f"wrt names `{w}`, which is not a parameter of @{entry} "
                                f"(parameters: {known})", fn.span)
        i = names.index(w)
        if i in out:
            raise GradientError(f"wrt names parameter `{w}` twice", fn.span)
        out.append(i)
    return out
