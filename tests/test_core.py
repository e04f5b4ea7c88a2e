"""IR core: visitors, mutators, traversal and structural equality on deep programs."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.expr import Call, Constant, Function, Let, Tuple, TupleGetItem, Var, const
from relay_ir.functor import ExprMutator, ExprVisitor
from relay_ir.op import get_op
from relay_ir.traversal import build_lets, flatten_lets, free_vars, post_order
from relay_ir.ty import TensorType, TypeVar, FuncType, ShapeVar, dim_add, dim_mul, format_dim
from util_scale import shallow_stack, sizes

N = 100_000


def _chain(n: int, name: str = "v") -> tuple[Var, object]:
    x = Var("x", TensorType((2,), "float32"))
    bindings = []
    prev = x
    for i in range(n):
        v = Var(f"{name}{i}")
        bindings.append((v, Tuple((prev,))))
        prev = v
    return x, build_lets(bindings, prev)


def test_recursion_limit_untouched() -> None:
    assert sys.getrecursionlimit() <= 1000


def test_the_default_scale_gate_catches_a_walk_that_recurses_per_binding() -> None:
    """The default run's scale gates (util_scale.shallow_stack on 3,000 bindings) fail a
    walk that recurses once per ten bindings, which the default limit (1,000) lets through."""

    def count(e: object, every: int) -> int:
        n = 0
        while isinstance(e, Let) and n < every:
            e, n = e.body, n + 1
        return n + count(e, every) if isinstance(e, Let) else n

    _, e = _chain(3_000)
    assert count(e, 10) == 3_000                # at the default limit
    before = sys.getrecursionlimit()
    with shallow_stack():
        assert count(_chain(500)[1], 10) == 500
        with pytest.raises(RecursionError):
            count(e, 10)
    assert sys.getrecursionlimit() == before


@sizes(3_000, N)
def test_long_let_chain_visit_mutate_compare(n: int) -> None:
    x, e = _chain(n)
    _, e2 = _chain(n, "w")
    with shallow_stack():
        assert ExprMutator().visit(e) is e
        ExprVisitor().visit(e)
        assert rly.structural_equal(Function((x,), e), Function((_chain(0)[0],), e2)) is False
        assert rly.structural_equal(e, e2, map_free_vars=True)
        assert rly.structural_hash(e) == rly.structural_hash(e2)
        lets, body = flatten_lets(e)
        assert len(lets) == n and body is lets[-1].var
        assert free_vars(e) == [x]


@sizes(3_000, N)
def test_deep_dataflow_chain(n: int) -> None:
    x = Var("x")
    e = x
    for _ in range(n):
        e = TupleGetItem(Tuple((e,)), 0)
    with shallow_stack():
        assert ExprMutator().visit(e) is e
        assert sum(1 for _ in post_order(e)) == 2 * n + 1


class _RenameConstants(ExprMutator):
    def visit_constant(self, c: Constant) -> Constant:
        return const(c.data + 1)


def test_mutator_rebuilds_only_changed_paths_and_keeps_sharing() -> None:
    x = Var("x")
    shared = Tuple((x, const(1)))
    e = Tuple((shared, shared, x))
    out = _RenameConstants().visit(e)
    assert out is not e
    assert out.fields[0] is out.fields[1]
    assert out.fields[2] is x
    assert int(out.fields[0].fields[1].data) == 2


def test_mutator_visit_binding_drops() -> None:
    x = Var("x")
    a, b = Var("a"), Var("b")
    e = Let(a, const(1), Let(b, const(2), Tuple((b, x))))

    class DropA(ExprMutator):
        def visit_binding(self, var, value):  # type: ignore[no-untyped-def]
            return None if var is a else super().visit_binding(var, value)

    out = DropA().visit(e)
    assert isinstance(out, Let) and out.var is b and out.body is e.body.body


def test_structural_alpha_and_free_vars() -> None:
    def ident(name: str) -> Function:
        v = Var(name)
        return Function((v,), v)
    assert rly.structural_equal(ident("a"), ident("b"))
    x, y = Var("x"), Var("y")
    assert not rly.structural_equal(Tuple((x,)), Tuple((y,)))
    assert rly.structural_equal(Tuple((x,)), Tuple((y,)), map_free_vars=True)
    # one free var cannot map to two
    assert not rly.structural_equal(Tuple((x, x)), Tuple((x, y)), map_free_vars=True)


def test_structural_sharing_matters() -> None:
    u = Tuple(())
    shared = Tuple((u, u))
    unshared = Tuple((Tuple(()), Tuple(())))
    assert not rly.structural_equal(shared, unshared)
    assert rly.structural_equal(shared, Tuple((Tuple(()),) * 2))


def test_structural_constants_and_attrs() -> None:
    add = get_op("add") if _has_op("add") else None
    a = const(np.array([1.0, 2.0], "float32"))
    b = const(np.array([1.0, 2.0], "float32"))
    c = const(np.array([1.0, 2.0], "float64"))
    assert rly.structural_equal(a, b)
    assert not rly.structural_equal(a, c)
    if add is not None:
        assert rly.structural_equal(Call(add, (a, b)), Call(add, (b, a)))


def _has_op(name: str) -> bool:
    try:
        get_op(name)
        return True
    except KeyError:
        return False


def test_structural_type_params_alpha() -> None:
    a, b = TypeVar("A"), TypeVar("B")
    assert rly.structural_equal(FuncType((a,), a, (a,)), FuncType((b,), b, (b,)))
    assert not rly.structural_equal(FuncType((a,), a, (a,)), FuncType((b,), a, (b,)))


def test_assert_structural_equal_reports_path() -> None:
    x = Var("x")
    with pytest.raises(AssertionError, match=r"fields\[1\]"):
        rly.assert_structural_equal(Tuple((x, const(1))), Tuple((x, const(2))))


def test_dim_polynomials() -> None:
    n, m = ShapeVar("n"), ShapeVar("m")
    assert dim_add(n, 0) is n
    assert dim_add(3, 4) == 7
    assert format_dim(dim_add(n, m)) == "m + n" or format_dim(dim_add(n, m)) == "n + m"
    assert format_dim(dim_mul(n, 4)) == "4*n"
    assert dim_add(dim_mul(n, 2), dim_mul(n, -2)) == 0
    assert rly.structural_equal(TensorType((dim_add(n, 1),), "float32"),
                                TensorType((dim_add(n, 1),), "float32"))


def _let_chain_text(n: int) -> str:
    lines = ['#[version = "0.0.5"]', "def @main(%x: float32) -> float32 {"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  let %v{i} = add({prev}, 1f);")
        prev = f"%v{i}"
    lines += [f"  {prev}", "}"]
    return "\n".join(lines)


@sizes(3_000, N)
def test_parsed_let_chain_through_print_compare_visit_mutate(n: int) -> None:
    """Issue 2 gate: parse, print, structural compare, visitor and mutator at 100,000 lets."""

    class CountAdds(ExprVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def visit_call(self, c: Call) -> None:
            self.n += 1
            super().visit_call(c)

    source = _let_chain_text(n)
    with shallow_stack():
        mod = rly.parse(source)
        text = rly.astext(mod)
        assert text.count("let %v") == n
        again = rly.parse(text)
        rly.assert_structural_equal(mod, again)
        assert rly.structural_hash(mod) == rly.structural_hash(again)
        body = mod["main"].body
        ExprVisitor().visit(body)
        assert ExprMutator().visit(body) is body
        counter = CountAdds()
        counter.visit(body)
    assert counter.n == n


def test_parsed_5000_deep_expression() -> None:
    depth = 5000
    text = "free_var %x: float32;\n" + "add(" * depth + "%x" + ", 1f)" * depth
    e = rly.parse_expr(text)
    printed = rly.astext(e)
    e2 = rly.parse_expr(printed)
    rly.assert_structural_equal(e, e2, map_free_vars=True)
    assert ExprMutator().visit(e) is e
    n = sum(1 for node in post_order(e) if isinstance(node, Call))
    assert n == depth
