"""Forward-mode automatic differentiation: ``jvp(mod, entry)`` (dual numbers, source to source).

::

    def @f(%x: T, ...) -> R { body }  =>  def @f_jvp(%x: T', ...) -> R' { body' }
    def @main(%p1: T1, ..., %pn: Tn) -> R
        =>  def @main(%p1: T1, ..., %pn: Tn, %t1: T1, ..., %tn: Tn) -> (R, R)

Types map as ``T => T'``: a float tensor becomes the pair ``(T, T)`` of its value and its
tangent; int and bool tensors stay as they are (their tangent is zero and never materialized);
tuples, references and ADT arguments map field by field; a function type has its argument and
result types mapped; an ADT whose constructors hold float tensors or functions gets a twin
``Name_jvp`` with constructors ``Ctor_jvp``.

Expressions map structurally (let, tuples, projections, references, constructors, ``match``
with remapped pattern variables, ``if`` on the untouched condition, calls ``f(a) => f'(a')``,
functions ``fn (x) { e } => fn (x') { e' }``, globals to their twins ``@g_jvp``), except:

* ``op(a1..an) => let %y = op(primal(a1)..primal(an)); (%y, jvp(call, %y, tangents))``: the
  op's ``OpDef.jvp`` rule gives the tangent of the result from one tangent per argument (a
  ``zeros_like`` of the value for an int or bool argument, a tuple for a tuple argument); a
  result without float leaf, a ``non_differentiable`` op, or a call whose arguments carry no
  float value gets no rule call (zero tangent). Tuple results (``split``) are paired leaf by
  leaf;
* a float constant used as a value => ``(c, zeros_like(c))``; as an operator argument its
  tangent is ``zeros_like(c)``.

The new entry pairs every float parameter leaf with its tangent argument (int and bool tangents
are accepted and ignored), calls the transformed entry and returns the primal result with its
tangent, which has the result's type (``zeros_like`` on int and bool leaves). Parameters and
results may be tensors, tuples and ADTs of them; for an ADT the helper globals
``@dual_Name`` (zip a value with its tangent), ``@primal_Name`` and ``@tangent_Name`` convert.
Because each nesting level gets its own pair types, ``jvp`` of a program that already is a JVP
or a gradient (forward over reverse: Hessian-vector products) keeps the levels apart: no
perturbation confusion.

Everything is walked iteratively along let spines (ScopeBuilder); Python recursion only follows
the nesting of functions, branches and match arms.
"""
from __future__ import annotations

from typing import Any, Generator, Sequence

from relay_ir.errors import DiagnosticError, InternalError, PassError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, PatternConstructor, PatternTuple, PatternVar,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes._ad_common import depth_limited
from relay_ir.passes._ad_common import (_check_signature, _is_adt, _Missing, _Twin, _Types, _call,
                                        _type_of, _typed_const, emit, has_float_leaf, is_float)
from relay_ir.passes.gradient import _check_entry
from relay_ir.span import Span
from relay_ir.traversal import run_generators
from relay_ir.ty import TensorType, TupleType, Type

Gen = Generator[Any, Any, Any]

__all__ = ["jvp", "JVPError"]

# the rule for what the entry returns (its error message)
_RETURNS = ("the jvp entry must return tensors, tuples and ADTs of them (no functions or "
            "references)")


class JVPError(PassError):
    """The program cannot be differentiated in forward mode (no rule for an op, bad entry)."""

    kind = "jvp error"

    def __init__(self, message: str, span: Span | None = None, notes: Sequence[str] = ()):
        super().__init__(message, span, notes, pass_name="jvp")


class _JTypes(_Types):
    """``T => T'`` for forward mode: float tensors become (value, tangent) pairs."""

    SUFFIX = "_jvp"

    def float_type(self, t: TensorType) -> Type:
        return TupleType((t, t))


