"""Optimization and compilation keep values: inf, nan and -0.0 included (issue 20).

passes.optimize may change results only by float rounding; zero rules that change which
elements are inf, nan or -0.0 run only under the ``unsafe_math`` opt-in. Compiled kernels
propagate NaN as the interpreter (numpy) does. Cost rewrites measured on CPU run in
runtime.build's llvm lowering only.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.cli import main as cli_main
from relay_ir.expr import Call, Constant, Function, Let, Op, Var, const
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.passes import PassContext, SimplifyExpr, parse_pipeline
from relay_ir.runtime.target_lowering import target_rewrites
from relay_ir.traversal import post_order
from relay_ir.ty import TensorType

H = '#[version = "0.0.5"]\n'
SPECIAL = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1.5], "float32")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, the same NaN positions and the same signs of zero."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan], b[~nan])
                and np.array_equal(np.signbit(a[~nan]), np.signbit(b[~nan])))


def ops(mod: IRModule) -> list[str]:
    return [n.op.name for fn in mod.functions.values() for n in post_order(fn)
            if isinstance(n, Call) and isinstance(n.op, Op)]


def rly_opt(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["opt", *argv])
    return code, out.getvalue()


# ----------------------------------------------------------------------------- the case
ZERO_RULES = H + """
def @main(%x: Tensor[(6), float32]) {
  (multiply(%x, 0f), multiply(0f, %x), add(%x, 0f), add(0f, %x), subtract(0f, %x),
   multiply(%x, zeros(shape=[6])), nn.matmul(reshape(%x, newshape=[1, 6]), zeros(shape=[6, 2])))
}"""


def test_optimize_keeps_inf_nan_and_signed_zero() -> None:
    mod = rly.parse(ZERO_RULES)
    raw = runtime.evaluate(mod, SPECIAL)
    opt = passes.optimize(mod)
    assert ops(opt).count("multiply") == 3 and "nn.matmul" in ops(opt)
    got = runtime.evaluate(opt, SPECIAL)
    assert same_bits(raw[0], np.array([np.nan, np.nan, np.nan, -0.0, 0.0, 0.0], "float32"))
    assert same_bits(raw[2], np.array([np.inf, -np.inf, np.nan, 0.0, 0.0, 1.5], "float32"))
    assert same_bits(raw[4], np.array([-np.inf, np.inf, np.nan, 0.0, 0.0, -1.5], "float32"))
    for r, g in zip(raw, got):
        assert same_bits(r, g)
    # and compiled (optimize, llvm lowering, fused kernels): the same values
    for r, g in zip(raw, runtime.build(mod, target="llvm")(SPECIAL)):
        assert same_bits(r, g)


def test_unsafe_math_is_an_explicit_opt_in() -> None:
    mod = rly.parse(H + "def @main(%x: Tensor[(6), float32]) { multiply(%x, 0f) }")
    unsafe = passes.optimize(mod, unsafe_math=True)
    assert ops(unsafe) == []
    assert same_bits(runtime.evaluate(unsafe, SPECIAL), np.zeros(6, "float32"))
    with PassContext(config={"unsafe_math": True}):
        assert ops(parse_pipeline("infer-type,simplify-expr")(mod)) == ["zeros"]
    # the command line: default keeps the product, --unsafe-math drops it
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".rly", delete=False) as f:
        f.write(H + "def @main(%x: Tensor[(6), float32]) { multiply(%x, 0f) }\n")
    code, text = rly_opt(f.name)
    assert code == 0 and "multiply(%x, 0f)" in text
    code, text = rly_opt("--unsafe-math", "--passes", "infer-type,simplify-expr", f.name)
    assert code == 0 and "multiply" not in text and "zeros(shape=[6])" in text


def test_exact_zero_identities_still_simplify() -> None:
    # -0.0 is the additive identity, +0.0 the subtractive one; integer zeros absorb; symbolic
    # (AD) zeros are absent terms
    before = rly.parse(H + """
