"""FuseOps: text before/after per rule, same values as unfused programs, group counts."""
from __future__ import annotations

import os

import pytest

import relay_ir as rly
from relay_ir.expr import Call, Function
from relay_ir.module import IRModule
from relay_ir.passes import InferType, PassContext, get_pass, optimize
from relay_ir.passes.fuse_ops import FuseOps, fuse_ops
from relay_ir.traversal import flatten_lets
from util_diff import assert_same_results, parse_program, program_files
from util_scale import shallow_stack, sizes

HDR = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(text: str) -> IRModule:
    return rly.parse(HDR + text)


def check(before: str, after: str, **options: int) -> IRModule:
    """Fuse ``before`` (after to-anf and infer-type); it must equal ``after``; same values."""
    mod = optimize(parse(before), opt_level=0)
    text0 = rly.astext(mod)
    out = fuse_ops(mod, **options)
    assert rly.astext(mod) == text0, "fuse-ops mutated its input"
    expected = optimize(parse(after), opt_level=0)
    rly.assert_structural_equal(out, expected, map_free_vars=True)
    assert_same_results(mod, out)
    return out


def groups(mod: IRModule, entry: str = "main") -> list[Function]:
    """The primitive functions bound in the entry's top-level spine, in order."""
    lets, _ = flatten_lets(mod[entry].body)
    return [let.value for let in lets if isinstance(let.value, Function)
            and let.value.is_primitive]


def group_ops(fn: Function) -> list[str]:
    from relay_ir.traversal import post_order
    return [n.op.name for n in post_order(fn.body) if isinstance(n, Call)
            and hasattr(n.op, "name")]


T = "Tensor[(4, 8), float32]"


def test_elementwise_and_broadcast_chain_is_one_group() -> None:
    check(f"""
def @main(%x: {T}, %b: Tensor[(8), float32]) {{
  %0 = add(%x, %b);
  %1 = exp(%0);
  %2 = multiply(%1, 2f);
  nn.relu(%2)
}}""", f"""
def @main(%x: {T}, %b: Tensor[(8), float32]) {{
  let %f = fn (%p0: {T}, %p1: Tensor[(8), float32], Primitive=1) -> {T} {{
    %0 = add(%p0, %p1);
    %1 = exp(%0);
    %2 = multiply(%1, 2f);
    nn.relu(%2)
  }};
  let %y = %f(%x, %b);
  %y
}}""")


def test_dense_takes_its_elementwise_epilogue() -> None:
    check("""
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32], %b: Tensor[(16), float32]) {
  %0 = nn.dense(%x, %w);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}""", """
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32], %b: Tensor[(16), float32]) {
  let %f = fn (%p0: Tensor[(4, 8), float32], %p1: Tensor[(16, 8), float32],
               %p2: Tensor[(16), float32], Primitive=1) -> Tensor[(4, 16), float32] {
    %0 = nn.dense(%p0, %p1);
    %1 = nn.bias_add(%0, %p2);
    nn.relu(%1)
  };
  let %y = %f(%x, %w, %b);
  %y
}""")


def test_injective_producers_fuse_into_a_reduction_and_its_epilogue() -> None:
    check(f"""
def @main(%x: {T}) {{
  %0 = exp(%x);
  %1 = sum(%0, axis=[1]);
  sqrt(%1)
}}""", f"""
def @main(%x: {T}) {{
  let %f = fn (%p0: {T}, Primitive=1) -> Tensor[(4), float32] {{
    %0 = exp(%p0);
    %1 = sum(%0, axis=[1]);
    sqrt(%1)
  }};
  let %y = %f(%x);
  %y
}}""")


