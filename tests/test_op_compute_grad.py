"""The TVM computes of the gradient operators (ad's new ops) against their numpy references.

Each case builds ``OpDef.compute`` on te placeholders, compiles it for llvm and compares the
kernel's result with ``OpDef.impl`` on the same random inputs (float32 within 1e-5, float64
within 1e-10), over strides, padding, dilation, groups, ceil_mode and non-NCHW layouts.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from relay_ir.op import get_opdef
from relay_ir.ty import TensorType

pytestmark = pytest.mark.tvm

_rng = np.random.default_rng(7)

Case = tuple[str, list[np.ndarray], dict[str, Any]]


def _r(*shape: int, dtype: str = "float32") -> np.ndarray:
    return _rng.uniform(-2, 2, shape).astype(dtype)


def _ints(*shape: int) -> np.ndarray:
    """Small integers as float32: window maxima tie, which exercises the first-max rule."""
    return _rng.integers(0, 3, shape).astype("float32")


def _conv_cases() -> list[Case]:
    cases: list[Case] = []
    for attrs, xs, ws in [
        ({}, (2, 3, 6, 6), (4, 3, 3, 3)),
        ({"strides": [2, 2], "padding": [1, 1]}, (1, 2, 7, 7), (3, 2, 3, 3)),
        ({"dilation": [2, 1], "padding": [2, 1, 0, 1]}, (1, 2, 8, 6), (2, 2, 3, 2)),
        ({"groups": 2, "strides": [1, 2]}, (2, 4, 5, 6), (6, 2, 2, 3)),
    ]:
        x, w = _r(*xs), _r(*ws)
        g = get_opdef("nn.conv2d").impl([x, w], get_opdef("nn.conv2d").make_attrs(attrs))
        gr = _r(*g.shape)
        cases.append(("nn.conv2d_backward_data", [gr, w, x], attrs))
        cases.append(("nn.conv2d_backward_weight", [gr, x, w], attrs))
    # NHWC / HWIO layouts, float64
    x, w = _r(1, 5, 5, 2, dtype="float64"), _r(3, 3, 2, 4, dtype="float64")
    attrs = {"data_layout": "NHWC", "kernel_layout": "HWIO", "padding": [1, 1]}
    g = get_opdef("nn.conv2d").impl([x, w], get_opdef("nn.conv2d").make_attrs(attrs))
    gr = _r(*g.shape, dtype="float64")
    cases.append(("nn.conv2d_backward_data", [gr, w, x], attrs))
    cases.append(("nn.conv2d_backward_weight", [gr, x, w], attrs))
    return cases


def _pool_cases() -> list[Case]:
    cases: list[Case] = []
    for attrs, xs in [
        ({"pool_size": [2, 2], "strides": [2, 2]}, (1, 2, 6, 6)),
        ({"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}, (2, 2, 7, 7)),
        ({"pool_size": [3, 2], "strides": [1, 2], "dilation": [2, 1], "ceil_mode": True},
         (1, 3, 9, 7)),
        ({"pool_size": [2, 2], "strides": [1, 1], "layout": "NHWC", "padding": [1, 0, 0, 1]},
         (1, 5, 5, 3)),
    ]:
        for x in (_r(*xs), _ints(*xs)):
            p = get_opdef("nn.max_pool2d").impl([x], get_opdef("nn.max_pool2d").make_attrs(attrs))
            cases.append(("nn.max_pool2d_grad", [_r(*p.shape), x], attrs))
            cases.append(("nn.max_pool2d_gather", [x, _r(*x.shape)], attrs))
        for cip in (False, True):
            a = dict(attrs, count_include_pad=cip)
            p = get_opdef("nn.avg_pool2d").impl([xs and _r(*xs)],
                                                get_opdef("nn.avg_pool2d").make_attrs(a))
            cases.append(("nn.avg_pool2d_grad", [_r(*p.shape), _r(*xs)], a))
    return cases


def _slice_cases() -> list[Case]:
    cases: list[Case] = []
    for attrs, xs in [
        ({"begin": [1, 0], "end": [8, 8], "strides": [3, 2]}, (10, 8)),
        ({"begin": [-1], "end": [-8], "strides": [-2]}, (9, 4)),
        ({"begin": [2], "end": [3], "axes": [1], "slice_mode": "size"}, (3, 7, 2)),
    ]:
        x = _r(*xs)
        y = get_opdef("strided_slice").impl([x], get_opdef("strided_slice").make_attrs(attrs))
        cases.append(("strided_slice_grad", [_r(*y.shape), x], attrs))
    return cases


def _take_cases() -> list[Case]:
    ind = np.array([0, 2, 2, 4, -1, 9], "int32")
    return [
        ("take_grad", [_r(6, 4), _r(5, 4), ind], {"axis": 0}),
        ("take_grad", [_r(6), _r(5, 4), ind], {"mode": "wrap"}),
        ("take_grad", [_r(3, 6, 2), _r(3, 5, 2), ind], {"axis": 1, "mode": "wrap"}),
        ("take_grad", [_r(2, 3), _r(2, 4), np.array([[1, 1, 3], [0, 2, 2]], "int64")],
         {"axis": 1, "batch_dims": 1}),
        ("take_grad", [_r(4), _r(5, 4), np.array(3, "int32")], {"axis": 0}),
    ]


CASES = _conv_cases() + _pool_cases() + _slice_cases() + _take_cases()


def _run(name: str, args: list[np.ndarray], attrs: dict[str, Any]) -> tuple[np.ndarray, Any]:
    import tvm
    from tvm import te
    od = get_opdef(name)
    at = od.make_attrs(attrs)
    ref = np.asarray(od.impl(args, at))
    ph = [te.placeholder(a.shape, str(a.dtype), name=f"a{i}") for i, a in enumerate(args)]
    out = od.compute(at, ph, TensorType(ref.shape, str(ref.dtype)))
    ex = tvm.compile(te.create_prim_func(ph + [out]), target="llvm")
    res = tvm.runtime.empty(ref.shape, str(ref.dtype))
    ex["main"](*[tvm.runtime.tensor(a) for a in args], res)
    return res.numpy(), ref


@pytest.mark.parametrize("case", range(len(CASES)))
def test_grad_op_compute_matches_reference(case: int) -> None:
    name, args, attrs = CASES[case]
    got, ref = _run(name, args, attrs)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    tol = 1e-10 if ref.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol, err_msg=f"{name} {attrs}")


def test_every_gradient_operator_has_a_compute() -> None:
    names = {c[0] for c in CASES}
    assert names == {"nn.conv2d_backward_data", "nn.conv2d_backward_weight",
                     "nn.max_pool2d_grad", "nn.max_pool2d_gather", "nn.avg_pool2d_grad",
                     "strided_slice_grad", "take_grad"}
    assert all(get_opdef(n).compute is not None for n in names)


def test_every_op_has_a_compute_or_a_host_only_reason() -> None:
    from relay_ir.op import list_ops
    missing = [od.name for od in list_ops() if od.compute is None and not od.host_only]
    assert missing == []
    host = sorted(od.name for od in list_ops() if od.host_only)
    assert host and all(n.startswith("dyn.") for n in host)
    assert "values at run time" in get_opdef("dyn.reshape").host_only
