"""target="cuda" on the Relax VM executor (``runtime.relax_cuda``).

Without a GPU: whole programs (ADT, recursion, dense, softmax; a training step of a gradient
program) build to CUDA kernels, calling them is a clear "no CUDA GPU", export writes a module
file holding the CUDA source, and loading it is a ``ModuleFileError``. The cuda bytecode's own
piece that differs from the CPU's (the depth counter in static words of a host function) runs
here on the CPU (``relax_vm.STATIC_DEPTH``) against the interpreter. With a GPU
(``@pytest.mark.gpu``, skipped without one): runs agree with the interpreter.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.errors import DiagnosticError
from relay_ir.runtime import relax_vm
from relay_ir.runtime.values import RefValue
from relay_ir.runtime.vm import ModuleFileError
from util_diff import assert_values_close, copy_value

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'

# the program of test_vm_cuda: an ADT, recursion, dense and softmax
from test_vm_cuda import PROGRAM, run_counting_host_copies  # noqa: E402

LOSS = HDR + """
def @main(%x: Tensor[(8, 16), float32], %y: Tensor[(8, 4), float32],
          %w: Tensor[(4, 16), float32], %b: Tensor[(4), float32]) -> float32 {
  let %logp = nn.log_softmax(add(nn.dense(%x, %w), %b));
  negative(mean(sum(multiply(%logp, %y), axis=[1])))
}
"""

SUM = HDR + """
def @sum(%n: int64) -> int64 {
  if (%n > 0i64) { %n + @sum(%n - 1i64) } else { 0i64 }
}
def @main(%n: int64) -> int64 { @sum(%n) }
"""

PARTIAL = HDR + """
type T { A(Tensor[(2), float32]), B(Tensor[(2), float32]) }
def @main(%t: T) -> Tensor[(2), float32] { match? (%t) { A(%x) => exp(%x) } }
"""

REFS = HDR + """
def @main(%r: ref(Tensor[(3), float32]), %x: Tensor[(3), float32]) -> Tensor[(3), float32] {
  ref_write(%r, add(ref_read(%r), %x));
  multiply(ref_read(%r), 2f)
}
"""


def _args() -> tuple:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(16).astype("float32"),
            rng.standard_normal((16, 16)).astype("float32"), np.int32(4))


def _step() -> rly.IRModule:
    from relay_ir.demo import sgd_step_module
    return sgd_step_module(rly.parse(LOSS), "main", n_data=2, lr=0.1)


def _step_args() -> tuple:
    rng = np.random.default_rng(1)
    y = np.eye(4, dtype="float32")[rng.integers(0, 4, 8)]
    return (rng.standard_normal((8, 16)).astype("float32"), y,
            rng.standard_normal((4, 16)).astype("float32"),
            rng.standard_normal(4).astype("float32"))


def _gpu() -> bool:
    from relay_ir.runtime.relax_cuda import has_gpu
    return has_gpu()


@pytest.fixture
def static_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build CPU executables with the cuda depth counter (static words of rly_depth)."""
    monkeypatch.setattr(relax_vm, "STATIC_DEPTH", True)


# ----------------------------------------------------------------------------- without a GPU
def test_whole_program_builds_to_cuda_kernels_and_a_call_needs_a_gpu() -> None:
    exe = runtime.build(rly.parse(PROGRAM), target="cuda", executor="relax")
    assert isinstance(exe, relax_vm.RelaxExecutable)
    srcs = exe.kernel_sources()
    assert len(srcs) == exe.num_compiled() >= 5
    assert all("__global__" in s for s in srcs)
    assert any("T_dense" in s for s in srcs) and any("T_softmax" in s for s in srcs)
    if not _gpu():
        with pytest.raises(DiagnosticError, match="no CUDA GPU"):
            exe(*_args())


def test_a_training_step_of_a_gradient_program_builds_for_cuda() -> None:
    exe = runtime.build(_step(), target="cuda", executor="relax", entry="train_step")
    srcs = exe.kernel_sources()
    assert len(srcs) >= 3 and all("__global__" in s for s in srcs)
    if not _gpu():
        with pytest.raises(DiagnosticError, match="no CUDA GPU"):
            exe(*_step_args())


