"""Type inference: constraint generation, unification and operator relations solved to a fixpoint.

``InferType()`` (pass name ``infer-type``) returns a NEW module in which

* every ``Var`` (let, parameter, pattern) carries its inferred type as ``type_annotation`` (and
  ``checked_type_``),
* every ``Function`` has ``ret_type`` and ``checked_type_`` (its :class:`FuncType`),
* every other expression node has ``checked_type_`` (``Op`` and ``Constructor`` nodes are
  shared singletons and keep theirs unset: their types are relations / come from the ADT),
* calls of polymorphic functions and constructors record the instantiation in ``type_args``
  (one entry per type parameter; for a shape parameter the entry is the :data:`Dim` it was
  instantiated to), and calls of operators record their argument types, as Relay does.

The input module is never mutated.

How it works (Relay's design):

1. **Globals.** Every global gets a signature: its annotations, with fresh unification
   variables (:class:`IncompleteType`) where an annotation is missing. A global whose
   signature is fully annotated is used polymorphically by every caller (polymorphic and
   mutual recursion work). The others are grouped into strongly connected components of the
   call graph and inferred callees first; inside a component they are monomorphic.
2. **Constraint generation** walks each body once (let spines as lists, dataflow with an
   explicit stack; Python recursion only across function / if / match nesting). Each node gets
   a type; equalities are solved eagerly by a union-find unifier with an occurs check;
   polymorphic functions (``fn [A, n](...)``, constructors, let-bound generic functions) are
   instantiated per call with fresh type variables and fresh *flexible* shape variables, so
   ``@f[n](%x: Tensor[(n, 4), float32])`` called with ``Tensor[(3, 4), float32]`` gives
   ``n = 3`` and relations compute with the instantiated dimensions.
3. **Relations.** An operator call adds ``OpDef.type_rel`` as a constraint; it is tried at
   once, and while it answers ``None`` (argument types unknown) it waits. Waiting relations are
   re-run until nothing changes (a fixpoint); one that never resolves is reported.
4. **Checks and rebuild.** ``match`` is checked for exhaustiveness (the missing patterns are
   listed), every type is resolved, a type that is still unknown is "unable to infer a type"
   at the expression, and the typed module is rebuilt.

Every error is a :class:`~relay_ir.errors.TypeInferenceError` (or subclass) carrying the span
of the offending expression, naming what was expected and what was found.

Modules: this one is the constraint generator (:class:`Inferencer`, steps 1-3) and the pass;
``type_unify`` the unifier (substitution, ``unify``, instantiation, :func:`fmt_type`),
``match_coverage`` the exhaustiveness check and ``type_rebuild`` the typed rebuild (step 4).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import GeneratorType
from typing import Any, Callable, ClassVar, Generator, Sequence

from relay_ir.errors import DiagnosticError, TypeInferenceError, UnboundVarError, UnificationError
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match,
                           Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.passes._analysis import sccs
from relay_ir.passes.match_coverage import MatchCoverage
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.passes.type_rebuild import TypedRebuild
from relay_ir.passes.type_unify import Fail, Unifier, callee_name, fmt_type
from relay_ir.span import Span
from relay_ir.traversal import (dataflow_post_order, flatten_lets, has_incomplete, post_order,
                                run_generators)
from relay_ir.ty import (AnyDim, Dim, FuncType, GlobalTypeVar, IncompleteType, RefType, ShapeVar,
                         TensorType, TupleType, Type, TypeCall, TypeData, TypeVar, type_children)

__all__ = ["InferType", "infer_type", "fmt_type", "Inferencer"]

BOOL_T = TensorType((), "bool")
UNIT_T = TupleType(())
_DATAFLOW = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)


@dataclass(slots=True, eq=False)
class _Relation:
    """A waiting type relation: ``out = fn(args, attrs)``."""

    fn: Callable[..., Any]
    args: list[Type]
    attrs: Any
    out: Type
    span: Span | None
    name: str
    arg_spans: Sequence[Span | None] = ()


def _has_type_params(t: Type) -> bool:
    return type(t) is FuncType and bool(t.type_params)


def _fully_annotated(f: Function) -> bool:
    if f.ret_type is None:
        return False
    for p in f.params:
        if p.type_annotation is None or has_incomplete(p.type_annotation):
            return False
    return not has_incomplete(f.ret_type)


# ----------------------------------------------------------------------------- the inferencer
class Inferencer(Unifier, MatchCoverage, TypedRebuild):
    """One type-inference run over a module: the constraint generator (see the module
    docstring); unification, the match-coverage check and the rebuild are its mixins."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.init_unifier()
        self.types: dict[Expr, Type] = {}
        self.pending: list[_Relation] = []
        self.inst: dict[Call, list[Any]] = {}       # call -> instantiation (type args)
        self.op_call_args: dict[Call, list[Type]] = {}
        self.fn_ret: dict[Function, Type] = {}
        self.matches: list[Match] = []
        self.global_types: dict[str, Type] = {}
        self.tv_scope: set[Any] = set()
        self.var_map: dict[Var, Var] = {}
        self.ctor_types: dict[str, FuncType] = {}
        self.opdefs: dict[Op, Any] = {}

    # ------------------------------------------------------------------ errors
    def fail(self, e: Fail, what: str, expected: Type, found: Type, span: Span | None,
             cls: type = UnificationError) -> DiagnosticError:
        """A diagnostic: ``what``, the expected and found types and the reason."""
        exp = fmt_type(self.resolve(expected))
        fnd = fmt_type(self.resolve(found))
        reason = e.reason
        if reason.startswith("occurs check"):
            return cls(f"{what}: {reason}", span)
        msg = f"{what}: expected `{exp}`, found `{fnd}`"
        if reason and f"`{exp}` does not match `{fnd}`" not in reason:
            msg += f" ({reason})"
        return cls(msg, span)

    def expect(self, expected: Type, found: Type, span: Span | None, what: str) -> None:
        """Unify, turning a failure into a diagnostic at ``span``."""
        try:
            self.unify(expected, found)
        except Fail as e:
            raise self.fail(e, what, expected, found, span) from None

    # ------------------------------------------------------------------ relations
    def add_relation(self, rel: _Relation) -> None:
        if not self.try_relation(rel):
            self.pending.append(rel)

    def try_relation(self, rel: _Relation) -> bool:
        """Run ``rel`` on the current argument types; True when it resolved."""
        args = [self.resolve(t) for t in rel.args]
        try:
            res = rel.fn(args, rel.attrs)
        except DiagnosticError as e:
            raise e.with_span(rel.span) from None
        except Exception as e:  # a relation that cannot handle unknown parts yet
            if any(self.unknown_part(a) for a in args):
                return False
            raise TypeInferenceError(
                f"the type relation of `{rel.name}` failed on argument types "
                f"({', '.join(fmt_type(a) for a in args)}): {type(e).__name__}: {e}",
                rel.span) from None
        if res is None:
            return False
        if isinstance(res, tuple) and not isinstance(res, Type):
            out, refined = res
            for i, (t, r) in enumerate(zip(rel.args, refined)):
                if r is None:
                    continue
                sp = rel.arg_spans[i] if i < len(rel.arg_spans) else None
                self.expect(r, t, sp or rel.span, f"argument {i + 1} of `{rel.name}`")
        else:
            out = res
        try:
            self.unify(rel.out, out)
        except Fail as e:
            raise self.fail(e, f"the result of `{rel.name}`", rel.out, out, rel.span) from None
        return True

    def solve(self) -> None:
        """Re-run waiting relations until none resolves and nothing new is learnt."""
        while self.pending:
            before = self.progress
            still: list[_Relation] = []
            resolved = False
            for rel in self.pending:
                if self.try_relation(rel):
                    resolved = True
                else:
                    still.append(rel)
            self.pending = still
            if not resolved and self.progress == before:
                break

    def report_pending(self) -> None:
        """A relation that never resolved although its arguments are known is an error."""
        for rel in self.pending:
            args = [self.resolve(t) for t in rel.args]
            if not any(self.unknown_part(a) for a in args):
                raise TypeInferenceError(
                    f"unable to resolve the type relation of `{rel.name}` for argument types "
                    f"({', '.join(fmt_type(a) for a in args)})", rel.span)

    # ------------------------------------------------------------------ module
    def run(self) -> IRModule:
        mod = self.mod
        for td in mod.type_definitions.values():
            self.check_type_data(td)
        functions = mod.functions
        full: dict[str, bool] = {}
        for name, f in functions.items():
            full[name] = _fully_annotated(f)
            self.global_types[name] = self.signature(f, full[name])
        # dependencies on globals whose types must be inferred first
        deps: dict[str, list[str]] = {}
        for name, f in functions.items():
            ds: dict[str, None] = {}
            if len(functions) > 1:
                for node in post_order(f):
                    if type(node) is GlobalVar and node.name_hint in functions and \
                            not full[node.name_hint]:
                        ds[node.name_hint] = None
            deps[name] = list(ds)
        new_fns: dict[str, Function] = {}
        order = {name: i for i, name in enumerate(functions)}
        for scc in sccs({name: deps.get(name, []) for name in functions}):
            for name in sorted(scc, key=order.__getitem__):
                f = functions[name]
                sig = self.global_types[name]
                run_generators(self.gen_function(f, sig if not full[name] else
                                                  dataclasses.replace(sig, type_params=())))
            self.solve()
            self.report_pending()
            self.check_matches()
            memo: dict[Any, Any] = {}
            for name in scc:
                f = functions[name]
                new = self.rebuild(f, memo)
                new_fns[name] = new
                self.global_types[name] = new.checked_type_  # type: ignore[assignment]
            self.matches = []
        out = mod.with_functions({mod.global_vars[n]: new_fns[n] for n in functions})
        return out

    def signature(self, f: Function, full: bool) -> FuncType:
        """A global's type as far as annotated (fresh variables elsewhere)."""
        params = tuple(p.type_annotation if p.type_annotation is not None
                       else IncompleteType(span=p.span) for p in f.params)
        ret = f.ret_type if f.ret_type is not None else IncompleteType(span=f.span)
        return FuncType(params, ret, f.type_params if full else ())

    def check_type_data(self, td: TypeData) -> None:
        """Constructor fields may use only the type's parameters and known ADTs."""
        scope = set(td.type_params)
        for c in td.constructors:
            for t in c.inputs:
                stack = [t]
                while stack:
                    x = stack.pop()
                    tx = type(x)
                    if tx is TypeVar and x not in scope:
                        raise UnboundVarError(
                            f"type variable `{x.name_hint}` in constructor `{c.name_hint}` is not "
                            f"a parameter of type `{td.header.name_hint}`", c.span or td.span)
                    if tx is GlobalTypeVar or (tx is TypeCall and type(x.func) is GlobalTypeVar):
                        g = x if tx is GlobalTypeVar else x.func
                        nargs = 0 if tx is GlobalTypeVar else len(x.args)
                        other = self.mod.type_definitions.get(g.name_hint)
                        if other is None:
                            raise TypeInferenceError(
                                f"unknown type `{g.name_hint}` in constructor `{c.name_hint}`",
                                c.span or td.span)
                        if len(other.type_params) != nargs:
                            raise TypeInferenceError(
                                f"type `{g.name_hint}` expects {len(other.type_params)} type "
                                f"argument(s), found {nargs} (in constructor `{c.name_hint}`)",
                                c.span or td.span)
                    # NOTE: a type call's head was checked above, with its arity
                    stack.extend(x.args if tx is TypeCall else type_children(x))

    # ------------------------------------------------------------------ generation
    def gen(self, e: Expr) -> Type:
        """The type of ``e`` (generating constraints for it and its sub-expressions once)."""
        t = self.types.get(e)
        if t is not None:
            return t
        return run_generators(self._gen(e))

    def _gen(self, e: Expr) -> Gen:
        """:meth:`gen` as a generator: nested sub-expressions are ``yield``-ed, not recursed."""
        t = self.types.get(e)
        if t is not None:
            return t
        te = type(e)
        if te in _DATAFLOW:
            types = self.types
            for node in dataflow_post_order(e, types):
                r = self.gen_node(node)
                if type(r) is GeneratorType:
                    r = yield r
                types[node] = r
            return types[e]
        if te is Let:
            return (yield self.gen_let(e))
        if te is GlobalVar:
            # NOTE: not memoized: one GlobalVar node may be shared by several functions, and
            # its type changes from the in-progress signature to the generalized one.
            return self.gen_global_var(e)
        t = self.gen_node(e)
        if type(t) is GeneratorType:
            t = yield t
        self.types[e] = t
        return t

    def gen_node(self, e: Expr) -> Type:
        name = _GEN.get(type(e))
        if name is None:
            from relay_ir.errors import InternalError
            raise InternalError(f"InferType: not an expression node: {type(e).__name__}")
        return getattr(self, name)(e)

    def gen_var(self, e: Var) -> Type:
        raise UnboundVarError(f"variable `%{e.name_hint}` is not bound here", e.span)

    def gen_global_var(self, e: GlobalVar) -> Type:
        t = self.global_types.get(e.name_hint)
        if t is None:
            raise UnboundVarError(f"there is no global function `@{e.name_hint}` in the module",
                                  e.span)
        return t

    def gen_constant(self, e: Constant) -> Type:
        return TensorType(tuple(e.data.shape), str(e.data.dtype))

    def gen_op(self, e: Op) -> Type:
        raise TypeInferenceError(
            f"operator `{e.name}` can only be called, not used as a value", e.span)

    def ctor_type(self, c: Constructor) -> FuncType:
        """``fn [params](fields) -> Adt[params]`` for constructor ``c``."""
        ft = self.ctor_types.get(c.name_hint)
        if ft is not None:
            return ft
        td = self.mod.type_definitions.get(c.belong_to.name_hint)
        if td is None:
            raise TypeInferenceError(
                f"constructor `{c.name_hint}` belongs to type `{c.belong_to.name_hint}`, which "
                f"is not defined in the module", c.span)
        # NOTE: a bare ADT name is TypeCall(name, ()), as the parser writes it.
        ret: Type = TypeCall(td.header, tuple(td.type_params))
        ft = FuncType(tuple(c.inputs), ret, tuple(td.type_params))
        self.ctor_types[c.name_hint] = ft
        return ft

    def gen_constructor(self, e: Constructor) -> Type:
        return self.ctor_type(e)

    def gen_tuple(self, e: Tuple) -> Any:
        types = self.types
        if all(f in types for f in e.fields):  # NOTE: the common case: no generator needed
            return TupleType(tuple(types[f] for f in e.fields))
        return self._gen_tuple(e)

    def _gen_tuple(self, e: Tuple) -> Gen:
        types = self.types
        fields = []
        for f in e.fields:
            fields.append(types[f] if f in types else (yield self._gen(f)))
        return TupleType(tuple(fields))

    def gen_tuple_get_item(self, e: TupleGetItem) -> Any:
        tt = self.types.get(e.tuple_value)
        if tt is not None:  # NOTE: the common case: no generator needed
            return self._tuple_get_item(e, tt)
        return self._gen_tuple_get_item(e)

    def _gen_tuple_get_item(self, e: TupleGetItem) -> Gen:
        return self._tuple_get_item(e, (yield self._gen(e.tuple_value)))

    def _tuple_get_item(self, e: TupleGetItem, tt: Type) -> Type:
        out = IncompleteType(span=e.span)
        index = e.index

        def rel(args: list[Type], attrs: Any) -> Type | None:
            t = args[0]
            if type(t) is IncompleteType:
                return None
            if type(t) is not TupleType:
                raise TypeInferenceError(
                    f"tuple projection `.{index}` needs a tuple, found `{fmt_type(t)}`")
            if not 0 <= index < len(t.fields):
                raise TypeInferenceError(
                    f"tuple index out of range: `.{index}` of a tuple with {len(t.fields)} "
                    f"field(s) `{fmt_type(t)}`")
            return t.fields[index]

        self.add_relation(_Relation(rel, [tt], None, out, e.span, f".{index}"))
        return out

    def gen_let(self, e: Let) -> Gen:
        lets, body = flatten_lets(e)
        types = self.types
        for let in lets:
            var = let.var
            value = let.value
            if var.type_annotation is not None:
                vt = var.type_annotation
                self.check_scope(vt, var.span)
            elif type(value) is Function and value.type_params and _fully_annotated(value):
                vt = FuncType(tuple(p.type_annotation for p in value.params),  # type: ignore
                              value.ret_type, value.type_params)  # type: ignore[arg-type]
            else:
                vt = IncompleteType(span=var.span)
            types[var] = vt
            try:
                t = yield self._gen(value)
            except DiagnosticError as err:
                raise err.with_span(_at(value, let.span)) from None
            try:
                self.unify(vt, t)
            except Fail as err:
                raise self.fail(err, f"the value of `%{var.name_hint}` does not match its "
                                     f"annotation", vt, t, _at(value, let.span)) from None
        bt = yield self._gen(body)
        for let in lets:
            types[let] = bt
        return bt

    def check_scope(self, t: Type, span: Span | None) -> None:
        """Type and shape variables in an annotation must be bound by an enclosing ``[..]``."""
        if type(t) is TensorType and all(type(d) is int or type(d) is AnyDim for d in t.shape):
            return
        from relay_ir.traversal import free_type_vars
        stack = [t]
        while stack:
            x = stack.pop()
            if type(x) is GlobalTypeVar and x.name_hint not in self.mod.type_definitions:
                raise UnboundVarError(f"type `{x.name_hint}` is not defined (and is not a "
                                      f"type parameter in scope)", span)
            stack.extend(type_children(x))
        for v in free_type_vars(t):
            if v not in self.tv_scope:
                name = v.name if isinstance(v, ShapeVar) else v.name_hint
                raise UnboundVarError(
                    f"type variable `{name}` is not bound by an enclosing type parameter list",
                    span)

    def gen_function(self, f: Function, sig: FuncType | None = None) -> Gen:
        """Type a function (a global's body when ``sig`` is given)."""
        added = [p for p in f.type_params if p not in self.tv_scope]
        self.tv_scope.update(added)
        try:
            ptypes = []
            for i, p in enumerate(f.params):
                if p.type_annotation is not None:
                    self.check_scope(p.type_annotation, p.span)
                if sig is not None:
                    pt = sig.arg_types[i]
                elif p.type_annotation is not None:
                    pt = p.type_annotation
                else:
                    pt = IncompleteType(span=p.span)
                self.types[p] = pt
                ptypes.append(pt)
            if f.ret_type is not None:
                self.check_scope(f.ret_type, f.span)
            if sig is not None:
                ret = sig.ret_type
            else:
                ret = f.ret_type if f.ret_type is not None else IncompleteType(span=f.span)
            self.fn_ret[f] = ret
            try:
                bt = yield self._gen(f.body)
            except DiagnosticError as err:
                raise err.with_span(_at(f.body, f.span)) from None
            try:
                self.unify(ret, bt)
            except Fail as err:
                if f.ret_type is not None:
                    raise self.fail(err, "return annotation mismatch: the function is annotated "
                                         "to return one type but its body has another",
                                    ret, bt, _at(f.body, f.span)) from None
                raise self.fail(err, "the function body does not have the function's return "
                                     "type", ret, bt, _at(f.body, f.span)) from None
        finally:
            for p in added:
                self.tv_scope.discard(p)
        return FuncType(tuple(ptypes), ret, f.type_params)

    def gen_if(self, e: If) -> Gen:
        ct = yield self._gen(e.cond)
        try:
            self.unify(BOOL_T, ct)
        except Fail:
            raise UnificationError(
                f"the condition of `if` must have type `bool` (Tensor[(), bool]), found "
                f"`{fmt_type(self.resolve(ct))}`", _at(e.cond, e.span)) from None
        tt = yield self._gen(e.true_branch)
        ft = yield self._gen(e.false_branch)
        try:
            self.unify(tt, ft)
        except Fail as err:
            raise self.fail(err, "the branches of `if` have different types: the `else` branch "
                                 "must match the `then` branch", tt, ft,
                            _at(e.false_branch, e.span)) from None
        return ft if _has_type_params(self.find(tt)) else tt

    def gen_ref_create(self, e: RefCreate) -> Gen:
        return RefType((yield self._gen(e.value)))

    def gen_ref_read(self, e: RefRead) -> Gen:
        rt = yield self._gen(e.ref)
        v = IncompleteType(span=e.span)
        self.expect(RefType(v), rt, _at(e.ref, e.span), "`ref_read` needs a reference")
        return v

    def gen_ref_write(self, e: RefWrite) -> Gen:
        rt = yield self._gen(e.ref)
        vt = yield self._gen(e.value)
        cell = IncompleteType(span=e.span)
        self.expect(RefType(cell), rt, _at(e.ref, e.span), "`ref_write` needs a reference")
        self.expect(cell, vt, _at(e.value, e.span),
                    "`ref_write` stores a value of another type than the reference holds")
        return UNIT_T

    def gen_call(self, e: Call) -> Any:
        types = self.types
        if type(e.op) is Op and all(a in types for a in e.args):  # NOTE: no generator needed
            return self.gen_op_call(e, [types[a] for a in e.args])
        return self._gen_call(e)

    def _gen_call(self, e: Call) -> Gen:
        op = e.op
        types = self.types
        arg_types = []
        for a in e.args:
            arg_types.append(types[a] if a in types else (yield self._gen(a)))
        if type(op) is Op:
            return self.gen_op_call(e, arg_types)
        ft = self.find((yield self._gen(op)))
        callee = "the constructor" if type(op) is Constructor else "the function"
        if type(ft) is FuncType:
            fresh: list = []
            orig = ft
            if ft.type_params:
                if e.type_args and len(e.type_args) != len(ft.type_params):
                    raise TypeInferenceError(
                        f"wrong number of type arguments: {callee} has {len(ft.type_params)} "
                        f"type parameter(s), but {len(e.type_args)} type argument(s) were given",
                        e.span)
                ft, fresh = self.instantiate(ft, e.span)
                self.inst[e] = fresh
                for given, var in zip(e.type_args, fresh):
                    if type(var) is ShapeVar:
                        self.unify_dim(var, given, 0)  # type: ignore[arg-type]
                    else:
                        self.expect(var, given, e.span, "explicit type argument")
            elif e.type_args:
                raise TypeInferenceError(
                    f"wrong number of type arguments: {callee} has no type parameters, but "
                    f"{len(e.type_args)} type argument(s) were given", e.span)
            n, m = len(ft.arg_types), len(arg_types)
            if n != m:
                many = "too many" if m > n else "too few"
                raise TypeInferenceError(
                    f"wrong argument count: {callee} `{callee_name(op)}` of type "
                    f"`{fmt_type(self.resolve(orig))}` is given {many} arguments: expected {n}, "
                    f"found {m}", e.span)
            for i, (pt, at) in enumerate(zip(ft.arg_types, arg_types)):
                try:
                    self.unify(pt, at)
                except Fail as err:
                    arg = e.args[i]
                    tp = _param_type_var(orig, i) if fresh else None
                    src = "an explicit type argument" if e.type_args else "an earlier argument"
                    if tp is not None:
                        raise UnificationError(
                            f"conflicting type parameter: `{tp}` of {callee} "
                            f"`{callee_name(op)}` would be both `{fmt_type(self.resolve(pt))}` "
                            f"(from {src}) and `{fmt_type(self.resolve(at))}` "
                            f"(argument {i + 1})", _at(arg, e.span)) from None
                    what = f"argument {i + 1} of {callee} `{callee_name(op)}` has the wrong type"
                    if fresh:
                        what += " (the type parameters conflict)"
                    raise self.fail(err, what, pt, at, _at(arg, e.span)) from None
            return ft.ret_type
        if type(ft) is IncompleteType:
            ret = IncompleteType(span=e.span)
            self.expect(ft, FuncType(tuple(arg_types), ret), e.span,
                        f"the called expression `{callee_name(op)}` has the wrong type")
            return ret
        raise TypeInferenceError(
            f"calling a non-function: only expressions with function types can be called, but "
            f"`{callee_name(op)}` has type `{fmt_type(self.resolve(ft))}`", e.span)

    def gen_op_call(self, e: Call, arg_types: list[Type]) -> Type:
        op = e.op
        opdef = self.opdefs.get(op)  # type: ignore[arg-type]
        if opdef is None:
            opdef = self.opdefs[op] = op.opdef  # type: ignore[union-attr,index]
        n = opdef.num_inputs
        if n >= 0 and n != len(arg_types):
            many = "too many" if len(arg_types) > n else "too few"
            raise TypeInferenceError(
                f"wrong argument count: operator `{opdef.name}` is given {many} arguments: "
                f"expected {n}, found {len(arg_types)}", e.span)
        if opdef.type_rel is None:
            raise TypeInferenceError(f"operator `{opdef.name}` has no type relation yet",
                                     e.span)
        attrs = e.attrs
        if opdef.attrs and (attrs.type_key != opdef.attrs_type or
                            any(f.name not in attrs for f in opdef.attrs)):
            # NOTE: calls built by hand may carry only some attributes; fill the defaults.
            attrs = opdef.make_attrs(dict(attrs), e.span)
        out = IncompleteType(span=e.span)
        self.op_call_args[e] = arg_types
        self.add_relation(_Relation(opdef.type_rel, arg_types, attrs, out, e.span, opdef.name,
                                    [a.span for a in e.args]))
        return out

    def gen_match(self, e: Match) -> Gen:
        dt = yield self._gen(e.data)
        out: Type | None = None
        for clause in e.clauses:
            self.gen_pattern(clause.lhs, dt)
            rt = yield self._gen(clause.rhs)
            if out is None:
                out = rt
            elif _has_type_params(self.find(out)) and not _has_type_params(self.find(rt)):
                self.expect(out, rt, _at(clause.rhs, clause.span or e.span),
                            "the arms of `match` have different types")
                out = rt
            else:
                try:
                    self.unify(out, rt)
                except Fail as err:
                    raise self.fail(err, "the arms of `match` have different types", out, rt,
                                    _at(clause.rhs, clause.span or e.span)) from None
        if e.complete:
            self.matches.append(e)
        if out is None:
            return IncompleteType(span=e.span)
        return out

    def gen_pattern(self, p: Pattern, t: Type) -> None:
        """Constrain the scrutinee type ``t`` by pattern ``p`` and bind its variables."""
        tp = type(p)
        if tp is PatternWildcard:
            return
        if tp is PatternVar:
            var = p.var
            if var.type_annotation is not None:
                self.check_scope(var.type_annotation, var.span)
                self.expect(var.type_annotation, t, var.span or p.span,
                            f"pattern variable `%{var.name_hint}` does not match the matched "
                            f"value")
            self.types[var] = t
            return
        if tp is PatternConstructor:
            c = p.constructor
            ft = self.ctor_type(c)
            inst, _ = self.instantiate(ft, p.span) if ft.type_params else (ft, [])
            if len(p.patterns) != len(inst.arg_types):
                raise TypeInferenceError(
                    f"pattern arity: constructor `{c.name_hint}` has {len(inst.arg_types)} "
                    f"field(s), but the pattern gives {len(p.patterns)}", p.span)
            try:
                self.unify(inst.ret_type, t)
            except Fail:
                built = fmt_type(self.resolve(inst.ret_type))
                raise UnificationError(
                    f"the pattern `{c.name_hint}` builds a `{built}` but the matched value has "
                    f"type `{fmt_type(self.resolve(t))}`", p.span) from None
            for sub, ft_i in zip(p.patterns, inst.arg_types):
                self.gen_pattern(sub, ft_i)
            return
        if tp is PatternTuple:
            rt = self.find(t)
            if type(rt) is not TupleType and type(rt) is not IncompleteType:
                raise UnificationError(
                    f"a tuple pattern needs a tuple, but the matched value has type "
                    f"`{fmt_type(self.resolve(rt))}`", p.span)
            if type(rt) is TupleType and len(rt.fields) != len(p.patterns):
                raise TypeInferenceError(
                    f"pattern arity: the tuple pattern has {len(p.patterns)} field(s), but the "
                    f"matched value `{fmt_type(self.resolve(rt))}` has {len(rt.fields)}", p.span)
            fields = tuple(IncompleteType(span=p.span) for _ in p.patterns)
            self.expect(TupleType(fields), t, p.span, "tuple pattern")
            for sub, ft_i in zip(p.patterns, fields):
                self.gen_pattern(sub, ft_i)
            return
        raise TypeInferenceError(f"unknown pattern {type(p).__name__}", p.span)

    # ------------------------------------------------------------------ exhaustiveness
