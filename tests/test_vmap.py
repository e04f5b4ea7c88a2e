"""passes.vmap and the per-operator batching rules: batched programs equal a loop over instances."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Function
from relay_ir.module import IRModule
from relay_ir.passes.vmap import VmapError, vmap_function
from relay_ir.traversal import post_order

HDR = '#[version = "0.0.5"]\n'


def _parse(text: str) -> IRModule:
    return passes.InferType()(rly.parse(HDR + text))


def _rand(shape, dtype="float32", seed=0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(0, 3, size=shape).astype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def _instance(x: np.ndarray, axis: int | None, i: int) -> np.ndarray:
    return x if axis is None else np.take(x, i, axis=axis)


def _leaves(v):  # type: ignore[no-untyped-def]
    if isinstance(v, tuple):
        return [x for f in v for x in _leaves(f)]
    return [np.asarray(v)]


def assert_loop_equal(mod: IRModule, bmod: IRModule, args: list, in_axes, n: int,
                      rtol: float = 1e-5, atol: float = 1e-6, entry: str = "main") -> None:
    """The batched module on ``args`` equals the original on each instance (interpreter); it
    is well formed and its text round-trips to the same values."""
    from relay_ir.well_formed import check
    check(bmod)
    again = passes.InferType()(rly.parse(rly.astext(bmod)))
    got = _leaves(runtime.evaluate(bmod, *args, entry=entry))
    for g, a in zip(got, _leaves(runtime.evaluate(again, *args, entry=entry))):
        np.testing.assert_array_equal(g, a)
    for i in range(n):
        inst = [_instance(a, ax, i) for a, ax in zip(args, in_axes)]
        want = _leaves(runtime.evaluate(mod, *inst, entry=entry))
        assert len(want) == len(got)
        for g, w in zip(got, want):
            assert g.shape[0] == n
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g[i], w, rtol=rtol, atol=atol, equal_nan=True)


# ----------------------------------------------------------------------------- vmap_function
def _primitives(mod: IRModule) -> list[Function]:
    fused = passes.FuseOps()(passes.InferType()(passes.ToANormalForm()(mod)))
    return [e for e in post_order(fused["main"].body)
            if isinstance(e, Function) and e.is_primitive]


MLP_GROUP = """
def @main(%x: Tensor[(3,), float32], %w: Tensor[(4, 3), float32], %b: Tensor[(4,), float32]) {
  let %h = nn.dense(%x, %w);
  let %y = add(%h, %b);
  tanh(%y)
}
"""


@pytest.mark.tvm
@pytest.mark.parametrize("batch_size", [None, 5])
def test_vmap_function_of_a_fused_group_builds_and_equals_a_numpy_loop(batch_size):
    (prim,) = _primitives(_parse(MLP_GROUP))
    bf = vmap_function(prim, (0, None, None), batch_size=batch_size)
    assert bf.is_primitive and bf.ret_type is not None
    # a dataflow graph like the group it came from: no let bindings
    assert "let" not in rly.astext(bf)
    dims = [p.checked_type.shape for p in bf.params]
    assert dims[1:] == [(4, 3), (4,)]
    assert dims[0][1:] == (3,) and (dims[0][0] == 5 if batch_size else dims[0][0] != 5)
    m = IRModule({"main": Function(bf.params, bf.body, bf.ret_type, bf.type_params)})
    exe = runtime.build(m, target="llvm")
    x, w, b = _rand((5, 3)), _rand((4, 3), seed=1), _rand((4,), seed=2)
    want = np.stack([np.tanh(w @ x[i] + b) for i in range(5)])
    np.testing.assert_allclose(exe(x, w, b), want, rtol=1e-5, atol=1e-6)
    from relay_ir.runtime.lower_tvm import lower_group
    if batch_size:
        g = lower_group(bf, [p.checked_type for p in bf.params])
        assert [t.shape for t in g.out_types] == [(5, 4)]


def test_vmap_function_tuple_output_and_batch_axis_one():
    mod = _parse("""
def @main(%x: Tensor[(3, 2), float32], %y: Tensor[(2,), float32]) {
  let %a = multiply(%x, %y);
  (sum(%a, axis=[1]), exp(%y))
}""")
    bf = vmap_function(mod["main"], (1, None), batch_size=4)
    m = IRModule({"main": Function(bf.params, bf.body, bf.ret_type, bf.type_params)})
    x, y = _rand((3, 4, 2)), _rand((2,))
    s, e = runtime.evaluate(m, x, y)
    assert s.shape == (4, 3) and e.shape == (4, 2)
    for i in range(4):
        np.testing.assert_allclose(s[i], (x[:, i, :] * y).sum(axis=1), rtol=1e-6)
        np.testing.assert_array_equal(e[i], np.exp(y))


# ----------------------------------------------------------------------------- programs
def test_mlp_symbolic_batch_equals_loop():
    mod = _parse("""
