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
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Sequence

from relay_ir.errors import (DiagnosticError, IncompleteMatchError, IncompleteTypeError,
                             TypeInferenceError, UnboundVarError, UnificationError)
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                           Var)
from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.span import Span
from relay_ir.traversal import flatten_lets, post_order
from relay_ir.ty import (AnyDim, Dim, DimExpr, FuncType, GlobalTypeVar, IncompleteType,
                         RefType, ShapeVar, TensorType, TupleType, Type, TypeCall, TypeData,
                         TypeVar, dim_add, dim_mul, dim_sub, dim_vars, format_dim)

__all__ = ["InferType", "infer_type", "fmt_type", "Inferencer"]

BOOL_T = TensorType((), "bool")
UNIT_T = TupleType(())
_DATAFLOW = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)


# ----------------------------------------------------------------------------- formatting
def fmt_type(t: Any) -> str:
    """Text of a type as the printer writes it (``Tensor[(2, 3), float32]``, ``fn (A) -> B``).

    Generic function types print as ``fn [A, n](A) -> A``; an unknown type prints as ``_``.
    """
    if t is None:
        return "_"
    tt = type(t)
    if tt is TensorType:
        if not t.shape:
            return t.dtype
        return f"Tensor[({', '.join(format_dim(d) for d in t.shape)}), {t.dtype}]"
    if tt is TupleType:
        if len(t.fields) == 1:
            return f"({fmt_type(t.fields[0])},)"
        return "(" + ", ".join(fmt_type(f) for f in t.fields) + ")"
    if tt is FuncType:
        tps = ""
        if t.type_params:
            tps = "[" + ", ".join(p.name if isinstance(p, ShapeVar) else p.name_hint
                                  for p in t.type_params) + "]"
        args = ", ".join(fmt_type(a) for a in t.arg_types)
        return f"fn {tps}({args}) -> {fmt_type(t.ret_type)}" if tps else \
            f"fn ({args}) -> {fmt_type(t.ret_type)}"
    if tt is RefType:
        return f"ref({fmt_type(t.value)})"
    if tt is TypeCall:
        head = fmt_type(t.func)
        if not t.args:
            return head
        return f"{head}[{', '.join(fmt_type(a) for a in t.args)}]"
    if tt is GlobalTypeVar or tt is TypeVar:
        return t.name_hint
    if tt is IncompleteType:
        return "_"
    if tt is TypeData:
        return t.header.name_hint
    if isinstance(t, (int, AnyDim, ShapeVar, DimExpr)):
        return format_dim(t)
    return repr(t)


def _fmt_pattern(p: Any) -> str:
    """Text of a (missing-case) pattern: ``Cons(_, Nil)``, ``(_, _)``, ``_``."""
    kind = p[0]
    if kind == "_":
        return "_"
    if kind == "tuple":
        inner = [_fmt_pattern(q) for q in p[1]]
        return f"({inner[0]},)" if len(inner) == 1 else "(" + ", ".join(inner) + ")"
    name, subs = p[1], p[2]
    if not subs:
        return name
    return f"{name}({', '.join(_fmt_pattern(q) for q in subs)})"


