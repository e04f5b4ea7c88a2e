"""Rewrites that pay off on one kind of target only: applied by ``runtime.build`` for it.

``passes.optimize`` is target-independent: it keeps values and removes work on every target.
A rewrite whose benefit was measured on one target's kernels (a threshold, a cost factor) runs
here, in ``runtime.build``'s lowering, for that target only:

* ``llvm`` (CPU): ``combine-sums`` (a sum of matmuls joined into one product when the operands
  hold under a quarter of the results they no longer write; a sum of slice scatters one stack)
  and ``share-weight-transpose`` (a weight read ``transpose_b`` by two or more products of at
  most 32 rows is transposed once: TVM's CPU dense schedule repacks it per call), then CSE and
  DCE over what they leave. Measured on W4 and W7 (benchmarks/run_workloads.py).
* every other target (``cuda``): nothing; these costs were not measured there.

Before them, on every target: ``simplify-inference`` (batch norm with constant statistics to a
per-channel scale and shift, the scale folded into the preceding conv2d's or dense's constant
weights; dropout to the identity). It changes results by float rounding only (checked at
compile time for inf, nan and the sign of zero: passes/simplify_inference.py), which
``passes.optimize`` does not allow itself; its benefit (51 fewer kernels in ResNet-50) holds
on every target.

Both passes stay available by name (``rly opt --passes combine-sums``, ``get_pass``).
"""
from __future__ import annotations

from typing import Any

from relay_ir.module import IRModule

# target kind -> the passes applied for it, in order (names from relay_ir.passes)
TARGET_PASSES: dict[str, tuple[str, ...]] = {
    "llvm": ("combine-sums", "share-weight-transpose"),
}
# passes applied for every target, before TARGET_PASSES
INFERENCE_PASSES: tuple[str, ...] = ("simplify-inference",)
# NOTE: what the rewrites leave: the joined terms' own bindings (dead), duplicated joins
CLEANUP: tuple[str, ...] = ("cse", "dce", "to-anf")


def target_kind(target: Any) -> str:
    """The kind name of ``target`` (``"llvm"``, ``"cuda"``): a string, a dict or a Target."""
    from relay_ir.runtime.lower_tvm import resolve_target
    return str(resolve_target(target).kind.name)


def target_rewrites(mod: IRModule, target: Any, opt_level: int = 2) -> IRModule:
    """``mod`` with the cost rewrites of ``target``'s kind applied (:data:`TARGET_PASSES`);
    ``mod`` itself for targets without any, or below ``opt_level`` 2 (the passes' level)."""
    from relay_ir.passes import get_pass
    from relay_ir.passes.pass_manager import PassContext, Sequential, run_pass
    names = INFERENCE_PASSES + TARGET_PASSES.get(target_kind(target), ())
    if not names or opt_level < 2:
        return mod
    outer = PassContext.current()
    with PassContext(opt_level=opt_level, instruments=outer.instruments,
                     config=outer.config) as ctx:
        infer = get_pass("infer-type")
        typed = run_pass(infer, mod, ctx)  # NOTE: the passes require types
        out = typed
        for n in names:
            new = run_pass(get_pass(n), out, ctx)
            if not _same(new, out):
                out = run_pass(infer, new, ctx)
        if out is typed:
            return mod
        return Sequential(tuple(get_pass(n) for n in CLEANUP), seq_name="cleanup")(out, ctx)


def _same(a: IRModule, b: IRModule) -> bool:
    """Whether no function changed (passes return unchanged functions as the same node)."""
    if a is b:
        return True
    return a.functions.keys() == b.functions.keys() and all(
        a.functions[k] is b.functions[k] for k in a.functions)
