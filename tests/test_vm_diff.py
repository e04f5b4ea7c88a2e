"""Differential tests: the compiled executor agrees with the interpreter.

On every example, every test program of the interpreter and pass suites (the program list of
test_optimize_property: examples, tests/data and every ``def @main`` string of tests/test_*.py)
and every AD test program of test_gradient.py (its ``check_grad`` calls, recorded), the
gradient programs compiled both raw (``opt_level=0``: one kernel per operator) and optimized.
Floats agree within tolerances, integers and booleans exactly (util_diff).
"""
from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.errors import DiagnosticError
from util_diff import assert_values_close, copy_value, random_inputs

pytestmark = pytest.mark.tvm


class _TooSlow(BaseException):  # NOTE: not caught by the machines' `except Exception`
    pass


def _within(seconds: float, f: Any, *args: Any) -> Any:
    """``f(*args)``, raising :class:`_TooSlow` after ``seconds`` (main thread only)."""
    def alarm(*_: Any) -> None:
        raise _TooSlow()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return f(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


DEPTH = 20_000   # NOTE: frame limit of both runs: endless non-tail recursions fail fast


@pytest.fixture(autouse=True)
def _compiled_depth_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled executor's deep-run limit is DEPTH too (runtime.relax_vm.DEEP_DEPTH)."""
    from relay_ir.runtime import relax_vm
    monkeypatch.setattr(relax_vm, "DEEP_DEPTH", DEPTH)


def _compare(mod: rly.IRModule, exe: Any, args: tuple, what: str, rtol: float = 1e-4,
             atol: float = 1e-5) -> str:
    """Run both; assert they agree (or both fail). Returns "ok" or "both-failed"."""
    def compiled(*a: Any) -> Any:
        return exe(*a)
    try:
        want = runtime.evaluate(mod, *copy_value(args), max_depth=DEPTH)
        failed = None
    except DiagnosticError as e:
        want, failed = None, e
    if failed is not None:
        try:
            with pytest.raises(DiagnosticError):
                _within(30.0, compiled, *copy_value(args))
        except _TooSlow:
            raise AssertionError(f"{what}: the interpreter failed ({failed.message}); the "
                                 f"compiled program ran for 30 s") from None
        return "both-failed"
    got = _within(30.0, compiled, *copy_value(args))
    assert_values_close(got, want, rtol=rtol, atol=atol, what=what)
    return "ok"


# ----------------------------------------------------------------------------- suite programs
_SUITE: list[tuple[str, rly.IRModule, bool]] = []


def _suite() -> list[tuple[str, rly.IRModule, bool]]:
    """``(name, module, runs)``; ``runs`` is False for the programs that never return on
    purpose (test_optimize_property.ENDLESS): those are built, not run."""
    import test_optimize_property as top
    if not _SUITE:
        for name, text in top._suite_programs():
            mod = top._load(text, name)
            if mod is not None and "main" in mod:
                _SUITE.append((name, mod, not top.never_returns(text)))
    return _SUITE


def _positive(args: tuple) -> tuple:
    # NOTE: |x| keeps sqrt, log and variances in their domains (NaN compares equal anyway)
    return tuple(np.abs(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
                 for a in args)


def _with_inputs() -> list[tuple[str, rly.IRModule, bool, tuple]]:
    """The suite programs that take generated inputs, with their inputs."""
    out = []
    for name, mod, runs in _suite():
        try:
            out.append((name, mod, runs, _positive(random_inputs(mod, seed=1))))
        except ValueError:      # NOTE: ADT / function / reference parameters: no inputs drawn
            pass
    return out


SHARDS = 6   # NOTE: the programs in six tests, so that workers share a cold kernel cache's work


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_example_and_suite_program_compiled_agrees(shard: int) -> None:
    for name, mod, runs, args in _with_inputs()[shard::SHARDS]:
        try:
            exe = runtime.build(mod)
        except DiagnosticError as e:
            # NOTE: build compiles what the static types allow, so a program the interpreter
            # cannot run either (an operator with neither a kernel nor a reference) fails here
            try:
                runtime.evaluate(mod, *copy_value(args), max_depth=DEPTH)
            except DiagnosticError:
                continue
            raise AssertionError(f"{name}: runtime.build failed: {e}") from None
        if runs:
            _compare(mod, exe, args, name)


def test_the_compiled_differential_covers_every_example() -> None:
    progs = _with_inputs()
    run = [name for name, _, runs, _ in progs if runs]
    examples = [n for n in run if n.startswith("examples")]
    assert len(examples) == len([f for f in os.listdir(os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
        if f.endswith(".rly")])
    assert len(run) >= 100, (len(run), len(_suite()))
    assert len(progs) - len(run) == 1   # NOTE: test_optimize_property.ENDLESS


# ----------------------------------------------------------------------------- AD programs
def _ad_programs() -> list[tuple[str, str, tuple, str, bool]]:
    """The ``check_grad(text, args, entry, prelude)`` calls of test_gradient.py, recorded."""
    import test_gradient as tg
    import util_grad
    calls: list[tuple[str, str, tuple, str, bool]] = []
    current = [""]

    def record(text: str, args: Any, entry: str = "main", prelude: bool = False,
               rtol: float = 1e-5, atol: float = 1e-6) -> tuple[Any, Any]:
        calls.append((current[0], text, tuple(copy_value(a) for a in args), entry, prelude))
        mod = rly.parse(util_grad.HEADER + text, "<test>", prelude=prelude)
        return runtime.evaluate(passes.gradient(mod, entry), *args, entry=entry)

    saved = tg.check_grad
    tg.check_grad = record
    try:
        for name in sorted(dir(tg)):
            fn = getattr(tg, name)
            if not name.startswith("test_") or not callable(fn):
                continue
            current[0] = name
            if fn.__code__.co_argcount == 0:
                fn()    # NOTE: a failure here is the recorded test's own: it fails this one too
    finally:
        tg.check_grad = saved
    return calls


_AD: list[Any] = []


def _ad() -> list[Any]:
    if not _AD:
        _AD.extend(_ad_programs())
    return _AD


@pytest.mark.parametrize("level", [0, 2], ids=["raw", "optimized"])
def test_ad_test_programs_compiled_agree(level: int) -> None:
    progs = _ad()
    assert len(progs) >= 25
    checked = 0
    for test, text, args, entry, prelude in progs:
        from util_grad import HEADER
        mod = rly.parse(HEADER + text, "<test>", prelude=prelude)
        g = passes.gradient(mod, entry)
        exe = runtime.build(g, opt_level=level)
        runner = (lambda *a, exe=exe, entry=entry: exe(*a, entry=entry))
        if entry == "main":
            status = _compare(g, exe, args, f"{test} (level {level})", rtol=1e-5, atol=1e-6)
        else:
            want = runtime.evaluate(g, *copy_value(args), entry=entry)
            assert_values_close(runner(*copy_value(args)), want, rtol=1e-5, atol=1e-6,
                                what=f"{test} (level {level})")
            status = "ok"
        checked += status == "ok"
    assert checked >= 25
