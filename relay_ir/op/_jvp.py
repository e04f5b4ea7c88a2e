"""Forward-mode (JVP) rules shared by many operators, derived from the op's structure.

A JVP rule has the signature ``jvp(call, out, tangents) -> Expr`` (see :mod:`relay_ir.op`):
``call`` is the primal call (typed atoms as arguments), ``out`` an atom holding its value,
``tangents`` one tangent per argument (a tuple expression for a tuple argument, zeros for int
and bool arguments). The result is the tangent of ``out``, built from registry operators.

* :func:`jvp_linear` -- the op is linear in all its arguments jointly (``add``, ``sum``,
  ``reshape``, ``concatenate``...): ``op(t1, ..., tn)`` with the same attributes;
* :func:`jvp_linear_in` -- linear in some arguments, the others only give shapes, indices or
  a selector (``collapse_sum_like(x, like)``, ``take(x, idx)``, ``where(c, x, y)``): those
  keep their primal values;
* :func:`jvp_multilinear` / :func:`jvp_multilinear_in` -- linear in each (float) argument
  separately (``multiply``, ``nn.dense``, ``nn.conv2d``): the product rule,
  ``sum_i op(x1, .., ti, .., xn)``;
* :func:`jvp_symmetric` -- an op whose Jacobian is symmetric: every one-input elementwise op
  keeping its dtype (a diagonal Jacobian: ``exp``, ``tanh``, ``nn.relu``...) and
  ``nn.softmax`` (``diag(y) - y y^T``). Then the JVP *is* the VJP: the gradient rule applied to
  the tangent. Derived from ``grad=``, so the two rules never disagree;
* :func:`jvp_reduce` -- a reduction (``max``, ``min``, ``prod``): the gradient rule's local
  derivative (its adjoint for a seed of ones) times the tangent, summed over the reduced axes;
* :func:`jvp_collapse` -- the same for a reduction whose result keeps the reduced axes with
  size 1 (``nn.global_max_pool2d``): ``collapse_sum_like(d out / d x * t, out)``;
* :func:`jvp_scalar` -- a scalar (0-d) result (``nn.cross_entropy``): the Jacobian is the
  gradient, so ``sum_i sum(grad_i * t_i)`` with the gradient rule seeded with one;
* :func:`jvp_zero` -- piecewise constant (``floor``, ``sign``, ``floor_divide``): zeros.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from relay_ir.expr import Call, Expr
from relay_ir.ty import TensorType, TupleType, Type

Rule = Callable[[Any, Expr, Sequence[Expr]], Expr]


def _is_float_type(t: Type | None) -> bool:
    if isinstance(t, TupleType):
        return any(_is_float_type(f) for f in t.fields)
    return isinstance(t, TensorType) and t.dtype.startswith(("float", "bfloat"))


def _op(name: str, *args: Expr, **attrs: Any) -> Expr:
    from relay_ir.op._rules import make_call
    return make_call(name, *args, **attrs)


def linearity(rule: Any) -> tuple[str, tuple[int, ...] | None] | None:
    """What a JVP rule of this module says of its operator: ``("all", positions)`` (linear in
    those arguments jointly: zeros in all of them give zeros), ``("any", positions)`` (linear
    in each separately: zeros in any one give zeros); positions None: every argument. None for
    other rules. Partial evaluation lets zeros through operators by it."""
    return getattr(rule, "linearity", None)


def jvp_linear(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """Linear in every argument jointly: ``op(t1, ..., tn)``."""
    return Call(call.op, tuple(tangents), call.attrs, call.type_args)


jvp_linear.linearity = ("all", None)  # type: ignore[attr-defined]


def jvp_linear_in(*indices: int) -> Rule:
    """Linear in the arguments at ``indices`` jointly; the others are kept as they are."""
    def rule(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
        args = tuple(tangents[i] if i in indices else a for i, a in enumerate(call.args))
        return Call(call.op, args, call.attrs, call.type_args)
    rule.__doc__ = (f"Linear in argument(s) {', '.join(map(str, indices))}: the op of their "
                    "tangents.")
    rule.linearity = ("all", indices)  # type: ignore[attr-defined]
    return rule


def jvp_multilinear_in(*indices: int) -> Rule:
    """Linear in each argument at ``indices`` separately (the others are kept): product rule."""
    def rule(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
        total: Expr | None = None
        for i, a in enumerate(call.args):
            if i not in indices or not _is_float_type(a.checked_type_):
                continue
            args = tuple(tangents[i] if j == i else b for j, b in enumerate(call.args))
            term = Call(call.op, args, call.attrs, call.type_args)
            total = term if total is None else _op("add", total, term)
        return _op("zeros_like", out) if total is None else total
    rule.__doc__ = (f"Linear in each of argument(s) {', '.join(map(str, indices))}: "
                    "``sum_i op(.., ti, ..)``.")
    rule.linearity = ("any", indices)  # type: ignore[attr-defined]
    return rule


def jvp_multilinear(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """Linear in each float argument separately: ``sum_i op(x1, .., ti, .., xn)``."""
    return jvp_multilinear_in(*range(len(call.args)))(call, out, tangents)


jvp_multilinear.linearity = ("any", None)  # type: ignore[attr-defined]


def jvp_symmetric(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """A symmetric Jacobian (elementwise ops, softmax): the gradient rule applied to the tangent."""
    from relay_ir.op import get_opdef
    return get_opdef(call.op.name).grad(call, out, tangents[0])[0]


def jvp_reduce(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """A reduction: ``sum(d out / d x * t)`` over the reduced axes (``d out / d x`` from the
    gradient rule seeded with ones; ties of ``max``/``min`` share it as that rule does)."""
    from relay_ir.op import get_opdef
    local = get_opdef(call.op.name).grad(call, out, _op("ones_like", out))[0]
    a = call.attrs
    return _op("sum", _op("multiply", local, tangents[0]), axis=a.axis, keepdims=a.keepdims,
               exclude=a.exclude)


def jvp_collapse(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """A keepdims reduction: ``collapse_sum_like(d out / d x * t, out)``."""
    from relay_ir.op import get_opdef
    local = get_opdef(call.op.name).grad(call, out, _op("ones_like", out))[0]
    return _op("collapse_sum_like", _op("multiply", local, tangents[0]), out)


def jvp_zero(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """Piecewise constant: the tangent is zero."""
    return _op("zeros_like", out)


def jvp_scalar(call: Any, out: Expr, tangents: Sequence[Expr]) -> Expr:
    """A 0-d result: ``sum_i sum(d out / d x_i * t_i)``, the gradient rule seeded with one."""
    from relay_ir.op import get_opdef
    grads = get_opdef(call.op.name).grad(call, out, _op("ones_like", out))
    total: Expr | None = None
    for a, g, t in zip(call.args, grads, tangents):
        if g is None or not _is_float_type(a.checked_type_):
            continue
        term = _op("sum", _op("multiply", g, t))
        total = term if total is None else _op("add", total, term)
    return _op("zeros_like", out) if total is None else total

