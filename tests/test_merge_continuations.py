"""Tests for MergeContinuations (passes/merge_continuations.py): one backpropagator closure per
straight-line region; gradients of loops stay right, compiled and interpreted.

The gradients here are built with ``loop_rule=False``: with the loop rule (passes/loop_ad.py)
a self-tail-recursive global gets a first-order tape and no backward closure to merge."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Function
from relay_ir.passes import MergeContinuations, PassContext
from relay_ir.passes.instrument import WellFormedCheck
from relay_ir.traversal import post_order

from util_diff import assert_values_close
from util_grad import HEADER, check_grad

rng = np.random.default_rng(7)
F = "float64"
V3 = "Tensor[(3), float64]"


def run(text: str) -> rly.IRModule:
    mod = rly.parse(HEADER + text)
    with PassContext(instruments=[WellFormedCheck()]):
        return MergeContinuations()(mod)


def closures(mod: rly.IRModule) -> int:
    return sum(1 for fn in mod.functions.values() for n in post_order(fn.body)
               if type(n) is Function)


# ----------------------------------------------------------------------------- the rule
CHAIN = """def @main(%x: float32, %bp: ref(fn () -> ()), %c: ref(float32)) -> () {
  let %k = ref_read(%bp);
  let %f = fn () -> () {
    let %a = ref_read(%c);
    let %s = add(%a, %x);
    let %u = ref_write(%c, %s);
    %k()
  };
  let %w = ref_write(%bp, %f);
  let %y = multiply(%x, 2f);
  %BETWEEN%
  let %k1 = ref_read(%bp);
  let %f1 = fn () -> () {
    let %b = ref_read(%c);
    let %m = multiply(%b, %y);
    let %u1 = ref_write(%c, %m);
    %k1()
  };
  ref_write(%bp, %f1)
}"""

MERGED = """def @main(%x: float32, %bp: ref(fn () -> ()), %c: ref(float32)) -> () {
  let %k = ref_read(%bp);
  let %y = multiply(%x, 2f);
  let %f1 = fn () -> () {
    let %b = ref_read(%c);
    let %m = multiply(%b, %y);
    let %u1 = ref_write(%c, %m);
    let %s = add(%m, %x);
    let %u = ref_write(%c, %s);
    %k()
  };
  ref_write(%bp, %f1)
}"""


def test_two_closures_become_one_and_the_read_is_forwarded() -> None:
    # the second closure calls the first in its tail: inlined there, in the same order; the
    # read of %c after the write of %m in the merged body is %m
    out = run(CHAIN.replace("%BETWEEN%", ""))
    rly.assert_structural_equal(out, rly.parse(HEADER + MERGED), map_free_vars=True)


@pytest.mark.parametrize("between", [
    "let %g = %f1x(); ",                        # a closure call may read %bp
    "let %z = ref_read(%bp); ",                 # a second reader sees %f
    "let %v = ref_write(%bp, %f); ",            # %f used twice
    "let %t = if (less(%x, 0f)) { 1f } else { 2f }; ",
    "let %h = @other(%x); ",                    # a global may read %bp
], ids=["closure-call", "second-read", "second-use", "if", "global-call"])
def test_chain_broken_by_an_effect_is_left_alone(between: str) -> None:
    text = CHAIN.replace("%BETWEEN%", between.replace("%f1x", "%f"))
    text = text.replace("def @main", "def @other(%q: float32) -> float32 { %q }\n\ndef @main")
    mod = rly.parse(HEADER + text)
    with PassContext(instruments=[WellFormedCheck()]):
        out = MergeContinuations()(mod)
    assert out["main"] is mod["main"]


def test_other_reference_traffic_in_between_is_fine() -> None:
    # reads and writes of a float32 cell cannot touch the closure reference
    out = run(CHAIN.replace("%BETWEEN%", "let %r = ref_read(%c); let %q = ref_write(%c, %r);"))
    assert closures(out) == 1


def test_values_of_the_rule_are_unchanged() -> None:
    text = HEADER + CHAIN.replace("%BETWEEN%", "") + """

