"""Runtime values of the interpreter (and, later, of the compiled executor).

* tensors are plain ``numpy.ndarray`` (0-d arrays for scalars) -- ``TensorValue`` is an alias;
* tuples are Python tuples (``()`` is unit, the value of ``ref_write``);
* ADT values are :class:`ADTValue` (``constructor`` node + ``fields`` tuple);
* references are :class:`RefValue` (a mutable ``.value`` cell; aliasing is sharing the object);
* functions are :class:`Closure` (compiled code + captured values). A let-bound recursive
  closure (``let %f = fn (...) { ... %f ... }``) is an ordinary Closure whose captured slot for
  ``%f`` points back at the closure itself, so no separate RecClosure class is needed
  (``RecClosure`` is kept as an alias for readers who look for it). A first-class constructor
  (``Cons`` passed to a fold) evaluates to its :class:`~relay_ir.expr.Constructor` node and a
  first-class operator to its :class:`~relay_ir.expr.Op` node; both are callable values.

:func:`format_value` renders any value readably and iteratively (a 100,000-element list is
fine): ``Cons(1, Cons(2, Nil))``, ``ref(1f)``, ``<closure fn (%x) ...>``, ``(1, 2.5f)``.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from relay_ir.errors import InterpreterError
from relay_ir.expr import Constructor, Function, Op
from relay_ir.ty import (AnyDim, DimExpr, FuncType, GlobalTypeVar, RefType, ShapeVar, TensorType,
                         TupleType, Type, TypeCall, fmt_type)

TensorValue = np.ndarray

_SUFFIX = {
    "int32": "", "int64": "i64", "int16": "i16", "int8": "i8",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float32": "f", "float64": "f64", "float16": "f16",
}


class ADTValue:
    """A value built by an ADT constructor: ``Cons(1, Nil)``."""

    __slots__ = ("constructor", "fields")

    def __init__(self, constructor: Constructor, fields: Sequence[Any] = ()):
        self.constructor = constructor
        self.fields = tuple(fields)

    @property
    def name(self) -> str:
        """The constructor's name (``"Cons"``)."""
        return self.constructor.name_hint

    @property
    def tag(self) -> int:
        """The constructor's tag (its index in the type definition)."""
        return self.constructor.tag

    def __repr__(self) -> str:
        return format_value(self)


