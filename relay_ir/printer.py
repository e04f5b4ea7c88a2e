"""The canonical printer: Relay text format v0.0.5 for modules, expressions, types and patterns.

``astext(node, show_meta_data=True, show_types=False)`` is the inverse of the parser:
``parse(astext(m))`` is structurally equal to ``m`` and printing is idempotent.

Layout (RELAY_TEXT_FORMAT.md section 8):

* Modules: the version header, type definitions, then ``def``s, each group sorted by name,
  separated by blank lines; the ``#[metadata]`` section last when a constant needs it.
* Let chains print as ``let %x = v;`` lines (``v;`` for an anonymous, unused binder).
* Everything else is dataflow, printed in graph form: a sub-expression that is not an atom is
  hoisted to a ``%N = e;`` line unless it sits in an inline position (the result of a block or
  a let value) and has exactly one use. A node used more than once is printed once and
  referred to by its ``%N`` (sharing is preserved). Variable names and ``%N`` numbers restart
  in every ``def`` (the parser scopes both lexically), so adding or editing one definition
  never renames anything in another -- printed modules diff cleanly.
* A shared node is hoisted into the innermost block that encloses all of its uses (function
  bodies, if branches, match arms and parenthesised lets are blocks), so graph bindings are
  always in scope where they are used.

* Blocks are indented two spaces per level, up to 32 levels; deeper blocks keep that
  indentation, so the text of deeply nested code grows linearly with its size.

Nothing recurses in proportion to program size or depth: let spines are loops, dataflow is
hoisted with an explicit stack, and function/if/match nesting and nested types are walked as
generators driven by :func:`relay_ir.traversal.run_generators`.
"""
from __future__ import annotations

import base64
import json
import re
from typing import Any, Generator

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import InternalError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, Pattern, PatternConstructor, PatternTuple,
                           PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Tuple,
                           TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import lookup_opdef
from relay_ir.traversal import (pattern_vars, run_generators, same_scope_children,
                                use_children)
from relay_ir.tvm_metadata import MetaRef
from relay_ir.ty import (DimExpr, FuncType, GlobalTypeVar, IncompleteType, RefType,
                         ShapeVar, TensorType, TupleType, Type, TypeCall, TypeData, TypeVar,
                         format_dim, is_dtype_name)

VERSION_HEADER = '#[version = "0.0.5"]'

__all__ = ["astext", "VERSION_HEADER", "scalar_literal", "format_float"]

_ATOMS = (Var, GlobalVar, Constant, Op, Constructor)
_IDENT_BAD = re.compile(r"[^A-Za-z0-9_/]")
_LITERAL_INT = {"int32": "", "int16": "i16", "int64": "i64"}
_LITERAL_FLOAT = {"float32": "f", "float16": "f16", "float64": "f64"}
_KEYWORDS = frozenset({"let", "fn", "def", "if", "else", "type", "match", "extern", "free_var",
                       "ref", "ref_read", "ref_write", "Tensor", "True", "False", "meta",
                       "None", "nullptr"})


# ----------------------------------------------------------------------------- scalars
def format_float(value: Any, dtype: str = "float32") -> str:
    """Shortest decimal text that reads back to exactly ``value`` at ``dtype`` (no suffix).

    ``float16``/``float32``/``float64``; positional or scientific notation, whichever is
    shorter (``3``, ``0.1``, ``1e+10``, ``-2.5e-08``); infinities are ``inf``/``-inf``.
    """
    x = np.dtype(dtype).type(value)
    if np.isinf(x):
        return "-inf" if x < 0 else "inf"
    pos = np.format_float_positional(x, unique=True, trim="-")
    sci = np.format_float_scientific(x, unique=True, trim="-")
    text = sci if len(sci) < len(pos) else pos
    if abs(float(text)) > float(np.finfo(x.dtype).max):
        # NOTE: the shortest text of the largest finite value can exceed it as a decimal
        # (float32: 3.4028235e+38); parsers that range-check the decimal reject that, so
        # print the exact value instead.
        text = np.format_float_scientific(x, unique=False, precision=16, trim="-")
    return text


