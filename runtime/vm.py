"""The compiled executor (VM): whole programs with TVM kernels, and module files.

**One compiler, two backends.** ``runtime.compiler`` compiles the optimized, fused module to
the same plain-data instructions the interpreter runs, with ``kernels=True``: every call of a
fused ``Primitive=1`` group becomes an invoke-kernel instruction (``kernel`` / ``kernel_ret``)
that indexes a table of groups. This module is the backend that runs that program: it reuses
the interpreter's machine (flat step list per function, explicit frame stack, tail calls, no
Python recursion) for the control instructions and adds its own steps for the kernels, so the
control program is plain data -- it is what :meth:`VM.export_library` writes as JSON.

**Kernels.** A :class:`KernelGroup` is one fused group; it holds one compiled kernel per
concrete argument signature (shapes and dtypes). Groups whose parameter types are static are
compiled when the program is built (all in one batch through the kernel cache); groups with
``?`` or symbolic dims compile on the first call with a new signature (again through the
cache, so a shape seen by any earlier build in this process or on disk is not recompiled).
A group with an operator that has no TVM compute runs its body on the host (numpy reference
implementations, the interpreter's code for the group).

**Values** are the interpreter's: numpy arrays (kernel outputs are fresh 64-byte aligned
arrays), tuples, :class:`~relay_ir.runtime.values.ADTValue`, refs, closures. For
``target="cuda"`` tensors stay on the device as ``tvm.runtime.Tensor`` from the first kernel
that touches them until the result is returned (copied back once); only branch conditions
and host operators copy a value to the host.

**Module files** (:meth:`VM.export_library`, :func:`load_module`) -- one file::

    b"RLYMOD\\0\\0"  8 bytes magic
    u32   format version (FORMAT_VERSION)
    u64   header length H          u64 blob length B
    32 B  SHA-256 of the header    32 B  SHA-256 of the blob
    H bytes  header: UTF-8 JSON (target, control program, kernel table, array table)
    B bytes  blob: the kernels as TVM shared libraries (those they ran from, out of the kernel
             cache), then the raw bytes of the arrays (each distinct array once)

Loading checks the size, both checksums, the version and the target before it parses the JSON
or hands the library to ``dlopen`` (a truncated library would crash the process); it never
imports ``relay_ir.passes`` and never compiles. No pickle, no eval.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.errors import DiagnosticError, InterpreterError, LoweringError
from relay_ir.expr import Constructor, Function
from relay_ir.runtime.compiler import CompiledFunction, CompiledProgram
from relay_ir.runtime.lower_tvm import DynamicShapeError
from relay_ir.runtime.interpreter import (DEFAULT_MAX_DEPTH, Code, Program, _execute,
                                          _normalize_output)
from relay_ir.runtime.values import ADTValue, Closure, RefValue, check_arguments
from relay_ir.ty import (ANY, DimExpr, FuncType, GlobalTypeVar, RefType, ShapeVar, TensorType,
                         TupleType, Type, TypeCall, dim_add, dim_mul, tuple_leaves)

MAGIC = b"RLYMOD\0\0"
# 3: CPU kernels assume only element alignment of their arguments (version 2 kernels assumed
# 64 bytes and fault on the arrays numpy allocates, which are passed zero-copy now)
FORMAT_VERSION = 3
_PREFIX = struct.Struct("<8sIQQ32s32s")
ALIGN = 64


class ModuleFileError(DiagnosticError):
    """A module file that cannot be loaded (missing, truncated, corrupt, wrong version/target)."""

    kind = "module file error"


# ============================================================================ helpers
def _aligned_empty(shape: tuple, dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    n = dt.itemsize
    for d in shape:
        n *= d
    raw = np.empty(n + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + n].view(dt).reshape(shape)


ndarray = np.ndarray


class _Slab:
    """Small aligned output buffers carved from 256 KiB slabs (one allocation per slab).

    A kernel's small outputs are fresh arrays like any other; carving them from a slab
    replaces a 1.5 us aligned allocation by a 0.3 us ``np.ndarray`` view. A slab is freed when
    the last array carved from it dies.
    """

    SIZE = 1 << 18
    LIMIT = 4096          # outputs up to this many bytes come from a slab

    def __init__(self) -> None:
        self.buf = _aligned_empty((self.SIZE,), np.uint8)
        self.pos = 0

    def alloc(self, shape: tuple, dtype: np.dtype, count: int, nbytes: int) -> np.ndarray:
        """A fresh ``shape``/``dtype`` array of ``count`` elements (``nbytes`` bytes)."""
        pos = self.pos
        if pos + nbytes > self.SIZE:
            self.buf = _aligned_empty((self.SIZE,), np.uint8)
            pos = 0
        self.pos = pos + ((nbytes + ALIGN - 1) & -ALIGN or ALIGN)
        return ndarray(shape, dtype, self.buf, pos)


def _zero_copy(a: np.ndarray) -> np.ndarray:
    """``a`` itself when a CPU kernel can take it as it is (C-contiguous, writeable, aligned to
    its element size: kernels assume no more, ``schedules.unaligned_params``), else an aligned
    copy (strided views, read-only arrays)."""
    f = a.flags
    if f.c_contiguous and f.aligned and f.writeable:
        return a
    out = _aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def _aligned(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.__array_interface__["data"][0] % ALIGN == 0 and arr.flags.c_contiguous and \
            arr.flags.writeable:
        return arr
    out = _aligned_empty(arr.shape, arr.dtype)
    np.copyto(out, arr)
    return out


def _from_dlpack_any(a: Any) -> Any:
    """A zero-copy TVM view of a C-contiguous, writeable host array of any alignment."""
    import tvm_ffi
    if getattr(a, "size", 1) == 0:
        # NOTE: an empty array's strides may be anything (numpy keeps a view's), which a
        # kernel refuses as not compact (a Loop's empty scan accumulator, a kernel constant)
        import tvm
        return tvm.runtime.empty(a.shape, a.dtype)
    return tvm_ffi.from_dlpack(a, require_alignment=0, require_contiguous=True)


def _value_type(v: Any) -> Type:
    if isinstance(v, tuple):
        return TupleType(tuple(_value_type(x) for x in v))
    a = np.asarray(v) if not hasattr(v, "shape") else v
    return TensorType(tuple(int(d) for d in a.shape), str(a.dtype))


def _flat(args: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    stack = list(reversed(args))
    while stack:
        x = stack.pop()
        if type(x) is tuple:
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


def _rebuild(struct_: Any, outs: list[Any]) -> Any:
    """Nest ``outs`` like ``struct_`` (an int leaf index, or a list of sub-structures)."""
    if type(struct_) is int:
        return outs[struct_]
    return tuple(_rebuild(s, outs) for s in struct_)  # NOTE: depth = tuple nesting only


def _result_struct(t: Type) -> Any:
    counter = [0]

    def build(x: Type) -> Any:
        if isinstance(x, TupleType):
            return [build(f) for f in x.fields]
        counter[0] += 1
        return counter[0] - 1
    return build(t)


def _is_static(t: Type | None) -> bool:
    if isinstance(t, TensorType):
        return all(isinstance(d, int) for d in t.shape)
    if isinstance(t, TupleType):
        return all(_is_static(f) for f in t.fields)
    return False


# ============================================================================ kernels
class KernelSig:
    """One compiled signature of a group: the kernel, its constants and output layout."""

    __slots__ = ("func", "consts", "tconsts", "outs", "result", "symbol", "request", "host",
                 "specs")

    def __init__(self, func: Any, consts: list[np.ndarray], outs: list[tuple[tuple, str]],
                 result: Any, symbol: str = "", request: Any = None, host: bool = False):
        self.func = func
        self.consts = consts                 # numpy (aligned) large constants of the kernel
        self.tconsts: list[Any] = []         # ... as tvm tensors (on the device for cuda)
        self.outs = outs
        self.result = result                 # int (one output) or nested lists of indices
        self.symbol = symbol
        self.request = request               # KernelRequest (to rebuild for export)
        self.host = host
        # per output: (shape, dtype, element count, bytes, from the slab?)
        self.specs = []
        for sh, dt in outs:
            d = np.dtype(dt)
            count = 1
            for x in sh:
                count *= x
            self.specs.append((tuple(sh), d, count, count * d.itemsize,
                               count * d.itemsize <= _Slab.LIMIT))


class KernelGroup:
    """A fused group of the program: compiled kernels per concrete argument signature."""

    def __init__(self, vm: VM, index: int, fn: Function | None, body: int, label: str):
        self.vm = vm
        self.index = index
        self.fn = fn
        self.body = body                     # the group as an ordinary function (host code)
        self.label = label
        self.sigs: dict[tuple, KernelSig] = {}
        self.static: KernelSig | None = None
        self.param_types: list[Type | None] = []
        if fn is not None:
            self.param_types = [p.type_annotation or p.checked_type_ for p in fn.params]

    def is_static(self) -> bool:
        """Whether every parameter type is concrete (compiled when the program is built)."""
        return self.fn is not None and all(_is_static(t) for t in self.param_types)

    def is_scalar(self) -> bool:
        """Whether every argument and the result are 0-d tensors (run as host code).

        A TVM call costs a few microseconds of dispatch whatever the kernel does; on one
        element numpy is several times faster, so scalar groups (loop counters, conditions,
        the arithmetic of scalar programs) are evaluated on the host with the operators'
        reference implementations -- the same code, hence the same values, as the
        interpreter.
        """
        if self.fn is None:
            return False
        ft = self.fn.checked_type_
        ret = ft.ret_type if isinstance(ft, FuncType) else self.fn.ret_type
        ts = [*self.param_types, ret]
        return all(isinstance(t, TensorType) and len(t.shape) == 0 for t in ts)

    @staticmethod
    def key_of(flat: list[Any]) -> tuple:
        """The signature key of the flattened arguments."""
        return tuple((x.shape, x.dtype.str) for x in flat)

    def add(self, key: tuple, sig: KernelSig) -> None:
        """Register a compiled signature (the only one of a static group is its fast path)."""
        self.sigs[key] = sig
        if self.is_static() or (self.fn is None and self.vm.static_groups.get(self.index)):
            self.static = sig

    def lookup(self, flat: list[Any], args: list[Any]) -> KernelSig:
        """The kernel for these arguments, compiling it now on a miss."""
        key = self.key_of(flat)
        sig = self.sigs.get(key)
        if sig is None:
            if self.fn is None:
                shapes = ", ".join(f"{s}:{np.dtype(d).name}" for s, d in key)
                raise DiagnosticError(
                    f"this module file has no kernel for the group {self.label} at the "
                    f"argument shapes ({shapes}); a loaded module does not compile. Run the "
                    f"program once with these shapes before export_library (or use "
                    f"runtime.build)")
            self.vm.compile_groups([(self, [_value_type(a) for a in args])])
            sig = self.sigs[key]
        return sig


# ============================================================================ the VM
class VMProgram(Program):
    """The interpreter's program with this backend's kernel steps (and device steps)."""

    def __init__(self, vm: VM, compiled: CompiledProgram):
        super().__init__(compiled.mod, compiled)
        self.vm = vm
        facts: dict[str, Callable] = {"kernel": self._kernel, "kernel_ret": self._kernel_ret}
        if vm.cuda:
            facts.update(br=self._cuda_br, op=self._cuda_op, op_ret=self._cuda_op,
                         op_br=self._cuda_op)
        self.step_factories = facts

    def global_closure(self, name: str, span: Any = None) -> Closure:
        """The closure of global ``@name`` (also for a program loaded without its module)."""
        if self.mod is not None:
            return super().global_closure(name, span)
        clo = self.globals.get(name)
        if clo is None:
            if name not in self.compiled.globals:
                raise InterpreterError(f"there is no global function @{name} in the module",
                                       span)
            clo = Closure(None, [], None, name, self)
            self.globals[name] = clo
        return clo

    # ------------------------------------------------------------ kernel steps
    def _kernel(self, ins: tuple, pc: int, code: Code) -> tuple[Callable, str]:
        _, dst, k, a = ins
        group = self.vm.groups[k]
        nxt = pc + 1
        one = self._one_op_step(group, a, dst, nxt)
        if one is not None:
            return one, "kernel " + group.label
        run = self.vm.kernel_runner(group, len(a))
        if len(a) == 1:
            a0, = a

            def step(regs: list) -> int:
                regs[dst] = run(regs[a0])
                return nxt
        elif len(a) == 2:
            a0, a1 = a

            def step(regs: list) -> int:
                regs[dst] = run(regs[a0], regs[a1])
                return nxt
        elif len(a) == 3:
            a0, a1, a2 = a

            def step(regs: list) -> int:
                regs[dst] = run(regs[a0], regs[a1], regs[a2])
                return nxt
        else:
            idx = tuple(a)

            def step(regs: list) -> int:
                regs[dst] = run(*[regs[i] for i in idx])
                return nxt
        return step, "kernel " + group.label

    def _one_op_step(self, group: KernelGroup, a: Sequence[int], dst: int, nxt: int
                     ) -> Callable | None:
        """A host scalar group of one operator: one step calling its numpy impl directly."""
        sig = group.static
        if sig is None or not sig.host or self.vm.cuda:
            return None
        cf = self.compiled.functions[group.body]
        if len(cf.code) != 1 or cf.code[0][0] != "op_ret":
            return None
        from relay_ir.op import get_opdef
        _, name, ai, srcs = cf.code[0]
        impl = get_opdef(name).impl
        if impl is None:
            return None
        attrs = self.compiled.attrs[ai]
        rest = self.code(group.body).rest
        src: list[tuple[bool, Any]] = []
        for r in srcs:
            if r < cf.nparams:
                src.append((True, a[r]))
            else:
                src.append((False, rest[r - cf.nparams]))
        if len(src) == 2 and src[0][0] and src[1][0]:
            r0, r1 = src[0][1], src[1][1]

            def step(regs: list) -> int:
                regs[dst] = impl([regs[r0], regs[r1]], attrs)
                return nxt
        elif len(src) == 2 and src[0][0]:
            r0, c1 = src[0][1], src[1][1]

            def step(regs: list) -> int:
                regs[dst] = impl([regs[r0], c1], attrs)
                return nxt
        elif len(src) == 1 and src[0][0]:
            r0 = src[0][1]

            def step(regs: list) -> int:
                regs[dst] = impl([regs[r0]], attrs)
                return nxt
        else:
            items = tuple(src)

            def step(regs: list) -> int:
                regs[dst] = impl([regs[v] if is_reg else v for is_reg, v in items], attrs)
                return nxt
        return step

    def _kernel_ret(self, ins: tuple, pc: int, code: Code) -> tuple[Callable, str]:
        _, k, a = ins
        group = self.vm.groups[k]
        run = self.vm.kernel_runner(group, len(a))
        idx = tuple(a)

        def step(regs: list) -> tuple:
            return (2, run(*[regs[i] for i in idx]))   # NOTE: 2 is interpreter.RET
        return step, "kernel " + group.label

    # ------------------------------------------------------------ cuda: host where needed
    def _cuda_br(self, ins: tuple, pc: int, code: Code) -> tuple[Callable, None]:
        _, c, t_pc, f_pc = ins
        host = self.vm.to_host

        def step(regs: list) -> int:
            return t_pc if host(regs[c]) else f_pc
        return step, None

    def _cuda_op(self, ins: tuple, pc: int, code: Code) -> tuple[Callable, str]:
        from relay_ir.op import get_opdef
        tag = ins[0]
        name = ins[1] if tag == "op_ret" else ins[2]
        impl = get_opdef(name).impl
        cp = self.compiled
        host = self.vm.to_host
        nxt = pc + 1
        if tag == "op_ret":
            attrs, idx = cp.attrs[ins[2]], tuple(ins[3])

            def step(regs: list) -> Any:
                return (2, impl([host(regs[i]) for i in idx], attrs))
        elif tag == "op":
            dst, attrs, idx = ins[1], cp.attrs[ins[3]], tuple(ins[4])

            def step(regs: list) -> Any:
                regs[dst] = impl([host(regs[i]) for i in idx], attrs)
                return nxt
        else:
            dst, attrs, idx, t_pc, f_pc = ins[1], cp.attrs[ins[3]], tuple(ins[4]), ins[5], \
                ins[6]

            def step(regs: list) -> Any:
                v = regs[dst] = impl([host(regs[i]) for i in idx], attrs)
                return t_pc if v else f_pc
        return step, name


class VM:
    """A compiled whole program: ``vm(*args, entry="main")`` runs an entry.

    Built by ``runtime.build`` (from the fused module) or by :func:`load_module` (from a file).
    Not thread-safe.
    """

    def __init__(self, compiled: CompiledProgram, target: Any, *, exe: Any = None,
                 param_types: dict[str, list[Type | None]] | None = None,
                 static_groups: dict[int, bool] | None = None, host_scalars: bool = True):
        import tvm
        from relay_ir.runtime.lower_tvm import is_cuda
        self.compiled = compiled
        self.target = target
        self.exe = exe                          # the Executable (lowering, cache); None: loaded
        self.cuda = is_cuda(target)
        self._tvm = tvm
        self._from_dlpack = tvm.runtime.from_dlpack if self.cuda else _from_dlpack_any
        self._dev = tvm.cuda(0) if self.cuda else None
        self._param_types = dict(param_types or {})
        self._param_names: dict[str, list[str]] = {}
        self.default_entry = "main"             # what a call without entry= runs
        self.static_groups = dict(static_groups or {})
        self.host_scalars = host_scalars
        self._slab = _Slab()
        self.groups: list[KernelGroup] = []
        for k, (fn, body) in enumerate(zip(compiled.kernels, compiled.kernel_fns)):
            label = "+".join(_ops_of(fn)) if fn is not None else f"group{k}"
            self.groups.append(KernelGroup(self, k, fn, body, label))
        # NOTE: constants are passed to kernels zero-copy, so they are kept 64-byte aligned
        compiled.consts = [_aligned(c) for c in compiled.consts]
        self.program = VMProgram(self, compiled)

    # ------------------------------------------------------------ compiling kernels
    def compile_static(self) -> int:
        """Compile every group whose parameter types are static (one batch); returns count."""
        todo = []
        for g in self.groups:
            if not g.is_static() or g.sigs:
                continue
            if self.host_scalars and g.is_scalar():
                key = tuple(((), np.dtype(t.dtype).str) for t in g.param_types)  # type: ignore
                g.add(key, KernelSig(None, [], [], 0, host=True))
                continue
            todo.append((g, list(g.param_types)))
        if todo:
            self.compile_groups(todo)
        return len(todo)

    def compile_groups(self, items: list[tuple[KernelGroup, list[Type]]]) -> None:
        """Lower and compile groups at concrete argument types (misses compiled together)."""
        from relay_ir.runtime.executor import kernel_request
        exe = self.exe
        pending = []
        for g, types in items:
            key = tuple((tuple(int(d) for d in t.concrete_shape), np.dtype(t.dtype).str)
                        for t in _leaf_types(types))
            if key in g.sigs:
                continue
            try:
                lowered = exe._lower(g.fn, types)
            except LoweringError as e:
                # NOTE: no TVM compute, or an output shape that depends on values
                # (dyn.reshape): the group runs on the host with the reference impls
                if "has no TVM compute" not in str(e) and not isinstance(e, DynamicShapeError):
                    raise
                g.add(key, KernelSig(None, [], [], 0, host=True))
                continue
            outs = [(tuple(t.concrete_shape), t.dtype) for t in lowered.out_types]
            sig = KernelSig(None, [_aligned(c) for c in lowered.constants], outs,
                            _result_struct(lowered.result_type),
                            request=kernel_request(lowered, self.target))
            pending.append((g, key, sig))
        if not pending:
            return
        funcs = exe.cache.get([s.request for _, _, s in pending], self.target)
        for (g, key, sig), f in zip(pending, funcs):
            sig.func = f
            sig.symbol = "k_" + sig.request.key
            self._prepare_consts(sig)
            g.add(key, sig)

    def _prepare_consts(self, sig: KernelSig) -> None:
        tvm = self._tvm
        if self.cuda:
            sig.tconsts = [tvm.runtime.tensor(c, device=self._dev) for c in sig.consts]
        else:
            sig.tconsts = [self._from_dlpack(c) for c in sig.consts]

    # ------------------------------------------------------------ running kernels
    def to_host(self, v: Any) -> Any:
        """A device tensor as numpy (other values unchanged)."""
        if isinstance(v, self._tvm.runtime.Tensor):
            return v.numpy()
        return v

    def _tvm_arg(self, x: Any) -> Any:
        if self.cuda:
            if isinstance(x, self._tvm.runtime.Tensor):
                return x
            x = np.asarray(x)
            return self._tvm.runtime.tensor(x if x.flags.c_contiguous else x.copy(),
                                            device=self._dev)
        if type(x) is not np.ndarray:
            return self._from_dlpack(_aligned(x))   # NOTE: a host scalar (np.float32, ...)
        return self._from_dlpack(_zero_copy(x))  # NOTE: read-only or strided: copied once

    def kernel_runner(self, group: KernelGroup, nargs: int) -> Callable[..., Any]:
        """The callable a kernel step calls: ``run(*args) -> value``."""
        if group.static is not None and group.static.host:
            return self.host_runner(group)
        has_tuples = group.fn is None or any(not isinstance(t, TensorType)
                                             for t in group.param_types)
        tvm_arg = self._tvm_arg
        from_dlpack = self._from_dlpack
        cuda = self.cuda
        dev = self._dev
        empty = self._tvm.runtime.empty
        slab = self._slab
        host: list[Callable[..., Any]] = []
        sig0 = group.static
        if sig0 is not None and not cuda and not has_tuples and len(sig0.specs) == 1 and \
                sig0.specs[0][4] and sig0.result == 0:
            return self._small_runner(sig0, nargs, group.param_types)

        def run(*args: Any) -> Any:
            flat = _flat(args) if has_tuples else args
            sig = group.static
            if sig is None:
                if cuda:
                    flat = [tvm_arg(x) for x in flat]
                else:
                    flat = [x if type(x) is np.ndarray else np.asarray(x) for x in flat]
                sig = group.lookup(flat, list(args))
            if sig.host:
                if not host:
                    host.append(self.host_runner(group))
                return host[0](*args)
            if cuda:
                outs = [empty(sp[0], sp[1], device=dev) for sp in sig.specs]
                sig.func(*[tvm_arg(x) for x in flat], *sig.tconsts, *outs)
            else:
                try:
                    outs = [slab.alloc(*sp[:4]) if sp[4] else _aligned_empty(sp[0], sp[1])
                            for sp in sig.specs]
                except (MemoryError, ValueError):
                    from relay_ir.runtime.executor import alloc_failed
                    sp = max(sig.specs, key=lambda x: x[3])
                    raise alloc_failed(group.label, sp[0], sp[1]) from None
                sig.func(*[tvm_arg(x) for x in flat], *sig.tconsts,
                         *[from_dlpack(o) for o in outs])
            r = sig.result
            return outs[0] if r == 0 else _rebuild(r, outs)
        return run

    def _small_runner(self, sig: KernelSig, nargs: int, param_types: list[Type | None]
                      ) -> Callable[..., Any]:
        """The hot case: a static CPU kernel with tensor arguments and one small output."""
        fd = self._from_dlpack
        func = sig.func
        consts = tuple(sig.tconsts)
        shape, dt, count, nbytes = sig.specs[0][:4]
        alloc = self._slab.alloc

        wrap = self._tvm_arg
        scalar_in = any(isinstance(t, TensorType) and not t.shape for t in param_types)

        if nargs == 1 and not consts and not scalar_in:
            # NOTE: numpy arrays go to the kernel as they are (tvm_ffi takes them through
            # DLPack in C: 0.57 us for three arguments, 1.04 us wrapped one by one here); an
            # argument it refuses (read-only, strided) is refused before the kernel runs
            def run1(a: Any) -> Any:
                o = alloc(shape, dt, count, nbytes)
                try:
                    func(a, o)
                except Exception:
                    func(wrap(a), fd(o))
                return o
            return run1
        if nargs == 2 and not consts and not scalar_in:
            def run2(a: Any, b: Any) -> Any:
                o = alloc(shape, dt, count, nbytes)
                try:
                    func(a, b, o)
                except Exception:
                    func(wrap(a), wrap(b), fd(o))
                return o
            return run2

        def run(*args: Any) -> Any:
            o = alloc(shape, dt, count, nbytes)
            func(*[wrap(x) for x in args], *consts, fd(o))
            return o
        return run

    def host_runner(self, group: KernelGroup) -> Callable[..., Any]:
        """Run the group's body (straight-line operator calls) with numpy on the host."""
        code = self.program.code(group.body)
        steps = code.steps
        rest = code.rest
        cuda = self.cuda

        def run(*args: Any) -> Any:
            regs = [*args, *rest]
            pc = 0
            while True:
                r = steps[pc](regs)
                if r.__class__ is int:
                    pc = r
                    continue
                # NOTE: a group body only computes and returns: the action is (RET, value)
                return r[1]

        if not cuda:
            return run
        return lambda *args: run(*[self._host_tree(a) for a in args])

    def _host_tree(self, v: Any) -> Any:
        if type(v) is tuple:
            return tuple(self._host_tree(x) for x in v)
        return self.to_host(v)

    # ------------------------------------------------------------ entry
    def param_types(self, entry: str) -> list[Type | None]:
        """The entry's parameter types (for argument checks)."""
        got = self._param_types.get(entry)
        if got is None:
            mod = self.compiled.mod
            if mod is None or entry not in mod:
                raise DiagnosticError(f"there is no global function @{entry} (globals: "
                                      f"{', '.join('@' + n for n in self.compiled.globals)})")
            got = [p.type_annotation or p.checked_type_ for p in mod[entry].params]
            self._param_types[entry] = got
        return got

    def param_names(self, entry: str) -> list[str]:
        """The entry's parameter names (for the messages of the argument checks)."""
        got = self._param_names.get(entry)
        if got is None:
            mod = self.compiled.mod
            got = [p.name_hint for p in mod[entry].params] if mod is not None and \
                entry in mod else []
        return got

    def __call__(self, *args: Any, entry: str | None = None,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
        """Run ``entry`` on ``args`` (numpy arrays, tuples, ADT values, refs, closures).

        ``entry`` defaults to ``main`` (for a loaded module: the entry it was exported with).
        """
        if entry is None:
            entry = self.default_entry
        if self.cuda and not self._dev.exist:
            raise DiagnosticError("target cuda: no CUDA GPU is available to run the kernels "
                                  "(they are compiled; kernel_sources() shows them)")
        ptypes = self.param_types(entry)
        clo = self.program.global_closure(entry)
        fn = self.compiled.mod[entry] if self.compiled.mod is not None else None
        if fn is None and len(args) != len(ptypes):
            raise InterpreterError(f"@{entry} expects {len(ptypes)} arguments, got {len(args)}")
        vals = check_arguments(fn, ptypes, args,
                               None if fn is not None else self._param_names.get(entry))
        vals = [self._entry_value(v) for v in vals]
        out = _execute(clo, vals, max_depth)
        if self.cuda:
            out = _map_tensors(out, self.to_host)
        return _normalize_output(out)

    def _entry_value(self, v: Any) -> Any:
        if type(v) is np.ndarray:
            if not v.ndim:
                # NOTE: 0-d arguments stay on the host as they are: they are mostly control
                # values (loop counts) read by host scalar groups; a kernel copies one in
                return v
            if self.cuda:
                return self._tvm_arg(v)
            return _zero_copy(v)
        if type(v) is tuple:
            return tuple(self._entry_value(x) for x in v)
        return v

    def kernel_sources(self) -> list[str]:
        """The generated source of every compiled kernel (CUDA C, or LLVM IR for the CPU)."""
        out = []
        cache = self.exe.cache if self.exe is not None else None
        for g in self.groups:
            for sig in g.sigs.values():
                if sig.host or cache is None:
                    continue
                mod = cache.modules.get(sig.request.key)
                if mod is None:
                    continue
                out.append(mod.imports[0].inspect_source() if self.cuda and mod.imports
                           else mod.inspect_source("ll"))
        return out

    def num_compiled(self) -> int:
        """The number of compiled kernel signatures (host groups not counted)."""
        return sum(1 for g in self.groups for s in g.sigs.values() if not s.host)

    # ------------------------------------------------------------ export
    def export_library(self, path: str, entry: str = "main") -> None:
        """Write the program and its kernels to one module file (see the module docstring).

        ``entry`` is the global a call of the loaded module runs by default.
        """
        if self.exe is None:
            raise DiagnosticError("a loaded module cannot be exported again; export the "
                                  "runtime.build result")
        self.compiled.compile_all()
        if entry not in self.compiled.globals:
            raise DiagnosticError(f"there is no global function @{entry} to export (globals: "
                                  f"{', '.join('@' + n for n in self.compiled.globals)})")
        self.compile_static()
        self._translate_all()
        libs, lib_of = self._libraries()
        arrays: list[np.ndarray] = []
        seen: dict[tuple, int] = {}

        def array_ref(a: np.ndarray) -> int:
            # NOTE: one copy per distinct array: a weight is both a program constant (the
            # group's host code) and a kernel constant
            a = np.asarray(a)
            a = a if a.flags.c_contiguous else np.ascontiguousarray(a)  # NOTE: keeps 0-d
            k = (a.dtype.str, a.shape, hashlib.sha256(a.view(np.uint8).data if a.ndim else
                                                      a.tobytes()).digest())
            i = seen.get(k)
            if i is None:
                arrays.append(a)
                i = seen[k] = len(arrays) - 1
            return i

        cp = self.compiled
        kernels = []
        for g in self.groups:
            sigs = []
            for key, s in g.sigs.items():
                sigs.append({"key": [[list(sh), dt] for sh, dt in key], "host": s.host,
                             "symbol": s.symbol, "lib": lib_of.get(s.symbol, -1),
                             "outs": [[list(sh), dt] for sh, dt in s.outs],
                             "result": s.result, "consts": [array_ref(c) for c in s.consts]})
            kernels.append({"label": g.label, "body": g.body, "static": g.is_static(),
                            "sigs": sigs})
        entries = {}
        for name in cp.globals:
            # NOTE: the shape variables of one entry share names: `n` in two parameters is
            # one dimension after loading too
            entries[name] = {"types": [_type_to_json(t) for t in self.param_types(name)],
                             "names": self.param_names(name)}
        program = {
            "globals": cp.globals,
            "functions": [f.to_data() for f in cp.functions],
            "consts": [array_ref(c) for c in cp.consts],
            "attrs": [{"type_key": a.type_key, "values": _attrs_json(a)} for a in cp.attrs],
            "cons": [[c.belong_to.name_hint, c.name_hint, c.tag, len(c.inputs)]
                     for c in cp.cons],
            "kernels": kernels,
            "entries": entries,
            "default_entry": entry,
        }
        blob = bytearray()
        lib_table = []
        for data in libs:
            while len(blob) % ALIGN:
                blob.append(0)
            lib_table.append({"offset": len(blob), "size": len(data)})
            blob += data
        table = []
        for a in arrays:
            while len(blob) % ALIGN:
                blob.append(0)
            table.append({"offset": len(blob), "dtype": a.dtype.str, "shape": list(a.shape)})
            blob += a.tobytes()
        from relay_ir.runtime.lower_tvm import target_description
        header = {"format": "relay_ir.module", "version": FORMAT_VERSION,
                  "target": target_description(self.target),
                  "libraries": lib_table, "arrays": table,
                  "program": program}
        htext = json.dumps(header, separators=(",", ":")).encode()
        prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(htext), len(blob),
                              hashlib.sha256(htext).digest(), hashlib.sha256(blob).digest())
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(prefix)
            f.write(htext)
            f.write(blob)
        os.replace(tmp, path)

    def _translate_all(self) -> None:
        """Translate every function, so groups met only in unexecuted code are known."""
        for k in range(len(self.compiled.functions)):
            self.program.code(k)

    def _libraries(self) -> tuple[list[bytes], dict[str, int]]:
        """The kernel libraries to write, and the library index of each kernel symbol.

        The libraries are the ones the kernels already run from: the kernel cache's files
        (verified when loaded), read as they are -- nothing is compiled again. Only kernels
        the cache holds in memory alone (``use_disk=False``, CUDA) are compiled here, into
        one more library.
        """
        sigs = [s for g in self.groups for s in g.sigs.values() if not s.host]
        libs: list[bytes] = []
        lib_of: dict[str, int] = {}
        by_path: dict[str, int] = {}
        rest = []
        cache = self.exe.cache
        for s in sigs:
            if s.symbol in lib_of:
                continue
            path = cache.library_of(s.request.key) if s.request is not None else None
            idx = by_path.get(path) if path else None
            if path and idx is None:
                try:
                    with open(path, "rb") as f:
                        libs.append(f.read())
                    idx = by_path[path] = len(libs) - 1
                except OSError:
                    idx = None
            if idx is None:
                rest.append(s)
            else:
                lib_of[s.symbol] = idx
        if rest:
            libs.append(self._compile_library(rest))
            for s in rest:
                lib_of[s.symbol] = len(libs) - 1
        return libs, lib_of

    def _compile_library(self, sigs: list[KernelSig]) -> bytes:
        """Kernels without a library file compiled into one TVM shared library."""
        tvm = self._tvm
        funcs = {}
        for s in sigs:
            if s.symbol in funcs:
                continue
            try:
                mod = s.request.make_scheduled()
                f = mod["main"].with_attr("global_symbol", s.symbol)
                tvm.compile(tvm.IRModule({s.symbol: f}), target=self.target)
            except Exception:
                mod = s.request.make_fallback()
                f = mod["main"].with_attr("global_symbol", s.symbol)
            funcs[s.symbol] = f
        ex = tvm.compile(tvm.IRModule(funcs), target=self.target)
        d = tempfile.mkdtemp(prefix="relay_ir_export_")
        so = os.path.join(d, "kernels.so")
        try:
            ex.export_library(so)
            with open(so, "rb") as f:
                return f.read()
        finally:
            for p in (so,):
                if os.path.exists(p):
                    os.remove(p)
            os.rmdir(d)


