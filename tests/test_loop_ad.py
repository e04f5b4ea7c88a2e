"""The loop rule of reverse-mode AD (passes/loop_ad.py): a self-tail-recursive first-order
global gets a forward loop that pushes a tape and a backward loop that pops it.

Every program is checked against central finite differences, against the reference-based
gradient (``loop_rule=False``), optimized and raw, and compiled (Relax VM) against the
interpreter; the printed output is checked to hold the tape (and no backward closure inside
the loops)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Function, Match, RefCreate
from relay_ir.traversal import post_order
from relay_ir.well_formed import check as wf_check

from util_grad import (HEADER, assert_close_tree, finite_differences, objective,
                       strip_type_args)

F64 = np.float64


def _grad(mod: rly.IRModule, entry: str = "main", loop_rule: bool = True) -> rly.IRModule:
    g = passes.gradient(mod, entry, loop_rule=loop_rule)
    wf_check(g)
    text = rly.astext(g)
    back = rly.parse(text, "<grad>")
    rly.assert_structural_equal(strip_type_args(g), back)
    return g


def _taped(g: rly.IRModule, loop: str) -> None:
    """``@loop`` got the tape rule: its forward and backward loops exist, are first order
    (no closure, no reference) and the backward loop matches on the tape."""
    fwd, bwd = g[f"{loop}_fwd"], g[f"{loop}_bwd"]
    for f in (fwd, bwd):
        # no closure, and no reference but the cells holding tapes (no adjoint cell)
        assert not any(isinstance(n, Function) for n in post_order(f.body))
        for n in post_order(f.body):
            if isinstance(n, RefCreate):
                assert n.value.checked_type_.func.name_hint.endswith("_tape")
    assert any(isinstance(n, Match) for n in post_order(bwd.body))
    assert f"{loop}_tape" in g.type_definitions and f"{loop}_rec" in g.type_definitions


def check_loop(text: str, args: list, loops: tuple[str, ...] = ("loop",), entry: str = "main",
               rtol: float = 1e-6, atol: float = 1e-8, fd: bool = True,
               compiled: bool = True) -> tuple:
    mod = rly.parse(HEADER + text, "<test>")
    g = _grad(mod, entry)
    for name in loops:
        _taped(g, name)
    ref = _grad(mod, entry, loop_rule=False)
    assert not any(n.endswith("_tape") for n in ref.type_definitions)
    value, grads = runtime.evaluate(g, *args, entry=entry)
    rvalue, rgrads = runtime.evaluate(ref, *args, entry=entry)
    assert_close_tree(value, runtime.evaluate(mod, *args, entry=entry), 1e-12, 0)
    assert_close_tree(value, rvalue, 1e-12, 0)
    assert_close_tree(grads, rgrads, 1e-9, 1e-12)
    if fd:
        want = finite_differences(objective(mod, entry), args)
        assert_close_tree(grads, tuple(want), rtol, atol)
    opt = passes.optimize(g, entry=entry)
    wf_check(opt)
    ovalue, ograds = runtime.evaluate(opt, *args, entry=entry)
    assert_close_tree(ovalue, value, 1e-12, 0)
    assert_close_tree(ograds, grads, 1e-9, 1e-12)
    if compiled:
        cvalue, cgrads = runtime.build(opt, entry=entry)(*args)
        assert_close_tree(cvalue, value, 1e-12, 0)
        assert_close_tree(cgrads, grads, 1e-9, 1e-12)
    return value, grads


SCALAR_LOOP = """
def @loop(%x: float64, %i: float64, %acc: float64) -> float64 {
  if (%i >= 25f64) {
    %acc
  } else {
    @loop(%x, %i + 1f64, %acc + sin(%x * %i) * 0.5f64)
  }
}
def @main(%x: float64) -> float64 { @loop(%x, 0f64, 0f64) }
"""


def test_w6_shape_three_carried_values() -> None:
    value, (dx,) = check_loop(SCALAR_LOOP, [F64(0.7)])
    want = sum(np.cos(0.7 * i) * i * 0.5 for i in range(25))
    np.testing.assert_allclose(dx, want, rtol=1e-12)


def test_the_tape_holds_only_what_the_backward_step_reads() -> None:
    g = _grad(rly.parse(HEADER + SCALAR_LOOP))
    # the tape is a list of records, one record constructor per leaf. The step's record holds
    # %i only: %x is passed on unchanged by every step (a parameter of the backward loop),
    # x * i and sin's argument are recomputed (elementwise), %acc is not read backward
    tape = g.type_definitions["loop_tape"]
    assert sorted(len(c.inputs) for c in tape.constructors) == [0, 2]
    rec = g.type_definitions["loop_rec"]
    assert sorted(len(c.inputs) for c in rec.constructors) == [0, 1]
    step = [c for c in rec.constructors if len(c.inputs) == 1][0]
    assert step.inputs[0] == rly.TensorType((), "float64")
    text = rly.astext(g)
    bwd = text[text.index("def @loop_bwd"):]
    bwd = bwd[:bwd.index("\n}\n")]
    assert "cos(" in bwd and "fn (" not in bwd
    assert "ref(float" not in bwd and "ref_read(%cell)" in bwd   # only the tape's cell


def test_static_trip_count_optimizes_to_first_order_code() -> None:
    """A loop whose trip count is known at compile time: partial evaluation unrolls the forward
    loop, knows the whole tape, and unrolls the backward loop too (``TapeLoop``), so the
    optimized gradient is first-order code as with the reference rule: no tape, no cell, no
    closure, no other global."""
    mod = rly.parse(HEADER + SCALAR_LOOP.replace("25f64", "6f64"))
    g = passes.gradient(mod, "main")
    assert "loop_bwd" in list(g.functions)
    opt = passes.optimize(g)
    assert list(opt.functions) == ["main"]
    assert not any(isinstance(n, (Function, Match, RefCreate))
                   for n in post_order(opt["main"].body))
    value, (dx,) = runtime.evaluate(opt, F64(0.7))
    np.testing.assert_allclose(value, sum(np.sin(0.7 * i) * 0.5 for i in range(6)), rtol=1e-12)
    np.testing.assert_allclose(dx, sum(np.cos(0.7 * i) * i * 0.5 for i in range(6)), rtol=1e-12)
    # a dynamic trip count keeps both loops (the tape exists at run time)
    dyn = rly.parse(HEADER + SCALAR_LOOP.replace("25f64", "%x"))
    dopt = passes.optimize(passes.gradient(dyn, "main"))
    assert "loop_bwd" in list(dopt.functions)


def test_a_thousand_static_steps_compile_to_straight_line_kernels() -> None:
    """W6's shape at its size: the forward loop and the tape loop unroll whole (1000 steps are
    within partial evaluation's budget), and the compiled gradient matches the analytic one."""
    text = SCALAR_LOOP.replace("25f64", "1000f64").replace("0.5f64", "0.001f64")
    opt = passes.optimize(passes.gradient(rly.parse(HEADER + text), "main"))
    assert list(opt.functions) == ["main"]
    assert not any(isinstance(n, (Function, Match, RefCreate))
                   for n in post_order(opt["main"].body))
    v, (dx,) = runtime.evaluate(opt, F64(0.5))
    i = np.arange(1000, dtype=np.float64)
    np.testing.assert_allclose(v, np.sum(np.sin(0.5 * i) * 0.001), rtol=1e-10)
    np.testing.assert_allclose(dx, np.sum(np.cos(0.5 * i) * i * 0.001), rtol=1e-10)
    # compiled (a shorter loop: the scalar kernels are scheduled without inlining their blocks)
    short = passes.optimize(passes.gradient(rly.parse(HEADER + text.replace("1000f64", "60f64")),
                                            "main"))
    v, (dx,) = runtime.build(short)(F64(0.5))
    np.testing.assert_allclose(v, np.sum(np.sin(0.5 * i[:60]) * 0.001), rtol=1e-10)
    np.testing.assert_allclose(dx, np.sum(np.cos(0.5 * i[:60]) * i[:60] * 0.001), rtol=1e-10)


