"""Structural equality and hashing up to alpha-renaming (iterative).

``structural_equal(a, b)`` compares expressions, types, patterns or whole modules. Binders
(let variables, parameters, pattern variables, type and shape parameters, ``_`` incomplete
types) are matched where they are bound; a free variable must be the very same object unless
``map_free_vars=True``. Sharing is part of the structure: a compound node used twice on one
side must correspond to one node used twice on the other (as the graph form ``%0 = ...``
prints it). Globals, type names and constructors compare by name; constants by dtype, shape
and bytes; attributes by value. Spans, inferred types and a variable's ``attrs`` (parameter
attributes such as ``virtual_device``) are ignored. A variable annotated with a bare ``_``
(an :class:`IncompleteType`) equals an unannotated one, as in TVM.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let,
                           Match, Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.ty import (AnyDim, DimExpr, FuncType, GlobalTypeVar, IncompleteType, RefType,
                         ShapeVar, TensorType, TupleType, Type, TypeCall, TypeData, TypeVar,
                         dim_add, dim_mul)

_LEAVES = (Var, GlobalVar, Constant, Op, Constructor)


# node type -> (the attribute naming it, how a mismatch message writes the name)
_NAMED: dict[type, tuple[str, str]] = {
    GlobalVar: ("name_hint", "@{}"),
    Op: ("name", "op {}"),
    Constructor: ("name_hint", "constructor {}"),
}


# node type -> its expression fields, in the order they are pushed (compared in reverse)
_PLAIN_FIELDS: dict[type, tuple[str, ...]] = {
    Let: ("body", "value"), If: ("false_branch", "true_branch", "cond"),
    RefCreate: ("value",), RefRead: ("ref",), RefWrite: ("value", "ref"),
}


class _Mismatch(Exception):
    def __init__(self, path: Any, why: str):
        self.path = path
        self.why = why


def _render_path(path: Any) -> str:
    parts: list[str] = []
    while path is not None:
        path, label = path
        parts.append(label)
    parts.reverse()
    out: list[str] = []  # NOTE: collapse runs (".body" x 99999 on a long let chain)
    i = 0
    while i < len(parts):
        j = i
        while j < len(parts) and parts[j] == parts[i]:
            j += 1
        out.append(parts[i] if j - i < 4 else f"({parts[i]})*{j - i}")
        i = j
    return "".join(out) or "<root>"


class _Equal:
    def __init__(self, map_free_vars: bool):
        self.map_free = map_free_vars
        self.lmap: dict[int, Any] = {}   # id(lhs binder or shared node) -> rhs object
        self.rmap: dict[int, Any] = {}
        self.keep: list[Any] = []        # keep compared objects alive (ids stay valid)

    # -- binders --------------------------------------------------------------
    def bind(self, a: Any, b: Any, path: Any) -> None:
        la, rb = self.lmap.get(id(a)), self.rmap.get(id(b))
        if la is None and rb is None:
            self.lmap[id(a)] = b
            self.rmap[id(b)] = a
            self.keep.append((a, b))
        elif la is not b or rb is not a:
            raise _Mismatch(path, f"binder {a!r} corresponds to different binders")

    def use(self, a: Any, b: Any, path: Any) -> None:
        la = self.lmap.get(id(a))
        if la is not None:
            if la is not b:
                raise _Mismatch(path, f"variable {_name(a)} is bound to {_name(la)} on the "
                                      f"right, but {_name(b)} is used")
            return
        if id(b) in self.rmap:
            raise _Mismatch(path, f"{_name(b)} on the right is bound, {_name(a)} on the left "
                                  f"is free")
        if a is b or self.map_free or isinstance(a, IncompleteType):
            self.bind(a, b, path)
            return
        raise _Mismatch(path, f"free variables differ: {_name(a)} vs {_name(b)}")

    # -- driver -------------------------------------------------------------
    def run(self, a: Any, b: Any) -> None:
        stack: list[tuple] = [("any", a, b, None)]
        while stack:
            kind, x, y, path = stack.pop()
            if kind == "any":
                if isinstance(x, Expr) or isinstance(y, Expr):
                    self.expr(x, y, path, stack)
                elif isinstance(x, Type) or isinstance(y, Type):
                    self.type(x, y, path, stack)
                elif isinstance(x, Pattern) or isinstance(y, Pattern):
                    self.pattern(x, y, path, stack)
                elif isinstance(x, IRModule) and isinstance(y, IRModule):
                    self.module(x, y, stack)
                elif x is None and y is None:
                    pass
                else:
                    raise _Mismatch(path, f"cannot compare {type(x).__name__} with "
                                          f"{type(y).__name__}")
            elif kind == "type":
                self.type(x, y, path, stack)
            elif kind == "bindvar":
                self.bind(x, y, path)
                self.opt_type(_annotation(x), _annotation(y), (path, ":type"), stack)
            elif kind == "bindpat":
                self.pattern(x, y, path, stack)
            elif kind == "bindtparams":
                self.tparams(x, y, path)
            else:  # pragma: no cover
                raise AssertionError(kind)

    def opt_type(self, a: Type | None, b: Type | None, path: Any, stack: list) -> None:
        if a is None and b is None:
            return
        if a is None or b is None:
            raise _Mismatch(path, "annotation present on one side only")
        stack.append(("type", a, b, path))

    def tparams(self, xs: tuple, ys: tuple, path: Any) -> None:
        if len(xs) != len(ys):
            raise _Mismatch(path, f"{len(xs)} vs {len(ys)} type parameters")
        for i, (p, q) in enumerate(zip(xs, ys)):
            if type(p) is not type(q) or getattr(p, "kind", None) != getattr(q, "kind", None):
                raise _Mismatch((path, f"[{i}]"), "type parameter kinds differ")
            self.bind(p, q, (path, f"[{i}]"))

    # -- expressions --------------------------------------------------------
    def expr(self, a: Any, b: Any, path: Any, stack: list) -> None:
        ta = type(a)
        if ta is not type(b):
            raise _Mismatch(path, f"{ta.__name__} vs {type(b).__name__}")
        if ta is Var:
            self.use(a, b, path)
            return
        named = _NAMED.get(ta)
        if named is not None:  # globals, operators, constructors: equal when their names are
            attr, fmt = named
            x, y = getattr(a, attr), getattr(b, attr)
            if x != y:
                raise _Mismatch(path, f"{fmt.format(x)} vs {fmt.format(y)}")
            return
        if ta is Constant:
            da, db = a.data, b.data
            if da.dtype != db.dtype or da.shape != db.shape or da.tobytes() != db.tobytes():
                raise _Mismatch(path, f"constants differ: {_short(da)} vs {_short(db)}")
            return
        # compound node: sharing must correspond
        la = self.lmap.get(id(a))
        if la is not None or id(b) in self.rmap:
            if la is b and self.rmap.get(id(b)) is a:
                return
            raise _Mismatch(path, "sharing differs (a node used twice on one side only)")
        self.lmap[id(a)] = b
        self.rmap[id(b)] = a
        self.keep.append((a, b))
        push = stack.append
        if ta is Call:
            if len(a.args) != len(b.args):
                raise _Mismatch(path, f"call with {len(a.args)} vs {len(b.args)} arguments")
            if a.attrs != b.attrs:
                raise _Mismatch(path, f"attributes differ: {a.attrs!r} vs {b.attrs!r}")
            if len(a.type_args) != len(b.type_args):
                raise _Mismatch(path, "different numbers of type arguments")
            for i in reversed(range(len(a.type_args))):
                push(("type", a.type_args[i], b.type_args[i], (path, f".type_args[{i}]")))
            for i in reversed(range(len(a.args))):
                push(("any", a.args[i], b.args[i], (path, f".args[{i}]")))
            push(("any", a.op, b.op, (path, ".op")))
        elif ta is Tuple:
            if len(a.fields) != len(b.fields):
                raise _Mismatch(path, f"tuple of {len(a.fields)} vs {len(b.fields)} fields")
            for i in reversed(range(len(a.fields))):
                push(("any", a.fields[i], b.fields[i], (path, f".fields[{i}]")))
        elif ta is TupleGetItem:
            if a.index != b.index:
                raise _Mismatch(path, f"projection .{a.index} vs .{b.index}")
            push(("any", a.tuple_value, b.tuple_value, (path, ".tuple_value")))
        elif ta in _PLAIN_FIELDS:  # If, Let, refs: children pushed last-compared-first
            for f in _PLAIN_FIELDS[ta]:
                push(("any", getattr(a, f), getattr(b, f), (path, "." + f)))
            if ta is Let:
                push(("bindvar", a.var, b.var, (path, ".var")))
        elif ta is Function:
            if len(a.params) != len(b.params):
                raise _Mismatch(path, f"function of {len(a.params)} vs {len(b.params)} params")
            if a.attrs != b.attrs:
                raise _Mismatch(path, f"function attributes differ: {a.attrs!r} vs {b.attrs!r}")
            push(("any", a.body, b.body, (path, ".body")))
            if (a.ret_type is None) != (b.ret_type is None):
                raise _Mismatch((path, ".ret_type"), "return type present on one side only")
            if a.ret_type is not None:
                push(("type", a.ret_type, b.ret_type, (path, ".ret_type")))
            for i in reversed(range(len(a.params))):
                push(("bindvar", a.params[i], b.params[i], (path, f".params[{i}]")))
            push(("bindtparams", a.type_params, b.type_params, (path, ".type_params")))
        elif ta is Match:
            if a.complete != b.complete:
                raise _Mismatch(path, "match vs match?")
            if len(a.clauses) != len(b.clauses):
                raise _Mismatch(path, f"{len(a.clauses)} vs {len(b.clauses)} clauses")
            for i in reversed(range(len(a.clauses))):
                ca, cb = a.clauses[i], b.clauses[i]
                push(("any", ca.rhs, cb.rhs, (path, f".clauses[{i}].rhs")))
                push(("bindpat", ca.lhs, cb.lhs, (path, f".clauses[{i}].lhs")))
            push(("any", a.data, b.data, (path, ".data")))
        else:  # pragma: no cover
            raise _Mismatch(path, f"unknown node {ta.__name__}")

    def pattern(self, a: Pattern, b: Pattern, path: Any, stack: list) -> None:
        if type(a) is not type(b):
            raise _Mismatch(path, f"pattern {type(a).__name__} vs {type(b).__name__}")
        if isinstance(a, PatternVar):
            stack.append(("bindvar", a.var, b.var, path))
        elif isinstance(a, PatternConstructor):
            if a.constructor.name_hint != b.constructor.name_hint:
                raise _Mismatch(path, f"constructor {a.constructor.name_hint} vs "
                                      f"{b.constructor.name_hint}")
            self._subpatterns(a.patterns, b.patterns, path, stack)
        elif isinstance(a, PatternTuple):
            self._subpatterns(a.patterns, b.patterns, path, stack)

    def _subpatterns(self, xs: tuple, ys: tuple, path: Any, stack: list) -> None:
        if len(xs) != len(ys):
            raise _Mismatch(path, f"{len(xs)} vs {len(ys)} sub-patterns")
        for i in reversed(range(len(xs))):
            stack.append(("bindpat", xs[i], ys[i], (path, f".patterns[{i}]")))

    # -- types ----------------------------------------------------------------
    def type(self, a: Any, b: Any, path: Any, stack: list) -> None:
        ta = type(a)
        if ta is not type(b):
            raise _Mismatch(path, f"type {a!r} vs {b!r}")
        if ta is TensorType:
            if a.dtype != b.dtype:
                raise _Mismatch(path, f"dtype {a.dtype} vs {b.dtype}")
            if len(a.shape) != len(b.shape):
                raise _Mismatch(path, f"rank {len(a.shape)} vs {len(b.shape)}")
            for i, (x, y) in enumerate(zip(a.shape, b.shape)):
                self.dim(x, y, (path, f".shape[{i}]"))
        elif ta is TupleType:
            if len(a.fields) != len(b.fields):
                raise _Mismatch(path, f"tuple type of {len(a.fields)} vs {len(b.fields)}")
            for i in reversed(range(len(a.fields))):
                stack.append(("type", a.fields[i], b.fields[i], (path, f".fields[{i}]")))
        elif ta is FuncType:
            if len(a.arg_types) != len(b.arg_types):
                raise _Mismatch(path, f"function type of {len(a.arg_types)} vs "
                                      f"{len(b.arg_types)} arguments")
            stack.append(("type", a.ret_type, b.ret_type, (path, ".ret_type")))
            for i in reversed(range(len(a.arg_types))):
                stack.append(("type", a.arg_types[i], b.arg_types[i], (path, f".arg_types[{i}]")))
            stack.append(("bindtparams", a.type_params, b.type_params, (path, ".type_params")))
        elif ta is RefType:
            stack.append(("type", a.value, b.value, (path, ".value")))
        elif ta is TypeCall:
            if len(a.args) != len(b.args):
                raise _Mismatch(path, "type call arities differ")
            for i in reversed(range(len(a.args))):
                stack.append(("type", a.args[i], b.args[i], (path, f".args[{i}]")))
            stack.append(("type", a.func, b.func, (path, ".func")))
        elif ta is GlobalTypeVar:
            if a.name_hint != b.name_hint:
                raise _Mismatch(path, f"type {a.name_hint} vs {b.name_hint}")
        elif ta in (TypeVar, IncompleteType):
            if getattr(a, "kind", None) != getattr(b, "kind", None):
                raise _Mismatch(path, "type variable kinds differ")
            self.use(a, b, path)
        elif ta is TypeData:
            if a.header.name_hint != b.header.name_hint:
                raise _Mismatch(path, f"type {a.header.name_hint} vs {b.header.name_hint}")
            if len(a.constructors) != len(b.constructors):
                raise _Mismatch(path, "numbers of constructors differ")
            for i in reversed(range(len(a.constructors))):
                ca, cb = a.constructors[i], b.constructors[i]
                p = (path, f".{ca.name_hint}")
                if ca.name_hint != cb.name_hint or len(ca.inputs) != len(cb.inputs):
                    raise _Mismatch(p, f"constructor {ca.name_hint}/{len(ca.inputs)} vs "
                                       f"{cb.name_hint}/{len(cb.inputs)}")
                for j in reversed(range(len(ca.inputs))):
                    stack.append(("type", ca.inputs[j], cb.inputs[j], (p, f"[{j}]")))
            stack.append(("bindtparams", a.type_params, b.type_params, (path, ".type_params")))
        else:
            if a != b:
                raise _Mismatch(path, f"type {a!r} vs {b!r}")

    def dim(self, x: Any, y: Any, path: Any) -> None:
        if isinstance(x, bool) or isinstance(y, bool):
            raise _Mismatch(path, "bool used as dimension")
        if isinstance(x, int) or isinstance(y, int):
            if not (isinstance(x, int) and isinstance(y, int) and x == y):
                raise _Mismatch(path, f"dimension {x!r} vs {y!r}")
        elif isinstance(x, AnyDim) or isinstance(y, AnyDim):
            if not (isinstance(x, AnyDim) and isinstance(y, AnyDim)):
                raise _Mismatch(path, f"dimension {x!r} vs {y!r}")
        elif isinstance(x, ShapeVar) and isinstance(y, ShapeVar):
            self.use(x, y, path)
        elif isinstance(x, DimExpr) and isinstance(y, DimExpr):
            for m, _ in x.terms:
                for v in m:
                    if id(v) not in self.lmap:
                        ys = [w for mm, _ in y.terms for w in mm if w.name == v.name]
                        if ys:
                            self.use(v, ys[0], path)
            if _map_dim(x, self.lmap) != y:
                raise _Mismatch(path, f"dimension {x!r} vs {y!r}")
        else:
            raise _Mismatch(path, f"dimension {x!r} vs {y!r}")

    # -- modules ----------------------------------------------------------------
    def module(self, a: IRModule, b: IRModule, stack: list) -> None:
        ta, tb = set(a.type_definitions), set(b.type_definitions)
        if ta != tb:
            raise _Mismatch(None, f"type definitions differ: {sorted(ta ^ tb)}")
        fa, fb = set(a.functions), set(b.functions)
        if fa != fb:
            raise _Mismatch(None, f"global functions differ: {sorted(fa ^ fb)}")
        for name in sorted(fa, reverse=True):
            stack.append(("any", a[name], b[name], (None, f"@{name}")))
        for name in sorted(ta, reverse=True):
            stack.append(("type", a.type_definitions[name], b.type_definitions[name],
                          (None, f"type {name}")))


def _map_dim(d: DimExpr, lmap: dict[int, Any]) -> Any:
    out: Any = 0
    for m, c in d.terms:
        term: Any = c
        for v in m:
            term = dim_mul(term, lmap.get(id(v), v))
        out = dim_add(out, term)
    return out


def _annotation(v: Var) -> Type | None:
    """``v``'s annotation; a bare ``_`` (incomplete type) counts as none."""
    t = v.type_annotation
    return None if type(t) is IncompleteType else t


