"""``make demo``: the main job as it stands.

For every ``examples/*.rly``: parse it, type-check it (printing the type of each global),
print its canonical text, and run ``@main`` with the interpreter on deterministic sample
inputs. Exits non-zero if any example fails a stage.
"""
from __future__ import annotations

import glob
import os
import sys
from typing import Any

import numpy as np

import relay_ir as rly
from relay_ir.errors import DiagnosticError
from relay_ir.ty import TensorType, TupleType, Type


def sample_value(t: Type, rng: np.random.Generator) -> Any:
    """A deterministic sample argument of type ``t`` (small positive ints, normal floats)."""
    if isinstance(t, TensorType):
        shape = tuple(d if isinstance(d, int) else 2 for d in t.shape)
        if t.dtype == "bool":
            return rng.integers(0, 2, shape).astype("bool")
        if t.dtype.startswith(("int", "uint")):
            return np.asarray(rng.integers(1, 6, shape), dtype=t.dtype)
        return np.asarray(rng.standard_normal(shape), dtype=t.dtype)
    if isinstance(t, TupleType):
        return tuple(sample_value(f, rng) for f in t.fields)
    raise ValueError(f"no sample input for parameters of type {rly.astext(t)}")


def show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, threshold=20, edgeitems=3) + \
            f"  ({value.dtype}{list(value.shape)})"
    if isinstance(value, tuple):
        return "(" + ", ".join(show(v) for v in value) + ")"
    return repr(value)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.ndim:
            return f"{value.dtype}{list(value.shape)}"
        return f"{value.item()!r} ({value.dtype})"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)


def run_example(path: str) -> bool:
    print(f"=== {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        mod = rly.parse(text, source_name=path)
        print(f"parsed: {len(mod.functions)} function(s), "
              f"{len(mod.type_definitions)} type definition(s)")
        from relay_ir.passes import InferType
        typed = InferType()(mod)
        for name in sorted(typed.functions):
            print(f"  @{name}: {rly.astext(typed[name].checked_type)}")
        print("--- canonical text")
        print(rly.astext(mod))
        from relay_ir import runtime
        rng = np.random.default_rng(0)
        params = typed["main"].params
        args = [sample_value(p.checked_type, rng) for p in params]
        result = runtime.evaluate(typed, *args)
        print("--- @main(" + ", ".join(f"%{p.name_hint}: {_describe(a)}"
                                        for p, a in zip(params, args)) + ") =")
        print(show(result))
        return True
    except DiagnosticError as e:
        print(str(e))
        return False


def main(argv: list[str] | None = None) -> int:
    paths = list(argv if argv else sorted(glob.glob(os.path.join("examples", "*.rly"))))
    if not paths:
        print("no examples found (run from the repository root)")
        return 1
    ok = [run_example(p) for p in paths]
    print(f"\n{sum(ok)}/{len(ok)} examples parsed, type-checked, printed and ran")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
