"""Lowering: a fused ``Primitive=1`` function -> one TIR PrimFunc -> a compiled kernel.

``lower_group(fn, arg_types)`` walks the fused function's dataflow body, calls each
operator's ``OpDef.compute`` (TE/TOPI) on te placeholders, and makes one PrimFunc with
``te.create_prim_func`` (parameters: the flattened inputs, then the large constants, then the
flattened outputs). Shapes are concrete: the executor lowers per concrete argument shape, and
the output types come from the operators' type relations on those shapes. Scheduling
(:mod:`relay_ir.runtime.schedules`) happens only when the kernel cache misses.

Targets: ``"llvm"`` is the host CPU with its ``mcpu`` and core count (never generic x86-64),
``"cuda"`` an sm_90 CUDA target (the GPU's own arch when one is present); a dict or a
``tvm.target.Target`` is used as given. tvm is imported lazily.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relay_ir.errors import InternalError, LoweringError
from relay_ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var
from relay_ir.traversal import post_order
from relay_ir.ty import TensorType, TupleType, Type, tuple_leaves

_MATMUL = {"nn.dense", "nn.matmul", "nn.batch_matmul"}
_CONV = {"nn.conv2d"}
_CONVT = {"nn.conv2d_transpose", "nn.conv1d_transpose"}
_POOL = {"nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d"}


def _einsum_matmul(call: Any, operands: Any) -> bool:
    """An einsum shaped like a (batched) matmul gets the matmul schedule."""
    from relay_ir.op.indexing_ext import einsum_is_matmul
    ranks = [len(t.shape) for t in operands] if isinstance(operands, list) else []
    return bool(ranks) and einsum_is_matmul(call.attrs.equation, ranks)


def ensure_threads() -> int:
    """Set ``TVM_NUM_THREADS`` to the core count and ``TVM_BIND_THREADS`` to 0 (the pool's
    workers not pinned to cores) unless the user set them (TVM_NOTES section 8).

    TVM's pool defaults to half the cores; it reads the variable when it starts, lazily, at
    the first parallel kernel call, so this must run before that call.
    """
    # NOTE: unpinned workers. TVM pins its pool's worker to core 1 and leaves the calling thread
    # free: when the scheduler has put the caller on core 1 too (after a compile, or with a BLAS
    # thread spinning on core 0), the two halves of every parallel loop ran one after the other
    # until the caller migrated: 3-4 of ResNet-50's 15 distinct 1x1 convolutions timed at
    # half speed right after their compile; none unpinned (2 threads; RESULTS.md, branch c1x1)
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    n = os.environ.get("TVM_NUM_THREADS")
    if n is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)
        os.environ["TVM_NUM_THREADS"] = str(cores)
        return cores
    return int(n)


_TARGETS: dict[str, Any] = {}


def host_llvm_config() -> dict[str, Any]:
    """The config of target ``"llvm"``: this machine's CPU and the cores this process may
    use."""
    from tvm.target import codegen
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "num-cores": cores}


def resolve_target(target: Any) -> Any:
    """A ``tvm.target.Target`` for ``"llvm"``, ``"cuda"``, a dict or a Target."""
    import tvm
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, dict):
        try:
            return tvm.target.Target(target)
        except Exception as e:
            raise LoweringError(f"invalid target {target!r}: {e}") from None
    if not isinstance(target, str):
        raise LoweringError(f"a target is a string, a dict or a tvm.target.Target, not "
                            f"{type(target).__name__}")
    if target in ("llvm", "cpu"):
        # NOTE: memoized by the config itself (the cores this process may use can change),
        # so that the whole-build cache's key, taken from host_llvm_config(), is the target's
        config = host_llvm_config()
        memo = f"llvm|{sorted(config.items())}"
        t = _TARGETS.get(memo)
        if t is None:
            t = _TARGETS[memo] = tvm.target.Target(config)
        return t
    if target in _TARGETS:
        return _TARGETS[target]
    if target == "cuda":
        arch = "sm_90"
        try:
            dev = tvm.cuda(0)
            if dev.exist:
                arch = "sm_" + str(dev.compute_version).replace(".", "")
        except Exception:  # NOTE: no CUDA runtime in this wheel/machine: compile for sm_90
            pass
        t = tvm.target.Target({"kind": "cuda", "arch": arch,
                               "max_shared_memory_per_block": 49152,
                               "max_threads_per_block": 1024, "thread_warp_size": 32})
    else:
        raise LoweringError(f"unknown target {target!r}: use \"llvm\", \"cuda\", a dict such as "
                            f"{{\"kind\": \"llvm\", \"mcpu\": \"x86-64-v3\"}} or a "
                            f"tvm.target.Target")
    _TARGETS[target] = t
    return t


def is_cuda(target: Any) -> bool:
    """Whether ``target`` (a Target) generates CUDA kernels."""
    return str(target.kind.name) == "cuda"


class DynamicShapeError(LoweringError):
    """A group whose output shape depends on its input values (``dyn.reshape``): no kernel."""


@dataclass
class LoweredGroup:
    """One fused group as a PrimFunc plus what the executor needs to call it."""

    prim_func: Any
    kind: str                                  # schedule hint: matmul / conv / convt / pool / ""
    in_types: list[TensorType]                 # flattened kernel inputs (params)
    constants: list[np.ndarray]                # large constants, passed after the inputs
    out_types: list[TensorType]                # flattened outputs
    result_type: Type                          # the group's (possibly tuple) result type
    ops: list[str] = field(default_factory=list)


def flatten_type(t: Type) -> list[TensorType]:
    """The tensor leaves of ``t`` (a tensor or nested tuple of tensors), in order."""
    out = tuple_leaves(t)
    for x in out:
        if not isinstance(x, TensorType):
            raise LoweringError(f"a kernel argument or result must be a tensor or a tuple of "
                                f"tensors, not {x!r}")
    return out  # type: ignore[return-value]


def infer_group_types(fn: Function, arg_types: list[Type]) -> dict[int, Type]:
    """Concrete types of every node of ``fn``'s body from concrete argument types.

    Uses the operators' type relations directly (no unification needed: the body is
    first-order dataflow over known shapes).
    """
    types: dict[int, Type] = {id(p): t for p, t in zip(fn.params, arg_types)}
    for node in post_order(fn.body):
        if id(node) in types or isinstance(node, (Op, Function)):
            continue
        if isinstance(node, Var):
            raise InternalError(f"free variable %{node.name_hint} in a primitive function")
        if isinstance(node, Constant):
            types[id(node)] = TensorType(tuple(node.data.shape), str(node.data.dtype))
        elif isinstance(node, Tuple):
            types[id(node)] = TupleType(tuple(types[id(f)] for f in node.fields))
        elif isinstance(node, TupleGetItem):
            tt = types[id(node.tuple_value)]
            assert isinstance(tt, TupleType)
            types[id(node)] = tt.fields[node.index]
        elif isinstance(node, Call) and isinstance(node.op, Op):
            od = node.op.opdef
            if od.type_rel is None:
                raise LoweringError(f"operator {od.name} has no type relation", node.span)
            res = od.type_rel([types[id(a)] for a in node.args], node.attrs)
            if isinstance(res, tuple) and len(res) == 2 and not isinstance(res, TupleType):
                res = res[0]
            if res is None:
                raise LoweringError(f"cannot compute the result type of {od.name} for the "
                                    f"argument shapes given", node.span)
            types[id(node)] = res
        else:
            raise LoweringError(f"a primitive function may hold only operator calls, tuples "
                                f"and constants, not {type(node).__name__}", node.span)
    return types


def lower_group(fn: Function, arg_types: list[Type], dim: Any = None) -> LoweredGroup:
    """One PrimFunc for the fused function ``fn`` at the concrete ``arg_types``.

    ``dim``: for a kernel with symbolic shapes (``runtime.relax_shapes``), a function from a
    dimension of ``arg_types`` (an int or a ``ShapeVar``) to its TIR expression; the output
    types are then the relations' symbolic ones (the caller checks they are expressible).
    """
    import tvm
    from tvm import te
    types = infer_group_types(fn, arg_types)
    for t in flatten_type(types[id(fn.body)]):
        if not t.is_static and dim is None:
            raise DynamicShapeError(f"the output shape {t!r} of a fused group depends on "
                                    f"the values of its inputs", fn.span)
    te_of: dict[int, Any] = {}
    placeholders: list[Any] = []
    in_types: list[TensorType] = []
    const_ph: list[Any] = []
    constants: list[np.ndarray] = []
    for i, p in enumerate(fn.params):
        leaves = flatten_type(types[id(p)])
        phs = [te.placeholder(t.concrete_shape if dim is None else
                              tuple(dim(d) for d in t.shape), t.dtype, name=f"p{i}_{j}")
               for j, t in enumerate(leaves)]
        placeholders.extend(phs)
        in_types.extend(leaves)
        te_of[id(p)] = phs[0] if isinstance(types[id(p)], TensorType) else \
            _unflatten(types[id(p)], phs)
    ops: list[str] = []
    kind = ""
    for node in post_order(fn.body):
        if id(node) in te_of or isinstance(node, Op):
            continue
        if isinstance(node, Constant):
            data = node.data
            # NOTE: a float zero enters as a kernel argument, not an immediate: TVM's
            # simplifier folds `x * 0.0` to 0 and `x + 0.0` to x, wrong for inf, nan, -0.0
            if data.ndim == 0 and not (data.dtype.kind == "f" and data == 0):
                val = data.item()
                dt = str(data.dtype)
                te_of[id(node)] = te.compute((), _const_fn(tvm.tirx.const(val, dt)),
                                             name="const")
            else:
                ph = te.placeholder(data.shape, str(data.dtype), name=f"c{len(constants)}")
                const_ph.append(ph)
                constants.append(data)
                te_of[id(node)] = ph
        elif isinstance(node, Tuple):
            te_of[id(node)] = [te_of[id(f)] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            te_of[id(node)] = te_of[id(node.tuple_value)][node.index]
        elif isinstance(node, Call) and isinstance(node.op, Op):
            od = node.op.opdef
            if od.compute is None:
                raise LoweringError(f"operator {od.name} has no TVM compute", node.span)
            ops.append(od.name)
            if od.name in _MATMUL or (od.name == "einsum" and _einsum_matmul(
                    node, te_of[id(node.args[0])])):
                kind = "matmul"
            elif od.name in _CONV and kind == "":
                kind = "conv"
            elif od.name in _CONVT and kind == "":
                kind = "convt"
            elif od.name in _POOL and kind == "":
                kind = "pool"
            args = [te_of[id(a)] for a in node.args]
            try:
                out = od.compute(node.attrs, args, types[id(node)])
            except LoweringError:
                raise
            except Exception as e:
                raise LoweringError(f"the TVM compute of {od.name} failed: "
                                    f"{type(e).__name__}: {e}", node.span) from e
            te_of[id(node)] = out
        else:
            raise LoweringError(f"cannot lower {type(node).__name__} inside a primitive "
                                f"function", node.span)
    result_type = types[id(fn.body)]
    out_types = flatten_type(result_type)
    outs = _flatten_te(te_of[id(fn.body)])
    if len(outs) != len(out_types):
        raise InternalError(f"compute returned {len(outs)} tensors for {len(out_types)} outputs")
    inputs = set(id(t) for t in placeholders + const_ph)
    fixed = []
    seen: set[int] = set()
    for t, ty in zip(outs, out_types):
        if str(t.dtype) != ty.dtype:
            raise LoweringError(f"the TVM compute of a fused group returned dtype {t.dtype} "
                                f"where the type is {ty!r} (ops: {', '.join(ops)})",
                                fn.span)
        if id(t) in inputs or id(t) in seen or not isinstance(t.op, te.ComputeOp):
            t = te.compute(t.shape, _copy_fn(t), name="copy")
        seen.add(id(t))
        fixed.append(t)
    prim = te.create_prim_func([*placeholders, *const_ph, *fixed])
    return LoweredGroup(prim, kind, in_types, constants, out_types, result_type, ops)


def _const_fn(c: Any) -> Any:
    return lambda: c


def _copy_fn(src: Any) -> Any:
    return lambda *i: src(*i)


def _unflatten(t: Type, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def build(x: Type) -> Any:
        if isinstance(x, TupleType):
            return [build(f) for f in x.fields]
        return next(it)
    return build(t)


def _flatten_te(v: Any) -> list[Any]:
    out: list[Any] = []
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(reversed(list(x)))
        else:
            out.append(x)
    return out


def schedule(group: LoweredGroup, target: Any, fallback: bool = False,
             serial_below: int = 0, serial: bool = False) -> Any:
    """The scheduled IRModule (``main``) of ``group`` for ``target``.

    ``fallback``: the simplest schedule that works (CUDA: dlight's Fallback rule alone; CPU:
    every block's outer loop in parallel). ``serial_below``: CPU kernels with a smaller
    iteration space run on one thread (``schedules.SERIAL_BELOW``). ``serial``: a CPU kernel
    with no parallel loops whatever its size (the small-shape variant of a symbolic kernel).
    """
    from relay_ir.runtime import schedules
    if is_cuda(target):
        return schedules.schedule_cuda(group.prim_func, target, fallback_only=fallback)
    if fallback:
        from tvm import s_tir
        sch = s_tir.Schedule(schedules.unaligned_params(group.prim_func))
        if not serial:
            schedules.schedule_generic(sch)
        return sch.mod
    return schedules.schedule_cpu(group.prim_func, group.kind, serial_below=serial_below,
                                  serial=serial)


def _plain(x: Any) -> Any:
    """A TVM container (Map, Array, String, IntImm) as plain JSON-able Python data."""
    if isinstance(x, (bool, int, float)) or x is None:
        return x
    if isinstance(x, str):
        return str(x)
    if hasattr(x, "items"):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) or hasattr(x, "__len__") and hasattr(x, "__getitem__"):
        return [_plain(v) for v in x]
    if hasattr(x, "value"):
        return _plain(x.value)
    return str(x)


def target_description(target: Any) -> dict[str, Any]:
    """The target as plain data for a module file: its config plus the build machine."""
    import platform
    return {"config": _plain(target.export()), "machine": platform.machine()}


_GENERIC_CPUS = ("", "generic", "x86-64")


def check_target_description(desc: dict[str, Any]) -> Any:
    """The Target of a module file, if this machine can run its kernels (else LoweringError)."""
    import platform

    import tvm
    config = dict(desc["config"])
    kind = config.get("kind")
    if kind == "llvm":
        machine = desc.get("machine")
        if machine != platform.machine():
            raise LoweringError(f"the module was built for a {machine} CPU; this machine is "
                                f"{platform.machine()} (rebuild it here)")
        from tvm.target import codegen
        here = codegen.llvm_get_system_cpu()
        mcpu = config.get("mcpu", "")
        if mcpu not in _GENERIC_CPUS and mcpu != here:
            raise LoweringError(f"the module was built for the CPU {mcpu!r} (target llvm "
                                f"-mcpu={mcpu}); this machine is {here!r}, whose instruction "
                                f"set may differ (rebuild it here, or build with a portable "
                                f"target such as {{\"kind\": \"llvm\", \"mcpu\": "
                                f"\"x86-64-v3\"}})")
    elif kind == "cuda":
        if not tvm.cuda(0).exist:
            raise LoweringError("the module was built for target cuda and this machine has "
                                "no CUDA GPU")
    else:
        raise LoweringError(f"the module was built for an unknown target kind {kind!r}")
    config.pop("keys", None)
    config.pop("tag", None)
    try:
        return tvm.target.Target(config)
    except Exception as e:
        raise LoweringError(f"cannot rebuild the module's target {config}: {e}") from None
