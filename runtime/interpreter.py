"""The reference interpreter: runs any module with numpy, without Python recursion.

Design
======

**Compile once, then run a flat machine.** Each :class:`~relay_ir.expr.Function` is compiled
(once per module, lazily on its first call, cached with the module) into a :class:`Code`: a flat
list of *steps* plus a register-file template. A step is a small Python closure
``step(regs) -> int | tuple`` specialised at compile time for one node (an operator call with
two arguments, a tuple of three fields, a branch, ...), so the hot path does no ``isinstance``
dispatch on IR nodes. ``regs`` is the activation's register file, a Python list laid out as::

    [ parameters | captured values | constants, globals, let-bound values, temporaries ]

Every variable and every non-atomic node of the function body has a fixed slot index
(variables are SSA-like: a let binding simply names the register holding its value, so lets cost
nothing). Constants, globals, first-class operators/constructors and closed inner functions are
pre-stored in the template, which an activation copies (``args + captured + rest``).

**Steps and control.** A step returns either an ``int`` (the next pc: straight-line steps know
their successor, branches and matches pick one) or an action tuple:

* ``(CALL, callee, args, dst, return_pc)`` -- a non-tail call of a closure (or a first-class
  constructor / operator value);
* ``(TAILCALL, callee, args)`` -- a call in tail position (function body, let body, if branch,
  match arm of a tail expression): the current activation is *replaced*, no frame is pushed;
* ``(RET, value)`` -- leave the activation.

The driver loop (:func:`_execute`) is a CEK-style machine: C is ``(code, pc)``, E is ``regs``
(closures capture the values of their free variables by copying them into their own list, so the
environment chain is flat per activation), and K is an explicit Python list of
``(code, return_pc, regs, dst)`` frames. Calls push a frame, returns pop one; tail calls do
neither. No Python recursion happens at run time, so a 1,000,000-iteration tail-recursive loop
runs in constant stack, and a non-tail ``foldr`` over a 100,000-element list only grows the
heap-allocated frame list.

**Compilation** walks let spines and dataflow (calls, tuples, projections, refs) with explicit
stacks, emitting steps in evaluation order (for a call: arguments left to right, then the
callee, as TVM's interpreter does). It recurses only across ``fn``, ``if`` and ``match`` nesting.
A node shared in a DAG is evaluated once per activation (memoised within the enclosing branch
scope). A let-bound function that mentions its own variable (``let %f = fn (...) { ... %f ...
}``) captures ``%f`` like any other variable; the closure-creation step patches that captured
slot to the closure itself (a recursive closure without a separate class).

**Values** (``relay_ir.runtime.values``): tensors are numpy arrays, exactly as the operator's
reference implementation (``OpDef.impl(args, attrs)``) returns them -- the interpreter never
converts results to Python scalars or float64, so dtype semantics (int division truncating,
casts truncating, float16 staying float16) are those of the impls. Tuples are Python tuples,
ADT values :class:`~relay_ir.runtime.values.ADTValue`, refs
:class:`~relay_ir.runtime.values.RefValue`, functions
:class:`~relay_ir.runtime.values.Closure`.

**Errors.** A match with no matching clause (``match?`` or a non-exhaustive total match) and
any failure inside an operator are :class:`~relay_ir.errors.InterpreterError` carrying the span
of the node that failed. :func:`evaluate` checks the arguments against the entry's parameter
types before running (count, tensor shape and dtype, tuple arity, ADT type), naming the
parameter; unannotated parameters get their types from ``passes.InferType`` when available.
"""
from __future__ import annotations

import gc
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import DiagnosticError, InterpreterError
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If,
                           Let, Match, Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                           Var)
from relay_ir.module import IRModule
from relay_ir.runtime.values import ADTValue, Closure, RefValue, format_value
from relay_ir.span import Span
from relay_ir.traversal import free_vars
from relay_ir.ty import (AnyDim, DimExpr, FuncType, GlobalTypeVar, RefType, ShapeVar, TensorType,
                         TupleType, Type, TypeCall, format_dim)

CALL = 0
TAILCALL = 1
RET = 2

# step kinds (for error messages): None, or the operator's name for an operator call
_K_OTHER = None

_DATAFLOW = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)
_ATOMS = (Var, Constant, GlobalVar, Op, Constructor)


class Code:
    """A compiled function: flat steps, their spans, and the register template."""

    __slots__ = ("steps", "spans", "kinds", "nparams", "ncap", "rest", "func", "name")

    def __init__(self, steps: list, spans: list, kinds: list, nparams: int, ncap: int,
                 rest: list, func: Function, name: str):
        self.steps = steps
        self.spans = spans
        self.kinds = kinds
        self.nparams = nparams
        self.ncap = ncap
        self.rest = rest
        self.func = func
        self.name = name

    def __repr__(self) -> str:
        return f"<Code {self.name or 'fn'}: {len(self.steps)} steps, " \
               f"{self.nparams + self.ncap + len(self.rest)} registers>"


