"""Operator library: exact result types (inventory §5), error messages, reference values."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay_ir.errors import DiagnosticError, ShapeMismatchError, TypeInferenceError
from relay_ir.op import AttrError, OpDef, get_opdef, register_op
from relay_ir.op._rules import make_call
from relay_ir.ty import ANY, IncompleteType, ShapeVar, TensorType, TupleType, dim_add, dim_mul
from util_ops import assert_relation_error, T, rel, run


I32 = "int32"

# (op, arg types, attrs, expected result type) -- RELAY_TESTS_INVENTORY.md §5, row by row
INVENTORY = [
    ("add", [T(1, 3), T(4, 1)], {}, T(4, 3)),
    ("add", [T(10, 4), T(5, 10, 1)], {}, T(5, 10, 4)),
    ("add", [T(2, 3), T()], {}, T(2, 3)),
    ("add", [T(ANY, 3), T(4, 1)], {}, T(4, 3)),
    ("add", [T(ANY, 3), T(1, 3)], {}, T(ANY, 3)),
    ("less", [T(2, 1), T(3)], {}, T(2, 3, dtype="bool")),
    ("nn.dense", [T(2, 5), T(3, 5)], {}, T(2, 3)),
    ("nn.dense", [T(4, 2, 5), T(3, 5)], {}, T(4, 2, 3)),
    ("reshape", [T(2, 3, 4)], {"newshape": [-1, 4]}, T(6, 4)),
    ("reshape", [T(2, 3, 4)], {"newshape": [0, -1]}, T(2, 12)),
    ("reshape", [T(2, 3, 4)], {"newshape": [4, 0, 2]}, T(4, 3, 2)),
    ("reshape", [T(2, 3, 4)], {"newshape": [-2]}, T(2, 3, 4)),
    ("reshape", [T(2, 3, 4)], {"newshape": [-3, 4]}, T(6, 4)),
    ("reshape", [T(2, 3, 4)], {"newshape": [-4, 1, 2, -2]}, T(1, 2, 3, 4)),
    ("sum", [T(2, 3, 4)], {"axis": [1]}, T(2, 4)),
    ("sum", [T(2, 3, 4)], {"axis": [1], "keepdims": True}, T(2, 1, 4)),
    ("sum", [T(2, 3, 4)], {"axis": [0, 2]}, T(3)),
    ("sum", [T(2, 3, 4)], {"axis": [-1]}, T(2, 3)),
    ("sum", [T(2, 3, 4)], {}, T()),
    ("sum", [T(2, 3, 4)], {"axis": [1], "exclude": True}, T(3)),
    ("argmax", [T(2, 3)], {"axis": [1]}, T(2, dtype=I32)),
    ("concatenate", [TupleType((T(2, 3), T(4, 3)))], {"axis": 0}, T(6, 3)),
    ("concatenate", [TupleType((T(2, 3), T(2, 5)))], {"axis": -1}, T(2, 8)),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 3, 3, 3)], {}, T(1, 8, 30, 30)),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 3, 3, 3)], {"padding": [1, 1]}, T(1, 8, 32, 32)),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 3, 3, 3)], {"strides": [2, 2], "padding": [1, 1]},
     T(1, 8, 16, 16)),
    ("nn.conv2d", [T(1, 32, 32, 3), T(3, 3, 3, 8)],
     {"data_layout": "NHWC", "kernel_layout": "HWIO"}, T(1, 30, 30, 8)),
    ("transpose", [T(2, 3, 4)], {"axes": [2, 0, 1]}, T(4, 2, 3)),
    ("transpose", [T(2, 3, 4)], {}, T(4, 3, 2)),
    ("take", [T(5, 4), T(3, dtype=I32)], {"axis": 0}, T(3, 4)),
    ("take", [T(5, 4), T(2, 2, dtype=I32)], {"axis": 1}, T(5, 2, 2)),
    ("take", [T(5, 4), T(3, dtype=I32)], {}, T(3)),
    ("split", [T(6, 4)], {"indices_or_sections": 3, "axis": 0},
     TupleType((T(2, 4), T(2, 4), T(2, 4)))),
    ("split", [T(6, 4)], {"indices_or_sections": [1, 4], "axis": 0},
     TupleType((T(1, 4), T(3, 4), T(2, 4)))),
    ("expand_dims", [T(3, 4)], {"axis": 1, "num_newaxis": 2}, T(3, 1, 1, 4)),
    ("squeeze", [T(1, 3, 1)], {"axis": [0]}, T(3, 1)),
    ("squeeze", [T(1, 3, 1)], {}, T(3)),
    ("cast", [T(2, 3)], {"dtype": "int8"}, T(2, 3, dtype="int8")),
    ("nn.softmax", [T(2, 3)], {"axis": -1}, T(2, 3)),
    ("nn.relu", [T(2, 3)], {}, T(2, 3)),
    ("exp", [T(2, 3)], {}, T(2, 3)),
    ("log", [T(2, 3)], {}, T(2, 3)),
    ("negative", [T(2, 3)], {}, T(2, 3)),
    ("where", [T(2, 1, dtype="bool"), T(3), T()], {}, T(2, 3)),
    ("equal", [T(dtype=I32), T(dtype=I32)], {}, T(dtype="bool")),
    ("log", [T()], {}, T()),
]


@pytest.mark.parametrize("name,args,attrs,expected", INVENTORY,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(INVENTORY)])
def test_inventory_result_types(name, args, attrs, expected):  # type: ignore[no-untyped-def]
    assert rel(name, *args, **attrs) == expected


def test_dense_infers_weight_from_units():
    w = IncompleteType()
    out, refined = rel("nn.dense", T(2, 5), w, units=3)
    assert out == T(2, 3)
    assert refined[1] == T(3, 5)
    # without units the relation waits for the weight
    assert rel("nn.dense", T(2, 5), IncompleteType()) is None


def test_conv2d_infers_weight_from_channels_and_kernel_size():
    out, refined = rel("nn.conv2d", T(1, 3, 32, 32), IncompleteType(), channels=8,
                       kernel_size=[3, 3])
    assert out == T(1, 8, 30, 30)
    assert refined[1] == T(8, 3, 3, 3)
    out, refined = rel("nn.conv2d", T(1, 32, 32, 4), IncompleteType(), channels=6,
                       kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO", groups=2)
    assert out == T(1, 30, 30, 6)
    assert refined[1] == T(3, 3, 2, 6)


def test_bias_add_and_norms_infer_parameters():
    out, refined = rel("nn.bias_add", T(2, 7, 5), IncompleteType())
    assert out == T(2, 7, 5) and refined[1] == T(7)
    out, refined = rel("nn.batch_norm", T(2, 4, 5, 5), *[IncompleteType() for _ in range(4)])
    assert out == TupleType((T(2, 4, 5, 5), T(4), T(4)))
    assert refined[1:] == [T(4)] * 4
    out, refined = rel("nn.layer_norm", T(2, 6), IncompleteType(), T(6))
    assert out == T(2, 6) and refined == [T(2, 6), T(6), T(6)]


def test_incomplete_arguments_defer():
    assert rel("add", IncompleteType(), T(2)) is None
    assert rel("concatenate", TupleType((T(2), IncompleteType()))) is None
    assert rel("concatenate", IncompleteType()) is None
    assert rel("sum", IncompleteType()) is None


# ----------------------------------------------------------------------------- more result types
MORE = [
    ("add", [T(ANY), T(1)], {}, T(ANY)),
    ("add", [T(ANY), T(ANY)], {}, T(ANY)),
    ("add", [T(1), T(ANY)], {}, T(ANY)),
    ("argmin", [T(2, 3, 4)], {"axis": [0, 2], "keepdims": True}, T(1, 3, 1, dtype=I32)),
    ("argmax", [T(2, 3)], {}, T(dtype=I32)),
    ("mean", [T(2, 3, dtype="float16")], {"axis": [0]}, T(3, dtype="float16")),
    ("variance", [T(2, 3), T(2, 1)], {"axis": [1]}, T(2)),
    ("stack", [TupleType((T(2, 3), T(2, 3), T(2, 3)))], {"axis": 1}, T(2, 3, 3)),
    ("stack", [TupleType((T(2, 3), T(2, 3)))], {"axis": -1}, T(2, 3, 2)),
    ("strided_slice", [T(10, 8)], {"begin": [1, 0], "end": [8, 8], "strides": [3, 2]}, T(3, 4)),
    ("strided_slice", [T(10, 8)], {"begin": [-1], "end": [-11], "strides": [-1]}, T(10, 8)),
    ("strided_slice", [T(10, 8)], {"begin": [2], "end": [3], "axes": [1],
                                   "slice_mode": "size"}, T(10, 3)),
    ("broadcast_to", [T(3, 1)], {"shape": [2, 3, 4]}, T(2, 3, 4)),
    ("broadcast_to_like", [T(1, 4), T(3, 4)], {}, T(3, 4)),
    ("collapse_sum_like", [T(2, 3, 4), T(3, 1)], {}, T(3, 1)),
    ("collapse_sum_to", [T(2, 3, 4)], {"shape": [1, 4]}, T(1, 4)),
    ("reshape_like", [T(2, 3, 4), T(6, 4)], {}, T(6, 4)),
    ("reshape_like", [T(2, 3, 4), T(6, 9)], {"lhs_begin": 0, "lhs_end": 2, "rhs_end": 1},
     T(6, 4)),
    ("nn.batch_matmul", [T(2, 3, 5), T(2, 4, 5)], {}, T(2, 3, 4)),
    ("nn.batch_matmul", [T(1, 3, 5), T(2, 5, 4)], {"transpose_b": False}, T(2, 3, 4)),
    ("nn.matmul", [T(3, 5), T(5, 4)], {}, T(3, 4)),
    ("nn.matmul", [T(5, 3), T(4, 5)], {"transpose_a": True, "transpose_b": True}, T(3, 4)),
    ("nn.dense", [T(2, 5, dtype="int8"), T(3, 5, dtype="int8")], {"out_dtype": "int32"},
     T(2, 3, dtype=I32)),
    ("nn.max_pool2d", [T(1, 3, 32, 32)], {"pool_size": [2, 2], "strides": [2, 2]},
     T(1, 3, 16, 16)),
    ("nn.max_pool2d", [T(1, 3, 7, 7)], {"pool_size": [2, 2], "strides": [2, 2],
                                        "ceil_mode": True}, T(1, 3, 4, 4)),
    ("nn.avg_pool2d", [T(1, 7, 7, 3)], {"pool_size": [3, 3], "padding": [1], "layout": "NHWC"},
     T(1, 7, 7, 3)),
    ("nn.global_avg_pool2d", [T(2, 3, 5, 7)], {}, T(2, 3, 1, 1)),
    ("nn.batch_flatten", [T(2, 3, 4, 5)], {}, T(2, 60)),
    ("nn.pad", [T(2, 3), T()], {"pad_width": [[0, 1], [2, 3]]}, T(3, 8)),
    ("nn.dropout", [T(2, 3)], {}, TupleType((T(2, 3), T(2, 3)))),
    ("nn.conv2d", [T(1, 4, 9, 9), T(6, 2, 3, 3)],
     {"groups": 2, "dilation": [2, 2], "padding": [1, 2, 3, 4]}, T(1, 6, 9, 11)),
    ("zeros", [], {"shape": [2, 3]}, T(2, 3)),
    ("ones", [], {"shape": [], "dtype": "int64"}, T(dtype="int64")),
    ("full", [T(dtype=I32)], {"shape": [4]}, T(4, dtype=I32)),
    ("full", [T(dtype=I32)], {"shape": [4], "dtype": "float16"}, T(4, dtype="float16")),
    ("zeros_like", [T(2, dtype="int8")], {}, T(2, dtype="int8")),
    ("clip", [T(2, 3)], {"a_min": 0.0, "a_max": 1.0}, T(2, 3)),
    ("shape_of", [T(2, 3, 4)], {}, T(3, dtype=I32)),
    ("isnan", [T(2)], {}, T(2, dtype="bool")),
    ("tile", [T(2, 3)], {"reps": [2, 1, 2]}, T(2, 2, 6)),
    ("repeat", [T(2, 3)], {"repeats": 2, "axis": 1}, T(2, 6)),
    ("take", [T(3, 5, 4), T(3, 2, dtype=I32)], {"axis": 1, "batch_dims": 1}, T(3, 2, 4)),
]


@pytest.mark.parametrize("name,args,attrs,expected", MORE,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(MORE)])
def test_more_result_types(name, args, attrs, expected):  # type: ignore[no-untyped-def]
    assert rel(name, *args, **attrs) == expected


# ----------------------------------------------------------------------------- symbolic dims
def test_symbolic_dimensions():
    n, m = ShapeVar("n"), ShapeVar("m")
    assert rel("add", T(n, 4), T(n, 4)) == T(n, 4)
    assert rel("add", T(n, 1), T(1, 4)) == T(n, 4)
    assert rel("add", T(1), T(n)) == T(n)
    assert rel("add", T(ANY), T(n)) == T(n)
    with pytest.raises(ShapeMismatchError, match="cannot broadcast symbolic dimension n with m"):
        rel("add", T(n), T(m))
    with pytest.raises(ShapeMismatchError, match="cannot broadcast symbolic dimension n with 4"):
        rel("add", T(n), T(4))
    assert rel("reshape", T(n, 4), newshape=[-1]) == T(dim_mul(4, n))
    assert rel("reshape", T(n, 4), newshape=[-1, 2]) == T(dim_mul(2, n), 2)
    assert rel("reshape", T(n, 4, 3), newshape=[0, -3]) == T(n, 12)
    with pytest.raises(ShapeMismatchError, match="4\\*n elements to \\(8\\) with 8 elements"):
        rel("reshape", T(n, 4), newshape=[8])
    assert rel("nn.dense", T(n, 5), T(3, 5)) == T(n, 3)
    assert rel("concatenate", TupleType((T(n, 3), T(m, 3)))) == T(dim_add(n, m), 3)
    assert rel("concatenate", TupleType((T(n, 3), T(2, 3)))) == T(dim_add(n, 2), 3)
    assert rel("nn.batch_flatten", T(n, 3, 4)) == T(n, 12)
    assert rel("split", T(dim_mul(2, n), 3), indices_or_sections=2) == \
        TupleType((T(n, 3), T(n, 3)))
    assert rel("nn.conv2d", T(n, 3, m, 8), T(4, 3, 3, 3)) == T(n, 4, dim_add(m, -2), 6)
    assert rel("sum", T(n, m), axis=[0]) == T(m)
    assert rel("strided_slice", T(n, 5), begin=[0, 1], end=[2, 3]) == T(ANY, 2)


# ----------------------------------------------------------------------------- error messages
ERRORS = [
    ("add", [T(2, 3), T(3, 2)], {}, ShapeMismatchError,
     "incompatible broadcast shapes (2, 3) and (3, 2): dimension 2 does not match 3"),
    ("add", [T(dtype=I32), T()], {}, ShapeMismatchError,
     "data types int32 and float32 do not match"),
    ("reshape", [T(2, 3)], {"newshape": [4, 2]}, ShapeMismatchError,
     "cannot reshape (2, 3) with 6 elements to (4, 2) with 8 elements"),
    ("reshape", [T(2, 3)], {"newshape": [-1, 4]}, ShapeMismatchError,
     "cannot reshape (2, 3) with 6 elements: 4 does not divide it"),
    ("reshape", [T(2, 3)], {"newshape": [-1, -1]}, TypeInferenceError, "more than one -1"),
    ("concatenate", [TupleType((T(2, 3), T(2, 4)))], {"axis": 0}, ShapeMismatchError,
     "concatenate: dimension 1 of input 1 is 4, but 3 in input 0"),
    ("concatenate", [TupleType((T(2, 3), T(2, 3, 1)))], {}, ShapeMismatchError,
     "concatenate: input 1 has rank 3, but input 0 has rank 2"),
    ("concatenate", [TupleType((T(2, 3), T(2, 3, dtype=I32)))], {}, ShapeMismatchError,
     "concatenate: data types float32 and int32 do not match"),
    ("concatenate", [TupleType((T(2, 3), T(2, 3)))], {"axis": 2}, TypeInferenceError,
     "axis 2 is out of range for a tensor of rank 2"),
    ("sum", [T(2, 3)], {"axis": [3]}, TypeInferenceError,
     "axis 3 is out of range for a tensor of rank 2"),
    ("sum", [T(2, 3)], {"axis": [1, -1]}, TypeInferenceError, "appears more than once"),
    ("transpose", [T(2, 3, 4)], {"axes": [0, 1, 1]}, TypeInferenceError,
     "transpose: axis 1 appears more than once in axes (0, 1, 1)"),
    ("transpose", [T(2, 3, 4)], {"axes": [0, 1]}, TypeInferenceError,
     "transpose: axes (0, 1) has 2 entries for a tensor of rank 3"),
    ("transpose", [T(2, 3)], {"axes": [0, 5]}, TypeInferenceError,
     "axis 5 is out of range for a tensor of rank 2"),
    ("split", [T(7, 4)], {"indices_or_sections": 3}, ShapeMismatchError,
     "split: cannot split axis 0 of size 7 into 3 equal sections"),
    ("split", [T(7, 4)], {"indices_or_sections": 2, "axis": 2}, TypeInferenceError,
     "axis 2 is out of range for a tensor of rank 2"),
    ("expand_dims", [T(3, 4)], {"axis": 3}, TypeInferenceError,
     "axis 3 is out of range for a tensor of rank 2"),
    ("take", [T(5, 4), T(3)], {"axis": 0}, TypeInferenceError,
     "take: indices must have an integer dtype, found float32"),
    ("take", [T(5, 4), T(3, dtype=I32)], {"mode": "nearest"}, TypeInferenceError,
     "take: unknown mode 'nearest'"),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 4, 3, 3)], {}, ShapeMismatchError,
     "nn.conv2d: data has 3 input channels, but the weight expects 4 per group (groups=1)"),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 3, 3, 3)], {"kernel_size": [5, 5]},
     ShapeMismatchError, "nn.conv2d: kernel_size=(5, 5) but the weight's kernel is (3, 3)"),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 3, 3, 3)], {"channels": 4}, ShapeMismatchError,
     "nn.conv2d: channels=4 but the weight has 8 output channels"),
    ("nn.conv2d", [T(3, 32, 32), T(8, 3, 3, 3)], {}, TypeInferenceError,
     "nn.conv2d: data must have rank 4, found rank 3"),
    ("nn.conv2d", [T(1, 3, 32, 32), T(8, 3, 3, 3)], {"data_layout": "NCWX"},
     TypeInferenceError, "unsupported data_layout 'NCWX'"),
    ("nn.dense", [T(2, 5), T(3, 4)], {}, ShapeMismatchError,
     "nn.dense: inner dimensions do not match: 5 vs 4"),
    ("nn.bias_add", [T(2, 3), T(4)], {}, ShapeMismatchError,
     "nn.bias_add: bias must have shape (3) (axis 1 of data), found (4)"),
    ("squeeze", [T(1, 3)], {"axis": [1]}, ShapeMismatchError, "squeeze: axis 1 has size 3"),
    ("cast", [T(2)], {"dtype": "float8"}, TypeInferenceError, "unknown dtype 'float8'"),
    ("where", [T(2, dtype="bool"), T(2), T(2, dtype=I32)], {}, ShapeMismatchError,
     "data types float32 and int32 do not match"),
    ("broadcast_to", [T(3, 2)], {"shape": [3, 4]}, ShapeMismatchError,
     "broadcast_to: cannot broadcast (3, 2) to (3, 4)"),
    ("add", [TupleType(()), T(2)], {}, TypeInferenceError,
     "expected a tensor for lhs, found"),
    ("all", [T(2)], {}, TypeInferenceError, "all expects a bool tensor, found float32"),
    ("nn.max_pool2d", [T(1, 1, 2, 2)], {"pool_size": [3, 3]}, ShapeMismatchError,
     "larger than the padded input"),
    ("full", [T(2)], {"shape": [3]}, TypeInferenceError, "fill_value must be a scalar"),
    ("zeros", [], {}, TypeInferenceError, "zeros needs a shape attribute"),
]


@pytest.mark.parametrize("name,args,attrs,exc,msg", ERRORS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ERRORS)])
def test_error_messages(name, args, attrs, exc, msg):  # type: ignore[no-untyped-def]
    assert_relation_error(name, args, attrs, exc, msg)


def test_error_categories_have_distinct_messages():
    """broadcast, dtype, rank, reshape size, concat dims, axis range, duplicate axes, split,
    take indices, conv2d channels: one message each, all different."""
    cases = [("add", [T(2, 3), T(3, 2)], {}), ("add", [T(dtype=I32), T()], {}),
             ("nn.conv2d", [T(3, 32, 32), T(8, 3, 3, 3)], {}),
             ("reshape", [T(2, 3)], {"newshape": [4, 2]}),
             ("concatenate", [TupleType((T(2, 3), T(2, 4)))], {}),
             ("sum", [T(2, 3)], {"axis": [3]}), ("transpose", [T(2, 3)], {"axes": [1, 1]}),
             ("split", [T(7, 4)], {"indices_or_sections": 3}),
             ("take", [T(5, 4), T(3)], {"axis": 0}),
             ("nn.conv2d", [T(1, 3, 32, 32), T(8, 4, 3, 3)], {})]
    msgs = []
    for name, args, attrs in cases:
        with pytest.raises(TypeInferenceError) as info:
            rel(name, *args, **attrs)
        msgs.append(info.value.message)
    assert len(set(msgs)) == len(msgs), msgs


def test_attribute_schema_errors():
    with pytest.raises(AttrError, match="`sum` has no attribute axes"):
        get_opdef("sum").make_attrs({"axes": [1]})
    with pytest.raises(AttrError, match="attribute `keepdims` of `sum`"):
        get_opdef("sum").make_attrs({"keepdims": "yes"})


def test_register_twice_raises():
    with pytest.raises(ValueError, match="already registered"):
        register_op(OpDef(name="add", num_inputs=2))


def test_make_call_fills_defaults():
    from relay_ir.expr import Var
    x = Var("x")
    c = make_call("nn.conv2d", x, x, padding=[1, 1])
    assert c.attrs.padding == (1, 1) and c.attrs.strides == (1, 1)
    assert c.attrs.type_key == "Conv2DAttrs"
    assert c.op is get_opdef("nn.conv2d").op


# ----------------------------------------------------------------------------- reference values
rng = np.random.default_rng(0)


def test_integer_division_semantics():
    a = np.array([7, -7, 7, -7, 0, 5], "int32")
    b = np.array([2, 2, -2, -2, 3, 0], "int32")
    d = run("divide", a, b)
    assert d.dtype == np.int32 and d.tolist() == [3, -3, -3, 3, 0, 0]
    assert run("floor_divide", a, b).tolist() == [3, -4, -4, 3, 0, 0]
    assert run("mod", a[:5], b[:5]).tolist() == [1, -1, 1, -1, 0]
    assert run("floor_mod", a[:5], b[:5]).tolist() == [1, 1, -1, -1, 0]
    f = run("divide", np.float32(7.0) * np.ones(1, "float32"), np.array([-2.0], "float32"))
    assert f.tolist() == [-3.5]
    assert run("floor_mod", np.array([-7.5], "float32"), np.array([2.0], "float32")).tolist() \
        == [0.5]
    assert run("power", np.array([2, -1, 1, 3], "int32"), np.array([-1, -3, -2, 2], "int32")
               ).tolist() == [0, -1, 1, 9]


def test_scalar_results_stay_arrays_with_exact_dtypes():
    h = np.asarray(1.5, "float16")
    for name in ("exp", "negative", "sqrt", "sigmoid", "nn.relu", "copy"):
        r = run(name, h)
        assert type(r) is np.ndarray and r.dtype == np.float16 and r.shape == ()
    r = run("add", h, h)
    assert type(r) is np.ndarray and r.dtype == np.float16 and float(r) == 3.0
    r = run("less", np.asarray(1, "int32"), np.asarray(2, "int32"))
    assert type(r) is np.ndarray and r.dtype == np.bool_ and bool(r)
    r = run("sum", np.ones((3,), "float16"))
    assert type(r) is np.ndarray and r.dtype == np.float16 and float(r) == 3.0
    r = run("exp", np.asarray([0, 1], "int32"))
    assert r.dtype == np.int32 and r.tolist() == [1, 2]


def test_cast_truncates_and_clip_keeps_dtype():
    x = np.array([-1.7, -0.5, 0.5, 2.9], "float32")
    assert run("cast", x, dtype="int32").tolist() == [-1, 0, 0, 2]
    assert run("cast", x, dtype="bool").tolist() == [True, True, True, True]
    r = run("clip", np.array([-5, 0, 9], "int8"), a_min=-1.5, a_max=100.0)
    assert r.dtype == np.int8 and r.tolist() == [-1, 0, 9]
    r = run("clip", np.array([-5, 0, 9], "int8"), a_min=float("-inf"), a_max=float("inf"))
    assert r.tolist() == [-5, 0, 9]


def test_round_half_away_from_zero():
    assert run("round", np.array([0.5, 1.5, 2.5, -0.5, -2.5], "float32")).tolist() == \
        [1.0, 2.0, 3.0, -1.0, -3.0]


def test_reshape_codes_values():
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    for code, shape in [([-1, 4], (6, 4)), ([0, -1], (2, 12)), ([4, 0, 2], (4, 3, 2)),
                        ([-3, 4], (6, 4)), ([-4, 1, 2, -2], (1, 2, 3, 4)),
                        ([2, -4, -1, 3, 4], (2, 1, 3, 4)), ([0, 0, -1], (2, 3, 4))]:
        r = run("reshape", x, newshape=code)
        assert r.shape == shape
        np.testing.assert_array_equal(r.reshape(-1), x.reshape(-1))
    assert run("reshape", np.zeros((0, 3)), newshape=[0, 3], allowzero=True).shape == (0, 3)


def test_take_modes():
    x = np.arange(20, dtype="float32").reshape(5, 4)
    i = np.array([-1, 0, 4, 7], "int32")
    np.testing.assert_array_equal(run("take", x, i, axis=0), x[[0, 0, 4, 4]])
    np.testing.assert_array_equal(run("take", x, i, axis=0, mode="wrap"), x[[4, 0, 4, 2]])
    np.testing.assert_array_equal(run("take", x, i), x.reshape(-1)[[0, 0, 4, 7]])
    np.testing.assert_array_equal(run("take", x, np.array([[1, 3]], "int64"), axis=1),
                                  x[:, [[1, 3]]])
    d = rng.standard_normal((3, 5, 4)).astype("float32")
    ind = np.array([[0, 4], [1, 1], [3, 2]], "int32")
    r = run("take", d, ind, axis=1, batch_dims=1)
    expect = np.stack([d[b][ind[b]] for b in range(3)])
    np.testing.assert_array_equal(r, expect)


def test_strided_slice_values():
    x = np.arange(80, dtype="int32").reshape(10, 8)
    cases = [
        ({"begin": [1, 0], "end": [8, 8], "strides": [3, 2]}, x[1:8:3, 0:8:2]),
        ({"begin": [-1], "end": [-11], "strides": [-1]}, x[::-1]),
        ({"begin": [2], "end": [3], "axes": [1], "slice_mode": "size"}, x[:, 2:5]),
        ({"begin": [2, 1], "end": [-1, 2], "slice_mode": "size"}, x[2:, 1:3]),
        ({"begin": [0, 100], "end": [10, 200]}, x[0:10, 100:200]),
        ({"begin": [5], "end": [2]}, x[5:2]),
        ({"begin": [0, 0], "end": [10, 8], "strides": [2]}, x[0:10:2, 0:8]),
    ]
    for attrs, expect in cases:
        r = run("strided_slice", x, **attrs)
        np.testing.assert_array_equal(r, expect)
        assert rel("strided_slice", T(10, 8, dtype=I32), **attrs) == \
            T(*expect.shape, dtype=I32)


def _naive_conv2d(x, w, stride, pad, dil, groups):  # type: ignore[no-untyped-def]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = pad
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), x.dtype)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), "float64")
    og = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for y in range(oh):
                for xx in range(ow):
                    acc = 0.0
                    for ic in range(cg):
                        for i in range(kh):
                            for j in range(kw):
                                acc += (xp[b, g * cg + ic, y * stride[0] + i * dil[0],
                                           xx * stride[1] + j * dil[1]] * w[oc, ic, i, j])
                    out[b, oc, y, xx] = acc
    return out


@pytest.mark.parametrize("stride,pad,dil,groups", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 1), (1, 2, 0, 1), (1, 2), 1),
    ((2, 2), (1, 1, 1, 1), (1, 1), 2),
])
def test_conv2d_vs_naive_loop(stride, pad, dil, groups):  # type: ignore[no-untyped-def]
    x = rng.standard_normal((2, 4, 7, 6)).astype("float32")
    w = rng.standard_normal((6, 4 // groups, 3, 2)).astype("float32")
    expect = _naive_conv2d(x, w, stride, pad, dil, groups)
    r = run("nn.conv2d", x, w, strides=list(stride), padding=list(pad), dilation=list(dil),
            groups=groups)
    assert r.dtype == np.float32
    np.testing.assert_allclose(r, expect, rtol=1e-4, atol=1e-4)
    assert rel("nn.conv2d", T(2, 4, 7, 6), T(6, 4 // groups, 3, 2), strides=list(stride),
               padding=list(pad), dilation=list(dil), groups=groups) == T(*expect.shape)
    # the same convolution in NHWC / HWIO
    rh = run("nn.conv2d", x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0),
             strides=list(stride), padding=list(pad), dilation=list(dil), groups=groups,
             data_layout="NHWC", kernel_layout="HWIO")
    np.testing.assert_allclose(rh, expect.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def _naive_pool(x, k, s, pad, kind, include_pad, ceil_mode):  # type: ignore[no-untyped-def]
    n, c, h, w = x.shape
    pt, pl, pb, pr = pad

    def od(d, p, kk, ss):  # type: ignore[no-untyped-def]
        num = d + p - kk
        return (-(-num // ss) if ceil_mode else num // ss) + 1
    oh, ow = od(h, pt + pb, k[0], s[0]), od(w, pl + pr, k[1], s[1])
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        for xx in range(ow):
            vals, cnt = [], 0
            for i in range(k[0]):
                for j in range(k[1]):
                    r, q = y * s[0] + i - pt, xx * s[1] + j - pl
                    inside = 0 <= r < h and 0 <= q < w
                    in_pad = -pt <= r < h + pb and -pl <= q < w + pr
                    if inside:
                        vals.append(x[:, :, r, q])
                        cnt += 1
                    elif in_pad:
                        if kind == "avg":
                            vals.append(np.zeros((n, c)))
                        if include_pad:
                            cnt += 1
            st = np.stack(vals)
            out[:, :, y, xx] = st.max(0) if kind == "max" else st.sum(0) / cnt
    return out


@pytest.mark.parametrize("kind,k,s,pad,include_pad,ceil_mode", [
    ("max", (2, 2), (2, 2), (0, 0, 0, 0), False, False),
    ("max", (3, 3), (2, 2), (1, 1, 1, 1), False, True),
    ("avg", (3, 3), (1, 1), (1, 1, 1, 1), False, False),
    ("avg", (3, 3), (1, 1), (1, 1, 1, 1), True, False),
    ("avg", (2, 3), (2, 2), (0, 1, 1, 0), True, True),
])
def test_pools_vs_naive(kind, k, s, pad, include_pad, ceil_mode):  # type: ignore[no-untyped-def]
    x = rng.standard_normal((2, 3, 7, 6)).astype("float32")
    attrs = dict(pool_size=list(k), strides=list(s), padding=list(pad), ceil_mode=ceil_mode)
    if kind == "avg":
        attrs["count_include_pad"] = include_pad
    r = run(f"nn.{kind}_pool2d", x, **attrs)
    expect = _naive_pool(x, k, s, pad, kind, include_pad, ceil_mode)
    np.testing.assert_allclose(r, expect, rtol=1e-5, atol=1e-6)
    assert rel(f"nn.{kind}_pool2d", T(2, 3, 7, 6), **attrs) == T(*expect.shape)


def test_global_pools_nhwc():
    x = rng.standard_normal((2, 5, 4, 3)).astype("float32")
    np.testing.assert_allclose(run("nn.global_avg_pool2d", x, layout="NHWC"),
                               x.mean(axis=(1, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(run("nn.global_max_pool2d", x, layout="NHWC"),
                                  x.max(axis=(1, 2), keepdims=True))


def test_softmax_and_log_softmax():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0]], "float32")
    s = run("nn.softmax", x)
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(s[0], e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(s[1], [0.5, 0.5, 0.0], atol=1e-7)
    np.testing.assert_allclose(run("nn.log_softmax", x[:1]), np.log(e / e.sum())[None],
                               rtol=1e-6)
    np.testing.assert_allclose(run("nn.softmax", x, axis=0)[:, 0],
                               np.exp([1.0 - 1000, 0]) / (1 + np.exp(1.0 - 1000)), atol=1e-7)


def test_layer_norm_and_batch_norm():
    x = rng.standard_normal((2, 3, 4)).astype("float32")
    g = rng.standard_normal(4).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(run("nn.layer_norm", x, g, b),
                               (x - m) / np.sqrt(v + 1e-5) * g + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run("nn.layer_norm", x, g, b, center=False, scale=False),
                               (x - m) / np.sqrt(v + 1e-5), rtol=1e-5, atol=1e-5)
    g3, b3 = g[:3], b[:3]
    mm = rng.standard_normal(3).astype("float32")
    mv = rng.uniform(0.5, 2, 3).astype("float32")
    out, rm, rv = run("nn.batch_norm", x, g3, b3, mm, mv, epsilon=1e-3)
    c = (slice(None), None)
    expect = (x - mm[c]) / np.sqrt(mv[c] + 1e-3) * g3[c] + b3[c]
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(rm, mm)
    np.testing.assert_array_equal(rv, mv)


def test_reductions_values():
    x = rng.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_allclose(run("sum", x, axis=[1], exclude=True), x.sum(axis=(0, 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(run("mean", x, axis=[0, 2], keepdims=True),
                               x.mean(axis=(0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(run("max", x, axis=[-1]), x.max(-1))
    np.testing.assert_array_equal(run("argmax", x, axis=[1]), x.argmax(1).astype("int32"))
    a = run("argmin", x, axis=[0, 2])
    flat = x.transpose(1, 0, 2).reshape(3, -1)
    np.testing.assert_array_equal(a, flat.argmin(1))
    ties = np.array([[1, 3, 3], [2, 2, 0]], "int32")
    assert run("argmax", ties, axis=[1], select_last_index=True).tolist() == [2, 1]
    assert run("argmax", ties, axis=[1]).tolist() == [1, 0]
    assert run("mean", np.array([[-3, -4], [3, 4]], "int32"), axis=[1]).tolist() == [-3, 3]
    np.testing.assert_allclose(run("variance", x, x.mean(1, keepdims=True), axis=[1]),
                               x.var(1), rtol=1e-5)
    np.testing.assert_allclose(run("variance", x, x.mean(1, keepdims=True), axis=[1],
                                   unbiased=True), x.var(1, ddof=1), rtol=1e-5)


def test_transform_values():
    x = rng.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_array_equal(run("transpose", x, axes=[2, 0, 1]), x.transpose(2, 0, 1))
    parts = run("split", np.arange(6), indices_or_sections=[1, 4])
    assert [p.tolist() for p in parts] == [[0], [1, 2, 3], [4, 5]]
    np.testing.assert_array_equal(run("concatenate", (x, x[:1]), axis=0),
                                  np.concatenate([x, x[:1]]))
    np.testing.assert_array_equal(run("collapse_sum_like", x, np.zeros((3, 1), "float32")),
                                  x.sum(axis=(0, 2))[:, None])
    np.testing.assert_array_equal(run("where", np.array([[True], [False]]),
                                      np.array([1, 2, 3], "int32"), np.asarray(0, "int32")),
                                  [[1, 2, 3], [0, 0, 0]])
    np.testing.assert_array_equal(run("nn.pad", np.ones((1, 2), "int32"),
                                      np.asarray(7, "int32"), pad_width=[[1, 0], [0, 1]]),
                                  [[7, 7, 7], [1, 1, 7]])


def test_dense_and_matmul_values():
    x = rng.standard_normal((4, 2, 5)).astype("float32")
    w = rng.standard_normal((3, 5)).astype("float32")
    np.testing.assert_allclose(run("nn.dense", x, w), x @ w.T, rtol=1e-5)
    a = rng.standard_normal((2, 3, 5)).astype("float32")
    b = rng.standard_normal((1, 4, 5)).astype("float32")
    np.testing.assert_allclose(run("nn.batch_matmul", a, b), a @ b.transpose(0, 2, 1),
                               rtol=1e-5)
    xi = np.array([[100, 100]], "int8")
    r = run("nn.dense", xi, xi, out_dtype="int32")
    assert r.dtype == np.int32 and r.tolist() == [[20000]]


@pytest.mark.parametrize("name,args,missing", [
    ("cast", [T(2)], "dtype"), ("expand_dims", [T(2)], "axis"),
    ("split", [T(4)], "indices_or_sections"), ("clip", [T(2)], "a_min"),
    ("strided_slice", [T(4)], "begin"), ("nn.pad", [T(2), T()], "pad_width"),
    ("reshape", [T(2)], "newshape"),
])
def test_missing_required_attribute(name, args, missing):  # type: ignore[no-untyped-def]
    with pytest.raises(TypeInferenceError, match=f"{name} needs a {missing} attribute"):
        rel(name, *args)


# ----------------------------------------------------------------------------- through the text
def test_end_to_end_text_infer_and_evaluate():
    import relay_ir as rly
    from relay_ir import passes, runtime
    src = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w, %i: Tensor[(2), int32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.max_pool2d(nn.relu(%0), pool_size=[2, 2], strides=[2, 2]);
  %2 = reshape(%1, newshape=[0, -1]);
  %3 = take(%2, %i, axis=1, mode="wrap");
  (sum(%3, axis=[1], keepdims=True), argmax(%2, axis=[1]))
}
"""
    mod = passes.InferType()(rly.parse(src))
    ft = mod["main"].checked_type
    assert ft.arg_types[1] == T(4, 3, 3, 3)
    assert ft.ret_type == TupleType((T(1, 1), T(1, dtype=I32)))
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    i = np.array([3, 70], "int32")
    s, am = runtime.evaluate(mod, x, w, i)
    conv = _naive_conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    pooled = np.maximum(conv, 0).reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5)).reshape(1, -1)
    np.testing.assert_allclose(s, pooled[:, [3, 70 % 64]].sum(1, keepdims=True), rtol=1e-4)
    assert am.dtype == np.int32 and am.tolist() == [int(pooled.argmax())]


