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
``@dual_Name`` (zip a value with its tangent), ``@primal_Name`` and ``@tangent_Name`` convert. Because each
nesting level gets its own pair types, ``jvp`` of a program that already is a JVP or a
gradient (forward over reverse: Hessian-vector products) keeps the levels apart: no
perturbation confusion.

Everything is walked iteratively along let spines (ScopeBuilder); Python recursion only follows
the nesting of functions, branches and match arms.
"""
from __future__ import annotations

from typing import Sequence

from relay_ir.builder import ScopeBuilder
from relay_ir.errors import DiagnosticError, InternalError, PassError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, Pattern, PatternConstructor, PatternTuple,
                           PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Tuple,
                           TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes.gradient import (_Types, _call, _check_entry, _fresh_name, _kept_functions,
                                      _liftable, _type_of, _typed_const, emit, has_float_leaf,
                                      is_float)
from relay_ir.span import Span
from relay_ir.ty import (FuncType, GlobalTypeVar, RefType, ShapeVar, TensorType, TupleType, Type,
                         TypeCall, TypeVar)

__all__ = ["jvp", "JVPError"]


class JVPError(PassError):
    """The program cannot be differentiated in forward mode (no rule for an op, bad entry)."""

    kind = "jvp error"

    def __init__(self, message: str, span: Span | None = None, notes: Sequence[str] = ()):
        super().__init__(message, span, notes, pass_name="jvp")


class _JTypes(_Types):
    """``T => T'`` for forward mode: float tensors become (value, tangent) pairs."""

    SUFFIX = "_jvp"

    def _map(self, t: Type) -> Type:
        if isinstance(t, TensorType):
            return TupleType((t, t)) if is_float(t) else t
        if isinstance(t, TupleType):
            return TupleType(tuple(self._map(f) for f in t.fields))
        if isinstance(t, FuncType):
            return FuncType(tuple(self._map(a) for a in t.arg_types), self._map(t.ret_type),
                            t.type_params, t.type_constraints)
        if isinstance(t, RefType):
            return RefType(self._map(t.value))
        if isinstance(t, TypeCall):
            return TypeCall(self._map(t.func), tuple(self._map(a) for a in t.args))
        if isinstance(t, GlobalTypeVar):
            return self.adt_map.get(t.name_hint, t)
        return t


class _Missing:
    __slots__ = ("op", "span")

    def __init__(self, op: str, span: Span | None) -> None:
        self.op, self.span = op, span


