"""Lowering and schedules: targets, one PrimFunc per fused group, CPU schedules, CUDA source."""
from __future__ import annotations

import os

import numpy as np
import pytest
import tvm
from tvm import te, topi

import relay_ir as rly
from relay_ir.errors import LoweringError
from relay_ir.passes import optimize
from relay_ir.passes.fuse_ops import fuse_ops
from relay_ir.runtime.lower_tvm import (ensure_threads, lower_group,
                                        resolve_target)
from relay_ir.runtime.schedules import schedule_cpu
from relay_ir.traversal import flatten_lets

pytestmark = pytest.mark.tvm
HDR = '#[version = "0.0.5"]\n'


def cpu() -> object:
    return resolve_target("llvm")


def test_llvm_target_is_the_host_cpu_with_mcpu() -> None:
    from tvm.target import codegen
    t = resolve_target("llvm")
    assert str(t.kind.name) == "llvm"
    assert str(t.attrs["mcpu"]) == codegen.llvm_get_system_cpu()
    assert int(t.attrs["num-cores"]) >= 1
    d = resolve_target({"kind": "llvm", "mcpu": "x86-64-v3"})
    assert str(d.attrs["mcpu"]) == "x86-64-v3"
    assert resolve_target(d) is d
    with pytest.raises(LoweringError, match="unknown target"):
        resolve_target("llvm -mcpu=znver4")


def test_threads_default_to_the_core_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    n = ensure_threads()
    assert os.environ["TVM_NUM_THREADS"] == str(n) and n == len(os.sched_getaffinity(0))
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    assert ensure_threads() == 1


