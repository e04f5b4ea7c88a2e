"""Tests for the dataflow pattern language and the fixpoint rewriter (passes/pattern.py)."""
from __future__ import annotations

import numpy as np
import pytest

from relay_ir.attrs import Attrs
from relay_ir.expr import (Call, Constant, Function, If, Let, RefRead, Tuple, TupleGetItem, Var,
                           const)
from relay_ir.module import IRModule
from relay_ir.op import get_opdef
from relay_ir.passes import Sequential, PassContext
from relay_ir.passes.pattern import (DFPattern, is_constant, is_expr, is_if, is_op, is_ref_read,
                                     is_tuple, is_tuple_get_item, is_var, optional, rewrite,
                                     wildcard)
from relay_ir.structural import assert_structural_equal
from relay_ir.traversal import flatten_lets
from relay_ir.ty import TensorType
from util_scale import shallow_stack, sizes

F2 = TensorType((2,), "float32")


def call(name: str, *args, **attrs):
    opdef = get_opdef(name)
    return Call(opdef.op, tuple(args), opdef.make_attrs(attrs) if opdef.attrs else Attrs())


# ----------------------------------------------------------------------------- matching
def test_wildcard_and_op_call():
    x, y = Var("x", F2), Var("y", F2)
    e = call("add", x, y)
    assert wildcard().match(e)
    assert is_op("add")(wildcard(), wildcard()).match(e)
    assert not is_op("multiply")(wildcard(), wildcard()).match(e)
    assert not is_op("add")(wildcard()).match(e)           # arity differs
    assert is_op("add")(...).match(e)                       # any arguments
    assert is_op("add").match(e.op) and not is_op("add").match(e)


def test_named_bindings_and_pattern_keys():
    x, y = Var("x", F2), Var("y", F2)
    e = call("add", x, y)
    a, b = wildcard("a"), wildcard("b")
    p = is_op("add")(a, b)
    env = p.match_env(e)
    assert env is not None
    assert env["a"] is x and env["b"] is y
    assert env[a] is x and env[p] is e


def test_same_name_twice_must_bind_same_node():
    x, y = Var("x", F2), Var("y", F2)
    p = is_op("add")(wildcard("v"), wildcard("v"))
    assert p.match(call("add", x, x))
    assert not p.match(call("add", x, y))


def test_constant_and_var_patterns():
    x = Var("x", F2)
    one = const(1.0)
    assert is_constant().match(one)
    assert is_constant(1.0).match(one)
    assert is_constant(1.0).match(Constant(np.ones((2, 2), "float32")))
    assert not is_constant(2.0).match(one)
    assert not is_constant().match(x)
    assert is_var().match(x) and is_var("x").match(x) and not is_var("y").match(x)
    assert not is_var().match(one)
    assert is_expr(x).match(x) and not is_expr(x).match(Var("x", F2))


def test_tuple_and_tuple_get_item():
    x, y = Var("x", F2), Var("y", F2)
    t = Tuple((x, y))
    assert is_tuple([wildcard(), is_var("y")]).match(t)
    assert not is_tuple([wildcard()]).match(t)
    assert is_tuple().match(t)
    g = TupleGetItem(t, 1)
    assert is_tuple_get_item(is_tuple(), 1).match(g)
    assert is_tuple_get_item(wildcard()).match(g)
    assert not is_tuple_get_item(wildcard(), 0).match(g)


def test_alternatives_and_optional():
    x = Var("x", F2)
    relu_or_sig = is_op("nn.relu")(wildcard()) | is_op("sigmoid")(wildcard())
    assert relu_or_sig.match(call("nn.relu", x))
    assert relu_or_sig.match(call("sigmoid", x))
    assert not relu_or_sig.match(call("tanh", x))
    base = is_op("exp")(wildcard("in"))
    opt = base.optional(lambda p: is_op("nn.relu")(p))
    assert opt.match(call("exp", x))
    assert opt.match(call("nn.relu", call("exp", x)))
    assert not opt.match(call("nn.relu", x))
    assert optional(base, lambda p: is_op("negative")(p)).match(call("negative", call("exp", x)))
    env = opt.match_env(call("nn.relu", call("exp", x)))
    assert env["in"] is x