def @main(%x: Tensor[(3,), float32], %w1: Tensor[(8, 3), float32], %b1: Tensor[(8,), float32],
          %w2: Tensor[(2, 8), float32]) {
  let %h = nn.relu(nn.bias_add(nn.dense(%x, %w1), %b1, axis=-1));
  let %o = nn.dense(%h, %w2);
  (nn.softmax(%o), sum(%o))
}""")
    bm = passes.vmap(mod, in_axes=(0, None, None, None))
    assert "def @main[batch](%x: Tensor[(batch, 3), float32]" in rly.astext(bm)
    args = [_rand((6, 3)), _rand((8, 3), seed=1), _rand((8,), seed=2), _rand((2, 8), seed=3)]
    assert_loop_equal(mod, bm, args, (0, None, None, None), 6)


# ----------------------------------------------------------------------------- every operator
from relay_ir.expr import Var  # noqa: E402
from relay_ir.op import list_ops  # noqa: E402
from relay_ir.op._rules import make_call  # noqa: E402
from relay_ir.ty import TensorType, TupleType  # noqa: E402
from test_op_registry import SAMPLES, _random  # noqa: E402

N = 3


def _batch_value(t, axis, rng):  # type: ignore[no-untyped-def]
    """Random data for N instances of type ``t`` stacked on ``axis`` (None: one shared value)."""
    if axis is None:
        return _random(t, rng)
    if isinstance(t, TupleType):
        return tuple(_batch_value(f, axis, rng) for f in t.fields)
    return np.stack([_random(t, rng) for _ in range(N)], axis=axis % (t.ndim + 1))


def _take(v, axis, i):  # type: ignore[no-untyped-def]
    if axis is None:
        return v
    if isinstance(v, tuple):
        return tuple(_take(f, axis, i) for f in v)
    return np.take(v, i, axis=axis)


def _rank(t) -> int:  # type: ignore[no-untyped-def]
    return min(_rank(f) for f in t.fields) if isinstance(t, TupleType) else t.ndim


def _axes_cases(arg_types):  # type: ignore[no-untyped-def]
    """in_axes to try: every argument on 0; the first on its last axis alone (others shared);
    each other argument alone on 0."""
    n = len(arg_types)
    if n == 0:
        return [()]
    cases = [tuple(0 for _ in arg_types)]
    cases.append((-1,) + (None,) * (n - 1))
    for k in range(1, n):
        cases.append(tuple(0 if j == k else None for j in range(n)))
    return cases


def _one_call_module(name, arg_types, given):  # type: ignore[no-untyped-def]
    params = [Var(f"a{i}", t) for i, t in enumerate(arg_types)]
    body = make_call(name, *params, **given)
    return passes.InferType()(IRModule({"main": Function(tuple(params), body)}))


BATCHABLE = [od.name for od in list_ops() if not od.not_batchable]


def test_every_operator_has_a_batching_rule_or_a_not_batchable_mark():
    for od in list_ops():
        assert od.batch is not None, f"{od.name}: no batching rule and no not-batchable mark"
        if od.not_batchable:
            assert od.name.startswith("dyn.") or od.host_only, od.name


def _vmap_symbolic_or_static(mod, in_axes):  # type: ignore[no-untyped-def]
    """vmap with a symbolic batch size, or N where the rule needs a static one (unrolled)."""
    try:
        return passes.vmap(mod, in_axes=in_axes, batch_size=None if any(
            a is not None for a in in_axes) else N)
    except VmapError as e:
        assert "static batch_size" in e.message, e.message
        return passes.vmap(mod, in_axes=in_axes, batch_size=N)


@pytest.mark.parametrize("name", BATCHABLE)
def test_vmap_of_one_call_equals_a_loop(name):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    for arg_types, given in SAMPLES[name]:
        if any(isinstance(a, np.ndarray) for a in arg_types):
            continue
        mod = _one_call_module(name, arg_types, given)
        for in_axes in _axes_cases(arg_types):
            args = [_batch_value(t, a, rng) for t, a in zip(arg_types, in_axes)]
            bmod = _vmap_symbolic_or_static(mod, in_axes)
            with np.errstate(all="ignore"):
                got = _leaves(runtime.evaluate(bmod, *args))
                for i in range(N):
                    want = _leaves(runtime.evaluate(mod, *[_take(v, a, i) for v, a in
                                                           zip(args, in_axes)]))
                    assert len(got) == len(want)
                    for g, w in zip(got, want):
                        assert g.shape == (N,) + w.shape and g.dtype == w.dtype, (in_axes, g.shape)
                        tol = 2e-3 if w.dtype == np.float16 else 1e-5
                        np.testing.assert_allclose(g[i], w, rtol=tol, atol=tol, equal_nan=True,
                                                   err_msg=f"{name} {given} in_axes={in_axes}")


@pytest.mark.parametrize("name", [od.name for od in list_ops() if od.not_batchable][:3])
def test_not_batchable_operator_is_a_clear_error(name):  # type: ignore[no-untyped-def]
    arg_types, given = SAMPLES[name][0]
    types = [TensorType(a.shape, str(a.dtype)) if isinstance(a, np.ndarray) else a
             for a in arg_types]
    mod = _one_call_module(name, types, given)
    with pytest.raises(VmapError, match=f"`{name}` is not batchable"):
        passes.vmap(mod, in_axes=(0,) + (None,) * (len(types) - 1))


# ----------------------------------------------------------------------------- control flow
BRANCHY = """
def @f(%x: Tensor[(3,), float32]) -> Tensor[(3,), float32] {
  if (greater(sum(%x), 0f)) { exp(%x) } else { negative(multiply(%x, %x)) }
}
def @main(%x: Tensor[(3,), float32], %k: float32) {
  let %y = @f(%x);
  (multiply(%y, %k), %k)
}"""


def _branchy_args():  # type: ignore[no-untyped-def]
    x = _rand((6, 3), seed=3)
    x[::2] = np.abs(x[::2])       # even instances take the then branch
    x[1::2] = -np.abs(x[1::2])    # odd ones the else branch
    return [x, np.array(1.5, "float32")]


def test_if_on_a_batched_condition_is_a_select_of_both_branches():
    mod = _parse(BRANCHY)
    bm = passes.vmap(mod, in_axes=(0, None))
    text = rly.astext(bm["main"])
    assert "where(" in text and "if (" not in text and "@f" not in text
    args = _branchy_args()
    assert_loop_equal(mod, bm, args, (0, None), 6)
    # the unbatched output leaf %k is broadcast over the batch
    _, k = runtime.evaluate(bm, *args)
    np.testing.assert_array_equal(k, np.full(6, 1.5, "float32"))


def test_if_on_an_unbatched_condition_stays_an_if():
    mod = _parse("""
