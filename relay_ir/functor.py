"""Visitor and mutator bases for pass authors.

Subclass :class:`ExprVisitor` (walks, returns nothing) or :class:`ExprMutator` (rebuilds) and
override ``visit_<node>`` methods (``visit_call``, ``visit_let``, ``visit_function``, ...);
call ``self.visit(child)`` to recurse. :class:`ExprFunctor` is the bare dispatcher for
functors returning other things (types, values, text).

Guarantees:

* **Memoized by identity**: each node is visited once; shared sub-expressions stay shared.
* **Unchanged means same node**: a mutator returns the very node it was given when nothing
  below it changed, and rebuilt nodes keep their span.
* **No recursion proportional to program size**: before a dataflow node (call, tuple,
  projection, ref ops) is handled, its dataflow descendants are handled in post-order with an
  explicit stack, so ``self.visit(arg)`` inside ``visit_call`` is a memo hit. Let spines are
  walked as lists (override :meth:`ExprMutator.visit_binding` to rewrite or drop bindings).
  Python recursion happens only across function, if and match nesting.
"""
from __future__ import annotations

from typing import Any, ClassVar, Generic, Mapping, TypeVar as TV

from relay_ir.expr import (EXPR_TYPES, Call, Clause, Constant, Constructor, Expr, Function,
                           GlobalVar, If, Let, Match, Op, Pattern, PatternConstructor,
                           PatternTuple, PatternVar, RefCreate, RefRead, RefWrite,
                           Tuple, TupleGetItem, Var, with_fields)
from relay_ir.ty import (FuncType, RefType, TensorType, TupleType, Type, TypeCall)
from relay_ir.traversal import dataflow_post_order

R = TV("R")

_MISSING = object()
DATAFLOW_TYPES: frozenset[type] = frozenset({Call, Tuple, TupleGetItem, RefCreate, RefRead,
                                             RefWrite})


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class ExprFunctor(Generic[R]):
    """Dispatch on node type to ``visit_<snake_case_name>``, memoized by node identity."""

    _dispatch: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = {t: f"visit_{_snake(t.__name__)}" for t in EXPR_TYPES}

    def __init__(self) -> None:
        self.memo: dict[Expr, R] = {}

    def visit(self, expr: Expr) -> R:
        """Visit ``expr`` (once; later calls return the memoized result)."""
        memo = self.memo
        r = memo.get(expr, _MISSING)
        if r is not _MISSING:
            return r  # type: ignore[return-value]
        if type(expr) in DATAFLOW_TYPES:
            self._visit_dataflow(expr)
            return memo[expr]
        r = self._handle(expr)
        memo[expr] = r
        return r

    def _handle(self, expr: Expr) -> R:
        try:
            method = self._dispatch[type(expr)]
        except KeyError:
            from relay_ir.errors import InternalError
            raise InternalError(f"{type(self).__name__}: not an expression: {expr!r}") from None
        return getattr(self, method)(expr)

    def _visit_dataflow(self, root: Expr) -> None:
        memo = self.memo
        for node in dataflow_post_order(root, memo):
            memo[node] = self._handle(node)

    def visit_pattern(self, p: Pattern) -> Any:
        """Visit a match pattern (not memoized)."""
        raise NotImplementedError(f"{type(self).__name__} does not handle patterns")

    # Every visit_<node> must be provided by the subclass.
    def _unhandled(self, e: Expr) -> R:
        raise NotImplementedError(f"{type(self).__name__} has no visit_{_snake(type(e).__name__)}")

    visit_var = visit_global_var = visit_constant = visit_op = visit_constructor = _unhandled
    visit_tuple = visit_tuple_get_item = visit_let = visit_function = visit_call = _unhandled
    visit_if = visit_ref_create = visit_ref_read = visit_ref_write = visit_match = _unhandled


ExprFunctor._dispatch = {t: f"visit_{_snake(t.__name__)}" for t in EXPR_TYPES}


