"""The linear-algebra rewrites: combine-sums and share-weight-transpose."""
from __future__ import annotations

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.expr import Call, Op, type_of
from relay_ir.passes import CombineSums, InferType, ShareWeightTranspose, parse_pipeline
from relay_ir.structural import assert_structural_equal
from relay_ir.traversal import post_order
from util_diff import assert_same_results
from util_grad import assert_close_tree

H = '#[version = "0.0.5"]\n'


def ops(mod: rly.IRModule, entry: str = "main") -> list[str]:
    return [n.op.name for n in post_order(mod[entry]) if isinstance(n, Call)
            and isinstance(n.op, Op)]



def _cpu(mod: rly.IRModule) -> rly.IRModule:
    """What runtime.build compiles for llvm: the default pipeline, then the CPU rewrites
    (combine-sums and share-weight-transpose left passes.optimize for the target lowering)."""
    from relay_ir.runtime.target_lowering import target_rewrites
    return target_rewrites(passes.optimize(mod), "llvm")

def test_rank_one_updates_become_one_product() -> None:
    lines = [H + "def @main(%h: Tensor[(4, 16), float32], %g: Tensor[(4, 32), float32], "
             "%w: Tensor[(16, 32), float32], %p: Tensor[(2, 16), float32], "
             "%q: Tensor[(2, 32), float32]) {"]
    for i in range(4):
        lines += [f"  let %h{i} = strided_slice(%h, begin=[{i}], end=[{i + 1}]);",
                  f"  let %g{i} = strided_slice(%g, begin=[{i}], end=[{i + 1}]);",
                  f"  let %a{i} = nn.matmul(%h{i}, %g{i}, transpose_a=True);"]
    lines += ["  let %a4 = nn.matmul(%p, %q, transpose_a=True);",
              "  let %s = add(add(add(%a0, %w), %a1), add(%a2, %a3));",
              "  add(%s, %a4)", "}"]
    before = rly.parse("\n".join(lines))
    out = parse_pipeline("to-anf,infer-type,combine-sums,dce")(before)
    # the five products with transpose_a of the sum (not %w) are one, of the joined operands
    assert sorted(ops(out)) == ["add", "concatenate", "concatenate", "nn.matmul"] + \
        ["strided_slice"] * 8
    (mm,) = [n for n in post_order(out["main"]) if isinstance(n, Call)
             and isinstance(n.op, Op) and n.op.name == "nn.matmul"]
    assert mm.attrs.transpose_a and not mm.attrs.transpose_b
    assert str(type_of(mm.args[0])) == "Tensor[(6, 16), float32]"
    assert str(type_of(mm.args[1])) == "Tensor[(6, 32), float32]"
    assert_same_results(before, out)
    assert ops(_cpu(before)).count("nn.matmul") == 1


def test_groups_by_transpose_flags_and_joins_the_contracted_axis() -> None:
    before = rly.parse(H + """
def @main(%a: Tensor[(16, 1), float32], %b: Tensor[(1, 32), float32],
          %c: Tensor[(16, 2), float32], %d: Tensor[(2, 32), float32],
          %g: Tensor[(16, 1), float32], %h: Tensor[(1, 32), float32],
          %e: Tensor[(32, 1), float32], %x: Tensor[(6, 16), float32],
          %f: Tensor[(6, 32), float32]) {
  let %m1 = nn.matmul(%a, %b);
  let %m2 = nn.matmul(%c, %d);
  let %m3 = nn.matmul(%a, %e, transpose_b=True);
  let %m4 = nn.matmul(%x, %f, transpose_a=True);
  let %m5 = nn.matmul(%g, %h);
  add(add(%m1, %m3), add(add(%m2, %m4), %m5))
}""")
    out = _cpu(before)
    mms = [n for n in post_order(out["main"]) if isinstance(n, Call)
           and isinstance(n.op, Op) and n.op.name == "nn.matmul"]
    # (a b + c d + g h) joined along columns of a, c, g / rows of b, d, h; a e^T, x^T f alone
    assert len(mms) == 3
    (joined,) = [m for m in mms if str(type_of(m.args[0])) == "Tensor[(16, 4), float32]"]
    assert str(type_of(joined.args[1])) == "Tensor[(4, 32), float32]"
    assert ops(out).count("concatenate") == 2
    assert_same_results(before, out)


def test_what_is_not_combined() -> None:
    # a term used twice, a broadcasting sum, a single product, and two products with large
    # contracted dimensions (joining would copy more than it saves) stay as they are
    src = H + """
def @main(%a: Tensor[(4, 3), float32], %b: Tensor[(3, 5), float32], %c: Tensor[(4, 3), float32],
          %r: Tensor[(5), float32], %k: Tensor[(5, 2), float32]) {
  let %m1 = nn.matmul(%a, %b);
  let %m2 = nn.matmul(%c, %b);
  let %s = add(%m1, %m2);
  let %t = add(%m1, %r);
  (%s, %t, add(nn.matmul(%c, %b), %r), add(nn.matmul(%b, %k), nn.matmul(%b, %k)))
}"""
    before = parse_pipeline("to-anf,infer-type")(rly.parse(src))
    out = CombineSums()(before)
    assert out is before or rly.structural_equal(out, before)


