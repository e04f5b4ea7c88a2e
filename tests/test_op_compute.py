"""Registry-driven check of every operator's TVM compute against its numpy reference.

For each registered operator, every case below (shapes with broadcasting, every dtype the
relation and the reference accept, attribute variants) is built from ``OpDef.compute`` and all
cases of one operator are compiled together into one PrimFunc (one ``tvm.compile`` per
operator keeps the file fast). Integer and bool results must be equal; float results within a
per-dtype tolerance. An operator with neither a compute nor a host-only reason fails.
"""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from relay_ir.op import get_opdef, list_ops
from relay_ir.op._te import fast_math, host_only_reason
from relay_ir.ty import TensorType, TupleType

pytestmark = pytest.mark.tvm

ALL = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
       "float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
TOL = {"float16": (4e-3, 2e-3), "float32": (2e-5, 2e-5), "float64": (1e-10, 1e-10)}

_rng = np.random.default_rng(1234)


def gen(shape: Any, dtype: str, lo: float = -4.0, hi: float = 4.0) -> np.ndarray:
    """Random values of ``dtype`` in [lo, hi] (integers: the integer part, clipped to range)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.asarray(_rng.random(shape) < 0.5)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a, b = max(int(np.ceil(lo)), int(info.min)), min(int(np.floor(hi)), int(info.max))
        if a > b:
            a = b = max(0, int(info.min))
        return np.asarray(_rng.integers(a, b + 1, shape)).astype(dt)
    return np.asarray(_rng.uniform(lo, hi, shape)).astype(dt)


Case = tuple[list[Any], dict[str, Any]]

# ----------------------------------------------------------------------------- case tables
_UNARY_DOMAIN = {
    "log": (0.25, 8), "log2": (0.25, 8), "log10": (0.25, 8), "sqrt": (0, 8), "rsqrt": (0.25, 8),
    "asin": (-0.95, 0.95), "acos": (-0.95, 0.95), "atanh": (-0.9, 0.9), "acosh": (1, 8),
    "exp": (-5, 5), "sinh": (-4, 4), "cosh": (-4, 4), "tan": (-1.4, 1.4),
}
_UNARY = ["exp", "log", "log2", "log10", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos", "tan",
          "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "negative", "abs",
          "floor", "ceil", "trunc", "round", "sign", "copy", "logical_not", "bitwise_not",
          "zeros_like", "ones_like", "stop_gradient", "isnan", "isinf", "isfinite", "nn.relu",
          "erf"]


def unary_cases(name: str) -> Iterator[Case]:
    lo, hi = _UNARY_DOMAIN.get(name, (-6, 6))
    for dt in ALL:
        for shape in ((3, 5), ()):
            x = gen(shape, dt, lo, hi)
            if name == "round" and dt in FLOATS:
                x = np.concatenate([x.reshape(-1), np.array([2.5, -2.5, 0.5, -1.5], dt)])
            if name in ("isnan", "isinf", "isfinite", "erf") and dt in FLOATS:
                x = np.concatenate([x.reshape(-1), np.array([np.nan, np.inf, -np.inf], dt)])
            yield [x], {}


_BCAST_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (5,))]
_DIVLIKE = ("divide", "floor_divide", "mod", "floor_mod")


def binary_cases(name: str) -> Iterator[Case]:
    for dt, (sa, sb) in itertools.product(ALL, _BCAST_SHAPES):
        if dt not in ("int32", "float32") and sa != (2, 3, 4):
            continue  # every dtype once, broadcasting variants on two dtypes
        if name in _DIVLIKE:
            a = gen(sa, dt, -20, 20)
            if dt in FLOATS:
                b = (gen(sb, dt, 0.5, 3) * np.where(_rng.random(sb) < 0.5, -1, 1)).astype(dt)
            else:
                b = gen(sb, dt, -3, 3)  # includes 0 and -1: x/0 = 0, no trap on MIN/-1
        elif name == "power":
            a = gen(sa, dt, 0.5, 3) if dt in FLOATS else gen(sa, dt, -4, 4)
            b = gen(sb, dt, -2, 2) if dt in FLOATS else gen(sb, dt, -3, 9)
        else:
            a, b = gen(sa, dt, -5, 5), gen(sb, dt, -5, 5)
        yield [a, b], {}
    if name in ("divide", "mod", "floor_divide", "floor_mod"):
        for dt in ("int8", "int32", "int64"):
            info = np.iinfo(dt)
            yield [np.array([info.min, info.min, 7, -7, 0], dt),
                   np.array([-1, 0, 0, 2, -1], dt)], {}


_BINARY = ["add", "subtract", "multiply", "divide", "floor_divide", "mod", "floor_mod", "power",
           "maximum", "minimum", "logical_and", "logical_or", "logical_xor", "bitwise_and",
           "bitwise_or", "bitwise_xor", "less", "greater", "less_equal", "greater_equal",
           "equal", "not_equal"]


def _reduce_variants() -> list[dict[str, Any]]:
    return [{}, {"axis": (1,)}, {"axis": (0, 2), "keepdims": True},
            {"axis": (1,), "exclude": True}, {"axis": (-1,), "keepdims": True}, {"axis": ()}]


def reduce_cases(name: str) -> Iterator[Case]:
    dts = ("bool",) if name in ("all", "any") else ALL
    for dt in dts:
        for kw in (_reduce_variants() if dt in ("int32", "float32", "bool") else [{"axis": (1,)}]):
            lo, hi = (-1.5, 1.5) if name == "prod" else (-50, 50)
            yield [gen((3, 4, 5), dt, lo, hi)], kw


def arg_cases(name: str) -> Iterator[Case]:
    for dt in ALL:
        kws = _reduce_variants()[:5] if dt in ("int8", "float32") else [{"axis": (1,)}]
        for kw in kws:
            x = gen((3, 4, 5), dt, -3, 3)  # small range: ties exercise the index choice
            yield [x], kw
            if kw.get("axis") == (1,):
                yield [x], dict(kw, select_last_index=True)


def variance_cases() -> Iterator[Case]:
    for dt in ALL:
        x = gen((3, 4, 5), dt, -10, 10)
        for kw in ({"axis": (1,)}, {"axis": (0, 2), "keepdims": True, "unbiased": True}):
            axes = kw["axis"]
            m = x.astype("float64").mean(axis=axes, keepdims=True).astype(dt)
            yield [x, m], kw


def where_cases() -> Iterator[Case]:
    for dt in ALL:
        yield [gen((3, 4), "bool"), gen((3, 4), dt), gen((3, 4), dt)], {}
    yield [gen((3, 1), "bool"), gen((4,), "float32"), gen((2, 1, 1), "float32")], {}
    yield [gen((3, 4), "int32", -1, 1), gen((3, 4), "int8"), gen((), "int8")], {}
    yield [gen((3, 4), "float32", -1, 1), gen((3, 4), "int8"), gen((), "int8")], {}


def cast_cases() -> Iterator[Case]:
    for src, dst in itertools.product(ALL, ALL):
        x = gen((7,), src, -100, 100)
        if src in FLOATS and dst in INTS:
            x = gen((7,), src, 0 if dst.startswith("u") else -100, 100)  # in range: defined
        yield [x], {"dtype": dst}


def cast_like_cases() -> Iterator[Case]:
    for src, dst in (("float32", "int32"), ("int32", "float16"), ("float64", "bool"),
                     ("bool", "float32"), ("uint8", "int8")):
        yield [gen((3, 2), src, 0, 100), gen((1,), dst)], {}


def clip_cases() -> Iterator[Case]:
    for dt in ALL:
        yield [gen((4, 5), dt, -10, 10)], {"a_min": -2.5, "a_max": 3.7}
    yield [gen((9,), "uint8", 0, 255)], {"a_min": -5.0, "a_max": 300.0}
    yield [gen((9,), "float32")], {"a_min": 0.0, "a_max": 0.0}


def init_cases(name: str) -> Iterator[Case]:
    for dt in ALL:
        if name in ("zeros", "ones"):
            yield [], {"shape": (2, 3), "dtype": dt}
        else:
            yield [np.array(2.75, "float32")], {"shape": (2, 3), "dtype": dt}
    if name == "full":
        yield [np.array(-3, "int16")], {"shape": (4,)}
        yield [np.array(-3.5, "float64")], {"shape": (), "dtype": "int8"}


def full_like_cases() -> Iterator[Case]:
    for dt in ALL:
        yield [gen((2, 3), dt), np.array(-2.5, dt if dt in FLOATS else "float32")
               .astype(dt)], {}


def shape_of_cases() -> Iterator[Case]:
    yield [gen((2, 3, 4), "float32")], {}
    yield [gen((5,), "int8")], {"dtype": "int64"}
    yield [gen((), "bool")], {}


# ----------------------------------------------------------------------------- transform / nn
def _f(*shape: int, dt: str = "float32") -> np.ndarray:
    return gen(shape, dt)


def transform_cases(name: str) -> Iterator[Case]:
    x = _f(2, 3, 4)
    if name == "reshape":
        for ns in ((6, 4), (-1,), (0, -1), (-2,), (-3, 4), (-4, 1, 2, 0, -1), (4, 0, 2)):
            yield [x], {"newshape": ns}
        for dt in ALL:
            yield [gen((2, 3), dt)], {"newshape": (3, 2)}
    elif name == "reshape_like":
        yield [x, _f(6, 4)], {}
        yield [x, _f(4, 6, 9)], {"lhs_begin": 1, "rhs_end": 2, "rhs_begin": 0}
    elif name == "transpose":
        yield [x], {}
        yield [x], {"axes": (1, 2, 0)}
        for dt in ALL:
            yield [gen((2, 3), dt)], {"axes": (-1, 0)}
    elif name == "expand_dims":
        yield [x], {"axis": 1, "num_newaxis": 2}
        yield [x], {"axis": -1}
        yield [_f()], {"axis": 0}
    elif name == "squeeze":
        y = _f(2, 1, 3, 1)
        yield [y], {}
        yield [y], {"axis": (1,)}
        yield [y], {"axis": (-1, 1)}
    elif name == "concatenate":
        for dt in ALL:
            yield [(gen((2, 3), dt), gen((2, 1), dt), gen((2, 2), dt))], {"axis": -1}
        yield [(x, x)], {"axis": 0}
        # many pieces of unequal sizes: every branch of the balanced if_then_else tree
        yield [tuple(gen((k, 3), "float32") for k in (1, 3, 2, 5, 1, 4, 2))], {"axis": 0}
    elif name == "stack":
        for axis in (0, 1, -1):
            yield [(x, x * 2, x - 1)], {"axis": axis}
        yield [tuple(x + k for k in range(9))], {"axis": 1}
        yield [(gen((3,), "int8"),)], {}
    elif name == "split":
        yield [x], {"indices_or_sections": 2, "axis": 2}
        yield [x], {"indices_or_sections": (1, 3), "axis": -1}
        yield [x], {"indices_or_sections": 3, "axis": 1}
    elif name == "take":
        ind = gen((2, 5), "int32", -7, 9)  # out of range: clipped or wrapped
        for mode in ("clip", "wrap", "fast"):
            yield [x, ind], {"axis": 1, "mode": mode}
            yield [x, ind], {"mode": mode}
        yield [x, gen((2, 6), "int64", 0, 3)], {"axis": 2, "batch_dims": 1}
        yield [x, gen((), "uint8", 0, 9)], {"axis": 0}
        for dt in ALL:
            yield [gen((5,), dt), gen((3,), "int16", -1, 5)], {"axis": 0}
    elif name == "strided_slice":
        yield [x], {"begin": (1, 0), "end": (2, 3)}
        yield [x], {"begin": (0, 3), "end": (2, 0), "strides": (1, -1)}
        yield [x], {"begin": (-1,), "end": (-5,), "strides": (-2,), "axes": (2,)}
        yield [x], {"begin": (1, 1), "end": (2, -1), "slice_mode": "size", "axes": (1, 2)}
        yield [x], {"begin": (0, 0, 0), "end": (100, 100, 100), "strides": (1, 2, 3)}
    elif name == "broadcast_to":
        yield [_f(3, 1)], {"shape": (2, 3, 4)}
        yield [gen((), "int8")], {"shape": (2,)}
    elif name == "broadcast_to_like":
        yield [_f(1, 4), gen((2, 3, 4), "int8")], {}
    elif name == "collapse_sum_like":
        yield [x, _f(3, 1)], {}
        yield [x, _f(4)], {}
        yield [gen((2, 3), "int32"), gen((1, 3), "int32")], {}
    elif name == "collapse_sum_to":
        yield [x], {"shape": (1, 4)}
        yield [x], {"shape": (2, 1, 4)}
        yield [gen((2, 3), "float16")], {"shape": (3,)}
    elif name == "reverse":
        yield [x], {"axis": 1}
        yield [x], {"axis": -1}
    elif name == "tile":
        yield [x], {"reps": (2, 1, 2)}
        yield [_f(3)], {"reps": (2, 2)}
        yield [x], {"reps": (2,)}
    elif name == "repeat":
        yield [x], {"repeats": 2, "axis": 1}
        yield [x], {"repeats": 3, "axis": -1}


def matmul_cases(name: str) -> Iterator[Case]:
    for dt in ALL:
        lo, hi = (-3, 3)
        if name == "nn.dense":
            yield [gen((3, 5), dt, lo, hi), gen((4, 5), dt, lo, hi)], {}
        elif name == "nn.matmul":
            yield [gen((3, 5), dt, lo, hi), gen((5, 4), dt, lo, hi)], {}
        else:
            yield [gen((2, 3, 5), dt, lo, hi), gen((2, 4, 5), dt, lo, hi)], {}
    if name == "nn.dense":
        yield [_f(2, 3, 5), _f(4, 5)], {"units": 4}
        yield [gen((3, 5), "int8"), gen((4, 5), "int8")], {"out_dtype": "int32"}
        yield [gen((3, 5), "float16"), gen((4, 5), "float16")], {"out_dtype": "float32"}
    elif name == "nn.matmul":
        yield [_f(5, 3), _f(4, 5)], {"transpose_a": True, "transpose_b": True}
        yield [_f(3, 5), _f(4, 5)], {"transpose_b": True}
        yield [_f(5), _f(5, 4)], {}
        yield [gen((3, 5), "int16"), gen((5, 4), "int16")], {"out_dtype": "int64"}
    else:
        yield [_f(1, 5, 3), _f(2, 5, 4)], {"transpose_a": True, "transpose_b": False}
        yield [_f(2, 3, 5), _f(1, 4, 5)], {}
        yield [gen((2, 3, 5), "uint8"), gen((2, 4, 5), "uint8")], {"out_dtype": "int32"}


def nn_cases(name: str) -> Iterator[Case]:
    x4 = _f(2, 4, 7, 6)
    if name in ("nn.bias_add", "nn.prelu"):
        for dt in ALL:
            yield [gen((2, 3, 4), dt), gen((3,), dt)], {}
        yield [x4, _f(6)], {"axis": -1}
    elif name == "nn.leaky_relu":
        for dt in ALL:
            yield [gen((3, 4), dt, -6, 6)], {"alpha": 0.25}
        yield [_f(5)], {}
    elif name == "nn.gelu":
        for dt in FLOATS:
            for mode in ("none", "tanh"):
                yield [gen((3, 17), dt, -6, 6)], {"approximate": mode}
        yield [_f(2, 3, 4) * 30], {}
    elif name in ("nn.softmax", "nn.log_softmax"):
        for dt in FLOATS + ("int32",):
            yield [gen((3, 5), dt, -4, 4)], {}
            yield [gen((3, 5), dt, -4, 4)], {"axis": 0}
        yield [_f(2, 3, 4) * 20], {"axis": 1}
    elif name == "nn.conv2d":
        w = _f(6, 4, 3, 3)
        yield [x4, w], {}
        yield [x4, w], {"strides": (2, 1), "padding": (1, 2, 0, 1), "dilation": (1, 2)}
        yield [x4, _f(6, 2, 3, 3)], {"groups": 2, "padding": (1,)}
        yield [x4, _f(4, 1, 3, 3)], {"groups": 4, "padding": (1, 1)}
        yield [x4.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy()], \
            {"data_layout": "NHWC", "kernel_layout": "HWIO", "padding": (1, 1)}
        yield [x4, w], {"out_layout": "NHWC", "channels": 6, "kernel_size": (3, 3)}
        yield [gen((1, 3, 5, 5), "int8"), gen((2, 3, 2, 2), "int8")], {"out_dtype": "int32"}
        for dt in ALL:
            yield [gen((1, 2, 4, 4), dt, -3, 3), gen((2, 2, 2, 2), dt, -3, 3)], {}
    elif name in ("nn.max_pool2d", "nn.avg_pool2d"):
        yield [x4], {"pool_size": (2, 2), "strides": (2, 2)}
        yield [x4], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1,), "ceil_mode": True}
        yield [x4.transpose(0, 2, 3, 1).copy()], {"pool_size": (3, 2), "layout": "NHWC",
                                                  "dilation": (2, 1)}
        yield [x4], {"pool_size": (2, 3), "padding": (1, 1, 0, 2)}
        for dt in ALL:
            yield [gen((1, 2, 5, 5), dt, -20, 20)], {"pool_size": (2, 2), "padding": (1, 0)}
        if name == "nn.avg_pool2d":
            yield [x4], {"pool_size": (3, 3), "padding": (1,), "count_include_pad": True}
            yield [x4], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1,),
                         "ceil_mode": True, "count_include_pad": True}
    elif name in ("nn.global_avg_pool2d", "nn.global_max_pool2d"):
        for dt in ALL:
            yield [gen((2, 3, 4, 5), dt, -20, 20)], {}
        yield [x4.transpose(0, 2, 3, 1).copy()], {"layout": "NHWC"}
    elif name == "nn.batch_flatten":
        yield [x4], {}
        yield [gen((3, 2), "int8")], {}
    elif name == "nn.pad":
        for mode in ("constant", "edge", "reflect"):
            yield [_f(3, 4), np.array(1.5, "float32")], {"pad_width": ((1, 2), (3, 0)),
                                                         "pad_mode": mode}
        yield [_f(1, 3), np.array(0, "float32")], {"pad_width": ((1, 2), (7, 9)),
                                                   "pad_mode": "reflect"}
        for dt in ALL:
            yield [gen((2, 3), dt), np.array(7, dt)], {"pad_width": ((1, 0), (0, 2))}
    elif name == "nn.layer_norm":
        for dt in FLOATS:
            yield [gen((2, 3, 6), dt), gen((6,), dt), gen((6,), dt)], {}
        yield [x4, _f(4), _f(4)], {"axis": 1, "center": False}
        yield [x4, _f(6), _f(6)], {"scale": False, "epsilon": 0.1}
    elif name == "nn.batch_norm":
        for dt in FLOATS:
            yield [gen((2, 3, 4), dt), gen((3,), dt), gen((3,), dt), gen((3,), dt),
                   gen((3,), dt, 0.5, 2)], {}
        yield [x4, _f(6), _f(6), _f(6), gen((6,), "float32", 0.5, 2)], {"axis": -1,
                                                                          "scale": False}
    elif name == "nn.dropout":
        for dt in ALL:
            yield [gen((3, 4), dt)], {"rate": 0.25}
    elif name == "nn.cross_entropy":
        for dt in FLOATS:
            p = gen((3, 5), dt, 0.05, 1)
            yield [p, gen((3, 5), dt, 0, 1)], {}


def case_table() -> dict[str, Callable[[], Iterator[Case]]]:
    """Operator name -> its case generator."""
    t: dict[str, Callable[[], Iterator[Case]]] = {}
    for n in _UNARY:
        t[n] = (lambda n: lambda: unary_cases(n))(n)
    for n in _BINARY:
        t[n] = (lambda n: lambda: binary_cases(n))(n)
    for n in ("sum", "prod", "max", "min", "mean", "all", "any"):
        t[n] = (lambda n: lambda: reduce_cases(n))(n)
    for n in ("argmax", "argmin"):
        t[n] = (lambda n: lambda: arg_cases(n))(n)
    t["variance"] = variance_cases
    t["where"] = where_cases
    t["cast"] = cast_cases
    t["cast_like"] = cast_like_cases
    t["clip"] = clip_cases
    for n in ("zeros", "ones", "full"):
        t[n] = (lambda n: lambda: init_cases(n))(n)
    t["full_like"] = full_like_cases
    t["shape_of"] = shape_of_cases
    for n in ("reshape", "reshape_like", "transpose", "expand_dims", "squeeze", "concatenate",
              "stack", "split", "take", "strided_slice", "broadcast_to", "broadcast_to_like",
              "collapse_sum_like", "collapse_sum_to", "reverse", "tile", "repeat"):
        t[n] = (lambda n: lambda: transform_cases(n))(n)
    for n in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
        t[n] = (lambda n: lambda: matmul_cases(n))(n)
    for n in ("nn.bias_add", "nn.prelu", "nn.leaky_relu", "nn.gelu", "nn.softmax", "nn.log_softmax",
              "nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d",
              "nn.global_max_pool2d", "nn.batch_flatten", "nn.pad", "nn.layer_norm",
              "nn.batch_norm", "nn.dropout", "nn.cross_entropy"):
        t[n] = (lambda n: lambda: nn_cases(n))(n)
    for n in _GRAD_OPS:
        t[n] = (lambda n: lambda: grad_op_cases(n))(n)
    for n in ("annotation.checkpoint", "annotation.compiler_begin", "annotation.compiler_end",
              "annotation.stop_fusion", "device_copy", "on_device"):
        t[n] = identity_cases
    t["layout_transform"] = layout_transform_cases
    return t


def identity_cases() -> Iterator[Case]:
    """Annotations and device placement: the value itself, in every dtype."""
    for dt in ALL:
        yield [gen((2, 3), dt)], {}


def layout_transform_cases() -> Iterator[Case]:
    for dt in ("float32", "int8", "float16", "bool"):
        yield [gen((1, 8, 3, 2), dt)], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}
        yield [gen((2, 6, 3, 2), dt)], {"src_layout": "NCHW", "dst_layout": "NHWC"}
    yield [gen((1, 2, 3, 2, 4), "float32")], {"src_layout": "NCHW4c", "dst_layout": "NCHW"}
    yield [gen((1, 6, 3, 2), "float32")], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}


_GRAD_OPS = ("nn.conv2d_backward_data", "nn.conv2d_backward_weight", "nn.max_pool2d_grad",
             "nn.max_pool2d_gather", "nn.avg_pool2d_grad", "strided_slice_grad", "take_grad")


def grad_op_cases(name: str) -> Iterator[Case]:
    """The gradient operators' cases of test_op_compute_grad, in every float dtype (a case
    whose float arguments are all float32 already runs as it is in test_op_compute_grad)."""
    from test_op_compute_grad import CASES as GRAD_CASES
    for op_name, args, kw in GRAD_CASES:
        if op_name != name:
            continue
        floats = {a.dtype.name for a in args if a.dtype.kind == "f"}
        for dt in FLOATS:
            if floats == {dt}:
                continue
            yield [a.astype(dt) if a.dtype.kind == "f" else a for a in args], kw


CASES = case_table()


# opsa (issue 23): the indexing and scan operators of relay_ir/op/indexing_ext.py
def indexing_ext_cases(name: str) -> Iterator[Case]:
    x = gen((3, 4, 5), "float32")
    if name == "gather":
        for it in ("int32", "int64", "uint8"):
            yield [x, gen((3, 6, 5), it, -4, 5)], {"axis": 1}  # negative and out of range
        yield [x, gen((2, 2, 2), "int64", -5, 4)], {"axis": -1}
        for dt in ALL:
            yield [gen((4, 3), dt), gen((2, 3), "int32", -4, 3)], {"axis": 0}
    elif name == "gather_nd":
        yield [x, gen((2, 3, 2), "int32", -3, 3)], {}
        yield [x, gen((3, 7), "int64", -3, 4)], {}
        yield [x, gen((1, 3, 2), "int64", -4, 3)], {"batch_dims": 1}
        yield [x, gen((2, 3, 4), "int32", -3, 4)], {"batch_dims": 1}
        for dt in ("int8", "bool", "float64", "float16"):
            yield [gen((4, 3), dt), gen((1, 5), "int32", -4, 3)], {}
    elif name == "scatter_elements":
        for red in ("update", "add", "mul", "min", "max"):
            for dt in ("float32", "int32") if red in ("update", "mul") else ("float32",):
                d = gen((4, 5), dt)
                yield [d, gen((3, 5), "int64", -4, 3), gen((3, 5), dt)], {"reduction": red}
            yield [x, gen((3, 6, 2), "int32", -4, 3), gen((3, 6, 2), "float32")],\
                {"axis": 1, "reduction": red}
            # data far larger than the indices off the axis (the guarded reads)
            yield [gen((300, 6), "float32"), gen((2, 3), "int64", -6, 5), gen((2, 3), "float32")],\
                {"axis": 1, "reduction": red}
    elif name == "scatter_nd":
        for mode in ("update", "add", "mul", "min", "max"):
            for dt in ("float32", "int32") if mode in ("update", "max") else ("float32",):
                yield [gen((4, 5), dt), gen((1, 6), "int64", -4, 3), gen((6, 5), dt)],\
                    {"mode": mode}
            yield [x, gen((2, 2, 3), "int32", -3, 3), gen((2, 3, 5), "float32")], {"mode": mode}
            yield [x, gen((3, 4), "int32", -3, 2), gen((4,), "float32")], {"mode": mode}
        yield [x, gen((2,), "int64", 0, 2), gen((5,), "float32")], {}
        yield [gen((4, 5), "float64"), gen((3, 5), "int64", -4, 3), gen((3, 5), "float64")],\
            {"mode": "add"}
        # -0.0 data no update hits stays -0.0; a NaN update propagates through max and min
        z = np.array([[-0.0, -0.0], [1.0, -0.0]], "float32")
        for mode in ("add", "mul", "max", "min"):
            yield [z, np.array([[1]]), np.array([[np.nan, 2.0]], "float32")], {"mode": mode}
    elif name == "one_hot":
        for it in ("int32", "int64", "int8"):
            yield [gen((2, 3), it, -5, 5), np.array(2.5, "float32"), np.array(-1, "float32")],\
                {"depth": 4}
        yield [gen((3,), "int32", -3, 3), np.array(7, "int32"), np.array(1, "int32")],\
            {"depth": 3, "axis": 0, "dtype": "float16"}
        yield [gen((2, 2), "int64", 0, 3), np.array(1, "int8"), np.array(0, "int8")],\
            {"depth": 3, "axis": 1}
    elif name == "cumsum":
        for ex in (False, True):
            for rev in (False, True):
                yield [x], {"axis": 1, "exclusive": ex, "reverse": rev}
                yield [gen((7,), "int32")], {"axis": 0, "exclusive": ex, "reverse": rev}
        yield [x], {}
        yield [x], {"axis": -1, "dtype": "float64"}
        yield [gen((3, 4), "int8")], {"axis": 0, "dtype": "int64"}
        yield [np.array([-0.0, -0.0, 1.0], "float32")], {"axis": 0}
        yield [gen((2, 6), "float16")], {"axis": 1}
        # a long axis: the blocked scan (a partial last block)
        for ex in (False, True):
            for rev in (False, True):
                yield [gen((2, 103, 3), "float32")], {"axis": 1, "exclusive": ex, "reverse": rev}
        yield [gen((70,), "int64")], {"axis": 0, "exclusive": True}
        yield [np.array([-0.0] * 80, "float32")], {"axis": 0}
        yield [np.array([-0.0] * 80, "float32")], {"axis": 0, "exclusive": True}
    elif name == "cumprod":
        y = gen((3, 4, 5), "float32", 0.5, 1.5)
        for ex in (False, True):
            for rev in (False, True):
                yield [y], {"axis": 1, "exclusive": ex, "reverse": rev}
                yield [gen((7,), "int32", -3, 3)], {"axis": 0, "exclusive": ex, "reverse": rev}
        yield [y], {}
        yield [gen((3, 4), "int8")], {"axis": 0, "dtype": "int64"}
        yield [np.array([2.0, 0.0, np.inf, -0.0, 3.0], "float32")], {"axis": 0}
        for ex in (False, True):
            for rev in (False, True):
                yield [gen((2, 3, 90), "float64", 0.9, 1.1)],\
                    {"axis": -1, "exclusive": ex, "reverse": rev}
        yield [gen((66,), "int32", -2, 2)], {"axis": 0, "reverse": True}
    elif name == "arange":
        yield [], {"stop": 5.0}
        yield [], {"start": 1.0, "stop": 2.0, "step": 0.25, "dtype": "float64"}
        yield [], {"start": 10.0, "stop": 1.0, "step": -3.0, "dtype": "int32"}
        yield [], {"start": -1.5, "stop": 3.0, "step": 0.5, "dtype": "float16"}
        yield [], {"start": 0.0, "stop": 7.0, "step": 2.0, "dtype": "int64"}
    elif name == "einsum":
        a, b, c = gen((2, 3, 4), "float32"), gen((2, 4, 5), "float32"), gen((5,), "float32")
        yield [(a, b)], {"equation": "bij,bjk->bik"}
        yield [(a, b, c)], {"equation": "bij,bjk,k->bi"}
        yield [(gen((3, 3), "float32"),)], {"equation": "ii"}
        yield [(gen((3, 3), "float32"),)], {"equation": "ii->i"}
        yield [(a,)], {"equation": "ijk->kji"}
        yield [(a, gen((4, 5), "float32"))], {"equation": "...j,jk"}
        yield [(gen((3,), "int32"), gen((4,), "int32"))], {"equation": "i,j->ij"}
        yield [(gen((3, 4), "float16"), gen((4,), "float16"))], {"equation": "ij,j->i"}
        yield [(gen((3, 4), "float64"), gen((3, 4), "float64"))], {"equation": "ij,ij->"}


for _n in ("gather", "gather_nd", "scatter_elements", "scatter_nd", "one_hot", "cumsum",
           "cumprod", "arange", "einsum"):
    CASES[_n] = (lambda n: lambda: indexing_ext_cases(n))(_n)


# ----------------------------------------------------------------------------- part opsb (issue 23)
def opsb_cases(name: str) -> Iterator[Case]:
    """Sorting, transposed/1-d convolutions, instance/group norm, resize."""
    if name in ("topk", "argsort", "sort"):
        ties = np.array([[1.0, 3.0, 3.0, -2.0, np.nan, 0.0, -0.0, 3.0],
                         [2.0, 2.0, 0.5, 2.0, -np.inf, np.inf, 2.0, np.nan]], "float32")
        for asc in (False, True):
            if name == "topk":
                yield [ties], {"k": 5, "is_ascend": asc}
                yield [ties.astype("float64")], {"k": 3, "axis": 1, "is_ascend": asc,
                                                  "ret_type": "values"}
            else:
                yield [ties], {"is_ascend": asc}
            for dt in ("int8", "uint8", "int64", "float16", "bool"):
                kw: dict[str, Any] = {"is_ascend": asc, "axis": 0}
                if name == "topk":
                    kw.update(k=2, ret_type="indices", dtype="int64")
                yield [gen((5, 3), dt, -3, 3)], kw
    elif name == "nn.conv2d_transpose":
        x = _f(2, 4, 4, 5)
        yield [x, _f(4, 3, 3, 3)], {}
        yield [x, _f(4, 3, 3, 2)], {"strides": (2, 3), "padding": (1, 0, 2, 1),
                                    "dilation": (1, 2), "output_padding": (1, 2), "groups": 2}
        yield [x, _f(4, 1, 3, 3)], {"groups": 4, "strides": (2, 2), "padding": (1,)}
        yield [x.transpose(0, 2, 3, 1).copy(), _f(3, 3, 2, 4)], \
            {"data_layout": "NHWC", "kernel_layout": "HWOI", "strides": (2, 2)}
        for dt in ("float16", "float64", "int32"):
            yield [gen((1, 2, 3, 3), dt, -3, 3), gen((2, 2, 2, 2), dt, -3, 3)], {"strides": (2, 2)}
    elif name == "nn.conv1d":
        yield [_f(2, 4, 9), _f(6, 2, 3)], {"strides": (2,), "padding": (1, 2), "dilation": (2,),
                                           "groups": 2}
        yield [_f(1, 7, 3), _f(3, 3, 5)], {"data_layout": "NWC", "kernel_layout": "WIO",
                                           "padding": (1,)}
        yield [gen((1, 3, 6), "int8"), gen((2, 3, 2), "int8")], {"out_dtype": "int32"}
    elif name == "nn.conv1d_transpose":
        yield [_f(2, 4, 9), _f(4, 3, 3)], {"strides": (2,), "padding": (1, 2),
                                           "output_padding": (1,), "groups": 2}
        yield [_f(1, 3, 5), _f(3, 2, 4)], {"dilation": (2,)}
    elif name in ("nn.instance_norm", "nn.group_norm"):
        extra = {"num_groups": 3} if name == "nn.group_norm" else {}
        for dt in FLOATS:
            yield [gen((2, 6, 3, 4), dt), gen((6,), dt), gen((6,), dt)], dict(extra)
        yield [_f(2, 5, 6), _f(6), _f(6)], dict(extra, axis=-1, center=False)
        yield [_f(3, 6, 4), _f(6), _f(6)], dict(extra, scale=False, epsilon=0.1)
    elif name == "image.resize2d":
        x = _f(2, 3, 4, 5)
        for method in ("nearest_neighbor", "linear", "cubic"):
            for mode in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                         "tf_half_pixel_for_nn"):
                yield [x], {"size": (7, 3), "method": method,
                            "coordinate_transformation_mode": mode}
        yield [x], {"size": (8, 10), "method": "cubic", "cubic_alpha": -0.75,
                    "cubic_exclude": 1}
        yield [x], {"size": (1, 1), "coordinate_transformation_mode": "pytorch_half_pixel"}
        yield [x], {"size": (5, 4), "roi": (0.2, -0.3, 1.2, 0.9),
                    "coordinate_transformation_mode": "tf_crop_and_resize",
                    "extrapolation_value": 2.5}
        for r in ("round", "round_prefer_floor", "round_prefer_ceil", "ceil"):
            yield [x], {"size": (8, 10), "method": "nearest_neighbor", "rounding_method": r}
        yield [x.transpose(0, 2, 3, 1).copy()], {"size": (6, 6), "layout": "NHWC"}
        for dt in ALL:
            yield [gen((1, 2, 3, 3), dt)], {"size": (5, 2), "method": "nearest_neighbor"}
        for dt in ("float16", "float64"):
            yield [gen((1, 2, 3, 3), dt)], {"size": (5, 2), "method": "cubic"}


for _n in ("topk", "argsort", "sort", "nn.conv2d_transpose", "nn.conv1d", "nn.conv1d_transpose",
           "nn.instance_norm", "nn.group_norm", "image.resize2d"):
    CASES[_n] = (lambda n: lambda: opsb_cases(n))(_n)


# ----------------------------------------------------------------------------- harness
def _type_of(v: Any) -> Any:
    if isinstance(v, tuple):
        return TupleType(tuple(_type_of(x) for x in v))
    return TensorType(tuple(v.shape), str(v.dtype))


def _target() -> Any:
    import tvm
    from tvm.target import codegen
    return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})


def reference(name: str, args: list[Any], kw: dict[str, Any]) -> list[np.ndarray] | None:
    """The reference result, or None when the reference rejects these inputs."""
    od = get_opdef(name)
    attrs = od.make_attrs(kw)
    try:
        od.type_rel([_type_of(a) for a in args], attrs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                r = od.impl(list(args), attrs)
    except Exception:  # NOTE: the relation or numpy rejects the inputs (many error kinds)
        return None
    return list(r) if isinstance(r, tuple) else [r]


def _reader(t: Any) -> Callable[..., Any]:
    """``lambda *i: t(*i)`` without keyword arguments (te.compute rejects them)."""
    return lambda *i: t(*i)


# NOTE: TVM's s_tir.CompactBufferAllocation grows faster than linearly with the number of
# intermediate buffers in one PrimFunc: the 24 nn.max_pool2d_grad cases (one argmax buffer
# each) took 72-131 s compiled together and about 0.3-1 s each compiled alone. Cases are
# therefore compiled together only up to this many intermediate stages per PrimFunc.
MAX_STAGES = 2
# NOTE: LLVM's code generation (at the first lookup of ``main``) also grows faster than
# linearly with the size of one function: 144 cast cases took 15-20 s together.
MAX_CASES = 16


def _intermediate_stages(outs: list[Any]) -> int:
    """How many compute stages, other than the outputs themselves, ``outs`` read."""
    from tvm import te
    seen: set[Any] = set()
    stack = [t.op for t in outs]
    count = 0
    while stack:
        op = stack.pop()
        if op in seen or isinstance(op, te.PlaceholderOp):
            continue
        seen.add(op)
        count += not any(op.same_as(t.op) for t in outs)
        stack.extend(t.op for t in op.input_tensors)
    return count


def _compile_together(cases: list[tuple[list[Any], list[np.ndarray], list[Any]]]
                      ) -> list[list[np.ndarray]]:
    """Compile the ``(placeholders, feeds, outputs)`` of several cases into one PrimFunc, run
    it once, return each case's outputs."""
    import tvm
    from tvm import te
    params = [p for c in cases for p in c[0]]
    feeds = [f for c in cases for f in c[1]]
    # NOTE: a compute may return an input unchanged (a no-op cast); copy it so it is an output
    fixed = []
    for o in (o for c in cases for o in c[2]):
        if any(o.same_as(p) for p in params):
            o = te.compute(o.shape, _reader(o), name="T_id")
        fixed.append(o)
    func = te.create_prim_func(params + fixed)
    ex = tvm.compile(func, target=_target())
    nd_in = [tvm.runtime.tensor(np.array(a, order="C")) for a in feeds]
    nd_out = [tvm.runtime.empty([int(d) for d in o.shape], o.dtype) for o in fixed]
    ex["main"](*nd_in, *nd_out)
    got = [o.numpy() for o in nd_out]
    result, k = [], 0
    for c in cases:
        result.append(got[k:k + len(c[2])])
        k += len(c[2])
    return result


