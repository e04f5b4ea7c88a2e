"""Symbolic shapes, shape functions and host functions for the Relax VM executor.

``runtime.relax_vm`` compiles a fused group whose parameter types are all static to one
kernel of those shapes (as before). The groups it cannot compile that way come here:

**Symbolic kernels** (parameter types with ``?`` or named symbolic dimensions). Every ``?``
(and every compound dimension such as ``n + 1``) of a parameter type becomes a fresh shape
variable; named dimensions (``Tensor[(n, 3), float32]``) stay shared by name. The operators'
type relations run on those symbolic types (the same relations the type checker uses), which
gives each output dimension as a polynomial of the input dimensions. The group is lowered
once with ``tvm.tirx.Var`` dimensions (one kernel serves every shape) and scheduled with the
CPU schedules, whose loops take symbolic extents (tails are guarded).

At run time the bytecode computes the output shapes itself, with no Python and no compiler:

* ``vm.builtin.alloc_shape_heap`` makes an int64 heap for the group's shape variables;
* ``vm.builtin.match_shape`` on each argument stores a variable the first time it is seen and
  checks it on every later occurrence and every static dimension of a partly symbolic type (a
  mismatch -- arguments that the type says agree but do not -- is a ``DiagnosticError``
  naming the group, the argument and the dimension);
* output dimensions that are expressions (``2*n``, ``n + m``) are computed by a tiny TIR
  *shape function* of the group that reads and writes the heap;
* ``vm.builtin.make_shape`` builds each output shape, ``alloc_storage`` / ``alloc_tensor``
  allocate it, and the kernel runs.

**Host functions.** A group with an operator that has no TVM compute, a value-dependent
output shape (``dyn.reshape``, ``dyn.*``), or an output dimension the relations cannot express
in terms of the inputs (a relation that needs two ``?`` dimensions to be equal, say) runs on
the host: the bytecode calls the TVM global function ``relay_ir.host.group`` (registered by
this module) with the group's key and its arguments, and relay_ir runs the group's body with
the operators' numpy reference implementations (the interpreter's code, so the interpreter's
values). Such an executable runs only through relay_ir: the key is a hash of the group's text
(:func:`group_text`); ``export_library`` writes the texts into the module file and
``runtime.load_module`` registers them again (:func:`register_loaded_groups`), so plain TVM
cannot run such a file (it finds no ``relay_ir.host.group``).
"""
from __future__ import annotations

import hashlib
import itertools
import re
import threading
import weakref
from typing import Any, Sequence

import numpy as np

from relay_ir.errors import DiagnosticError, LoweringError
from relay_ir.ty import AnyDim, DimExpr, ShapeVar, TensorType, TupleType, Type

HOST_FUNC = "relay_ir.host.group"
MISMATCH = "relay_ir: shape mismatch"
HOST_FAILED = "relay_ir: host function failed"

# vm.builtin.match_shape / make_shape codes (tvm/runtime/vm/builtin.h)
_ASSERT_IMM, _STORE, _NOOP, _ASSERT_LOAD = 0, 1, 2, 3
_USE_IMM, _LOAD = 0, 1


class DynInfo:
    """How a group that is not a static kernel runs (attached to relax_vm's kernel record).

    ``mode``: ``"symbolic"`` (one kernel for every shape) or ``"host"``; ``reason``: why a
    group runs on the host.
    """

    def __init__(self, mode: str, reason: str = ""):
        self.mode = mode
        self.reason = reason
        self.key = ""                                   # host: the group's key
        self.heap = 0                                   # symbolic: heap slots
        self.checks: list[list[tuple[int, int]] | None] = []   # per flattened input
        self.shape_symbol = ""                          # the shape function, if any
        self.outs: list[tuple[list[tuple[int, int]], str]] = []  # (make_shape codes, dtype)
        self.modules: list[Any] = []                    # libraries to link
        self.cache_keys: dict[int, str] = {}            # id(module) -> its kernel-cache key
        self.requests: dict[int, Any] = {}              # id(module) -> its kernel request
        self.prim_func: Any = None                      # the unscheduled symbolic PrimFunc
        self.messages: list[str] = []                   # per flattened input: mismatch text
        # speculation: pairs of heap slots that must hold equal dims for the kernel to run
        # (else the group runs on the host: key); guard_symbol computes heap[0]
        self.guard: list[tuple[int, int]] = []
        self.guard_symbol = ""
        # small shapes: a serial variant of the kernel, chosen when small_symbol sets heap[0]
        self.serial_symbol = ""
        self.small_symbol = ""


