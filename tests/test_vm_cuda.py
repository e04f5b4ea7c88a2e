"""target="cuda" for whole programs: compiled (and exported) without a GPU; run on one."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tvm  # noqa: F401  (a required dependency: a broken install fails here)

import relay_ir as rly
from relay_ir import runtime
from util_diff import assert_values_close

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'

PROGRAM = HDR + """
type Tree { Leaf(Tensor[(16), float32]), Node(Tree, Tree) }
def @sum(%t: Tree) -> Tensor[(16), float32] {
  match (%t) {
    Leaf(%x) => tanh(%x),
    Node(%l, %r) => add(@sum(%l), multiply(@sum(%r), 0.5f)),
  }
}
def @build(%n: int32, %x: Tensor[(16), float32]) -> Tree {
  if (%n == 0) { Leaf(%x) } else { Node(@build(%n - 1, exp(negative(%x))), Leaf(%x)) }
}
def @main(%x: Tensor[(16), float32], %w: Tensor[(16, 16), float32], %n: int32) {
  let %h = nn.softmax(nn.dense(reshape(%x, newshape=[1, 16]), %w));
  let %s = @sum(@build(%n, reshape(%h, newshape=[16])));
  (%s, sum(%s))
}
"""


def _args() -> tuple:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(16).astype("float32"),
            rng.standard_normal((16, 16)).astype("float32"), np.int32(4))


def test_cuda_whole_program_compiles_to_cuda_kernels_without_a_gpu() -> None:
    import tvm
    exe = runtime.build(rly.parse(PROGRAM), target="cuda")
    assert exe.num_kernels() >= 5
    srcs = exe.kernel_sources()
    assert srcs and all("__global__" in s for s in srcs)
    for name in ("T_dense", "T_softmax"):
        assert any(name in s for s in srcs), name
    if not tvm.cuda(0).exist:
        with pytest.raises(rly.DiagnosticError, match="no CUDA GPU"):
            exe(*_args())


def test_cuda_module_file_exports_without_a_gpu_and_refuses_to_load_without_one(
        tmp_path: object) -> None:
    import tvm
    exe = runtime.build(rly.parse(PROGRAM), target="cuda")
    path = os.path.join(str(tmp_path), "m.so")
    exe.export_library(path)
    assert os.path.getsize(path) > 1000
    if tvm.cuda(0).exist:
        m = runtime.load_module(path)
        assert_values_close(m(*_args()), runtime.evaluate(rly.parse(PROGRAM), *_args()),
                            rtol=1e-4, atol=1e-5)
    else:
        with pytest.raises(rly.DiagnosticError, match="no CUDA GPU"):
            runtime.load_module(path)


def run_counting_host_copies(exe: object, args: tuple, **kw: object) -> tuple[object, int]:
    """``exe(*args, **kw)`` and how many tensors came back to the host through
    ``tvm.runtime.Tensor.numpy`` during the call."""
    import tvm
    copies = []
    real = tvm.runtime.Tensor.numpy

    def counting(self: object) -> np.ndarray:
        copies.append(1)
        return real(self)  # type: ignore[arg-type]
    tvm.runtime.Tensor.numpy = counting  # type: ignore[method-assign]
    try:
        got = exe(*args, **kw)  # type: ignore[operator]
    finally:
        tvm.runtime.Tensor.numpy = real  # type: ignore[method-assign]
    return got, len(copies)


@pytest.mark.gpu
def test_cuda_run_matches_the_interpreter_with_device_resident_intermediates() -> None:
    mod = rly.parse(PROGRAM)
    exe = runtime.build(mod, target="cuda")
    got, copies = run_counting_host_copies(exe, _args())
    assert_values_close(got, runtime.evaluate(mod, *_args()), rtol=1e-4, atol=1e-5)
    # copies back: the two results only (branch conditions are host scalars)
    assert copies <= 2
