"""The instruction compiler: ANF functions to plain-data instructions, shared by the backends.

One compile step, two backends. This module does the reusable half of running a function:
register allocation (every parameter, captured variable, constant and non-atomic node gets a
fixed slot), closure capture, tail positions, and the layout of ``if`` and ``match``. Its output
is plain data -- tuples of strings and integers, lists and dicts -- so a program can be written
to JSON (:meth:`CompiledProgram.to_json`) and read back (:meth:`CompiledProgram.from_json`).
The reference interpreter (``runtime.interpreter``) turns the instructions into step closures;
the compiled executor (``runtime.relax_vm``) compiles the same instructions, with an
invoke-kernel instruction per fused group, to TVM Relax VM bytecode.

Registers of a function (an activation's register file)::

    [ parameters | captured values | constants, globals, let-bound values, temporaries ]

``CompiledFunction.init`` says how the slots after the fixed part start out: ``None`` (filled at
run time) or a reference ``[kind, index_or_name]`` to a constant (``"const"``, an index into
``CompiledProgram.consts``), a global closure (``"global"``, its name), a first-class operator
(``"op"``, its name), a constructor (``"con"``, an index into ``CompiledProgram.cons``) or a
closed inner function built once (``"fn"``, an index into ``CompiledProgram.functions``).

Instructions (``dst``, ``src`` and the entries of ``srcs`` are registers; ``pc`` targets index
the function's instruction list; a step without a target continues at the next one):

===============================================  =============================================
``("op", dst, name, attrs, srcs)``               ``dst = name(srcs; attrs[attrs])``
``("op_ret", name, attrs, srcs)``                return ``name(srcs)`` (tail position)
``("op_br", dst, name, attrs, srcs, t, f)``      ``dst = name(srcs)``; go to ``t`` if true
``("br", src, t, f)``                            go to ``t`` if ``src`` is true, else ``f``
``("jmp", t)``                                   go to ``t``
``("move", dst, src)``                           ``dst = src``
``("call", dst, f, srcs)``                       non-tail call of the function value in ``f``
``("tailcall", f, srcs)``                        call in tail position (replaces the frame)
``("ret", src)``                                 return ``src``
``("adt", dst, con, srcs)``                      ``dst = cons[con](srcs)``
``("tuple", dst, srcs)``                         ``dst = (srcs...)``
``("getitem", dst, src, i)``                     ``dst = src.i``
``("ref_new", dst, src)``                        ``dst = ref(src)``
``("ref_read", dst, src)``                       ``dst = !src``
``("ref_write", dst, ref, src)``                 ``ref := src; dst = ()``
``("closure", dst, fn, caps, selfs)``            ``dst`` = closure of ``functions[fn]`` over
                                                 ``caps``; captured positions ``selfs`` point
                                                 back at the closure (``let %f = fn ... %f``)
``("match", src, [[pattern, pc], ...], total)``  the first clause whose pattern matches
                                                 (``total``: a ``match``, not a ``match?``)
``("kernel", dst, k, srcs)``                     ``dst = kernels[k](srcs)``: a fused group
                                                 (only with ``kernels=True``)
``("kernel_ret", k, srcs)``                      return ``kernels[k](srcs)`` (tail position)
===============================================  =============================================

With ``CompiledProgram(mod, kernels=True)`` (the compiled executor, ``runtime.relax_vm``) a
call of a
``Primitive=1`` function -- a fused group of ``fuse-ops``, let-bound or literal -- becomes an
invoke-kernel instruction instead of a closure call. ``CompiledProgram.kernels[k]`` is the
group's :class:`~relay_ir.expr.Function` and ``kernel_fns[k]`` the index of its body compiled as
an ordinary closed function (the host fallback for a group without a TVM compute).

Patterns are plain data too: ``["_"]``, ``["var", slot]``, ``["con", con, [subpatterns]]`` and
``["tup", [subpatterns]]``.

Compilation walks let spines and dataflow with explicit stacks, emitting instructions in
evaluation order (a call's arguments left to right, then the callee, as TVM's interpreter does);
it recurses only across ``fn``, ``if`` and ``match`` nesting. A node shared in a DAG is computed
once per activation (memoised within its branch scope). Globals are compiled lazily, on first
use, so a module with the whole prelude compiles only what runs.
"""
from __future__ import annotations

