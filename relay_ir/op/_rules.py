"""Shared pieces of the operator library: registration helpers, dimension algebra, relations.

Families (``tensor.py``, ``reduce.py``, ``transform.py``, ``nn.py``) register each operator once
with :func:`defop`, or with :func:`def_elemwise` / :func:`def_broadcast` for the many one-liners
(JAX's ``standard_unop``). Relations follow the calling convention of ``relay_ir.op``:
``rel(arg_types, attrs)`` returns the result type, ``(result, refined_arg_types)``, or ``None`` to
defer while an argument is still an :class:`~relay_ir.ty.IncompleteType`.

Dimension rules used everywhere (``?`` is :data:`~relay_ir.ty.ANY`, ``n`` a ShapeVar):

* broadcasting ``a`` with ``b``: equal -> ``a``; ``1`` -> the other; ``?`` against a non-1 dim
  -> that dim, against ``1`` -> ``?``; two different ints, or a symbolic dim against anything
  not provably equal, is a :class:`~relay_ir.errors.ShapeMismatchError`;
* dimension equality checks (concatenate, dense, conv2d channels) accept ``?`` against anything
  and reject only provably different dims.

Calls must carry the op's complete attribute record (``opdef.make_attrs(...)``, which fills the
defaults): relations and implementations read ``attrs.<field>`` directly, with no per-call schema
work.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import ShapeMismatchError, TypeInferenceError
from relay_ir.op import AttrField, OpDef, OpPattern, get_opdef, register_op
from relay_ir.ty import (AnyDim, Dim, IncompleteType, ShapeVar, TensorType, TupleType, Type,
                         dim_mul, fmt_type, format_dim)

# ----------------------------------------------------------------------------- registration

F = AttrField

DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
})


def defop(name: str, num_inputs: int, *, attrs: Sequence[AttrField] = (), attrs_type: str = "",
          rel: Callable[..., Any] | None = None, impl: Callable[..., Any] | None = None,
          pattern: OpPattern = OpPattern.OPAQUE, doc: str = "",
          non_differentiable: bool = False, required: Sequence[str] = (),
          grad: Callable[..., Any] | None = None, jvp: Callable[..., Any] | None = None,
          compute: Callable[..., Any] | None = None, host_only: str = "") -> OpDef:
    """Register one operator and return its OpDef.

    ``required`` names attributes without a usable default: the relation reports a missing one.
    ``grad``, ``jvp`` and ``compute`` are the operator's rules (see :mod:`relay_ir.op`);
    ``host_only`` is the reason an operator without ``compute`` never becomes a kernel.
    """
    if required and rel is not None:
        rel = _requiring(name, tuple(required), rel)
    return register_op(OpDef(
        name=name, num_inputs=num_inputs, attrs=tuple(attrs), attrs_type=attrs_type,
        type_rel=rel, impl=impl, pattern=pattern, doc=doc,
        non_differentiable=non_differentiable, grad=grad, jvp=jvp, compute=compute,
        host_only=host_only))


def _requiring(name: str, required: tuple[str, ...], rel: Callable[..., Any]
               ) -> Callable[..., Any]:
    def checked(arg_types: Sequence[Type], attrs: Attrs) -> Any:
        for r in required:
            if attrs.get(r) is None:
                raise TypeInferenceError(f"{name} needs a {r} attribute")
        return rel(arg_types, attrs)
    checked.__doc__ = rel.__doc__
    checked.__wrapped__ = rel  # type: ignore[attr-defined]
    return checked


def make_call(name: str, *args: Any, span: Any = None, **attrs: Any) -> Any:
    """``Call(Op(name), args, attrs)`` with the op's full attribute record (defaults filled)."""
    from relay_ir.expr import Call
    od = get_opdef(name)
    return Call(od.op, tuple(args), od.make_attrs(attrs, span), span=span)


def wrap(r: Any, dtype: Any) -> np.ndarray:
    """``r`` as an ndarray of ``dtype`` (numpy returns scalars for 0-d results)."""
    if type(r) is np.ndarray and r.dtype == dtype:
        return r
    return np.asarray(r, dtype=dtype)