def test_export_writes_the_cuda_source_and_loading_needs_a_gpu(tmp_path: object) -> None:
    mod = rly.parse(PROGRAM)
    exe = runtime.build(mod, target="cuda", executor="relax")
    path = os.path.join(str(tmp_path), "m.so")
    exe.export_library(path)
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) > 1000 and data.startswith(b"\x7fELF")
    assert b"__global__" in data                 # the CUDA module (its source) is inside
    from relay_ir.runtime.relax_export import read_metadata
    meta = read_metadata(path)
    assert meta["target"]["config"]["kind"] == "cuda" and meta["static_depth"] is True
    if _gpu():
        m = runtime.load_module(path)
        assert_values_close(m(*_args()), runtime.evaluate(mod, *_args()), rtol=1e-4,
                            atol=1e-5)
    else:
        with pytest.raises(ModuleFileError, match="no CUDA GPU"):
            runtime.load_module(path)


def test_groups_without_a_static_shape_are_refused_on_cuda_by_name() -> None:
    with pytest.raises(relax_vm.RelaxUnsupportedError,
                       match="tanh.*symbolic dimensions on target cuda"):
        runtime.build(rly.parse(HDR + "def @main[n](%x: Tensor[(n, 2), float32]) { tanh(%x) }"),
                      target="cuda", executor="relax")


# ----------------------------------------------------------------------------- the static depth
# counter (what the cuda bytecode counts with), run on the CPU
def test_static_depth_bytecode_agrees_with_the_interpreter(static_depth: None) -> None:
    for mod, args, entry in ((rly.parse(PROGRAM), _args(), "main"),
                             (_step(), _step_args(), "train_step")):
        exe = runtime.build(mod, executor="relax", entry=entry)
        assert exe._static_depth and "rly_depth" in exe._backend.executable.as_text()
        want = runtime.evaluate(mod, *copy_value(args), entry=entry)
        assert_values_close(exe(*copy_value(args), entry=entry), want, rtol=1e-4, atol=1e-5)