# ============================================================================ programs
class Program:
    """A module prepared for interpretation: global closures, compiled lazily, and entry info."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.globals: dict[str, Closure] = {}
        self._param_types: dict[str, list[Type | None]] = {}

    def global_closure(self, name: str, span: Span | None = None) -> Closure:
        """The closure of global ``@name`` (its code is compiled on the first call)."""
        clo = self.globals.get(name)
        if clo is None:
            if name not in self.mod:
                raise InterpreterError(f"there is no global function @{name} in the module",
                                       span)
            clo = Closure(None, [], self.mod[name], name, self)
            self.globals[name] = clo
        return clo

    def compile_global(self, clo: Closure) -> Code:
        """Compile a global function's body."""
        # NOTE: compiling allocates many small objects while the (large) IR is alive; the
        # cyclic GC would rescan the IR again and again (2-3x slower on 100,000 nodes), and
        # nothing built here needs collecting, so it is paused for the duration.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return _FnCompiler(self, clo.func, (), clo.name).code
        finally:
            if paused:
                gc.enable()

    def param_types(self, name: str) -> list[Type | None]:
        """The entry's parameter types (annotations, else inferred when InferType exists)."""
        got = self._param_types.get(name)
        if got is not None:
            return got
        fn = self.mod[name]
        types: list[Type | None] = [p.type_annotation for p in fn.params]
        if any(t is None for t in types):
            inferred = _infer_param_types(self.mod, name)
            if inferred is not None:
                types = [t if t is not None else it for t, it in zip(types, inferred)]
        self._param_types[name] = types
        return types


def _infer_param_types(mod: IRModule, name: str) -> list[Type | None] | None:
    try:
        from relay_ir.passes import InferType
    except (ImportError, AttributeError):
        return None
    typed = InferType()(mod)  # NOTE: type errors propagate (TypeInferenceError)
    out: list[Type | None] = []
    for p in typed[name].params:
        t = p.type_annotation if p.type_annotation is not None else p.checked_type_
        out.append(t)
    return out


_PROGRAM_CACHE: OrderedDict[int, tuple[IRModule, Program]] = OrderedDict()
_PROGRAM_CACHE_SIZE = 32


def program_for(mod: IRModule) -> Program:
    """The cached :class:`Program` of ``mod`` (modules are immutable, so caching is safe)."""
    key = id(mod)
    hit = _PROGRAM_CACHE.get(key)
    if hit is not None and hit[0] is mod:
        _PROGRAM_CACHE.move_to_end(key)
        return hit[1]
    prog = Program(mod)
    _PROGRAM_CACHE[key] = (mod, prog)
    if len(_PROGRAM_CACHE) > _PROGRAM_CACHE_SIZE:
        _PROGRAM_CACHE.popitem(last=False)
    return prog


# ============================================================================ step factories
def _op_step(impl: Callable, attrs: Attrs, a: Sequence[int], dst: int, nxt: int) -> Callable:
    n = len(a)
    if n == 1:
        a0, = a

        def step(regs: list) -> int:
            regs[dst] = impl([regs[a0]], attrs)
            return nxt
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> int:
            regs[dst] = impl([regs[a0], regs[a1]], attrs)
            return nxt
    elif n == 3:
        a0, a1, a2 = a

        def step(regs: list) -> int:
            regs[dst] = impl([regs[a0], regs[a1], regs[a2]], attrs)
            return nxt
    else:
        idx = tuple(a)

        def step(regs: list) -> int:
            regs[dst] = impl([regs[i] for i in idx], attrs)
            return nxt
    return step


def _op_ret_step(impl: Callable, attrs: Attrs, a: Sequence[int]) -> Callable:
    n = len(a)
    if n == 1:
        a0, = a

        def step(regs: list) -> tuple:
            return (RET, impl([regs[a0]], attrs))
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> tuple:
            return (RET, impl([regs[a0], regs[a1]], attrs))
    else:
        idx = tuple(a)

        def step(regs: list) -> tuple:
            return (RET, impl([regs[i] for i in idx], attrs))
    return step


def _missing_impl_step(name: str) -> Callable:
    def step(regs: list) -> int:
        raise InterpreterError(f"operator `{name}` has no reference implementation")
    return step


def _gather(a: Sequence[int]) -> Callable[[list], list]:
    n = len(a)
    if n == 0:
        return lambda regs: []
    if n == 1:
        a0, = a
        return lambda regs: [regs[a0]]
    if n == 2:
        a0, a1 = a
        return lambda regs: [regs[a0], regs[a1]]
    if n == 3:
        a0, a1, a2 = a
        return lambda regs: [regs[a0], regs[a1], regs[a2]]
    idx = tuple(a)
    return lambda regs: [regs[i] for i in idx]