def def_elemwise(name: str, np_fn: Callable[[np.ndarray], Any], *, out_dtype: str | None = None,
                 doc: str = "", attrs: Sequence[AttrField] = (), attrs_type: str = "",
                 pattern: OpPattern = OpPattern.ELEMWISE, non_differentiable: bool = False,
                 with_attrs: bool = False, grad: Callable[..., Any] | None = None,
                 jvp: Callable[..., Any] | None = None,
                 compute: Callable[..., Any] | None = None) -> OpDef:
    """Register a one-input elementwise op: identity relation, ``np_fn`` as reference.

    The result keeps the input dtype (or ``out_dtype``). With ``with_attrs`` the function is
    called as ``np_fn(x, attrs)``.
    """
    if out_dtype is None:
        rel = identity_rel
        if with_attrs:
            def impl(args: list, attrs: Attrs) -> np.ndarray:
                x = args[0]
                return wrap(np_fn(x, attrs), x.dtype)
        else:
            def impl(args: list, attrs: Attrs) -> np.ndarray:
                x = args[0]
                return wrap(np_fn(x), x.dtype)
    else:
        odt = np.dtype(out_dtype)

        def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
            t = tensor_arg(arg_types[0], "data")
            return None if t is None else TensorType(t.shape, out_dtype)
        rel.__doc__ = f"``op(x)``: the shape of ``x``, dtype {out_dtype}."

        def impl(args: list, attrs: Attrs) -> np.ndarray:
            return wrap(np_fn(args[0]), odt)
    impl.__doc__ = f"Reference implementation of ``{name}``."
    return defop(name, 1, attrs=attrs, attrs_type=attrs_type, rel=rel, impl=impl,
                 pattern=pattern, doc=doc, non_differentiable=non_differentiable,
                 grad=grad, jvp=jvp, compute=compute)


def def_broadcast(name: str, np_fn: Callable[[np.ndarray, np.ndarray], Any], *,
                  out_dtype: str | None = None, doc: str = "",
                  non_differentiable: bool = False, grad: Callable[..., Any] | None = None,
                  jvp: Callable[..., Any] | None = None,
                  compute: Callable[..., Any] | None = None) -> OpDef:
    """Register a two-input broadcasting op (equal dtypes; result: input dtype or ``out_dtype``)."""
    if out_dtype is None:
        rel = broadcast_rel

        def impl(args: list, attrs: Attrs) -> np.ndarray:
            a = args[0]
            return wrap(np_fn(a, args[1]), a.dtype)
    else:
        rel = compare_rel if out_dtype == "bool" else _fixed_broadcast_rel(out_dtype)
        odt = np.dtype(out_dtype)

        def impl(args: list, attrs: Attrs) -> np.ndarray:
            return wrap(np_fn(args[0], args[1]), odt)
    impl.__doc__ = f"Reference implementation of ``{name}``."
    return defop(name, 2, rel=rel, impl=impl, pattern=OpPattern.BROADCAST, doc=doc,
                 non_differentiable=non_differentiable, grad=grad, jvp=jvp, compute=compute)


# ----------------------------------------------------------------------------- formatting
def fmt_shape(shape: Iterable[Dim]) -> str:
    """``(2, 3)``, ``(6)``, ``()`` as the text format writes shapes."""
    return "(" + ", ".join(format_dim(d) for d in shape) + ")"


# ----------------------------------------------------------------------------- argument access
def tensor_arg(t: Type, what: str = "argument") -> TensorType | None:
    """``t`` if it is a tensor type, None if still unknown; any other type is an error."""
    if isinstance(t, TensorType):
        return t
    if isinstance(t, IncompleteType):
        return None
    raise TypeInferenceError(f"expected a tensor for {what}, found {fmt_type(t)}")


def ranked_arg(t: Type, op: str, what: str, rank: int) -> TensorType | None:
    """``tensor_arg`` that also requires rank ``rank`` (0: a scalar); ``op`` names the operator."""
    tt = tensor_arg(t, what)
    if tt is not None and tt.ndim != rank:
        need = "be a scalar" if rank == 0 else f"have rank {rank}"
        raise TypeInferenceError(f"{op}: {what} must {need}, found rank {tt.ndim}")
    return tt


def tensor_args(arg_types: Sequence[Type], names: Sequence[str]) -> list[TensorType] | None:
    """All arguments as tensors, or None if any is still unknown."""
    out = []
    for t, n in zip(arg_types, names):
        tt = tensor_arg(t, n)
        if tt is None:
            return None
        out.append(tt)
    return out


