"""Registry-driven tests of the operator gradient rules (``OpDef.grad``).

For each case: the rule, run by the interpreter, against float64 central finite differences
of the operator's numpy implementation (``<rule(g), dx>`` vs ``<g, (f(x+e dx)-f(x-e dx))/2e>``),
and the rule's own output differentiated again (second order, through tests/util_ad.vjp, a
first-order reverse sweep that applies the registry's rules) against finite differences of the
first-order rule. Registry checks: every op has a rule or a non-differentiable mark, and every
op a rule emits is itself differentiable or marked.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import runtime
from relay_ir.errors import DiagnosticError
from relay_ir.expr import Call, Function, Op, Tuple, Var
from relay_ir.op import get_opdef, list_ops
from relay_ir.op._grad import GradientRuleError
from relay_ir.op._rules import make_call
from relay_ir.passes.type_infer import infer_type
from relay_ir.traversal import post_order
from relay_ir.ty import ANY, TensorType

from util_ad import (inner, is_float, leaves, op_value, rebuild, rule_function, run,
                     type_of_value, typed_call, vjp)
from util_grad import HEADER, grad_module

EPS = 1e-6
RNG = np.random.default_rng


# ----------------------------------------------------------------------------- input makers
def away(shape: tuple, lo: float = 0.2, hi: float = 1.5, seed: int = 0) -> np.ndarray:
    """Random float64 values with |x| in [lo, hi] and random signs (away from 0-kinks)."""
    r = RNG(seed)
    return r.uniform(lo, hi, shape) * r.choice([-1.0, 1.0], shape)


def pos(shape: tuple, lo: float = 0.3, hi: float = 2.0, seed: int = 0) -> np.ndarray:
    """Random positive float64 values."""
    return RNG(seed).uniform(lo, hi, shape)


def unit(shape: tuple, seed: int = 0) -> np.ndarray:
    """Random values in (-0.8, 0.8) (domain of asin, atanh...)."""
    return RNG(seed).uniform(-0.8, 0.8, shape)


def distinct(shape: tuple, seed: int = 0) -> np.ndarray:
    """A random permutation of well separated values (no ties for max/min/pooling)."""
    n = int(np.prod(shape))
    return (RNG(seed).permutation(n).astype("float64") * 0.37 - n * 0.15).reshape(shape)


class Case:
    """One gradient check: op name, argument values, attributes, an id."""

    def __init__(self, name: str, args: list[Any], attrs: dict[str, Any] | None = None,
                 tag: str = "", second: bool = True) -> None:
        self.name, self.args, self.attrs, self.second = name, args, attrs or {}, second
        self.id = name + (f"-{tag}" if tag else "")


S = (2, 3)
CASES: list[Case] = []


def add(name: str, *args: Any, tag: str = "", second: bool = True, **attrs: Any) -> None:
    """Register a case."""
    CASES.append(Case(name, list(args), attrs, tag, second))


# unary elementwise
for _n in ["exp", "sigmoid", "tanh", "sin", "cos", "atan", "sinh", "cosh", "asinh", "negative",
           "copy", "abs", "nn.relu", "tan"]:
    add(_n, away(S) * (0.7 if _n == "tan" else 1.0))
for _n in ["log", "log2", "log10", "sqrt", "rsqrt"]:
    add(_n, pos(S))
for _n in ["asin", "acos", "atanh"]:
    add(_n, unit(S))
add("acosh", pos(S, 1.2, 3.0))
for _n in ["floor", "ceil", "trunc", "round", "sign"]:
    add(_n, away(S) + 0.25)
STOP = "stop_gradient"  # identity forward, zero gradient by definition
add(STOP, away(S))
add("exp", away(S).astype("float32"), tag="f32")
for _n in ["exp", "tanh", "sigmoid", "sqrt", "nn.relu"]:
    add(_n, pos(()) if _n == "sqrt" else away(()), tag="0d")
    add(_n, pos((2, 1, 3), seed=3) if _n == "sqrt" else away((2, 1, 3), seed=3), tag="3d")
add("clip", away((3, 4)), a_min=-0.7, a_max=0.9)
add("cast", away(S).astype("float32"), dtype="float64")
add("cast_like", away(S).astype("float32"), away((1,)))
add("nn.leaky_relu", away(S), alpha=0.2)
add("erf", away(S))
add("nn.gelu", away(S) * 2.0)
add("nn.gelu", away(S) * 2.0, approximate="tanh", tag="tanh")

# broadcasting binary
_BCAST = [((2, 3), (2, 3), "same"), ((2, 3), (3,), "row"), ((4, 1, 3), (2, 1), "both"),
          ((), (2, 2), "scalar")]
for _n in ["add", "subtract", "multiply", "divide", "maximum", "minimum"]:
    for _sa, _sb, _t in _BCAST:
        _b = pos(_sb, seed=1) if _n == "divide" else away(_sb, seed=1)
        add(_n, away(_sa), _b, tag=_t)
add("power", pos((2, 3)), away((3,), seed=2), tag="row")
add("power", pos((2, 3)), away((2, 3), seed=2), tag="same")
add("mod", away((2, 3)) * 3, pos((3,), 0.7, 1.1, seed=1))
add("floor_mod", away((2, 3)) * 3, pos((3,), 0.7, 1.1, seed=1))
add("floor_divide", away((2, 3)) * 3, pos((3,), 0.7, 1.1, seed=1))
add("where", RNG(3).random((2, 3)) > 0.5, away((2, 3)), away((3,), seed=1))
add("where", RNG(3).random((3,)) > 0.5, away((2, 1)), away((2, 3), seed=1), tag="bcast")
add("full_like", away(S), np.asarray(1.5))
add("full", np.asarray(0.7), shape=(2, 2))

# reductions
for _n in ["sum", "mean"]:
    add(_n, away((2, 3, 4)), tag="all")
    add(_n, away((2, 3, 4)), axis=(1,), tag="axis1")
    add(_n, away((2, 3, 4)), axis=(0, 2), keepdims=True, tag="keep")
    add(_n, away((2, 3, 4)), axis=(1,), exclude=True, tag="exclude")
add("max", distinct((2, 3, 4)), axis=(1,), tag="axis1")
add("max", distinct((2, 3)), tag="all")
add("min", distinct((2, 3, 4)), axis=(0, 2), keepdims=True, tag="keep")
add("max", np.array([[1.0, 3.0, 3.0], [2.0, 0.5, 2.0]]), axis=(1,), tag="ties", second=False)
add("prod", away((2, 3, 2)), axis=(1,), tag="axis1")
add("prod", away((2, 3)), tag="all")
add("variance", away((2, 3, 4)), away((2, 1, 4), seed=1), axis=(1,), keepdims=True)
add("variance", away((2, 3)), away((1, 3), seed=1), axis=(0,), unbiased=True, tag="unbiased")

# shape transforms
add("reshape", away((2, 3, 4)), newshape=(6, -1))
add("reshape_like", away((2, 6)), away((3, 4), seed=1))
add("transpose", away((2, 3, 4)), axes=(1, 2, 0))
add("transpose", away((2, 3)), tag="default")
add("expand_dims", away((2, 3)), axis=1, num_newaxis=2)
add("squeeze", away((2, 1, 3, 1)), axis=(1,))
add("broadcast_to", away((3, 1)), shape=(2, 3, 4))
add("broadcast_to_like", away((1, 4)), away((3, 4), seed=1))
add("collapse_sum_like", away((2, 3, 4)), away((3, 1), seed=1))
add("collapse_sum_to", away((2, 3, 4)), shape=(1, 4))
add("reverse", away((2, 3)), axis=1)
add("tile", away((2, 3)), reps=(2, 1, 2))
add("tile", away((2, 3, 2)), reps=(3,), tag="short")
add("repeat", away((2, 3)), repeats=3, axis=1)
add("concatenate", (away((2, 3)), away((2, 1), seed=1), away((2, 2), seed=2)), axis=1)
add("concatenate", (away((2, 3)),), axis=0, tag="one")
add("stack", (away((2, 3)), away((2, 3), seed=1)), axis=1)
add("split", away((2, 6)), indices_or_sections=3, axis=1)
add("split", away((5, 2)), indices_or_sections=(1, 3), axis=0, tag="indices")

# nn
add("nn.relu", away((2, 3)), tag="2d")
add("nn.dense", away((4, 3)), away((5, 3), seed=1))
add("nn.dense", away((2, 4, 3)), away((5, 3), seed=1), tag="3d")
add("nn.dense", away((3,)), away((5, 3), seed=1), tag="1d")
for _ta in (False, True):
    for _tb in (False, True):
        _a = away((3, 4) if _ta else (4, 3))
        _b = away((5, 3) if _tb else (3, 5), seed=1)
        add("nn.matmul", _a, _b, transpose_a=_ta, transpose_b=_tb, tag=f"t{int(_ta)}{int(_tb)}")
        _x = away((2, 3, 4) if _ta else (2, 4, 3))
        _y = away((1, 5, 3) if _tb else (1, 3, 5), seed=1)
        add("nn.batch_matmul", _x, _y, transpose_a=_ta, transpose_b=_tb,
            tag=f"t{int(_ta)}{int(_tb)}")
add("nn.matmul", away((2, 4, 3)), away((3, 5), seed=1), tag="lead")
add("nn.bias_add", away((2, 3, 4)), away((3,), seed=1))
add("nn.bias_add", away((2, 3, 4)), away((4,), seed=1), axis=-1, tag="last")
add("nn.prelu", away((2, 3, 4)), away((3,), seed=1))
add("nn.softmax", away((2, 5)))
add("nn.softmax", away((2, 3, 4)), axis=1, tag="axis1")
add("nn.log_softmax", away((2, 5)))
add("nn.log_softmax", away((2, 3, 4)), axis=0, tag="axis0")
add("nn.leaky_relu", away((2, 3)), alpha=0.3, tag="alpha")
add("nn.batch_flatten", away((2, 3, 2)))
add("nn.dropout", away((2, 3)), rate=0.3)
add("nn.cross_entropy", pos((3, 4)), pos((3, 4), seed=1))
add("nn.global_avg_pool2d", away((2, 3, 2, 3)))
add("nn.global_max_pool2d", distinct((2, 3, 2, 3)))
add("nn.global_avg_pool2d", away((2, 2, 3, 3)), layout="NHWC", tag="nhwc")
add("nn.pad", away((2, 3)), np.asarray(0.5), pad_width=((1, 2), (0, 1)))
add("nn.pad", away((3, 4)), np.asarray(0.0), pad_width=((1, 2), (2, 1)), pad_mode="edge",
    tag="edge")
add("nn.pad", away((3, 4)), np.asarray(0.0), pad_width=((1, 2), (2, 1)), pad_mode="reflect",
    tag="reflect")
add("nn.layer_norm", away((2, 3, 4)), away((4,), seed=1), away((4,), seed=2))
add("nn.layer_norm", away((2, 3, 4)), away((3,), seed=1), away((3,), seed=2), axis=1,
    center=False, tag="axis1-nocenter")
add("nn.layer_norm", away((2, 3)), away((3,), seed=1), away((3,), seed=2), scale=False,
    tag="noscale")
add("nn.batch_norm", away((2, 3, 2)), away((3,), seed=1), away((3,), seed=2),
    away((3,), seed=3), pos((3,), seed=4))
add("strided_slice", away((4, 5)), begin=(1, 0), end=(4, 5), strides=(2, 2))
add("strided_slice", away((3, 6)), begin=(2,), end=(-1,), axes=(1,), tag="axes")
add("strided_slice", away((5, 3)), begin=(4,), end=(0,), strides=(-2,), tag="negstride")
add("strided_slice", away((4, 5)), begin=(1, 1), end=(2, 3), slice_mode="size", tag="size")
add("take", away((4, 3)), np.array([[0, 3], [3, 1]], "int32"), axis=0)
add("take", away((2, 5)), np.array([4, -1, 0, 7], "int32"), axis=1, mode="wrap", tag="wrap")
add("take", away((2, 5)), np.array([[4, 0], [1, 1]], "int32"), axis=1, batch_dims=1,
    tag="batch")
add("take", away((3, 4)), np.array([[5, 11], [0, 5]], "int64"), tag="flat")
add("take", away((3, 4)), np.array(2, "int32"), axis=1, tag="scalar")
add("nn.conv2d", away((2, 3, 5, 5)), away((4, 3, 3, 3), seed=1))
add("nn.conv2d", away((1, 4, 7, 6)), away((6, 2, 3, 2), seed=1), strides=(2, 1),
    padding=(1, 2, 0, 1), dilation=(1, 2), groups=2, tag="sdpg")
add("nn.conv2d", away((1, 5, 6, 2)), away((3, 3, 2, 4), seed=1), data_layout="NHWC",
    kernel_layout="HWIO", strides=(2, 2), padding=(1, 1), tag="nhwc")
add("nn.conv2d", away((1, 4, 5, 5)), away((4, 1, 3, 3), seed=1), groups=4, padding=(1, 1),
    tag="depthwise")
add("nn.max_pool2d", distinct((2, 2, 5, 5)), pool_size=(2, 2), strides=(2, 2))
add("nn.max_pool2d", distinct((1, 2, 5, 6)), pool_size=(3, 2), strides=(1, 2),
    padding=(1, 1), tag="overlap-pad")
add("nn.max_pool2d", distinct((1, 5, 5, 2)), pool_size=(2, 2), strides=(2, 2), ceil_mode=True,
    layout="NHWC", tag="ceil-nhwc")
add("nn.avg_pool2d", away((2, 2, 5, 5)), pool_size=(2, 2), strides=(2, 2))
add("nn.avg_pool2d", away((1, 2, 5, 6)), pool_size=(3, 3), strides=(1, 2), padding=(1, 1),
    tag="overlap-pad")
add("nn.avg_pool2d", away((1, 2, 5, 6)), pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
    count_include_pad=True, ceil_mode=True, tag="incl-ceil")
add("nn.batch_norm", away((2, 2, 3)), away((3,), seed=1), away((3,), seed=2),
    away((3,), seed=3), pos((3,), seed=4), axis=-1, scale=False, tag="last-noscale")


# gradient operators added for the rules (each linear in its first argument)
add("nn.conv2d_backward_data", away((1, 4, 3, 7)), away((4, 2, 3, 2), seed=1),
    away((1, 4, 7, 6), seed=2), strides=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 2),
    groups=2)
add("nn.conv2d_backward_weight", away((1, 4, 3, 7)), away((1, 4, 7, 6), seed=1),
    away((4, 2, 3, 2), seed=2), strides=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 2),
    groups=2)
add("nn.max_pool2d_grad", away((1, 2, 5, 4)), distinct((1, 2, 5, 6), seed=1), pool_size=(3, 2),
    strides=(1, 2), padding=(1, 1), second=False)
add("nn.max_pool2d_gather", distinct((1, 2, 5, 6)), away((1, 2, 5, 6), seed=1),
    pool_size=(3, 2), strides=(1, 2), padding=(1, 1))
add("nn.avg_pool2d_grad", away((1, 2, 5, 3)), away((1, 2, 5, 6), seed=1), pool_size=(3, 3),
    strides=(1, 2), padding=(1, 1))
add("strided_slice_grad", away((2, 3)), away((4, 5), seed=1), begin=(1, 0), end=(4, 5),
    strides=(2, 2))
add("take_grad", away((2, 2, 3)), away((4, 3), seed=1), np.array([[0, 3], [3, 1]], "int32"),
    axis=0)


# front's operators: annotations and device placement (identity), layout_transform, dyn.*
def _iv(*v: int) -> np.ndarray:
    return np.array(v, "int64")


for _n in ["annotation.checkpoint", "annotation.compiler_begin", "annotation.compiler_end",
           "annotation.stop_fusion", "device_copy"]:
    add(_n, away(S))
add("on_device", away(S), virtual_device=1, constrain_result=True)
add("layout_transform", away((1, 8, 2, 3)), src_layout="NCHW", dst_layout="NCHW4c")
add("layout_transform", away((1, 6, 2, 3)), src_layout="NCHW", dst_layout="NCHW4c",
    tag="padded")
add("dyn.reshape", away((2, 3, 4)), _iv(-1, 4))
add("dyn.broadcast_to", away((3, 1)), _iv(2, 3, 4))
add("dyn.full", np.asarray(0.7), _iv(2, 2))
add("dyn.tile", away((2, 3)), _iv(2, 1, 2))
add("dyn.tile_grad", away((4, 3)), away((2, 3), seed=1), _iv(2, 1))
add("dyn.strided_slice", away((10, 8)), _iv(1, 0), _iv(8, 8), _iv(3, 2))
add("dyn.strided_slice_grad", away((3, 4)), away((10, 8), seed=1), _iv(1, 0), _iv(8, 8),
    _iv(3, 2))
add("dyn.expand_dims", away((3, 4)), np.array(-1, "int32"), num_newaxis=2)
add("dyn.squeeze", away((1, 3, 1)), _iv(0, 2))
add("dyn.nn.pad", away((2, 3)), np.array([[0, 1], [2, 3]], "int64"), np.asarray(0.5))
add("dyn.nn.pad", away((3, 4)), np.array([[1, 1], [2, 2]], "int64"), np.asarray(0.0),
    pad_mode="reflect", tag="reflect")
add("dyn.nn.pad_grad", away((3, 8)), away((2, 3), seed=1), np.array([[0, 1], [2, 3]], "int64"))

# part opsb (issue 23): sorting, transposed/1-d convolutions, instance/group norm, resize
add("topk", distinct((3, 5)), k=2, tag="both")
add("topk", distinct((4, 3)), k=2, axis=0, ret_type="values", is_ascend=True, tag="values")
add("sort", distinct((3, 4)), axis=0, is_ascend=False)
add("nn.conv2d_transpose", away((1, 4, 3, 4)), away((4, 3, 3, 2), seed=1))
add("nn.conv2d_transpose", away((2, 4, 3, 4)), away((4, 2, 3, 2), seed=1), strides=(2, 3),
    padding=(1, 0, 2, 1), dilation=(1, 2), output_padding=(1, 2), groups=2, tag="sdpog")
add("nn.conv2d_transpose", away((1, 3, 4, 4)), away((2, 2, 3, 4), seed=1), strides=(2, 2),
    padding=(1, 1), data_layout="NHWC", kernel_layout="HWOI", tag="nhwc")
add("nn.conv1d", away((2, 4, 9)), away((6, 2, 3), seed=1), strides=(2,), padding=(1, 2),
    dilation=(2,), groups=2)
add("nn.conv1d", away((1, 7, 3)), away((3, 3, 5), seed=1), padding=(1,), data_layout="NWC",
    kernel_layout="WIO", tag="nwc")
add("nn.conv1d_transpose", away((2, 4, 5)), away((4, 3, 3), seed=1), strides=(2,),
    padding=(1, 2), output_padding=(1,), groups=2)
add("nn.instance_norm", away((2, 3, 4, 5)), away((3,), seed=1), away((3,), seed=2))
add("nn.instance_norm", away((2, 4, 3)), away((3,), seed=1), away((3,), seed=2), axis=-1,
    center=False, tag="last-nocenter")
add("nn.group_norm", away((2, 6, 2, 3)), away((6,), seed=1), away((6,), seed=2),
    num_groups=3)
add("nn.group_norm", away((2, 5, 4)), away((4,), seed=1), away((4,), seed=2), num_groups=2,
    axis=-1, scale=False, tag="last-noscale")
add("image.resize2d", away((1, 2, 3, 4)), size=(5, 3))
add("image.resize2d", away((1, 4, 3, 2)), size=(7, 2), layout="NHWC", method="cubic",
    coordinate_transformation_mode="align_corners", tag="cubic-nhwc")
add("image.resize2d", away((1, 2, 3, 4)), size=(6, 7), method="nearest_neighbor",
    tag="nearest")
add("image.resize2d", away((1, 1, 4, 4)), size=(3, 5), roi=(0.2, -0.3, 1.2, 0.9),
    coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5, tag="crop")


# opsa (issue 23): the indexing and scan operators of relay_ir/op/indexing_ext.py
add("gather", away((3, 4)), np.array([[0, 3, -1], [2, 2, 0]], "int32"), axis=1)
add("gather", away((3, 4)), np.array([[2, -1, 0, 0], [1, 1, 2, 0]], "int64"), tag="axis0")
add("gather_nd", away((3, 4, 2)), np.array([[0, 2, -1], [3, 1, 1]], "int64"))
add("gather_nd", away((2, 3, 4)), np.array([[[2, 0], [1, 1]]], "int32"), batch_dims=1,
    tag="batch")
add("scatter_elements", away((3, 4)), np.array([[1, 3], [0, 2], [3, 1]], "int32"),
    away((3, 2), seed=1), axis=1)
add("scatter_elements", away((3, 4)), np.array([[1, 1], [0, 2], [-1, 1]], "int64"),
    away((3, 2), seed=1), axis=1, reduction="add", tag="add")
add("scatter_nd", away((4, 3)), np.array([[2, 0, -1]], "int32"), away((3, 3), seed=1))
add("scatter_nd", away((4, 3)), np.array([[2, 0, 2], [1, 1, 1]], "int64"), away((3,), seed=1),
    mode="add", tag="add")
add("one_hot", np.array([[0, 2, -1], [5, 1, 1]], "int32"), np.asarray(0.7), np.asarray(-0.3),
    depth=3)
add("one_hot", np.array([1, 0], "int64"), np.asarray(0.7, "float32"),
    np.asarray(-0.3, "float32"), depth=3, axis=0, dtype="float64", tag="cast")
add("cumsum", away((3, 4)), axis=1)
add("cumsum", away((3, 4)), axis=0, exclusive=True, reverse=True, tag="excl-rev")
add("cumsum", away((2, 3)), tag="flat")
add("cumprod", away((3, 4)), axis=1)
add("cumprod", away((2, 3)), tag="flat")
# NOTE: the rule is exact at exact zeros, its own derivative there is not (a branch on x == 0)
add("cumprod", np.array([[0.5, 0.0, 1.5, -0.7], [0.0, 1.2, 0.0, 0.9]]), axis=1, tag="zeros",
    second=False)
add("cumprod", np.array([[0.5, 0.0, 1.5], [0.0, 1.2, 0.0], [0.8, -1.1, 0.0]]), axis=0,
    exclusive=True, reverse=True, tag="zeros-excl-rev", second=False)
add("cumprod", away((3, 4)), axis=0, exclusive=True, reverse=True, tag="excl-rev")
add("einsum", (away((2, 3)), away((3, 4), seed=1)), equation="ij,jk->ik")
add("einsum", (away((2, 3, 4)), away((4,), seed=1), away((2, 5), seed=2)),
    equation="bij,j,bk->ik", tag="three")
add("einsum", (away((2, 3, 4)),), equation="...j->j...", tag="ellipsis")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_against_finite_differences(case: Case) -> None:
    """``<rule(g), dx>`` equals ``<g, df(x)[dx]>`` by central differences in float64."""
    fn = rule_function(case.name, case.args, case.attrs)
    y = op_value(case.name, case.args, case.attrs)
    r = RNG(11)
    g = rebuild(y, [r.standard_normal(v.shape).astype(v.dtype) for v in leaves(y)])
    grads = run(fn, *case.args, y, g)
    assert isinstance(grads, tuple) and len(grads) == len(case.args)
    for a, ga in zip(case.args, grads):
        assert type_of_value(ga) == type_of_value(a)  # exact type and dtype
        if not any(is_float(x) for x in leaves(a)):
            assert all(not np.any(x) for x in leaves(ga))  # integer/bool arguments: zero
    dirs = [rebuild(a, [r.standard_normal(v.shape) if is_float(v) else v for v in leaves(a)])
            for a in case.args]

    def f(t: float) -> Any:
        moved = [rebuild(a, [v.astype("float64") + t * d if is_float(v) else v
                             for v, d in zip(leaves(a), leaves(da))])
                 for a, da in zip(case.args, dirs)]
        return op_value(case.name, moved, case.attrs) if case.name != STOP else 0 * moved[0]

    fd = (inner(g, f(EPS)) - inner(g, f(-EPS))) / (2 * EPS)
    got = sum(inner(ga, d) for ga, d in zip(grads, dirs))
    tol = 1e-3 if any(v.dtype == np.float32 for v in leaves(tuple(case.args))) else 1e-5
    assert got == pytest.approx(fd, rel=tol, abs=tol)


# Rules that compare x with their own forward output (max, min, max pooling): a perturbed `out`
# would no longer equal any element, so the second-order check recomputes `out` from x there
# (the rule is locally constant in both, and its adjoint for `out` is zero).
FIXED_OUT = {"max", "min", "nn.global_max_pool2d"}


def _random_like(v: Any, r: np.random.Generator) -> Any:
    return rebuild(v, [r.standard_normal(x.shape).astype(x.dtype) if is_float(x) else
                       np.zeros_like(x) for x in leaves(v)])


SECOND = [c for c in CASES if c.second]


@pytest.mark.parametrize("case", SECOND, ids=[c.id for c in SECOND])
def test_rule_second_order(case: Case) -> None:
    """The rule differentiated again (by the registry's rules) against finite differences.

    ``S(args, out, g) = <w, rule(args, out, g)>``; its gradient (tests/util_ad.vjp) in a random
    direction ``d`` equals the central difference of S along ``d``.
    """
    fn = rule_function(case.name, case.args, case.attrs)
    dfn = vjp(fn)
    r = RNG(5)
    y = op_value(case.name, case.args, case.attrs)
    point = list(case.args) + [y, _random_like(y, r)]
    w = tuple(_random_like(a, r) for a in case.args)
    grads = run(dfn, *point, w)
    assert len(grads) == len(point)
    for p, gp in zip(point, grads):
        assert type_of_value(gp) == type_of_value(p)
    dirs = [_random_like(p, r) for p in point]
    if case.name in FIXED_OUT:
        dirs[-2] = rebuild(y, [np.zeros_like(x) for x in leaves(y)])
        assert not any(x.any() for x in leaves(grads[-2]))

    def s(t: float) -> float:
        moved = [rebuild(p, [x + t * d if is_float(x) else x
                             for x, d in zip(leaves(p), leaves(dp))])
                 for p, dp in zip(point, dirs)]
        if case.name in FIXED_OUT:
            moved[-2] = op_value(case.name, moved[:-2], case.attrs)
        return inner(w, run(fn, *moved))

    f32 = any(v.dtype == np.float32 for v in leaves(tuple(case.args)))
    eps, tol = (1e-2, 1e-2) if f32 else (EPS, 1e-5)
    fd = (s(eps) - s(-eps)) / (2 * eps)
    got = sum(inner(gp, d) for gp, d in zip(grads, dirs))
    assert got == pytest.approx(fd, rel=tol, abs=tol)


# ----------------------------------------------------------------------------- registry checks
def _ops_in(e: Any) -> set[str]:
    return {n.op.name for n in post_order(e) if isinstance(n, Call) and isinstance(n.op, Op)}


def test_every_op_has_a_rule_or_is_marked() -> None:
    """A new operator needs a gradient rule or ``non_differentiable=True``."""
    missing = [od.name for od in list_ops() if od.grad is None and not od.non_differentiable]
    assert missing == []


def test_every_differentiable_op_is_checked() -> None:
    """Every operator with a rule has at least one finite-difference case above."""
    covered = {c.name for c in CASES}
    unchecked = [od.name for od in list_ops() if od.grad is not None and od.name not in covered]
    assert unchecked == []


def test_ops_emitted_by_rules_are_differentiable() -> None:
    """Every op any rule emits has a rule or a non-differentiable mark (grad of grad)."""
    emitted: set[str] = set()
    for c in CASES:
        emitted |= _ops_in(rule_function(c.name, c.args, c.attrs).body)
    bad = sorted(n for n in emitted
                 if get_opdef(n).grad is None and not get_opdef(n).non_differentiable)
    assert bad == []
    # the structural ops the rules rely on are among them
    assert {"collapse_sum_like", "broadcast_to_like", "where", "zeros_like"} <= emitted


def test_integer_arguments_get_zero_adjoints() -> None:
    """Integer and bool arguments get zeros of their own type (take's indices, where's cond)."""
    idx = np.array([2, 0, 2], "int32")
    x = away((3, 2))
    fn = rule_function("take", [x, idx], {"axis": 0})
    y = op_value("take", [x, idx], {"axis": 0})
    dx, didx = run(fn, x, idx, y, np.ones_like(y))
    assert didx.dtype == np.int32 and not didx.any()
    np.testing.assert_array_equal(dx, [[1, 1], [0, 0], [2, 2]])


def test_cast_from_integer_has_zero_gradient() -> None:
    """``cast`` of an integer tensor to float contributes a zero integer adjoint."""
    x = np.array([1, 2, 3], "int32")
    fn = rule_function("cast", [x], {"dtype": "float32"})
    (dx,) = run(fn, x, x.astype("float32"), np.ones(3, "float32"))
    assert dx.dtype == np.int32 and not dx.any()


def test_broadcast_rules_collapse_only_when_shapes_differ() -> None:
    """Same-shape broadcasting ops skip the collapse (no collapse_sum_like in the rule)."""
    a, b = away((2, 3)), away((2, 3), seed=1)
    assert "collapse_sum_like" not in _ops_in(rule_function("multiply", [a, b], {}).body)
    assert "collapse_sum_like" in _ops_in(rule_function("multiply", [a, b[:1]], {}).body)


def _typed(name: str, param_types: list[TensorType], attrs: dict[str, Any],
           tuple_arg: bool = False) -> tuple[Function, Call]:
    params = tuple(Var(f"p{i}", t) for i, t in enumerate(param_types))
    args = (Tuple(params),) if tuple_arg else params
    fn = infer_type(Function(params, make_call(name, *args, **attrs)))
    return fn, fn.body


def test_mean_rule_with_unknown_dimension() -> None:
    """``mean`` over a ``?`` dimension divides by a count computed at run time."""
    fn, call = _typed("mean", [TensorType((ANY, 3), "float64")], {"axis": (0,)})
    out, g = Var("out", call.checked_type), Var("g", call.checked_type)
    rf = infer_type(Function(fn.params + (out, g), Tuple(get_opdef("mean").grad(call, out, g))))
    x = away((4, 3))
    (dx,) = run(rf, x, x.mean(0), np.arange(3.0))
    np.testing.assert_allclose(dx, np.broadcast_to(np.arange(3.0) / 4, (4, 3)))


def test_rule_needing_static_shapes_reports_a_diagnostic() -> None:
    """A rule that needs static sizes raises a GradientRuleError (a DiagnosticError)."""
    fn, call = _typed("concatenate", [TensorType((ANY, 3), "float32"),
                                      TensorType((2, 3), "float32")], {"axis": 0},
                      tuple_arg=True)
    out = Var("out", call.checked_type)
    with pytest.raises(GradientRuleError, match="static sizes along axis 0"):
        get_opdef("concatenate").grad(call, out, out)
    assert issubclass(GradientRuleError, DiagnosticError)


# ----------------------------------------------------------------------- through passes.gradient
_X, _W, _D = ("Tensor[(1, 2, 5, 5), float64]", "Tensor[(3, 2, 3, 3), float64]",
              "Tensor[(4, 12), float64]")
_V4 = "Tensor[(4), float64]"
_CNN = f"""
def @main(%x: {_X}, %w: {_W}, %d: {_D}, %gm: {_V4}, %bt: {_V4}) -> float64 {{
  let %c = tanh(nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1]));
  let %p = nn.max_pool2d(%c, pool_size=[2, 2], strides=[1, 1]);
  let %q = nn.avg_pool2d(%p, pool_size=[2, 2], strides=[1, 1], padding=[1, 1]);
  let %h = nn.dense(nn.batch_flatten(strided_slice(%q, begin=[0, 0, 1, 1], end=[1, 3, 3, 3])),
                    %d);
  let %s = nn.log_softmax(nn.layer_norm(%h, %gm, %bt));
  sum(multiply(%s, sigmoid(%h)))
}}
"""
_HV = f"""
def @hv(%x: {_X}, %w: {_W}, %d: {_D}, %gm: {_V4}, %bt: {_V4}, %v: {_X}) -> float64 {{
  let %r = @main(%x, %w, %d, %gm, %bt);
  sum(multiply((%r.1).0, %v))
}}
"""


def test_hessian_vector_product_through_passes_gradient() -> None:
    """``passes.gradient`` applied twice over conv2d, pools, strided_slice, dense, layer_norm,
    log_softmax...: the HVP (and a mixed second derivative) against finite differences."""
    mod = rly.parse(HEADER + _CNN, "<cnn>")
    g1 = grad_module(mod, "main")
    g2 = grad_module(rly.parse(rly.astext(g1) + _HV, "<cnn>"), "hv")
    r = RNG(0)
    x, w = r.uniform(-1, 1, (1, 2, 5, 5)), r.uniform(-1, 1, (3, 2, 3, 3))
    d, gm, bt = r.uniform(-1, 1, (4, 12)), r.uniform(0.5, 1.5, 4), r.uniform(-1, 1, 4)
    v, dw = r.uniform(-1, 1, x.shape), r.uniform(-1, 1, w.shape)
    _, (hv, hw, *_rest) = runtime.evaluate(g2, x, w, d, gm, bt, v, entry="hv")

    def gx(xx: np.ndarray, ww: np.ndarray) -> np.ndarray:
        return runtime.evaluate(g1, xx, ww, d, gm, bt)[1][0]

    fd_x = (gx(x + EPS * v, w) - gx(x - EPS * v, w)) / (2 * EPS)
    np.testing.assert_allclose(hv, fd_x, rtol=1e-5, atol=1e-7)
    fd_w = (gx(x, w + EPS * dw) - gx(x, w - EPS * dw)) / (2 * EPS)
    assert np.sum(hw * dw) == pytest.approx(np.sum(fd_w * v), rel=1e-5, abs=1e-7)


NON_DIFFERENTIABLE = ["less", "greater", "less_equal", "greater_equal", "equal", "not_equal",
                      "isnan", "isinf", "isfinite", "argmax", "argmin", "shape_of",
                      "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
                      "bitwise_or", "bitwise_xor", "bitwise_not", "all", "any", "zeros_like",
                      "ones_like", "zeros", "ones"]


@pytest.mark.parametrize("name", NON_DIFFERENTIABLE)
def test_non_differentiable_ops_are_marked(name: str) -> None:
    """Comparisons, predicates, index/shape queries and logic ops contribute zero (no rule)."""
    od = get_opdef(name)
    assert od.non_differentiable and od.grad is None


@pytest.mark.parametrize("name,args,attrs", [
    ("multiply", [away((2, 3)).astype("float16"), away((3,)).astype("float16")], {}),
    ("sigmoid", [away((2, 3)).astype("float16")], {}),
    ("mean", [away((2, 3)).astype("float16")], {"axis": (1,)}),
    ("nn.softmax", [away((2, 3)).astype("float16")], {}),
    ("nn.conv2d", [away((1, 2, 4, 4)).astype("float16"), away((2, 2, 3, 3)).astype("float16")],
     {}),
], ids=["multiply", "sigmoid", "mean", "softmax", "conv2d"])
def test_float16_adjoints_keep_their_dtype(name: str, args: list, attrs: dict) -> None:
    """Constants in rules take the argument's dtype: float16 adjoints stay float16."""
    fn = rule_function(name, args, attrs)
    y = op_value(name, args, attrs)
    grads = run(fn, *args, y, np.ones_like(y))
    assert [type_of_value(g) for g in grads] == [type_of_value(a) for a in args]
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_reflect_pad_wider_than_its_axis_is_a_diagnostic() -> None:
    """Reflect padding of 3 on an axis of 3 (numpy reflects twice) has no rule: a clear error."""
    x = away((3,))
    params, call, out_t = typed_call("nn.pad", [x, np.asarray(0.0)],
                                     {"pad_width": ((3, 0),), "pad_mode": "reflect"})
    out = Var("out", out_t)
    with pytest.raises(GradientRuleError, match="reflect mode"):
        get_opdef("nn.pad").grad(call, out, out)


def test_unknown_dims_keep_the_collapse() -> None:
    """``add(x: (?, 3), y: (?, 3))`` may broadcast a 1 at run time: both adjoints collapse."""
    t = TensorType((ANY, 3), "float64")
    fn, call = _typed("add", [t, t], {})
    out, g_var = Var("out", call.checked_type), Var("g", call.checked_type)
    rf = infer_type(Function(fn.params + (out, g_var),
                             Tuple(get_opdef("add").grad(call, out, g_var))))
    x, y = away((1, 3)), away((4, 3), seed=1)
    g = x + y
    dx, dy = run(rf, x, y, g, g)
    np.testing.assert_allclose(dx, g.sum(0, keepdims=True))
    np.testing.assert_allclose(dy, g)
