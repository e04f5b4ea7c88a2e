"""The compiled executor: the instruction program as TVM Relax VM bytecode.

``runtime.build(mod)`` compiles the plain-data instruction program of
``runtime.compiler`` (the one the reference interpreter runs) to the bytecode of TVM's
C++ virtual machine (``tvm.relax.VirtualMachine``): four opcodes (Call, Ret, Goto, If) plus
calls of ``vm.builtin.*`` functions, emitted with ``tvm.relax.ExecBuilder`` and linked with the
fused groups' compiled TIR kernels into one executable. Control never returns to Python
between kernel calls.

What is emitted (the first milestone of issue 21):

* kernel calls (``kernel`` / ``kernel_ret``): every output allocated with
  ``vm.builtin.alloc_storage`` + ``vm.builtin.alloc_tensor`` (``relax_plan`` then plans
  them: shared storage, views made once in loops, one-call allocation of the rest), then one
  call of the kernel with
  its flattened inputs, its large constants and its outputs; tuple arguments are taken apart
  with ``tuple_getitem`` and tuple results built with ``make_tuple``. Every group is a TVM
  kernel here, scalar groups included (no host numpy code);
* ``if`` (``br``: ``read_if_cond`` + If + Goto), ``jmp``, ``move``, ``ret``, tuples and
  projections, constants (executable constants);
* calls of globals and of closed inner functions (a direct VM Call). A **self tail call** is a
  jump: the arguments are moved into the parameter registers and control goes back to the
  first instruction, so a loop of any length runs in constant stack. Mutual tail calls are
  jumps within one merged VM function and closure tail calls bounce to the caller's
  trampoline (``runtime.relax_plan``); the remaining tail calls (of globals, from globals)
  are calls followed by a return;
* closures: ``vm.builtin.make_closure`` over the captured values (a VM function's inputs are
  its parameters, then its captured values, the compiler's register layout) and
  ``invoke_closure`` for calls of function values; a closure's slot that points back at itself
  (``let %f = fn ... %f``) holds a null, and the function calls itself directly (a self tail
  call is a jump) or rebuilds its closure where it is used as a value; a global or a
  constructor used as a value is a closure of it;
* ADT values as tuples ``(tag, fields...)`` (the tag an int: the constructor's index in the
  program's table, every constructor of the module numbered up front); ``match`` tests a tag
  with ``ffi.RecursiveEq`` (a C++ function of TVM's runtime) + If,
  nested patterns take fields apart in place, and no matching clause fails with a
  ``DiagnosticError``;
* references as one-element ``ffi.List`` (``ffi.ListGetItem`` / ``ffi.ListSetItem``, C++
  functions of TVM's runtime); reference arguments get a cell per call whose final content is
  written back to the caller's ``RefValue``.

Groups with ``?`` or symbolic dimensions are one kernel over symbolic shapes whose output
shapes the bytecode computes at run time (``vm.builtin.match_shape`` / TIR shape functions /
``make_shape``); groups with a value-dependent output shape (``dyn.reshape``) or an operator
without a TVM compute run through the host function ``relay_ir.host.group`` (numpy reference
implementations; such an executable runs only in the process that built it). Both live in
:mod:`relay_ir.runtime.relax_shapes`; :meth:`RelaxBackend.kernel` and
:meth:`_Emitter.emit_kernel` hand those groups to it.

``target="cuda"``: the same bytecode with device-resident tensors (the VM's device 0 is the
GPU) and the depth counter in static words of a host function; groups with ``?`` dimensions
and host groups are refused there (:mod:`relay_ir.runtime.relax_cuda`).

Not emitted yet: operator calls outside a fused group (which the compiler does not produce for
typed programs). A program that needs one is refused when it is built with a
:class:`RelaxUnsupportedError` (a ``DiagnosticError``) naming the construct (no silent
fallback: the user asked for this executor).

**Export** (``RelaxExecutable.export_library``, ``runtime.relax_export``): one standard TVM
shared library; every global also has a plain entry under its own name (its parameters only,
the depth limit :data:`PLAIN_DEPTH`), which plain TVM calls; the globals' own functions are
``__rly_fn_<name>``.

**Depth.** The Relax VM runs each call on the C++ stack (2-6 KiB a call; a 2,100-deep
recursion overflowed an 8 MiB stack and killed the process). Every non-tail call is
therefore bracketed by two tiny TIR functions that count the depth in an int64 tensor held as
a constant of the executable (each entry wrapper ``__rly_entry_<name>`` resets it); past the
limit the first one fails an assertion, which surfaces as a ``DiagnosticError`` naming the
limit. A run starts on the calling thread with a limit its stack can hold
(:data:`MAIN_DEPTH`); if it hits the limit it is run again, once, on a thread with a 1.5 GiB
stack and the limit :data:`DEEP_DEPTH` (from fresh arguments: reference arguments are written
back only after the run that returns), and that entry starts on such a thread from then on.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from typing import Any, Sequence

import numpy as np

from relay_ir.errors import DiagnosticError, LoweringError
from relay_ir.ty import TensorType, TupleType, Type
from relay_ir.runtime.lower_tvm import DynamicShapeError
from relay_ir.runtime.values import ADTValue, RefValue, check_arguments
from relay_ir.runtime import relax_plan
from relay_ir.runtime.vm import _is_static, _result_struct

# Depth limits of non-tail calls. A VM call takes 2-6 KiB of C++ stack (measured: a 64 MiB
# stack held 16,000 direct calls, not 30,000; a 16 MiB stack 3,000 nested closure
# invocations, not 4,000); the limits allow 12 KiB a call. On the calling thread: its stack
# (the RLIMIT_STACK soft limit, 8 MiB by default: 658 calls, leaving room for Python's own
# frames); an entry that reaches it runs on a thread with DEEP_STACK from then on.
FRAME_BYTES = 12 << 10
DEEP_STACK = 3 << 29          # 1.5 GiB of stack for that thread (reserved, committed on use)
DEEP_DEPTH = DEEP_STACK // FRAME_BYTES        # 131,072


def _main_depth() -> int:
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    except (ImportError, ValueError, OSError):
        soft = -1
    if soft < 0:
        soft = 8 << 20
    return max(16, min(soft, 8 << 20) // FRAME_BYTES - 24)


MAIN_DEPTH = _main_depth()
# the limit of the plain entries (``vm["main"]`` called from plain TVM on a default 8 MiB stack)
PLAIN_DEPTH = (8 << 20) // FRAME_BYTES - 24
_DEPTH_MSG = "relay_ir: recursion depth limit reached"
_ENTER, _LEAVE, _RESET = "rly_depth_enter", "rly_depth_leave", "rly_depth_reset"
_FAIL = "rly_match_fail"
_COUNTER_INIT = [0x7265_6C61_795F_6972, -0x6465_7074_685F_6374, 0x5F5F_6465_7074_6800]
_MATCH_MSG = "relay_ir: no clause of the match matched the value"
_ENTRY = "__rly_entry_"       # prefix of the entry wrappers (reset the depth, call the global)
_FN = "__rly_fn_"             # prefix of the globals' own VM functions (the plain names are
#                               the wrappers plain TVM calls: see relax_export)
_INVOKE = "__rly_invoke"      # + arity: the wrappers that invoke a closure from Python
_CONSTANTS = "__rly_constants"  # () -> the program's constants (results aliasing one are copied)
_RELEASE = "__rly_release"      # () -> (): a run that makes the VM let go of the last result
# NOTE: TVM's VM keeps the value its last `ret` returned (VirtualMachineImpl::return_value_)
# until the next return: a result the caller has dropped stays allocated, and its storage out
# of the pooled allocator, until the next call. After a call whose result holds at least this
# many tensor bytes the runner calls _RELEASE (about 0.6 us) so that the storage goes back to
# the pool as soon as the caller drops the result (the next call reuses it: measured for W1 in
# benchmarks/RESULTS.md, "W1 at 2 threads: where the time goes")
RELEASE_BYTES = 1 << 20
_INVOKE_ARITY = 8
# None: the depth counter is a tensor constant on the CPU and static words (runtime.relax_cuda)
# on cuda; True/False forces one (tests run the static counter on the CPU)
STATIC_DEPTH: bool | None = None


class RelaxUnsupportedError(DiagnosticError):
    """A program uses a construct the Relax VM backend does not emit yet."""

    kind = "unsupported by the relax executor"


_CONSTRUCT = {
    "op": "an operator call outside a fused group",
    "op_ret": "an operator call outside a fused group",
    "op_br": "an operator call outside a fused group",
}


def _unsupported(what: str, span: Any = None) -> RelaxUnsupportedError:
    return RelaxUnsupportedError(
        f"executor='relax' does not support {what} yet (build without executor= to run "
        f"this program on the default compiled executor)", span)


def _depth_module() -> Any:
    """The two depth-counting TIR functions, compiled for the host."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def enter(c: T.Buffer((3,), "int64")):
        T.func_attr({"global_symbol": "rly_depth_enter"})
        assert c[0] < c[1], "relay_ir: recursion depth limit reached"
        c[0] = c[0] + T.int64(1)

    @T.prim_func
    def leave(c: T.Buffer((3,), "int64")):
        T.func_attr({"global_symbol": "rly_depth_leave"})
        c[0] = c[0] - T.int64(1)

    @T.prim_func
    def fail(c: T.Buffer((3,), "int64")):
        T.func_attr({"global_symbol": "rly_match_fail"})
        assert c[0] < T.int64(0), "relay_ir: no clause of the match matched the value"
        c[0] = c[0]

    @T.prim_func
    def reset(c: T.Buffer((3,), "int64"), s: T.Buffer((2,), "int64")):
        T.func_attr({"global_symbol": "rly_depth_reset"})
        c[0] = s[0]
        c[1] = s[1]

    return tvm.compile(tvm.IRModule({_ENTER: enter, _LEAVE: leave, _RESET: reset,
                                     _FAIL: fail}),
                       target="llvm").mod


