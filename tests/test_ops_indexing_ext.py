"""The indexing and scan operators of relay_ir/op/indexing_ext.py (issue 23): values against
hand-worked results and numpy, index conventions, diagnostics, text round trips, the compiled
executor and gradients of whole programs."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.errors import DiagnosticError, ShapeMismatchError, TypeInferenceError
from relay_ir.op import OpPattern, get_opdef
from relay_ir.op._grad import GradientRuleError
from relay_ir.ty import ANY, ShapeVar, TensorType, TupleType
from util_ops import assert_relation_error, T, rel, run

X = np.arange(12, dtype="float32").reshape(3, 4)


# ----------------------------------------------------------------------------- values
def test_gather_values_and_index_conventions() -> None:
    idx = np.array([[0, -1], [2, 1], [3, -4]])
    want = np.array([[0, 3], [6, 5], [11, 8]], "float32")
    for dt in ("int32", "int64", "int8"):
        np.testing.assert_array_equal(run("gather", X, idx.astype(dt), axis=1), want)
    # axis 0, indices smaller than the data on the other axis
    np.testing.assert_array_equal(run("gather", X, np.array([[2, 0, 1]]), axis=0),
                                  [[8, 1, 6]])
    # out of range after wrapping: clamped
    np.testing.assert_array_equal(run("gather", X, np.array([[9, -9]]), axis=1), [[3, 0]])


def test_gather_nd_values() -> None:
    # Relay layout: the index tuple first (M, Y...)
    np.testing.assert_array_equal(run("gather_nd", X, np.array([[0, 2], [1, -1]])), [1, 11])
    np.testing.assert_array_equal(run("gather_nd", X, np.array([[2, -3]])), X[[2, 0]])
    d = np.arange(24, dtype="float64").reshape(2, 3, 4)
    got = run("gather_nd", d, np.array([[[1, 0], [2, 2]]]), batch_dims=1)
    np.testing.assert_array_equal(got, [d[0, [1, 0]], d[1, [2, 2]]])


def test_scatter_elements_reductions() -> None:
    idx = np.array([[1, 1], [0, -1]])
    upd = np.array([[10, 20], [30, 40]], "float32")
    base = X[:2].copy()
    out = run("scatter_elements", base, idx, upd, axis=1)
    np.testing.assert_array_equal(out, [[0, 20, 2, 3], [30, 5, 6, 40]])  # last write wins
    out = run("scatter_elements", base, idx, upd, axis=1, reduction="add")
    np.testing.assert_array_equal(out, [[0, 31, 2, 3], [34, 5, 6, 47]])
    out = run("scatter_elements", base, idx, upd, axis=1, reduction="mul")
    np.testing.assert_array_equal(out, [[0, 200, 2, 3], [120, 5, 6, 280]])
    out = run("scatter_elements", base, idx, -upd, axis=1, reduction="max")
    np.testing.assert_array_equal(out, [[0, 1, 2, 3], [4, 5, 6, 7]])
    out = run("scatter_elements", base, idx, -upd, axis=1, reduction="min")
    np.testing.assert_array_equal(out, [[0, -20, 2, 3], [-30, 5, 6, -40]])
    np.testing.assert_array_equal(base, X[:2])  # the input is not written


def test_scatter_nd_values() -> None:
    idx = np.array([[0, 2, 0]])  # three row updates, row 0 twice
    upd = np.arange(12, dtype="float32").reshape(3, 4) + 100
    out = run("scatter_nd", X, idx, upd)
    np.testing.assert_array_equal(out, np.stack([upd[2], X[1], upd[1]]))
    out = run("scatter_nd", X, idx, upd, mode="add")
    np.testing.assert_array_equal(out, np.stack([X[0] + upd[0] + upd[2], X[1], X[2] + upd[1]]))
    out = run("scatter_nd", X, np.array([[1, -1], [3, 0]]), np.array([5, 6], "float32"))
    want = X.copy()
    want[1, 3], want[2, 0] = 5, 6
    np.testing.assert_array_equal(out, want)


def test_one_hot_values() -> None:
    out = run("one_hot", np.array([0, -1, 3, 1]), np.float32(5), np.float32(-1), depth=3)
    np.testing.assert_array_equal(out, [[5, -1, -1], [-1, -1, 5], [-1, -1, -1], [-1, 5, -1]])
    out = run("one_hot", np.array([[1], [0]]), np.int32(1), np.int32(0), depth=2, axis=0,
              dtype="float64")
    assert out.dtype == np.float64 and out.shape == (2, 2, 1)
    np.testing.assert_array_equal(out[:, :, 0], [[0, 1], [1, 0]])


def test_cumsum_modes_and_signed_zero() -> None:
    x = np.array([1, 2, 3, 4], "float32")
    assert run("cumsum", x, axis=0).tolist() == [1, 3, 6, 10]
    assert run("cumsum", x, axis=0, exclusive=True).tolist() == [0, 1, 3, 6]
    assert run("cumsum", x, axis=0, reverse=True).tolist() == [10, 9, 7, 4]
    assert run("cumsum", x, axis=0, exclusive=True, reverse=True).tolist() == [9, 7, 4, 0]
    np.testing.assert_array_equal(run("cumsum", X), np.cumsum(X))  # axis None: flattened
    out = run("cumsum", np.array([1, 2], "int8"), axis=0, dtype="int64")
    assert out.dtype == np.int64
    z = run("cumsum", np.array([-0.0, -0.0], "float32"), axis=0)
    assert np.signbit(z).all()


def test_arange_values() -> None:
    np.testing.assert_array_equal(run("arange", stop=5.0), np.arange(5, dtype="float32"))
    np.testing.assert_array_equal(run("arange", start=10.0, stop=1.0, step=-3.0, dtype="int32"),
                                  [10, 7, 4])
    assert run("arange", start=3.0, stop=1.0).shape == (0,)
    assert rel("arange", start=0.0, stop=1.0, step=0.3) == T(4)


def test_einsum_against_numpy() -> None:
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 4, 5), (5,)))
    for eq, ops in [("bij,bjk->bik", (a, b)), ("bij,bjk,k->bi", (a, b, c)), ("ijk", (a,)),
                    ("ijk->", (a,)), ("...j,bjk->...k", (a, b)), ("i,i", (c, c)),
                    ("ii->i", (a[0, :, :3],)), ("bij,bjk", (a, b))]:
        np.testing.assert_allclose(run("einsum", ops, equation=eq), np.einsum(eq, *ops),
                                   rtol=1e-12)
    assert rel("einsum", TupleType((T(2, 3, 4), T(4, 5))), equation="...j,jk") == T(2, 3, 5)


# ----------------------------------------------------------------------------- types, errors
def test_result_types_with_symbolic_dims() -> None:
    n = ShapeVar("n")
    assert rel("gather", T(n, 4), T(n, 2, dtype="int64"), axis=1) == T(n, 2)
    assert rel("gather_nd", T(n, 4, 5), T(2, 7, dtype="int32")) == T(7, 5)
    assert rel("cumsum", T(n, 4), axis=0) == T(n, 4)
    assert rel("one_hot", T(n, dtype="int32"), T(), T(), depth=3) == T(n, 3)
    assert rel("scatter_elements", T(ANY, 4), T(2, 4, dtype="int32"), T(2, 4)) == T(ANY, 4)
    assert rel("einsum", TupleType((T(n, 3), T(3, 4))), equation="ij,jk") == T(n, 4)


ERRORS = [
    ("gather", [T(3, 4), T(3, 2)], {"axis": 1}, TypeInferenceError,
     "gather: indices must have an integer dtype, found float32"),
    ("gather", [T(3, 4), T(3, dtype="int32")], {}, TypeInferenceError,
     "gather: indices must have the data's rank 2, found rank 1"),
    ("gather", [T(3, 4), T(3, 2, dtype="int32")], {"axis": 2}, TypeInferenceError,
     "axis 2 is out of range for a tensor of rank 2"),
    ("gather", [T(3, 4), T(5, 2, dtype="int32")], {"axis": 1}, ShapeMismatchError,
     "gather: indices dimension 0 (5) exceeds the data's (3)"),
    ("gather_nd", [T(3, 4), T(3, 2, dtype="int32")], {}, TypeInferenceError,
     "gather_nd: 3 indexed dims after 0 batch dims exceed the data's rank 2"),
    ("gather_nd", [T(3, 4), T(0, 2, dtype="int32")], {}, TypeInferenceError,
     "gather_nd: the index tuple length (indices dimension 0) must be static and at least 1, "
     "found 0"),
    ("gather_nd", [T(3, 4), T(1, 2, dtype="int32")], {"index_rank": 2}, TypeInferenceError,
     "gather_nd: index_rank 2 differs from the index tuple length 1"),
    ("gather_nd", [T(2, 4), T(1, 3, dtype="int32")], {"batch_dims": 1}, ShapeMismatchError,
     "gather_nd: batch dimension 0 differs: 2 vs 3"),
    ("scatter_elements", [T(3, 4), T(2, 2, dtype="int32"), T(2, 2)], {"reduction": "mean"},
     TypeInferenceError, "scatter_elements: unknown reduction 'mean'"),
    ("scatter_elements", [T(3, 4), T(2, 2, dtype="int32"), T(2, 3)], {}, ShapeMismatchError,
     "scatter_elements: indices (2, 2) and updates (2, 3) differ in dimension 1"),
    ("scatter_elements", [T(3, 4), T(2, 2, dtype="int32"), T(2, 2, dtype="int32")], {},
     TypeInferenceError, "scatter_elements: updates has dtype int32, the data float32"),
    ("scatter_nd", [T(3, 4), T(1, 2, dtype="int32"), T(2, 3)], {}, ShapeMismatchError,
     "scatter_nd: updates must have shape (2, 4) (indices[1:] + data[1:]), found (2, 3)"),
    ("scatter_nd", [T(3, 4), T(1, 2, dtype="int32"), T(2, 4)], {"mode": "sub"},
     TypeInferenceError, "scatter_nd: unknown mode 'sub'"),
    ("one_hot", [T(3, dtype="int32"), T(2), T()], {"depth": 3}, TypeInferenceError,
     "one_hot: on_value must be a scalar, found rank 1"),
    ("one_hot", [T(3, dtype="int32"), T(), T()], {"depth": 3, "axis": 2}, TypeInferenceError,
     "axis 2 is out of range for a tensor of rank 1"),
    ("one_hot", [T(3, dtype="int32"), T(), T(dtype="int32")], {"depth": 3}, TypeInferenceError,
     "one_hot: on_value (float32) and off_value (int32) must have one dtype"),
    ("cumsum", [T(3, dtype="bool")], {}, TypeInferenceError,
     "cumsum: the result dtype must be numeric, found bool"),
    ("cumsum", [T(3)], {"axis": 1}, TypeInferenceError,
     "axis 1 is out of range for a tensor of rank 1"),
    ("arange", [], {"stop": 3.0, "step": 0.0}, TypeInferenceError, "arange: step must not be 0"),
    ("arange", [], {}, TypeInferenceError, "arange needs a stop attribute"),
    ("einsum", [TupleType((T(2, 3), T(4, 5)))], {"equation": "ij,jk"}, ShapeMismatchError,
     "einsum: label 'j' of 'ij,jk' has sizes 3 and 4"),
    ("einsum", [TupleType((T(2, 3),))], {"equation": "ij,jk"}, TypeInferenceError,
     "einsum: equation 'ij,jk' has 2 operands, the call 1"),
    ("einsum", [TupleType((T(2, 3),))], {"equation": "ijk"}, TypeInferenceError,
     "einsum: term 'ijk' does not match an operand of rank 2"),
    ("einsum", [TupleType((T(2, 3),))], {"equation": "ij->iq"}, TypeInferenceError,
     "einsum: output label(s) q of 'ij->iq' appear in no operand"),
    ("einsum", [TupleType((T(2, 3),))], {"equation": "i1"}, TypeInferenceError,
     "einsum: bad term 'i1'"),
    ("einsum", [TupleType((T(2), T(2, dtype="int32")))], {"equation": "i,i"},
     TypeInferenceError, "einsum: operands have dtypes float32 and int32"),
]


@pytest.mark.parametrize("name,args,attrs,exc,msg", ERRORS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ERRORS)])
def test_error_messages(name, args, attrs, exc, msg):  # type: ignore[no-untyped-def]
    assert_relation_error(name, args, attrs, exc, msg)


def test_type_error_in_text_points_at_the_call() -> None:
    src = ('#[version = "0.0.5"]\n'
           'def @main(%x: Tensor[(3, 4), float32], %i: Tensor[(3, 2), int64]) {\n'
           '  gather(%x, %i, axis=2)\n'
           '}\n')
    with pytest.raises(DiagnosticError) as info:
        passes.InferType()(rly.parse(src))
    assert "axis 2 is out of range" in str(info.value)
    assert info.value.span is not None and info.value.span.line == 3


def test_patterns_follow_tvm() -> None:
    want = {"gather": OpPattern.INJECTIVE, "gather_nd": OpPattern.INJECTIVE,
            "scatter_elements": OpPattern.OPAQUE, "scatter_nd": OpPattern.OPAQUE,
            "one_hot": OpPattern.OUT_ELEMWISE_FUSABLE, "cumsum": OpPattern.OPAQUE,
            # NOTE: Relay marked einsum injective; it reduces, so it fuses like nn.dense here
            "einsum": OpPattern.OUT_ELEMWISE_FUSABLE, "arange": OpPattern.INJECTIVE}
    for name, pat in want.items():
        assert get_opdef(name).pattern is pat, name


# ----------------------------------------------------------------------------- programs
PROGRAM = '''#[version = "0.0.5"]
def @main(%x: Tensor[(3, 4), float32], %i: Tensor[(3, 2), int64], %u: Tensor[(3, 2), float32],
          %w: Tensor[(4, 5), float32], %j: Tensor[(2, 3), int32], %v: Tensor[(3), float32]) {
  %0 = gather(%x, %i, axis=1);
  %1 = scatter_elements(%x, %i, %u, axis=1, reduction="add");
  %2 = cumsum(%1, axis=1, exclusive=True, reverse=True);
  %3 = einsum((%2, %w), equation="ij,jk->ik");
  %4 = arange(start=1f, stop=6f, dtype="float32");
  %5 = add(%3, %4);
  %6 = one_hot(%i, 2f, -1f, depth=4, axis=1);
  %7 = gather_nd(%x, %j);
  %8 = scatter_nd(%x, %j, %v, mode="add");
  (%0, %5, %6, %7, %8)
}
'''


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((3, 4)).astype("float32"),
            np.array([[0, -1], [2, 1], [3, 3]], "int64"),
            rng.standard_normal((3, 2)).astype("float32"),
            rng.standard_normal((4, 5)).astype("float32"),
            np.array([[0, 1, 2], [3, -1, 0]], "int32"),
            np.array([1, 2, 3], "float32")]


def test_program_round_trips_and_runs_compiled() -> None:
    mod = rly.parse(PROGRAM)
    text = rly.astext(mod)
    for frag in ('reduction="add"', "exclusive=True, reverse=True", 'equation="ij,jk->ik"',
                 "start=1f, stop=6f", "depth=4, axis=1", 'mode="add"'):
        assert frag in text
    rly.assert_structural_equal(rly.parse(text), mod, map_free_vars=True)
    args = _inputs()
    want = runtime.evaluate(mod, *args)
    x, i, u, w, j, v = args
    s = x.copy()
    np.add.at(s, (np.arange(3)[:, None], np.where(i < 0, i + 4, i)), u)
    c = np.flip(np.cumsum(np.flip(s, 1), 1), 1) - s
    np.testing.assert_allclose(want[1], c @ w + np.arange(1, 6), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(want[3], x[[0, 1, 2], [3, 3, 0]])
    for m in (mod, passes.optimize(mod)):
        got = runtime.build(m, target="llvm")(*args)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


GRAD_PROGRAM = '''#[version = "0.0.5"]
def @main(%x: Tensor[(3, 4), float64], %w: Tensor[(4, 5), float64], %i: Tensor[(3, 2), int32],
          %j: Tensor[(1, 2), int64]) {
  %0 = gather(%x, %i, axis=1);
  %1 = cumsum(%x, axis=0, reverse=True);
  %2 = einsum((%1, %w), equation="ij,jk->ik");
  %3 = scatter_elements(%2, %i, %0, axis=1);
  %4 = gather_nd(%3, %j);
  %5 = one_hot(%i, 1.5f64, 0.5f64, depth=5, axis=1);
  %6 = einsum((%5, %3), equation="adc,ad->ac");
  (%4, tanh(%6))
}
'''


def test_gradient_of_a_program_against_finite_differences() -> None:
    mod = passes.InferType()(rly.parse(GRAD_PROGRAM))
    gmod = passes.gradient(mod)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    i = np.array([[0, 3], [2, 1], [-1, 0]], "int32")
    j = np.array([[0, 2]], "int64")
    _, (gx, gw, gi, gj) = runtime.evaluate(gmod, x, w, i, j)
    assert not gi.any() and not gj.any()

    def f(x: np.ndarray, w: np.ndarray) -> float:
        return sum(float(np.sum(r)) for r in runtime.evaluate(mod, x, w, i, j))
    dx, dw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    eps = 1e-6
    fd = (f(x + eps * dx, w + eps * dw) - f(x - eps * dx, w - eps * dw)) / (2 * eps)
    assert np.sum(gx * dx) + np.sum(gw * dw) == pytest.approx(fd, rel=1e-6)
    # the optimized (first-order) gradient program, compiled, agrees
    exe = runtime.build(passes.optimize(gmod), target="llvm")
    _, (cx, cw, _, _) = exe(x, w, i, j)
    np.testing.assert_allclose(cx, gx, rtol=1e-9)
    np.testing.assert_allclose(cw, gw, rtol=1e-9)


def test_scatter_reductions_without_derivative_are_diagnostics() -> None:
    src = ('#[version = "0.0.5"]\n'
           'def @main(%x: Tensor[(3, 4), float32], %i: Tensor[(3, 2), int64], '
           '%u: Tensor[(3, 2), float32]) {\n'
           '  scatter_elements(%x, %i, %u, axis=1, reduction="mul")\n'
           '}\n')
    mod = passes.InferType()(rly.parse(src))
    with pytest.raises(GradientRuleError, match="no derivative rule"):
        passes.gradient(mod)
    with pytest.raises(DiagnosticError, match="no derivative rule"):
        passes.jvp(mod)


def test_einsum_diagonal_gradient_is_a_diagnostic() -> None:
    src = ('#[version = "0.0.5"]\n'
           'def @main(%x: Tensor[(3, 3), float32]) {\n'
           '  einsum((%x,), equation="ii->i")\n'
           '}\n')
    with pytest.raises(GradientRuleError, match="repeated label"):
        passes.gradient(passes.InferType()(rly.parse(src)))


def test_one_hot_jvp_and_cumsum_jvp_by_the_pass() -> None:
    src = ('#[version = "0.0.5"]\n'
           'def @main(%x: Tensor[(4), float64], %i: Tensor[(2), int32]) {\n'
           '  %0 = cumsum(%x, axis=0, exclusive=True);\n'
           '  %1 = take(%0, %i, axis=0);\n'
           '  one_hot(%i, sum(%1), 0f64, depth=3)\n'
           '}\n')
    mod = passes.InferType()(rly.parse(src))
    jmod = passes.jvp(mod)
    x, t = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, -1.0, 2.0, 0.25])
    i = np.array([3, -2], "int32")
    val, tan = runtime.evaluate(jmod, x, i, t, np.zeros(2, "int32"))
    # sum of the exclusive scan at 3 and at 2 (take clips -2 to 0: 0): 6 + 0; tangent 1.5 + 0
    np.testing.assert_array_equal(val, [[0, 0, 0], [0, 6, 0]])
    np.testing.assert_array_equal(tan, [[0, 0, 0], [0, 1.5, 0]])


def test_gather_nd_index_types_agree() -> None:
    idx = np.array([[0, 2, -1], [3, -4, 1]])
    a = run("gather_nd", X, idx.astype("int32"))
    b = run("gather_nd", X, idx.astype("int64"))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, [3, 8, 9])
    assert rel("gather_nd", T(3, 4), TensorType((2, 3), "uint8")) == T(3)


# ----------------------------------------------------------------------------- ONNX
def _onnx_model(nodes, inputs, outputs):  # type: ignore[no-untyped-def]
    from onnx import helper
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_onnx_indices_known_only_at_run_time() -> None:
    """Scatter/Gather indices are graph inputs now (the compositions needed their values);
    results against onnx's reference evaluator, interpreted and compiled."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    from relay_ir.frontend import from_onnx
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("ScatterElements", ["x", "i", "u"], ["s"], axis=1, reduction="add"),
        helper.make_node("GatherElements", ["s", "i"], ["g"], axis=1),
        helper.make_node("GatherND", ["x", "j"], ["gn"]),
        helper.make_node("ScatterND", ["x", "j", "v"], ["sn"], reduction="mul"),
        helper.make_node("CumSum", ["x", "ax"], ["c"], exclusive=1, reverse=1),
        helper.make_node("Einsum", ["x", "w"], ["e"], equation="ij,kj->ik"),
        helper.make_node("OneHot", ["i", "depth", "vals"], ["o"], axis=0),
    ]
    ax = helper.make_tensor("ax", i64, [], [1])
    depth = helper.make_tensor("depth", i64, [], [5])
    vals = helper.make_tensor("vals", f, [2], [-1.0, 3.0])
    model = _onnx_model(nodes, [vi("x", f, [3, 4]), vi("i", i64, [3, 2]), vi("u", f, [3, 2]),
                                vi("j", i64, [2, 2]), vi("v", f, [2]), vi("w", f, [2, 4])],
                        [vi(n, f, None) for n in ("g", "gn", "sn", "c", "e", "o")])
    model.graph.initializer.extend([ax, depth, vals])
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((3, 4)).astype("float32"),
            "i": np.array([[0, -1], [2, 2], [3, -4]], "int64"),
            "u": rng.standard_normal((3, 2)).astype("float32"),
            "j": np.array([[0, 3], [-1, 1]], "int64"),
            "v": np.array([2.0, -3.0], "float32"),
            "w": rng.standard_normal((2, 4)).astype("float32")}
    want = ReferenceEvaluator(model).run(None, feed)
    mod, params = from_onnx(model)
    text = rly.astext(mod)
    for name in ("scatter_elements", "gather(", "gather_nd", "scatter_nd", "cumsum", "einsum",
                 "one_hot"):
        assert name in text
    args = [feed[k] for k in ("x", "i", "u", "j", "v", "w")]
    for got in (runtime.evaluate(mod, *args, *params.values()),
                runtime.build(mod, target="llvm", params=params)(*args)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_onnx_range_is_arange() -> None:
    from onnx import TensorProto, helper, numpy_helper
    from relay_ir.frontend import from_onnx
    nodes = [helper.make_node("Range", ["a", "b", "c"], ["r"])]
    model = _onnx_model(nodes, [], [helper.make_tensor_value_info("r", TensorProto.INT32,
                                                                  None)])
    model.graph.initializer.extend([numpy_helper.from_array(np.array(v, "int32"), n)
                                    for n, v in (("a", 10), ("b", -2), ("c", -3))])
    mod, params = from_onnx(model)
    assert "arange(start=10f, stop=-2f, step=-3f, dtype=\"int32\")" in rly.astext(mod)
    np.testing.assert_array_equal(runtime.evaluate(mod, *params.values()), [10, 7, 4, 1])


def test_einsum_matmul_shapes_get_the_matmul_schedule() -> None:
    from relay_ir.op.indexing_ext import einsum_is_matmul
    assert einsum_is_matmul("bij,bjk->bik", [3, 3])
    assert einsum_is_matmul("ij,kj->ik", [2, 2])
    assert einsum_is_matmul("bhqd,bhkd->bhqk", [4, 4])
    assert not einsum_is_matmul("ij,j->i", [2, 1])      # matrix-vector: a row reduction
    assert not einsum_is_matmul("ij,jk,k->i", [2, 2, 1])
    assert not einsum_is_matmul("ii,ij->j", [2, 2])
    assert not einsum_is_matmul("ij,ij->", [2, 2])
    # and the scheduled kernel computes the same
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3, 40, 24)), rng.standard_normal((2, 3, 33, 24))
    mod = rly.parse('#[version = "0.0.5"]\n'
                    'def @main(%a: Tensor[(2, 3, 40, 24), float64], '
                    '%b: Tensor[(2, 3, 33, 24), float64]) {\n'
                    '  %0 = einsum((%a, %b), equation="bhqd,bhkd->bhqk");\n'
                    '  tanh(%0)\n'
                    '}\n')
    got = runtime.build(mod, target="llvm")(a, b)
    np.testing.assert_allclose(got, np.tanh(np.einsum("bhqd,bhkd->bhqk", a, b)), rtol=1e-10,
                               atol=1e-13)


