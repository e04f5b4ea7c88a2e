"""Symbolic shapes, shape functions and host functions on the Relax VM executor.

``runtime.build(mod, executor="relax")`` compiles a fused group with ``?`` or named symbolic
dimensions to ONE kernel over ``tvm.tirx.Var`` dimensions; the bytecode computes the output
shapes (``match_shape`` / TIR shape functions / ``make_shape``) and checks them, so one
executable runs every shape its types allow without compiling again. Groups without a
kernel (value-dependent shapes, operators without a TVM compute) run through the host
function ``relay_ir.host.group``. Everything is compared with the interpreter.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.errors import DiagnosticError
from relay_ir.op import list_ops, override_op
from relay_ir.runtime import relax_shapes
from relay_ir.runtime.kernel_cache import KernelCache

pytestmark = pytest.mark.tvm

HEADER = '#[version = "0.0.5"]\n'


def parse(text: str) -> rly.IRModule:
    return rly.parse(HEADER + text)


def build(mod: rly.IRModule, **kw: object) -> object:
    return runtime.build(mod, executor="relax", **kw)


def modes(exe: object) -> list[str]:
    """How each fused group of a relax executable runs: static, symbolic or host."""
    return [k.dyn.mode if k.dyn is not None else "static"
            for k in exe._backend.kernels.values()]  # type: ignore[attr-defined]


def host_calls(exe: object) -> int:
    return sum(g.calls for g in exe._backend.__dict__.get("_host_groups", ()))  # type: ignore


def rand(shape: tuple, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def agree(exe: object, mod: rly.IRModule, *args: np.ndarray) -> object:
    want = runtime.evaluate(mod, *[np.copy(a) for a in args])
    got = exe(*args)  # type: ignore[operator]
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    else:
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return got


# ----------------------------------------------------------------------------- symbolic kernels
def test_named_symbolic_dims_one_kernel_serves_every_shape() -> None:
    mod = parse("""
def @main[n](%x: Tensor[(n, 4), float32], %w: Tensor[(5, 4), float32], %b: Tensor[(5), float32])
    -> Tensor[(n, 5), float32] {
  nn.relu(add(nn.dense(%x, %w), %b))
}""")
    cache = KernelCache(use_disk=False)
    exe = build(mod, cache=cache)
    assert modes(exe) == ["symbolic"]
    compiled = cache.stats.compiled
    # one kernel over n, and its serial twin for small n (chosen in the bytecode by the
    # iteration count: 20*n + 5*n < SERIAL_BELOW)
    info = next(iter(exe._backend.kernels.values())).dyn
    assert compiled == 2 and info.serial_symbol and info.small_symbol
    # the kernel's buffers have a TIR variable (named after n) as their first dimension
    kern = next(iter(exe._backend.kernels.values()))
    assert re.search(r"T\.Buffer\(\(n_\d+, 4\), \"float32\"\)", kern.dyn.prim_func.script())
    w, b = rand((5, 4), 1), rand((5,), 2)
    for n in (1, 3, 17, 64, 0, 20_000):
        got = agree(exe, mod, rand((n, 4), n), w, b)
        assert got.shape == (n, 5)
    # every shape ran on the one kernel: nothing compiled, nothing looked up, no host code
    assert cache.stats.compiled == compiled
    assert cache.stats.memory_hits == 0 and host_calls(exe) == 0


def test_question_mark_dims_agree_for_several_shapes() -> None:
    mod = parse("""
def @main(%x: Tensor[(?, ?), float32]) -> (Tensor[(?, ?), float32], Tensor[(?), float32]) {
  %0 = exp(negative(%x));
  (%0, sum(%0, axis=[1]))
}""")
    exe = build(mod)
    assert set(modes(exe)) == {"symbolic"}
    for shape in ((2, 3), (7, 1), (1, 33), (0, 4)):
        agree(exe, mod, rand(shape))


def test_output_dims_that_are_expressions_come_from_a_shape_function() -> None:
    mod = parse("""