def @main(%x: Tensor[(3,), float32], %flag: bool, %w: Tensor[(3,), float32]) {
  if (%flag) { add(%x, %w) } else { %w }
}""")
    bm = passes.vmap(mod, in_axes=(0, None, None))
    text = rly.astext(bm["main"])
    assert "if (%flag)" in text  # (the shared %w of the else branch is materialized)
    x, w = _rand((4, 3)), _rand((3,), seed=1)
    for flag in (True, False):
        assert_loop_equal(mod, bm, [x, np.array(flag), w], (0, None, None), 4)


def test_nested_ifs_and_tuple_results_under_batched_and_shared_conditions():
    mod = _parse("""
def @main(%x: Tensor[(2,), float32], %c: bool, %w: Tensor[(2,), float32]) {
  let %t = if (%c) {
    if (less(sum(%x), 0f)) { (%x, %w) } else { (exp(%x), add(%w, %x)) }
  } else {
    (%w, negative(%x))
  };
  let %u = if (take(greater(%t.0, 1f), 0)) { %t.1 } else { %w };
  (%t.0, %u)
}""")
    bm = passes.vmap(mod, in_axes=(0, None, None))
    x = _rand((6, 2), seed=5)
    w = _rand((2,), seed=6)
    for c in (True, False):
        assert_loop_equal(mod, bm, [x, np.array(c), w], (0, None, None), 6)


def test_vmap_of_vmap_equals_a_double_loop():
    mod = _parse(BRANCHY)
    b2 = passes.vmap(passes.vmap(mod, in_axes=(0, None)), in_axes=(1, 0))
    assert "def @main[batch, batch1](%x: Tensor[(batch, batch1, 3), float32], " \
        "%k: Tensor[(batch1), float32])" in rly.astext(b2)
    x, k = _rand((6, 4, 3), seed=8), _rand((4,), seed=9)
    y, kk = runtime.evaluate(b2, x, k)
    assert y.shape == (4, 6, 3) and kk.shape == (4, 6)
    for j in range(4):
        for i in range(6):
            wy, wk = runtime.evaluate(mod, x[i, j], k[j])
            np.testing.assert_allclose(y[j, i], wy, rtol=1e-6)
            assert kk[j, i] == wk


def test_nested_globals_are_inlined_and_batched():
    mod = _parse("""
