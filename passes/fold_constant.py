"""FoldConstant: evaluate at compile time what depends only on constants."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generator

import numpy as np

from relay_ir.expr import (Call, Constant, Expr, Function, If, Op, Tuple, TupleGetItem, Var,
                           is_atom, with_fields)
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes._analysis import Effects, op_is_effectful
from relay_ir.passes._zeros import is_symbolic_zeros
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.ty import TensorType, TupleType


# Folding that grows the program's data (a fill or a broadcast materialised as a constant) stops
# at this many elements; folding that does not grow it (a weight scaled, transposed or re-laid
# out at compile time) has no bound. One policy for FoldConstant and partial evaluation.
FOLD_GROWTH_LIMIT = 1 << 16


def may_fold(out_elements: int, in_elements: int, limit: int = FOLD_GROWTH_LIMIT) -> bool:
    """Whether a constant of ``out_elements`` elements may replace a call whose constant inputs
    hold ``in_elements``: always when the result is no larger than its inputs together, else
    only up to ``limit`` elements (``exp(ones(2048, 2048))`` stays a call: folding it would
    add a 16 MiB constant to the program)."""
    return out_elements <= max(in_elements, limit)


def _const_value(e: Expr, depth: int = 0) -> Any:
    """A numpy array (or nested tuple of arrays) if ``e`` is a constant or tuple of them."""
    if type(e) is Constant:
        return e.data
    if type(e) is Tuple and depth < 16:  # NOTE: bounded: op arguments are shallow tuples
        vals = [_const_value(f, depth + 1) for f in e.fields]
        if any(v is None for v in vals):
            return None
        return tuple(vals)
    return None


def _to_expr(value: Any, ty: Any, span: Any) -> Expr | None:
    if isinstance(value, tuple):
        tys = ty.fields if isinstance(ty, TupleType) and len(ty.fields) == len(value) else \
            (None,) * len(value)
        fields = [_to_expr(v, t, span) for v, t in zip(value, tys)]
        if any(f is None for f in fields):
            return None
        return Tuple(tuple(fields), span=span)  # type: ignore[arg-type]
    arr = np.asarray(value)
    if isinstance(ty, TensorType):
        if ty.dtype != str(arr.dtype):
            arr = arr.astype(ty.dtype)
        if ty.is_static and tuple(ty.shape) != arr.shape:
            return None  # NOTE: the impl disagrees with the relation: leave the call alone
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # NOTE: np.ascontiguousarray would turn 0-d into 1-d
    # NOTE: typed only when the folded node was (an untyped program stays untyped)
    ct = TensorType(tuple(arr.shape), str(arr.dtype)) if ty is not None else None
    return Constant(arr, span=span, checked_type_=ct)


class _Fold(ExprMutator):
    def __init__(self, effects: Effects, growth_limit: int) -> None:
        super().__init__()
        self.effects = effects
        self.growth_limit = growth_limit
        self.tuples: dict[Var, Tuple] = {}   # let var -> tuple literal it is bound to

    def visit_binding(self, var: Var, value: Expr
                      ) -> Generator[Expr, Any, tuple[Var, Expr] | None]:
        new = yield value
        if type(new) is Constant:
            self.memo[var] = new  # NOTE: `let x = c; b => b[x := c]`
            return None
        if type(new) is Tuple:
            self.tuples[var] = new
        return (yield var), new

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if type(new) is not Call or type(new.op) is not Op or op_is_effectful(new.op):
            return new
        if is_symbolic_zeros(new):
            return new  # NOTE: kept as a call: its mark lets later rules drop it (AD zeros)
        from relay_ir.op import lookup_opdef
        opdef = lookup_opdef(new.op.name)
        if opdef is None or opdef.impl is None:
            return new
        args = [_const_value(a) for a in new.args]
        if any(a is None for a in args):
            return new
        ty = c.checked_type_
        n_in = sum(_size(a) for a in args)
        if isinstance(ty, TensorType) and ty.is_static and not may_fold(
                int(np.prod(ty.shape, dtype=np.int64)), n_in, self.growth_limit):
            return new  # NOTE: known too big before computing it
        try:
            with np.errstate(all="ignore"):
                out = opdef.impl(args, new.attrs)
        except Exception:  # NOTE: e.g. an ill-typed call: leave it for the type checker
            return new
        if not may_fold(_size(out), n_in, self.growth_limit):
            return new
        folded = _to_expr(out, c.checked_type_, c.span)
        return new if folded is None else folded

    def visit_tuple_get_item(self, t: TupleGetItem) -> Expr:
        new = super().visit_tuple_get_item(t)
        if type(new) is not TupleGetItem:
            return new
        tup = new.tuple_value
        if type(tup) is Var and tup in self.tuples:
            tup = self.tuples[tup]
            field = tup.fields[new.index] if new.index < len(tup.fields) else None
            # NOTE: through a let var only atoms move: they are in scope wherever the var is
            if field is not None and is_atom(field):
                return field
            return new
        if type(tup) is Tuple and new.index < len(tup.fields):
            others = [f for i, f in enumerate(tup.fields) if i != new.index]
            if all(self.effects.is_pure(f) for f in others):
                return tup.fields[new.index]
        return new

    def visit_if(self, i: If) -> Generator[Expr, Any, Expr]:
        cond = yield i.cond
        if type(cond) is Constant and cond.data.size == 1:
            return (yield i.true_branch if bool(cond.data.reshape(())) else i.false_branch)
        tb = yield i.true_branch
        fb = yield i.false_branch
        return with_fields(i, cond=cond, true_branch=tb, false_branch=fb)


def _size(v: Any) -> int:
    if isinstance(v, tuple):
        return sum(_size(x) for x in v)
    return int(np.asarray(v).size)


@dataclass(frozen=True)
class FoldConstant(FunctionPass):
    """Evaluate operator calls on constants with the op's reference implementation.

    Rules:
      ``op(c1, ..., cn)  =>  c``       the op is not effectful; c = OpDef.impl(c1..cn) with
                                       exactly the dtype of the call's type;
      ``(c1, ..., cn).i  =>  ci``       (other fields pure), also through ``let t = (..)``;
      ``if (c) {a} else {b}  =>  a or b``  for a constant condition;
      ``let x = c; b  =>  b[x := c]``  constants propagate.

    Never folds effects: reference operations, calls of functions, effectful ops, symbolic AD
    zeros (``zeros(..., symbolic=True)`` stays a call, see passes._zeros). Size policy
    (:func:`may_fold`, shared with partial evaluation): a result larger than its constant
    inputs together (a fill, a broadcast) folds only up to ``growth_limit`` elements; a result
    no larger (a weight scaled or transposed at compile time) always folds.
    """

    growth_limit: int = FOLD_GROWTH_LIMIT
    name: ClassVar[str] = "fold-constant"
    opt_level: ClassVar[int] = 2

    def function_transformer(self, mod: IRModule, ctx: PassContext
                             ) -> Callable[[Function], Function]:
        effects = Effects(mod)  # NOTE: one purity analysis of the globals, shared
        return lambda fn: _Fold(effects, self.growth_limit).visit(fn)  # type: ignore


def fold_constant(expr: Expr, mod: IRModule | None = None) -> Expr:
    """FoldConstant on one expression."""
    return _Fold(Effects(mod), FOLD_GROWTH_LIMIT).visit(expr)
