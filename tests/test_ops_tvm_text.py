"""Operators that Relay programs written by TVM's developers use (issue 8).

Mixed-dtype quantized ops (uint8 data, int8 weights, ``out_dtype="int32"``), ``layout_transform``
with TVM layout strings, the ``dyn.*`` forms whose shape is a tensor, and the device annotations
``on_device`` / ``device_copy``; then a few real programs from TVM's tests and docs, transcribed:
they parse, type-check (to the types TVM printed, where it printed them) and run.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.errors import DiagnosticError, ShapeMismatchError, TypeInferenceError
from relay_ir.expr import Call
from relay_ir.op import OpPattern, get_opdef
from relay_ir.op._rules import make_call
from relay_ir.traversal import post_order
from relay_ir.ty import ANY, TensorType, TupleType
from util_ops import T, rel, run

HEADER = '#[version = "0.0.5"]\n'


def check_and_run(text: str, *args, **kw):  # type: ignore[no-untyped-def]
    """Parse, infer types, print and re-parse (structurally equal), evaluate."""
    mod = rly.parse(HEADER + text, **kw)
    typed = passes.InferType()(mod)
    again = rly.parse(rly.astext(mod), **kw)
    rly.assert_structural_equal(again, mod)
    return typed, runtime.evaluate(typed, *args)


RNG = np.random.default_rng(8)
U8 = RNG.integers(0, 256, (2, 3, 6, 5)).astype("uint8")
I8 = RNG.integers(-128, 128, (4, 3, 3, 3)).astype("int8")


# ----------------------------------------------------------------------------- mixed dtypes
@pytest.mark.parametrize("name,a,b,attrs,want", [
    ("nn.dense", T(2, 5, dtype="uint8"), T(3, 5, dtype="int8"), {}, T(2, 3, dtype="int32")),
    ("nn.matmul", T(2, 5, dtype="uint8"), T(5, 3, dtype="int8"), {}, T(2, 3, dtype="int32")),
    ("nn.batch_matmul", T(2, 4, 5, dtype="uint8"), T(2, 3, 5, dtype="int8"), {},
     T(2, 4, 3, dtype="int32")),
    ("nn.conv2d", T(2, 3, 6, 5, dtype="uint8"), T(4, 3, 3, 3, dtype="int8"),
     {"padding": [1, 1]}, T(2, 4, 6, 5, dtype="int32")),
])
def test_mixed_input_dtypes_with_out_dtype(name, a, b, attrs, want):  # type: ignore[no-untyped-def]
    assert rel(name, a, b, out_dtype="int32", **attrs) == want
    with pytest.raises(ShapeMismatchError, match="uint8 and int8 do not match"):
        rel(name, a, b, **attrs)  # without out_dtype the dtypes must still agree


def test_quantized_dense_and_matmul_values_are_exact_int32():
    x = RNG.integers(0, 256, (3, 40)).astype("uint8")
    w = RNG.integers(-128, 128, (5, 40)).astype("int8")
    want = x.astype(np.int64) @ w.astype(np.int64).T
    assert np.abs(want).max() > 2 ** 15  # would overflow int16, and uint8/int8 arithmetic
    got = run("nn.dense", x, w, out_dtype="int32")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    got = run("nn.matmul", x, np.ascontiguousarray(w.T), out_dtype="int32")
    np.testing.assert_array_equal(got, want)
    xb, wb = x.reshape(1, 3, 40), w.reshape(1, 5, 40)
    np.testing.assert_array_equal(run("nn.batch_matmul", xb, wb, out_dtype="int32")[0], want)


def test_quantized_conv2d_values_against_numpy():
    got = run("nn.conv2d", U8, I8, padding=[1, 1], out_dtype="int32")
    assert got.dtype == np.int32 and got.shape == (2, 4, 6, 5)
    xp = np.pad(U8.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 6, 5), np.int64)
    for i in range(6):
        for j in range(5):
            win = xp[:, :, i:i + 3, j:j + 3]
            want[:, :, i, j] = np.einsum("nchw,ochw->no", win, I8.astype(np.int64))
    np.testing.assert_array_equal(got, want)


def test_quantized_conv2d_program_runs():
    text = """def @main(%x: Tensor[(2, 3, 6, 5), uint8], %w: Tensor[(4, 3, 3, 3), int8]) {
  nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3], out_dtype="int32")
}
"""
    typed, out = check_and_run(text, U8, I8)
    assert rly.astext(typed["main"].checked_type.ret_type) == "Tensor[(2, 4, 6, 5), int32]"
    np.testing.assert_array_equal(out, run("nn.conv2d", U8, I8, padding=[1, 1],
                                           out_dtype="int32"))


@pytest.mark.parametrize("call,xs,ws,out", [
    ("nn.dense(%x, %w, units=3, out_dtype=\"int32\")", (2, 5), (3, 5), "(2, 3)"),
    ("nn.matmul(%x, %w, out_dtype=\"int32\")", (2, 5), (5, 3), "(2, 3)"),
    ("nn.batch_matmul(%x, %w, out_dtype=\"int32\")", (2, 4, 5), (2, 3, 5), "(2, 4, 3)"),
])
def test_quantized_matmul_programs_type_check_and_run(call, xs, ws, out):  # type: ignore
    text = (f"def @main(%x: Tensor[{xs}, uint8], %w: Tensor[{ws}, int8]) {{\n  {call}\n}}\n")
    x = RNG.integers(0, 256, xs).astype("uint8")
    w = RNG.integers(-128, 128, ws).astype("int8")
    typed, got = check_and_run(text, x, w)
    assert rly.astext(typed["main"].checked_type.ret_type) == f"Tensor[{out}, int32]"
    xi, wi = x.astype(np.int64), w.astype(np.int64)
    if call.startswith("nn.dense") or call.startswith("nn.batch_matmul"):
        want = np.matmul(xi, np.swapaxes(wi, -1, -2))
    else:
        want = xi @ wi
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- layout_transform
@pytest.mark.parametrize("shape,src,dst,want", [
    ((1, 32, 5, 7), "NCHW", "NCHW16c", (1, 2, 5, 7, 16)),
    ((1, 2, 5, 7, 16), "NCHW16c", "NCHW", (1, 32, 5, 7)),
    ((1, 2, 5, 7, 16), "NCHW16c", "NHWC", (1, 5, 7, 32)),
    ((1, 2, 5, 7, 16), "NCHW16c", "NCHW8c", (1, 4, 5, 7, 8)),
    ((32, 16, 3, 3), "OIHW", "OIHW4i8o", (4, 4, 3, 3, 4, 8)),
    ((1, 56, 56, 64), "NHWC", "NCHW", (1, 64, 56, 56)),
    ((ANY, 32, 5, 7), "NCHW", "NCHW16c", (ANY, 2, 5, 7, 16)),
    ((1, 30, 5, 7), "NCHW", "NCHW16c", (1, 2, 5, 7, 16)),  # padded to whole blocks, as TVM
])
def test_layout_transform_types(shape, src, dst, want):  # type: ignore[no-untyped-def]
    assert rel("layout_transform", T(*shape), src_layout=src, dst_layout=dst) == T(*want)


@pytest.mark.parametrize("shape,src,dst,msg", [
    ((1, 30, 5), "NCHW", "NHWC", "rank 3 cannot have layout 'NCHW'"),
    ((1, 2, 5, 7, 8), "NCHW16c", "NCHW", "has size 8, not 16"),
    ((1, 2, 5, 7), "NCHW", "NCDW", "same primal axes"),
    ((1, 2, 5, 7), "NCHW", "NCH4w", "sub-axis w has no primal axis W"),
    ((1, 2, 5, 7), "NCHW", "NCHWc", "needs a positive factor"),
    ((1, 2, 5, 7), "NCHW", "NCHH", "appears twice"),
])
def test_layout_transform_errors(shape, src, dst, msg):  # type: ignore[no-untyped-def]
    with pytest.raises(TypeInferenceError, match=re.escape(msg)):
        rel("layout_transform", T(*shape), src_layout=src, dst_layout=dst)


def test_layout_transform_pads_a_split_that_does_not_divide():
    x = np.arange(1, 31, dtype="float32").reshape(1, 30, 1, 1)
    y = run("layout_transform", x, src_layout="NCHW", dst_layout="NCHW16c")
    assert y.shape == (1, 2, 1, 1, 16)
    np.testing.assert_array_equal(y.reshape(-1), np.r_[np.arange(1, 31), 0, 0])
    back = run("layout_transform", y, src_layout="NCHW16c", dst_layout="NCHW")
    np.testing.assert_array_equal(back.reshape(-1), np.r_[np.arange(1, 31), 0, 0])
    w = RNG.standard_normal((6, 5, 1, 1)).astype("float32")
    k = run("layout_transform", w, src_layout="OIHW", dst_layout="OIHW4i4o")
    assert k.shape == (2, 2, 1, 1, 4, 4)
    wp = np.pad(w, ((0, 2), (0, 3), (0, 0), (0, 0)))
    np.testing.assert_array_equal(k, wp.reshape(2, 4, 2, 4, 1, 1).transpose(0, 2, 4, 5, 3, 1))


def test_layout_transform_symbolic_dims():
    from relay_ir.ty import ShapeVar, dim_mul
    n, c = ShapeVar("n"), ShapeVar("c")
    got = rel("layout_transform", T(n, 32, 5, 7), src_layout="NCHW", dst_layout="NCHW16c")
    assert got == T(n, 2, 5, 7, 16)
    got = rel("layout_transform", T(1, dim_mul(c, 8)), src_layout="NC", dst_layout="NC4c")
    assert rly.astext(got) == "Tensor[(1, 2*c, 4), float32]"
    # not provably divisible: the dimension is only known at run time
    assert rel("layout_transform", T(1, c), src_layout="NC", dst_layout="NC4c") == T(1, ANY, 4)
    back = rel("layout_transform", T(1, c, 4), src_layout="NC4c", dst_layout="NC")
    assert rly.astext(back) == "Tensor[(1, 4*c), float32]"


def test_layout_transform_values_and_round_trip():
    x = RNG.standard_normal((2, 32, 3, 4)).astype("float32")
    y = run("layout_transform", x, src_layout="NCHW", dst_layout="NCHW16c")
    # NCHW16c[n, co, h, w, ci] = NCHW[n, co * 16 + ci, h, w]
    want = x.reshape(2, 2, 16, 3, 4).transpose(0, 1, 3, 4, 2)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(
        run("layout_transform", y, src_layout="NCHW16c", dst_layout="NCHW"), x)
    z = run("layout_transform", y, src_layout="NCHW16c", dst_layout="NHWC")
    np.testing.assert_array_equal(z, x.transpose(0, 2, 3, 1))
    w = RNG.standard_normal((32, 16, 3, 3)).astype("float32")
    k = run("layout_transform", w, src_layout="OIHW", dst_layout="OIHW4i8o")
    # OIHW4i8o[oo, io, h, w, ii, oi] = OIHW[oo * 8 + oi, io * 4 + ii, h, w]
    assert k[3, 2, 1, 0, 1, 5] == w[3 * 8 + 5, 2 * 4 + 1, 1, 0]
    np.testing.assert_array_equal(
        k, w.reshape(4, 8, 4, 4, 3, 3).transpose(0, 2, 4, 5, 3, 1))


def test_layout_transform_program_prints_and_parses():
    text = """def @main(%x: Tensor[(1, 32, 3, 4), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = nn.relu(%0);
  layout_transform(%1, src_layout="NCHW16c", dst_layout="NCHW")
}
"""
    x = RNG.standard_normal((1, 32, 3, 4)).astype("float32")
    typed, out = check_and_run(text, x)
    assert 'layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c")' in rly.astext(typed)
    calls = [e for e in post_order(typed["main"].body) if isinstance(e, Call)]
    assert rly.astext(calls[0].checked_type) == "Tensor[(1, 2, 3, 4, 16), float32]"
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert get_opdef("layout_transform").pattern is OpPattern.INJECTIVE


@pytest.mark.parametrize("shape,src,dst", [
    ((1, 32, 3, 4), "NCHW", "NCHW16c"),
    ((1, 2, 3, 4, 16), "NCHW16c", "NHWC"),
    ((1, 2, 3, 4, 16), "NCHW16c", "NCHW8c"),
    ((32, 16, 3, 3), "OIHW", "OIHW4i8o"),
    ((1, 30, 3, 4), "NCHW", "NCHW16c"),
    ((6, 5, 1, 1), "OIHW", "OIHW4i4o"),
])
def test_layout_transform_tvm_compute_matches_reference(shape, src, dst):  # type: ignore
    import tvm
    from tvm import te
    attrs = get_opdef("layout_transform").make_attrs({"src_layout": src, "dst_layout": dst})
    x = te.placeholder(shape, "float32", name="x")
    out_type = rel("layout_transform", T(*shape), src_layout=src, dst_layout=dst)
    y = get_opdef("layout_transform").compute(attrs, [x], out_type)
    assert tuple(int(d) for d in y.shape) == tuple(out_type.shape)
    lib = tvm.compile(te.create_prim_func([x, y]), target="llvm")
    a = RNG.standard_normal(shape).astype("float32")
    b = tvm.runtime.empty(tuple(out_type.shape), "float32")
    lib(tvm.runtime.tensor(a), b)
    np.testing.assert_array_equal(b.numpy(), run("layout_transform", a, src_layout=src,
                                                 dst_layout=dst))


def test_layout_transform_needs_its_layouts():
    with pytest.raises(DiagnosticError, match="src_layout") as e:
        passes.InferType()(rly.parse(HEADER + "def @main(%x: Tensor[(1, 2), float32]) {\n"
                                     "  layout_transform(%x, dst_layout=\"NC\")\n}\n"))
    assert e.value.span is not None and e.value.span.line == 3


# ----------------------------------------------------------------------------- dyn.*
def _iv(*values: int, dtype: str = "int64") -> np.ndarray:
    return np.array(values, dtype=dtype)


@pytest.mark.parametrize("name,args,attrs,want", [
    ("dyn.reshape", [T(2, 3, 4), T(2, dtype="int64")], {}, T(ANY, ANY)),
    ("dyn.broadcast_to", [T(3, 1), T(3, dtype="int32")], {}, T(ANY, ANY, ANY)),
    ("dyn.zeros", [T(2, dtype="int64")], {"dtype": "int8"}, T(ANY, ANY, dtype="int8")),
    ("dyn.ones", [T(0, dtype="int64")], {}, T()),
    ("dyn.full", [T(dtype="int32"), T(3, dtype="int64")], {}, T(ANY, ANY, ANY, dtype="int32")),
    ("dyn.full", [T(), T(1, dtype="int64")], {"dtype": "float16"}, T(ANY, dtype="float16")),
    ("dyn.tile", [T(2, 3), T(3, dtype="int64")], {}, T(ANY, ANY, ANY)),
    ("dyn.tile", [T(2, 3, 4), T(1, dtype="int64")], {}, T(ANY, ANY, ANY)),
    ("dyn.strided_slice", [T(5, 6, 7)] + [T(2, dtype="int64")] * 3, {}, T(ANY, ANY, 7)),
    ("dyn.expand_dims", [T(5, 6), T(dtype="int32")], {"num_newaxis": 2}, T(ANY, ANY, ANY, ANY)),
    ("dyn.squeeze", [T(1, 6, 1), T(2, dtype="int64")], {}, T(ANY)),
    ("dyn.nn.pad", [T(1, 6, 1), T(3, 2, dtype="int64"), T()], {}, T(ANY, ANY, ANY)),
])
def test_dyn_relations_follow_tvm(name, args, attrs, want):  # type: ignore[no-untyped-def]
    assert rel(name, *args, **attrs) == want


@pytest.mark.parametrize("name,args,msg", [
    ("dyn.reshape", [T(2, 3), T(ANY, dtype="int64")], "length of newshape must be static"),
    ("dyn.reshape", [T(2, 3), T(2)], "newshape must be an integer tensor"),
    ("dyn.reshape", [T(2, 3), T(2, 1, dtype="int64")], "newshape must be a 1-d tensor"),
    ("dyn.broadcast_to", [T(2, 3), T(1, dtype="int64")], "rank 2 to a shape of length 1"),
    ("dyn.full", [T(2), T(1, dtype="int64")], "fill_value must be a scalar"),
    ("dyn.expand_dims", [T(2), T(1, dtype="int32")],
     "axis must be a 0-d integer tensor, found Tensor[(1), int32]"),
    ("dyn.squeeze", [T(1, 1), T(3, dtype="int64")], "3 axes to remove from a tensor of rank 2"),
    ("dyn.strided_slice", [T(5, 6), T(2, dtype="int64"), T(1, dtype="int64"),
                           T(2, dtype="int64")], "must have the same length"),
    ("dyn.nn.pad", [T(5, 6), T(3, 2, dtype="int64"), T()], "must have shape (2, 2)"),
    ("dyn.nn.pad", [T(5, 6), T(2, 2, dtype="int64"), T(1)], "pad_value must be a scalar"),
])
def test_dyn_relation_errors(name, args, msg):  # type: ignore[no-untyped-def]
    with pytest.raises(TypeInferenceError, match=re.escape(msg)):
        rel(name, *args)


def test_dyn_values_match_the_static_ops():
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_array_equal(run("dyn.reshape", x, _iv(0, -1)), x.reshape(2, 12))
    np.testing.assert_array_equal(run("dyn.reshape", x, _iv(-3, 4)), x.reshape(6, 4))
    np.testing.assert_array_equal(run("dyn.reshape", x, _iv(4, 0, -1)), x.reshape(4, 3, 2))
    b = run("dyn.broadcast_to", x[:, :1, :], _iv(5, 2, 3, 4, dtype="int32"))
    np.testing.assert_array_equal(b, np.broadcast_to(x[:, :1, :], (5, 2, 3, 4)))
    z = run("dyn.zeros", _iv(2, 3), dtype="int8")
    assert z.dtype == np.int8 and z.shape == (2, 3) and not z.any()
    o = run("dyn.ones", _iv(4))
    assert o.dtype == np.float32 and (o == 1).all()
    f = run("dyn.full", np.array(7, "int32"), _iv(2, 2), dtype="float16")
    assert f.dtype == np.float16 and (f == 7).all() and f.shape == (2, 2)
    np.testing.assert_array_equal(run("dyn.tile", x, _iv(2, 1, 1, 3)), np.tile(x, (2, 1, 1, 3)))
    s = run("dyn.strided_slice", x, _iv(1, -1), _iv(2, -4), _iv(1, -2))
    np.testing.assert_array_equal(s, x[1:2, -1:-4:-2])
    e = run("dyn.expand_dims", x, np.array(-1, "int64"), num_newaxis=2)
    assert e.shape == (2, 3, 4, 1, 1)
    q = run("dyn.squeeze", x.reshape(1, 2, 1, 12), _iv(0, -2))
    assert q.shape == (2, 12)
    pw = np.array([[0, 1], [2, 0], [1, 1]], "int32")
    p = run("dyn.nn.pad", x, pw, np.array(9, "float32"))
    np.testing.assert_array_equal(p, run("nn.pad", x, np.array(9, "float32"),
                                         pad_width=[[0, 1], [2, 0], [1, 1]]))
    p = run("dyn.nn.pad", x, pw, np.array(0, "float32"), pad_mode="edge")
    np.testing.assert_array_equal(p, np.pad(x, [(0, 1), (2, 0), (1, 1)], mode="edge"))


@pytest.mark.parametrize("name,args,msg", [
    ("dyn.reshape", [np.zeros((2, 3)), _iv(-2)], "code -2"),
    ("dyn.reshape", [np.zeros((2, 3)), _iv(4, -1)], "cannot reshape"),
    ("dyn.broadcast_to", [np.zeros((2, 3)), _iv(4, 3)], "cannot broadcast"),
    ("dyn.zeros", [_iv(2, -1)], "negative dimension"),
    ("dyn.squeeze", [np.zeros((1, 3)), _iv(1)], "axis 1 has size 3"),
    ("dyn.squeeze", [np.zeros((1, 3)), _iv(0, -2)], "axis twice"),
])
def test_dyn_runtime_errors(name, args, msg):  # type: ignore[no-untyped-def]
    with pytest.raises(DiagnosticError, match=re.escape(msg)):
        run(name, *args)


def test_dyn_program_computes_its_shapes_at_run_time():
    text = """def @main(%x: Tensor[(2, 6), float32], %n: int64) {
  %0 = shape_of(%x, dtype="int64");
  %1 = (%n, -1i64);
  %2 = stack(%1);
  %3 = dyn.reshape(%x, %2);
  %4 = dyn.zeros(shape_of(%3, dtype="int64"), dtype="int32");
  %5 = dyn.full(2f, shape_of(%3, dtype="int64"));
  (%3, %4, multiply(%3, %5), dyn.broadcast_to(%x, %0, shape=None))
}
"""
    x = RNG.standard_normal((2, 6)).astype("float32")
    typed, (r, z, m, b) = check_and_run(text, x, np.array(4, "int64"))
    assert rly.astext(typed["main"].checked_type.ret_type) == (
        "(Tensor[(?, ?), float32], Tensor[(?, ?), int32], Tensor[(?, ?), float32], "
        "Tensor[(?, ?), float32])")
    np.testing.assert_array_equal(r, x.reshape(4, 3))
    assert z.shape == (4, 3) and z.dtype == np.int32
    np.testing.assert_array_equal(m, 2 * x.reshape(4, 3))
    np.testing.assert_array_equal(b, x)
    assert "shape=None" not in rly.astext(typed)  # a default: not printed back


def test_dyn_program_runtime_error_names_the_op():
    text = """def @main(%x: Tensor[(2, 6), float32], %s: Tensor[(2), int64]) {
  dyn.reshape(%x, %s)
}
"""
    mod = passes.InferType()(rly.parse(HEADER + text))
    with pytest.raises(DiagnosticError, match="dyn.reshape.*cannot reshape"):
        runtime.evaluate(mod, np.zeros((2, 6), "float32"), _iv(5, -1))


def test_every_dyn_op_has_a_gradient_rule_or_is_marked():
    from relay_ir.op import list_ops
    assert get_opdef("dyn.zeros").non_differentiable
    assert get_opdef("dyn.ones").non_differentiable
    for od in list_ops():
        if od.name.startswith("dyn.") or od.name in ("layout_transform", "on_device",
                                                     "device_copy"):
            assert od.grad is not None or od.non_differentiable, od.name


def _vjp_check(name, xs, attrs, which):  # type: ignore[no-untyped-def]
    """The rule of a (jointly) linear op as a transpose: <g, f(d)> == sum <rule_i(g), d_i>.

    ``xs`` are the argument values; ``which`` the indices of the arguments the op is linear
    in (the others -- shape tensors -- are held fixed and must get zero adjoints).
    """
    from relay_ir.expr import Var
    vs = [Var(f"a{i}", TensorType(a.shape, str(a.dtype))) for i, a in enumerate(xs)]
    y = run(name, *xs, **attrs)
    g = RNG.standard_normal(y.shape).astype(y.dtype)
    gvar = Var("g", TensorType(y.shape, str(y.dtype)))
    call = make_call(name, *vs, **attrs)
    grads = _eval_rule(list(zip(vs, xs)) + [(gvar, g)], get_opdef(name).grad(call, call, gvar))
    ds = [RNG.standard_normal(a.shape).astype(a.dtype) if i in which else a
          for i, a in enumerate(xs)]
    lhs = float(np.sum(g * run(name, *ds, **attrs)))
    rhs = sum(float(np.sum(gr * ds[i])) for i, gr in enumerate(grads) if i in which)
    np.testing.assert_allclose(rhs, lhs, rtol=1e-10)
    for i, gr in enumerate(grads):
        assert gr.shape == xs[i].shape and gr.dtype == xs[i].dtype
        if i not in which:
            assert not gr.any()


@pytest.mark.parametrize("name,xs,attrs,which", [
    ("dyn.tile", [RNG.standard_normal((2, 3)), _iv(2, 1, 3)], {}, [0]),
    ("dyn.tile", [RNG.standard_normal((2, 3, 2)), _iv(3)], {}, [0]),
    ("dyn.tile_grad", [RNG.standard_normal((2, 2, 9)), RNG.standard_normal((2, 3)),
                       _iv(2, 1, 3)], {}, [0]),
    ("dyn.strided_slice", [RNG.standard_normal((7, 5)), _iv(1, -1), _iv(7, -6), _iv(2, -2)],
     {}, [0]),
    ("dyn.strided_slice", [RNG.standard_normal((7, 5)), _iv(1), _iv(3), _iv(1)],
     {"slice_mode": "size"}, [0]),
    ("dyn.strided_slice_grad", [RNG.standard_normal((3, 3)), RNG.standard_normal((7, 5)),
                                _iv(1, -1), _iv(7, -6), _iv(2, -2)], {}, [0]),
    ("dyn.nn.pad", [RNG.standard_normal((3, 4)), _iv(1, 2, 0, 3).reshape(2, 2),
                    np.array(0.5)], {}, [0, 2]),
    ("dyn.nn.pad", [RNG.standard_normal((3, 4)), _iv(2, 1, 0, 3).reshape(2, 2),
                    np.array(0.5)], {"pad_mode": "edge"}, [0]),
    ("dyn.nn.pad", [RNG.standard_normal((3, 4)), _iv(2, 1, 0, 3).reshape(2, 2),
                    np.array(0.5)], {"pad_mode": "reflect"}, [0]),
    ("dyn.nn.pad_grad", [RNG.standard_normal((6, 7)), RNG.standard_normal((3, 4)),
                         _iv(2, 1, 0, 3).reshape(2, 2)], {"pad_mode": "reflect"}, [0]),
    ("dyn.nn.pad_grad", [RNG.standard_normal((6, 7)), RNG.standard_normal((3, 4)),
                         _iv(2, 1, 0, 3).reshape(2, 2)], {}, [0]),
])
def test_dyn_transpose_rules(name, xs, attrs, which):  # type: ignore[no-untyped-def]
    _vjp_check(name, xs, attrs, which)


def test_dyn_pad_gradient_values():
    x = np.arange(6.0).reshape(2, 3)
    pw = _iv(1, 0, 0, 2).reshape(2, 2)
    g = np.arange(15.0).reshape(3, 5)
    got = run("dyn.nn.pad_grad", g, x, pw, pad_mode="edge")
    # edge padding copies row 0 upward and column 2 to the right twice
    want = g[1:, :3].copy()
    want[0] += g[0, :3]
    want[:, 2] += g[1:, 3] + g[1:, 4]
    want[0, 2] += g[0, 3] + g[0, 4]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,x,arg", [
    ("dyn.reshape", (2, 3, 4), _iv(4, -1)),
    ("dyn.broadcast_to", (3, 1), _iv(2, 3, 4)),
    ("dyn.expand_dims", (3, 4), np.array(1, "int64")),
    ("dyn.squeeze", (1, 3, 1), _iv(0)),
    ("dyn.full", (), _iv(2, 3)),
])
def test_dyn_gradient_rules_are_vector_jacobian_products(name, x, arg):  # type: ignore
    """<g, f(x + eps d) - f(x)> / eps == <grad(g), d> for a linear op, exactly up to rounding."""
    from relay_ir.expr import Var
    xv = RNG.standard_normal(x)
    y = run(name, xv, arg)
    g = RNG.standard_normal(y.shape)
    d = RNG.standard_normal(x)
    lhs = float(np.sum(g * run(name, d, arg)))  # linear: J d = f(d)
    xvar = Var("x", T(*x, dtype="float64"))
    svar = Var("s", TensorType(arg.shape, "int64"))
    gvar = Var("g", TensorType(tuple(ANY for _ in y.shape), "float64"))
    call = make_call(name, xvar, svar)
    outs = get_opdef(name).grad(call, call, gvar)
    assert len(outs) == 2
    gx, gs = _eval_rule([(xvar, xv), (svar, arg), (gvar, g)], outs)
    assert gx.shape == x and gs.shape == arg.shape and not gs.any()
    np.testing.assert_allclose(float(np.sum(gx * d)), lhs, rtol=1e-12)


def _eval_rule(params, exprs):  # type: ignore[no-untyped-def]
    """Evaluate expressions built by a rule, as a function of ``params`` (Var, value) pairs."""
    from relay_ir.expr import Function, Tuple
    from relay_ir.module import IRModule
    fn = Function(tuple(v for v, _ in params), Tuple(tuple(exprs)))
    mod = passes.InferType()(IRModule.from_expr(fn))
    return runtime.evaluate(mod, *[a for _, a in params])


@pytest.mark.parametrize("name,x,args,attrs", [
    ("layout_transform", (2, 8, 3, 1), [], {"src_layout": "NCHW", "dst_layout": "NHWC4c"}),
    ("layout_transform", (8, 4, 3, 3), [], {"src_layout": "OIHW", "dst_layout": "OIHW2i4o"}),
    ("dyn.reshape", (2, 3, 4), [_iv(4, -1)], {}),
    ("dyn.broadcast_to", (3, 1), [_iv(2, 3, 4)], {}),
    ("dyn.tile", (3, 2), [_iv(2, 1, 3)], {}),
    ("dyn.strided_slice", (5, 4), [_iv(1), _iv(5), _iv(2)], {}),
    ("dyn.nn.pad", (3, 2), [np.array([[1, 0], [2, 1]], "int64"), np.array(0.0)], {}),
])
def test_jvp_rules_of_linear_ops(name, x, args, attrs):  # type: ignore[no-untyped-def]
    """Every op here is linear in its data: the tangent of f at x along d is f(d)."""
    from relay_ir.expr import Var
    xv, d = RNG.standard_normal(x), RNG.standard_normal(x)
    xvar, dvar = Var("x", T(*x, dtype="float64")), Var("d", T(*x, dtype="float64"))
    avars = [Var(f"a{i}", TensorType(a.shape, str(a.dtype))) for i, a in enumerate(args)]
    call = make_call(name, xvar, *avars, **attrs)
    tangent = get_opdef(name).jvp(call, call, [dvar] + avars)
    params = [(xvar, xv), (dvar, d)] + list(zip(avars, args))
    (got,) = _eval_rule(params, [tangent])
    np.testing.assert_array_equal(got, run(name, d, *args, **attrs))


def test_layout_transform_gradient_is_the_inverse_transform():
    from relay_ir.expr import Var
    attrs = {"src_layout": "NCHW", "dst_layout": "NCHW4c"}
    x = RNG.standard_normal((2, 8, 3, 5))
    y = run("layout_transform", x, **attrs)
    g, d = RNG.standard_normal(y.shape), RNG.standard_normal(x.shape)
    xvar, gvar = Var("x", T(*x.shape, dtype="float64")), Var("g", T(*y.shape, dtype="float64"))
    call = make_call("layout_transform", xvar, **attrs)
    (gx,) = _eval_rule([(xvar, x), (gvar, g)], get_opdef("layout_transform").grad(call, call,
                                                                                  gvar))
    assert gx.shape == x.shape
    np.testing.assert_allclose(np.sum(gx * d), np.sum(g * run("layout_transform", d, **attrs)),
                               rtol=1e-12)


# ----------------------------------------------------------------------------- device annotations
def test_device_annotations_are_identity_and_keep_their_attributes():
    text = """def @main(%a: Tensor[(5, 7), float32], %b: Tensor[(5, 7), float32]) {
  %0 = add(%a, %b);
  %1 = on_device(%0, virtual_device=1, constrain_result=True);
  %2 = device_copy(%1, src_virtual_device=1, dst_virtual_device=2);
  %3 = on_device((%2, %a), virtual_device="gpu", constrain_body=False);
  subtract(%3.0, %3.1)
}
"""
    a = RNG.standard_normal((5, 7)).astype("float32")
    b = RNG.standard_normal((5, 7)).astype("float32")
    typed, out = check_and_run(text, a, b)
    np.testing.assert_array_equal(out, (a + b) - a)
    printed = rly.astext(typed)
    assert "on_device(%0, virtual_device=1, constrain_result=True)" in printed
    assert "device_copy(%1, src_virtual_device=1, dst_virtual_device=2)" in printed
    assert 'virtual_device="gpu", constrain_body=False)' in printed
    calls = [e for e in post_order(typed["main"].body) if isinstance(e, Call)]
    on = [c for c in calls if c.op.name == "on_device"]
    assert on[0].attrs.virtual_device == 1 and on[0].attrs.constrain_result is True
    assert on[0].attrs.constrain_body is True  # default
    assert on[1].checked_type == TupleType((T(5, 7), T(5, 7)))


def test_compiler_annotations_are_identities_kept_in_text():
    text = """def @main(%x: Tensor[(8, 4), int32], %y: Tensor[(8, 4), int32]) {
  %0 = annotation.compiler_begin(%x, compiler="ccompiler");
  %1 = annotation.compiler_begin(%y, compiler="ccompiler");
  %2 = add(%0, %1);
  %3 = annotation.compiler_end(%2, compiler="ccompiler");
  %4 = annotation.stop_fusion(%3);
  %5 = (%4, %y);
  %6 = annotation.compiler_end(%5, compiler="default");
  %7 = annotation.checkpoint(%6);
  subtract(%7.0, %7.1)
}
"""
    x = RNG.integers(-50, 50, (8, 4)).astype("int32")
    y = RNG.integers(-50, 50, (8, 4)).astype("int32")
    typed, out = check_and_run(text, x, y)
    np.testing.assert_array_equal(out, x)
    printed = rly.astext(typed)
    assert 'annotation.compiler_begin(%x, compiler="ccompiler")' in printed
    assert 'annotation.compiler_end(%5, compiler="default")' in printed
    assert "annotation.stop_fusion(%3)" in printed
    calls = [e for e in post_order(typed["main"].body) if isinstance(e, Call)]
    ckpt = [c for c in calls if c.op.name == "annotation.checkpoint"][0]
    assert ckpt.checked_type == TupleType((T(8, 4, dtype="int32"), T(8, 4, dtype="int32")))
    assert all(get_opdef(n).grad is not None for n in (
        "annotation.stop_fusion", "annotation.checkpoint", "annotation.compiler_begin",
        "annotation.compiler_end"))


def test_device_annotation_attribute_names_are_tvms():
    def names(op: str) -> list[str]:
        return [f.name for f in get_opdef(op).attrs]
    assert names("on_device") == ["virtual_device", "constrain_result", "constrain_body"]
    assert names("device_copy") == ["src_virtual_device", "dst_virtual_device"]
    with pytest.raises(DiagnosticError, match="no attribute `is_fixed`"):
        rly.parse(HEADER + "def @main(%x: float32) { on_device(%x, is_fixed=True) }\n")


def test_device_annotation_gradients_pass_through():
    from relay_ir.expr import Var
    x = Var("x", T(2))
    g = Var("g", T(2))
    for name in ("on_device", "device_copy", "annotation.stop_fusion", "annotation.checkpoint",
                 "annotation.compiler_begin", "annotation.compiler_end"):
        od = get_opdef(name)
        call = make_call(name, x)
        assert od.grad(call, call, g) == (g,)
        assert od.compute(od.make_attrs({}), ["a te.Tensor"], T(2)) == "a te.Tensor"
        assert od.jvp(call, call, [g]) is g
        assert not od.non_differentiable


# ----------------------------------------------------------------------------- TVM programs
# From TVM's docs (dev/convert_layout): a two-convolution NHWC network, then the same network
# after ConvertLayout("NCHW") with its layout transforms; TVM printed the types.
CONVERT_LAYOUT_BEFORE = """def @main(%x: Tensor[(1, 56, 56, 64), float32], %weight1: Tensor[(3, 3, 64, 32), float32], %weight2: Tensor[(3, 3, 32, 32), float32]) {
  %0 = nn.conv2d(%x, %weight1, padding=[1, 1], channels=32, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO");
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %weight2, padding=[1, 1], channels=32, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO");
  nn.relu(%2)
}
"""  # noqa: E501
CONVERT_LAYOUT_AFTER = """def @main(%x: Tensor[(1, 56, 56, 64), float32], %weight1: Tensor[(3, 3, 64, 32), float32], %weight2: Tensor[(3, 3, 32, 32), float32]) {
  %0 = layout_transform(%x, src_layout="NHWC", dst_layout="NCHW") /* ty=Tensor[(1, 64, 56, 56), float32] */;
  %1 = layout_transform(%weight1, src_layout="HWIO", dst_layout="OIHW") /* ty=Tensor[(32, 64, 3, 3), float32] */;
  %2 = nn.conv2d(%0, %1, padding=[1, 1], channels=32, kernel_size=[3, 3]) /* ty=Tensor[(1, 32, 56, 56), float32] */;
  %3 = nn.relu(%2) /* ty=Tensor[(1, 32, 56, 56), float32] */;
  %4 = layout_transform(%weight2, src_layout="HWIO", dst_layout="OIHW") /* ty=Tensor[(32, 32, 3, 3), float32] */;
  %5 = nn.conv2d(%3, %4, padding=[1, 1], channels=32, kernel_size=[3, 3]) /* ty=Tensor[(1, 32, 56, 56), float32] */;
  %6 = nn.relu(%5) /* ty=Tensor[(1, 32, 56, 56), float32] */;
  layout_transform(%6, src_layout="NCHW", dst_layout="NHWC") /* ty=Tensor[(1, 56, 56, 32), float32] */
}
"""  # noqa: E501


def test_tvm_convert_layout_example_types_and_values():
    x = RNG.standard_normal((1, 56, 56, 64)).astype("float32")
    w1 = (RNG.standard_normal((3, 3, 64, 32)) * 0.1).astype("float32")
    w2 = (RNG.standard_normal((3, 3, 32, 32)) * 0.1).astype("float32")
    typed, after = check_and_run(CONVERT_LAYOUT_AFTER, x, w1, w2)
    calls = [e for e in post_order(typed["main"].body) if isinstance(e, Call)]
    want = re.findall(r"/\* ty=(.*?) \*/", CONVERT_LAYOUT_AFTER)
    assert [rly.astext(c.checked_type) for c in calls] == want
    _, before = check_and_run(CONVERT_LAYOUT_BEFORE, x, w1, w2)
    assert after.shape == before.shape == (1, 56, 56, 32)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    assert (after > 0).any() and (after == 0).any()


# From TVM's C++ test of the indexed graph (tests/cpp/relay/ir/indexed_graph_test.cc), itself
# taken from the ONNX frontend's loop test: a let-bound recursive while loop whose scan output
# grows by one row per iteration through dyn.broadcast_to. The two metadata constants are
# supplied as TVM's test supplies them (shape [1] int64 and an empty (0, 1) float32 tensor).
ONNX_LOOP = """def @main(%trip_count: int64,                                        // 0
          %cond: bool,                                               // 1
          %y: Tensor[(1), float32])                                  // 2
          -> (Tensor[(1), float32], Tensor[(?, ?), float32]) {
  %17 = (
    let %while_loop = fn (%iter_count: int64,                        // 3
                          %max_count: int64,                         // 4
                          %cond_in: bool,                            // 5
                          %y_in: Tensor[(1), float32],               // 6
                          %scan_out: Tensor[(?, ?), float32])        // 7
                          -> (int64, int64, bool, Tensor[(1), float32], Tensor[(?, ?), float32]) {
      %0 = equal(%cond_in, True);                                    // 11
      %1 = less(%iter_count, %max_count);                            // 13
      %2 = logical_and(%0, %1);                                      // 14
      if (%2) {
        %3 = cast(%iter_count, dtype="float32");                     // 20
        %4 = add(%y_in, %3);                                         // 21
        %5 = less(%4, 5f);                                           // 23
        %6 = squeeze(%5);                                            // 24
        %7 = reshape(%iter_count, newshape=[1]);                     // 29
        %8 = (%7, meta[relay.Constant][0]);                          // 31
        %9 = concatenate(%8);                                        // 32
        %10 = copy(%4);                                              // 36
        %11 = dyn.broadcast_to(%scan_out, %9, shape=None);           // 33
        %12 = expand_dims(%10, axis=0);                              // 37
        %13 = (%11, %12);                                            // 38
        %14 = add(%iter_count, 1i64);                                // 17
        %15 = cast(%6, dtype="bool");                                // 25
        %16 = concatenate(%13);                                      // 39
        %while_loop(%14, %max_count, %15, %4, %16)                   // 40
      } else {
        (%iter_count, %max_count, %cond_in, %y_in, %scan_out)        // 41
      }                                                              // 42
    };                                                               // 43
    %while_loop                                                      // 44
  );                                                                 // 45
  %18 = %17(0i64, %trip_count, %cond, %y, meta[relay.Constant][1]);  // 48
  %19 = %18.3;                                                       // 49
  %20 = %18.4;                                                       // 50
  (%19, %20)                                                         // 51
}                                                                    // 52
"""  # noqa: E501


def test_tvm_onnx_loop_with_dyn_broadcast_to():
    meta = {"relay.Constant": [np.array([1], "int64"), np.zeros((0, 1), "float32")]}
    y = np.array([0.5], "float32")
    typed, (y_out, scan) = check_and_run(ONNX_LOOP, np.array(10, "int64"), np.array(True), y,
                                         metadata=meta)
    assert rly.astext(typed["main"].checked_type.ret_type) == (
        "(Tensor[(1), float32], Tensor[(?, ?), float32])")
    # y_k = y + 0 + 1 + ... + (k-1); the loop stops once y_k >= 5 (after 4 steps: 0.5+0+1+2+3)
    # or after trip_count steps; scan holds y_1, ..., y_k as rows
    ys, cur, k = [], 0.5, 0
    while k < 10:
        cur += k
        ys.append(cur)
        k += 1
        if not cur < 5:
            break
    np.testing.assert_allclose(y_out, [ys[-1]])
    np.testing.assert_allclose(scan, np.array(ys, "float32").reshape(-1, 1))
    assert scan.shape == (4, 1)
    _, (y2, scan2) = check_and_run(ONNX_LOOP, np.array(2, "int64"), np.array(True), y,
                                   metadata=meta)
    np.testing.assert_allclose(scan2, [[0.5], [1.5]])
    np.testing.assert_allclose(y2, [1.5])


# From TVM's AOT tests (tests/python/relay/aot/test_cpp_aot.py, test_conv2d): a quantized
# network, uint8 data and int8 weights convolved into int32, pooled, narrowed to int8 and
# convolved again (int8 x int8 into int32).
_AOT_CONV = """nn.conv2d(
         {x},
         %weight,
         padding=[2, 2],
         channels=3,
         kernel_size=[5, 5],
         data_layout="NCHW",
         kernel_layout="OIHW",
         out_dtype="int32")"""
AOT_CONV2D = f"""def @main(%data : Tensor[(1, 3, 64, 64), uint8], %weight : Tensor[(3, 3, 5, 5), int8]) {{
    %1 = {_AOT_CONV.format(x="%data")};
    %2 = cast(nn.max_pool2d(%1, pool_size=[3, 3]), dtype="int8");
    %3 = {_AOT_CONV.format(x="%2")};
    %4 = nn.max_pool2d(%3, pool_size=[3, 3]);
    %4
}}
"""


def _np_conv_int(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Direct NCHW/OIHW convolution in int64, one output pixel at a time."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    oh, ow = xp.shape[2] - k + 1, xp.shape[3] - k + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + k, j:j + k],
                                        w.astype(np.int64))
    return out


def _np_max_pool3(x: np.ndarray) -> np.ndarray:
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    return win.max(axis=(4, 5))


def test_tvm_aot_quantized_conv2d_network():
    data = RNG.integers(0, 256, (1, 3, 64, 64)).astype("uint8")
    weight = RNG.integers(-128, 128, (3, 3, 5, 5)).astype("int8")
    typed, out = check_and_run(AOT_CONV2D, data, weight)
    assert rly.astext(typed["main"].checked_type.ret_type) == "Tensor[(1, 3, 60, 60), int32]"
    c1 = _np_conv_int(data, weight, 2)
    assert np.abs(c1).max() > 2 ** 16  # int32 accumulation is needed
    p1 = _np_max_pool3(c1).astype(np.int32).astype(np.int8)  # cast wraps, as in TVM
    want = _np_max_pool3(_np_conv_int(p1, weight, 2))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, want)


# From TVM's device-planning tests (tests/python/relay/test_pass_plan_devices.py): the inputs
# of test_left_add_on_cpu_via_copy and test_let_on_cpu, with virtual devices as metadata.
PLAN_DEVICES_COPY = """def @main(%a: Tensor[(5, 7), float32], %b: Tensor[(5, 7), float32],
          %c: Tensor[(5, 7), float32], %d: Tensor[(5, 7), float32]) {
  %0 = add(%a, %b);
  %1 = device_copy(%0, src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1]);
  %2 = add(%c, %d);
  subtract(%1, %2)
}
"""  # noqa: E501
PLAN_DEVICES_LET = """def @main(%a: Tensor[(5, 7), float32], %b: Tensor[(5, 7), float32],
          %c: Tensor[(5, 7), float32], %d: Tensor[(5, 7), float32]) {
  let %l = add(%a, %b);
  let %r = add(%c, %d);
  %0 = on_device(%l, virtual_device=meta[VirtualDevice][0]);
  subtract(%0, %r)
}
"""


# ... and the planned result of test_left_add_on_cpu: devices on the parameters and function.
PLAN_DEVICES_PLANNED = """def @main(%a {virtual_device=meta[VirtualDevice][0]}: Tensor[(5, 7), float32], %b {virtual_device=meta[VirtualDevice][0]}: Tensor[(5, 7), float32],
          %c {virtual_device= meta[VirtualDevice][1]}: Tensor[(5, 7), float32], %d {virtual_device= meta[VirtualDevice][1]}: Tensor[(5, 7), float32],
          virtual_device=meta[VirtualDevice][1]) {
  %0 = add(%a, %b);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  %2 = device_copy(%1, src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1]);
  %3 = add(%c, %d);
  subtract(%2, %3)
}
"""  # noqa: E501


@pytest.mark.parametrize("text", [PLAN_DEVICES_COPY, PLAN_DEVICES_LET, PLAN_DEVICES_PLANNED],
                         ids=["copy", "let", "planned"])
def test_tvm_plan_devices_programs(text):  # type: ignore[no-untyped-def]
    meta = {"VirtualDevice": [{"device_type": 1}, {"device_type": 2}]}
    args = [RNG.standard_normal((5, 7)).astype("float32") for _ in range(4)]
    typed, out = check_and_run(text, *args, metadata=meta)
    np.testing.assert_allclose(out, (args[0] + args[1]) - (args[2] + args[3]), rtol=1e-6)
    printed = rly.astext(typed)
    written = re.findall(r"(?:on_device|device_copy)\(%\w+, [^;\n]*\)", text)
    assert written
    for call in written:
        assert call in printed  # the annotation with its metadata references, as written
    calls = [e for e in post_order(typed["main"].body) if isinstance(e, Call)
             and e.op.name in ("on_device", "device_copy")]
    assert calls
    for c in calls:
        for k, v in c.attrs.items():
            if k.endswith("virtual_device"):
                assert v.key == "VirtualDevice" and v.index in (0, 1), (k, v)
