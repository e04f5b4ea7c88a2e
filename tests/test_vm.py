"""The compiled executor (runtime.build: the Relax VM): whole programs, kernels, dynamic shapes,
deep recursion."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tvm  # noqa: F401  (imported before any shallow_stack block)

import relay_ir as rly
from relay_ir import runtime
from relay_ir.errors import InterpreterError
from relay_ir.runtime.kernel_cache import KernelCache
from util_diff import TREE_SUM, assert_same_results, assert_values_close
from util_scale import shallow_stack, sizes

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'


def parse(text: str, prelude: bool = False) -> rly.IRModule:
    return rly.parse(HDR + text, prelude=prelude)


def compiled(exe: object) -> object:
    return lambda m, *a: exe(*a)  # type: ignore[operator]


TREE = TREE_SUM + """
def @main(%x: Tensor[(4), float32], %n: int32) -> (Tree, Tensor[(4), float32]) {
  let %c = ref(%x);
  let %loop = fn (%i: int32, %acc: Tree) -> Tree {
    if (%i == 0) { %acc } else {
      ref_write(%c, multiply(ref_read(%c), 0.5f));
      %loop(%i - 1, Node(Leaf(@sum(%acc)), Leaf(ref_read(%c))))
    }
  };
  let %t = %loop(%n, Leaf(%x));
  (%t, @sum(%t))
}
"""


def test_recursive_adt_program_with_refs_closures_and_nested_patterns() -> None:
    mod = parse(TREE)
    exe = runtime.build(mod)
    x = np.float32([0.5, -1, 2, 3])
    for n in (0, 1, 4):
        got = exe(x, n)
        want = runtime.evaluate(mod, x, n)
        assert_values_close(got, want, rtol=1e-5, atol=1e-6)
        assert got[0].constructor.name == ("Leaf" if n == 0 else "Node")
    # every group is a TVM kernel, the loop counter arithmetic (scalar groups) included
    labels = {k.label for k in exe._backend.kernels.values()}
    assert {"tanh", "add", "multiply", "equal", "subtract"} <= labels
    assert exe.host_kernels() == [] and exe.num_kernels() == len(exe._backend.kernels)


def test_kernels_of_tensor_groups_are_compiled_once_at_build() -> None:
    cache = KernelCache(use_disk=False)
    mod = parse(TREE)
    exe = runtime.build(mod, cache=cache)
    n = cache.stats.compiled
    assert n >= 3
    exe(np.ones(4, "float32"), 3)
    exe(np.ones(4, "float32"), 5)
    assert cache.stats.compiled == n          # static groups: nothing compiled at run time
    runtime.build(mod, cache=cache)(np.ones(4, "float32"), 2)
    assert cache.stats.compiled == n          # a second build hits the cache


@sizes(20_000, 1_000_000)
def test_million_step_tail_recursion_at_the_default_recursion_limit(n: int) -> None:
    mod = parse("""
def @loop(%i: int32, %acc: float32) -> float32 {
  if (%i == 0) { %acc } else { @loop(%i - 1, %acc + 1f) }
}
def @main(%n: int32) -> float32 { @loop(%n, 0f) }""")
    exe = runtime.build(mod)  # NOTE: partial evaluation unrolls up to 40 calls recursively
    with shallow_stack():
        r = exe(n)
    assert r.dtype == np.float32 and float(r) == float(n)


@sizes(5_000, 100_000, "depth")
def test_deep_non_tail_recursion_and_the_frame_limit(depth: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_ir.runtime import relax_vm
    mod = parse("""
def @count(%n: int32) -> int32 { if (%n == 0) { 0 } else { 1 + @count(%n - 1) } }
def @main(%n: int32) -> int32 { @count(%n) }""")
    exe = runtime.build(mod)
    with shallow_stack():
        assert int(exe(depth)) == depth
    monkeypatch.setattr(relax_vm, "DEEP_DEPTH", 1_000)
    with pytest.raises(rly.DiagnosticError, match="deeper than 1,000 non-tail calls"):
        runtime.build(mod)(5_000)


def test_tensor_loop_with_kernels_matches_the_interpreter() -> None:
    mod = parse("""
