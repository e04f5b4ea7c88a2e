"""runtime.build: compiled programs agree with the interpreter; kernels; errors; CLI."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly
from relay_ir import runtime
from relay_ir.cli import main
from relay_ir.runtime.executor import aligned_empty
from util_diff import (assert_same_results, parse_program, program_files,
                       random_inputs)
from util_scale import shallow_stack, sizes

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(text: str) -> rly.IRModule:
    return rly.parse(HDR + text)


def compiled(exe: object) -> object:
    return lambda m, *a: exe(*a)  # type: ignore[operator]


def test_fused_elementwise_program_matches_the_interpreter() -> None:
    mod = parse("""
def @main(%x: Tensor[(33, 20), float32], %b: Tensor[(20), float32]) {
  %0 = add(multiply(%x, 1.5f), %b);
  %1 = multiply(tanh(%0), sigmoid(%x));
  (subtract(%1, multiply(%x, 0.5f)), exp(%1))
}""")
    exe = runtime.build(mod)
    assert_same_results(mod, mod, run_b=compiled(exe), rtol=1e-5, atol=1e-6)
    # %1 has two consumers: materialized once, so three kernels
    assert exe.num_kernels() == 3 and exe.host_kernels() == []


def test_integer_and_bool_programs_are_exact() -> None:
    mod = parse("""
def @main(%a: Tensor[(5, 7), int32], %b: Tensor[(7), int32]) {
  %0 = add(%a, %b);
  %1 = multiply(%0, 3);
  (%1, greater(%1, %a), where(less(%a, 0), %a, %1))
}""")
    exe = runtime.build(mod)
    assert_same_results(mod, mod, run_b=compiled(exe))


@pytest.mark.parametrize("path", program_files(), ids=os.path.basename)
def test_every_example_builds_and_agrees(path: str) -> None:
    mod = parse_program(path)
    exe = runtime.build(mod)
    if not mod["main"].params:
        assert_same_results(mod, mod, inputs=(), run_b=compiled(exe), rtol=1e-4, atol=1e-5)
        return
    for seed in (0, 1):
        # NOTE: |x| keeps variances and the like valid (no NaN from sqrt of a negative)
        args = tuple(np.abs(a) if a.dtype.kind == "f" else a
                     for a in random_inputs(mod, seed=seed))
        assert_same_results(mod, mod, inputs=args, run_b=compiled(exe), rtol=1e-4, atol=1e-4)


MLP = """
def @main(%x: Tensor[(8, 20), float32], %w1: Tensor[(20, 32), float32],
          %b1: Tensor[(32), float32], %w2: Tensor[(32, 5), float32], %b2: Tensor[(5), float32]) {
  %0 = nn.matmul(%x, %w1);
  %1 = nn.relu(add(%0, %b1));
  %2 = add(nn.matmul(%1, %w2), %b2);
  nn.log_softmax(%2)
}"""


def test_mlp_forward_matches_numpy() -> None:
    mod = parse(MLP)
    exe = runtime.build(mod)
    rng = np.random.default_rng(1)
    x, w1, b1, w2, b2 = (rng.standard_normal(s).astype("float32")
                         for s in ((8, 20), (20, 32), (32,), (32, 5), (5,)))
    h = np.maximum(x @ w1 + b1, 0)
    z = h @ w2 + b2
    ref = z - z.max(1, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(1, keepdims=True))
    np.testing.assert_allclose(exe(x, w1, b1, w2, b2), ref, rtol=1e-4, atol=1e-5)
    assert exe.num_kernels() == 3     # matmul+add+relu | matmul+add | log_softmax


def test_outputs_are_fresh_arrays_every_call() -> None:
    mod = parse("""