def test_unknown_leading_dim_compiles_once_and_runs_many() -> None:
    mod = rly.parse('#[version = "0.0.5"]\n'
                    'def @main(%x: Tensor[(?, 4), float32], %i: Tensor[(?, 2), int32],\n'
                    '          %u: Tensor[(?, 2), float32], %w: Tensor[(4, 3), float32]) {\n'
                    '  %0 = gather(%x, %i, axis=1);\n'
                    '  %1 = cumsum(%x, axis=0);\n'
                    '  %2 = einsum((%1, %w), equation="ij,jk->ik");\n'
                    '  %3 = one_hot(%i, 1f, 0f, depth=4);\n'
                    '  %4 = scatter_elements(%x, %i, %u, axis=1, reduction="add");\n'
                    '  (%0, %2, %3, %4, cumsum(%x, axis=1, reverse=True))\n'
                    '}\n')
    exe = runtime.build(mod, target="llvm")
    rng = np.random.default_rng(0)
    for n in (1, 5, 70):
        args = [rng.standard_normal((n, 4)).astype("float32"),
                rng.integers(-4, 4, (n, 2)).astype("int32"),
                rng.standard_normal((n, 2)).astype("float32"),
                rng.standard_normal((4, 3)).astype("float32")]
        want = runtime.evaluate(mod, *args)
        for a, b in zip(exe(*args), want):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("begin,end,step", [(9, 0, -2), (-1, -67, -3), (65, 0, -8), (1, 60, 7)])