def test_static_depth_limits_recursion_and_starts_afresh(static_depth: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    exe = runtime.build(rly.parse(SUM), executor="relax")
    n = relax_vm.MAIN_DEPTH * 3           # past the calling thread's limit: the deep thread
    assert int(exe(np.array(n, "int64"))) == n * (n + 1) // 2
    monkeypatch.setattr(relax_vm, "DEEP_DEPTH", 2_000)
    exe = runtime.build(rly.parse(SUM), executor="relax")
    with pytest.raises(DiagnosticError, match="deeper than 2,000 non-tail calls"):
        exe(np.array(3_000, "int64"))
    assert int(exe(np.array(1_500, "int64"))) == 1_125_750
    assert int(exe(np.array(10, "int64"))) == 55


def test_static_depth_match_failure_and_references(static_depth: None) -> None:
    from relay_ir.runtime.values import ADTValue
    mod = rly.parse(PARTIAL)
    exe = runtime.build(mod, executor="relax")
    a, b = (mod.get_constructor(n) for n in ("A", "B"))
    x = np.array([0.5, -1.0], "float32")
    np.testing.assert_allclose(exe(ADTValue(a, [x])), np.exp(x), rtol=1e-6)
    with pytest.raises(DiagnosticError, match="match failed"):
        exe(ADTValue(b, [x]))
    exe = runtime.build(rly.parse(REFS), executor="relax")
    r = RefValue(np.ones(3, "float32"))
    np.testing.assert_allclose(exe(r, np.arange(3, dtype="float32")), [2, 4, 6])
    np.testing.assert_allclose(r.value, [1, 2, 3])


def test_static_depth_module_exports_and_plain_tvm_runs_it(static_depth: None,
                                                           tmp_path: object) -> None:
    import tvm
    mod = rly.parse(SUM)
    path = os.path.join(str(tmp_path), "sum.so")
    runtime.build(mod, executor="relax").export_library(path)
    m = runtime.load_module(path)
    assert m._static_depth and int(m(np.array(500, "int64"))) == 125_250
    assert m.kernel_sources() == []            # a loaded library keeps no source
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
    assert int(vm["main"](tvm.runtime.tensor(np.array(100, "int64"))).numpy()) == 5050
    with pytest.raises(Exception, match="recursion depth limit reached"):
        vm["main"](tvm.runtime.tensor(np.array(relax_vm.PLAIN_DEPTH + 10, "int64")))
    assert int(vm["main"](tvm.runtime.tensor(np.array(10, "int64"))).numpy()) == 55


# ----------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_gpu_runs_agree_with_the_interpreter() -> None:
    for mod, args, entry in ((rly.parse(PROGRAM), _args(), "main"),
                             (_step(), _step_args(), "train_step")):
        exe = runtime.build(mod, target="cuda", executor="relax", entry=entry)
        want = runtime.evaluate(mod, *copy_value(args), entry=entry)
        got, copies = run_counting_host_copies(exe, copy_value(args), entry=entry)
        assert_values_close(got, want, rtol=1e-4, atol=1e-5)
        # copies back through Python: the results only (branch conditions are read in the VM)
        assert copies == (len(got) if isinstance(got, tuple) else 1)


@pytest.mark.gpu
def test_gpu_references_depth_and_match_failure() -> None:
    exe = runtime.build(rly.parse(REFS), target="cuda", executor="relax")
    r = RefValue(np.ones(3, "float32"))
    np.testing.assert_allclose(exe(r, np.arange(3, dtype="float32")), [2, 4, 6])
    np.testing.assert_allclose(r.value, [1, 2, 3])
    exe = runtime.build(rly.parse(SUM), target="cuda", executor="relax")
    n = relax_vm.MAIN_DEPTH * 3
    assert int(exe(np.array(n, "int64"))) == n * (n + 1) // 2
    from relay_ir.runtime.values import ADTValue
    mod = rly.parse(PARTIAL)
    exe = runtime.build(mod, target="cuda", executor="relax")
    with pytest.raises(DiagnosticError, match="match failed"):
        exe(ADTValue(mod.get_constructor("B"), [np.zeros(2, "float32")]))


# ----------------------------------------------------------------------------- nvcc
def _nvcc_compiles(exe: relax_vm.RelaxExecutable, keep: object = None) -> int:
    import shutil

    import tvm
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    n = 0
    with exe.target:
        # NOTE: kernels compiled in one batch share one module (and one source)
        for src in dict.fromkeys(exe.kernel_sources()):
            if keep is None or any(k in src for k in keep):  # type: ignore[attr-defined]
                cubin = tvm.support.nvcc.compile_cuda(src, target_format="cubin",
                                                      compiler="nvcc")
                assert len(cubin) > 1000
                n += 1
    return n


def test_the_dense_and_softmax_kernels_compile_with_nvcc() -> None:
    # the CUDA C the GPU machine compiles at load time: errors surface here, not there
    exe = runtime.build(rly.parse(PROGRAM), target="cuda", executor="relax")
    assert _nvcc_compiles(exe, ("T_dense", "T_softmax")) >= 1


@pytest.mark.stress
def test_every_kernel_of_the_programs_compiles_with_nvcc() -> None:
    # every distinct CUDA module (kernels compiled in one batch share one) compiles
    for exe in (runtime.build(rly.parse(PROGRAM), target="cuda", executor="relax"),
                runtime.build(_step(), target="cuda", executor="relax", entry="train_step")):
        assert exe.num_compiled() >= 5
        assert _nvcc_compiles(exe) == len(set(exe.kernel_sources())) >= 1


@pytest.mark.stress
def test_every_suite_program_builds_for_cuda_or_is_refused_by_name() -> None:
    """The differential sweep (test_vm_diff) built for cuda: CUDA kernels, or a diagnostic
    that names the group and the target (a symbolic group; a group TVM cannot compile for
    cuda, such as argmax), never a raw TVM error."""
    import test_vm_diff as tv
    built = refused = 0
    for name, mod, runs, args in tv._with_inputs():
        if not runs:
            continue
        try:
            exe = runtime.build(mod, target="cuda", executor="relax")
        except DiagnosticError as e:
            assert "cuda" in e.message, (name, e.message)
            refused += 1
            continue
        assert all("__global__" in s for s in exe.kernel_sources()), name
        built += 1
    assert built >= 200, (built, refused)
