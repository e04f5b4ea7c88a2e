"""Tests for LambdaLift (passes/lambda_lift.py)."""
from __future__ import annotations

import numpy as np

from relay_ir.attrs import Attrs
from relay_ir.expr import Call, Function, GlobalVar, If, Let, Var, const
from relay_ir.module import IRModule
from relay_ir.op import get_op
from relay_ir.passes import LambdaLift, PassContext
from relay_ir.passes.instrument import WellFormedCheck
from relay_ir.structural import assert_structural_equal
from relay_ir.traversal import build_lets, flatten_lets, post_order
from relay_ir.ty import FuncType, TensorType

from util_diff import assert_same_results
from util_scale import shallow_stack, sizes

F2 = TensorType((2,), "float32")
I0 = TensorType((), "int32")


def op(name, *args):
    return Call(get_op(name), tuple(args))


def run(mod: IRModule) -> IRModule:
    with PassContext(instruments=[WellFormedCheck()]):
        return LambdaLift()(mod)


def nested_functions(fn: Function) -> list[Function]:
    return [n for n in post_order(fn.body) if isinstance(n, Function)]


def test_closed_function_becomes_plain_global():
    x, p, f = Var("x", F2), Var("p", F2), Var("f")
    before = Function((x,), Let(f, Function((p,), op("add", p, const(1.0))),
                                Call(f, (x,))))
    mod = IRModule({"main": before})
    out = run(mod)
    g = GlobalVar("main_lifted_0")
    p2, f2 = Var("p", F2), Var("f")
    assert_structural_equal(out["main_lifted_0"], Function((p2,), op("add", p2, const(1.0))),
                            map_free_vars=True)
    assert_structural_equal(out["main"], Function((x,), Let(f2, g, Call(f2, (x,)))),
                            map_free_vars=True)
    assert mod["main"] is before and "main_lifted_0" not in mod
    assert_same_results(mod, out)


def test_closure_gets_explicit_environment():
    x, y, p, f = Var("x", F2), Var("y", F2), Var("p", F2), Var("f")
    body = op("multiply", op("add", p, x), y)
    before = Function((x, y), Let(f, Function((p,), body), Call(f, (Call(f, (x,)),))))
    mod = IRModule({"main": before})
    out = run(mod)
    lifted = out["main_lifted_0"]
    assert lifted.attrs["Closure"] == 1
    # the environment is the free variables in order of first use: x, then y
    assert [v.name_hint for v in lifted.params] == ["x", "y"]
    assert all(v.type_annotation == F2 for v in lifted.params)
    inner = lifted.body
    assert isinstance(inner, Function) and not nested_functions(inner)
    ex, ey, ep = Var("x", F2), Var("y", F2), Var("p", F2)
    expected = Function((ex, ey), Function((ep,), op("multiply", op("add", ep, ex), ey)),
                        lifted.ret_type, attrs=Attrs({"Closure": 1}))
    assert_structural_equal(lifted, expected, map_free_vars=True)
    assert lifted.ret_type is None  # the inner function has no known type before InferType
    lets, call = flatten_lets(out["main"].body)
    assert isinstance(lets[0].value, Call) and lets[0].value.op.name_hint == "main_lifted_0"
    assert lets[0].value.args == (x, y)
    assert not nested_functions(out["main"])
    assert_same_results(mod, out)


def _count_loop() -> IRModule:
    # let loop = fn(i, acc) { if (i < 1) acc else loop(i - 1, acc + x) }; loop(n, x)
    x, n = Var("x", F2), Var("n", I0)
    i, acc, loop = Var("i", I0), Var("acc", F2), Var("loop")
    body = If(op("less", i, const(1)), acc,
              Call(loop, (op("subtract", i, const(1)), op("add", acc, x))))
    fn = Function((i, acc), body, F2)
    return IRModule({"main": Function((x, n), Let(loop, fn, Call(loop, (n, x))))})


def test_recursive_let_bound_closure():
    mod = _count_loop()
    out = run(mod)
    lifted = out["main_lifted_0"]
    assert lifted.attrs["Closure"] == 1 and [v.name_hint for v in lifted.params] == ["x"]
    # inside, the recursive reference rebuilds the closure from the environment
    calls = [n for n in post_order(lifted) if isinstance(n, Call)
             and isinstance(n.op, GlobalVar)]
    assert len(calls) == 1 and calls[0].args == lifted.params
    pairs = assert_same_results(mod, out, inputs=[np.array([1.0, 2.0], "float32"),
                                                  np.array(3, "int32")])
    np.testing.assert_allclose(pairs[0][1], [4.0, 8.0])


