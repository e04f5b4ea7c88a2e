"""The Relay text-format parser (v0.0.5): text -> IRModule / Expr / Type, with spans.

Pipeline, for speed and for bounded recursion:

1. :func:`_preprocess` blanks out comments (block comments nest, so they are counted here
   rather than lexed) and cuts off the ``#[metadata]`` section, which is read as JSON before
   parsing so that ``meta[relay.Constant][i]`` can be resolved on the spot.
2. Lark's LALR parser (grammar ``grammar/relay.lark``, contextual lexer) runs with
   :class:`_Builder` as its *internal* transformer: every reduction builds IR directly, no parse
   tree is made. LALR reductions happen in source order, so scoping is done during the parse:
   a binder (let head, parameter, pattern variable, graph binding, type parameter) is pushed
   when it is reduced -- before the text in its scope is read -- and each ``seq``, function,
   clause or type definition pops exactly what it pushed when it is reduced.
   Nothing recurses: the Lark parser is iterative, sequences are flat repetitions, and every
   builder callback does a bounded amount of work (let chains are built in one loop).
   For speed, a valid text is parsed by :mod:`relay_ir._fastparse` first: its own lexer and
   LALR loop over the same Lark table, calling the same builder methods with the same
   arguments. On any trouble (a syntax or scoping error, anything unexpected) it gives up and
   the text is parsed again by Lark from scratch, so every error is exactly Lark's.
   ``USE_FAST_PATH = False`` turns it off.
3. Lark errors are mapped to :class:`~relay_ir.errors.ParseError` with token-based messages
   (:func:`_syntax_error`). No other exception escapes :func:`parse`, :func:`parse_expr` or
   :func:`parse_type`.

Interface decisions (the printer agrees):

* ``a; b`` is ``Let(Var(""), a, b)``: the anonymous variable's ``name_hint`` is ``""``
  (``%_`` is an ordinary variable name).
* A bare ADT name ``T`` in a type is ``TypeCall(GlobalTypeVar("T"), ())`` (as in TVM); a bound
  type parameter is the ``TypeVar`` itself; ``(T)`` is a 1-tuple type, as in TVM.
* Extensions beyond TVM's parser (printed by our printer): ``ref(T)`` reference types,
  generic function types ``fn [A](A) -> A``, named symbolic dimensions bound by type parameters
  (``def @f[n](%x: Tensor[(n, 4), float32])``) with polynomial dimensions ``n + 1``, ``2*n``,
  projection after a call (``f(x).0``), ``extern type`` anywhere in a module.
* Graph bindings ``%N = e;`` are scoped like lets; redefining a visible ``%N`` is an error.
* Unsuffixed integer literals are int32, or int64 when they do not fit int32.
* dtypes are read as TVM's DataType parser reads them and stored canonically (``int`` is
  ``int32``, ``float32x1`` is ``float32``); unknown and vector dtypes are errors. A bare ``_``
  annotation on a binder means "no annotation" (``let %x: _ = ...`` is ``let %x = ...``).
* Parameter attributes ``%x {k=v}: T`` go to ``Var.attrs``; a ``meta[Key][i]`` attribute value
  is a :class:`~relay_ir.tvm_metadata.MetaRef` holding the entry (``relay.Constant`` excluded).
* A leading UTF-8 byte order mark is dropped before anything else (line 1 columns count from
  after it).
* Literal constants hold read-only numpy arrays (shared between equal literals).
"""
from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import re
import threading
from importlib import resources
from typing import Any, Mapping

import numpy as np
from lark import Token

from relay_ir.attrs import EMPTY_ATTRS, Attrs
from relay_ir.errors import DiagnosticError, ParseError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.span import SourceFile, Span
from relay_ir.tvm_metadata import MetaRef, decode_tvm_metadata, is_tvm_metadata
from relay_ir.ty import (ANY, FuncType, GlobalTypeVar, IncompleteType, Kind, RefType, ShapeVar,
                         TensorType, TupleType, Type, TypeCall, TypeData, TypeVar, dim_add,
                         dim_mul, dim_sub, is_dtype_name)

__all__ = ["parse", "parse_expr", "parse_type", "VERSION"]

VERSION = "0.0.5"

