"""Visitor and mutator bases for pass authors.

Subclass :class:`ExprVisitor` (walks, returns nothing) or :class:`ExprMutator` (rebuilds) and
override ``visit_<node>`` methods (``visit_call``, ``visit_let``, ``visit_function``, ...);
call ``self.visit(child)`` to recurse. :class:`ExprFunctor` is the bare dispatcher for
functors returning other things (types, values, text).

Guarantees:

* **Memoized by identity**: each node is visited once; shared sub-expressions stay shared.
* **Unchanged means same node**: a mutator returns the very node it was given when nothing
  below it changed, and rebuilt nodes keep their span.
* **No recursion proportional to program size or depth**: one loop drives the walk with an
  explicit stack. A dataflow node's (call, tuple, projection, ref ops) children are visited
  before its handler runs, so ``self.visit(arg)`` inside ``visit_call`` is a memo hit. The
  handlers of the nesting nodes (let, function, if, match, clause) are generators: where a
  handler needs a child's result it writes ``r = yield child`` (and ``yield from
  super().visit_if(i)`` to extend the base), and the loop visits the child and sends back its
  result. A plain handler still works (it may call ``self.visit``), but each plain handler
  met across nesting costs Python frames. Let spines are walked as lists (override
  :meth:`ExprMutator.visit_binding` to rewrite or drop bindings; it may be a generator too).
"""
from __future__ import annotations

from types import GeneratorType
from typing import Any, ClassVar, Generator, Generic, Mapping, TypeVar as TV

from relay_ir.expr import (EXPR_TYPES, Call, Clause, Constant, Constructor, Expr, Function,
                           GlobalVar, If, Let, Match, Op, Pattern, PatternConstructor,
                           PatternTuple, PatternVar, RefCreate, RefRead, RefWrite,
                           Tuple, TupleGetItem, Var, with_fields)
