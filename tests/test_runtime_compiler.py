"""The instruction compiler and the runtime items of issue 8: type check before running,
integer range of arguments, the frame limit, negative zero, and op facts through the registry."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.cli import main
from relay_ir.errors import InterpreterError, TypeInferenceError
from relay_ir.op import get_opdef, override_op
from relay_ir.runtime import evaluate
from relay_ir.runtime.compiler import CompiledProgram
from relay_ir.runtime.interpreter import DEFAULT_MAX_DEPTH, run_compiled
from relay_ir.runtime.values import format_value
from util_scale import shallow_stack

HEADER = '#[version = "0.0.5"]\n'

PROGRAM = HEADER + """
type L[A] { C(A, L[A]), N }
def @build(%n: int32) -> L[int32] {
  if (%n == 0) { N } else { C(%n, @build(%n - 1)) }
}
def @sum(%xs: L[int32]) -> int32 {
  match (%xs) { C(%x, %r) => %x + @sum(%r), N => 0 }
}
def @mul(%t: (int32, int32)) -> int32 {
  match? (%t) { (%p, %q) => %p * %q }
}
def @app(%f: fn (int32) -> int32, %x: int32) -> int32 { %f(%x) }
def @main(%n: int32, %v: Tensor[(3,), float32]) -> (int32, float32, int32, Tensor[(3,), float32]) {
  let %cell = ref(0);
  let %add = fn (%k: int32) { let %u = ref_write(%cell, ref_read(%cell) + %k); ref_read(%cell) };
  let %a = %add(5);
  let %b = %add(%n);
  let %pair = (%v, 2f);
  let %m = @mul((%a, %b));
  let %s = if (%n > 2) { 1 } else { 2 };
  let %c = @app(%add, 0);
  (@sum(@build(%n)), sum(%pair.0) * %pair.1, %m + %s + %c, nn.relu(%v - 1f))
}
"""


def _cli(capsys, *argv):
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


# ============================================================================ compiler
def test_compiled_program_survives_json_and_runs_the_same():
    mod = rly.parse(PROGRAM)
    v = np.array([0.5, 1.5, 3.0], "float32")
    want = evaluate(mod, 4, v)
    text = CompiledProgram(mod).to_json()
    data = json.loads(text)  # plain data: json reads it back without loss
    assert data["format"] == "relay_ir.compiled/1"
    assert set(data["globals"]) == {"build", "sum", "mul", "app", "main"}
    assert {ins[0] for f in data["functions"] for ins in f["code"]} >= {
        "op", "op_br", "op_ret", "call", "tailcall", "ret", "adt", "tuple", "getitem",
        "ref_new", "ref_read", "ref_write", "closure", "match", "move", "jmp"}
    loaded = CompiledProgram.from_json(json.dumps(json.loads(text)), mod)
    got = run_compiled(loaded, 4, v)
    assert int(got[0]) == 10 == int(want[0])
    assert float(got[1]) == 10.0 == float(want[1])
    assert int(got[2]) == 5 * 9 + 1 + 9 == int(want[2])
    np.testing.assert_array_equal(got[3], np.maximum(v - 1, 0))
    np.testing.assert_array_equal(got[3], want[3])


def test_instructions_are_plain_data():
    mod = rly.parse(HEADER + "def @main(%x: float32) { if (%x > 0f) { %x } else { negative(%x) } }")
    prog = CompiledProgram(mod).compile_all()
    code = prog.functions[prog.globals["main"]].code
    assert code[0][0] == "op_br" and code[0][2] == "greater"
    assert [ins[0] for ins in code] == ["op_br", "ret", "op_ret"]
    assert code[0][-2:] == (1, 2)  # the jump targets of both branches
    assert prog.attrs[code[0][3]] == get_opdef("greater").default_attrs


def test_attributes_travel_through_json():
    mod = rly.parse(HEADER + "def @main(%x: Tensor[(2, 3), float32]) { sum(%x, axis=[1]) }")
    loaded = CompiledProgram.from_json(CompiledProgram(mod).to_json(), mod)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(run_compiled(loaded, x), x.sum(axis=1))


def test_from_json_refuses_other_data():
    mod = rly.parse(HEADER + "def @main() { 1 }")
    with pytest.raises(InterpreterError, match="not a compiled relay_ir program"):
        CompiledProgram.from_json('{"format": "x"}', mod)


# ============================================================================ type check first
ILL_TYPED = HEADER + "def @main(%x: int32) -> float32 { %x + 1 }"


def test_evaluate_type_checks_an_untyped_module():
    with pytest.raises(TypeInferenceError, match="return annotation mismatch"):
        evaluate(rly.parse(ILL_TYPED), 3)


def test_rly_run_prints_the_type_error(tmp_path, capsys):
    f = tmp_path / "bad.rly"
    f.write_text(ILL_TYPED)
    code, out, err = _cli(capsys, str(f), "3")
    assert code == 1 and out == ""
    assert "type error: return annotation mismatch" in err and "Traceback" not in err


# ============================================================================ integer range
RANGE = HEADER + "def @main(%a: int32, %b: uint8) { (%a, %b) }"


@pytest.mark.parametrize("a, b, what", [
    (99999999999, 1, "argument 1 (%a): expected int32: the integer 99999999999 "
                     "is out of range for int32 (-2147483648 to 2147483647)"),
    (1, 300, "argument 2 (%b): expected uint8: the integer 300 is out of range "
             "for uint8 (0 to 255)"),
    (1, -1, "argument 2 (%b): expected uint8: the integer -1 is out of range for "
            "uint8 (0 to 255)"),
    (2**70, 1, "argument 1 (%a): expected int32: the integer "
               "1180591620717411303424 is out of range for int32"),
])
def test_out_of_range_integers_are_refused(a, b, what, tmp_path, capsys):
    mod = rly.parse(RANGE)
    with pytest.raises(InterpreterError) as info:
        evaluate(mod, a, b)
    assert what in str(info.value)
    f = tmp_path / "r.rly"
    f.write_text(RANGE)
    code, out, err = _cli(capsys, str(f), str(a), str(b))
    assert code == 1 and out == "" and what in err


def test_in_range_integers_and_lists_still_convert():
    mod = rly.parse(RANGE)
    a, b = evaluate(mod, -2**31, 255)
    assert a.dtype == np.int32 and int(a) == -2**31 and b.dtype == np.uint8 and int(b) == 255
    lst = rly.parse(HEADER + "def @main(%a: Tensor[(2,), uint8]) { %a }")
    with pytest.raises(InterpreterError, match="the integer 256 is out of range for uint8"):
        evaluate(lst, [1, 256])
    np.testing.assert_array_equal(evaluate(lst, [0, 255]), np.array([0, 255], "uint8"))


def test_untyped_python_int_out_of_int32_is_refused():
    from relay_ir.runtime import apply
    neg = rly.parse(HEADER + "def @main() { fn (%x) { negative(%x) } }")
    f = evaluate(neg)
    assert int(apply(f, 7)) == -7
    with pytest.raises(InterpreterError, match=r"argument 1 \(%x\): the integer 1099511627776 "
                                                r"is out of range for int32"):
        apply(f, 2**40)


# ============================================================================ frame limit
DEEP = HEADER + """
def @down(%n: int64) -> int64 { if (%n == 0i64) { 0i64 } else { @down(%n - 1i64) + 1i64 } }
def @main(%n: int64) -> int64 { @down(%n) }
"""


def test_billion_deep_recursion_stops_at_the_default_limit():
    # NOTE: the work done is bounded by the frame count the message reports (about 5 s here)
    mod = rly.parse(DEEP)
    with shallow_stack(), pytest.raises(InterpreterError) as info:
        evaluate(mod, np.int64(10**9))
    msg = str(info.value)
    assert f"calling @down at call depth {DEFAULT_MAX_DEPTH}" in msg
    assert "max_depth=N" in msg and "--max-depth N" in msg


def test_max_depth_is_configurable():
    mod = rly.parse(DEEP)
    with pytest.raises(InterpreterError, match="calling @down at call depth 100, "):
        evaluate(mod, np.int64(1000), max_depth=100)
    assert int(evaluate(mod, np.int64(1000), max_depth=1001)) == 1000
    # tail calls need no frames: 100,000 iterations under a limit of 10
    loop = rly.parse(HEADER + """