# ----------------------------------------------------------------------------- literals
_INT_RE = re.compile(r"[0-9]+\Z")
_FLOAT_RE = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_RUN_RE = re.compile(r"[0-9.eE+\-]*")
_INT_RANGE = {"int16": (-2 ** 15, 2 ** 15 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
              "int64": (-2 ** 63, 2 ** 63 - 1)}
_FLOAT_MAX = {"float16": float(np.finfo(np.float16).max),
              "float32": float(np.finfo(np.float32).max),
              "float64": float(np.finfo(np.float64).max)}


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
        if width not in ("", "16", "32", "64"):
            if width.isdigit():
                raise ValueError(f"unrecognized int scalar width `i{width}`: literals can be "
                                 f"int16, int32 or int64 (use cast(...) for other dtypes)")
            raise ValueError(f"invalid numeric suffix `{suffix}` in `{shown}`")
        if not _INT_RE.match(run):
            raise ValueError(f"malformed integer literal `{shown}`")
        dtype = "int" + (width or "32")
        v = -int(run) if neg else int(run)
        lo, hi = _INT_RANGE[dtype]
        if not lo <= v <= hi:
            raise ValueError(f"integer literal `{shown}` does not fit in {dtype}")
        return v, dtype
    if kind == "f":
        if width not in ("", "16", "32", "64"):
            if width.isdigit():
                raise ValueError(f"unrecognized float scalar width `f{width}`: literals can be "
                                 f"float16, float32 or float64")
            raise ValueError(f"invalid numeric suffix `{suffix}` in `{shown}`")
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


# ----------------------------------------------------------------------------- builder
class _Builder:
    """Lark internal transformer: one method per grammar rule / alias, building IR."""

    # ---------------------------------------------------------------- state
    def reset(self, src: SourceFile, clean: str, mode: int, init_module: IRModule | None,
              meta: dict[str, list]) -> None:
        self.src = src
        self.clean = clean
        self.line_starts: list[int] | None = None
        self.gnodes: set[int] = set()         # ids of graph-bound values (shared by reference)
        self.last_obj: Any = None             # the most recent reference and its token
        self.last_tok: Any = None
        self.ident_ends: dict[int, Any] = {}  # end offset -> token of a name reference
        self.mode = mode
        self.scope: dict[str, list] = {}      # "%x" / "%0" -> stack of Var / graph node
        self.bound: list[str] = []            # push order, for popping
        self.tscope: dict[str, list[_TParam]] = {}
        self.tbound: list[str] = []
        self.meta = meta
        self.meta_cache: dict[tuple[str, int], np.ndarray] = {}
        self.auto: set[int] = set()           # ids of auto-applied nullary constructor calls
        self.gvars: dict[str, GlobalVar] = {}
        self.gmention: dict[str, Span] = {}
        self.funcs: dict[str, Function] = {}
        self.types: dict[str, TypeData] = {}
        self.new_types: dict[str, TypeData] = {}
        self.tmention: dict[str, Span] = {}
        self.ctors: dict[str, Constructor] = {}
        self.gtvs: dict[str, GlobalTypeVar] = {}
        self.ops: dict[str, Expr] = {}
        self.attrs_cache: dict[tuple, Attrs] = {}  # (op name, attribute key) -> Attrs
        self.init_funcs: dict[str, Function] = {}
        if init_module is not None:
            self.gvars.update(init_module.global_vars)
            self.init_funcs.update(init_module.functions)
            self.types.update(init_module.type_definitions)
            self.ctors.update(init_module.constructors)
            for name, td in init_module.type_definitions.items():
                self.gtvs[name] = td.header

    # ---------------------------------------------------------------- spans
    def tspan(self, t: Any) -> Span:
        return Span(self.src, t.line, t.column, t.end_line, t.end_column)

    def span(self, first: Any, last: Any) -> Span | None:
        """The span from the start of ``first`` to the end of ``last`` (tokens or nodes)."""
        if isinstance(first, Token):
            l0, c0 = first.line, first.column
        else:
            s = first.span
            if s is None:
                return None
            l0, c0 = s.line, s.column
        if isinstance(last, Token):
            l1, c1 = last.end_line, last.end_column
        else:
            s = last.span
            if s is None:
                return None
            l1, c1 = s.end_line, s.end_column
        return Span(self.src, l0, c0, l1, c1)

    # A reference (`%x`, `%0`, `@f`, `add`, `Cons`) returns a shared node whose own span is
    # its definition, so the span of an expression that starts or ends with one is recovered
    # from the tokens: the last child of a rule is always the most recent reduction (the
    # `last_tok` of a reference), and the first one ends just before the next kept token.
    def is_ref(self, x: Any) -> bool:
        return type(x) in _REF_TYPES or id(x) in self.gnodes

    def offset_pos(self, off: int) -> tuple[int, int]:
        ls = self.line_starts
        if ls is None:
            ls = self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.clean)]
        i = bisect.bisect_right(ls, off) - 1
        return i + 1, off - ls[i] + 1

    def start_of(self, x: Any, nxt: Any) -> tuple[int, int]:
        """Start (line, column) of child ``x``, which ends before the kept token ``nxt``."""
        tx = type(x)
        if tx is Token:
            return x.line, x.column
        if tx not in _REF_TYPES and id(x) not in self.gnodes:  # not self.is_ref(x)
            s = x.span
            if s is not None:
                return s.line, s.column
        text = self.clean
        i = nxt.start_pos
        t = self.ident_ends.get(i)
        if t is not None and (t.start_pos == 0 or text[t.start_pos - 1] not in _REF_CHARS):
            return t.line, t.column  # the name right before `nxt`: what the scan finds
        while i > 0 and text[i - 1] in " \t\r\n":
            i -= 1
        j = i
        while j > 0 and text[j - 1] in _REF_CHARS:
            j -= 1
        if "\n" not in text[j:nxt.start_pos]:
            return nxt.line, nxt.column - (nxt.start_pos - j)
        return self.offset_pos(j)

    def end_of(self, x: Any) -> tuple[int, int]:
        """End (line, column) of the last child ``x`` of a rule being reduced."""
        if type(x) is Token:
            return x.end_line, x.end_column
        if self.is_ref(x) and self.last_obj is x:
            t = self.last_tok
            return t.end_line, t.end_column
        s = x.span
        if s is None:
            return -1, -1
        return s.end_line, s.end_column

    def span_of(self, first: Any, nxt: Any, last: Any) -> Span:
        l0, c0 = self.start_of(first, nxt)
        l1, c1 = self.end_of(last)
        return Span(self.src, l0, c0, l1, c1)

    # ---------------------------------------------------------------- scopes
    def push(self, key: str, value: Any) -> None:
        st = self.scope.get(key)
        if st is None:
            self.scope[key] = [value]
        else:
            st.append(value)
        self.bound.append(key)

    def pop(self, n: int) -> None:
        bound, scope = self.bound, self.scope
        for _ in range(n):
            scope[bound.pop()].pop()

    def pop_tparams(self, entries: list[_TParam]) -> tuple[TypeVar | ShapeVar, ...]:
        for _ in entries:
            self.tscope[self.tbound.pop()].pop()
        return tuple(e.binder() for e in entries)

    # ---------------------------------------------------------------- start rules
    def module(self, c: list) -> None:
        return None

    def expr_top(self, c: list) -> Expr:
        return c[-1]

    def type_top(self, c: list) -> Type:
        return c[0]

    # ---------------------------------------------------------------- definitions
    def tparams(self, c: list) -> _TParams:
        out = _TParams()
        seen: set[str] = set()
        for tok in c:
            name = str(tok)
            if name in seen:
                raise ParseError(f"type parameter `{name}` is declared twice", self.tspan(tok))
            seen.add(name)
            if "." in name:
                raise ParseError(f"invalid type parameter name `{name}`", self.tspan(tok))
            e = _TParam(name, self.tspan(tok))
            st = self.tscope.get(name)
            if st is None:
                self.tscope[name] = [e]
            else:
                st.append(e)
            self.tbound.append(name)
            out.append(e)
        return out

    def param(self, c: list) -> Var:
        tok = c[0]
        if len(c) > 1 and type(c[1]) is Attrs:
            var = Var(tok[1:], _annotation(c, 2), attrs=c[1], span=self.span(tok, tok))
        else:
            var = Var(tok[1:], _annotation(c, 1), span=self.span(tok, tok))
        self.push(str(tok), var)
        return var

    def param_attrs(self, c: list) -> Attrs:
        return Attrs(_attrs_dict(c)) if c else EMPTY_ATTRS

    def params(self, c: list) -> _Params:
        vars_ = tuple(x for x in c[1:] if type(x) is Var)
        attrs = _attrs_dict([x for x in c[1:] if type(x) is _Attr])
        return _Params(vars_, attrs)

    def ret_type(self, c: list) -> _Ret:
        return _Ret(c[0])

    def _function(self, kw: Any, rest: list) -> Function:
        tps: _TParams = _TParams()
        ret = None
        params = None
        body = rest[-2]
        for x in rest[:-2]:
            if type(x) is _TParams:
                tps = x
            elif type(x) is _Params:
                params = x
            elif type(x) is _Ret:
                ret = x.type
        assert params is not None
        self.pop(len(params.vars))
        type_params = self.pop_tparams(tps)
        attrs = Attrs(params.attrs) if params.attrs else EMPTY_ATTRS
        return Function(params.vars, body, ret, type_params, attrs, span=self.span(kw, rest[-1]))

    def def_fn(self, c: list) -> None:
        gtok = c[1]
        name = gtok[1:]
        fn = self._function(c[0], c[2:])
        if name in self.funcs or name in self.init_funcs:
            where = ("in the initial module (the prelude, with prelude=True / --prelude)"
                     if name in self.init_funcs else "earlier")
            raise ParseError(f"global `@{name}` is already defined {where}", self.tspan(gtok))
        if name not in self.gvars:
            self.gvars[name] = GlobalVar(name, span=self.tspan(gtok))
        self.funcs[name] = fn

    def _gtv(self, name: str) -> GlobalTypeVar:
        g = self.gtvs.get(name)
        if g is None:
            g = self.gtvs[name] = GlobalTypeVar(name)
        return g

    def _define_type(self, tok: Any, tps: _TParams, ctor_defs: list) -> None:
        name = str(tok)
        if "." in name or is_dtype_name(name):
            raise ParseError(f"invalid type name `{name}` (names starting with int, uint, float "
                             f"or bool read as dtypes)", self.tspan(tok))
        if name in self.types:
            where = "" if name in self.new_types else (
                " in the initial module (the prelude, with prelude=True / --prelude)")
            raise ParseError(f"type `{name}` is already defined{where}", self.tspan(tok))
        gtv = self._gtv(name)
        params = self.pop_tparams(tps)
        ctors = []
        for tag, (ctok, fields) in enumerate(ctor_defs):
            cname = str(ctok)
            if "." in cname:
                raise ParseError(f"invalid constructor name `{cname}`", self.tspan(ctok))
            if cname in self.ctors or any(k.name_hint == cname for k in ctors):
                old = self.ctors.get(cname)
                where = "" if old is None or old.belong_to.name_hint in self.new_types else (
                    " in the initial module (the prelude, with prelude=True / --prelude)")
                raise ParseError(f"a constructor with the name `{cname}` was previously "
                                 f"defined{where}", self.tspan(ctok))
            ctors.append(Constructor(cname, tuple(fields), gtv, tag, span=self.tspan(ctok)))
        td = TypeData(gtv, params, tuple(ctors),  # type: ignore[arg-type]
                      span=self.tspan(tok))
        self.types[name] = td
        self.new_types[name] = td
        for k in ctors:
            self.ctors[k.name_hint] = k

    def type_def(self, c: list) -> None:
        tps = c[2] if len(c) > 2 and type(c[2]) is _TParams else _TParams()
        ctor_defs = [x for x in c[2:] if type(x) is tuple]
        self._define_type(c[1], tps, ctor_defs)

    def extern_type(self, c: list) -> None:
        tps = c[3] if len(c) > 3 else _TParams()
        self._define_type(c[2], tps, [])

    def ctor_def(self, c: list) -> tuple:
        return (c[0], c[1:])

    # ---------------------------------------------------------------- sequences
    def seq(self, c: list) -> Expr:
        body = c[-1]
        if len(c) == 1:
            return body
        el, ec = self.end_of(body)
        src = self.src
        pops = 0
        for i in range(len(c) - 2, -1, -1):
            rec = c[i]
            tag = rec[0]
            if tag == _LET:
                body = Let(rec[1], rec[2], body, span=Span(src, rec[3], rec[4], el, ec))
                pops += 1
            elif tag == _ANON:
                sp = Span(src, rec[2], rec[3], el, ec)
                body = Let(Var("", span=Span(src, rec[2], rec[3], rec[2], rec[3])), rec[1],
                           body, span=sp)
            else:
                pops += 1
        if pops:
            self.pop(pops)
        return body

    # `seq([x])` is `x`: the fast driver may skip the call for a one-item sequence
    seq.one_child_identity = True  # type: ignore[attr-defined]

    def let_head(self, c: list) -> tuple:
        tok = c[1]
        var = Var(tok[1:], _annotation(c, 2), span=self.tspan(tok))
        self.push(str(tok), var)
        return (var, c[0])

    def let_stmt(self, c: list) -> tuple:
        var, kw = c[0]
        return (_LET, var, c[1], kw.line, kw.column)

    def graph_stmt(self, c: list) -> tuple:
        tok = c[0]
        st = self.scope.get(tok.value)
        if st:
            raise ParseError(f"graph variable `{tok}` is already defined in this scope",
                             self.tspan(tok))
        value = c[1]
        key = tok.value
        if st is None:
            self.scope[key] = [value]
        else:
            st.append(value)
        self.bound.append(key)
        self.gnodes.add(id(value))
        return _GRAPH_REC

    def free_var_stmt(self, c: list) -> tuple:
        tok = c[1]
        if self.mode != _MODE_EXPR:
            raise ParseError("`free_var` declarations are only allowed in expressions "
                             "(parse_expr), not in module definitions", self.tspan(c[0]))
        var = Var(tok[1:], _annotation(c, 2), span=self.tspan(tok))
        self.push(str(tok), var)
        return (_FREE,)

    def expr_stmt(self, c: list) -> tuple:
        line, col = self.start_of(c[0], c[1])
        return (_ANON, c[0], line, col)

    def block(self, c: list) -> Expr:
        return c[1]

    # ---------------------------------------------------------------- operators and calls
    def _op(self, name: str, tok: Any) -> Expr:
        op = self.ops.get(name)
        if op is None:
            from relay_ir.op import lookup_opdef
            od = lookup_opdef(name)
            if od is None:
                raise ParseError(self._unknown_callee(name), self.tspan(tok))
            op = self.ops[name] = od.op
        return op

    def _unknown_callee(self, name: str) -> str:
        """The message for a name that is neither a constructor nor an operator."""
        if name.startswith(_LOWERING_PREFIXES):
            return (f"operator `{name}` is internal to TVM's lowering (memory planning and the "
                    f"VM); relay_ir programs cannot use it")
        import difflib
        from relay_ir.op import list_ops
        what = "operator" if "." in name else "constructor or operator"
        names = [od.name for od in list_ops()] + list(self.ctors)
        close = difflib.get_close_matches(name, names, n=3)
        hint = (" (did you mean " + " or ".join(f"`{c}`" for c in close) + "?)") if close else ""
        return f"{what} `{name}` not found{hint}"

    def _default_attrs(self, op: Op) -> Attrs:
        return op.opdef.default_attrs

    def binop(self, c: list) -> Expr:
        # operand positions: (start line, col, end line, col) of every operand
        n = len(c)
        pos = []
        for i in range(0, n, 2):
            x = c[i]
            if i + 1 < n:
                sl, sc = self.start_of(x, c[i + 1])
                if self.is_ref(x) or x.span is None:
                    el, ec = sl, sc + len(self.ref_text(x, c[i + 1]))
                else:
                    el, ec = x.span.end_line, x.span.end_column
            else:
                el, ec = self.end_of(x)
                if self.is_ref(x) and self.last_obj is x:
                    sl, sc = self.last_tok.line, self.last_tok.column
                elif x.span is not None:
                    sl, sc = x.span.line, x.span.column
                else:
                    sl, sc = c[i - 1].end_line, c[i - 1].end_column
            pos.append((sl, sc, el, ec))
        out = [(c[0], pos[0])]
        ops: list = []
        src = self.src

        def reduce() -> None:
            tok = ops.pop()
            b, pb = out.pop()
            a, pa = out.pop()
            op = self._op(_BINOP_NAMES[tok], tok)
            sp = Span(src, pa[0], pa[1], pb[2], pb[3])
            out.append((Call(op, (a, b), self._default_attrs(op), span=sp),  # type: ignore
                        (pa[0], pa[1], pb[2], pb[3])))

        for i in range(1, n, 2):
            tok = c[i]
            p = _PREC[tok.value]
            while ops and _PREC[ops[-1]] >= p:
                reduce()
            ops.append(tok)
            out.append((c[i + 1], pos[(i + 1) // 2]))
        while ops:
            reduce()
        return out[0][0]

    def ref_text(self, x: Any, nxt: Any) -> str:
        """The text of reference ``x``, which ends just before token ``nxt``."""
        text = self.clean
        i = nxt.start_pos
        while i > 0 and text[i - 1] in " \t\r\n":
            i -= 1
        j = i
        while j > 0 and text[j - 1] in _REF_CHARS:
            j -= 1
        return text[j:i]

    def call(self, c: list) -> Expr:
        callee = c[0]
        rpar = c[-1]
        args = []
        attrs = []
        for x in c[2:-1]:
            if type(x) is _Attr:
                attrs.append(x)
            else:
                args.append(x)
        l0, c0 = self.start_of(callee, c[1])
        span = Span(self.src, l0, c0, rpar.end_line, rpar.end_column)
        if id(callee) in self.auto:
            callee = callee.op  # `Nil()`: the nullary constructor was auto-applied
        if type(callee) is Op:
            if not attrs:
                a = self._default_attrs(callee)
            else:
                a = self._op_attrs(callee, attrs)
        elif attrs:
            given = _attrs_dict(attrs)
            key = given.pop("attrs_type_key", None)
            if not isinstance(key, str):
                bad = attrs[0]
                raise ParseError("only operator calls take attributes; a call of another "
                                 "callee needs `attrs_type_key=\"...\"` among its attributes",
                                 bad.span)
            a = Attrs(given, key)
        else:
            a = EMPTY_ATTRS
        return Call(callee, tuple(args), a, span=span)

    def _op_attrs(self, op: Op, attrs: list[_Attr]) -> Attrs:
        key = _attrs_key(attrs)
        if key is None:
            return self._make_op_attrs(op, attrs)
        key = (op.name, key)
        a = self.attrs_cache.get(key)
        if a is None:  # Attrs are immutable: equal attribute lists share one record
            a = self.attrs_cache[key] = self._make_op_attrs(op, attrs)
        return a

    def _make_op_attrs(self, op: Op, attrs: list[_Attr]) -> Attrs:
        from relay_ir.op import AttrError, get_opdef
        od = get_opdef(op.name)
        given = _attrs_dict(attrs)
        key = given.pop("attrs_type_key", None)
        if key is not None and key != od.attrs_type:
            sp = next(a.span for a in attrs if a.key == "attrs_type_key")
            raise ParseError(f"`{op.name}` takes attributes of type `{od.attrs_type or 'none'}`,"
                             f" not `{key}`", sp)
        for a in attrs:
            if a.key == "attrs_type_key":
                continue
            f = od.attr_field(a.key)
            if f is None:
                known = ", ".join(x.name for x in od.attrs) or "none"
                raise ParseError(f"`{op.name}` has no attribute `{a.key}` (known attributes: "
                                 f"{known})", a.span)
            try:
                f.convert(a.value)
            except (ValueError, TypeError) as e:
                raise ParseError(f"attribute `{a.key}` of `{op.name}`: {e}", a.span) from None
        try:
            return od.make_attrs(given, attrs[0].span)
        except AttrError as e:
            raise ParseError(e.message, e.span or attrs[0].span) from None

    def proj(self, c: list) -> Expr:
        tok = c[2]
        if not _INT_RE.match(tok):
            raise ParseError(f"invalid tuple index `{tok}` (write one `.N` per projection; use "
                             f"parentheses for nested ones: `(%t.0).1`)", self.tspan(tok))
        return TupleGetItem(c[0], int(tok), span=self.span_of(c[0], c[1], tok))

    def attr(self, c: list) -> _Attr:
        tok = c[0]
        return _Attr(str(tok), c[1], self.tspan(tok))

    def attr_number(self, c: list) -> int | float:
        tok = c[0]
        v = _ATTR_NUMBERS.get(tok.value, _NOT_CACHED)
        if v is _NOT_CACHED:
            try:
                v, dtype = _number_value(tok)
            except ValueError as e:
                raise ParseError(str(e), self.tspan(tok)) from None
            if len(_ATTR_NUMBERS) < 100_000:
                _ATTR_NUMBERS[tok.value] = v
        return v

    def attr_true(self, c: list) -> bool:
        return True

    def attr_false(self, c: list) -> bool:
        return False

    def attr_string(self, c: list) -> str:
        return c[0][1:-1]

    def attr_ident(self, c: list) -> None:
        tok = c[0]
        if tok in ("None", "nullptr"):
            return None
        raise ParseError(f"invalid attribute value `{tok}`: attribute values are numbers, "
                         f"True/False, \"strings\", [lists] or None", self.tspan(tok))

    def attr_meta(self, c: list) -> MetaRef:
        tok = c[0]
        m = _META_TOKEN_RE.match(tok)
        assert m is not None
        key, idx = m.group(1), int(m.group(2))
        sp = self.tspan(tok)
        if key == "relay.Constant":
            raise ParseError("a `relay.Constant` cannot be an attribute value (attribute "
                             "metadata references name other entries, e.g. "
                             "`meta[VirtualDevice][0]`)", sp)
        return MetaRef(key, idx, self._meta_entry(tok, key, idx, sp))

    def _meta_entry(self, tok: Any, key: str, idx: int, sp: Span) -> Any:
        """Entry ``idx`` of metadata list ``key``; a ParseError if there is none."""
        if not self.meta:
            raise ParseError(f"`{tok}` refers to the metadata section, but there is none "
                             f"(add `#[metadata]` and a JSON table at the end)", sp)
        items = self.meta.get(key)
        if items is None:
            raise ParseError(f"the metadata section has no `{key}` entries", sp)
        if idx >= len(items):
            raise ParseError(f"`{tok}` is out of range: the metadata section has {len(items)} "
                             f"`{key}` entries", sp)
        return items[idx]

    def attr_list(self, c: list) -> tuple:
        return tuple(c[1:])

    # ---------------------------------------------------------------- atoms
    def number(self, c: list) -> Constant:
        tok = c[0]
        try:
            arr = _literal_array(tok)
        except ValueError as e:
            raise ParseError(str(e), self.tspan(tok)) from None
        return Constant(arr, span=Span(self.src, tok.line, tok.column, tok.end_line,
                                       tok.end_column))

    def true_lit(self, c: list) -> Constant:
        return Constant(_TRUE, span=self.tspan(c[0]))

    def false_lit(self, c: list) -> Constant:
        return Constant(_FALSE, span=self.tspan(c[0]))

    def local(self, c: list) -> Expr:
        tok = c[0]
        st = self.scope.get(tok.value)
        if not st:
            raise ParseError(f"this local variable has not been previously declared: `{tok}`",
                             self.tspan(tok))
        v = self.last_obj = st[-1]
        self.last_tok = tok
        return v

    def graphvar(self, c: list) -> Expr:
        tok = c[0]
        st = self.scope.get(tok.value)
        if not st:
            raise ParseError(f"graph variable `{tok}` is not defined here (write `{tok} = ...;` "
                             f"before using it)", self.tspan(tok))
        v = self.last_obj = st[-1]
        self.last_tok = tok
        return v

    def global_var(self, c: list) -> GlobalVar:
        tok = c[0]
        name = tok[1:]
        g = self.gvars.get(name)
        if g is None:
            g = self.gvars[name] = GlobalVar(name, span=self.tspan(tok))
        if name not in self.gmention:
            self.gmention[name] = self.tspan(tok)
        self.last_obj = g
        self.last_tok = tok
        return g

    def ident(self, c: list) -> Expr:
        tok = c[0]
        name = tok.value
        k = self.ctors.get(name)
        if k is None and name in _KEYWORDS:
            if name == "match":
                raise ParseError("a `match` cannot be used directly as a let or graph binding "
                                 "value or as an operand; wrap it in parentheses: "
                                 "`(match ...)`", self.tspan(tok))
            raise ParseError(f"unexpected keyword `{name}` here", self.tspan(tok))
        if k is not None:
            if not k.inputs:
                call = Call(k, (), span=self.tspan(tok))
                self.auto.add(id(call))
                return call
            self.last_obj = k
            self.last_tok = tok
            self.ident_ends[tok.end_pos] = tok
            return k
        op = self.ops.get(name)
        if op is None:
            op = self._op(name, tok)
        self.last_obj = op
        self.last_tok = tok
        self.ident_ends[tok.end_pos] = tok
        return op

    def meta_ref(self, c: list) -> Constant:
        tok = c[0]
        return Constant(self._meta_constant(tok), span=self.tspan(tok))

    def _meta_constant(self, tok: Any) -> np.ndarray:
        m = _META_TOKEN_RE.match(tok)
        assert m is not None
        key, idx = m.group(1), int(m.group(2))
        cached = self.meta_cache.get((key, idx))
        if cached is not None:
            return cached
        sp = self.tspan(tok)
        if not self.meta:
            raise ParseError(f"`{tok}` refers to the metadata section, but there is none "
                             f"(add `#[metadata]` and a JSON table at the end)", sp)
        if key != "relay.Constant":
            raise ParseError(f"unsupported metadata type key `{key}` in expression position "
                             f"(only relay.Constant)", sp)
        entry = self._meta_entry(tok, key, idx, sp)
        try:
            arr = _decode_constant(entry)
        except ValueError as e:
            raise ParseError(f"bad metadata entry {key}[{idx}]: {e}", sp) from None
        self.meta_cache[(key, idx)] = arr
        return arr

    def fn_expr(self, c: list) -> Function:
        return self._function(c[0], c[1:])

    def if_expr(self, c: list) -> If:
        return If(c[1], c[2], c[3], span=self.span(c[0], c[4]))

    def ref_create(self, c: list) -> RefCreate:
        return RefCreate(c[1], span=self.span(c[0], c[2]))

    def ref_read(self, c: list) -> RefRead:
        return RefRead(c[1], span=self.span(c[0], c[2]))

    def ref_write(self, c: list) -> RefWrite:
        return RefWrite(c[1], c[2], span=self.span(c[0], c[3]))

    def unit(self, c: list) -> Tuple:
        return Tuple((), span=self.span(c[0], c[1]))

    def tuple(self, c: list) -> Tuple:
        return Tuple(tuple(c[1:-1]), span=self.span(c[0], c[-1]))

    # ---------------------------------------------------------------- match
    def match(self, c: list) -> Match:
        kw = c[0]
        clauses = tuple(c[2:-1])
        return Match(c[1], clauses, complete=not kw.endswith("?"), span=self.span(kw, c[-1]))

    def clause(self, c: list) -> Clause:
        pat, body = c
        n = 0
        stack = [pat]
        while stack:
            p = stack.pop()
            t = type(p)
            if t is PatternVar:
                n += 1
            elif t is PatternConstructor or t is PatternTuple:
                stack.extend(p.patterns)
        self.pop(n)
        el, ec = self.end_of(body)
        ps = pat.span
        return Clause(pat, body, span=Span(self.src, ps.line, ps.column, el, ec))

    def pat_wild(self, c: list) -> PatternWildcard:
        return PatternWildcard(span=self.tspan(c[0]))

    def pat_var(self, c: list) -> PatternVar:
        tok = c[0]
        sp = self.tspan(tok)
        var = Var(tok[1:], _annotation(c, 1), span=sp)
        self.push(str(tok), var)
        return PatternVar(var, span=sp)

    def pat_ctor(self, c: list) -> PatternConstructor:
        tok = c[0]
        k = self.ctors.get(str(tok))
        if k is None:
            raise ParseError(f"undefined constructor name `{tok}` in a pattern (perhaps you "
                             f"intended to write a pattern variable, `%{tok}`)", self.tspan(tok))
        pats = tuple(c[1:])
        return PatternConstructor(k, pats, span=self.span(tok, pats[-1] if pats else tok))

    def pat_tuple(self, c: list) -> PatternTuple:
        pats = tuple(c[1:])
        return PatternTuple(pats, span=self.span(c[0], pats[-1] if pats else c[0]))

    # ---------------------------------------------------------------- types
    def tuple_type(self, c: list) -> TupleType:
        return TupleType(tuple(c[1:]))

    def func_type(self, c: list) -> FuncType:
        tps = _TParams()
        rest = c[1:]
        if rest and type(rest[0]) is _TParams:
            tps = rest[0]
            rest = rest[1:]
        type_params = self.pop_tparams(tps)
        return FuncType(tuple(rest[:-1]), rest[-1], type_params)

    def ref_type(self, c: list) -> RefType:
        return RefType(c[1])

    def tensor_type(self, c: list) -> TensorType:
        tok = c[2]
        return TensorType(c[1], _canonical_dtype(str(tok), self.tspan(tok)))

    def _type_head(self, tok: Any) -> Type:
        name = str(tok)
        st = self.tscope.get(name)
        if st:
            return st[-1].as_type(self.tspan(tok))
        if "." in name or "/" in name:
            raise ParseError(f"invalid type name `{name}`", self.tspan(tok))
        if name not in self.tmention:
            self.tmention[name] = self.tspan(tok)
        return self._gtv(name)

    def named_type(self, c: list) -> Type:
        tok = c[0]
        name = str(tok)
        if is_dtype_name(name) and not self.tscope.get(name):
            return TensorType((), _canonical_dtype(name, self.tspan(tok)))
        head = self._type_head(tok)
        if type(head) is GlobalTypeVar:
            return TypeCall(head, ())
        return head

    def type_call(self, c: list) -> TypeCall:
        tok = c[0]
        if is_dtype_name(str(tok)) and not self.tscope.get(str(tok)):
            raise ParseError(f"`{tok}` is a dtype and takes no type arguments", self.tspan(tok))
        return TypeCall(self._type_head(tok), tuple(c[1:]))

    def incomplete_type(self, c: list) -> IncompleteType:
        return IncompleteType(Kind.Type, span=self.tspan(c[0]))

    def shape(self, c: list) -> tuple:
        return tuple(c[1:])

    def dim(self, c: list) -> Any:
        # c = [BINOP?] atom (BINOP atom)*; `*` binds tighter than `+`/`-`.
        i = 0
        sign = 1
        if isinstance(c[0], Token):
            if c[0] not in ("-", "+"):
                raise ParseError(f"unexpected `{c[0]}` in a dimension", self.tspan(c[0]))
            sign = -1 if c[0] == "-" else 1
            i = 1
        terms: list = []
        cur = c[i] if sign == 1 else dim_mul(-1, c[i])
        pending = 1
        i += 1
        while i < len(c):
            tok, val = c[i], c[i + 1]
            if tok == "*":
                cur = dim_mul(cur, val)
            elif tok in ("+", "-"):
                terms.append((pending, cur))
                pending = 1 if tok == "+" else -1
                cur = val
            else:
                raise ParseError(f"`{tok}` is not allowed in a dimension (use +, - and *)",
                                 self.tspan(tok))
            i += 2
        terms.append((pending, cur))
        total: Any = 0
        for sgn, t in terms:
            if t is ANY and len(terms) > 1:
                raise ParseError("`?` cannot be part of a dimension expression",
                                 self.tspan(c[0]) if isinstance(c[0], Token) else None)
            total = dim_add(total, t) if sgn > 0 else dim_sub(total, t)
        if len(terms) == 1 and terms[0][0] > 0:
            return terms[0][1]
        return total

    def dim_int(self, c: list) -> int:
        tok = c[0]
        body = tok.lstrip("-")
        if not _INT_RE.match(body):
            raise ParseError(f"invalid dimension `{tok}` (dimensions are integers, `?` or "
                             f"shape variables)", self.tspan(tok))
        v = int(body)
        return -v if (len(tok) - len(body)) % 2 else v

    def dim_name(self, c: list) -> ShapeVar:
        tok = c[0]
        st = self.tscope.get(str(tok))
        if not st:
            raise ParseError(f"unknown dimension `{tok}`: a symbolic dimension must be declared "
                             f"as a type parameter (e.g. `fn [{tok}](...)`)", self.tspan(tok))
        return st[-1].as_dim(self.tspan(tok))

    def dim_any(self, c: list) -> Any:
        return ANY

    def dim_meta(self, c: list) -> Any:
        raise ParseError("metadata references are not supported in shapes; declare a named "
                         "dimension as a type parameter instead (e.g. `fn [n](%x: Tensor[(n), "
                         "float32])`)", self.tspan(c[0]))


# ----------------------------------------------------------------------------- the parser
class _AlwaysNumbers:
    """Post-lexer that only makes the contextual lexer try NUMBER in every state.

    As in TVM, `-` glued to a digit always starts a literal, so `%x -1` is an error (a literal
    after an expression) rather than a subtraction.
    """

    always_accept = ("NUMBER", "INF")

    def process(self, stream: Any) -> Any:
        return stream


_LOCK = threading.RLock()
_BUILDER = _Builder()
_LARK: Any = None


def _grammar_text() -> str:
    return resources.files("relay_ir.grammar").joinpath("relay.lark").read_text("utf-8")


def _lark() -> Any:
    """The Lark LALR parser, built once per process with the builder as its transformer."""
    global _LARK
    if _LARK is None:
        from lark import Lark
        _LARK = Lark(_grammar_text(), parser="lalr", lexer="contextual",
                     start=["module", "expr_top", "type_top"], transformer=_BUILDER,
                     maybe_placeholders=False, postlex=_AlwaysNumbers())
    return _LARK


_NOT_PARSED = object()
_FAST: Any = None
#: Set to False to always parse with Lark's own driver (the reference for the fast path).
USE_FAST_PATH = True


def _fast_driver() -> Any:
    """The fast lexer + LALR driver over the Lark table (None if disabled or unsupported)."""
    global _FAST
    if not USE_FAST_PATH:
        return None
    if _FAST is None:
        from relay_ir._fastparse import FastDriver
        try:
            _FAST = FastDriver(_lark())
        except ValueError:  # pragma: no cover - a Lark version this driver does not know
            _FAST = False
    return _FAST or None


_HEADER_RE = re.compile(r"[ \t\r\n]*(#\[[^\]\n]*\])?")


def _check_header(clean: str, src: SourceFile, required: bool) -> None:
    m = _HEADER_RE.match(clean)
    assert m is not None
    if m.group(1) is None:
        if required:
            off = m.end()
            raise ParseError('missing version header: add #[version = "0.0.5"] as the first '
                             'line', _offset_span(src, off, off + 1))
        return
    inner = m.group(1)[2:-1].strip()
    sp = _offset_span(src, m.start(1), m.end(1))
    if inner == "metadata":
        return
    if not inner.startswith("version"):
        raise ParseError(f"unsupported attribute `#[{inner}]` (expected "
                         f'#[version = "0.0.5"])', sp)
    _, eq, value = inner.partition("=")
    if not eq or value.strip() != f'"{VERSION}"':
        raise ParseError(f'invalid semantic version `{value.strip()}`: this parser reads '
                         f'version "{VERSION}"', sp)


def _run(text: str, source_name: str, mode: int, init_module: IRModule | None,
         metadata: Mapping[str, Any] | None) -> tuple[Any, _Builder, SourceFile]:
    if not isinstance(text, str):
        raise TypeError(f"parse expects a str, got {type(text).__name__}")
    if text.startswith("\ufeff"):
        # NOTE: a UTF-8 byte order mark is dropped; columns of line 1 count from after it
        text = text[1:]
    src = SourceFile(source_name, text)
    clean, meta_at = _preprocess(text, src)
    if mode != _MODE_TYPE:
        _check_header(clean, src, required=(mode == _MODE_MODULE))
    meta: dict[str, list] = {}
    if meta_at >= 0:
        if mode == _MODE_TYPE:
            raise ParseError("a type cannot have a metadata section",
                             _offset_span(src, meta_at, meta_at + 11))
        meta = {k: list(v) for k, v in _load_metadata(text, meta_at, src).items()}
    for k, v in (metadata or {}).items():
        meta.setdefault(k, []).extend(v)
    start = ("module", "expr_top", "type_top")[mode]
    from lark.exceptions import LarkError, UnexpectedInput, VisitError
    with _LOCK:
        parser = _lark()
        b = _BUILDER
        saved = dict(b.__dict__)
        try:
            b.reset(src, clean, mode, init_module, meta)
            result = _NOT_PARSED
            fast = _fast_driver()
            if fast is not None:
                from relay_ir._fastparse import STATS, Fallback
                try:
                    result = fast.parse(clean, start)
                    STATS["fast"] += 1
                except Fallback:
                    # re-parse with Lark from scratch: its errors are the reference ones
                    STATS["fallback"] += 1
                    b.reset(src, clean, mode, init_module, meta)
            try:
                if result is _NOT_PARSED:
                    result = parser.parse(clean, start=start)
            except UnexpectedInput as e:
                raise _syntax_error(e, clean, src) from None
            except VisitError as e:
                orig = e.orig_exc
                if isinstance(orig, ParseError):
                    raise orig from None
                raise ParseError(f"internal parser error: {orig!r}", None) from None
            except DiagnosticError as e:
                if isinstance(e, ParseError):
                    raise
                raise ParseError(e.message, e.span) from None
            except LarkError as e:
                raise ParseError(f"syntax error: {e}", _offset_span(src, 0)) from None
            except RecursionError:
                raise ParseError("input nested too deeply", _offset_span(src, 0)) from None
            return result, _copy_state(b), src
        finally:
            b.__dict__.clear()
            b.__dict__.update(saved)


class _State:
    """What a finished parse leaves behind (copied off the shared builder)."""


def _copy_state(b: _Builder) -> Any:
    st = _State()
    st.__dict__.update(b.__dict__)
    return st


def _guard(fn: Any) -> Any:
    """Turn any stray exception into a ParseError (bad input must never leak a traceback)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ParseError:
            raise
        except DiagnosticError as e:
            raise ParseError(e.message, e.span, e.notes) from None
        except TypeError as e:
            if "parse expects a str" in str(e):
                raise
            raise ParseError(f"internal parser error: {e!r}") from e
        except (ValueError, KeyError, IndexError, AttributeError, AssertionError,
                OverflowError, RecursionError, MemoryError) as e:
            raise ParseError(f"internal parser error: {e!r}") from e
    return wrapper


def _check_names(st: Any, check_globals: bool) -> None:
    for name, span in st.tmention.items():
        if name not in st.types:
            if name in _LOWERING_TYPES:
                raise ParseError(f"type `{name}` is internal to TVM's lowering (memory "
                                 f"planning and the VM); relay_ir programs cannot use it", span)
            raise ParseError(f"type `{name}` is not defined: it is not a type parameter in "
                             f"scope, a type definition or a dtype (known dtypes: "
                             f"{', '.join(sorted(_known_dtypes()))})", span)
    if check_globals:
        for name, span in st.gmention.items():
            if name not in st.funcs and name not in st.init_funcs:
                raise ParseError(f"global `@{name}` is not defined", span)


def _init(init_module: IRModule | None, prelude: bool) -> IRModule | None:
    if not prelude:
        return init_module
    from relay_ir.prelude import prelude_module
    base = prelude_module()
    if init_module is None:
        return base
    for td in init_module.type_definitions.values():
        base = base.with_type(td)
    return base.with_functions({init_module.get_global_var(n): f
                                for n, f in init_module.functions.items()})


@_guard
def parse(text: str, source_name: str = "<string>", *, init_module: IRModule | None = None,
          metadata: Mapping[str, Any] | None = None, prelude: bool = False) -> IRModule:
    """Parse a module in Relay text format v0.0.5 (version header required).

    Definitions, types and constructors of ``init_module`` (or of the standard prelude with
    ``prelude=True``) are in scope and copied into the result; ``metadata`` supplies extra
    ``meta[...]`` entries (type key -> list of numpy arrays / Constants / JSON entries), after
    those of the text's own ``#[metadata]`` section. No type inference is run.
    """
    init = _init(init_module, prelude)
    _, st, src = _run(text, source_name, _MODE_MODULE, init, metadata)
    _check_names(st, check_globals=True)
    funcs: dict[GlobalVar, Function] = {}
    for name, fn in st.init_funcs.items():
        funcs[st.gvars[name]] = fn
    for name, fn in st.funcs.items():
        funcs[st.gvars[name]] = fn
    types = {td.header: td for td in st.types.values()}
    attrs = dict(init.attrs) if init is not None else {}
    return IRModule(funcs, types, source=src, attrs=attrs)


@_guard
def parse_expr(text: str, source_name: str = "<string>", *,
               init_module: IRModule | None = None,
               metadata: Mapping[str, Any] | None = None) -> Expr:
    """Parse one expression (the version header is optional).

    Free variables must be declared with ``free_var %x: T;``; any other unknown ``%x`` is an
    error. Globals, types and constructors of ``init_module`` are in scope.
    """
    result, st, _ = _run(text, source_name, _MODE_EXPR, init_module, metadata)
    _check_names(st, check_globals=False)
    return result


@_guard
def parse_type(text: str, source_name: str = "<string>") -> Type:
    """Parse one type, e.g. ``Tensor[(1, ?), float32]`` or ``fn (int32) -> int32``."""
    result, _, _ = _run(text, source_name, _MODE_TYPE, None, None)
    return result


# ----------------------------------------------------------------------------- syntax errors
_TOKEN_NAMES = {
    "LPAR": "`(`", "RPAR": "`)`", "SEMI": "`;`", "LBRACE": "`{`", "RBRACE": "`}`", "LSQB": "`[`",
    "RSQB": "`]`", "COMMA": "`,`", "SEMICOLON": "`;`", "EQUAL": "`=`", "COLON": "`:`",
    "DOT": "`.`", "ARROW": "`->`", "FATARROW": "`=>`", "BINOP": "an operator",
    "NUMBER": "a number", "INF": "a number", "LOCAL": "a local variable (`%x`)",
    "GRAPHVAR": "a graph variable (`%0`)", "GLOBAL": "a global (`@f`)", "IDENT": "a name",
    "STRING": "a string", "META_REF": "a `meta[...]` reference", "QMARK": "`?`",
    "UNDERSCORE": "`_`", "TENSOR": "`Tensor`", "MATCH": "`match`", "ATTRIBUTE": "`#[...]`",
    "TRUE": "`True`", "FALSE": "`False`", "$END": "end of input", "ELSE": "`else`",
}
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")": "(", "]": "[", "}": "{"}
_BRACKET_SCAN = re.compile(r'"[^"]*"|[()\[\]{}]')


def _token_name(name: str) -> str:
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    if name.isupper() and name.isalpha() or "_" in name and name.replace("_", "").isupper():
        return f"`{name.lower()}`"
    return name


def _expected_text(expected: set[str]) -> str:
    names = sorted({_token_name(x) for x in expected if not x.startswith("__")})
    if not names:
        return ""
    if len(names) > 8:
        names = names[:8] + ["..."]
    return "; expected " + (names[0] if len(names) == 1 else "one of: " + ", ".join(names))


def _open_brackets(clean: str, upto: int) -> list[tuple[str, int]]:
    stack: list[tuple[str, int]] = []
    for m in _BRACKET_SCAN.finditer(clean, 0, upto):
        ch = m.group()
        if ch in _OPEN:
            stack.append((ch, m.start()))
        elif ch in _CLOSE:
            if stack and stack[-1][0] == _CLOSE[ch]:
                stack.pop()
            else:
                break
    return stack


def _parser_expected(e: Any) -> set[str]:
    """The terminals the parser state accepts (the lexer's list also has always-accepted ones)."""
    st = getattr(e, "state", None)
    st = getattr(st, "position", st)
    try:
        states = _lark().parser.parser.parser.parse_table.states
        if isinstance(st, int) and st in states:
            return {k for k in states[st] if k.isupper() or k == "$END"}
    except AttributeError:  # pragma: no cover - other Lark versions
        pass
    return set(e.expected or ()) - {"WS"}


# The syntax-error messages, as data: the first rule whose conditions all hold gives the
# message. Messages are ``str.format`` templates over ``ch`` (the unexpected character),
# ``val`` / ``shown`` (the unexpected token, whole / shortened), ``bare`` (``val`` without its
# leading minus signs) and ``expected`` ("; expected one of: ..." or "").

# (regex that must match at the unexpected character, message)
_CHAR_RULES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(rx), msg) for rx, msg in (
    (r"\r", "a carriage return (\\r) must be followed by a newline"),
    (r"#\[", "unsupported attribute here: only the version header `#[version = \"0.0.5\"]` "
              "(first line) and `#[metadata]` are allowed"),
    (r"#", "`#` must start an attribute `#[...]`"),
    (r'"', "unterminated string literal"),
    (r"[^\x00-\x7f]", "unexpected character `{ch}` (identifiers are ASCII only; non-ASCII "
                       "text is allowed in comments)"),
    (r"%[ \t]", "`%` must be followed by a variable name or a number (Relay has no `%` "
                "operator: for a remainder write `mod(a, b)`, or `floor_mod(a, b)`)"),
    (r"%", "`%` must be followed by a variable name or a number"),
    (r"@", "`@` must be followed by a global name"),
    (r"", "unexpected character `{ch}`"),
))


class _Rule:
    """One syntax-error rule: conditions on the unexpected token and the parser's expectations.

    ``types`` / ``values``: the token's type / text is one of these; ``neg``: its text starts
    with ``-``; ``expected_is``: the expected-terminal set equals one of these sets; ``needs``:
    all of these are expected; ``needs_any``: one of these is expected; ``lacks``: none of these
    is expected; ``before``: the text before the token matches this regex (at its end);
    ``ends``: at end of input, the text ends with this string; ``brackets``: the rule is the
    bracket-matching check (computed, see :func:`_bracket_error`).
    """

    __slots__ = ("message", "types", "values", "neg", "expected_is", "needs", "needs_any",
                 "lacks", "before", "ends", "brackets")

    def __init__(self, message: str, *, types: tuple[str, ...] = (),
                 values: tuple[str, ...] = (), neg: bool = False,
                 expected_is: tuple[frozenset[str], ...] = (), needs: tuple[str, ...] = (),
                 needs_any: tuple[str, ...] = (), lacks: tuple[str, ...] = (),
                 before: str | None = None, ends: str | None = None, brackets: bool = False):
        self.message = message
        self.types = frozenset(types)
        self.values = frozenset(values)
        self.neg = neg
        self.expected_is = expected_is
        self.needs = frozenset(needs)
        self.needs_any = frozenset(needs_any)
        self.lacks = frozenset(lacks)
        self.before = re.compile(before + r"\Z") if before is not None else None
        self.ends = ends
        self.brackets = brackets

    def matches(self, ttype: str, val: str, expected: set[str], before: str) -> bool:
        """True if every condition of the rule holds."""
        return ((not self.types or ttype in self.types)
                and (not self.values or val in self.values)
                and (not self.neg or val.startswith("-"))
                and (not self.expected_is or expected in self.expected_is)
                and self.needs <= expected
                and (not self.needs_any or not self.needs_any.isdisjoint(expected))
                and self.lacks.isdisjoint(expected)
                and (self.before is None or self.before.search(before) is not None)
                and (self.ends is None or before.endswith(self.ends)))


_EXPR_START = ("LOCAL", "NUMBER", "GLOBAL", "FN")
_ELSE_ONLY = (frozenset({"ELSE"}),)

# At end of input (``before`` is the text without trailing whitespace).
_END_RULES: tuple[_Rule, ...] = (
    _Rule("", brackets=True),
    _Rule("the input ends where `else` is expected: an `if` needs an `else` branch "
          "(`if (c) {{ a }} else {{ b }}`)", expected_is=_ELSE_ONLY),
    _Rule("the input ends after `;`: a `let`, graph binding or `a;` statement must be followed "
          "by an expression", ends=";"),
    _Rule("unexpected end of input{expected}"),
)

# At an unexpected token.
_TOKEN_RULES: tuple[_Rule, ...] = (
    _Rule("unary minus is not supported; use negative(...) (or glue `-` to a number literal: "
          "`-1f`)", types=("BINOP",), values=("-",), needs_any=_EXPR_START),
    _Rule("`{val}` reads as a negative literal; to subtract, put a space after the minus: "
          "`- {bare}`", types=("NUMBER", "INF"), neg=True, needs=("BINOP",)),
    _Rule("`let` binds local variables (`%x`), not globals", types=("GLOBAL",),
          expected_is=(frozenset({"LOCAL"}),)),
    _Rule("expected a local variable (`%x`) but found `{shown}`",
          expected_is=(frozenset({"LOCAL"}),)),
    _Rule("a `{{ ... }}` block cannot be used directly as a let or graph binding value; wrap it "
          "in parentheses", types=("LBRACE",), needs_any=_EXPR_START),
    _Rule("expected `{{` but found `{shown}`: function bodies and if/else branches need braces "
          "`{{ ... }}`", expected_is=(frozenset({"LBRACE"}), frozenset({"LBRACE", "ARROW"}))),
    _Rule("expected `else` but found `{shown}`: an `if` needs an `else` branch "
          "(`if (c) {{ a }} else {{ b }}`)", expected_is=_ELSE_ONLY),
    _Rule("an `extern type` has no constructors (drop the `{{ ... }}`)", types=("LBRACE",),
          needs=("DEF",)),
    _Rule("unexpected `=`: bind a local variable with `let %x = ...;` (only graph variables "
          "`%0 = ...;` are bound without `let`)", types=("EQUAL",),
          before=r"%[A-Za-z_][A-Za-z0-9_/]*\s*"),
    _Rule("unexpected attribute: the version header `#[version = \"0.0.5\"]` must come first, "
          "and `#[metadata]` last", types=("ATTRIBUTE",)),
    _Rule("", brackets=True),
    _Rule("unexpected `;`{expected} (a `let` or `a;` statement must be followed by an "
          "expression)", types=("SEMI",), lacks=("SEMI",)),
    _Rule("expected `;` after the bound value, found `{shown}`", needs=("SEMI", "BINOP"),
          before=r"(?:\blet\s+%[A-Za-z_][A-Za-z0-9_/]*[^=;]*|%[0-9]+\s*)=[^;(){}\[\]=]*"),
    _Rule("unexpected `{shown}`{expected}"),
)


def _bracket_error(clean: str, upto: int, val: str | None, expected: set[str],
                   src: SourceFile, sp: Span) -> ParseError | None:
    """An error about an unclosed / mismatched bracket before offset ``upto``, if there is one.

    ``val`` is the unexpected token's text (None at end of input).
    """
    if val is None:
        stack = _open_brackets(clean, upto)
        if not stack:
            return None
        ch, off = stack[-1]
        return ParseError(f"unclosed `{ch}`: the input ends before its matching `{_OPEN[ch]}`",
                          _offset_span(src, off, off + 1))
    if val not in _CLOSE:
        return None
    stack = _open_brackets(clean, upto)
    if stack and _OPEN[stack[-1][0]] != val:
        ch, off = stack[-1]
        line, col = _pos(src.text, off)
        return ParseError(f"unexpected `{val}`: the `{ch}` at {line}:{col} is still open"
                          + _expected_text(expected), sp)
    if not stack:
        return ParseError(f"unmatched `{val}`", sp)
    return None


def _syntax_error(e: Any, clean: str, src: SourceFile) -> ParseError:
    """The ParseError for a Lark syntax error: the first matching rule of the tables above."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream
        ch = clean[pos] if 0 <= pos < len(clean) else ""
        sp = _offset_span(src, pos, pos + 1)
        for rx, msg in _CHAR_RULES:
            if rx.match(clean, pos) is not None:
                return ParseError(msg.format(ch=ch), sp)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _parser_expected(e)
        ttype = tok.type
        if ttype == "$END":
            end = len(clean.rstrip())
            sp = _offset_span(src, max(end - 1, 0), end)
            rules, val, before = _END_RULES, None, clean[:end]
            upto = len(clean)
        else:
            sp = Span(src, tok.line, tok.column, tok.end_line, tok.end_column)
            val = str(tok)
            upto = tok.start_pos if tok.start_pos is not None else 0
            rules, before = _TOKEN_RULES, clean[:upto]
        text = val or ""
        fields = {"val": text, "shown": text if len(text) <= 40 else text[:37] + "...",
                  "bare": text.lstrip("-"), "expected": _expected_text(expected)}
        for rule in rules:
            if not rule.matches(ttype, text, expected, before):
                continue
            if rule.brackets:
                err = _bracket_error(clean, upto, val, expected, src, sp)
                if err is not None:
                    return err
                continue
            return ParseError(rule.message.format(**fields), sp)
    return ParseError(f"syntax error: {e}", _offset_span(src, 0))