class ExprVisitor(ExprFunctor[None]):
    """Walks every node once; override ``visit_<node>`` and call the base to keep walking."""

    def visit_var(self, v: Var) -> None:
        self.visit_type(v.type_annotation)

    def visit_global_var(self, g: GlobalVar) -> None:
        pass

    def visit_constant(self, c: Constant) -> None:
        pass

    def visit_op(self, op: Op) -> None:
        pass

    def visit_constructor(self, c: Constructor) -> None:
        pass

    def visit_tuple(self, t: Tuple) -> None:
        for f in t.fields:
            self.visit(f)

    def visit_tuple_get_item(self, t: TupleGetItem) -> None:
        self.visit(t.tuple_value)

    def visit_let(self, let: Let) -> None:
        node = let
        while True:
            self.memo[node] = None
            self.visit(node.var)
            self.visit(node.value)
            body = node.body
            # NOTE: a let already visited elsewhere (a shared node) ends the spine here
            if type(body) is not Let or body in self.memo:
                break
            node = body
        self.visit(body)

    def visit_function(self, f: Function) -> None:
        for p in f.params:
            self.visit(p)
        self.visit_type(f.ret_type)
        self.visit(f.body)

    def visit_call(self, c: Call) -> None:
        self.visit(c.op)
        for a in c.args:
            self.visit(a)

    def visit_if(self, i: If) -> None:
        self.visit(i.cond)
        self.visit(i.true_branch)
        self.visit(i.false_branch)

    def visit_ref_create(self, r: RefCreate) -> None:
        self.visit(r.value)

    def visit_ref_read(self, r: RefRead) -> None:
        self.visit(r.ref)

    def visit_ref_write(self, r: RefWrite) -> None:
        self.visit(r.ref)
        self.visit(r.value)

    def visit_match(self, m: Match) -> None:
        self.visit(m.data)
        for c in m.clauses:
            self.visit_clause(c)

    def visit_clause(self, c: Clause) -> None:
        self.visit_pattern(c.lhs)
        self.visit(c.rhs)

    def visit_pattern(self, p: Pattern) -> None:
        if isinstance(p, PatternVar):
            self.visit(p.var)
        elif isinstance(p, PatternConstructor):
            self.visit(p.constructor)
            for q in p.patterns:
                self.visit_pattern(q)
        elif isinstance(p, PatternTuple):
            for q in p.patterns:
                self.visit_pattern(q)

    def visit_type(self, t: Type | None) -> None:
        """Hook for types met on the way (annotations, return types); does nothing."""


class ExprMutator(ExprFunctor[Expr]):
    """Rebuilds the expression bottom-up; a node nothing changed under is returned as is."""

    def visit_var(self, v: Var) -> Expr:
        ann = self.visit_type(v.type_annotation) if v.type_annotation is not None else None
        return with_fields(v, type_annotation=ann)

    def visit_global_var(self, g: GlobalVar) -> Expr:
        return g

    def visit_constant(self, c: Constant) -> Expr:
        return c

    def visit_op(self, op: Op) -> Expr:
        return op

    def visit_constructor(self, c: Constructor) -> Expr:
        return c

    def visit_tuple(self, t: Tuple) -> Expr:
        return with_fields(t, fields=self._visit_all(t.fields))

    def visit_tuple_get_item(self, t: TupleGetItem) -> Expr:
        return with_fields(t, tuple_value=self.visit(t.tuple_value))

    def visit_binding(self, var: Var, value: Expr) -> tuple[Var, Expr] | None:
        """Rewrite one let binding; return None to drop it. Default: visit both."""
        new_var = self.visit(var)
        return new_var, self.visit(value)  # type: ignore[return-value]

    def visit_let(self, let: Let) -> Expr:
        new: list[tuple[Let, tuple[Var, Expr] | None]] = []
        node = let
        while True:
            new.append((node, self.visit_binding(node.var, node.value)))
            body = node.body
            # NOTE: a let already visited elsewhere (a shared node) ends the spine here, so its
            # bindings are not rewritten (and bound) twice
            if type(body) is not Let or body in self.memo:
                break
            node = body
        out = self.visit(body)
        for node, binding in reversed(new):
            if binding is None:
                continue
            var, value = binding
            if var is node.var and value is node.value and out is node.body:
                out = node
            else:
                out = Let(var, value, out, span=node.span)
            self.memo[node] = out
        return out

    def visit_function(self, f: Function) -> Expr:
        params = self._visit_all(f.params)
        ret = self.visit_type(f.ret_type) if f.ret_type is not None else None
        return with_fields(f, params=params, ret_type=ret, body=self.visit(f.body))

    def visit_call(self, c: Call) -> Expr:
        type_args = c.type_args
        if type_args:
            new_ta = tuple(self.visit_type(t) for t in type_args)
            if all(a is b for a, b in zip(new_ta, type_args)):
                new_ta = type_args
            type_args = new_ta
        return with_fields(c, op=self.visit(c.op), args=self._visit_all(c.args),
                           type_args=type_args)

    def visit_if(self, i: If) -> Expr:
        return with_fields(i, cond=self.visit(i.cond), true_branch=self.visit(i.true_branch),
                           false_branch=self.visit(i.false_branch))

    def visit_ref_create(self, r: RefCreate) -> Expr:
        return with_fields(r, value=self.visit(r.value))

    def visit_ref_read(self, r: RefRead) -> Expr:
        return with_fields(r, ref=self.visit(r.ref))

    def visit_ref_write(self, r: RefWrite) -> Expr:
        return with_fields(r, ref=self.visit(r.ref), value=self.visit(r.value))

    def visit_match(self, m: Match) -> Expr:
        data = self.visit(m.data)
        clauses = tuple(self.visit_clause(c) for c in m.clauses)
        if all(a is b for a, b in zip(clauses, m.clauses)):
            clauses = m.clauses
        return with_fields(m, data=data, clauses=clauses)

    def visit_clause(self, c: Clause) -> Clause:
        return with_fields(c, lhs=self.visit_pattern(c.lhs), rhs=self.visit(c.rhs))

    def visit_pattern(self, p: Pattern) -> Pattern:
        if isinstance(p, PatternVar):
            return with_fields(p, var=self.visit(p.var))
        if isinstance(p, PatternConstructor):
            pats = tuple(self.visit_pattern(q) for q in p.patterns)
            if all(a is b for a, b in zip(pats, p.patterns)):
                pats = p.patterns
            return with_fields(p, constructor=self.visit(p.constructor), patterns=pats)
        if isinstance(p, PatternTuple):
            pats = tuple(self.visit_pattern(q) for q in p.patterns)
            if all(a is b for a, b in zip(pats, p.patterns)):
                pats = p.patterns
            return with_fields(p, patterns=pats)
        return p

    def visit_type(self, t: Type) -> Type:
        """Hook to rewrite types in annotations, return types and type args; identity."""
        return t

    def _visit_all(self, items: tuple[Expr, ...]) -> tuple[Expr, ...]:
        out = tuple(self.visit(x) for x in items)
        if all(a is b for a, b in zip(out, items)):
            return items
        return out