def test_the_unroll_budget_keeps_loops_as_loops() -> None:
    text = SCALAR_LOOP.replace("25f64", "1000f64").replace("0.5f64", "0.001f64")
    with rly.passes.PassContext(config={"partial-eval.unroll_budget": 0}):
        opt = passes.optimize(passes.gradient(rly.parse(HEADER + text), "main"))
        exe = runtime.build(opt)
    assert "loop_bwd" in list(opt.functions) and "loop_fwd" in list(opt.functions)
    v, (dx,) = exe(F64(0.5))
    i = np.arange(1000, dtype=np.float64)
    np.testing.assert_allclose(dx, np.sum(np.cos(0.5 * i) * i * 0.001), rtol=1e-10)


def test_if_in_the_body_and_several_carried_values() -> None:
    text = """
def @loop(%a: float64, %b: float64, %n: int32) -> (float64, float64) {
  if (%n <= 0) {
    (%a, %b * %a)
  } else {
    let %s = if (%a > %b) { %a * %b } else { sin(%a) + %b };
    let %t = if (%n > 3) { tanh(%s) } else { %s * 0.5f64 };
    @loop(%t, %b + 0.1f64 * %a, %n - 1)
  }
}
def @main(%a: float64, %b: float64) -> (float64, float64) { @loop(%a, %b, 7) }
"""
    check_loop(text, [F64(0.3), F64(0.9)])
    check_loop(text, [F64(1.3), F64(0.2)])


