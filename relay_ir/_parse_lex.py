"""Lexical helpers of the text parser: literals, comment blanking, metadata, dtypes."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

import numpy as np

from relay_ir.errors import ParseError
from relay_ir.expr import Constant, Constructor, GlobalVar, Op, Var
from relay_ir.span import SourceFile, Span
from relay_ir.tvm_metadata import decode_tvm_metadata, is_tvm_metadata
from relay_ir.ty import IncompleteType, ShapeVar, Type, TypeVar


# ----------------------------------------------------------------------------- literals
_INT_RE = re.compile(r"[0-9]+\Z")
_FLOAT_RE = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_RUN_RE = re.compile(r"[0-9.eE+\-]*")
_INT_RANGE = {"int16": (-2 ** 15, 2 ** 15 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
              "int64": (-2 ** 63, 2 ** 63 - 1)}
_FLOAT_MAX = {"float16": float(np.finfo(np.float16).max),
              "float32": float(np.finfo(np.float32).max),
              "float64": float(np.finfo(np.float64).max)}


def _check_width(width: str, suffix: str, shown: str, family: str, hint: str) -> None:
    """Refuse a literal suffix whose width is not 16, 32 or 64 (or empty: 32)."""
    if width in ("", "16", "32", "64"):
        return
    if width.isdigit():
        raise ValueError(f"unrecognized {family} scalar width `{suffix}`: literals can be "
                         f"{family}16, {family}32 or {family}64{hint}")
    raise ValueError(f"invalid numeric suffix `{suffix}` in `{shown}`")


def _number_value(text: str) -> tuple[int | float, str]:
    """The value and dtype of a numeric literal token; raises ValueError with a message."""
    body = text.lstrip("-")
    neg = (len(text) - len(body)) % 2 == 1
    if body.startswith("inff"):
        width = body[4:]
        return (-math.inf if neg else math.inf), "float" + (width or "32")
    run = _RUN_RE.match(body).group()  # type: ignore[union-attr]
    suffix = body[len(run):]
    shown = text
    if not suffix:
        if _INT_RE.match(run):
            v = -int(run) if neg else int(run)
            for dtype in ("int32", "int64"):
                lo, hi = _INT_RANGE[dtype]
                if lo <= v <= hi:
                    return v, dtype
            raise ValueError(f"integer literal `{shown}` does not fit in int64")
        if _FLOAT_RE.match(run):
            raise ValueError(f"floating-point literals need an `f` suffix (write `{shown}f`)")
        raise ValueError(f"malformed number `{shown}` (write binary operators with spaces "
                         f"around them, e.g. `2 - 1`)")
    kind, width = suffix[0], suffix[1:]
    if kind == "i":
        _check_width(width, suffix, shown, "int", " (use cast(...) for other dtypes)")
        if not _INT_RE.match(run):
            raise ValueError(f"malformed integer literal `{shown}`")
        dtype = "int" + (width or "32")
        v = -int(run) if neg else int(run)
        lo, hi = _INT_RANGE[dtype]
        if not lo <= v <= hi:
            raise ValueError(f"integer literal `{shown}` does not fit in {dtype}")
        return v, dtype
    if kind == "f":
        _check_width(width, suffix, shown, "float", "")
        if not _FLOAT_RE.match(run):
            raise ValueError(f"malformed floating-point literal `{shown}`")
        dtype = "float" + (width or "32")
        fv = float(run)
        if fv > _FLOAT_MAX[dtype]:
            raise ValueError(f"floating-point literal `{shown}` is out of range for {dtype}")
        return (-fv if neg else fv), dtype
    raise ValueError(f"invalid numeric suffix `{suffix}` in `{shown}` (integers take `i`, "
                     f"`i16`, `i32`, `i64`; floats take `f`, `f16`, `f32`, `f64`)")


_ARRAY_CACHE: dict[str, np.ndarray] = {}


def _literal_array(text: str) -> np.ndarray:
    arr = _ARRAY_CACHE.get(text)
    if arr is None:
        v, dtype = _number_value(text)
        arr = np.array(v, dtype=dtype)
        arr.flags.writeable = False
        if len(_ARRAY_CACHE) < 100_000:
            _ARRAY_CACHE[text] = arr
    return arr


_ATTR_NUMBERS: dict[str, int | float] = {}  # attribute literal text -> its value
_NOT_CACHED = object()

_TRUE = np.array(True)
_TRUE.flags.writeable = False
_FALSE = np.array(False)
_FALSE.flags.writeable = False

_PREC = {"*": 12, "/": 12, "+": 10, "-": 10, "<": 8, ">": 8, "<=": 8, ">=": 8, "==": 7,
         "!=": 7}
_BINOP_NAMES = {"*": "multiply", "/": "divide", "+": "add", "-": "subtract", "<": "less",
                ">": "greater", "<=": "less_equal", ">=": "greater_equal", "==": "equal",
                "!=": "not_equal"}


# ----------------------------------------------------------------------------- helpers
def _pos(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def _offset_span(src: SourceFile, start: int, end: int | None = None) -> Span:
    line, col = _pos(src.text, start)
    if end is None or end <= start:
        return Span(src, line, col, line, col + 1)
    eline, ecol = _pos(src.text, end)
    return Span(src, line, col, eline, ecol)


_SCAN_RE = re.compile(r'/\*|\*/|//|"|#\[metadata\]')
_BLANK_RE = re.compile(r"[^\n]")


def _blank(seg: str) -> str:
    return " " * len(seg) if "\n" not in seg else _BLANK_RE.sub(" ", seg)


def _preprocess(text: str, src: SourceFile) -> tuple[str, int]:
    """Blank out comments (keeping line/column positions) and find the metadata section.

    Returns the cleaned text (cut before ``#[metadata]``) and the offset of ``#[metadata]``
    (-1 if none).
    """
    if "/" not in text and "#[metadata]" not in text:
        return text, -1
    pieces: list[str] = []
    last = 0
    pos = 0
    depth = 0
    start = 0
    meta = -1
    search = _SCAN_RE.search
    while True:
        m = search(text, pos)
        if m is None:
            break
        tok = m.group()
        if depth == 0:
            s = m.start()
            if tok == '"':
                e = text.find('"', s + 1)
                if e < 0:
                    break  # the lexer reports the unterminated string
                pos = e + 1
            elif tok == "//":
                e = text.find("\n", s)
                if e < 0:
                    e = len(text)
                pieces.append(text[last:s])
                pieces.append(" " * (e - s))
                last = pos = e
            elif tok == "/*":
                depth = 1
                start = s
                pos = m.end()
            elif tok == "*/":
                pos = m.end()  # a stray `*/` is left for the parser to reject
            else:  # #[metadata]
                meta = s
                break
        else:
            if tok == "/*":
                depth += 1
            elif tok == "*/":
                depth -= 1
                if depth == 0:
                    pieces.append(text[last:start])
                    pieces.append(_blank(text[start:m.end()]))
                    last = m.end()
            pos = m.end()
    if depth > 0:
        raise ParseError("unclosed block comment `/*` (block comments nest: every `/*` needs "
                         "its own `*/`)", _offset_span(src, start, start + 2))
    end = meta if meta >= 0 else len(text)
    if last < end:
        pieces.append(text[last:end])
    return "".join(pieces), meta


# ----------------------------------------------------------------------------- metadata
_META_TOKEN_RE = re.compile(r"meta\[([^\]]*)\]\[([0-9]+)\]\Z")


def _decode_constant(entry: Any) -> np.ndarray:
    """A numpy array from one ``relay.Constant`` metadata entry; raises ValueError."""
    if isinstance(entry, Constant):
        return entry.data
    if isinstance(entry, np.ndarray):
        return entry
    if not isinstance(entry, dict):
        raise ValueError("a relay.Constant entry must be an object with dtype, shape and data")
    extra = set(entry) - {"dtype", "shape", "data"}
    if extra:
        raise ValueError(f"unknown field(s) {sorted(extra)} in a relay.Constant entry")
    dtype, shape, data = entry.get("dtype"), entry.get("shape"), entry.get("data")
    if not isinstance(dtype, str):
        raise ValueError("a relay.Constant entry needs a string `dtype`")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"unsupported dtype `{dtype}`") from None
    if dt.kind not in "biuf" or str(dt) != dtype:
        raise ValueError(f"unsupported dtype `{dtype}`")
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError("`shape` must be a list of non-negative integers")
    if not isinstance(data, str):
        raise ValueError("`data` must be a base64 string")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError("`data` is not valid base64") from None
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * dt.itemsize:
        raise ValueError(f"`data` holds {len(raw)} bytes, but shape {shape} of {dtype} "
                         f"needs {count * dt.itemsize}")
    arr = np.frombuffer(raw, dtype=dt.newbyteorder("<")).reshape(shape).astype(dt)
    arr.flags.writeable = False
    return arr


def _load_metadata(text: str, meta: int, src: SourceFile) -> dict[str, list]:
    """Parse the JSON after ``#[metadata]`` (at offset ``meta``) into type key -> entries."""
    body_start = meta + len("#[metadata]")
    body = text[body_start:]
    head = _offset_span(src, meta, body_start)
    if "#[metadata]" in body:
        off = body_start + body.index("#[metadata]")
        raise ParseError("only one metadata section is allowed",
                         _offset_span(src, off, off + len("#[metadata]")))
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        raise ParseError(f"malformed metadata JSON: {e.msg}",
                         _offset_span(src, body_start + e.pos)) from None
    except RecursionError:
        raise ParseError("malformed metadata JSON: nested too deeply", head) from None
    if is_tvm_metadata(obj):  # NOTE: a section written by TVM's own Relay printer
        try:
            return decode_tvm_metadata(obj)
        except ValueError as e:
            raise ParseError(f"malformed TVM metadata section: {e}", head) from None
    if not isinstance(obj, dict) or not all(isinstance(v, list) for v in obj.values()):
        raise ParseError("the metadata section must be a JSON object mapping type keys to "
                         "lists (e.g. {\"relay.Constant\": [...]})", head)
    return obj


# ----------------------------------------------------------------------------- records
class _TParam:
    """A type parameter being parsed: becomes a ShapeVar if used as a dimension."""

    __slots__ = ("name", "span", "tv", "sv")

    def __init__(self, name: str, span: Span):
        self.name = name
        self.span = span
        self.tv: TypeVar | None = None
        self.sv: ShapeVar | None = None

    def as_type(self, span: Span) -> TypeVar:
        if self.sv is not None:
            raise ParseError(f"`{self.name}` is used as a dimension elsewhere, so it is a shape "
                             f"variable and cannot be used as a type", span)
        if self.tv is None:
            self.tv = TypeVar(self.name, span=self.span)
        return self.tv

    def as_dim(self, span: Span) -> ShapeVar:
        if self.tv is not None:
            raise ParseError(f"`{self.name}` is used as a type elsewhere, so it cannot be used "
                             f"as a dimension", span)
        if self.sv is None:
            self.sv = ShapeVar(self.name)
        return self.sv

    def binder(self) -> TypeVar | ShapeVar:
        if self.sv is not None:
            return self.sv
        if self.tv is None:
            self.tv = TypeVar(self.name, span=self.span)
        return self.tv


class _TParams(list):
    """The result of a ``[A, n]`` list (its entries)."""


class _Params:
    __slots__ = ("vars", "attrs")

    def __init__(self, vars_: tuple[Var, ...], attrs: dict[str, Any]):
        self.vars = vars_
        self.attrs = attrs


class _Ret:
    __slots__ = ("type",)

    def __init__(self, t: Type):
        self.type = t


class _Attr:
    __slots__ = ("key", "value", "span")

    def __init__(self, key: str, value: Any, span: Span):
        self.key = key
        self.value = value
        self.span = span


_LET, _GRAPH, _FREE, _ANON = 0, 1, 2, 3
_GRAPH_REC = (_GRAPH,)
_REF_TYPES = frozenset((Var, GlobalVar, Op, Constructor))
_REF_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_/.%@")
_KEYWORDS = frozenset(("let", "fn", "def", "if", "else", "type", "match", "extern", "free_var",
                       "ref", "ref_read", "ref_write", "Tensor"))
_MODE_MODULE, _MODE_EXPR, _MODE_TYPE = 0, 1, 2
# operators and types that only exist after TVM's lowering passes
_LOWERING_PREFIXES = ("memory.", "vm.")
_LOWERING_TYPES = frozenset(("Storage",))


def _attrs_dict(items: list[_Attr]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in items:
        if a.key in out:
            raise ParseError(f"attribute `{a.key}` is given twice", a.span)
        out[a.key] = a.value
    return out


def _attrs_key(items: list[_Attr]) -> tuple | None:
    """A hashable key that tells attribute lists apart exactly (None: do not cache).

    Only int and str values (exact types: ``True == 1``) are keyed; floats by ``repr`` (``0.0``
    and ``-0.0`` are equal but differ).
    """
    out = []
    for a in items:
        v = a.value
        t = type(v)
        if t is int or t is str:
            out.append((a.key, t, v))
        elif t is float:
            out.append((a.key, t, repr(v)))
        else:
            return None
    return tuple(out)


# ----------------------------------------------------------------------------- dtypes
# TVM's DataType parser reads `<kind><bits>?(x<lanes>)?`: a missing (or zero) width is 32
# bits, so `int`, `uint` and `float` are int32, uint32 and float32; `bool` is exact.
# `bfloat16` is known to annotations (TVM has it) though no operator computes with it.
_DTYPE_RE = re.compile(r"(u?int|b?float)([0-9]*)(?:x([0-9]*))?\Z")
_DTYPE_CACHE: dict[str, str] = {}


def _known_dtypes() -> frozenset[str]:
    from relay_ir.op._rules import DTYPES
    return DTYPES | {"bfloat16"}


def _canonical_dtype(name: str, span: Span | None) -> str:
    """The canonical dtype a type annotation names (``int`` -> ``int32``); else a ParseError.

    Follows TVM's DataType string rules; vector dtypes (``x`` lanes other than 1) and widths
    relay_ir has no values for are refused with the list of known dtypes.
    """
    got = _DTYPE_CACHE.get(name)
    if got is not None:
        return got
    known = _known_dtypes()
    out = name if name in known else None
    if out is None:
        m = _DTYPE_RE.match(name)
        if m is not None:
            kind, bits, lanes = m.groups()
            width = int(bits) if bits else 0
            out = f"{kind}{width or (16 if kind == 'bfloat' else 32)}"
            if lanes is not None:
                if not lanes or int(lanes) == 0:
                    raise ParseError(f"invalid lanes in dtype `{name}`: `x` must be followed by "
                                     f"a positive number of lanes", span)
                if int(lanes) != 1:
                    raise ParseError(f"vector dtype `{name}` ({int(lanes)} lanes) is not "
                                     f"supported: tensors have scalar dtypes (known dtypes: "
                                     f"{', '.join(sorted(known))})", span)
            if out not in known:
                out = None
    if out is None:
        raise ParseError(f"unknown dtype `{name}` (known dtypes: {', '.join(sorted(known))}; "
                         f"`int`, `uint` and `float` mean 32 bits)", span)
    if len(_DTYPE_CACHE) < 1024:
        _DTYPE_CACHE[name] = out
    return out


def _annotation(c: list, i: int) -> Type | None:
    """The type annotation at ``c[i]``, if any; a bare ``_`` means "no annotation" (as in TVM)."""
    if len(c) <= i:
        return None
    t = c[i]
    return None if type(t) is IncompleteType else t
