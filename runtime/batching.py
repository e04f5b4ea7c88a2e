"""``RelaxExecutable.run_batch``: many instances of one program, their kernel calls batched.

The native Relax VM runs one instance to completion, so batching is its own execution mode.
The driver (:class:`BatchRunner`) interprets the executable's instruction program (the same
``runtime.compiler`` program the VM bytecode is emitted from, with one ``kernel`` instruction
per fused group) for every instance side by side, with the reference interpreter's step
closures (``runtime.interpreter``) for everything that is not a kernel call: tuples, ADT
values, ``match``, references, closures and calls run in Python per instance, each instance
with its own heap-allocated frame stack (no Python recursion: a 100,000-deep recursion runs).

Kernel calls worth batching (:data:`DEFER`) are **deferred**; the others are called inside
their instruction's step. An instance runs until its next deferred kernel call and parks
there.
When every live instance is parked (or done), the pending calls are grouped by signature --
the compiled kernel (alpha-equivalent groups share one), the shapes and dtypes of its
flattened inputs, and which inputs are the very same array in every instance of the group
(shared weights) -- and the agenda (DyNet's, decided at run time) runs the group with the most
pending calls: one call of the group's batched kernel on the stacked inputs (shared ones
passed once), whose outputs are split back (views, no copy) to the instances, which resume.
A group of one calls the plain kernel.

Batched kernels come from ``passes.vmap.vmap_function`` (the primitive function batched on a
new leading axis of its non-shared inputs), compiled once over a **symbolic** batch size
through the kernel cache (one kernel serves every batch size). A group whose function vmap
cannot batch, with tuple inputs, or whose inputs are large (stacking would copy more than the
kernel computes: :data:`STACK_LIMIT`) runs its calls one by one. Groups with ``?`` or symbolic
dimensions run their symbolic kernel per instance (output shapes from the group's type
relations, cached per input shape); host groups run on the host (numpy reference
implementations of the group), as on the VM. :data:`BATCH_SIZES` = ``"static"`` compiles one
kernel per power-of-two batch size instead (inputs padded; measured slower, not the default).

Module files: ``export_library(path, batched=True)`` writes :func:`batch_metadata` (the
program text, the static kernels' calling information, the batched kernels compiled so far,
linked into the library); a loaded module's ``run_batch`` reads it through
:class:`LoadedSource` and compiles nothing.
"""
from __future__ import annotations

import gc
import sys
from time import perf_counter
from typing import Any, Sequence

import numpy as np

from relay_ir.errors import DiagnosticError, InterpreterError
from relay_ir.runtime.interpreter import (CALL, DEFAULT_MAX_DEPTH, RET, Code, Program,
                                          _apply_builtin, _fn_name, _normalize_output,
                                          _span_at, _too_deep, _execute)
from relay_ir.runtime.values import Closure, check_arguments
from relay_ir.ty import TensorType, TupleType, Type

KERNEL = 3          # the action of a deferred kernel call: (KERNEL, k, args, site | None)

# NOTE: per-instance input (or output) bytes above which a group is not batched: gathering
# copies every non-shared input once and the kernel reads it again, so for a memory-bound
# kernel on large tensors (a weight-sized gradient accumulation) stacking costs more than the
# calls it saves; and a large per-instance output (the outer product of a weight gradient)
# already keeps a kernel busy, which its static schedule does better than the symbolic one.
STACK_LIMIT = 1 << 18
# NOTE: per-instance output bytes above which a group is not batched: W5's weight-gradient
# outer products ((1,128)^T (1,384): 196 KB an instance) took 6 ms a call of 8 instances as a
# symbolic batch_matmul, several times the 8 static calls (2-core Xeon under load)
OUT_LIMIT = 1 << 16
# NOTE: batched kernels whose iteration space (batch x per-instance work) is below this run
# on one thread. Higher than the static kernels' SERIAL_BELOW (1 << 18): measured on the
# 2-core Xeon under load (load average 8), 64 x (1x640 @ 640x256) took 0.62 ms serial and
# 0.98 ms parallel, and the parallel variant of W5's batched matmuls 15 ms a call.
SERIAL_BELOW = 1 << 24
# outputs of at least POOL_MIN bytes come from a pool of POOL_SLOTS arrays per shape
POOL_MIN = 1 << 15
POOL_SLOTS = 16
# which kernels the instances park on (see KernelRunner._worth_deferring): "heavy" or "all"
DEFER = "heavy"
# the batched kernels' batch size: "static" (one kernel per power-of-two bucket, the batch
# padded up to it) or "symbolic" (one kernel over a symbolic batch size serves every size)
BATCH_SIZES = "symbolic"
# the cost model tries a batched kernel it rejected again every RETRY-th time
RETRY = 8
# a kernel whose batched calls never paid over UNDEFER parked calls (in groups of 8 or more;
# or that cannot be batched) is no longer deferred: its calls run inline
UNDEFER = 128
# NOTE: seconds a parked call costs its instance beyond the call (parking, regrouping,
# resuming, and the cache the interleaved instances evict): W5's gradient (H = 128, 64 trees)
# ran 3 ms/tree slower parking its 83 GEMVs per tree than calling them inline (36 us each;
# 2-core Xeon under load), while batching them saved nothing measurable
PARK_COST = 30e-6
# the agenda's choice: "most" (the signature with the most pending calls) or "depth" (the
# lowest average depth, counted in kernel calls)
AGENDA = "most"