def @main(%x: Tensor[(4, 16), float32]) {
  %0 = nn.softmax(%x);
  %1 = nn.softmax(%0);
  %2 = nn.softmax(%1);
  %3 = nn.softmax(%2);
  nn.softmax(%3)
}""")
    exe = runtime.build(mod)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")
    r1 = exe(x)
    keep = r1.copy()
    r2 = exe(x)
    assert r2 is not r1 and np.shares_memory(r1, r2) is False
    np.testing.assert_array_equal(r1, keep)        # the first result was not overwritten
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_allclose(r1, runtime.evaluate(mod, x), rtol=1e-5, atol=1e-7)
    r1[...] = 0                                    # writing into a result changes no later run
    np.testing.assert_array_equal(exe(x), keep)


def test_contiguous_inputs_are_zero_copy_others_copied_once() -> None:
    exe = runtime.build(parse("def @main(%x: Tensor[(3, 5), float32]) { negative(%x) }"))

    def passed(arr: np.ndarray) -> np.ndarray:
        return np.from_dlpack(exe._arg(arr))      # what the VM receives for ``arr``
    a = aligned_empty((3, 5), "float32")
    a[...] = 1
    assert np.shares_memory(passed(a), a)
    odd = np.ones(16, "float32")[1:16].reshape(3, 5)       # misaligned by 4 bytes: as it is
    assert odd.ctypes.data % 64 and np.shares_memory(passed(odd), odd)
    strided = np.ones((3, 10), "float32")[:, ::2]
    got = passed(strided)
    assert got.flags.c_contiguous and not np.shares_memory(got, strided)
    ro = aligned_empty((3, 5), "float32")
    ro.flags.writeable = False
    assert not np.shares_memory(passed(ro), ro)
    exe = runtime.build(parse("def @main(%x: Tensor[(3, 5), float32]) { negative(%x) }"))
    np.testing.assert_array_equal(exe(ro), -ro)
    np.testing.assert_array_equal(exe(odd), -odd)
    np.testing.assert_array_equal(exe(strided), -strided)
    with pytest.raises(rly.DiagnosticError, match="dtype float64"):   # no silent cast
        exe(np.ones((3, 5)))


def test_symbolic_and_any_dims_compile_once_at_build_time() -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    mod = parse("""
def @main[n](%x: Tensor[(n, 6), float32], %y: Tensor[(?, 6), float32]) {
  (exp(%x), sum(%y, axis=[1]))
}""")
    cache = KernelCache(use_disk=False)
    exe = runtime.build(mod, cache=cache)
    compiled = cache.stats.compiled
    assert compiled >= 2 and exe.num_kernels() == 2
    for n, m in ((2, 3), (5, 3), (2, 3)):
        x = np.random.default_rng(n).standard_normal((n, 6)).astype("float32")
        y = np.random.default_rng(m).standard_normal((m, 6)).astype("float32")
        ex, sy = exe(x, y)
        np.testing.assert_allclose(ex, np.exp(x), rtol=1e-6)
        np.testing.assert_allclose(sy, y.sum(1), rtol=1e-5, atol=1e-6)
    assert cache.stats.compiled == compiled         # new shapes compile nothing


def test_bad_arguments_are_diagnostics() -> None:
    exe = runtime.build(parse("def @main[n](%x: Tensor[(n, 6), float32], "
                              "%y: Tensor[(n), float32]) { %y }"))
    with pytest.raises(rly.DiagnosticError, match="expected 2 arguments"):
        exe(np.ones((2, 6), "float32"))
    with pytest.raises(rly.DiagnosticError, match="argument 2"):
        exe(np.ones((2, 6), "float32"), np.ones(3, "float32"))
    with pytest.raises(rly.DiagnosticError, match="dtype"):
        exe(np.ones((2, 6), "float32"), np.array(["a", "b"]))
    with pytest.raises(rly.DiagnosticError, match="no global function @nope"):
        exe(np.ones((2, 6), "float32"), np.ones(2, "float32"), entry="nope")


@pytest.mark.parametrize("src, args", [
    ("def @main(%x: Tensor[(3), float32], %c: bool) { if (%c) { exp(%x) } else { %x } }",
     [(np.float32([1, 2, 3]), True), (np.float32([1, 2, 3]), False)]),
    ("def @main(%x: Tensor[(3), float32]) { let %r = ref(%x); ref_read(%r) }",
     [(np.float32([1, -2, 3]),)]),
    ("def @g(%a: Tensor[(3), float32]) { exp(%a) }\n"
     "def @main(%x: Tensor[(3), float32]) { %0 = @g(%x); %1 = @g(%0); add(%0, %1) }",
     [(np.float32([0.5, -2, 1]),)]),
    ("def @main(%x: Tensor[(3), float32]) { let %f = fn (%y: Tensor[(3), float32]) { "
     "add(%y, %x) }; let %p = (%f, %f); %p.0(%p.1(%x)) }", [(np.float32([1, 2, 3]),)]),
])
def test_programs_with_control_flow_closures_refs_run_compiled(
        src: str, args: list) -> None:
    mod = parse(src)
    for level in (0, 2):
        exe = runtime.build(mod, opt_level=level)
        for a in args:
            assert_same_results(mod, mod, inputs=a, run_b=compiled(exe))


def test_opt_level_zero_runs_one_kernel_per_operator() -> None:
    mod = parse("def @main(%x: Tensor[(4), float32]) { exp(negative(abs(%x))) }")
    exe = runtime.build(mod, opt_level=0)
    x = np.arange(4, dtype="float32") - 2
    np.testing.assert_allclose(exe(x), np.exp(-np.abs(x)), rtol=1e-6)
    assert exe.num_kernels() == 3
    fused = runtime.build(mod)
    np.testing.assert_allclose(fused(x), np.exp(-np.abs(x)), rtol=1e-6)
    assert fused.num_kernels() == 1


def test_cli_run_with_target_llvm(tmp_path: object, capsys: pytest.CaptureFixture) -> None:
    f = os.path.join(str(tmp_path), "p.rly")
    with open(f, "w") as fh:
        fh.write(HDR + "def @main(%m: Tensor[(2, 2), float32]) { exp(multiply(%m, 0f)) }")
    assert main(["run", f, "[[1,2],[3,4]]", "--target", "llvm"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == main_interp_output(f, capsys)


def main_interp_output(f: str, capsys: pytest.CaptureFixture) -> str:
    assert main(["run", f, "[[1,2],[3,4]]"]) == 0
    return capsys.readouterr().out.strip()


def test_cli_run_target_runs_control_flow(tmp_path: object,
                                         capsys: pytest.CaptureFixture) -> None:
    f = os.path.join(str(tmp_path), "c.rly")
    with open(f, "w") as fh:
        fh.write(HDR + "def @main(%c: bool) { if (%c) { 1 } else { 2 } }")
    assert main(["run", f, "True", "--target", "llvm"]) == 0
    assert main(["run", f, "False", "--target", "llvm"]) == 0
    assert capsys.readouterr().out.split() == ["1", "2"]


def test_viz_writes_dot_with_fusion_clusters(tmp_path: object,
                                             capsys: pytest.CaptureFixture) -> None:
    out = os.path.join(str(tmp_path), "mlp.dot")
    assert main(["viz", os.path.join(ROOT, "examples", "mlp.rly"), "-o", out]) == 0
    dot = open(out).read()
    assert dot.startswith('digraph "main" {')
    assert dot.count("subgraph cluster_") == 3
    assert 'label="fused group 1 (%x2)";' in dot
    for op in ("nn.dense", "nn.bias_add", "nn.relu", "nn.softmax"):
        assert f'[label="{op}"]' in dot
    assert "in1 -> op6;" in dot and "op8 -> op9;" in dot        # x feeds dense; relu -> dense
    assert main(["viz", os.path.join(ROOT, "examples", "mlp.rly"), "--no-fuse"]) == 0
    assert "subgraph" not in capsys.readouterr().out
    import shutil
    svg = os.path.join(str(tmp_path), "mlp.svg")
    if shutil.which("dot") is None:
        assert main(["viz", os.path.join(ROOT, "examples", "mlp.rly"), "-o", svg]) == 1
        assert "Graphviz" in capsys.readouterr().err
    else:
        assert main(["viz", os.path.join(ROOT, "examples", "mlp.rly"), "-o", svg]) == 0
        text = open(svg).read()
        assert "<svg" in text and text.count("fused group") == 3 and "nn.softmax" in text


def test_fast_math_switch_changes_the_kernel_not_the_values() -> None:
    from relay_ir.runtime.kernel_cache import KernelCache
    mod = parse("def @main(%x: Tensor[(64), float32]) { tanh(exp(%x)) }")
    x = np.linspace(-3, 3, 64, dtype="float32")
    cache = KernelCache(use_disk=False)
    fast, exact = runtime.build(mod, fast_math=True, cache=cache), \
        runtime.build(mod, fast_math=False, cache=cache)
    np.testing.assert_allclose(fast(x), np.tanh(np.exp(x)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exact(x), np.tanh(np.exp(x)), rtol=1e-6, atol=1e-7)
    assert cache.stats.compiled == 2             # two different kernels, no key clash


@sizes(6_000, 100_000)
def test_long_dataflow_chain_builds_without_recursion(n: int) -> None:
    from relay_ir.builder import ScopeBuilder
    from relay_ir.expr import Function, Var
    from relay_ir.op._rules import make_call
    from relay_ir.ty import TensorType
    ty = TensorType((8,), "float32")
    x = Var("x", ty)
    sb = ScopeBuilder()
    v = x
    for i in range(n):
        v = sb.let_(make_call("negative" if i % 2 else "abs", v))
    xv = np.linspace(-1, 1, 8, dtype="float32")
    with shallow_stack():
        exe = runtime.build(rly.IRModule({"main": Function((x,), sb.build(v))}))
        np.testing.assert_array_equal(exe(xv), -np.abs(xv))
    assert exe.num_kernels() == -(-n // 256)
    # the groups are alpha-equivalent: lowered once per distinct group, compiled once each
    assert len(exe._backend.exe._lowered) <= 3


def test_cli_build_then_run_the_module_file(tmp_path: object,
                                            capsys: pytest.CaptureFixture) -> None:
    src = os.path.join(ROOT, "examples", "mlp.rly")
    out = os.path.join(str(tmp_path), "model.so")
    assert main(["build", src, "-o", out, "--target", "llvm"]) == 0
    assert "wrote " + out in capsys.readouterr().out
    mod = rly.parse(open(src).read())
    args = random_inputs(mod, seed=2)
    paths = []
    for i, a in enumerate(args):
        p = os.path.join(str(tmp_path), f"a{i}.npy")
        np.save(p, a)
        paths.append(p)
    assert main(["run", out, *paths]) == 0
    got = capsys.readouterr().out.strip()
    assert main(["run", src, *paths]) == 0
    want = capsys.readouterr().out.strip()
    assert got.split("(")[0] == want.split("(")[0] and got.startswith("Tensor[(")
    from relay_ir.runtime.values import format_value
    assert got == format_value(runtime.load_module(out)(*args))
    np.testing.assert_allclose(runtime.load_module(out)(*args), runtime.evaluate(mod, *args),
                               rtol=1e-4, atol=1e-5)


def test_cli_build_recursive_program_and_bad_module_files(tmp_path: object,
                                                          capsys: pytest.CaptureFixture) -> None:
    out = os.path.join(str(tmp_path), "fact.so")
    assert main(["build", os.path.join(ROOT, "examples", "factorial.rly"), "-o", out]) == 0
    capsys.readouterr()
    assert main(["run", out, "6"]) == 0
    assert capsys.readouterr().out.strip() == "720"
    bad = os.path.join(str(tmp_path), "bad.so")
    with open(bad, "wb") as f:
        f.write(open(out, "rb").read()[:-3])
    assert main(["run", bad, "6"]) == 1
    err = capsys.readouterr().err
    assert "truncated" in err and "Traceback" not in err
    assert main(["run", out, "6", "--target", "cuda"]) == 1
    assert "built for target llvm" in capsys.readouterr().err
    typo = os.path.join(str(tmp_path), "typo.rly")
    with open(typo, "w") as f:
        f.write(HDR + "def @main(%x: int32) { %x + 1f }")
    assert main(["build", typo, "-o", os.path.join(str(tmp_path), "t.so")]) == 1
    assert "^" in capsys.readouterr().err


def test_an_operator_without_compute_or_reference_is_a_diagnostic() -> None:
    from relay_ir.op import override_op
    with override_op("negative", impl=None, compute=None, host_only="test: nothing at all"):
        # NOTE: a static entry compiles at build, so the build itself says it
        with pytest.raises(rly.DiagnosticError,
                           match="`negative` has neither a TVM compute nor"):
            runtime.build(parse("def @main(%a: Tensor[(3), float32]) { negative(%a) }"))
