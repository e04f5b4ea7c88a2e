"""The numpy functions, builtins and array methods the Python frontend maps onto operators.

Each handler is ``(translator, args, kwargs, node) -> value``; ``_TABLE`` maps the Python
object (``np.tanh``, ``builtins.len``, ...) to its handler. docs/frontend_python.md lists
:func:`supported_functions`.
"""
from __future__ import annotations

import ast
import builtins
from typing import Any, Callable

import numpy as np

from relay_ir.expr import Constant, Tuple
from relay_ir.frontend._exprs import (_Method, _axis, _dim_of, _float_input, _static_int,
                                      _static_ints, matmul)
from relay_ir.frontend.python import PyTuple, Static, Translator, Val, Weak, _ty_str
from relay_ir.ty import TensorType, TupleType


def _one(tr: Translator, args: list, kwargs: dict, node: ast.AST, names: tuple[str, ...],
         defaults: tuple = ()) -> list:
    """Positional + keyword arguments by name (``defaults`` fill the tail)."""
    out: list[Any] = list(args)
    if len(out) > len(names):
        raise tr.err(node, f"too many arguments (at most {len(names)})")
    nreq = len(names) - len(defaults)
    for i, n in enumerate(names):
        if i < len(out):
            if n in kwargs:
                raise tr.err(node, f"argument `{n}` given twice")
            continue
        if n in kwargs:
            out.append(kwargs.pop(n))
        elif i >= nreq:
            out.append(defaults[i - nreq])
        else:
            raise tr.err(node, f"missing argument `{n}`")
    for k in list(kwargs):
        if k not in names:
            raise tr.err(node, f"unsupported keyword argument `{k}`")
    return out


def _unary(opname: str, floaty: bool) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        (x,) = _one(tr, args, kwargs, node, ("x",))
        if isinstance(x, Weak) and not floaty:
            return Weak(abs(x.value)) if opname == "abs" else Weak(-x.value)
        v = _float_input(tr, x, node) if floaty else tr.tensor(x, node)
        return tr.op(opname, [v], node)
    return h


def _binary(opname: str, pyop: type | None = None, divide: bool = False) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        a, b = _one(tr, args, kwargs, node, ("x1", "x2"))
        if isinstance(a, Weak) and isinstance(b, Weak):
            a = tr.mat(a, node, str(np.result_type(a.value, b.value)))
        x, y = tr.promote([a, b], node, divide=divide)
        return tr.op(opname, [x, y], node)
    return h