def @main(%x: Tensor[(3, 8), float32], %w: Tensor[(8, 8), float32], %n: int32) {
  let %loop = fn (%i: int32, %h: Tensor[(3, 8), float32]) -> Tensor[(3, 8), float32] {
    if (%i >= %n) { %h } else { %loop(%i + 1, tanh(add(nn.matmul(%h, %w), %x))) }
  };
  %loop(0, %x)
}""")
    exe = runtime.build(mod)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype("float32")
    w = (rng.standard_normal((8, 8)) / 4).astype("float32")
    for n in (0, 1, 7):
        assert_same_results(mod, mod, inputs=(x, w, n), run_b=compiled(exe), rtol=1e-5,
                            atol=1e-5)


def test_dynamic_shapes_in_control_flow_compile_once_at_build() -> None:
    mod = parse("""
def @main(%xs: List[Tensor[(?), float32]]) -> List[Tensor[(?), float32]] {
  @map(fn (%t: Tensor[(?), float32]) { multiply(exp(%t), 2f) }, %xs)
}""", prelude=True)
    cache = KernelCache(use_disk=False)
    exe = runtime.build(mod, cache=cache)
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    rng = np.random.default_rng(1)

    def lst(arrays: list) -> object:
        v = runtime.ADTValue(nil, ())
        for a in reversed(arrays):
            v = runtime.ADTValue(cons, (a, v))
        return v

    xs = [rng.standard_normal(n).astype("float32") for n in (3, 5, 3, 1)]
    before = cache.stats.compiled
    assert before >= 1                                 # one kernel over a symbolic length
    got = exe(lst(xs))
    assert_values_close(got, runtime.evaluate(mod, lst(xs)), rtol=1e-6, atol=1e-6)
    assert_values_close(exe(lst(xs[::-1])), runtime.evaluate(mod, lst(xs[::-1])), rtol=1e-6,
                        atol=1e-6)
    assert cache.stats.compiled == before              # lengths 3, 5 and 1: nothing new


def test_failed_match_in_compiled_code_is_a_diagnostic() -> None:
    mod = parse("""
type T { A(int32), B }
def @main(%b: bool) -> int32 {
  let %v = if (%b) { A(1) } else { B };
  match? (%v) { A(%x) => %x + 1 }
}""")
    exe = runtime.build(mod)
    assert int(exe(True)) == 2
    with pytest.raises(rly.DiagnosticError, match="match failed") as info:
        exe(False)
    # the span of the failing match (line 6: parse adds the header), with a caret under it
    assert info.value.span is not None and info.value.span.line == 6
    assert "^" in str(info.value) and "match? (%v)" in str(info.value)


def test_failed_match_names_the_site_among_several() -> None:
    mod = parse("""
type T { A(int32), B, C }
def @f(%v: T) -> int32 {
  match? (%v) { A(%x) => %x, B => 0 }
}
def @main(%v: T) -> int32 {
  let %r = @f(%v);
  match? (%v) { A(%y) => %r + %y, C => %r }
}""")
    exe = runtime.build(mod)
    with pytest.raises(rly.DiagnosticError, match="match failed") as info:
        exe(runtime.ADTValue(mod.get_constructor("B"), ()))         # @f passes, @main's match fails
    assert info.value.span.line == 9
    with pytest.raises(rly.DiagnosticError, match="match failed") as info:
        exe(runtime.ADTValue(mod.get_constructor("C"), ()))         # @f's match fails
    assert info.value.span.line == 5


def test_first_class_functions_and_tuples_returned() -> None:
    mod = parse("""