def _call_step(f: int, a: Sequence[int], dst: int, nxt: int) -> Callable:
    n = len(a)
    if n == 1:
        a0, = a

        def step(regs: list) -> tuple:
            return (CALL, regs[f], [regs[a0]], dst, nxt)
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> tuple:
            return (CALL, regs[f], [regs[a0], regs[a1]], dst, nxt)
    else:
        gather = _gather(a)

        def step(regs: list) -> tuple:
            return (CALL, regs[f], gather(regs), dst, nxt)
    return step


def _tailcall_step(f: int, a: Sequence[int]) -> Callable:
    n = len(a)
    if n == 1:
        a0, = a

        def step(regs: list) -> tuple:
            return (TAILCALL, regs[f], [regs[a0]])
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> tuple:
            return (TAILCALL, regs[f], [regs[a0], regs[a1]])
    else:
        gather = _gather(a)

        def step(regs: list) -> tuple:
            return (TAILCALL, regs[f], gather(regs))
    return step


def _ret_step(r: int) -> Callable:
    def step(regs: list) -> tuple:
        return (RET, regs[r])
    return step


def _move_step(src: int, dst: int, nxt: int) -> Callable:
    def step(regs: list) -> int:
        regs[dst] = regs[src]
        return nxt
    return step


def _jump_step(target: int) -> Callable:
    def step(regs: list) -> int:
        return target
    return step


def _branch_step(c: int, t_pc: int, f_pc: int) -> Callable:
    def step(regs: list) -> int:
        return t_pc if regs[c] else f_pc
    return step


def _op_branch_step(impl: Callable, attrs: Attrs, a: Sequence[int], dst: int, t_pc: int,
                    f_pc: int) -> Callable:
    """``if (op(args))``: the comparison and the branch in one step (the value is kept too)."""
    if len(a) == 2:
        a0, a1 = a

        def step(regs: list) -> int:
            v = regs[dst] = impl([regs[a0], regs[a1]], attrs)
            return t_pc if v else f_pc
    else:
        idx = tuple(a)

        def step(regs: list) -> int:
            v = regs[dst] = impl([regs[i] for i in idx], attrs)
            return t_pc if v else f_pc
    return step


def _adt_step(con: Constructor, a: Sequence[int], dst: int, nxt: int) -> Callable:
    n = len(a)
    if n == 0:
        value = ADTValue(con, ())  # NOTE: nullary values are immutable, share one

        def step(regs: list) -> int:
            regs[dst] = value
            return nxt
    elif n == 1:
        a0, = a

        def step(regs: list) -> int:
            regs[dst] = ADTValue(con, (regs[a0],))
            return nxt
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> int:
            regs[dst] = ADTValue(con, (regs[a0], regs[a1]))
            return nxt
    else:
        idx = tuple(a)

        def step(regs: list) -> int:
            regs[dst] = ADTValue(con, tuple([regs[i] for i in idx]))
            return nxt
    return step


def _tuple_step(a: Sequence[int], dst: int, nxt: int) -> Callable:
    n = len(a)
    if n == 0:
        def step(regs: list) -> int:
            regs[dst] = ()
            return nxt
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> int:
            regs[dst] = (regs[a0], regs[a1])
            return nxt
    else:
        idx = tuple(a)

        def step(regs: list) -> int:
            regs[dst] = tuple([regs[i] for i in idx])
            return nxt
    return step


def _getitem_step(t: int, i: int, dst: int, nxt: int) -> Callable:
    def step(regs: list) -> int:
        regs[dst] = regs[t][i]
        return nxt
    return step


def _ref_create_step(v: int, dst: int, nxt: int) -> Callable:
    def step(regs: list) -> int:
        regs[dst] = RefValue(regs[v])
        return nxt
    return step


def _ref_read_step(r: int, dst: int, nxt: int) -> Callable:
    def step(regs: list) -> int:
        regs[dst] = regs[r].value
        return nxt
    return step


def _ref_write_step(r: int, v: int, dst: int, nxt: int) -> Callable:
    def step(regs: list) -> int:
        regs[r].value = regs[v]
        regs[dst] = ()
        return nxt
    return step


def _closure_step(code: Code, fn: Function, cap: Sequence[int], self_idx: Sequence[int],
                  dst: int, nxt: int) -> Callable:
    cap = tuple(cap)
    if not self_idx:
        def step(regs: list) -> int:
            regs[dst] = Closure(code, [regs[s] for s in cap], fn)
            return nxt
    else:
        selfs = tuple(self_idx)

        def step(regs: list) -> int:
            captured = [regs[s] for s in cap]
            clo = Closure(code, captured, fn)
            for i in selfs:
                captured[i] = clo
            regs[dst] = clo
            return nxt
    return step


def _match_failure(node: Match, value: Any) -> InterpreterError:
    text = format_value(value)
    if len(text) > 200:
        text = text[:197] + "..."
    what = "match" if node.complete else "match?"
    # NOTE: fall back to the scrutinee's span when the match node itself carries none
    span = node.span if node.span is not None else node.data.span
    return InterpreterError(f"{what} failed: no clause matches the value {text}", span)