def @drive(%x: float32) -> float32 {
  let %c = ref(3f);
  let %bp = ref(fn () -> () { () });
  let %_ = @main(%x, %bp, %c);
  let %g = ref_read(%bp);
  let %_2 = %g();
  let %_3 = %g();
  ref_read(%c)
}"""
    mod = rly.parse(text)
    out = MergeContinuations()(mod)
    assert closures(out) < closures(mod)
    x = np.float32(1.5)
    # NOTE: the closure runs twice, so the state kept in %c between calls is part of the value
    want = runtime.evaluate(mod, x, entry="drive")
    assert float(want) == float(runtime.evaluate(out, x, entry="drive"))
    assert float(want) == float(((3 * 3.0 + 1.5) * 3.0 + 1.5))


# ----------------------------------------------------------------------------- gradients
# NOTE: the trip counts are arguments, so partial evaluation cannot unroll the loops away
SCALAR_LOOP = f"""def @loop(%x: {F}, %i: int32, %n: int32, %acc: {F}) -> {F} {{
  if (%i >= %n) {{ %acc }} else {{
    @loop(%x, %i + 1, %n, %acc + sin(%x * cast(%i, dtype="float64")) * 0.1f64)
  }}
}}
def @main(%x: {F}, %n: int32) -> {F} {{ @loop(%x, 0, %n, 0f64) }}"""

TWO_CARRIED = f"""def @loop(%h: {V3}, %c: {V3}, %w: {V3}, %i: int32) -> {V3} {{
  if (%i <= 0) {{ add(%h, %c) }} else {{
    let %h2 = tanh(add(multiply(%h, %w), %c));
    let %c2 = multiply(sin(%c), %h);
    @loop(%h2, %c2, %w, %i - 1)
  }}
}}
def @main(%h: {V3}, %c: {V3}, %w: {V3}, %n: int32) -> {F} {{ sum(@loop(%h, %c, %w, %n)) }}"""

NESTED = f"""def @inner(%x: {F}, %j: int32, %acc: {F}) -> {F} {{
  if (%j <= 0) {{ %acc }} else {{ @inner(%x, %j - 1, %acc * cos(%x) + %x) }}
}}
def @outer(%x: {F}, %i: int32, %m: int32, %acc: {F}) -> {F} {{
  if (%i <= 0) {{ %acc }} else {{ @outer(%x, %i - 1, %m, @inner(%acc * 0.5f64, %m, %x)) }}
}}
def @main(%x: {F}, %n: int32, %m: int32) -> {F} {{ @outer(%x, %n, %m, 0.2f64) }}"""

IN_CLOSURE = f"""def @main(%x: {F}, %a: {F}, %n: int32) -> {F} {{
  let %g = fn (%y: {F}) -> {F} {{
    let %lp = fn (%v: {F}, %i: int32) -> {F} {{
      if (%i >= %n) {{ %v }} else {{ %lp(sin(%v * %a) + %v, %i + 1) }}
    }};
    %lp(%y, 0)
  }};
  %g(%x) + %g(%x * 2f64)
}}"""


def i32(v: int) -> np.ndarray:
    return np.array(v, "int32")


CASES = {"scalar_loop": (SCALAR_LOOP, lambda: [np.float64(0.7), i32(12)]),
         "two_carried": (TWO_CARRIED,
                         lambda: [*(rng.uniform(-1, 1, 3) for _ in range(3)), i32(6)]),
         "nested_loops": (NESTED, lambda: [np.float64(0.3), i32(4), i32(3)]),
         "loop_in_closure": (IN_CLOSURE, lambda: [np.float64(0.4), np.float64(1.3), i32(5)])}


@pytest.mark.parametrize("name", list(CASES))
def test_loop_gradients_merged_and_compiled(name: str) -> None:
    text, make = CASES[name]
    args = make()
    value, grads = check_grad(text, args)   # FD, and optimize(g) == g at 1e-12 in the interpreter
    g = passes.gradient(rly.parse(HEADER + text), entry="main", loop_rule=False)
    merged = passes.optimize(g)
    unmerged = passes.optimize(g, disabled_pass=("merge-continuations",))
    assert closures(merged) < closures(unmerged)
    assert_values_close(runtime.evaluate(merged, *args), (value, grads), rtol=1e-12, atol=0)
    got = runtime.build(merged)(*args)
    assert_values_close(got, (value, grads), rtol=1e-9, atol=1e-12)


def test_w6_gradient_has_one_closure_per_iteration() -> None:
    import util_grad
    g = passes.optimize(passes.gradient(rly.parse(util_grad.wl.W6_SRC), entry="main",
                                        loop_rule=False))
    body = g["loop_grad"]
    assert sum(1 for n in post_order(body.body) if type(n) is Function) == 1
    x = np.array(np.float32(0.5))
    got = runtime.build(g)(x)
    want = runtime.evaluate(g, x)
    assert_values_close(got, want, rtol=1e-5, atol=1e-6)
    # d/dx sum_i sin(x*i)*0.001 = sum_i i*cos(x*i)*0.001
    i = np.arange(1000, dtype=np.float64)
    assert abs(float(got[1][0]) - float(np.sum(i * np.cos(0.5 * i)) * 0.001)) < 1e-4


# ----------------------------------------------------------------------------- outer products
def test_outer_product_with_accumulation_is_one_elementwise_kernel() -> None:
    # the weight gradient of a one-row product, accumulated: one kernel, no reduction; the
    # values are the sum's (0 + x*w: a -0.0 product gives +0.0), inf and nan included
    text = HEADER + """def @main(%old: Tensor[(8, 40), float32], %x: Tensor[(1, 8), float32],
          %dy: Tensor[(1, 40), float32]) -> Tensor[(8, 40), float32] {
  add(%old, nn.matmul(%x, %dy, transpose_a=True))
}"""
    mod = rly.parse(text)
    x = rng.standard_normal((1, 8)).astype("float32")
    dy = rng.standard_normal((1, 40)).astype("float32")
    x[0, :3] = [-1.0, np.inf, np.nan]
    dy[0, :2] = [0.0, -2.0]
    old = np.full((8, 40), -0.0, "float32")
    exe = runtime.build(mod)
    assert exe.num_kernels() == 1
    got = exe(old, x, dy)
    with np.errstate(invalid="ignore"):
        prod = np.float32(0) + x.T * dy
    want = old + prod
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got[0, 0]) and float(x[0, 0] * dy[0, 0]) == 0.0
    plain = runtime.build(rly.parse(text.replace("add(%old, nn.matmul(%x, %dy, transpose_a=True))",
                                                 "nn.matmul(%x, %dy, transpose_a=True)")))
    np.testing.assert_array_equal(plain(old, x, dy), prod)
    assert not np.signbit(plain(old, x, dy)[0, 0])


# ----------------------------------------------------------------------------- Once=1 closures
LOCAL = """def @main(%x: float32, %bp: ref(fn () -> ())) -> float32 {
  let %z = zeros(shape=[], symbolic=True);
  let %c = ref(%z);
  let %k = ref_read(%bp);
  let %f = fn (ATTRS) -> () {
    let %a = ref_read(%c);
    let %s = add(%a, %x);
    let %u = ref_write(%c, %s);
    let %b = ref_read(%c);
    let %m = multiply(%b, %x);
    let %u1 = ref_write(%c, %m);
    %k()
  };
  let %w = ref_write(%bp, %f);
  OUTSIDE
}"""


def refs_created(mod: rly.IRModule) -> int:
    from relay_ir.expr import RefCreate
    return sum(1 for fn in mod.functions.values() for n in post_order(fn.body)
               if type(n) is RefCreate)


def test_a_cell_used_only_by_a_once_closure_moves_into_it_and_becomes_lets() -> None:
    out = run(LOCAL.replace("ATTRS", "Once=1").replace("OUTSIDE", "%x"))
    assert refs_created(out) == 0
    text = rly.astext(out)
    assert "add(%z, %x)" in text and "ref_read(%c)" not in text


@pytest.mark.parametrize("attrs,outside", [("", "%x"), ("Once=1", "ref_read(%c)")],
                         ids=["not-once", "used-outside"])
def test_other_cells_stay(attrs: str, outside: str) -> None:
    mod = rly.parse(HEADER + LOCAL.replace("ATTRS", attrs).replace("OUTSIDE", outside))
    out = MergeContinuations()(mod)
    assert refs_created(out) == 1


def test_gradients_mark_their_backward_steps_once() -> None:
    g = passes.gradient(rly.parse(HEADER + CASES["scalar_loop"][0]), entry="main",
                         loop_rule=False)
    backs = [n for fn in g.functions.values() for n in post_order(fn.body)
             if type(n) is Function and not n.params and n.attrs.get("Once", 0) == 1]
    assert len(backs) >= 4
    assert rly.parse(rly.astext(g)) is not None   # the attribute prints and parses
    opt = passes.optimize(g)
    unmerged = passes.optimize(g, disabled_pass=("merge-continuations",))
    assert refs_created(opt) < refs_created(unmerged)


# ----------------------------------------------------------------------------- scale
def _long_gradient(n: int, blocked: bool) -> rly.IRModule:
    # n sin steps on a loop-carried scalar; ``blocked``: a call of a global between each
    # step, so no two backward steps merge (every cell and closure stays)
    from util_scale import shallow_stack  # noqa: F401  (imported for the caller)
    call = "let %q{i} = @id(%v{i});" if blocked else ""
    body = "\n".join(f"  let %v{i + 1} = sin(multiply(%v{i}, 1.01f64)); " + call.format(i=i)
                     for i in range(n))
    text = f"""def @id(%a: {F}) -> {F} {{ %a }}
def @main(%v0: {F}) -> {F} {{
{body}
  %v{n}
}}"""
    return passes.gradient(rly.parse(HEADER + text), entry="main", loop_rule=False)


@pytest.mark.parametrize("blocked", [False, True], ids=["merged", "blocked"])
def test_merge_is_linear_and_iterative_on_long_gradients(blocked: bool) -> None:
    import time
    from util_scale import shallow_stack
    times = []
    for n in (400, 1600):
        g = _long_gradient(n, blocked)
        with shallow_stack():
            t = time.perf_counter()
            out = MergeContinuations()(g)
            times.append(time.perf_counter() - t)
        assert (closures(out) < n / 4) != blocked
    assert times[1] < 4 * times[0] * 2.5   # NOTE: 4x the size; quadratic would be 16x
    x = np.float64(0.3)
    want = runtime.evaluate(g, x)
    assert_values_close(runtime.evaluate(out, x), want, rtol=1e-12, atol=0)
