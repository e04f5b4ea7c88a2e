"""Helpers for the operator gradient-rule tests (tests/test_op_grad.py).

* :func:`rule_function` turns an operator's ``OpDef.grad`` rule into a typed function
  ``fn(args..., out, out_grad) { (adjoint_1, ..., adjoint_n) }`` run by the interpreter;
* :func:`vjp` is a compact first-order reverse sweep over the dataflow of such a function (calls,
  tuples, projections, constants) that applies the registry's rules again: it builds the adjoint
  expressions of a function's parameters for a given output seed. Used for second order.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relay_ir import runtime
from relay_ir.expr import (Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.op._rules import make_call
from relay_ir.passes.type_infer import infer_type
from relay_ir.traversal import post_order
from relay_ir.ty import TensorType, TupleType, Type


def type_of_value(v: Any) -> Type:
    """The static type of a numpy array or a tuple of them."""
    if isinstance(v, tuple):
        return TupleType(tuple(type_of_value(x) for x in v))
    return TensorType(tuple(v.shape), str(v.dtype))


def leaves(v: Any) -> list[np.ndarray]:
    """Tensor leaves of a nested tuple value."""
    if isinstance(v, tuple):
        out: list[np.ndarray] = []
        for x in v:
            out.extend(leaves(x))
        return out
    return [np.asarray(v)]


def rebuild(template: Any, flat: list[np.ndarray]) -> Any:
    """Values of ``flat`` (consumed in order) shaped like ``template``."""
    if isinstance(template, tuple):
        return tuple(rebuild(t, flat) for t in template)
    return flat.pop(0)


def is_float(a: np.ndarray) -> bool:
    """True for float arrays."""
    return a.dtype.kind == "f"


def inner(a: Any, b: Any) -> float:
    """Sum of elementwise products over the float leaves of two values of one structure."""
    return float(sum(np.sum(x.astype("float64") * y.astype("float64"))
                     for x, y in zip(leaves(a), leaves(b)) if is_float(x)))


def typed_call(name: str, args: Sequence[Any], attrs: dict[str, Any]
               ) -> tuple[list[Var], Call, Type]:
    """Parameters typed like ``args`` and the typed call ``name(params, attrs)``."""
    params = [Var(f"a{i}", type_of_value(a)) for i, a in enumerate(args)]
    body = infer_type(Function(tuple(params), make_call(name, *params, **attrs)))
    call = body.body
    return list(body.params), call, call.checked_type


def rule_function(name: str, args: Sequence[Any], attrs: dict[str, Any]) -> Function:
    """``fn(args..., out, out_grad) { rule(call, out, out_grad) }``, type-checked."""
    params, call, out_t = typed_call(name, args, attrs)
    out = Var("out", out_t)
    g = Var("g", out_t)
    grads = get_opdef(name).grad(call, out, g)
    return infer_type(Function(tuple(params) + (out, g), Tuple(tuple(grads))))


def run(fn: Function, *vals: Any) -> Any:
    """Evaluate ``fn`` on ``vals`` with the interpreter."""
    return runtime.evaluate(IRModule.from_expr(fn), *vals)


def op_value(name: str, args: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The operator's numpy reference result."""
    od = get_opdef(name)
    return od.impl(list(args), od.make_attrs(attrs))


# ----------------------------------------------------------------------------- reverse sweep
def _add(a: Expr | None, b: Expr, t: Type) -> Expr:
    if a is None:
        return b
    if isinstance(t, TupleType):
        return Tuple(tuple(_add(TupleGetItem(a, i), TupleGetItem(b, i), ft)
                           for i, ft in enumerate(t.fields)))
    return make_call("add", a, b)


def _zeros(e: Expr, t: Type) -> Expr:
    if isinstance(t, TupleType):
        return Tuple(tuple(_zeros(TupleGetItem(e, i), ft) for i, ft in enumerate(t.fields)))
    return make_call("zeros_like", e)


def vjp(fn: Function) -> Function:
    """``fn'(params..., seed) = (adjoint of each parameter)`` for a typed dataflow ``fn``.

    The body of ``fn`` may use calls of operators, tuples, projections, constants and the
    parameters; each call's adjoint is pushed to its arguments by the operator's own rule
    (``non_differentiable`` ops contribute nothing). The result is type-checked.
    """
    body = fn.body
    seed = Var("seed", body.checked_type)
    order = [n for n in post_order(body) if not isinstance(n, Op)]
    adj: dict[int, Expr] = {id(body): seed}
    for node in reversed(order):
        a = adj.get(id(node))
        if a is None or isinstance(node, (Var, Constant)):
            continue
        if isinstance(node, Tuple):
            for i, f in enumerate(node.fields):
                adj[id(f)] = _add(adj.get(id(f)), TupleGetItem(a, i), f.checked_type)
        elif isinstance(node, TupleGetItem):
            tv = node.tuple_value
            tt = tv.checked_type
            parts = tuple(a if i == node.index else _zeros(TupleGetItem(tv, i), ft)
                          for i, ft in enumerate(tt.fields))
            adj[id(tv)] = _add(adj.get(id(tv)), Tuple(parts), tt)
        elif isinstance(node, Call) and isinstance(node.op, Op):
            od = get_opdef(node.op.name)
            if od.non_differentiable:
                continue
            assert od.grad is not None, f"no gradient rule for {od.name}"
            grads = od.grad(node, node, a)
            for arg, ga in zip(node.args, grads):
                adj[id(arg)] = _add(adj.get(id(arg)), ga, arg.checked_type)
        else:  # pragma: no cover - the rule functions are pure dataflow
            raise AssertionError(f"vjp: unsupported node {type(node).__name__}")
    outs = tuple(adj.get(id(p)) or _zeros(p, p.checked_type) for p in fn.params)
    return infer_type(Function(fn.params + (seed,), Tuple(outs)))