def test_has_attr():
    x = Var("x", TensorType((2, 3), "float32"))
    s = call("sum", x, axis=[1])
    assert is_op("sum")(wildcard()).has_attr({"axis": [1]}).match(s)
    assert is_op("sum")(wildcard()).has_attr({"axis": (1,)}).match(s)
    assert not is_op("sum")(wildcard()).has_attr({"axis": [0]}).match(s)
    assert not is_op("sum")(wildcard()).has_attr({"nope": 1}).match(s)
    f = Function((x,), x, attrs=Attrs({"Primitive": 1}))
    assert wildcard().has_attr({"Primitive": 1}).match(f)


def test_has_type_shape_dtype():
    x = Var("x", TensorType((2, 3), "float32"))
    i = Var("i", TensorType((4,), "int32"))
    assert wildcard().has_shape((2, 3)).match(x)
    assert not wildcard().has_shape((3, 2)).match(x)
    assert wildcard().has_dtype("int32").match(i)
    assert not wildcard().has_dtype("int32").match(x)
    assert wildcard().has_type(TensorType((4,), "int32")).match(i)
    assert is_constant().has_shape(()).match(const(1.0))
    untyped = call("add", x, x)  # no inferred type: a type constraint cannot hold
    assert not wildcard().has_dtype("float32").match(untyped)


def test_if_and_ref_patterns_and_where():
    c = Var("c", TensorType((), "bool"))
    x = Var("x", F2)
    e = If(c, x, x)
    assert is_if(wildcard(), is_var("x"), wildcard()).match(e)
    assert is_ref_read(wildcard()).match(RefRead(x))
    assert wildcard().where(lambda n: isinstance(n, If)).match(e)
    assert not wildcard().where(lambda n: isinstance(n, Var)).match(e)


def test_match_through_let_bound_vars():
    x = Var("x", F2)
    a = Var("a", F2)
    value = call("multiply", x, const(1.0))
    use = call("add", a, a)
    p = is_op("add")(is_op("multiply")(wildcard("x"), is_constant()), wildcard())
    assert not p.match(use)
    assert p.match(use, env={a: value})
    assert p.match_env(use, env={a: value})["x"] is x


# ----------------------------------------------------------------------------- rewriting
def _mul_one_rule() -> tuple[DFPattern, object]:
    # multiply(x, 1) -> x
    return (is_op("multiply")(wildcard("x"), is_constant(1.0)),
            lambda pre, post, b: b["x"])


def _add_zeros_rule() -> tuple[DFPattern, object]:
    # add(x, zeros_like(_)) -> x
    return (is_op("add")(wildcard("x"), is_op("zeros_like")(wildcard())),
            lambda pre, post, b: b["x"])


def test_rewrite_to_fixpoint_dataflow():
    x = Var("x", F2)
    e = call("multiply", call("multiply", call("multiply", x, const(1.0)), const(1.0)),
             const(1.0))
    assert rewrite([_mul_one_rule()], e) is x
    # a rewrite exposing a new match higher up: add(mul(x,1), zeros_like(x)) -> x
    e2 = call("exp", call("add", call("multiply", x, const(1.0)), call("zeros_like", x)))
    out = rewrite([_mul_one_rule(), _add_zeros_rule()], e2)
    assert_structural_equal(out, call("exp", x))


def test_rewrite_keeps_input_and_spans():
    x = Var("x", F2)
    inner = call("multiply", x, const(1.0))
    e = call("exp", inner)
    before = repr(e)
    out = rewrite([_mul_one_rule()], e)
    assert repr(e) == before and e.args[0] is inner       # input untouched
    assert out is not e and out.args[0] is x
    unchanged = call("exp", x)
    assert rewrite([_mul_one_rule()], unchanged) is unchanged


def test_rewrite_callback_none_means_no_change():
    x = Var("x", F2)
    e = call("multiply", x, const(1.0))
    seen = []

    def cb(pre, post, b):
        seen.append(post)
        return None
    assert rewrite([(is_op("multiply")(wildcard(), wildcard()), cb)], e) is e
    assert seen == [e]