import gc
import json
from dataclasses import dataclass, field
from typing import Any, Generator, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import DiagnosticError, InterpreterError
from relay_ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let,
                           Match, Op, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                           Var)
from relay_ir.module import IRModule
from relay_ir.span import Span
from relay_ir.traversal import (free_vars, function_free_vars, run_generators,
                                same_scope_children)

Gen = Generator[Any, Any, Any]

_DATAFLOW = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)
_ATOMS = (Var, Constant, GlobalVar, Op, Constructor)
JSON_FORMAT = "relay_ir.compiled/1"


@dataclass(slots=True)
class CompiledFunction:
    """One function as instructions: the register layout and the plain-data code."""

    name: str                 # the global's name, "" for an inner function
    nparams: int
    ncap: int
    init: list[Any]           # initial content of the slots after params and captures
    code: list[tuple]         # the instructions
    params: list[str]         # parameter names (for messages)
    spans: list[Span | None] = field(default_factory=list)  # per instruction; not serialized
    func: Function | None = None  # the source function; not serialized

    def to_data(self) -> dict[str, Any]:
        """The function as JSON-ready data (spans and the source function are left out)."""
        return {"name": self.name, "nparams": self.nparams, "ncap": self.ncap,
                "init": self.init, "code": [list(i) for i in self.code],
                "params": self.params}

    @staticmethod
    def from_data(data: dict[str, Any]) -> CompiledFunction:
        """The inverse of :meth:`to_data`."""
        code = [tuple(i) for i in data["code"]]
        return CompiledFunction(data["name"], data["nparams"], data["ncap"], list(data["init"]),
                                code, list(data["params"]), [None] * len(code))


