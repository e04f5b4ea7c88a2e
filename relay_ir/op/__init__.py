"""The operator registry: one :class:`OpDef` per operator, registered once.

An OpDef holds everything the project knows about an operator:

* ``name`` (``"add"``, ``"nn.conv2d"``), ``num_inputs`` and the attribute schema
  (``attrs``: a tuple of :class:`AttrField` with defaults; ``attrs_type`` names the record,
  e.g. ``"ReduceAttrs"``);
* ``type_rel(arg_types, attrs) -> Type | (Type, arg_types) | None`` -- the type relation.
  ``arg_types`` are the argument types as far as they are known (they may be or contain
  :class:`~relay_ir.ty.IncompleteType`). Return the result type; or a pair
  ``(result, refined_arg_types)`` to also constrain the arguments (``nn.dense`` with
  ``units`` infers its weight); or ``None`` when more must be known first (the solver calls
  again). Raise :class:`~relay_ir.errors.TypeInferenceError` subclasses on error;
* ``impl(args, attrs)`` -- numpy reference implementation (interpreter, constant folding):
  ``args`` is a list of numpy arrays (a tuple of arrays for a tuple-typed argument), the result
  an array or a tuple of arrays, with exactly the dtype the relation promises;
* ``compute(attrs, inputs, out_type)`` -- TE/TOPI compute, importing tvm lazily: ``inputs``
  are ``te.Tensor`` (a list of them for a tuple-typed argument), ``out_type`` the call's
  checked type; returns a ``te.Tensor`` (a list for a tuple-typed result);
* ``host_only`` -- a reason text when the operator has no compute and always runs on the host
  (``""``: it compiles; see :func:`relay_ir.op._te.host_only_reason`);
* ``pattern`` -- an :class:`OpPattern` for fusion;
* ``grad(call, out, out_grad) -> tuple[Expr, ...]`` -- the reverse-mode rule: ``call`` is the
  primal call (its arguments are typed atoms), ``out`` an atom holding its value (so a rule
  that needs the forward result never recomputes it), ``out_grad`` the adjoint of ``out``
  (same type). It returns one adjoint per argument with that argument's exact type (a
  ``Tuple`` for a tuple-typed argument), built only from registry operators so that the
  result is differentiable again. Operators without derivative are marked
  ``non_differentiable=True`` and contribute zero;
* ``jvp(call, out, tangents) -> Expr`` -- the forward-mode rule: the tangent of ``out`` given
  one tangent atom per argument. The rules of :mod:`relay_ir.op._jvp` for linear operators
  (``jvp_linear``, ``jvp_linear_in``, ``jvp_multilinear[_in]``) also state that linearity
  (:func:`relay_ir.op._jvp.linearity`), which partial evaluation uses to let zeros through;
* ``batch(call, args, in_dims, ctx) -> (expr, out_dim)`` -- the batching rule of
  ``passes.vmap`` (:mod:`relay_ir.op._batch`: one table, applied to every OpDef once the
  families are loaded); ``not_batchable`` is the reason text of an operator that cannot be
  batched (value-dependent output shapes: ``dyn.*``), whose rule raises it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from relay_ir.attrs import Attrs, _attr_eq, normalize_attr_value
from relay_ir.errors import DiagnosticError
from relay_ir.expr import Op
from relay_ir.span import Span


class OpPattern(enum.IntEnum):
    """How an operator fuses (TVM's OpPatternKind)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class AttrError(DiagnosticError):
    """An attribute value does not fit the operator's attribute schema."""

    kind = "attribute error"


# Attribute kinds: how a value written in text or passed from Python is checked and converted.
ATTR_KINDS = ("int", "float", "bool", "str", "dtype", "ints", "floats", "int?", "ints?",
              "int_or_ints", "any")


@dataclass(frozen=True, slots=True)
class AttrField:
    """One attribute: its name, kind (see ``ATTR_KINDS``), default and a one-line doc."""

    name: str
    kind: str
    default: Any = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    def convert(self, value: Any) -> Any:
        """Check ``value`` against the kind and normalize it; raises ``ValueError``."""
        v = normalize_attr_value(value)
        k = self.kind
        if k == "any":
            return v
        if v is None and (k.endswith("?") or self.default is None):
            return None
        if k in ("int", "int?"):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"expected an integer, found {v!r}")
            return v
        if k == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"expected a number, found {v!r}")
            return float(v)
        if k == "bool":
            if isinstance(v, bool):
                return v
            if isinstance(v, int) and v in (0, 1):
                return bool(v)
            raise ValueError(f"expected True or False, found {v!r}")
        if k in ("str", "dtype"):
            if not isinstance(v, str):
                raise ValueError(f"expected a string, found {v!r}")
            return v
        if k in ("ints", "ints?"):
            if isinstance(v, int) and not isinstance(v, bool):
                return (v,)
            if not isinstance(v, tuple) or not all(
                    isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise ValueError(f"expected a list of integers, found {v!r}")
            return v
        if k == "floats":
            if not isinstance(v, tuple) or not all(isinstance(x, (int, float)) for x in v):
                raise ValueError(f"expected a list of numbers, found {v!r}")
            return tuple(float(x) for x in v)
        if k == "int_or_ints":
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            if isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool)
                                            for x in v):
                return v
            raise ValueError(f"expected an integer or a list of integers, found {v!r}")
        raise ValueError(f"bad attribute kind {k!r}")  # pragma: no cover


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything about one operator (see the module docstring); frozen once built.

    ``op`` is the operator's unique :class:`~relay_ir.expr.Op` node (made here unless given:
    :func:`override_op` keeps it, so existing programs see the replaced facts);
    ``default_attrs`` is the attribute record with every default, computed once.
    """

    name: str
    num_inputs: int
    attrs: tuple[AttrField, ...] = ()
    attrs_type: str = ""
    type_rel: Callable[..., Any] | None = None
    impl: Callable[..., Any] | None = None
    compute: Callable[..., Any] | None = None
    host_only: str = ""
    pattern: OpPattern = OpPattern.OPAQUE
    grad: Callable[..., Any] | None = None
    jvp: Callable[..., Any] | None = None
    non_differentiable: bool = False
    batch: Callable[..., Any] | None = None
    not_batchable: str = ""
    effectful: bool = False
    doc: str = ""
    op: Op = field(default=None, repr=False)  # type: ignore[assignment]
    default_attrs: Attrs = field(init=False, repr=False)
    _fields: dict[str, AttrField] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        init = object.__setattr__  # NOTE: the derived fields of a frozen record
        if self.op is None:
            init(self, "op", Op(self.name))
        init(self, "_fields", {f.name: f for f in self.attrs})
        init(self, "default_attrs", Attrs({f.name: f.default for f in self.attrs},
                                          self.attrs_type))

    def attr_field(self, name: str) -> AttrField | None:
        """The schema entry of attribute ``name``, or None."""
        return self._fields.get(name)

    def make_attrs(self, given: Mapping[str, Any] | None = None, span: Span | None = None
                   ) -> Attrs:
        """Build this op's attribute record from ``given``, filling defaults.

        Raises :class:`AttrError` for unknown keys and ill-typed values.
        """
        given = dict(given or {})
        out: dict[str, Any] = {}
        for f in self.attrs:
            if f.name in given:
                try:
                    out[f.name] = f.convert(given.pop(f.name))
                except ValueError as e:
                    raise AttrError(f"attribute `{f.name}` of `{self.name}`: {e}", span) from None
            else:
                out[f.name] = f.default
        if given:
            known = ", ".join(f.name for f in self.attrs) or "none"
            bad = ", ".join(sorted(given))
            raise AttrError(f"`{self.name}` has no attribute {bad} (known attributes: {known})",
                            span)
        return Attrs(out, self.attrs_type)

    def non_default_attrs(self, attrs: Attrs) -> list[tuple[str, Any]]:
        """The (name, value) pairs of ``attrs`` that differ from the defaults, in schema order."""
        out = []
        for f in self.attrs:
            if f.name in attrs and not _attr_eq(attrs[f.name], f.default):
                out.append((f.name, attrs[f.name]))
        return out


_REGISTRY: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> OpDef:
    """Register ``opdef``; a second registration of one name is an error."""
    if opdef.name in _REGISTRY:
        raise ValueError(f"operator {opdef.name!r} is already registered")
    _REGISTRY[opdef.name] = opdef
    return opdef


@contextlib.contextmanager
def override_op(name: str, **changes: Any) -> Iterator[OpDef]:
    """Replace facts of a registered operator for the duration of a ``with`` block (tests).

    ``with override_op("negative", effectful=True): ...`` -- the registry holds a copy of the
    OpDef with ``changes`` (same :class:`~relay_ir.expr.Op` node) and gets the original back
    afterwards. Every fact is read from the registry, so nothing else needs patching.
    """
    old = get_opdef(name)
    new = dataclasses.replace(old, **changes)
    _REGISTRY[name] = new
    try:
        yield new
    finally:
        _REGISTRY[name] = old


def _ensure_loaded() -> None:
    if not _LOADED:
        _LOADED.append(True)
        from relay_ir.op import tensor, reduce, transform, indexing, nn, conv  # noqa: F401
        from relay_ir.op import dyn, annotation, indexing_ext, conv_ext, sorting  # noqa: F401
        from relay_ir.op import _batch
        _batch.install()


_LOADED: list[bool] = []


def get_opdef(name: str) -> OpDef:
    """The OpDef named ``name``; raises ``KeyError`` if there is none."""
    _ensure_loaded()
    return _REGISTRY[name]


def lookup_opdef(name: str) -> OpDef | None:
    """The OpDef named ``name`` or None."""
    _ensure_loaded()
    return _REGISTRY.get(name)


def get_op(name: str) -> Op:
    """The unique :class:`~relay_ir.expr.Op` node for ``name``."""
    return get_opdef(name).op


def list_ops() -> list[OpDef]:
    """Every registered operator, sorted by name."""
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