# ============================================================================ building
class _NoKernel(Exception):
    """The group cannot be a symbolic kernel (the message says why)."""


def dynamic_kernel(backend: Any, k: int, fn: Any, types: list[Type], label: str) -> Any:
    """The kernel record of fused group ``k`` whose parameter ``types`` are not all static:
    a symbolic kernel when the group allows one, else a host function."""
    try:
        return _symbolic_kernel(backend, k, fn, types, label)
    except _NoKernel as e:
        return host_kernel(backend, k, fn, types, label, str(e))


def host_kernel(backend: Any, k: int, fn: Any, types: list[Type], label: str,
                reason: str) -> Any:
    """The kernel record of group ``k`` run on the host by ``relay_ir.host.group``."""
    from relay_ir.op import get_opdef
    from relay_ir.runtime.relax_vm import _Kernel, _ops
    for op in _ops(fn):
        if get_opdef(op.name).impl is None:
            raise LoweringError(f"operator `{op.name}` has neither a TVM compute nor a "
                                f"reference implementation", fn.span)
    info = DynInfo("host", reason)
    info.key = _host_group(backend, k, fn, label)
    kern = _Kernel(HOST_FUNC, None, [], [], 0, types, label)
    kern.dyn = info
    return kern


def _host_group(backend: Any, k: int, fn: Any, label: str) -> str:
    """The key of a new host group of fused group ``k`` (alive as long as ``backend``).

    The key names the group's text (:func:`group_text`), so that an exported module's
    bytecode finds the group again in another process (:func:`register_loaded_groups`); groups
    of equal text compute the same values, so any live one of a key serves it."""
    _register()
    group = _HostGroup(backend, k, label)
    text = group_text(fn)
    key = "h" + hashlib.sha256(text.encode()).hexdigest()[:32]
    _add_group(key, group)
    backend.__dict__.setdefault("_host_groups", []).append(group)   # keeps it alive
    backend.__dict__.setdefault("_host_texts", {})[key] = [label, text]
    return key


def group_text(fn: Any) -> str:
    """A fused group as the ``@main`` of a module in Relay text (its parameters, body and
    constants; what an exported module carries to run the group on the host elsewhere)."""
    from relay_ir.expr import Function
    from relay_ir.module import IRModule
    from relay_ir.printer import astext
    # the shape variables of the parameter types become type parameters (a group function
    # uses its caller's; text must declare them)
    svars: dict = {v: None for v in fn.type_params}
    stack = [p.checked_type_ or p.type_annotation for p in fn.params]
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(reversed(t.fields))
        elif isinstance(t, TensorType):
            for d in t.shape:
                if isinstance(d, ShapeVar):
                    svars.setdefault(d, None)
                elif isinstance(d, DimExpr):
                    for mono, _ in d.terms:
                        for v in mono:
                            svars.setdefault(v, None)
    main = Function(tuple(fn.params), fn.body, fn.ret_type, tuple(svars))
    return astext(IRModule({"main": main}))


def _add_group(key: str, group: Any) -> None:
    with _LOCK:
        live = _GROUPS.get(key)
        if live is None:
            live = _GROUPS[key] = weakref.WeakSet()
        live.add(group)


class _LoadedHostGroup:
    """A host group of a loaded module file: its text parsed and run by the interpreter."""

    def __init__(self, key: str, label: str, text: str):
        from relay_ir.parser import parse
        self.label = label
        self.span = None
        self.mod = parse(text, f"<host group {label}>")
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        from relay_ir.runtime.interpreter import evaluate
        self.calls += 1
        return _to_vm(evaluate(self.mod, *[_to_numpy(a) for a in args], check_types=False))


def register_loaded_groups(groups: dict) -> list:
    """Register the host groups an exported module carries (``{key: [label, text]}``);
    returns them (the loaded module holds them: they live as long as it does)."""
    _register()
    out = []
    for key, (label, text) in groups.items():
        g = _LoadedHostGroup(str(key), str(label), str(text))
        _add_group(str(key), g)
        out.append(g)
    return out


