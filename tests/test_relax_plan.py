"""Tail groups and static memory planning of the Relax VM executor (``runtime.relax_plan``).

Mutual tail recursion (``@even``/``@odd``, three-way cycles, through closed inner functions) and
a closure calling itself run in constant stack and agree with the interpreter; kernel outputs of
straight-line regions share storage, values that escape (returned in tuples, captured, passed to
calls, carried across loop iterations) are never overwritten, and the caller's arguments are
never written.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime import relax_plan, relax_vm

pytestmark = pytest.mark.tvm

HEADER = '#[version = "0.0.5"]\n'


def parse(text: str) -> rly.IRModule:
    return rly.parse(HEADER + text)


EVEN_ODD = """
def @even(%n: int64, %acc: float32) -> float32 {
  if (%n == 0i64) { %acc } else { @odd(%n - 1i64, %acc + 1f) }
}
def @odd(%n: int64, %acc: float32) -> float32 {
  if (%n == 0i64) { %acc * -1f } else { @even(%n - 1i64, %acc) }
}
def @main(%n: int64) -> float32 { @even(%n, 0f) }
"""


def _even_odd(n: int) -> float:
    # n steps alternate even/odd; the accumulator grows on the even steps
    acc = (n + 1) // 2
    return float(acc if n % 2 == 0 else -acc)


def test_even_odd_are_one_tail_group_and_agree_with_the_interpreter() -> None:
    mod = parse(EVEN_ODD)
    exe = runtime.build(mod, executor="relax")
    groups = exe._backend.groups
    assert len(groups) == 2 and len({id(g) for g in groups.values()}) == 1
    for n in (0, 1, 2, 7, 10):
        got = exe(np.array(n, "int64"))
        want = runtime.evaluate(mod, np.array(n, "int64"))
        assert got.dtype == np.float32 and float(got) == float(want) == _even_odd(n)
    # the members stay callable as entries of their own (their entry stubs)
    got = exe(np.array(5, "int64"), np.float32(2), entry="odd")
    assert float(got) == float(runtime.evaluate(mod, np.array(5, "int64"), np.float32(2),
                                                entry="odd"))


def test_even_odd_100k_steps_in_constant_stack() -> None:
    exe = runtime.build(parse(EVEN_ODD), executor="relax")
    assert float(exe(np.array(100_000, "int64"))) == _even_odd(100_000)
    assert float(exe(np.array(100_001, "int64"))) == _even_odd(100_001)
    # NOTE: the depth limit counts non-tail calls only: none was made
    assert not exe._deep


@pytest.mark.stress
def test_even_odd_1m_steps() -> None:
    exe = runtime.build(parse(EVEN_ODD), executor="relax")
    assert float(exe(np.array(1_000_000, "int64"))) == _even_odd(1_000_000)
    assert not exe._deep


THREE_WAY = """
def @a(%n: int64, %x: Tensor[(3), float32]) -> Tensor[(3), float32] {
  if (%n <= 0i64) { %x } else { @b(%n - 1i64, %x + 1f) }
}
def @b(%n: int64, %x: Tensor[(3), float32]) -> Tensor[(3), float32] {
  if (%n <= 0i64) { %x * 2f } else { @c(%n - 1i64, %x * 0.5f, 3i64) }
}
def @c(%n: int64, %x: Tensor[(3), float32], %k: int64) -> Tensor[(3), float32] {
  if (%n <= 0i64) { %x - 1f } else { @a(%n - %k + 2i64, negative(%x)) }
}
def @main(%n: int64, %x: Tensor[(3), float32]) -> (Tensor[(3), float32], Tensor[(3), float32]) {
  let %f = @b;
  (add(@a(%n, %x), @c(2i64, %x, 1i64)), %f(%n, %x))
}
"""


def test_three_way_cycle_with_different_arities_non_tail_calls_and_member_as_value() -> None:
    mod = parse(THREE_WAY)
    exe = runtime.build(mod, executor="relax")
    b = exe._backend
    # NOTE: the optimizer may inline @c into @b; @a and @b always tail-call each other
    assert {"a", "b"} <= {b.cp.functions[f].name for f in b.groups}
    x = np.float32([0.5, -1.5, 2.0])
    for n in (0, 1, 2, 3, 4, 9, 30):
        got = exe(np.array(n, "int64"), x.copy())
        want = runtime.evaluate(mod, np.array(n, "int64"), x.copy())
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    got = exe(np.array(30_000, "int64"), x.copy())
    np.testing.assert_allclose(got[1], runtime.evaluate(mod, np.array(30_000, "int64"),
                                                        x.copy())[1], rtol=1e-4)
    assert not exe._deep


def test_tail_cycle_through_a_closed_inner_function() -> None:
    mod = parse("""