class CompiledProgram:
    """A module's compiled functions plus the tables their instructions index.

    ``functions`` grows as globals are compiled on demand (:meth:`compile_global`);
    :meth:`compile_all` compiles every global, which :meth:`to_json` needs.
    """

    def __init__(self, mod: IRModule, kernels: bool = False):
        self.mod = mod
        self.use_kernels = kernels             # calls of primitive functions -> "kernel"
        self.free_vars: dict[Function, list[Var]] = {}  # function -> its free variables
        self.kernels: list[Function] = []      # fused groups (with use_kernels)
        self.kernel_fns: list[int] = []        # their bodies as closed functions (host code)
        self._kernel_ids: dict[int, int] = {}
        self.functions: list[CompiledFunction] = []
        self.globals: dict[str, int] = {}      # global name -> index in functions
        self.consts: list[np.ndarray] = []
        self.attrs: list[Attrs] = []
        self.cons: list[Constructor] = []
        self._const_ids: dict[int, int] = {}
        self._attr_ids: dict[tuple[str, int], int] = {}
        self._con_ids: dict[str, int] = {}

    # ------------------------------------------------------------- tables
    def const_index(self, c: Constant) -> int:
        """The index of ``c``'s value in the constant table."""
        k = self._const_ids.get(id(c))
        if k is None:
            k = self._const_ids[id(c)] = len(self.consts)
            self.consts.append(c.data)
        return k

    def attrs_index(self, op: Op, attrs: Attrs) -> int:
        """The index of the call's attributes (defaults filled in) in the attribute table."""
        key = (op.name, id(attrs))
        k = self._attr_ids.get(key)
        if k is None:
            k = self._attr_ids[key] = len(self.attrs)
            self.attrs.append(_full_attrs(op, attrs))
        return k

    def con_index(self, con: Constructor) -> int:
        """The index of constructor ``con`` in the constructor table."""
        k = self._con_ids.get(con.name_hint)
        if k is None:
            k = self._con_ids[con.name_hint] = len(self.cons)
            self.cons.append(con)
        return k

    def kernel_index(self, fn: Function, body: int) -> int:
        """The index of the fused group ``fn`` (its body compiled as function ``body``)."""
        k = self._kernel_ids.get(id(fn))
        if k is None:
            k = self._kernel_ids[id(fn)] = len(self.kernels)
            self.kernels.append(fn)
            self.kernel_fns.append(body)
        return k

    def add_function(self, fn: CompiledFunction) -> int:
        """Append ``fn`` to the function table; return its index."""
        self.functions.append(fn)
        return len(self.functions) - 1

    # ------------------------------------------------------------- globals
    def compile_global(self, name: str, span: Span | None = None) -> int:
        """The index of global ``@name``'s compiled function, compiling it now if needed."""
        k = self.globals.get(name)
        if k is not None:
            return k
        if name not in self.mod:
            raise InterpreterError(f"there is no global function @{name} in the module", span)
        # NOTE: compiling allocates many small objects while the (large) IR is alive; the
        # cyclic GC would rescan the IR again and again (2-3x slower on 100,000 nodes), and
        # nothing built here needs collecting, so it is paused for the duration.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            fn = FunctionCompiler(self, self.mod[name], (), name).result
        finally:
            if paused:
                gc.enable()
        k = self.globals[name] = self.add_function(fn)
        return k

    def compile_all(self) -> CompiledProgram:
        """Compile every global function of the module; returns ``self``."""
        for name in self.mod:
            self.compile_global(name)
        return self

    # ------------------------------------------------------------- serialization
    def to_json(self) -> str:
        """The whole program as JSON text (compiles every global first)."""
        self.compile_all()
        data = {
            "format": JSON_FORMAT,
            "globals": self.globals,
            "functions": [f.to_data() for f in self.functions],
            "consts": [{"dtype": str(a.dtype), "shape": list(a.shape), "data": a.tolist()}
                       for a in self.consts],
            "attrs": [{"type_key": a.type_key, "values": dict(a)} for a in self.attrs],
            "cons": [[c.belong_to.name_hint, c.name_hint] for c in self.cons],
        }
        return json.dumps(data)

    @staticmethod
    def from_json(text: str, mod: IRModule) -> CompiledProgram:
        """Read a program written by :meth:`to_json`; ``mod`` supplies the ADT definitions."""
        data = json.loads(text)
        if data.get("format") != JSON_FORMAT:
            raise InterpreterError(f"not a compiled relay_ir program "
                                   f"(format {data.get('format')!r})")
        prog = CompiledProgram(mod)
        prog.globals = dict(data["globals"])
        prog.functions = [CompiledFunction.from_data(f) for f in data["functions"]]
        for name, k in prog.globals.items():
            if name in mod:
                prog.functions[k].func = mod[name]
        prog.consts = [np.asarray(c["data"], dtype=c["dtype"]).reshape(c["shape"])
                       for c in data["consts"]]
        prog.attrs = [Attrs(a["values"], a["type_key"]) for a in data["attrs"]]
        prog.cons = [mod.get_constructor(cname) for _, cname in data["cons"]]
        return prog


def _full_attrs(op: Op, attrs: Attrs) -> Attrs:
    """The call's attributes with defaults filled (hand-built calls may omit them)."""
    opdef = op.opdef
    if len(attrs) == len(opdef.attrs):
        return attrs
    if not attrs:
        return opdef.default_attrs
    try:
        return opdef.make_attrs(dict(attrs))
    except DiagnosticError:
        return attrs


def _match_span(node: Match) -> Span | None:
    # NOTE: fall back to the scrutinee's span when the match node itself carries none
    return node.span if node.span is not None else node.data.span


