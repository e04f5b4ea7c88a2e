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

from typing import Any, Sequence

import numpy as np

from relay_ir.expr import Constructor, Function, Op

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

    ``func`` is the :class:`~relay_ir.expr.Function` it came from; ``name`` is the global's
    name for globals (``""`` for local closures). Calling a closure from Python runs it with the
    interpreter: ``clo(np.float32(1))``.
    """

    __slots__ = ("code", "captured", "func", "name", "program")

    def __init__(self, code: Any, captured: list, func: Function, name: str = "",
                 program: Any = None):
        self.code = code            # interpreter Code, or None until first call (globals)
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
            body = str(int(f))
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
            params = ", ".join("%" + p.name_hint for p in v.func.params)
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


__all__ = ["TensorValue", "ADTValue", "RefValue", "Closure", "RecClosure", "format_value",
           "format_tensor", "format_scalar", "is_callable_value"]
