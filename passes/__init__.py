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
    "partial-eval": ("relay_ir.passes.partial_eval", "PartialEvaluate"),
    "lambda-lift": ("relay_ir.passes.lambda_lift", "LambdaLift"),
    "dead-ref-elim": ("relay_ir.passes.dead_ref", "DeadRefElimination"),
    "merge-continuations": ("relay_ir.passes.merge_continuations", "MergeContinuations"),
    "to-anf": ("relay_ir.passes.to_anf", "ToANormalForm"),
    "to-gnf": ("relay_ir.passes.to_gnf", "ToGraphNormalForm"),
    "dce": ("relay_ir.passes.dce", "DeadCodeElimination"),
    "fold-constant": ("relay_ir.passes.fold_constant", "FoldConstant"),
    "inline": ("relay_ir.passes.inline", "Inline"),
    "cse": ("relay_ir.passes.cse", "EliminateCommonSubexpr"),
    "simplify-expr": ("relay_ir.passes.simplify_expr", "SimplifyExpr"),
    "combine-sums": ("relay_ir.passes.linear_rewrites", "CombineSums"),
    "share-weight-transpose": ("relay_ir.passes.linear_rewrites", "ShareWeightTranspose"),
    "remove-unused-functions": ("relay_ir.passes.remove_unused", "RemoveUnusedFunctions"),
    "fuse-ops": ("relay_ir.passes.fuse_ops", "FuseOps"),
    "simplify-inference": ("relay_ir.passes.simplify_inference", "SimplifyInference"),
    "conv-weight-layout": ("relay_ir.runtime.target_lowering", "ConvWeightLayout"),
    "dense-weight-pack": ("relay_ir.runtime.target_lowering", "DenseWeightPack"),
    "conv-nchwc": ("relay_ir.runtime.nchwc", "ConvNCHWc"),
}

# Names re-exported lazily from their modules: `from relay_ir.passes import InferType`. Every
# registered pass class is one of them (listed once, above); these are the other names.
_LAZY: dict[str, str] = {
    **{cls: module for module, cls in PASS_REGISTRY.values()},
    "infer_type": "relay_ir.passes.type_infer",
    "optimize": "relay_ir.passes.optimizer",
    "default_pipeline": "relay_ir.passes.optimizer",
    "DEFAULT_PIPELINE": "relay_ir.passes.optimizer",
    "PassInstrument": "relay_ir.passes.instrument",
    "Timing": "relay_ir.passes.instrument",
    "PrintIRAfter": "relay_ir.passes.instrument",
    "WellFormedCheck": "relay_ir.passes.instrument",
    **{_n: "relay_ir.passes.pattern" for _n in (
        "DFPattern", "wildcard", "is_var", "is_constant", "is_op", "is_expr", "is_tuple",
        "is_tuple_get_item", "is_if", "is_ref_create", "is_ref_read", "is_ref_write",
        "optional", "rewrite", "rewrite_post_order")},
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


# NOTE: imported eagerly so that `passes.gradient` is the function, not its module (importing a
# submodule binds its name on the package; binding the function afterwards wins for good).
from relay_ir.passes.gradient import gradient  # noqa: E402
from relay_ir.passes.vmap import vmap  # noqa: E402
from relay_ir.passes.jvp import jvp  # noqa: E402

__all__ = ["Pass", "FunctionPass", "PassContext", "PassInfo", "Sequential", "function_pass",
           "module_pass", "run_pass", "get_pass", "parse_pipeline", "PASS_REGISTRY", "gradient",
           "jvp", "vmap"]
