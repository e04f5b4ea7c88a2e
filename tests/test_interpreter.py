"""The reference interpreter: every expression form, dtype semantics, deep recursion, errors.

Programs are built by hand (the IR is the contract); expected values are computed with numpy or
by hand. Text-format versions live in test_interpreter_adt.py and test_cli_run.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from relay_ir.errors import InterpreterError
from relay_ir.expr import (Call, Clause, Function, GlobalVar, If, Match, PatternConstructor,
                           PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var, const)
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call as op
from relay_ir.runtime import ADTValue, Closure, RefValue, evaluate, format_value
from relay_ir.traversal import build_lets
from relay_ir.ty import ANY, ShapeVar, TensorType, TupleType, TypeCall
from util_diff import list_adt
from util_scale import shallow_stack, sizes

F32 = TensorType((), "float32")
I32 = TensorType((), "int32")
BOOL = TensorType((), "bool")


def fn(params, body, **kw):
    return Function(tuple(params), body, **kw)


def lets(*items):
    """lets((x, e1), (y, e2), body)"""
    *bindings, body = items
    return build_lets(bindings, body)


def run(expr, *args, **fns):
    """Evaluate ``expr`` as main (params are its free vars unless it is a Function)."""
    types = fns.pop("types", {})
    check_types = fns.pop("check_types", True)
    main = expr if isinstance(expr, Function) else fn((), expr)
    return evaluate(IRModule({**fns, "main": main}, types), *args, check_types=check_types)


def f32(x):
    return np.asarray(x, dtype="float32")


# ----------------------------------------------------------------------------- basic forms
def test_constants_keep_their_dtype():
    for value, dtype in [(3, "int32"), (2.5, "float32"), (True, "bool"), (7, "int64"),
                         (1.5, "float16"), (2.0, "float64")]:
        r = run(const(value, dtype))
        assert isinstance(r, np.ndarray) and r.shape == () and r.dtype == dtype
        assert r == np.asarray(value, dtype)
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    r = run(const(arr))
    assert r.dtype == np.float32 and r.shape == (2, 3)
    np.testing.assert_array_equal(r, arr)


def test_let_binds_and_shadowing_by_new_vars():
    x, y, x2 = Var("x"), Var("y"), Var("x")
    e = lets((x, const(2.0)), (y, op("multiply", x, const(3.0))),
             (x2, op("add", y, x)), op("subtract", x2, const(1.0)))
    assert run(e) == f32(2 * 3 + 2 - 1)


def test_params_and_numpy_results():
    a = Var("a", TensorType((2, 3), "float32"))
    b = Var("b", TensorType((3,), "float32"))
    main = fn((a, b), op("add", op("multiply", a, b), const(1.0)))
    xa = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    xb = np.array([1.0, -2.0, 0.5], dtype="float32")
    r = run(main, xa, xb)
    assert r.dtype == np.float32
    np.testing.assert_allclose(r, xa * xb + np.float32(1.0), rtol=1e-6)


def test_if_takes_the_branch_of_a_0d_bool():
    x = Var("x", I32)
    main = fn((x,), If(op("less", x, const(0)), op("negative", x), x))
    assert run(main, np.int32(-5)) == 5
    assert run(main, np.int32(7)) == 7
    assert run(main, np.int32(-5)).dtype == np.int32


def test_if_in_value_position_joins_both_branches():
    x = Var("x", I32)
    y = Var("y")
    cond = If(op("greater", x, const(10)), const(100), op("add", x, const(1)))
    main = fn((x,), lets((y, op("multiply", cond, const(2))), y))
    assert run(main, 11) == 200
    assert run(main, 3) == 8


def test_tuples_and_projection():
    x = Var("x", F32)
    t = Var("t")
    inner = Tuple((x, Tuple((const(1), const(True)))))
    main = fn((x,), lets((t, inner),
                         Tuple((TupleGetItem(TupleGetItem(t, 1), 0), TupleGetItem(t, 0)))))
    r = run(main, 2.5)
    assert isinstance(r, tuple) and len(r) == 2
    assert r[0] == 1 and r[0].dtype == np.int32
    assert r[1] == f32(2.5) and r[1].dtype == np.float32
    assert run(Tuple(())) == ()


def test_shared_dataflow_node_is_evaluated_once():
    # a ref write shared twice in a DAG must happen once (graph-form sharing = one evaluation)
    r = Var("r")
    bump = RefWrite(r, op("add", RefRead(r), const(1)))
    pair = Tuple((bump, bump))
    e = lets((r, RefCreate(const(0))), (Var("p"), pair), RefRead(r))
    assert run(e) == 1


# ----------------------------------------------------------------------------- functions
def test_closure_captures_its_environment():
    x, y, f = Var("x"), Var("y"), Var("f")
    e = lets((x, const(10)), (f, fn((y,), op("add", x, y))),
             Tuple((Call(f, (const(1),)), Call(f, (const(5),)))))
    r = run(e)
    assert (int(r[0]), int(r[1])) == (11, 15)


def test_currying_and_closures_returned_from_functions():
    a, b, sub = Var("a"), Var("b"), Var("sub")
    curried = fn((a,), fn((b,), op("subtract", a, b)))
    e = lets((sub, curried), Call(Call(sub, (const(10),)), (const(3),)))
    assert run(e) == 7
    # the partial application is a closure value, callable from Python
    part = run(lets((sub, curried), Call(sub, (const(10),))))
    assert isinstance(part, Closure)
    assert part(np.int32(4)) == 6
    assert part(4).dtype == np.int32  # Python ints are converted like evaluate does
    assert format_value(part) == "<closure fn (%b) ...>"


def test_higher_order_global_twice():
    f, x, y = Var("f"), Var("x"), Var("y")
    twice = GlobalVar("twice")
    twice_fn = fn((f, x), Call(f, (Call(f, (x,)),)))
    double = fn((y,), op("multiply", y, const(2.0)))
    r = run(Call(twice, (double, const(3.0))), twice=twice_fn)
    assert r == f32(12.0)


def test_mutual_recursion_through_globals_is_tail_recursive():
    n, m = Var("n", I32), Var("m", I32)
    even, odd = GlobalVar("is_even"), GlobalVar("is_odd")
    even_fn = fn((n,), If(op("equal", n, const(0)), const(True),
                          Call(odd, (op("subtract", n, const(1)),))))
    odd_fn = fn((m,), If(op("equal", m, const(0)), const(False),
                         Call(even, (op("subtract", m, const(1)),))))
    k = Var("k", I32)
    main = fn((k,), Call(even, (k,)))
    mod = IRModule({"is_even": even_fn, "is_odd": odd_fn, "main": main})
    assert bool(evaluate(mod, 100_001)) is False
    assert bool(evaluate(mod, 7)) is False
    assert bool(evaluate(mod, 10)) is True


def test_local_recursive_closure_factorial():
    fact, n = Var("fact"), Var("n", I32)
    body = If(op("equal", n, const(0)), const(1),
              op("multiply", n, Call(fact, (op("subtract", n, const(1)),))))
    e = lets((fact, fn((n,), body)), Call(fact, (const(10),)))
    assert run(e) == 3628800
    # the recursive closure refers to itself
    clo = run(lets((fact, fn((n,), body)), fact))
    assert isinstance(clo, Closure) and clo.captured[0] is clo
    assert clo(np.int32(5)) == 120


def test_primitive_function_is_called_like_a_closure():
    a, b, x, y = Var("a", F32), Var("b", F32), Var("x", F32), Var("y", F32)
    prim = Function((a, b), op("add", op("multiply", a, b), a),
                    attrs=__import__("relay_ir").Attrs({"Primitive": 1}))
    assert prim.is_primitive
    main = fn((x, y), Call(prim, (x, y)))
    assert run(main, 3.0, 4.0) == f32(15.0)


# ----------------------------------------------------------------------------- references
def test_refs_alias_and_ref_write_returns_unit():
    r, s, w = Var("r"), Var("s"), Var("w")
    e = lets((r, RefCreate(const(1.0))), (s, r), (w, RefWrite(s, const(5.0))),
             Tuple((RefRead(r), w, r)))
    got = run(e)
    assert got[0] == f32(5.0) and got[1] == ()
    assert isinstance(got[2], RefValue) and got[2].value == f32(5.0)
    assert format_value(got[2]) == "ref(5f)"


def test_counter_closure_over_a_ref():
    r, inc, u, v, w = Var("r"), Var("inc"), Var("u"), Var("v"), Var("w")
    incf = fn((), lets((u, RefWrite(r, op("add", RefRead(r), const(1)))), RefRead(r)))
    e = lets((r, RefCreate(const(0))), (inc, incf),
             (v, Call(inc, ())), (w, Call(inc, ())), Tuple((v, w, Call(inc, ()), RefRead(r))))
    got = run(e)
    assert [int(x) for x in got] == [1, 2, 3, 3]


def test_value_reprs():
    assert format_value(RefValue(np.float32(1))) == "ref(1f)"
    assert format_value(RefValue(np.asarray(2.5, "float32"))) == "ref(2.5f)"
    assert format_value((np.asarray(3, "int64"), np.asarray(True), np.float16(0.5))) == \
        "(3i64, True, 0.5f16)"
    assert format_value(np.arange(3, dtype="int32")) == "Tensor[(3,), int32]([0, 1, 2])"


# ----------------------------------------------------------------------------- dtypes
def test_integer_division_truncates_and_cast_truncates():
    assert run(op("divide", const(-7), const(2))) == -3
    assert run(op("divide", const(7), const(-2))) == -3
    assert run(op("divide", const(-7), const(2))).dtype == np.int32
    assert run(op("cast", const(2.7), dtype="int32")) == 2
    assert run(op("cast", const(-2.7), dtype="int32")) == -2
    assert run(op("cast", const(-2.7), dtype="int32")).dtype == np.int32


def test_float16_stays_float16_and_int64_stays_int64():
    x = Var("x", TensorType((3,), "float16"))
    r = run(fn((x,), op("add", op("multiply", x, x), x)), np.array([1, 2, 3], "float16"))
    assert r.dtype == np.float16
    np.testing.assert_array_equal(r, np.array([2, 6, 12], "float16"))
    r = run(op("add", const(2**40, "int64"), const(1, "int64")))
    assert r.dtype == np.int64 and int(r) == 2**40 + 1


# ----------------------------------------------------------------------------- deep programs
@sizes(20_000, 1_000_000)
def test_million_iteration_tail_recursive_loop(n):
    i, acc = Var("i", I32), Var("acc", F32)
    loop = GlobalVar("loop")
    body = If(op("equal", i, const(0)), acc,
              Call(loop, (op("subtract", i, const(1)), op("add", acc, const(1.0)))))
    k = Var("n", I32)
    mod = IRModule({"loop": fn((i, acc), body), "main": fn((k,), Call(loop, (k, const(0.0))))})
    with shallow_stack():
        r = evaluate(mod, n)
    assert r.dtype == np.float32 and float(r) == float(n)


@sizes(5_000, 100_000, "depth")
def test_non_tail_recursion_100000_deep(depth):
    n = Var("n", I32)
    count = GlobalVar("count")
    body = If(op("equal", n, const(0)), const(0),
              op("add", const(1), Call(count, (op("subtract", n, const(1)),))))
    mod = IRModule({"count": fn((n,), body), "main": fn((n2 := Var("n", I32),),
                                                         Call(count, (n2,)))})
    with shallow_stack():
        assert int(evaluate(mod, depth)) == depth


@sizes(3_000, 100_000)
def test_100000_binding_let_chain_and_deep_dataflow(n):
    add = op("add", const(0), const(0))  # NOTE: reuse one attrs record; building is the cost
    x = Var("x", F32)
    one = const(1.0)
    vs = [Var(f"v{i}") for i in range(n)]
    bindings = [(vs[0], Call(add.op, (x, one), add.attrs))]
    bindings += [(vs[i], Call(add.op, (vs[i - 1], one), add.attrs)) for i in range(1, len(vs))]
    main = fn((x,), build_lets(bindings, vs[-1]))
    y = Var("y", I32)
    e = y
    for i in range(n):
        e = Call(add.op, (e, const(i % 3)), add.attrs)
    with shallow_stack():
        assert float(run(main, 0.0)) == float(n)
        assert int(run(fn((y,), e), 5)) == 5 + sum(i % 3 for i in range(n))


# ----------------------------------------------------------------------------- ADTs and match
TD, CONS, NIL = list_adt()


def lst(xs):
    e = Call(NIL, ())
    for x in reversed(xs):
        e = Call(CONS, (const(x), e))
    return e


def to_py(v):
    out = []
    while v.constructor.name_hint == "Cons":
        out.append(v.fields[0].item())
        v = v.fields[1]
    return out


def test_constructors_and_repr():
    r = run(lst([1, 2]), types={"List": TD})
    assert isinstance(r, ADTValue) and r.constructor.name == "Cons" and r.name == "Cons"
    assert format_value(r) == "Cons(1, Cons(2, Nil))" == repr(r)
    assert r.fields[0].dtype == np.int32


def test_first_class_constructor_value():
    # foldr(f, z, l) with f = Cons rebuilds the list
    f, z, l, h, t = Var("f"), Var("z"), Var("l"), Var("h"), Var("t")
    foldr = GlobalVar("foldr")
    body = Match(l, (Clause(PatternConstructor(CONS, (PatternVar(h), PatternVar(t))),
                            Call(f, (h, Call(foldr, (f, z, t))))),
                     Clause(PatternConstructor(NIL), z)))
    r = run(Call(foldr, (CONS, lst([5]), lst([1, 2, 3]))), foldr=fn((f, z, l), body),
            types={"List": TD})
    assert to_py(r) == [1, 2, 3, 5]


def test_match_first_matching_clause_wins_and_nested_patterns():
    l, h2, t = Var("l"), Var("h2"), Var("t")
    second = Match(l, (
        Clause(PatternConstructor(CONS, (PatternWildcard(),
                                         PatternConstructor(CONS, (PatternVar(h2),
                                                                   PatternWildcard())))), h2),
        Clause(PatternConstructor(CONS, (PatternWildcard(), PatternVar(t))), const(-1)),
        Clause(PatternWildcard(), const(-2)),
        Clause(PatternConstructor(NIL), const(-3))))
    f = GlobalVar("second")
    mod_fns = {"second": fn((l,), second)}
    assert run(Call(f, (lst([7, 8, 9]),)), types={"List": TD}, **mod_fns) == 8
    assert run(Call(f, (lst([7]),)), types={"List": TD}, **mod_fns) == -1
    assert run(Call(f, (lst([]),)), types={"List": TD}, **mod_fns) == -2  # `_` before Nil
    # a leading wildcard shadows every later clause
    shadow = Match(lst([1]), (Clause(PatternWildcard(), const(0)),
                              Clause(PatternConstructor(CONS, (PatternWildcard(),
                                                               PatternWildcard())),
                                     const(1))))
    assert run(shadow, types={"List": TD}) == 0


def test_tuple_and_var_patterns_in_value_position():
    p, a, b, y = Var("p"), Var("a"), Var("b"), Var("y")
    m = Match(Tuple((const(3), lst([4]))), (
        Clause(PatternTuple((PatternVar(a), PatternConstructor(CONS, (PatternVar(b),
                                                                     PatternWildcard())))),
               op("multiply", a, b)),), complete=True)
    e = lets((y, m), op("add", y, const(1)))
    assert run(e, types={"List": TD}) == 13
    whole = Match(lst([1, 2]), (Clause(PatternVar(p), p),))
    assert to_py(run(whole, types={"List": TD})) == [1, 2]


def test_failed_match_is_an_interpreter_error_with_span():
    from relay_ir.span import SourceFile, Span
    src = SourceFile("prog.rly", "match? (%l) {\n  Cons(%x, _) => %x\n}\n")
    span = Span(src, 1, 1, 3, 2)
    x = Var("x")
    m = Match(lst([]), (Clause(PatternConstructor(CONS, (PatternVar(x), PatternWildcard())),
                               x),), complete=False, span=span)
    with pytest.raises(InterpreterError) as ei:
        run(m, types={"List": TD})
    err = ei.value
    assert err.span is span
    assert "match? failed" in err.message and "Nil" in err.message
    assert "prog.rly:1:1" in str(err) and "^" in str(err)


@sizes(3_000, 100_000, "n_elems")
def test_foldr_over_100000_element_list(n_elems):
    # non-tail recursion over a long list built by a tail-recursive loop
    n, acc, l, h, t = Var("n", I32), Var("acc"), Var("l"), Var("h"), Var("t")
    build, total = GlobalVar("build"), GlobalVar("total")
    build_fn = fn((n, acc), If(op("equal", n, const(0)), acc,
                               Call(build, (op("subtract", n, const(1)),
                                            Call(CONS, (n, acc))))))
    total_fn = fn((l,), Match(l, (
        Clause(PatternConstructor(CONS, (PatternVar(h), PatternVar(t))),
               op("add", op("cast", h, dtype="int64"), Call(total, (t,)))),
        Clause(PatternConstructor(NIL), const(0, "int64")))))
    k, xs = Var("k", I32), Var("xs", TypeCall(TD.header, (I32,)))
    mod = IRModule({"build": build_fn, "total": total_fn,
                    "make": fn((k,), Call(build, (k, Call(NIL, ())))),
                    "main": fn((xs,), Call(total, (xs,)))}, {"List": TD})
    with shallow_stack():
        lst_val = evaluate(mod, n_elems, entry="make")
        r = evaluate(mod, lst_val)
        # repr of a long list is iterative too
        text = format_value(lst_val)
    assert r.dtype == np.int64 and int(r) == n_elems * (n_elems + 1) // 2
    assert text.startswith("Cons(1, Cons(2, ") and text.endswith("Nil" + ")" * n_elems)


# ----------------------------------------------------------------------------- argument checks
def _main_xy():
    x = Var("x", TensorType((2, 3), "float32"))
    y = Var("y", I32)
    return IRModule({"main": fn((x, y), TupleGetItem(Tuple((x, y)), 0))})


def test_argument_errors_name_the_parameter():
    mod = _main_xy()
    good = np.zeros((2, 3), "float32")
    with pytest.raises(InterpreterError, match=r"expected 2 arguments \(%x, %y\), got 1"):
        evaluate(mod, good)
    with pytest.raises(InterpreterError) as ei:
        evaluate(mod, np.zeros(3), 1)
    assert ei.value.message == ("argument 1 (%x): expected Tensor[(2, 3), float32], got an "
                                "array of shape (3,) and dtype float64")
    with pytest.raises(InterpreterError, match=r"argument 1 \(%x\).*dtype float64"):
        evaluate(mod, np.zeros((2, 3)), 1)
    with pytest.raises(InterpreterError, match=r"argument 2 \(%y\): expected "
                                               r"int32.*float"):
        evaluate(mod, good, 2.5)
    with pytest.raises(InterpreterError, match=r"argument 2 \(%y\).*tuple"):
        evaluate(mod, good, (1, 2))
    # Python scalars and lists are converted with the parameter dtype
    r = evaluate(mod, [[1, 2, 3], [4, 5, 6]], 3)
    assert r.dtype == np.float32 and r.shape == (2, 3) and r[1, 2] == 6.0


def test_any_and_symbolic_dims():
    n = ShapeVar("n")
    a = Var("a", TensorType((n, ANY), "float32"))
    b = Var("b", TensorType((n,), "float32"))
    mod = IRModule({"main": Function((a, b), b, type_params=(n,))})
    r = evaluate(mod, np.zeros((4, 7), "float32"), np.ones(4, "float32"))
    assert r.shape == (4,)
    with pytest.raises(InterpreterError, match=r"argument 2 \(%b\).*dimension n is 4"):
        evaluate(mod, np.zeros((4, 7), "float32"), np.ones(5, "float32"))


def test_tuple_and_adt_parameters_are_checked():
    t = Var("t", TupleType((F32, I32)))
    mod = IRModule({"main": fn((t,), TupleGetItem(t, 1))})
    assert evaluate(mod, (1.5, 2)) == 2
    with pytest.raises(InterpreterError, match=r"argument 1 \(%t\)"):
        evaluate(mod, (1.5,))
    l = Var("l", TypeCall(TD.header, (I32,)))
    mod = IRModule({"main": fn((l,), l)}, {"List": TD})
    with pytest.raises(InterpreterError, match=r"argument 1 \(%l\)"):
        evaluate(mod, np.int32(1))
    v = ADTValue(NIL, ())
    assert evaluate(mod, v) is v


def test_operator_failure_is_an_interpreter_error():
    x = Var("x", TensorType((2, 3), "float32"))
    main = fn((x,), op("reshape", x, newshape=(4, 4)))
    with pytest.raises(InterpreterError,
                       match=r"operator `reshape` failed: cannot reshape \(2, 3\)"):
        run(main, np.zeros((2, 3), "float32"), check_types=False)


def test_unknown_entry_is_an_error():
    with pytest.raises(InterpreterError, match="no global function @nope"):
        evaluate(IRModule({"main": fn((), const(1))}), entry="nope")