def _symbolic_kernel(backend: Any, k: int, fn: Any, types: list[Type], label: str) -> Any:
    import tvm
    from relay_ir.runtime.kernel_cache import KernelRequest
    from relay_ir.runtime.lower_tvm import (flatten_type, infer_group_types, lower_group,
                                            schedule)
    from relay_ir.runtime.relax_vm import _Kernel
    from relay_ir.runtime.vm import _result_struct
    exe = backend.exe
    # parameter types over shape variables only: '?' and compound dims get fresh variables
    fresh = itertools.count()
    axis_of: dict[ShapeVar, int] = {}
    sym_types = [_with_vars(t, fresh, axis_of) for t in types]
    slots: dict[ShapeVar, int] = {}
    tir_vars: dict[ShapeVar, Any] = {}
    info = DynInfo("symbolic")
    leaves = []
    for t in sym_types:
        leaves.extend(flatten_type(t))
    for i, leaf in enumerate(leaves):
        codes: list[tuple[int, int]] = []
        for d in leaf.shape:
            if isinstance(d, int):
                codes.append((_ASSERT_IMM, d))
            elif d in slots:
                codes.append((_ASSERT_LOAD, slots[d]))
            else:
                slots[d] = len(slots) + 1          # NOTE: slot 0 holds the guard's flag
                tir_vars[d] = tvm.tirx.Var(_ident(d.name, slots[d]), "int64")
                codes.append((_STORE, slots[d]))
        static = all(c == _ASSERT_IMM for c, _ in codes)
        info.checks.append(None if static else codes)
        info.messages.append(f"{MISMATCH}: argument {i} of the fused group {label} (type "
                             f"{leaf!r})")
        backend.__dict__.setdefault("_spans", {}).setdefault(info.messages[-1], fn.span)
    try:
        result_type = infer_group_types(fn, sym_types)[id(fn.body)]
    except DiagnosticError as e:
        # NOTE: typically two '?' dims that the relation cannot broadcast (add of two
        # Tensor[(?, 3)]): speculate that the '?' dims of each axis (counted from the right)
        # are equal; a guard checks it at run time and runs the group on the host otherwise
        same: dict[int, ShapeVar] = {}
        subst: dict[ShapeVar, ShapeVar] = {}
        for v, ax in axis_of.items():
            subst[v] = same.setdefault(ax, v)
        info.guard = [(slots[v], slots[r]) for v, r in subst.items() if v is not r]
        sym_types = [_substitute(t, subst) for t in sym_types]
        try:
            if not info.guard:
                raise
            result_type = infer_group_types(fn, sym_types)[id(fn.body)]
        except DiagnosticError:
            raise _NoKernel(f"the type relations cannot give its output shapes from symbolic "
                            f"input shapes ({e.message})") from None
    computed: list[tuple[int, DimExpr]] = []
    for out in flatten_type(result_type):
        codes = []
        for d in out.shape:
            if isinstance(d, int):
                codes.append((_USE_IMM, d))
                continue
            if isinstance(d, AnyDim) or any(v not in slots for v in _vars(d)):
                raise _NoKernel(f"its output shape {out!r} is not a function of the input "
                                f"shapes")
            if isinstance(d, ShapeVar):
                codes.append((_LOAD, slots[d]))
            else:
                s = len(slots) + len(computed) + 1
                computed.append((s, d))
                codes.append((_LOAD, s))
        info.outs.append((codes, out.dtype))
    info.heap = len(slots) + len(computed) + 1

    def dim(d: Any) -> Any:
        if isinstance(d, int):
            return d
        if isinstance(d, ShapeVar):
            return tir_vars[d]
        if isinstance(d, DimExpr):          # a polynomial of the group's shape variables
            total: Any = None
            for mono, coef in d.terms:
                term: Any = tvm.tirx.const(coef, "int64")
                for v in mono:
                    term = term * tir_vars[v]
                total = term if total is None else total + term
            return total
        raise _NoKernel(f"dimension {d!r} has no TIR form")

    from relay_ir.op._te import fast_math, symbolic_dims
    try:
        with fast_math(exe.fast_math), symbolic_dims(dim):
            lowered = lower_group(fn, sym_types, dim=dim)
    except DiagnosticError as e:
        raise _NoKernel(e.message) from None
    except Exception as e:      # NOTE: a TOPI compute that needs static shapes
        raise _NoKernel(f"{type(e).__name__}: {e}") from None
    target = exe.target
    sig = ";".join(f"{t!r}" for t in lowered.in_types + lowered.out_types)
    sig += "|" + ";".join(f"{c.shape}:{c.dtype}" for c in lowered.constants) + "|symbolic"
    req = KernelRequest(lowered.prim_func, sig,
                        (lambda: schedule(lowered, target)), "+".join(lowered.ops),
                        make_fallback=(lambda: schedule(lowered, target, fallback=True)))
    try:
        exe.cache.get([req], target)
    except DiagnosticError as e:
        raise _NoKernel(f"its symbolic kernel does not compile: {e.message}") from None
    module = exe.cache.modules.get(req.key)
    info.prim_func = lowered.prim_func
    info.modules.append(module)
    info.cache_keys[id(module)] = req.key
    info.requests[id(module)] = req
    volume = _volume(lowered.prim_func, {v.name: slots[d] for d, v in tir_vars.items()})
    if volume is not None and any(mono for _, mono in volume):
        # NOTE: a static kernel below SERIAL_BELOW iterations runs on one thread (waking the
        # pool costs more than it saves); a symbolic kernel gets a serial twin, picked at run
        # time by its iteration count
        from relay_ir.runtime.schedules import SERIAL_BELOW
        req1 = KernelRequest(lowered.prim_func, sig + "|serial",
                             (lambda: schedule(lowered, target, serial=True)),
                             "+".join(lowered.ops),
                             make_fallback=(lambda: schedule(lowered, target, fallback=True,
                                                             serial=True)))
        try:
            exe.cache.get([req1], target)
        except DiagnosticError:
            req1 = None
        if req1 is not None:
            info.serial_symbol = "k_" + req1.key
            info.modules.append(exe.cache.modules.get(req1.key))
            info.cache_keys[id(info.modules[-1])] = req1.key
            info.requests[id(info.modules[-1])] = req1
            info.small_symbol = f"rly_small_{k}_{req.key[:16]}"
            info.modules.append(_small_function(info.small_symbol, info.heap, volume,
                                                SERIAL_BELOW))
    if computed:
        info.shape_symbol = f"rly_shape_{k}_{req.key[:16]}"
        info.modules.append(_shape_function(info.shape_symbol, info.heap, computed, slots))
    if info.guard:
        info.guard_symbol = f"rly_guard_{k}_{req.key[:16]}"
        info.modules.append(_guard_function(info.guard_symbol, info.heap, info.guard))
        info.key = _host_group(backend, k, fn, label)
    kern = _Kernel("k_" + req.key, module, [np.array(c, order="C") for c in lowered.constants],
                   [], _result_struct(lowered.result_type), types,
                   "+".join(lowered.ops) or label)
    kern.dyn = info
    return kern


