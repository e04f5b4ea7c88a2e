"""Differential testing: check that two executions of a program agree.

Used for the interpreter vs a transformed module and the interpreter vs the compiled
executor::

    from util_diff import assert_same_results, random_inputs, assert_values_close
    assert_same_results(mod, passes.FoldConstant()(mod))              # interpreter on both
    assert_same_results(mod, mod, run_b=lambda m, *a: exe(*a))       # vs another executor

Inputs are generated from the entry's parameter types (tensors with ``?`` and symbolic dims
get small consistent sizes; tuples recursively) unless given. Results are compared
structurally: tensors with ``np.testing.assert_allclose`` (and equal dtype and shape), tuples,
ADT values and references field by field, closures only by kind. The comparison is iterative.
"""
from __future__ import annotations

import glob
import os
from typing import Any, Callable, Sequence

import numpy as np

import relay_ir as rly
from relay_ir.expr import Constructor
from relay_ir.module import IRModule
from relay_ir.runtime.values import ADTValue, Closure, RefValue, format_value
from relay_ir.ty import (AnyDim, DimExpr, GlobalTypeVar, ShapeVar, TensorType, TupleType, Type,
                         TypeCall, TypeData, TypeVar)

Runner = Callable[..., Any]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# A binary tree ADT and a recursive sum over it (tests of the VM and of module files build on it)
TREE_SUM = """
type Tree { Leaf(Tensor[(4), float32]), Node(Tree, Tree) }
def @sum(%t: Tree) -> Tensor[(4), float32] {
  match (%t) {
    Leaf(%x) => tanh(%x),
    Node(Leaf(%a), %r) => add(%a, @sum(%r)),
    Node(%l, %r) => add(@sum(%l), @sum(%r)),
  }
}
"""


def list_adt() -> tuple[TypeData, Constructor, Constructor]:
    """``type List[a] { Cons(a, List[a]), Nil }`` built in Python: (definition, Cons, Nil)."""
    a = TypeVar("a")
    lst = GlobalTypeVar("List")
    cons = Constructor("Cons", (a, TypeCall(lst, (a,))), lst, 0)
    nil = Constructor("Nil", (), lst, 1)
    return TypeData(lst, (a,), (cons, nil)), cons, nil


def program_files() -> list[str]:
    """The ``.rly`` programs of the tree: ``examples/`` and ``tests/data/``, sorted."""
    return sorted(glob.glob(os.path.join(ROOT, "examples", "*.rly")) +
                  glob.glob(os.path.join(ROOT, "tests", "data", "*.rly")))


def parse_program(path: str) -> IRModule:
    """The program in ``path``, parsed without the prelude, or with it if it needs it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return rly.parse(text, source_name=path)
    except rly.DiagnosticError:
        return rly.parse(text, source_name=path, prelude=True)


def _interp(mod: IRModule, *args: Any, entry: str = "main") -> Any:
    from relay_ir.runtime.interpreter import evaluate
    return evaluate(mod, *args, entry=entry, check_types=False)


def param_types(mod: IRModule, entry: str = "main") -> list[Type]:
    """The entry's parameter types (annotations, else from InferType)."""
    from relay_ir.runtime.interpreter import program_for
    types = program_for(mod).param_types(entry)
    missing = [p.name_hint for p, t in zip(mod[entry].params, types) if t is None]
    if missing:
        raise ValueError(f"cannot generate inputs: parameters {missing} have no known type")
    return types  # type: ignore[return-value]


