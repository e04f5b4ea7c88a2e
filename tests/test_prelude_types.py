"""The standard prelude: it type-checks, each function has its documented type, programs use it,
and ``rly check`` prints types / diagnostics."""
from __future__ import annotations

import numpy as np
import pytest

import relay_ir as rly
from relay_ir.cli import main as cli_main
from relay_ir.passes import InferType
from relay_ir.passes.type_infer import fmt_type
from relay_ir.prelude import prelude_module, typed_prelude_module
from relay_ir.structural import structural_equal

HEADER = '#[version = "0.0.5"]\n'

# RELAY_TEXT_FORMAT.md section 10 (type parameters named as in std/prelude.rly)
SIGNATURES = {
    "id": "fn [A](A) -> A",
    "compose": "fn [A, B, C](fn (B) -> C, fn (A) -> B) -> fn (A) -> C",
    "flip": "fn [A, B, C](fn (A, B) -> C) -> fn (B, A) -> C",
    "hd": "fn [A](List[A]) -> A",
    "tl": "fn [A](List[A]) -> List[A]",
    "nth": "fn [A](List[A], int32) -> A",
    "length": "fn [A](List[A]) -> int32",
    "update": "fn [A](List[A], int32, A) -> List[A]",
    "map": "fn [A, B](fn (A) -> B, List[A]) -> List[B]",
    "foldl": "fn [A, B](fn (A, B) -> A, A, List[B]) -> A",
    "foldr": "fn [A, B](fn (A, B) -> B, B, List[A]) -> B",
    "foldr1": "fn [A](fn (A, A) -> A, List[A]) -> A",
    "sum": "fn (List[int32]) -> int32",
    "concat": "fn [A](List[A], List[A]) -> List[A]",
    "filter": "fn [A](fn (A) -> bool, List[A]) -> List[A]",
    "zip": "fn [A, B](List[A], List[B]) -> List[(A, B)]",
    "rev": "fn [A](List[A]) -> List[A]",
    "map_accumr": "fn [A, B, C](fn (A, B) -> (A, C), A, List[B]) -> (A, List[C])",
    "map_accuml": "fn [A, B, C](fn (A, B) -> (A, C), A, List[B]) -> (A, List[C])",
    "unfoldr": "fn [A, B](fn (A) -> Option[(A, B)], A) -> List[B]",
    "unfoldl": "fn [A, B](fn (A) -> Option[(A, B)], A) -> List[B]",
    "tmap": "fn [A, B](fn (A) -> B, Tree[A]) -> Tree[B]",
    "size": "fn [A](Tree[A]) -> int32",
    "iterate": "fn [A](fn (A) -> A, int32) -> fn (A) -> A",
    "nat_to_int": "fn (nat) -> int32",
    "int_to_nat": "fn (int32) -> nat",
    "nat_double": "fn (nat) -> nat",
    "nat_add": "fn (nat, nat) -> nat",
    "nat_nth": "fn [A](List[A], nat) -> A",
    "nat_update": "fn [A](List[A], nat, A) -> List[A]",
    "nat_iterate": "fn [A](fn (A) -> A, nat) -> fn (A) -> A",
}


def test_prelude_defines_exactly_the_documented_globals_and_types() -> None:
    mod = prelude_module()
    assert set(mod.functions) == set(SIGNATURES)
    assert set(mod.type_definitions) == {"List", "Option", "Tree", "nat"}
    assert [c.name_hint for c in mod.type_definitions["List"].constructors] == ["Cons", "Nil"]
    assert [c.name_hint for c in mod.type_definitions["nat"].constructors] == ["zero", "succ"]


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_prelude_function_type(name: str) -> None:
    assert fmt_type(typed_prelude_module()[name].checked_type) == SIGNATURES[name]


def test_monomorphic_prelude_types_structurally() -> None:
    typed = typed_prelude_module()
    assert structural_equal(typed["sum"].checked_type, rly.parse_type("fn (List[int32]) -> int32"))
    assert structural_equal(typed["nat_add"].checked_type, rly.parse_type("fn (nat, nat) -> nat"))


def check_main(body: str, expected: str) -> rly.IRModule:
    mod = InferType()(rly.parse(HEADER + f"def @main() {{\n{body}\n}}", prelude=True))
    assert structural_equal(mod["main"].checked_type.ret_type, rly.parse_type(expected),
                            map_free_vars=True), fmt_type(mod["main"].checked_type.ret_type)
    return mod


def test_constructor_values() -> None:
    check_main("(zero, succ(zero), Cons(zero, Nil))", "(nat, nat, List[nat])")
    check_main("(Some(1f), Rose(1, Nil))", "(Option[float32], Tree[int32])")


def test_programs_using_prelude_functions() -> None:
    check_main("@map(fn (%x: int32) { %x > 1 }, Cons(1, Cons(2, Nil)))", "List[bool]")
    check_main("@foldl(fn (%a: float32, %b: int32) { %a }, 0f, Cons(1, Nil))", "float32")
    check_main("@zip(Cons(1, Nil), Cons(2f, Nil))", "List[(int32, float32)]")
    check_main("@map_accuml(fn (%a: int32, %b: int32) { (%a + %b, %b > 0) }, 0, Cons(1, Nil))",
               "(int32, List[bool])")
    check_main("@unfoldr(fn (%n: int32) { if (%n == 0) { None } else { Some((%n - 1, %n)) } },"
               " 3)", "List[int32]")
    check_main("@iterate(fn (%x: float32) { %x * 2f }, 3)(1f)", "float32")
    check_main("@compose(@length, @tl)(Cons((), Nil))", "int32")
    mod = check_main("@nth(Cons(1f, Nil), 0)", "float32")
    assert mod["main"].body.type_args == (rly.parse_type("float32"),)