def _name(x: Any) -> str:
    if isinstance(x, Var):
        return f"%{x.name_hint}"
    return getattr(x, "name_hint", None) or getattr(x, "name", None) or repr(x)


def _short(a: np.ndarray) -> str:
    s = np.array2string(a, threshold=6)
    return f"{s} ({a.dtype}{list(a.shape)})"


def _first_mismatch(a: Any, b: Any, map_free_vars: bool) -> _Mismatch | None:
    try:
        _Equal(map_free_vars).run(a, b)
    except _Mismatch as m:
        return m
    return None


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    """True if ``a`` and ``b`` are equal up to renaming of bound variables (see module doc)."""
    return _first_mismatch(a, b, map_free_vars) is None


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> None:
    """Raise AssertionError naming the path of the first difference and showing both sides."""
    m = _first_mismatch(a, b, map_free_vars)
    if m is None:
        return
    raise AssertionError(
        f"not structurally equal at {_render_path(m.path)}: {m.why}\n"
        f"--- left ---\n{_text(a)}\n--- right ---\n{_text(b)}")


def _text(x: Any) -> str:
    try:
        from relay_ir.printer import astext
        return astext(x)
    except Exception as e:  # NOTE: the assert must still report the path
        return f"<unprintable {type(x).__name__}: {e}>"