def test_trip_count_depends_on_the_input() -> None:
    # (capped at 1000 steps: test_vm_diff's sweep runs every test program on random inputs)
    text = """
def @loop(%x: float64, %acc: float64, %k: float64) -> float64 {
  if (logical_or(%acc > 3f64, %k > 1000f64)) {
    %acc * %k
  } else {
    @loop(%x, %acc + %x * %x, %k + 1f64)
  }
}
def @main(%x: float64) -> float64 { @loop(%x, 0.01f64, 1f64) }
"""
    g = passes.optimize(_grad(rly.parse(HEADER + text)))
    run = runtime.build(g)
    for x in (0.3, 0.9, 1.7):
        check_loop(text, [F64(x)], compiled=False)
        v, (dx,) = run(F64(x))
        steps, acc = 0, 0.01
        while acc <= 3:
            acc += x * x
            steps += 1
        np.testing.assert_allclose(v, acc * (1 + steps), rtol=1e-12)
        np.testing.assert_allclose(dx, 2 * x * steps * (1 + steps), rtol=1e-9)


def test_nested_loops() -> None:
    # the outer loop calls the inner one: both get a tape; the outer step runs the inner
    # forward loop and saves its tape in its record, the outer backward step runs the inner
    # backward loop on it
    text = """
def @inner(%x: float64, %j: int32, %acc: float64) -> float64 {
  if (%j <= 0) { %acc } else { @inner(%x, %j - 1, %acc * cos(%x) + %x) }
}
def @outer(%x: float64, %i: int32, %acc: float64) -> float64 {
  if (%i <= 0) {
    %acc
  } else {
    let %y = @inner(%x + %acc * 0.1f64, %i, 0.5f64);
    @outer(%x, %i - 1, %acc + %y)
  }
}
def @main(%x: float64) -> float64 { @outer(%x, 4, 0f64) }
"""
    check_loop(text, [F64(0.4)], loops=("inner", "outer"))
    g = _grad(rly.parse(HEADER + text))
    outer_rec = g.type_definitions["outer_rec"]
    assert any(any(isinstance(t, rly.RefType) and t.value.func
                   == g.type_definitions["inner_tape"].header for t in c.inputs)
               for c in outer_rec.constructors)


def test_loop_called_from_a_closure() -> None:
    text = """
def @loop(%x: float64, %n: int32, %acc: float64) -> float64 {
  if (%n <= 0) { %acc } else { @loop(%x, %n - 1, %acc * %x + 1f64) }
}
def @main(%x: float64, %y: float64) -> float64 {
  let %f = fn (%z: float64) -> float64 { @loop(%z, 5, %y) };
  %f(%x) + %f(%x * %y)
}
"""
    check_loop(text, [F64(0.8), F64(1.1)])