def _kernel_factories(runner: BatchRunner) -> dict:
    """The step factories of ``kernel``/``kernel_ret`` instructions for ``runner``'s program.

    A kernel the instances park on (:meth:`KernelRunner._worth_deferring`) becomes a deferred
    action ``(KERNEL, k, args, site)``; any other kernel is called inside the step itself, an
    ordinary instruction to the driver's loop (no action tuple, no lookups per call)."""
    count = runner.inline_calls

    def kernel(ins: tuple, pc: int, code: Code) -> tuple:
        _, dst, k, srcs = ins
        idx = tuple(srcs)
        nxt = pc + 1
        kr = runner.kernel(k)
        if not kr.defer:
            call = kr.call
            if kr.fast and not kr.consts and len(idx) in (1, 2):
                return _fast_step(kr, idx, dst, nxt, count), None
            if len(idx) == 1:
                (i0,) = idx

                def step1(regs: list) -> int:
                    count[0] += 1
                    regs[dst] = call([regs[i0]])
                    return nxt
                return step1, None
            if len(idx) == 2:
                i0, i1 = idx

                def step2(regs: list) -> int:
                    count[0] += 1
                    regs[dst] = call([regs[i0], regs[i1]])
                    return nxt
                return step2, None

            def step_n(regs: list) -> int:
                count[0] += 1
                regs[dst] = call([regs[i] for i in idx])
                return nxt
            return step_n, None
        site = (code, nxt, dst)

        def step(regs: list) -> tuple:
            return (KERNEL, k, [regs[i] for i in idx], site)
        return step, None

    def kernel_ret(ins: tuple, pc: int, code: Code) -> tuple:
        """A kernel call in tail position."""
        _, k, srcs = ins
        idx = tuple(srcs)
        kr = runner.kernel(k)
        if not kr.defer:
            call = kr.call

            def step_ret(regs: list) -> tuple:
                count[0] += 1
                return (RET, call([regs[i] for i in idx]))
            return step_ret, None

        def step(regs: list) -> tuple:
            return (KERNEL, k, [regs[i] for i in idx], None)
        return step, None
    return {"kernel": kernel, "kernel_ret": kernel_ret}


def _fast_step(kr: KernelRunner, idx: tuple, dst: int, nxt: int, count: list) -> Any:
    """The step of an inline call of a static kernel without constants, one or two inputs
    and one small output: the kernel called on the registers directly."""
    f, slow = kr.func, kr.call
    (shape, dtype), = kr.outs
    empty = np.empty
    if len(idx) == 1:
        (i0,) = idx

        def step1(regs: list) -> int:
            count[0] += 1
            o = empty(shape, dtype)
            try:
                f(regs[i0], o)
            except Exception:
                o = slow([regs[i0]])     # NOTE: an argument the kernel refused: converted
            regs[dst] = o
            return nxt
        return step1
    i0, i1 = idx

    def step2(regs: list) -> int:
        count[0] += 1
        o = empty(shape, dtype)
        try:
            f(regs[i0], regs[i1], o)
        except Exception:
            o = slow([regs[i0], regs[i1]])
        regs[dst] = o
        return nxt
    return step2


class BatchProgram(Program):
    """The instruction program with kernel calls as deferred actions (or inline calls)."""

    def __init__(self, mod: Any, compiled: Any, runner: BatchRunner):
        super().__init__(mod, compiled)
        self.step_factories = _kernel_factories(runner)


class _Instance:
    """One instance's machine state: C (code, pc), E (regs), K (stack)."""

    __slots__ = ("index", "code", "pc", "regs", "stack", "result", "done", "pending", "depth")

    def __init__(self, index: int, code: Code, regs: list):
        self.index = index
        self.code = code
        self.pc = 0
        self.regs = regs
        self.stack: list[Any] = []
        self.result: Any = None
        self.done = False
        self.pending: Any = None      # (k, args, site) while parked on a kernel call
        self.depth = 0                # kernel calls made so far (the agenda's depth)


class BatchError(DiagnosticError):
    """A run_batch instance failed (the message says which)."""

    kind = "runtime error"


# ============================================================================ kernels
def _flatten_value(v: Any, t: Type, out: list) -> None:
    stack: list[tuple[Any, Type]] = [(v, t)]
    order = []
    while stack:
        x, ty = stack.pop()
        if isinstance(ty, TupleType):
            stack.extend(reversed(list(zip(x, ty.fields))))
        else:
            order.append(x)
    out.extend(order)


def _type_of(v: Any) -> Type:
    """The concrete type of a tensor or (nested) tuple value."""
    if type(v) is tuple:
        return TupleType(tuple(_type_of(x) for x in v))    # NOTE: tuple nesting only
    a = np.asarray(v)
    return TensorType(tuple(int(d) for d in a.shape), str(a.dtype))


def _build(struct: Any, outs: list) -> Any:
    if type(struct) is int:
        return outs[struct]
    return tuple(_build(s, outs) for s in struct)     # NOTE: tuple nesting only