class _Fail(Exception):
    """A unification failure; ``reason`` says which parts disagreed."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Relation:
    """A waiting type relation: ``out = fn(args, attrs)``."""

    __slots__ = ("fn", "args", "attrs", "out", "span", "name", "arg_spans")

    def __init__(self, fn: Callable[..., Any], args: list[Type], attrs: Any, out: Type,
                 span: Span | None, name: str, arg_spans: Sequence[Span | None] = ()):
        self.fn = fn
        self.args = args
        self.attrs = attrs
        self.out = out
        self.span = span
        self.name = name
        self.arg_spans = arg_spans


def _has_type_params(t: Type) -> bool:
    return type(t) is FuncType and bool(t.type_params)


def _fully_annotated(f: Function) -> bool:
    if f.ret_type is None:
        return False
    for p in f.params:
        if p.type_annotation is None or _contains_incomplete(p.type_annotation):
            return False
    return not _contains_incomplete(f.ret_type)


def _contains_incomplete(t: Type) -> bool:
    stack = [t]
    while stack:
        x = stack.pop()
        tx = type(x)
        if tx is IncompleteType:
            return True
        if tx is TensorType:
            continue
        if tx is TupleType:
            stack.extend(x.fields)
        elif tx is FuncType:
            stack.extend(x.arg_types)
            stack.append(x.ret_type)
        elif tx is RefType:
            stack.append(x.value)
        elif tx is TypeCall:
            stack.extend(x.args)
    return False


# ----------------------------------------------------------------------------- the inferencer
class Inferencer:
    """One type-inference run over a module (see the module docstring)."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.subst: dict[IncompleteType, Type] = {}
        self.dim_subst: dict[ShapeVar, Dim] = {}
        self.flex: set[ShapeVar] = set()
        self.types: dict[Expr, Type] = {}
        self.pending: list[_Relation] = []
        self.progress = 0
        self.inst: dict[Call, list[Any]] = {}       # call -> instantiation (type args)
        self.op_call_args: dict[Call, list[Type]] = {}
        self.fn_ret: dict[Function, Type] = {}
        self.matches: list[Match] = []
        self.global_types: dict[str, Type] = {}
        self.tv_scope: set[Any] = set()
        self.var_map: dict[Var, Var] = {}
        self.ctor_types: dict[str, FuncType] = {}
        self.param_of: dict[IncompleteType, tuple[Any, str]] = {}
        self.opdefs: dict[Op, Any] = {}

    # ------------------------------------------------------------------ substitution
    def find(self, t: Type) -> Type:
        """The representative of ``t`` (follows variable bindings, path-compressed)."""
        if type(t) is not IncompleteType:
            return t
        subst = self.subst
        nxt = subst.get(t)
        if nxt is None:
            return t
        path = [t]
        root = nxt
        while type(root) is IncompleteType:
            n2 = subst.get(root)
            if n2 is None:
                break
            path.append(root)
            root = n2
        for p in path:
            subst[p] = root
        return root

    def rdim(self, d: Dim) -> Dim:
        """``d`` with bound flexible shape variables substituted."""
        if type(d) is int or not self.dim_subst:
            return d
        if type(d) is ShapeVar:
            seen = 0
            while type(d) is ShapeVar and d in self.dim_subst:
                d = self.dim_subst[d]
                seen += 1
                if seen > 10000:  # pragma: no cover - occurs check prevents cycles
                    break
            if type(d) is DimExpr:
                return self.rdim(d)
            return d
        if type(d) is DimExpr:
            if not any(v in self.dim_subst for v in dim_vars(d)):
                return d
            out: Dim = 0
            for mono, c in d.terms:
                term: Dim = c
                for v in mono:
                    term = dim_mul(term, self.rdim(v))
                out = dim_add(out, term)
            return out
        return d

    def resolve(self, t: Type) -> Type:
        """``t`` with every bound variable (type and dimension) substituted, deeply."""
        t = self.find(t)
        tt = type(t)
        if tt is TensorType:
            if not self.dim_subst:
                return t
            shape = t.shape
            new = tuple(self.rdim(d) for d in shape)
            for a, b in zip(shape, new):
                if a is not b:
                    return TensorType(new, t.dtype)
            return t
        if tt is TupleType:
            fs = tuple(self.resolve(f) for f in t.fields)
            return t if all(a is b for a, b in zip(fs, t.fields)) else TupleType(fs)
        if tt is FuncType:
            args = tuple(self.resolve(a) for a in t.arg_types)
            ret = self.resolve(t.ret_type)
            if ret is t.ret_type and all(a is b for a, b in zip(args, t.arg_types)):
                return t
            return FuncType(args, ret, t.type_params, t.type_constraints)
        if tt is RefType:
            v = self.resolve(t.value)
            return t if v is t.value else RefType(v)
        if tt is TypeCall:
            if not t.args:
                return t
            args = tuple(self.resolve(a) for a in t.args)
            return t if all(a is b for a, b in zip(args, t.args)) else TypeCall(t.func, args)
        return t

    def unknown_part(self, t: Type) -> bool:
        """True if resolved ``t`` still holds an unknown type or an unsolved shape variable."""
        stack = [t]
        flex = self.flex
        while stack:
            x = stack.pop()
            tx = type(x)
            if tx is TensorType:
                if flex:
                    for d in x.shape:
                        if type(d) is not int and any(v in flex for v in dim_vars(d)):
                            return True
            elif tx is IncompleteType:
                return True
            elif tx is TupleType:
                stack.extend(x.fields)
            elif tx is FuncType:
                stack.extend(x.arg_types)
                stack.append(x.ret_type)
            elif tx is RefType:
                stack.append(x.value)
            elif tx is TypeCall:
                stack.extend(x.args)
        return False

    # ------------------------------------------------------------------ unification
    def _bind(self, v: IncompleteType, t: Type) -> None:
        if type(t) is not TensorType and self._occurs(v, t):
            raise _Fail(f"occurs check failed: `{fmt_type(self.resolve(t))}` contains the "
                        f"type being inferred for it (a type would contain itself)")
        self.subst[v] = t
        self.progress += 1

    def _occurs(self, v: IncompleteType, t: Type) -> bool:
        stack = [t]
        while stack:
            x = self.find(stack.pop())
            if x is v:
                return True
            tx = type(x)
            if tx is TupleType:
                stack.extend(x.fields)
            elif tx is FuncType:
                stack.extend(x.arg_types)
                stack.append(x.ret_type)
            elif tx is RefType:
                stack.append(x.value)
            elif tx is TypeCall:
                stack.extend(x.args)
        return False

    def unify(self, a: Type, b: Type) -> None:
        """Make ``a`` and ``b`` equal or raise :class:`_Fail` (``a`` is the expected side)."""
        stack = [(a, b)]
        find = self.find
        while stack:
            x, y = stack.pop()
            if type(x) is IncompleteType:
                x = find(x)
            if type(y) is IncompleteType:
                y = find(y)
            if x is y:
                continue
            tx, ty = type(x), type(y)
            if tx is IncompleteType:
                self._bind(x, y)
                continue
            if ty is IncompleteType:
                self._bind(y, x)
                continue
            if tx is TensorType and ty is TensorType:
                if x == y:
                    continue
                if x.dtype != y.dtype:
                    raise _Fail(f"dtype mismatch: {x.dtype} does not match {y.dtype}")
                if len(x.shape) != len(y.shape):
                    raise _Fail(f"rank mismatch: `{fmt_type(x)}` has {len(x.shape)} "
                                f"dimension(s), while `{fmt_type(y)}` has {len(y.shape)}")
                for i, (dx, dy) in enumerate(zip(x.shape, y.shape)):
                    self.unify_dim(dx, dy, i)
                continue
            if tx is GlobalTypeVar:
                x, tx = TypeCall(x, ()), TypeCall
            if ty is GlobalTypeVar:
                y, ty = TypeCall(y, ()), TypeCall
            if tx is not ty:
                raise _Fail(f"`{fmt_type(self.resolve(x))}` does not match "
                            f"`{fmt_type(self.resolve(y))}`")
            if tx is TupleType:
                if len(x.fields) != len(y.fields):
                    raise _Fail(f"a tuple of {len(x.fields)} field(s) does not match a tuple of "
                                f"{len(y.fields)} field(s)")
                stack.extend(zip(x.fields, y.fields))
            elif tx is FuncType:
                if x.type_params or y.type_params:
                    if len(x.type_params) == len(y.type_params) and all(
                            type(p) is type(q) for p, q in zip(x.type_params, y.type_params)):
                        y = self.substitute(y, dict(zip(y.type_params, x.type_params)),
                                            drop_params=True)
                        x = dataclasses.replace(x, type_params=())
                    elif x.type_params and not y.type_params:
                        x = self.instantiate(x)[0]
                    elif y.type_params and not x.type_params:
                        y = self.instantiate(y)[0]
                    else:
                        raise _Fail(f"`{fmt_type(x)}` and `{fmt_type(y)}` have different type "
                                    f"parameters")
                if len(x.arg_types) != len(y.arg_types):
                    raise _Fail(f"a function of {len(x.arg_types)} argument(s) does not match a "
                                f"function of {len(y.arg_types)} argument(s)")
                stack.append((x.ret_type, y.ret_type))
                stack.extend(reversed(list(zip(x.arg_types, y.arg_types))))
            elif tx is RefType:
                stack.append((x.value, y.value))
            elif tx is TypeCall:
                fx, fy = x.func, y.func
                if type(fx) is GlobalTypeVar and type(fy) is GlobalTypeVar:
                    if fx.name_hint != fy.name_hint:
                        raise _Fail(f"`{fmt_type(self.resolve(x))}` does not match "
                                    f"`{fmt_type(self.resolve(y))}` (ADT {fx.name_hint} is "
                                    f"not {fy.name_hint})")
                elif fx is not fy:
                    raise _Fail(f"`{fmt_type(x)}` does not match `{fmt_type(y)}`")
                if len(x.args) != len(y.args):
                    raise _Fail(f"`{fmt_type(x)}` and `{fmt_type(y)}` have different numbers of "
                                f"type arguments")
                stack.extend(zip(x.args, y.args))
            else:
                # TypeVar (rigid), or anything else that is not identical
                raise _Fail(f"`{fmt_type(self.resolve(x))}` does not match "
                            f"`{fmt_type(self.resolve(y))}`")

    def unify_dim(self, a: Dim, b: Dim, i: int) -> None:
        """Make dimension ``a`` equal ``b`` (binding flexible shape variables)."""
        a = self.rdim(a)
        b = self.rdim(b)
        if a is b or (type(a) is type(b) and type(a) in (int, DimExpr) and a == b):
            return
        ta, tb = type(a), type(b)
        if ta is AnyDim or tb is AnyDim:
            if ta is ShapeVar and a in self.flex:
                self._bind_dim(a, b)
            elif tb is ShapeVar and b in self.flex:
                self._bind_dim(b, a)
            return
        if ta is ShapeVar and a in self.flex:
            self._bind_dim(a, b)
            return
        if tb is ShapeVar and b in self.flex:
            self._bind_dim(b, a)
            return
        if ta is not int or tb is not int:
            if self._solve_linear(dim_sub(a, b)):
                return
        raise _Fail(f"dimension {i} conflicts: {format_dim(a)} does not match {format_dim(b)}")

    def _bind_dim(self, v: ShapeVar, d: Dim) -> None:
        if v in dim_vars(d):
            raise _Fail(f"occurs check failed: dimension {v.name} would equal "
                        f"{format_dim(d)}")
        self.dim_subst[v] = d
        self.progress += 1

    def _solve_linear(self, diff: Dim) -> bool:
        """Solve ``diff == 0`` for one flexible variable occurring linearly; True if solved."""
        if type(diff) is ShapeVar:
            if diff in self.flex:
                self._bind_dim(diff, 0)
                return True
            return False
        if type(diff) is not DimExpr:
            return False
        cands = [v for v in dim_vars(diff) if v in self.flex]
        for v in cands:
            coef = None
            ok = True
            rest: Dim = 0
            for mono, c in diff.terms:
                if v in mono:
                    if mono == (v,):
                        coef = c
                    else:
                        ok = False
                        break
                else:
                    term: Dim = c
                    for w in mono:
                        term = dim_mul(term, w)
                    rest = dim_add(rest, term)
            if not ok or coef is None:
                continue
            from relay_ir.ty import dim_div_exact
            val = dim_div_exact(dim_mul(-1, rest), coef)
            if val is None or (type(val) is int and val < 0):
                continue
            self._bind_dim(v, val)
            return True
        return False

    # ------------------------------------------------------------------ polymorphism
    def substitute(self, t: Type, m: dict, drop_params: bool = False) -> Type:
        """Replace type and shape variables of ``t`` per ``m`` (after resolving ``t``)."""
        t = self.resolve(t)

        def dim(d: Dim) -> Dim:
            if type(d) is ShapeVar:
                return m.get(d, d)
            if type(d) is DimExpr:
                if not any(v in m for v in dim_vars(d)):
                    return d
                out: Dim = 0
                for mono, c in d.terms:
                    term: Dim = c
                    for v in mono:
                        term = dim_mul(term, m.get(v, v))
                    out = dim_add(out, term)
                return out
            return d

        def go(x: Type) -> Type:
            x = self.find(x)
            tx = type(x)
            if tx is TypeVar:
                return m.get(x, x)
            if tx is TensorType:
                if all(type(d) is int for d in x.shape):
                    return x
                return TensorType(tuple(dim(d) for d in x.shape), x.dtype)
            if tx is TupleType:
                return TupleType(tuple(go(f) for f in x.fields))
            if tx is FuncType:
                return FuncType(tuple(go(a) for a in x.arg_types), go(x.ret_type),
                                x.type_params, x.type_constraints)
            if tx is RefType:
                return RefType(go(x.value))
            if tx is TypeCall:
                return TypeCall(go(x.func), tuple(go(a) for a in x.args))
            return x

        out = go(t)
        if drop_params and type(out) is FuncType:
            out = dataclasses.replace(out, type_params=())
        return out

    def instantiate(self, ft: FuncType, span: Span | None = None) -> tuple[FuncType, list]:
        """``ft`` with its type parameters replaced by fresh variables; also returns them."""
        m: dict = {}
        fresh: list = []
        for p in ft.type_params:
            if type(p) is ShapeVar:
                nv = ShapeVar(p.name)
                self.flex.add(nv)
                m[p] = nv
                fresh.append(nv)
            else:
                iv = IncompleteType(span=span)
                self.param_of[iv] = (p, "")
                m[p] = iv
                fresh.append(iv)
        out = self.substitute(ft, m, drop_params=True)
        return out, fresh  # type: ignore[return-value]

    # ------------------------------------------------------------------ errors
    def fail(self, e: _Fail, what: str, expected: Type, found: Type, span: Span | None,
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
        except _Fail as e:
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
        except _Fail as e:
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
        for scc in _sccs(list(functions), deps):
            for name in scc:
                f = functions[name]
                sig = self.global_types[name]
                self.gen_function(f, sig if not full[name] else
                                  dataclasses.replace(sig, type_params=()))  # type: ignore
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
                    if tx is TupleType:
                        stack.extend(x.fields)
                    elif tx is FuncType:
                        stack.extend(x.arg_types)
                        stack.append(x.ret_type)
                    elif tx is RefType:
                        stack.append(x.value)
                    elif tx is TypeCall:
                        stack.extend(x.args)

    # ------------------------------------------------------------------ generation
    def gen(self, e: Expr) -> Type:
        """The type of ``e`` (generating constraints for it and its sub-expressions once)."""
        t = self.types.get(e)
        if t is not None:
            return t
        te = type(e)
        if te in _DATAFLOW:
            types = self.types
            stack: list[tuple[Expr, bool]] = [(e, False)]
            while stack:
                node, ready = stack.pop()
                if node in types:
                    continue
                if ready:
                    types[node] = self.gen_node(node)
                    continue
                stack.append((node, True))
                tn = type(node)
                if tn is Call:
                    kids: Iterable[Expr] = node.args if type(node.op) is Op else \
                        (node.op, *node.args)
                elif tn is Tuple:
                    kids = node.fields
                elif tn is TupleGetItem:
                    kids = (node.tuple_value,)
                elif tn is RefCreate:
                    kids = (node.value,)
                elif tn is RefRead:
                    kids = (node.ref,)
                else:
                    kids = (node.ref, node.value)
                for c in reversed(tuple(kids)):
                    if type(c) in _DATAFLOW and c not in types:
                        stack.append((c, False))
            return types[e]
        if te is Let:
            return self.gen_let(e)
        if te is GlobalVar:
            # NOTE: not memoized: one GlobalVar node may be shared by several functions, and
            # its type changes from the in-progress signature to the generalized one.
            return self.gen_global_var(e)
        t = self.gen_node(e)
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

    def gen_tuple(self, e: Tuple) -> Type:
        types = self.types
        return TupleType(tuple(types[f] if f in types else self.gen(f) for f in e.fields))

    def gen_tuple_get_item(self, e: TupleGetItem) -> Type:
        tt = self.gen(e.tuple_value)
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

    def gen_let(self, e: Let) -> Type:
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
                t = self.gen(value)
            except DiagnosticError as err:
                raise err.with_span(_at(value, let.span)) from None
            try:
                self.unify(vt, t)
            except _Fail as err:
                raise self.fail(err, f"the value of `%{var.name_hint}` does not match its "
                                     f"annotation", vt, t, _at(value, let.span)) from None
        bt = self.gen(body)
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
            tx = type(x)
            if tx is TypeCall:
                stack.append(x.func)
                stack.extend(x.args)
            elif tx is GlobalTypeVar:
                if x.name_hint not in self.mod.type_definitions:
                    raise UnboundVarError(f"type `{x.name_hint}` is not defined (and is not a "
                                          f"type parameter in scope)", span)
            elif tx is TupleType:
                stack.extend(x.fields)
            elif tx is FuncType:
                stack.extend(x.arg_types)
                stack.append(x.ret_type)
            elif tx is RefType:
                stack.append(x.value)
        for v in free_type_vars(t):
            if v not in self.tv_scope:
                name = v.name if isinstance(v, ShapeVar) else v.name_hint
                raise UnboundVarError(
                    f"type variable `{name}` is not bound by an enclosing type parameter list",
                    span)

    def gen_function(self, f: Function, sig: FuncType | None = None) -> Type:
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
                bt = self.gen(f.body)
            except DiagnosticError as err:
                raise err.with_span(_at(f.body, f.span)) from None
            try:
                self.unify(ret, bt)
            except _Fail as err:
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

    def gen_if(self, e: If) -> Type:
        ct = self.gen(e.cond)
        try:
            self.unify(BOOL_T, ct)
        except _Fail:
            raise UnificationError(
                f"the condition of `if` must have type `bool` (Tensor[(), bool]), found "
                f"`{fmt_type(self.resolve(ct))}`", _at(e.cond, e.span)) from None
        tt = self.gen(e.true_branch)
        ft = self.gen(e.false_branch)
        try:
            self.unify(tt, ft)
        except _Fail as err:
            raise self.fail(err, "the branches of `if` have different types: the `else` branch "
                                 "must match the `then` branch", tt, ft,
                            _at(e.false_branch, e.span)) from None
        return ft if _has_type_params(self.find(tt)) else tt

    def gen_ref_create(self, e: RefCreate) -> Type:
        return RefType(self.gen(e.value))

    def gen_ref_read(self, e: RefRead) -> Type:
        rt = self.gen(e.ref)
        v = IncompleteType(span=e.span)
        self.expect(RefType(v), rt, _at(e.ref, e.span), "`ref_read` needs a reference")
        return v

    def gen_ref_write(self, e: RefWrite) -> Type:
        rt = self.gen(e.ref)
        vt = self.gen(e.value)
        cell = IncompleteType(span=e.span)
        self.expect(RefType(cell), rt, _at(e.ref, e.span), "`ref_write` needs a reference")
        self.expect(cell, vt, _at(e.value, e.span),
                    "`ref_write` stores a value of another type than the reference holds")
        return UNIT_T

    def gen_call(self, e: Call) -> Type:
        op = e.op
        types = self.types
        arg_types = [types[a] if a in types else self.gen(a) for a in e.args]
        if type(op) is Op:
            return self.gen_op_call(e, arg_types)
        ft = self.find(self.gen(op))
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
                    f"wrong argument count: {callee} `{_callee_name(op)}` of type "
                    f"`{fmt_type(self.resolve(orig))}` is given {many} arguments: expected {n}, "
                    f"found {m}", e.span)
            for i, (pt, at) in enumerate(zip(ft.arg_types, arg_types)):
                try:
                    self.unify(pt, at)
                except _Fail as err:
                    arg = e.args[i]
                    tp = _param_type_var(orig, i) if fresh else None
                    src = "an explicit type argument" if e.type_args else "an earlier argument"
                    if tp is not None:
                        raise UnificationError(
                            f"conflicting type parameter: `{tp}` of {callee} "
                            f"`{_callee_name(op)}` would be both `{fmt_type(self.resolve(pt))}` "
                            f"(from {src}) and `{fmt_type(self.resolve(at))}` "
                            f"(argument {i + 1})", _at(arg, e.span)) from None
                    what = f"argument {i + 1} of {callee} `{_callee_name(op)}` has the wrong type"
                    if fresh:
                        what += " (the type parameters conflict)"
                    raise self.fail(err, what, pt, at, _at(arg, e.span)) from None
            return ft.ret_type
        if type(ft) is IncompleteType:
            ret = IncompleteType(span=e.span)
            self.expect(ft, FuncType(tuple(arg_types), ret), e.span,
                        f"the called expression `{_callee_name(op)}` has the wrong type")
            return ret
        raise TypeInferenceError(
            f"calling a non-function: only expressions with function types can be called, but "
            f"`{_callee_name(op)}` has type `{fmt_type(self.resolve(ft))}`", e.span)

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

    def gen_match(self, e: Match) -> Type:
        dt = self.gen(e.data)
        out: Type | None = None
        for clause in e.clauses:
            self.gen_pattern(clause.lhs, dt)
            rt = self.gen(clause.rhs)
            if out is None:
                out = rt
            elif _has_type_params(self.find(out)) and not _has_type_params(self.find(rt)):
                self.expect(out, rt, _at(clause.rhs, clause.span or e.span),
                            "the arms of `match` have different types")
                out = rt
            else:
                try:
                    self.unify(out, rt)
                except _Fail as err:
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
            except _Fail:
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
    def check_matches(self) -> None:
        for m in self.matches:
            dt = self.resolve(self.types[m.data])
            rows = [[c.lhs] for c in m.clauses]
            missing = self._missing(rows, [dt], limit=5)
            if missing:
                cases = ", ".join(f"`{_fmt_pattern(v[0])}`" for v in missing)
                raise IncompleteMatchError(
                    f"incomplete match: the following cases are not handled: {cases} "
                    f"(add the cases, a `_` clause, or use `match?`)", m.span)

    def _adt_ctors(self, t: Type) -> tuple[list[tuple[str, list[Type]]], bool] | None:
        """Constructors of ADT type ``t`` with field types instantiated, or None."""
        if type(t) is GlobalTypeVar:
            head, args = t, ()
        elif type(t) is TypeCall and type(t.func) is GlobalTypeVar:
            head, args = t.func, t.args
        else:
            return None
        td = self.mod.type_definitions.get(head.name_hint)
        if td is None:
            return None
        m = dict(zip(td.type_params, args))
        out = []
        for c in td.constructors:
            out.append((c.name_hint, [self.substitute(ft, m) for ft in c.inputs]))
        return out, True

    def _missing(self, rows: list[list[Pattern]], tys: list[Type], limit: int) -> list[list]:
        """Value vectors (as pattern descriptions) not matched by any row (Maranget)."""
        if not tys:
            return [] if rows else [[]]
        t = self.find(tys[0])
        rest_t = tys[1:]
        heads = [r[0] for r in rows]

        def default() -> list[list]:
            sub = [r[1:] for r in rows if type(r[0]) in (PatternWildcard, PatternVar)]
            return [[("_",)] + v for v in self._missing(sub, rest_t, limit)]

        if type(t) is TupleType:
            n = len(t.fields)
            sub = []
            for r in rows:
                h = r[0]
                if type(h) is PatternTuple and len(h.patterns) == n:
                    sub.append(list(h.patterns) + r[1:])
                elif type(h) in (PatternWildcard, PatternVar):
                    sub.append([PatternWildcard()] * n + r[1:])
            out = []
            for v in self._missing(sub, list(t.fields) + rest_t, limit):
                out.append([("tuple", v[:n])] + v[n:])
            return out
        info = self._adt_ctors(t)
        if info is None or not any(type(h) is PatternConstructor for h in heads):
            if info is not None and not info[0]:
                return []  # a type without constructors has no values
            return default()
        ctors = info[0]
        out: list[list] = []
        for name, fields in ctors:
            k = len(fields)
            sub = []
            for r in rows:
                h = r[0]
                if type(h) is PatternConstructor:
                    if h.constructor.name_hint == name:
                        sub.append(list(h.patterns) + r[1:])
                elif type(h) in (PatternWildcard, PatternVar):
                    sub.append([PatternWildcard()] * k + r[1:])
            for v in self._missing(sub, fields + rest_t, limit):
                out.append([("ctor", name, v[:k])] + v[k:])
                if len(out) >= limit:
                    return out
        return out

    # ------------------------------------------------------------------ rebuild
    def final(self, t: Type, node: Any, what: str | None = None) -> Type:
        """The resolved type of ``node``; an unknown part is "unable to infer a type"."""
        if type(t) is IncompleteType:
            t = self.find(t)
        if type(t) is TensorType and not self.dim_subst and not self.flex:
            return t
        r = self.resolve(t)
        if type(r) is TensorType and (not self.flex or all(type(d) is int for d in r.shape)):
            return r
        if self.unknown_part(r):
            desc = what or _describe(node)
            raise IncompleteTypeError(
                f"unable to infer a type for {desc}: it is only known to be `{fmt_type(r)}` "
                f"(add a type annotation)", node.span)
        return r

    def new_var(self, v: Var) -> Var:
        nv = self.var_map.get(v)
        if nv is None:
            t = self.types.get(v)
            if t is None:
                raise UnboundVarError(f"variable `%{v.name_hint}` is not bound here", v.span)
            t = self.final(t, v, f"`%{v.name_hint}`")
            nv = Var(v.name_hint, t, span=v.span, checked_type_=t)
            self.var_map[v] = nv
        return nv

    def rebuild(self, f: Function, memo: dict) -> Function:
        """The typed copy of function ``f`` (sharing kept; no recursion per binding)."""
        self._walk(f, memo)
        return memo[f]

    def _walk(self, e: Expr, memo: dict) -> None:
        """Rebuild ``e`` and everything below it into ``memo`` (children first).

        Let spines are walked as lists and dataflow with an explicit stack; Python recursion
        happens only across function / if / match nesting.
        """
        if e in memo:
            return
        te = type(e)
        if te is Let:
            lets, body = flatten_lets(e)
            for let in lets:
                if let.var not in memo:
                    memo[let.var] = self.new_var(let.var)
                self._walk(let.value, memo)
            self._walk(body, memo)
            for let in reversed(lets):
                if let not in memo:
                    memo[let] = self.build(let, memo)
            return
        if te in _DATAFLOW:
            stack: list[tuple[Expr, bool]] = [(e, False)]
            while stack:
                node, ready = stack.pop()
                if node in memo:
                    continue
                if ready:
                    memo[node] = self.build(node, memo)
                    continue
                stack.append((node, True))
                tn = type(node)
                if tn is Call:
                    kids: tuple = (node.op, *node.args)
                elif tn is Tuple:
                    kids = node.fields
                elif tn is TupleGetItem:
                    kids = (node.tuple_value,)
                elif tn is RefCreate:
                    kids = (node.value,)
                elif tn is RefRead:
                    kids = (node.ref,)
                else:
                    kids = (node.ref, node.value)
                for c in reversed(kids):
                    if c not in memo:
                        if type(c) in _DATAFLOW:
                            stack.append((c, False))
                        else:
                            self._walk(c, memo)
            return
        if te is Function:
            for p in e.params:
                if p not in memo:
                    memo[p] = self.new_var(p)
            self._walk(e.body, memo)
        elif te is If:
            self._walk(e.cond, memo)
            self._walk(e.true_branch, memo)
            self._walk(e.false_branch, memo)
        elif te is Match:
            self._walk(e.data, memo)
            for c in e.clauses:
                self._walk(c.rhs, memo)
        memo[e] = self.build(e, memo)

    def build(self, node: Expr, memo: dict) -> Expr:
        """The typed copy of ``node``, whose children are already in ``memo``."""
        types = self.types
        tn = type(node)
        if tn is Var:
            return self.new_var(node)
        if tn is Op or tn is Constructor:
            return node
        if tn is Let:
            bt = memo[node.body].checked_type_
            if bt is None:
                bt = self.final(types[node], node)
            return Let(memo[node.var], memo[node.value], memo[node.body], span=node.span,
                       checked_type_=bt)
        if tn is Function:
            params = tuple(memo[p] for p in node.params)
            ret = self.final(self.fn_ret[node], node, "the function's return value")
            ft = FuncType(tuple(p.type_annotation for p in params), ret,  # type: ignore
                          node.type_params)
            return Function(params, memo[node.body], ret, node.type_params, node.attrs,
                            span=node.span, checked_type_=ft)
        if tn is GlobalVar:
            return GlobalVar(node.name_hint, span=node.span,
                             checked_type_=self.final(self.gen_global_var(node), node))
        if tn is Call:
            inst = self.inst.get(node)
            if inst is not None:
                targs = tuple(self.final_arg(a, node) for a in inst)
            t = self.final(types[node], node)
            args = tuple(memo[a] for a in node.args)
            if inst is None and node in self.op_call_args:
                targs = tuple(a.checked_type_ if a.checked_type_ is not None
                              else self.final(at, node)
                              for a, at in zip(args, self.op_call_args[node]))
            elif inst is None:
                targs = node.type_args
            return Call(memo[node.op], args, node.attrs, targs, span=node.span, checked_type_=t)
        t = self.final(types[node], node)
        if tn is Tuple:
            return Tuple(tuple(memo[x] for x in node.fields), span=node.span, checked_type_=t)
        if tn is TupleGetItem:
            return TupleGetItem(memo[node.tuple_value], node.index, span=node.span,
                                checked_type_=t)
        if tn is If:
            return If(memo[node.cond], memo[node.true_branch], memo[node.false_branch],
                      span=node.span, checked_type_=t)
        if tn is Match:
            clauses = tuple(Clause(self.rebuild_pattern(c.lhs), memo[c.rhs], span=c.span)
                            for c in node.clauses)
            return Match(memo[node.data], clauses, node.complete, span=node.span,
                         checked_type_=t)
        if tn is RefCreate:
            return RefCreate(memo[node.value], span=node.span, checked_type_=t)
        if tn is RefRead:
            return RefRead(memo[node.ref], span=node.span, checked_type_=t)
        if tn is RefWrite:
            return RefWrite(memo[node.ref], memo[node.value], span=node.span, checked_type_=t)
        if tn is Constant:
            return dataclasses.replace(node, checked_type_=t)
        raise TypeInferenceError(f"unknown node {tn.__name__}", node.span)  # pragma: no cover

    def final_arg(self, a: Any, node: Any) -> Any:
        """The resolved instantiation ``a`` of a type parameter at call ``node``."""
        if type(a) is ShapeVar:
            d = self.rdim(a)
            if any(v in self.flex for v in dim_vars(d)):
                raise IncompleteTypeError(
                    f"unable to infer a type for {_describe(node)}: its shape parameter "
                    f"`{a.name}` is never determined", node.span)
            return d
        r = self.resolve(a)
        if self.unknown_part(r):
            p = self.param_of.get(a)
            name = p[0].name_hint if p else "?"
            raise IncompleteTypeError(
                f"unable to infer a type for {_describe(node)}: its type parameter `{name}` is "
                f"only known to be `{fmt_type(r)}` (add a type annotation)", node.span)
        return r

    def rebuild_pattern(self, p: Pattern) -> Pattern:
        tp = type(p)
        if tp is PatternVar:
            return PatternVar(self.new_var(p.var), span=p.span)
        if tp is PatternConstructor:
            return PatternConstructor(p.constructor,
                                      tuple(self.rebuild_pattern(q) for q in p.patterns),
                                      span=p.span)
        if tp is PatternTuple:
            return PatternTuple(tuple(self.rebuild_pattern(q) for q in p.patterns), span=p.span)
        return p