def @loop(%i: int32, %acc: int32) -> int32 {
  if (%i == 0) { %acc } else { @loop(%i - 1, %acc + 1) }
}
def @main(%n: int32) -> int32 { @loop(%n, 0) }""")
    assert int(evaluate(loop, 10**5, max_depth=10)) == 10**5


def test_rly_run_max_depth(tmp_path, capsys):
    f = tmp_path / "deep.rly"
    f.write_text(DEEP)
    code, out, err = _cli(capsys, str(f), "500", "--max-depth", "100")
    assert code == 1 and "recursion too deep: calling @down at call depth 100" in err
    assert "Traceback" not in err
    assert _cli(capsys, str(f), "--max-depth=600", "500") == (0, "500i64", "")
    code, _, err = _cli(capsys, str(f), "5", "--max-depth", "zero")
    assert code == 1 and "--max-depth: expected a whole number, got 'zero'" in err


# ============================================================================ negative zero
def test_negative_zero_prints_with_its_sign(tmp_path, capsys):
    f = tmp_path / "z.rly"
    f.write_text(HEADER + "def @main(%x: float32) { (%x * -1f, %x) }")
    assert _cli(capsys, str(f), "0") == (0, "(-0f, 0f)", "")
    assert format_value(np.float16(-0.0)) == "-0f16"


# ============================================================================ op registry
def test_opdef_is_frozen_with_default_attrs_computed_once():
    od = get_opdef("sum")
    with pytest.raises(dataclasses.FrozenInstanceError):
        od.impl = None  # type: ignore[misc]
    assert od.default_attrs is od.default_attrs
    assert dict(od.default_attrs) == dict(od.make_attrs({}))
    assert od.op.opdef is od


def test_override_op_changes_the_facts_every_reader_sees():
    op = get_opdef("negative").op
    mod = rly.parse(HEADER + "def @main(%x: float32) { negative(%x) }")
    with override_op("negative", impl=lambda args, attrs: args[0] * 10) as new:
        assert op.opdef is new and new.op is op
        assert float(evaluate(mod, 2.0)) == 20.0
    assert op.opdef is get_opdef("negative") and not op.opdef.effectful
    assert float(evaluate(rly.parse(HEADER + "def @main(%x: float32) { negative(%x) }"),
                          2.0)) == -2.0


def test_new_op_template_has_working_grad_jvp_and_compute_rules():
    import importlib.util
    import os
    from relay_ir.expr import Call, Expr, Var
    from relay_ir.ty import TensorType
    path = os.path.join(os.path.dirname(__file__), "..", "scripts", "new_op.py")
    spec = importlib.util.spec_from_file_location("new_op", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import relay_ir.op.nn as family
    captured: dict = {}
    ns = dict(vars(family), Call=Call, Expr=Expr)
    ns["defop"] = lambda name, n, **kw: captured.update(name=name, n=n, **kw)
    exec(compile(mod.render("nn.my_twice", 2), "<new_op>", "exec"), ns)
    x = Var("x", TensorType((2, 3), "float32"))
    y = Var("y", TensorType((3,), "float32"))
    g = Var("g", TensorType((2, 3), "float32"))
    call = Call(get_opdef("add").op, (x, y))
    dx, dy = captured["grad"](call, x, g)
    assert dx is g
    assert rly.astext(dy) == rly.astext(Call(get_opdef("zeros_like").op, (y,)))
    assert captured["jvp"](call, x, [g, y]) is g
    import tvm
    from tvm import te
    a = te.placeholder((2, 3), "float32", name="a")
    out = captured["compute"]({}, [a, te.placeholder((3,), "float32")], None)
    f = tvm.compile(te.create_prim_func([a, out]), target="llvm")
    data = np.arange(6, dtype="float32").reshape(2, 3)
    res = tvm.runtime.empty((2, 3), "float32")
    f(tvm.runtime.tensor(data), res)
    np.testing.assert_array_equal(res.numpy(), data)
