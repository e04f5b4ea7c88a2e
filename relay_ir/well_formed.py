"""Well-formedness of IR: the invariants every pass must preserve.

* every variable is bound exactly once (let, function parameter or pattern variable) and used
  only inside its scope: a let variable in its own value (recursive closures) and the rest of
  the let body, a parameter in its function body, a pattern variable in its clause;
* every global variable names a global function of the module, every constructor one of its
  type definitions;
* where types are present they agree: a let variable's annotation with its value's inferred
  type, a function's return type with its body's inferred type (``?`` dimensions and
  incomplete types match anything);
* (modules) no type annotation mentions a free type or shape variable: every ``TypeVar`` /
  ``ShapeVar`` in a variable's annotation, a function's return type or a call's type arguments
  is bound by an enclosing function's ``type_params`` (the global's or a nested literal's), or
  by a ``fn [A]`` type around it; constructor fields only use their ADT's type parameters.

The check is iterative (an explicit stack), so 100,000-binding programs are fine. Shared
sub-expressions are checked once, where they are first met (as TVM does).
"""
from __future__ import annotations

from typing import Any

from relay_ir.errors import WellFormednessError
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match,
                           Op, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.traversal import free_type_vars, pattern_vars
from relay_ir.ty import (AnyDim, FuncType, IncompleteType, RefType, TensorType, TupleType, Type,
                         TypeCall, TypeVar)


def _name(v: Var) -> str:
    return f"%{v.name_hint}"


def _tv_name(tv: Any) -> str:
    return str(getattr(tv, "name_hint", None) or getattr(tv, "name", None) or tv)


