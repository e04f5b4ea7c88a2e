"""CSE on graph-form programs whose shared nodes bind variables (found by a generated module)."""
from __future__ import annotations

import numpy as np

import relay_ir as rly
from relay_ir.expr import Function, If, Let, Var, const
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.passes import EliminateCommonSubexpr
from relay_ir.runtime import evaluate
from relay_ir.ty import TensorType
from relay_ir.well_formed import check

F32 = TensorType((), "float32")


def test_a_shared_let_rewritten_in_two_scopes_binds_fresh_variables() -> None:
    x, b, f, y, p = Var("x", F32), Var("b", TensorType((), "bool")), Var("f"), Var("y"), \
        Var("p", F32)
    # shared = let %f = fn (%p) { %p * 2 }; %f(%x + 1)    -- used in a branch and in the tail
    shared = Let(f, Function((p,), make_call("multiply", p, const(2.0))),
                 rly.expr.Call(f, (make_call("add", x, const(1.0)),)))
    k = Var("k")  # `add(%x, 1f)` inside the shared let becomes %k in both of its copies
    body = Let(k, make_call("add", x, const(1.0)),
               Let(y, If(b, shared, k), make_call("add", y, shared)))
    mod = IRModule({"main": Function((x, b), body)})
    check(mod)  # a shared node is checked once, where it is first met
    out = EliminateCommonSubexpr()(mod)  # the WellFormedCheck instrument checks the output
    check(out)
    text = rly.astext(out)
    assert text.count("let %f") == 2  # the let is copied per scope, each with its own binder
    for flag in (True, False):
        args = (np.asarray(1.5, "float32"), np.asarray(flag))
        np.testing.assert_allclose(evaluate(out, *args), evaluate(mod, *args))