def test_opaque_op_is_alone_and_two_anchors_never_share_a_group() -> None:
    out = check(f"""
def @main(%x: {T}, %w: Tensor[(8, 8), float32]) {{
  %0 = exp(%x);
  %1 = nn.softmax(%0);
  %2 = nn.dense(%1, %w);
  %3 = sum(%2, axis=[1]);
  negative(%3)
}}""", f"""
def @main(%x: {T}, %w: Tensor[(8, 8), float32]) {{
  let %f0 = fn (%p0: {T}, Primitive=1) -> {T} {{ exp(%p0) }};
  let %a = %f0(%x);
  let %f1 = fn (%p0: {T}, Primitive=1) -> {T} {{ nn.softmax(%p0) }};
  let %b = %f1(%a);
  let %f2 = fn (%p0: {T}, %p1: Tensor[(8, 8), float32], Primitive=1) -> {T} {{
    nn.dense(%p0, %p1)
  }};
  let %c = %f2(%b, %w);
  let %f3 = fn (%p0: {T}, Primitive=1) -> Tensor[(4), float32] {{
    %0 = sum(%p0, axis=[1]);
    negative(%0)
  }};
  let %d = %f3(%c);
  %d
}}""")
    assert len(groups(out)) == 4


def test_a_value_used_by_two_groups_is_materialized_once() -> None:
    out = check(f"""
def @main(%x: {T}) {{
  %0 = exp(%x);
  %1 = sum(%0, axis=[1]);
  %2 = max(%0, axis=[1]);
  add(%1, %2)
}}""", f"""
def @main(%x: {T}) {{
  let %f0 = fn (%p0: {T}, Primitive=1) -> {T} {{ exp(%p0) }};
  let %e = %f0(%x);
  let %f1 = fn (%p0: {T}, Primitive=1) -> Tensor[(4), float32] {{ max(%p0, axis=[1]) }};
  let %m = %f1(%e);
  let %f2 = fn (%p0: {T}, %p1: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {{
    %0 = sum(%p0, axis=[1]);
    add(%0, %p1)
  }};
  let %y = %f2(%e, %m);
  %y
}}""")
    # exp is computed by exactly one group
    assert sum(group_ops(g).count("exp") for g in groups(out)) == 1


def test_diamond_inside_one_group_is_shared_not_duplicated() -> None:
    out = check(f"""
def @main(%x: {T}) {{
  %0 = exp(%x);
  %1 = negative(%0);
  add(%0, %1)
}}""", f"""
def @main(%x: {T}) {{
  let %f = fn (%p0: {T}, Primitive=1) -> {T} {{
    %0 = exp(%p0);
    %1 = negative(%0);
    add(%0, %1)
  }};
  let %y = %f(%x);
  %y
}}""")
    assert group_ops(groups(out)[0]).count("exp") == 1


def test_tuple_fuses_into_concatenate() -> None:
    check(f"""
def @main(%x: {T}) {{
  %0 = exp(%x);
  %1 = negative(%x);
  concatenate((%0, %1), axis=1)
}}""", f"""
def @main(%x: {T}) {{
  let %f = fn (%p0: {T}, Primitive=1) -> Tensor[(4, 16), float32] {{
    %0 = exp(%p0);
    %1 = negative(%p0);
    %2 = (%0, %1);
    concatenate(%2, axis=1)
  }};
  let %y = %f(%x);
  %y
}}""")


def test_injective_chain_after_reduction_epilogue_is_a_new_group() -> None:
    out = check(f"""
def @main(%x: {T}) {{
  %0 = sum(%x, axis=[1], keepdims=True);
  %1 = exp(%0);
  transpose(%1)
}}""", f"""
def @main(%x: {T}) {{
  let %f0 = fn (%p0: {T}, Primitive=1) -> Tensor[(4, 1), float32] {{
    %0 = sum(%p0, axis=[1], keepdims=True);
    exp(%0)
  }};
  let %s = %f0(%x);
  let %f1 = fn (%p0: Tensor[(4, 1), float32], Primitive=1) -> Tensor[(1, 4), float32] {{
    transpose(%p0)
  }};
  let %y = %f1(%s);
  %y
}}""")
    assert len(groups(out)) == 2


def test_no_fusion_across_if_and_each_branch_fused_alone() -> None:
    check(f"""
def @main(%x: {T}, %c: bool) {{
  %0 = exp(%x);
  if (%c) {{ negative(%0) }} else {{ %1 = sqrt(%0); abs(%1) }}
}}""", f"""
def @main(%x: {T}, %c: bool) {{
  let %f0 = fn (%p0: {T}, Primitive=1) -> {T} {{ exp(%p0) }};
  let %e = %f0(%x);
  let %r = if (%c) {{
    let %f1 = fn (%p0: {T}, Primitive=1) -> {T} {{ negative(%p0) }};
    let %n = %f1(%e);
    %n
  }} else {{
    let %f2 = fn (%p0: {T}, Primitive=1) -> {T} {{
      %0 = sqrt(%p0);
      abs(%0)
    }};
    let %a = %f2(%e);
    %a
  }};
  %r
}}""")


