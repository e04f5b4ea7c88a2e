"""Hypothesis strategies for well-scoped, printable relay_ir programs.

``modules()`` draws an :class:`~relay_ir.module.IRModule` (ADT definitions with type
parameters plus global functions); ``exprs()`` draws one expression whose free variables are
annotated; ``types()`` draws a type. The programs are well scoped (every variable is used
inside its binder's scope) but need not be well typed. Between them they cover every
expression, type and pattern form of the text format:

* literals of every literal dtype, including negative, extreme, subnormal and infinite values,
  and constants that need the metadata section (tensors, int8/uint8, NaN);
* variables, let chains (named, annotated, anonymous ``a; b``), graph sharing (a node used
  several times, also across nested scopes), tuples and projections;
* functions with type and shape parameters, attributes, annotations and return types;
* calls of operators with non-default attributes, of globals, closures, function literals and
  constructors (plus non-op calls carrying ``attrs_type_key``);
* ``if``, ``match`` and ``match?`` with nested constructor/tuple/variable/wildcard patterns;
* references; ADTs with type parameters; tensor types with ``?``, symbolic and polynomial
  dimensions; tuple, function, reference, ADT and incomplete types.

Things the text format cannot express are avoided on purpose: a bare (unapplied) nullary
constructor (``Nil`` always parses as the call ``Nil()``), a shape parameter that no dimension
mentions, one ``_`` object used twice, and sharing a node that mentions a recursive let
variable between the let's value and its body.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from relay_ir.attrs import Attrs
from relay_ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Pattern, PatternConstructor, PatternTuple,
                           PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Tuple,
                           TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.op import AttrField, OpDef, get_opdef, list_ops
from relay_ir.ty import (ANY, FuncType, GlobalTypeVar, IncompleteType, RefType, ShapeVar,
                         TensorType, TupleType, Type, TypeCall, TypeData, TypeVar, dim_add,
                         dim_mul)

__all__ = ["modules", "exprs", "types", "literals", "EDGE_SCALARS"]

VAR_NAMES = ("x", "y", "z", "a", "b", "x1", "1", "_t", "base/x", "")
TYPE_PARAM_NAMES = ("A", "B", "T", "U")
SHAPE_PARAM_NAMES = ("n", "m", "k")
DTYPES = ("float32", "float16", "float64", "int32", "int16", "int64", "bool", "int8", "uint8")
LITERAL_DTYPES = ("int16", "int32", "int64", "float16", "float32", "float64", "bool")

EDGE_SCALARS: dict[str, tuple] = {
    "int16": (0, 1, -1, 42, -32768, 32767),
    "int32": (0, 7, -7, 2**31 - 1, -2**31),
    "int64": (0, -5, 2**31, -2**31 - 1, 2**63 - 1, -2**63),
    "float16": (0.0, -0.0, 1.0, -3.0, 0.1, 65504.0, -65504.0, 6e-08, 6.1e-05, float("inf"),
                -float("inf")),
    "float32": (0.0, -0.0, 3.0, -3.0, 0.1, 1e11, 3.4028235e38, -3.4028235e38, 1e-45, 1.17549435e-38,
                float("inf"), -float("inf"), float("nan")),
    "float64": (0.0, -0.0, 0.1, 1 / 3, -2.5e-300, 1.7976931348623157e308, 5e-324,
                float("inf"), -float("inf")),
    "bool": (True, False),
}


# ----------------------------------------------------------------------------- literals
@st.composite
def literals(draw: Callable, meta: bool = True) -> Constant:
    """A constant: a literal scalar of any literal dtype, or (``meta``) one needing metadata."""
    kind = draw(st.sampled_from(["edge", "edge", "random", "random"] + (["meta"] if meta else [])))
    if kind == "meta":
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.sampled_from([(), (2,), (2, 3), (0,), (1, 1, 2)]))
        if shape == () and dtype in LITERAL_DTYPES:
            dtype = draw(st.sampled_from(["int8", "uint8", "uint32"]))
        n = int(np.prod(shape))
        vals = draw(st.lists(st.integers(-100, 100), min_size=n, max_size=n))
        arr = np.asarray(vals, dtype="int64").reshape(shape)
        if dtype == "bool":
            arr = arr > 0
        return Constant(arr.astype(dtype))
    dtype = draw(st.sampled_from(LITERAL_DTYPES))
    if kind == "edge":
        value = draw(st.sampled_from(EDGE_SCALARS[dtype]))
        if not meta and isinstance(value, float) and value != value:
            value = 1.5
    elif dtype == "bool":
        value = draw(st.booleans())
    elif dtype.startswith("int"):
        bits = int(dtype[3:])
        value = draw(st.integers(-2**(bits - 1), 2**(bits - 1) - 1))
    else:
        width = int(dtype[5:])
        value = draw(st.floats(width=width, allow_nan=meta))
    return Constant(np.asarray(value, dtype=dtype))


# ----------------------------------------------------------------------------- context
class _Env:
    """What is in scope while generating: variables, type/shape params, reusable nodes."""

    def __init__(self, draw: Callable, adts: list[TypeData], globals_: list[GlobalVar]):
        self.draw = draw
        self.adts = adts
        self.globals = globals_
        self.vars: list[Var] = []
        self.tvars: list[TypeVar] = []
        self.svars: list[ShapeVar] = []
        self.pool: list[Expr] = []          # compound nodes that may be used again
        self.fv: dict[Expr, frozenset] = {}  # free variables of generated compound nodes
        self.tctx: dict[Expr, frozenset] = {}  # type/shape params in scope at creation

    # -- helpers ------------------------------------------------------------
    def choice(self, xs: Any) -> Any:
        return self.draw(st.sampled_from(list(xs)))

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def flag(self, p_true: int = 1, of: int = 2) -> bool:
        return self.draw(st.integers(0, of - 1)) < p_true

    def ctors(self) -> list[Constructor]:
        return [c for td in self.adts for c in td.constructors]

    def new_var(self, annotate: bool = True, depth: int = 1) -> Var:
        name = self.choice(VAR_NAMES)
        ann = self.type(depth) if annotate and self.flag(1, 2) else None
        return Var(name, ann)

    # -- types --------------------------------------------------------------
    def dim(self) -> Any:
        k = self.int(0, 9)
        if k <= 4 or (k >= 7 and not self.svars):
            return self.int(0, 8)
        if k <= 6:
            return ANY if k == 5 or not self.svars else self.choice(self.svars)
        a, b = self.choice(self.svars), self.choice(self.svars)
        return self.choice([dim_add(a, self.int(1, 3)), dim_mul(2, a), dim_mul(a, b),
                            dim_add(dim_mul(3, a), dim_mul(-1, b))])

    def tensor_type(self) -> TensorType:
        rank = self.choice([0, 0, 1, 2, 3])
        return TensorType(tuple(self.dim() for _ in range(rank)),
                          self.choice(DTYPES[:7] + ("bfloat16",)))

    def type(self, depth: int = 2) -> Type:
        kinds = ["tensor", "tensor", "tensor", "incomplete"]
        if self.tvars:
            kinds += ["tvar", "tvar"]
        if self.adts:
            kinds += ["adt"]
        if depth > 0:
            kinds += ["tuple", "func", "ref"]
        k = self.choice(kinds)
        if k == "tensor":
            return self.tensor_type()
        if k == "incomplete":
            return IncompleteType()
        if k == "tvar":
            return self.choice(self.tvars)
        if k == "adt":
            td = self.choice(self.adts)
            # NOTE: the parser reads a bare ADT name as TypeCall(name, ())
            return TypeCall(td.header, tuple(self.type(depth - 1) for _ in td.type_params))
        if k == "tuple":
            return TupleType(tuple(self.type(depth - 1) for _ in range(self.int(0, 3))))
        if k == "func":
            tps: tuple = ()
            if self.flag(1, 4):
                tps = (TypeVar(self.choice(TYPE_PARAM_NAMES)),)
            saved = self.tvars
            self.tvars = saved + list(tps)
            try:
                return FuncType(tuple(self.type(depth - 1) for _ in range(self.int(0, 2))),
                                self.type(depth - 1), tps)
            finally:
                self.tvars = saved
        return RefType(self.type(depth - 1))

    # -- expressions ----------------------------------------------------------
    def free(self, e: Expr) -> frozenset:
        if isinstance(e, Var):
            return frozenset((e,))
        return self.fv.get(e, frozenset())

    def record(self, e: Expr, parts: list[Expr], bound: tuple = ()) -> Expr:
        fv: frozenset = frozenset()
        for p in parts:
            fv |= self.free(p)
        self.fv[e] = fv - frozenset(bound)
        self.tctx[e] = frozenset(self.tvars) | frozenset(self.svars)
        self.pool.append(e)
        return e

    def reusable(self) -> list[Expr]:
        visible = set(self.vars)
        tvisible = set(self.tvars) | set(self.svars)
        return [e for e in self.pool if self.fv[e] <= visible and self.tctx[e] <= tvisible]

    def atom(self) -> Expr:
        kinds = ["lit", "lit"]
        if self.vars:
            kinds += ["var", "var", "var"]
        if self.globals:
            kinds.append("global")
        kinds.append("op")
        if any(c.inputs for c in self.ctors()):
            kinds.append("ctor")
        k = self.choice(kinds)
        if k == "lit":
            return self.draw(literals())
        if k == "var":
            return self.choice(self.vars)
        if k == "global":
            return self.choice(self.globals)
        if k == "op":
            return get_opdef(self.choice(["add", "nn.relu", "sum", "zeros"])).op
        return self.choice([c for c in self.ctors() if c.inputs])

    def expr(self, depth: int) -> Expr:
        if depth <= 0:
            return self.atom()
        reuse = self.reusable()
        kinds = ["atom", "op_call", "op_call", "tuple", "proj", "let", "fn", "call", "call",
                 "if", "ref", "ref", "seq"]
        if reuse:
            kinds += ["reuse"] * 4
        kinds.append("dup")
        if self.ctors():
            kinds += ["ctor_call", "match"]
        k = self.choice(kinds)
        return getattr(self, "gen_" + k)(depth)

    def gen_atom(self, depth: int) -> Expr:
        return self.atom()

    def gen_reuse(self, depth: int) -> Expr:
        return self.choice(self.reusable())

    def gen_dup(self, depth: int) -> Expr:
        """One node used twice: ``%0 = e; (%0, %0)`` or ``add(%0, %0)``."""
        e = self.expr(depth - 1)
        if self.flag():
            return self.record(Tuple((e, e)), [e])
        add = get_opdef("add")
        return self.record(Call(add.op, (e, e), add.make_attrs({})), [e])

    def gen_tuple(self, depth: int) -> Expr:
        fields = [self.expr(depth - 1) for _ in range(self.int(0, 3))]
        return self.record(Tuple(tuple(fields)), fields)

    def gen_proj(self, depth: int) -> Expr:
        t = self.expr(depth - 1)
        return self.record(TupleGetItem(t, self.int(0, 3)), [t])

    def gen_ref(self, depth: int) -> Expr:
        k = self.int(0, 2)
        a = self.expr(depth - 1)
        if k == 0:
            return self.record(RefCreate(a), [a])
        if k == 1:
            return self.record(RefRead(a), [a])
        b = self.expr(depth - 1)
        return self.record(RefWrite(a, b), [a, b])

    def gen_op_call(self, depth: int) -> Expr:
        opdef = self.choice(_OPS)
        n = opdef.num_inputs if opdef.num_inputs >= 0 else self.int(0, 3)
        args = [self.expr(depth - 1) for _ in range(n)]
        given = {}
        for f in opdef.attrs:
            if self.flag(1, 3):
                given[f.name] = self.draw(_attr_value(f))
        attrs = opdef.make_attrs(given)
        return self.record(Call(opdef.op, tuple(args), attrs), args)

    def gen_call(self, depth: int) -> Expr:
        kinds = ["fn", "var"] + (["global", "global"] if self.globals else [])
        k = self.choice(kinds)
        if k == "var" and self.vars:
            callee: Expr = self.choice(self.vars)
        elif k == "global":
            callee = self.choice(self.globals)
        else:
            callee = self.gen_fn(depth - 1)
        args = [self.expr(depth - 1) for _ in range(self.int(0, 2))]
        attrs = Attrs()
        if self.flag(1, 8):
            attrs = Attrs({"level": self.int(0, 3), "name": "k"}, "DictAttrs")
        return self.record(Call(callee, tuple(args), attrs), [callee, *args])

    def gen_ctor_call(self, depth: int) -> Expr:
        c = self.choice(self.ctors())
        args = [self.expr(depth - 1) for _ in c.inputs]
        return self.record(Call(c, tuple(args)), args)

    def gen_if(self, depth: int) -> Expr:
        cond = self.expr(depth - 1)
        t = self.scoped(lambda: self.body(depth - 1))
        f = self.scoped(lambda: self.body(depth - 1))
        return self.record(If(cond, t, f), [cond, t, f])

    def gen_let(self, depth: int) -> Expr:
        var = self.new_var()
        value = self.expr(depth - 1)
        body = self.scoped(lambda: self.body(depth - 1), [var])
        return self.record(Let(var, value, body), [value, body], (var,))

    def gen_seq(self, depth: int) -> Expr:
        var = Var("")
        value = self.expr(depth - 1)
        body = self.expr(depth - 1)
        return self.record(Let(var, value, body), [value, body], (var,))

    def gen_fn(self, depth: int) -> Function:
        saved_t, saved_s = list(self.tvars), list(self.svars)
        tparams: list[Any] = []
        for _ in range(self.choice([0, 0, 1, 2])):
            if self.flag(1, 3):
                sv = ShapeVar(self.choice(SHAPE_PARAM_NAMES))
                tparams.append(sv)
                self.svars.append(sv)
            else:
                tv = TypeVar(self.choice(TYPE_PARAM_NAMES))
                tparams.append(tv)
                self.tvars.append(tv)
        params = []
        svs = [p for p in tparams if isinstance(p, ShapeVar)]
        if svs:  # every shape parameter must appear in a dimension
            params.append(Var("s", TensorType(tuple(svs), "float32")))
        params += [self.new_var() for _ in range(self.int(0, 2))]
        ret = self.type(1) if self.flag(1, 3) else None
        attrs = Attrs()
        if self.flag(1, 4):
            attrs = Attrs(self.choice([{"Primitive": 1}, {"Composite": "foo"},
                                       {"Inline": 1, "TestAttribute": None}]))
        body = self.scoped(lambda: self.body(depth - 1), params)
        self.tvars, self.svars = saved_t, saved_s
        fn = Function(tuple(params), body, ret, tuple(tparams), attrs)
        return self.record(fn, [body], tuple(params))  # type: ignore[return-value]

    def gen_match(self, depth: int) -> Expr:
        data = self.expr(depth - 1)
        clauses = []
        for _ in range(self.int(1, 3)):
            pat, bound = self.pattern(2)
            rhs = self.scoped(lambda: self.body(depth - 1), bound)
            clauses.append(Clause(pat, rhs))
        m = Match(data, tuple(clauses), complete=self.flag())
        bound_all: list[Var] = []
        from relay_ir.traversal import pattern_vars
        for c in clauses:
            bound_all += pattern_vars(c.lhs)
        return self.record(m, [data, *(c.rhs for c in clauses)], tuple(bound_all))

    def pattern(self, depth: int) -> tuple[Pattern, list[Var]]:
        kinds = ["wild", "var", "var"]
        if depth > 0:
            kinds += ["tuple"] + (["ctor", "ctor"] if self.ctors() else [])
        k = self.choice(kinds)
        if k == "wild":
            return PatternWildcard(), []
        if k == "var":
            v = self.new_var(depth=1)
            return PatternVar(v), [v]
        if k == "tuple":
            subs = [self.pattern(depth - 1) for _ in range(self.int(0, 3))]
            return PatternTuple(tuple(p for p, _ in subs)), [v for _, vs in subs for v in vs]
        c = self.choice(self.ctors())
        subs = [self.pattern(depth - 1) for _ in c.inputs]
        return (PatternConstructor(c, tuple(p for p, _ in subs)),
                [v for _, vs in subs for v in vs])

    def body(self, depth: int) -> Expr:
        """A block: a few let/seq bindings (sometimes a recursive closure), then a result."""
        bindings: list[tuple[Var, Expr]] = []
        for _ in range(self.choice([0, 1, 1, 2, 3])):
            k = self.int(0, 5)
            if k == 0:
                var = Var("")
                value = self.expr(depth)
            elif k == 1 and depth > 0:
                var = Var(self.choice(["f", "loop"]))
                self.vars.append(var)  # a recursive closure sees itself
                mark = len(self.pool)
                value = self.gen_fn(depth)
                # NOTE: nodes mentioning `var` made inside its value stay there (see module doc)
                self.pool[mark:] = [e for e in self.pool[mark:] if var not in self.fv[e]]
            else:
                var = self.new_var()
                value = self.expr(depth)
                self.vars.append(var)
            bindings.append((var, value))
        result = self.expr(depth)
        out = result
        for var, value in reversed(bindings):
            out = self.record(Let(var, value, out), [value, out], (var,))
        return out

    def scoped(self, fn: Callable[[], Expr], bound: list[Var] | tuple = ()) -> Expr:
        saved = list(self.vars)
        self.vars.extend(bound)
        try:
            return fn()
        finally:
            self.vars = saved


def _attr_value(f: AttrField) -> st.SearchStrategy:
    small = st.integers(-3, 8)
    k = f.kind
    if k in ("int", "int?"):
        return small if k == "int" else st.one_of(st.none(), small)
    if k == "float":
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                         st.floats(width=32, allow_nan=False, allow_infinity=False),
                         st.sampled_from([0.0, -1.5, 1e-05, 0.1, 6.0]))
    if k == "bool":
        return st.booleans()
    if k == "str":
        return st.sampled_from(["", "NCHW", "NHWC", "clip", "fast", "float16"])
    if k == "dtype":
        return st.sampled_from(["float32", "int8", "float16", "int64"])
    if k in ("ints", "ints?"):
        base = st.lists(small, max_size=4)
        return base if k == "ints" else st.one_of(st.none(), base)
    if k == "floats":
        return st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=3)
    if k == "int_or_ints":
        return st.one_of(small, st.lists(small, max_size=3))
    return st.lists(st.lists(small, min_size=2, max_size=2), max_size=3)  # "any": nested ints


_OPS: list[OpDef] = [o for o in list_ops() if o.attrs] + [
    get_opdef(n) for n in ("add", "subtract", "multiply", "nn.relu", "where", "negative")]


# ----------------------------------------------------------------------------- ADTs
_ADT_NAMES = ("Lst", "Opt", "Tree", "Pair", "Unit1")


def _adts(draw: Callable) -> list[TypeData]:
    names = draw(st.lists(st.sampled_from(_ADT_NAMES), min_size=draw(st.sampled_from([1, 0])),
                          max_size=3, unique=True))
    headers = [GlobalTypeVar(n) for n in names]
    tparam_counts = [draw(st.integers(0, 2)) for _ in names]
    out: list[TypeData] = []
    env = _Env(draw, [], [])
    shells = [TypeData(h, (), ()) for h in headers]  # names known for recursive fields
    for h, ntp in zip(headers, tparam_counts):
        tps = tuple(TypeVar(draw(st.sampled_from(TYPE_PARAM_NAMES))) for _ in range(ntp))
        env.tvars = list(tps)
        env.adts = [TypeData(s.header, tuple(TypeVar("X") for _ in range(c)), ())
                    for s, c in zip(shells, tparam_counts)]
        ctors = []
        for i in range(draw(st.integers(0 if h.name_hint == "Unit1" else 1, 3))):
            inputs = tuple(env.type(1) for _ in range(draw(st.integers(0, 2))))
            # NOTE: `_` is not a legal constructor field type in a definition we print back
            inputs = tuple(t if not isinstance(t, IncompleteType) else TensorType((), "int32")
                           for t in inputs)
            ctors.append(Constructor(f"{h.name_hint}{i}", inputs, h, i))
        out.append(TypeData(h, tps, tuple(ctors)))
    return out


# ----------------------------------------------------------------------------- public
@st.composite
def modules(draw: Callable, max_depth: int = 4) -> IRModule:
    """A module: 0-3 ADTs (with type parameters) and 1-3 global functions."""
    adts = _adts(draw)
    names = ["main"] + draw(st.lists(st.sampled_from(["f", "g", "helper", "h/1"]),
                                     max_size=2, unique=True))
    globals_ = [GlobalVar(n) for n in names]
    fns: dict[str, Function] = {}
    for gv in globals_:
        env = _Env(draw, adts, globals_)
        fn = env.gen_fn(draw(st.sampled_from(range(max_depth, 0, -1))))
        fns[gv.name_hint] = fn
    return IRModule(fns, {td.header.name_hint: td for td in adts})


@st.composite
def exprs(draw: Callable, max_depth: int = 3) -> Expr:
    """An expression (no ADTs or globals); its free variables are annotated or not."""
    env = _Env(draw, [], [])
    free = [env.new_var() for _ in range(draw(st.integers(0, 2)))]
    env.vars = list(free)
    return env.body(draw(st.integers(1, max_depth)))


@st.composite
def types(draw: Callable, depth: int = 3) -> Type:
    """A closed type (no free type variables): tensors, tuples, functions, refs, ``_``."""
    env = _Env(draw, [], [])
    return env.type(depth)