class _JVP:
    """The expression transform; one instance per ``jvp`` call."""

    def __init__(self, mod: IRModule, types: _JTypes, taken: set[str]) -> None:
        self.mod = mod
        self.types = types
        self.taken = taken
        self.sb = ScopeBuilder()
        self.vmap: dict[Var, Expr] = {}
        self.gmap: dict[str, GlobalVar] = {}
        self.work: list[str] = []
        self.missing: list[_Missing] = []
        self.rule_errors: list[DiagnosticError] = []
        # dual pairs made here: their primal and tangent atoms (no projection needed)
        self.prims: dict[Var, Expr] = {}
        self.tans: dict[Var, Expr] = {}
        self.helpers: dict[str, Function] = {}           # dual/primal/tangent of entry ADTs
        self._helper_gv: dict[tuple[str, Type], GlobalVar] = {}

    # ---------------------------------------------------------------- globals
    def global_twin(self, gv: GlobalVar) -> GlobalVar:
        """The transformed twin of global ``gv`` (queued for transformation on first use)."""
        name = gv.name_hint
        twin = self.gmap.get(name)
        if twin is None:
            if name not in self.mod:
                raise JVPError(f"unknown global @{name}", gv.span)
            twin = GlobalVar(_fresh_name(name + "_jvp", self.taken))
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

    # ---------------------------------------------------------------- variables and scopes
    def map_var(self, v: Var, annotate: bool) -> Var:
        t = v.type_annotation if v.type_annotation is not None else v.checked_type_
        nt = self.types.map(t) if t is not None else None
        nv = Var(v.name_hint, nt if annotate else None, span=v.span, checked_type_=nt)
        self.vmap[v] = nv
        return nv

    def function(self, fn: Function, type_params: tuple | None = None) -> Function:
        """``fn (x: T) -> R { e }`` => ``fn (x: T') -> R' { e' }``."""
        params = tuple(self.map_var(p, annotate=True) for p in fn.params)
        ret = None
        if fn.ret_type is not None:
            ret = self.types.map(fn.ret_type)
        elif isinstance(fn.checked_type_, FuncType):
            ret = self.types.map(fn.checked_type_.ret_type)
        body = self.scope(fn.body)
        tps = fn.type_params if type_params is None else type_params
        return Function(params, body, ret, tps, fn.attrs, span=fn.span)

    def scope(self, e: Expr) -> Expr:
        """Transform a let spine (a function body, branch or arm) in a fresh scope."""
        sb = self.sb
        with sb.scope():
            while isinstance(e, Let):
                nv = self.map_var(e.var, annotate=e.var.type_annotation is not None)
                value = self.value(e.value)
                if isinstance(value, (Var, GlobalVar, Constant, Constructor)):
                    self.vmap[e.var] = value  # NOTE: alias atoms
                else:
                    sb.bind(nv, value)
                e = e.body
            return sb.build(self.atom(e))

    # ---------------------------------------------------------------- atoms and values
    def atom(self, e: Expr) -> Expr:
        """The dual value of ``e`` as an atom (binding it when needed)."""
        if isinstance(e, Var):
            nv = self.vmap.get(e)
            if nv is None:
                raise InternalError(f"jvp: unbound variable %{e.name_hint}")
            return nv
        if isinstance(e, GlobalVar):
            return self.global_twin(e)
        if isinstance(e, Constructor):
            return self.types.ctor(e)
        if isinstance(e, Constant):
            c = _typed_const(e)
            t = _type_of(c)
            if not is_float(t):
                return c
            z = self.sb.let_(_call("zeros_like", c), "dz", t)
            return self.pair(c, z, t)
        if isinstance(e, Op):
            raise JVPError(f"operator `{e.name}` used as a value (only calls of operators can "
                           "be differentiated)", e.span)
        return self.sb.let_(self.value(e), "v")

    def pair(self, y: Expr, dy: Expr, t: Type) -> Var:
        """The dual ``(y, dy)`` of a float tensor of type ``t``."""
        d = self.sb.let_(Tuple((y, dy)), "d", TupleType((t, t)))
        self.prims[d] = y
        self.tans[d] = dy
        return d

    def value(self, e: Expr) -> Expr:
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
            return self.function(e)
        if isinstance(e, If):
            return If(self.atom(e.cond), self.scope(e.true_branch), self.scope(e.false_branch),
                      span=e.span)
        if isinstance(e, Match):
            data = self.atom(e.data)
            clauses = tuple(Clause(self.pattern(c.lhs), self.scope(c.rhs), span=c.span)
                            for c in e.clauses)
            return Match(data, clauses, e.complete, span=e.span)
        if isinstance(e, RefCreate):
            return RefCreate(self.atom(e.value), span=e.span)
        if isinstance(e, RefRead):
            return RefRead(self.atom(e.ref), span=e.span)
        if isinstance(e, RefWrite):
            return RefWrite(self.atom(e.ref), self.atom(e.value), span=e.span)
        if isinstance(e, Let):
            return self.scope(e)
        raise InternalError(f"jvp: unexpected node {type(e).__name__}")

    def pattern(self, p: Pattern) -> Pattern:
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
        raise InternalError(f"jvp: unexpected pattern {type(p).__name__}")

    # ---------------------------------------------------------------- operator calls
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
                tans.append(_call("zeros_like", c, checked_type_=_type_of(c)))
                continue
            t = _type_of(a)
            v = self.atom(a)
            if has_float_leaf(t):
                any_float = True
                prims.append(self.primal(v, t))
                tans.append(self.tangent(v, t))
            else:
                prims.append(v)
                tans.append(_call("zeros_like", v, checked_type_=t))
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
                dy = sb.let_(_call("zeros_like", y), "dz", t)
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
    def primal(self, v: Expr, t: Type) -> Expr:
        """The primal part of dual value ``v`` of original tensor-tree type ``t``."""
        sb = self.sb
        if is_float(t):
            known = self.prims.get(v)  # type: ignore[call-overload]
            if known is not None:
                return known
            return sb.let_(TupleGetItem(v, 0, checked_type_=t), "p", t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fv = sb.let_(TupleGetItem(v, i), "f", self.types.map(ft))
                fields.append(self.primal(fv, ft))
            return sb.let_(Tuple(tuple(fields), checked_type_=t), "p", t)
        if _is_adt(t):
            if not self.adt_changes(t):
                return v
            return sb.let_(Call(self.adt_helper("primal", t), (v,)), "p", t)
        return v

    def tangent(self, v: Expr, t: Type) -> Expr:
        """The tangent of dual value ``v`` of tensor-tree type ``t`` (zeros on int leaves)."""
        sb = self.sb
        if is_float(t):
            known = self.tans.get(v)  # type: ignore[call-overload]
            if known is not None:
                return known
            return sb.let_(TupleGetItem(v, 1, checked_type_=t), "dt", t)
        if isinstance(t, TupleType):
            fields = []
            for i, ft in enumerate(t.fields):
                fv = sb.let_(TupleGetItem(v, i), "f", self.types.map(ft))
                fields.append(self.tangent(fv, ft))
            return sb.let_(Tuple(tuple(fields), checked_type_=t), "dt", t)
        if isinstance(t, TensorType):
            return sb.let_(_call("zeros_like", v, checked_type_=t), "dz", t)
        if _is_adt(t):
            return sb.let_(Call(self.adt_helper("tangent", t), (v,)), "dt", t)
        raise InternalError(f"jvp: no tangent for a value of type {t!r}")

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
    def adt_changes(self, t: Type) -> bool:
        """True if values of ADT type ``t`` hold float tensors (its dual type differs)."""
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

    def adt_helper(self, kind: str, t: Type) -> GlobalVar:
        """A global for the concrete ADT type ``t`` of an entry parameter or result:
        ``dual: (t, t) -> t'`` (values zipped with tangents; a constructor mismatch fails at
        run time), ``primal: t' -> t`` and ``tangent: t' -> t`` (zeros on int leaves)."""
        key = (kind, t)
        gv = self._helper_gv.get(key)
        if gv is not None:
            return gv
        head = t.func.name_hint if isinstance(t, TypeCall) else t.name_hint  # type: ignore
        gv = GlobalVar(_fresh_name(f"{kind}_{head}", self.taken))
        self._helper_gv[key] = gv
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
def _check_signature(fn: Function, entry: str, mod: IRModule) -> tuple[list[Type], Type]:
    ft = fn.checked_type_
    if not isinstance(ft, FuncType):
        raise InternalError(f"jvp: @{entry} has no inferred function type")
    if fn.type_params:
        raise JVPError(f"the entry @{entry} is generic ({len(fn.type_params)} type parameters);"
                       " differentiate a function with concrete types", fn.span)
    for p, t in zip(fn.params, ft.arg_types):
        if not _liftable(t, mod):
            raise JVPError(f"parameter %{p.name_hint} of @{entry} has type {t!r}; the jvp entry "
                           "takes tensors, tuples and ADTs of them (no functions or "
                           "references)", p.span or fn.span)
    if not _liftable(ft.ret_type, mod):
        raise JVPError(f"@{entry} returns {ft.ret_type!r}; the jvp entry must return tensors, "
                       "tuples and ADTs of them (no functions or references)", fn.span)
    return list(ft.arg_types), ft.ret_type


def _is_adt(t: Type) -> bool:
    return isinstance(t, (TypeCall, GlobalTypeVar))


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


def jvp(mod: IRModule, entry: str = "main") -> IRModule:
    """``def @entry(p..) -> R`` => ``def @entry(p.., t..) -> (R, R)`` by forward-mode AD.

    ``t..`` are one tangent per parameter (same types; int and bool tangents are ignored); the
    result is the original value and its directional derivative along ``t``. See the module
    docstring for the rules. The input is type-checked (when untyped) and brought to A-normal
    form first; the output is type-checked; original globals other than the entry are kept.
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
    arg_types, ret = _check_signature(fn, entry, mod)

    taken = set(mod.functions) | set(mod.type_definitions) | set(mod.constructors)
    types = _JTypes(mod, taken)
    jv = _JVP(mod, types, taken)
    twin = jv.global_twin(mod.get_global_var(entry))
    twins = jv.run_globals()
    if jv.missing:
        raise _missing_error(jv.missing)
    if jv.rule_errors:
        first = jv.rule_errors[0]
        if len(jv.rule_errors) > 1:
            first.notes = first.notes + tuple(str(e) for e in jv.rule_errors[1:])
        raise first
    wrapper = _wrapper(jv, fn, twin, arg_types, ret)

    keep = _kept_functions(mod, entry)
    out = mod
    for name in list(mod.functions):
        if name not in keep:
            out = out.without_function(name)
    for td in types.new_types:
        out = out.with_type(td)
    out = out.with_functions({**twins, **jv.helpers, entry: wrapper})
    try:
        return InferType()(out)
    except DiagnosticError as e:  # NOTE: our output must type-check; failing is our bug
        raise InternalError(f"jvp produced an ill-typed program: {e}") from e


def _missing_error(missing: Sequence[_Missing]) -> JVPError:
    names: dict[str, None] = {}
    for m in missing:
        names[m.op] = None
    first = missing[0]
    where = [f"`{m.op}` at {m.span}" if m.span else f"`{m.op}`" for m in missing]
    return JVPError(
        "no JVP rule for operator" + ("s " if len(names) > 1 else " ")
        + ", ".join(f"`{n}`" for n in names) + " used on a float path ("
        + "; ".join(where) + "); give the OpDef a jvp= rule or mark it non_differentiable",
        first.span)