def test_tensor_carried_values() -> None:
    text = """
def @loop(%h: Tensor[(3), float64], %w: Tensor[(3, 3), float64], %n: int32)
    -> Tensor[(3), float64] {
  if (%n <= 0) {
    %h
  } else {
    let %z = nn.dense(expand_dims(%h, axis=0), %w);
    @loop(tanh(squeeze(%z, axis=[0])) + %h * 0.5f64, %w, %n - 1)
  }
}
def @main(%h: Tensor[(3), float64], %w: Tensor[(3, 3), float64]) -> float64 {
  sum(@loop(%h, %w, 6))
}
"""
    rng = np.random.default_rng(0)
    check_loop(text, [rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (3, 3))])


def test_loop_as_the_entry_with_an_int_parameter() -> None:
    text = """
def @main(%x: float64, %n: int32, %acc: float64) -> float64 {
  if (%n <= 0) { %acc } else { @main(%x, %n - 1, exp(%acc * 0.1f64) * %x) }
}
"""
    value, grads = check_loop(text, [F64(0.6), np.int32(5), F64(0.2)], loops=("main",))
    assert grads[1].dtype == np.int32 and grads[1] == 0


def _long(steps: int) -> tuple[rly.IRModule, float, float]:
    text = SCALAR_LOOP.replace("25f64", f"{steps}f64").replace("0.5f64", "0.001f64")
    g = passes.optimize(_grad(rly.parse(HEADER + text)))
    i = np.arange(steps, dtype=np.float64)
    return g, np.sum(np.sin(0.3 * i) * 0.001), np.sum(np.cos(0.3 * i) * i * 0.001)


def test_300000_steps_compiled_constant_stack() -> None:
    # 300,000 records: a tape freed from its head in one go would recurse in the runtime's
    # destructors past the 8 MiB C stack (it did from ~130,000 on); the backward loop frees
    # it record by record
    g, value, grad = _long(300_000)
    limit = sys.getrecursionlimit()
    v, (dx,) = runtime.build(g)(F64(0.3))
    assert sys.getrecursionlimit() == limit
    np.testing.assert_allclose(v, value, rtol=1e-9)
    np.testing.assert_allclose(dx, grad, rtol=1e-9)


def test_100000_steps_interpreted() -> None:
    g, value, grad = _long(100_000)
    limit = sys.getrecursionlimit()
    v, (dx,) = runtime.evaluate(g, F64(0.3))
    assert sys.getrecursionlimit() == limit
    np.testing.assert_allclose(v, value, rtol=1e-9)
    np.testing.assert_allclose(dx, grad, rtol=1e-9)


@pytest.mark.stress
def test_a_million_steps() -> None:
    text = SCALAR_LOOP.replace("25f64", "1000000f64").replace("0.5f64", "0.001f64")
    g = passes.optimize(_grad(rly.parse(HEADER + text)))
    v, (dx,) = runtime.build(g)(F64(0.3))
    i = np.arange(1_000_000, dtype=np.float64)
    np.testing.assert_allclose(dx, np.sum(np.cos(0.3 * i) * i * 0.001), rtol=1e-8)


def test_gradient_of_gradient() -> None:
    mod = rly.parse(HEADER + SCALAR_LOOP)
    g = _grad(mod)
    # the first gradient as a function of x (f'(x)), differentiated again
    src = rly.astext(g).replace("def @main(", "def @first(")
    src += "\ndef @main(%x: float64) -> float64 { let %r = @first(%x); (%r.1).0 }\n"
    mod2 = rly.parse(src)
    g2 = _grad(mod2)
    d1, (d2,) = runtime.evaluate(g2, F64(0.7))
    i = np.arange(25)
    np.testing.assert_allclose(d1, np.sum(np.cos(0.7 * i) * i * 0.5), rtol=1e-12)
    np.testing.assert_allclose(d2, np.sum(-np.sin(0.7 * i) * i * i * 0.5), rtol=1e-9)
    r1 = runtime.evaluate(_grad(mod2, loop_rule=False), F64(0.7))
    assert_close_tree((d1, (d2,)), r1, 1e-12, 1e-15)
    c = runtime.build(passes.optimize(g2))(F64(0.7))
    assert_close_tree(c, (d1, (d2,)), 1e-12, 1e-15)


