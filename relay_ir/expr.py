"""Expression nodes.

Every node is a frozen, slotted dataclass with identity equality (``eq=False``): a ``Var`` *is*
its binding, and memo tables keyed by node stay O(1). Alpha-equivalence is
:func:`relay_ir.structural.structural_equal`, never ``==``. Fields holding several children are
tuples. ``span`` (where the node came from) and ``checked_type_`` (set only by type inference,
when it builds the node) are keyword-only and never compared.

``repr`` of a node prints it in Relay text. :func:`with_fields` rebuilds a node, returning the
node itself when nothing changed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from relay_ir.attrs import EMPTY_ATTRS, Attrs
from relay_ir.span import Span
from relay_ir.ty import FuncType, GlobalTypeVar, ShapeVar, TensorType, Type, TypeVar

if TYPE_CHECKING:
    from relay_ir.op import OpDef


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Node:
    """Base of expressions, patterns and clauses."""

    span: Span | None = field(default=None, kw_only=True)

    def __repr__(self) -> str:
        try:
            from relay_ir.printer import astext
            return astext(self)
        except Exception as e:  # NOTE: repr must never raise (debuggers call it)
            return f"<{type(self).__name__} (unprintable: {e})>"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Expr(Node):
    """Base of all expressions."""

    checked_type_: Type | None = field(default=None, kw_only=True)

    @property
    def checked_type(self) -> Type:
        """The type inferred for this node; run ``passes.InferType()`` first."""
        if self.checked_type_ is not None:
            return self.checked_type_
        raise ValueError(
            f"{type(self).__name__} has no inferred type; run relay_ir.passes.InferType() first")


# ----------------------------------------------------------------------------- leaves
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    """A local variable ``%name``, bound by let, a function parameter or a pattern.

    ``attrs`` are a parameter's attributes (``%x {virtual_device=meta[VirtualDevice][0]}: T``):
    kept and printed, but, like ``span``, never compared by structural equality or hashing.
    """

    name_hint: str
    type_annotation: Type | None = None
    attrs: Attrs = field(default=EMPTY_ATTRS, kw_only=True)

    @property
    def checked_type(self) -> Type:
        if self.checked_type_ is not None:
            return self.checked_type_
        if self.type_annotation is not None:
            return self.type_annotation
        return Expr.checked_type.fget(self)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GlobalVar(Expr):
    """A global function name ``@name``; two GlobalVars with one name denote one global."""

    name_hint: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constant(Expr):
    """A tensor constant (a numpy array; 0-d for scalars)."""

    data: np.ndarray

    @property
    def dtype(self) -> str:
        return str(self.data.dtype)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Op(Expr):
    """A primitive operator, e.g. ``add`` or ``nn.conv2d``. One Op object per name."""

    name: str

    @property
    def opdef(self) -> OpDef:
        from relay_ir.op import get_opdef
        return get_opdef(self.name)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constructor(Expr):
    """An ADT constructor such as ``Cons``; calling it builds an ADT value."""

    name_hint: str
    inputs: tuple[Type, ...]
    belong_to: GlobalTypeVar
    tag: int = 0

    @property
    def name(self) -> str:
        """Alias of ``name_hint`` (DESIGN.md: ADT values expose ``.constructor.name``)."""
        return self.name_hint


# ----------------------------------------------------------------------------- compound
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Tuple(Expr):
    """``(a, b, ...)``."""

    fields: tuple[Expr, ...]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TupleGetItem(Expr):
    """``t.i``."""

    tuple_value: Expr
    index: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Let(Expr):
    """``let %var = value; body``. The var is in scope in ``value`` (recursive closures)."""

    var: Var
    value: Expr
    body: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Function(Expr):
    """``fn [type_params](params) -> ret_type { body }`` with optional attributes."""

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    type_params: tuple[TypeVar | ShapeVar, ...] = ()
    attrs: Attrs = EMPTY_ATTRS

    @property
    def checked_type(self) -> Type:
        if self.checked_type_ is not None:
            return self.checked_type_
        if self.ret_type is not None and all(p.type_annotation is not None for p in self.params):
            return FuncType(tuple(p.type_annotation for p in self.params),  # type: ignore[misc]
                            self.ret_type, self.type_params)
        return Expr.checked_type.fget(self)  # type: ignore[attr-defined]

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("Primitive", 0))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(Expr):
    """``op(args, key=value...)``: a call of an op, function, closure or constructor."""

    op: Expr
    args: tuple[Expr, ...]
    attrs: Attrs = EMPTY_ATTRS
    type_args: tuple[Type, ...] = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class If(Expr):
    """``if (cond) { true_branch } else { false_branch }``."""

    cond: Expr
    true_branch: Expr
    false_branch: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefCreate(Expr):
    """``ref(value)``."""

    value: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefRead(Expr):
    """``ref_read(ref)``."""

    ref: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefWrite(Expr):
    """``ref_write(ref, value)``; evaluates to ``()``."""

    ref: Expr
    value: Expr


# ----------------------------------------------------------------------------- patterns
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Pattern(Node):
    """Base of match patterns."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternWildcard(Pattern):
    """``_``."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternVar(Pattern):
    """``%x`` (binds the matched value)."""

    var: Var


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternConstructor(Pattern):
    """``Cons(p1, p2)`` or a nullary ``Nil``."""

    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternTuple(Pattern):
    """``(p1, p2, ...)``."""

    patterns: tuple[Pattern, ...]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Clause(Node):
    """``lhs => rhs`` inside a match."""

    lhs: Pattern
    rhs: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Match(Expr):
    """``match (data) { clauses }``; ``complete=False`` is ``match?`` (no exhaustiveness)."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True


