"""``runtime.build(mod, target="llvm")``: any well-typed module, compiled.

The module is optimized (``passes.optimize``) and fused (``fuse-ops``). Each entry then runs on
one of two paths:

* **dataflow entries** -- a let spine of fused kernel calls, tuples, projections and aliases
  over tensor parameters -- run as straight-line kernel calls with a static memory plan (the
  fast path below);
* **every other entry** (closures, ``if``, ``match``, references, ADTs, calls of globals,
  recursion) runs on the compiled executor of ``runtime.vm``: the shared instruction compiler's
  control program, with an invoke-kernel instruction for each fused group.

An entry is planned per concrete input signature -- at build time for an entry with static
parameter types, else on the first call with each new shape (``?`` and symbolic dims), then
from the plan cache: every fused group is lowered to one
kernel (through the kernel cache), and memory is planned statically -- intermediates live in
buffers allocated once per plan and shared between values whose lifetimes do not overlap;
outputs are fresh arrays every call. Inputs that are C-contiguous, writeable and of the right
dtype are passed zero-copy at any alignment (CPU kernels assume only element alignment,
``schedules.unaligned_params``); non-contiguous views, read-only arrays and arrays not aligned
to their element size are copied once into an aligned buffer. A group
containing an operator without a TVM compute runs on the host with the numpy reference
implementations (reported by :meth:`Executable.host_kernels`).
:meth:`Executable.export_library` writes the whole program to one module file
(``runtime.load_module`` reads it back; ``runtime.vm`` documents the format).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relay_ir.errors import DiagnosticError, LoweringError
from relay_ir.runtime.lower_tvm import DynamicShapeError
from relay_ir.runtime.values import check_arguments
from relay_ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Match, Op, RefCreate,
                           RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.module import IRModule
from relay_ir.traversal import flatten_lets
from relay_ir.ty import AnyDim, ShapeVar, TensorType, TupleType, Type

ALIGN = 64


class _NeedsVM(Exception):
    """Planning found a group whose output shape depends on values: run the entry on the VM."""


class UnsupportedProgramError(DiagnosticError):
    """An entry is outside the dataflow fast path (it runs on the compiled executor instead)."""

    kind = "unsupported by the dataflow path"


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized C-contiguous array whose data is 64-byte aligned."""
    dt = np.dtype(dtype)
    n = math.prod(shape) * dt.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + n].view(dt).reshape(shape)


class AllocationError(DiagnosticError):
    """A kernel's output or intermediate does not fit in memory."""

    kind = "runtime error"


def alloc_failed(label: str, shape: tuple, dtype: Any, span: Any = None) -> AllocationError:
    """The diagnostic of a failed allocation for the output of the group ``label``."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    return AllocationError(f"cannot allocate the {dt.name} output {tuple(shape)} "
                           f"({nbytes / 2**30:.1f} GiB) of the kernel {label}: out of memory",
                           span)


def as_aligned(a: Any, dtype: Any = None) -> np.ndarray:
    """``a`` as a C-contiguous, 64-byte aligned array (itself when it already is one).

    Executables take any C-contiguous, writeable array without copying, so this is not needed
    for speed; it gives arrays whose vector loads never straddle a cache line.
    """
    arr = np.asarray(a, dtype=dtype)
    if _is_aligned(arr) and arr.flags.writeable:
        return arr
    return _aligned_copy(arr)


def _is_aligned(a: np.ndarray) -> bool:
    return a.ctypes.data % ALIGN == 0 and a.flags.c_contiguous


def zero_copy_ok(a: np.ndarray) -> bool:
    """Whether a kernel argument can be passed as it is (no copy): C-contiguous, writeable
    (DLPack cannot export read-only arrays) and aligned to its element size."""
    f = a.flags
    return f.c_contiguous and f.aligned and f.writeable


# ----------------------------------------------------------------------------- program shape
@dataclass
class _Step:
    """One binding of the entry's spine, classified."""

    kind: str                 # kernel | tuple | proj | alias
    var: Var
    fn: Function | None = None
    args: tuple[Expr, ...] = ()
    index: int = 0


_WHY = {
    If: "`if` (control flow)", Match: "`match` (ADTs)", RefCreate: "references",
    RefRead: "references", RefWrite: "references",
}


def _unsupported(what: str, node: Expr) -> UnsupportedProgramError:
    return UnsupportedProgramError(
        f"not a first-order dataflow entry: {what}; it runs on the compiled executor "
        f"(runtime.vm)", node.span)


