"""The reference interpreter: runs any module with numpy, without Python recursion.

Design
======

**One compile step, two backends.** ``runtime.compiler`` turns each
:class:`~relay_ir.expr.Function` into plain-data instructions (register layout, closure capture,
tail positions, ``if``/``match`` layout); this module is the reference backend that turns those
instructions into a :class:`Code`: a flat list of *steps* plus a register-file template. A step
is a small Python closure ``step(regs) -> int | tuple`` specialised for one instruction (an
operator call with two arguments, a tuple of three fields, a branch, ...), so the hot path does
no dispatch on opcodes or IR nodes. ``regs`` is the activation's register file, a Python list
laid out as::

    [ parameters | captured values | constants, globals, let-bound values, temporaries ]

Constants, globals, first-class operators/constructors and closed inner functions are
pre-stored in the template, which an activation copies (``args + captured + rest``). Globals
are compiled lazily, on their first call, and cached with the module.

**Steps and control.** A step returns either an ``int`` (the next pc: straight-line steps know
their successor, branches and matches pick one) or an action tuple:

* ``(CALL, callee, args, site)`` -- a non-tail call of a closure (or a first-class
  constructor / operator value); ``site`` is the call site's constant ``(code, return_pc,
  dst)``, built once when the instruction is translated;
* ``(TAILCALL, callee, args)`` -- a call in tail position (function body, let body, if branch,
  match arm of a tail expression): the current activation is *replaced*, no frame is pushed;
* ``(RET, value)`` -- leave the activation.

The driver loop (:func:`_execute`) is a CEK-style machine: C is ``(code, pc)``, E is ``regs``
(closures capture the values of their free variables by copying them into their own list, so the
environment chain is flat per activation), and K is an explicit Python list holding two entries
per frame, the call ``site`` and the caller's ``regs`` (no tuple is built per call: a frame
costs two list slots plus the register file). Calls push a frame, returns pop one; tail calls
do neither. No Python recursion happens at run time, so a 1,000,000-iteration tail-recursive loop
runs in constant stack, and a non-tail ``foldr`` over a 100,000-element list only grows the
heap-allocated frame list -- up to ``max_depth`` frames (:data:`DEFAULT_MAX_DEPTH`), past which
the run stops with an :class:`~relay_ir.errors.InterpreterError` instead of exhausting memory.

**Values** (``relay_ir.runtime.values``): tensors are numpy arrays, exactly as the operator's
reference implementation (``OpDef.impl(args, attrs)``) returns them -- the interpreter never
converts results to Python scalars or float64, so dtype semantics (int division truncating,
casts truncating, float16 staying float16) are those of the impls. Tuples are Python tuples,
ADT values :class:`~relay_ir.runtime.values.ADTValue`, refs
:class:`~relay_ir.runtime.values.RefValue`, functions
:class:`~relay_ir.runtime.values.Closure`.

**Errors.** :func:`evaluate` type-checks a module that has not been through ``InferType``
(raising its :class:`~relay_ir.errors.TypeInferenceError`), then checks the arguments against
the entry's parameter types (``values.check_arguments``: count, tensor shape and dtype, integer
range, tuple arity, ADT type), naming the parameter. A match with no matching clause
(``match?`` or a non-exhaustive total match) and any failure inside an operator are
:class:`~relay_ir.errors.InterpreterError` carrying the span of the node that failed.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import (DiagnosticError, IncompleteMatchError, IncompleteTypeError,
                             InterpreterError)
from relay_ir.expr import Constructor, Expr, Function, GlobalVar, Op
from relay_ir.module import IRModule
from relay_ir.op import get_op, get_opdef
from relay_ir.runtime.compiler import CompiledFunction, CompiledProgram
from relay_ir.runtime.values import ADTValue, Closure, RefValue, check_arguments, format_value
from relay_ir.span import Span
from relay_ir.traversal import run_generators
from relay_ir.ty import Type

CALL = 0
TAILCALL = 1
RET = 2

# NOTE: 2**20 frames: above a million-deep non-tail recursion, and about 350 MiB of frames
# (their register files and values), far below the memory of the development machine.
DEFAULT_MAX_DEPTH = 1_048_576


@dataclass(slots=True, eq=False)
class Code:
    """A compiled function for this backend: flat steps, their spans, the register template."""

    steps: list[Callable]
    spans: list[Span | None]
    kinds: list[str | None]         # the operator's name for an operator step, else None
    nparams: int
    ncap: int
    rest: list[Any]                 # the register template after params and captures
    func: Function | None
    name: str

    def __repr__(self) -> str:
        return f"<Code {self.name or 'fn'}: {len(self.steps)} steps, " \
               f"{self.nparams + self.ncap + len(self.rest)} registers>"


# ============================================================================ programs
class Program:
    """A module prepared for interpretation: global closures, compiled lazily, and entry info.

    ``compiled`` is the shared instruction program (``runtime.compiler``); this backend turns
    each of its functions into a :class:`Code` once.
    """

    # instruction tag -> factory(ins, pc, code) -> (step, kind): a backend built on this one
    # adds or replaces instructions here
    step_factories: dict[str, Callable] = {}

    def __init__(self, mod: IRModule, compiled: CompiledProgram | None = None):
        self.mod = mod
        self.compiled = compiled if compiled is not None else CompiledProgram(mod)
        self.globals: dict[str, Closure] = {}
        self._codes: dict[int, Code] = {}
        self._param_types: dict[str, list[Type | None]] = {}
        self._typed: IRModule | None = None
        self._incomplete: DiagnosticError | None = None

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
        return self.code(self.compiled.compile_global(clo.name))

    def code(self, k: int) -> Code:
        """The :class:`Code` of compiled function ``k`` (translated once)."""
        code = self._codes.get(k)
        if code is None:
            # NOTE: the inner functions a function creates are translated first, innermost
            # first, with an explicit stack (nesting depth costs no recursion)
            codes, functions = self._codes, self.compiled.functions
            stack: list[tuple[int, bool]] = [(k, False)]
            while stack:
                j, ready = stack.pop()
                if j in codes:
                    continue
                if ready:
                    codes[j] = _translate(self, functions[j])
                    continue
                stack.append((j, True))
                stack.extend((i, False) for i in _inner_functions(functions[j])
                             if i not in codes)
            code = codes[k]
        return code

    def typed_module(self) -> IRModule:
        """The module after ``InferType`` (itself when already typed); raises type errors.

        A program whose types are consistent but not all determined (an unannotated
        polymorphic closure), or whose only fault is a total ``match`` that misses cases (the
        run reports the case when it happens), runs as it is.
        """
        if self._typed is None:
            fns = self.mod.functions.values()
            if all(f.checked_type_ is not None for f in fns):
                self._typed = self.mod
            else:
                from relay_ir.passes import InferType
                try:
                    self._typed = InferType()(self.mod)
                except (IncompleteTypeError, IncompleteMatchError) as e:
                    self._typed, self._incomplete = self.mod, e
        return self._typed

    def param_types(self, name: str) -> list[Type | None]:
        """The entry's parameter types (annotations, else those InferType found)."""
        got = self._param_types.get(name)
        if got is not None:
            return got
        types: list[Type | None] = [p.type_annotation for p in self.mod[name].params]
        if any(t is None for t in types):
            typed = self.typed_module()[name].params
            if self._incomplete is not None:
                raise self._incomplete  # NOTE: the entry's own types are needed here
            types = [t if t is not None else (p.type_annotation or p.checked_type_)
                     for t, p in zip(types, typed)]
        self._param_types[name] = types
        return types


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