# ----------------------------------------------------------------------------- helpers
def with_fields(node: Any, **changes: Any) -> Any:
    """Rebuild ``node`` with ``changes``; returns ``node`` itself if every value is identical.

    The span is kept; the inferred type is dropped when anything changed (it may be stale).
    """
    for k, v in changes.items():
        if getattr(node, k) is not v:
            break
    else:
        return node
    if "checked_type_" not in changes and isinstance(node, Expr):
        changes["checked_type_"] = None
    return dataclasses.replace(node, **changes)


def with_same_type(node: Any, **changes: Any) -> Any:
    """:func:`with_fields` for a rewrite that keeps the node's meaning: the inferred type stays.

    Type-preserving passes (normal forms, substitution of equals) rebuild with this, so the
    types InferType attached survive them without each pass threading ``checked_type_``.
    """
    if isinstance(node, Expr) and "checked_type_" not in changes:
        changes["checked_type_"] = node.checked_type_
    return with_fields(node, **changes)


def const(value: Any, dtype: str | None = None, span: Span | None = None) -> Constant:
    """A Constant from a Python or numpy value (ints default to int32, floats to float32)."""
    if isinstance(value, np.ndarray):
        arr = value if dtype is None else value.astype(dtype)
    elif dtype is not None:
        arr = np.asarray(value, dtype=dtype)
    elif isinstance(value, bool):
        arr = np.asarray(value, dtype="bool")
    elif isinstance(value, int):
        arr = np.asarray(value, dtype="int32")
    elif isinstance(value, float):
        arr = np.asarray(value, dtype="float32")
    else:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype("float32")
        elif arr.dtype == np.int64:
            arr = arr.astype("int32")
    return Constant(arr, span=span)


def type_of(e: Expr) -> Type | None:
    """The known type of ``e``, or None: the inferred type (``checked_type_``), else a
    variable's annotation, else a constant's own tensor type. The one answer every pass uses.
    """
    if e.checked_type_ is not None:
        return e.checked_type_
    t = type(e)
    if t is Var:
        return e.type_annotation
    if t is Constant:
        return TensorType(tuple(e.data.shape), str(e.data.dtype))
    return None


def is_atom(e: Expr) -> bool:
    """Atoms in A-normal form: variables, globals, constants, ops and constructors."""
    return isinstance(e, (Var, GlobalVar, Constant, Op, Constructor))


EXPR_TYPES: tuple[type, ...] = (Var, GlobalVar, Constant, Op, Constructor, Tuple, TupleGetItem,
                                Let, Function, Call, If, RefCreate, RefRead, RefWrite, Match)
PATTERN_TYPES: tuple[type, ...] = (PatternWildcard, PatternVar, PatternConstructor, PatternTuple)