def _match_step(d: int, table: Sequence[tuple[Callable | None, int]], node: Match) -> Callable:
    table = tuple(table)

    def step(regs: list) -> int:
        v = regs[d]
        for m, pc in table:
            if m is None or m(v, regs):
                return pc
        raise _match_failure(node, v)
    return step


# ----------------------------------------------------------------------------- patterns
_P_WILD, _P_VAR, _P_CON, _P_TUP = 0, 1, 2, 3


def _pattern_matcher(flat: tuple) -> Callable | None:
    """A matcher ``m(value, regs) -> bool`` for a flattened pattern (None: always matches)."""
    kind = flat[0]
    if kind == _P_WILD:
        return None
    if kind == _P_VAR:
        slot = flat[1]

        def m_var(v: Any, regs: list) -> bool:
            regs[slot] = v
            return True
        return m_var
    if kind == _P_CON and all(sub[0] in (_P_WILD, _P_VAR) for sub in flat[3]):
        con, name = flat[1], flat[2]
        binds = tuple((i, sub[1]) for i, sub in enumerate(flat[3]) if sub[0] == _P_VAR)

        def m_con(v: Any, regs: list) -> bool:
            c = v.constructor
            if c is not con and c.name_hint != name:
                return False
            fields = v.fields
            for i, slot in binds:
                regs[slot] = fields[i]
            return True
        return m_con

    def m_general(v: Any, regs: list) -> bool:
        stack = [(flat, v)]
        while stack:
            p, x = stack.pop()
            k = p[0]
            if k == _P_VAR:
                regs[p[1]] = x
            elif k == _P_CON:
                c = x.constructor
                if c is not p[1] and c.name_hint != p[2]:
                    return False
                subs = p[3]
                fields = x.fields
                for i in range(len(subs)):
                    stack.append((subs[i], fields[i]))
            elif k == _P_TUP:
                subs = p[1]
                for i in range(len(subs)):
                    stack.append((subs[i], x[i]))
        return True
    return m_general