def @sq(%a: Tensor[(2,), float32]) { multiply(%a, %a) }
def @g(%a: Tensor[(2,), float32], %b: Tensor[(2,), float32]) { add(@sq(%a), @sq(%b)) }
def @main(%x: Tensor[(2,), float32], %y: Tensor[(2,), float32]) { @g(%x, @g(%y, %x)) }""")
    bm = passes.vmap(mod, in_axes=(0, 1))
    assert "@g" not in rly.astext(bm["main"])
    assert set(bm.functions) == set(mod.functions)  # the other globals are kept
    assert_loop_equal(mod, bm, [_rand((5, 2)), _rand((2, 5), seed=1)], (0, 1), 5)


@pytest.mark.tvm
def test_compiled_batched_programs_equal_the_interpreter():
    mod = _parse(BRANCHY)
    bm = passes.vmap(mod, in_axes=(0, None))
    args = _branchy_args()
    exe = runtime.build(bm, target="llvm")
    for g, w in zip(_leaves(exe(*args)), _leaves(runtime.evaluate(bm, *args))):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    mlp = _parse("""
def @main(%x: Tensor[(4,), float32], %w: Tensor[(5, 4), float32], %v: Tensor[(2, 5), float32]) {
  nn.log_softmax(nn.dense(tanh(nn.dense(%x, %w)), %v))
}""")
    bm = passes.vmap(mlp, in_axes=(0, None, 0), batch_size=3)
    args = [_rand((3, 4)), _rand((5, 4), seed=1), _rand((3, 2, 5), seed=2)]
    exe = runtime.build(bm, target="llvm")
    np.testing.assert_allclose(exe(*args), runtime.evaluate(bm, *args), rtol=1e-5, atol=1e-6)
    assert_loop_equal(mlp, bm, args, (0, None, 0), 3)


# ----------------------------------------------------------------------------- gradients
MLP = """
def @main(%x: Tensor[(4,), float32], %w: Tensor[(5, 4), float32], %b: Tensor[(5,), float32]) {
  let %h = tanh(add(nn.dense(%x, %w), %b));
  sum(multiply(%h, %h))
}"""


def _mlp_grads(x, w, b):  # type: ignore[no-untyped-def]
    """Per-instance value and gradients of sum(tanh(w x + b)^2), by hand (numpy)."""
    h = np.tanh(w @ x + b)
    dz = 2 * h * (1 - h * h)
    return (h * h).sum(), (w.T @ dz, np.outer(dz, x), dz)


def test_vmap_of_an_optimized_gradient_program_gives_per_instance_gradients():
    mod = _parse(MLP)
    xs, w, b = _rand((6, 4)), _rand((5, 4), seed=1), _rand((5,), seed=2)
    for gm in (passes.optimize(passes.gradient(mod)),
               passes.gradient(mod, mode="first_order")):
        bm = passes.vmap(gm, in_axes=(0, None, None))
        val, (gx, gw, gb) = runtime.evaluate(bm, xs, w, b)
        assert gw.shape == (6, 5, 4)
        for i in range(6):
            v, (wx, ww, wb) = _mlp_grads(xs[i], w, b)
            np.testing.assert_allclose(val[i], v, rtol=1e-5)
            for g, want in ((gx[i], wx), (gw[i], ww), (gb[i], wb)):
                np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-6)


def test_gradient_of_a_vmapped_program_sums_over_instances():
    mod = _parse(MLP)
    bm = passes.vmap(mod, in_axes=(0, None, None), batch_size=6)
    gm = passes.gradient(bm)
    xs, w, b = _rand((6, 4)), _rand((5, 4), seed=1), _rand((5,), seed=2)
    for g_mod in (gm, passes.optimize(gm)):
        val, (gx, gw, gb) = runtime.evaluate(g_mod, xs, w, b)
        per = [_mlp_grads(xs[i], w, b) for i in range(6)]
        np.testing.assert_allclose(val, [p[0] for p in per], rtol=1e-5)
        np.testing.assert_allclose(gx, np.stack([p[1][0] for p in per]), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gw, sum(p[1][1] for p in per), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gb, sum(p[1][2] for p in per), rtol=1e-4, atol=1e-5)


def test_gradient_through_a_batched_if_equals_per_instance_gradients():
    mod = _parse(BRANCHY)
    x, k = _branchy_args()
    gm = passes.gradient(passes.vmap(mod, in_axes=(0, None), batch_size=6))
    one = passes.gradient(mod)
    for g_mod in (gm, passes.optimize(gm)):
        (_, _), (gx, gk) = runtime.evaluate(g_mod, x, k)
        want_k = np.float32(0)
        for i in range(6):
            (_, _), (wx, wk) = runtime.evaluate(one, x[i], k)
            np.testing.assert_allclose(gx[i], wx, rtol=1e-5)
            want_k += wk
        np.testing.assert_allclose(gk, want_k, rtol=1e-5)


LEAKY = """
def @main(%x: Tensor[(2,), float32], %w: Tensor[(2,), float32]) {
  if (greater(sum(%x), 0f)) { sqrt(multiply(%x, %w)) } else { negative(%x) }
}"""


def test_an_untaken_branch_does_not_leak_nan_into_gradients():
    """Instance 1 takes the else branch; the then branch's sqrt'(0) = inf there. The select's
    adjoint for it is zero, and the guarded branch inputs keep 0 * inf out of the gradients
    of both the batched %x and the shared %w; without the guard the nan leaks."""
    mod = _parse(LEAKY)
    xs = np.array([[1.0, 4.0], [0.0, -1.0]], "float32")
    w = np.array([2.0, 0.5], "float32")
    one = passes.gradient(mod)
    want = [runtime.evaluate(one, xs[i], w)[1] for i in range(2)]
    for opt in (False, True):
        bm = passes.vmap(mod, in_axes=(0, None), batch_size=2)
        gm = passes.gradient(passes.optimize(bm) if opt else bm)
        v, (gx, gw) = runtime.evaluate(gm, xs, w)
        assert np.isnan(v[1]).sum() == 0 and np.isnan(v[0]).sum() == 0
        for i in range(2):
            np.testing.assert_allclose(gx[i], want[i][0], rtol=1e-6)
        np.testing.assert_allclose(gw, want[0][1] + want[1][1], rtol=1e-6)
    bare = passes.vmap(mod, in_axes=(0, None), batch_size=2, guard_branches=False)
    _, (gx, gw) = runtime.evaluate(passes.gradient(bare), xs, w)
    assert np.isnan(gx[1, 0]) and np.isnan(gw[0])  # 0 * inf from the untaken sqrt branch


# ----------------------------------------------------------------------------- errors
from relay_ir.errors import DiagnosticError  # noqa: E402

TWO = """
def @main(%x: Tensor[(2, 3), float32], %t: (Tensor[(3,), float32], int32)) { add(%x, %t.0) }"""


@pytest.mark.parametrize("kwargs, msg", [
    ({"in_axes": (0,)}, "in_axes has 1 entries but @main has 2 parameters (%x, %t)"),
    ({"in_axes": (3, None)}, "in_axes entry 3 for parameter %x of @main is out of range: the "
                             "batched argument has rank 3 (axes -3..2)"),
    ({"in_axes": (-4, None)}, "out of range"),
    ({"in_axes": ("0", None)}, "in_axes entries must be ints or None, found '0'"),
    ({"in_axes": (True, None)}, "in_axes entries must be ints or None"),
    ({"in_axes": {"x": 0}}, "in_axes must be a tuple of ints or None"),
    ({"in_axes": (None, None)}, "no argument of @main is batched (every in_axes entry is None): "
                                "give vmap a batch_size"),
    ({"in_axes": (0, None), "batch_size": 0}, "batch_size must be a positive int, found 0"),
    ({"in_axes": (0, None), "entry": "nope"}, "no global function @nope to batch (globals: "
                                              "@main)"),
])
def test_bad_arguments_are_clear_errors(kwargs, msg):  # type: ignore[no-untyped-def]
    with pytest.raises(VmapError) as info:
        passes.vmap(_parse(TWO), **kwargs)
    assert msg in info.value.message
    assert isinstance(info.value, DiagnosticError)


def test_a_batched_tuple_parameter_batches_every_leaf():
    mod = _parse(TWO)
    bm = passes.vmap(mod, in_axes=(None, 0), batch_size=4)
    assert "%t: (Tensor[(4, 3), float32], Tensor[(4), int32])" in rly.astext(bm)
    x = _rand((2, 3))
    t = (_rand((4, 3), seed=1), np.arange(4, dtype="int32"))
    out = runtime.evaluate(bm, x, t)
    for i in range(4):
        np.testing.assert_array_equal(out[i], runtime.evaluate(mod, x, (t[0][i], t[1][i])))


@pytest.mark.parametrize("src, msg", [
    ("""def @main(%x: Tensor[(2,), float32],
                  %f: fn (Tensor[(2,), float32]) -> Tensor[(2,), float32]) { %f(%x) }""",
     "parameter %f of @main has type fn"),
    ("""def @main(%x: Tensor[(2,), float32]) { let %r = ref(%x); ref_read(%r) }""",
     "references are not supported by vmap; use exe.run_batch for such programs"),
    ("""def @main(%x: Tensor[(2,), float32]) { let %f = fn (%y: Tensor[(2,), float32]) { %y };
          %f(%x) }""", "not supported by vmap; use exe.run_batch"),
    ("""def @r(%x: Tensor[(2,), float32], %n: int32) -> Tensor[(2,), float32] {
          if (equal(%n, 0)) { %x } else { @r(exp(%x), subtract(%n, 1)) } }
        def @main(%x: Tensor[(2,), float32]) { @r(%x, 3) }""",
     "recursion (@r calls itself) is not supported by vmap; use exe.run_batch"),
    ("""type L { Nil, Cons(Tensor[(2,), float32], L) }
        def @main(%x: Tensor[(2,), float32]) { match (Cons(%x, Nil)) { Cons(%y, _) => %y,
          Nil => %x } }""", "algebraic data types"),
])
def test_unsupported_programs_are_clear_errors(src, msg):  # type: ignore[no-untyped-def]
    mod = _parse(src)
    with pytest.raises(VmapError) as info:
        passes.vmap(mod, in_axes=0 if "%f" not in src.split("{")[0] else (0, 0))
    assert msg in info.value.message


def test_an_entry_used_by_another_global_is_refused():
    mod = _parse("""