def @main[n, m](%x: Tensor[(n, 3), float32], %y: Tensor[(m, 3), float32]) {
  %0 = concatenate((%x, %y, %x), axis=0);
  (tanh(%0), reshape(%0, newshape=[-1]))
}""")
    exe = build(mod)
    infos = [k.dyn for k in exe._backend.kernels.values() if k.dyn is not None]
    assert infos and all(i.mode == "symbolic" for i in infos)
    assert any(i.shape_symbol for i in infos)
    for n, m in ((1, 1), (2, 5), (4, 0)):
        got = agree(exe, mod, rand((n, 3), n), rand((m, 3), m + 10))
        assert got[0].shape == (2 * n + m, 3) and got[1].shape == (3 * (2 * n + m),)


def test_two_question_mark_operands_run_the_kernel_when_equal_and_broadcast_on_the_host(
        ) -> None:
    mod = parse("def @main(%x: Tensor[(?, 3), float32], %y: Tensor[(?, 3), float32]) {"
                " multiply(add(%x, %y), %x) }")
    exe = build(mod)
    assert modes(exe) == ["symbolic"]
    agree(exe, mod, rand((4, 3)), rand((4, 3), 1))
    agree(exe, mod, rand((9, 3)), rand((9, 3), 1))
    assert host_calls(exe) == 0
    # a '?' of 1 broadcasts (the interpreter's semantics): the guard sends it to the host
    agree(exe, mod, rand((4, 3)), rand((1, 3), 1))
    assert host_calls(exe) == 1
    with pytest.raises(DiagnosticError, match="broadcast"):
        exe(rand((4, 3)), rand((2, 3)))


def test_a_shape_mismatch_at_run_time_is_a_diagnostic_with_a_span() -> None:
    # @f's kernel requires equal n; main's '?' arguments do not guarantee it
    mod = parse("""
def @f[n](%x: Tensor[(n, 3), float32], %y: Tensor[(n, 3), float32]) -> Tensor[(n, 3), float32] {
  add(%x, %y)
}
def @main(%x: Tensor[(?, 3), float32], %y: Tensor[(?, 3), float32]) { @f(%x, %y) }""")
    exe = build(mod, opt_level=0)
    assert modes(exe) == ["symbolic"]
    agree(exe, mod, rand((2, 3)), rand((2, 3), 1))
    with pytest.raises(DiagnosticError, match=r"shape mismatch at run time .*argument 1 .*"
                                              r"dimension 0 is 4 where 2 is required") as info:
        exe(rand((2, 3)), rand((4, 3)))
    assert info.value.span is not None and info.value.span.line == 4
    # the executable still runs afterwards
    agree(exe, mod, rand((5, 3)), rand((5, 3), 1))


def test_symbolic_kernel_runs_inside_a_loop_with_a_growing_shape() -> None:
    # the shape changes on every iteration of a tail-recursive loop: one kernel serves all
    mod = parse("""
def @grow(%i: int64, %x: Tensor[(?), float32]) -> Tensor[(?), float32] {
  if (%i > 0i64) { @grow(%i - 1i64, concatenate((%x, exp(%x)), axis=0)) } else { %x }
}
def @main(%n: int64, %x: Tensor[(?), float32]) -> Tensor[(?), float32] { @grow(%n, %x) }""")
    exe = build(mod)
    assert "symbolic" in modes(exe)
    x = np.float32([0.1, -0.2])
    for n in (0, 1, 4):
        got = agree(exe, mod, np.array(n, "int64"), x)
        assert got.shape == (2 * 2 ** n,)


# ----------------------------------------------------------------------------- host functions
def test_dyn_reshape_runs_through_the_host_function() -> None:
    mod = parse("""