def analyze_entry(fn: Function) -> tuple[list[_Step], Expr]:
    """Classify the fused entry's bindings; raise for anything outside the dataflow subset."""
    for p in fn.params:
        t = p.checked_type_ or p.type_annotation
        if not isinstance(t, TensorType):
            raise _unsupported(f"parameter %{p.name_hint} of type {t!r} (only tensor "
                               f"parameters are supported)", p)
    lets, body = flatten_lets(fn.body)
    prims: dict[int, Function] = {}
    steps: list[_Step] = []
    for let in lets:
        v = let.value
        if isinstance(v, Function):
            if not v.is_primitive:
                raise _unsupported("a closure (a non-primitive function value)", v)
            prims[id(let.var)] = v
            continue
        if isinstance(v, Call):
            if isinstance(v.op, Var) and id(v.op) in prims:
                for a in v.args:
                    _check_atom(a)
                steps.append(_Step("kernel", let.var, prims[id(v.op)], v.args))
                continue
            if isinstance(v.op, GlobalVar):
                raise _unsupported(f"a call of another global (@{v.op.name_hint})", v)
            if isinstance(v.op, Op):
                raise _unsupported(f"the effectful operator {v.op.name}", v)
            raise _unsupported("a call of a closure or constructor (ADTs)", v)
        if isinstance(v, Tuple):
            for a in v.fields:
                _check_atom(a)
            steps.append(_Step("tuple", let.var, args=v.fields))
            continue
        if isinstance(v, TupleGetItem):
            _check_atom(v.tuple_value)
            steps.append(_Step("proj", let.var, args=(v.tuple_value,), index=v.index))
            continue
        if isinstance(v, (Var, Constant)):
            _check_atom(v)
            steps.append(_Step("alias", let.var, args=(v,)))
            continue
        raise _unsupported(_WHY.get(type(v), type(v).__name__), v)
    if isinstance(body, Tuple):
        for a in body.fields:
            _check_atom(a)
    else:
        _check_atom(body)
    return steps, body


def _check_atom(a: Expr) -> None:
    if isinstance(a, Tuple):
        for f in a.fields:
            _check_atom(f)
        return
    if isinstance(a, (Var, Constant)):
        return
    if isinstance(a, GlobalVar):
        raise _unsupported(f"a global function value (@{a.name_hint})", a)
    raise _unsupported(_WHY.get(type(a), f"a {type(a).__name__} value"), a)


# ----------------------------------------------------------------------------- plans
# A value descriptor: ("slot", i) | ("const", array) | ("tuple", [descs])
Desc = tuple


@dataclass
class _KernelCall:
    func: Any                              # compiled kernel, or a host callable
    host: bool
    ins: list[Desc]                        # flattened leaves
    consts: list[Any]                      # tvm tensors of large constants
    outs: list[int]                        # slots
    label: str
    key: str = ""                          # kernel cache key (compiled kernels)
    fn: Function | None = None             # the fused group and its argument types (export)
    arg_types: list[Type] = field(default_factory=list)


@dataclass
class _Plan:
    """Everything needed to run one entry for one input signature."""

    param_slots: list[int]
    slot_types: list[TensorType]
    calls: list[_KernelCall]
    result: Desc
    output_slots: set[int]
    buffers: dict[int, np.ndarray] = field(default_factory=dict)   # intermediates
    wrapped: dict[int, Any] = field(default_factory=dict)          # their tvm tensors
    device: dict[int, Any] | None = None                          # GPU intermediates
    out_specs: dict[int, tuple] = field(default_factory=dict)     # output allocation
    param_set: frozenset = frozenset()


def _leaves(d: Desc) -> list[Desc]:
    out: list[Desc] = []
    stack = [d]
    while stack:
        x = stack.pop()
        if x[0] == "tuple":
            stack.extend(reversed(x[1]))
        else:
            out.append(x)
    return out


def _desc_type(d: Desc, slot_types: list[TensorType]) -> Type:
    if d[0] == "slot":
        return slot_types[d[1]]
    if d[0] == "const":
        return TensorType(tuple(d[1].shape), str(d[1].dtype))
    return TupleType(tuple(_desc_type(x, slot_types) for x in d[1]))