def @loop(%n: int64, %acc: int64) -> int64 {
  let %step = fn (%m: int64, %a: int64) -> int64 { @loop(%m - 1i64, %a + %m) };
  if (%n == 0i64) { %acc } else { %step(%n, %acc) }
}
def @main(%n: int64) -> int64 { @loop(%n, 0i64) }
""")
    # NOTE: opt_level=0 keeps %step (the optimizer would inline it: a self tail call)
    exe = runtime.build(mod, executor="relax", opt_level=0)
    assert len(exe._backend.groups) == 2
    assert int(exe(np.array(10, "int64"))) == int(runtime.evaluate(mod, np.array(10, "int64")))
    n = 200_000
    assert int(exe(np.array(n, "int64"))) == n * (n + 1) // 2
    assert not exe._deep


CLOSURE_LOOP = """
def @main(%n: int64, %x: float32) -> float32 {
  let %f = fn (%i: int64, %acc: float32) -> float32 {
    if (%i == 0i64) { %acc } else { %f(%i - 1i64, %acc + %x) }
  };
  %f(%n, 0f)
}
"""


def test_closure_calling_itself_agrees() -> None:
    mod = parse(CLOSURE_LOOP)
    exe = runtime.build(mod, executor="relax")
    for n in (0, 1, 5):
        args = (np.array(n, "int64"), np.float32(0.25))
        assert float(exe(*args)) == float(runtime.evaluate(mod, *args)) == 0.25 * n
    assert float(exe(np.array(100_000, "int64"), np.float32(0.5))) == 50_000.0


@pytest.mark.stress
def test_closure_calling_itself_1m_steps() -> None:
    exe = runtime.build(parse(CLOSURE_LOOP), executor="relax")
    assert float(exe(np.array(1_000_000, "int64"), np.float32(0.5))) == 500_000.0
    assert not exe._deep


# ----------------------------------------------------------------------------- memory planning
MLP = """
def @main(%x: Tensor[(8, 64), float32], %w1: Tensor[(64, 64), float32],
          %w2: Tensor[(64, 64), float32], %w3: Tensor[(64, 64), float32],
          %w4: Tensor[(64, 64), float32]) -> Tensor[(8, 64), float32] {
  %0 = nn.relu(nn.dense(%x, %w1));
  %1 = nn.relu(nn.dense(%0, %w2));
  %2 = nn.relu(nn.dense(%1, %w3));
  %3 = nn.relu(nn.dense(%2, %w4));
  nn.dense(%3, %w1)
}
"""


def _mlp_args(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype("float32") * 0.2
                 for s in ((8, 64), (64, 64), (64, 64), (64, 64), (64, 64)))


def _stats(exe: runtime.RelaxExecutable, name: str = "main") -> dict:
    b = exe._backend
    return b.plan_stats[b.cp.globals[name]]


def test_mlp_intermediates_share_storage_and_agree() -> None:
    mod = parse(MLP)
    exe = runtime.build(mod, executor="relax")
    args = _mlp_args()
    got = exe(*args)
    want = runtime.evaluate(mod, *args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    st = _stats(exe)
    # five kernels, each (8, 64) float32 = 2 KiB: two slots suffice (a kernel never writes
    # the slot its input occupies), against five allocations unplanned
    assert st["planned"] == 5
    assert st["unplanned_bytes"] == 5 * 2048
    assert st["arena"] == 2 * 2048
    # a second call with other inputs: no state left from the first
    args2 = _mlp_args(1)
    np.testing.assert_allclose(exe(*args2), runtime.evaluate(mod, *args2), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)   # the first result intact


ESCAPES = """
def @id(%a: Tensor[(8, 64), float32]) -> Tensor[(8, 64), float32] { %a }
def @main(%x: Tensor[(8, 64), float32], %w1: Tensor[(64, 64), float32],
          %w2: Tensor[(64, 64), float32], %w3: Tensor[(64, 64), float32],
          %w4: Tensor[(64, 64), float32]) {
  let %h0 = nn.relu(nn.dense(%x, %w1));
  let %h1 = nn.relu(nn.dense(%h0, %w2));
  let %g = fn () -> Tensor[(8, 64), float32] { %h1 };
  let %h2 = nn.relu(nn.dense(%h1, %w3));
  let %h3 = @id(%h2);
  let %h4 = nn.relu(nn.dense(%h3, %w4));
  let %h5 = nn.relu(nn.dense(%h4, %w1));
  let %h6 = nn.relu(nn.dense(%h5, %w2));
  let %h7 = nn.relu(nn.dense(%h6, %w3));
  let %h8 = nn.relu(nn.dense(%h7, %w4));
  (%h0, %g(), %h3, %h8, nn.dense(%h8, %w3))
}
"""


def test_escaping_values_keep_their_own_storage() -> None:
    mod = parse(ESCAPES)
    exe = runtime.build(mod, executor="relax")
    args = _mlp_args(2)
    got = exe(*args)
    want = runtime.evaluate(mod, *args)
    assert len(got) == 5
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    st = _stats(exe)
    # %h0 (returned in the tuple), %h1 (captured), %h2 (passed to @id, or returned when the
    # optimizer inlines it), %h8 and the last dense (in the tuple) escape: %h4 to %h7 are
    # planned, in two slots of 2 KiB
    assert st["planned"] == 4 and st["arena"] == 2 * 2048, st


DISPATCH = """
def @loop(%i: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%i > 0i64) { @loop(%i - 1i64, tanh(%x) * 0.9f + 0.1f) } else { %x }
}
def @main(%n: int64, %x: Tensor[(4), float32]) -> (Tensor[(4), float32], Tensor[(4), float32]) {
  let %a = @loop(%n, %x);
  let %b = @loop(%n, %a);
  (%a, %b)
}
"""


def test_loop_carried_values_are_double_buffered_and_inputs_untouched() -> None:
    mod = parse(DISPATCH)
    exe = runtime.build(mod, executor="relax")
    st = _stats(exe, "loop")
    assert st["double"] == 2, st      # the counter and the vector
    x = np.float32([0.1, -0.2, 0.3, 2.0])
    keep = x.copy()

    def ref(v: np.ndarray, n: int) -> np.ndarray:
        for _ in range(n):
            v = np.tanh(v) * np.float32(0.9) + np.float32(0.1)
        return v

    for n in (0, 1, 2, 3, 50):
        a, b = exe(np.array(n, "int64"), x)
        np.testing.assert_array_equal(x, keep)      # the caller's argument is never written
        np.testing.assert_allclose(a, ref(keep, n), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, ref(keep, 2 * n), rtol=1e-5, atol=1e-6)
        want = runtime.evaluate(mod, np.array(n, "int64"), x.copy())
        np.testing.assert_allclose(a, want[0], rtol=1e-5, atol=1e-6)
    # results of earlier calls stay intact
    a1, _ = exe(np.array(3, "int64"), x)
    exe(np.array(4, "int64"), x)
    np.testing.assert_allclose(a1, ref(keep, 3), rtol=1e-5, atol=1e-6)


def test_a_loop_carried_parameter_that_escapes_is_not_double_buffered() -> None:
    mod = parse("""