def compile_cases(name: str, cases: list[Case]) -> list[list[np.ndarray]]:
    """Build every case's compute, compile them together into as few PrimFuncs as
    ``MAX_STAGES`` allows (usually one), run, return the outputs."""
    from tvm import te
    od = get_opdef(name)
    built: list[tuple[list[Any], list[np.ndarray], list[Any]]] = []
    for ci, (args, kw) in enumerate(cases):
        attrs = od.make_attrs(kw)
        rel = od.type_rel([_type_of(a) for a in args], attrs)
        out_t = rel[0] if isinstance(rel, tuple) else rel
        phs: list[Any] = []
        params: list[Any] = []
        feeds: list[np.ndarray] = []
        for ai, a in enumerate(args):
            if isinstance(a, tuple):
                group = [te.placeholder(f.shape, str(f.dtype), name=f"c{ci}a{ai}f{k}")
                         for k, f in enumerate(a)]
                phs.append(group)
                params.extend(group)
                feeds.extend(a)
            else:
                p = te.placeholder(a.shape, str(a.dtype), name=f"c{ci}a{ai}")
                phs.append(p)
                params.append(p)
                feeds.append(a)
        res = od.compute(attrs, phs, out_t)
        built.append((params, feeds, list(res) if isinstance(res, (list, tuple)) else [res]))
    result: list[list[np.ndarray]] = []
    chunk: list[tuple[list[Any], list[np.ndarray], list[Any]]] = []
    stages = 0
    for case in built:
        n = _intermediate_stages(case[2])
        if chunk and (stages + n > MAX_STAGES or len(chunk) == MAX_CASES):
            result.extend(_compile_together(chunk))
            chunk, stages = [], 0
        chunk.append(case)
        stages += n
    result.extend(_compile_together(chunk))
    return result