class KernelRunner:
    """Calls one fused group's compiled TVM kernel (or its host body) from Python."""

    def __init__(self, runner: BatchRunner, k: int):
        self.k = k
        src = runner.src
        kern = src.kernel(k)
        self.kern = kern
        self.fn = src.cp.kernels[k]
        self.param_types = kern.param_types
        self.tuple_params = any(isinstance(t, TupleType) for t in kern.param_types)
        self.host = kern.dyn is not None
        self.signature = kern.symbol
        # the agenda key of a static kernel (its types fix the shapes); None: look at values
        self.static_key = None if self.host else kern.symbol
        self.func: Any = None
        self.consts: list[Any] = []
        self.runner = runner
        self.out_bytes = 0
        if not self.host:
            import tvm
            self.func = kern.module[kern.symbol]
            self.consts = [tvm.runtime.tensor(c) for c in kern.consts]
            self.outs = kern.outs
            self.result = kern.result
            # NOTE: a weight-sized output (a per-instance gradient outer product): not batched
            self.out_bytes = sum(int(np.prod(sh, dtype=np.int64)) * np.dtype(dt).itemsize
                                 for sh, dt in kern.outs)
        else:
            prog = runner.prog
            fidx = src.cp.kernel_fns[k]
            self.host_closure = Closure(prog.code(fidx), [], src.cp.functions[fidx].func)
            # NOTE: a symbolic kernel (`?` or symbolic dims) runs compiled, its output shapes
            # from the group's type relations at the call's shapes (cached per shape); a
            # host group, or one whose symbolic kernel speculates equal dims, on the host
            info = kern.dyn
            if info.mode == "symbolic" and not info.guard and kern.module is not None:
                import tvm
                self.sym_func = kern.module[kern.symbol]
                self.consts = [tvm.runtime.tensor(c) for c in kern.consts]
                self.result = kern.result
                self.sym_outs: dict[tuple, list] = {}
                self.call = self._symbolic_call      # type: ignore[method-assign]
        self.defer = self._worth_deferring(runner)
        self.won = 0        # parked calls whose batched call paid (the cost model's evidence)
        self.lost = 0       # parked calls batching did not pay for
        self.single_cost: float | None = None   # measured seconds per call (cost model)
        self.fast = False       # a static kernel with tensor inputs, one small output
        if not self.host and not self.tuple_params and len(self.outs) == 1 and \
                self.result == 0 and self.out_bytes < POOL_MIN:
            self.fast = True
            self.call = self._fast_call()       # type: ignore[method-assign]

    def _worth_deferring(self, runner: BatchRunner) -> bool:
        """Whether the instances park on this kernel for the agenda (else it runs inline).

        ``DEFER = "all"``: every kernel but host groups. ``"heavy"`` (the default): only
        matmul- and conv-like groups with small per-instance outputs -- a GEMV against a shared
        weight becomes one GEMM -- since parking, grouping and resuming an instance costs a
        few microseconds of Python, more than a (1, 128) elementwise kernel saves by running
        in a batch."""
        if self.host or self.tuple_params or self.out_bytes > OUT_LIMIT or DEFER == "none":
            return False
        if DEFER == "all":
            return True
        return runner.src.kind(self) in ("matmul", "conv")

    def leaves(self, args: list) -> list:
        """The call's flattened tensor inputs."""
        if not self.tuple_params:
            return args
        out: list = []
        for v, t in zip(args, self.param_types):
            _flatten_value(v, t, out)
        return out

    def _fast_call(self) -> Any:
        """A specialised :meth:`call` for a static kernel with tensor parameters and one small
        output (most calls of control-heavy programs): no pool, no result building."""
        f, consts, slow = self.func, tuple(self.consts), self.call
        (shape, dtype), = self.outs
        empty = np.empty

        def call(args: list) -> Any:
            o = empty(shape, dtype)
            try:
                f(*args, *consts, o)
            except Exception:
                return slow(args)       # NOTE: an argument the kernel refused: converted
            return o
        return call

    def _symbolic_call(self, args: list) -> Any:
        """One call of a symbolic kernel: output shapes from the input shapes."""
        leaves = self.leaves(args)
        key = tuple((np.shape(a), np.asarray(a).dtype.str) for a in leaves)
        outs_t = self.sym_outs.get(key)
        if outs_t is None:
            from relay_ir.runtime.lower_tvm import flatten_type, infer_group_types
            types = [_type_of(a) for a in args]
            rt = infer_group_types(self.fn, types)[id(self.fn.body)]
            outs_t = self.sym_outs[key] = [(tuple(int(d) for d in t.shape), t.dtype)
                                           for t in flatten_type(rt)]
        outs = [np.empty(sh, dt) for sh, dt in outs_t]
        self.runner.invoke(self.sym_func, leaves, self.consts, outs)
        return outs[0] if self.result == 0 and len(outs) == 1 else _build(self.result, outs)

    def call(self, args: list) -> Any:
        """One call on one instance's arguments."""
        if self.host:
            return _execute(self.host_closure, list(args))
        empty = self.runner.empty
        outs = [empty(shape, dtype) for shape, dtype in self.outs]
        self.runner.invoke(self.func, self.leaves(args), self.consts, outs)
        return outs[0] if self.result == 0 and len(outs) == 1 else _build(self.result, outs)