# ============================================================================ compiler
class _FnCompiler:
    """Compiles one Function (params + captured free variables) into a :class:`Code`."""

    def __init__(self, prog: Program, func: Function, captured: Sequence[Var], name: str):
        self.prog = prog
        self.func = func
        self.name = name
        self.slots: dict[Var, int] = {}
        self.template: list[Any] = []
        self.steps: list[Callable | None] = []
        self.spans: list[Span | None] = []
        self.kinds: list[str | None] = []
        self.consts: dict[Any, int] = {}
        self.memo: dict[int, int] = {}
        self.memo_log: list[int] = []
        for p in func.params:
            self.slots[p] = self._reg()
        for v in captured:
            self.slots[v] = self._reg()
        nfix = len(func.params) + len(captured)
        self.tail(func.body)
        self.code = Code(self.steps, self.spans, self.kinds, len(func.params), len(captured),
                         self.template[nfix:], func, name)

    # ------------------------------------------------------------- helpers
    def _reg(self, init: Any = None) -> int:
        self.template.append(init)
        return len(self.template) - 1

    def _emit(self, step: Callable | None, span: Span | None, kind: str | None = _K_OTHER
              ) -> int:
        self.steps.append(step)
        self.spans.append(span)
        self.kinds.append(kind)
        return len(self.steps) - 1

    @property
    def _pc(self) -> int:
        return len(self.steps)

    def _const_reg(self, key: Any, value: Any) -> int:
        r = self.consts.get(key)
        if r is None:
            r = self._reg(value)
            self.consts[key] = r
        return r

    def _memo_set(self, node: Expr, r: int) -> None:
        self.memo[id(node)] = r
        self.memo_log.append(id(node))

    def _scope(self) -> int:
        return len(self.memo_log)

    def _unscope(self, mark: int) -> None:
        log, memo = self.memo_log, self.memo
        while len(log) > mark:
            memo.pop(log.pop(), None)

    def _known(self, e: Expr) -> int | None:
        """The register of ``e`` if it needs no code (atom) or was already computed."""
        t = type(e)
        if t is Var:
            r = self.slots.get(e)
            if r is None:
                raise InterpreterError(f"unbound variable %{e.name_hint}", e.span)
            return r
        if t is Constant:
            return self._const_reg(id(e), e.data)
        if t is GlobalVar:
            return self._const_reg(("global", e.name_hint),
                                   self.prog.global_closure(e.name_hint, e.span))
        if t is Op:
            return self._const_reg(("op", e.name), e)
        if t is Constructor:
            return self._const_reg(("con", e.name_hint), e)
        return self.memo.get(id(e))

    # ------------------------------------------------------------- values
    def value(self, e: Expr) -> int:
        """Emit code computing ``e`` (not in tail position); return its register."""
        r = self._known(e)
        if r is not None:
            return r
        if type(e) in _DATAFLOW:
            # fast path: every child is already available (the common ANF / let-chain case)
            memo = self.memo
            for c in _dataflow_children(e):
                if type(c) not in _ATOMS and id(c) not in memo:
                    break
            else:
                r = self._dataflow(e)
                self._memo_set(e, r)
                return r
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, expanded = stack.pop()
            if self._known(node) is not None:
                continue
            t = type(node)
            if t in _DATAFLOW:
                if expanded:
                    self._memo_set(node, self._dataflow(node))
                else:
                    stack.append((node, True))
                    kids = _dataflow_children(node)
                    for c in reversed(kids):
                        if type(c) not in _ATOMS and id(c) not in self.memo:
                            stack.append((c, False))
            elif t is Let:
                body = self.bind_lets(node)
                self._memo_set(node, self.value(body))
            elif t is Function:
                self._memo_set(node, self.closure(node))
            elif t is If:
                self._memo_set(node, self._if_value(node))
            elif t is Match:
                self._memo_set(node, self._match_value(node))
            else:
                raise InterpreterError(f"cannot evaluate a {t.__name__} node",
                                       getattr(node, "span", None))
        return self._known(e)  # type: ignore[return-value]

    def bind_lets(self, e: Expr) -> Expr:
        """Emit the bindings of a let spine; return its body."""
        while type(e) is Let:
            var, val = e.var, e.value
            if type(val) is Function:
                r = self._reg()
                self.slots[var] = r
                self.closure(val, r)
            else:
                self.slots[var] = self.value(val)
            e = e.body
        return e

    def _dataflow(self, node: Expr) -> int:
        t = type(node)
        nxt = self._pc + 1
        span = node.span
        if t is Call:
            op = node.op
            a = [self._known(x) for x in node.args]
            top = type(op)
            if top is Op:
                opdef = _opdef(op)
                dst = self._reg()
                if opdef.impl is None:
                    self._emit(_missing_impl_step(op.name), span, op.name)
                else:
                    self._emit(_op_step(opdef.impl, _full_attrs(opdef, node.attrs), a, dst, nxt),
                               span, opdef.name)
                return dst
            if top is Constructor:
                dst = self._reg()
                self._emit(_adt_step(op, a, dst, nxt), span)
                return dst
            f = self._known(op)
            dst = self._reg()
            self._emit(_call_step(f, a, dst, nxt), span)
            return dst
        if t is Tuple:
            a = [self._known(x) for x in node.fields]
            dst = self._reg()
            self._emit(_tuple_step(a, dst, nxt), span)
            return dst
        if t is TupleGetItem:
            r = self._known(node.tuple_value)
            dst = self._reg()
            self._emit(_getitem_step(r, node.index, dst, nxt), span)
            return dst
        if t is RefCreate:
            r = self._known(node.value)
            dst = self._reg()
            self._emit(_ref_create_step(r, dst, nxt), span)
            return dst
        if t is RefRead:
            r = self._known(node.ref)
            dst = self._reg()
            self._emit(_ref_read_step(r, dst, nxt), span)
            return dst
        # RefWrite
        r = self._known(node.ref)
        v = self._known(node.value)
        dst = self._reg()
        self._emit(_ref_write_step(r, v, dst, nxt), span)
        return dst

    def closure(self, fn: Function, dst: int | None = None) -> int:
        """Emit the creation of a closure for ``fn`` (into ``dst`` if given)."""
        fvs = free_vars(fn)
        cap = []
        for v in fvs:
            s = self.slots.get(v)
            if s is None:
                raise InterpreterError(f"unbound variable %{v.name_hint}", v.span)
            cap.append(s)
        code = _FnCompiler(self.prog, fn, fvs, "").code
        if not fvs:
            # NOTE: a closed function is a constant closure, built once (primitive functions)
            clo = Closure(code, [], fn)
            if dst is None:
                return self._const_reg(id(fn), clo)
            self.template[dst] = clo
            return dst
        if dst is None:
            dst = self._reg()
        self_idx = [i for i, s in enumerate(cap) if s == dst]
        self._emit(_closure_step(code, fn, cap, self_idx, dst, self._pc + 1), fn.span)
        return dst

    def _branch(self, node: If) -> tuple[int, Callable[[int, int], Callable]]:
        """Emit the condition and a placeholder branch step; return it and its step maker."""
        cond = node.cond
        if type(cond) is Call and type(cond.op) is Op and id(cond) not in self.memo:
            opdef = _opdef(cond.op)
            if opdef.impl is not None:
                a = [self.value(x) for x in cond.args]
                dst = self._reg()
                self._memo_set(cond, dst)
                impl, attrs = opdef.impl, _full_attrs(opdef, cond.attrs)
                br = self._emit(None, cond.span, opdef.name)
                return br, lambda t, f: _op_branch_step(impl, attrs, a, dst, t, f)
        c = self.value(cond)
        br = self._emit(None, node.span)
        return br, lambda t, f: _branch_step(c, t, f)

    def _if_value(self, node: If) -> int:
        br, make_branch = self._branch(node)
        dst = self._reg()
        mark = self._scope()
        rt = self.value(node.true_branch)
        self._emit(_move_step(rt, dst, self._pc + 1), node.true_branch.span)
        jmp = self._emit(None, node.span)
        self._unscope(mark)
        f_pc = self._pc
        rf = self.value(node.false_branch)
        self._emit(_move_step(rf, dst, self._pc + 1), node.false_branch.span)
        self._unscope(mark)
        self.steps[br] = make_branch(br + 1, f_pc)
        self.steps[jmp] = _jump_step(self._pc)
        return dst

    def _match_value(self, node: Match) -> int:
        d = self.value(node.data)
        dst = self._reg()
        mpc = self._emit(None, node.span)
        table = []
        jumps = []
        for clause in node.clauses:
            mark = self._scope()
            matcher = self.pattern(clause.lhs)
            table.append((matcher, self._pc))
            r = self.value(clause.rhs)
            self._emit(_move_step(r, dst, self._pc + 1), clause.rhs.span)
            jumps.append(self._emit(None, clause.span))
            self._unscope(mark)
        self.steps[mpc] = _match_step(d, table, node)
        end = _jump_step(self._pc)
        for j in jumps:
            self.steps[j] = end
        return dst

    def pattern(self, p: Pattern) -> Callable | None:
        """Allocate slots for the pattern's variables; return its matcher."""
        return _pattern_matcher(self._flatten_pattern(p))

    def _flatten_pattern(self, p: Pattern) -> tuple:
        # NOTE: recursion over pattern nesting only (written patterns are shallow)
        t = type(p)
        if t is PatternWildcard:
            return (_P_WILD,)
        if t is PatternVar:
            r = self._reg()
            self.slots[p.var] = r
            return (_P_VAR, r)
        if t is PatternConstructor:
            subs = tuple(self._flatten_pattern(q) for q in p.patterns)
            return (_P_CON, p.constructor, p.constructor.name_hint, subs)
        if t is PatternTuple:
            return (_P_TUP, tuple(self._flatten_pattern(q) for q in p.patterns))
        raise InterpreterError(f"unknown pattern {t.__name__}", p.span)

    # ------------------------------------------------------------- tail position
    def tail(self, e: Expr) -> None:
        """Emit code that returns the value of ``e`` from the function."""
        while True:
            e = self.bind_lets(e)
            t = type(e)
            if t is If:
                br, make_branch = self._branch(e)
                mark = self._scope()
                self.tail(e.true_branch)
                self._unscope(mark)
                self.steps[br] = make_branch(br + 1, self._pc)
                e = e.false_branch
                continue
            if t is Match:
                d = self.value(e.data)
                mpc = self._emit(None, e.span)
                table = []
                for clause in e.clauses:
                    mark = self._scope()
                    matcher = self.pattern(clause.lhs)
                    table.append((matcher, self._pc))
                    self.tail(clause.rhs)
                    self._unscope(mark)
                self.steps[mpc] = _match_step(d, table, e)
                return
            if t is Call and id(e) not in self.memo:
                top = type(e.op)
                if top is Op and _opdef(e.op).impl is not None:
                    opdef = _opdef(e.op)
                    a = [self.value(x) for x in e.args]
                    self._emit(_op_ret_step(opdef.impl, _full_attrs(opdef, e.attrs), a),
                               e.span, opdef.name)
                    return
                if top is not Op and top is not Constructor:
                    a = [self.value(x) for x in e.args]
                    f = self.value(e.op)
                    self._emit(_tailcall_step(f, a), e.span)
                    return
            r = self.value(e)
            self._emit(_ret_step(r), e.span)
            return


