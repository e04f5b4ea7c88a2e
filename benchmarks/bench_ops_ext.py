"""Compiled kernels of the issue-23 operators (part opsb) against onnxruntime, side by side.

``python benchmarks/bench_ops_ext.py`` prints the median wall time per call (ms) of each
case compiled with ``runtime.build(target="llvm")`` and of the same ONNX node in onnxruntime
(CPU, one thread each), over ``--reps`` calls after a warm-up.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import relay_ir as rly  # noqa: E402
from relay_ir import passes, runtime  # noqa: E402
from relay_ir.op import sorting  # noqa: E402


def _median_ms(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts))


def _ort(node, inputs: dict, inits: list, out_types: tuple = (1,)):  # type: ignore[no-untyped-def]
    import onnxruntime as ort
    from onnx import helper
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, 1, v.shape)
                                        for k, v in inputs.items()],
                          [helper.make_tensor_value_info(o, t, None)
                           for o, t in zip(node.output, out_types)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: s.run(None, inputs)


def main() -> None:
    from onnx import TensorProto, helper
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    reps = ap.parse_args().reps
    rng = np.random.default_rng(0)
    rows = []

    x = rng.standard_normal((1, 64, 32, 32)).astype("float32")
    w = rng.standard_normal((64, 32, 4, 4)).astype("float32")
    mod = passes.InferType()(rly.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 32, 32), float32], %w: Tensor[(64, 32, 4, 4), float32]) {
  nn.conv2d_transpose(%x, %w, strides=[2, 2], padding=[1, 1])
}"""))
    f = runtime.build(mod, target="llvm")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    ort_ct = _median_ms(_ort(node, {"x": x, "w": w}, []), reps)
    rows.append(("conv2d_transpose 1x64x32x32, 64->32, 4x4 s2", _median_ms(lambda: f(x, w), reps),
                 ort_ct))
    # the kernel the ONNX importer used before: the conv2d data adjoint (a gather per pixel)
    old = passes.InferType()(rly.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 32, 32), float32], %w: Tensor[(64, 32, 4, 4), float32]) {
  nn.conv2d_backward_data(%x, %w, zeros(shape=[1, 32, 64, 64], dtype="float32"), strides=[2, 2],
                          padding=[1, 1])
}"""))
    fo = runtime.build(old, target="llvm")
    np.testing.assert_allclose(fo(x, w), f(x, w), rtol=1e-4, atol=1e-3)
    rows.append(("  same via nn.conv2d_backward_data (before)", _median_ms(lambda: fo(x, w), reps),
                 ort_ct))

    for n in (100, 1000, 4000):
        v = rng.standard_normal((8, n)).astype("float32")
        mod = passes.InferType()(rly.parse(f"""#[version = "0.0.5"]
def @main(%x: Tensor[(8, {n}), float32]) {{ topk(%x, k=10) }}"""))
        f = runtime.build(mod, target="llvm")
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
        k = helper.make_tensor("k", TensorProto.INT64, [1], [10])
        ort_k = _median_ms(_ort(node, {"x": v}, [k], (1, TensorProto.INT64)), reps)
        rows.append((f"topk k=10 of 8x{n}", _median_ms(lambda: f(v), reps), ort_k))
        # the rank-by-counting kernel (what sort/argsort and k > SELECT_MAX_K use)
        sorting.SELECT_MAX_K = 0
        try:
            fc = runtime.build(mod, target="llvm")
            rows.append(("  same by counting (O(n^2))", _median_ms(lambda: fc(v), reps), ort_k))
        finally:
            sorting.SELECT_MAX_K = 32

    img = rng.standard_normal((1, 32, 64, 64)).astype("float32")
    for method, mode in (("linear", "linear"), ("cubic", "cubic")):
        mod = passes.InferType()(rly.parse(f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 64, 64), float32]) {{
  image.resize2d(%x, size=[128, 128], method="{method}", cubic_alpha=-0.75f)
}}"""))
        f = runtime.build(mod, target="llvm")
        node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode=mode)
        s = helper.make_tensor("s", TensorProto.INT64, [4], [1, 32, 128, 128])
        rows.append((f"resize2d {method} 1x32x64x64 -> 128x128", _median_ms(lambda: f(img), reps),
                     _median_ms(_ort(node, {"x": img}, [s]), reps)))

    print(f"{'case':48} {'relay_ir ms':>12} {'onnxruntime ms':>15}")
    for name, a, b in rows:
        print(f"{name:48} {a:12.3f} {b:15.3f}")


if __name__ == "__main__":
    main()