def @loop(%i: int64, %x: Tensor[(4), float32], %r: ref(Tensor[(4), float32])) -> () {
  ref_write(%r, %x);
  if (%i > 0i64) { @loop(%i - 1i64, %x * 2f, %r) } else { () }
}
def @main(%n: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  let %r = ref(%x);
  @loop(%n, %x, %r);
  ref_read(%r)
}
""")
    exe = runtime.build(mod, executor="relax")
    assert _stats(exe, "loop")["double"] == 1     # the counter only: %x escapes into %r
    x = np.float32([1, 2, 3, 4])
    for n in (0, 1, 5):
        np.testing.assert_allclose(exe(np.array(n, "int64"), x), x * 2 ** n)


def test_parallel_move_breaks_cycles() -> None:
    mod = parse("""
def @swap(%n: int64, %a: int64, %b: int64, %c: int64) -> (int64, int64, int64) {
  if (%n == 0i64) { (%a, %b, %c) } else { @swap(%n - 1i64, %b, %c, %a) }
}
def @main(%n: int64) -> (int64, int64, int64) { @swap(%n, 1i64, 2i64, 3i64) }
""")
    exe = runtime.build(mod, executor="relax")
    for n in range(7):
        got = tuple(int(v) for v in exe(np.array(n, "int64")))
        want = [1, 2, 3]
        for _ in range(n):
            want = want[1:] + want[:1]
        assert got == tuple(want), n


def test_expand_parallel_move() -> None:
    # a <- b, b <- a (a cycle) and c <- a: c must see the old a
    ops = [("jump", [(0, ("r", 1), 10), (1, ("r", 0), 11), (2, ("r", 0), 12)], 0, [])]
    out = relax_plan.expand(ops)
    regs = {0: "A", 1: "B", 2: "C", 10: None, 11: None, 12: None}
    for op in out[:-1]:
        assert op[1] == "vm.builtin.copy"
        regs[op[3]] = regs[op[2][0][1]]
    assert (regs[0], regs[1], regs[2]) == ("B", "A", "A")
    assert out[-1] == ("goto", 0)
    assert len(out) <= 5      # three moves, at most one through a temporary, the goto


def test_an_output_too_large_to_allocate_is_a_diagnostic() -> None:
    from relay_ir.errors import DiagnosticError
    mod = parse("""