def test_nested_closures_lift_innermost_first():
    # fn(x) { let mk = fn(a) { fn(b) { a + b + x } }; (mk(x))(x) }
    x, a, b, mk = Var("x", F2), Var("a", F2), Var("b", F2), Var("mk")
    inner = Function((b,), op("add", op("add", a, b), x))
    before = Function((x,), Let(mk, Function((a,), inner), Call(Call(mk, (x,)), (x,))))
    mod = IRModule({"main": before})
    out = run(mod)
    assert set(out.functions) == {"main", "main_lifted_0", "main_lifted_1"}
    for name in ("main", "main_lifted_0", "main_lifted_1"):
        fn = out[name]
        body = fn.body.body if fn.attrs.get("Closure", 0) else fn.body
        assert not nested_functions(Function((), body)), name
    pairs = assert_same_results(mod, out, inputs=[np.array([1.0, 2.0], "float32")])
    np.testing.assert_allclose(pairs[0][1], [3.0, 6.0])


def test_idempotent_and_primitive_untouched():
    x, p = Var("x", F2), Var("p", F2)
    prim = Function((p,), op("exp", p), attrs=Attrs({"Primitive": 1}))
    mod = IRModule({"main": Function((x,), Call(prim, (x,)))})
    assert run(mod) is mod
    once = run(_count_loop())
    assert run(once) is once


def test_output_type_checks():
    from relay_ir.passes import type_infer
    mod = _count_loop()
    out = run(mod)
    typed = type_infer.InferType()(out)
    assert typed["main"].checked_type == FuncType((F2, I0), F2)
    assert isinstance(typed["main_lifted_0"].checked_type, FuncType)
    # lifting a typed module: the closure global's return type is the closure's type
    lifted_typed = run(type_infer.InferType()(mod))
    g = lifted_typed["main_lifted_0"]
    assert g.ret_type == FuncType((I0, F2), F2)
    assert [v.type_annotation for v in g.params] == [F2]
    again = type_infer.InferType()(lifted_typed)
    assert again["main"].checked_type == FuncType((F2, I0), F2)


@sizes(3_000, 100_000)
def test_100k_binding_program_with_a_closure(n):
    x, p, f = Var("x", F2), Var("p", F2), Var("f")
    bindings = [(f, Function((p,), op("add", p, x)))]
    prev = x
    for k in range(n):
        v = Var(f"v{k}", F2)
        bindings.append((v, Call(f, (prev,)) if k % 1000 == 0 else op("negative", prev)))
        prev = v
    mod = IRModule({"main": Function((x,), build_lets(bindings, prev))})
    with shallow_stack():
        out = LambdaLift()(mod)
    lets, _ = flatten_lets(out["main"].body)
    assert len(lets) == n + 1
    assert isinstance(lets[0].value, Call) and lets[0].value.op.name_hint == "main_lifted_0"
    assert out["main_lifted_0"].attrs["Closure"] == 1


def test_text_before_after():
    from relay_ir import parser
    before = parser.parse("""#[version = "0.0.5"]
def @main(%x: float32, %n: int32) {
  let %k = fn (%p: float32) { multiply(%p, 2f) };
  let %f = fn (%p2: float32) { add(%k(%p2), %x) };
  %f(%x)
}
""")
    expected = parser.parse("""#[version = "0.0.5"]
def @main_lifted_0(%p: float32) { multiply(%p, 2f) }
def @main_lifted_1(%k1, %x1: float32, Closure=1) {
  fn (%p2: float32) { add(%k1(%p2), %x1) }
}
def @main(%x: float32, %n: int32) {
  let %k = @main_lifted_0;
  let %f = @main_lifted_1(%k, %x);
  %f(%x)
}
""")
    out = run(before)
    assert_structural_equal(out, expected, map_free_vars=True)
    assert_same_results(before, out)


def test_spans_are_kept():
    from relay_ir import parser
    before = parser.parse("""#[version = "0.0.5"]
def @main(%x: float32) {
  let %f = fn (%p: float32) { add(%p, %x) };
  %f(%x)
}
""")
    out = run(before)
    g = out["main_lifted_0"]
    assert g.span is not None and g.span.line == 3
    assert g.body.body.span is not None and g.body.body.span.line == 3  # the add call
    lets, _ = flatten_lets(out["main"].body)
    assert lets[0].value.span is not None and lets[0].value.span.line == 3


def test_polymorphic_closure_gets_type_parameters():
    from relay_ir.passes import type_infer
    from relay_ir import parser
    mod = type_infer.InferType()(parser.parse("""#[version = "0.0.5"]
def @wrap[A](%x: A) -> A { let %g = fn (%y: A) -> A { %x }; %g(%x) }
def @main(%z: float32) -> float32 { @wrap(%z) }
"""))
    out = run(mod)
    g = out["wrap_lifted_0"]
    a = mod["wrap"].type_params[0]
    assert g.type_params == (a,) and g.params[0].type_annotation == a
    assert g.ret_type == FuncType((a,), a)
    typed = type_infer.InferType()(out)
    assert typed["main"].checked_type == FuncType((TensorType((), "float32"),),
                                                  TensorType((), "float32"))
    assert_same_results(mod, out, inputs=[np.array(2.5, "float32")])