def test_pool_workers_are_not_pinned_unless_the_user_asks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TVM_BIND_THREADS", raising=False)
    ensure_threads()
    assert os.environ["TVM_BIND_THREADS"] == "0"
    monkeypatch.setenv("TVM_BIND_THREADS", "1")
    ensure_threads()
    assert os.environ["TVM_BIND_THREADS"] == "1"
    if len(os.sched_getaffinity(0)) < 2:
        return
    # in a fresh process (TVM's pool starts once): after a parallel kernel ran, every thread
    # may run on every core of the process
    import subprocess
    import sys
    code = """if True:
        import glob, os
        import numpy as np
        import relay_ir as rly
        from relay_ir import runtime
        exe = runtime.build(rly.parse('#[version = "0.0.5"]\\ndef @main(%x: Tensor[(1024, 1024), float32]) '
                                      '{ nn.relu(add(%x, 1f)) }'), "llvm")
        x = np.ones((1024, 1024), np.float32)
        assert float(exe(x).sum()) == 2 * 1024 * 1024
        cores = sorted(os.sched_getaffinity(0))
        for t in glob.glob("/proc/self/task/*/status"):
            line = next(l for l in open(t) if l.startswith("Cpus_allowed_list"))
            assert line.split()[-1] == f"{cores[0]}-{cores[-1]}", (t, line, cores)
        print(len(glob.glob("/proc/self/task/*")))
    """
    env = {k: v for k, v in os.environ.items() if k != "TVM_BIND_THREADS"}
    env["TVM_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) >= 2      # the pool's worker among them


def _run(func_mod: object, arrays: list[np.ndarray], out_shapes: list[tuple]) -> list:
    ensure_threads()
    ex = tvm.compile(func_mod, target=cpu())
    ins = [tvm.runtime.tensor(a) for a in arrays]
    outs = [tvm.runtime.empty(s, "float32") for s in out_shapes]
    ex["main"](*ins, *outs)
    return [o.numpy() for o in outs]


def _sched(ins: list, outs: list, kind: str = "") -> tuple[object, str, str]:
    report: list[str] = []
    mod = schedule_cpu(te.create_prim_func([*ins, *outs]), kind, report)
    return mod, report[0], mod.script()


def _nblocks(script: str) -> int:
    """Blocks in a printed PrimFunc, the root block not counted."""
    return sum(1 for line in script.splitlines()
               if line.strip().startswith("with T.sblock(") and '"root"' not in line)


RNG = np.random.default_rng(0)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


def test_injective_chain_is_one_parallel_vectorized_loop() -> None:
    a = te.placeholder((37, 50), "float32", name="a")
    b = te.placeholder((50,), "float32", name="b")
    y = topi.nn.relu(topi.multiply(topi.add(a, b), 2.0))
    mod, how, script = _sched([a, b], [y])
    assert how == "planned"
    assert _nblocks(script) == 1            # producers inlined: one loop nest
    assert "T.parallel" in script and "T.vectorized" in script
    av, bv = _rand(37, 50), _rand(50)
    np.testing.assert_allclose(_run(mod, [av, bv], [(37, 50)])[0],
                               np.maximum((av + bv) * 2, 0), rtol=1e-6)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_scalar_groups_are_left_unscheduled_and_compute_the_same(shape: tuple) -> None:
    # one-element buffers only: no block is inlined (that cost compile time in the block
    # count), and the kernel still computes the chain
    a = te.placeholder(shape, "float32", name="a")
    y = topi.add(topi.sin(topi.multiply(a, 3.0)), topi.cos(a))
    mod, how, script = _sched([a], [y])
    assert how == "scalar" and _nblocks(script) == 4
    av = np.full(shape, 0.7, "float32")
    np.testing.assert_allclose(_run(mod, [av], [shape])[0], np.sin(av * 3) + np.cos(av),
                               rtol=1e-6)
    # a second element anywhere (an input, an output, a loop) is scheduled as before
    b = te.placeholder((2,), "float32", name="b")
    z = topi.add(topi.sin(b), topi.cos(b))
    assert _sched([b], [z])[1] == "planned"
    r = topi.sum(b, axis=0)
    assert _sched([b], [r])[1] != "scalar"


def test_serial_threshold_counts_the_largest_block() -> None:
    # three elementwise blocks of 400x400: 480,000 iterations summed, 160,000 in the largest;
    # inlined they are one 160,000-element pass, below SERIAL_BELOW: one thread
    from relay_ir.runtime.schedules import SERIAL_BELOW, work_volume
    a = te.placeholder((400, 400), "float32", name="a")
    y = topi.nn.relu(topi.add(topi.multiply(a, 2.0), 1.0))
    func = te.create_prim_func([a, y])
    assert work_volume(func) == 160_000 < SERIAL_BELOW < 3 * 160_000
    script = schedule_cpu(func, "", serial_below=SERIAL_BELOW).script()
    assert "T.parallel" not in script and "T.vectorized" in script
    big = te.placeholder((600, 600), "float32", name="a")
    script = schedule_cpu(te.create_prim_func([big, topi.multiply(big, 2.0)]), "",
                          serial_below=SERIAL_BELOW).script()
    assert "T.parallel" in script


@pytest.mark.parametrize("n", [64, 40])
def test_dense_bias_relu_is_tiled_packed_and_fused(n: int) -> None:
    x = te.placeholder((30, 24), "float32", name="x")
    w = te.placeholder((n, 24), "float32", name="w")
    b = te.placeholder((n,), "float32", name="b")
    y = topi.nn.relu(topi.add(topi.nn.dense(x, w), b))
    mod, how, script = _sched([x, w, b], [y], "matmul")
    assert how == "planned"
    assert "w_global" in script                      # the packed B panel
    assert "T.parallel" in script and "T.vectorized" in script and "T.unroll" in script
    xv, wv, bv = _rand(30, 24), _rand(n, 24), _rand(n)
    np.testing.assert_allclose(_run(mod, [xv, wv, bv], [(30, n)])[0],
                               np.maximum(xv @ wv.T + bv, 0), rtol=1e-4, atol=1e-5)


def test_matmul_and_batch_matmul_schedules() -> None:
    a = te.placeholder((20, 16), "float32", name="a")
    b = te.placeholder((16, 32), "float32", name="b")
    mod, how, _ = _sched([a, b], [topi.matmul(a, b)], "matmul")
    av, bv = _rand(20, 16), _rand(16, 32)
    assert how == "planned"
    np.testing.assert_allclose(_run(mod, [av, bv], [(20, 32)])[0], av @ bv, rtol=1e-4,
                               atol=1e-5)
    p = te.placeholder((3, 10, 8), "float32", name="p")
    q = te.placeholder((3, 16, 8), "float32", name="q")
    mod, how, _ = _sched([p, q], [topi.nn.batch_matmul(p, q)], "matmul")
    pv, qv = _rand(3, 10, 8), _rand(3, 16, 8)
    assert how == "planned"
    np.testing.assert_allclose(_run(mod, [pv, qv], [(3, 10, 16)])[0],
                               pv @ qv.transpose(0, 2, 1), rtol=1e-4, atol=1e-5)


def test_row_reduction_is_rfactored_with_its_epilogue() -> None:
    for n, lanes in ((72, True), (70, False)):   # 70: no lane count divides it
        a = te.placeholder((12, n), "float32", name="a")
        y = topi.sqrt(topi.sum(topi.exp(a), axis=1))
        mod, how, script = _sched([a], [y])
        assert how == "planned"
        assert ("_rf" in script) == lanes and "T.parallel" in script
        av = _rand(12, n)
        np.testing.assert_allclose(_run(mod, [av], [(12,)])[0], np.sqrt(np.exp(av).sum(1)),
                                   rtol=1e-5)


def test_column_reduction_vectorizes_the_spatial_axis() -> None:
    a = te.placeholder((30, 48), "float32", name="a")
    mod, how, script = _sched([a], [topi.sum(a, axis=0)])
    assert how == "planned" and "T.vectorized" in script and "_rf" not in script
    av = _rand(30, 48)
    np.testing.assert_allclose(_run(mod, [av], [(48,)])[0], av.sum(0), rtol=1e-5, atol=1e-5)


def _conv_ref(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, o, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


def test_conv2d_nchw_and_nhwc_get_a_real_schedule() -> None:
    # NOTE: NCHW: vectorized over output channels (schedules.schedule_conv_channels), or along
    # the output rows for few input channels (schedules.schedule_conv_rows)
    for c, want in ((8, "conv-channels"), (4, "conv-rows")):
        x = te.placeholder((1, c, 10, 16), "float32", name="x")
        w = te.placeholder((8, c, 3, 3), "float32", name="w")
        y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
        mod, how, script = _sched([x, w], [y], "conv")
        assert how == want and "T.vectorized" in script and "T.unroll" in script
        xv, wv = _rand(1, c, 10, 16), _rand(8, c, 3, 3)
        ref = np.maximum(_conv_ref(xv, wv, 1), 0)
        np.testing.assert_allclose(_run(mod, [xv, wv], [(1, 8, 10, 16)])[0], ref, rtol=1e-4,
                                   atol=1e-4)
    xh = te.placeholder((1, 10, 16, 4), "float32", name="xh")
    wh = te.placeholder((3, 3, 4, 16), "float32", name="wh")
    yh = topi.nn.conv2d_nhwc(xh, wh, 1, 1, 1)
    mod, how, script = _sched([xh, wh], [yh], "conv")
    assert how == "planned" and "T.vectorized" in script
    wv2 = _rand(16, 4, 3, 3)
    got = _run(mod, [xv.transpose(0, 2, 3, 1).copy(), wv2.transpose(2, 3, 1, 0).copy()],
               [(1, 10, 16, 16)])[0]
    np.testing.assert_allclose(got, _conv_ref(xv, wv2, 1).transpose(0, 2, 3, 1), rtol=1e-4,
                               atol=1e-4)


def test_pooling_schedule() -> None:
    x = te.placeholder((1, 3, 8, 32), "float32", name="x")
    y = topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max")
    mod, how, script = _sched([x], [y], "pool")
    # NOTE: NCHW, unpadded: vectorized along the output rows (schedules.schedule_pool)
    assert how == "pool-rows" and "T.vectorized" in script
    xv = _rand(1, 3, 8, 32)
    np.testing.assert_allclose(_run(mod, [xv], [(1, 3, 4, 16)])[0],
                               xv.reshape(1, 3, 4, 2, 16, 2).max((3, 5)))


def test_softmax_is_scheduled_rowwise() -> None:
    x = te.placeholder((6, 44), "float32", name="x")
    mod, how, script = _sched([x], [topi.nn.softmax(x, axis=-1)])
    assert how == "planned" and "_rf" in script and "T.parallel" in script
    xv = _rand(6, 44)
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(_run(mod, [xv], [(6, 44)])[0], e / e.sum(1, keepdims=True),
                               rtol=1e-5, atol=1e-7)


def _groups(text: str) -> list:
    mod = fuse_ops(optimize(rly.parse(HDR + text)))
    lets, _ = flatten_lets(mod["main"].body)
    return [let.value for let in lets if getattr(let.value, "is_primitive", False)]


def test_a_fused_group_lowers_to_one_prim_func() -> None:
    (g,) = _groups("""
def @main(%x: Tensor[(8, 16), float32], %b: Tensor[(16), float32]) {
  %0 = add(%x, %b);
  %1 = tanh(%0);
  %2 = multiply(%1, 1.5f);
  subtract(%2, sigmoid(%x))
}""")
    x = rly.ty.TensorType((8, 16), "float32")
    low = lower_group(g, [x, rly.ty.TensorType((16,), "float32")])
    assert [t.concrete_shape for t in low.out_types] == [(8, 16)]
    assert sorted(low.ops) == ["add", "multiply", "sigmoid", "subtract", "tanh"]
    report: list[str] = []
    mod = schedule_cpu(low.prim_func, low.kind, report)
    assert report == ["planned"] and _nblocks(mod.script()) == 1
    xv, bv = _rand(8, 16), _rand(16)
    got = _run(mod, [xv, bv], [(8, 16)])[0]
    ref = np.tanh(xv + bv) * 1.5 - 1 / (1 + np.exp(-xv))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _cuda_available() -> bool:
    return tvm.get_global_func("target.build.cuda", allow_missing=True) is not None


@pytest.mark.skipif(not _cuda_available(), reason="TVM built without CUDA code generation")
def test_cuda_groups_compile_to_scheduled_cuda_source() -> None:
    from relay_ir.runtime.schedules import schedule_cuda
    target = resolve_target("cuda")
    x = te.placeholder((64, 32), "float32", name="x")
    w = te.placeholder((48, 32), "float32", name="w")
    b = te.placeholder((48,), "float32", name="b")
    cases = [
        [x, w, b, topi.nn.relu(topi.add(topi.nn.dense(x, w), b))],       # Matmul
        [x, topi.nn.softmax(x)],                                          # GeneralReduction
        [x, topi.sum(x, axis=1)],                                         # Reduction
        [x, topi.nn.relu(topi.multiply(x, 2.0))],                         # Fallback
    ]
    for args in cases:
        mod = schedule_cuda(te.create_prim_func(args), target)
        assert "tirx.is_scheduled" in mod["main"].attrs
        ex = tvm.compile(mod, target=target)
        assert len(ex.mod.imports) == 1
        src = ex.mod.imports[0].inspect_source()
        assert "__global__" in src and "threadIdx" in src


@pytest.mark.skipif(not _cuda_available(), reason="TVM built without CUDA code generation")
def test_build_for_cuda_compiles_every_group_to_cuda() -> None:
    from relay_ir import runtime
    mod = rly.parse(HDR + """
def @main(%x: Tensor[(8, 32), float32], %w: Tensor[(32, 16), float32], %b: Tensor[(16), float32]) {
  %0 = nn.relu(add(nn.matmul(%x, %w), %b));
  (nn.softmax(%0), sum(exp(%0), axis=[1]), tanh(%x))
}""")
    exe = runtime.build(mod, target="cuda")
    args = (_rand(8, 32), _rand(32, 16), _rand(16))
    srcs = exe.kernel_sources()      # compiled at build time (kernels of one batch share one)
    assert exe.num_kernels() == 4 and not exe.host_kernels() and srcs
    for src in srcs:
        assert "__global__" in src and "threadIdx" in src
    if not tvm.cuda(0).exist:
        with pytest.raises(rly.DiagnosticError, match="no CUDA GPU"):
            exe(*args)


def test_cpu_kernel_sources_are_llvm_ir(tmp_path: object) -> None:
    from relay_ir import runtime
    from relay_ir.runtime.kernel_cache import KernelCache
    exe = runtime.build(rly.parse(HDR + "def @main(%x: Tensor[(64), float32]) { exp(%x) }"),
                        cache=KernelCache(directory=str(tmp_path)))   # compiled, not loaded
    assert exe.num_kernels() == 1                          # compiled at build time
    (src,) = exe.kernel_sources()
    assert "define" in src and "<16 x float>" in src      # vectorized by 16 lanes