class Executable:
    """A built module: ``exe(*args, entry="main")`` runs an entry with compiled kernels.

    Not thread-safe: the intermediate buffers of a plan are shared between calls.
    """

    def __init__(self, mod: IRModule, target: Any, cache: Any = None,
                 fast_math: bool | None = None):
        from relay_ir.runtime.kernel_cache import default_cache
        from relay_ir.runtime.lower_tvm import ensure_threads, resolve_target
        self.module = mod
        self.entry = "main"          # the default entry of calls and exported modules
        self.fast_math = fast_math
        self.target = resolve_target(target)
        self.cache = cache or default_cache()
        self._entries: dict[str, tuple[list[_Step], Expr]] = {}
        self._plans: dict[tuple, _Plan] = {}
        self._lowered: dict[tuple, list[tuple[Function, Any]]] = {}
        self._vm_entries: set[str] = set()
        self._vm: Any = None
        self._static: dict[str, tuple] = {}      # entry -> (its one plan, shapes, dtypes)
        from relay_ir.runtime.vm import _Slab
        self._slab = _Slab()
        from relay_ir.runtime.lower_tvm import is_cuda
        self._cuda = is_cuda(self.target)
        ensure_threads()

    def _entry(self, entry: str) -> tuple[list[_Step], Expr]:
        got = self._entries.get(entry)
        if got is None:
            if entry not in self.module:
                raise DiagnosticError(f"there is no global function @{entry} (globals: "
                                      f"{', '.join('@' + n for n in self.module)})")
            try:
                got = analyze_entry(self.module[entry])
            except UnsupportedProgramError:
                self._vm_entries.add(entry)
                self.vm()
                raise
            self._entries[entry] = got
        return got

    def is_dataflow(self, entry: str | None = None) -> bool:
        """Whether ``entry`` runs on the dataflow fast path (else on the compiled executor)."""
        entry = entry or self.entry
        if entry in self._vm_entries:
            return False
        try:
            self._entry(entry)
        except UnsupportedProgramError:
            return False
        return True

    def _to_vm(self, entry: str) -> None:
        """Run ``entry`` on the compiled executor from now on (data-dependent shapes)."""
        self._entries.pop(entry, None)
        self._vm_entries.add(entry)

    def vm(self) -> Any:
        """The compiled executor of the whole module (``runtime.vm.VM``), built once.

        Building it compiles every global to instructions and every fused group with static
        shapes to a kernel (one batch through the kernel cache).
        """
        if self._vm is None:
            from relay_ir.runtime.compiler import CompiledProgram
            from relay_ir.runtime.vm import VM
            cp = CompiledProgram(self.module, kernels=True).compile_all()
            vm = VM(cp, self.target, exe=self)
            vm.compile_static()
            vm._translate_all()
            self._vm = vm
        return self._vm

    def compile_static(self) -> None:
        """Compile now every kernel the static types determine (``runtime.build`` calls it).

        A dataflow entry (``self.entry``) with static parameter types is planned: its kernels
        compiled and its memory planned. Any other entry gets the compiled executor, which
        compiles every fused group of the module with static parameter types.
        """
        name = self.entry
        if name not in self.module:
            return
        if not self.is_dataflow(name):
            self.vm()
            return
        types = [p.checked_type_ or p.type_annotation for p in self.module[name].params]
        if all(isinstance(t, TensorType) and t.is_static for t in types):
            try:
                dummies = [aligned_empty(tuple(t.concrete_shape), t.dtype)  # type: ignore
                           for t in types]
                self.prepare(*dummies, entry=name)
            except (AllocationError, MemoryError, ValueError):
                pass      # NOTE: too big for this machine: the call says so

    def export_library(self, path: str, entry: str | None = None) -> None:
        """Write the whole program (control program + kernels) to one module file.

        ``entry`` is the global a call of the loaded module runs by default (default: the
        entry the module was built for, ``main`` unless ``runtime.build(entry=...)``).

        The file holds every kernel compiled so far: those of every group with static shapes
        (compiled by ``runtime.build``) and those of every shape a ``?`` or symbolic group has
        run with, on either path. Nothing is run or compiled again: the kernels go in as the
        libraries they already run from. A loaded module never compiles: calling it with a
        shape whose kernel the file lacks is a ``DiagnosticError`` naming the group and the
        shapes.
        """
        vm = self.vm()
        groups = {id(g.fn): g for g in vm.groups if g.fn is not None}
        todo = []
        for plan in self._plans.values():
            for c in plan.calls:
                g = groups.get(id(c.fn))
                if g is not None:
                    todo.append((g, c.arg_types))
        if todo:
            vm.compile_groups(todo)      # NOTE: lowered and compiled already: cache hits
        vm.export_library(path, entry or self.entry)

    # ------------------------------------------------------------------ planning
    def _lower(self, fn: Function, arg_types: list[Type]) -> Any:
        """``lower_group`` memoized by the alpha-equivalence class of ``fn`` and the types.

        Repeated layers (the same fused function on the same shapes) are lowered once.
        """
        from relay_ir.op._te import fast_math
        from relay_ir.runtime.lower_tvm import lower_group
        from relay_ir.structural import structural_equal, structural_hash
        key = (structural_hash(fn), tuple(arg_types))
        for other, group in self._lowered.get(key, ()):
            if other is fn or structural_equal(other, fn):
                return group
        with fast_math(self.fast_math):
            group = lower_group(fn, arg_types)
        self._lowered.setdefault(key, []).append((fn, group))
        return group

    def _plan(self, entry: str, args: list[np.ndarray]) -> _Plan:
        steps, body = self._entry(entry)
        fn = self.module[entry]
        slot_types: list[TensorType] = []
        env: dict[int, Desc] = {}

        def new_slot(t: TensorType) -> int:
            slot_types.append(t)
            return len(slot_types) - 1

        param_slots = []
        for p, a in zip(fn.params, args):
            s = new_slot(TensorType(tuple(a.shape), str(a.dtype)))
            param_slots.append(s)
            env[id(p)] = ("slot", s)

        def desc_of(e: Expr) -> Desc:
            if isinstance(e, Constant):
                return ("const", e.data)
            if isinstance(e, Tuple):
                return ("tuple", [desc_of(f) for f in e.fields])
            return env[id(e)]

        pending: list[tuple[int, Any, Any]] = []   # (call index, request, group)
        calls: list[_KernelCall] = []
        for st in steps:
            if st.kind == "alias":
                env[id(st.var)] = desc_of(st.args[0])
            elif st.kind == "tuple":
                env[id(st.var)] = ("tuple", [desc_of(a) for a in st.args])
            elif st.kind == "proj":
                d = desc_of(st.args[0])
                env[id(st.var)] = d[1][st.index]
            else:
                assert st.fn is not None
                arg_descs = [desc_of(a) for a in st.args]
                arg_types = [_desc_type(d, slot_types) for d in arg_descs]
                ins = [leaf for d in arg_descs for leaf in _leaves(d)]
                try:
                    group = self._lower(st.fn, arg_types)
                except DynamicShapeError:
                    raise _NeedsVM() from None
                except LoweringError as e:
                    if "has no TVM compute" not in str(e):
                        raise
                    group = None
                if group is None:
                    host = _HostKernel(st.fn, arg_types)
                    outs = [new_slot(t) for t in host.out_types]
                    calls.append(_KernelCall(host, True, ins, [], outs, host.label,
                                             fn=st.fn, arg_types=arg_types))
                    env[id(st.var)] = _rebuild_desc(host.result_type, outs)
                    continue
                outs = [new_slot(t) for t in group.out_types]
                label = "+".join(group.ops)
                req = kernel_request(group, self.target)
                consts = [_to_tvm(_aligned_copy(c)) for c in group.constants]
                calls.append(_KernelCall(None, False, ins, consts, outs, label, fn=st.fn,
                                         arg_types=arg_types))
                pending.append((len(calls) - 1, req, group))
                env[id(st.var)] = _rebuild_desc(group.result_type, outs)
        if pending:
            reqs = [r for _, r, _ in pending]
            funcs = self.cache.get(reqs, self.target)
            for (ci, r, _), f in zip(pending, funcs):
                calls[ci].func = f
                calls[ci].key = r.key
        result = desc_of(body)
        output_slots = {d[1] for d in _leaves(result) if d[0] == "slot"}
        plan = _Plan(param_slots, slot_types, calls, result, output_slots,
                     param_set=frozenset(param_slots))
        self._plan_memory(plan)
        return plan

    @staticmethod
    def _plan_memory(plan: _Plan) -> None:
        """Intermediates: one buffer per plan, reused across values with disjoint lifetimes."""
        params = set(plan.param_slots)
        last_use: dict[int, int] = {}
        for i, c in enumerate(plan.calls):
            for d in c.ins:
                if d[0] == "slot":
                    last_use[d[1]] = i
        free: dict[int, list[np.ndarray]] = {}
        raws: dict[int, np.ndarray] = {}
        for i, c in enumerate(plan.calls):
            for s in c.outs:
                if s in plan.output_slots:
                    continue
                t = plan.slot_types[s]
                nbytes = int(np.prod(t.concrete_shape, dtype=np.int64)) * \
                    np.dtype(t.dtype).itemsize
                pool = free.get(nbytes)
                try:
                    raw = pool.pop() if pool else aligned_empty((nbytes,), np.uint8)
                except (MemoryError, ValueError):
                    raise alloc_failed(c.label, tuple(t.concrete_shape), t.dtype,
                                       c.fn.span if c.fn is not None else None) from None
                plan.buffers[s] = raw.view(t.dtype).reshape(t.concrete_shape)
                if not c.host:
                    plan.wrapped[s] = _to_tvm(plan.buffers[s])
                raws[s] = raw
                last_use.setdefault(s, i)  # NOTE: an unused intermediate dies right away
            for s in sorted({d[1] for d in c.ins if d[0] == "slot"}):
                if last_use.get(s) == i and s in raws and s not in params:
                    free.setdefault(raws[s].nbytes, []).append(raws[s])
            for s in c.outs:
                if s in raws and last_use.get(s) == i:
                    free.setdefault(raws[s].nbytes, []).append(raws[s])

    # ------------------------------------------------------------------ running
    def __call__(self, *args: Any, entry: str | None = None) -> Any:
        """Run ``entry`` (default: the build's entry, ``main``); numpy arrays in and out (tuples,
        ADT values, refs as the interpreter)."""
        if entry is None:
            entry = self.entry
        fast = self._static.get(entry)
        if fast is not None:
            # NOTE: a fully static entry has one plan; arrays of the exact dtypes and shapes
            # skip the conversions (the alignment check is the zero-copy wrap's own)
            plan, shapes, dtypes = fast
            if len(args) == len(shapes):
                for a, sh, dt in zip(args, shapes, dtypes):
                    if type(a) is not np.ndarray or a.shape != sh or a.dtype != dt:
                        break
                else:
                    if self._cuda:
                        return self._run_cuda(plan, list(args))
                    return self._run(plan, args, unchecked=True)
        if entry not in self._entries and not self.is_dataflow(entry):
            return self.vm()(*args, entry=entry)
        try:
            plan, arrays = self._get_plan(args, entry)
        except _NeedsVM:
            self._to_vm(entry)
            return self.vm()(*args, entry=entry)
        if self._cuda:
            return self._run_cuda(plan, arrays)
        return self._run(plan, arrays)

    def prepare(self, *args: Any, entry: str | None = None) -> int:
        """Plan and compile ``entry`` for these arguments' shapes without running it.

        Returns the number of kernel calls per run (for an entry on the compiled executor: the
        number of compiled kernels). (For ``target="cuda"`` on a machine without a GPU this is
        how kernels are compiled and inspected.)
        """
        entry = entry or self.entry
        if not self.is_dataflow(entry):
            return self.vm().num_compiled()
        try:
            plan, _ = self._get_plan(args, entry)
        except _NeedsVM:
            self._to_vm(entry)
            return self.vm().num_compiled()
        return len(plan.calls)

    def kernel_sources(self, entry: str | None = None) -> list[str]:
        """The generated source (CUDA C, or LLVM IR for the CPU) of each planned kernel."""
        entry = entry or self.entry
        if not self.is_dataflow(entry):
            return self.vm().kernel_sources()
        out = []
        for k, plan in self._plans.items():
            if k[0] != entry:
                continue
            for c in plan.calls:
                mod = self.cache.modules.get(c.key) if c.key else None
                if mod is None:
                    continue
                src = mod.imports[0].inspect_source() if self._cuda and mod.imports else \
                    mod.inspect_source("ll")
                out.append(src)
        return out

    def _get_plan(self, args: tuple, entry: str) -> tuple[_Plan, list[np.ndarray]]:
        self._entry(entry)
        fn = self.module[entry]
        # NOTE: the one argument check of every executor (values.check_arguments)
        ptypes = [p.checked_type_ or p.type_annotation for p in fn.params]
        arrays = [_aligned_arg(a) for a in check_arguments(fn, ptypes, args)]
        key = (entry, *((a.shape, a.dtype.str) for a in arrays))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(entry, arrays)
            self._plans[key] = plan
            types = [p.checked_type_ or p.type_annotation for p in fn.params]
            if all(isinstance(t, TensorType) and t.is_static for t in types):
                self._static[entry] = (plan, [tuple(t.shape) for t in types],  # type: ignore
                                       [np.dtype(t.dtype) for t in types])  # type: ignore
        return plan, arrays

    def _run_cuda(self, plan: _Plan, arrays: list[np.ndarray]) -> Any:
        import tvm
        dev = tvm.cuda(0)
        if not dev.exist:
            raise DiagnosticError("target cuda: no CUDA GPU is available to run the kernels "
                                  "(they are compiled; exe.kernel_sources() shows them)")
        if plan.device is None:
            plan.device = {s: tvm.runtime.empty(b.shape, str(b.dtype), device=dev)
                           for s, b in plan.buffers.items()}
            for c in plan.calls:
                c.consts = [tvm.runtime.tensor(t.numpy(), device=dev) for t in c.consts]
        vals: dict[int, Any] = dict(plan.device)
        for s, a in zip(plan.param_slots, arrays):
            vals[s] = tvm.runtime.tensor(a, device=dev)
        for s in plan.output_slots:
            if s not in vals:
                t = plan.slot_types[s]
                vals[s] = tvm.runtime.empty(t.concrete_shape, t.dtype, device=dev)
        for c in plan.calls:
            ins = [vals[d[1]] if d[0] == "slot" else tvm.runtime.tensor(d[1], device=dev)
                   for d in c.ins]
            if c.host:
                res = c.func([x.numpy() for x in ins])
                for s, r in zip(c.outs, res):
                    t = plan.slot_types[s]
                    vals[s].copyfrom(np.ascontiguousarray(r, dtype=t.dtype))
                continue
            c.func(*ins, *c.consts, *[vals[s] for s in c.outs])
        host = {s: v.numpy() for s, v in vals.items()
                if s in plan.output_slots or s in plan.param_slots}
        return _materialize(plan.result, host, set(plan.param_slots))

    def _run(self, plan: _Plan, arrays: Any, unchecked: bool = False) -> Any:
        values: dict[int, np.ndarray] = dict(plan.buffers)
        wrapped: dict[int, Any] = dict(plan.wrapped)
        for s, a in zip(plan.param_slots, arrays):
            if unchecked:
                # NOTE: checked first: a failing zero-copy wrap raises a TVM error (~18 us)
                f = a.flags
                if not (f.c_contiguous and f.aligned and f.writeable):
                    a = _aligned_copy(a)
                wrapped[s] = _to_tvm(a)
            values[s] = a
        for s in plan.output_slots:
            if s not in values:
                spec = plan.out_specs.get(s)
                if spec is None:
                    t = plan.slot_types[s]
                    shape, dt = tuple(t.concrete_shape), np.dtype(t.dtype)
                    count = math.prod(shape)
                    spec = plan.out_specs[s] = (shape, dt, count, count * dt.itemsize)
                if spec[3] <= 4096:
                    values[s] = self._slab.alloc(*spec)
                else:
                    try:
                        values[s] = aligned_empty(spec[0], spec[1])
                    except (MemoryError, ValueError):
                        c = next((c for c in plan.calls if s in c.outs), None)
                        raise alloc_failed(c.label if c else "?", spec[0], spec[1],
                                           c.fn.span if c and c.fn else None) from None
        for c in plan.calls:
            if c.host:
                ins = [values[d[1]] if d[0] == "slot" else d[1] for d in c.ins]
                res = c.func(ins)
                for s, r in zip(c.outs, res):
                    np.copyto(values[s], r, casting="unsafe")
                continue
            targs = []
            for d in c.ins:
                if d[0] == "const":
                    targs.append(_to_tvm(_aligned_copy(d[1])))
                    continue
                s = d[1]
                w = wrapped.get(s)
                if w is None:
                    w = _to_tvm(values[s])
                    wrapped[s] = w
                targs.append(w)
            for s in c.outs:
                w = wrapped.get(s)
                if w is None:
                    w = _to_tvm(values[s])
                    wrapped[s] = w
                targs.append(w)
            c.func(*targs[:len(c.ins)], *c.consts, *targs[len(c.ins):])
        return _materialize(plan.result, values, plan.param_set)

    def host_kernels(self, entry: str | None = None) -> list[str]:
        """Labels of the groups of planned calls of ``entry`` that run on the host."""
        entry = entry or self.entry
        return [c.label for k, p in self._plans.items() if k[0] == entry
                for c in p.calls if c.host]

    def num_kernels(self, entry: str | None = None) -> int:
        """The number of kernel calls per run of ``entry`` (after planning it once)."""
        entry = entry or self.entry
        return max((len(p.calls) for k, p in self._plans.items() if k[0] == entry), default=0)