_LITERAL_CACHE: dict[tuple[str, bytes], str | None] = {}


def scalar_literal(data: np.ndarray) -> str | None:
    """The literal text of a 0-d constant (``42``, ``42i16``, ``3f``, ``True``), or None.

    None means the constant has no literal form (not 0-d, another dtype, or NaN) and must go to
    the metadata section.
    """
    if data.ndim != 0:
        return None
    key = (data.dtype.str, data.tobytes())
    text = _LITERAL_CACHE.get(key, "")
    if text != "":
        return text
    text = _scalar_literal(data)
    if len(_LITERAL_CACHE) < 65536:
        _LITERAL_CACHE[key] = text
    return text


def _scalar_literal(data: np.ndarray) -> str | None:
    dtype = str(data.dtype)
    if dtype == "bool":
        return "True" if bool(data) else "False"
    if dtype in _LITERAL_INT:
        return f"{int(data)}{_LITERAL_INT[dtype]}"
    if dtype in _LITERAL_FLOAT:
        if np.isnan(data):
            return None
        return format_float(data[()], dtype) + _LITERAL_FLOAT[dtype]
    return None


def _attr_value(v: Any, meta: dict[str, dict[int, Any]] | None = None) -> str:
    """The text of an attribute value; metadata references are recorded in ``meta``."""
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float_attr(v)
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_attr_value(x, meta) for x in v) + "]"
    if isinstance(v, np.generic):
        return _attr_value(v.item())
    if isinstance(v, MetaRef):
        if meta is not None:
            meta.setdefault(v.key, {})[v.index] = v.value
        return str(v)
    if isinstance(v, Type):
        return _TypePrinter().text(v)
    return f'"{v}"'


def _float_attr(v: float) -> str:
    # NOTE: attribute floats are Python floats and the parser reads `1.5f` with float(): print
    # the shortest float64 text; the `f64` suffix only where float32's range is exceeded.
    if np.isnan(v):
        return "nanf"
    suffix = "f" if abs(v) <= 3.4028234663852886e38 or np.isinf(v) else "f64"
    return format_float(v, "float64") + suffix


# ----------------------------------------------------------------------------- names
def _sanitize(name: str, prefix: str, underscore: bool = False) -> str:
    name = _IDENT_BAD.sub("_", name)
    if underscore and name.startswith("_"):
        return name  # `%_`, `%_t`: local names may start with `_` (type names may not)
    if not name or not name[0].isalpha() or not name[0].isascii():
        name = prefix + name
    return name


