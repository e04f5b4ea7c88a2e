"""Helpers for the AD tests: gradient checks against central finite differences."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Sequence

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Call
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.well_formed import check as wf_check

from util_ad import leaves

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import workloads as wl  # noqa: E402

HEADER = '#[version = "0.0.5"]\n'


def strip_type_args(mod: IRModule) -> IRModule:
    """``mod`` without call type arguments (they have no syntax, so text cannot carry them)."""

    class Strip(ExprMutator):
        def visit_call(self, c: Call) -> Call:  # type: ignore[override]
            return rly.with_fields(super().visit_call(c), type_args=())

    return IRModule({k: Strip().visit(v) for k, v in mod.functions.items()},
                    dict(mod.type_definitions))


def grad_module(mod: IRModule, entry: str = "main") -> IRModule:
    """``passes.gradient`` plus the output contract: well formed, typed, text round trip."""
    g = passes.gradient(mod, entry)
    wf_check(g)
    fn = g[entry]
    assert isinstance(fn.checked_type_, rly.FuncType)
    text = rly.astext(g)
    back = rly.parse(text, "<grad>")
    rly.assert_structural_equal(strip_type_args(g), back)
    assert rly.astext(back) == text
    return g


def objective(mod: IRModule, entry: str) -> Callable[..., float]:
    """``args -> sum of every float element of the result`` (the seeding convention)."""

    def f(*args: Any) -> float:
        out = runtime.evaluate(mod, *args, entry=entry)
        return float(sum(np.sum(x, dtype=np.float64) for x in leaves(out)
                         if np.issubdtype(x.dtype, np.floating)))
    return f


def _rebuild(template: Any, flat: list[np.ndarray]) -> Any:
    if isinstance(template, tuple):
        return tuple(_rebuild(t, flat) for t in template)
    return flat.pop(0)


def finite_differences(f: Callable[..., float], args: Sequence[Any], eps: float = 1e-6
                       ) -> list[Any]:
    """Central differences of ``f`` at ``args`` (zeros for int and bool leaves)."""
    grads = []
    for i, a in enumerate(args):
        flat = leaves(a)
        out = []
        for j, leaf in enumerate(flat):
            g = np.zeros(leaf.shape, dtype=leaf.dtype)
            if np.issubdtype(leaf.dtype, np.floating):
                for idx in np.ndindex(*leaf.shape):
                    vals = []
                    for sgn in (1, -1):
                        moved = [x.copy() for x in flat]
                        moved[j][idx] += sgn * eps
                        new_args = list(args)
                        new_args[i] = _rebuild(a, moved)
                        vals.append(f(*new_args))
                    g[idx] = (vals[0] - vals[1]) / (2 * eps)
            out.append(g)
        grads.append(_rebuild(a, out))
    return grads


def assert_close_tree(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Equal structure and dtypes; values close."""
    gl, wl = leaves(got), leaves(want)
    assert len(gl) == len(wl)
    for g, w in zip(gl, wl):
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def check_grad(text: str, args: Sequence[Any], entry: str = "main", prelude: bool = False,
               rtol: float = 1e-5, atol: float = 1e-6) -> tuple[Any, Any]:
    """Differentiate ``text`` and compare value and gradients with the interpreter and FD."""
    mod = rly.parse(HEADER + text, "<test>", prelude=prelude)
    g = grad_module(mod, entry)
    value, grads = runtime.evaluate(g, *args, entry=entry)
    assert_close_tree(value, runtime.evaluate(mod, *args, entry=entry), 1e-12, 0)
    want = finite_differences(objective(mod, entry), args)
    assert isinstance(grads, tuple) and len(grads) == len(args)
    assert_close_tree(grads, tuple(want), rtol, atol)
    check_optimized(g, args, entry, value, grads)
    check_first_order(mod, args, entry, value, grads)
    check_jvp(mod, args, entry, value, grads)
    return value, grads


