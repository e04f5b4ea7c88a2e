"""Optional kernel tuning with TVM MetaSchedule: ``runtime.tune`` and ``rly tune``.

``runtime.build`` schedules every fused group with relay_ir's own schedules
(``runtime.schedules``); they need no tuning. ``tune`` searches further, per kernel, with
MetaSchedule (``tvm.s_tir.meta_schedule``) and keeps a tuned kernel only where it measured
faster than the default one:

1. the module is built as ``runtime.build`` builds it (same passes, same fused groups, the
   default kernels compiled through the kernel cache);
2. every distinct kernel with static shapes becomes a MetaSchedule task (its unscheduled
   PrimFunc, with element-aligned buffers like the default schedules), and ``tune_tir``
   spends ``trials`` measured candidates over all of them; its database (the JSON files
   ``database_workload.json`` and ``database_tuning_record.json``) is written in ``log``;
3. each task's best record is compiled and timed against the default kernel, both in this
   process on the same inputs (median of several runs); a tuned kernel at least
   :data:`MIN_GAIN` faster replaces the default one **in the kernel cache**, under the same
   key. Later builds of the same groups on the same target (any program, any process using
   that cache directory) run the tuned kernel with no lookup cost.

A cleared cache loses the tuned kernels, not the log: ``tune(mod, trials=0, log=PATH)`` applies
the records already in ``PATH`` again (no new trials). Tuned kernels compute the same
function in another loop order, so float rounding may differ within the usual tolerance;
inf, nan and signed zeros are unaffected.

Needs the ``tune`` extra (``pip install -e ".[tune]"``: psutil and cloudpickle); without it
``tune`` is a :class:`DiagnosticError` saying so. MetaSchedule's own cost model ``"xgb"`` is
used when xgboost is installed, else ``"random"``.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relay_ir.errors import DiagnosticError
from relay_ir.module import IRModule

MIN_GAIN = 0.05     # a tuned kernel must be at least 5% faster to replace the default one


@dataclass
class TunedKernel:
    """One kernel of a tuning run: its operators, its times and whether it was replaced."""

    label: str
    key: str
    default_ms: float
    tuned_ms: float | None       # None: MetaSchedule found no valid candidate
    replaced: bool

    @property
    def speedup(self) -> float | None:
        return None if self.tuned_ms is None else self.default_ms / self.tuned_ms


@dataclass
class TuneReport:
    """What :func:`tune` did: one row per distinct kernel, the log directory, the seconds."""

    kernels: list[TunedKernel] = field(default_factory=list)
    log: str = ""
    trials: int = 0
    seconds: float = 0.0

    @property
    def replaced(self) -> int:
        return sum(k.replaced for k in self.kernels)

    def table(self) -> str:
        """The report as a text table (what ``rly tune`` prints)."""
        rows = [f"{'kernel':<40} {'default ms':>11} {'tuned ms':>10} {'speedup':>8}  kept"]
        for k in self.kernels:
            tuned = "-" if k.tuned_ms is None else f"{k.tuned_ms:10.4f}"
            sp = "-" if k.speedup is None else f"{k.speedup:7.2f}x"
            rows.append(f"{k.label[:40]:<40} {k.default_ms:11.4f} {tuned:>10} {sp:>8}  "
                        f"{'tuned' if k.replaced else 'default'}")
        rows.append(f"{self.replaced} of {len(self.kernels)} kernels replaced by tuned ones; "
                    f"{self.trials} trials in {self.seconds:.1f} s; log in {self.log}")
        return "\n".join(rows)


def _require_extra() -> Any:
    missing = []
    for name in ("psutil", "cloudpickle"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise DiagnosticError(f"runtime.tune needs {' and '.join(missing)} (MetaSchedule's "
                              f"dependencies): pip install -e \".[tune]\"")
    from tvm.s_tir import meta_schedule as ms
    return ms


def _tuning_target(target: Any) -> Any:
    """``target`` with ``num-cores`` set (MetaSchedule requires it on CPU targets)."""
    import tvm
    from relay_ir.runtime.lower_tvm import is_cuda
    if is_cuda(target):
        return target
    config = dict(target.export())
    config.pop("keys", None)
    config.pop("tag", None)
    if not int(config.get("num-cores", 0) or 0):
        from relay_ir.runtime.lower_tvm import ensure_threads
        config["num-cores"] = ensure_threads()
    return tvm.target.Target(config)


def _distinct_kernels(exe: Any) -> list[tuple[Any, Any]]:
    """(lowered group, kernel request) of every distinct static kernel of the built module."""
    from relay_ir.runtime.compiler import CompiledProgram
    from relay_ir.runtime.executor import kernel_request
    from relay_ir.runtime.vm import _is_static
    from relay_ir.errors import LoweringError
    exe = getattr(getattr(exe, "_backend", None), "exe", exe)   # the build context
    cp = CompiledProgram(exe.module, kernels=True).compile_all()
    seen: dict[str, tuple[Any, Any]] = {}
    for fn in cp.kernels:
        types = [p.type_annotation or p.checked_type_ for p in fn.params]
        if not all(_is_static(t) for t in types):
            continue
        try:
            lowered = exe._lower(fn, types)
        except LoweringError:
            continue          # host groups (no TVM compute): nothing to tune
        req = kernel_request(lowered, exe.target)
        req.key = exe.cache.key(req.prim_func, req.signature, exe.target)
        seen.setdefault(req.key, (lowered, req))
    return list(seen.values())


def _inputs(lowered: Any, dev: Any, seed: int) -> list[Any]:
    """Random arguments (inputs, constants, outputs) of a lowered group's kernel."""
    import tvm
    rng = np.random.default_rng(seed)
    arrays = []
    for t in lowered.in_types:
        shape = tuple(int(d) for d in t.concrete_shape)
        if str(t.dtype).startswith("float"):
            arrays.append(rng.standard_normal(shape).astype(t.dtype))
        elif t.dtype == "bool":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        else:
            arrays.append(rng.integers(0, 4, shape).astype(t.dtype))
    arrays += [np.asarray(c) for c in lowered.constants]
    arrays += [np.zeros(tuple(int(d) for d in t.concrete_shape), t.dtype)
               for t in lowered.out_types]
    return [tvm.runtime.tensor(a, device=dev) for a in arrays]


