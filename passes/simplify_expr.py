"""SimplifyExpr: algebraic identities (a rule table), only where the result type is unchanged.

NOTE: why not the dataflow pattern language (``passes.pattern``)? These rules match through
let-bound variables (``Site.value`` follows the let environment, so ``let %o = ones_like(%x);
multiply(%y, %o)`` simplifies in A-normal form) and compare against the types of the original,
typed call. Patterns match the expression graph as written and carry no environment, so the
rules would either miss every ANF program or need an environment-aware matcher; one table of
``(op name, rule)`` pairs with a ``# lhs -> rhs`` comment each is the smaller thing to keep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generator, Optional

import numpy as np

from relay_ir.expr import Call, Constant, Expr, Function, Op, Var, type_of
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.passes._zeros import (absorbing_zero, additive_zero, is_symbolic_zeros,
                                    subtractive_zero, unsafe_math)
from relay_ir.passes.pass_manager import FunctionPass, PassContext
from relay_ir.ty import TensorType, Type


@dataclass(slots=True, eq=False)
class Site:
    """What a rule sees: the rewritten call, its original (typed) form, and the let env."""

    call: Call
    orig: Call
    env: dict[Var, Expr]
    unsafe: bool = False

    def arg(self, i: int) -> Expr:
        """Argument ``i`` (rewritten)."""
        return self.call.args[i]

    def value(self, i: int) -> Expr:
        """Argument ``i`` seen through let-bound variables."""
        e = self.call.args[i]
        for _ in range(64):  # NOTE: alias chains are short; bounded, never recursive
            if type(e) is Var and e in self.env:
                e = self.env[e]
            else:
                break
        return e

    def out_type(self) -> Type | None:
        return self.orig.checked_type_

    def arg_type(self, i: int) -> Type | None:
        return type_of(self.orig.args[i])

    def keeps_type(self, i: int) -> bool:
        """True if argument ``i`` has exactly the call's result type (shape and dtype)."""
        a, r = self.arg_type(i), self.out_type()
        return isinstance(r, TensorType) and a == r

    def is_const(self, i: int, v: float) -> bool:
        """Argument ``i`` is a tensor filled with ``v`` (a constant, or zeros/ones[_like])."""
        e = self.value(i)
        if type(e) is Constant:
            d = e.data
            return d.size > 0 and d.dtype != np.bool_ and bool(np.all(d == v))
        if type(e) is Call and type(e.op) is Op:
            name = e.op.name
            if v == 0:
                return name in ("zeros", "zeros_like")
            if v == 1:
                return name in ("ones", "ones_like")
        return False

    def zero(self, i: int) -> tuple[np.ndarray, bool] | None:
        """Argument ``i`` as ``(data, symbolic)`` when it is all zeros (a constant, or a
        zeros[_like] call; ``data`` then is one ``+0`` of its dtype); None otherwise."""
        e = self.value(i)
        if type(e) is Constant:
            d = e.data
            if d.size > 0 and d.dtype != np.bool_ and not np.any(d):
                return d, False
            return None
        if type(e) is Call and type(e.op) is Op and e.op.name in ("zeros", "zeros_like"):
            t = self.arg_type(i)
            if isinstance(t, TensorType) and t.dtype != "bool":
                return np.zeros((1,), t.dtype), is_symbolic_zeros(e)
        return None

    def absorbing(self, i: int) -> bool:
        """Argument ``i`` is a zero that ``x * z => z`` may use (see passes._zeros)."""
        z = self.zero(i)
        return z is not None and absorbing_zero(z[0], z[1], self.unsafe)

    def additive(self, i: int) -> bool:
        """Argument ``i`` is a zero that ``x + z => x`` may drop (-0.0, symbolic, int)."""
        z = self.zero(i)
        return z is not None and additive_zero(z[0], z[1], self.unsafe)

    def subtractive(self, i: int) -> bool:
        """Argument ``i`` is a zero that ``x - z => x`` may drop (+0.0, symbolic, int)."""
        z = self.zero(i)
        return z is not None and subtractive_zero(z[0], z[1], self.unsafe)

    def positive_zero(self, i: int) -> bool:
        """Argument ``i`` is all ``+0`` and not symbolic (what ``zeros_like`` computes)."""
        z = self.zero(i)
        return z is not None and not z[1] and not np.any(np.signbit(z[0]))

    def is_op(self, i: int, name: str) -> Call | None:
        e = self.value(i)
        if type(e) is Call and type(e.op) is Op and e.op.name == name:
            return e
        return None