def @main(%x: Tensor[(2,), float32]) { exp(%x) }
def @user(%y: Tensor[(2,), float32]) { @main(%y) }""")
    with pytest.raises(VmapError, match="@user uses the entry @main, whose type vmap changes"):
        passes.vmap(mod, in_axes=0)
    bm = passes.vmap(mod, entry="user", in_axes=0)  # a wrapper entry is fine
    assert_loop_equal(mod, bm, [_rand((3, 2))], (0,), 3, entry="user")


def test_a_gradient_program_with_references_says_what_to_do():
    gm = passes.optimize(passes.gradient(_parse(BRANCHY)))
    with pytest.raises(VmapError) as info:
        passes.vmap(gm, in_axes=(0, None))
    assert "are not supported by vmap; use exe.run_batch" in info.value.message
    assert "vmap the function, then differentiate" in info.value.message


def test_an_unrolled_operator_needs_a_static_batch_size():
    mod = _parse("""
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) { nn.cross_entropy(%x, %y) }""")
    with pytest.raises(VmapError, match="`nn.cross_entropy` with these batched arguments has no "
                                        "batching rule for a symbolic batch size"):
        passes.vmap(mod, in_axes=(0, 0))
    bm = passes.vmap(mod, in_axes=(0, 0), batch_size=2)
    p, t = _rand((2, 2, 3)) ** 2 + 0.1, _rand((2, 2, 3), seed=1) ** 2
    assert_loop_equal(mod, bm, [p, t], (0, 0), 2)


def test_the_error_points_at_the_call_it_cannot_batch():
    mod = rly.parse(HDR + """def @main(%x: Tensor[(4,), float32], %s: Tensor[(2,), int64]) {
  dyn.reshape(%x, %s)
}""")
    with pytest.raises(VmapError) as info:
        passes.vmap(mod, in_axes=(0, None))
    assert "`dyn.reshape` is not batchable: its output shape depends on the values" in \
        info.value.message
    assert info.value.span is not None and info.value.span.line == 3


# ----------------------------------------------------------------------------- scale
from util_scale import shallow_stack, sizes  # noqa: E402


@sizes(2_000, 100_000)
def test_long_chain_is_batched_without_recursion(n):  # type: ignore[no-untyped-def]
    lines = ["def @main(%x: Tensor[(2,), float32], %w: Tensor[(2,), float32]) {"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  let %v{i} = add({prev}, %w);")
        prev = f"%v{i}"
    lines.append(f"  {prev}\n}}")
    mod = _parse("\n".join(lines))
    with shallow_stack():
        bm = passes.vmap(mod, in_axes=(0, None))
    x, w = _rand((3, 2)), np.full(2, 0.5, "float32")
    out = runtime.evaluate(bm, x, w)
    want = x.copy()
    for _ in range(n):
        want = want + w
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.tvm
@pytest.mark.parametrize("name, k", [("nn.dense", 1), ("nn.conv2d", 0), ("take", 3),
                                     ("concatenate", 1), ("nn.batch_matmul", 0),
                                     ("strided_slice", 0)])
def test_compiled_batched_operators_equal_a_loop(name, k):  # type: ignore[no-untyped-def]
    """Symbolic-batch kernels of the main rule families compile and agree with the loop."""
    arg_types, given = SAMPLES[name][k]
    mod = _one_call_module(name, arg_types, given)
    rng = np.random.default_rng(3)
    for in_axes in _axes_cases(arg_types)[:2]:
        bmod = _vmap_symbolic_or_static(mod, in_axes)
        args = [_batch_value(t, a, rng) for t, a in zip(arg_types, in_axes)]
        got = _leaves(runtime.build(bmod, target="llvm")(*args))
        for i in range(N):
            want = _leaves(runtime.evaluate(mod, *[_take(v, a, i) for v, a in
                                                   zip(args, in_axes)]))
            for g, w in zip(got, want):
                np.testing.assert_allclose(g[i], w, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- fused groups
def _rand_of(t, rng, b=None):  # type: ignore[no-untyped-def]
    if isinstance(t, TupleType):
        return tuple(_rand_of(f, rng, b) for f in t.fields)
    shape = tuple(t.shape) if b is None else (b,) + tuple(t.shape)
    if t.dtype == "bool":
        return rng.random(shape) < 0.5
    if t.dtype.startswith(("int", "uint")):
        return rng.integers(0, 2, shape).astype(t.dtype)
    return rng.uniform(0.1, 0.9, shape).astype(t.dtype)


def _static_params(fn: Function) -> bool:
    def ok(t):  # type: ignore[no-untyped-def]
        if isinstance(t, TupleType):
            return all(ok(f) for f in t.fields)
        return isinstance(t, TensorType) and t.is_static
    return bool(fn.params) and all(ok(p.checked_type) for p in fn.params)


@pytest.mark.parametrize("example", ["treelstm.rly", "lstm_charrnn.rly", "convnet.rly"])
def test_vmap_function_batches_every_fused_group_of_an_example(example):  # type: ignore
    """What run_batch does with vmap_function: every fused group of the example's forward
    and optimized gradient programs, every parameter batched on axis 0 (symbolic batch),
    equals the group run once per instance."""
    import pathlib
    path = pathlib.Path(__file__).parent.parent / "examples" / example
    mod = passes.InferType()(rly.parse(path.read_text(), source_name=str(path), prelude=True))
    done = 0
    for m in (passes.optimize(mod), passes.optimize(passes.gradient(mod))):
        fm = passes.FuseOps()(passes.InferType()(passes.ToANormalForm()(m)))
        seen = 0
        for name in fm.functions:
            for p in post_order(fm[name].body):
                if not (isinstance(p, Function) and p.is_primitive and _static_params(p)):
                    continue
                seen += 1
                if seen % 4:  # every fourth group keeps the test short
                    continue
                try:
                    bf = vmap_function(p, tuple(0 for _ in p.params))
                except VmapError as e:  # only unrolled rules refuse a symbolic batch
                    assert "static batch_size" in e.message
                    continue
                rng = np.random.default_rng(0)
                args = [_rand_of(q.checked_type, rng, N) for q in p.params]
                plain = IRModule({"main": Function(p.params, p.body, p.ret_type)})
                bm = IRModule({"main": Function(bf.params, bf.body, bf.ret_type,
                                                bf.type_params)})
                got = _leaves(runtime.evaluate(bm, *args))
                for i in range(N):
                    want = _leaves(runtime.evaluate(plain, *[_take(a, 0, i) for a in args]))
                    for g, w in zip(got, want):
                        np.testing.assert_allclose(g[i], w, rtol=1e-5, atol=1e-6)
                done += 1
    assert done >= 5


@pytest.mark.parametrize("name", ["add", "where", "sum", "argmax", "nn.dense", "nn.matmul",
                                  "nn.batch_matmul", "nn.softmax", "nn.layer_norm",
                                  "concatenate", "split", "take", "take_grad", "strided_slice",
                                  "reshape", "transpose", "squeeze", "nn.conv2d",
                                  "nn.max_pool2d", "nn.global_avg_pool2d", "einsum", "cumsum",
                                  "one_hot", "nn.bias_add", "collapse_sum_like"])
def test_main_rules_batch_without_unrolling(name):  # type: ignore[no-untyped-def]
    """The families' rules make one call for the whole batch (no per-instance stack), for the
    first sample with the first argument batched and the rest shared."""
    arg_types, given = SAMPLES[name][0]
    mod = _one_call_module(name, arg_types, given)
    in_axes = (0,) + (None,) * (len(arg_types) - 1)
    text = rly.astext(passes.vmap(mod, in_axes=in_axes, batch_size=N)["main"])
    assert "stack(" not in text, text
    if name != "collapse_sum_like":  # (written as sums over the collapsed axes)
        assert text.count(name.split(".")[-1] + "(") == 1, text


# ----------------------------------------------------------------------------- random programs
def _random_program(seed: int):  # type: ignore[no-untyped-def]
    """A random dataflow program over (3, 4), (4,) and () float tensors: elementwise,
    broadcasting, reductions, transposes, reshapes, concatenation, take, softmax, select."""
    rng = np.random.default_rng(seed)
    pool = [("%p0", (3, 4)), ("%p1", (4,)), ("%p2", ())]
    lines = []

    def pick(pred=lambda s: True):  # type: ignore[no-untyped-def]
        cands = [v for v in pool if pred(v[1])]
        return cands[rng.integers(len(cands))]

    for i in range(12):
        a, sa = pick()
        k = rng.integers(8)
        if k == 0:
            e, s = f"{['exp', 'tanh', 'negative', 'sigmoid'][rng.integers(4)]}({a})", sa
        elif k == 1:
            b, sb = pick(lambda s: _bcast_ok(s, sa))
            e, s = (f"{['add', 'multiply', 'maximum', 'subtract'][rng.integers(4)]}({a}, {b})",
                    np.broadcast_shapes(sa, sb))
        elif k == 2 and sa:
            ax = int(rng.integers(len(sa)))
            e, s = f"sum({a}, axis=[{ax}])", sa[:ax] + sa[ax + 1:]
        elif k == 3 and len(sa) == 2:
            e, s = f"transpose({a})", sa[::-1]
        elif k == 4 and sa:
            e, s = f"reshape({a}, newshape=[-1])", (int(np.prod(sa)),)
        elif k == 5 and sa:
            e, s = f"concatenate(({a}, {a}), axis=0)", (2 * sa[0],) + sa[1:]
        elif k == 6 and sa:
            e, s = f"nn.softmax({a}, axis=-1)", sa
        elif k == 7 and sa and sa[-1] >= 2:
            e, s = f"take({a}, %idx, axis={len(sa) - 1})", sa[:-1] + (2,)
        else:
            b, sb = pick(lambda s: _bcast_ok(s, sa))
            e = f"where(greater({a}, {b}), {a}, {b})"
            s = np.broadcast_shapes(sa, sb)
        lines.append(f"  let %v{i} = {e};")
        pool.append((f"%v{i}", tuple(s)))
    body = "\n".join(lines)
    return _parse(f"""