def _at(node: Expr, fallback: Span | None) -> Span | None:
    """Where to report a problem with sub-expression ``node``.

    A variable node is shared by its binding and every use, so its span is the binding's; a
    problem with a use is reported at the enclosing expression (``fallback``) instead.
    """
    if type(node) is Var or node.span is None:
        return fallback
    return node.span


Gen = Generator[Any, Any, Type]
_GEN = {Var: "gen_var", GlobalVar: "gen_global_var", Constant: "gen_constant", Op: "gen_op",
        Constructor: "gen_constructor", Tuple: "gen_tuple",
        TupleGetItem: "gen_tuple_get_item", Let: "gen_let", Function: "gen_function",
        Call: "gen_call", If: "gen_if", Match: "gen_match", RefCreate: "gen_ref_create",
        RefRead: "gen_ref_read", RefWrite: "gen_ref_write"}


def _param_type_var(ft: FuncType, i: int) -> str | None:
    """The name of the type parameter that argument ``i`` of ``ft`` is declared as, if any."""
    pt = ft.arg_types[i]
    if type(pt) is TypeVar and pt in ft.type_params:
        return pt.name_hint
    return None


# ----------------------------------------------------------------------------- the pass
@dataclass(frozen=True)
class InferType(Pass):
    """Infer the type of every expression; returns a new, fully typed module.

    ``mod => mod'`` where every binder carries its type, every function its return type,
    every node ``checked_type_`` and polymorphic calls their ``type_args``.
    """

    name: ClassVar[str] = "infer-type"
    opt_level: ClassVar[int] = 0

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return Inferencer(mod).run()


def infer_type(node: IRModule | Expr, mod: IRModule | None = None) -> Any:
    """Type-check a module (returns the typed module) or an expression (returns it typed).

    An expression is checked as the body of ``main`` in ``mod`` (for its ADTs and globals);
    its free variables become parameters. A Function comes back as the typed Function.
    """
    if isinstance(node, IRModule):
        return InferType()(node)
    base = mod or IRModule()
    from relay_ir.traversal import free_vars
    if isinstance(node, Function):
        fn = node
    else:
        fn = Function(tuple(free_vars(node)), node, span=node.span)
    name = "main"
    while name in base:
        name = "_" + name
    typed = InferType()(base.with_function(name, fn))
    out = typed[name]
    return out if isinstance(node, Function) else out.body

