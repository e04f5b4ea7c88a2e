"""``rly fmt``: canonical text on stdout, ``--check`` and ``-i``, parse errors with a caret."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from relay_ir.cli import main

MESSY = """#[version = "0.0.5"]
// a comment that the canonical form drops
def @main(%x: Tensor[(3,), float32]) {
  let %y = add(multiply(%x, 2f), 1f);   /* trailing */
  nn.softmax(%y, axis=-1)
}
type Box[A] { Box0(A), }
"""

CANONICAL = """#[version = "0.0.5"]
type Box[A] {
  Box0(A),
}

def @main(%x: Tensor[(3), float32]) {
  %0 = multiply(%x, 2f);
  let %y = add(%0, 1f);
  nn.softmax(%y)
}
"""


@pytest.fixture
def files(tmp_path):  # type: ignore[no-untyped-def]
    messy = tmp_path / "messy.rly"
    messy.write_text(MESSY)
    canon = tmp_path / "canon.rly"
    canon.write_text(CANONICAL)
    return messy, canon


def test_fmt_prints_canonical_text(files, capsys) -> None:  # type: ignore[no-untyped-def]
    messy, _ = files
    assert main(["fmt", str(messy)]) == 0
    assert capsys.readouterr().out == CANONICAL
    assert messy.read_text() == MESSY  # untouched


def test_fmt_check(files, capsys) -> None:  # type: ignore[no-untyped-def]
    messy, canon = files
    assert main(["fmt", "--check", str(canon)]) == 0
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert main(["fmt", "--check", str(canon), str(messy)]) == 1
    err = capsys.readouterr().err
    assert str(messy) in err and "not in canonical form" in err and str(canon) not in err


def test_fmt_in_place(files, capsys) -> None:  # type: ignore[no-untyped-def]
    messy, canon = files
    before = os.stat(canon).st_mtime_ns
    assert main(["fmt", "-i", str(messy), str(canon)]) == 0
    assert messy.read_text() == CANONICAL
    assert os.stat(canon).st_mtime_ns == before  # already canonical: not rewritten
    assert capsys.readouterr().out == ""
    assert main(["fmt", "--check", str(messy)]) == 0


def test_fmt_parse_error_is_a_diagnostic(tmp_path, capsys) -> None:  # type: ignore
    bad = tmp_path / "bad.rly"
    bad.write_text('#[version = "0.0.5"]\ndef @main(%x) {\n  add(%x, %nope)\n}\n')
    assert main(["fmt", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.rly:3:" in err and "%nope" in err and "^" in err
    assert "Traceback" not in err
    assert main(["fmt", "--check", str(bad)]) == 1


def test_fmt_console_script_runs(files) -> None:  # type: ignore[no-untyped-def]
    messy, _ = files
    r = subprocess.run([sys.executable, "-m", "relay_ir.cli", "fmt", "--check", str(messy)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "not in canonical form" in r.stderr


USES_PRELUDE = """#[version = "0.0.5"]
type T { A(List[int32]) }
def @main(%x: int32) { @length(Cons(%x,   Nil)) }
"""

USES_PRELUDE_CANONICAL = """#[version = "0.0.5"]
type T {
  A(List[int32]),
}

def @main(%x: int32) {
  %0 = Cons(%x, Nil);
  @length(%0)
}
"""


def test_fmt_prelude_prints_only_the_file(tmp_path, capsys) -> None:  # type: ignore
    path = tmp_path / "p.rly"
    path.write_text(USES_PRELUDE)
    assert main(["fmt", str(path)]) == 1  # Cons is unknown without the prelude
    _, err = capsys.readouterr()
    assert "Cons" in err and "^" in err
    assert main(["fmt", "--prelude", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out == USES_PRELUDE_CANONICAL
    canon = tmp_path / "c.rly"
    canon.write_text(USES_PRELUDE_CANONICAL)
    assert main(["fmt", "--prelude", "--check", str(canon)]) == 0
    assert main(["fmt", "--prelude", "-i", str(path)]) == 0
    assert path.read_text() == USES_PRELUDE_CANONICAL