def check_jvp(mod: IRModule, args: Sequence[Any], entry: str, value: Any, grads: Any,
              seed: int = 0) -> IRModule:
    """``passes.jvp``: for random tangents ``t``, ``sum(result tangent) == <gradient, t>``; the
    value is the original one; the tangent has the result's structure, zeros on int leaves."""
    from util_ad import inner, rebuild
    rng = np.random.default_rng(seed)
    tangents = []
    for a in args:
        flat = [rng.uniform(-1, 1, x.shape).astype(x.dtype) if np.issubdtype(x.dtype, np.floating)
                else (rng.integers(0, 5, x.shape).astype(x.dtype) if x.dtype != np.bool_
                      else np.ones(x.shape, bool)) for x in leaves(a)]
        tangents.append(rebuild(a, flat))  # NOTE: ADT values: leaves() sees their fields
    j = passes.jvp(mod, entry)
    wf_check(j)
    jvalue, jtangent = runtime.evaluate(j, *args, *tangents, entry=entry)
    assert_close_tree(jvalue, value, 1e-12, 0)
    vl, tl = leaves(value), leaves(jtangent)
    assert len(vl) == len(tl)
    for v, t in zip(vl, tl):
        assert v.shape == t.shape and v.dtype == t.dtype
        if not np.issubdtype(v.dtype, np.floating):
            assert not np.any(t), "non-float leaves of the tangent are zeros"
    want = inner(tuple(grads), tuple(tangents))
    got = float(sum(np.sum(t, dtype=np.float64) for t in tl
                    if np.issubdtype(t.dtype, np.floating)))
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)
    return j


def is_pure_dataflow(mod: IRModule, entry: str) -> bool:
    """The entry uses only operator calls, tuples, projections, lets, variables and constants,
    and takes and returns tensors and tuples of them (what ``mode="first_order"`` accepts)."""
    from relay_ir.expr import (Constant, Function, GlobalVar, Let, Op, Tuple, TupleGetItem,
                               Var)
    from relay_ir.traversal import post_order
    fn = mod[entry]
    ft = fn.checked_type_ or passes.InferType()(mod)[entry].checked_type_

    def tensors(t: Any) -> bool:
        if isinstance(t, rly.TupleType):
            return all(tensors(f) for f in t.fields)
        return isinstance(t, rly.TensorType)
    if not all(tensors(t) for t in (*ft.arg_types, ft.ret_type)):
        return False
    for node in post_order(fn.body):
        if isinstance(node, Call):
            if not isinstance(node.op, Op):
                return False
        elif isinstance(node, GlobalVar) or not isinstance(
                node, (Let, Tuple, TupleGetItem, Var, Constant, Op)):
            return False
    return not isinstance(fn.body, Function)


def check_first_order(mod: IRModule, args: Sequence[Any], entry: str, value: Any, grads: Any
                      ) -> IRModule | None:
    """``mode="first_order"``: agrees with the higher-order gradient on a pure dataflow entry
    (no reference, no closure in its output); any other entry is a diagnostic."""
    from relay_ir.expr import Function, RefCreate
    from relay_ir.traversal import post_order
    if not is_pure_dataflow(mod, entry):
        try:
            passes.gradient(mod, entry, mode="first_order")
        except rly.DiagnosticError as e:
            assert "first_order mode differentiates pure dataflow only" in str(e)
            return None
        raise AssertionError("first_order accepted a program that is not pure dataflow")
    fo = passes.gradient(mod, entry, mode="first_order")
    wf_check(fo)
    assert not any(isinstance(n, (Function, RefCreate)) for n in post_order(fo[entry].body))
    fvalue, fgrads = runtime.evaluate(fo, *args, entry=entry)
    assert_close_tree(fvalue, value, 1e-12, 0)
    assert_close_tree(fgrads, grads, 1e-9, 1e-12)
    return fo


def check_optimized(g: IRModule, args: Sequence[Any], entry: str, value: Any, grads: Any
                    ) -> IRModule:
    """``passes.optimize`` of gradient program ``g``: well formed, same value and gradients."""
    opt = passes.optimize(g, entry=entry)
    wf_check(opt)
    ovalue, ograds = runtime.evaluate(opt, *args, entry=entry)
    assert_close_tree(ovalue, value, 1e-12, 0)
    assert_close_tree(ograds, grads, 1e-12, 1e-15)
    return opt


# ----------------------------------------------------------------------------- W2 workload
# W2 (WORKLOADS.md) is defined once, in benchmarks/workloads.py
W2_TEXT, w2_data = wl.W2_LOSS, wl.w2_args


op_calls = wl.op_call_sites  # operator call sites reached from an entry (static)

