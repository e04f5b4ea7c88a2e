"""Types.

Types are values: ``TensorType``, ``TupleType``, ``FuncType``, ``RefType``, ``TypeCall`` and the
``Any`` dimension are frozen dataclasses with structural ``==`` and ``hash``. The binders among
types -- ``TypeVar``, ``IncompleteType`` (a unification variable) and ``ShapeVar`` (a symbolic
dimension) -- keep identity equality, like ``Var``: two ``TypeVar("A")`` are different
variables. Alpha-equivalence of types is :func:`relay_ir.structural.structural_equal`.

A tensor dimension (``Dim``) is an ``int``, :data:`ANY` (written ``?``), a :class:`ShapeVar`
(``n``) or a :class:`DimExpr` (a polynomial over shape variables such as ``n + m`` or
``n*4``), which relations produce when they compute with symbolic shapes.
"""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Union

if TYPE_CHECKING:
    from relay_ir.expr import Constructor
    from relay_ir.span import Span

_ids = itertools.count()


class Kind(enum.Enum):
    """The kind of a type variable."""

    Type = 0
    ShapeVar = 1
    BaseType = 2
    Constraint = 4
    AdtHandle = 5
    TypeData = 6


class Type:
    """Base class of every type."""

    __slots__ = ()

    def __repr__(self) -> str:
        try:
            from relay_ir.printer import astext
            return astext(self)
        except Exception as e:  # NOTE: repr must never raise (debuggers call it)
            return f"<{type(self).__name__} (unprintable: {e})>"


# ----------------------------------------------------------------------------- dimensions
@dataclass(frozen=True, slots=True, repr=False)
class AnyDim:
    """A dimension unknown until run time, written ``?``."""

    def __repr__(self) -> str:
        return "?"


ANY = AnyDim()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ShapeVar:
    """A named symbolic dimension, bound as a type parameter of a function (``[n]``)."""

    name: str
    uid: int = field(default_factory=lambda: next(_ids), compare=False)

    def __repr__(self) -> str:
        return self.name


Monomial = tuple  # tuple[ShapeVar, ...] sorted by (name, uid); repeated vars for powers


def _mono_key(m: Monomial) -> tuple:
    return (len(m), tuple((v.name, v.uid) for v in m))


@dataclass(frozen=True, slots=True, repr=False)
class DimExpr:
    """A polynomial with integer coefficients over shape variables: ``n + m``, ``2*n``.

    Always normalized: monomials sorted, zero coefficients dropped, never a bare constant or a
    bare variable (those normalize to ``int`` and ``ShapeVar``). Build with :func:`dim_add`,
    :func:`dim_mul`.
    """

    terms: tuple[tuple[Monomial, int], ...]

    def __repr__(self) -> str:
        return format_dim(self)


Dim = Union[int, AnyDim, ShapeVar, DimExpr]


def _as_poly(d: Dim) -> dict[Monomial, int]:
    if isinstance(d, int):
        return {(): d} if d else {}
    if isinstance(d, ShapeVar):
        return {(d,): 1}
    if isinstance(d, DimExpr):
        return dict(d.terms)
    raise TypeError(f"not a polynomial dimension: {d!r}")


def _from_poly(p: dict[Monomial, int]) -> Dim:
    p = {m: c for m, c in p.items() if c}
    if not p:
        return 0
    if list(p) == [()]:
        return p[()]
    if len(p) == 1:
        (m, c), = p.items()
        if c == 1 and len(m) == 1:
            return m[0]
    return DimExpr(tuple(sorted(p.items(), key=lambda mc: _mono_key(mc[0]))))


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b`` on dimensions (``?`` absorbs)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a is ANY or b is ANY or isinstance(a, AnyDim) or isinstance(b, AnyDim):
        return ANY
    p = _as_poly(a)
    for m, c in _as_poly(b).items():
        p[m] = p.get(m, 0) + c
    return _from_poly(p)


