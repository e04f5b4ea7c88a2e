"""Pass infrastructure: passes, pipelines and the pass context.

A pass is a frozen dataclass with class-level ``name`` (kebab-case) and ``opt_level``; its
options are dataclass fields. It implements ``transform_module(mod, ctx) -> IRModule`` and
never mutates its input. ``pass_(mod)`` runs it under the current :class:`PassContext`
(instruments included).
"""
from __future__ import annotations

import contextvars
import gc
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

from relay_ir.errors import ConfigError, DiagnosticError, PassError
from relay_ir.expr import Function
from relay_ir.module import IRModule


@dataclass(frozen=True)
class PassInfo:
    """Name, optimization level and required passes of a pass."""

    name: str
    opt_level: int
    required: tuple[str, ...] = ()


class PassContext:
    """Settings for running passes; a context manager on a stack.

    ``opt_level``: passes above it are skipped by :class:`Sequential` (unless required).
    ``required_pass`` / ``disabled_pass``: names forced on / off. ``instruments``: hooks
    (:mod:`relay_ir.passes.instrument`); when not given, those of the enclosing context are
    kept. ``config``: free-form options for passes (``ctx.config.get("unsafe_math")``: the
    opt-in to value-changing zero rules, see :func:`relay_ir.passes.optimize`).

    Example::

        with PassContext(opt_level=3, disabled_pass=["inline"], instruments=[Timing()]):
            mod = optimize(mod)
    """

    _current: ClassVar[contextvars.ContextVar[PassContext | None]] = contextvars.ContextVar(
        "relay_ir_pass_context", default=None)

    def __init__(self, opt_level: int = 2, required_pass: Sequence[str] = (),
                 disabled_pass: Sequence[str] = (), instruments: Sequence[Any] | None = None,
                 config: dict[str, Any] | None = None):
        self.opt_level = opt_level
        self.required_pass = tuple(required_pass)
        self.disabled_pass = tuple(disabled_pass)
        if instruments is None:
            # NOTE: no explicit instruments: inherit the enclosing context's (so the test
            # suite's WellFormedCheck stays on inside tests that open their own context).
            outer = self._current.get()
            instruments = outer.instruments if outer is not None else ()
        self.instruments = tuple(instruments)
        self.config = dict(config or {})
        self._tokens: list[contextvars.Token] = []

    def config_int(self, key: str, default: int, minimum: int = 0) -> int:
        """The integer option ``key`` of ``config`` (``default`` when absent); a value that is
        not an integer of at least ``minimum`` is a :class:`ConfigError` naming the key."""
        raw = self.config.get(key, default)
        try:
            value = int(raw)
            if value != raw and not isinstance(raw, str):
                raise ValueError
        except (TypeError, ValueError):
            value = None
        if value is None or value < minimum:
            raise ConfigError(f"PassContext config {key!r}: expected an integer >= "
                                  f"{minimum}, got {raw!r}")
        return value

    @classmethod
    def current(cls) -> PassContext:
        """The innermost entered context (a default one when none is entered)."""
        ctx = cls._current.get()
        if ctx is None:
            ctx = PassContext()
            cls._current.set(ctx)
        return ctx

    def __enter__(self) -> PassContext:
        self._tokens.append(self._current.set(self))
        for inst in self.instruments:
            hook = getattr(inst, "enter_pass_ctx", None)
            if hook:
                hook()
        return self

    def __exit__(self, *exc: Any) -> None:
        for inst in self.instruments:
            hook = getattr(inst, "exit_pass_ctx", None)
            if hook:
                hook()
        self._current.reset(self._tokens.pop())


@dataclass(frozen=True)
class Pass:
    """Base of all passes. Subclasses set ``name``/``opt_level`` and ``transform_module``."""

    name: ClassVar[str] = "pass"
    opt_level: ClassVar[int] = 0
    required: ClassVar[tuple[str, ...]] = ()

    @property
    def info(self) -> PassInfo:
        return PassInfo(self.name, self.opt_level, tuple(self.required))

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError(f"pass {self.name} has no transform_module")

    def __call__(self, mod: IRModule, ctx: PassContext | None = None) -> IRModule:
        """Run this pass (its ``required`` passes first) under ``ctx`` or the current context."""
        ctx = ctx or PassContext.current()
        for req in self.required:
            if req not in ctx.disabled_pass:
                from relay_ir.passes import get_pass
                mod = run_pass(get_pass(req), mod, ctx)
        return run_pass(self, mod, ctx)


_GC_PAUSED: list[bool] = []


