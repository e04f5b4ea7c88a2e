"""Building blocks of the reverse-mode rules (``OpDef.grad``) of the operator library.

Every rule has the signature ``rule(call, out, out_grad) -> tuple[Expr, ...]`` documented in
:mod:`relay_ir.op` and builds its adjoints only from registry operators (through
:func:`op`), tuples, projections and constants, so that its output can be differentiated again.
:func:`grad_rule` wraps a rule so that integer and bool arguments always get zeros, whatever
the rule computes for them.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.errors import DiagnosticError, InternalError
from relay_ir.expr import Constant, Expr, Tuple, TupleGetItem, const
from relay_ir.op._rules import make_call
from relay_ir.ty import AnyDim, TensorType, TupleType, Type

Rule = Callable[[Any, Expr, Expr], tuple]


class GradientRuleError(DiagnosticError):
    """An operator's gradient rule cannot handle this call (e.g. it needs static shapes)."""

    kind = "gradient error"


def op(name: str, *args: Expr, **attrs: Any) -> Expr:
    """The call ``name(args, attrs)`` (full attribute record)."""
    return make_call(name, *args, **attrs)


def type_of(e: Expr) -> Type:
    """The checked type of an atom (constants: from their data)."""
    if isinstance(e, Constant) and e.checked_type_ is None:
        return TensorType(tuple(e.data.shape), str(e.data.dtype))
    return e.checked_type


def tensor_type(e: Expr) -> TensorType:
    """The checked tensor type of an atom; InternalError for anything else."""
    t = type_of(e)
    if not isinstance(t, TensorType):
        raise InternalError(f"gradient rule expected a tensor argument, found {t!r}")
    return t


def static_shape(e: Expr, call: Any) -> tuple[int, ...]:
    """The static shape of a tensor atom; a :class:`GradientRuleError` at ``call`` otherwise."""
    t = tensor_type(e)
    if not all(isinstance(d, int) for d in t.shape):
        from relay_ir.op._rules import fmt_type
        raise GradientRuleError(f"the gradient of `{call.op.name}` needs static shapes, found "
                                f"{fmt_type(t)}", call.span)
    return tuple(t.shape)  # type: ignore[return-value]


def is_float_type(t: Type) -> bool:
    """True for tensors of a floating dtype."""
    return isinstance(t, TensorType) and t.dtype.startswith("float")


def has_float(t: Type) -> bool:
    """True when a tensor tree has a float leaf."""
    if isinstance(t, TupleType):
        return any(has_float(f) for f in t.fields)
    return is_float_type(t)


def scalar(value: float, like: Expr) -> Constant:
    """A 0-d constant of ``like``'s dtype."""
    return const(np.asarray(value, dtype=tensor_type(like).dtype))


def field(e: Expr, i: int) -> Expr:
    """Field ``i`` of a tuple atom (the field itself for a tuple literal)."""
    if isinstance(e, Tuple):
        return e.fields[i]
    return TupleGetItem(e, i)


def zeros_for(e: Expr, t: Type | None = None) -> Expr:
    """The "no gradient" of an argument: ``zeros(shape, dtype, symbolic=True)`` for a static
    float tensor (optimization may drop it as an absent term, passes._zeros), ``zeros_like``
    otherwise, or a tuple of them for a tuple-typed atom."""
    t = type_of(e) if t is None else t
    if isinstance(t, TupleType):
        return Tuple(tuple(zeros_for(field(e, i), ft) for i, ft in enumerate(t.fields)))
    if is_float_type(t) and all(type(d) is int for d in t.shape):  # type: ignore[union-attr]
        return op("zeros", shape=list(t.shape), dtype=t.dtype, symbolic=True)  # type: ignore
    return op("zeros_like", e)


def sum_to(g: Expr, g_shape: Sequence[Any], x: Expr) -> Expr:
    """``g`` (of shape ``g_shape``) summed back to ``x``'s exact shape (collapse-sum).

    The collapse is skipped only when both shapes are provably equal: a ``?`` dim may hide a
    broadcast 1.
    """
    xs = tuple(tensor_type(x).shape)
    if tuple(g_shape) == xs and not any(isinstance(d, AnyDim) for d in xs):
        return g
    return op("collapse_sum_like", g, x)


def out_shape(call: Any) -> tuple:
    """The shape of a call's (tensor) result."""
    return tuple(call.checked_type.shape)


def keep_reduced(g: Expr, ndim: int, axes: Sequence[int], keepdims: bool) -> Expr:
    """A reduction's adjoint with its reduced axes restored as size-1 axes."""
    if keepdims:
        return g
    for a in sorted(axes):
        g = op("expand_dims", g, axis=a, num_newaxis=1)
    return g


def zero_rule(call: Any, out: Expr, out_grad: Expr) -> tuple:
    """The rule of piecewise-constant ops: zero for every argument."""
    return tuple(zeros_for(a) for a in call.args)


def grad_rule(fn: Rule) -> Rule:
    """Wrap a rule: integer and bool arguments (and tuples of them) get zeros."""
    def rule(call: Any, out: Expr, out_grad: Expr) -> tuple:
        grads = tuple(fn(call, out, out_grad))
        if len(grads) != len(call.args):
            raise InternalError(f"gradient rule of `{call.op.name}` returned {len(grads)} "
                                f"adjoints for {len(call.args)} arguments")
        return tuple(g if has_float(type_of(a)) else zeros_for(a)
                     for a, g in zip(call.args, grads))
    rule.__name__ = getattr(fn, "__name__", "rule")
    rule.__doc__ = fn.__doc__
    rule.__wrapped__ = fn  # type: ignore[attr-defined]
    return rule


__all__ = ["GradientRuleError", "op", "type_of", "tensor_type", "static_shape", "scalar", "field",
           "zeros_for", "sum_to", "out_shape", "keep_reduced", "zero_rule", "grad_rule",
           "has_float", "is_float_type"]