def test_rewrite_in_anf_module_looks_through_lets():
    x = Var("x", F2)
    a, b = Var("a", F2), Var("b", F2)
    body = Let(a, call("multiply", x, const(1.0)), Let(b, call("add", a, call("zeros_like", a)),
                                                       call("exp", b)))
    mod = IRModule({"main": Function((x,), body)})
    out = rewrite([_mul_one_rule(), _add_zeros_rule()], mod)
    assert out is not mod and mod["main"].body is body
    a2, b2 = Var("a", F2), Var("b", F2)
    expected = Function((x,), Let(a2, x, Let(b2, a2, call("exp", b2))))
    assert_structural_equal(out["main"], expected, map_free_vars=True)


def test_fused_conv2d_bias_relu_detection():
    data = Var("data", TensorType((1, 3, 8, 8), "float32"))
    w = Var("w", TensorType((4, 3, 3, 3), "float32"))
    bias = Var("bias", TensorType((4,), "float32"))
    conv = call("nn.conv2d", data, w, padding=[1, 1])
    e = call("nn.relu", call("nn.bias_add", conv, bias))
    pat = is_op("nn.relu")(is_op("nn.bias_add")(
        is_op("nn.conv2d")(wildcard("data"), wildcard("w")), wildcard("b")))
    found = []

    def fuse(pre, post, b):
        # wrap the three ops in a primitive function called with the three inputs
        p_d, p_w, p_b = Var("p0"), Var("p1"), Var("p2")
        body = call("nn.relu", call("nn.bias_add", Call(conv.op, (p_d, p_w), conv.attrs), p_b))
        fn = Function((p_d, p_w, p_b), body, attrs=Attrs({"Primitive": 1}))
        found.append(b["data"])
        return Call(fn, (b["data"], b["w"], b["b"]))
    out = rewrite([(pat, fuse)], e)
    assert found == [data]
    assert isinstance(out, Call) and isinstance(out.op, Function)
    assert out.args == (data, w, bias)
    # the body of the new primitive function matches too, but rewrite does not enter
    # primitive functions, so the fixpoint is reached after one fusion
    assert pat.match(out.op.body)
    # a conv without relu is not detected
    assert rewrite([(pat, fuse)], call("nn.bias_add", conv, bias)).op.name == "nn.bias_add"


def test_rewrite_rejects_bad_rules():
    with pytest.raises(TypeError):
        rewrite([("add", lambda *a: None)], const(1.0))
    with pytest.raises(TypeError):
        rewrite([(wildcard(), lambda pre, post, b: 3)], const(1.0))


@sizes(3_000, 100_000)
def test_rewrite_100k_binding_program(n):
    x = Var("x", F2)
    vars_ = [Var(f"v{i}", F2) for i in range(n)]
    prev = x
    bindings = []
    for i, v in enumerate(vars_):
        op = "multiply" if i % 2 == 0 else "add"
        rhs = const(1.0) if op == "multiply" else const(2.0)
        bindings.append((v, call(op, prev, rhs)))
        prev = v
    body: object = prev
    for v, val in reversed(bindings):
        body = Let(v, val, body)
    mod = IRModule({"main": Function((x,), body)})
    with shallow_stack():
        out = rewrite([_mul_one_rule()], mod)
    lets, last = flatten_lets(out["main"].body)
    assert len(lets) == n
    # every multiply-by-one became a copy of its input
    assert isinstance(lets[0].value, Var) and lets[0].value is x
    assert lets[1].value.op.name == "add" and lets[1].value.args[0] is lets[0].var
    assert sum(1 for node in lets if isinstance(node.value, Var)) == n // 2


@sizes(3_000, 50_000)
def test_rewrite_deep_dataflow_chain(n):
    x = Var("x", F2)
    e = x
    for _ in range(n):
        e = call("multiply", e, const(1.0))
    with shallow_stack():
        assert rewrite([_mul_one_rule()], e) is x


def test_rewrite_inside_sequential_pass():
    # a pattern rewrite packaged as a module pass runs in a pipeline like any pass
    from relay_ir.passes import module_pass

    @module_pass("mul-one", opt_level=0)
    def MulOne(mod, ctx):
        """multiply(x, 1) => x."""
        return rewrite([_mul_one_rule()], mod)
    x = Var("x", F2)
    mod = IRModule({"main": Function((x,), call("exp", call("multiply", x, const(1.0))))})
    with PassContext(opt_level=2):
        out = Sequential((MulOne(),))(mod)
    assert_structural_equal(out["main"], Function((x,), call("exp", x)))