class BatchedKernel:
    """A group's function batched by ``vmap_function`` over a symbolic leading batch axis."""

    def __init__(self, runner: BatchRunner, kr: KernelRunner, shared: tuple[bool, ...]):
        import tvm
        from relay_ir.passes.vmap import vmap_function
        from relay_ir.runtime.lower_tvm import flatten_type, lower_group
        from relay_ir.op._te import fast_math, symbolic_dims
        from relay_ir.ty import ShapeVar
        exe = runner.exe._backend.exe
        fn = kr.fn
        in_axes = tuple(None if s else 0 for s in shared)
        bfn = vmap_function(fn, in_axes)
        types: list[Type] = [p.type_annotation or p.checked_type_ for p in bfn.params]
        b = None
        for t, s in zip(types, shared):
            if not s:
                b = t.shape[0]           # type: ignore[union-attr]
                break
        bvar = tvm.tirx.Var("batch", "int64")

        def dim(d: Any) -> Any:
            if isinstance(d, int):
                return d
            if d is b or (isinstance(d, ShapeVar) and isinstance(b, ShapeVar) and d == b):
                return bvar
            raise DiagnosticError(f"unexpected dimension {d!r} in a batched kernel")
        with fast_math(exe.fast_math), symbolic_dims(dim):
            lowered = lower_group(bfn, types, dim=dim)
        target = exe.target
        sig = ";".join(f"{t!r}" for t in lowered.in_types + lowered.out_types)
        sig += "|" + ";".join(f"{c.shape}:{c.dtype}" for c in lowered.constants) + "|batched"
        self._cache, self._target, self._lowered, self._sig = exe.cache, target, lowered, sig
        self.funcs: dict[bool, Any] = {}
        self.requests: dict[bool, Any] = {}     # variant -> its kernel-cache request (export)
        self.symbol = kr.signature
        self._exe, self._fn, self._in_axes = exe, fn, in_axes
        self.static: dict[int, tuple] = {}      # bucket -> (kernel, constants)
        self.mode = BATCH_SIZES
        self.func = self._variant(True) if self.mode == "symbolic" else None
        self.consts_np = [np.array(c, order="C") for c in lowered.constants]
        self.consts = [tvm.runtime.tensor(c) for c in self.consts_np]
        self.outs = [(tuple(d for d in t.shape[1:]), t.dtype)
                     for t in flatten_type(lowered.result_type)]
        for t in flatten_type(lowered.result_type):
            if not t.shape or not isinstance(t.shape[0], ShapeVar) or \
                    not all(isinstance(d, int) for d in t.shape[1:]):
                raise DiagnosticError(f"batched output type {t!r} is not batched on axis 0")
        from relay_ir.runtime.vm import _result_struct
        self.result = _result_struct(lowered.result_type)
        self.cost: dict[int, float] = {}      # batch-size bucket -> measured seconds per call
        self.tries: dict[int, int] = {}
        self.skips: dict[int, int] = {}
        # NOTE: per-instance work, for the serial/parallel choice (output elements, times the
        # reduction length of a matmul-like group)
        self.volume = sum(int(np.prod(sh, dtype=np.int64)) for sh, _ in self.outs) * \
            max([int(t.shape[-1]) for t in kr.param_types if isinstance(t, TensorType)
                 and t.shape and isinstance(t.shape[-1], int)] + [1]) \
            if lowered.kind == "matmul" else \
            sum(int(np.prod(sh, dtype=np.int64)) for sh, _ in self.outs)
        self.shared = shared

    def _variant(self, serial: bool) -> Any:
        """The kernel on one thread (``serial``) or with parallel loops, compiled on first use
        through the kernel cache."""
        f = self.funcs.get(serial)
        if f is None:
            from relay_ir.runtime.kernel_cache import KernelRequest
            from relay_ir.runtime.lower_tvm import schedule
            lowered, target = self._lowered, self._target
            req = KernelRequest(lowered.prim_func, self._sig + ("|serial" if serial else ""),
                                (lambda: schedule(lowered, target, serial=serial)),
                                "+".join(lowered.ops),
                                make_fallback=(lambda: schedule(lowered, target, fallback=True,
                                                                serial=serial)))
            self._cache.get([req], target)
            f = self.funcs[serial] = self._cache.modules.get(req.key)["k_" + req.key]
            self.requests[serial] = req
        return f

    def prepare(self, n: int) -> None:
        """Compile the kernel a call for ``n`` instances uses (outside the cost model's
        timing)."""
        if self.mode == "static":
            self._static(1 << (n - 1).bit_length())
        elif n * self.volume >= SERIAL_BELOW:
            self._variant(False)

    def _static(self, size: int) -> tuple:
        """(kernel, constants) of the group batched for exactly ``size`` instances (a static
        batch size: the static schedules tile it), compiled on first use through the cache."""
        got = self.static.get(size)
        if got is None:
            import tvm
            from relay_ir.passes.vmap import vmap_function
            from relay_ir.runtime.executor import kernel_request
            bfn = vmap_function(self._fn, self._in_axes, batch_size=size)
            types = [p.type_annotation or p.checked_type_ for p in bfn.params]
            lowered = self._exe._lower(bfn, types)
            req = kernel_request(lowered, self._target)
            self._cache.get([req], self._target)
            f = self._cache.modules.get(req.key)["k_" + req.key]
            got = self.static[size] = (f, [tvm.runtime.tensor(np.array(c, order="C"))
                                           for c in lowered.constants])
        return got

    def spec(self) -> dict:
        """What a module file needs to call the serial variant (``export_library(...,
        batched=True)``): its symbol, sharing pattern, constants, outputs, result structure."""
        req = self.requests[True]
        return {"kernel": self.symbol, "shared": list(self.shared), "symbol": "k_" + req.key,
                "consts": [_array_json(c) for c in self.consts_np],
                "outs": [[list(sh), str(dt)] for sh, dt in self.outs],
                "result": self.result, "volume": int(self.volume)}

    def call(self, runner: BatchRunner, leaves: list[list]) -> list:
        """One call for ``len(leaves)`` instances; returns each instance's result."""
        n = len(leaves)
        ins = []
        if self.mode == "static":
            # NOTE: padded to the next power of two (a few kernels serve every size); the
            # padding rows are zeros and their results are dropped
            size = 1 << (n - 1).bit_length()
            for j, s in enumerate(self.shared):
                if s:
                    ins.append(leaves[0][j])
                    continue
                first = leaves[0][j]
                buf = np.empty((size, *np.shape(first)), np.asarray(first).dtype)
                np.stack([lv[j] for lv in leaves], out=buf[:n])
                if size > n:
                    buf[n:] = 0
                ins.append(buf)
            func, consts = self._static(size)
            outs = [np.empty((size, *shape), dtype) for shape, dtype in self.outs]
            runner.invoke(func, ins, consts, outs)
        else:
            for j, s in enumerate(self.shared):
                if s:
                    ins.append(leaves[0][j])
                else:
                    ins.append(np.stack([lv[j] for lv in leaves]))
            outs = [np.empty((n, *shape), dtype) for shape, dtype in self.outs]
            func = self.func if n * self.volume < SERIAL_BELOW else self._variant(False)
            runner.invoke(func, ins, self.consts, outs)
        runner.stats["batched_calls"] += 1
        runner.stats["batched_instances"] += n
        single = self.result == 0 and len(outs) == 1
        res = []
        for i in range(n):
            parts = [o[i] for o in outs]
            res.append(parts[0] if single else _build(self.result, parts))
        return res


class LoadedBatchedKernel(BatchedKernel):
    """A batched kernel of a module file (its serial variant, linked into the library)."""

    def __init__(self, library: Any, spec: dict):      # NOTE: no lowering, no compiling
        import tvm
        self.symbol = str(spec["kernel"])
        self.shared = tuple(bool(x) for x in spec["shared"])
        self.func = library.get_function(str(spec["symbol"]), True)
        self.consts_np = [_array_from_json(c) for c in spec["consts"]]
        self.consts = [tvm.runtime.tensor(c) for c in self.consts_np]
        self.outs = [(tuple(int(d) for d in sh), str(dt)) for sh, dt in spec["outs"]]
        self.result = _struct_from_json(spec["result"])
        self.volume = int(spec["volume"])
        self.cost = {}
        self.tries = {}
        self.skips = {}
        self.funcs = {True: self.func}
        self.requests = {}
        self.mode = "symbolic"      # NOTE: the exported kernels have a symbolic batch size

    def _variant(self, serial: bool) -> Any:
        return self.func          # NOTE: only the serial variant is exported


def _array_json(a: np.ndarray) -> dict:
    import base64
    a = np.ascontiguousarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _array_from_json(d: dict) -> np.ndarray:
    import base64
    raw = base64.b64decode(d["data"])
    return np.frombuffer(raw, dtype=d["dtype"]).reshape(d["shape"]).copy()


def _struct_from_json(x: Any) -> Any:
    """A result structure (an int, or nested lists of ints) as tuples."""
    if isinstance(x, int):
        return x
    return tuple(_struct_from_json(y) for y in x)