def test_unrolled_recurrence_gradient_has_one_product_per_weight() -> None:
    steps = 6
    lines = [H + "def @main(%x: Tensor[(1, 16), float32], %w: Tensor[(16, 16), float32]) "
             "-> float32 {", "  let %h0 = %x;"]
    for t in range(steps):
        lines.append(f"  let %h{t + 1} = tanh(nn.matmul(%h{t}, %w));")
    lines += [f"  sum(multiply(%h{steps}, %h{steps}))", "}"]
    mod = rly.parse("\n".join(lines))
    raw = passes.gradient(mod)
    opt = _cpu(raw)
    # dw = sum_t h_t^T dz_t: one product of the stacked states and adjoints
    assert [n.attrs.transpose_a for n in post_order(opt["main"]) if isinstance(n, Call)
            and isinstance(n.op, Op) and n.op.name == "nn.matmul"].count(True) == 1
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((1, 16)).astype("float32"),
            (rng.standard_normal((16, 16)) / 4).astype("float32")]
    assert_close_tree(runtime.evaluate(opt, *args), runtime.evaluate(raw, *args), 1e-5, 1e-6)


def test_a_weight_read_transposed_twice_is_transposed_once() -> None:
    src = H + """
def @main(%a: Tensor[(1, 6), float32], %b: Tensor[(2, 6), float32], %w: Tensor[(5, 6), float32],
          %v: Tensor[(5, 6), float32]) {
  let %x = nn.matmul(%a, %w, transpose_b=True);
  let %f = fn (%c: Tensor[(2, 6), float32]) { nn.matmul(%c, %w, transpose_b=True) };
  (%x, %f(%b), nn.matmul(%a, %v, transpose_b=True))
}"""
    before = parse_pipeline("to-anf,infer-type")(rly.parse(src))
    out = ShareWeightTranspose()(before)
    text = rly.astext(out)
    assert text.count("transpose(%w, axes=[1, 0])") == 1          # once, at the start
    assert text.count("transpose_b=True") == 1                     # %v is read once: kept
    assert_same_results(before, out)
    assert ops(_cpu(rly.parse(src))).count("transpose") == 1
    once = parse_pipeline("to-anf,infer-type")(rly.parse(H + """
def @main(%a: Tensor[(1, 6), float32], %w: Tensor[(5, 6), float32]) {
  nn.matmul(%a, %w, transpose_b=True)
}"""))
    assert_structural_equal(ShareWeightTranspose()(once), once)  # one use: the schedule packs it


def test_scatters_of_distinct_slices_become_one_stack() -> None:
    # sum_i take_grad(g_i, like, i) over distinct constant i: the g_i stacked (zeros elsewhere)
    src = H + """
def @main(%x: Tensor[(4, 2, 3), float32], %w: Tensor[(3), float32]) -> float32 {
  let %a = multiply(take(%x, 0, axis=0), %w);
  let %b = multiply(take(%x, 2, axis=0), %w);
  let %c = multiply(take(%x, 3, axis=0), %w);
  sum(multiply(add(%a, %b), %c))
}"""
    mod = rly.parse(src)
    raw = passes.gradient(mod)
    opt = _cpu(raw)
    names = ops(opt)
    assert "take_grad" not in names and names.count("stack") == 1, names
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((4, 2, 3)).astype("float32"),
            rng.standard_normal(3).astype("float32")]
    assert_close_tree(runtime.evaluate(opt, *args), runtime.evaluate(raw, *args), 1e-5, 1e-6)
    # a repeated index and an index from a variable stay scatters
    kept = InferType()(rly.parse(H + """
def @main(%g: Tensor[(2, 3), float32], %x: Tensor[(4, 2, 3), float32], %i: int32) {
  let %a = take_grad(%g, %x, 1, axis=0);
  let %b = take_grad(%g, %x, %i, axis=0);
  add(%a, %b)
}"""))
    kept = parse_pipeline("to-anf,infer-type")(kept)
    assert_structural_equal(CombineSums()(kept), kept)


def test_products_bound_outside_a_closure_are_not_moved_into_it() -> None:
    def program(products_inside: bool) -> str:
        prods = []
        for i in range(4):
            prods += [f"let %h{i} = strided_slice(%h, begin=[{i}], end=[{i + 1}]);",
                      f"let %g{i} = strided_slice(%g, begin=[{i}], end=[{i + 1}]);",
                      f"let %a{i} = nn.matmul(%h{i}, %g{i}, transpose_a=True);"]
        outer, inner = ([], prods) if products_inside else (prods, [])
        return "\n".join(
            [H + "def @main(%h: Tensor[(4, 16), float32], %g: Tensor[(4, 32), float32]) {"]
            + outer + ["let %f = fn (%w: Tensor[(16, 32), float32]) {"] + inner
            + ["add(add(add(add(%w, %a0), %a1), %a2), %a3) };",
               '%f(zeros(shape=[16, 32], dtype="float32"))', "}"])
    outside = parse_pipeline("to-anf,infer-type")(rly.parse(program(False)))
    # a closure would recompute them per call
    assert_structural_equal(CombineSums()(outside), outside)
    inside = parse_pipeline("to-anf,infer-type")(rly.parse(program(True)))
    out = CombineSums()(inside)
    assert out is not inside and ops(parse_pipeline("dce")(out)).count("nn.matmul") == 1
    assert_same_results(inside, out)