class _Subst(ExprMutator):
    """``e[x := v, ...]``: variables replaced per a mapping, everything else rebuilt."""

    def __init__(self, subst: Mapping[Var, Expr]):
        super().__init__()
        self.subst = subst

    def visit_var(self, v: Var) -> Expr:
        return self.subst.get(v, v)


def substitute(e: Expr, subst: Mapping[Var, Expr]) -> Expr:
    """``e`` with each variable in ``subst`` replaced by its expression (``e`` if none occurs).

    Binders are not renamed: the replacements must not capture (callers substitute fresh or
    global expressions, as lambda lifting and reference forwarding do).
    """
    return _Subst(subst).visit(e) if subst else e


# ----------------------------------------------------------------------------- types
class TypeFunctor(Generic[R]):
    """Dispatch on type class to ``visit_<snake_case_name>`` (types are small: recursive)."""

    def visit(self, t: Type) -> R:
        method = getattr(self, f"visit_{_snake(type(t).__name__)}", None)
        if method is None:
            raise NotImplementedError(f"{type(self).__name__} cannot visit {type(t).__name__}")
        return method(t)


class TypeVisitor(TypeFunctor[None]):
    """Walks every sub-type."""

    def visit_tensor_type(self, t: TensorType) -> None:
        pass

    def visit_tuple_type(self, t: TupleType) -> None:
        for f in t.fields:
            self.visit(f)

    def visit_func_type(self, t: FuncType) -> None:
        for a in t.arg_types:
            self.visit(a)
        self.visit(t.ret_type)

    def visit_ref_type(self, t: RefType) -> None:
        self.visit(t.value)

    def visit_type_call(self, t: TypeCall) -> None:
        self.visit(t.func)
        for a in t.args:
            self.visit(a)

    def visit_type_var(self, t: Type) -> None:
        pass

    visit_global_type_var = visit_incomplete_type = visit_type_var

    def visit_type_data(self, t: Any) -> None:
        for c in t.constructors:
            for i in c.inputs:
                self.visit(i)


class TypeMutator(TypeFunctor[Type]):
    """Rebuilds types; returns the same object when nothing changed."""

    def visit_tensor_type(self, t: TensorType) -> Type:
        return t

    def visit_tuple_type(self, t: TupleType) -> Type:
        fields = tuple(self.visit(f) for f in t.fields)
        return t if all(a is b for a, b in zip(fields, t.fields)) else TupleType(fields)

    def visit_func_type(self, t: FuncType) -> Type:
        args = tuple(self.visit(a) for a in t.arg_types)
        ret = self.visit(t.ret_type)
        if ret is t.ret_type and all(a is b for a, b in zip(args, t.arg_types)):
            return t
        return FuncType(args, ret, t.type_params, t.type_constraints)

    def visit_ref_type(self, t: RefType) -> Type:
        v = self.visit(t.value)
        return t if v is t.value else RefType(v)

    def visit_type_call(self, t: TypeCall) -> Type:
        func = self.visit(t.func)
        args = tuple(self.visit(a) for a in t.args)
        if func is t.func and all(a is b for a, b in zip(args, t.args)):
            return t
        return TypeCall(func, args)

    def visit_type_var(self, t: Type) -> Type:
        return t

    visit_global_type_var = visit_incomplete_type = visit_type_var