def test_no_fusion_through_calls_of_non_primitive_functions_and_refs() -> None:
    out = check(f"""
def @g(%a: {T}) -> {T} {{ exp(%a) }}
def @main(%x: {T}) {{
  %0 = negative(%x);
  %1 = @g(%0);
  %2 = ref(%1);
  %3 = ref_read(%2);
  abs(%3)
}}""", f"""
def @g(%a: {T}) -> {T} {{
  let %f = fn (%p0: {T}, Primitive=1) -> {T} {{ exp(%p0) }};
  let %y = %f(%a);
  %y
}}
def @main(%x: {T}) {{
  let %f0 = fn (%p0: {T}, Primitive=1) -> {T} {{ negative(%p0) }};
  let %n = %f0(%x);
  let %g = @g(%n);
  let %r = ref(%g);
  let %v = ref_read(%r);
  let %f1 = fn (%p0: {T}, Primitive=1) -> {T} {{ abs(%p0) }};
  let %y = %f1(%v);
  %y
}}""")
    assert len(groups(out)) == 2


def test_max_depth_bounds_group_size() -> None:
    src = f"""
def @main(%x: {T}) {{
  %0 = exp(%x);
  %1 = negative(%0);
  %2 = abs(%1);
  sqrt(%2)
}}"""
    mod = optimize(parse(src), opt_level=0)
    sizes = [len(group_ops(g)) for g in groups(fuse_ops(mod, max_depth=3))]
    assert sizes == [3, 1]  # greedy in program order
    assert [len(group_ops(g)) for g in groups(fuse_ops(mod))] == [4]
    with pytest.raises(ValueError):
        fuse_ops(mod, max_depth=0)


def test_opt_level_below_one_disables_fusion() -> None:
    mod = optimize(parse(f"def @main(%x: {T}) {{ exp(negative(%x)) }}"), opt_level=0)
    with PassContext(opt_level=0) as ctx:
        assert rly.astext(FuseOps()(mod, ctx)) == rly.astext(mod)
    with PassContext(opt_level=1) as ctx:
        assert len(groups(FuseOps()(mod, ctx))) == 1
    assert get_pass("fuse-ops").name == "fuse-ops"


def test_fused_text_round_trips_through_the_parser() -> None:
    mod = fuse_ops(optimize(rly.parse(open(os.path.join(ROOT, "examples/mlp.rly")).read())))
    again = InferType()(rly.parse(rly.astext(mod)))
    rly.assert_structural_equal(mod, again, map_free_vars=True)
    assert_same_results(mod, again)


CONV_BN_RELU = """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %gamma: Tensor[(4), float32], %beta: Tensor[(4), float32],
          %mean: Tensor[(4), float32], %var: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, %gamma, %beta, %mean, %var);
  nn.relu(%1.0)
}"""

CONV_SCALE_SHIFT_RELU = """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %scale: Tensor[(4, 1, 1), float32], %shift: Tensor[(4, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %1 = multiply(%0, %scale);
  %2 = add(%1, %shift);
  nn.relu(%2)
}"""

# W2's MLP forward (784-512-512-10, batch 64, y = x @ W + b) with its log-softmax.
W2_FORWARD = """
def @main(%x: Tensor[(64, 784), float32], %w1: Tensor[(784, 512), float32],
          %b1: Tensor[(512), float32], %w2: Tensor[(512, 512), float32],
          %b2: Tensor[(512), float32], %w3: Tensor[(512, 10), float32],
          %b3: Tensor[(10), float32]) {
  %0 = nn.matmul(%x, %w1);
  %1 = add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.matmul(%2, %w2);
  %4 = add(%3, %b2);
  %5 = nn.relu(%4);
  %6 = nn.matmul(%5, %w3);
  %7 = add(%6, %b3);
  nn.log_softmax(%7)
}"""


