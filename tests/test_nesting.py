"""Deep nesting (if, match, fn, tuples, calls, lets in branches, closure chains) costs no
Python recursion: every stage -- parse, print, check, each registered pass, gradient, jvp,
the interpreter, runtime.build and the CLI -- handles it.

Default tier: programs NEST levels deep run under a recursion limit only LIMIT_MARGIN frames
above the caller's depth, so any recursion that grows with the nesting fails. Stress tier:
the full 10,000 levels at the default recursion limit.
"""
from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any, Iterator

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.cli import main as rly_main
from nest_programs import KINDS, program

NEST = 400          # default tier: deep enough that one frame per level breaks the limit
LIMIT_MARGIN = 250  # frames allowed above the caller's depth
STRESS = 10_000
# NOTE: a nested tuple *type* N deep makes every one of its N tuple nodes carry a type of size
# up to N, so type checking it is quadratic however it is walked: smaller sizes there.
TYPE_NEST, TYPE_STRESS = 300, 1_000


def depth(kind: str, stress: bool = False) -> int:
    if kind == "tuple_type":
        return TYPE_STRESS if stress else TYPE_NEST
    return STRESS if stress else NEST


@contextlib.contextmanager
def low_recursion_limit() -> Iterator[None]:
    """Run the block with the recursion limit LIMIT_MARGIN frames above the current depth."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + LIMIT_MARGIN)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _low(f: Any, *args: Any, **kw: Any) -> Any:
    with low_recursion_limit():
        return f(*args, **kw)


def _value(out: Any) -> float:
    return float(np.asarray(out))


_MODS: dict[tuple[str, int], Any] = {}


def _typed(kind: str, n: int | None = None) -> Any:
    """The parsed and type-checked program (cached: several tests start from it)."""
    n = depth(kind) if n is None else n
    key = (kind, n)
    if key not in _MODS:
        text, _, _ = program(kind, n)
        _MODS[key] = passes.InferType()(rly.parse(text))
    return _MODS[key]


# ----------------------------------------------------------------------------- text
@pytest.mark.parametrize("kind", KINDS)
def test_parse_print_round_trip(kind: str) -> None:
    text, _, _ = program(kind, depth(kind))
    mod = _low(rly.parse, text)
    printed = _low(rly.astext, mod)
    again = _low(rly.parse, printed)
    assert _low(rly.structural_equal, mod, again)
    assert _low(rly.astext, again) == printed
    if kind != "tuple_type":  # NOTE: there, the type comments alone are quadratic text
        typed = _low(passes.InferType(), mod)
        shown = _low(rly.astext, typed, show_types=True)
        assert shown.count("/* ty=") >= depth(kind)
        assert _low(rly.astext, _low(rly.parse, shown)) == _low(rly.astext, typed)


def test_deep_indentation_stays_linear() -> None:
    # NOTE: indentation stops growing at 32 levels, so the text grows linearly with depth
    n = 1000
    text = rly.astext(rly.parse(program("if", n)[0]))
    assert max(len(line) - len(line.lstrip(" ")) for line in text.splitlines()) == 64
    twice = rly.astext(rly.parse(program("if", 2 * n)[0]))
    assert 1.9 * len(text) < len(twice) < 2.1 * len(text)


# ----------------------------------------------------------------------------- checking
@pytest.mark.parametrize("kind", KINDS)
def test_infer_type_and_evaluate(kind: str) -> None:
    text, args, want = program(kind, depth(kind))
    mod = _low(passes.InferType(), rly.parse(text))
    assert rly.astext(mod["main"].checked_type) == "fn (" + (
        "bool, float32" if "if" in kind else "float32") + ") -> float32"
    assert _value(_low(runtime.evaluate, mod, *args)) == want


def test_nested_tuple_type_error_is_a_diagnostic() -> None:
    # the annotation is one level too shallow: a located type error, not a RecursionError
    text, _, _ = program("tuple_type", NEST)
    bad = text.replace("(float32, float32)", "float32", 1)
    with pytest.raises(rly.TypeInferenceError) as info:
        _low(passes.InferType(), rly.parse(bad))
    assert info.value.span is not None


@pytest.mark.parametrize("name", sorted(passes.PASS_REGISTRY))
def test_every_registered_pass(name: str) -> None:
    # every pass by name, on every nesting kind; the result still computes the same value
    for kind in KINDS:
        _, args, want = program(kind, depth(kind))
        mod = _typed(kind)
        out = _low(passes.get_pass(name), mod)
        assert _value(_low(runtime.evaluate, out, *args)) == want, (name, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_optimize(kind: str) -> None:
    _, args, want = program(kind, depth(kind))
    out = _low(passes.optimize, _typed(kind))
    assert _value(_low(runtime.evaluate, out, *args)) == want


# ----------------------------------------------------------------------------- AD
@pytest.mark.parametrize("kind", KINDS)
def test_gradient(kind: str) -> None:
    _, args, want = program(kind, depth(kind))
    grad = _low(passes.gradient, _typed(kind))
    value, grads = _low(runtime.evaluate, grad, *args)
    assert _value(value) == want
    assert _value(grads[-1]) == 1.0  # d(result)/dx: every kind passes x through or adds to it


@pytest.mark.parametrize("kind", ["if", "fn", "match", "closures"])
def test_gradient_optimized(kind: str) -> None:
    _, args, want = program(kind, depth(kind))
    grad = _low(passes.optimize, _low(passes.gradient, _typed(kind)))
    value, grads = _low(runtime.evaluate, grad, *args)
    assert (_value(value), _value(grads[-1])) == (want, 1.0)


@pytest.mark.parametrize("kind", KINDS)
def test_jvp(kind: str) -> None:
    _, args, want = program(kind, depth(kind))
    fwd = _low(passes.jvp, _typed(kind))
    tangents = tuple(np.ones_like(a) for a in args)
    value, tangent = _low(runtime.evaluate, fwd, *args, *tangents)
    assert (_value(value), _value(tangent)) == (want, 1.0)


# ----------------------------------------------------------------------------- compiled
@pytest.mark.tvm
@pytest.mark.parametrize("kind", ["if", "fn", "match", "let_in_if", "closures"])
def test_build_and_call(kind: str) -> None:
    _, args, want = program(kind, depth(kind))
    runtime.build(_typed("call", 3), target="llvm")(np.array(1.0, "float32"))  # warm TVM
    exe = _low(runtime.build, _typed(kind), target="llvm")
    assert _value(_low(exe, *args)) == want


# ----------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("kind", ["if", "match", "fn"])
def test_cli_fmt_check_grad(kind: str, tmp_path: Any, capsys: Any) -> None:
    text, _, _ = program(kind, depth(kind))
    path = tmp_path / "deep.rly"
    path.write_text(text)
    assert _low(rly_main, ["fmt", str(path)]) == 0
    out = capsys.readouterr()
    assert out.err == "" and out.out.rstrip("\n") == rly.astext(rly.parse(text)).rstrip("\n")
    assert _low(rly_main, ["check", str(path)]) == 0
    out = capsys.readouterr()
    assert "@main" in out.out and "-> float32" in out.out and out.err == ""
    assert _low(rly_main, ["grad", str(path)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert passes.InferType()(rly.parse(out.out))  # the printed gradient program type-checks


# ----------------------------------------------------------------------------- stress
@pytest.mark.stress
@pytest.mark.parametrize("kind", KINDS)
def test_ten_thousand_levels_at_the_default_limit(kind: str) -> None:
    text, args, want = program(kind, depth(kind, stress=True))
    mod = rly.parse(text)
    printed = rly.astext(mod)
    assert rly.structural_equal(rly.parse(printed), mod)
    typed = passes.InferType()(mod)
    assert _value(runtime.evaluate(typed, *args)) == want
    assert _value(runtime.evaluate(passes.optimize(typed), *args)) == want
    value, grads = runtime.evaluate(passes.gradient(typed), *args)
    assert (_value(value), _value(grads[-1])) == (want, 1.0)
    value, tangent = runtime.evaluate(passes.jvp(typed), *args,
                                      *(np.ones_like(a) for a in args))
    assert (_value(value), _value(tangent)) == (want, 1.0)


@pytest.mark.stress
@pytest.mark.tvm
@pytest.mark.parametrize("kind", KINDS)
def test_ten_thousand_levels_build(kind: str) -> None:
    text, args, want = program(kind, depth(kind, stress=True))
    exe = runtime.build(passes.InferType()(rly.parse(text)), target="llvm")
    assert _value(exe(*args)) == want


def test_nested_tuple_result() -> None:
    # a result that is itself a tuple nested TYPE_NEST deep comes back as nested Python tuples
    n = TYPE_NEST
    value, ty = "%x", "float32"
    for _ in range(n):
        value, ty = f"({value}, %x)", f"({ty}, float32)"
    text = f'#[version = "0.0.5"]\ndef @main(%x: float32) -> {ty} {{ {value} }}'
    mod = _low(passes.InferType(), rly.parse(text))
    compiled = _low(runtime.build, mod, target="llvm")
    runs = [(m, lambda m, x: runtime.evaluate(m, x)) for m in (mod, _low(passes.optimize, mod))]
    for m, run in runs + [(mod, lambda m, x: compiled(x))]:
        out = _low(run, m, np.array(1.5, "float32"))
        levels = 0
        while type(out) is tuple:
            assert len(out) == 2 and _value(out[1]) == 1.5
            out, levels = out[0], levels + 1
        assert (levels, _value(out)) == (n, 1.5)


def test_deeply_nested_entry_types_stop_ad_with_a_diagnostic() -> None:
    # the AD transforms' per-type helpers for the entry's result are bounded: a one-line
    # diagnostic naming the limit, never a RecursionError
    value, ty = "%x", "float32"
    for _ in range(TYPE_NEST):
        value, ty = f"({value}, %x)", f"({ty}, float32)"
    text = f'#[version = "0.0.5"]\ndef @main(%x: float32) -> {ty} {{ {value} }}'
    mod = passes.InferType()(rly.parse(text))
    for transform in (passes.gradient, passes.jvp):
        with pytest.raises(rly.DiagnosticError) as info:
            _low(transform, mod)
        assert "recursion limit" in str(info.value)
        assert len(str(info.value).strip().splitlines()) == 1