# ============================================================================ the compiler
class FunctionCompiler:
    """Compiles one Function (params + captured free variables) into a :class:`CompiledFunction`.

    Inner functions are compiled into the program's function table as they are met.
    """

    def __init__(self, prog: CompiledProgram, func: Function, captured: Sequence[Var],
                 name: str, _drive: bool = True):
        self.prog = prog
        self.slots: dict[Var, int] = {}
        self.template: list[Any] = []
        self.code: list[Any] = []
        self.spans: list[Span | None] = []
        self.consts: dict[Any, int] = {}
        self.memo: dict[int, int] = {}
        self.memo_log: list[int] = []
        self.prims: dict[Var, int] = {}     # let-bound primitive functions -> kernel index
        for p in func.params:
            self.slots[p] = self._reg()
        for v in captured:
            self.slots[v] = self._reg()
        self._args = (func, captured, name)
        if _drive:
            run_generators(self.compile())

    def compile(self) -> Gen:
        """Compile the function (a generator: nested functions are compiled as sub-steps).

        Every emitting method below is a generator: where one needs another's result it
        yields the sub-call, so function, if and match nesting costs no Python recursion.
        """
        func, captured, name = self._args
        nfix = len(func.params) + len(captured)
        yield self.tail(func.body)
        self.result = CompiledFunction(name, len(func.params), len(captured),
                                       self.template[nfix:], self.code,
                                       [p.name_hint for p in func.params], self.spans, func)

    # ------------------------------------------------------------- helpers
    def _reg(self, init: Any = None) -> int:
        self.template.append(init)
        return len(self.template) - 1

    def _emit(self, instr: tuple | None, span: Span | None) -> int:
        self.code.append(instr)
        self.spans.append(span)
        return len(self.code) - 1

    @property
    def _pc(self) -> int:
        return len(self.code)

    def _const_reg(self, key: Any, init: list) -> int:
        r = self.consts.get(key)
        if r is None:
            r = self.consts[key] = self._reg(init)
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
            return self._const_reg(id(e), ["const", self.prog.const_index(e)])
        if t is GlobalVar:
            if e.name_hint not in self.prog.mod:
                raise InterpreterError(f"there is no global function @{e.name_hint} in the "
                                       f"module", e.span)
            return self._const_reg(("global", e.name_hint), ["global", e.name_hint])
        if t is Op:
            return self._const_reg(("op", e.name), ["op", e.name])
        if t is Constructor:
            return self._const_reg(("con", e.name_hint), ["con", self.prog.con_index(e)])
        return self.memo.get(id(e))

    # ------------------------------------------------------------- values
    def value(self, e: Expr) -> Gen:
        """Emit code computing ``e`` (not in tail position); return its register."""
        r = self._known(e)
        if r is not None:
            return r
        if type(e) in _DATAFLOW:
            # fast path: every child is already available (the common ANF / let-chain case)
            memo = self.memo
            for c in same_scope_children(e, op_last=True):
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
                    for c in reversed(same_scope_children(node, op_last=True)):
                        if type(c) not in _ATOMS and id(c) not in self.memo:
                            stack.append((c, False))
            elif t is Let:
                body = yield self.bind_lets(node)
                self._memo_set(node, (yield self.value(body)))
            elif t is Function:
                self._memo_set(node, (yield self.closure(node)))
            elif t is If:
                self._memo_set(node, (yield self._if_value(node)))
            elif t is Match:
                self._memo_set(node, (yield self._match_value(node)))
            else:
                raise InterpreterError(f"cannot evaluate a {t.__name__} node",
                                       getattr(node, "span", None))
        return self._known(e)  # type: ignore[return-value]

    def bind_lets(self, e: Expr, tail: bool = False) -> Gen:
        """Emit the bindings of a let spine; return its body.

        With ``tail``, a last binding returned as it is (``let %v = e; %v``, the shape A-normal
        form gives an ``if`` or a call in tail position) is not bound: ``e`` is returned, so
        that it is compiled in tail position (tail calls stay tail calls).
        """
        while type(e) is Let:
            var, val = e.var, e.value
            if tail and e.body is var and type(val) is not Function and \
                    id(val) not in self.memo:
                return val
            if type(val) is Function:
                r = self._reg()
                self.slots[var] = r
                yield self.closure(val, r)
                if self.prog.use_kernels and val.is_primitive and not free_vars(val):
                    self.prims[var] = self.prog.kernel_index(val, self.template[r][1])
            else:
                self.slots[var] = yield self.value(val)
            e = e.body
        return e

    def _dataflow(self, node: Expr) -> int:
        t = type(node)
        known = self._known
        dst = self._reg()
        if t is Call:
            op = node.op
            a = [known(x) for x in node.args]
            top = type(op)
            g = self._kernel_of(op) if self.prog.use_kernels else None
            if top is Op:
                instr: tuple = ("op", dst, op.name, self.prog.attrs_index(op, node.attrs), a)
            elif top is Constructor:
                instr = ("adt", dst, self.prog.con_index(op), a)
            elif g is not None:
                instr = ("kernel", dst, g, a)
            else:
                instr = ("call", dst, known(op), a)
        elif t is Tuple:
            instr = ("tuple", dst, [known(x) for x in node.fields])
        elif t is TupleGetItem:
            instr = ("getitem", dst, known(node.tuple_value), node.index)
        elif t is RefCreate:
            instr = ("ref_new", dst, known(node.value))
        elif t is RefRead:
            instr = ("ref_read", dst, known(node.ref))
        else:  # RefWrite
            instr = ("ref_write", dst, known(node.ref), known(node.value))
        self._emit(instr, node.span)
        return dst

    def _kernel_of(self, op: Expr) -> int | None:
        """The kernel index when ``op`` is a (let-bound or literal) primitive function."""
        t = type(op)
        if t is Var:
            return self.prims.get(op)
        if t is Function and op.is_primitive and not free_vars(op):
            r = run_generators(self.value(op))  # NOTE: a closed primitive function: shallow
            init = self.template[r]
            return self.prog.kernel_index(op, init[1])
        return None

    def closure(self, fn: Function, dst: int | None = None) -> Gen:
        """Emit the creation of a closure for ``fn`` (into ``dst`` if given)."""
        fvs = function_free_vars(fn, self.prog.free_vars)
        cap = []
        for v in fvs:
            s = self.slots.get(v)
            if s is None:
                raise InterpreterError(f"unbound variable %{v.name_hint}", v.span)
            cap.append(s)
        sub = FunctionCompiler(self.prog, fn, fvs, "", _drive=False)
        yield sub.compile()
        k = self.prog.add_function(sub.result)
        if not fvs:
            # NOTE: a closed function is a constant closure, built once (primitive functions)
            if dst is None:
                return self._const_reg(id(fn), ["fn", k])
            self.template[dst] = ["fn", k]
            return dst
        if dst is None:
            dst = self._reg()
        selfs = [i for i, s in enumerate(cap) if s == dst]
        self._emit(("closure", dst, k, cap, selfs), fn.span)
        return dst

    def _branch(self, node: If) -> Gen:
        """Emit the condition and a placeholder branch; return the branch's pc.

        ``if (op(args))`` becomes one ``op_br`` (the comparison and the branch in one step;
        the value is kept too); other conditions a ``br`` on their register.
        """
        cond = node.cond
        if type(cond) is Call and type(cond.op) is Op and id(cond) not in self.memo:
            a = yield self._values(cond.args)
            dst = self._reg()
            self._memo_set(cond, dst)
            return self._emit(("op_br", dst, cond.op.name,
                               self.prog.attrs_index(cond.op, cond.attrs), a, -1, -1),
                              cond.span)
        return self._emit(("br", (yield self.value(cond)), -1, -1), node.span)

    def _values(self, es: Sequence[Expr]) -> Gen:
        out = []
        for x in es:
            out.append((yield self.value(x)))
        return out

    def _patch_branch(self, br: int, t_pc: int, f_pc: int) -> None:
        self.code[br] = (*self.code[br][:-2], t_pc, f_pc)

    def _if_value(self, node: If) -> Gen:
        br = yield self._branch(node)
        dst = self._reg()
        mark = self._scope()
        rt = yield self.value(node.true_branch)
        self._emit(("move", dst, rt), node.true_branch.span)
        jmp = self._emit(None, node.span)
        self._unscope(mark)
        f_pc = self._pc
        rf = yield self.value(node.false_branch)
        self._emit(("move", dst, rf), node.false_branch.span)
        self._unscope(mark)
        self._patch_branch(br, br + 1, f_pc)
        self.code[jmp] = ("jmp", self._pc)
        return dst

    def _match_value(self, node: Match) -> Gen:
        d = yield self.value(node.data)
        dst = self._reg()
        mpc = self._emit(None, _match_span(node))
        table: list[list] = []
        jumps = []
        for clause in node.clauses:
            mark = self._scope()
            table.append([self.pattern(clause.lhs), self._pc])
            r = yield self.value(clause.rhs)
            self._emit(("move", dst, r), clause.rhs.span)
            jumps.append(self._emit(None, clause.span))
            self._unscope(mark)
        self.code[mpc] = ("match", d, table, node.complete)
        for j in jumps:
            self.code[j] = ("jmp", self._pc)
        return dst

    def pattern(self, p: Pattern) -> list:
        """Allocate slots for the pattern's variables; return it as plain data."""
        # NOTE: recursion over pattern nesting only (written patterns are shallow)
        t = type(p)
        if t is PatternWildcard:
            return ["_"]
        if t is PatternVar:
            r = self._reg()
            self.slots[p.var] = r
            return ["var", r]
        if t is PatternConstructor:
            return ["con", self.prog.con_index(p.constructor),
                    [self.pattern(q) for q in p.patterns]]
        if t is PatternTuple:
            return ["tup", [self.pattern(q) for q in p.patterns]]
        raise InterpreterError(f"unknown pattern {t.__name__}", p.span)

    # ------------------------------------------------------------- tail position
    def tail(self, e: Expr) -> Gen:
        """Emit code that returns the value of ``e`` from the function."""
        while True:
            e = yield self.bind_lets(e, tail=True)
            t = type(e)
            if t is If:
                br = yield self._branch(e)
                mark = self._scope()
                yield self.tail(e.true_branch)
                self._unscope(mark)
                self._patch_branch(br, br + 1, self._pc)
                e = e.false_branch
                continue
            if t is Match:
                d = yield self.value(e.data)
                mpc = self._emit(None, _match_span(e))
                table: list[list] = []
                for clause in e.clauses:
                    mark = self._scope()
                    table.append([self.pattern(clause.lhs), self._pc])
                    yield self.tail(clause.rhs)
                    self._unscope(mark)
                self.code[mpc] = ("match", d, table, e.complete)
                return
            if t is Call and id(e) not in self.memo:
                top = type(e.op)
                if top is Op:
                    a = yield self._values(e.args)
                    self._emit(("op_ret", e.op.name, self.prog.attrs_index(e.op, e.attrs), a),
                               e.span)
                    return
                if top is not Constructor:
                    a = yield self._values(e.args)
                    g = self._kernel_of(e.op) if self.prog.use_kernels else None
                    if g is not None:
                        self._emit(("kernel_ret", g, a), e.span)
                        return
                    f = yield self.value(e.op)
                    self._emit(("tailcall", f, a), e.span)
                    return
            self._emit(("ret", (yield self.value(e))), e.span)
            return


__all__ = ["CompiledProgram", "CompiledFunction", "FunctionCompiler", "JSON_FORMAT"]
