"""``runtime.build(mod, target="llvm")``: any well-typed module, compiled.

The module is optimized (``passes.optimize``) and fused (``fuse-ops``), then compiled by the
one compiled executor: the shared instruction compiler (``runtime.compiler``, whose program the
reference interpreter also runs) emits TVM Relax VM bytecode, linked with every fused group's
TIR kernel into one executable (``runtime.relax_vm.RelaxExecutable``). Every construct runs
there: dataflow, closures, ``if``, ``match``, references, ADTs, recursion (self tail calls are
jumps). Groups with ``?`` or symbolic dimensions are one kernel over symbolic shapes;
groups without a TVM compute or with a value-dependent output shape run on the host with the
numpy reference implementations (``runtime.relax_shapes``; :meth:`RelaxExecutable.host_kernels`).
Everything compiles here, at build time: nothing compiles on a call.

Arguments that are C-contiguous and writeable are passed zero-copy at any alignment (CPU
kernels assume only element alignment, ``schedules.unaligned_params``); others are copied once.
:meth:`RelaxExecutable.export_library` writes one standard TVM shared library
(``runtime.relax_export``; ``runtime.load_module`` reads it back).
``target="cuda"`` is the same executor with GPU-resident tensors (``runtime.relax_cuda``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from relay_ir.errors import DiagnosticError
from relay_ir.runtime.values import check_arguments
from relay_ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from relay_ir.module import IRModule
from relay_ir.ty import TensorType, TupleType, Type

ALIGN = 64


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


# ----------------------------------------------------------------------------- compilation
class BuildContext:
    """What the backends compile a fused module with: the module, the target, the kernel
    cache, the fast-math setting, and ``_lower`` (fused groups lowered once per
    alpha-equivalence class and argument types)."""

    def __init__(self, mod: IRModule, target: Any, cache: Any = None,
                 fast_math: bool | None = None):
        from relay_ir.runtime.kernel_cache import default_cache
        from relay_ir.runtime.lower_tvm import ensure_threads, resolve_target
        self.module = mod
        self.entry = "main"          # the default entry of calls and exported modules
        self.fast_math = fast_math
        self.target = resolve_target(target)
        self.cache = cache or default_cache()
        self._lowered: dict[tuple, list[tuple[Function, Any]]] = {}
        ensure_threads()

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


def kernel_request(group: Any, target: Any) -> Any:
    """The kernel-cache request of a lowered group (scheduled only on a cache miss)."""
    from relay_ir.runtime.kernel_cache import KernelRequest
    from relay_ir.runtime.lower_tvm import schedule
    from relay_ir.runtime.schedules import SERIAL_BELOW
    sig = ";".join(f"{t.concrete_shape}:{t.dtype}" for t in group.in_types + group.out_types)
    sig += "|" + ";".join(f"{c.shape}:{c.dtype}" for c in group.constants)
    sig += f"|serial<{SERIAL_BELOW}:max"   # NOTE: the rule of schedules.work_volume
    return KernelRequest(group.prim_func, sig,
                         (lambda: schedule(group, target, serial_below=SERIAL_BELOW)),
                         "+".join(group.ops),
                         make_fallback=(lambda: schedule(group, target, fallback=True)))


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
          **unknown: Any) -> Any:
    """Compile a well-typed module: optimize, fuse, and return a
    :class:`~relay_ir.runtime.relax_vm.RelaxExecutable`.

    ``target``: ``"llvm"`` (the host CPU), ``"cuda"``, a dict or a ``tvm.target.Target``.
    ``entry``: the default entry of calls and of the exported module; when the module has it,
    optimization keeps it and what it reaches (as ``passes.optimize``). ``params``: a dict
    ``{name: array}`` of ``entry``'s parameters bound as constants before optimization (so
    constant folding sees them: weights); the executable takes the remaining parameters in
    order (:func:`bind_params`). ``opt_level``: 0 to 3
    (default 2). ``fast_math``: polynomial transcendentals everywhere (True), nowhere (False)
    or where their float32 error is within tolerance (None, the
    default; ``relay_ir.op._te``). ``cache``: a
    :class:`~relay_ir.runtime.kernel_cache.KernelCache` (default: the shared one).
    ``executor``: ``None`` or ``"relax"`` (the same: there is one compiled executor; the name
    is still accepted). Anything else is a ``DiagnosticError``.

    Everything compiles here: the bytecode of every global and the kernel of every fused
    group (static groups for their shapes, ``?`` and symbolic groups once over symbolic
    shapes). A call never compiles.
    """
    from relay_ir.runtime.lower_tvm import resolve_target
    if not isinstance(mod, IRModule):
        raise TypeError(f"runtime.build expects an IRModule, got {type(mod).__name__}")
    _check_options(opt_level, max_fuse_depth, fast_math, unknown)
    if executor not in (None, "relax"):
        raise DiagnosticError(f"runtime.build: executor must be None (the default) or "
                              f"'relax' (the same executor), not {executor!r}")
    if not isinstance(entry, str):
        raise DiagnosticError(f"runtime.build: entry must be a global's name, not {entry!r}")
    if params is not None:
        mod = bind_params(mod, entry, params)
    path = _build_cache_path(mod, target, entry, opt_level, max_fuse_depth, fast_math, cache)
    if path is not None:
        from relay_ir.runtime import build_cache

        def rebuild() -> Any:
            return _build(mod, resolve_target(target), entry, opt_level, max_fuse_depth, cache,
                          fast_math)
        hit = build_cache.lookup(path, rebuild, source=mod)
        if hit is not None:
            build_cache.STATS["hits"] += 1
            return hit
        build_cache.STATS["misses"] += 1
    exe = _build(mod, resolve_target(target), entry, opt_level, max_fuse_depth, cache,
                 fast_math)
    if path is not None:
        try:
            build_cache.store(path, exe)    # NOTE: a full or read-only disk returns False
        except Exception as e:   # NOTE: failing to cache never fails the build, but is said
            import warnings
            warnings.warn(f"relay_ir: the build was not cached: {type(e).__name__}: {e}",
                          RuntimeWarning, stacklevel=2)
    return exe


def _build_cache_path(mod: IRModule, target: Any, entry: str, opt_level: int,
                      max_fuse_depth: int, fast_math: bool | None, cache: Any) -> str | None:
    """The whole-build cache's file for this build (``runtime.build_cache``), or None when
    the cache does not apply (turned off, CUDA, a kernel cache without a disk store)."""
    from relay_ir.runtime import build_cache
    from relay_ir.runtime.kernel_cache import default_cache
    from relay_ir.runtime.lower_tvm import (host_llvm_config, is_cuda, resolve_target,
                                            target_description)
    if not build_cache.enabled():
        return None
    kc = cache or default_cache()
    if not getattr(kc, "use_disk", False):
        return None
    if isinstance(target, str) and target in ("llvm", "cpu"):
        # NOTE: the config resolve_target would build the Target from (building the first
        # Target of a process costs ~30-80 ms, which a hit never needs)
        config = host_llvm_config()
    else:
        tgt = resolve_target(target)
        if is_cuda(tgt):
            return None
        config = target_description(tgt)["config"]
    try:
        key = build_cache.build_key(mod, repr(sorted(config.items(), key=str)), entry,
                                    opt_level, max_fuse_depth, fast_math)
    except Exception:    # NOTE: a module the key cannot be taken of is built, not cached
        return None
    return build_cache.entry_path(kc.directory, key)


def _build(mod: IRModule, target: Any, entry: str, opt_level: int, max_fuse_depth: int,
           cache: Any, fast_math: bool | None) -> Any:
    """``runtime.build`` without the whole-build cache (arguments checked, params bound)."""
    from relay_ir.passes import optimize
    from relay_ir.passes.fuse_ops import fuse_ops
    from relay_ir.runtime.target_lowering import target_rewrites
    opt = optimize(mod, opt_level=opt_level, entry=entry)
    opt = target_rewrites(refine_types(opt), target, opt_level, winograd=fast_math is True)
    # NOTE: below opt_level 1 fusion is off: every operator call is a kernel of its own.
    fused = fuse_ops(opt, max_depth=max_fuse_depth if opt_level >= 1 else 1)
    from relay_ir.runtime.relax_vm import RelaxExecutable
    ctx = BuildContext(fused, target, cache, fast_math)
    ctx.entry = entry
    return RelaxExecutable(ctx)
