"""Build a model with the Python builder API and register a custom pass.

Run: ``python examples/builder_example.py``. It

1. builds ``@main(x, w1, b1, w2, b2) = dense(relu(relu(dense(x, w1) + b1)), w2) + b2`` with
   :class:`relay_ir.builder.ScopeBuilder` (a let spine, no nested ``Let`` written by hand) and
   type-checks it;
2. defines ``fold-double-relu`` (``relu(relu(x)) => relu(x)``, relu is idempotent) as a
   :class:`FunctionPass` and registers it in ``passes.PASS_REGISTRY``, so ``get_pass`` and
   ``parse_pipeline`` (and thus ``rly opt --passes`` in the same process) know it by name;
3. runs ``to-anf,fold-double-relu,dce``, prints the result and checks it computes the same
   values as the original with the interpreter and with ``runtime.build``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.builder import ScopeBuilder
from relay_ir.expr import Call, Function, Var
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.op import get_op
from relay_ir.op._rules import make_call
from relay_ir.passes import FunctionPass, PassContext


def build_mlp(n: int = 4, d: int = 8, h: int = 16, k: int = 3) -> IRModule:
    """The MLP of the module docstring, built binding by binding."""
    f32 = "float32"
    x = Var("x", rly.TensorType((n, d), f32))
    w1, b1 = Var("w1", rly.TensorType((h, d), f32)), Var("b1", rly.TensorType((h,), f32))
    w2, b2 = Var("w2", rly.TensorType((k, h), f32)), Var("b2", rly.TensorType((k,), f32))
    sb = ScopeBuilder()
    a = sb.let_(make_call("nn.dense", x, w1), "a", bind_atoms=True)
    a = sb.let_(make_call("nn.bias_add", a, b1), "a1")
    r = sb.let_(make_call("nn.relu", a), "r")
    r = sb.let_(make_call("nn.relu", r), "r2")          # redundant: the pass removes it
    o = sb.let_(make_call("nn.dense", r, w2), "o")
    body = sb.build(make_call("nn.bias_add", o, b2))
    mod = IRModule({"main": Function((x, w1, b1, w2, b2), body)})
    return passes.InferType()(mod)


class _FoldDoubleRelu(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.relu = get_op("nn.relu")
        self.defs: dict[int, Any] = {}      # let-bound var -> its value (A-normal form)

    def visit_binding(self, var: Var, value: Any) -> Any:
        # NOTE: a generator: `yield` hands a child to the base's loop, so nesting costs no
        # Python recursion (docs/pass_tutorial.md)
        new_var = yield var
        new_value = yield value
        self.defs[id(new_var)] = new_value
        return new_var, new_value

    def visit_call(self, call: Call) -> Any:
        new = super().visit_call(call)
        if isinstance(new, Call) and new.op is self.relu:
            inner = new.args[0]
            inner = self.defs.get(id(inner), inner)
            if isinstance(inner, Call) and inner.op is self.relu:
                return new.args[0]
        return new


@dataclass(frozen=True)
class FoldDoubleRelu(FunctionPass):
    """Idempotence of relu: ``relu(relu(x)) => relu(x)``."""

    name: ClassVar[str] = "fold-double-relu"
    opt_level: ClassVar[int] = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return _FoldDoubleRelu().visit(func)


def register() -> None:
    """Make ``fold-double-relu`` known to ``get_pass`` / ``parse_pipeline``."""
    passes.PASS_REGISTRY[FoldDoubleRelu.name] = (__name__, "FoldDoubleRelu")


def main() -> dict[str, Any]:
    """Build, register, optimize, compare; returns what the test checks."""
    mod = build_mlp()
    register()
    with PassContext(opt_level=2):
        out = passes.parse_pipeline("to-anf,fold-double-relu,dce")(mod)
    text = rly.astext(out)
    print(text)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.checked_type.concrete_shape).astype("float32")
            for p in mod["main"].params]
    want = runtime.evaluate(mod, *args)
    got = runtime.evaluate(out, *args)
    compiled = runtime.build(out)(*args)
    same = bool(np.allclose(want, got, rtol=1e-6) and np.allclose(want, compiled, rtol=1e-4,
                                                                  atol=1e-5))
    print(f"relu calls: {rly.astext(mod).count('nn.relu(')} -> {text.count('nn.relu(')}; "
          f"same values (interpreter and compiled): {same}")
    return {"before": mod, "after": out, "same": same}


if __name__ == "__main__":
    main()