def assert_same(name: str, case: Case, got: np.ndarray, want: np.ndarray) -> None:
    """Exact for integers and bools; per-dtype tolerance for floats."""
    args, kw = case
    what = f"{name} {kw} on {[getattr(a, 'dtype', 'tuple') for a in args]}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind == "f":
        rtol, atol = TOL[want.dtype.name]
        scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=1.0))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_op(name: str) -> int:
    """Compile and compare every accepted case of ``name``; returns how many ran."""
    cases = []
    wants = []
    for args, kw in CASES[name]():
        r = reference(name, args, kw)
        if r is not None:
            cases.append((args, kw))
            wants.append(r)
    assert cases, f"{name}: the reference accepted none of the cases"
    gots = compile_cases(name, cases)
    for case, got, want in zip(cases, gots, wants):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(name, case, g, w)
    return len(cases)


# ----------------------------------------------------------------------------- tests
def test_every_op_has_compute_or_host_only_reason() -> None:
    missing = [od.name for od in list_ops() if od.compute is None and not host_only_reason(od)]
    assert not missing, f"operators without compute or host-only reason: {missing}"


def test_every_compiled_op_has_cases() -> None:
    untested = [od.name for od in list_ops() if od.compute is not None and od.name not in CASES]
    assert not untested, f"operators with a compute but no cases here: {untested}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_compute_matches_reference(name: str) -> None:
    with fast_math(None):
        assert check_op(name) > 0


