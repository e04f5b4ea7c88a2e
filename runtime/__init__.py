"""Runtime: values, the interpreter, TVM lowering and the compiled executor.

One instruction compiler (``runtime.compiler``), two backends: ``evaluate(mod, *args,
entry="main")`` runs a module with the reference interpreter; ``build(mod, target="llvm")``
returns the one compiled executor (``relax_vm.RelaxExecutable``: the same instructions as TVM
Relax VM bytecode linked with the fused TVM kernels), whose ``export_library`` writes a
standard TVM module that ``load_module`` runs without the compiler (``target="cuda"``: the
same executor with GPU-resident tensors).
Values are numpy arrays, Python tuples, :class:`ADTValue`, :class:`RefValue` and
:class:`Closure`. Heavier parts (the interpreter, ``build`` and ``load_module``) are imported
on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

from relay_ir.runtime.values import (ADTValue, Closure, RecClosure, RefValue, TensorValue,
                                     format_value)

# public name -> module that defines it (imported lazily on first access)
_LAZY: dict[str, str] = {
    "evaluate": "relay_ir.runtime.interpreter",
    "apply": "relay_ir.runtime.interpreter",
    "build": "relay_ir.runtime.executor",
    "load_module": "relay_ir.runtime.relax_export",
    "ModuleFileError": "relay_ir.runtime.vm",
    "tune": "relay_ir.runtime.tuning",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'relay_ir.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)


__all__ = ["evaluate", "apply", "build", "load_module", "ModuleFileError", "tune", "ADTValue",
           "Closure", "RecClosure", "RefValue", "TensorValue", "format_value"]