@pytest.mark.parametrize("x", [np.inf, -np.inf, np.nan, -0.0, 0.0])
def test_ieee_values_unchanged(x: float) -> None:
    text = """
def @loop(%x: float32, %i: float32, %acc: float32) -> float32 {
  if (%i >= 5f) {
    %acc
  } else {
    @loop(%x, %i + 1f, %acc + %x * %i - %acc * 0.5f)
  }
}
def @main(%x: float32, %y: float32) -> float32 { @loop(%x, 0f, %y) }
"""
    mod = rly.parse(HEADER + text)
    args = [np.float32(x), np.float32(-0.0)]
    new, ref = _grad(mod), _grad(mod, loop_rule=False)
    got = [runtime.evaluate(new, *args), runtime.evaluate(passes.optimize(new), *args),
           runtime.build(passes.optimize(new))(*args)]
    want = runtime.evaluate(ref, *args)
    flat_want = [np.asarray(a) for a in (want[0], *want[1])]
    for g in got:
        flat = [np.asarray(a) for a in (g[0], *g[1])]
        for a, b in zip(flat, flat_want):
            np.testing.assert_array_equal(a, b)          # nan positions and values
            assert np.signbit(a) == np.signbit(b) or np.isnan(b)


def test_the_switch() -> None:
    mod = rly.parse(HEADER + SCALAR_LOOP)
    off = passes.gradient(mod, loop_rule=False)
    assert "loop_fwd" not in off.functions
    on = passes.gradient(mod)
    assert "loop_fwd" in on.functions and "loop_bwd" in on.functions


def test_env_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = rly.parse(HEADER + SCALAR_LOOP)
    monkeypatch.setenv("RELAY_IR_LOOP_AD", "0")
    assert "loop_fwd" not in passes.gradient(mod).functions
    assert "loop_fwd" in passes.gradient(mod, loop_rule=True).functions
    monkeypatch.setenv("RELAY_IR_LOOP_AD", "1")
    assert "loop_fwd" in passes.gradient(mod).functions


def test_env_switch_refuses_a_value_that_is_not_on_or_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = rly.parse(HEADER + SCALAR_LOOP)
    monkeypatch.setenv("RELAY_IR_LOOP_AD", "of")          # a typo: not silently "on"
    with pytest.raises(rly.DiagnosticError, match="RELAY_IR_LOOP_AD='of'"):
        passes.gradient(mod)
    for off in ("0", "OFF", " no "):
        monkeypatch.setenv("RELAY_IR_LOOP_AD", off)
        assert "loop_fwd" not in passes.gradient(mod).functions
    monkeypatch.setenv("RELAY_IR_LOOP_AD", "")
    assert "loop_fwd" in passes.gradient(mod).functions


def test_not_a_loop_keeps_the_reference_rule() -> None:
    # non-tail self call, and a loop holding a reference: no tape, same gradients
    text = """
def @fact(%x: float64, %n: int32) -> float64 {
  if (%n <= 0) { 1f64 } else { %x * @fact(%x, %n - 1) }
}
def @main(%x: float64) -> float64 { @fact(%x, 4) }
"""
    mod = rly.parse(HEADER + text)
    g = passes.gradient(mod)
    assert "fact_fwd" not in g.functions
    _, (dx,) = runtime.evaluate(g, F64(1.5))
    np.testing.assert_allclose(dx, 4 * 1.5 ** 3, rtol=1e-12)


