"""``rly opt``: pipelines from the command line."""
from __future__ import annotations

import os

import pytest

import relay_ir as rly
from relay_ir.cli import main

HDR = '#[version = "0.0.5"]\n'
SRC = HDR + """
def @main(%x: float32) {
  let %dead = add(%x, 1f);
  let %k = add(2f, 3f);
  multiply(%x, %k)
}
"""


@pytest.fixture()
def prog(tmp_path: object) -> str:
    path = os.path.join(str(tmp_path), "p.rly")
    with open(path, "w") as fh:
        fh.write(SRC)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["opt", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_named_passes(capsys: pytest.CaptureFixture[str], prog: str) -> None:
    code, out, err = run(capsys, prog, "--passes", "dce,fold-constant")
    assert code == 0 and err == ""
    expected = rly.parse(HDR + "def @main(%x: float32) { multiply(%x, 5f) }")
    rly.assert_structural_equal(rly.parse(out), expected, map_free_vars=True)


def test_named_passes_run_whatever_their_level(capsys: pytest.CaptureFixture[str],
                                               prog: str) -> None:
    code, out, _ = run(capsys, prog, "--passes", "fold-constant", "--opt-level", "0")
    assert code == 0 and "5f" in out and "%dead" in out


def test_default_pipeline_and_levels(capsys: pytest.CaptureFixture[str], prog: str) -> None:
    code, out, _ = run(capsys, prog)
    assert code == 0
    expected = rly.parse(HDR + """
def @main(%x: float32) -> float32 { let %a: float32 = multiply(%x, 5f); %a }""")
    rly.assert_structural_equal(rly.parse(out), expected, map_free_vars=True)
    code, out0, _ = run(capsys, prog, "--opt-level", "0")
    assert code == 0 and "%dead" in out0 and "add(2f, 3f)" in out0


def test_timing_table_on_stderr(capsys: pytest.CaptureFixture[str], prog: str) -> None:
    code, out, err = run(capsys, prog, "--passes", "to-anf,dce", "--timing")
    assert code == 0 and "time (ms)" not in out
    lines = err.strip().splitlines()
    assert lines[0].split()[:2] == ["pass", "runs"]
    assert sorted(ln.split()[0] for ln in lines[1:-1]) == ["dce", "to-anf"]
    assert lines[-1].startswith("total")


def test_print_after(capsys: pytest.CaptureFixture[str], prog: str) -> None:
    code, out, err = run(capsys, prog, "--passes", "to-anf,dce,fold-constant",
                         "--print-after", "dce")
    assert code == 0
    assert err.count("// after pass") == 1 and err.startswith("// after pass dce")
    assert "%dead" not in err and "add(2f, 3f)" in err and "5f" in out


def test_prelude(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "q.rly")
    with open(path, "w") as fh:
        fh.write(HDR + "def @main(%x: int32) { @length(Cons(%x, Nil)) }\n")
    code, out, err = run(capsys, path, "--prelude", "--passes", "dce")
    assert code == 0, err
    assert "@length(" in out
    code, _, err = run(capsys, path, "--passes", "dce")
    assert code == 1 and "length" in err  # without the prelude @length is unknown


def test_errors(capsys: pytest.CaptureFixture[str], prog: str, tmp_path: object) -> None:
    code, _, err = run(capsys, prog, "--passes", "dce,bogus")
    assert code == 2 and "unknown pass 'bogus'" in err and "fold-constant" in err
    code, _, err = run(capsys, os.path.join(str(tmp_path), "missing.rly"))
    assert code == 1 and "missing.rly" in err
    bad = os.path.join(str(tmp_path), "bad.rly")
    with open(bad, "w") as fh:
        fh.write(HDR + "def @main( {\n")
    code, _, err = run(capsys, bad)
    assert code == 1 and "bad.rly:2" in err and "^" in err


def test_list_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--list-passes")
    assert code == 0
    names = [ln.split()[0] for ln in out.splitlines()]
    for n in ("to-anf", "to-gnf", "dce", "fold-constant", "inline", "cse", "simplify-expr"):
        assert n in names
    assert "dce              level 1" in out


def test_bad_opt_level_and_print_after_are_refused(capsys: pytest.CaptureFixture[str],
                                                    prog: str) -> None:
    for argv, needle in ((["--opt-level", "42"], "invalid level '42' (choose from 0, 1, 2, 3)"),
                         (["--opt-level", "two"], "invalid level 'two'"),
                         (["--print-after", "no-such-pass"],
                          "unknown pass 'no-such-pass' (choose from all, combine-sums, "
                          "conv-nchwc, conv-weight-layout, cse, dce")):
        with pytest.raises(SystemExit) as info:
            main(["opt", prog, *argv])
        assert info.value.code == 2
        out, err = capsys.readouterr()
        assert out == "" and needle in err and "Traceback" not in err
    code, out, err = run(capsys, prog, "--opt-level", "3", "--print-after", "cse")
    assert code == 0 and "// after pass cse" in err


def test_entry_option_keeps_another_root(capsys: pytest.CaptureFixture[str],
                                         tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "two.rly")
    with open(path, "w") as fh:
        fh.write(HDR + "def @f(%x: float32) { add(%x, 1f) }\n"
                 "def @main(%x: float32) { %x }\n")
    code, out, _ = run(capsys, path)
    assert code == 0 and "@f" not in out and "@main" in out
    code, out, _ = run(capsys, path, "--entry", "f")
    assert code == 0 and "@f" in out and "@main" not in out
