"""Values and diagnostics of the sorting ops (topk, argsort, sort), the transposed and 1-d
convolutions, instance/group norm and image.resize2d (issue 23, part opsb).

References: naive loops, numpy formulas and onnxruntime (Resize, TopK); the registry-wide
checks (relation vs reference, TE compute, gradients, jvp) are in test_op_registry.py,
test_op_compute.py, test_op_grad.py and test_jvp.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.errors import DiagnosticError, ShapeMismatchError, TypeInferenceError
from relay_ir.op import get_opdef
from relay_ir.ty import TensorType, TupleType

rng = np.random.default_rng(7)


def T(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype)


def run(name: str, args: list, **attrs):  # type: ignore[no-untyped-def]
    od = get_opdef(name)
    at = od.make_attrs(attrs)
    od.type_rel([TensorType(a.shape, str(a.dtype)) for a in args], at)
    return od.impl(args, at)


# ----------------------------------------------------------------------------- sorting
def test_topk_ties_take_the_lower_index_first_both_directions():
    x = np.array([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0]], "float32")
    v, i = run("topk", [x], k=4)
    assert i.tolist() == [[0, 2, 5, 3]] and v.tolist() == [[3, 3, 3, 2]]
    v, i = run("topk", [x], k=3, is_ascend=True, dtype="int64")
    assert i.dtype == np.int64 and i.tolist() == [[1, 4, 3]] and v.tolist() == [[1, 1, 2]]


def test_topk_nan_is_largest_and_signed_zeros_tie():
    x = np.array([0.0, np.nan, -0.0, -np.inf, 1.0], "float64")
    i = run("topk", [x], k=5, ret_type="indices")
    assert i.tolist() == [1, 4, 0, 2, 3]
    i = run("topk", [x], k=0, ret_type="indices", is_ascend=True)  # k < 1: the whole axis
    assert i.tolist() == [3, 0, 2, 4, 1]


def test_topk_matches_onnxruntime():
    import onnxruntime as ort
    from onnx import TensorProto, helper
    x = rng.integers(-3, 4, (3, 4, 5)).astype("float32")  # many ties
    for largest in (0, 1):
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_tensor_value_info("v", 1, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                              [helper.make_tensor("k", TensorProto.INT64, [1], [3])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want_v, want_i = sess.run(None, {"x": x})
        v, i = run("topk", [x], k=3, axis=1, is_ascend=not largest, dtype="int64")
        np.testing.assert_array_equal(v, want_v)
        np.testing.assert_array_equal(i, want_i)


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int64", "bool"])
def test_argsort_and_sort_are_numpy_stable_sorts(dtype):  # type: ignore[no-untyped-def]
    x = rng.integers(0, 3, (4, 7)).astype(dtype)
    np.testing.assert_array_equal(run("argsort", [x]), np.argsort(x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(run("sort", [x], axis=0), np.sort(x, axis=0, kind="stable"))
    desc = run("argsort", [x], is_ascend=False)
    # descending, ties by the lower index: sort by (-value, index)
    want = np.array([sorted(range(7), key=lambda j: (-int(r[j]), j)) for r in x])
    np.testing.assert_array_equal(desc, want)


@pytest.mark.parametrize("name,args,attrs,exc,msg", [
    ("topk", [T(3, 4)], {"axis": 2}, TypeInferenceError, "axis 2 is out of range"),
    ("topk", [T(3, 4)], {"k": 5}, TypeInferenceError, "k=5 is larger than axis"),
    ("topk", [T(3, 4)], {"ret_type": "value"}, TypeInferenceError, "ret_type must be one of"),
    ("topk", [T()], {}, TypeInferenceError, "rank >= 1"),
    ("argsort", [T(3)], {"dtype": "float32"}, TypeInferenceError, "int32 or int64"),
    ("nn.conv2d_transpose", [T(1, 4, 5, 5), T(3, 2, 3, 3)], {}, ShapeMismatchError,
     "4 input channels, but the weight (IOHW) has 3"),
    ("nn.conv2d_transpose", [T(1, 4, 5, 5), T(4, 2, 3, 3)], {"output_padding": [1, 0]},
     TypeInferenceError, "must be >= 0 and smaller than the stride (1)"),
    ("nn.conv2d_transpose", [T(1, 4, 5, 5), T(4, 2, 3, 3)], {"groups": 3}, ShapeMismatchError,
     "not divisible by groups=3"),
    ("nn.conv2d_transpose", [T(1, 4, 2, 2), T(4, 2, 1, 1)], {"padding": [1, 1]},
     ShapeMismatchError, "removes the whole output"),
    ("nn.conv1d", [T(1, 4, 5, 5), T(4, 2, 3)], {}, TypeInferenceError,
     "nn.conv1d: data must have rank 3"),
    ("nn.conv1d", [T(1, 4, 5), T(2, 3, 3)], {}, ShapeMismatchError,
     "nn.conv1d: data has 4 input channels"),
    ("nn.conv1d_transpose", [T(1, 4, 5), T(4, 2, 3)], {"output_padding": [2], "strides": [2]},
     TypeInferenceError, "nn.conv1d_transpose: output_padding"),
    ("nn.group_norm", [T(2, 6, 3), T(6), T(6)], {"num_groups": 4}, ShapeMismatchError,
     "6 channels (axis 1) are not divisible by num_groups=4"),
    ("nn.group_norm", [T(2, 6, 3), T(6), T(6)], {}, TypeInferenceError,
     "num_groups must be >= 1"),
    ("nn.instance_norm", [T(2, 6, 3), T(3), T(3)], {}, ShapeMismatchError,
     "gamma must have shape (6)"),
    ("nn.instance_norm", [T(2, 6, 3, dtype="int32"), T(6, dtype="int32"),
                          T(6, dtype="int32")], {}, TypeInferenceError, "float tensor"),
    ("image.resize2d", [T(1, 2, 3, 3)], {"size": [4, 4], "method": "bilinear"},
     TypeInferenceError, "unknown method 'bilinear'"),
    ("image.resize2d", [T(1, 2, 3, 3)], {"size": [4]}, TypeInferenceError,
     "size must be two positive integers"),
    ("image.resize2d", [T(1, 2, 3, 3, dtype="int32")], {"size": [4, 4]}, TypeInferenceError,
     "linear resizing needs float data"),
])
def test_error_messages(name, args, attrs, exc, msg):  # type: ignore[no-untyped-def]
    od = get_opdef(name)
    n = od.num_inputs
    with pytest.raises(exc) as e:
        od.type_rel(list(args)[:n], od.make_attrs(attrs))
    assert msg in e.value.message
    assert isinstance(e.value, DiagnosticError)


def test_missing_size_is_a_diagnostic():
    od = get_opdef("image.resize2d")
    with pytest.raises(TypeInferenceError, match="needs a size attribute"):
        od.type_rel([T(1, 2, 3, 3)], od.make_attrs({}))


# ----------------------------------------------------------------------------- convolutions
def _naive_conv_transpose(x, w, s, p, d, op_, g):  # type: ignore[no-untyped-def]
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    oh = (h - 1) * s[0] - p[0] - p[2] + d[0] * (kh - 1) + op_[0] + 1
    ow = (wd - 1) * s[1] - p[1] - p[3] + d[1] * (kw - 1) + op_[1] + 1
    full = np.zeros((n, cog * g, oh + p[0] + p[2], ow + p[1] + p[3]))
    cig = ci // g
    for c in range(ci):
        gi = c // cig
        for y in range(h):
            for xx in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        full[:, gi * cog:(gi + 1) * cog, y * s[0] + i * d[0],
                             xx * s[1] + j * d[1]] += x[:, c, y, xx, None] * w[c, :, i, j]
    return full[:, :, p[0]:p[0] + oh, p[1]:p[1] + ow]


@pytest.mark.parametrize("s,p,d,op_,g", [((1, 1), (0, 0, 0, 0), (1, 1), (0, 0), 1),
                                         ((2, 3), (1, 0, 2, 1), (1, 2), (1, 2), 2),
                                         ((2, 2), (1, 1, 1, 1), (2, 1), (1, 0), 4)])
def test_conv2d_transpose_vs_naive_loop(s, p, d, op_, g):  # type: ignore[no-untyped-def]
    x = rng.standard_normal((2, 4, 4, 5))
    w = rng.standard_normal((4, 3, 3, 2))
    got = run("nn.conv2d_transpose", [x, w], strides=s, padding=p, dilation=d,
              output_padding=op_, groups=g)
    np.testing.assert_allclose(got, _naive_conv_transpose(x, w, s, p, d, op_, g), atol=1e-12)
    # NHWC data, HWOI weight: the same numbers
    got = run("nn.conv2d_transpose", [x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)],
              strides=s, padding=p, dilation=d, output_padding=op_, groups=g,
              data_layout="NHWC", kernel_layout="HWOI")
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2),
                               _naive_conv_transpose(x, w, s, p, d, op_, g), atol=1e-12)


def test_conv1d_and_conv1d_transpose_vs_naive():
    x = rng.standard_normal((2, 4, 9))
    w = rng.standard_normal((6, 2, 3))
    got = run("nn.conv1d", [x, w], strides=[2], padding=[1, 2], dilation=[2], groups=2)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 2)))
    want = np.zeros((2, 6, 4))
    for o in range(6):
        gi = o // 3
        for t in range(4):
            for c in range(2):
                for k in range(3):
                    want[:, o, t] += xp[:, gi * 2 + c, t * 2 + k * 2] * w[o, c, k]
    np.testing.assert_allclose(got, want, atol=1e-12)
    wt = rng.standard_normal((4, 3, 3))
    got = run("nn.conv1d_transpose", [x, wt], strides=[2], padding=[1, 2], dilation=[2],
              output_padding=[1], groups=2)
    want = _naive_conv_transpose(x[:, :, None], wt[:, :, None], (1, 2), (0, 1, 0, 2), (1, 2),
                                 (0, 1), 2)[:, :, 0]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_conv2d_transpose_infers_its_weight_and_runs_from_text():
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 3, 3), float32], %w) {
  %0 = nn.conv2d_transpose(%x, %w, strides=[2, 2], padding=[1, 1], output_padding=[1, 1],
                           channels=6, kernel_size=[3, 3], groups=2);
  %1 = topk(%0, k=2, axis=1, ret_type="values");
  image.resize2d(%1, size=[3, 5], method="cubic", coordinate_transformation_mode="align_corners")
}
"""
    mod = passes.InferType()(rly.parse(src))
    ft = mod["main"].checked_type
    assert ft.arg_types[1] == T(4, 3, 3, 3)
    assert ft.ret_type == T(1, 2, 3, 5)
    rly.assert_structural_equal(passes.InferType()(rly.parse(rly.astext(mod))), mod)
    x = rng.standard_normal((1, 4, 3, 3)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    got = runtime.evaluate(mod, x, w)
    y = _naive_conv_transpose(x.astype("float64"), w.astype("float64"), (2, 2), (1, 1, 1, 1),
                              (1, 1), (1, 1), 2)
    top = -np.sort(-y, axis=1)[:, :2]
    want = run("image.resize2d", [top], size=[3, 5], method="cubic",
               coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- normalization
def test_instance_and_group_norm_vs_numpy():
    x = rng.standard_normal((2, 6, 3, 4))
    gm, bt = rng.standard_normal(6), rng.standard_normal(6)
    m = x.mean(axis=(2, 3), keepdims=True)
    v = x.var(axis=(2, 3), keepdims=True)
    want = (x - m) / np.sqrt(v + 1e-3) * gm[:, None, None] + bt[:, None, None]
    np.testing.assert_allclose(run("nn.instance_norm", [x, gm, bt], epsilon=1e-3), want,
                               atol=1e-12)
    # group norm with one channel per group is instance norm
    np.testing.assert_allclose(run("nn.group_norm", [x, gm, bt], num_groups=6, epsilon=1e-3),
                               want, atol=1e-12)
    xr = x.reshape(2, 2, 3, 3, 4)
    m = xr.mean(axis=(2, 3, 4), keepdims=True)
    v = xr.var(axis=(2, 3, 4), keepdims=True)
    want = ((xr - m) / np.sqrt(v + 1e-5)).reshape(x.shape) * gm[:, None, None]
    np.testing.assert_allclose(run("nn.group_norm", [x, gm, bt], num_groups=2, center=False),
                               want, atol=1e-12)


# ----------------------------------------------------------------------------- resize
def _ort_resize(x, size, mode, cmode, **extra):  # type: ignore[no-untyped-def]
    import onnxruntime as ort
    from onnx import TensorProto, helper
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode,
                            coordinate_transformation_mode=cmode, **extra)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                          [helper.make_tensor_value_info("y", 1, None)],
                          [helper.make_tensor("sizes", TensorProto.INT64, [4],
                                              list(x.shape[:2]) + list(size))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("method,onnx_mode", [("nearest_neighbor", "nearest"),
                                              ("linear", "linear"), ("cubic", "cubic")])
@pytest.mark.parametrize("cmode", ["half_pixel", "align_corners", "asymmetric",
                                   "pytorch_half_pixel"])
def test_resize2d_matches_onnxruntime(method, onnx_mode, cmode):  # type: ignore[no-untyped-def]
    x = rng.standard_normal((1, 2, 4, 5)).astype("float32")
    for size in [(8, 3), (3, 10), (1, 7)]:
        want = _ort_resize(x, size, onnx_mode, cmode, cubic_coeff_a=-0.75,
                           nearest_mode="round_prefer_floor")
        got = run("image.resize2d", [x], size=size, method=method,
                  coordinate_transformation_mode=cmode, cubic_alpha=-0.75,
                  rounding_method="round_prefer_floor")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(size))


def test_resize2d_nearest_rounding_and_crop_extrapolation():
    x = np.arange(4, dtype="float64").reshape(1, 1, 1, 4)
    # asymmetric 4 -> 8: source 0, .5, 1, 1.5, ...
    for how, want in [("floor", [0, 0, 1, 1, 2, 2, 3, 3]), ("ceil", [0, 1, 1, 2, 2, 3, 3, 3]),
                      ("round_prefer_floor", [0, 0, 1, 1, 2, 2, 3, 3]),
                      ("round_prefer_ceil", [0, 1, 1, 2, 2, 3, 3, 3]),
                      ("round", [0, 1, 1, 2, 2, 3, 3, 3])]:
        got = run("image.resize2d", [x], size=[1, 8], method="nearest_neighbor",
                  coordinate_transformation_mode="asymmetric", rounding_method=how)
        assert got.ravel().tolist() == want, how
    got = run("image.resize2d", [x], size=[1, 3], roi=[0.0, -0.5, 1.0, 0.5],
              coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-9.0)
    # W coordinates: -1.5, 0, 1.5 (the first is outside: extrapolated)
    np.testing.assert_allclose(got.ravel(), [-9.0, 0.0, 1.5])


# ----------------------------------------------------------------------------- end to end
def test_gradient_pass_through_the_new_ops_interpreted_and_compiled():
    """``passes.gradient`` of a program using every new differentiable op, interpreted and
    compiled, against central differences of its numpy value."""
    from util_grad import HEADER, grad_module
    src = HEADER + """def @main(%x: Tensor[(1, 4, 3, 3), float64],
          %w: Tensor[(4, 2, 3, 3), float64],
          %v: Tensor[(6, 4, 2), float64]) {
  %0 = nn.conv2d_transpose(%x, %w, strides=[2, 2], padding=[1, 1], output_padding=[1, 1],
                           groups=2);
  %1 = nn.group_norm(%0, ones_like(sum(%0, axis=[0, 2, 3])), zeros(shape=[4], dtype="float64"),
                     num_groups=2);
  %2 = image.resize2d(%1, size=[4, 5], method="cubic");
  %3 = reshape(%2, newshape=[1, 4, 20]);
  %4 = nn.conv1d(%3, %v, strides=[2]);
  %5 = nn.instance_norm(%4, ones(shape=[6], dtype="float64"), zeros(shape=[6], dtype="float64"));
  %6 = topk(%5, k=3, ret_type="values");
  sum(multiply(%6, %6))
}
"""
    mod = passes.InferType()(rly.parse(src))
    g = grad_module(mod)
    args = [rng.standard_normal((1, 4, 3, 3)), rng.standard_normal((4, 2, 3, 3)),
            rng.standard_normal((6, 4, 2))]
    val, grads = runtime.evaluate(g, *args)
    cval, cgrads = runtime.build(g, target="llvm")(*args)
    np.testing.assert_allclose(cval, val, rtol=1e-9)
    eps = 1e-6
    for k, a in enumerate(args):
        np.testing.assert_allclose(cgrads[k], grads[k], rtol=1e-7, atol=1e-9)
        d = rng.standard_normal(a.shape)
        moved = [b + eps * d if j == k else b for j, b in enumerate(args)]
        back = [b - eps * d if j == k else b for j, b in enumerate(args)]
        fd = (runtime.evaluate(mod, *moved) - runtime.evaluate(mod, *back)) / (2 * eps)
        np.testing.assert_allclose(np.sum(grads[k] * d), fd, rtol=1e-5)


def test_symbolic_batch_dims():
    from relay_ir.ty import ShapeVar
    n = ShapeVar("n")
    od = get_opdef("nn.conv2d_transpose")
    t = od.type_rel([TensorType((n, 4, 5, 5), "float32"), T(4, 3, 3, 3)],
                    od.make_attrs({"strides": [2, 2]}))
    assert t == TensorType((n, 3, 11, 11), "float32")
    od = get_opdef("topk")
    t = od.type_rel([TensorType((n, 7), "float32")], od.make_attrs({"k": 2}))
    assert t == TupleType((TensorType((n, 2), "float32"), TensorType((n, 2), "int32")))
    od = get_opdef("nn.conv1d")
    t = od.type_rel([TensorType((n, 4, 9), "float32"), T(6, 4, 3)], od.make_attrs({}))
    assert t == TensorType((n, 6, 7), "float32")


@pytest.mark.parametrize("pads", [(0, 1, 3, 2), (1, 0, 0, 1)])
def test_onnx_conv_transpose_output_padding_past_the_stride(pads):  # type: ignore[no-untyped-def]
    """ONNX allows output_padding below the dilation too: the part at or past the stride comes
    off the end padding (the op computes those rows) and the rest is zeros."""
    from onnx import helper
    from relay_ir.frontend import from_onnx
    x = rng.standard_normal((1, 2, 3, 4)).astype("float32")
    w = rng.standard_normal((2, 3, 2, 2)).astype("float32")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1],
                            dilations=[3, 3], output_padding=[2, 1], pads=list(pads))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape),
                                        helper.make_tensor_value_info("w", 1, w.shape)],
                          [helper.make_tensor_value_info("y", 1, None)])
    mod, params = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    got = runtime.evaluate(mod, x, w, *params.values())
    p4 = (pads[0], pads[1], pads[2], pads[3])
    want = _naive_conv_transpose(x.astype("float64"), w.astype("float64"), (2, 1), p4, (3, 3),
                                 (2, 1), 1)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