# ============================================================================ sources
class BuiltSource:
    """What the driver reads of an executable built in this process (``runtime.build``)."""

    def __init__(self, exe: Any):
        backend = exe._backend
        self.exe, self.backend = exe, backend
        self.module, self.cp = exe.module, backend.cp

    def kernel(self, k: int) -> Any:
        return self.backend.kernel(k, None)

    def kind(self, kr: KernelRunner) -> str:
        """The lowered group's kind (``matmul``, ``conv``, ``elementwise``, ...)."""
        try:
            return self.backend.exe._lower(kr.fn, list(kr.param_types)).kind
        except DiagnosticError:
            return "?"

    def batched_kernel(self, runner: BatchRunner, kr: KernelRunner,
                       shared: tuple[bool, ...]) -> BatchedKernel:
        return BatchedKernel(runner, kr, shared)


class LoadedSource:
    """What the driver reads of a module file exported with ``batched=True``: the program
    (Relay text, compiled to the instruction program again at load: deterministic, so its
    kernel numbers are the exporter's), each static kernel's symbol, constants, outputs and
    kind, and the batched kernels the exporter had compiled. Nothing is compiled: groups
    with ``?`` or symbolic dimensions run on the host (the numpy reference implementations),
    signatures without an exported batched kernel run one call per instance."""

    def __init__(self, loaded: Any, meta: dict):
        from relay_ir.runtime.compiler import CompiledProgram
        self.library = loaded.library
        self.module = _parse_program(meta["program"])
        self.cp = CompiledProgram(self.module, kernels=True).compile_all()
        self.info = {int(k): v for k, v in meta["kernels"].items()}
        self.specs = {(str(b["kernel"]), tuple(bool(x) for x in b["shared"])): b
                      for b in meta["batched"]}
        self._kernels: dict[int, Any] = {}

    def kernel(self, k: int) -> Any:
        got = self._kernels.get(k)
        if got is not None:
            return got
        from types import SimpleNamespace
        from relay_ir.runtime.relax_vm import _Kernel
        fn = self.cp.kernels[k]
        types = [p.type_annotation or p.checked_type_ for p in fn.params]
        info = self.info.get(k)
        if info is None:        # NOTE: a host or symbolic group: the host implementation
            kern = _Kernel(f"host{k}", None, [], [], 0, types, f"group{k}")
            kern.dyn = SimpleNamespace(mode="host", guard=False)
        else:
            kern = _Kernel(str(info["symbol"]), self.library,
                           [_array_from_json(c) for c in info["consts"]],
                           [(tuple(int(d) for d in sh), str(dt)) for sh, dt in info["outs"]],
                           _struct_from_json(info["result"]), types, str(info["label"]))
            kern.module = _LibraryFunctions(self.library)
        self._kernels[k] = kern
        return kern

    def kind(self, kr: KernelRunner) -> str:
        info = self.info.get(kr.k)
        return str(info["kind"]) if info is not None else "host"

    def batched_kernel(self, runner: BatchRunner, kr: KernelRunner,
                       shared: tuple[bool, ...]) -> BatchedKernel:
        spec = self.specs.get((kr.signature, shared))
        if spec is None:
            raise DiagnosticError("no batched kernel exported for this signature")
        return LoadedBatchedKernel(self.library, spec)


def _parse_program(text: str) -> Any:
    """The exported program text as a typed module (calls get their type arguments back,
    so the groups equal the built ones structurally)."""
    import relay_ir as rly
    from relay_ir.passes import infer_type
    return infer_type(rly.parse(text))


class _LibraryFunctions:
    """``lib[symbol]``: a kernel function of a loaded library (its imports searched)."""

    def __init__(self, library: Any):
        self.library = library

    def __getitem__(self, symbol: str) -> Any:
        f = self.library.get_function(symbol, True)
        if f is None:
            raise DiagnosticError(f"the module file has no kernel {symbol}")
        return f


def batch_metadata(exe: Any) -> tuple[dict, list]:
    """(the metadata ``export_library(..., batched=True)`` writes, the batched kernels to link
    into the library: objects with ``symbol``, ``label``, ``request``, ``module``, ``dyn``)."""
    from types import SimpleNamespace
    from relay_ir.printer import astext
    from relay_ir.runtime.compiler import CompiledProgram
    from relay_ir.structural import structural_equal, structural_hash
    backend = exe._backend
    src = BuiltSource(exe)
    # NOTE: the loader parses the text and compiles it again; kernel numbers follow the
    # order groups are met (shared group objects count once), which printing and parsing may
    # change, so the numbers written are those of the program as the loader will see it,
    # each group matched to the built one structurally here (same process: same hashes)
    text = astext(exe.module)
    again = CompiledProgram(_parse_program(text), kernels=True).compile_all()
    by_hash: dict[int, list[int]] = {}
    for k, fn in enumerate(backend.cp.kernels):
        by_hash.setdefault(structural_hash(fn), []).append(k)
    kernels = {}
    for k2, fn2 in enumerate(again.kernels):
        match = [k for k in by_hash.get(structural_hash(fn2), ())
                 if structural_equal(fn2, backend.cp.kernels[k])]
        kern = backend.kernels.get(match[0]) if match else None
        if kern is None or kern.dyn is not None:
            continue            # NOTE: symbolic kernels and host groups run on the host
        probe = SimpleNamespace(fn=backend.cp.kernels[match[0]], param_types=kern.param_types)
        kernels[str(k2)] = {"symbol": kern.symbol, "label": kern.label,
                            "consts": [_array_json(c) for c in kern.consts],
                            "outs": [[list(sh), str(dt)] for sh, dt in kern.outs],
                            "result": kern.result, "kind": src.kind(probe)}  # type: ignore
    batched, extra = [], []
    runner = getattr(exe, "_batch_runner", None)
    for bk in (runner.batched.values() if runner is not None else ()):
        if bk is None:
            continue
        if True not in bk.requests:
            bk._variant(True)       # NOTE: the run used static sizes; files get symbolic ones
        req = bk.requests[True]
        batched.append(bk.spec())
        extra.append(SimpleNamespace(symbol="k_" + req.key, label="batched", request=req,
                                     module=bk._cache.modules.get(req.key), dyn=None))
    return {"program": text, "kernels": kernels, "batched": batched}, extra