def @main(%x: Tensor[(1), float32], %c: bool) -> Tensor[(1099511627776), float32] {
  if (%c) { broadcast_to(%x, shape=[1099511627776]) }
  else { broadcast_to(%x * 2f, shape=[1099511627776]) }
}""")
    exe = runtime.build(mod, executor="relax")
    with pytest.raises(DiagnosticError, match="cannot allocate"):
        exe(np.float32([1]), np.array(True))


def test_unused_pure_results_are_dropped() -> None:
    ops = [("call", "vm.builtin.make_tuple", [], 5),                   # unit of a ref_write
           ("call", "vm.builtin.tuple_getitem", [("r", 0), ("i", 0)], 6),
           ("call", "vm.builtin.copy", [("r", 6)], 7),                 # dead, so 6 dies too
           ("call", "ffi.ListSetItem", [("r", 1), ("i", 0), ("r", 0)], None),
           ("call", "vm.builtin.tuple_getitem", [("r", 0), ("i", 1)], 8),
           ("ret", 8)]
    kept = relax_plan._drop_dead(ops, 2)
    assert kept == [ops[3], ops[4], ops[5]]


# ----------------------------------------------------------------------------- closure tail calls
CHAIN = """
def @build(%n: int64, %r: ref(int64), %k: fn () -> ()) -> fn () -> () {
  if (%n == 0i64) { %k } else {
    @build(%n - 1i64, %r, fn () -> () { ref_write(%r, ref_read(%r) * 3i64 + %n); %k() })
  }
}
def @main(%n: int64) -> int64 {
  let %r = ref(0i64);
  let %f = @build(%n, %r, fn () -> () { () });
  %f();
  ref_read(%r)
}
"""


def _chain(n: int) -> int:
    r = 0
    for i in range(1, n + 1):        # the last closure built (n = 1) runs first
        r = (r * 3 + i) % (1 << 64)
    return r - (1 << 64) if r >= 1 << 63 else r


def test_a_chain_of_closures_tail_calling_the_previous_one_runs_in_constant_stack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shape of reverse-mode AD's backpropagator chain: every closure ends by calling
    the one built before it. The calls bounce to the caller's trampoline: no VM recursion
    (a depth limit of 50 non-tail calls is never reached). The program runs on the
    large-stack thread, where TVM's recursive release of the 100,000 closures fits."""
    monkeypatch.setattr(relax_vm, "DEEP_DEPTH", 50)
    mod = parse(CHAIN)
    exe = runtime.build(mod, executor="relax")
    for n in (0, 1, 2, 9):
        assert int(exe(np.array(n, "int64"))) == \
            int(runtime.evaluate(mod, np.array(n, "int64"))) == _chain(n)
    assert exe._all_deep
    assert int(exe(np.array(100_000, "int64"))) == _chain(100_000)


