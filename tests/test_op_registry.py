"""Registry walk: every operator is complete and its relation agrees with its implementation."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from relay_ir.attrs import _attr_eq
from relay_ir.op import ATTR_KINDS, OpPattern, get_op, get_opdef, list_ops, lookup_opdef
from relay_ir.ty import AnyDim, TensorType, TupleType, Type


def T(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype)


def I(*shape: int) -> TensorType:  # noqa: E743
    return TensorType(tuple(shape), "int32")


def B(*shape: int) -> TensorType:
    return TensorType(tuple(shape), "bool")


def _iv(*values: int) -> np.ndarray:
    """A 1-d int64 shape tensor value (the shape argument of a dyn.* op)."""
    return np.array(values, dtype="int64")


Sample = tuple[list[Any], dict[str, Any]]

UNARY = ["abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "copy", "cos", "cosh",
         "exp", "floor", "isfinite", "isinf", "isnan", "log", "log10", "log2", "negative",
         "nn.relu", "ones_like", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt",
         "stop_gradient", "tan", "tanh", "trunc", "zeros_like", "nn.leaky_relu", "erf"]
BINARY = ["add", "divide", "equal", "floor_divide", "floor_mod", "greater", "greater_equal",
          "less", "less_equal", "maximum", "minimum", "mod", "multiply", "not_equal", "power",
          "subtract"]
LOGICAL = ["logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
           "bitwise_xor"]
REDUCE = ["sum", "mean", "max", "min", "prod", "argmax", "argmin"]

SAMPLES: dict[str, list[Sample]] = {}
for _n in UNARY:
    SAMPLES[_n] = [([T(2, 3)], {}), ([T(dtype="float16")], {}), ([T(4, 1, 3, dtype="float64")],
                                                                   {})]
for _n in BINARY:
    SAMPLES[_n] = [([T(2, 3), T(3)], {}), ([I(4, 1), I(1, 5)], {}),
                   ([T(dtype="float16"), T(dtype="float16")], {}), ([I(), I(2)], {})]
for _n in LOGICAL:
    SAMPLES[_n] = [([B(2, 3), B(3)], {}), ([B(), B()], {})]
for _n in REDUCE:
    SAMPLES[_n] = [([T(2, 3, 4)], {}), ([T(2, 3, 4)], {"axis": [1], "keepdims": True}),
                   ([I(2, 3, 4)], {"axis": [0, -1], "exclude": True}),
                   ([T(5, dtype="float16")], {"axis": [0]})]
SAMPLES["nn.gelu"] = [([T(2, 3)], {}), ([T(dtype="float16")], {"approximate": "tanh"}),
                     ([T(4, 1, 3, dtype="float64")], {"approximate": "none"})]
SAMPLES.update({
    # gradient operators (relay_ir/op/nn.py, conv.py, indexing.py): out_grad first
    "nn.conv2d_backward_data": [([T(1, 4, 6, 6), T(4, 3, 3, 3), T(1, 3, 8, 8)], {}),
                                ([T(2, 6, 5, 6), T(6, 2, 3, 2), T(2, 4, 9, 7)],
                                 {"strides": [2, 1], "padding": [1, 0, 2, 1],
                                  "dilation": [1, 2], "groups": 2})],
    "nn.conv2d_backward_weight": [([T(1, 4, 6, 6), T(1, 3, 8, 8), T(4, 3, 3, 3)], {})],
    "nn.max_pool2d_grad": [([T(1, 3, 4, 4), T(1, 3, 8, 8)], {"pool_size": [2, 2],
                                                            "strides": [2, 2]})],
    "nn.max_pool2d_gather": [([T(1, 3, 8, 8), T(1, 3, 8, 8)], {"pool_size": [2, 2],
                                                              "strides": [2, 2]})],
    "nn.avg_pool2d_grad": [([T(1, 3, 7, 7), T(1, 3, 7, 7)], {"pool_size": [3, 3],
                                                            "padding": [1, 1]})],
    "strided_slice_grad": [([T(3, 4), T(10, 8)], {"begin": [1, 0], "end": [8, 8],
                                                  "strides": [3, 2]})],
    "take_grad": [([T(3, 4), T(5, 4), I(3)], {"axis": 0}), ([T(3), T(5, 4), I(3)], {})],
    "all": [([B(2, 3)], {"axis": [1]}), ([B(4)], {})],
    "any": [([B(2, 3)], {"axis": [0], "keepdims": True})],
    "bitwise_not": [([I(2, 3)], {}), ([B(3)], {})],
    "logical_not": [([B(2, 3)], {}), ([B()], {})],
    "variance": [([T(2, 3, 4), T(2, 1, 4)], {"axis": [1]}),
                 ([T(2, 3), T(1, 1)], {"unbiased": True})],
    "where": [([B(2, 1), T(3), T()], {}), ([B(), I(2), I(2)], {})],
    "cast": [([T(2, 3)], {"dtype": "int8"}), ([I(4)], {"dtype": "float16"})],
    "cast_like": [([T(2, 3), I(1)], {})],
    "clip": [([T(2, 3)], {"a_min": -0.5, "a_max": 0.5}), ([I(4)], {"a_min": 0.0, "a_max": 2.0})],
    "zeros": [([], {"shape": [2, 3]}), ([], {"shape": [], "dtype": "int64"})],
    "ones": [([], {"shape": [4], "dtype": "bool"})],
    "full": [([T()], {"shape": [2, 2]}), ([I()], {"shape": [3], "dtype": "float16"})],
    "full_like": [([I(2, 3), I()], {})],
    "shape_of": [([T(2, 3, 4)], {}), ([T()], {"dtype": "int64"})],
    "reshape": [([T(2, 3, 4)], {"newshape": [-1, 4]}), ([T(2, 3, 4)], {"newshape": [0, -3]}),
                ([T(2, 3, 4)], {"newshape": [-4, 2, -1, -2]}), ([T(6)], {"newshape": [2, -1]})],
    "reshape_like": [([T(2, 3, 4), T(6, 4)], {}),
                     ([T(2, 3, 4), T(3, 2)], {"lhs_end": 2})],
    "transpose": [([T(2, 3, 4)], {}), ([T(2, 3, 4)], {"axes": [1, -1, 0]})],
    "expand_dims": [([T(3, 4)], {"axis": -1, "num_newaxis": 2}), ([T()], {"axis": 0})],
    "squeeze": [([T(1, 3, 1)], {}), ([T(1, 3, 1)], {"axis": [-1]})],
    "concatenate": [([TupleType((T(2, 3), T(4, 3)))], {}),
                    ([TupleType((I(2, 3), I(2, 1), I(2, 2)))], {"axis": 1})],
    "stack": [([TupleType((T(2, 3), T(2, 3)))], {"axis": 2})],
    "split": [([T(6, 4)], {"indices_or_sections": 3}),
              ([T(6, 4)], {"indices_or_sections": [1, 3], "axis": 1})],
    "take": [([T(5, 4), I(3)], {"axis": 0}), ([T(5, 4), I(2, 2)], {"axis": -1, "mode": "wrap"}),
             ([T(5, 4), I(3)], {}), ([T(3, 5, 4), I(3, 2)], {"axis": 1, "batch_dims": 1})],
    "strided_slice": [([T(10, 8)], {"begin": [1, 0], "end": [8, 8], "strides": [3, 2]}),
                      ([T(10, 8)], {"begin": [-1], "end": [-11], "strides": [-1]}),
                      ([T(4, 6)], {"begin": [1], "end": [-1], "axes": [1],
                                   "slice_mode": "size"})],
    "broadcast_to": [([T(3, 1)], {"shape": [2, 3, 4]})],
    "broadcast_to_like": [([T(1, 4), T(3, 4)], {})],
    "collapse_sum_like": [([T(2, 3, 4), T(3, 1)], {})],
    "collapse_sum_to": [([T(2, 3, 4)], {"shape": [1, 4]})],
    "reverse": [([T(2, 3)], {"axis": -1})],
    "tile": [([T(2, 3)], {"reps": [2, 1, 2]})],
    "repeat": [([T(2, 3)], {"repeats": 3, "axis": 0})],
    "nn.dense": [([T(2, 5), T(3, 5)], {}), ([T(4, 2, 5), T(3, 5)], {"units": 3}),
                 ([T(2, 5, dtype="int8"), T(3, 5, dtype="int8")], {"out_dtype": "int32"}),
                 ([T(2, 5, dtype="uint8"), T(3, 5, dtype="int8")], {"out_dtype": "int32"})],
    "nn.matmul": [([T(3, 5), T(5, 4)], {}),
                  ([T(5, 3), T(4, 5)], {"transpose_a": True, "transpose_b": True}),
                  ([T(3, 5, dtype="uint8"), T(5, 4, dtype="int8")], {"out_dtype": "int32"})],
    "nn.batch_matmul": [([T(2, 3, 5), T(2, 4, 5)], {}),
                        ([T(1, 5, 3), T(2, 5, 4)], {"transpose_a": True, "transpose_b": False}),
                        ([T(2, 3, 5, dtype="uint8"), T(2, 4, 5, dtype="int8")],
                         {"out_dtype": "int32"})],
    "nn.bias_add": [([T(2, 3, 4), T(3)], {}), ([T(2, 3, 4), T(4)], {"axis": -1})],
    "nn.prelu": [([T(2, 3, 4), T(3)], {})],
    "nn.softmax": [([T(2, 3)], {}), ([T(2, 3, 4)], {"axis": 1})],
    "nn.log_softmax": [([T(2, 3)], {}), ([T(2, 3, 4, dtype="float16")], {"axis": 0})],
    "nn.conv2d": [([T(1, 3, 8, 8), T(4, 3, 3, 3)], {}),
                  ([T(2, 4, 9, 7), T(6, 2, 3, 2)], {"strides": [2, 1], "padding": [1, 0, 2, 1],
                                                    "dilation": [1, 2], "groups": 2}),
                  ([T(1, 8, 8, 3), T(3, 3, 3, 5)], {"data_layout": "NHWC",
                                                    "kernel_layout": "HWIO", "padding": [1]}),
                  ([T(1, 3, 5, 5, dtype="uint8"), T(4, 3, 3, 3, dtype="int8")],
                   {"out_dtype": "int32"})],
    "nn.max_pool2d": [([T(1, 3, 8, 8)], {"pool_size": [2, 2], "strides": [2, 2]}),
                      ([T(1, 7, 7, 3)], {"pool_size": [3, 3], "strides": [2, 2], "padding": [1],
                                         "layout": "NHWC", "ceil_mode": True})],
    "nn.avg_pool2d": [([T(1, 3, 7, 7)], {"pool_size": [3, 3], "padding": [1, 1]}),
                      ([T(2, 3, 7, 6)], {"pool_size": [2, 3], "strides": [2, 2],
                                         "ceil_mode": True, "count_include_pad": True})],
    "nn.global_avg_pool2d": [([T(2, 3, 5, 7)], {}), ([T(2, 5, 7, 3)], {"layout": "NHWC"})],
    "nn.global_max_pool2d": [([T(2, 3, 5, 7)], {})],
    "nn.batch_flatten": [([T(2, 3, 4, 5)], {}), ([T(3)], {})],
    "nn.pad": [([T(2, 3), T()], {"pad_width": [[0, 1], [2, 3]]}),
               ([T(2, 3), T()], {"pad_width": [[1, 1], [2, 2]], "pad_mode": "reflect"})],
    "nn.layer_norm": [([T(2, 3, 4), T(4), T(4)], {}),
                      ([T(2, 3, 4), T(3), T(3)], {"axis": 1, "center": False})],
    "nn.batch_norm": [([T(2, 3, 4, 4), T(3), T(3), T(3), T(3)], {}),
                      ([T(2, 4, 3), T(3), T(3), T(3), T(3)], {"axis": -1, "scale": False})],
    "nn.dropout": [([T(2, 3)], {"rate": 0.25})],
    "nn.cross_entropy": [([T(2, 3), T(2, 3)], {})],
    "layout_transform": [([T(2, 8, 3, 3)], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}),
                         ([T(2, 2, 3, 3, 4)], {"src_layout": "NCHW4c", "dst_layout": "NHWC"}),
                         ([T(8, 4, 3, 3)], {"src_layout": "OIHW", "dst_layout": "OIHW2i4o"})],
    "dyn.reshape": [([T(2, 3, 4), _iv(-1, 4)], {}), ([T(2, 3, 4), _iv(0, -3)], {})],
    "dyn.broadcast_to": [([T(3, 1), _iv(2, 3, 4)], {})],
    "dyn.zeros": [([_iv(2, 3)], {}), ([_iv(4)], {"dtype": "int64"})],
    "dyn.nonzero": [([T(3, 4)], {}), ([B(2, 2, 3)], {"dtype": "int32"}), ([I()], {})],
    "dyn.unique": [([T(6)], {}), ([I(3, 4)], {"axis": 1, "sorted": False}),
                   ([T(2, 3)], {"axis": -2})],
    "dyn.topk": [([T(3, 5), _iv(2)], {}), ([T(4, 3), _iv(3)], {"axis": 0, "is_ascend": True,
                                                            "ret_type": "values"}),
                 ([I(6), np.array(0, "int32")], {"ret_type": "indices", "dtype": "int64"})],
    "dyn.ones": [([_iv(2, 3)], {"dtype": "bool"})],
    "dyn.full": [([T(), _iv(2, 2)], {}), ([I(), _iv(3)], {"dtype": "float16"})],
    "dyn.tile": [([T(2, 3), _iv(2, 1, 2)], {}), ([T(2, 3), _iv(3)], {})],
    "dyn.strided_slice": [([T(10, 8), _iv(1, 0), _iv(8, 8), _iv(3, 2)], {}),
                          ([T(10, 8), _iv(-1), _iv(-11), _iv(-1)], {})],
    "dyn.expand_dims": [([T(3, 4), np.array(-1, "int32")], {"num_newaxis": 2})],
    "dyn.squeeze": [([T(1, 3, 1), _iv(0, 2)], {}), ([T(1, 3, 1), _iv(-1)], {})],
    "dyn.nn.pad": [([T(2, 3), np.array([[0, 1], [2, 3]], "int64"), T()], {}),
                   ([T(2, 3), np.array([[1, 1], [2, 2]], "int32"), T()],
                    {"pad_mode": "reflect"})],
    "dyn.tile_grad": [([T(4, 3), T(2, 3), _iv(2, 1)], {}), ([T(2, 4, 3), T(4, 3), _iv(2, 1, 1)],
                                                             {})],
    "dyn.strided_slice_grad": [([T(3, 4), T(10, 8), _iv(1, 0), _iv(8, 8), _iv(3, 2)], {})],
    "dyn.nn.pad_grad": [([T(3, 8), T(2, 3), np.array([[0, 1], [2, 3]], "int64")], {}),
                        ([T(4, 7), T(2, 3), np.array([[1, 1], [2, 2]], "int64")],
                         {"pad_mode": "reflect"})],
    "on_device": [([T(2, 3)], {"virtual_device": 1, "constrain_result": True}),
                  ([TupleType((T(2), I()))], {})],
    "device_copy": [([T(2, 3)], {"src_virtual_device": 1, "dst_virtual_device": 2})],
    "annotation.stop_fusion": [([T(2, 3)], {})],
    "annotation.checkpoint": [([TupleType((T(2), I(3)))], {})],
    "annotation.compiler_begin": [([T(2, 3)], {"compiler": "ccompiler"})],
    "annotation.compiler_end": [([T(2, 3)], {"compiler": "ccompiler"})],
})

# opsa (issue 23): indexing and scan operators, relay_ir/op/indexing_ext.py
SAMPLES.update({
    "gather": [([T(4, 5), I(2, 5)], {"axis": 0}),
               ([T(3, 4), TensorType((3, 2), "int64")], {"axis": -1})],
    "gather_nd": [([T(4, 5, 6), I(2, 3)], {}), ([T(4, 5), I(1, 2, 3)], {}),
                  ([T(2, 4, 5), TensorType((1, 2, 3), "int64")], {"batch_dims": 1})],
    "scatter_elements": [([T(4, 5), I(2, 5), T(2, 5)], {"axis": 0}),
                         ([I(4, 5), I(4, 2), I(4, 2)], {"axis": 1, "reduction": "add"}),
                         ([T(4, 4), I(3, 3), T(3, 3)], {"axis": -1, "reduction": "max"})],
    "scatter_nd": [([T(4, 5), I(1, 3), T(3, 5)], {}),
                   ([T(4, 5), I(2, 3), T(3)], {"mode": "mul"}),
                   ([I(4, 4, 2), I(2, 2, 2), I(2, 2, 2)], {"mode": "add"})],
    "one_hot": [([I(2, 3), T(), T()], {"depth": 4}),
                ([TensorType((3,), "int64"), I(), I()], {"depth": 5, "axis": 0,
                                                          "dtype": "float16"})],
    "cumsum": [([T(2, 3, 4)], {"axis": 1}), ([T(2, 3)], {}),
               ([I(5)], {"axis": 0, "exclusive": True, "reverse": True, "dtype": "int64"})],
    "cumprod": [([T(2, 3, 4)], {"axis": -1, "exclusive": True}), ([I(2, 3)], {}),
                ([T(5)], {"axis": 0, "reverse": True, "dtype": "float64"})],
    "arange": [([], {"stop": 5.0}), ([], {"start": 1.0, "stop": 2.0, "step": 0.25,
                                           "dtype": "float64"}),
               ([], {"start": 10.0, "stop": 1.0, "step": -3.0, "dtype": "int32"})],
    "einsum": [([TupleType((T(2, 3), T(3, 4)))], {"equation": "ij,jk->ik"}),
               ([TupleType((T(3, 3),))], {"equation": "ii"}),
               ([TupleType((T(2, 3, 4), T(2, 4, 5), T(5)))], {"equation": "bij,bjk,k->bi"}),
               ([TupleType((T(2, 3, 4), T(4, 5)))], {"equation": "...j,jk"})],
})


def _random(t: Type, rng: np.random.Generator) -> Any:
    if isinstance(t, TupleType):
        return tuple(_random(f, rng) for f in t.fields)
    assert isinstance(t, TensorType)
    shape = t.concrete_shape
    if t.dtype == "bool":
        return rng.random(shape) < 0.5
    if t.dtype.startswith(("int", "uint")):
        return rng.integers(0, 4, shape).astype(t.dtype)
    return rng.uniform(0.1, 0.9, shape).astype(t.dtype)


def _type_of(v: Any) -> Type:
    if isinstance(v, tuple):
        return TupleType(tuple(_type_of(f) for f in v))
    assert type(v) is np.ndarray, f"implementation returned {type(v).__name__}, not ndarray"
    return TensorType(tuple(v.shape), str(v.dtype))


def test_every_op_has_samples():
    missing = [od.name for od in list_ops() if od.name not in SAMPLES]
    assert not missing, f"operators without samples in SAMPLES: {missing}"
    unknown = [n for n in SAMPLES if lookup_opdef(n) is None]
    assert not unknown


@pytest.mark.parametrize("opdef", list_ops(), ids=lambda od: od.name)
def test_opdef_complete(opdef):  # type: ignore[no-untyped-def]
    assert opdef.type_rel is not None, "no type relation"
    assert opdef.impl is not None, "no reference implementation"
    assert isinstance(opdef.pattern, OpPattern)
    assert opdef.doc, "no doc line"
    assert get_op(opdef.name) is opdef.op
    names = [f.name for f in opdef.attrs]
    assert len(set(names)) == len(names)
    if opdef.attrs:
        assert opdef.attrs_type.endswith("Attrs")
    for f in opdef.attrs:
        assert f.kind in ATTR_KINDS
        if f.default is not None:  # defaults are valid values of their own kind
            assert _attr_eq(f.convert(f.default), f.default), f.name


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_relation_matches_implementation(name):  # type: ignore[no-untyped-def]
    od = get_opdef(name)
    rng = np.random.default_rng(1234)
    for arg_types, given in SAMPLES[name]:
        assert len(arg_types) == od.num_inputs
        # NOTE: a sample argument may be a value (shape tensors of dyn.* ops): its type is used
        values = [a if isinstance(a, np.ndarray) else None for a in arg_types]
        arg_types = [_type_of(a) if isinstance(a, np.ndarray) else a for a in arg_types]
        attrs = od.make_attrs(given)
        want = od.type_rel(list(arg_types), attrs)
        if isinstance(want, tuple):  # (result, refined args): the args were complete here
            want, refined = want
            assert list(refined) == list(arg_types)
        args = [_random(t, rng) if v is None else v for t, v in zip(arg_types, values)]
        with np.errstate(all="ignore"):
            got = od.impl(args, attrs)
        assert _fits(_type_of(got), want), (arg_types, given)


def _fits(got: Type, want: Type) -> bool:
    """``got`` equals ``want`` where ``want`` has a ``?`` dimension anything fits."""
    if isinstance(want, TupleType):
        return (isinstance(got, TupleType) and len(got.fields) == len(want.fields)
                and all(_fits(g, w) for g, w in zip(got.fields, want.fields)))
    if isinstance(want, TensorType) and any(isinstance(d, AnyDim) for d in want.shape):
        return (isinstance(got, TensorType) and got.dtype == want.dtype
                and got.ndim == want.ndim
                and all(isinstance(w, AnyDim) or g == w for g, w in zip(got.shape, want.shape)))
    return got == want


def test_patterns_follow_tvm():
    expect = {"add": OpPattern.BROADCAST, "exp": OpPattern.ELEMWISE,
              "nn.relu": OpPattern.ELEMWISE, "sum": OpPattern.COMM_REDUCE,
              "argmax": OpPattern.COMM_REDUCE, "reshape": OpPattern.INJECTIVE,
              "transpose": OpPattern.INJECTIVE, "concatenate": OpPattern.INJECTIVE,
              "nn.conv2d": OpPattern.OUT_ELEMWISE_FUSABLE,
              "nn.dense": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.softmax": OpPattern.OPAQUE,
              "nn.batch_norm": OpPattern.OPAQUE, "where": OpPattern.BROADCAST,
              "cast": OpPattern.ELEMWISE, "nn.bias_add": OpPattern.BROADCAST,
              "nn.max_pool2d": OpPattern.OUT_ELEMWISE_FUSABLE}
    for name, pat in expect.items():
        assert get_opdef(name).pattern is pat, name


def test_attribute_schemas_match_relay():
    def schema(name: str) -> list[tuple[str, str, Any]]:
        return [(f.name, f.kind, f.default) for f in get_opdef(name).attrs]
    assert schema("sum") == [("axis", "ints?", None), ("keepdims", "bool", False),
                             ("exclude", "bool", False)]
    assert [f[0] for f in schema("argmax")] == ["axis", "keepdims", "select_last_index",
                                                "exclude"]
    assert schema("reshape") == [("newshape", "ints", None), ("allowzero", "bool", False)]
    assert schema("take") == [("axis", "int?", None), ("batch_dims", "int", 0),
                              ("mode", "str", "clip")]
    assert schema("split") == [("indices_or_sections", "int_or_ints", None), ("axis", "int", 0)]
    assert schema("nn.dense") == [("units", "int?", None), ("out_dtype", "str", "")]
    assert dict((n, d) for n, _, d in schema("nn.conv2d")) == {
        "strides": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
        "channels": None, "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "OIHW",
        "out_layout": "", "out_dtype": ""}
    assert dict((n, d) for n, _, d in schema("nn.avg_pool2d"))["count_include_pad"] is False
    assert schema("nn.softmax") == [("axis", "int", -1)]
    assert dict((n, d) for n, _, d in schema("nn.batch_norm")) == {
        "axis": 1, "epsilon": 1e-5, "center": True, "scale": True}
    assert schema("nn.leaky_relu") == [("alpha", "float", 0.01)]
    assert get_opdef("nn.batch_norm").num_inputs == 5
    assert get_opdef("nn.pad").num_inputs == 2
    assert get_opdef("zeros").num_inputs == 0


def test_text_format_operator_names_registered():
    for name in ["add", "subtract", "multiply", "divide", "less", "greater", "less_equal",
                 "greater_equal", "equal", "not_equal", "nn.global_avg_pool2d"]:
        assert lookup_opdef(name) is not None
    assert lookup_opdef("nn.no_such_op") is None


def test_new_op_template_renders_a_working_operator():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "scripts", "new_op.py")
    spec = importlib.util.spec_from_file_location("new_op", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    code = mod.render("nn.my_scaled", 2)
    import relay_ir.op.nn as family
    captured: dict[str, Any] = {}
    ns = dict(vars(family))
    ns["defop"] = lambda name, n, **kw: captured.update(name=name, n=n, **kw)
    exec(compile(code, "<new_op>", "exec"), ns)
    assert captured["name"] == "nn.my_scaled" and captured["n"] == 2
    x = np.arange(6, dtype="float32").reshape(2, 3)
    assert captured["rel"]([T(2, 3), T(3)], {}) == T(2, 3)
    np.testing.assert_array_equal(captured["impl"]([x, x[0]], {}), x)
    assert mod.main(["add", "--dry-run"]) == 1  # already registered
    assert mod.main(["bad name", "--dry-run"]) == 2


# ----------------------------------------------------------------------------- part opsb (issue 23)
# sorting (relay_ir/op/sorting.py), transposed/1-d convolutions, instance/group norm, resize
# (relay_ir/op/conv_ext.py)
SAMPLES.update({
    "topk": [([T(3, 5)], {"k": 2}), ([I(4, 3)], {"k": 2, "axis": 0, "ret_type": "values"}),
             ([T(2, 6)], {"k": 0, "ret_type": "indices", "is_ascend": True,
                          "dtype": "int64"})],
    "argsort": [([T(3, 5)], {}), ([I(4, 3)], {"axis": 0, "is_ascend": False,
                                               "dtype": "int64"})],
    "sort": [([T(3, 5)], {}), ([I(4, 3)], {"axis": 0, "is_ascend": False})],
    "nn.conv2d_transpose": [([T(1, 4, 5, 5), T(4, 3, 3, 3)], {}),
                            ([T(2, 4, 4, 5), T(4, 3, 3, 2)],
                             {"strides": [2, 3], "padding": [1, 0, 2, 1], "dilation": [1, 2],
                              "output_padding": [1, 2], "groups": 2}),
                            ([T(1, 5, 5, 4), T(3, 3, 2, 4)],
                             {"data_layout": "NHWC", "kernel_layout": "HWOI"})],
    "nn.conv1d": [([T(2, 4, 9), T(6, 2, 3)], {"strides": [2], "padding": [1, 2],
                                                "dilation": [2], "groups": 2}),
                  ([T(1, 7, 3), T(3, 3, 5)], {"data_layout": "NWC", "kernel_layout": "WIO"})],
    "nn.conv1d_transpose": [([T(2, 4, 9), T(4, 3, 3)], {"strides": [2], "padding": [1, 2],
                                                          "output_padding": [1],
                                                          "groups": 2})],
    "nn.instance_norm": [([T(2, 3, 4, 5), T(3), T(3)], {}),
                         ([T(2, 4, 3), T(3), T(3)], {"axis": -1, "center": False})],
    "nn.group_norm": [([T(2, 6, 4, 5), T(6), T(6)], {"num_groups": 3}),
                      ([T(2, 5, 4), T(4), T(4)], {"num_groups": 2, "axis": -1,
                                                   "scale": False})],
    "image.resize2d": [([T(1, 3, 4, 5)], {"size": [8, 3]}),
                       ([T(2, 4, 5, 3)], {"size": [2, 7], "layout": "NHWC",
                                          "method": "cubic"}),
                       ([I(1, 2, 3, 3)], {"size": [6, 6], "method": "nearest_neighbor",
                                          "coordinate_transformation_mode": "asymmetric"})],
})