def test_strided_slice_grad_kernel_with_negative_strides(begin: int, end: int,
                                                          step: int) -> None:
    """TVM 0.27's FlattenBuffer miscompiled the floordiv(i - start, step) index of this
    kernel for a negative step (it read the neighbouring element): compiled against numpy."""
    import tvm
    from tvm import te
    od = get_opdef("strided_slice_grad")
    attrs = od.make_attrs({"begin": [begin], "end": [end], "strides": [step]})
    n = len(range(*slice(begin, end, step).indices(66)))
    g = np.arange(1, n + 1, dtype="float32")
    like = np.zeros(66, "float32")
    pg, pl = te.placeholder((n,), "float32", name="g"), te.placeholder((66,), "float32", name="l")
    out = od.compute(attrs, [pg, pl], TensorType((66,), "float32"))
    f = tvm.compile(te.create_prim_func([pg, pl, out]), target="llvm")
    got = tvm.runtime.empty((66,), "float32")
    f(tvm.runtime.tensor(g), tvm.runtime.tensor(like), got)
    want = np.zeros(66, "float32")
    want[begin:end:step] = g
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_onnx_tensor_scatter_compiled(mode: str) -> None:
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    from relay_ir.frontend import from_onnx
    vi = helper.make_tensor_value_info
    f = TensorProto.FLOAT
    node = helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], axis=2, mode=mode)
    graph = helper.make_graph([node], "g", [vi("c", f, [2, 3, 6, 4]), vi("u", f, [2, 3, 3, 4]),
                                            vi("w", TensorProto.INT64, [2])],
                              [vi("y", f, [2, 3, 6, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    rng = np.random.default_rng(4)
    feed = {"c": rng.standard_normal((2, 3, 6, 4)).astype("float32"),
            "u": rng.standard_normal((2, 3, 3, 4)).astype("float32"),
            "w": np.array([1, 3 if mode == "linear" else 5], "int64")}
    want = ReferenceEvaluator(model).run(None, feed)[0]
    mod, params = from_onnx(model)
    got = runtime.build(mod, target="llvm", params=params)(feed["c"], feed["u"], feed["w"])
    np.testing.assert_array_equal(got, want)


def test_onnx_reverse_sequence_with_run_time_lengths() -> None:
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    from relay_ir.frontend import from_onnx
    vi = helper.make_tensor_value_info
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)
    graph = helper.make_graph([node], "g", [vi("x", TensorProto.FLOAT, [3, 5, 2]),
                                            vi("lens", TensorProto.INT64, [3])],
                              [vi("y", TensorProto.FLOAT, [3, 5, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    mod, params = from_onnx(model)
    x = np.arange(30, dtype="float32").reshape(3, 5, 2)
    exe = runtime.build(mod, target="llvm", params=params)
    for lens in ([1, 5, 3], [4, 2, 1]):
        ln = np.array(lens, "int64")
        want = ReferenceEvaluator(model).run(None, {"x": x, "lens": ln})[0]
        np.testing.assert_array_equal(runtime.evaluate(mod, x, ln), want)
        np.testing.assert_array_equal(exe(x, ln), want)


@pytest.mark.parametrize("eq", ["ji,jk->ik", "ij,kj->ki", "bji,bjk->bki", "hbij,bjk->hbik",
                                "bij,jk->bik"])
def test_matmul_shaped_einsums_compiled_with_an_epilogue(eq: str) -> None:
    """Transposed operands and outputs, broadcast batch labels: the matmul schedule keeps the
    values (float64 against np.einsum)."""
    sizes = dict(b=3, h=2, i=13, j=9, k=17)
    terms = eq.split("->")[0].split(",")
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s) for s in shapes]
    params = ", ".join(f"%a{n}: Tensor[({', '.join(map(str, s))}), float64]"
                       for n, s in enumerate(shapes))
    mod = rly.parse('#[version = "0.0.5"]\ndef @main(' + params + ') {\n'
                    f'  %0 = einsum((%a0, %a1), equation="{eq}");\n  add(%0, 1f64)\n}}\n')
    got = runtime.build(mod, target="llvm")(*args)
    np.testing.assert_allclose(got, np.einsum(eq, *args) + 1, rtol=1e-10, atol=1e-12)
