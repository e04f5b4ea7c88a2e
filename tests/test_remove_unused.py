"""RemoveUnusedFunctions (passes/remove_unused.py) and its place in the default pipeline."""
from __future__ import annotations

import numpy as np

import relay_ir as rly
from relay_ir import passes
from relay_ir.passes import RemoveUnusedFunctions, get_pass
from relay_ir.runtime import evaluate
from util_scale import shallow_stack, sizes

HDR = '#[version = "0.0.5"]\n'

KEPT = """def @even(%n: int32) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }
def @odd(%n: int32) -> bool { if (%n == 0) { False } else { @even(%n - 1) } }
def @unpack(%p: Pair[float32]) -> float32 {
  match (%p) { MkPair(%a, MkBox(%b)) => add(%a, %b) }
}
def @main(%x: float32) -> (float32, bool, float32) {
  let %g = @helper;
  (%g(%x), @odd(3), @unpack(MkPair(%x, MkBox(%x))))
}
"""

SRC = HDR + """
type Box[A] { MkBox(A) }
type Pair[A] { MkPair(A, Box[A]) }
type Unused { U1, U2(int32) }
type Nat { Z, S(Nat) }
def @leaf(%x: float32) -> float32 { multiply(%x, 2f) }
def @helper(%x: float32) -> float32 { @leaf(add(%x, 1f)) }
def @dead(%x: float32) -> float32 { @dead2(%x) }
def @dead2(%x: float32) -> float32 { @dead(%x) }
""" + KEPT

EXPECTED = HDR + """
type Box[A] { MkBox(A) }
type Pair[A] { MkPair(A, Box[A]) }
def @leaf(%x: float32) -> float32 { multiply(%x, 2f) }
def @helper(%x: float32) -> float32 { @leaf(add(%x, 1f)) }
""" + KEPT


def test_keeps_what_main_reaches_and_the_types_it_uses() -> None:
    mod = rly.parse(SRC)
    before = rly.astext(mod)
    out = RemoveUnusedFunctions()(mod)
    assert rly.astext(mod) == before  # the input is not mutated
    assert list(out.functions) == ["leaf", "helper", "even", "odd", "unpack", "main"]
    assert list(out.type_definitions) == ["Box", "Pair"]  # Box only through Pair's fields
    assert rly.astext(out) == rly.astext(rly.parse(EXPECTED))
    x = np.array(1.5, "float32")
    got, want = evaluate(out, x), evaluate(mod, x)
    assert [float(v) for v in got] == [float(v) for v in want] == [5.0, 1.0, 3.0]


def test_other_entry_and_extra_roots() -> None:
    mod = rly.parse(SRC)
    out = RemoveUnusedFunctions(entry="helper")(mod)
    assert list(out.functions) == ["leaf", "helper"] and not out.type_definitions
    out = RemoveUnusedFunctions(entry="helper", keep=("even",))(mod)
    assert list(out.functions) == ["leaf", "helper", "even", "odd"]
    out = get_pass("remove-unused-functions", entry="dead")(mod)
    assert list(out.functions) == ["dead", "dead2"]


def test_types_reached_only_through_annotations_and_a_missing_entry() -> None:
    mod = rly.parse(HDR + """
type Nat { Z, S(Nat) }
type Other { O }
def @main(%n: Nat) -> Nat { %n }
""")
    out = RemoveUnusedFunctions()(mod)
    assert list(out.type_definitions) == ["Nat"]
    nomain = rly.parse(HDR + "def @f(%x: float32) { %x }\ndef @g(%x: float32) { %x }")
    assert RemoveUnusedFunctions()(nomain) is nomain
    full = rly.parse(HDR + "def @main(%x: float32) { %x }")
    assert RemoveUnusedFunctions()(full) is full


def test_default_pipeline_drops_the_unused_prelude() -> None:
    mod = rly.parse(HDR + "def @main(%x: int32) -> int32 { @length(Cons(%x, Nil)) }",
                    prelude=True)
    assert len(mod.functions) > 20
    out = passes.optimize(mod)
    assert list(out.functions) == ["main"]
    assert np.asarray(evaluate(out, np.array(4, "int32"))).item() == 1
    # at opt_level 0 nothing is removed; without main nothing is either
    assert len(passes.optimize(mod, opt_level=0).functions) == len(mod.functions)
    kept = passes.optimize(mod, entry="length")
    assert "length" in kept.functions and "main" not in kept.functions


def test_cli_opt_prelude_prints_only_what_main_uses(tmp_path, capsys) -> None:
    from relay_ir.cli import main
    path = tmp_path / "one.rly"
    path.write_text(HDR + "def @main(%x: float32) { add(%x, 1f) }\n")
    assert main(["opt", "--prelude", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    expected = HDR + """def @main(%x: float32) -> float32 {
  let %x0: float32 = add(%x, 1f);
  %x0
}
"""
    assert out == expected


@sizes(3_000, 100_000)
def test_long_program_is_walked_iteratively(n: int) -> None:
    import sys
    from relay_ir.expr import Function, Var
    from relay_ir.module import IRModule
    from relay_ir.op._rules import make_call
    from relay_ir.traversal import build_lets
    assert sys.getrecursionlimit() <= 1000
    x = Var("x")
    bindings, prev = [], x
    for i in range(n):
        v = Var(f"v{i}")
        bindings.append((v, make_call("add", prev, prev)))
        prev = v
    y = Var("y")
    mod = IRModule({"main": Function((x,), build_lets(bindings, prev)),
                    "unused": Function((y,), y)})
    with shallow_stack():
        out = RemoveUnusedFunctions()(mod)
    assert list(out.functions) == ["main"] and out["main"] is mod["main"]
