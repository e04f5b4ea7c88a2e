"""Passes: the pass manager, type inference and the optimization passes.

Passes are looked up by kebab-case name (``get_pass("dce")``) through lazy importers, so
``"to-anf,dce,fold-constant"`` parses into a pipeline with :func:`parse_pipeline`.
"""
from __future__ import annotations

import importlib
from typing import Any

from relay_ir.passes.pass_manager import (FunctionPass, Pass, PassContext, PassInfo, Sequential,
                                          function_pass, module_pass, run_pass)

# kebab-case name -> (module, class name). Each pass module registers itself here.
PASS_REGISTRY: dict[str, tuple[str, str]] = {
    "infer-type": ("relay_ir.passes.type_infer", "InferType"),
}

# Class names re-exported lazily from their modules: `from relay_ir.passes import InferType`.
_LAZY: dict[str, str] = {
    "InferType": "relay_ir.passes.type_infer",
    "infer_type": "relay_ir.passes.type_infer",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'relay_ir.passes' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)


def get_pass(name: str, **options: Any) -> Pass:
    """An instance of the pass registered under ``name`` (kebab-case)."""
    try:
        module, cls = PASS_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(PASS_REGISTRY))
        raise ValueError(f"unknown pass {name!r}; known passes: {known}") from None
    return getattr(importlib.import_module(module), cls)(**options)


def parse_pipeline(spec: str) -> Sequential:
    """``"to-anf,dce,fold-constant"`` -> a Sequential of those passes."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    return Sequential(tuple(get_pass(n) for n in names), seq_name=spec)


__all__ = ["Pass", "FunctionPass", "PassContext", "PassInfo", "Sequential", "function_pass",
           "module_pass", "run_pass", "get_pass", "parse_pipeline", "PASS_REGISTRY"]