def @main(%x: Tensor[(6), float32], %i: Tensor[(6), int32]) {
  (add(%x, -0f), add(-0f, %x), subtract(%x, 0f), subtract(-0f, %x), multiply(%i, 0),
   add(%x, zeros(shape=[6], symbolic=True)), multiply(%x, zeros(shape=[6], symbolic=True)),
   subtract(%x, -0f))
}""")
    out = SimplifyExpr()(passes.InferType()(before))
    want = passes.InferType()(rly.parse(H + """
def @main(%x: Tensor[(6), float32], %i: Tensor[(6), int32]) {
  (%x, %x, %x, negative(%x), zeros(shape=[6], dtype="int32"), %x,
   zeros(shape=[6], symbolic=True), subtract(%x, -0f))
}"""))
    rly.assert_structural_equal(passes.InferType()(out), want, map_free_vars=True)
    args = [SPECIAL, np.arange(6, dtype="int32")]
    # the first five are exact; the symbolic zero is an absent term (x + z is x, even -0.0)
    for r, g in zip(runtime.evaluate(before, *args)[:5], runtime.evaluate(out, *args)[:5]):
        assert same_bits(r, g)


def test_partial_eval_zeros_through_linear_ops_only_when_exact() -> None:
    # PE's `matmul(zeros, w) => zeros` fires for a symbolic zero, not for a user's zeros
    src = H + """
def @main(%w: Tensor[(3, 2), float32]) {
  nn.matmul(zeros(shape=[1, 3]MARK), %w)
}"""
    w = np.array([[np.inf, 1], [2, np.nan], [-0.0, 3]], "float32")
    user = rly.parse(src.replace("MARK", ""))
    opt = passes.optimize(user)
    assert "nn.matmul" in ops(opt)
    assert same_bits(runtime.evaluate(opt, w), runtime.evaluate(user, w))
    assert np.isnan(runtime.evaluate(opt, w)).all()
    marked = passes.optimize(rly.parse(src.replace("MARK", ", symbolic=True")))
    assert "nn.matmul" not in ops(marked)
    np.testing.assert_array_equal(runtime.evaluate(marked, w), np.zeros((1, 2), "float32"))


# hypothesis: random elementwise programs over special values, raw == optimized bit for bit
_CONSTS = [0.0, -0.0, 1.0, -1.0, np.inf, np.nan]
_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
_UNARY = ["negative", "nn.relu", "zeros_like", "ones_like", "abs"]


@st.composite
def elementwise_programs(draw: st.DrawFn) -> IRModule:
    t = TensorType((6,), "float32")
    x = Var("x", t)
    atoms: list = [x]
    bindings = []
    for k in range(draw(st.integers(1, 8))):
        def operand() -> object:
            kind = draw(st.integers(0, 3))
            if kind == 0:
                return const(np.float32(draw(st.sampled_from(_CONSTS))))
            if kind == 1:
                name = draw(st.sampled_from(["zeros", "ones"]))
                extra = {"symbolic": True} if name == "zeros" and draw(st.booleans()) else {}
                return make_call(name, shape=[6], dtype="float32", **extra)
            return draw(st.sampled_from(atoms))
        if draw(st.booleans()):
            value = make_call(draw(st.sampled_from(_UNARY)), operand())
        else:
            value = make_call(draw(st.sampled_from(_BINARY)), operand(), operand())
        v = Var(f"v{k}")
        bindings.append((v, value))
        atoms.append(v)
    body = atoms[-1]
    for v, value in reversed(bindings):
        body = Let(v, value, body)
    return IRModule({"main": Function((x,), body)})


def _symbolic_free(mod: IRModule) -> bool:
    return not any(isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "zeros"
                   and n.attrs.symbolic for fn in mod.functions.values() for n in post_order(fn))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(elementwise_programs())
def test_optimize_keeps_values_property(mod: IRModule) -> None:
    want = runtime.evaluate(mod, SPECIAL)
    got = runtime.evaluate(passes.optimize(mod), SPECIAL)
    if _symbolic_free(mod):
        assert same_bits(np.asarray(want).astype("float32"), np.asarray(got).astype("float32"))
    else:  # symbolic zeros are absent terms: only where they are not may values be compared
        assert np.asarray(got).shape == np.asarray(want).shape


def test_gradient_zeros_are_symbolic_and_still_dropped() -> None:
    # the adjoints nothing was accumulated into start from symbolic zeros: the optimized
    # gradient holds no zero buffer and no product of one, even with inf in a weight
    mod = rly.parse(H + """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3, 4), float32]) {
  sum(nn.relu(nn.matmul(%x, %w)))
}""")
    raw = passes.gradient(mod)
    assert "symbolic=True" in rly.astext(raw)
    opt = passes.optimize(raw)
    assert "zeros" not in ops(opt)
    x = np.array([[1, 2, 3], [-1, 0, 2]], "float32")
    w = np.ones((3, 4), "float32")
    value, (gx, gw) = runtime.evaluate(opt, x, w)
    rvalue, (rgx, rgw) = runtime.evaluate(raw, x, w)
    np.testing.assert_allclose(gx, rgx)
    np.testing.assert_allclose(gw, rgw)


# ----------------------------------------------------------------------------- required types
def test_partial_eval_requires_types_so_position_does_not_matter() -> None:
    # fold-constant rebuilds calls without their types; partial-eval's zero rule reads them,
    # so it declares infer-type as required and fires after fold-constant as it does alone
    mod = rly.parse(H + """
