"""LEGACY (target="cuda" only, until the relax executor takes CUDA): the old dataflow fast path.

``runtime.build`` uses this module only for CUDA targets (see ``executor._LEGACY_CUDA``):
dataflow entries run as straight-line kernel calls with a static memory plan, every other
entry on the Python VM of :mod:`relay_ir.runtime.legacy_vm`. When the relax executor takes
``target="cuda"``, flip ``executor._LEGACY_CUDA`` and delete this module and ``legacy_vm``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relay_ir.errors import DiagnosticError, LoweringError
from relay_ir.runtime.executor import (AllocationError, BuildContext, _aligned_copy,
                                       _to_tvm, aligned_empty, alloc_failed, kernel_request,
                                       zero_copy_ok)
from relay_ir.runtime.lower_tvm import DynamicShapeError
from relay_ir.runtime.values import check_arguments
from relay_ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Match, Op, RefCreate,
                           RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relay_ir.traversal import flatten_lets
from relay_ir.ty import TensorType, TupleType, Type


class _NeedsVM(Exception):
    """Planning found a group whose output shape depends on values: run the entry on the VM."""


class UnsupportedProgramError(DiagnosticError):
    """An entry is outside the dataflow fast path (it runs on the compiled executor instead)."""

    kind = "unsupported by the dataflow path"


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
        f"(runtime.legacy_vm)", node.span)


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


class Executable(BuildContext):
    """A built module: ``exe(*args, entry="main")`` runs an entry with compiled kernels.

    Not thread-safe: the intermediate buffers of a plan are shared between calls.
    """

    def __init__(self, mod: Any, target: Any, cache: Any = None,
                 fast_math: bool | None = None):
        super().__init__(mod, target, cache, fast_math)
        self._entries: dict[str, tuple[list[_Step], Expr]] = {}
        self._plans: dict[tuple, _Plan] = {}
        self._vm_entries: set[str] = set()
        self._vm: Any = None
        self._static: dict[str, tuple] = {}      # entry -> (its one plan, shapes, dtypes)
        from relay_ir.runtime.legacy_vm import _Slab
        self._slab = _Slab()
        from relay_ir.runtime.lower_tvm import is_cuda
        self._cuda = is_cuda(self.target)

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
            from relay_ir.runtime.legacy_vm import VM
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