def run_pass(p: Pass, mod: IRModule, ctx: PassContext) -> IRModule:
    """Run one pass with the context's instruments around it."""
    if not isinstance(mod, IRModule):
        raise TypeError(f"pass {p.name} expects an IRModule, got {type(mod).__name__}")
    for inst in ctx.instruments:
        should = getattr(inst, "should_run", None)
        if should is not None and not should(mod, p.info):
            return mod
    for inst in ctx.instruments:
        hook = getattr(inst, "run_before_pass", None)
        if hook:
            hook(mod, p.info)
    # NOTE: passes build big acyclic node graphs; Python's cyclic GC would rescan all of them
    # again and again (superlinear time on 100k-binding programs). Reference counting frees
    # them anyway, so the collector is paused while the outermost pass runs.
    pause_gc = not _GC_PAUSED and gc.isenabled() and ctx.config.get("pause_gc", True)
    if pause_gc:
        gc.disable()
        _GC_PAUSED.append(True)
    try:
        out = p.transform_module(mod, ctx)
    except DiagnosticError:
        raise
    except RecursionError as e:  # NOTE: a bug, never the user's fault
        raise PassError(f"pass {p.name} exceeded the recursion limit: {e}",
                        pass_name=p.name) from e
    finally:
        if pause_gc:
            _GC_PAUSED.pop()
            gc.enable()
    for inst in ctx.instruments:
        hook = getattr(inst, "run_after_pass", None)
        if hook:
            hook(out, p.info)
    return out


@dataclass(frozen=True)
class FunctionPass(Pass):
    """A pass applied to every global function independently: override ``transform_function``."""

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        """The rewritten ``func`` (``func`` itself when nothing changes)."""
        raise NotImplementedError(f"pass {self.name} has no transform_function")

    def function_transformer(self, mod: IRModule, ctx: PassContext
                             ) -> Callable[[Function], Function]:
        """The per-function rewrite for ``mod``; override to share per-module state (an
        analysis of the whole module) between the functions."""
        return lambda fn: self.transform_function(fn, mod, ctx)

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return mod.map_functions(self.function_transformer(mod, ctx))


@dataclass(frozen=True)
class Sequential(Pass):
    """Run passes in order, skipping those above the context's opt_level or disabled.

    A pass whose ``opt_level`` exceeds ``ctx.opt_level`` is skipped unless its name is in
    ``ctx.required_pass``; a pass named in ``ctx.disabled_pass`` is always skipped. Before a
    pass runs, its ``required`` passes run (e.g. ``infer-type``), unless the module has not
    changed since that required pass last ran in this pipeline.
    """

    passes: tuple[Pass, ...] = ()
    seq_name: str = "sequential"
    seq_opt_level: int = 0
    name: ClassVar[str] = "sequential"

    def __post_init__(self) -> None:
        if not isinstance(self.passes, tuple):
            object.__setattr__(self, "passes", tuple(self.passes))
        for p in self.passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Sequential expects passes, got {type(p).__name__}")

    def selected(self, ctx: PassContext) -> list[Pass]:
        """The passes that would run under ``ctx`` (without their required passes)."""
        out = []
        for p in self.passes:
            if p.name in ctx.disabled_pass:
                continue
            if p.opt_level > ctx.opt_level and p.name not in ctx.required_pass:
                continue
            out.append(p)
        return out

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        from relay_ir.passes import get_pass
        after: dict[str, IRModule] = {}  # required pass name -> the module it produced
        for p in self.selected(ctx):
            for req in p.required:
                if req in ctx.disabled_pass or after.get(req) is mod:
                    continue
                mod = run_pass(get_pass(req), mod, ctx)
                after[req] = mod
            mod = run_pass(p, mod, ctx)
            after[p.name] = mod
        return mod


def module_pass(name: str, opt_level: int = 0, required: tuple[str, ...] = ()
                ) -> Callable[[Callable[[IRModule, PassContext], IRModule]], type[Pass]]:
    """Decorator: turn ``fn(mod, ctx) -> mod`` into a Pass class."""
    def wrap(fn: Callable[[IRModule, PassContext], IRModule]) -> type[Pass]:
        cls = dataclass(frozen=True)(type(fn.__name__, (Pass,), {
            "name": name, "opt_level": opt_level, "required": required,
            "__doc__": fn.__doc__,
            "transform_module": lambda self, mod, ctx: fn(mod, ctx)}))
        return cls
    return wrap


def function_pass(name: str, opt_level: int = 0, required: tuple[str, ...] = ()
                  ) -> Callable[[Callable[[Function, IRModule, PassContext], Function]],
                                type[Pass]]:
    """Decorator: turn ``fn(func, mod, ctx) -> func`` into a FunctionPass class."""
    def wrap(fn: Callable[[Function, IRModule, PassContext], Function]) -> type[Pass]:
        cls = dataclass(frozen=True)(type(fn.__name__, (FunctionPass,), {
            "name": name, "opt_level": opt_level, "required": required,
            "__doc__": fn.__doc__,
            "transform_function": lambda self, f, mod, ctx: fn(f, mod, ctx)}))
        return cls
    return wrap


_ = field  # re-exported for pass authors' dataclass fields