def @main(%p0: Tensor[(3, 4), float32], %p1: Tensor[(4,), float32], %p2: float32,
          %idx: Tensor[(2,), int32]) {{
{body}
  ({pool[-1][0]}, {pool[-2][0]})
}}""")


def _bcast_ok(a, b) -> bool:  # type: ignore[no-untyped-def]
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_equal_a_loop(seed):  # type: ignore[no-untyped-def]
    mod = _random_program(seed)
    rng = np.random.default_rng(100 + seed)
    choices = [0, None, -1]
    in_axes = tuple(choices[rng.integers(3)] for _ in range(3)) + (
        None if seed % 2 else 0,)  # odd seeds: shared indices; even: per-instance ones
    if all(a is None for a in in_axes):
        in_axes = (0,) + in_axes[1:]
    types = [(3, 4), (4,), ()]
    args = [np.stack([_rand(t, seed=seed * 10 + j + i) for i in range(N)], axis=a % (len(t) + 1))
            if a is not None else _rand(t, seed=seed * 10 + j)
            for j, (t, a) in enumerate(zip(types, in_axes))]
    idx = np.array([[1, 0], [3, 3], [0, 2]], "int32")
    args.append(idx if in_axes[3] == 0 else idx[0])
    assert_loop_equal(mod, passes.vmap(mod, in_axes=in_axes), args, in_axes, N)


def test_vmap_of_a_jvp_program_equals_a_loop():
    mod = _parse(MLP)
    jm = passes.jvp(mod)
    in_axes = (0, None, None, 0, None, None)  # batched points and their tangents
    bm = passes.vmap(jm, in_axes=in_axes)
    args = [_rand((4, 4)), _rand((5, 4), seed=1), _rand((5,), seed=2), _rand((4, 4), seed=3),
            np.zeros((5, 4), "float32"), np.zeros(5, "float32")]
    assert_loop_equal(jm, bm, args, in_axes, 4)