def types_consistent(a: Type | None, b: Type | None) -> bool:
    """True if ``a`` and ``b`` may denote the same type (``?`` and ``_`` match anything)."""
    if a is None or b is None:
        return True
    from relay_ir.structural import structural_equal
    stack: list[tuple[Any, Any]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y or isinstance(x, IncompleteType) or isinstance(y, IncompleteType):
            continue
        if isinstance(x, TensorType) and isinstance(y, TensorType):
            if x.dtype != y.dtype or len(x.shape) != len(y.shape):
                return False
            for dx, dy in zip(x.shape, y.shape):
                if isinstance(dx, AnyDim) or isinstance(dy, AnyDim):
                    continue
                if isinstance(dx, int) and isinstance(dy, int):
                    if dx != dy:
                        return False
                elif not structural_equal(TensorType((dx,), "int32"), TensorType((dy,), "int32"),
                                          map_free_vars=True):
                    return False
            continue
        if type(x) is not type(y):
            return False
        if isinstance(x, TupleType):
            if len(x.fields) != len(y.fields):
                return False
            stack.extend(zip(x.fields, y.fields))
        elif isinstance(x, RefType):
            stack.append((x.value, y.value))
        elif isinstance(x, FuncType):
            if len(x.arg_types) != len(y.arg_types) or len(x.type_params) != len(y.type_params):
                return False
            if x.type_params:
                if not structural_equal(x, y, map_free_vars=True):
                    return False
                continue
            stack.extend(zip(x.arg_types, y.arg_types))
            stack.append((x.ret_type, y.ret_type))
        elif isinstance(x, TypeCall):
            if len(x.args) != len(y.args):
                return False
            stack.append((x.func, y.func))
            stack.extend(zip(x.args, y.args))
        elif not structural_equal(x, y, map_free_vars=True):
            return False
    return True


class _Checker:
    def __init__(self, mod: IRModule | None, allow_free: bool) -> None:
        self.mod = mod
        self.allow_free = allow_free
        self.bound_ever: set[Var] = set()
        self.in_scope: set[Var] = set()
        self.free: list[Var] = []
        self.free_set: set[Var] = set()
        self.seen: set[int] = set()
        self.where = ""
        # NOTE: type/shape variables in scope (a count per binder: nested literals may rebind).
        # None: free type variables are not checked (an expression checked on its own).
        self.tvars: dict[Any, int] | None = None if allow_free else {}

    def fail(self, msg: str, node: Any) -> None:
        where = f" (in @{self.where})" if self.where else ""
        raise WellFormednessError(msg + where, getattr(node, "span", None))

    def bind(self, v: Var, site: Any) -> None:
        if type(v) is not Var:
            self.fail(f"a binder must be a variable, found {type(v).__name__}", site)
        if v in self.bound_ever:
            self.fail(f"variable {_name(v)} is bound more than once", v)
        if v in self.free_set:
            self.fail(f"variable {_name(v)} is used outside its scope before it is bound", v)
        self.bound_ever.add(v)
        self.in_scope.add(v)

    def run(self, root: Expr) -> None:
        # Events: ("e", expr) visit; ("b", var, site) bind; ("u", vars) leave scope.
        stack: list[tuple] = [("e", root)]
        while stack:
            ev = stack.pop()
            kind = ev[0]
            if kind == "b":
                self.bind(ev[1], ev[2])
                self.check_type_closed(ev[1].type_annotation, ev[1],
                                       f"the annotation of {_name(ev[1])}")
                continue
            if kind == "r":
                self.check_type_closed(ev[1].ret_type, ev[1], "the function's return type")
                continue
            if kind == "u":
                for v in ev[1]:
                    self.in_scope.discard(v)
                continue
            if kind == "tb" or kind == "tu":
                if self.tvars is not None:
                    step = 1 if kind == "tb" else -1
                    for tv in ev[1]:
                        self.tvars[tv] = self.tvars.get(tv, 0) + step
                continue
            e = ev[1]
            t = type(e)
            if t is Var:
                if e not in self.in_scope:
                    if e in self.bound_ever or not self.allow_free:
                        self.fail(f"variable {_name(e)} is used out of its scope", e)
                    if e not in self.free_set:
                        self.free_set.add(e)
                        self.free.append(e)
                continue
            if id(e) in self.seen:
                continue
            self.seen.add(id(e))
            if t is GlobalVar:
                if self.mod is not None and e.name_hint not in self.mod:
                    self.fail(f"global @{e.name_hint} is not defined in the module", e)
            elif t is Constructor:
                self.check_constructor(e)
            elif t in (Constant, Op):
                if t is Constant and not hasattr(e.data, "dtype"):
                    self.fail("a constant must hold a numpy array", e)
            elif t is Let:
                lets, body = [e], e.body
                while type(body) is Let and id(body) not in self.seen:  # NOTE: shared lets
                    lets.append(body)                                   # end the spine
                    body = body.body
                vars_ = []
                stack.append(("u", vars_))
                stack.append(("e", body))
                for lt in reversed(lets):
                    self.seen.add(id(lt))
                    vars_.append(lt.var)
                    self.check_annotation(lt.var, lt.value)
                    stack.append(("e", lt.value))
                    stack.append(("b", lt.var, lt))
            elif t is Function:
                if e.ret_type is not None and e.body.checked_type_ is not None and \
                        not types_consistent(e.ret_type, e.body.checked_type_):
                    self.fail(f"function return type {e.ret_type!r} disagrees with its body's "
                              f"type {e.body.checked_type_!r}", e)
                stack.append(("tu", e.type_params))
                stack.append(("u", list(e.params)))
                stack.append(("e", e.body))
                for p in reversed(e.params):
                    stack.append(("b", p, e))
                stack.append(("r", e))
                stack.append(("tb", e.type_params))
            elif t is Match:
                for c in reversed(e.clauses):
                    pvs = pattern_vars(c.lhs)
                    self.check_pattern_constructors(c.lhs)
                    stack.append(("u", pvs))
                    stack.append(("e", c.rhs))
                    for v in reversed(pvs):
                        stack.append(("b", v, c))
                stack.append(("e", e.data))
            elif t is Call:
                if self.tvars is not None and e.type_args and type(e.op) is not Op:
                    for ta in e.type_args:  # NOTE: a shape argument is a Dim, not a Type
                        ty = ta if isinstance(ta, Type) else TensorType((ta,), "int32")
                        self.check_type_closed(ty, e, "a type argument of the call")
                for a in reversed(e.args):
                    stack.append(("e", a))
                stack.append(("e", e.op))
            elif t is Tuple:
                for f in reversed(e.fields):
                    stack.append(("e", f))
            elif t is TupleGetItem:
                if e.index < 0:
                    self.fail(f"negative tuple index {e.index}", e)
                stack.append(("e", e.tuple_value))
            elif t is If:
                stack.append(("e", e.false_branch))
                stack.append(("e", e.true_branch))
                stack.append(("e", e.cond))
            elif t is RefCreate:
                stack.append(("e", e.value))
            elif t is RefRead:
                stack.append(("e", e.ref))
            elif t is RefWrite:
                stack.append(("e", e.value))
                stack.append(("e", e.ref))
            else:
                self.fail(f"not an expression: {type(e).__name__}", e)

    def check_type_closed(self, t: Type | None, node: Any, what: str) -> None:
        """Fail if ``t`` mentions a type or shape variable that no enclosing binder binds."""
        if t is None or self.tvars is None:
            return
        for tv in free_type_vars(t):
            if not self.tvars.get(tv):
                kind = "type" if isinstance(tv, TypeVar) else "shape"
                self.fail(f"{what} mentions the {kind} variable `{_tv_name(tv)}`, which no "
                          f"enclosing function or type binds", node)

    def check_type_definitions(self) -> None:
        """Constructor fields only use their ADT's type parameters."""
        if self.mod is None:
            return
        for td in self.mod.type_definitions.values():
            bound = set(td.type_params)
            for c in td.constructors:
                for inp in c.inputs:
                    for tv in free_type_vars(inp):
                        if tv not in bound:
                            self.fail(f"constructor {c.name_hint} of type "
                                      f"{td.header.name_hint} mentions `{_tv_name(tv)}`, which "
                                      f"is not a type parameter of {td.header.name_hint}", c)

    def check_annotation(self, var: Var, value: Expr) -> None:
        vt = value.checked_type_  # NOTE: inferred types only; user annotations are InferType's
        ann = var.type_annotation
        if ann is not None and vt is not None and not types_consistent(ann, vt):
            self.fail(f"let variable {_name(var)} is annotated {ann!r} but its value has type "
                      f"{vt!r}", var)

    def check_constructor(self, c: Constructor) -> None:
        if self.mod is None:
            return
        known = self.mod.constructors.get(c.name_hint)
        if known is None:
            self.fail(f"constructor {c.name_hint} is not defined in the module", c)

    def check_pattern_constructors(self, p: Any) -> None:
        from relay_ir.expr import PatternConstructor, PatternTuple
        stack = [p]
        while stack:
            q = stack.pop()
            if isinstance(q, PatternConstructor):
                self.check_constructor(q.constructor)
                stack.extend(q.patterns)
            elif isinstance(q, PatternTuple):
                stack.extend(q.patterns)


def check(node: IRModule | Expr, mod: IRModule | None = None, *, allow_free: bool = True
          ) -> None:
    """Raise :class:`~relay_ir.errors.WellFormednessError` if ``node`` is not well formed.

    For a module every global function is checked (no free variables allowed, and one variable
    is never bound in two globals). For an expression, free variables are allowed when
    ``allow_free`` (they must still not also be bound inside); ``mod`` resolves globals and
    constructors.
    """
    if isinstance(node, IRModule):
        c = _Checker(node, allow_free=False)
        c.check_type_definitions()
        for name, fn in node.functions.items():
            c.where = name
            if not isinstance(fn, Function):
                c.fail(f"global @{name} is not a function", fn)
            c.run(fn)
        return
    _Checker(mod, allow_free).run(node)


def well_formed(node: IRModule | Expr, mod: IRModule | None = None) -> bool:
    """True if :func:`check` finds nothing wrong."""
    try:
        check(node, mod)
        return True
    except WellFormednessError:
        return False