def kernel_request(group: Any, target: Any) -> Any:
    """The kernel-cache request of a lowered group (scheduled only on a cache miss)."""
    from relay_ir.runtime.kernel_cache import KernelRequest
    from relay_ir.runtime.lower_tvm import schedule
    from relay_ir.runtime.schedules import SERIAL_BELOW
    sig = ";".join(f"{t.concrete_shape}:{t.dtype}" for t in group.in_types + group.out_types)
    sig += "|" + ";".join(f"{c.shape}:{c.dtype}" for c in group.constants)
    sig += f"|serial<{SERIAL_BELOW}"
    return KernelRequest(group.prim_func, sig,
                         (lambda: schedule(group, target, serial_below=SERIAL_BELOW)),
                         "+".join(group.ops),
                         make_fallback=(lambda: schedule(group, target, fallback=True)))


def _rebuild_desc(t: Type, slots: list[int]) -> Desc:
    it = iter(slots)

    def build(x: Type) -> Desc:
        if isinstance(x, TupleType):
            return ("tuple", [build(f) for f in x.fields])
        return ("slot", next(it))
    return build(t)


def _materialize(d: Desc, values: dict[int, np.ndarray], params: set[int]) -> Any:
    """The result value of descriptor ``d`` (walked with an explicit stack: tuples nest)."""
    out: list[Any] = []
    stack: list[tuple[Desc, bool]] = [(d, False)]
    while stack:
        x, done = stack.pop()
        if x[0] == "tuple":
            if done:
                n = len(x[1])
                fields = tuple(out[len(out) - n:]) if n else ()
                del out[len(out) - n:]
                out.append(fields)
            else:
                stack.append((x, True))
                stack.extend((f, False) for f in reversed(x[1]))
        elif x[0] == "const":
            out.append(np.array(x[1], copy=True))
        else:
            a = values[x[1]]
            out.append(a.copy() if x[1] in params else a)
    return out[0]


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