def _time_ms(fn: Any, args: list[Any], budget_s: float = 0.3) -> float:
    """The median time of one call of ``fn(*args)`` in milliseconds."""
    fn(*args)
    t0 = time.perf_counter()
    fn(*args)
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, min(1000, int(0.02 / once)))
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 15):
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args)
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times) * 1e3


def tune(mod: IRModule, target: Any = "llvm", *, trials: int = 64, log: str | None = None,
         entry: str = "main", params: Any = None, opt_level: int = 2,
         fast_math: bool | None = None, cache: Any = None, builder_timeout: float = 120.0,
         seed: int = 0, progress: bool = False) -> TuneReport:
    """Tune the kernels of ``mod`` with MetaSchedule; keep the faster ones in the kernel cache.

    ``trials``: measured candidates in all (0: only apply the records already in ``log``).
    ``log``: the tuning database directory (default ``<kernel cache dir>/tuning``). ``entry``,
    ``params``, ``opt_level``, ``fast_math`` and ``cache``: as in ``runtime.build`` (tune with
    the same ones the program is built with, or its kernels differ). Returns a
    :class:`TuneReport`; see the module docstring for what is replaced and where.
    """
    from relay_ir.runtime.executor import build
    from relay_ir.runtime.lower_tvm import is_cuda
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 0:
        raise DiagnosticError(f"runtime.tune: trials must be a whole number >= 0, not "
                              f"{trials!r}")
    ms = _require_extra()
    import tvm
    t_start = time.perf_counter()
    exe = build(mod, target, entry=entry, params=params, opt_level=opt_level,
                fast_math=fast_math, cache=cache)
    if is_cuda(exe.target):
        raise DiagnosticError("runtime.tune: tuning needs a GPU to measure on for target "
                              "cuda; tune on the GPU machine (llvm targets are tuned here)")
    cache = exe.cache
    log = os.path.abspath(log or os.path.join(cache.directory, "tuning"))
    os.makedirs(log, exist_ok=True)
    kernels = _distinct_kernels(exe)
    report = TuneReport(log=log, trials=trials)
    if not kernels:
        report.seconds = time.perf_counter() - t_start
        return report
    from relay_ir.runtime.schedules import unaligned_params
    ttarget = _tuning_target(exe.target)
    tasks = {f"t_{req.key}": unaligned_params(req.prim_func).with_attr("global_symbol",
                                                                       f"t_{req.key}")
             for _, req in kernels}
    if trials > 0:
        try:
            import xgboost  # noqa: F401
            cost_model = "xgb"
        except ImportError:
            cost_model = "random"
        builder = ms.builder.LocalBuilder(timeout_sec=builder_timeout)
        ms.tune_tir(tvm.IRModule(tasks), ttarget, work_dir=log, max_trials_global=trials,
                    num_trials_per_iter=min(trials, 16), builder=builder,
                    cost_model=cost_model, seed=seed)
    db = ms.database.JSONDatabase(work_dir=log)
    dev = tvm.cpu()
    funcs = cache.get([req for _, req in kernels], exe.target)
    for (lowered, req), default_fn in zip(kernels, funcs):
        args = _inputs(lowered, dev, seed)
        default_ms = _time_ms(default_fn, args)
        sch = ms.tir_integration.compile_tir(
            db, tvm.IRModule({"main": tasks[f"t_{req.key}"]}), ttarget)
        row = TunedKernel(req.label or "kernel", req.key, default_ms, None, False)
        report.kernels.append(row)
        if sch is None:
            continue
        tuned_mod = sch.mod
        tuned = tvm.compile(tuned_mod, target=exe.target)
        tuned_fn = tuned[tuned_mod.get_global_vars()[0].name_hint]
        row.tuned_ms = _time_ms(tuned_fn, args)
        if (row.tuned_ms < (1.0 - MIN_GAIN) * default_ms
                and _same_values(default_fn, tuned_fn, lowered, dev, seed)):
            cache.replace(req, tuned_mod, exe.target)
            row.replaced = True
        if progress:
            print(f"  {row.label}: default {default_ms:.4f} ms, tuned {row.tuned_ms:.4f} ms",
                  flush=True)
    report.seconds = time.perf_counter() - t_start
    return report


def _same_values(default_fn: Any, tuned_fn: Any, lowered: Any, dev: Any, seed: int) -> bool:
    """Whether both kernels agree on the same fresh inputs (float tolerance; nan where nan):
    a tuned kernel that does not is never kept."""
    import tvm
    a = _inputs(lowered, dev, seed + 1)
    b = [tvm.runtime.tensor(x.numpy(), device=dev) for x in a]
    default_fn(*a)
    tuned_fn(*b)
    n_out = len(lowered.out_types)
    return all(np.allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)
               for x, y in zip(a[-n_out:], b[-n_out:]))