def _ops_of(fn: Function) -> list[str]:
    from relay_ir.expr import Call, Op
    from relay_ir.traversal import post_order
    return [n.op.name for n in post_order(fn.body) if isinstance(n, Call) and
            isinstance(n.op, Op)]


def _leaf_types(types: Sequence[Type]) -> list[TensorType]:
    out = [u for t in types for u in tuple_leaves(t)]
    assert all(isinstance(u, TensorType) for u in out)
    return out  # type: ignore[return-value]


def _map_tensors(v: Any, f: Callable[[Any], Any]) -> Any:
    """``v`` with ``f`` applied to every leaf inside tuples, ADT values and refs (iterative)."""
    # NOTE: results are rebuilt bottom-up with an explicit stack (long lists are fine)
    done: dict[int, Any] = {}
    stack: list[tuple[Any, bool]] = [(v, False)]
    while stack:
        x, expanded = stack.pop()
        if id(x) in done:
            continue
        kids: Sequence[Any]
        if type(x) is tuple:
            kids = x
        elif isinstance(x, ADTValue):
            kids = x.fields
        elif isinstance(x, RefValue):
            kids = (x.value,)
        else:
            done[id(x)] = f(x)
            continue
        if not expanded:
            stack.append((x, True))
            stack.extend((k, False) for k in kids if id(k) not in done)
            continue
        new = [done[id(k)] for k in kids]
        if type(x) is tuple:
            done[id(x)] = tuple(new)
        elif isinstance(x, ADTValue):
            done[id(x)] = ADTValue(x.constructor, new)
        else:
            x.value = new[0]
            done[id(x)] = x
    return done[id(v)]