def test_forward_over_reverse_through_the_tape() -> None:
    # passes.jvp of the tape program: the tangent of f'(x) along 1 is f''(x)
    mod = rly.parse(HEADER + SCALAR_LOOP)
    g = _grad(mod)
    j = passes.jvp(g)
    wf_check(j)
    got = runtime.evaluate(j, F64(0.7), F64(1.0))
    (value, (d1,)), (_, (d2,)) = got
    i = np.arange(25)
    np.testing.assert_allclose(d1, np.sum(np.cos(0.7 * i) * i * 0.5), rtol=1e-12)
    np.testing.assert_allclose(d2, np.sum(-np.sin(0.7 * i) * i * i * 0.5), rtol=1e-9)
    opt = runtime.build(passes.optimize(j))(F64(0.7), F64(1.0))
    assert_close_tree(opt, got, 1e-9, 1e-12)


def _first_big(x, n):  # noqa: ANN001, ANN202 -- translated by the Python front end
    s = 0.0
    for i in range(n):
        if x[i] < 0.0:
            continue
        s = s + x[i] * x[i]
        if s > 10.0:
            break
    return s


def _while_loop(x, y):  # noqa: ANN001, ANN202
    k = 0.0
    while x < 5.0:
        x = x * y + 0.5
        k = k + x
    return k


def test_python_front_end_loops_get_the_tape() -> None:
    # the front end writes each loop as a local self-recursive closure capturing %x and %n:
    # it is lifted to a global whose captured values are invariant parameters
    from relay_ir.frontend import from_python
    mod = from_python(_first_big, np.ones(8, "float32"), 8)
    g = passes.gradient(mod)
    loops = [n for n in g.functions if n.endswith("_bwd")]
    assert len(loops) == 1
    _taped(g, loops[0][:-len("_bwd")])
    # the `continue` step's backward is the identity: no record for it
    td = g.type_definitions[loops[0][:-len("_bwd")] + "_rec"]
    assert len(td.constructors) == 3, td.constructors  # the step, break, loop exit
    ref = passes.gradient(mod, loop_rule=False)
    for x in (np.linspace(-1, 2, 8), np.linspace(2, -1, 8), np.full(8, 3.0)):
        x = x.astype("float32")
        got = runtime.evaluate(g, x, np.int32(8))
        assert_close_tree(got, runtime.evaluate(ref, x, np.int32(8)), 1e-6, 1e-7)
        assert_close_tree(runtime.build(passes.optimize(g))(x, np.int32(8)), got, 1e-6, 1e-7)
        want = np.where(x >= 0, 2 * x, 0)
        s = np.cumsum(np.where(x >= 0, x * x, 0))
        stop = int(np.argmax(s > 10)) if np.any(s > 10) else 7
        want[stop + 1:] = 0
        np.testing.assert_allclose(got[1][0], want, rtol=1e-6)

    mod = from_python(_while_loop, 1.0, 1.5)
    g = passes.gradient(mod)
    assert any(n.endswith("_bwd") for n in g.functions)
    for x, y in ((1.0, 1.5), (0.2, 2.0)):
        args = [np.float32(x), np.float32(y)]
        got = runtime.evaluate(g, *args)
        assert_close_tree(got, runtime.evaluate(passes.gradient(mod, loop_rule=False), *args),
                          1e-6, 1e-7)
        f64 = lambda a, b: _while_loop(float(a), float(b))  # noqa: E731
        eps = 1e-4
        fd = [(f64(x + eps, y) - f64(x - eps, y)) / (2 * eps),
              (f64(x, y + eps) - f64(x, y - eps)) / (2 * eps)]
        np.testing.assert_allclose([float(v) for v in got[1]], fd, rtol=1e-3)


