"""The unifier of type inference: union-find over unification variables and shape variables.

:class:`Unifier` holds the substitution (``subst`` for :class:`~relay_ir.ty.IncompleteType`,
``dim_subst`` for *flexible* shape variables) and solves ``a = b`` eagerly with an occurs
check; linear dimension equations (``2 * n = 6``) are solved for one flexible variable.
Polymorphic function types are instantiated here with fresh variables. A failure is a
:class:`Fail` carrying the reason, which the constraint generator turns into a diagnostic
naming the expression. :func:`~relay_ir.ty.fmt_type` (re-exported here) is the text of a type in messages.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Generator

from relay_ir.expr import Call, Constructor, Expr, Function, GlobalVar, If, Op, Var
from relay_ir.span import Span
from relay_ir.traversal import run_generators
from relay_ir.ty import (AnyDim, Dim, DimExpr, FuncType, GlobalTypeVar, IncompleteType,
                         RefType, ShapeVar, TensorType, TupleType, Type, TypeCall,
                         TypeVar, dim_add, dim_mul, dim_sub, dim_vars, fmt_type, format_dim,
                         type_children)


__all__ = ["Unifier", "Fail", "fmt_type", "describe_node", "callee_name"]


def callee_name(op: Expr) -> str:
    """How messages name a callee: ``@f``, ``%g``, ``Cons``, ``add``, ``fn (...)``."""
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


def describe_node(node: Any) -> str:
    """How messages name an expression: ``%x``, this call of ``@f``, this If expression."""
    if type(node) is Var:
        return f"`%{node.name_hint}`"
    if type(node) is Call:
        return f"this call of `{callee_name(node.op)}`"
    return f"this {type(node).__name__} expression"


class Fail(Exception):
    """A unification failure; ``reason`` says which parts disagreed."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Unifier:
    """Union-find unification of types and dimensions (a mixin of the Inferencer).

    State: ``subst`` (unification variable -> type), ``dim_subst`` (flexible shape variable ->
    dimension), ``flex`` (the flexible shape variables), ``param_of`` (a fresh variable -> the
    type parameter it instantiates) and ``progress`` (bumped on every binding).
    """

    subst: dict[IncompleteType, Type]
    dim_subst: dict[ShapeVar, Dim]
    flex: set[ShapeVar]
    param_of: dict[IncompleteType, tuple[Any, str]]
    progress: int

    def init_unifier(self) -> None:
        """Start with an empty substitution."""
        self.subst = {}
        self.dim_subst = {}
        self.flex = set()
        self.param_of = {}
        self.progress = 0

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
            return self._resolve_tensor(t)
        if tt is TupleType or tt is FuncType or tt is RefType or tt is TypeCall:
            return run_generators(self._resolve(t))  # NOTE: nested types without recursion
        return t

    def _resolve_tensor(self, t: TensorType) -> Type:
        if not self.dim_subst:
            return t
        shape = t.shape
        new = tuple(self.rdim(d) for d in shape)
        for a, b in zip(shape, new):
            if a is not b:
                return TensorType(new, t.dtype)
        return t

    def _resolve_all(self, ts: tuple[Type, ...]) -> Generator[Any, Any, tuple[Type, ...]]:
        out = []
        for x in ts:
            x = self.find(x)
            out.append(self._resolve_tensor(x) if type(x) is TensorType
                       else (yield self._resolve(x)))
        return tuple(out)

    def _resolve(self, t: Type) -> Generator[Any, Any, Type]:
        t = self.find(t)
        tt = type(t)
        if tt is TensorType:
            return self._resolve_tensor(t)
        if tt is TupleType:
            fs = yield self._resolve_all(t.fields)
            return t if all(a is b for a, b in zip(fs, t.fields)) else TupleType(fs)
        if tt is FuncType:
            args = yield self._resolve_all(t.arg_types)
            ret = yield self._resolve(t.ret_type)
            if ret is t.ret_type and all(a is b for a, b in zip(args, t.arg_types)):
                return t
            return FuncType(args, ret, t.type_params, t.type_constraints)
        if tt is RefType:
            v = yield self._resolve(t.value)
            return t if v is t.value else RefType(v)
        if tt is TypeCall:
            if not t.args:
                return t
            args = yield self._resolve_all(t.args)
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
            else:
                stack.extend(type_children(x))
        return False

    # ------------------------------------------------------------------ unification
    def _bind(self, v: IncompleteType, t: Type) -> None:
        if type(t) is not TensorType and self._occurs(v, t):
            raise Fail(f"occurs check failed: `{fmt_type(self.resolve(t))}` contains the "
                        f"type being inferred for it (a type would contain itself)")
        self.subst[v] = t
        self.progress += 1

    def _occurs(self, v: IncompleteType, t: Type) -> bool:
        stack = [t]
        while stack:
            x = self.find(stack.pop())
            if x is v:
                return True
            stack.extend(type_children(x))
        return False

    def unify(self, a: Type, b: Type) -> None:
        """Make ``a`` and ``b`` equal or raise :class:`Fail` (``a`` is the expected side)."""
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
                    raise Fail(f"dtype mismatch: {x.dtype} does not match {y.dtype}")
                if len(x.shape) != len(y.shape):
                    raise Fail(f"rank mismatch: `{fmt_type(x)}` has {len(x.shape)} "
                                f"dimension(s), while `{fmt_type(y)}` has {len(y.shape)}")
                for i, (dx, dy) in enumerate(zip(x.shape, y.shape)):
                    self.unify_dim(dx, dy, i)
                continue
            if tx is GlobalTypeVar:
                x, tx = TypeCall(x, ()), TypeCall
            if ty is GlobalTypeVar:
                y, ty = TypeCall(y, ()), TypeCall
            if tx is not ty:
                raise Fail(f"`{fmt_type(self.resolve(x))}` does not match "
                            f"`{fmt_type(self.resolve(y))}`")
            if tx is TupleType:
                if len(x.fields) != len(y.fields):
                    raise Fail(f"a tuple of {len(x.fields)} field(s) does not match a tuple of "
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
                        raise Fail(f"`{fmt_type(x)}` and `{fmt_type(y)}` have different type "
                                    f"parameters")
                if len(x.arg_types) != len(y.arg_types):
                    raise Fail(f"a function of {len(x.arg_types)} argument(s) does not match a "
                                f"function of {len(y.arg_types)} argument(s)")
                stack.append((x.ret_type, y.ret_type))
                stack.extend(reversed(list(zip(x.arg_types, y.arg_types))))
            elif tx is RefType:
                stack.append((x.value, y.value))
            elif tx is TypeCall:
                fx, fy = x.func, y.func
                if type(fx) is GlobalTypeVar and type(fy) is GlobalTypeVar:
                    if fx.name_hint != fy.name_hint:
                        raise Fail(f"`{fmt_type(self.resolve(x))}` does not match "
                                    f"`{fmt_type(self.resolve(y))}` (ADT {fx.name_hint} is "
                                    f"not {fy.name_hint})")
                elif fx is not fy:
                    raise Fail(f"`{fmt_type(x)}` does not match `{fmt_type(y)}`")
                if len(x.args) != len(y.args):
                    raise Fail(f"`{fmt_type(x)}` and `{fmt_type(y)}` have different numbers of "
                                f"type arguments")
                stack.extend(zip(x.args, y.args))
            else:
                # TypeVar (rigid), or anything else that is not identical
                raise Fail(f"`{fmt_type(self.resolve(x))}` does not match "
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
        raise Fail(f"dimension {i} conflicts: {format_dim(a)} does not match {format_dim(b)}")

    def _bind_dim(self, v: ShapeVar, d: Dim) -> None:
        if v in dim_vars(d):
            raise Fail(f"occurs check failed: dimension {v.name} would equal "
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

        def go_all(xs: tuple[Type, ...]) -> Generator[Any, Any, tuple[Type, ...]]:
            out = []
            for x in xs:
                out.append((yield go(x)))
            return tuple(out)

        def go(x: Type) -> Generator[Any, Any, Type]:
            x = self.find(x)
            tx = type(x)
            if tx is TypeVar:
                return m.get(x, x)
            if tx is TensorType:
                if all(type(d) is int for d in x.shape):
                    return x
                return TensorType(tuple(dim(d) for d in x.shape), x.dtype)
            if tx is TupleType:
                return TupleType((yield go_all(x.fields)))
            if tx is FuncType:
                args = yield go_all(x.arg_types)
                return FuncType(args, (yield go(x.ret_type)), x.type_params, x.type_constraints)
            if tx is RefType:
                return RefType((yield go(x.value)))
            if tx is TypeCall:
                func = yield go(x.func)
                return TypeCall(func, (yield go_all(x.args)))
            return x

        out = run_generators(go(t))
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