def test_group_counts_of_known_networks() -> None:
    bn = fuse_ops(optimize(parse(CONV_BN_RELU)))
    # conv2d | batch_norm (opaque) | relu of the projection
    assert [group_ops(g) for g in groups(bn)] == [["nn.conv2d"], ["nn.batch_norm"], ["nn.relu"]]
    folded = fuse_ops(optimize(parse(CONV_SCALE_SHIFT_RELU)))
    assert [sorted(group_ops(g)) for g in groups(folded)] == [
        ["add", "multiply", "nn.conv2d", "nn.relu"]]
    assert_same_results(optimize(parse(CONV_SCALE_SHIFT_RELU)), folded)
    mlp = fuse_ops(optimize(parse(W2_FORWARD)))
    assert [sorted(group_ops(g)) for g in groups(mlp)] == [
        ["add", "nn.matmul", "nn.relu"], ["add", "nn.matmul", "nn.relu"], ["add", "nn.matmul"],
        ["nn.log_softmax"]]


@pytest.mark.parametrize("path", program_files(), ids=os.path.basename)
def test_fused_equals_unfused_on_every_example(path: str) -> None:
    mod = parse_program(path)
    opt = optimize(mod)
    fused = fuse_ops(opt)
    for name in opt:
        if opt[name].params and all(p.type_annotation is not None for p in opt[name].params):
            try:
                assert_same_results(opt, fused, entry=name, runs=2)
            except ValueError as e:  # parameters of ADT / function type: no random inputs
                assert "cannot generate" in str(e)
        elif not opt[name].params:
            assert_same_results(opt, fused, entry=name, inputs=(), runs=1)
    assert rly.astext(fuse_ops(fused)) == rly.astext(fused)  # idempotent


@sizes(3_000, 100_000)
def test_long_chain_fuses_without_recursion(n: int) -> None:
    from relay_ir.builder import ScopeBuilder
    from relay_ir.expr import Var
    from relay_ir.op._rules import make_call
    from relay_ir.ty import TensorType
    ty = TensorType((4,), "float32")
    x = Var("x", ty)
    sb = ScopeBuilder()
    v = x
    for i in range(n):
        v = sb.let_(make_call("negative" if i % 2 else "abs", v))
    mod = IRModule({"main": Function((x,), sb.build(v))})
    with shallow_stack():
        out = fuse_ops(optimize(mod, opt_level=0))
    sizes = [len(group_ops(g)) for g in groups(out)]
    assert sum(sizes) == n and max(sizes) == 256



def test_graph_form_input_is_normalized_first() -> None:
    mod = parse(f"def @main(%x: {T}, %y: {T}) {{ add(exp(%x), %y) }}")
    out = fuse_ops(mod)                      # to-anf and infer-type run as required passes
    assert [group_ops(g) for g in groups(out)] == [["exp", "add"]]
    assert_same_results(mod, out)


def test_effects_are_barriers() -> None:
    out = check(f"""
def @g(%a: {T}) -> {T} {{ %a }}
def @main(%x: {T}) {{
  let %e = exp(%x);
  let %c = @g(%x);
  let %n = negative(%e);
  (%n, %c)
}}""", f"""
def @g(%a: {T}) -> {T} {{ %a }}
def @main(%x: {T}) {{
  let %f0 = fn (%p0: {T}, Primitive=1) -> {T} {{ exp(%p0) }};
  let %e = %f0(%x);
  let %c = @g(%x);
  let %f1 = fn (%p0: {T}, Primitive=1) -> {T} {{ negative(%p0) }};
  let %n = %f1(%e);
  (%n, %c)
}}""")
    assert len(groups(out)) == 2


def test_reference_ops_are_not_barriers() -> None:
    # no kernel reads or writes a reference cell: the group is computed after the write
    out = check(f"""
def @main(%x: {T}) {{
  let %e = exp(%x);
  let %r = ref(%x);
  let %w = ref_write(%r, %x);
  let %n = negative(%e);
  (%n, ref_read(%r))
}}""", f"""
def @main(%x: {T}) {{
  let %r = ref(%x);
  let %w = ref_write(%r, %x);
  let %f0 = fn (%p0: {T}, Primitive=1) -> {T} {{ negative(exp(%p0)) }};
  let %n = %f0(%x);
  let %v = ref_read(%r);
  (%n, %v)
}}""")
    assert len(groups(out)) == 1