def _with_vars(t: Type, fresh: Any, axis_of: dict[ShapeVar, int]) -> Type:
    """``t`` with every ``?`` and compound dimension replaced by a fresh shape variable
    (``axis_of``: each fresh variable's axis, counted from the right)."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_with_vars(f, fresh, axis_of) for f in t.fields))
    if isinstance(t, TensorType):
        dims = []
        for i, d in enumerate(t.shape):
            if not isinstance(d, (int, ShapeVar)):
                d = ShapeVar(f"d{next(fresh)}")
                axis_of[d] = len(t.shape) - i
            dims.append(d)
        return TensorType(tuple(dims), t.dtype)
    return t


def _substitute(t: Type, subst: dict[ShapeVar, ShapeVar]) -> Type:
    if isinstance(t, TupleType):
        return TupleType(tuple(_substitute(f, subst) for f in t.fields))
    if isinstance(t, TensorType):
        return TensorType(tuple(subst.get(d, d) if isinstance(d, ShapeVar) else d
                                for d in t.shape), t.dtype)
    return t


def _vars(d: Any) -> list[ShapeVar]:
    from relay_ir.ty import dim_vars
    return dim_vars(d)


def _ident(name: str, slot: int) -> str:
    base = re.sub(r"\W", "_", name) or "d"
    return f"{base}_{slot}"


def _shape_function(symbol: str, heap: int, computed: list[tuple[int, DimExpr]],
                    slots: dict[ShapeVar, int]) -> Any:
    """A compiled TIR function ``symbol(heap)`` that writes each computed output dimension
    (a polynomial of the stored shape variables) into its heap slot."""
    lines = [f"def {symbol}(heap: T.Buffer(({heap},), \"int64\")):",
             f"    T.func_attr({{\"global_symbol\": \"{symbol}\"}})"]
    for slot, d in computed:
        terms = []
        for mono, coef in d.terms:
            factors = [f"heap[{slots[v]}]" for v in mono] + [f"T.int64({coef})"]
            terms.append(" * ".join(factors))
        lines.append(f"    heap[{slot}] = " + " + ".join(terms))
    return _compile_script(symbol, lines)


def _volume(func: Any, slot_of: dict[str, int]) -> list[tuple[int, tuple]] | None:
    """The iteration count of an unscheduled symbolic PrimFunc as a polynomial over heap
    slots (``[(coefficient, slots)]``, one term a block); None when an extent is not a
    product of the group's variables and constants."""
    from tvm import s_tir
    from relay_ir.runtime.schedules import blocks
    sch = s_tir.Schedule(func)
    terms = []
    for b in blocks(sch):
        coef, mono = 1, []
        for loop in sch.get_loops(b):
            ext = sch.get(loop).extent
            if hasattr(ext, "value"):
                coef *= int(ext.value)
            elif type(ext).__name__ == "Var" and str(ext.name) in slot_of:
                mono.append(slot_of[str(ext.name)])
            else:
                return None
        terms.append((coef, tuple(mono)))
    return terms