def random_value(t: Type, rng: np.random.Generator, dims: dict) -> Any:
    """A random value of type ``t`` (``dims`` keeps symbolic dimensions consistent)."""
    if isinstance(t, TupleType):
        return tuple(random_value(f, rng, dims) for f in t.fields)
    if not isinstance(t, TensorType):
        raise ValueError(f"cannot generate a random value of type {t!r}; pass inputs=")
    shape = []
    for d in t.shape:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, ShapeVar):
            shape.append(dims.setdefault(d, int(rng.integers(1, 5))))
        elif isinstance(d, DimExpr):
            total = 0
            for mono, coef in d.terms:
                prod = coef
                for v in mono:
                    prod *= dims.setdefault(v, int(rng.integers(1, 5)))
                total += prod
            shape.append(max(total, 0))
        elif isinstance(d, AnyDim):
            shape.append(3)
        else:
            raise ValueError(f"cannot pick a size for dimension {d!r}")
    dt = np.dtype(t.dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "i":
        return rng.integers(-5, 6, size=shape).astype(dt)
    if dt.kind == "u":
        return rng.integers(0, 6, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise ValueError(f"cannot generate random values of dtype {t.dtype}")


def random_inputs(mod: IRModule, entry: str = "main", seed: int = 0) -> tuple:
    """Random arguments for ``mod[entry]`` drawn from its parameter types."""
    rng = np.random.default_rng(seed)
    dims: dict = {}
    return tuple(random_value(t, rng, dims) for t in param_types(mod, entry))


def copy_value(v: Any) -> Any:
    """``v`` with its arrays copied (tuples rebuilt), so that a run cannot change the caller's."""
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, tuple):
        return tuple(copy_value(x) for x in v)
    return v


def assert_values_close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6,
                        what: str = "result") -> None:
    """Assert two runtime values agree structurally (tensors approximately, same dtype)."""
    stack: list[tuple[Any, Any, str]] = [(a, b, what)]
    seen: set[tuple[int, int]] = set()
    while stack:
        x, y, path = stack.pop()
        if isinstance(x, np.generic):
            x = np.asarray(x)
        if isinstance(y, np.generic):
            y = np.asarray(y)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
                raise AssertionError(f"{path}: a tensor against a non-tensor: "
                                     f"{_short(x)} vs {_short(y)}")
            if x.dtype != y.dtype or x.shape != y.shape:
                raise AssertionError(f"{path}: dtype/shape differ: {x.dtype}{list(x.shape)} vs "
                                     f"{y.dtype}{list(y.shape)}")
            if x.dtype.kind in "biu":
                np.testing.assert_array_equal(x, y, err_msg=f"at {path}")
            else:
                np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f"at {path}",
                                           equal_nan=True)
        elif isinstance(x, tuple):
            if not isinstance(y, tuple) or len(x) != len(y):
                raise AssertionError(f"{path}: {_short(x)} vs {_short(y)}")
            for i in range(len(x) - 1, -1, -1):
                stack.append((x[i], y[i], f"{path}.{i}"))
        elif isinstance(x, ADTValue):
            if not isinstance(y, ADTValue) or x.constructor.name_hint != \
                    y.constructor.name_hint or len(x.fields) != len(y.fields):
                raise AssertionError(f"{path}: {_short(x)} vs {_short(y)}")
            name = x.constructor.name_hint
            for i in range(len(x.fields) - 1, -1, -1):
                stack.append((x.fields[i], y.fields[i], f"{path}/{name}[{i}]"))
        elif isinstance(x, RefValue):
            if not isinstance(y, RefValue):
                raise AssertionError(f"{path}: a reference against {_short(y)}")
            key = (id(x), id(y))
            if key not in seen:
                seen.add(key)
                stack.append((x.value, y.value, f"{path}/ref"))
        elif isinstance(x, Closure) or callable(x):
            if not callable(y):
                raise AssertionError(f"{path}: a function against {_short(y)}")
        elif x != y:
            raise AssertionError(f"{path}: {_short(x)} vs {_short(y)}")


def _short(v: Any) -> str:
    text = format_value(v)
    return text if len(text) <= 200 else text[:197] + "..."


def assert_same_results(mod_a: IRModule, mod_b: IRModule, inputs: Sequence[Any] | None = None,
                        entry: str = "main", rtol: float = 1e-5, atol: float = 1e-6,
                        runs: int = 3, seed: int = 0, run_a: Runner | None = None,
                        run_b: Runner | None = None) -> list[tuple[Any, Any]]:
    """Run ``entry`` of both modules on the same inputs and assert the results agree.

    Args:
        inputs: the arguments of one call; when None, ``runs`` random argument sets are drawn
            from ``mod_a``'s parameter types (seeds ``seed``, ``seed + 1``, ...).
        run_a, run_b: ``callable(mod, *args)`` executing a module (default: the interpreter).

    Returns the ``(result_a, result_b)`` pairs, for further checks.
    """
    ra = run_a or (lambda m, *a: _interp(m, *a, entry=entry))
    rb = run_b or (lambda m, *a: _interp(m, *a, entry=entry))
    if inputs is not None:
        arg_sets = [tuple(inputs)]
    else:
        arg_sets = [random_inputs(mod_a, entry, seed + k) for k in range(runs)]
    out = []
    for k, args in enumerate(arg_sets):
        va = ra(mod_a, *copy_value(args))
        vb = rb(mod_b, *copy_value(args))
        try:
            assert_values_close(va, vb, rtol, atol, what=f"@{entry} result")
        except AssertionError as e:
            shown = ", ".join(_short(x) for x in args)
            raise AssertionError(f"run {k}: the two executions disagree on inputs ({shown}):\n"
                                 f"{e}\n  a = {_short(va)}\n  b = {_short(vb)}") from None
        out.append((va, vb))
    return out


__all__ = ["assert_same_results", "assert_values_close", "random_inputs", "random_value",
           "param_types"]


def assert_runs_like_the_interpreter(run: Callable[..., Any], mod: IRModule, args: tuple,
                                     name: str, max_depth: int = 20_000) -> None:
    """``run(*args)`` (a compiled or loaded executable) gives the interpreter's value, or a
    ``DiagnosticError`` where the interpreter raises one (fresh copies of the arguments)."""
    import pytest
    from relay_ir.runtime import evaluate
    try:
        want = evaluate(mod, *copy_value(args), max_depth=max_depth)
    except rly.DiagnosticError:
        with pytest.raises(rly.DiagnosticError):
            run(*copy_value(args))
        return
    assert_values_close(run(*copy_value(args)), want, rtol=1e-4, atol=1e-5, what=name)