# ============================================================================ JSON of types
def _type_to_json(t: Type | None) -> Any:
    if isinstance(t, TensorType):
        dims: list[Any] = []
        for d in t.shape:
            if isinstance(d, int):
                dims.append(d)
            elif isinstance(d, ShapeVar):
                dims.append(d.name)
            elif isinstance(d, DimExpr):
                # n*m + 2*n: [[["m", "n"], 1], [["n"], 2]] (a variable repeated for a power)
                dims.append({"poly": [[[v.name for v in mono], int(c)] for mono, c in d.terms]})
            else:
                dims.append(None)       # ?: any size
        return {"t": "tensor", "shape": dims, "dtype": t.dtype}
    if isinstance(t, TupleType):
        return {"t": "tuple", "fields": [_type_to_json(f) for f in t.fields]}
    if isinstance(t, (TypeCall, GlobalTypeVar)):
        head = t.func if isinstance(t, TypeCall) else t
        if isinstance(head, GlobalTypeVar):
            return {"t": "adt", "name": head.name_hint}
        return None
    if isinstance(t, RefType):
        return {"t": "ref"}
    if isinstance(t, FuncType):
        return {"t": "fn"}
    return None


def _type_from_json(d: Any, shape_vars: dict[str, ShapeVar]) -> Type | None:
    # NOTE: recursion over the nesting of one parameter type only
    if d is None:
        return None
    k = d["t"]
    if k == "tensor":
        dims: list[Any] = []
        for x in d["shape"]:
            if isinstance(x, int):
                dims.append(x)
            elif isinstance(x, str):
                dims.append(shape_vars.setdefault(x, ShapeVar(x)))
            elif isinstance(x, dict):
                total: Any = 0
                for names, coef in x["poly"]:
                    term: Any = int(coef)
                    for n in names:
                        term = dim_mul(term, shape_vars.setdefault(str(n), ShapeVar(str(n))))
                    total = dim_add(total, term)
                dims.append(total)
            else:
                dims.append(ANY)
        return TensorType(tuple(dims), str(d["dtype"]))
    if k == "tuple":
        return TupleType(tuple(_type_from_json(f, shape_vars) for f in d["fields"]))
    if k == "adt":
        return GlobalTypeVar(str(d["name"]))
    if k == "ref":
        return RefType(TupleType(()))
    if k == "fn":
        return FuncType((), TupleType(()))
    return None