_FROM_DLPACK: list[Any] = []


def _to_tvm(a: np.ndarray) -> Any:
    """A zero-copy TVM view of ``a`` (C-contiguous and writeable; any alignment, as the CPU
    kernels assume only element alignment)."""
    if not _FROM_DLPACK:
        import tvm_ffi
        _FROM_DLPACK.append(tvm_ffi.from_dlpack)
    return _FROM_DLPACK[0](a, require_alignment=0, require_contiguous=True)


def _aligned_arg(arr: np.ndarray) -> np.ndarray:
    if not zero_copy_ok(arr):
        # NOTE: DLPack refuses read-only arrays, and a kernel reads its arguments as dense
        # row-major memory: views with strides (and element-misaligned data) are copied
        arr = _aligned_copy(arr)
    return arr


# ----------------------------------------------------------------------------- host groups
class _HostKernel:
    """A fused group evaluated with the numpy reference implementations."""

    def __init__(self, fn: Function, arg_types: list[Type]):
        from relay_ir.runtime.lower_tvm import flatten_type, infer_group_types
        self.fn = fn
        types = infer_group_types(fn, arg_types)
        self.result_type = types[id(fn.body)]
        self.out_types = flatten_type(self.result_type)
        self.arg_types = arg_types
        self.nodes = list(_post(fn.body))
        ops = [n.op.name for n in self.nodes if isinstance(n, Call) and isinstance(n.op, Op)]
        self.label = "host:" + "+".join(ops)
        from relay_ir.op import get_opdef
        missing = [n for n in ops if get_opdef(n).impl is None]
        if missing:
            raise LoweringError(f"operator `{missing[0]}` has neither a TVM compute nor a "
                                f"reference implementation", fn.span)

    def __call__(self, ins: list[np.ndarray]) -> list[np.ndarray]:
        it = iter(ins)
        env: dict[int, Any] = {}

        def take(t: Type) -> Any:
            if isinstance(t, TupleType):
                return tuple(take(f) for f in t.fields)
            return next(it)
        for p, t in zip(self.fn.params, self.arg_types):
            env[id(p)] = take(t)
        for node in self.nodes:
            if id(node) in env or isinstance(node, Op):
                continue
            if isinstance(node, Constant):
                env[id(node)] = node.data
            elif isinstance(node, Tuple):
                env[id(node)] = tuple(env[id(f)] for f in node.fields)
            elif isinstance(node, TupleGetItem):
                env[id(node)] = env[id(node.tuple_value)][node.index]
            elif isinstance(node, Call) and isinstance(node.op, Op):
                od = node.op.opdef
                env[id(node)] = od.impl([env[id(a)] for a in node.args], node.attrs)
        out: list[np.ndarray] = []
        stack = [env[id(self.fn.body)]]
        while stack:
            x = stack.pop()
            if isinstance(x, tuple):
                stack.extend(reversed(x))
            else:
                out.append(np.asarray(x))
        return out