def _dataflow_children(node: Expr) -> tuple[Expr, ...]:
    t = type(node)
    if t is Call:
        if type(node.op) in (Op, Constructor):
            return node.args
        return (*node.args, node.op)
    if t is Tuple:
        return node.fields
    if t is TupleGetItem:
        return (node.tuple_value,)
    if t is RefCreate:
        return (node.value,)
    if t is RefRead:
        return (node.ref,)
    return (node.ref, node.value)


_OPDEFS: dict[str, Any] = {}


def _opdef(op: Op) -> Any:
    od = _OPDEFS.get(op.name)
    if od is None:
        od = _OPDEFS[op.name] = op.opdef
    return od


def _full_attrs(opdef: Any, attrs: Attrs) -> Attrs:
    """The call's attributes with defaults filled (hand-built calls may omit them)."""
    if len(attrs) == len(opdef.attrs):
        return attrs
    try:
        return opdef.make_attrs(dict(attrs))
    except DiagnosticError:
        return attrs


_DEFAULT_ATTRS: dict[str, Attrs] = {}


def _apply_builtin(f: Any, args: list) -> Any:
    """Apply a first-class constructor or operator value."""
    tf = type(f)
    if tf is Constructor:
        return ADTValue(f, tuple(args))
    if tf is Op:
        attrs = _DEFAULT_ATTRS.get(f.name)
        if attrs is None:
            attrs = _DEFAULT_ATTRS[f.name] = f.opdef.make_attrs({})
        return f.opdef.impl(args, attrs)
    raise InterpreterError(f"cannot call a value that is not a function: {format_value(f)}")