def _call(name: str, *args: Expr, span: object = None, **attrs: object) -> Call:
    from relay_ir.op import get_opdef
    od = get_opdef(name)
    return Call(od.op, tuple(args), od.make_attrs(attrs), span=span)  # type: ignore[arg-type]


def _zeros(s: Site, like: int, zero: int) -> Expr | None:
    """Zeros of the call's type; symbolic when argument ``zero`` was a symbolic zero."""
    r = s.out_type()
    if isinstance(r, TensorType) and r.is_static:
        z = s.zero(zero)
        if z is not None and z[1]:
            return _call("zeros", shape=tuple(r.shape), dtype=r.dtype, symbolic=True,
                         span=s.call.span)
        return _call("zeros", shape=tuple(r.shape), dtype=r.dtype, span=s.call.span)
    if s.keeps_type(like):
        return _call("zeros_like", s.arg(like), span=s.call.span)
    return None


Rule = Callable[[Site], Optional[Expr]]

# (op name, rule): each rule returns the replacement or None. Every rule checks that the
# result type (shape and dtype) is unchanged, and keeps values exactly (inf, nan, -0.0): the
# zero rules fire only on the zeros passes._zeros allows (symbolic AD zeros, -0.0 / +0.0 where
# that is the identity, integers; any zero under unsafe_math).
RULES: list[tuple[str, Rule]] = [
    # x * 1 -> x
    ("multiply", lambda s: s.arg(0) if s.is_const(1, 1) and s.keeps_type(0) else None),
    # 1 * x -> x
    ("multiply", lambda s: s.arg(1) if s.is_const(0, 1) and s.keeps_type(1) else None),
    # x * z -> zeros   z absorbing (static result type, or zeros_like(x) of the result type)
    ("multiply", lambda s: _zeros(s, 0, 1) if s.absorbing(1) else None),
    # z * x -> zeros   z absorbing
    ("multiply", lambda s: _zeros(s, 1, 0) if s.absorbing(0) else None),
    # x + z -> x   z additive: -0.0, symbolic or integer zero
    ("add", lambda s: s.arg(0) if s.additive(1) and s.keeps_type(0) else None),
    # z + x -> x   z additive
    ("add", lambda s: s.arg(1) if s.additive(0) and s.keeps_type(1) else None),
    # x - z -> x   z subtractive: +0.0, symbolic or integer zero
    ("subtract", lambda s: s.arg(0) if s.subtractive(1) and s.keeps_type(0) else None),
    # z - x -> negative(x)   z additive (-0.0 - x is -x; 0.0 - 0.0 is not -0.0)
    ("subtract", lambda s: _call("negative", s.arg(1), span=s.call.span)
     if s.additive(0) and s.keeps_type(1) else None),
    # x / 1 -> x
    ("divide", lambda s: s.arg(0) if s.is_const(1, 1) and s.keeps_type(0) else None),
    # negative(negative(x)) -> x
    ("negative", lambda s: _neg_neg(s)),
    # reshape(x, s) -> x   when the shape does not change
    ("reshape", lambda s: s.arg(0) if s.keeps_type(0) else None),
    # reshape(reshape(x, s1), s2) -> reshape(x, result shape)
    ("reshape", lambda s: _reshape_reshape(s)),
    # zeros_like(z) -> z   when z is already +0 zeros of that type (not -0.0, not symbolic)
    ("zeros_like", lambda s: s.arg(0) if s.positive_zero(0) and s.keeps_type(0) else None),
    # ones_like(o) -> o   when o is already ones of that type
    ("ones_like", lambda s: s.arg(0) if s.is_const(0, 1) and s.keeps_type(0) else None),
    # zeros_like(x) -> zeros(shape, dtype)   when the type is static (x no longer needed)
    ("zeros_like", lambda s: _static_init(s, "zeros")),
    # ones_like(x) -> ones(shape, dtype)   when the type is static
    ("ones_like", lambda s: _static_init(s, "ones")),
]


