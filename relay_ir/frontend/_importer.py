"""What the importers share: ``.rly`` names for foreign names, converted values and the
:class:`Graph` that emits let-bound, typed calls (folding calls on constants).

Used by the ONNX importer (:mod:`relay_ir.frontend.onnx`) and the PyTorch importer
(:mod:`relay_ir.frontend.pytorch`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from relay_ir.errors import TypeInferenceError
from relay_ir.expr import Call, Constant, Expr, Tuple, TupleGetItem, Var
from relay_ir.module import fresh_name
from relay_ir.op import get_opdef
from relay_ir.ty import TensorType, TupleType, Type

__all__ = ["rly_name", "Names", "Value", "Graph", "RLY_DTYPES", "np_to_rly_dtype",
           "unsupported_message"]


_BAD = re.compile(r"[^A-Za-z0-9_]")


def rly_name(name: str) -> str:
    """``name`` as a ``.rly`` identifier: characters other than ``[A-Za-z0-9_]`` become ``_``,
    a leading digit gets a ``_`` prefix, the empty name becomes ``v``."""
    out = _BAD.sub("_", name)
    if not out:
        return "v"
    if out[0].isdigit():
        out = "_" + out
    return out


class Names:
    """Unique ``.rly`` names: a second ``input_1`` becomes ``input_1_1``."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def make(self, name: str) -> str:
        out = fresh_name(rly_name(name), self.used, sep="_")
        self.used.add(out)
        return out


@dataclass
class Value:
    """A converted ONNX value: its expression, its type and, when known, its array.

    ``value`` is set for constants and for initializers (whose expression is a parameter):
    converters read it where an operator needs a static attribute (shapes, axes, pads).
    """

    expr: Expr
    ty: Type
    value: np.ndarray | None = None

    @property
    def shape(self) -> tuple:
        assert isinstance(self.ty, TensorType)
        return tuple(self.ty.shape)

    @property
    def dtype(self) -> str:
        assert isinstance(self.ty, TensorType)
        return self.ty.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        return isinstance(self.expr, Constant)


# the element types relay_ir tensors have
RLY_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                        "uint64", "float16", "float32", "float64"})


def np_to_rly_dtype(dt: Any) -> str:
    dt = np.dtype(dt)
    return "bool" if dt == np.bool_ else dt.name


class Graph:
    """Emits let-bound calls with their types; folds calls on constants."""

    def __init__(self, names: _Names):
        self.bindings: list[tuple[Var, Expr]] = []
        self.names = names
        self.hint = "v"

    def const(self, array: Any, dtype: Any = None) -> Value:
        arr = np.asarray(array, dtype=dtype)
        return Value(Constant(arr), TensorType(arr.shape, np_to_rly_dtype(arr.dtype)), arr)

    def call(self, op: str, *args: Value | Sequence[Value], fold: bool = True,
             **attrs: Any) -> Value:
        """Emit ``op(args, attrs)``; a tuple argument is given as a list of Values.

        ``fold=False`` keeps a call on constants a call (``full`` of a large shape)."""
        od = get_opdef(op)
        exprs: list[Expr] = []
        types: list[Type] = []
        consts: list[Any] = []
        for a in args:
            if isinstance(a, Value):
                exprs.append(a.expr)
                types.append(a.ty)
                consts.append(a.expr.data if isinstance(a.expr, Constant) else None)
            else:
                exprs.append(Tuple(tuple(v.expr for v in a)))
                types.append(TupleType(tuple(v.ty for v in a)))
                cs = [v.expr.data if isinstance(v.expr, Constant) else None for v in a]
                consts.append(None if any(c is None for c in cs) else tuple(cs))
        call = Call(od.op, tuple(exprs), od.make_attrs(attrs))
        out_ty = od.type_rel(types, call.attrs)
        if out_ty is None:
            raise TypeInferenceError(f"{op}: could not infer the result type")
        # NOTE: a call without arguments (zeros(shape=...)) stays a call: it is cheap and
        # its constant would be as big as its result
        if fold and od.impl is not None and not od.effectful and consts and all(
                c is not None for c in consts):
            with np.errstate(all="ignore"):
                out = od.impl(consts, call.attrs)
            if isinstance(out, tuple):
                return self._tuple_value(Tuple(tuple(Constant(np.asarray(o)) for o in out)),
                                         out_ty, out)
            out = np.asarray(out, dtype=out_ty.dtype)
            return Value(Constant(out), out_ty, out)
        out_v = self.bind(call, out_ty)
        # NOTE: small values computed from initializers (shape arithmetic on bound integer
        # inputs) stay calls on the parameters, but their values are known to converters
        if od.impl is not None and not od.effectful and isinstance(out_ty, TensorType):
            known = [a.value if isinstance(a, Value) else None for a in args]
            if all(isinstance(a, Value) for a in args) and all(
                    k is not None and np.size(k) <= _KNOWN_LIMIT for k in known):
                try:
                    with np.errstate(all="ignore"):
                        out_v.value = np.asarray(od.impl(known, call.attrs), dtype=out_ty.dtype)
                except Exception:  # NOTE: left unknown; a converter needing it says so
                    pass
        return out_v

    def _tuple_value(self, expr: Expr, ty: Type, arrays: Any) -> Value:
        return Value(expr, ty, arrays)

    def bind(self, expr: Expr, ty: Type) -> Value:
        var = Var(self.names.make(self.hint), None, checked_type_=ty)
        self.bindings.append((var, expr))
        return Value(var, ty)

    def item(self, tup: Value, k: int) -> Value:
        """Field ``k`` of a tuple-typed value."""
        assert isinstance(tup.ty, TupleType)
        if isinstance(tup.expr, Tuple):
            f = tup.expr.fields[k]
            ty = tup.ty.fields[k]
            if isinstance(f, Constant):
                return Value(f, ty, f.data)
            return Value(f, ty)
        return self.bind(TupleGetItem(tup.expr, k), tup.ty.fields[k])


_KNOWN_LIMIT = 1024  # elements: the largest initializer-derived value tracked


def unsupported_message(what: str, items: Sequence[str]) -> str:
    """The one diagnostic listing every unsupported operator node: ``the model has 2
    unsupported operator node(s) (opset 17):`` then one indented line per node."""
    return f"the model has {len(items)} unsupported operator node(s){what}:\n  " + \
        "\n  ".join(items)