def _post(e: Expr) -> Any:
    from relay_ir.traversal import post_order
    return post_order(e)


# ----------------------------------------------------------------------------- entry point
_BUILD_OPTIONS = ("target", "entry", "params", "opt_level", "max_fuse_depth", "cache",
                  "fast_math", "executor")


def _check_options(opt_level: Any, max_fuse_depth: Any, fast_math: Any,
                   unknown: dict[str, Any]) -> None:
    """Refuse what ``runtime.build`` does not take (instead of silently ignoring it)."""
    if unknown:
        names = ", ".join(sorted(unknown))
        raise DiagnosticError(f"runtime.build: unknown option(s) {names} (it takes "
                              f"{', '.join(_BUILD_OPTIONS)})")
    if type(opt_level) is not int or not 0 <= opt_level <= 3:
        raise DiagnosticError(f"runtime.build: opt_level must be 0, 1, 2 or 3, not "
                              f"{opt_level!r}")
    if type(max_fuse_depth) is not int or max_fuse_depth < 1:
        raise DiagnosticError(f"runtime.build: max_fuse_depth must be a whole number of at "
                              f"least 1, not {max_fuse_depth!r}")
    if fast_math is not None and type(fast_math) is not bool:
        raise DiagnosticError(f"runtime.build: fast_math must be True, False or None, not "
                              f"{fast_math!r}")