def @compose(%f: fn (float32) -> float32, %g: fn (float32) -> float32) -> fn (float32) -> float32 {
  fn (%x: float32) { %f(%g(%x)) }
}
def @main(%x: Tensor[(2, 3), float32]) -> (Tensor[(2, 3), float32], float32) {
  let %h = @compose(fn (%a: float32) { %a * 3f }, fn (%b: float32) { %b + 1f });
  (nn.relu(%x), %h(2f))
}""")
    exe = runtime.build(mod, opt_level=0)
    x = np.float32([[1, -2, 3], [-4, 5, -6]])
    assert_same_results(mod, mod, inputs=(x,), run_b=compiled(exe))
    r = exe(x)
    assert isinstance(r, tuple) and float(r[1]) == 9.0


def test_argument_errors_name_the_parameter() -> None:
    exe = runtime.build(parse(TREE))
    with pytest.raises(InterpreterError, match="argument 2"):
        exe(np.ones(4, "float32"), 2.5)
    with pytest.raises(InterpreterError, match="expected 2 arguments"):
        exe(np.ones(4, "float32"))


def test_long_let_spine_in_control_flow_at_the_default_recursion_limit() -> None:
    from relay_ir.builder import ScopeBuilder
    from relay_ir.expr import Constant, Function, If, Var
    from relay_ir.op._rules import make_call
    from relay_ir.ty import TensorType
    x = Var("x", TensorType((4,), "float32"))
    c = Var("c", TensorType((), "bool"))
    sb = ScopeBuilder()
    v = x
    n = int(os.environ.get("RELAY_IR_VM_SPINE", "3000"))
    one = Constant(np.float32(1))
    for i in range(n):
        v = sb.let_(make_call("add", v, one) if i % 2 else make_call("negative", v))
    mod = rly.IRModule({"main": Function((x, c), If(c, sb.build(v), x))})
    xv = np.float32([0, 1, 2, 3])
    want = xv.copy()
    for i in range(n):
        want = want + 1 if i % 2 else -want
    with shallow_stack():
        exe = runtime.build(mod)
        np.testing.assert_allclose(exe(xv, True), want, rtol=1e-6)
        np.testing.assert_array_equal(exe(xv, False), xv)


@pytest.mark.stress  # NOTE: the default run's version: test_long_let_spine_in_control_flow_...
def test_100000_binding_program_compiled_and_run_at_the_default_recursion_limit() -> None:
    from relay_ir.builder import ScopeBuilder
    from relay_ir.expr import Constant, Function, If, Var
    from relay_ir.op._rules import make_call
    from relay_ir.ty import TensorType
    x = Var("x", TensorType((), "float32"))
    c = Var("c", TensorType((), "bool"))
    sb = ScopeBuilder()
    v = x
    one = Constant(np.float32(1))
    for _ in range(100_000):
        v = sb.let_(make_call("add", v, one))
    limit = sys.getrecursionlimit()
    exe = runtime.build(rly.IRModule({"main": Function((x, c), If(c, sb.build(v), x))}))
    assert float(exe(np.float32(0), True)) == 100_000.0
    assert float(exe(np.float32(0), False)) == 0.0
    assert sys.getrecursionlimit() == limit


def test_kernel_steps_take_strided_read_only_and_unaligned_arrays() -> None:
    # the VM hands numpy arrays to kernels as they are; the ones TVM refuses are copied first
    exe = runtime.build(parse("""
def @main(%c: bool, %x: Tensor[(4, 8), float32], %y: Tensor[(4, 8), float32]) {
  if (%c) { add(%x, %y) } else { multiply(%x, %y) }
}"""))
    strided = np.arange(64, dtype=np.float32).reshape(4, 16)[:, ::2]
    read_only = np.arange(32, dtype=np.float32).reshape(4, 8)
    read_only.setflags(write=False)
    unaligned = np.zeros(4 * 8 * 4 + 4, np.uint8)[4:].view(np.float32).reshape(4, 8)
    unaligned[:] = 3
    for a, b in ((strided, read_only), (unaligned, read_only), (strided, unaligned)):
        for c in (True, False):
            np.testing.assert_array_equal(exe(np.array(c), a, b), a + b if c else a * b)