# ============================================================================ the driver
class BatchRunner:
    """Runs many instances of an executable's entry, batching their kernel calls."""

    def __init__(self, exe: Any, src: Any = None):
        self.exe = exe
        self.src = src if src is not None else BuiltSource(exe)
        self.module = self.src.module
        self.inline_calls = [0]          # kernel calls made inline (counted by their steps)
        self.kernels: dict[int, KernelRunner] = {}
        self.prog = BatchProgram(self.module, self.src.cp, self)
        self.batched: dict[tuple, BatchedKernel | None] = {}
        self.stats = {"kernel_calls": 0, "batched_calls": 0, "instance_calls": 0,
                      "groups": 0, "batched_instances": 0, "undeferred": 0,
                      "parked": 0}
        import tvm_ffi
        self._from_dlpack = tvm_ffi.from_dlpack
        self.max_depth = DEFAULT_MAX_DEPTH
        self.pool: dict[tuple, Any] = {}     # (shape, dtype) -> recyclable outputs | False

    def empty(self, shape: tuple, dtype: Any) -> np.ndarray:
        """An output array; a large one is recycled from the pool when nothing holds it.

        NOTE: every holder of an array -- a register, a tuple, a view, a DLPack tensor --
        holds a reference to it (views to their base), so an array of the pool whose only
        references are the pool's own is free: reusing it keeps large outputs (a weight
        gradient, 655 KB in W5) in cache and spares fresh pages (the VM plans its memory the
        same way)."""
        key = (shape, dtype)
        got = self.pool.get(key)
        if got is None:
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if nbytes < POOL_MIN:
                self.pool[key] = False
                return np.empty(shape, dtype)
            got = self.pool[key] = []
        elif got is False:
            return np.empty(shape, dtype)
        refcount = sys.getrefcount
        for a in got:
            if refcount(a) == 3:          # the pool's list, `a`, getrefcount's argument
                return a
        a = np.empty(shape, dtype)
        if len(got) < POOL_SLOTS:
            got.append(a)
        return a

    def invoke(self, func: Any, ins: list, consts: list, outs: list) -> None:
        """Call a compiled kernel on numpy inputs and outputs.

        NOTE: numpy arrays go to the kernel as they are (DLPack, zero-copy); the kernel's
        argument checks refuse what it cannot take (a strided view, a numpy scalar, a
        read-only or empty array), and the call is then made again with every argument
        converted by :meth:`wrap` (copied where needed). A check fails before anything runs."""
        try:
            func(*ins, *consts, *outs)
        except Exception:
            wrap = self.wrap
            func(*[wrap(a) for a in ins], *consts, *[wrap(o) for o in outs])

    def wrap(self, a: Any) -> Any:
        """A numpy array as a kernel argument (zero-copy when it can be)."""
        if type(a) is not np.ndarray:
            a = np.asarray(a)
        if a.size == 0:
            import tvm
            return tvm.runtime.empty(a.shape, a.dtype)
        fl = a.flags
        if not (fl.c_contiguous and fl.writeable):
            a = np.array(a, order="C")
        return self._from_dlpack(a, require_alignment=0, require_contiguous=True)

    def kernel(self, k: int) -> KernelRunner:
        kr = self.kernels.get(k)
        if kr is None:
            kr = self.kernels[k] = KernelRunner(self, k)
        return kr

    # ------------------------------------------------------------------ instances
    def run(self, arg_tuples: Sequence[Sequence[Any]], entry: str) -> list:
        exe = self.exe
        if entry not in self.module:
            raise DiagnosticError(f"there is no global function @{entry} (globals: "
                                  f"{', '.join('@' + n for n in self.module)})")
        for key in self.stats:
            self.stats[key] = 0
        self.inline_calls[0] = 0
        fn, ptypes, names = exe._entry_types(entry)
        clo = self.prog.global_closure(entry)
        code = clo.code if clo.code is not None else clo.force()
        insts = []
        for i, args in enumerate(arg_tuples):
            if not isinstance(args, (tuple, list)):
                raise DiagnosticError(f"run_batch: instance {i}: the arguments of an instance "
                                      f"are a tuple or a list, not {type(args).__name__}")
            try:
                checked = check_arguments(fn, ptypes, tuple(args), names)
            except DiagnosticError as e:
                raise _instance_error(e, i) from None
            insts.append(_Instance(i, code, list(checked) + clo.captured + code.rest))
        # NOTE: the cyclic GC would rescan every instance's frames and values again and again
        # (the instances' heaps are alive together); the run makes few cycles (recursive
        # closures), collected when it ends
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            with np.errstate(all="ignore"):
                self._drive(insts)
        finally:
            if paused:
                gc.enable()
            st = self.stats
            st["instance_calls"] += self.inline_calls[0]
            st["kernel_calls"] = st["instance_calls"] - st["batched_instances"] + \
                st["batched_calls"]
        return [self._export(_normalize_output(x.result)) for x in insts]

    def run_closure(self, clo: Closure, args: list) -> Any:
        """Call a function value a run returned (one instance, same driver)."""
        code = clo.code if clo.code is not None else clo.force()
        if len(args) != code.nparams:
            raise InterpreterError(f"{_fn_name(clo)} expects {code.nparams} arguments, got "
                                   f"{len(args)}")
        x = _Instance(0, code, list(args) + clo.captured + code.rest)
        with np.errstate(all="ignore"):
            self._drive([x])
        return self._export(_normalize_output(x.result))

    def _export(self, v: Any) -> Any:
        """``v`` with every function value in it (tuples, ADT fields, references) made
        callable from Python through this driver (their code defers kernel calls)."""
        from relay_ir.runtime.values import ADTValue, RefValue
        stack = [v]
        seen: set[int] = set()
        found = False
        while stack:
            x = stack.pop()
            t = type(x)
            if t is tuple:
                stack.extend(x)
            elif isinstance(x, ADTValue):
                stack.extend(x.fields)
            elif isinstance(x, RefValue) and id(x) not in seen:
                seen.add(id(x))
                stack.append(x.value)
            elif t is Closure:
                found = True
                break
        if not found:
            return v
        return _rebuild(v, self)

    def _drive(self, insts: list[_Instance]) -> None:
        # NOTE: the agenda: signature -> the instances parked on a call with it, kept up to
        # date as instances park (a static kernel's signature is its compiled symbol: its
        # parameter types fix the shapes)
        agenda: dict[Any, list[_Instance]] = {}
        for x in insts:
            self._advance(x)
            if not x.done:
                agenda.setdefault(self._key(x), []).append(x)
        while agenda:
            # NOTE: DyNet's agenda: the signature with the most pending calls first
            best = None
            if AGENDA == "most":
                n = 0
                for key, members in agenda.items():
                    if len(members) > n:
                        best, n = key, len(members)
            else:
                # NOTE: the lowest average depth first (DyNet's "agenda" strategy)
                low = None
                for key, members in agenda.items():
                    d = sum(m.depth for m in members) / len(members)
                    if low is None or d < low:
                        best, low = key, d
            members = agenda.pop(best)
            self.stats["groups"] += 1
            results = self._run_group(members)
            for x, v in zip(members, results):
                site = x.pending[2]
                x.pending = None
                self._resume(x, v, site)
                if not x.done:
                    key = self._key(x)
                    got = agenda.get(key)
                    if got is None:
                        agenda[key] = [x]
                    else:
                        got.append(x)

    def _key(self, x: _Instance) -> Any:
        k = x.pending[0]
        kr = self.kernels.get(k)
        if kr is None:
            kr = self.kernel(k)
        if kr.static_key is not None:
            return kr.static_key
        return (kr.signature, k, tuple((np.shape(a), np.asarray(a).dtype.str)
                                       for a in kr.leaves(x.pending[1])))

    def _run_group(self, members: list[_Instance]) -> list:
        k0 = members[0].pending[0]
        kr = self.kernel(k0)
        if len(members) == 1 or kr.host or kr.tuple_params:
            return self._loop(kr, members)
        leaves = [kr.leaves(x.pending[1]) for x in members]
        first = leaves[0]
        shared = tuple(all(lv[j] is first[j] for lv in leaves) for j in range(len(first)))
        size = sum(np.asarray(a).nbytes for a, s in zip(first, shared) if not s)
        bk = None
        if size <= STACK_LIMIT and kr.out_bytes <= OUT_LIMIT and not all(shared):
            key = (kr.signature, shared)
            if key not in self.batched:
                try:
                    self.batched[key] = self.src.batched_kernel(self, kr, shared)
                except ImportError:
                    self.batched[key] = None      # NOTE: no passes.vmap yet: loop
                except DiagnosticError:
                    self.batched[key] = None      # NOTE: vmap cannot batch it: loop
            bk = self.batched[key]
        if bk is None:
            self._lost(kr, len(members))
            return self._loop(kr, members)
        # NOTE: the run-time cost model: the batched call's measured time at this batch size
        # (bucketed by powers of two) against the measured per-instance time times n; an
        # unmeasured side is tried first (a symbolic kernel is slower than the static one at
        # small sizes: W5's (1,640)x(640,256) took 0.23 ms batched at n=2, 13 us a call alone)
        n = len(members)
        bucket = n.bit_length()
        est = bk.cost.get(bucket)
        if est is not None and (kr.single_cost is None or est > kr.single_cost * n):
            # NOTE: a rejected batched kernel is tried again every RETRY-th time (one sample
            # on a loaded machine can be far off)
            skips = bk.skips.get(bucket, 0) + 1
            bk.skips[bucket] = skips
            if (kr.single_cost is not None or bk.tries.get(bucket, 0) >= 1) and \
                    skips % RETRY:
                if n >= 8:
                    self._lost(kr, n)
                return self._loop(kr, members)
        bk.tries[bucket] = bk.tries.get(bucket, 0) + 1
        try:
            bk.prepare(n)           # NOTE: compiling is not the call's cost
            t = perf_counter()
            out = bk.call(self, leaves)
        except Exception:
            return self._loop(kr, members)
        d = perf_counter() - t
        bk.cost[bucket] = d if est is None else 0.7 * est + 0.3 * d
        if kr.single_cost is not None:
            # NOTE: a batched call pays when it saves more than parking costs its instances
            if d + n * PARK_COST <= kr.single_cost * n:
                kr.won += n
            elif n >= 8:
                self._lost(kr, n)
        return out

    def _lost(self, kr: KernelRunner, n: int) -> None:
        """A group of ``n`` calls of ``kr`` gained nothing from batching (or cannot be
        batched). After :data:`UNDEFER` such calls and no batched call that paid, the
        instances stop parking on ``kr``: its calls run inline from then on (parking and
        resuming cost Python time, and interleaving the instances costs cache)."""
        kr.lost += n
        # NOTE: a few wins on a noisy clock do not keep a kernel parked: it must win at least
        # a quarter as often as it loses
        if kr.lost >= UNDEFER and kr.lost > 4 * kr.won:
            kr.defer = False
            self.stats["undeferred"] += 1

    def _loop(self, kr: KernelRunner, members: list[_Instance]) -> list:
        """The group's calls one by one (timed: the cost model's per-instance figure)."""
        t = perf_counter()
        out = [self._call_one(x) for x in members]
        d = (perf_counter() - t) / len(members)
        kr.single_cost = d if kr.single_cost is None else 0.7 * kr.single_cost + 0.3 * d
        return out

    def _call_one(self, x: _Instance) -> Any:
        k, args, site = x.pending
        kr = self.kernel(k)
        try:
            return kr.call(args)
        except Exception as e:
            span = site[0].spans[site[1] - 1] if site is not None else None
            raise _instance_error(_wrap_error(e, kr, span), x.index) from None

    def _resume(self, x: _Instance, v: Any, site: Any) -> None:
        if site is None:               # a kernel call in tail position: return its value
            if not x.stack:
                x.result, x.done = v, True
                return
            x.regs = x.stack.pop()
            code, pc, dst = x.stack.pop()
            x.regs[dst] = v
            x.code, x.pc = code, pc
        else:
            code, pc, dst = site
            x.regs[dst] = v
            x.code, x.pc = code, pc
        self._advance(x)

    def _advance(self, x: _Instance) -> None:
        """Run instance ``x`` until its next kernel call (parked) or its end (done)."""
        code, pc, regs, stack = x.code, x.pc, x.regs, x.stack
        steps = code.steps
        push, pop = stack.append, stack.pop
        limit = 2 * self.max_depth
        kernels = self.kernels
        try:
            while True:
                r = steps[pc](regs)
                if r.__class__ is int:
                    pc = r
                    continue
                tag = r[0]
                if tag == KERNEL:
                    self.stats["instance_calls"] += 1
                    kr = kernels.get(r[1])
                    if kr is None:
                        kr = self.kernel(r[1])
                    if kr.defer:
                        x.code, x.pc, x.regs = code, pc, regs
                        self.stats["parked"] += 1
                        x.pending = (r[1], r[2], r[3])
                        x.depth += 1
                        return
                    # NOTE: a kernel that batching does not pay for runs now, inline
                    v = kr.call(r[2])
                    site = r[3]
                    if site is not None:
                        regs[site[2]] = v
                        pc = site[1]
                        continue
                elif tag == RET:
                    v = r[1]
                else:
                    f = r[1]
                    a = r[2]
                    if f.__class__ is Closure:
                        ncode = f.code
                        if ncode is None:
                            ncode = f.force()
                        if len(a) != ncode.nparams:
                            raise InterpreterError(f"{_fn_name(f)} expects {ncode.nparams} "
                                                   f"arguments, got {len(a)}", code.spans[pc])
                        if tag == CALL:
                            if len(stack) >= limit:
                                raise _too_deep(f, self.max_depth)
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
                # the value v returns to the caller (a tail kernel call, a return, a tail
                # call of a builtin)
                if not stack:
                    x.result, x.done = v, True
                    return
                regs = pop()
                code, pc, dst = pop()
                regs[dst] = v
                steps = code.steps
        except DiagnosticError as e:        # InterpreterError included
            raise _instance_error(e.with_span(_span_at(code, pc)), x.index) from None
        except Exception as e:
            err = InterpreterError(f"evaluation failed: {type(e).__name__}: {e}",
                                   _span_at(code, pc))
            raise _instance_error(err, x.index) from e