class _Names:
    """Allocates printout-unique names: ``x``, ``x1``, ``x2``, ..."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        if base not in self.used:
            self.used.add(base)
            return base
        k = self.next.get(base, 1)
        while f"{base}{k}" in self.used:
            k += 1
        self.next[base] = k + 1
        name = f"{base}{k}"
        self.used.add(name)
        return name


# ----------------------------------------------------------------------------- types
class _TypePrinter:
    """Prints types; type and shape parameters get names unique among those in scope."""

    def __init__(self, reserved: set[str] | None = None) -> None:
        self.tv_names: dict[Any, str] = {}
        self.in_scope: dict[str, int] = {}
        self.reserved = reserved or set()

    def bind(self, params: tuple) -> list[str]:
        """Name the type/shape parameters ``params`` (call :meth:`unbind` when leaving)."""
        out = []
        for p in params:
            base = _sanitize(p.name_hint if isinstance(p, TypeVar) else p.name, "T")
            if is_dtype_name(base) or base in _KEYWORDS or base in self.reserved:
                base = "T" + base
            name, k = base, 1
            while self.in_scope.get(name):
                name = f"{base}{k}"
                k += 1
            self.in_scope[name] = self.in_scope.get(name, 0) + 1
            self.tv_names[p] = name
            out.append(name)
        return out

    def unbind(self, params: tuple) -> None:
        for p in params:
            name = self.tv_names.pop(p, None)
            if name is not None:
                self.in_scope[name] -= 1

    def tv(self, v: Any) -> str:
        name = self.tv_names.get(v)
        if name is not None:
            return name
        return v.name_hint if isinstance(v, TypeVar) else v.name

    def dim(self, d: Any) -> str:
        if isinstance(d, ShapeVar):
            return self.tv(d)
        if isinstance(d, DimExpr):
            renames = {v: self.tv_names[v] for m, _ in d.terms for v in m
                       if v in self.tv_names and self.tv_names[v] != v.name}
            if renames:
                d = DimExpr(tuple(
                    (tuple(ShapeVar(renames[v], v.uid) if v in renames else v for v in m), c)
                    for m, c in d.terms))
            return format_dim(d)
        return format_dim(d)

    def text(self, t: Type) -> str:
        """The text of type ``t``."""
        if type(t) is TensorType:
            return self._tensor(t)
        return run_generators(self._text(t))  # NOTE: nested types are walked without recursion

    def _tensor(self, t: TensorType) -> str:
        if not t.shape and is_dtype_name(t.dtype):
            return t.dtype
        if len(t.shape) == 1:
            return f"Tensor[({self.dim(t.shape[0])}), {t.dtype}]"
        return f"Tensor[({', '.join(self.dim(d) for d in t.shape)}), {t.dtype}]"

    def _all(self, ts: Any) -> Generator[Any, Any, list[str]]:
        out = []
        for x in ts:
            out.append(self._tensor(x) if type(x) is TensorType else (yield self._text(x)))
        return out

    def _text(self, t: Type) -> Generator[Any, Any, str]:
        tt = type(t)
        if tt is TensorType:
            return self._tensor(t)
        if tt is TupleType:
            fields = yield self._all(t.fields)
            if len(fields) == 1:
                return f"({fields[0]},)"
            return "(" + ", ".join(fields) + ")"
        if tt is FuncType:
            names = self.bind(t.type_params)
            try:
                tp = f"[{', '.join(names)}]" if names else ""
                args = ", ".join((yield self._all(t.arg_types)))
                return f"fn {tp}({args}) -> {(yield self._text(t.ret_type))}"
            finally:
                self.unbind(t.type_params)
        if tt is RefType:
            return f"ref({(yield self._text(t.value))})"
        if tt is TypeVar:
            return self.tv(t)
        if tt is GlobalTypeVar:
            return t.name_hint
        if tt is TypeCall:
            func = yield self._text(t.func)
            if not t.args:
                return func
            return f"{func}[{', '.join((yield self._all(t.args)))}]"
        if tt is IncompleteType:
            return "_"
        if tt is TypeData:
            return self.type_data(t)
        raise InternalError(f"printer: unknown type {tt.__name__}")

    def type_data(self, td: TypeData) -> str:
        """``type Name[A] { Ctor(A, Name[A]), Nil, }``."""
        names = self.bind(td.type_params)
        try:
            tp = f"[{', '.join(names)}]" if names else ""
            lines = [f"type {td.header.name_hint}{tp} {{"]
            for c in td.constructors:
                if c.inputs:
                    lines.append(f"  {c.name_hint}({', '.join(self.text(t) for t in c.inputs)}),")
                else:
                    lines.append(f"  {c.name_hint},")
            lines.append("}")
            return "\n".join(lines)
        finally:
            self.unbind(td.type_params)


# ----------------------------------------------------------------------------- analysis
_TAIL = "tail"      # result of a block: function body, branch, arm, let body
_LETVAL = "letval"  # value of a let (or of a `;` sequence item)


def _nic(e: Expr) -> tuple:
    """Children of ``e`` in non-inline (hoisting) positions, in printing order."""
    return same_scope_children(e, op_last=True)


class _Unit:
    """Use counts and block (scope) assignment for one printed unit (a def or an expression).

    Scope 0 is the unit's top block. Functions, if branches, match arms and parenthesised lets
    open child scopes. ``scope[n]`` is the innermost scope enclosing every use of ``n``: where
    a hoisted ``%N = n;`` line must go.
    """

    def __init__(self, root: Expr) -> None:
        # pass 1: use counts (every edge once), binders, and referenced variables in order
        uses: dict[Expr, int] = {root: 1}
        bound: set[Var] = set()
        refs: dict[Var, None] = {root: None} if type(root) is Var else {}
        stack: list[Expr] = [root]
        atoms = _ATOMS
        while stack:
            node = stack.pop()
            t = type(node)
            if t is Var:  # NOTE: visited in pre-order, so free vars come in text order
                refs[node] = None
                continue
            if t is Let:
                bound.add(node.var)
            elif t is Function:
                bound.update(node.params)
            elif t is Match:
                for cl in node.clauses:
                    bound.update(pattern_vars(cl.lhs))
            for c in reversed(use_children(node)):
                n = uses.get(c)
                if n is None:
                    uses[c] = 1
                    tc = type(c)
                    if tc is Var or tc not in atoms:
                        stack.append(c)
                else:
                    uses[c] = n + 1
        self.uses = uses
        self.free_vars = [v for v in refs if v not in bound]
        # pass 2: parents before children (Kahn), assigning each node the innermost scope
        # that encloses all of its uses
        parent: list[int] = [-1]
        depth: list[int] = [0]
        self.parent, self.depth = parent, depth
        scope: dict[Expr, int] = {root: 0}
        pending = dict(uses)
        chained: set[Expr] = set()
        if type(root) is Let:
            chained.add(root)
        opened: dict[Expr, Any] = {}
        self.opened, self.chained, self.scope = opened, chained, scope
        ready: list[Expr] = [root]

        def use(c: Expr, s: int) -> None:
            if type(c) in atoms:
                return
            old = scope.get(c)
            if old is not None and old != s:
                a, b = old, s
                while depth[a] > depth[b]:
                    a = parent[a]
                while depth[b] > depth[a]:
                    b = parent[b]
                while a != b:
                    a, b = parent[a], parent[b]
                s = a
            scope[c] = s
            left = pending[c] - 1
            pending[c] = left
            if not left:
                ready.append(c)

        def tail(c: Expr, s: int) -> None:
            if type(c) is Let and uses[c] == 1:
                chained.add(c)
            use(c, s)

        def new(p: int) -> int:
            parent.append(p)
            depth.append(depth[p] + 1)
            return len(parent) - 1

        while ready:
            node = ready.pop()
            t = type(node)
            s = scope[node]
            if t is Function:
                inner = opened[node] = new(s)
                tail(node.body, inner)
            elif t is If:
                st, sf = new(s), new(s)
                opened[node] = (st, sf)
                use(node.cond, s)
                tail(node.true_branch, st)
                tail(node.false_branch, sf)
            elif t is Match:
                use(node.data, s)
                arms = []
                for cl in node.clauses:
                    sc = new(s)
                    arms.append(sc)
                    tail(cl.rhs, sc)
                opened[node] = arms
            elif t is Let:
                if node in chained:
                    inner = s
                else:
                    inner = opened[node] = new(s)
                use(node.value, inner)
                tail(node.body, inner)
            else:
                for c in _nic(node):
                    use(c, s)


Gen = Generator[Any, Any, Any]
_MAX_INDENT = 32  # levels; deeper blocks stay at this indentation, so text grows linearly


def _indent(depth: int) -> str:
    return "  " * min(depth, _MAX_INDENT)


def _flatten(rope: Any) -> str:
    """The string of a rope: a str or a list of ropes (built without copying per level)."""
    out: list[str] = []
    stack = [rope]
    while stack:
        x = stack.pop()
        if type(x) is str:
            out.append(x)
        else:
            stack.extend(reversed(x))
    return "".join(out)


class _Block:
    __slots__ = ("depth", "lines")

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.lines: list[str] = []


# ----------------------------------------------------------------------------- printer
class _Printer:
    """One printout: shared temp counter, variable names and metadata table."""

    def __init__(self, show_meta_data: bool, show_types: bool,
                 reserved_types: set[str] | None = None) -> None:
        self.show_meta = show_meta_data
        self.show_types = show_types
        self.counter = 0
        self.names = _Names()
        self.var_names: dict[Var, str] = {}
        self.meta: list[Constant] = []
        self.meta_refs: dict[str, dict[int, Any]] = {}  # entries named by attribute values
        self.meta_index: dict[tuple, int] = {}
        self.types = _TypePrinter(reserved_types)
        self.unit: _Unit | None = None
        self.memo: dict[Expr, str] = {}
        self.blocks: dict[int, _Block] = {}

    # -- leaves -------------------------------------------------------------
    def bind_var(self, v: Var) -> str:
        name = self.names.fresh(_sanitize(v.name_hint, "v", underscore=True))
        self.var_names[v] = name
        return "%" + name

    def var_ref(self, v: Var) -> str:
        name = self.var_names.get(v)
        if name is None:  # a free variable: name it on first use
            return self.bind_var(v)
        return "%" + name

    def binder(self, v: Var, param: bool = False) -> str:
        """``%x`` or ``%x: T`` at a binding site (parameter, pattern, free_var).

        A parameter (``param``) also shows its attributes: ``%x {virtual_device=...}: T``.
        """
        text = self.bind_var(v)
        if param and v.attrs:
            text += " {" + ", ".join(f"{k}={_attr_value(x, self.meta_refs)}"
                                     for k, x in v.attrs.items()) + "}"
        if v.type_annotation is not None and type(v.type_annotation) is not IncompleteType:
            text += ": " + self.types.text(v.type_annotation)
        return text

    def constant(self, c: Constant) -> str:
        text = scalar_literal(c.data)
        if text is None:
            # NOTE: one entry per distinct value; the parser makes a node per reference
            key = (c.data.dtype.str, c.data.shape, c.data.tobytes())
            i = self.meta_index.get(key)
            if i is None:
                i = self.meta_index[key] = len(self.meta)
                self.meta.append(c)
            text = f"meta[relay.Constant][{i}]"
        return text + self.ty_comment(c)

    def atom(self, e: Expr) -> str:
        t = type(e)
        if t is Var:
            return self.var_ref(e)
        if t is Constant:
            return self.constant(e)
        if t is GlobalVar:
            return "@" + e.name_hint
        if t is Op:
            return e.name
        return e.name_hint  # Constructor

    def ty_comment(self, e: Expr) -> str:
        """`` /* ty=T span=file:line:col */`` after a typed node when ``show_types``."""
        if self.show_types and e.checked_type_ is not None:
            span = e.span
            where = ""
            if span is not None:
                where = f" span={span.source_name.replace('*/', '*_/')}:{span.line}:{span.column}"
            return f" /* ty={self.types.text(e.checked_type_)}{where} */"
        return ""

    # -- units ----------------------------------------------------------------
    def start_unit(self, root: Expr) -> None:
        self.unit = _Unit(root)
        self.memo = {}
        self.blocks = {}

    def block(self, e: Expr, sid: int, depth: int) -> Gen:
        """The lines of a block (absolutely indented) whose result is ``e`` (a rope)."""
        blk = _Block(depth)
        self.blocks[sid] = blk
        unit = self.unit
        assert unit is not None
        lines = blk.lines
        cur = e
        while type(cur) is Let and cur in unit.chained and cur not in self.memo:
            var = cur.var
            if var.name_hint == "" and var.type_annotation is None and var not in unit.uses:
                lines.append([(yield self.inline(cur.value, blk, _LETVAL)), ";"])
            else:
                name = self.bind_var(var)
                if var.type_annotation is not None \
                        and type(var.type_annotation) is not IncompleteType:
                    name += ": " + self.types.text(var.type_annotation)
                lines.append([f"let {name} = ", (yield self.inline(cur.value, blk, _LETVAL)),
                              ";"])
            cur = cur.body
        lines.append((yield self.inline(cur, blk, _TAIL)))
        del self.blocks[sid]
        ind = _indent(depth)
        out: list[Any] = []
        for line in lines:
            if out:
                out.append("\n")
            out.append(ind)
            out.append(line)
        return out

    def inline(self, e: Expr, blk: _Block, pos: str) -> Gen:
        """Text of ``e`` in an inline position of ``blk`` (hoisting it if it is shared)."""
        if type(e) in _ATOMS:
            return self.atom(e)
        ref = self.memo.get(e)
        if ref is not None:
            return ref
        if self.unit.uses[e] > 1:  # type: ignore[union-attr]
            yield self.hoist(e)
            return self.memo[e]
        yield self.hoist_children(e)
        text = yield self.define(e, blk.depth)
        if pos == _LETVAL and type(e) in (Let, Match):
            return ["(", text, ")"]
        return text

    def hoist_children(self, e: Expr) -> Gen:
        for c in _nic(e):
            if type(c) not in _ATOMS and c not in self.memo:
                yield self.hoist(c)

    def hoist(self, root: Expr) -> Gen:
        """Emit ``%N = ...;`` lines for ``root`` and its unprinted non-inline descendants."""
        memo = self.memo
        unit = self.unit
        assert unit is not None
        stack: list[tuple[Expr, bool]] = [(root, False)]
        expanded: set[Expr] = set()
        while stack:
            n, done = stack.pop()
            if n in memo:
                continue
            if done:
                if self.is_inline_nullary(n):
                    # NOTE: a single-use `Nil` needs no temporary.
                    memo[n] = n.op.name_hint  # type: ignore[attr-defined]
                    continue
                blk = self.blocks.get(unit.scope[n])
                if blk is None:
                    raise InternalError("printer: a shared node escapes its block")
                text = yield self.define(n, blk.depth)
                if type(n) in (Let, Match):
                    text = ["(", text, ")"]
                num = self.counter
                self.counter += 1
                blk.lines.append([f"%{num} = ", text, ";"])
                memo[n] = f"%{num}"
                continue
            if n in expanded:
                continue
            expanded.add(n)
            stack.append((n, True))
            for c in reversed(_nic(n)):
                if type(c) not in _ATOMS and c not in memo:
                    stack.append((c, False))

    def is_inline_nullary(self, n: Expr) -> bool:
        return (type(n) is Call and not n.args and type(n.op) is Constructor
                and not n.op.inputs and not n.attrs and self.unit.uses[n] == 1  # type: ignore
                and not (self.show_types and n.checked_type_ is not None))

    def ref(self, e: Expr) -> str:
        """Text of an already-hoisted (or atomic) child."""
        if type(e) in _ATOMS:
            return self.atom(e)
        return self.memo[e]

    # -- definitions --------------------------------------------------------
    def define(self, e: Expr, depth: int) -> Gen:
        """The full text (a rope) of compound node ``e`` placed on a line at ``depth``."""
        t = type(e)
        ref = self.ref
        if t is Call:
            text: Any = self.call(e)
        elif t is Tuple:
            if len(e.fields) == 1:
                text = f"({ref(e.fields[0])},)"
            else:
                text = "(" + ", ".join(ref(f) for f in e.fields) + ")"
        elif t is TupleGetItem:
            tv = e.tuple_value
            inner = ref(tv)
            if not inner.startswith("%") or " " in inner:
                inner = f"({inner})"
            text = f"{inner}.{e.index}"
        elif t is RefCreate:
            text = f"ref({ref(e.value)})"
        elif t is RefRead:
            text = f"ref_read({ref(e.ref)})"
        elif t is RefWrite:
            text = f"ref_write({ref(e.ref)}, {ref(e.value)})"
        elif t is Function:
            text = yield self.function(e, depth)
            return [text, self.ty_comment(e)]
        elif t is If:
            unit = self.unit
            st, sf = unit.opened[e]  # type: ignore[union-attr]
            ind = _indent(depth)
            tb = yield self.block(e.true_branch, st, depth + 1)
            fb = yield self.block(e.false_branch, sf, depth + 1)
            text = [f"if ({ref(e.cond)}) {{\n", tb, f"\n{ind}}} else {{\n", fb, f"\n{ind}}}"]
        elif t is Match:
            text = yield self.match(e, depth)
        elif t is Let:
            sid = self.unit.opened[e]  # type: ignore[union-attr]
            self.unit.chained.add(e)  # type: ignore[union-attr]
            body = yield self.block(e, sid, depth + 1)
            self.unit.chained.discard(e)  # type: ignore[union-attr]
            return ["\n", body, f"\n{_indent(depth)}"]
        else:
            raise InternalError(f"printer: unknown expression {t.__name__}")
        return [text, self.ty_comment(e)]

    def call(self, e: Call) -> str:
        op = e.op
        if type(op) is Constructor and not e.args and not op.inputs and not e.attrs:
            return op.name_hint
        args = [self.ref(a) for a in e.args]
        attrs = e.attrs
        if type(op) is Op:
            opdef = lookup_opdef(op.name)
            if opdef is not None and (not attrs or attrs.type_key == opdef.attrs_type):
                pairs = opdef.non_default_attrs(attrs)
            else:
                pairs = list(attrs.items())
            args.extend(f"{k}={_attr_value(v, self.meta_refs)}" for k, v in pairs)
        elif attrs or attrs.type_key:
            if attrs.type_key:
                args.append(f'attrs_type_key="{attrs.type_key}"')
            args.extend(f"{k}={_attr_value(v, self.meta_refs)}" for k, v in attrs.items())
        return f"{self.ref(op)}({', '.join(args)})"

    def signature(self, f: Function) -> str:
        """``[A](%x: T, attr=v) -> R`` (the part after ``fn`` or ``def @name``)."""
        names = self.types.bind(f.type_params)
        tp = f"[{', '.join(names)}]" if names else ""
        params = [self.binder(p, param=True) for p in f.params]
        params.extend(f"{k}={_attr_value(v, self.meta_refs)}" for k, v in f.attrs.items())
        ret = f" -> {self.types.text(f.ret_type)}" if f.ret_type is not None else ""
        return f"{tp}({', '.join(params)}){ret}"

    def function(self, f: Function, depth: int) -> Gen:
        sid = self.unit.opened[f]  # type: ignore[union-attr]
        try:
            sig = self.signature(f)
            body = yield self.block(f.body, sid, depth + 1)
        finally:
            self.types.unbind(f.type_params)
        return [f"fn {sig} {{\n", body, f"\n{_indent(depth)}}}"]

    def match(self, m: Match, depth: int) -> Gen:
        arms = self.unit.opened[m]  # type: ignore[union-attr]
        ind = _indent(depth)
        arm_ind = ind + "  "
        kw = "match" if m.complete else "match?"
        out: list[Any] = [f"{kw} ({self.ref(m.data)}) {{"]
        for c, sid in zip(m.clauses, arms):
            pat = self.pattern(c.lhs)
            body = yield self.block(c.rhs, sid, depth + 2)
            out.extend((f"\n{arm_ind}{pat} => {{\n", body, f"\n{arm_ind}}},"))
        out.append("\n" + ind + "}")
        return out

    def pattern(self, p: Pattern) -> str:
        t = type(p)
        if t is PatternWildcard:
            return "_"
        if t is PatternVar:
            return self.binder(p.var)
        if t is PatternConstructor:
            if not p.patterns:
                return p.constructor.name_hint
            return (f"{p.constructor.name_hint}("
                    f"{', '.join(self.pattern(q) for q in p.patterns)})")
        if t is PatternTuple:
            if len(p.patterns) == 1:
                return f"({self.pattern(p.patterns[0])},)"
            return "(" + ", ".join(self.pattern(q) for q in p.patterns) + ")"
        raise InternalError(f"printer: unknown pattern {t.__name__}")

    # -- top level ------------------------------------------------------------
    def expr_unit(self, e: Expr) -> str:
        self.start_unit(e)
        out = [f"free_var {self.binder(v)};" for v in self.unit.free_vars]  # type: ignore
        out.append(_flatten(run_generators(self.block(e, 0, 0))))
        return "\n".join(out)

    def def_unit(self, name: str, f: Function) -> str:
        # NOTE: names and temps are per definition (see the module docstring).
        self.counter = 0
        self.names = _Names()
        self.var_names = {}
        self.memo = {}
        self.start_unit(f)
        sid = self.unit.opened[f]  # type: ignore[union-attr]
        try:
            sig = self.signature(f)
            body = _flatten(run_generators(self.block(f.body, sid, 1)))
        finally:
            self.types.unbind(f.type_params)
        return f"def @{name}{sig} {{\n{body}\n}}"

    def metadata(self) -> str:
        if not self.meta and not self.meta_refs:
            return ""
        if not self.show_meta:
            if not self.meta_refs:
                return (f"/* meta data section omitted: {len(self.meta)} "
                        f"constant{'s' if len(self.meta) != 1 else ''} */")
            n = len(self.meta) + sum(len(v) for v in self.meta_refs.values())
            return f"/* meta data section omitted: {n} entr{'ies' if n != 1 else 'y'} */"
        tables: list[tuple[str, list[str]]] = []
        if self.meta:
            tables.append(("relay.Constant",
                           [json.dumps(_encode_constant(c.data)) for c in self.meta]))
        for key in sorted(self.meta_refs):
            # NOTE: references keep their indices, so unreferenced slots are `null`
            got = self.meta_refs[key]
            tables.append((key, [json.dumps(got.get(i), default=_json_fallback)
                                 for i in range(max(got) + 1)]))
        body = ",\n".join(f"  {json.dumps(key)}: [\n    " + ",\n    ".join(entries) + "\n  ]"
                          for key, entries in tables)
        return f"#[metadata]\n{{\n{body}\n}}"


def _json_fallback(v: Any) -> Any:
    """JSON for a metadata entry that is not JSON already (arrays; other objects by text)."""
    if isinstance(v, np.ndarray):
        return _encode_constant(v)
    if isinstance(v, Constant):
        return _encode_constant(v.data)
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


def _encode_constant(a: np.ndarray) -> dict[str, Any]:
    """The metadata JSON entry of a constant: dtype, shape and base64 little-endian bytes."""
    data = np.ascontiguousarray(a)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return {"dtype": str(a.dtype), "shape": list(a.shape),
            "data": base64.b64encode(data.tobytes()).decode("ascii")}


def astext(node: Any, show_meta_data: bool = True, show_types: bool = False) -> str:
    """Canonical Relay text of a module, expression, type or pattern.

    Modules and expressions start with the version header (a module's text ends with a
    newline); types and patterns are printed bare. ``show_types`` adds ``/* ty=... */``
    comments from inferred types; ``show_meta_data=False`` replaces the metadata section by a
    comment.
    """
    if isinstance(node, IRModule):
        p = _Printer(show_meta_data, show_types, set(node.type_definitions))
        parts = [p.types.type_data(node.type_definitions[k])
                 for k in sorted(node.type_definitions)]
        parts.extend(p.def_unit(k, node[k]) for k in sorted(node.functions))
        meta = p.metadata()
        if meta:
            parts.append(meta)
        return VERSION_HEADER + "\n" + "\n\n".join(parts) + "\n"
    if isinstance(node, Expr):
        p = _Printer(show_meta_data, show_types)
        text = p.expr_unit(node)
        meta = p.metadata()
        return VERSION_HEADER + "\n" + text + ("\n" + meta if meta else "")
    if isinstance(node, Type):
        return _TypePrinter().text(node)
    if isinstance(node, Pattern):
        return _Printer(show_meta_data, show_types).pattern(node)
    if isinstance(node, Clause):
        p = _Printer(show_meta_data, show_types)
        pat = p.pattern(node.lhs)
        p.start_unit(node.rhs)
        return f"{pat} => {{\n{_flatten(run_generators(p.block(node.rhs, 0, 1)))}\n}}"
    if isinstance(node, Attrs):
        return ", ".join(f"{k}={_attr_value(v)}" for k, v in node.items())
    raise TypeError(f"astext: cannot print a {type(node).__name__}")
