"""LambdaLift: every nested function literal becomes a global function.

Representation (Relay's, kept so the compiled executor can allocate closures):

* A nested function with **no free variables** becomes a plain global and the literal is
  replaced by the global's name::

      fn (%x) { let %f = fn (%y) { add(%y, 1f) }; %f(%x) }
        =>  def @main_lifted_0(%y) { add(%y, 1f) }
            fn (%x) { let %f = @main_lifted_0; %f(%x) }

* A nested function **with** free variables ``%a, %b`` (in order of first use) becomes a
  global taking the environment explicitly and *returning* the inner function, marked with
  the attribute ``Closure=1``; the literal is replaced by a call that builds the closure::

      fn (%a) { fn (%y) { add(%y, %a) } }
        =>  def @main_lifted_0(%a1) -> fn(..) { fn (%y) { add(%y, %a1) } }   /* Closure=1 */
            fn (%a) { @main_lifted_0(%a) }

  The executor treats ``@g(env...)`` of a ``Closure=1`` global as closure allocation: the
  inner function's only free variables are the global's parameters.
* A **recursive** let-bound function ``let %f = fn (..) { ... %f ... }`` does not capture
  itself: inside the lifted body every ``%f`` becomes ``@g(env...)`` (or ``@g`` with no
  environment), and the let becomes ``let %f = @g(env...)``.

Functions are lifted innermost first, so lifted bodies contain no function literals except
the inner function of a ``Closure=1`` global. Primitive (fused) functions are left in place.
Free type and shape variables of a lifted function (from an enclosing polymorphic function)
become type parameters of the global. Parameter types of the environment come from the
variables' annotations, so run after InferType for fully annotated globals. The pass is
idempotent and never mutates its input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generator

from relay_ir.attrs import Attrs
from relay_ir.expr import Call, Expr, Function, GlobalVar, Var, type_of, with_fields
from relay_ir.functor import ExprMutator, substitute
from relay_ir.module import IRModule
from relay_ir.passes.pass_manager import Pass, PassContext
from relay_ir.traversal import bound_vars, free_type_vars, free_vars, post_order
from relay_ir.ty import FuncType, Type


def is_closure_global(fn: Function) -> bool:
    """True for a lifted global that builds a closure (attribute ``Closure=1``)."""
    return bool(fn.attrs.get("Closure", 0)) and isinstance(fn.body, Function)


class _Lifter(ExprMutator):
    def __init__(self, owner: str, taken: set[str], lifted: dict[str, Function]):
        super().__init__()
        self.owner = owner
        self.taken = taken
        self.lifted = lifted

    def _fresh_global(self) -> GlobalVar:
        k = 0
        while f"{self.owner}_lifted_{k}" in self.taken:
            k += 1
        name = f"{self.owner}_lifted_{k}"
        self.taken.add(name)
        return GlobalVar(name)

    def visit_function(self, f: Function) -> Any:
        if f.is_primitive:
            return f
        return self._lift(f, None)

    def visit_binding(self, var: Var, value: Expr) -> Generator[Expr, Any, tuple[Var, Expr]]:
        if type(value) is Function and not value.is_primitive and var in free_vars(value):
            new = yield from self._lift(value, var)
            self.memo[value] = new
            return var, new
        return ((yield var), (yield value))

    def _lift(self, f: Function, self_var: Var | None) -> Generator[Expr, Any, Expr]:
        body = yield f.body
        f2 = with_fields(f, body=body)
        fvs = [v for v in free_vars(f2) if v is not self_var]
        gv = self._fresh_global()
        tparams = _free_type_params(f2, fvs)
        if not fvs:
            inner = substitute(f2, {self_var: gv}) if self_var is not None else f2
            assert isinstance(inner, Function)
            glob = Function(inner.params, inner.body, inner.ret_type,
                            tuple(tparams) + tuple(inner.type_params), inner.attrs,
                            span=f.span)
            self.lifted[gv.name_hint] = glob
            return gv
        env = [Var(v.name_hint, type_of(v), span=v.span) for v in fvs]
        subst: dict[Var, Expr] = dict(zip(fvs, env))
        if self_var is not None:
            subst[self_var] = Call(gv, tuple(env), span=f.span)
        inner = substitute(f2, subst)
        assert isinstance(inner, Function)
        try:
            ret: Type | None = inner.checked_type
        except ValueError:
            ret = None
        if ret is not None and not isinstance(ret, FuncType):
            ret = None
        glob = Function(tuple(env), inner, ret, tuple(tparams), Attrs({"Closure": 1}),
                        span=f.span)
        self.lifted[gv.name_hint] = glob
        return Call(gv, tuple(fvs), span=f.span)


def _free_type_params(f: Function, fvs: list[Var]) -> list:
    """Type/shape variables the lifted global must bind (free in ``f`` and its environment)."""
    types: list[Type] = []
    for v in (*fvs, *bound_vars(f)):
        t = type_of(v)
        if t is not None:
            types.append(t)
    if f.ret_type is not None:
        types.append(f.ret_type)
    own: set = set(f.type_params)
    for node in post_order(f.body):
        if isinstance(node, Function):
            own.update(node.type_params)
            if node.ret_type is not None:
                types.append(node.ret_type)
    out: dict = {}
    for t in types:
        for tv in free_type_vars(t):
            if tv not in own:
                out[tv] = None
    return list(out)


@dataclass(frozen=True)
class LambdaLift(Pass):
    """Closures become globals taking their free variables explicitly.

    ``fn(..){ ... fn(ys){e} ... } => def @g(fvs) { fn(ys){e} } /*Closure=1*/`` and the literal
    becomes ``@g(fvs)`` (just ``@g``, a plain global, when there are no free variables).
    """

    name: ClassVar[str] = "lambda-lift"
    opt_level: ClassVar[int] = 0

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        taken = set(mod.functions)
        lifted: dict[str, Function] = {}
        changed: dict[str, Function] = {}
        for gname, fn in mod.functions.items():
            if fn.is_primitive:
                continue
            inner_body = fn.body.body if is_closure_global(fn) else fn.body  # type: ignore
            if not any(type(n) is Function for n in post_order(inner_body)):
                continue  # NOTE: nothing to lift; a scan is cheaper than a rebuild
            lifter = _Lifter(gname, taken, lifted)
            if is_closure_global(fn):
                inner = fn.body
                assert isinstance(inner, Function)
                new_inner = with_fields(inner, body=lifter.visit(inner.body))
                new = with_fields(fn, body=new_inner)
            else:
                new = with_fields(fn, body=lifter.visit(fn.body))
            if new is not fn:
                changed[gname] = new
        if not changed and not lifted:
            return mod
        out = mod.with_functions(changed)
        return out.with_functions(lifted) if lifted else out