class BatchClosure(Closure):
    """A function value returned by ``run_batch``: calling it runs it with the batch driver."""

    __slots__ = ("runner",)

    def __call__(self, *args: Any) -> Any:
        func = self.func
        ptypes = [p.type_annotation for p in func.params] if func is not None else \
            [None] * len(args)
        return self.runner.run_closure(self, check_arguments(func, ptypes, args))


def _rebuild(v: Any, runner: BatchRunner) -> Any:
    """``v`` with its closures as :class:`BatchClosure` (tuples and ADT values rebuilt,
    references updated in place); iterative."""
    from relay_ir.runtime.values import ADTValue, RefValue
    results: list[Any] = []
    stack: list[tuple[Any, bool]] = [(v, False)]
    refs: dict[int, Any] = {}
    while stack:
        x, done = stack.pop()
        t = type(x)
        if t is Closure:
            bc = BatchClosure(x.code, x.captured, x.func, x.name, x.program)
            bc.runner = runner
            results.append(bc)
            continue
        if isinstance(x, RefValue):
            if id(x) not in refs:
                refs[id(x)] = x
                x.value = _rebuild(x.value, runner)   # NOTE: one level per reference
            results.append(x)
            continue
        kids = list(x) if t is tuple else list(x.fields) if isinstance(x, ADTValue) else None
        if not kids:
            results.append(x)
            continue
        if not done:
            stack.append((x, True))
            stack.extend((c, False) for c in reversed(kids))
            continue
        vals = results[len(results) - len(kids):]
        del results[len(results) - len(kids):]
        results.append(tuple(vals) if t is tuple else ADTValue(x.constructor, tuple(vals)))
    return results[0]