def _small_function(symbol: str, heap: int, volume: list[tuple[int, tuple]],
                    limit: int) -> Any:
    """A compiled TIR function ``symbol(heap)`` setting ``heap[0]`` to 1 when the kernel's
    iteration count is below ``limit`` (run the serial twin), else to 0."""
    total = " + ".join(" * ".join([f"heap[{s}]" for s in mono] + [f"T.int64({c})"])
                       for c, mono in volume)
    lines = [f"def {symbol}(heap: T.Buffer(({heap},), \"int64\")):",
             f"    T.func_attr({{\"global_symbol\": \"{symbol}\"}})",
             f"    heap[0] = T.if_then_else({total} < T.int64({limit}), T.int64(1), "
             f"T.int64(0))"]
    return _compile_script(symbol, lines)


def _guard_function(symbol: str, heap: int, pairs: list[tuple[int, int]]) -> Any:
    """A compiled TIR function ``symbol(heap)`` setting ``heap[0]`` to 1 when every pair of
    slots holds equal values, else to 0 (what ``vm.builtin.read_if_cond`` reads)."""
    cond = " and ".join(f"heap[{a}] == heap[{b}]" for a, b in pairs)
    lines = [f"def {symbol}(heap: T.Buffer(({heap},), \"int64\")):",
             f"    T.func_attr({{\"global_symbol\": \"{symbol}\"}})",
             f"    heap[0] = T.if_then_else({cond}, T.int64(1), T.int64(0))"]
    return _compile_script(symbol, lines)


def _compile_script(symbol: str, lines: list[str]) -> Any:
    import tvm
    import tvm.script
    from tvm.script import tirx as T
    src = "@T.prim_func\n" + "\n".join(lines) + "\n"
    func = tvm.script.from_source(src, extra_vars={"T": T})
    return tvm.compile(tvm.IRModule({symbol: func}), target="llvm").mod


