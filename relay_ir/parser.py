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
   The builder's type and attribute rules live in :mod:`relay_ir._parse_types` and
   :mod:`relay_ir._parse_attrs` (mixins), the lexical helpers in :mod:`relay_ir._parse_lex`
   and the syntax-error messages in :mod:`relay_ir._parse_errors`.
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

import bisect
import hashlib
import os
import re
import threading
from importlib import resources
from typing import Any, Mapping

import numpy as np
from lark import Token

from relay_ir._parse_attrs import _AttrBuilder
# The rule tables are re-exported: tests check each rule is reachable through this module.
from relay_ir._parse_errors import (_CHAR_RULES, _END_RULES, _TOKEN_RULES,  # noqa: F401
                                    _syntax_error)
from relay_ir._parse_lex import (_ANON, _BINOP_NAMES, _FALSE, _FREE, _GRAPH_REC, _INT_RE,
                                 _KEYWORDS, _LET, _LOWERING_PREFIXES, _LOWERING_TYPES,
                                 _META_TOKEN_RE, _MODE_EXPR, _MODE_MODULE, _MODE_TYPE, _PREC,
                                 _REF_CHARS, _REF_TYPES, _TRUE, _Attr, _Params, _Ret, _TParam,
                                 _TParams, _annotation, _attrs_dict, _attrs_key, _decode_constant,
                                 _known_dtypes, _literal_array, _load_metadata, _offset_span,
                                 _preprocess)
from relay_ir._parse_types import _TypeBuilder
from relay_ir.attrs import EMPTY_ATTRS, Attrs
from relay_ir.errors import DiagnosticError, ParseError
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.span import SourceFile, Span
from relay_ir.tvm_metadata import MetaRef
from relay_ir.ty import GlobalTypeVar, ShapeVar, Type, TypeCall, TypeData, TypeVar, is_dtype_name

__all__ = ["parse", "parse_expr", "parse_type", "VERSION"]

VERSION = "0.0.5"


# ----------------------------------------------------------------------------- builder
class _Builder(_AttrBuilder, _TypeBuilder):
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
        a = first if isinstance(first, Token) else first.span  # both have line/column fields
        z = last if isinstance(last, Token) else last.span
        if a is None or z is None:
            return None
        return Span(self.src, a.line, a.column, z.end_line, z.end_column)

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
        self.scope.setdefault(key, []).append(value)
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
            self.tscope.setdefault(name, []).append(e)
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
    """The Lark LALR parser, built once per process with the builder as its transformer.

    Building the LALR tables takes ~90 ms, so Lark keeps them in the kernel cache directory
    (``parser-<hash>.lark``; Lark checks the grammar, options and versions in the file and
    rebuilds it when they differ or it cannot be read); no cache without a writable directory.
    """
    global _LARK
    if _LARK is None:
        import lark
        text = _grammar_text()
        options: dict[str, Any] = {"parser": "lalr", "lexer": "contextual",
                                   "start": ["module", "expr_top", "type_top"],
                                   "maybe_placeholders": False}
        from relay_ir.runtime.kernel_cache import cache_dir
        d = cache_dir()
        key = hashlib.sha256(f"{text}|{options}|{lark.__version__}".encode()).hexdigest()[:24]
        try:
            os.makedirs(d, exist_ok=True)
            if os.access(d, os.W_OK):
                options["cache"] = os.path.join(d, f"parser-{key}.lark")
        except OSError:
            pass
        _LARK = lark.Lark(text, transformer=_BUILDER, postlex=_AlwaysNumbers(), **options)
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