def _wrap_error(e: BaseException, kr: KernelRunner, span: Any) -> DiagnosticError:
    if isinstance(e, DiagnosticError):
        return e.with_span(span) if e.span is None else e
    return InterpreterError(f"the kernel {kr.kern.label} failed: {type(e).__name__}: {e}",
                            span)


def _instance_error(e: DiagnosticError, i: int) -> DiagnosticError:
    """``e`` with the failing instance named (same class, same span)."""
    e.message = f"run_batch: instance {i}: {e.message}"
    return e


def have_vmap() -> bool:
    """Whether ``passes.vmap.vmap_function`` is available (batched kernels; else a loop)."""
    try:
        from relay_ir.passes.vmap import vmap_function  # noqa: F401
    except ImportError:
        return False
    return True


def run_batch(exe: Any, arg_tuples: Sequence[Sequence[Any]], entry: str | None = None) -> list:
    """Run ``exe``'s ``entry`` on every argument tuple; results in order (see the module doc)."""
    if isinstance(arg_tuples, (str, bytes)) or not hasattr(arg_tuples, "__len__"):
        raise DiagnosticError(f"run_batch expects a list of argument tuples, not "
                              f"{type(arg_tuples).__name__}")
    loaded = getattr(exe, "module", None) is None or not hasattr(exe._backend, "cp")
    if loaded and "batch" not in (getattr(exe, "metadata", None) or {}):
        raise DiagnosticError(
            "run_batch: this module file holds no batched kernels nor the instruction "
            "program run_batch interprets: export it with exe.export_library(path, "
            "batched=True), or build the program with runtime.build(...) in this process")
    if exe.vm is None:
        from relay_ir.runtime.relax_cuda import no_gpu_error
        raise no_gpu_error()
    if exe._cuda:
        raise DiagnosticError("run_batch: target cuda is not supported yet (build for llvm)")
    if len(arg_tuples) == 0:
        return []
    if len(arg_tuples) == 1 and isinstance(arg_tuples[0], (tuple, list)):
        # NOTE: nothing to batch: one instance runs on the VM (same values, its own speed)
        try:
            return [exe(*arg_tuples[0], entry=entry)]
        except DiagnosticError as e:
            raise _instance_error(e, 0) from None
    runner = getattr(exe, "_batch_runner", None)
    if runner is None:
        src = LoadedSource(exe, exe.metadata["batch"]) if loaded else None
        runner = exe._batch_runner = BatchRunner(exe, src)
    return runner.run(list(arg_tuples), entry or exe.entry)


__all__ = ["run_batch", "have_vmap", "BatchRunner", "BatchProgram", "KERNEL", "STACK_LIMIT"]