def tensor_rel(*names: str) -> Callable[[Callable[..., Type | None]], Callable[..., Type | None]]:
    """Decorator: write a relation over tensor arguments ``names`` as ``fn(*tensors, attrs)``;
    the result is a ``(arg_types, attrs)`` relation that waits (None) while any is unknown."""
    def deco(fn: Callable[..., Type | None]) -> Callable[..., Type | None]:
        @functools.wraps(fn)
        def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
            ts = tensor_args(arg_types, names)
            return None if ts is None else fn(*ts, attrs)
        return rel
    return deco


def grad_like_rel(name: str, like_index: int, ranks: Sequence[int] | None,
                  forward: Any) -> Any:
    """Relation: the type of argument ``like_index`` with the dtype of argument 0.

    ``forward(arg_types, attrs)`` is the type the matching forward op gives; argument 0 (the
    output gradient) must have its shape. ``ranks``: the rank each argument must have (None:
    any).
    """
    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
        ts = tensor_args(arg_types, [f"argument {i}" for i in range(len(arg_types))])
        if ts is None:
            return None
        for k, (t, r) in enumerate(zip(ts, ranks or ())):
            if t.ndim != r:
                raise TypeInferenceError(f"{name}: argument {k} must have rank {r}, found "
                                         f"rank {t.ndim}")
        fwd = forward(ts, attrs)
        if isinstance(fwd, tuple):
            fwd = fwd[0]
        if fwd is not None and not all(dim_compatible(a, b)
                                       for a, b in zip(fwd.shape, ts[0].shape)):
            raise ShapeMismatchError(f"{name}: the output gradient has shape "
                                     f"{fmt_shape(ts[0].shape)}, the forward result "
                                     f"{fmt_shape(fwd.shape)}")
        return TensorType(ts[like_index].shape, ts[0].dtype)
    rel.__doc__ = f"``{name}``: the type of argument {like_index} (dtype of argument 0)."
    return rel


def tuple_of_tensors(t: Type, what: str = "argument") -> list[TensorType] | None:
    """The fields of a tuple-of-tensors argument, or None while any part is unknown."""
    if isinstance(t, IncompleteType):
        return None
    if not isinstance(t, TupleType):
        raise TypeInferenceError(f"expected a tuple of tensors for {what}, found {fmt_type(t)}")
    out = []
    for i, f in enumerate(t.fields):
        ft = tensor_arg(f, f"field {i} of {what}")
        if ft is None:
            return None
        out.append(ft)
    return out


def check_dtype(dtype: Any, what: str = "dtype") -> str:
    """``dtype`` if it names a supported dtype, else a TypeInferenceError."""
    if dtype not in DTYPES:
        raise TypeInferenceError(f"unknown {what} {dtype!r} (expected one of "
                                 f"{', '.join(sorted(DTYPES))})")
    return dtype


def same_dtype(a: TensorType, b: TensorType) -> str:
    """The common dtype of ``a`` and ``b``; raises when they differ."""
    if a.dtype != b.dtype:
        raise ShapeMismatchError(f"data types {a.dtype} and {b.dtype} do not match")
    return a.dtype


def is_int_dtype(dtype: str) -> bool:
    """True for signed and unsigned integer dtypes."""
    return dtype.startswith(("int", "uint"))


# ----------------------------------------------------------------------------- dimensions
def is_any(d: Dim) -> bool:
    """True for the ``?`` dimension."""
    return isinstance(d, AnyDim)