def _run(body: str) -> object:
    from relay_ir import runtime
    mod = InferType()(rly.parse(HEADER + f"def @main() {{\n{body}\n}}", prelude=True))
    return runtime.evaluate(mod)


def _ints(v: object) -> list[int]:
    out = []
    while v.constructor.name_hint == "Cons":  # type: ignore[attr-defined]
        out.append(int(np.asarray(v.fields[0])))  # type: ignore[attr-defined]
        v = v.fields[1]  # type: ignore[attr-defined]
    return out


L123 = "Cons(1, Cons(2, Cons(3, Nil)))"


def test_prelude_semantics() -> None:
    assert int(_run(f"@length({L123})")) == 3
    assert _ints(_run(f"@rev({L123})")) == [3, 2, 1]
    assert _ints(_run(f"@concat({L123}, Cons(4, Nil))")) == [1, 2, 3, 4]
    assert _ints(_run(f"@filter(fn (%x: int32) {{ %x > 1 }}, {L123})")) == [2, 3]
    assert _ints(_run(f"@update({L123}, 1, 7)")) == [1, 7, 3]
    assert int(_run(f"@nth({L123}, 2)")) == 3
    assert int(_run(f"@sum({L123})")) == 6
    assert int(_run(f"@foldr1(fn (%a: int32, %b: int32) {{ %a - %b }}, {L123})")) == 2
    countdown = "fn (%n: int32) { if (%n == 0) { None } else { Some((%n - 1, %n)) } }"
    assert _ints(_run(f"@unfoldr({countdown}, 3)")) == [3, 2, 1]
    assert _ints(_run(f"@unfoldl({countdown}, 3)")) == [1, 2, 3]
    acc, outs = _run(f"@map_accumr(fn (%a: int32, %b: int32) {{ (%a + %b, %a + %b) }}, 0, "
                     f"{L123})")  # type: ignore[misc]
    assert int(acc) == 6 and _ints(outs) == [6, 5, 3]
    acc, outs = _run(f"@map_accuml(fn (%a: int32, %b: int32) {{ (%a + %b, %a + %b) }}, 0, "
                     f"{L123})")  # type: ignore[misc]
    assert int(acc) == 6 and _ints(outs) == [1, 3, 6]
    assert int(_run("@iterate(fn (%x: int32) { %x * 2 }, 2)(3)")) == 12
    assert int(_run("@compose(fn (%x: int32) { %x + 1 }, fn (%x: int32) { %x * 2 })(2)")) == 5
    assert int(_run("@nat_to_int(@nat_add(@nat_double(@int_to_nat(2)), succ(zero)))")) == 5
    tree = "Rose(1, Cons(Rose(2, Nil), Cons(Rose(3, Cons(Rose(4, Nil), Nil)), Nil)))"
    assert int(_run(f"@size(@tmap(fn (%x: int32) {{ %x * 10 }}, {tree}))")) == 4


# ----------------------------------------------------------------------------- rly check
SAMPLE = HEADER + """def @double(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  add(%x, %x)
}

def @main(%x: Tensor[(2, 3), float32]) {
  (@double(%x), sum(%x))
}
"""


def test_rly_check_prints_types(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "sample.rly"
    path.write_text(SAMPLE)
    assert cli_main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "@double: fn (Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32]",
        "@main: fn (Tensor[(2, 3), float32]) -> (Tensor[(2, 3), float32], float32)",
    ]


def test_rly_check_error_exit_status(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.rly"
    path.write_text(HEADER + "def @main(%a: Tensor[(2, 3), float32]) {\n"
                    "  add(%a, transpose(%a))\n}\n")
    assert cli_main(["check", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.splitlines()
    assert err[0].startswith(f"{path}:3:3: type error: incompatible broadcast")
    assert err[1].endswith("add(%a, transpose(%a))") and "^" in err[2]


def test_rly_check_with_prelude(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.rly"
    path.write_text(HEADER + "def @main(%l: List[float32]) {\n  @length(%l)\n}\n")
    assert cli_main(["check", "--prelude", str(path)]) == 0
    assert capsys.readouterr().out == "@main: fn (List[float32]) -> int32\n"
    assert cli_main(["check", "--prelude", "--all", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "@map: fn [A, B](fn (A) -> B, List[A]) -> List[B]" in lines
    assert len(lines) == len(SIGNATURES) + 1


def _examples() -> list[str]:
    import glob
    import os
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    return sorted(glob.glob(os.path.join(root, "*.rly")))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.rsplit("/", 1)[-1])
def test_examples_type_check(path: str) -> None:
    from relay_ir.traversal import has_incomplete
    with open(path, encoding="utf-8") as f:
        mod = rly.parse(f.read(), source_name=path)
    typed = InferType()(mod)
    for name, fn in typed.functions.items():
        t = fn.checked_type
        assert isinstance(t, rly.FuncType) and not has_incomplete(t), name
        # the printed type re-parses to the same type when it is not generic
        if not t.type_params:
            assert structural_equal(rly.parse_type(fmt_type(t)), t), name
