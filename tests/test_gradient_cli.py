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
    # only the file's own and the generated definitions, as `rly fmt --prelude` prints
    assert "def @foldl[" not in out and "type List" not in out and "def @foldl_grad[" in out
    g = tmp_path / "grad.rly"
    g.write_text(out)
    code, ran, _ = _run(capsys, "run", str(g), "2", "--prelude")
    assert (code, ran.strip()) == (0, "(8f, (12f,))")


def test_grad_errors_are_diagnostics(tmp_path, capsys) -> None:
    src = tmp_path / "f.rly"
    src.write_text(HEADER + "def @main(%x: float32) -> float32 { exp(%x) }\n")
    code, out, err = _run(capsys, "grad", str(src), "--entry", "nope")
    assert code == 2 and out == "" and "no global function @nope" in err
    src.write_text(HEADER + "def @main(%x: float32) -> float32 {\n  let %r = ref(%x);\n"
                   "  exp(ref_read(%r))\n}\n")
    code, out, err = _run(capsys, "grad", str(src), "--mode", "first_order")
    assert code == 1 and out == "" and "Traceback" not in err
    assert "f.rly:3:" in err and "a reference (`ref`)" in err and "^" in err


LOSS = HEADER + """def @loss(%x: float32, %y: float32) -> float32 {
  multiply(multiply(%x, %x), %y)
}
"""


def _grad_then_run(tmp_path, capsys, *flags: str, run_args=("3", "2")) -> tuple[str, str]:
    src = tmp_path / "loss.rly"
    src.write_text(LOSS)
    code, out, err = _run(capsys, "grad", str(src), "--entry", "loss", *flags)
    assert code == 0 and err == "", err
    g = tmp_path / "grad.rly"
    g.write_text(out)
    code, ran, err = _run(capsys, "run", str(g), *run_args, "--entry", "loss")
    assert code == 0, err
    code, fmt, _ = _run(capsys, "fmt", str(g))
    assert code == 0 and fmt == out
    return out, ran.strip()


def test_grad_first_order_mode(tmp_path, capsys) -> None:
    out, ran = _grad_then_run(tmp_path, capsys, "--mode", "first_order")
    assert "ref" not in out and "fn (" not in out
    assert ran == "(18f, (12f, 9f))"


def test_grad_wrt_picks_and_orders_gradients(tmp_path, capsys) -> None:
    out, ran = _grad_then_run(tmp_path, capsys, "--wrt", "y,x")
    assert "def @loss(%x: float32, %y: float32) -> (float32, (float32, float32))" in out
    assert ran == "(18f, (9f, 12f))"
    out, ran = _grad_then_run(tmp_path, capsys, "--wrt", "y", "--mode", "first_order")
    assert ran == "(18f, (9f,))"
    code, out, err = _run(capsys, "grad", str(tmp_path / "loss.rly"), "--entry", "loss",
                          "--wrt", "x,q")
    assert code == 1 and out == "" and "wrt names `q`" in err and "%x, %y" in err


def test_grad_optimize_prints_first_order_code(tmp_path, capsys) -> None:
    out, ran = _grad_then_run(tmp_path, capsys, "--optimize")
    assert "ref" not in out and "fn (" not in out
    assert ran == "(18f, (12f, 9f))"


def test_grad_forward_prints_the_jvp_program(tmp_path, capsys) -> None:
    # tangent (1, 0): d/dx x^2 y = 12; then (0.5, 1): 12 * 0.5 + 9 = 15
    out, ran = _grad_then_run(tmp_path, capsys, "--forward", run_args=("3", "2", "1", "0"))
    assert ("def @loss(%x: float32, %y: float32, %t_x: float32, %t_y: float32) "
            "-> (float32, float32)") in out
    assert ran == "(18f, 12f)"
    out, ran = _grad_then_run(tmp_path, capsys, "--forward", "--optimize",
                              run_args=("3", "2", "0.5", "1"))
    assert ran == "(18f, 15f)" and "ref" not in out
    code, _, err = _run(capsys, "grad", str(tmp_path / "loss.rly"), "--forward",
                        "--mode", "first_order")
    assert code == 2 and "--forward" in err