# ----------------------------------------------------------------------------- hashing
def structural_hash(x: Any, map_free_vars: bool = False) -> int:
    """A hash consistent with :func:`structural_equal`: equal values hash equally."""
    from relay_ir.traversal import children, post_order, run_generators
    numbering: dict[int, int] = {}
    keep: list[Any] = []

    def num(v: Any) -> int:
        if id(v) not in numbering:
            numbering[id(v)] = len(numbering)
            keep.append(v)
        return numbering[id(v)]

    def thash(t: Any) -> int:
        if t is None:
            return 0
        if isinstance(t, TensorType):
            return hash(("T", t.dtype, tuple(dhash(d) for d in t.shape)))
        return run_generators(thash_g(t))  # NOTE: nested types without recursion

    def thashes(ts: Any) -> Any:
        out = []
        for x in ts:
            out.append((yield thash_g(x)))
        return tuple(out)

    def thash_g(t: Any) -> Any:
        if t is None:
            return 0
        if isinstance(t, TensorType):
            return hash(("T", t.dtype, tuple(dhash(d) for d in t.shape)))
        if isinstance(t, (TypeVar, IncompleteType, ShapeVar)):
            return hash(("tv", num(t)))
        if isinstance(t, FuncType):
            for p in t.type_params:
                num(p)
            return hash(("fn", (yield thashes(t.arg_types)), (yield thash_g(t.ret_type))))
        if isinstance(t, TupleType):
            return hash(("tup", (yield thashes(t.fields))))
        if isinstance(t, RefType):
            return hash(("ref", (yield thash_g(t.value))))
        if isinstance(t, TypeCall):
            return hash(("call", (yield thash_g(t.func)), (yield thashes(t.args))))
        if isinstance(t, GlobalTypeVar):
            return hash(("gtv", t.name_hint))
        if isinstance(t, TypeData):
            for p in t.type_params:
                num(p)
            ctors = []
            for c in t.constructors:
                ctors.append((c.name_hint, (yield thashes(c.inputs))))
            return hash(("data", t.header.name_hint, tuple(ctors)))
        return hash(repr(t))

    def dhash(d: Any) -> int:
        if isinstance(d, ShapeVar):
            return hash(("sv", num(d)))
        if isinstance(d, DimExpr):
            return hash(("dim", len(d.terms)))
        return hash(repr(d))

    def phash(p: Pattern) -> int:
        if isinstance(p, PatternVar):
            return hash(("pv", num(p.var), thash(_annotation(p.var))))
        if isinstance(p, PatternConstructor):
            return hash(("pc", p.constructor.name_hint, tuple(phash(q) for q in p.patterns)))
        if isinstance(p, PatternTuple):
            return hash(("pt", tuple(phash(q) for q in p.patterns)))
        return hash("pw")

    if isinstance(x, IRModule):
        h = [hash(("type", n, thash(t))) for n, t in sorted(x.type_definitions.items())]
        h += [hash((n, structural_hash(f, map_free_vars))) for n, f in sorted(x.functions.items())]
        return hash(tuple(h))
    if isinstance(x, Type):
        return thash(x)
    if isinstance(x, Pattern):
        return phash(x)
    memo: dict[int, int] = {}
    for node in post_order(x):
        t = type(node)
        if t is Var:
            h = hash(("var", num(node), thash(_annotation(node))))
        elif t is GlobalVar:
            h = hash(("gv", node.name_hint))
        elif t is Op:
            h = hash(("op", node.name))
        elif t is Constructor:
            h = hash(("ctor", node.name_hint))
        elif t is Constant:
            h = hash(("const", str(node.data.dtype), node.data.shape, node.data.tobytes()))
        else:
            extra: Any = ()
            if t is Call:
                extra = (hash(node.attrs), tuple(thash(a) for a in node.type_args))
            elif t is TupleGetItem:
                extra = node.index
            elif t is Function:
                extra = (hash(node.attrs), thash(node.ret_type),
                         tuple(num(p) for p in node.type_params))
            elif t is Match:
                extra = (node.complete, tuple(phash(c.lhs) for c in node.clauses))
            h = hash((t.__name__, extra, tuple(memo[id(c)] for c in children(node))))
        memo[id(node)] = h
    return memo[id(x)]