# ============================================================================ emitting
def emit_kernel(em: Any, kern: Any, srcs: Sequence[int], dst: int | None, span: Any) -> int:
    """Bytecode of one call of a symbolic kernel or a host group (see the module docstring);
    ``em`` is relax_vm's emitter. Returns the register of the result."""
    info = kern.dyn
    ops = em.ops
    if info.mode == "host":
        return _emit_host(em, info, srcs, dst, span)
    args: list[tuple] = []
    for r, t in zip(srcs, kern.param_types):
        if isinstance(t, TupleType):
            em._flatten(em.reg(r, span), t, args)
        else:
            args.append(em.operand(r, span))
    heap = em.tmp()
    ops.append(("call", "vm.builtin.alloc_shape_heap", [("vm",), ("i", info.heap)], heap))
    for a, codes, msg in zip(args, info.checks, info.messages):
        if codes is None:
            continue
        flat: list[tuple] = [("i", len(codes))]
        for c, v in codes:
            flat += [("i", c), ("i", v)]
        ops.append(("call", "vm.builtin.match_shape", [a, ("r", heap), *flat,
                                                       ("c", ("str", msg))], None))
    host_label = end_label = None
    if info.guard:
        # the speculated equalities: the kernel when they hold, else the host group
        ops.append(("call", info.guard_symbol, [("r", heap)], None))
        c = em.tmp()
        ops.append(("call", "vm.builtin.read_if_cond", [("r", heap)], c))
        host_label, end_label = ("dynhost", next(_LABELS)), ("dynend", next(_LABELS))
        ops.append(("if", c, host_label))
        if dst is None:
            dst = em.tmp()
    if info.shape_symbol:
        ops.append(("call", info.shape_symbol, [("r", heap)], None))
    single = kern.result == 0 and len(info.outs) == 1
    outs = []
    for codes, dtype in info.outs:
        shp = em.tmp()
        flat = [("i", len(codes))]
        for c, v in codes:
            flat += [("i", c), ("i", v)]
        ops.append(("call", "vm.builtin.make_shape", [("r", heap), *flat], shp))
        st = em.tmp()
        ops.append(("call", "vm.builtin.alloc_storage",
                    [("vm",), ("r", shp), ("i", 0), ("dt", dtype),
                     ("c", ("str", "global"))], st))
        out = dst if single and dst is not None else em.tmp()
        ops.append(("call", "vm.builtin.alloc_tensor", [("r", st), ("i", 0), ("r", shp),
                                                        ("dt", dtype)], out))
        outs.append(out)
    consts = [("c", ("kconst", id(c), c)) for c in kern.consts]
    kargs = args + consts + [("r", o) for o in outs]
    if info.serial_symbol:
        ops.append(("call", info.small_symbol, [("r", heap)], None))
        c = em.tmp()
        ops.append(("call", "vm.builtin.read_if_cond", [("r", heap)], c))
        big, done = ("dynbig", next(_LABELS)), ("dyndone", next(_LABELS))
        ops.append(("if", c, big))
        ops.append(("call", info.serial_symbol, kargs, None))
        ops.append(("goto", done))
        ops.append(("label", big))
        ops.append(("call", kern.symbol, kargs, None))
        ops.append(("label", done))
    else:
        ops.append(("call", kern.symbol, kargs, None))
    if single:
        res = outs[0]
    else:
        res = em._build_result(kern.result, outs)
        if dst is not None:
            ops.append(("call", "vm.builtin.copy", [("r", res)], dst))
            res = dst
    if host_label is not None:
        ops.append(("goto", end_label))
        ops.append(("label", host_label))
        _emit_host(em, info, srcs, dst, span)
        ops.append(("label", end_label))
    return res


def _emit_host(em: Any, info: DynInfo, srcs: Sequence[int], dst: int | None,
               span: Any) -> int:
    out = dst if dst is not None else em.tmp()
    em.ops.append(("call", HOST_FUNC, [("c", ("str", info.key)),
                                       *[em.operand(r, span) for r in srcs]], out))
    return out