_GEN = {Var: "gen_var", GlobalVar: "gen_global_var", Constant: "gen_constant", Op: "gen_op",
        Constructor: "gen_constructor", Tuple: "gen_tuple",
        TupleGetItem: "gen_tuple_get_item", Let: "gen_let", Function: "gen_function",
        Call: "gen_call", If: "gen_if", Match: "gen_match", RefCreate: "gen_ref_create",
        RefRead: "gen_ref_read", RefWrite: "gen_ref_write"}


def _at(node: Expr, fallback: Span | None) -> Span | None:
    """Where to report a problem with sub-expression ``node``.

    A variable node is shared by its binding and every use, so its span is the binding's; a
    problem with a use is reported at the enclosing expression (``fallback``) instead.
    """
    if type(node) is Var or node.span is None:
        return fallback
    return node.span


def _callee_name(op: Expr) -> str:
    if type(op) is GlobalVar:
        return f"@{op.name_hint}"
    if type(op) is Var:
        return f"%{op.name_hint}"
    if type(op) is Constructor:
        return op.name_hint
    if type(op) is Op:
        return op.name
    if type(op) is Function:
        return "fn (...)"
    return type(op).__name__.lower()


def _describe(node: Any) -> str:
    if type(node) is Var:
        return f"`%{node.name_hint}`"
    if type(node) is Call:
        return f"this call of `{_callee_name(node.op)}`"
    return f"this {type(node).__name__} expression"


def _param_type_var(ft: FuncType, i: int) -> str | None:
    """The name of the type parameter that argument ``i`` of ``ft`` is declared as, if any."""
    pt = ft.arg_types[i]
    if type(pt) is TypeVar and pt in ft.type_params:
        return pt.name_hint
    return None


def _sccs(nodes: list[str], deps: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components, dependencies first (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            ds = deps.get(v, [])
            if i < len(ds):
                work.append((v, i + 1))
                w = ds[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp, key=nodes.index))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


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