# ----------------------------------------------------------------------------- properties

_dims = st.lists(st.integers(1, 4), min_size=0, max_size=4)


@st.composite
def _broadcast_pair(draw):  # type: ignore[no-untyped-def]
    out = draw(_dims)
    a = [d if draw(st.booleans()) else 1 for d in out]
    b = [d if draw(st.booleans()) else 1 for d in out]
    return a[draw(st.integers(0, len(a))):], b[draw(st.integers(0, len(b))):]


@settings(max_examples=60, deadline=None)
@given(_broadcast_pair())
def test_broadcast_relation_matches_numpy(pair):  # type: ignore[no-untyped-def]
    a, b = pair
    expect = np.broadcast_shapes(tuple(a), tuple(b))
    assert rel("multiply", T(*a), T(*b)) == T(*expect)
    assert rel("greater", T(*a), T(*b)) == T(*expect, dtype="bool")
    got = run("multiply", np.ones(a, "float32"), np.full(b, 2, "float32"))
    assert got.shape == expect and got.dtype == np.float32 and np.all(got == 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reduce_relation_matches_numpy(shape, data):  # type: ignore[no-untyped-def]
    n = len(shape)
    axes = data.draw(st.none() | st.lists(st.integers(-n, n - 1), max_size=n,
                                          unique_by=lambda a: a % n))
    keep, excl = data.draw(st.booleans()), data.draw(st.booleans())
    x = np.arange(int(np.prod(shape)), dtype="int64").reshape(shape)
    if axes is None:
        np_axes = tuple(range(n))
    else:
        picked = {a % n for a in axes}
        np_axes = tuple(i for i in range(n) if (i in picked) != excl)
    expect = x.sum(axis=np_axes, keepdims=keep)
    attrs = {"axis": axes, "keepdims": keep, "exclude": excl}
    assert rel("sum", T(*shape, dtype="int64"), **attrs) == T(*expect.shape, dtype="int64")
    np.testing.assert_array_equal(run("sum", x, **attrs), expect)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_strided_slice_relation_matches_numpy(shape, data):  # type: ignore[no-untyped-def]
    k = data.draw(st.integers(1, len(shape)))
    begin = data.draw(st.lists(st.integers(-7, 7), min_size=k, max_size=k))
    end = data.draw(st.lists(st.integers(-7, 7), min_size=k, max_size=k))
    strides = data.draw(st.lists(st.integers(-3, 3).filter(bool), min_size=k, max_size=k))
    x = np.arange(int(np.prod(shape))).reshape(shape).astype("int32")
    expect = x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
    attrs = {"begin": begin, "end": end, "strides": strides}
    assert rel("strided_slice", T(*shape, dtype=I32), **attrs) == T(*expect.shape, dtype=I32)
    np.testing.assert_array_equal(run("strided_slice", x, **attrs), expect)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reshape_minus_one_and_transpose(shape, data):  # type: ignore[no-untyped-def]
    x = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    assert rel("transpose", T(*shape), axes=list(perm)) == T(*x.transpose(perm).shape)
    np.testing.assert_array_equal(run("transpose", x, axes=list(perm)), x.transpose(perm))
    cut = data.draw(st.integers(0, len(shape)))
    newshape = [0] * cut + [-1]
    expect = x.reshape(shape[:cut] + [-1])
    assert rel("reshape", T(*shape), newshape=newshape) == T(*expect.shape)
    np.testing.assert_array_equal(run("reshape", x, newshape=newshape), expect)