def bind_params(mod: IRModule, entry: str, params: Any) -> IRModule:
    """``mod`` with the parameters of ``entry`` named in ``params`` replaced by constants.

    ``params`` maps parameter names to arrays (anything ``runtime.build`` accepts as an
    argument for that parameter: exactly its dtype and shape). The constants are copies, so
    later changes to the caller's arrays do not reach the executable. The entry keeps its
    other parameters, in order. Unknown names, non-tensor parameters, wrong dtypes or shapes,
    and an entry that other functions call (their calls would lose arguments) are
    ``DiagnosticError``s naming the parameter.
    """
    from collections.abc import Mapping

    from relay_ir.functor import substitute
    from relay_ir.passes import InferType
    from relay_ir.traversal import post_order
    if not isinstance(params, Mapping):
        raise DiagnosticError(f"runtime.build: params must map parameter names to arrays, not "
                              f"{type(params).__name__}")
    if not params:
        return mod
    if entry not in mod:
        raise DiagnosticError(f"runtime.build: params= binds parameters of the entry @{entry}, "
                              f"and the module has no @{entry}")
    mod = InferType()(mod)
    fn = mod[entry]
    by_name: dict[str, list[Var]] = {}
    for p in fn.params:
        by_name.setdefault(p.name_hint, []).append(p)
    listed = ", ".join("%" + p.name_hint for p in fn.params) or "none"
    bound: dict[Var, Expr] = {}
    for name, value in params.items():
        if not isinstance(name, str):
            raise DiagnosticError(f"runtime.build: params keys are parameter names (strings), "
                                  f"not {name!r}")
        key = name[1:] if name.startswith("%") else name
        found = by_name.get(key)
        if not found:
            raise DiagnosticError(f"runtime.build: params[{name!r}]: @{entry} has no parameter "
                                  f"%{key} (its parameters: {listed})", fn.span)
        if len(found) > 1:
            raise DiagnosticError(f"runtime.build: params[{name!r}]: @{entry} has "
                                  f"{len(found)} parameters named %{key}", found[1].span)
        p = found[0]
        t = p.checked_type_ or p.type_annotation
        if not isinstance(t, TensorType):
            raise DiagnosticError(f"runtime.build: params[{name!r}]: only tensor parameters can "
                                  f"be bound; %{key} has type {t}", p.span)
        try:
            (arr,) = check_arguments(None, [t], [value], [key])
        except DiagnosticError as e:
            msg = e.message.split(": ", 1)[-1]
            raise DiagnosticError(f"runtime.build: params[{name!r}]: {msg}", p.span) from None
        bound[p] = Constant(np.array(arr, copy=True), span=p.span)
    for other in mod:
        for node in post_order(mod[other]):
            if isinstance(node, GlobalVar) and node.name_hint == entry:
                raise DiagnosticError(f"runtime.build: params= cannot bind parameters of "
                                      f"@{entry}: @{other} calls it (its calls would lose "
                                      f"the bound arguments)", mod[other].span)
    new_fn = Function(tuple(p for p in fn.params if p not in bound), substitute(fn.body, bound),
                      fn.ret_type, fn.type_params, fn.attrs, span=fn.span)
    return InferType()(mod.with_function(entry, new_fn))