# ============================================================================ the machine
def _execute(clo: Closure, args: list) -> Any:
    """Run ``clo`` on ``args`` to completion; floating-point errors follow IEEE (no warnings)."""
    # NOTE: entered once per run, not per operator call: np.errstate costs microseconds.
    with np.errstate(all="ignore"):
        return _execute_loop(clo, args)


def _execute_loop(clo: Closure, args: list) -> Any:
    """Run ``clo`` on ``args`` to completion with an explicit continuation stack."""
    code = clo.code if clo.code is not None else clo.force()
    if len(args) != code.nparams:
        raise InterpreterError(f"{_fn_name(clo)} expects {code.nparams} arguments, "
                               f"got {len(args)}", clo.func.span)
    regs = args + clo.captured + code.rest
    steps = code.steps
    pc = 0
    stack: list[tuple] = []
    push = stack.append
    pop = stack.pop
    try:
        while True:
            r = steps[pc](regs)
            if r.__class__ is int:
                pc = r
                continue
            tag = r[0]
            if tag == RET:
                if not stack:
                    return r[1]
                code, pc, regs, dst = pop()
                regs[dst] = r[1]
                steps = code.steps
                continue
            f = r[1]
            a = r[2]
            if f.__class__ is Closure:
                ncode = f.code
                if ncode is None:
                    ncode = f.force()
                if len(a) != ncode.nparams:
                    raise InterpreterError(f"{_fn_name(f)} expects {ncode.nparams} arguments, "
                                           f"got {len(a)}", code.spans[pc])
                if tag == CALL:
                    push((code, r[4], regs, r[3]))
                code = ncode
                regs = a + f.captured + ncode.rest
                steps = ncode.steps
                pc = 0
                continue
            v = _apply_builtin(f, a)
            if tag == CALL:
                regs[r[3]] = v
                pc = r[4]
                continue
            if not stack:
                return v
            code, pc, regs, dst = pop()
            regs[dst] = v
            steps = code.steps
    except InterpreterError as e:
        raise e.with_span(_span_at(code, pc))
    except Exception as e:
        span = _span_at(code, pc)
        opname = code.kinds[pc] if pc < len(code.kinds) else None
        msg = e.message if isinstance(e, DiagnosticError) else f"{type(e).__name__}: {e}"
        if opname is not None:
            raise InterpreterError(f"operator `{opname}` failed: {msg}", span) from e
        if isinstance(e, DiagnosticError):
            raise e.with_span(span)
        raise InterpreterError(f"evaluation failed: {msg}", span) from e


def _span_at(code: Code, pc: int) -> Span | None:
    return code.spans[pc] if 0 <= pc < len(code.spans) else None


def _fn_name(clo: Closure) -> str:
    return f"@{clo.name}" if clo.name else "the function"


def apply(fn: Any, *args: Any) -> Any:
    """Call a function value (closure, constructor or operator) on ``args`` from Python.

    Arguments are checked and converted as :func:`evaluate` does, against the parameters'
    annotations (Python ints become int32 and floats float32 where a parameter has none).
    """
    if type(fn) is Closure:
        ptypes = [p.type_annotation for p in fn.func.params]
        return _normalize_output(_execute(fn, check_arguments(fn.func, ptypes, args)))
    return _normalize_output(_apply_builtin(fn, [_default_convert(a) for a in args]))


# ============================================================================ entry point
def evaluate(mod: IRModule | Expr, *args: Any, entry: str | GlobalVar = "main") -> Any:
    """Run ``entry`` of ``mod`` on ``args`` with the reference interpreter.

    Arguments are numpy arrays (Python scalars and nested lists are converted with the
    parameter's dtype), Python tuples, ADT values, refs or closures, checked against the entry's
    parameter types first. Returns numpy arrays (0-d for scalars), tuples, ADTValues, RefValues
    or Closures. An expression instead of a module is wrapped with ``IRModule.from_expr``.
    """
    if not isinstance(mod, IRModule):
        if not isinstance(mod, Expr):
            raise TypeError(f"evaluate expects an IRModule or an Expr, got {type(mod).__name__}")
        mod = IRModule.from_expr(mod)
    name = entry.name_hint if isinstance(entry, GlobalVar) else entry
    prog = program_for(mod)
    clo = prog.global_closure(name)
    ptypes = prog.param_types(name)
    converted = check_arguments(clo.func, ptypes, args)
    return _normalize_output(_execute(clo, converted))