class RefValue:
    """A mutable reference cell created by ``ref(v)``; ``.value`` is its current content."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return format_value(self)


class Closure:
    """A function value: compiled code plus the values it captured from its environment.

    ``code`` is an opaque per-backend code object (the interpreter's step list; the compiled
    executor's own), or None for a global not compiled yet: ``force()`` asks ``program`` (the
    backend's prepared module) to compile it. ``func`` is the :class:`~relay_ir.expr.Function`
    it came from (None for a closure of a program read back from JSON); ``name`` is the
    global's name for globals (``""`` for local closures). Calling a closure from Python runs it
    with the interpreter: ``clo(np.float32(1))``.
    """

    __slots__ = ("code", "captured", "func", "name", "program")

    def __init__(self, code: Any, captured: list, func: Function | None, name: str = "",
                 program: Any = None):
        self.code = code            # the backend's code object, None until first call (globals)
        self.captured = captured    # list of captured values, in the code's capture order
        self.func = func
        self.name = name
        self.program = program      # the compiled module that compiles `code` on demand

    def force(self) -> Any:
        """The compiled code, compiling it now if needed."""
        if self.code is None:
            self.code = self.program.compile_global(self)
        return self.code

    def __call__(self, *args: Any) -> Any:
        from relay_ir.runtime.interpreter import apply
        return apply(self, *args)

    def __repr__(self) -> str:
        return format_value(self)


RecClosure = Closure


# ----------------------------------------------------------------------------- formatting
def format_scalar(arr: Any) -> str:
    """A 0-d array in Relay literal style: ``1``, ``2.5f``, ``3i64``, ``True``."""
    dt = str(arr.dtype)
    if dt == "bool":
        return "True" if bool(arr) else "False"
    x = arr[()] if isinstance(arr, np.ndarray) else arr
    if dt.startswith(("int", "uint")):
        return f"{int(x)}{_SUFFIX.get(dt, '_' + dt)}"
    if dt.startswith("float"):
        f = float(x)
        if f != f or f in (float("inf"), float("-inf")):
            body = str(f)
        elif f == int(f) and abs(f) < 1e16:
            # NOTE: str(int(-0.0)) is "0": keep the sign of a negative zero
            body = str(int(f)) if f or np.copysign(1.0, f) > 0 else "-0"
        else:
            body = np.format_float_positional(x, unique=True, trim="-") if abs(f) >= 1e-4 \
                else np.format_float_scientific(x, unique=True, trim="-")
        return body + _SUFFIX.get(dt, "_" + dt)
    return f"{x!r}:{dt}"


def format_tensor(arr: np.ndarray) -> str:
    """A tensor: 0-d in literal style, otherwise ``Tensor[(2, 2), int32]([[1, 2], [3, 4]])``."""
    if arr.ndim == 0:
        return format_scalar(arr)
    # NOTE: one line (rows joined), so tensors read well inside tuples and ADT values
    body = " ".join(np.array2string(arr, separator=", ", threshold=64).split())
    shape = ", ".join(str(d) for d in arr.shape)
    if arr.ndim == 1:
        shape += ","
    return f"Tensor[({shape}), {arr.dtype}]({body})"


def format_value(value: Any) -> str:
    """Readable text of any runtime value; iterative, so deep lists do not recurse."""
    out: list[str] = []
    stack: list[tuple[bool, Any]] = [(False, value)]
    while stack:
        is_text, v = stack.pop()
        if is_text:
            out.append(v)
            continue
        if isinstance(v, (np.ndarray, np.generic)):
            out.append(format_tensor(np.asarray(v)))
        elif isinstance(v, ADTValue):
            if not v.fields:
                out.append(v.constructor.name_hint)
                continue
            out.append(v.constructor.name_hint + "(")
            stack.append((True, ")"))
            _push_seq(stack, v.fields)
        elif isinstance(v, tuple):
            out.append("(")
            stack.append((True, ",)" if len(v) == 1 else ")"))
            _push_seq(stack, v)
        elif isinstance(v, RefValue):
            out.append("ref(")
            stack.append((True, ")"))
            stack.append((False, v.value))
        elif isinstance(v, Closure):
            params = ", ".join("%" + p.name_hint for p in v.func.params) if v.func else "..."
            prefix = f"@{v.name} " if v.name else ""
            out.append(f"<closure {prefix}fn ({params}) ...>")
        elif isinstance(v, Constructor):
            out.append(f"<constructor {v.name_hint}>")
        elif isinstance(v, Op):
            out.append(f"<operator {v.name}>")
        else:
            out.append(repr(v))
    return "".join(out)


def _push_seq(stack: list[tuple[bool, Any]], items: Sequence[Any]) -> None:
    for i in range(len(items) - 1, -1, -1):
        stack.append((False, items[i]))
        if i:
            stack.append((True, ", "))


def is_callable_value(v: Any) -> bool:
    """True for the values a call can apply: closures, constructors and operators."""
    return isinstance(v, (Closure, Constructor, Op))


# ----------------------------------------------------------------------------- argument checks
def _describe(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"an array of shape {v.shape} and dtype {v.dtype}"
    if isinstance(v, np.generic):
        return f"a numpy {v.dtype} scalar"
    if isinstance(v, ADTValue):
        return f"an ADT value {v.constructor.name_hint}(...)"
    if isinstance(v, RefValue):
        return "a reference"
    if isinstance(v, Closure):
        return "a closure"
    if isinstance(v, tuple):
        return f"a tuple of {len(v)} fields"
    return f"a Python {type(v).__name__} {v!r}"[:120]


_DEFERRED = ShapeVar("<deferred polynomial dims>")   # a marker key in check_arguments' env


class _ArgError(Exception):
    """An argument does not fit its parameter (turned into an InterpreterError naming it)."""


def check_arguments(fn: Function | None, ptypes: Sequence[Type | None], args: Sequence[Any],
                    names: Sequence[str] | None = None) -> list:
    """Check (and convert) ``args`` against ``fn``'s parameter types; returns the values.

    The one argument check of every executor: the interpreter, both paths of
    ``runtime.build`` and loaded module files. An array must have exactly the parameter's
    dtype and shape (symbolic dims consistent across parameters); a Python scalar or nested
    list is accepted only where every value converts exactly. With ``fn`` None (a builtin, a
    loaded module, a closure read back without its source) the arguments are checked against
    ``ptypes``, and ``names`` (when given) name the parameters. Errors name the parameter.
    """
    if fn is not None:
        params = fn.params
        if len(args) != len(params):
            listed = ", ".join("%" + p.name_hint for p in params) or "no parameters"
            raise InterpreterError(f"expected {len(params)} arguments ({listed}), "
                                   f"got {len(args)}", fn.span)
        names = [p.name_hint for p in params]
    elif names is not None and len(args) != len(names):
        listed = ", ".join("%" + n for n in names) or "no parameters"
        raise InterpreterError(f"expected {len(names)} arguments ({listed}), got {len(args)}")
    env: dict[ShapeVar, int] = {}
    out = []
    for i, (t, v) in enumerate(zip(ptypes, args)):
        try:
            out.append(_convert(v, t, env))
        except _ArgError as e:
            raise _arg_error(fn, names, i, e) from None
    if _DEFERRED not in env:
        return out
    # NOTE: a polynomial dim (n + m) met before all its variables were bound: checked now
    for i, (t, a) in enumerate(zip(ptypes, out)):
        if isinstance(t, TensorType) and isinstance(a, np.ndarray):
            for got, want in zip(a.shape, t.shape):
                if isinstance(want, DimExpr) and _eval_dim(want, env) not in (None, got):
                    e = _ArgError(f"expected {fmt_type(t)}, got {_describe(a)} (dimension "
                                  f"{want!r} is {_eval_dim(want, env)} here)")
                    raise _arg_error(fn, names, i, e) from None
    return out


def _arg_error(fn: Function | None, names: Sequence[str] | None, i: int,
               e: _ArgError) -> InterpreterError:
    p = fn.params[i] if fn is not None else None
    name = p.name_hint if p is not None else (names[i] if names is not None else None)
    where = f"argument {i + 1}" + (f" (%{name})" if name is not None else "")
    return InterpreterError(f"{where}: {e}", p.span if p is not None else None)


def _convert(v: Any, t: Type | None, env: dict[ShapeVar, int]) -> Any:
    if t is None:
        return default_convert(v)
    if isinstance(t, TensorType):
        return _convert_tensor(v, t, env)
    if isinstance(t, TupleType):
        if isinstance(v, list):
            v = tuple(v)
        if not isinstance(v, tuple) or len(v) != len(t.fields):
            raise _ArgError(f"expected {fmt_type(t)}, got {_describe(v)}")
        out = []
        for j, (x, ft) in enumerate(zip(v, t.fields)):
            try:
                out.append(_convert(x, ft, env))
            except _ArgError as e:
                raise _ArgError(f"field {j}: {e}") from None
        return tuple(out)
    if isinstance(t, (TypeCall, GlobalTypeVar)):
        head = t.func if isinstance(t, TypeCall) else t
        if not isinstance(v, ADTValue):
            raise _ArgError(f"expected {fmt_type(t)}, got {_describe(v)}")
        if isinstance(head, GlobalTypeVar) and \
                v.constructor.belong_to.name_hint != head.name_hint:
            raise _ArgError(f"expected {fmt_type(t)}, got a value of type "
                            f"{v.constructor.belong_to.name_hint}")
        return v
    if isinstance(t, RefType):
        if not isinstance(v, RefValue):
            raise _ArgError(f"expected {fmt_type(t)}, got {_describe(v)}")
        return v
    if isinstance(t, FuncType):
        if not isinstance(v, (Closure, Constructor, Op)):
            raise _ArgError(f"expected a function of type {fmt_type(t)}, got {_describe(v)}")
        return v
    return default_convert(v)


def default_convert(v: Any) -> Any:
    """Python scalars and lists with no known type: ints to int32, floats to float32."""
    if isinstance(v, np.generic):
        return np.asarray(v)
    if isinstance(v, bool):
        return np.asarray(v, dtype="bool")
    if isinstance(v, int):
        _check_int_range(np.asarray(v) if -2**63 <= v < 2**64 else None, v, "int32", "")
        return np.asarray(v, dtype="int32")
    if isinstance(v, float):
        return np.asarray(v, dtype="float32")
    if isinstance(v, list):
        try:
            arr = np.asarray(v)
        except (ValueError, OverflowError):
            raise _ArgError(f"cannot convert {_short(v)} to a tensor") from None
        if arr.dtype == np.float64:
            arr = arr.astype("float32")
        elif arr.dtype == np.int64:
            _check_int_range(arr, v, "int32", "")
            arr = arr.astype("int32")
        elif arr.dtype == object:
            _check_int_range(None, v, "int32", "")
        return arr
    if isinstance(v, tuple):
        return tuple(default_convert(x) for x in v)
    return v


_DTYPES: dict[str, np.dtype] = {}


def _convert_tensor(v: Any, t: TensorType, env: dict[ShapeVar, int]) -> np.ndarray:
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        dt = _DTYPES[t.dtype] = np.dtype(t.dtype)
    if type(v) is np.ndarray and v.dtype == dt and v.shape == t.shape:
        return v    # NOTE: the common case (static shape, right dtype) without the checks below
    expect = f"expected {fmt_type(t)}"
    if isinstance(v, np.ndarray):
        arr = v
    elif isinstance(v, np.generic):
        arr = np.asarray(v)
    elif isinstance(v, (bool, int, float, list)):
        arr = _convert_python(v, t, expect)
    else:
        raise _ArgError(f"{expect}, got {_describe(v)}")
    if str(arr.dtype) != t.dtype or arr.ndim != len(t.shape):
        raise _ArgError(f"{expect}, got {_describe(arr)}")
    for got, want in zip(arr.shape, t.shape):
        if isinstance(want, int):
            ok = got == want
        elif isinstance(want, AnyDim):
            ok = True
        elif isinstance(want, ShapeVar):
            bound = env.setdefault(want, got)
            ok = bound == got
            if not ok:
                raise _ArgError(f"{expect}, got {_describe(arr)} (dimension {want.name} is "
                                f"{bound} in an earlier argument)")
        elif isinstance(want, DimExpr):
            val = _eval_dim(want, env)
            ok = val is None or val == got
            if val is None:
                env[_DEFERRED] = 0          # type: ignore[index]
        else:
            ok = True
        if not ok:
            raise _ArgError(f"{expect}, got {_describe(arr)}")
    return arr


def _convert_python(v: Any, t: TensorType, expect: str) -> np.ndarray:
    """A Python scalar or nested list as a ``t.dtype`` array, only where every value converts
    exactly: ``True``/``False`` for bool only, an int in range for integer dtypes, a float (or
    an int it represents exactly) for float dtypes, and never a finite value becoming inf."""
    target = _DTYPES.get(t.dtype) or np.dtype(t.dtype)
    items = [v] if not isinstance(v, list) else list(leaves(v))
    ints: list[int] = []
    for x in items:
        if isinstance(x, bool):
            ok = target.kind == "b"
        elif isinstance(x, int):
            ok = target.kind in "iuf"
            ints.append(x)
        elif isinstance(x, float):
            ok = target.kind in "fc"
        else:
            raise _ArgError(f"{expect}, got a list holding {_describe(x)}")
        if not ok:
            what = "a Python bool" if isinstance(x, bool) else f"a Python {type(x).__name__}"
            raise _ArgError(f"{expect}, got {what} ({_short(x)}): it does not convert "
                            f"exactly to {t.dtype}")
    if target.kind in "iu" and ints:
        info = np.iinfo(target)
        if not info.min <= min(ints) or not max(ints) <= info.max:
            _check_int_range(None, ints, t.dtype, expect + ": ")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            arr = np.array(v, dtype=target)
    except (ValueError, OverflowError, TypeError):
        raise _ArgError(f"{expect}, got a ragged nested list") from None
    if target.kind in "fc":
        if ints:
            for x in ints:
                if float(target.type(x)) != x:
                    raise _ArgError(f"{expect}, got the integer {_short(x)}, which {t.dtype} "
                                    f"cannot represent exactly")
        if arr.size and not np.isfinite(arr).all():
            with np.errstate(over="ignore"):
                for x in items:
                    if isinstance(x, float) and np.isfinite(x) and \
                            not np.isfinite(target.type(x)):
                        raise _ArgError(f"{expect}, got {_short(x)}, which overflows "
                                        f"{t.dtype} (it would become inf)")
    return arr


def _eval_dim(d: DimExpr, env: dict[ShapeVar, int]) -> int | None:
    total = 0
    for mono, coef in d.terms:
        prod = coef
        for var in mono:
            if var not in env:
                return None
            prod *= env[var]
        total += prod
    return total


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def leaves(v: Any) -> Iterator[Any]:
    """The items of a nested list/tuple that are not lists or tuples (``v`` itself if none)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            yield x


def _all_ints(v: Any) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in leaves(v))


def _check_int_range(raw: np.ndarray | None, v: Any, dtype: str, prefix: str) -> None:
    """Refuse Python integers that ``dtype`` cannot hold (numpy would wrap them silently).

    ``raw`` is ``v`` as a numpy integer array, or None when numpy could not hold it at all.
    """
    info = np.iinfo(dtype)
    if raw is not None:
        if raw.size == 0:
            return
        lo, hi = int(raw.min()), int(raw.max())
        if info.min <= lo and hi <= info.max:
            return
        bad = lo if lo < info.min else hi
    else:
        bad = next((x for x in leaves(v) if not info.min <= x <= info.max), v)
    raise _ArgError(f"{prefix}the integer {bad} is out of range for {dtype} "
                    f"({info.min} to {info.max})")


__all__ = ["TensorValue", "ADTValue", "RefValue", "Closure", "RecClosure", "format_value",
           "format_tensor", "format_scalar", "is_callable_value", "check_arguments",
           "default_convert"]