def @main(%x: Tensor[(6), float32], %s: Tensor[(2), int64]) {
  exp(dyn.reshape(%x, %s))
}""")
    exe = build(mod)
    assert "host" in modes(exe)
    x = np.arange(6, dtype="float32") / 6
    for s in ((2, 3), (3, 2), (1, 6), (-1, 2)):
        got = agree(exe, mod, x, np.array(s, "int64"))
        assert got.shape == np.empty(6).reshape(s).shape
    assert host_calls(exe) >= 4
    with pytest.raises(DiagnosticError, match="cannot reshape"):
        exe(x, np.array((4, 2), "int64"))


def test_operators_without_a_compute_run_through_the_host_function() -> None:
    no_compute = [o.name for o in list_ops() if o.compute is None]
    assert "dyn.zeros" in no_compute and "dyn.tile" in no_compute
    mod = parse("""
def @main(%x: Tensor[(2, 3), float32], %r: Tensor[(2), int64]) {
  add(dyn.tile(%x, %r), 1f)
}""")
    exe = build(mod)
    assert "host" in modes(exe)
    for r in ((1, 1), (2, 3)):
        got = agree(exe, mod, rand((2, 3)), np.array(r, "int64"))
        assert got.shape == (2 * r[0], 3 * r[1])
    # an operator whose compute is missing, in a static and in a symbolic group
    with override_op("tanh", compute=None):
        for src, shape in (("def @main(%x: Tensor[(2, 3), float32]) { tanh(%x) }", (2, 3)),
                           ("def @main(%x: Tensor[(?, 3), float32]) { tanh(%x) }", (5, 3))):
            m = parse(src)
            e = build(m)
            assert modes(e) == ["host"]
            agree(e, m, rand(shape))
            info = next(iter(e._backend.kernels.values())).dyn
            assert "no TVM compute" in info.reason
            assert host_calls(e) == 1


def test_the_host_function_is_a_registered_tvm_global() -> None:
    import tvm
    mod = parse("def @main(%x: Tensor[(4), float32], %s: Tensor[(1), int64]) {"
                " dyn.reshape(%x, %s) }")
    build(mod)
    assert tvm.get_global_func(relax_shapes.HOST_FUNC) is not None


@pytest.mark.parametrize("src, shapes", [
    ("def @main[n](%x: Tensor[(n, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {"
     " nn.relu(nn.conv2d(%x, %w, padding=[1, 1])) }", [[(2, 3, 8, 8), (4, 3, 3, 3)],
                                                       [(5, 3, 8, 8), (4, 3, 3, 3)]]),
    ("def @main[n](%x: Tensor[(n, 3, 8, 8), float32]) {"
     " nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]) }", [[(2, 3, 8, 8)], [(1, 3, 8, 8)]]),
    ("def @main(%x: Tensor[(?, ?), float32]) { nn.softmax(%x) }", [[(2, 10)], [(7, 3)]]),
    ("def @main[n](%x: Tensor[(n, 4, 5), float32], %y: Tensor[(n, 6, 5), float32]) {"
     " nn.batch_matmul(%x, %y) }", [[(2, 4, 5), (2, 6, 5)], [(3, 4, 5), (3, 6, 5)]]),
    ("def @main[n](%x: Tensor[(n, 8), float32], %g: Tensor[(8), float32],"
     " %b: Tensor[(8), float32]) { nn.layer_norm(%x, %g, %b) }",
     [[(2, 8), (8,), (8,)], [(5, 8), (8,), (8,)]]),
    ("def @main(%x: Tensor[(?, 4), float32]) { transpose(reshape(%x, newshape=[-1, 2])) }",
     [[(2, 4)], [(3, 4)]]),
], ids=["conv2d", "max_pool2d", "softmax", "batch_matmul", "layer_norm", "reshape"])
def test_common_operators_compile_to_symbolic_kernels(src: str, shapes: list) -> None:
    mod = parse(src)
    exe = build(mod)
    assert set(modes(exe)) == {"symbolic"}
    for case in shapes:
        agree(exe, mod, *[rand(s, i) for i, s in enumerate(case)])
    assert host_calls(exe) == 0