def dim_mul(a: Dim, b: Dim) -> Dim:
    """``a * b`` on dimensions (``?`` absorbs, except that 0 wins)."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 0 or b == 0:
        return 0
    if isinstance(a, AnyDim) or isinstance(b, AnyDim):
        return ANY
    p: dict[Monomial, int] = {}
    for ma, ca in _as_poly(a).items():
        for mb, cb in _as_poly(b).items():
            m = tuple(sorted(ma + mb, key=lambda v: (v.name, v.uid)))
            p[m] = p.get(m, 0) + ca * cb
    return _from_poly(p)


def dim_sub(a: Dim, b: Dim) -> Dim:
    """``a - b`` on dimensions."""
    return dim_add(a, dim_mul(-1, b))


def dim_div_exact(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when it is exact and decidable, else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    if isinstance(a, AnyDim) or isinstance(b, AnyDim):
        return ANY
    if isinstance(b, int):
        if b == 0:
            return None
        p = _as_poly(a)
        if all(c % b == 0 for c in p.values()):
            return _from_poly({m: c // b for m, c in p.items()})
        return None
    pb = _as_poly(b)
    if len(pb) == 1:
        (mb, cb), = pb.items()
        out: dict[Monomial, int] = {}
        for m, c in _as_poly(a).items():
            rest = list(m)
            for v in mb:
                if v not in rest:
                    return None
                rest.remove(v)
            if c % cb:
                return None
            out[tuple(rest)] = c // cb
        return _from_poly(out)
    return None


def dim_vars(d: Dim) -> list[ShapeVar]:
    """The shape variables occurring in ``d``."""
    if isinstance(d, ShapeVar):
        return [d]
    if isinstance(d, DimExpr):
        seen: dict[ShapeVar, None] = {}
        for m, _ in d.terms:
            for v in m:
                seen[v] = None
        return list(seen)
    return []


def format_dim(d: Dim) -> str:
    """Text of a dimension as the printer writes it (``3``, ``?``, ``n``, ``n + 1``, ``2*n``)."""
    if isinstance(d, bool):
        raise TypeError("bool is not a dimension")
    if isinstance(d, int):
        return str(d)
    if isinstance(d, AnyDim):
        return "?"
    if isinstance(d, ShapeVar):
        return d.name
    parts: list[str] = []
    for m, c in sorted(d.terms, key=lambda mc: (-len(mc[0]), _mono_key(mc[0]))):
        names = "*".join(v.name for v in m)
        if not m:
            body = str(abs(c))
        elif abs(c) == 1:
            body = names
        else:
            body = f"{abs(c)}*{names}"
        if not parts:
            parts.append(body if c > 0 else f"-{body}")
        else:
            parts.append(f"+ {body}" if c > 0 else f"- {body}")
    return " ".join(parts)


# ----------------------------------------------------------------------------- types
@dataclass(frozen=True, slots=True, repr=False)
class TensorType(Type):
    """``Tensor[(d0, d1, ...), dtype]``; a 0-d tensor prints as the bare dtype."""

    shape: tuple[Dim, ...]
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def concrete_shape(self) -> tuple[int, ...]:
        """The shape as ints; raises if any dimension is not a known int."""
        if not self.is_static:
            raise ValueError(f"shape is not static: {self!r}")
        return tuple(self.shape)  # type: ignore[arg-type]


def scalar_type(dtype: str) -> TensorType:
    """``Tensor[(), dtype]``."""
    return TensorType((), dtype)


@dataclass(frozen=True, slots=True, repr=False)
class TupleType(Type):
    """``(T1, T2, ...)``; the empty tuple type ``()`` is unit."""

    fields: tuple[Type, ...]


UNIT = TupleType(())


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypeVar(Type):
    """A type variable bound by ``[A, B]`` on a function, def or type definition."""

    name_hint: str
    kind: Kind = Kind.Type
    span: Span | None = field(default=None, kw_only=True, compare=False)


@dataclass(frozen=True, slots=True, repr=False)
class GlobalTypeVar(Type):
    """The name of an ADT (``List``) in a module; equal when names are equal."""

    name_hint: str
    kind: Kind = Kind.AdtHandle


@dataclass(frozen=True, slots=True, repr=False)
class TypeCall(Type):
    """An ADT applied to type arguments: ``List[int32]``."""

    func: Type  # GlobalTypeVar (or TypeVar for higher-kinded use)
    args: tuple[Type, ...]


@dataclass(frozen=True, slots=True, repr=False)
class FuncType(Type):
    """``fn [A, n](T1, T2) -> R``. ``type_params`` holds TypeVars and ShapeVars."""

    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar | ShapeVar, ...] = ()
    type_constraints: tuple = ()


@dataclass(frozen=True, slots=True, repr=False)
class RefType(Type):
    """``ref(T)``: the type of a mutable reference cell."""

    value: Type


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IncompleteType(Type):
    """``_``: a type to be inferred (a unification variable during inference)."""

    kind: Kind = Kind.Type
    uid: int = field(default_factory=lambda: next(_ids))
    span: Span | None = field(default=None, kw_only=True, compare=False)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypeData(Type):
    """An ADT definition: ``type List[A] { Cons(A, List[A]), Nil }``."""

    header: GlobalTypeVar
    type_params: tuple[TypeVar, ...]
    constructors: tuple[Constructor, ...]
    span: Span | None = field(default=None, kw_only=True, compare=False)

    def constructor(self, name: str) -> Constructor:
        for c in self.constructors:
            if c.name_hint == name:
                return c
        raise KeyError(name)


BOOL = scalar_type("bool")

DTYPE_PREFIXES = ("int", "uint", "float", "bool", "bfloat")


def is_dtype_name(name: str) -> bool:
    """True if ``name`` reads as a dtype under the text format's prefix rule."""
    return name.startswith(("int", "uint", "float", "bool"))


