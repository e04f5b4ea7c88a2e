"""Which constants an algebraic rule may drop without changing a value (inf, nan, -0.0 included).

Shared by simplify-expr and partial evaluation. IEEE arithmetic makes most "identities" on zero
inexact for floats: ``inf * 0`` is nan, ``-0.0 + 0.0`` is ``+0.0``, ``0 - 0.0`` is ``+0.0`` while
``negative(0.0)`` is ``-0.0``. What stays exact:

* ``x * 1``, ``1 * x``, ``x / 1``: always;
* ``x + (-0.0) => x`` (and ``(-0.0) + x``): ``-0.0`` is the additive identity, ``+0.0`` is not;
* ``x - (+0.0) => x``; ``(-0.0) - x => negative(x)``;
* every zero rule on integer dtypes (no inf, nan or signed zero);
* every zero rule on a *symbolic* zero: ``zeros(shape, dtype, symbolic=True)``, the "no
  contribution" zero that reverse-mode AD starts its adjoint cells from (JAX's symbolic
  ``Zero``). It stands for the absence of a term, so ``x + z => x`` and ``x * z => z`` hold by
  definition, whatever ``x`` holds.

``unsafe_math`` (``passes.optimize(mod, unsafe_math=True)``, the PassContext config key
``"unsafe_math"``, ``rly opt --unsafe-math``) treats every zero as symbolic: ``x * 0 => 0`` even
where ``x`` may be inf or nan, ``x + 0 => x`` even where ``x`` may be ``-0.0``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

UNSAFE_MATH_KEY = "unsafe_math"


def unsafe_math(ctx: Any) -> bool:
    """Whether the pass context ``ctx`` opts into value-changing zero rules."""
    return bool(ctx is not None and ctx.config.get(UNSAFE_MATH_KEY, False))


def _all_zero(d: np.ndarray) -> bool:
    return d.size > 0 and d.dtype != np.bool_ and not np.any(d)


def _exact_dtype(d: np.ndarray) -> bool:
    """Integer data: zero rules are exact (no inf, nan or signed zero)."""
    return d.dtype.kind in "iu"


def absorbing_zero(d: np.ndarray, symbolic: bool, unsafe: bool) -> bool:
    """``x * z => z`` (and zeros through any linear operator) may use ``z``."""
    if symbolic:
        return True
    return _all_zero(d) and (unsafe or _exact_dtype(d))


def additive_zero(d: np.ndarray, symbolic: bool, unsafe: bool) -> bool:
    """``x + z => x`` and ``z + x => x`` hold for ``z``: a symbolic zero, all ``-0.0`` (floats),
    an integer zero, or any zero under unsafe math."""
    return _neutral_zero(d, symbolic, unsafe, negative=True)


def subtractive_zero(d: np.ndarray, symbolic: bool, unsafe: bool) -> bool:
    """``x - z => x`` holds for ``z``: symbolic, all ``+0.0``, an integer zero, or unsafe."""
    return _neutral_zero(d, symbolic, unsafe, negative=False)


def _neutral_zero(d: np.ndarray, symbolic: bool, unsafe: bool, negative: bool) -> bool:
    """``d`` is a zero that leaves every ``x`` unchanged: for floats every element must carry
    the sign ``negative`` asks for (``x + -0.0`` and ``x - +0.0`` keep ``x = -0.0``)."""
    if symbolic:
        return True
    if not _all_zero(d):
        return False
    if unsafe or _exact_dtype(d):
        return True
    signs = np.signbit(d)
    return d.dtype.kind == "f" and bool(np.all(signs) if negative else not np.any(signs))


def is_symbolic_zeros(call: Any) -> bool:
    """``call`` is ``zeros(shape, dtype, symbolic=True)``."""
    from relay_ir.expr import Call, Op
    return (type(call) is Call and type(call.op) is Op and call.op.name == "zeros"
            and bool(call.attrs.get("symbolic", False)))