from relay_ir.ty import (FuncType, RefType, TensorType, TupleType, Type, TypeCall)
from relay_ir.traversal import dataflow_children

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
        r = self.memo.get(expr, _MISSING)
        if r is not _MISSING:
            return r  # type: ignore[return-value]
        return self._drive(expr)

    def _handle(self, expr: Expr) -> Any:
        try:
            method = self._dispatch[type(expr)]
        except KeyError:
            from relay_ir.errors import InternalError
            raise InternalError(f"{type(self).__name__}: not an expression: {expr!r}") from None
        return getattr(self, method)(expr)

    def _after_children(self, node: Expr, kids: list[Expr]) -> Generator[Expr, Any, Any]:
        memo = self.memo
        for c in kids:
            if c not in memo:
                yield c
        r = self._handle(node)
        if type(r) is GeneratorType:
            r = yield from r
        return r

    def _start(self, node: Expr) -> Any:
        """The handler's result for ``node``, or a generator still to be driven."""
        if type(node) in DATAFLOW_TYPES:
            memo = self.memo
            kids = [c for c in dataflow_children(node) if c not in memo]
            if kids:
                return self._after_children(node, kids)
        return self._handle(node)

    def _drive(self, root: Expr) -> R:
        """Visit ``root`` with one loop over a stack of suspended generator handlers."""
        memo = self.memo
        r = self._start(root)
        if type(r) is not GeneratorType:
            memo[root] = r
            return r  # type: ignore[no-any-return]
        stack: list[tuple[Expr, Generator[Expr, Any, Any]]] = [(root, r)]
        send: Any = None
        exc: BaseException | None = None
        while True:
            node, gen = stack[-1]
            try:
                if exc is None:
                    child = gen.send(send)
                else:
                    e, exc = exc, None
                    child = gen.throw(e)
            except StopIteration as stop:
                stack.pop()
                send = memo[node] = stop.value
                if not stack:
                    return send  # type: ignore[no-any-return]
                continue
            except BaseException as e:  # noqa: B902 - re-raised into the yielding handler
                stack.pop()
                if not stack:
                    raise
                exc = e
                continue
            send = memo.get(child, _MISSING)
            if send is not _MISSING:
                continue
            r = self._start(child)
            if type(r) is GeneratorType:
                stack.append((child, r))
                send = None
            else:
                send = memo[child] = r

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

    def visit_let(self, let: Let) -> Generator[Expr, Any, None]:
        node = let
        while True:
            self.memo[node] = None
            yield node.var
            yield node.value
            body = node.body
            # NOTE: a let already visited elsewhere (a shared node) ends the spine here
            if type(body) is not Let or body in self.memo:
                break
            node = body
        yield body

    def visit_function(self, f: Function) -> Generator[Expr, Any, None]:
        for p in f.params:
            yield p
        self.visit_type(f.ret_type)
        yield f.body

    def visit_call(self, c: Call) -> None:
        self.visit(c.op)
        for a in c.args:
            self.visit(a)

    def visit_if(self, i: If) -> Generator[Expr, Any, None]:
        yield i.cond
        yield i.true_branch
        yield i.false_branch

    def visit_ref_create(self, r: RefCreate) -> None:
        self.visit(r.value)

    def visit_ref_read(self, r: RefRead) -> None:
        self.visit(r.ref)

    def visit_ref_write(self, r: RefWrite) -> None:
        self.visit(r.ref)
        self.visit(r.value)

    def visit_match(self, m: Match) -> Generator[Expr, Any, None]:
        yield m.data
        for c in m.clauses:
            r = self.visit_clause(c)
            if type(r) is GeneratorType:
                yield from r

    def visit_clause(self, c: Clause) -> Generator[Expr, Any, None]:
        self.visit_pattern(c.lhs)
        yield c.rhs

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

    def visit_let(self, let: Let) -> Generator[Expr, Any, Expr]:
        new: list[tuple[Let, tuple[Var, Expr] | None]] = []
        node = let
        default = type(self).visit_binding is ExprMutator.visit_binding
        while True:
            if default:
                binding: Any = ((yield node.var), (yield node.value))
            else:
                binding = self.visit_binding(node.var, node.value)
                if type(binding) is GeneratorType:
                    binding = yield from binding
            new.append((node, binding))
            body = node.body
            # NOTE: a let already visited elsewhere (a shared node) ends the spine here, so its
            # bindings are not rewritten (and bound) twice
            if type(body) is not Let or body in self.memo:
                break
            node = body
        out = yield body
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

    def visit_function(self, f: Function) -> Generator[Expr, Any, Expr]:
        params = self._visit_all(f.params)
        ret = self.visit_type(f.ret_type) if f.ret_type is not None else None
        body = yield f.body
        return with_fields(f, params=params, ret_type=ret, body=body)

    def visit_call(self, c: Call) -> Expr:
        type_args = c.type_args
        if type_args:
            new_ta = tuple(self.visit_type(t) for t in type_args)
            if all(a is b for a, b in zip(new_ta, type_args)):
                new_ta = type_args
            type_args = new_ta
        return with_fields(c, op=self.visit(c.op), args=self._visit_all(c.args),
                           type_args=type_args)

    def visit_if(self, i: If) -> Generator[Expr, Any, Expr]:
        cond = yield i.cond
        tb = yield i.true_branch
        fb = yield i.false_branch
        return with_fields(i, cond=cond, true_branch=tb, false_branch=fb)

    def visit_ref_create(self, r: RefCreate) -> Expr:
        return with_fields(r, value=self.visit(r.value))

    def visit_ref_read(self, r: RefRead) -> Expr:
        return with_fields(r, ref=self.visit(r.ref))

    def visit_ref_write(self, r: RefWrite) -> Expr:
        return with_fields(r, ref=self.visit(r.ref), value=self.visit(r.value))

    def visit_match(self, m: Match) -> Generator[Expr, Any, Expr]:
        data = yield m.data
        out = []
        for c in m.clauses:
            r = self.visit_clause(c)
            if type(r) is GeneratorType:
                r = yield from r
            out.append(r)
        clauses = tuple(out)
        if all(a is b for a, b in zip(clauses, m.clauses)):
            clauses = m.clauses
        return with_fields(m, data=data, clauses=clauses)

    def visit_clause(self, c: Clause) -> Generator[Expr, Any, Clause]:
        lhs = self.visit_pattern(c.lhs)
        rhs = yield c.rhs
        return with_fields(c, lhs=lhs, rhs=rhs)

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