def type_children(t: Type) -> tuple[Type, ...]:
    """The immediate sub-types of ``t`` (a type call's head first); every type walk uses it."""
    get = _TYPE_CHILDREN.get(type(t))
    return get(t) if get is not None else ()


_TYPE_CHILDREN: dict[type, Callable[[Any], tuple[Type, ...]]] = {
    TupleType: lambda t: t.fields,
    FuncType: lambda t: (*t.arg_types, t.ret_type),
    RefType: lambda t: (t.value,),
    TypeCall: lambda t: (t.func, *t.args),
}


def tuple_leaves(t: Type) -> list[Type]:
    """The types inside ``t``'s nested tuples (``t`` itself if it is not a tuple), in order."""
    out: list[Type] = []
    stack = [t]
    while stack:
        u = stack.pop()
        if isinstance(u, TupleType):
            stack.extend(reversed(u.fields))
        else:
            out.append(u)
    return out


def fmt_type(t: Any) -> str:
    """Text of a type as the printer writes it (``Tensor[(3), float32]``, ``fn (A) -> B``).

    The one formatter of types in messages (type inference, operator rules, the interpreter's
    argument checks), in the printer's text form (:func:`relay_ir.printer.astext`).

    Generic function types print as ``fn [A, n](A) -> A``; an unknown type prints as ``_``.
    """
    if type(t) in (TupleType, FuncType, RefType, TypeCall):
        from relay_ir.traversal import run_generators
        return run_generators(_fmt(t))  # NOTE: nested types without recursion
    return _fmt_leaf(t)


def _fmt_leaf(t: Any) -> str:
    if t is None:
        return "_"
    tt = type(t)
    if tt is TensorType:
        if not t.shape and is_dtype_name(t.dtype):
            return t.dtype
        return f"Tensor[({', '.join(format_dim(d) for d in t.shape)}), {t.dtype}]"
    if tt is GlobalTypeVar or tt is TypeVar:
        return t.name_hint
    if tt is IncompleteType:
        return "_"
    if tt is TypeData:
        return t.header.name_hint
    if isinstance(t, (int, AnyDim, ShapeVar, DimExpr)):
        return format_dim(t)
    return repr(t)


def _fmts(ts: Any) -> Any:
    out = []
    for x in ts:
        out.append((yield _fmt(x)))
    return out


def _fmt(t: Any) -> Any:
    tt = type(t)
    if tt is TupleType:
        fields = yield _fmts(t.fields)
        if len(fields) == 1:
            return f"({fields[0]},)"
        return "(" + ", ".join(fields) + ")"
    if tt is FuncType:
        tps = ""
        if t.type_params:
            tps = "[" + ", ".join(p.name if isinstance(p, ShapeVar) else p.name_hint
                                  for p in t.type_params) + "]"
        args = ", ".join((yield _fmts(t.arg_types)))
        ret = yield _fmt(t.ret_type)
        return f"fn {tps}({args}) -> {ret}" if tps else f"fn ({args}) -> {ret}"
    if tt is RefType:
        return f"ref({(yield _fmt(t.value))})"
    if tt is TypeCall:
        head = yield _fmt(t.func)
        if not t.args:
            return head
        return f"{head}[{', '.join((yield _fmts(t.args)))}]"
    return _fmt_leaf(t)
