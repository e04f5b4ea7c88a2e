"""``runtime.build(mod, target="llvm")``: any well-typed module, compiled.

The module is optimized (``passes.optimize``) and fused (``fuse-ops``). Each entry then runs on
one of two paths:

* **dataflow entries** -- a let spine of fused kernel calls, tuples, projections and aliases
  over tensor parameters -- run as straight-line kernel calls with a static memory plan (the
  fast path below);
* **every other entry** (closures, ``if``, ``match``, references, ADTs, calls of globals,
  recursion) runs on the compiled executor of ``runtime.vm``: the shared instruction compiler's
  control program, with an invoke-kernel instruction for each fused group.

An entry is planned per concrete input signature (so ``?`` and symbolic dims compile on the
first call with each new shape, then hit the plan cache): every fused group is lowered to one
kernel (through the kernel cache), and memory is planned statically -- intermediates live in
buffers allocated once per plan and shared between values whose lifetimes do not overlap;
outputs are fresh arrays every call. Inputs that are contiguous, 64-byte aligned and of the
right dtype are passed zero-copy; others are copied once into an aligned buffer. A group
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


def as_aligned(a: Any, dtype: Any = None) -> np.ndarray:
    """``a`` as a C-contiguous, 64-byte aligned array (itself when it already is one).

    Executables take such arrays without copying; convert inputs that are reused across calls
    (weights) once with this.
    """
    arr = np.asarray(a, dtype=dtype)
    if _is_aligned(arr) and arr.flags.writeable:
        return arr
    return _aligned_copy(arr)


def _is_aligned(a: np.ndarray) -> bool:
    return a.ctypes.data % ALIGN == 0 and a.flags.c_contiguous


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
        f"runtime.build compiles first-order dataflow programs only; {what} comes with the "
        f"compiled executor (next issue). Use runtime.evaluate for this program.", node.span)


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

    def is_dataflow(self, entry: str = "main") -> bool:
        """Whether ``entry`` runs on the dataflow fast path (else on the compiled executor)."""
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

    def export_library(self, path: str) -> None:
        """Write the whole program (control program + kernels) to one module file.

        Kernels for ``?`` dimensions are compiled per shape on first use, and a loaded module
        never compiles: the shapes this executable has already run are replayed on the VM
        first (with zeros), so the file carries their kernels.
        """
        vm = self.vm()
        for entry, *sig in list(self._plans):
            if entry not in self._static:
                try:
                    vm(*(np.zeros(shape, dtype) for shape, dtype in sig), entry=entry)
                except DiagnosticError:  # NOTE: value-dependent shapes: not replayable
                    pass
        vm.export_library(path)

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
                    calls.append(_KernelCall(host, True, ins, [], outs, host.label))
                    env[id(st.var)] = _rebuild_desc(host.result_type, outs)
                    continue
                outs = [new_slot(t) for t in group.out_types]
                label = "+".join(group.ops)
                req = kernel_request(group, self.target)
                consts = [_to_tvm(_aligned_copy(c)) for c in group.constants]
                calls.append(_KernelCall(None, False, ins, consts, outs, label))
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
                raw = pool.pop() if pool else aligned_empty((nbytes,), np.uint8)
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
    def __call__(self, *args: Any, entry: str = "main") -> Any:
        """Run ``entry``; numpy arrays in and out (tuples, ADT values, refs as the interpreter)."""
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

    def prepare(self, *args: Any, entry: str = "main") -> int:
        """Plan and compile ``entry`` for these arguments' shapes without running it.

        Returns the number of kernel calls per run (for an entry on the compiled executor: the
        number of compiled kernels). (For ``target="cuda"`` on a machine without a GPU this is
        how kernels are compiled and inspected.)
        """
        if not self.is_dataflow(entry):
            return self.vm().num_compiled()
        try:
            plan, _ = self._get_plan(args, entry)
        except _NeedsVM:
            self._to_vm(entry)
            return self.vm().num_compiled()
        return len(plan.calls)

    def kernel_sources(self, entry: str = "main") -> list[str]:
        """The generated source (CUDA C, or LLVM IR for the CPU) of each planned kernel."""
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
        if len(args) != len(fn.params):
            raise DiagnosticError(f"@{entry} takes {len(fn.params)} arguments, "
                                  f"{len(args)} given", fn.span)
        arrays = [_convert_arg(a, p, i) for i, (a, p) in enumerate(zip(args, fn.params))]
        _check_dims(fn, arrays, entry)
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
                if a.__array_interface__["data"][0] % ALIGN or not a.flags.c_contiguous or \
                        not a.flags.writeable:
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
                    values[s] = aligned_empty(spec[0], spec[1])
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

    def host_kernels(self, entry: str = "main") -> list[str]:
        """Labels of the groups of planned calls of ``entry`` that run on the host."""
        return [c.label for k, p in self._plans.items() if k[0] == entry
                for c in p.calls if c.host]

    def num_kernels(self, entry: str = "main") -> int:
        """The number of kernel calls per run of ``entry`` (after planning it once)."""
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
    if d[0] == "tuple":
        return tuple(_materialize(x, values, params) for x in d[1])
    if d[0] == "const":
        return np.array(d[1], copy=True)
    a = values[d[1]]
    return a.copy() if d[1] in params else a


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


_FROM_DLPACK: list[Any] = []


def _to_tvm(a: np.ndarray) -> Any:
    if not _FROM_DLPACK:
        import tvm
        _FROM_DLPACK.append(tvm.runtime.from_dlpack)
    return _FROM_DLPACK[0](a)


def _convert_arg(a: Any, p: Var, i: int) -> np.ndarray:
    t = p.checked_type_ or p.type_annotation
    assert isinstance(t, TensorType)
    dt = np.dtype(t.dtype)
    arr = a if isinstance(a, np.ndarray) else np.asarray(a)
    if arr.dtype != dt:
        if not np.can_cast(arr.dtype, dt, "same_kind") and not (
                isinstance(a, (int, float, bool, list, tuple)) and arr.dtype.kind in "biuf"):
            raise DiagnosticError(f"argument {i + 1} (%{p.name_hint}): expected {t!r}, got "
                                  f"an array of dtype {arr.dtype}", p.span)
        arr = arr.astype(dt)
    if arr.ndim != len(t.shape):
        raise DiagnosticError(f"argument {i + 1} (%{p.name_hint}): expected {t!r}, got shape "
                              f"{tuple(arr.shape)}", p.span)
    if not _is_aligned(arr) or not arr.flags.writeable:
        # NOTE: DLPack refuses read-only arrays; unaligned ones would break vector loads
        arr = _aligned_copy(arr)
    return arr


def _check_dims(fn: Function, arrays: list[np.ndarray], entry: str) -> None:
    bound: dict[ShapeVar, int] = {}
    for i, (p, a) in enumerate(zip(fn.params, arrays)):
        t = p.checked_type_ or p.type_annotation
        assert isinstance(t, TensorType)
        for d, n in zip(t.shape, a.shape):
            ok = True
            if isinstance(d, int):
                ok = d == n
            elif isinstance(d, ShapeVar):
                ok = bound.setdefault(d, n) == n
            elif not isinstance(d, AnyDim):
                ok = True  # NOTE: polynomial dims are checked by the kernels' own shape checks
            if not ok:
                raise DiagnosticError(f"@{entry} argument {i + 1} (%{p.name_hint}): expected "
                                      f"{t!r}, got shape {tuple(a.shape)}", p.span)


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
def build(mod: IRModule, target: Any = "llvm", *, opt_level: int = 2,
          max_fuse_depth: int = 256, cache: Any = None,
          fast_math: bool | None = None) -> Executable:
    """Compile a well-typed module: optimize, fuse, and return an :class:`Executable`.

    ``target``: ``"llvm"`` (the host CPU), ``"cuda"``, a dict or a ``tvm.target.Target``.
    ``fast_math``: polynomial transcendentals everywhere (True), nowhere (False) or where
    their float32 error is within tolerance (None, the default; ``relay_ir.op._te``).
    ``cache``: a :class:`~relay_ir.runtime.kernel_cache.KernelCache` (default: the shared one).
    A dataflow ``main`` compiles its kernels on the first call with a new input signature;
    any other program is compiled now (instructions, and the kernels of every fused group
    with static shapes; groups with dynamic shapes compile per shape on first use).
    """
    from relay_ir.passes import optimize
    from relay_ir.passes.fuse_ops import fuse_ops
    from relay_ir.runtime.target_lowering import target_rewrites
    if not isinstance(mod, IRModule):
        raise TypeError(f"runtime.build expects an IRModule, got {type(mod).__name__}")
    opt = target_rewrites(optimize(mod, opt_level=opt_level), target, opt_level)
    # NOTE: below opt_level 1 fusion is off: every operator call is a kernel of its own.
    fused = fuse_ops(opt, max_depth=max_fuse_depth if opt_level >= 1 else 1)
    exe = Executable(fused, target, cache, fast_math)
    if "main" in fused:
        exe.is_dataflow("main")
    return exe