def test_deeply_nested_body_is_given_up_without_recursion() -> None:
    # 600 nested `if`s in a loop body (deeper than a walk recursing per `if` could go under
    # the default recursion limit): more than MAX_PATHS paths, so the reference rule
    # (the analysis stops at the limit instead of walking the nesting)
    body = "%x"
    for k in range(600):
        body = f"if (%i > {k}) {{ {body} }} else {{ %x * 2f }}"
    mod = rly.parse(HEADER + "def @loop(%x: float32, %i: int32) -> float32 { if (%i <= 0) "
                    "{ %x } else { @loop(" + body + ", %i - 1) } }\n"
                    "def @main(%x: float32) -> float32 { @loop(%x, 3) }")
    limit = sys.getrecursionlimit()
    g = passes.gradient(mod)
    assert sys.getrecursionlimit() == limit
    assert "loop_fwd" not in g.functions
    v, (dx,) = runtime.evaluate(g, np.float32(1.5))
    assert float(v) == 12.0 and float(dx) == 8.0


def test_cli_no_loop_rule(tmp_path, capsys) -> None:  # noqa: ANN001
    from relay_ir.cli import main
    src = tmp_path / "l.rly"
    src.write_text(HEADER + """def @loop(%x: float32, %n: int32, %acc: float32) -> float32 {
  if (%n <= 0) { %acc } else { @loop(%x, %n - 1, %acc * %x) }
}
def @main(%x: float32) -> float32 { @loop(%x, 3, 1f) }
""")
    assert main(["grad", str(src)]) == 0
    taped = capsys.readouterr().out
    assert "def @loop_fwd(" in taped and "def @loop_bwd(" in taped
    assert main(["grad", str(src), "--no-loop-rule"]) == 0
    plain = capsys.readouterr().out
    assert "loop_fwd" not in plain and "loop_tape" not in plain
    for text in (taped, plain):
        g = tmp_path / "g.rly"
        g.write_text(text)
        assert main(["run", str(g), "2"]) == 0
        assert capsys.readouterr().out.strip() == "(8f, (12f,))"


EDGE = {
    # the carried values change places every step
    "swap": ("""
def @loop(%x: float64, %y: float64, %n: int32) -> float64 {
  if (%n <= 0) { %x * %y * %y } else { @loop(%y, %x + %y, %n - 1) }
}
def @main(%x: float64, %y: float64, %n: int32) -> float64 { @loop(%x, %y, %n) }""",
             [F64(0.3), F64(0.7), np.int32(5)]),
    # a symbolic dimension (zeros of the adjoints from zeros_like)
    "symbolic": ("""
def @loop(%x: Tensor[(?), float64], %n: int32) -> Tensor[(?), float64] {
  if (%n <= 0) { %x } else { @loop(tanh(%x) * 1.1f64, %n - 1) }
}
def @main(%x: Tensor[(?), float64], %n: int32) -> float64 { sum(@loop(%x, %n)) }""",
                 [np.array([0.1, -0.5, 2.0]), np.int32(3)]),
    # a bool carried value and a non-tail `if` on it
    "bool": ("""
def @loop(%x: float64, %b: bool, %n: int32) -> float64 {
  if (%n <= 0) { %x } else {
    let %y = if (%b) { %x * 2f64 } else { %x * %x };
    @loop(%y, logical_not(%b), %n - 1)
  }
}
def @main(%x: float64, %n: int32) -> float64 { @loop(%x, True, %n) }""",
             [F64(0.9), np.int32(5)]),
    # a tuple result with an int leaf; the same value passed twice
    "tuple": ("""
def @loop(%x: float64, %y: float64, %n: int32) -> (float64, int32) {
  if (%n <= 0) { (%x - %y * 3f64, %n) } else {
    let %z = exp(sin(%x) * 0.5f64 + %y * 0.1f64);
    @loop(%z, %z, %n - 1)
  }
}
def @main(%x: float64, %n: int32) -> float64 { let %r = @loop(%x, %x, %n); %r.0 }""",
              [F64(0.3), np.int32(4)]),
}


@pytest.mark.parametrize("name", sorted(EDGE))
def test_dynamic_trip_count_edge_cases(name: str) -> None:
    text, args = EDGE[name]
    check_loop(text, args)
    # the trip count is a parameter: the optimized program keeps both loops
    opt = passes.optimize(_grad(rly.parse(HEADER + text)))
    assert "loop_bwd" in opt.functions and "loop_fwd" in opt.functions
