"""``rly grad FILE [--entry NAME]``: the printed gradient program is accepted by check and run."""
from __future__ import annotations

import pytest

from relay_ir.cli import main

HEADER = '#[version = "0.0.5"]\n'


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_grad_prints_a_program_check_and_run_accept(tmp_path, capsys) -> None:
    src = tmp_path / "loss.rly"
    src.write_text(HEADER + """def @loss(%x: float32, %y: float32) -> float32 {
  multiply(multiply(%x, %x), %y)
}
""")
    code, out, err = _run(capsys, "grad", str(src), "--entry", "loss")
    assert code == 0 and err == ""
    assert out.startswith(HEADER)
    assert "def @loss(%x: float32, %y: float32) -> (float32, (float32, float32))" in out
    assert "ref_write" in out
    g = tmp_path / "grad.rly"
    g.write_text(out)
    code, checked, _ = _run(capsys, "check", str(g))
    assert code == 0
    assert "@loss: fn (float32, float32) -> (float32, (float32, float32))" in checked
    # d/dx x^2 y = 2xy = 12, d/dy = x^2 = 9
    code, ran, _ = _run(capsys, "run", str(g), "3", "2", "--entry", "loss")
    assert (code, ran.strip()) == (0, "(18f, (12f, 9f))")
    code, fmt, _ = _run(capsys, "fmt", str(g))
    assert code == 0 and fmt == out


def test_grad_with_prelude_prints_what_run_needs(tmp_path, capsys) -> None:
    src = tmp_path / "fold.rly"
    src.write_text(HEADER + """def @main(%x: float32) -> float32 {
  @foldl(fn (%a: float32, %b: float32) { multiply(%a, %b) }, %x, Cons(%x, Cons(%x, Nil)))
}
""")
    code, out, _ = _run(capsys, "grad", str(src), "--prelude")
    assert code == 0
    g = tmp_path / "grad.rly"
    g.write_text(out)
    code, ran, _ = _run(capsys, "run", str(g), "2")
    assert (code, ran.strip()) == (0, "(8f, (12f,))")


def test_grad_errors_are_diagnostics(tmp_path, capsys) -> None:
    src = tmp_path / "f.rly"
    src.write_text(HEADER + "def @main(%x: float32) -> float32 { exp(%x) }\n")
    code, out, err = _run(capsys, "grad", str(src), "--entry", "nope")
    assert code == 1 and out == "" and "no global function @nope" in err
    src.write_text(HEADER + "def @main(%x: float32) -> float32 {\n  let %r = ref(%x);\n"
                   "  exp(ref_read(%r))\n}\n")
    code, out, err = _run(capsys, "grad", str(src), "--mode", "first_order")
    assert code == 1 and out == "" and "Traceback" not in err
    assert "f.rly:3:" in err and "a reference (`ref`)" in err and "^" in err