class _JVP(_Twin):
    """The expression transform; one instance per ``jvp`` call."""

    SUFFIX = "_jvp"
    ERROR = JVPError
    WHAT = "jvp"

    def __init__(self, mod: IRModule, types: _JTypes, taken: set[str]) -> None:
        super().__init__(mod, types, taken)
        # dual pairs made here also record their tangent atom (no projection needed)
        self.tans: dict[Var, Expr] = {}

    # ---------------------------------------------------------------- scopes
    def function(self, fn: Function, type_params: tuple | None = None) -> Function:
        """See :meth:`_function`."""
        return run_generators(self._function(fn, type_params))

    # NOTE: _function, scope and value are generators: a nested function, branch or arm is
    # yielded (`body = yield self.scope(...)`), so nesting costs no Python recursion.
    def _function(self, fn: Function, type_params: tuple | None = None) -> Gen:
        """``fn (x: T) -> R { e }`` => ``fn (x: T') -> R' { e' }``."""
        params = tuple(self.map_var(p, annotate=True) for p in fn.params)
        ret = self.mapped_ret(fn)
        body = yield self.scope(fn.body)
        tps = fn.type_params if type_params is None else type_params
        return Function(params, body, ret, tps, fn.attrs, span=fn.span)

    def scope(self, e: Expr) -> Gen:
        """Transform a let spine (a function body, branch or arm) in a fresh scope."""
        sb = self.sb
        with sb.scope():
            while isinstance(e, Let):
                nv = self.map_var(e.var, annotate=e.var.type_annotation is not None)
                value = yield self.value(e.value)
                if isinstance(value, (Var, GlobalVar, Constant, Constructor)):
                    self.vmap[e.var] = value  # NOTE: alias atoms
                else:
                    sb.bind(nv, value)
                e = e.body
            return sb.build(self.atom(e))

    # ---------------------------------------------------------------- atoms and values
    def atom(self, e: Expr) -> Expr:
        """The dual value of ``e`` as an atom (binding it when needed)."""
        if isinstance(e, Constant):
            c = _typed_const(e)
            t = _type_of(c)
            if not is_float(t):
                return c
            z = self.sb.let_(_no_tangent(c, t), "dz", t)
            return self.pair(c, z, t)
        leaf = self.leaf_atom(e)
        if leaf is not None:
            return leaf
        return self.sb.let_(run_generators(self.value(e)), "v")

    def pair(self, y: Expr, dy: Expr, t: Type) -> Var:
        """The dual ``(y, dy)`` of a float tensor of type ``t``."""
        d = self.sb.let_(Tuple((y, dy)), "d", TupleType((t, t)))
        self.prims[d] = y
        self.tans[d] = dy
        return d

    def value(self, e: Expr) -> Gen:
        """The transformed value of a let binding (not necessarily an atom)."""
        if isinstance(e, (Var, GlobalVar, Constructor, Constant, Op)):
            return self.atom(e)
        if isinstance(e, Call):
            callee = e.op
            if isinstance(callee, Op):
                return self.op_call(e)
            if isinstance(callee, Constructor):
                return Call(self.types.ctor(callee), tuple(self.atom(a) for a in e.args),
                            span=e.span)
            return Call(self.atom(callee), tuple(self.atom(a) for a in e.args), span=e.span)
        if isinstance(e, Tuple):
            return Tuple(tuple(self.atom(f) for f in e.fields), span=e.span)
        if isinstance(e, TupleGetItem):
            return TupleGetItem(self.atom(e.tuple_value), e.index, span=e.span)
        if isinstance(e, Function):
            if e.is_primitive:
                raise JVPError("primitive (fused) functions cannot be differentiated; "
                               "differentiate before fusion", e.span)
            return (yield self._function(e))
        if isinstance(e, If):
            cond = self.atom(e.cond)
            tb = yield self.scope(e.true_branch)
            fb = yield self.scope(e.false_branch)
            return If(cond, tb, fb, span=e.span)
        if isinstance(e, Match):
            data = self.atom(e.data)
            arms = []
            for c in e.clauses:
                arms.append(Clause(self.pattern(c.lhs), (yield self.scope(c.rhs)),
                                   span=c.span))
            clauses = tuple(arms)
            return Match(data, clauses, e.complete, span=e.span)
        if isinstance(e, RefCreate):
            return RefCreate(self.atom(e.value), span=e.span)
        if isinstance(e, RefRead):
            return RefRead(self.atom(e.ref), span=e.span)
        if isinstance(e, RefWrite):
            return RefWrite(self.atom(e.ref), self.atom(e.value), span=e.span)
        if isinstance(e, Let):
            return (yield self.scope(e))
        raise InternalError(f"jvp: unexpected node {type(e).__name__}")

    def op_call(self, e: Call) -> Expr:
        """``op(a..)`` => ``(op(primals), OpDef.jvp(call, y, tangents))`` on float leaves."""
        sb = self.sb
        opdef = get_opdef(e.op.name)  # type: ignore[union-attr]
        prims: list[Expr] = []
        tans: list[Expr] = []
        any_float = False
        for a in e.args:
            if isinstance(a, Constant):
                c = _typed_const(a)
                prims.append(c)
                tans.append(_no_tangent(c, _type_of(c)))
                continue
            t = _type_of(a)
            v = self.atom(a)
            if has_float_leaf(t):
                any_float = True
                prims.append(self.primal(v, t))
                tans.append(self.tangent(v, t))
            else:
                prims.append(v)
                tans.append(_no_tangent(v, t))
        out_t = _type_of(e)
        prim_call = Call(e.op, tuple(prims), e.attrs, e.type_args, span=e.span,
                         checked_type_=out_t)
        y = sb.let_(prim_call, "y", out_t, bind_atoms=True)
        if not has_float_leaf(out_t):
            return y
        if opdef.non_differentiable or not any_float:
            return self.dual(y, None, out_t)
        if opdef.jvp is None:
            self.missing.append(_Missing(opdef.name, e.span))
            return self.dual(y, None, out_t)
        try:
            dy = emit(sb, opdef.jvp(prim_call, y, tans))
        except DiagnosticError as err:  # NOTE: report it with every other problem
            self.rule_errors.append(err.with_span(e.span))
            return self.dual(y, None, out_t)
        return self.dual(y, dy, out_t)

    def dual(self, y: Expr, dy: Expr | None, t: Type) -> Expr:
        """Dual value of primal ``y`` with tangent ``dy`` (``None``: zero) of tensor tree ``t``."""
        sb = self.sb
        if is_float(t):
            if dy is None:
                dy = sb.let_(_no_tangent(y, t), "dz", t)
            return self.pair(y, dy, t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fy = sb.let_(TupleGetItem(y, i, checked_type_=ft), "f", ft)
                fdy = None
                if dy is not None and has_float_leaf(ft):
                    fdy = sb.let_(TupleGetItem(dy, i, checked_type_=ft), "df", ft)
                fields.append(self.dual(fy, fdy, ft))
            return sb.let_(Tuple(tuple(fields)), "d", self.types.map(t))
        return y

    # ---------------------------------------------------------------- projections
    def tangent(self, v: Expr, t: Type) -> Expr:
        """The tangent of dual value ``v`` of tensor-tree type ``t`` (zeros on int leaves)."""
        def other(u: Expr, ut: Type) -> Expr:
            if isinstance(ut, TensorType):
                return self.sb.let_(_no_tangent(u, ut), "dz", ut)
            if _is_adt(ut):
                return self.sb.let_(Call(self.adt_helper("tangent", ut), (u,)), "dt", ut)
            raise InternalError(f"jvp: no tangent for a value of type {ut!r}")
        return self.project(v, t, 1, self.tans, "dt", other)

    def zip_dual(self, p: Expr, tp: Expr, t: Type) -> Expr:
        """The dual value of primal ``p`` with tangent ``tp`` (int tangents are ignored)."""
        sb = self.sb
        if is_float(t):
            return self.pair(p, tp, t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fp = sb.let_(TupleGetItem(p, i, checked_type_=ft), "p", ft)
                ftp = sb.let_(TupleGetItem(tp, i, checked_type_=ft), "tp", ft)
                fields.append(self.zip_dual(fp, ftp, ft))
            return sb.let_(Tuple(tuple(fields)), "d", self.types.map(t))
        if _is_adt(t) and self.adt_changes(t):
            return sb.let_(Call(self.adt_helper("dual", t), (p, tp)), "d", self.types.map(t))
        return p

    # ---------------------------------------------------------------- ADT entry values
    def adt_helper(self, kind: str, t: Type) -> GlobalVar:
        """A global for the concrete ADT type ``t`` of an entry parameter or result:
        ``dual: (t, t) -> t'`` (values zipped with tangents; a constructor mismatch fails at
        run time), ``primal: t' -> t`` and ``tangent: t' -> t`` (zeros on int leaves)."""
        gv, new = self.helper_global(kind, t)
        if not new:
            return gv
        sb = self.sb
        mapped = self.types.map(t)
        clauses = []
        if kind == "dual":
            p, tp = Var("p", t, checked_type_=t), Var("t", t, checked_type_=t)
            for c, ftypes in self.adt_ctors(t):
                fps = [Var("f", ft, checked_type_=ft) for ft in ftypes]
                fts = [Var("g", ft, checked_type_=ft) for ft in ftypes]
                with sb.scope():
                    outs = [self.zip_dual(a, b, ft) for a, b, ft in zip(fps, fts, ftypes)]
                    body = sb.build(Call(self.types.ctor(c), tuple(outs)))
                pat = PatternTuple((PatternConstructor(c, tuple(PatternVar(v) for v in fps)),
                                    PatternConstructor(c, tuple(PatternVar(v) for v in fts))))
                clauses.append(Clause(pat, body))
            self.helpers[gv.name_hint] = Function(
                (p, tp), Match(Tuple((p, tp)), tuple(clauses), complete=False), mapped)
            return gv
        v = Var("v", mapped, checked_type_=mapped)
        for c, ftypes in self.adt_ctors(t):
            fvars = [Var("f", self.types.map(ft), checked_type_=self.types.map(ft))
                     for ft in ftypes]
            with sb.scope():
                proj = self.primal if kind == "primal" else self.tangent
                outs = [proj(fv, ft) for fv, ft in zip(fvars, ftypes)]
                body = sb.build(Call(c, tuple(outs)))
            clauses.append(Clause(PatternConstructor(self.types.ctor(c),
                                                     tuple(PatternVar(fv) for fv in fvars)),
                                  body))
        self.helpers[gv.name_hint] = Function((v,), Match(v, tuple(clauses)), t)
        return gv


# ----------------------------------------------------------------------------- entry
def _wrapper(jv: _JVP, fn: Function, twin: GlobalVar, arg_types: list[Type], ret: Type
             ) -> Function:
    """The new entry: ``(p.., t..) -> (result, result tangent)``."""
    sb = jv.sb
    params = tuple(Var(p.name_hint, t, span=p.span, checked_type_=t)
                   for p, t in zip(fn.params, arg_types))
    tparams = tuple(Var("t_" + p.name_hint, t, span=p.span, checked_type_=t)
                    for p, t in zip(fn.params, arg_types))

    with sb.scope():
        duals = [jv.zip_dual(p, tp, t) for p, tp, t in zip(params, tparams, arg_types)]
        r = sb.let_(Call(twin, tuple(duals)), "r", jv.types.map(ret))
        value = jv.primal(r, ret)
        tangent = jv.tangent(r, ret)
        out = sb.let_(Tuple((value, tangent)), "out", TupleType((ret, ret)))
        body = sb.build(out)
    return Function(params + tparams, body, TupleType((ret, ret)), span=fn.span)


@depth_limited(lambda msg: JVPError(msg))
def jvp(mod: IRModule, entry: str = "main") -> IRModule:
    """``def @entry(p..) -> R`` => ``def @entry(p.., t..) -> (R, R)`` by forward-mode AD.

    ``t..`` are one tangent per parameter (same types; int and bool tangents are ignored); the
    result is the original value and its directional derivative along ``t``. See the module
    docstring for the rules. The input is type-checked (when untyped) and brought to A-normal
    form first; the output is type-checked; original globals other than the entry are kept
    (those that call the entry call ``@<entry>_primal``, a copy of the original entry).
    """
    from relay_ir.passes.to_anf import ToANormalForm
    from relay_ir.passes.type_infer import InferType

    if not isinstance(entry, str):
        entry = getattr(entry, "name_hint", str(entry))
    try:
        _check_entry(mod, entry)
    except PassError as e:
        raise JVPError(e.message, e.span, e.notes) from None
    if any(f.checked_type_ is None for f in mod.functions.values()):
        mod = InferType()(mod)
    mod = ToANormalForm()(mod)
    fn = mod[entry]
    arg_types, ret = _check_signature(fn, entry, mod, JVPError, "jvp", _RETURNS)

    taken = set(mod.functions) | set(mod.type_definitions) | set(mod.constructors)
    types = _JTypes(mod, taken)
    jv = _JVP(mod, types, taken)
    twin = jv.global_twin(mod.get_global_var(entry))
    twins = jv.run_globals()
    jv.raise_collected("jvp")
    return jv.output(mod, entry, twins, _wrapper(jv, fn, twin, arg_types, ret))


def _no_tangent(x: Expr, t: Type) -> Expr:
    """The zero tangent of ``x`` (type ``t``): ``zeros(shape, dtype, symbolic=True)`` for a
    static float tensor -- "no tangent", which optimization may drop as an absent term
    (passes._zeros) -- else ``zeros_like(x)``."""
    if isinstance(t, TensorType) and t.dtype.startswith("float") and \
            all(type(d) is int for d in t.shape):
        od = get_opdef("zeros")
        return Call(od.op, (), od.make_attrs({"shape": list(t.shape),  # type: ignore[arg-type]
                                              "dtype": t.dtype, "symbolic": True}),
                    checked_type_=t)
    return _call("zeros_like", x, checked_type_=t)
