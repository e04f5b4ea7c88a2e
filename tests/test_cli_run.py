"""``rly run FILE [ARGS...] [--entry NAME] [--prelude]`` through relay_ir.cli.main."""
from __future__ import annotations

import numpy as np
import pytest

from relay_ir.cli import main

HEADER = '#[version = "0.0.5"]\n'


@pytest.fixture
def prog(tmp_path):
    def write(text: str, name: str = "prog.rly") -> str:
        path = tmp_path / name
        path.write_text(HEADER + text)
        return str(path)
    return write


def rly_run(capsys, *argv):
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


def test_scalar_literals_and_default_entry(prog, capsys):
    f = prog("def @main(%x: int32, %y: float32) { (divide(%x, 2), multiply(%y, 2f)) }")
    assert rly_run(capsys, f, "-7", "2.5") == (0, "(-3, 5f)", "")


def test_nested_list_uses_the_parameter_dtype(prog, capsys):
    f = prog("def @main(%m: Tensor[(2, 2), float32]) { sum(%m) }")
    assert rly_run(capsys, f, "[[1,2],[3,4]]") == (0, "10f", "")
    g = prog("def @main(%m: Tensor[(2, 2), int64]) { %m }", "g.rly")
    code, out, _ = rly_run(capsys, g, "[[1, 2], [3, 4]]")
    assert code == 0 and out == "Tensor[(2, 2), int64]([[1, 2], [3, 4]])"


def test_bool_literal_and_entry_option(prog, capsys):
    f = prog("def @pick(%c: bool, %a: int32) { if (%c) { %a } else { negative(%a) } }\n"
             "def @main() { 0 }")
    assert rly_run(capsys, f, "--entry", "pick", "False", "4") == (0, "-4", "")
    assert rly_run(capsys, f, "--entry", "pick", "True", "4") == (0, "4", "")


def test_npy_argument(prog, capsys, tmp_path):
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    path = tmp_path / "x.npy"
    np.save(path, arr)
    f = prog("def @main(%x: Tensor[(2, 3), float32]) { max(%x) }")
    assert rly_run(capsys, f, str(path)) == (0, "5f", "")


def test_prelude_program_prints_adt(prog, capsys):
    f = prog("def @main(%n: int32) { @map(fn (%x: int32) { %x * %x }, "
             "Cons(%n, Cons(3, Nil))) }")
    assert rly_run(capsys, f, "--prelude", "2") == (0, "Cons(4, Cons(9, Nil))", "")


def test_wrong_arguments_are_clear_errors(prog, capsys):
    f = prog("def @main(%x: Tensor[(2, 3), float32], %n: int32) { %x }")
    code, out, err = rly_run(capsys, f, "[1, 2, 3]", "1")
    assert code == 1 and out == ""
    assert "argument 1 (%x): expected Tensor[(2, 3), float32], got an array of shape (3,) " \
           "and dtype float32" in err
    code, _, err = rly_run(capsys, f, "[[1,2,3],[4,5,6]]")
    assert code == 1 and "expected 2 arguments (%x, %n), got 1" in err
    code, _, err = rly_run(capsys, f, "[[1,2,3],[4,5,6]]", "1.5")
    assert code == 1 and "argument 2 (%n)" in err
    code, _, err = rly_run(capsys, f, "[[1,2,3],[4,5,6]]", "foo(")
    assert code == 1 and "argument 2: cannot read 'foo('" in err
    assert "Traceback" not in err


def test_runtime_error_and_missing_entry(prog, capsys):
    f = prog("def @main() { @hd(Nil) }")
    code, out, err = rly_run(capsys, f, "--prelude")
    assert code == 1 and "match? failed" in err and "Traceback" not in err
    code, _, err = rly_run(capsys, f, "--prelude", "--entry", "nope")
    assert code == 2 and "no global function @nope" in err