_DEPTH_LIB: list[Any] = []        # the module this process runs (maybe loaded from disk)
_DEPTH_COMPILED: list[Any] = []   # compiled here (what export links)


def _cached_depth_module() -> Any:
    """:func:`_depth_module`, kept as a library in the kernel cache directory: compiling it
    costs 0.15-0.26 s in every fresh process (W8's time to the first step), loading 1 ms. The
    file name holds a digest of this file (relax_vm.py) and TVM's version; a file that does not
    load is rebuilt; a directory that cannot be written only costs the compile."""
    import tvm

    from relay_ir.runtime.kernel_cache import cache_dir
    with open(__file__, "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(tvm.__version__.encode())
    d = cache_dir()
    path = os.path.join(d, f"depth-{h.hexdigest()[:24]}.so")
    if os.path.exists(path):
        try:
            return tvm.runtime.load_module(path)
        except Exception:  # NOTE: unreadable or foreign: rebuilt below
            pass
    if not _DEPTH_COMPILED:
        _DEPTH_COMPILED.append(_depth_module())
    mod = _DEPTH_COMPILED[0]
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=d)
        os.close(fd)
        try:
            mod.export_library(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception:  # NOTE: a read-only or full disk must not fail the build
        pass
    return mod


class _Kernel:
    """A fused group compiled for its static parameter types."""

    __slots__ = ("symbol", "module", "consts", "outs", "result", "param_types", "label",
                 "request", "dyn")

    def __init__(self, symbol: str, module: Any, consts: list[np.ndarray],
                 outs: list[tuple[tuple, str]], result: Any, param_types: list[Type],
                 label: str, request: Any = None):
        self.request = request          # the kernel-cache request (export recompiles from it)
        self.label = label
        self.symbol = symbol
        self.module = module
        self.consts = consts
        self.outs = outs
        self.result = result            # int (one output) or nested lists of output indices
        self.param_types = param_types
        self.dyn: Any = None            # relax_shapes.DynInfo: a symbolic kernel or host group


# ============================================================================ emitting
class _Emitter:
    """Bytecode of one compiled function: abstract ops first (labels), then ExecBuilder calls.

    Abstract ops: ``("call", name, args, dst)`` (args: ("r", reg) | ("c", const key) |
    ("i", int) | ("vm",) | ("dt", dtype)), ``("if", reg, label)`` (go to ``label`` when false),
    ``("goto", label)``, ``("ret", reg)``, ``("label", key)``.
    """

    def __init__(self, backend: RelaxBackend, index: int):
        self.b = backend
        self.index = index
        cf = backend.cp.functions[index]
        self.cf = cf
        self.nfix = cf.nparams + cf.ncap
        self.nregs = self.nfix + len(cf.init)
        self.ops: list[tuple] = []
        self.prologue: list[tuple] = []    # ops before the first instruction (relax_plan)
        # captured slots that point back at this function's own closure (let %f = fn ... %f)
        self.self_slots = {cf.nparams + i for i in backend.selfs.get(index, ())}

    def tmp(self) -> int:
        self.nregs += 1
        return self.nregs - 1

    def init_of(self, r: int) -> Any:
        return None if r < self.nfix else self.cf.init[r - self.nfix]

    def operand(self, r: int, span: Any) -> tuple:
        """The operand for register ``r`` (a constant when its slot holds one; a function
        value becomes a closure object here)."""
        if r in self.self_slots:
            return ("r", self.make_closure(self.index, span))
        init = self.init_of(r)
        if init is None:
            return ("r", r)
        kind = init[0]
        if kind == "const":
            return ("c", ("const", init[1]))
        if kind == "global":
            return ("r", self.make_closure(self.b.function_of_global(init[1], span), span))
        if kind == "fn":
            return ("r", self.make_closure(init[1], span))
        if kind == "op":
            raise _unsupported("an operator used as a value", span)
        # a constructor as a function value: a closure of its wrapper function
        t = self.tmp()
        self.ops.append(("call", "vm.builtin.make_closure",
                         [("f", self.b.constructor_fn(init[1]))], t))
        return ("r", t)

    def null(self) -> int:
        t = self.tmp()
        self.ops.append(("call", "vm.builtin.null_value", [], t))
        return t

    def make_closure(self, fidx: int, span: Any) -> int:
        """A closure object of function ``fidx``: of this function itself (its own captured
        values, a null for each slot that points back at it), or of a closed function."""
        caps: list[tuple] = []
        if fidx == self.index:
            for i in range(self.cf.ncap):
                r = self.cf.nparams + i
                caps.append(("r", self.null() if r in self.self_slots else r))
        elif self.b.cp.functions[fidx].ncap:
            raise AssertionError("a capturing function is made a closure by its instruction")
        t = self.tmp()
        self.ops.append(("call", "vm.builtin.make_closure",
                         [("f", relax_plan.closure_name(self.b, fidx)), *caps],
                         t))
        return t

    def reg(self, r: int, span: Any) -> int:
        """A register holding the value of ``r`` (constants copied into a temporary)."""
        op = self.operand(r, span)
        if op[0] == "r":
            return op[1]
        t = self.tmp()
        self.ops.append(("call", "vm.builtin.copy", [op], t))
        return t

    def callee(self, r: int, span: Any) -> tuple:
        """``("direct", function index, extra arguments)`` for a statically known callee,
        else ``("closure", register)``."""
        if r in self.self_slots:
            caps = [self.cf.nparams + i for i in range(self.cf.ncap)]
            return ("direct", self.index, caps)
        init = self.init_of(r)
        if init is not None and init[0] == "global":
            return ("direct", self.b.function_of_global(init[1], span), [])
        if init is not None and init[0] == "fn":
            return ("direct", init[1], [])
        if init is not None:
            raise _unsupported("a call of an operator value", span)
        return ("closure", r)

    def emit_kernel(self, k: int, srcs: Sequence[int], dst: int | None, span: Any) -> int:
        kern = self.b.kernel(k, span)
        if kern.dyn is not None:
            from relay_ir.runtime import relax_shapes
            return relax_shapes.emit_kernel(self, kern, srcs, dst, span)
        args: list[tuple] = []
        for r, t in zip(srcs, kern.param_types):
            if isinstance(t, TupleType):
                self._flatten(self.reg(r, span), t, args)
            else:
                args.append(self.operand(r, span))
        outs = []
        single = kern.result == 0 and len(kern.outs) == 1
        for shape, dtype in kern.outs:
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            st = self.tmp()
            out = dst if single and dst is not None else self.tmp()
            self.ops.append(("call", "vm.builtin.alloc_storage",
                             [("vm",), ("c", ("shape", (max(nbytes, 1),))), ("i", 0),
                              ("dt", "uint8"), ("c", ("str", "global"))], st))
            self.ops.append(("call", "vm.builtin.alloc_tensor",
                             [("r", st), ("i", 0), ("c", ("shape", tuple(shape))),
                              ("dt", dtype)], out))
            outs.append(out)
        consts = [("c", ("kconst", id(c), c)) for c in kern.consts]
        self.ops.append(("call", kern.symbol, args + consts + [("r", o) for o in outs], None))
        if single:
            return outs[0]
        res = self._build_result(kern.result, outs)
        if dst is not None:
            self.ops.append(("call", "vm.builtin.copy", [("r", res)], dst))
            return dst
        return res

    def _flatten(self, r: int, t: TupleType, out: list[tuple]) -> None:
        stack: list[tuple[int, Type]] = [(r, t)]
        # NOTE: depth-first, left to right (the kernel's flattened input order)
        order: list[tuple] = []
        while stack:
            reg, ty = stack.pop()
            if isinstance(ty, TupleType):
                items = []
                for i in range(len(ty.fields)):
                    x = self.tmp()
                    self.ops.append(("call", "vm.builtin.tuple_getitem",
                                     [("r", reg), ("i", i)], x))
                    items.append((x, ty.fields[i]))
                stack.extend(reversed(items))
            else:
                order.append(("r", reg))
        out.extend(order)

    def _build_result(self, struct: Any, outs: list[int]) -> int:
        if type(struct) is int:
            return outs[struct]
        parts = [self._build_result(s, outs) for s in struct]   # NOTE: tuple nesting only
        t = self.tmp()
        self.ops.append(("call", "vm.builtin.make_tuple", [("r", p) for p in parts], t))
        return t

    def call(self, target: tuple, srcs: Sequence[int], dst: int, span: Any) -> None:
        args = [self.operand(r, span) for r in srcs]
        if target[0] == "direct":
            args += [self.operand(r, span) if r not in self.self_slots else ("r", self.null())
                     for r in target[2]]
        self.ops.append(self.b.depth_op(_ENTER))
        relax_plan.emit_call(self, target, args, dst)    # (a closure's result unwrapped)
        self.ops.append(self.b.depth_op(_LEAVE))

    def match(self, src: int, table: list, span: Any) -> None:
        """Clauses in order: the pattern's tests jump to the next clause on failure; the
        variables are bound as the tests pass; no clause: a match failure."""
        v = self.reg(src, span)
        for i, (pat, pc) in enumerate(table):
            fail = ("clause", id(table), i + 1)
            self.pattern(pat, v, fail)
            self.ops.append(("goto", pc))
            self.ops.append(("label", fail))
        # the failure: check_tensor_info on the ADT value raises with this site's text (a
        # builtin of TVM's own runtime, so plain TVM runs it); the span comes back through
        # the text (RelaxExecutable._run); the depth function's failure stays as the fallback
        spans = self.b.__dict__.setdefault("_match_spans", {})
        msg = f"{_MATCH_MSG} (match {len(spans) + 1})"
        spans[msg] = span
        self.ops.append(("call", "vm.builtin.check_tensor_info",
                         [("r", v), ("i", -1), ("c", ("str", msg))], None))
        self.ops.append(self.b.depth_op(_FAIL))
        self.ops.append(("ret", v))        # NOTE: not reached (the calls above fail)

    def pattern(self, pat: list, v: int, fail: Any) -> None:
        # NOTE: recursion over pattern nesting only (written patterns are shallow)
        kind = pat[0]
        if kind == "_":
            return
        if kind == "var":
            self.ops.append(("call", "vm.builtin.copy", [("r", v)], pat[1]))
            return
        if kind == "con":
            con = pat[1]
            if con not in self.b.single_cons:
                tag = self.tmp()
                self.ops.append(("call", "vm.builtin.tuple_getitem", [("r", v), ("i", 0)], tag))
                # NOTE: the tag compared by ffi.RecursiveEq (a C++ function of TVM's runtime:
                # plain TVM runs it; an array constant would not serialize for export)
                c = self.tmp()
                self.ops.append(("call", "ffi.RecursiveEq", [("r", tag), ("i", con)], c))
                self.ops.append(("if", c, fail))
            subs, base = pat[2], 1
        else:
            subs, base = pat[1], 0
        for j, sub in enumerate(subs):
            if sub[0] == "_":
                continue
            if sub[0] == "var":
                # NOTE: a field bound to a variable is read straight into its register (no
                # copy); a later test of this clause failing leaves it unused
                self.ops.append(("call", "vm.builtin.tuple_getitem",
                                 [("r", v), ("i", base + j)], sub[1]))
                continue
            f = self.tmp()
            self.ops.append(("call", "vm.builtin.tuple_getitem", [("r", v), ("i", base + j)], f))
            self.pattern(sub, f, fail)

    def run(self) -> None:
        cf = self.cf
        spans = cf.spans or [None] * len(cf.code)
        for pc, ins in enumerate(cf.code):
            span = spans[pc] if pc < len(spans) else None
            self.ops.append(("label", pc))
            tag = ins[0]
            if tag == "kernel":
                _, dst, k, srcs = ins
                self.emit_kernel(k, srcs, dst, span)
            elif tag == "kernel_ret":
                _, k, srcs = ins
                self.ops.append(("ret", self.emit_kernel(k, srcs, None, span)))
            elif tag == "br":
                _, src, t_pc, f_pc = ins
                c = self.tmp()
                self.ops.append(("call", "vm.builtin.read_if_cond", [self.operand(src, span)], c))
                self.ops.append(("if", c, f_pc))
                if t_pc != pc + 1:
                    self.ops.append(("goto", t_pc))
            elif tag == "jmp":
                self.ops.append(("goto", ins[1]))
            elif tag == "move":
                _, dst, src = ins
                self.ops.append(("call", "vm.builtin.copy", [self.operand(src, span)], dst))
            elif tag == "ret":
                self.ops.append(("ret", self.reg(ins[1], span)))
            elif tag == "tuple":
                _, dst, srcs = ins
                self.ops.append(("call", "vm.builtin.make_tuple",
                                 [self.operand(r, span) for r in srcs], dst))
            elif tag == "getitem":
                _, dst, src, i = ins
                self.ops.append(("call", "vm.builtin.tuple_getitem",
                                 [("r", self.reg(src, span)), ("i", i)], dst))
            elif tag == "call":
                _, dst, f, srcs = ins
                self.call(self.callee(f, span), srcs, dst, span)
            elif tag == "adt":
                _, dst, con, srcs = ins
                self.ops.append(("call", "vm.builtin.make_tuple",
                                 [("i", con), *[self.operand(r, span) for r in srcs]], dst))
            elif tag == "match":
                _, src, table, _total = ins
                self.match(src, table, span)
            elif tag == "closure":
                _, dst, fn, caps, selfs = ins
                args: list[tuple] = [("f", relax_plan.closure_name(self.b, fn))]
                for i, r in enumerate(caps):
                    args.append(("r", self.null()) if i in selfs else self.operand(r, span))
                self.ops.append(("call", "vm.builtin.make_closure", args, dst))
            elif tag == "ref_new":
                _, dst, src = ins
                self.ops.append(("call", "ffi.List", [self.operand(src, span)], dst))
            elif tag == "ref_read":
                _, dst, src = ins
                self.ops.append(("call", "ffi.ListGetItem",
                                 [("r", self.reg(src, span)), ("i", 0)], dst))
            elif tag == "ref_write":
                _, dst, ref, src = ins
                self.ops.append(("call", "ffi.ListSetItem",
                                 [("r", self.reg(ref, span)), ("i", 0),
                                  self.operand(src, span)], None))
                self.ops.append(("call", "vm.builtin.make_tuple", [], dst))
            elif tag == "tailcall":
                _, f, srcs = ins
                target = self.callee(f, span)
                if target[0] == "direct" and relax_plan.jumps_to(self, target[1]):
                    # a tail call of this function (or of a member of its tail group) is a
                    # jump: a parallel move of the arguments, then a goto (relax_plan)
                    relax_plan.emit_jump(self, target[1], srcs, span)
                elif not relax_plan.emit_bounce(self, target, srcs, span):
                    t = self.tmp()
                    self.call(target, srcs, t, span)
                    self.ops.append(("ret", t))
            else:
                raise _unsupported(_CONSTRUCT.get(tag, f"the instruction {tag!r}"), span)

    def write(self, eb: Any, name: str, consts: dict, ops: list | None = None,
              nin: int | None = None, names: list | None = None) -> None:
        """Emit the abstract ops (``ops``: this function's own by default) into ExecBuilder
        ``eb`` as function ``name`` with ``nin`` inputs."""
        import tvm
        ops = relax_plan.expand(self.prologue + self.ops if ops is None else ops)
        # NOTE: a jump to itself (`def @f(%x) { @f(%x) }`: a self tail call with nothing
        # before it) is a Goto of offset 0, which the ExecBuilder refuses: a no-op goes first
        padded: list[tuple] = []
        fresh: set[Any] = set()          # labels with no instruction after them yet
        for op in ops:
            if op[0] == "label":
                fresh.add(op[1])
            else:
                if op[0] == "goto" and op[1] in fresh:
                    padded.append(("call", "vm.builtin.null_value", [], self.tmp()))
                fresh.clear()
            padded.append(op)
        ops = padded
        pos: dict[Any, int] = {}
        n = 0
        for op in ops:
            if op[0] == "label":
                pos[op[1]] = n
            else:
                n += 1

        def arg(a: tuple) -> Any:
            k = a[0]
            if k == "r":
                return eb.r(a[1])
            if k == "i":
                return eb.imm(a[1])
            if k == "vm":
                return eb.vm_state()
            if k == "dt":
                return tvm.DataType(a[1])
            if k == "f":
                return eb.f(a[1])
            key = a[1]
            got = consts.get(key[:2])
            if got is None:
                got = consts[key[:2]] = eb.convert_constant(self.b.constant_value(key))
            return got

        if names is None:
            names = list(self.cf.params) + [f"captured{i}" for i in range(self.cf.ncap)]
        with eb.function(name, self.nfix if nin is None else nin, names):
            i = 0
            for op in ops:
                tag = op[0]
                if tag == "label":
                    continue
                if tag == "call":
                    eb.emit_call(op[1], [arg(a) for a in op[2]],
                                 eb.r(op[3]) if op[3] is not None else None)
                elif tag == "if":
                    eb.emit_if(eb.r(op[1]), pos[op[2]] - i)
                elif tag == "goto":
                    eb.emit_goto(pos[op[1]] - i)
                else:
                    eb.emit_ret(eb.r(op[1]))
                i += 1


class RelaxBackend:
    """Compiles a :class:`~relay_ir.runtime.compiler.CompiledProgram` to one Relax VM
    executable (see the module docstring)."""

    def __init__(self, exe: Any):
        from relay_ir.runtime.compiler import CompiledProgram
        from relay_ir.runtime.lower_tvm import is_cuda
        self.cuda = is_cuda(exe.target)
        # NOTE: the depth counter in static words of a host function (runtime.relax_cuda)
        # where a tensor constant would live on the device; STATIC_DEPTH forces either way
        self.static_depth = self.cuda if STATIC_DEPTH is None else bool(STATIC_DEPTH)
        self.exe = exe
        self.cp = CompiledProgram(exe.module, kernels=True).compile_all()
        # every constructor of the module gets its tag (its index in the table) up front, so
        # that values built outside the program (arguments) have one too
        self.single_cons: set[int] = set()
        for td in exe.module.type_definitions.values():
            for c in td.constructors:
                k = self.cp.con_index(c)
                if len(td.constructors) == 1:
                    self.single_cons.add(k)
        self.selfs: dict[int, set[int]] = {}
        self.con_fns: dict[int, str] = {}
        self.kernels: dict[int, _Kernel] = {}
        self.names: dict[int, str] = {}
        self.todo: list[int] = []
        self.groups: dict[int, Any] = {}     # tail-group members (relax_plan.TailGroup)
        self.clo_wrappers: set[int] = set()  # functions given a closure wrapper (relax_plan)
        self.apply_arities: set[int] = set()  # thunks of bounced tail calls (relax_plan)
        self.tramp = False                   # inner functions return (flag, value) (relax_plan)
        self.plan_stats: dict[int, dict] = {}  # memory plan figures per function
        self._fetched: dict[int, Any] = {}     # group -> its request, compiled by precompile

    def depth_op(self, kind: str) -> tuple:
        """The abstract op of a depth-counter call (``_ENTER``, ``_LEAVE``, ``_FAIL``)."""
        if not self.static_depth:
            return ("call", kind, [("c", ("depth",))], None)
        from relay_ir.runtime import relax_cuda as rc
        mode = {_ENTER: rc.ENTER, _LEAVE: rc.LEAVE, _FAIL: rc.FAIL}[kind]
        return ("call", rc.DEPTH_FN, [("i", mode), ("i", 0), ("i", 0)], None)

    def reset_op(self, limits: tuple) -> tuple:
        """The abstract op resetting the depth counter to the limit operand ``limits``."""
        if not self.static_depth:
            return ("call", _RESET, [("c", ("depth",)), limits], None)
        from relay_ir.runtime import relax_cuda as rc
        return ("call", rc.DEPTH_FN, [("i", rc.RESET), ("i", 0), limits], None)

    def depth_library(self, exportable: bool = False) -> Any:
        """The host module of the depth functions this executable calls (``exportable``: one
        compiled in this process, which ``export_library`` can link)."""
        if self.static_depth:
            from relay_ir.runtime.relax_cuda import static_depth_module
            return static_depth_module()
        if exportable:
            if not _DEPTH_COMPILED:
                _DEPTH_COMPILED.append(_depth_module())
            return _DEPTH_COMPILED[0]
        if not _DEPTH_LIB:
            _DEPTH_LIB.append(_cached_depth_module())
        return _DEPTH_LIB[0]

    def name_of(self, fidx: int) -> str:
        name = self.names.get(fidx)
        if name is None:
            cf = self.cp.functions[fidx]
            name = self.names[fidx] = _FN + cf.name if cf.name else f"__fn{fidx}"
            self.todo.append(fidx)
        return name

    def constructor_fn(self, con: int) -> str:
        """The name of the VM function ``(fields...) -> (tag, fields...)`` of constructor
        ``con`` (a constructor used as a function value)."""
        name = f"__con{con}"
        self.con_fns[con] = name
        return name

    def function_of_global(self, name: str, span: Any) -> int:
        return self.cp.compile_global(name, span)

    def kernel(self, k: int, span: Any) -> _Kernel:
        got = self.kernels.get(k)
        if got is not None:
            return got
        fn = self.cp.kernels[k]
        types = [p.type_annotation or p.checked_type_ for p in fn.params]
        label = "+".join(sorted({getattr(c, "name", "?") for c in _ops(fn)})) or f"group{k}"
        from relay_ir.runtime import relax_shapes
        if self.cuda and not all(_is_static(t) for t in types):
            raise _unsupported(f"the fused group {label} with `?` or symbolic dimensions on "
                               f"target cuda", fn.span)
        if not all(_is_static(t) for t in types):
            # NOTE: one kernel over symbolic shapes (or a host group): runtime.relax_shapes
            got = self.kernels[k] = relax_shapes.dynamic_kernel(self, k, fn, types, label)
            return got
        try:
            lowered = self.exe._lower(fn, types)
        except LoweringError as e:
            if "has no TVM compute" not in e.message and not isinstance(e, DynamicShapeError):
                raise _unsupported(f"the fused group {label}: {e.message}", fn.span) from None
            # NOTE: no TVM compute, or a value-dependent output shape: run on the host
            if self.cuda:
                raise _unsupported(f"the fused group {label} on target cuda ({e.message}: it "
                                   f"would run on the host)", fn.span) from None
            got = self.kernels[k] = relax_shapes.host_kernel(self, k, fn, types, label,
                                                             e.message)
            return got
        from relay_ir.runtime.executor import kernel_request
        req = self._fetched.get(k)
        if req is None:
            req = kernel_request(lowered, self.exe.target)
            self.exe.cache.get([req], self.exe.target)
        key = req.key
        module = self.exe.cache.modules.get(key)
        got = self.kernels[k] = _Kernel(
            "k_" + key, module, [np.array(c, order="C") for c in lowered.constants],
            [(tuple(int(d) for d in t.concrete_shape), t.dtype) for t in lowered.out_types],
            _result_struct(lowered.result_type), types, "+".join(lowered.ops) or label, req)
        return got

    def alloc_error(self) -> DiagnosticError:
        """The diagnostic of a failed output allocation (the VM does not say which: the
        largest output of the program is named)."""
        from relay_ir.runtime.executor import alloc_failed
        best = None
        for k, kern in self.kernels.items():
            for shape, dtype in kern.outs:     # NOTE: static kernels only (dyn: no outs)
                n = int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
                if best is None or n > best[0]:
                    best = (n, kern.label, shape, dtype, self.cp.kernels[k].span)
        if best is None:
            return DiagnosticError("executor='relax': out of memory")
        return alloc_failed(best[1], best[2], best[3], best[4])

    def constant_value(self, key: tuple) -> Any:
        import tvm
        kind = key[0]
        if kind == "const":
            return tvm.runtime.tensor(np.array(self.cp.consts[key[1]], order="C"))
        if kind == "kconst":
            return tvm.runtime.tensor(key[2])
        if kind == "shape":
            return tvm.runtime.ShapeTuple(list(key[1]))
        if kind == "str":
            return key[1]
        if kind == "depth":
            # NOTE: the executable keeps its own copy of a constant: the entry wrappers reset
            # this copy (rly_depth_reset) at the start of every run. The link step merges
            # constants of equal content, so the counter starts out as a value no program
            # holds (a zeros constant of the program would otherwise be the counter)
            return tvm.runtime.tensor(np.array(_COUNTER_INIT, np.int64))
        return relax_plan.constant_value(key)

    def precompile(self) -> None:
        """Compile every static group's kernel in one batch through the kernel cache (one
        library, one link), before :meth:`kernel` asks for them one by one (memory hits)."""
        from relay_ir.runtime.executor import kernel_request
        reqs = []
        for k, fn in enumerate(self.cp.kernels):
            types = [p.type_annotation or p.checked_type_ for p in fn.params]
            if not all(_is_static(t) for t in types):
                continue
            try:
                lowered = self.exe._lower(fn, types)
            except LoweringError:
                continue           # NOTE: a host group, or an error kernel() reports
            reqs.append((k, kernel_request(lowered, self.exe.target)))
        if len(reqs) > 1:
            self.exe.cache.get([r for _, r in reqs], self.exe.target)
            self._fetched = dict(reqs)     # NOTE: kernel() takes these without a second get

    def build(self) -> Any:
        """Emit every global (and the inner functions they call); link; return the VM."""
        import tvm
        from tvm import relax
        from tvm.relax import vm_build
        self.precompile()
        for name in self.cp.mod:
            self.name_of(self.cp.compile_global(name))
        for cf in self.cp.functions:
            for ins in cf.code:
                if ins[0] == "closure" and ins[4]:
                    self.selfs.setdefault(ins[2], set()).update(ins[4])
        self.groups = relax_plan.tail_groups(self)
        self.tramp = relax_plan.needs_trampoline(self)
        emitters = []
        while self.todo:
            fidx = self.todo.pop()
            em = _Emitter(self, fidx)
            em.run()
            self.plan_stats[fidx] = relax_plan.plan_memory(em, True if fidx in self.groups
                                                           else None)
            emitters.append(em)
        eb = relax.ExecBuilder()
        vm_func = relax.exec_builder.VMFuncKind.VM_FUNC
        for em in emitters:
            eb.declare_function(self.names[em.index], vm_func)
        for name in relax_plan.declarations(self, emitters):
            eb.declare_function(name, vm_func)
        for name in self.con_fns.values():
            eb.declare_function(name, vm_func)
        consts: dict = {}
        relax_plan.write_functions(self, eb, emitters, consts)
        for con, name in self.con_fns.items():
            n = len(self.cp.cons[con].inputs)
            with eb.function(name, n):
                eb.emit_call("vm.builtin.make_tuple", [eb.imm(con)] + [eb.r(i) for i in range(n)],
                             eb.r(n))
                if self.tramp:
                    # NOTE: a function value's result is (0, value) (relax_plan)
                    eb.emit_call("vm.builtin.make_tuple", [eb.imm(0), eb.r(n)], eb.r(n + 1))
                    n += 1
                eb.emit_ret(eb.r(n))
        # the program's own constants, returned together: the runner copies a result that is
        # one of them (the VM hands out the constant itself; a caller writing into it would
        # change later runs)
        eb.declare_function(_CONSTANTS, vm_func)
        with eb.function(_CONSTANTS, 0):
            held = [c for k, c in consts.items() if k[0] == "const"]
            eb.emit_call("vm.builtin.make_tuple", held, eb.r(0))
            eb.emit_ret(eb.r(0))
        eb.declare_function(_RELEASE, vm_func)
        with eb.function(_RELEASE, 0):
            eb.emit_call("vm.builtin.make_tuple", [], eb.r(0))
            eb.emit_ret(eb.r(0))
        if self.static_depth:
            from relay_ir.runtime import relax_cuda as rc

            def reset(limits: Any) -> None:
                eb.emit_call(rc.DEPTH_FN, [eb.imm(rc.RESET), eb.imm(0), limits])
            plain = eb.imm(PLAIN_DEPTH)
        else:
            depth = consts.get(("depth",))
            if depth is None:
                depth = consts[("depth",)] = eb.convert_constant(
                    self.constant_value(("depth",)))

            def reset(limits: Any) -> None:
                eb.emit_call(_RESET, [depth, limits])
            plain = eb.convert_constant(tvm.runtime.tensor(np.array([0, PLAIN_DEPTH],
                                                                    np.int64)))
        for name in self.cp.mod:
            # the entry wrapper: (limits, args...) -> reset the depth counter, call the global
            fidx = self.cp.compile_global(name)
            n = self.cp.functions[fidx].nparams
            eb.declare_function(_ENTRY + name, relax.exec_builder.VMFuncKind.VM_FUNC)
            with eb.function(_ENTRY + name, n + 1):
                reset(eb.r(0))
                eb.emit_call(self.names[fidx], [eb.r(i + 1) for i in range(n)], eb.r(n + 1))
                eb.emit_ret(eb.r(n + 1))
            # the plain entry, named after the global: (args...) -> the same with the
            # calling thread's default limit (how plain TVM calls an exported module)
            eb.declare_function(name, relax.exec_builder.VMFuncKind.VM_FUNC)
            with eb.function(name, n, list(self.cp.functions[fidx].params)):
                reset(plain)
                eb.emit_call(self.names[fidx], [eb.r(i) for i in range(n)], eb.r(n))
                eb.emit_ret(eb.r(n))
        for n in range(_INVOKE_ARITY + 1):
            # (limits, closure, args...) -> reset the depth counter, invoke the closure: how
            # Python calls a function value the program returned
            name = f"{_INVOKE}{n}"
            eb.declare_function(name, relax.exec_builder.VMFuncKind.VM_FUNC)
            relax_plan.write_invoke(emitters[0], eb, name, n, consts)
        libs = [self.depth_library()]
        seen = {id(libs[0])}
        for kern in self.kernels.values():
            for module in (kern.dyn.modules if kern.dyn is not None else [kern.module]):
                if module is None:
                    raise DiagnosticError(f"executor='relax': the kernel {kern.symbol} has no "
                                          f"loaded module")
                if id(module) not in seen:
                    seen.add(id(module))
                    libs.append(module)
        # NOTE: _vmlink is TVM's private link step (what relax.build does); used only here
        executable = vm_build._vmlink(eb, tvm.target.Target("llvm"), None, ext_libs=libs)
        self.executable = executable      # NOTE: relax_export writes its bytecode out
        # NOTE: the link step adds an empty "c" module, which would make VirtualMachine
        # export and reload the whole executable (impossible for kernels loaded from the
        # cache's libraries); every function the bytecode names is already runnable
        if self.cuda:
            from relay_ir.runtime.relax_cuda import make_vm
            return make_vm(executable.mod)      # NOTE: None without a GPU
        return relax.VirtualMachine(executable.mod, tvm.cpu())


def _ops(fn: Any) -> list:
    from relay_ir.expr import Call, Op
    from relay_ir.traversal import post_order
    return [n.op for n in post_order(fn.body) if type(n) is Call and type(n.op) is Op]


# ============================================================================ running
class RelaxExecutable:
    """A module built with ``runtime.build(...)``: ``exe(*args, entry="main")`` runs an entry
    on TVM's Relax VM; numpy arrays and tuples in and out."""

    def __init__(self, exe: Any):
        self.module = exe.module
        self.entry = exe.entry
        self.target = exe.target
        self._backend = RelaxBackend(exe)
        self.vm = self._backend.build()
        self._cons = self._backend.cp.cons
        self._init_state()

    def _init_state(self) -> None:
        """The per-executable run state (shared with the loaded modules of relax_export)."""
        self._const_ptrs: frozenset | None = None
        self._const_keep: Any = None
        self._funcs: dict[str, Any] = {}
        self._static: dict[str, tuple] = {}     # entry -> (function, shapes, dtypes)
        self._con_ids = {c.name_hint: k for k, c in enumerate(self._cons)}
        self._ref_args: list[tuple[RefValue, Any]] = []   # (argument, its cell) of a call
        self._deep: set[Any] = set()     # entries that ran past MAIN_DEPTH once
        # NOTE: a program whose closures capture function values can build chains of
        # closures (backpropagators) whose release recurses in C++: it always runs on the
        # large-stack thread (relax_plan.builds_chains)
        self._all_deep = relax_plan.builds_chains(self._backend)
        self._cuda = self._is_cuda()   # tensors on the GPU (runtime.relax_cuda)
        self._static_depth = bool(getattr(self._backend, "static_depth", False))
        import tvm_ffi
        self._from_dlpack = tvm_ffi.from_dlpack
        self._limits: dict[int, Any] = {}
        self._release: Any = False       # the VM's _RELEASE (None: a module file without it)
        import tvm
        self._tensor_type = tvm.runtime.Tensor

    def _is_cuda(self) -> bool:
        from relay_ir.runtime.lower_tvm import is_cuda
        return is_cuda(self.target)

    def _func(self, entry: str) -> Any:
        f = self._funcs.get(entry)
        if f is None:
            if entry not in self.module:
                raise DiagnosticError(f"there is no global function @{entry} (globals: "
                                      f"{', '.join('@' + n for n in self.module)})")
            f = self._funcs[entry] = self.vm[_ENTRY + entry]
        return f

    def _entry_types(self, entry: str) -> tuple[Any, list, list[str] | None]:
        """(the entry's Function or None, its parameter types, its parameter names)."""
        fn = self.module[entry]
        return fn, [p.checked_type_ or p.type_annotation for p in fn.params], None

    def num_compiled(self) -> int:
        """The number of compiled kernels the executable links."""
        return len(self._backend.kernels)

    # ------------------------------------------------------------------ inspection (API)
    @property
    def cache(self) -> Any:
        """The kernel cache the kernels were compiled through."""
        return self._backend.exe.cache

    def num_kernels(self) -> int:
        """The number of **distinct fused groups** the executable runs as kernels: static and
        symbolic TVM kernels and host groups (every group is compiled at build time, whatever
        the entry or the control flow). For a straight-line program (each group called once
        per run) it is also the number of kernel calls per run; groups that lower to the same
        code share one library but count once each."""
        return len(self._backend.kernels)

    def host_kernels(self) -> list[str]:
        """Labels (``host:`` + the operators) of the fused groups that run on the host with
        the numpy reference implementations (no TVM compute, or a value-dependent output
        shape), in group order."""
        return [f"host:{kern.label}" for _, kern in sorted(self._backend.kernels.items())
                if kern.dyn is not None and kern.dyn.mode == "host"]

    def kernel_sources(self) -> list[str]:
        """The generated source of each TVM kernel, one string per fused group in group order:
        CUDA C for ``target="cuda"``, else LLVM IR (host groups have none; a symbolic group's
        variants are joined). A kernel the kernel cache loaded from its disk store (a shared
        library) has no source left and is skipped."""
        kernels = getattr(self._backend, "kernels", None)
        if kernels is None:
            raise DiagnosticError("kernel_sources(): a loaded module keeps no kernel sources "
                                  "(build the program to see them)")
        out = []
        for _, kern in sorted(kernels.items()):
            mods = kern.dyn.modules if kern.dyn is not None else [kern.module]
            texts = []
            for m in mods:
                if m is None:
                    continue
                try:
                    if self._cuda:
                        from relay_ir.runtime.relax_cuda import kernel_source
                        text = kernel_source(m)
                    else:
                        text = m.inspect_source("ll")
                except Exception:        # NOTE: a library loaded from disk keeps no source
                    text = ""
                if text:
                    texts.append(text)
            if texts:
                out.append("\n".join(texts))
        return out

    def export_library(self, path: str, entry: str | None = None,
                       batched: bool = False) -> None:
        """Write one standard TVM shared library (bytecode + kernels) with relay_ir's trailer:
        ``tvm.runtime.load_module`` + ``relax.VirtualMachine`` run it without relay_ir;
        ``runtime.load_module`` adds numpy and the argument checks (``runtime.relax_export``).
        ``batched=True`` also writes the program and the batched kernels ``run_batch`` has
        compiled so far, so that ``run_batch`` works on the loaded module (docs/batching.md).
        """
        from relay_ir.runtime.relax_export import export_library
        export_library(self, path, entry, batched=batched)

    def run_batch(self, arg_tuples: Sequence[Sequence[Any]], entry: str | None = None) -> list:
        """Run ``entry`` on every tuple of arguments, the instances side by side, and return
        the results in order (the value conventions of ``exe(*args)``). Kernel calls of the
        instances that share a fused group and signature run as one call of the group's
        batched kernel (``runtime.batching``; ``docs/batching.md``). An empty list gives
        ``[]``; bad arguments raise the ``DiagnosticError`` of ``exe()``, naming the instance.
        """
        from relay_ir.runtime.batching import run_batch
        return run_batch(self, arg_tuples, entry)

    def batch_stats(self) -> dict[str, int]:
        """Counters of the last :meth:`run_batch`: ``instance_calls`` (the kernel calls the
        instances made), ``kernel_calls`` (the calls actually made: a batched call counts
        once), ``batched_calls`` (calls of batched kernels), ``batched_instances`` (the instance
        calls they served) and ``groups`` (agenda picks)."""
        runner = getattr(self, "_batch_runner", None)
        return dict(runner.stats) if runner is not None else {}

    def _arg(self, v: Any) -> Any:
        """A checked argument as the VM takes it: tensors zero-copy, tuples, ADT values as
        ``(tag, fields...)``, references as one-element ``ffi.List`` (iterative)."""
        import tvm_ffi
        con_ids = self._con_ids
        wrap = self._from_dlpack
        results: list[Any] = []
        stack: list[tuple[Any, bool]] = [(v, False)]
        while stack:
            x, done = stack.pop()
            t = type(x)
            if t is np.ndarray or isinstance(x, np.generic):
                if t is not np.ndarray or not x.flags.c_contiguous or not x.flags.writeable:
                    x = np.array(x, order="C")
                if self._cuda:
                    # NOTE: uploaded here (the VM would copy a host tensor in a tuple, but not
                    # one in a reference cell)
                    from relay_ir.runtime.relax_cuda import to_device
                    results.append(to_device(x))
                    continue
                if x.size == 0:
                    # NOTE: numpy gives an empty array zero strides (a kernel wants compact)
                    import tvm
                    results.append(tvm.runtime.empty(x.shape, x.dtype))
                    continue
                results.append(wrap(x, require_alignment=0, require_contiguous=True))
                continue
            kids = _in_kids(x)
            if not done and kids:
                stack.append((x, True))
                stack.extend((c, False) for c in reversed(kids))
                continue
            n = len(kids)
            vals = results[len(results) - n:]
            del results[len(results) - n:]
            if t is tuple:
                results.append(tuple(vals))
            elif isinstance(x, ADTValue):
                results.append((con_ids[x.constructor.name_hint], *vals))
            elif isinstance(x, RefValue):
                cell = tvm_ffi.List(vals)
                self._ref_args.append((x, cell))
                results.append(cell)
            else:
                raise DiagnosticError(f"executor='relax' does not take a {type(x).__name__} "
                                      f"argument yet")
        return results[0]

    def _constant_ptrs(self) -> frozenset:
        """Data addresses of the executable's program constants (read once)."""
        if self._const_ptrs is None:
            held = self.vm[_CONSTANTS]()
            self._const_keep = held      # NOTE: the addresses stay valid while held
            self._const_ptrs = frozenset(np.from_dlpack(c).ctypes.data for c in held)
        return self._const_ptrs

    def _result(self, v: Any) -> Any:
        """A VM value as the interpreter's (numpy arrays, tuples, ADTValue, RefValue)."""
        if type(v) is self._tensor_type and not self._cuda:
            # NOTE: the common case (one tensor on the CPU) without the walk below
            a = np.from_dlpack(v)
            return a.copy() if v.data_ptr() in self._constant_ptrs() else a
        import tvm_ffi
        cons = self._cons
        tensor = self._tensor_type
        ref_cell, array = tvm_ffi.List, tvm_ffi.Array
        results: list[Any] = []
        # (value, None) to convert; (None, (n, kind, tag)) to assemble the last n results:
        # kind 0 a reference cell, 1 an ADT value with constructor tag, 2 a tuple
        stack: list[tuple[Any, Any]] = [(v, None)]
        while stack:
            x, info = stack.pop()
            if info is not None:
                n, kind, tag = info
                vals = results[len(results) - n:] if n else []
                del results[len(results) - n:]
                results.append(RefValue(vals[0]) if kind == 0 else
                               ADTValue(cons[tag], vals) if kind == 1 else tuple(vals))
                continue
            if isinstance(x, tensor):
                if self._cuda:
                    results.append(x.numpy())       # NOTE: a device-to-host copy of its own
                    continue
                # NOTE: zero-copy: the array keeps the VM's freshly allocated tensor alive;
                # a program constant is copied. The address comes from the tensor
                # (data_ptr(), with its byte offset: 0.2 us) rather than numpy's ctypes.data
                # (1.3-2.7 us, a third of a small program's call)
                a = np.from_dlpack(x)
                results.append(a.copy() if x.data_ptr() in self._constant_ptrs() else a)
                continue
            tag = None
            if isinstance(x, ref_cell):
                kids: list = [x[0]]
                kind = 0
            elif isinstance(x, array):
                # NOTE: one slice: iterating an ffi Array costs two FFI calls and a Python
                # index check per element
                kids = x[:]
                kind = 2
                if kids and type(kids[0]) is int:
                    tag, kids, kind = kids[0], kids[1:], 1
            else:
                results.append(x if x is None or isinstance(x, (bool, int, float)) else
                               _VMClosure(self, x))
                continue
            stack.append((None, (len(kids), kind, tag)))
            stack.extend((c, None) for c in reversed(kids))
        return results[0]

    def __call__(self, *args: Any, entry: str | None = None) -> Any:
        if self.vm is None:          # NOTE: target cuda on a machine without a GPU
            from relay_ir.runtime.relax_cuda import no_gpu_error
            raise no_gpu_error()
        if self._static_depth:
            from relay_ir.runtime.relax_cuda import RUN_LOCK
            with RUN_LOCK:     # NOTE: one depth counter per process (runtime.relax_cuda)
                return self._call_entry(args, entry)
        return self._call_entry(args, entry)

    def _call_entry(self, args: tuple, entry: str | None) -> Any:
        entry = entry or self.entry
        fast = self._static.get(entry)
        if fast is not None and len(args) == len(fast[1]):
            # NOTE: arrays of exactly the static parameter types pass check_arguments as they
            # are: the check is skipped (as on the dataflow fast path)
            f, shapes, dtypes = fast
            vals = []
            wrap = self._from_dlpack
            for a, sh, dt in zip(args, shapes, dtypes):
                if isinstance(a, np.generic):
                    a = np.array(a)             # NOTE: a numpy scalar of the exact dtype
                if type(a) is not np.ndarray or a.shape != sh or a.dtype != dt:
                    break
                fl = a.flags
                if not (fl.c_contiguous and fl.writeable):
                    break
                vals.append(wrap(a, require_alignment=0, require_contiguous=True))
            else:
                return self._call(f, vals)
        f = self._func(entry)
        fn, ptypes, names = self._entry_types(entry)
        checked = check_arguments(fn, ptypes, args, names)
        self._ref_args = []
        vals = [self._arg(v) for v in checked]
        if all(isinstance(t, TensorType) and t.is_static for t in ptypes):
            self._static[entry] = (f, [tuple(t.shape) for t in ptypes],  # type: ignore
                                   [np.dtype(t.dtype) for t in ptypes])  # type: ignore
        if not self._ref_args:
            return self._call(f, vals)
        # NOTE: references passed in: the run writes to cells of its own, and a retry on the
        # large-stack thread starts from fresh cells; the final contents are written back
        try:
            if self._all_deep or f in self._deep:
                raise _DepthLimit()
            out = self._run(f, vals, MAIN_DEPTH)
        except _DepthLimit:
            self._deep.add(f)
            self._ref_args = []
            vals = [self._arg(v) for v in checked]
            out = self._run_deep(f, vals)
        for ref, cell in self._ref_args:
            ref.value = self._result(cell[0])
        self._ref_args = []
        return self._result(out)

    def _call(self, f: Any, vals: list) -> Any:
        if self._all_deep or f in self._deep:
            return self._result(self._run_deep(f, vals))
        try:
            out = self._run(f, vals, MAIN_DEPTH)
        except _DepthLimit:
            # NOTE: this entry goes to the large-stack thread from now on (a handoff costs
            # tens of microseconds; running to the limit and unwinding costs more)
            self._deep.add(f)
            return self._result(self._run_deep(f, vals))
        res = self._result(out)
        if _tensor_bytes(res) >= RELEASE_BYTES:
            del out
            self._release_last()
        return res

    def _release_last(self) -> None:
        """Make the VM drop its reference to the value it returned last (``_RELEASE``), so
        that the result's storage goes back to the pool when the caller drops the result.
        Not for programs whose results are released on the large-stack thread."""
        rel = self._release
        if rel is False:
            try:
                rel = self.vm[_RELEASE]
            except Exception:     # NOTE: a module file written before _RELEASE existed
                rel = None
            self._release = rel
        if rel is not None:
            rel()

    def _run(self, f: Any, vals: list, limit: int) -> Any:
        if self._static_depth:
            lim: Any = limit            # NOTE: rly_depth takes the limit as an int
        else:
            lim = self._limits.get(limit)
            if lim is None:
                lim = self._limits[limit] = self._from_dlpack(np.array([0, limit], np.int64))
        try:
            return f(lim, *vals)
        except Exception as e:   # NOTE: the depth assertion arrives as a TVM error
            from relay_ir.runtime.relax_shapes import run_error
            err = run_error(e, self._backend)
            if err is not None:
                raise err from None
            if _DEPTH_MSG in str(e):
                raise _DepthLimit() from None
            if _MATCH_MSG in str(e):
                site = re.search(re.escape(_MATCH_MSG) + r" \(match \d+\)", str(e))
                span = (getattr(self._backend, "_match_spans", {}).get(site.group(0))
                        if site else None)
                raise DiagnosticError("executor='relax': match failed: no clause matched the "
                                      "value", span) from None
            if "bad_alloc" in str(e) or isinstance(e, MemoryError):
                raise self._backend.alloc_error() from None
            raise DiagnosticError(f"executor='relax': the program failed in the VM: "
                                  f"{type(e).__name__}: {e}") from None

    def _run_deep(self, f: Any, vals: list) -> Any:
        limit = DEEP_DEPTH
        ok, v = _deep_worker().run(lambda: self._run(f, vals, limit))
        if ok:
            return v
        if isinstance(v, _DepthLimit):
            raise DiagnosticError(
                f"executor='relax': the program recursed deeper than {limit:,} non-tail "
                f"calls (the relax executor's depth limit; tail calls of a function to itself "
                f"do not count)") from None
        raise v


class _DeepWorker:
    """One long-lived thread with a large stack that runs deep programs for every caller.

    Long-lived because TVM's per-thread state (its memory pools) starts cold on a new thread:
    a fresh thread per call doubled the time of a 100-step gradient loop. A handoff costs tens
    of microseconds.
    """

    def __init__(self) -> None:
        import queue
        self.jobs: Any = queue.SimpleQueue()
        self.lock = threading.Lock()          # one job at a time (the VM is not reentrant)
        old = threading.stack_size()
        threading.stack_size(max(DEEP_STACK, DEEP_DEPTH * FRAME_BYTES))
        try:
            self.thread = threading.Thread(target=self._loop, name="relay_ir-relax-deep",
                                           daemon=True)
            self.thread.start()
        finally:
            threading.stack_size(old)

    def _loop(self) -> None:
        while True:
            job, box, done = self.jobs.get()
            try:
                box.append((True, job()))
            except BaseException as e:      # NOTE: handed back to the calling thread
                box.append((False, e))
            done.set()

    def run(self, job: Any) -> tuple[bool, Any]:
        """``(True, job())`` or ``(False, the exception)``, run on the worker thread."""
        box: list[Any] = []
        done = threading.Event()
        with self.lock:
            self.jobs.put((job, box, done))
            done.wait()
        return box[0]


_WORKER: list[_DeepWorker] = []
_WORKER_LOCK = threading.Lock()


def _deep_worker() -> _DeepWorker:
    with _WORKER_LOCK:
        if not _WORKER or _WORKER[0].stack != max(DEEP_STACK, DEEP_DEPTH * FRAME_BYTES):
            w = _DeepWorker()
            w.stack = max(DEEP_STACK, DEEP_DEPTH * FRAME_BYTES)
            _WORKER[:] = [w]
        return _WORKER[0]


def _tensor_bytes(v: Any) -> int:
    """The bytes of the numpy arrays in a result and in its top-level tuple (cheap: results
    nested deeper are released by the next call, as before)."""
    t = type(v)
    if t is np.ndarray:
        return v.nbytes
    if t is tuple:
        return sum(x.nbytes for x in v if type(x) is np.ndarray)
    return 0


class _DepthLimit(Exception):
    pass


def _in_kids(x: Any) -> Any:
    if type(x) is tuple:
        return x
    if isinstance(x, ADTValue):
        return x.fields
    if isinstance(x, RefValue):
        return (x.value,)
    return ()


class _VMClosure:
    """A function value returned by the VM: calling it runs it on the VM (numpy in and out)."""

    def __init__(self, exe: RelaxExecutable, obj: Any):
        self.exe = exe
        self.obj = obj

    def __del__(self) -> None:
        if getattr(self, "obj", None) is not None and self.exe._all_deep:
            try:
                relax_plan.release_on(_deep_worker(), self)
            except Exception:    # NOTE: at interpreter exit no thread can start: freed here
                pass

    def __call__(self, *args: Any) -> Any:
        exe = self.exe
        if len(args) > _INVOKE_ARITY:
            raise DiagnosticError(f"executor='relax': a function value returned by the program "
                                  f"takes at most {_INVOKE_ARITY} arguments from Python")
        exe._ref_args = []
        vals = [exe._arg(np.asarray(a) if not isinstance(a, (tuple, ADTValue, RefValue))
                         else a) for a in args]
        if exe._ref_args:
            raise DiagnosticError("executor='relax': a function value returned by the program "
                                  "does not take references from Python")
        if exe._static_depth:
            from relay_ir.runtime.relax_cuda import RUN_LOCK
            with RUN_LOCK:
                return exe._call(exe.vm[f"{_INVOKE}{len(args)}"], [self.obj, *vals])
        return exe._call(exe.vm[f"{_INVOKE}{len(args)}"], [self.obj, *vals])


__all__ = ["RelaxExecutable", "RelaxUnsupportedError", "MAIN_DEPTH", "DEEP_DEPTH"]