def _reduce(opname: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        x, axis, keepdims = _one(tr, args, kwargs, node, ("a", "axis", "keepdims"),
                                 (None, Weak(False)))
        x = tr.tensor(x, node)
        if opname == "mean" and x.ty.dtype.startswith(("int", "uint", "bool")):
            x = tr.cast(x, "float64", node)
        elif opname in ("sum", "prod") and x.ty.dtype == "bool":
            x = tr.cast(x, "int32", node)  # NOTE: numpy counts in int64
        if not isinstance(keepdims, Weak):
            raise tr.err(node, "keepdims must be a constant")
        return tr.op(opname, [x], node, axis=_axis(tr, axis, node),
                     keepdims=bool(keepdims.value))
    return h


def _shape_arg(tr: Translator, v: Any, node: ast.AST) -> list[int]:
    return _static_ints(tr, v, node, "a shape")


def _dtype_arg(tr: Translator, v: Any, node: ast.AST, default: str | None) -> str | None:
    if v is None or (isinstance(v, Static) and v.obj is None):
        return default
    if isinstance(v, Static):
        try:
            return str(np.dtype(v.obj))
        except TypeError:
            pass
    raise tr.err(node, "dtype must be a numpy dtype or a dtype name")


def _np_fill(opname: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        shape, dtype = _one(tr, args, kwargs, node, ("shape", "dtype"), (None,))
        return tr.op(opname, [], node, shape=_shape_arg(tr, shape, node),
                     dtype=_dtype_arg(tr, dtype, node, "float32"))
    return h


def _np_like(opname: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        x, dtype = _one(tr, args, kwargs, node, ("a", "dtype"), (None,))
        x = tr.tensor(x, node)
        dt = _dtype_arg(tr, dtype, node, None)
        if dt is not None:
            x = tr.cast(x, dt, node)
        return tr.op(opname, [x], node)
    return h


def _np_full(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    shape, fill, dtype = _one(tr, args, kwargs, node, ("shape", "fill_value", "dtype"), (None,))
    dt = _dtype_arg(tr, dtype, node, None)
    v = tr.mat(fill, node, dt) if isinstance(fill, Weak) else tr.tensor(fill, node)
    if dt is not None:
        v = tr.cast(v, dt, node)
    return tr.op("full", [v], node, shape=_shape_arg(tr, shape, node), dtype=v.ty.dtype)


def _np_reshape(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    x, shape = _one(tr, args, kwargs, node, ("a", "newshape"))
    return tr.op("reshape", [tr.tensor(x, node)], node, newshape=_shape_arg(tr, shape, node))


def _np_transpose(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    x, axes = _one(tr, args, kwargs, node, ("a", "axes"), (None,))
    return tr.op("transpose", [tr.tensor(x, node)], node, axes=_axis(tr, axes, node))


def _np_join(opname: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        seq, axis = _one(tr, args, kwargs, node, ("arrays", "axis"), (Weak(0),))
        if isinstance(seq, Val) and isinstance(seq.ty, TupleType):
            seq = tr.wrap_param(seq.expr, seq.ty)
        if not isinstance(seq, PyTuple) or not seq.items:
            raise tr.err(node, f"np.{opname} takes a non-empty tuple or list of arrays")
        vs = tr.promote(list(seq.items), node)
        tup = Val(Tuple(tuple(v.expr for v in vs)), TupleType(tuple(v.ty for v in vs)))
        return tr.op(opname, [tup], node, axis=_static_int(tr, axis, node, "axis"))
    return h


def _np_where(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    c, a, b = _one(tr, args, kwargs, node, ("condition", "x", "y"))
    c = tr.tensor(c, node)
    if c.ty.dtype != "bool":
        c = tr.op("not_equal", [c, tr.mat(Weak(0), node, c.ty.dtype)], node)
    x, y = tr.promote([a, b], node)
    return tr.op("where", [c, x, y], node)


def _np_dot(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    a, b = _one(tr, args, kwargs, node, ("a", "b"))
    if isinstance(a, Weak) or isinstance(b, Weak):
        return tr.binop(ast.Mult, a, b, node)
    return matmul(tr, a, b, node)


def _np_expand_dims(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    x, axis = _one(tr, args, kwargs, node, ("a", "axis"))
    return tr.op("expand_dims", [tr.tensor(x, node)], node,
                 axis=_static_int(tr, axis, node, "axis"))


def _np_squeeze(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    x, axis = _one(tr, args, kwargs, node, ("a", "axis"), (None,))
    return tr.op("squeeze", [tr.tensor(x, node)], node, axis=_axis(tr, axis, node))


def _np_clip(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    x, lo, hi = _one(tr, args, kwargs, node, ("a", "a_min", "a_max"))
    out = tr.tensor(x, node)
    if lo is not None and not (isinstance(lo, Static) and lo.obj is None):
        out = tr.op("maximum", tr.promote([out, lo], node), node)
    if hi is not None and not (isinstance(hi, Static) and hi.obj is None):
        out = tr.op("minimum", tr.promote([out, hi], node), node)
    return out


def _np_square(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    (x,) = _one(tr, args, kwargs, node, ("x",))
    return tr.binop(ast.Mult, x, x, node)


def _np_log1p(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    (x,) = _one(tr, args, kwargs, node, ("x",))
    x = _float_input(tr, x, node)
    return tr.op("log", [tr.binop(ast.Add, x, Weak(1.0), node)], node)


def _np_var(std: bool) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        x, axis, keepdims = _one(tr, args, kwargs, node, ("a", "axis", "keepdims"),
                                 (None, Weak(False)))
        x = _float_input(tr, x, node)
        ax = _axis(tr, axis, node)
        if not isinstance(keepdims, Weak):
            raise tr.err(node, "keepdims must be a constant")
        m = tr.op("mean", [x], node, axis=ax, keepdims=True)
        d = tr.binop(ast.Sub, x, m, node)
        out = tr.op("mean", [tr.binop(ast.Mult, d, d, node)], node, axis=ax,
                    keepdims=bool(keepdims.value))
        return tr.op("sqrt", [out], node) if std else out
    return h


def _np_outer(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    a, b = _one(tr, args, kwargs, node, ("a", "b"))
    a, b = tr.promote([a, b], node)
    a = tr.op("reshape", [a], node, newshape=[-1, 1])
    b = tr.op("reshape", [b], node, newshape=[1, -1])
    return tr.op("multiply", [a, b], node)


def _np_arg(opname: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        x, axis = _one(tr, args, kwargs, node, ("a", "axis"), (None,))
        x = tr.tensor(x, node)
        if axis is None or (isinstance(axis, Static) and axis.obj is None):
            x = tr.op("reshape", [x], node, newshape=[-1])
            axis = Weak(0)
        return tr.op(opname, [x], node, axis=[_static_int(tr, axis, node, "axis")])
    return h


def _np_norm(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    (x,) = _one(tr, args, kwargs, node, ("x",))
    x = _float_input(tr, x, node)
    return tr.op("sqrt", [tr.op("sum", [tr.binop(ast.Mult, x, x, node)], node, axis=None)],
                 node)


def _np_array(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    x, dtype = _one(tr, args, kwargs, node, ("object", "dtype"), (None,))
    dt = _dtype_arg(tr, dtype, node, None)
    if isinstance(x, Val):
        return tr.cast(x, dt, node) if dt else x
    if isinstance(x, Weak) or (isinstance(x, PyTuple) and all(isinstance(v, Weak)
                                                               for v in x.items)):
        py = x.value if isinstance(x, Weak) else [v.value for v in x.items]
        arr = np.asarray(py, dtype=dt)
        return Val(Constant(arr), TensorType(arr.shape, str(arr.dtype)))
    if isinstance(x, PyTuple):
        return _np_join("stack")(tr, [x], {}, node)
    raise tr.err(node, "np.array takes numbers, tuples of numbers or arrays")


def _np_scalar_type(dtype: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        (x,) = _one(tr, args, kwargs, node, ("x",))
        if isinstance(x, Weak):
            return tr.mat(x, node, dtype)
        return tr.cast(tr.tensor(x, node), dtype, node)
    return h


def _b_abs(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    return _unary("abs", False)(tr, args, kwargs, node)


def _b_minmax(which: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        if kwargs:
            raise tr.err(node, f"{which}() keyword arguments are not supported")
        items = args
        if len(args) == 1:
            a = args[0]
            if isinstance(a, Val) and isinstance(a.ty, TupleType):
                a = tr.wrap_param(a.expr, a.ty)
            if isinstance(a, PyTuple):
                items = list(a.items)
            else:
                return tr.op(which, [tr.tensor(a, node)], node, axis=[0])
        if not items:
            raise tr.err(node, f"{which}() of nothing")
        out = items[0]
        for x in items[1:]:
            if isinstance(out, Weak) and isinstance(x, Weak):
                out = Weak((min if which == "min" else max)(out.value, x.value))
                continue
            a, b = tr.promote([out, x], node)
            if a.ty.shape != () or b.ty.shape != ():
                raise tr.err(node, f"{which}() of arrays is ambiguous; use "
                             f"np.{which}imum")
            out = tr.op("minimum" if which == "min" else "maximum", [a, b], node)
        return out
    return h


def _b_len(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    (x,) = _one(tr, args, kwargs, node, ("obj",))
    if isinstance(x, Val) and isinstance(x.ty, TupleType):
        return Weak(len(x.ty.fields))
    if isinstance(x, PyTuple):
        return Weak(len(x.items))
    x = tr.tensor(x, node)
    if not x.ty.shape:
        raise tr.err(node, "len() of a scalar")
    d = x.ty.shape[0]
    return Weak(d) if isinstance(d, int) else _dim_of(tr, x, 0, node)


def _b_convert(kind: str) -> Callable:
    def h(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
        (x,) = _one(tr, args, kwargs, node, ("x",))
        if isinstance(x, Weak):
            return Weak({"float": float, "int": int, "bool": bool}[kind](x.value))
        x = tr.tensor(x, node)
        if x.ty.shape != ():
            raise tr.err(node, f"{kind}() of an array of type {_ty_str(x.ty)}; only scalars "
                         "convert")
        if kind == "bool":
            return tr.truth(x, node)
        if kind == "float":
            return x if x.ty.dtype.startswith("float") else tr.cast(x, "float32", node)
        return x if x.ty.dtype.startswith("int") else tr.cast(x, "int32", node)
    return h


def _b_range(tr: Translator, args: list, kwargs: dict, node: ast.AST) -> Any:
    if all(isinstance(a, Weak) for a in args) and not kwargs:
        return PyTuple(tuple(Weak(i) for i in range(*[a.value for a in args])))
    raise tr.err(node, "range(...) with run-time bounds is supported only as the iterable "
                 "of a `for` loop")


_TABLE: dict[Any, Callable] = {}


def _init_table() -> None:
    t = _TABLE
    for f, name in ((np.tanh, "tanh"), (np.exp, "exp"), (np.log, "log"), (np.sqrt, "sqrt"),
                    (np.sin, "sin"), (np.cos, "cos"), (np.tan, "tan"), (np.sinh, "sinh"),
                    (np.cosh, "cosh"), (np.arcsin, "asin"), (np.arccos, "acos"),
                    (np.arctan, "atan"), (np.log2, "log2"), (np.log10, "log10"),
                    (np.floor, "floor"), (np.ceil, "ceil"), (np.trunc, "trunc")):
        t[f] = _unary(name, True)
    for f, name in ((np.abs, "abs"), (np.negative, "negative"), (np.sign, "sign")):
        t[f] = _unary(name, False)
    for f, name in ((np.add, "add"), (np.subtract, "subtract"), (np.multiply, "multiply"),
                    (np.maximum, "maximum"), (np.minimum, "minimum"), (np.power, "power"),
                    (np.floor_divide, "floor_divide"), (np.mod, "floor_mod"),
                    (np.less, "less"), (np.greater, "greater"), (np.equal, "equal"),
                    (np.less_equal, "less_equal"), (np.greater_equal, "greater_equal"),
                    (np.not_equal, "not_equal")):
        t[f] = _binary(name)
    t[np.divide] = _binary("divide", divide=True)
    for f, name in ((np.sum, "sum"), (np.mean, "mean"), (np.max, "max"), (np.min, "min"),
                    (np.amax, "max"), (np.amin, "min"), (np.prod, "prod")):
        t[f] = _reduce(name)
    t[np.zeros] = _np_fill("zeros")
    t[np.ones] = _np_fill("ones")
    t[np.zeros_like] = _np_like("zeros_like")
    t[np.ones_like] = _np_like("ones_like")
    t[np.full] = _np_full
    t[np.reshape] = _np_reshape
    t[np.transpose] = _np_transpose
    t[np.concatenate] = _np_join("concatenate")
    t[np.stack] = _np_join("stack")
    t[np.where] = _np_where
    t[np.dot] = _np_dot
    t[np.matmul] = lambda tr, a, k, n: matmul(tr, *_one(tr, a, k, n, ("x1", "x2")), n)
    t[np.expand_dims] = _np_expand_dims
    t[np.squeeze] = _np_squeeze
    t[np.clip] = _np_clip
    t[np.square] = _np_square
    t[np.log1p] = _np_log1p
    t[np.var] = _np_var(False)
    t[np.std] = _np_var(True)
    t[np.outer] = _np_outer
    t[np.argmax] = _np_arg("argmax")
    t[np.argmin] = _np_arg("argmin")
    t[np.linalg.norm] = _np_norm
    t[np.array] = _np_array
    t[np.asarray] = _np_array
    for dt in ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool_"):
        t[getattr(np, dt)] = _np_scalar_type("bool" if dt == "bool_" else dt)
    t[builtins.abs] = _b_abs
    t[builtins.min] = _b_minmax("min")
    t[builtins.max] = _b_minmax("max")
    t[builtins.len] = _b_len
    t[builtins.float] = _b_convert("float")
    t[builtins.int] = _b_convert("int")
    t[builtins.bool] = _b_convert("bool")
    t[builtins.range] = _b_range


def _handler(obj: Any) -> Callable | None:
    if not _TABLE:
        _init_table()
    try:
        return _TABLE.get(obj)
    except TypeError:  # unhashable
        return None


def supported_functions() -> list[str]:
    """The names of the numpy functions and builtins the frontend maps (for the docs)."""
    if not _TABLE:
        _init_table()
    out = []
    for f in _TABLE:
        mod = "np." if getattr(f, "__module__", "") != "builtins" and f not in (
            builtins.float, builtins.int, builtins.bool) else ""
        if f is np.linalg.norm:
            mod = "np.linalg."
        out.append(mod + getattr(f, "__name__", str(f)))
    return sorted(set(out))


def call_method(tr: Translator, m: _Method, args: list, kwargs: dict, node: ast.AST) -> Any:
    x = m.recv
    name = m.name
    if name in ("sum", "mean", "max", "min", "prod"):
        return _reduce(name)(tr, [x] + args, kwargs, node)
    if name in ("var", "std"):
        return _np_var(name == "std")(tr, [x] + args, kwargs, node)
    if name in ("argmax", "argmin"):
        return _np_arg(name)(tr, [x] + args, kwargs, node)
    if name == "reshape":
        if len(args) == 1:
            return _np_reshape(tr, [x, args[0]], kwargs, node)
        return _np_reshape(tr, [x, PyTuple(tuple(args))], kwargs, node)
    if name == "transpose":
        axes = args[0] if len(args) == 1 else (PyTuple(tuple(args)) if args else None)
        return _np_transpose(tr, [x, axes] if axes is not None else [x], kwargs, node)
    if name == "astype":
        (dt,) = _one(tr, args, kwargs, node, ("dtype",))
        return tr.cast(x, _dtype_arg(tr, dt, node, None) or x.ty.dtype, node)
    if name == "dot":
        return _np_dot(tr, [x] + args, kwargs, node)
    raise tr.err(node, f"the method `.{name}()` is not supported")