def dim_eq(a: Dim, b: Dim) -> bool:
    """Provably equal (structurally equal ints, ShapeVars or polynomials)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a is b or (type(a) is type(b) and not isinstance(a, (AnyDim, ShapeVar)) and a == b)


def dim_compatible(a: Dim, b: Dim) -> bool:
    """Not provably different: ``?`` matches anything; otherwise dims must be equal."""
    return is_any(a) or is_any(b) or dim_eq(a, b)


def broadcast_dim(a: Dim, b: Dim, sa: Sequence[Dim], sb: Sequence[Dim]) -> Dim:
    """Broadcast two dimensions (see the module docstring); ``sa``/``sb`` are for the message."""
    if dim_eq(a, b):
        return a
    if a == 1 and isinstance(a, int):
        return b
    if b == 1 and isinstance(b, int):
        return a
    if is_any(a):
        return b
    if is_any(b):
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ShapeMismatchError(
            f"incompatible broadcast shapes {fmt_shape(sa)} and {fmt_shape(sb)}: "
            f"dimension {a} does not match {b}")
    raise ShapeMismatchError(
        f"cannot broadcast symbolic dimension {format_dim(a)} with {format_dim(b)} "
        f"(shapes {fmt_shape(sa)} and {fmt_shape(sb)})")


def broadcast_shapes(sa: Sequence[Dim], sb: Sequence[Dim]) -> tuple[Dim, ...]:
    """NumPy-style broadcast of two shapes, right-aligned."""
    na, nb = len(sa), len(sb)
    n = max(na, nb)
    out: list[Dim] = []
    for i in range(n):
        ia, ib = i - (n - na), i - (n - nb)
        if ia < 0:
            out.append(sb[ib])
        elif ib < 0:
            out.append(sa[ia])
        else:
            out.append(broadcast_dim(sa[ia], sb[ib], sa, sb))
    return tuple(out)


def shape_size(shape: Sequence[Dim]) -> Dim:
    """The number of elements (a polynomial or ``?``)."""
    size: Dim = 1
    for d in shape:
        size = dim_mul(size, d)
    return size


def norm_axis(axis: int, ndim: int, *, extra: int = 0) -> int:
    """A non-negative axis for a rank-``ndim`` tensor (``extra`` widens the range: insertion)."""
    n = ndim + extra
    if not -n <= axis < n:
        raise TypeInferenceError(f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis + n if axis < 0 else axis


# ----------------------------------------------------------------------------- shared relations
def identity_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``op(x: T) : T``."""
    return tensor_arg(arg_types[0], "data")


def broadcast_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``op(a, b)``: equal dtypes, broadcast shapes, result dtype of ``a``."""
    ts = tensor_args(arg_types, ("lhs", "rhs"))
    if ts is None:
        return None
    a, b = ts
    dtype = same_dtype(a, b)
    if a.shape == b.shape and all(isinstance(d, int) for d in a.shape):
        return a
    return TensorType(broadcast_shapes(a.shape, b.shape), dtype)


def compare_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``op(a, b)``: equal dtypes, broadcast shapes, a bool result."""
    t = broadcast_rel(arg_types, attrs)
    return None if t is None else TensorType(t.shape, "bool")  # type: ignore[union-attr]


def _fixed_broadcast_rel(dtype: str) -> Callable[..., Type | None]:
    def rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
        t = broadcast_rel(arg_types, attrs)
        return None if t is None else TensorType(t.shape, dtype)  # type: ignore[union-attr]
    rel.__doc__ = f"``op(a, b)``: equal dtypes, broadcast shapes, dtype {dtype}."
    return rel


def reduce_axes(ndim: int, axis: Sequence[int] | None, exclude: bool) -> list[int]:
    """The axes a reduction removes (``axis`` None: all; ``exclude``: all but ``axis``)."""
    if axis is None:
        return list(range(ndim))
    seen: list[int] = []
    for a in axis:
        na = norm_axis(a, ndim)
        if na in seen:
            raise TypeInferenceError(f"axis {a} appears more than once in axis {tuple(axis)}")
        seen.append(na)
    if exclude:
        return [i for i in range(ndim) if i not in seen]
    return sorted(seen)


def reduce_shape(shape: Sequence[Dim], axes: Sequence[int], keepdims: bool) -> tuple[Dim, ...]:
    """The shape after reducing ``axes``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def reduce_rel(arg_types: Sequence[Type], attrs: Attrs) -> Type | None:
    """``op(x, axis, keepdims, exclude)``: the reduced shape, the input dtype."""
    t = tensor_arg(arg_types[0], "data")
    if t is None:
        return None
    axes = reduce_axes(t.ndim, attrs.axis, attrs.exclude)
    return TensorType(reduce_shape(t.shape, axes, attrs.keepdims), t.dtype)


__all__ = [
    "F", "OpPattern", "ShapeMismatchError", "TypeInferenceError", "defop", "def_elemwise",
    "def_broadcast", "identity_rel", "broadcast_rel", "compare_rel", "reduce_rel", "make_call",
    "wrap", "tensor_arg", "tensor_args", "tuple_of_tensors", "broadcast_shapes", "norm_axis",
]