# ============================================================================ running
def run_error(e: BaseException, backend: Any = None) -> DiagnosticError | None:
    """The diagnostic for an error the VM raised in code of this module (None: not ours);
    ``backend`` (relax_vm's) gives the span of a mismatch."""
    text = str(e)
    if HOST_FAILED in text:
        err = getattr(_LAST, "error", None)
        _LAST.error = None
        if isinstance(err, DiagnosticError):
            return err
        return DiagnosticError("executor='relax': " +
                               text[text.index(HOST_FAILED) + len(HOST_FAILED) + 2:])
    if MISMATCH in text:
        ctx = text[text.index(MISMATCH) + len(MISMATCH) + 2:]
        ctx = ctx.split(" match_cast error")[0].strip().rstrip(",")
        span = getattr(backend, "_spans", {}).get(f"{MISMATCH}: {ctx}")
        got = re.search(r"\((\d+) vs\. (\d+)\)", text)
        dim = re.search(r"shape\[(\d+)\]", text)
        detail = ""
        if got and dim:
            detail = (f": dimension {dim.group(1)} is {got.group(1)} where {got.group(2)} is "
                      f"required")
        elif got:
            detail = f": {got.group(1)} where {got.group(2)} is required"
        return DiagnosticError(f"executor='relax': shape mismatch at run time in {ctx}"
                               f"{detail} (the arguments' shapes disagree with the types)",
                               span)
    return None


class _HostGroup:
    """A fused group run with the operators' numpy reference implementations."""

    def __init__(self, backend: Any, k: int, label: str):
        self.backend = backend
        self.k = k
        self.label = label
        self.code: Any = None
        self.calls = 0                  # runs (tests count the host path's uses)

    def _steps(self) -> Any:
        if self.code is None:
            from relay_ir.runtime.interpreter import Program
            b = self.backend
            prog = b.__dict__.get("_host_program")
            if prog is None:
                prog = b._host_program = Program(b.exe.module, b.cp)
            self.code = prog.code(b.cp.kernel_fns[self.k])
        return self.code

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        code = self._steps()
        regs = [*[_to_numpy(a) for a in args], *code.rest]
        steps = code.steps
        pc = 0
        while True:
            r = steps[pc](regs)
            if r.__class__ is int:
                pc = r
                continue
            return _to_vm(r[1])     # NOTE: a group body computes and returns (RET, value)


def _to_numpy(x: Any) -> Any:
    import tvm
    if isinstance(x, tvm.runtime.Tensor):
        return np.from_dlpack(x)
    if isinstance(x, (list, tuple)) or type(x).__name__ == "Array":
        return tuple(_to_numpy(v) for v in x)      # NOTE: recursion over tuple nesting only
    return x


def _to_vm(v: Any) -> Any:
    import tvm_ffi
    if isinstance(v, tuple):
        return tuple(_to_vm(x) for x in v)
    a = np.asarray(v)
    if not (a.flags.c_contiguous and a.flags.writeable) or type(v) is not np.ndarray:
        a = np.array(a, order="C")
    if a.size == 0:
        # NOTE: numpy gives an empty array zero strides, which a kernel refuses as not compact
        import tvm
        return tvm.runtime.empty(a.shape, a.dtype)
    return tvm_ffi.from_dlpack(a, require_alignment=0, require_contiguous=True)


_GROUPS: dict[str, weakref.WeakSet] = {}     # key -> the live groups of that text
_LABELS = itertools.count()
_LAST = threading.local()
_REGISTERED: list[bool] = []
_LOCK = threading.Lock()


def _host_entry(key: str, *args: Any) -> Any:
    live = _GROUPS.get(key)
    group = next(iter(live), None) if live is not None else None
    if group is None:
        raise RuntimeError(f"relay_ir: no host group {key!r} in this process (a module that "
                           f"runs operators on the host loads only through relay_ir: "
                           f"relay_ir.runtime.load_module)")
    try:
        return group(*args)
    except Exception as e:
        if not isinstance(e, DiagnosticError):
            span = (group.backend.cp.kernels[group.k].span if hasattr(group, "backend")
                    else None)
            e = DiagnosticError(f"executor='relax': the host function of the fused group "
                                f"{group.label} failed: {type(e).__name__}: {e}", span)
        _LAST.error = e
        raise RuntimeError(f"{HOST_FAILED}: the host function of the fused group {group.label} "
                           f"failed: {type(e).__name__}: {e}") from None


def _register() -> None:
    with _LOCK:
        if not _REGISTERED:
            import tvm
            tvm.register_global_func(HOST_FUNC, _host_entry, override=True)
            _REGISTERED.append(True)


__all__ = ["HOST_FUNC", "DynInfo", "dynamic_kernel", "host_kernel", "emit_kernel",
           "run_error"]