def _neg_neg(s: Site) -> Expr | None:
    inner = s.is_op(0, "negative")
    if inner is None:
        return None
    x = inner.args[0]
    tx = type_of(x)
    r = s.out_type()
    if isinstance(r, TensorType) and tx == r:
        return x
    return None


def _reshape_reshape(s: Site) -> Expr | None:
    inner = s.is_op(0, "reshape")
    r = s.out_type()
    if inner is None or not isinstance(r, TensorType) or not r.is_static:
        return None
    x = inner.args[0]
    tx = type_of(x)
    if not isinstance(tx, TensorType) or tx.dtype != r.dtype:
        return None
    if tx == r:
        return x
    return _call("reshape", x, newshape=tuple(r.shape), span=s.call.span)


def _static_init(s: Site, name: str) -> Expr | None:
    r = s.out_type()
    if isinstance(r, TensorType) and r.is_static:
        return _call(name, shape=tuple(r.shape), dtype=r.dtype, span=s.call.span)
    return None


_BY_OP: dict[str, list[Rule]] = {}
for _name, _rule in RULES:
    _BY_OP.setdefault(_name, []).append(_rule)


class _Simplify(ExprMutator):
    def __init__(self, unsafe: bool = False) -> None:
        super().__init__()
        self.unsafe = unsafe
        self.env: dict[Var, Expr] = {}
        self.fired = 0

    def visit_binding(self, var: Var, value: Expr
                      ) -> Generator[Expr, Any, tuple[Var, Expr] | None]:
        new = yield value
        if type(new) is Var and new is not value:
            self.memo[var] = new  # NOTE: a rule left an alias: `let y = x; b => b[y := x]`
            return None
        self.env[var] = new
        return (yield var), new

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if type(new) is not Call or type(new.op) is not Op:
            return new
        rules = _BY_OP.get(new.op.name)
        if not rules:
            return new
        site = Site(new, c, self.env, self.unsafe)
        for rule in rules:
            out = rule(site)
            if out is not None:
                self.fired += 1
                return out
        return new


@dataclass(frozen=True)
class SimplifyExpr(FunctionPass):
    """Apply algebraic identities from the rule table :data:`RULES` (one rule per line).

    Rules (each only when the result type -- shape and dtype -- is unchanged):
      ``x*1 => x``, ``1*x => x``, ``x/1 => x``, ``x*z => zeros``, ``z*x => zeros``,
      ``x+z => x``, ``z+x => x``, ``x-z => x``, ``z-x => negative(x)``,
      ``negative(negative(x)) => x``, ``reshape(x) => x`` (same shape),
      ``reshape(reshape(x)) => reshape(x)``, ``zeros_like(zeros) => zeros``,
      ``ones_like(ones) => ones``, ``zeros_like(x) => zeros(shape)`` (static shape),
      ``ones_like(x) => ones(shape)``.
    "1" is a constant filled with ones, a ``ones``/``ones_like`` call; "z" a zero of the kind
    that keeps the rule exact for every value, inf, nan and -0.0 included (passes._zeros):
    ``x*z`` needs a symbolic AD zero (``zeros(..., symbolic=True)``) or an integer zero,
    ``x+z`` also accepts ``-0.0``, ``x-z`` also ``+0.0``. With the context config
    ``unsafe_math`` every zero qualifies (``inf*0 => 0``). Also through let-bound variables.
    Needs inferred types (requires ``infer-type``).
    """

    name: ClassVar[str] = "simplify-expr"
    opt_level: ClassVar[int] = 2
    required: ClassVar[tuple[str, ...]] = ("infer-type",)

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return _Simplify(unsafe_math(ctx)).visit(func)  # type: ignore[return-value]