def _is_static_type(t: Type | None) -> bool:
    if isinstance(t, TensorType):
        return t.is_static
    if isinstance(t, TupleType):
        return all(_is_static_type(f) for f in t.fields)
    return False


def refine_types(mod: IRModule) -> IRModule:
    """Concrete shapes for let-bound values that an annotation (``?``, ``n``) made looser.

    ``let %h: Tensor[(?, 64), float32] = nn.relu(%x)``: after ``@logits`` is inlined into a
    caller with ``%x: Tensor[(32, 64), float32]``, the annotation still says ``?``. Dropping
    such annotations on dataflow bindings and inferring types again gives every fused group
    of a static entry static parameter types, so its kernels compile when the program is
    built (and go into an exported module). Unchanged when inference then fails.
    """
    from relay_ir.functor import ExprMutator
    from relay_ir.passes import InferType

    class _Loosen(ExprMutator):
        changed = False

        def visit_binding(self, var: Var, value: Expr) -> Any:
            new_value = yield value     # NOTE: a generator: nesting costs no Python recursion
            ann = var.type_annotation
            if ann is not None and not _is_static_type(ann) and \
                    isinstance(value, (Call, Tuple, TupleGetItem, Var, Constant)):
                nv = Var(var.name_hint, None, attrs=var.attrs, span=var.span)
                self.memo[var] = nv
                _Loosen.changed = True
                return nv, new_value
            return (yield var), new_value

    funcs = {}
    for name in mod:
        funcs[name] = _Loosen().visit(mod[name])
    if not _Loosen.changed:
        return mod
    try:
        return InferType()(mod.with_functions(funcs))
    except DiagnosticError:
        return mod


def build(mod: IRModule, target: Any = "llvm", *, entry: str = "main", params: Any = None,
          opt_level: int = 2, max_fuse_depth: int = 256, cache: Any = None,
          fast_math: bool | None = None, executor: str | None = None,
          **unknown: Any) -> Executable:
    """Compile a well-typed module: optimize, fuse, and return an :class:`Executable`.

    ``target``: ``"llvm"`` (the host CPU), ``"cuda"``, a dict or a ``tvm.target.Target``.
    ``entry``: the default entry of calls and of the exported module; when the module has it,
    optimization keeps it and what it reaches (as ``passes.optimize``). ``params``: a dict
    ``{name: array}`` of ``entry``'s parameters bound as constants before optimization (so
    constant folding sees them: weights); the executable takes the remaining parameters in
    order (:func:`bind_params`). ``opt_level``: 0 to 3
    (default 2). ``fast_math``: polynomial transcendentals everywhere (True), nowhere (False)
    or where their float32 error is within tolerance (None, the
    default; ``relay_ir.op._te``). ``cache``: a
    :class:`~relay_ir.runtime.kernel_cache.KernelCache` (default: the shared one). Anything
    else is a ``DiagnosticError``. ``executor="relax"`` (experimental, the coming default):
    run on TVM's C++ Relax VM (``runtime.relax_vm``); a program it cannot emit yet is refused
    with a ``DiagnosticError`` naming the construct.

    Compilation happens here for everything the static types determine: the instructions of
    every global, and the kernel of every fused group whose shapes are static (for a
    dataflow entry with static parameter types, its whole plan). Only groups with ``?`` or
    symbolic dimensions compile later, on the first call with each new shape.
    """
    from relay_ir.passes import optimize
    from relay_ir.passes.fuse_ops import fuse_ops
    from relay_ir.runtime.target_lowering import target_rewrites
    if not isinstance(mod, IRModule):
        raise TypeError(f"runtime.build expects an IRModule, got {type(mod).__name__}")
    _check_options(opt_level, max_fuse_depth, fast_math, unknown)
    if executor not in (None, "relax"):
        raise DiagnosticError(f"runtime.build: executor must be None (the default) or "
                              f"'relax', not {executor!r}")
    if not isinstance(entry, str):
        raise DiagnosticError(f"runtime.build: entry must be a global's name, not {entry!r}")
    if params is not None:
        mod = bind_params(mod, entry, params)
    opt = optimize(mod, opt_level=opt_level, entry=entry)
    opt = target_rewrites(refine_types(opt), target, opt_level)
    # NOTE: below opt_level 1 fusion is off: every operator call is a kernel of its own.
    fused = fuse_ops(opt, max_depth=max_fuse_depth if opt_level >= 1 else 1)
    exe = Executable(fused, target, cache, fast_math)
    exe.entry = entry
    if executor == "relax":
        from relay_ir.runtime.relax_vm import RelaxExecutable
        return RelaxExecutable(exe)  # type: ignore[return-value]
    exe.compile_static()
    return exe