def _attrs_json(a: Attrs) -> dict[str, Any]:
    out = {}
    for k, v in a.items():
        out[k] = _json_value(v, k)
    return out


def _json_value(v: Any, name: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [_json_value(x, name) for x in v]
    raise DiagnosticError(f"cannot export the operator attribute {name}={v!r} (not plain data)")


# ============================================================================ loading
def load_module(path: str, target: Any = None) -> VM:
    """Load a module file written by ``export_library``; returns a runnable :class:`VM`.

    Never compiles and never imports the compiler passes. A missing, truncated, corrupt,
    wrong-version or wrong-target file is a :class:`ModuleFileError` (a DiagnosticError).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ModuleFileError(f"{path}: no such module file") from None
    except OSError as e:
        raise ModuleFileError(f"{path}: cannot read the module file: {e.strerror or e}") from None
    header, blob = _verify(path, data)
    import tvm
    from relay_ir.runtime.lower_tvm import check_target_description, ensure_threads
    try:
        tgt = check_target_description(header["target"])
    except LoweringError as e:
        raise ModuleFileError(f"{path}: {e.message}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ModuleFileError(f"{path}: malformed target description ({e})") from None
    ensure_threads()
    try:
        prog = header["program"]
        lib_infos = header["libraries"]
        arrays = [_array(blob, a) for a in header["arrays"]]
        cp = _program_from_json(prog, arrays)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ModuleFileError(f"{path}: malformed module description ({type(e).__name__}: "
                              f"{e})") from None
    libs = []
    for info in lib_infos:
        off, size = int(info["offset"]), int(info["size"])
        if off < 0 or off + size > len(blob):
            raise ModuleFileError(f"{path}: malformed module description (a kernel library "
                                  f"outside the blob)")
        libs.append(_load_library(path, blob[off:off + size], tvm))
    entries: dict[str, list[Type | None]] = {}
    names: dict[str, list[str]] = {}
    for name, e in prog["entries"].items():
        shape_vars: dict[str, ShapeVar] = {}
        entries[name] = [_type_from_json(t, shape_vars) for t in e["types"]]
        names[name] = [str(n) for n in e["names"]]
    static = {k: bool(kd["static"]) for k, kd in enumerate(prog["kernels"])}
    vm = VM(cp, tgt, param_types=entries, static_groups=static)
    vm._param_names = names
    vm.default_entry = str(prog.get("default_entry", "main"))
    for g, kd in zip(vm.groups, prog["kernels"]):
        g.label = str(kd["label"])
        for sd in kd["sigs"]:
            key = tuple((tuple(sh), dt) for sh, dt in sd["key"])
            if sd["host"]:
                g.add(key, KernelSig(None, [], [], 0, host=True))
                continue
            try:
                i = int(sd["lib"])
                func = libs[i][sd["symbol"]] if 0 <= i < len(libs) else None
            except Exception:
                func = None
            if func is None:
                raise ModuleFileError(f"{path}: the kernel library has no function "
                                      f"{sd['symbol']}")
            sig = KernelSig(func, [_aligned(arrays[i]) for i in sd["consts"]],
                            [(tuple(sh), dt) for sh, dt in sd["outs"]], _struct(sd["result"]),
                            symbol=sd["symbol"])
            vm._prepare_consts(sig)
            g.add(key, sig)
    return vm


def _struct(r: Any) -> Any:
    if isinstance(r, int):
        return r
    return [_struct(x) for x in r]


def _verify(path: str, data: bytes) -> tuple[dict, bytes]:
    n = _PREFIX.size
    if not data:
        raise ModuleFileError(f"{path}: the module file is empty")
    if len(data) < n or not data.startswith(MAGIC):
        if len(data) >= 4 and data[:4] == b"\x7fELF":
            raise ModuleFileError(f"{path}: this is a plain shared library, not a relay_ir "
                                  f"module file (write one with exe.export_library)")
        if MAGIC.startswith(data[:len(MAGIC)]) and len(data) < n:
            raise ModuleFileError(f"{path}: the module file is truncated ({len(data)} bytes)")
        raise ModuleFileError(f"{path}: not a relay_ir module file (bad magic bytes)")
    magic, version, hlen, blen, hsum, bsum = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise ModuleFileError(f"{path}: module file format version {version}; this relay_ir "
                              f"reads version {FORMAT_VERSION} (rebuild it with rly build)")
    if len(data) != n + hlen + blen:
        what = "truncated" if len(data) < n + hlen + blen else "longer than its header says"
        raise ModuleFileError(f"{path}: the module file is {what} ({len(data)} bytes, "
                              f"expected {n + hlen + blen})")
    htext = data[n:n + hlen]
    blob = data[n + hlen:]
    if hashlib.sha256(htext).digest() != hsum or hashlib.sha256(blob).digest() != bsum:
        raise ModuleFileError(f"{path}: the module file is corrupt (checksum mismatch)")
    try:
        header = json.loads(htext.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ModuleFileError(f"{path}: the module header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != "relay_ir.module" or \
            header.get("version") != FORMAT_VERSION:
        raise ModuleFileError(f"{path}: unknown module header format")
    return header, blob


def _array(blob: bytes, a: dict) -> np.ndarray:
    dt = np.dtype(a["dtype"])
    shape = tuple(int(x) for x in a["shape"])
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    off = int(a["offset"])
    if off < 0 or off + n > len(blob):
        raise ValueError("array outside the blob")
    return np.frombuffer(blob, dt, count=n // dt.itemsize if dt.itemsize else 0,
                         offset=off).reshape(shape).copy()


def _load_library(path: str, lib: bytes, tvm: Any) -> Any:
    fd, tmp = tempfile.mkstemp(prefix="relay_ir_module_", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        try:
            return tvm.runtime.load_module(tmp)
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModuleFileError(f"{path}: cannot load the kernel library: {msg}") from None
    finally:
        os.remove(tmp)   # NOTE: the loaded library stays mapped


def _program_from_json(prog: dict, arrays: list[np.ndarray]) -> CompiledProgram:
    cp = CompiledProgram(None, kernels=True)  # type: ignore[arg-type]
    cp.globals = {str(k): int(v) for k, v in prog["globals"].items()}
    cp.functions = [CompiledFunction.from_data(f) for f in prog["functions"]]
    cp.consts = [arrays[i] for i in prog["consts"]]
    cp.attrs = [Attrs(a["values"], a["type_key"]) for a in prog["attrs"]]
    heads: dict[str, GlobalTypeVar] = {}
    cons = []
    for tname, cname, tag, arity in prog["cons"]:
        head = heads.setdefault(tname, GlobalTypeVar(str(tname)))
        cons.append(Constructor(str(cname), tuple(TupleType(()) for _ in range(int(arity))),
                                head, int(tag)))
    cp.cons = cons
    cp.kernels = [None] * len(prog["kernels"])  # type: ignore[list-item]
    cp.kernel_fns = [int(k["body"]) for k in prog["kernels"]]
    return cp


__all__ = ["VM", "KernelGroup", "load_module", "ModuleFileError", "FORMAT_VERSION", "MAGIC"]