def _normalize_output(v: Any) -> Any:
    if isinstance(v, np.generic):
        return np.asarray(v)
    if type(v) is tuple:
        return tuple(_normalize_output(x) for x in v)
    return v


# ----------------------------------------------------------------------------- argument checks
def _fmt_type(t: Type | None) -> str:
    if isinstance(t, TensorType):
        shape = ", ".join(format_dim(d) for d in t.shape)
        if len(t.shape) == 1:
            shape += ","
        return f"Tensor[({shape}), {t.dtype}]"
    if isinstance(t, TupleType):
        return "(" + ", ".join(_fmt_type(f) for f in t.fields) + ("," if len(t.fields) == 1
                                                                  else "") + ")"
    try:
        from relay_ir.printer import astext
        return astext(t)
    except Exception:
        return repr(t)


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


class _ArgError(Exception):
    pass


def check_arguments(fn: Function, ptypes: Sequence[Type | None], args: Sequence[Any]) -> list:
    """Check (and convert) ``args`` against ``fn``'s parameter types; returns the values."""
    params = fn.params
    if len(args) != len(params):
        names = ", ".join("%" + p.name_hint for p in params) or "no parameters"
        raise InterpreterError(f"expected {len(params)} arguments ({names}), got {len(args)}",
                               fn.span)
    env: dict[ShapeVar, int] = {}
    out = []
    for i, (p, t, v) in enumerate(zip(params, ptypes, args)):
        where = f"argument {i + 1} (%{p.name_hint})"
        try:
            out.append(_convert(v, t, env))
        except _ArgError as e:
            msg = str(e)
            raise InterpreterError(f"{where}: {msg}", p.span) from None
    return out


def _convert(v: Any, t: Type | None, env: dict[ShapeVar, int]) -> Any:
    if t is None:
        return _default_convert(v)
    if isinstance(t, TensorType):
        return _convert_tensor(v, t, env)
    if isinstance(t, TupleType):
        if isinstance(v, list):
            v = tuple(v)
        if not isinstance(v, tuple) or len(v) != len(t.fields):
            raise _ArgError(f"expected {_fmt_type(t)}, got {_describe(v)}")
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
            raise _ArgError(f"expected {_fmt_type(t)}, got {_describe(v)}")
        if isinstance(head, GlobalTypeVar) and \
                v.constructor.belong_to.name_hint != head.name_hint:
            raise _ArgError(f"expected {_fmt_type(t)}, got a value of type "
                            f"{v.constructor.belong_to.name_hint}")
        return v
    if isinstance(t, RefType):
        if not isinstance(v, RefValue):
            raise _ArgError(f"expected {_fmt_type(t)}, got {_describe(v)}")
        return v
    if isinstance(t, FuncType):
        if not isinstance(v, (Closure, Constructor, Op)):
            raise _ArgError(f"expected a function of type {_fmt_type(t)}, got {_describe(v)}")
        return v
    return _default_convert(v)


def _default_convert(v: Any) -> Any:
    """Python scalars and lists with no known type: ints to int32, floats to float32."""
    if isinstance(v, np.generic):
        return np.asarray(v)
    if isinstance(v, bool):
        return np.asarray(v, dtype="bool")
    if isinstance(v, int):
        return np.asarray(v, dtype="int32")
    if isinstance(v, float):
        return np.asarray(v, dtype="float32")
    if isinstance(v, list):
        arr = np.asarray(v)
        if arr.dtype == np.float64:
            arr = arr.astype("float32")
        elif arr.dtype == np.int64:
            arr = arr.astype("int32")
        return arr
    if isinstance(v, tuple):
        return tuple(_default_convert(x) for x in v)
    return v


def _convert_tensor(v: Any, t: TensorType, env: dict[ShapeVar, int]) -> np.ndarray:
    expect = f"expected {_fmt_type(t)}"
    if isinstance(v, np.ndarray):
        arr = v
    elif isinstance(v, np.generic):
        arr = np.asarray(v)
    elif isinstance(v, (bool, int, float, list)):
        try:
            raw = np.asarray(v)
        except ValueError:
            raise _ArgError(f"{expect}, got a ragged nested list") from None
        kind = raw.dtype.kind
        target = np.dtype(t.dtype)
        if kind not in "biuf":
            raise _ArgError(f"{expect}, got {_describe(v)}")
        if (target.kind in "iu" and kind == "f") or (target.kind == "b" and kind != "b"):
            raise _ArgError(f"{expect}, got a Python value of kind {raw.dtype.name} "
                            f"({_short(v)})")
        arr = raw.astype(target)
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
        else:
            ok = True
        if not ok:
            raise _ArgError(f"{expect}, got {_describe(arr)}")
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


__all__ = ["evaluate", "apply", "check_arguments", "program_for", "Program", "Code"]