ARG_CHAIN = """
def @build(%n: int64, %k: fn (int64) -> int64) -> fn (int64) -> int64 {
  if (%n == 0i64) { %k } else { @build(%n - 1i64, fn (%v: int64) -> int64 { %k(%v + %n) }) }
}
def @main(%n: int64) -> fn (int64) -> int64 { @build(%n, fn (%v: int64) -> int64 { %v * 2i64 }) }
"""


def test_bounced_tail_calls_with_arguments_and_from_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relax_vm, "DEEP_DEPTH", 50)
    mod = parse(ARG_CHAIN)
    exe = runtime.build(mod, executor="relax")
    f = exe(np.array(5, "int64"))
    want = runtime.evaluate(mod, np.array(5, "int64"))
    assert int(f(np.array(1, "int64"))) == int(want(np.array(1, "int64"))) == 2 * (1 + 15)
    n = 100_000
    g = exe(np.array(n, "int64"))
    assert int(g(np.array(7, "int64"))) == 2 * (7 + n * (n + 1) // 2)
    del g     # NOTE: released on the large-stack thread (recursively, in TVM)


def test_closures_of_globals_and_constructors_keep_working() -> None:
    mod = parse("""
type Box { Box(int64) }
def @inc(%v: int64) -> int64 { %v + 1i64 }
def @apply(%f: fn (int64) -> int64, %v: int64) -> int64 { %f(%v) }
def @main(%v: int64) -> (int64, int64, Box, Box) {
  let %tc = fn (%g: fn (int64) -> Box, %w: int64) -> Box { %g(%w) };
  (@apply(@inc, %v), @apply(fn (%w: int64) -> int64 { @inc(%w) * 2i64 }, %v), Box(%v),
   %tc(Box, %v))
}
""")
    # NOTE: %tc calls a closure value in tail position: the closure convention is on
    exe = runtime.build(mod, executor="relax", opt_level=0)
    assert exe._backend.tramp
    got = exe(np.array(4, "int64"))
    assert int(got[0]) == 5 and int(got[1]) == 10
    for box in got[2:]:
        assert box.constructor.name_hint == "Box" and int(box.fields[0]) == 4


def test_programs_without_closure_tail_calls_keep_plain_results() -> None:
    assert not runtime.build(parse(CLOSURE_LOOP), executor="relax")._backend.tramp
    assert not runtime.build(parse(MLP), executor="relax")._backend.tramp
    assert runtime.build(parse(CHAIN), executor="relax")._backend.tramp


def test_group_member_with_a_self_loop_and_planned_values() -> None:
    mod = parse("""
def @a(%n: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%n <= 0i64) { %x } else {
    let %y = tanh(%x) * 0.5f;
    if (%n == 5i64) { @b(%n - 1i64, %y * 2f) } else { @a(%n - 1i64, %y + %x) }
  }
}
def @b(%n: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%n <= 0i64) { %x } else { @a(%n - 1i64, %x + 1f) }
}
def @main(%n: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] { @a(%n, %x) }
""")
    exe = runtime.build(mod, executor="relax")
    assert len(exe._backend.groups) == 2
    x = np.float32([0.5, -1.0, 2.0, 0.25])
    keep = x.copy()
    for n in (0, 1, 4, 5, 6, 9, 40):
        got = exe(np.array(n, "int64"), x)
        np.testing.assert_array_equal(x, keep)
        np.testing.assert_allclose(got, runtime.evaluate(mod, np.array(n, "int64"), keep.copy()),
                                   rtol=1e-5, atol=1e-6)