def _call_step(f: int, a: Sequence[int], site: tuple) -> Callable:
    n = len(a)
    if n == 1:
        a0, = a

        def step(regs: list) -> tuple:
            return (CALL, regs[f], [regs[a0]], site)
    elif n == 2:
        a0, a1 = a

        def step(regs: list) -> tuple:
            return (CALL, regs[f], [regs[a0], regs[a1]], site)
    else:
        gather = _gather(a)

        def step(regs: list) -> tuple:
            return (CALL, regs[f], gather(regs), site)
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


def _closure_step(code: Code, fn: Function | None, cap: Sequence[int], self_idx: Sequence[int],
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


def _match_failure(total: bool, span: Span | None, value: Any) -> InterpreterError:
    text = format_value(value)
    if len(text) > 200:
        text = text[:197] + "..."
    what = "match" if total else "match?"
    return InterpreterError(f"{what} failed: no clause matches the value {text}", span)


def _match_step(d: int, table: Sequence[tuple[Callable | None, int]], total: bool,
                span: Span | None) -> Callable:
    table = tuple(table)

    def step(regs: list) -> int:
        v = regs[d]
        for m, pc in table:
            if m is None or m(v, regs):
                return pc
        raise _match_failure(total, span, v)
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


# ============================================================================ instructions -> steps
def _inner_functions(cf: CompiledFunction) -> list[int]:
    """The function-table indices of the closures that ``cf`` creates."""
    out = [init[1] for init in cf.init if init is not None and init[0] == "fn"]
    out.extend(ins[2] for ins in cf.code if ins is not None and ins[0] == "closure")
    return out


def _translate(prog: Program, cf: CompiledFunction) -> Code:
    """Turn one compiled function's instructions into step closures."""
    cp = prog.compiled
    rest: list[Any] = []
    for init in cf.init:
        if init is None:
            rest.append(None)
            continue
        kind, ref = init
        if kind == "const":
            rest.append(cp.consts[ref])
        elif kind == "global":
            rest.append(prog.global_closure(ref))
        elif kind == "op":
            rest.append(get_op(ref))
        elif kind == "con":
            rest.append(cp.cons[ref])
        else:  # "fn": a closed inner function, one constant closure
            rest.append(Closure(prog.code(ref), [], cp.functions[ref].func))
    steps: list[Callable] = []
    kinds: list[str | None] = []
    # NOTE: built before its steps, so that call sites can name the code they return to
    code = Code(steps, cf.spans, kinds, cf.nparams, cf.ncap, rest, cf.func, cf.name)
    factories = prog.step_factories
    for pc, ins in enumerate(cf.code):
        nxt = pc + 1
        tag = ins[0]
        kind = None
        if tag in factories:
            step, kind = factories[tag](ins, pc, code)
        elif tag == "op" or tag == "op_ret" or tag == "op_br":
            kind = ins[2] if tag != "op_ret" else ins[1]
            impl = get_opdef(kind).impl
            if impl is None:
                step = _missing_impl_step(kind)
            elif tag == "op":
                step = _op_step(impl, cp.attrs[ins[3]], ins[4], ins[1], nxt)
            elif tag == "op_ret":
                step = _op_ret_step(impl, cp.attrs[ins[2]], ins[3])
            else:
                step = _op_branch_step(impl, cp.attrs[ins[3]], ins[4], ins[1], ins[5], ins[6])
        elif tag == "move":
            step = _move_step(ins[2], ins[1], nxt)
        elif tag == "br":
            step = _branch_step(ins[1], ins[2], ins[3])
        elif tag == "jmp":
            step = _jump_step(ins[1])
        elif tag == "call":
            step = _call_step(ins[2], ins[3], (code, nxt, ins[1]))
        elif tag == "tailcall":
            step = _tailcall_step(ins[1], ins[2])
        elif tag == "ret":
            step = _ret_step(ins[1])
        elif tag == "adt":
            step = _adt_step(cp.cons[ins[2]], ins[3], ins[1], nxt)
        elif tag == "tuple":
            step = _tuple_step(ins[2], ins[1], nxt)
        elif tag == "getitem":
            step = _getitem_step(ins[2], ins[3], ins[1], nxt)
        elif tag == "ref_new":
            step = _ref_create_step(ins[2], ins[1], nxt)
        elif tag == "ref_read":
            step = _ref_read_step(ins[2], ins[1], nxt)
        elif tag == "ref_write":
            step = _ref_write_step(ins[2], ins[3], ins[1], nxt)
        elif tag == "closure":
            step = _closure_step(prog.code(ins[2]), cp.functions[ins[2]].func, ins[3], ins[4],
                                 ins[1], nxt)
        elif tag == "match":
            table = [(_pattern_matcher(_flat_pattern(cp, p)), t) for p, t in ins[2]]
            step = _match_step(ins[1], table, ins[3], cf.spans[pc])
        else:
            raise InterpreterError(f"unknown instruction {tag!r}")
        steps.append(step)
        kinds.append(kind)
    return code


def _flat_pattern(cp: CompiledProgram, p: list) -> tuple:
    """A plain-data pattern as the matchers' flat tuples (resolving constructors)."""
    # NOTE: recursion over pattern nesting only (written patterns are shallow)
    tag = p[0]
    if tag == "_":
        return (_P_WILD,)
    if tag == "var":
        return (_P_VAR, p[1])
    if tag == "con":
        con = cp.cons[p[1]]
        return (_P_CON, con, con.name_hint, tuple(_flat_pattern(cp, q) for q in p[2]))
    return (_P_TUP, tuple(_flat_pattern(cp, q) for q in p[1]))


def _apply_builtin(f: Any, args: list) -> Any:
    """Apply a first-class constructor or operator value."""
    tf = type(f)
    if tf is Constructor:
        return ADTValue(f, tuple(args))
    if tf is Op:
        opdef = f.opdef
        return opdef.impl(args, opdef.default_attrs)
    raise InterpreterError(f"cannot call a value that is not a function: {format_value(f)}")


# ============================================================================ the machine
def _execute(clo: Closure, args: list, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Run ``clo`` on ``args`` to completion; floating-point errors follow IEEE (no warnings)."""
    # NOTE: entered once per run, not per operator call: np.errstate costs microseconds.
    with np.errstate(all="ignore"):
        return _execute_loop(clo, args, max_depth)


def _execute_loop(clo: Closure, args: list, max_depth: int) -> Any:
    """Run ``clo`` on ``args`` to completion with an explicit continuation stack."""
    code = clo.code if clo.code is not None else clo.force()
    if len(args) != code.nparams:
        raise InterpreterError(f"{_fn_name(clo)} expects {code.nparams} arguments, "
                               f"got {len(args)}", clo.func.span if clo.func else None)
    regs = args + clo.captured + code.rest
    steps = code.steps
    pc = 0
    stack: list[Any] = []  # two entries per frame: the call site, the caller's registers
    push = stack.append
    pop = stack.pop
    limit = 2 * max_depth
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
                regs = pop()
                code, pc, dst = pop()
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
                    if len(stack) >= limit:
                        raise _too_deep(f, max_depth)
                    push(r[3])
                    push(regs)
                code = ncode
                regs = a + f.captured + ncode.rest
                steps = ncode.steps
                pc = 0
                continue
            v = _apply_builtin(f, a)
            if tag == CALL:
                _, pc, dst = r[3]
                regs[dst] = v
                continue
            if not stack:
                return v
            regs = pop()
            code, pc, dst = pop()
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


def _too_deep(f: Closure, max_depth: int) -> InterpreterError:
    return InterpreterError(f"recursion too deep: calling {_fn_name(f)} at call depth "
                            f"{max_depth}, the interpreter's frame limit (raise it with "
                            f"max_depth=N, or `rly run --max-depth N`)")


def _span_at(code: Code, pc: int) -> Span | None:
    return code.spans[pc] if 0 <= pc < len(code.spans) else None


def _fn_name(clo: Closure) -> str:
    return f"@{clo.name}" if clo.name else "the function"


def apply(fn: Any, *args: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Call a function value (closure, constructor or operator) on ``args`` from Python.

    Arguments are checked and converted as :func:`evaluate` does, against the parameters'
    annotations (Python ints become int32 and floats float32 where a parameter has none).
    """
    if type(fn) is Closure:
        func = fn.func
        ptypes = [p.type_annotation for p in func.params] if func is not None else \
            [None] * len(args)
        return _normalize_output(_execute(fn, check_arguments(func, ptypes, args), max_depth))
    return _normalize_output(_apply_builtin(fn, check_arguments(None, [None] * len(args),
                                                                args)))


# ============================================================================ entry point
def evaluate(mod: IRModule | Expr, *args: Any, entry: str | GlobalVar = "main",
             max_depth: int = DEFAULT_MAX_DEPTH, check_types: bool = True) -> Any:
    """Run ``entry`` of ``mod`` on ``args`` with the reference interpreter.

    A module not yet through ``InferType`` is type-checked first (its
    :class:`~relay_ir.errors.TypeInferenceError` is raised). Arguments are numpy arrays (Python
    scalars and nested lists are converted with the parameter's dtype; integers it cannot hold
    are refused), Python tuples, ADT values, refs or closures, checked against the entry's
    parameter types first. Returns numpy arrays (0-d for scalars), tuples, ADTValues, RefValues
    or Closures. An expression instead of a module is wrapped with ``IRModule.from_expr``.
    ``max_depth`` bounds the nesting of non-tail calls (an InterpreterError beyond it);
    ``check_types=False`` skips the type check (to watch an ill-typed program fail at run time).
    """
    if not isinstance(mod, IRModule):
        if not isinstance(mod, Expr):
            raise TypeError(f"evaluate expects an IRModule or an Expr, got {type(mod).__name__}")
        mod = IRModule.from_expr(mod)
    name = entry.name_hint if isinstance(entry, GlobalVar) else entry
    prog = program_for(mod)
    clo = prog.global_closure(name)
    if check_types:
        prog.typed_module()
    converted = check_arguments(clo.func, prog.param_types(name), args)
    return _normalize_output(_execute(clo, converted, max_depth))


def run_compiled(compiled: CompiledProgram, *args: Any, entry: str = "main",
                 max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Run ``entry`` of an instruction program (e.g. one read back from JSON) on ``args``.

    The program's module supplies the entry's parameter types for the argument checks; the
    module is not type-checked again.
    """
    prog = Program(compiled.mod, compiled)
    clo = prog.global_closure(entry)
    converted = check_arguments(clo.func, [p.type_annotation for p in clo.func.params], args)
    return _normalize_output(_execute(clo, converted, max_depth))


def _normalize_output(v: Any) -> Any:
    if type(v) is tuple:
        return run_generators(_normalize_tuple(v))  # NOTE: nested tuples without recursion
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


def _normalize_tuple(v: tuple) -> Any:
    out = []
    for x in v:
        if type(x) is tuple:
            x = yield _normalize_tuple(x)
        elif isinstance(x, np.generic):
            x = np.asarray(x)
        out.append(x)
    return tuple(out)


__all__ = ["evaluate", "apply", "run_compiled", "check_arguments", "program_for", "Program",
           "Code", "DEFAULT_MAX_DEPTH"]