def @main(%w: Tensor[(3, 2), float32]) {
  let %z = zeros(shape=[1, 3], symbolic=True);
  add(nn.matmul(%z, %w), multiply(2f, 3f))
}""")
    assert passes.get_pass("partial-eval").info.required == ("infer-type",)
    alone = parse_pipeline("infer-type,partial-eval")(mod)
    after_fold = parse_pipeline("infer-type,fold-constant,partial-eval")(mod)
    assert "nn.matmul" not in ops(alone)
    assert "nn.matmul" not in ops(after_fold)
    w = np.ones((3, 2), "float32")
    np.testing.assert_array_equal(runtime.evaluate(after_fold, w), np.full((1, 2), 6, "float32"))
    for name in ("simplify-expr", "combine-sums", "share-weight-transpose", "fuse-ops"):
        assert "infer-type" in passes.get_pass(name).info.required


# ----------------------------------------------------------------------------- folding policy
def test_folding_that_grows_data_is_bounded_same_size_transforms_fold() -> None:
    mod = rly.parse(H + """
def @main(%x: Tensor[(2048, 2048), float32]) {
  add(%x, exp(ones(shape=[2048, 2048])))
}""")
    for out in (passes.optimize(mod), passes.optimize(mod, disabled_pass=("fold-constant",)),
                parse_pipeline("infer-type,fold-constant")(mod),
                parse_pipeline("infer-type,partial-eval")(mod)):
        big = [n for fn in out.functions.values() for n in post_order(fn)
               if isinstance(n, Constant) and n.data.size > 1 << 16]
        assert not big and "exp" in ops(out)
    # a weight scaled and transposed at compile time folds, whatever its size
    wdata = np.arange(300 * 400, dtype="float32").reshape(300, 400)
    weight = Constant(wdata)
    x = Var("x", TensorType((2, 300), "float32"))
    body = make_call("nn.matmul", x, make_call("transpose", make_call(
        "multiply", weight, const(np.float32(2))), axes=[1, 0]), transpose_b=True)
    wmod = IRModule({"main": Function((x,), body)})
    for out in (passes.optimize(wmod), parse_pipeline("infer-type,partial-eval")(wmod)):
        assert ops(out) == ["nn.matmul"]
        (c,) = [n for n in post_order(out["main"]) if isinstance(n, Constant)]
        np.testing.assert_array_equal(c.data, (wdata * 2).T)


# ----------------------------------------------------------------------------- NaN kernels
_XS = np.array([np.nan, 1.0, -np.inf, np.inf, -0.0, 0.0, -2.0, 3.0], "float32")
_YS = np.array([2.0, np.nan, np.nan, -np.inf, 0.0, -0.0, -0.0, np.nan], "float32")
KERNELS = {
    "nn.relu": ("nn.relu(%x)", 1),
    "maximum": ("maximum(%x, %y)", 2),
    "minimum": ("minimum(%x, %y)", 2),
    "clip": ("clip(%x, a_min=-1f, a_max=0f)", 1),
    "max": ("max(reshape(%x, newshape=[2, 4]), axis=[1])", 1),
    "min": ("min(reshape(%x, newshape=[2, 4]), axis=[1])", 1),
    "nn.max_pool2d": ("nn.max_pool2d(reshape(%x, newshape=[1, 1, 2, 4]), pool_size=[1, 2], "
                      "strides=[1, 2])", 1),
    "nn.global_max_pool2d": ("nn.global_max_pool2d(reshape(%y, newshape=[1, 2, 2, 2]))", 2),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compiled_kernels_propagate_nan_as_numpy(name: str) -> None:
    body, n = KERNELS[name]
    params = ", ".join(f"%{v}: Tensor[(8), float32]" for v in "xy"[:n])
    mod = rly.parse(H + f"def @main({params}) {{ {body} }}")
    args = [_XS, _YS][:n]
    want = runtime.evaluate(mod, *args)
    got = runtime.build(mod, target="llvm")(*args)
    assert np.isnan(want).any()
    assert same_bits(want, got), (want, got)


# TVM's simplifier folds float `x - x`, `(x + y) - y` and `x == x` as for integers, and its
# LLVM codegen lowers `!=` to the ordered compare (false for NaN); numpy is the reference.
CANCELLING = H + """
def @main(%x: Tensor[(8), float32], %y: Tensor[(8), float32]) {
  (subtract(%x, %x), subtract(add(%x, %y), %y), subtract(add(%x, %y), %x),
   multiply(subtract(exp(%x), exp(%x)), 2f), equal(%x, %x), not_equal(%x, %x),
   not_equal(%x, %y), equal(%x, %y), less(%x, %y), greater_equal(%x, %y))
}"""


def test_compiled_cancellations_and_comparisons_keep_nan_and_inf() -> None:
    mod = rly.parse(CANCELLING)
    want = runtime.evaluate(mod, _XS, _YS)
    got = runtime.build(mod, target="llvm")(_XS, _YS)
    assert np.isnan(want[0]).any() and not want[5].all() and want[5].any()
    for i, (w, g) in enumerate(zip(want, got)):
        assert same_bits(w, g), (i, w, g)


# ----------------------------------------------------------------------------- target rewrites
SHARED_WEIGHT = H + """
def @main(%a: Tensor[(1, 6), float32], %b: Tensor[(2, 6), float32],
          %c: Tensor[(64, 6), float32], %w: Tensor[(5, 6), float32]) {
  (nn.matmul(%a, %w, transpose_b=True), nn.matmul(%b, %w, transpose_b=True),
   nn.matmul(%c, %w, transpose_b=True))
}"""


def test_cpu_cost_rewrites_run_in_the_llvm_lowering_only() -> None:
    mod = rly.parse(SHARED_WEIGHT)
    opt = passes.optimize(mod)
    assert "transpose" not in ops(opt)               # target-independent: no cost decision
    cpu = target_rewrites(opt, "llvm")
    assert ops(cpu).count("transpose") == 1
    # only the few-row products read the shared transpose; 64 rows keep transpose_b
    mms = {tuple(n.args[0].checked_type.shape): n.attrs.transpose_b
           for n in post_order(cpu["main"]) if isinstance(n, Call)
           and isinstance(n.op, Op) and n.op.name == "nn.matmul"}
    assert mms == {(1, 6): False, (2, 6): False, (64, 6): True}
    assert target_rewrites(opt, "cuda") is opt
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in ((1, 6), (2, 6), (64, 6), (5, 6))]
    for r, g in zip(runtime.evaluate(mod, *args), runtime.evaluate(cpu, *args)):
        np.testing.assert_allclose(g, r, rtol=1e-6)
    for r, g in zip(runtime.evaluate(mod, *args), runtime.build(mod, target="llvm")(*args)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