def _run_func(tensors: list[Any], feeds: list[np.ndarray], out_shapes: list[tuple[int, ...]]
              ) -> list[np.ndarray]:
    import tvm
    from tvm import te
    n_in = len(feeds)
    ex = tvm.compile(te.create_prim_func(tensors), target=_target())
    outs = [tvm.runtime.empty(s, str(t.dtype)) for s, t in zip(out_shapes, tensors[n_in:])]
    ex["main"](*[tvm.runtime.tensor(a) for a in feeds], *outs)
    return [o.numpy() for o in outs]


def _stage_names(t: Any) -> set[str]:
    """Names of every te stage ``t`` depends on."""
    seen: set[str] = set()
    todo = [t]
    while todo:
        x = todo.pop()
        if x.op.name in seen:
            continue
        seen.add(x.op.name)
        todo.extend(getattr(x.op, "input_tensors", []))
    return seen


def test_symbolic_dims_compile_once_run_many() -> None:
    import tvm
    from tvm import te
    n = te.var("n")
    ops = {"add": ([(n, 4), (4,)], {}), "sum": ([(n, 4)], {"axis": (0,)}),
           "nn.dense": ([(n, 4), (3, 4)], {}), "nn.softmax": ([(n, 4)], {}),
           "mean": ([(2, n)], {"axis": (1,), "keepdims": True})}
    for name, (shapes, kw) in ops.items():
        od = get_opdef(name)
        attrs = od.make_attrs(kw)
        phs = [te.placeholder(s, "float32", name=f"p{i}") for i, s in enumerate(shapes)]
        out = od.compute(attrs, phs, TensorType((), "float32"))  # only the dtype is read
        ex = tvm.compile(te.create_prim_func([*phs, out]), target=_target())
        for nv in (1, 5):
            feeds = [gen(tuple(nv if d is n else d for d in s), "float32") for s in shapes]
            want = od.impl(feeds, attrs)
            got = tvm.runtime.empty(want.shape, "float32")
            ex["main"](*[tvm.runtime.tensor(f) for f in feeds], got)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_fast_math_option_switches_forms_and_stays_accurate() -> None:
    from tvm import te
    from relay_ir.op._te import use_fast
    od = get_opdef("exp")
    attrs = od.make_attrs({})
    x = te.placeholder((8,), "float32", name="x")
    with fast_math(False):
        slow = od.compute(attrs, [x], TensorType((8,), "float32"))
    with fast_math(True):
        fast = od.compute(attrs, [x], TensorType((8,), "float32"))
    assert not any("fast_exp" in s for s in _stage_names(slow))
    assert any("fast_exp" in s for s in _stage_names(fast))
    assert use_fast("exp", "float32") and not use_fast("exp", "float16")
    with fast_math(False):
        assert not use_fast("exp", "float32")
    assert not use_fast("log", "float32")  # not in the default set
    pts = np.array([-87.0, -1e-3, 0.0, 1.0, 50.0, 88.3, 88.5, 88.7], np.float32)
    (got,) = _run_func([x, fast], [pts], [(8,)])
    want = np.exp(pts.astype(np.float64))
    # NOTE: 88.5 and 88.7 are finite in float32; TOPI's fast_exp alone overflows there
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with fast_math(True):
        big = od.compute(attrs, [x], TensorType((8,), "float32"))
    (got,) = _run_func([x, big], [np.array([89.0, 100.0, -104.0, np.nan, 0, 0, 0, 0],
                                           np.float32)], [(8,)])
    assert np.isinf(got[0]) and np.isinf(got[1]) and got[2] == 0.0 and np.isnan(got[3])


def test_opdef_host_only_field_reads_back() -> None:
    from relay_ir.op import OpDef
    od = OpDef(name="test.host_only_probe", num_inputs=1, host_only="shape depends on data")
    assert host_only_reason(od) == "shape depends on data"
    assert host_only_reason(get_opdef("add")) == ""
