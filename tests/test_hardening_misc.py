"""Issue 20 (second hardening), the small items: prod's gradient with zeros, variance's JVP
for small tangents, gradient keeping the globals that call the entry, CLI exit statuses and
entry names, negative dims, `rly grad --prelude`, the README's operator count and the demo's
piped output."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import relay_ir as rly
from relay_ir import passes, runtime

HEADER = '#[version = "0.0.5"]\n'


# ----------------------------------------------------------------------------- prod's gradient
def _prod_module(shape: tuple, attrs: str) -> rly.IRModule:
    dims = ", ".join(map(str, shape))
    return rly.parse(HEADER + f"def @main(%x: Tensor[({dims}), float64]) {{ prod(%x{attrs}) }}",
                     "<prod>")


def _prod_grad_fd(x: np.ndarray, axis: tuple | None, keepdims: bool, exclude: bool,
                  eps: float = 1e-3) -> np.ndarray:
    """Central differences of ``sum(prod(x))`` (prod is linear in each element: exact)."""
    axes = tuple(range(x.ndim)) if axis is None else axis
    if exclude:
        axes = tuple(i for i in range(x.ndim) if i not in axes)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        f = [np.sum(np.prod(x + s * d, axis=axes, keepdims=keepdims)) for s in (1, -1)]
        g[i] = (f[0] - f[1]) / (2 * eps)
    return g


def _attrs(axis: tuple | None, keepdims: bool, exclude: bool) -> str:
    out = "" if axis is None else f", axis=[{', '.join(map(str, axis))}]"
    return out + (", keepdims=True" if keepdims else "") + (", exclude=True" if exclude else "")


@pytest.mark.parametrize("axis,keepdims,exclude", [
    (a, k, e) for a, k, e in itertools.product([None, (1,), (0, 2)], [False, True],
                                              [False, True]) if not (a is None and e)])
def test_prod_gradient_is_exact_with_zeros(axis, keepdims, exclude) -> None:  # type: ignore
    x = np.array([[[2.0, 0.0, 3.0], [0.0, 0.0, 4.0]],      # one zero, two zeros in a row
                  [[1.5, -2.0, 0.5], [0.0, 5.0, -1.0]]])
    mod = _prod_module(x.shape, _attrs(axis, keepdims, exclude))
    _, (g,) = runtime.evaluate(passes.gradient(mod), x)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, _prod_grad_fd(x, axis, keepdims, exclude), atol=1e-9)


def test_prod_gradient_analytic_values_with_one_and_two_zeros() -> None:
    mod = _prod_module((3, 3), ", axis=[1]")
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]])
    _, (g,) = runtime.evaluate(passes.gradient(mod), x)
    np.testing.assert_array_equal(g, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [6.0, 3.0, 2.0]])
    # forward mode uses the same local derivative
    t = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    _, tangent = runtime.evaluate(passes.jvp(mod), x, t)
    np.testing.assert_array_equal(tangent, [6.0, 0.0, 2.0])


def test_prod_second_derivative_with_one_zero() -> None:
    # d/dx0 of (d/dx1 prod(x)) = x2 at x = (0, 2, 3): grad of grad, not a piecewise constant
    g1 = passes.gradient(_prod_module((3,), ""))
    text = rly.astext(g1) + """
def @d1(%x: Tensor[(3), float64]) -> float64 { take((@main(%x).1).0, 1) }"""
    g2 = passes.gradient(rly.parse(text, "<g1>"), entry="d1")
    x = np.array([0.0, 2.0, 3.0])
    _, (h,) = runtime.evaluate(g2, x, entry="d1")
    np.testing.assert_allclose(h, [3.0, 0.0, 0.0], atol=1e-12)


# ----------------------------------------------------------------------------- variance's JVP
@pytest.mark.parametrize("scale", [1e-4, 1e-8])
@pytest.mark.parametrize("unbiased", [False, True])
def test_variance_and_std_jvp_are_exact_for_small_tangents(scale: float, unbiased: bool) -> None:
    flag = ", unbiased=True" if unbiased else ""
    mod = rly.parse(HEADER + f"""
def @main(%x: Tensor[(4, 5), float32]) -> (Tensor[(4), float32], Tensor[(4), float32]) {{
  let %m = mean(%x, axis=[1], keepdims=True);
  let %v = variance(%x, %m, axis=[1]{flag});
  (%v, sqrt(%v))
}}""", "<var>")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype("float32")
    t = (rng.standard_normal((4, 5)) * scale).astype("float32")
    _, (dvar, dstd) = runtime.evaluate(passes.jvp(mod), x, t)
    x64, t64 = x.astype("float64"), t.astype("float64")
    c, ct = x64 - x64.mean(1, keepdims=True), t64 - t64.mean(1, keepdims=True)
    n = 5 - int(unbiased)
    want_var = 2 * (c * ct).sum(1) / n
    want_std = want_var / (2 * np.sqrt((c * c).sum(1) / n))
    np.testing.assert_allclose(dvar, want_var, rtol=1e-5)
    np.testing.assert_allclose(dstd, want_std, rtol=1e-5)


def test_variance_jvp_with_a_symbolic_dim_and_keepdims() -> None:
    mod = rly.parse(HEADER + """
def @main(%x: Tensor[(?, 3), float64], %m: Tensor[(1, 3), float64]) {
  variance(%x, %m, axis=[0], keepdims=True, unbiased=True)
}""", "<var>")
    rng = np.random.default_rng(1)
    x, m = rng.standard_normal((6, 3)), rng.standard_normal((1, 3))
    tx, tm = rng.standard_normal((6, 3)) * 1e-6, rng.standard_normal((1, 3)) * 1e-6
    _, tangent = runtime.evaluate(passes.jvp(mod), x, m, tx, tm)
    want = 2 * ((x - m) * (tx - tm)).sum(0, keepdims=True) / 5
    np.testing.assert_allclose(tangent, want, rtol=1e-12)


# ----------------------------------------------------------------------- gradient keeps globals
_CALLERS = HEADER + """
def @main(%x: Tensor[(3), float64]) -> float64 { sum(multiply(%x, %x)) }
def @twice(%x: Tensor[(3), float64]) -> float64 { add(@main(%x), @main(%x)) }
def @through(%x: Tensor[(3), float64]) -> float64 { let %f = @twice; %f(%x) }
def @other(%y: float64) -> float64 { %y }
"""


@pytest.mark.parametrize("mode", ["higher_order", "first_order"])
def test_gradient_keeps_globals_that_call_the_entry(mode: str) -> None:
    g = passes.gradient(rly.parse(_CALLERS, "<callers>"), mode=mode)
    assert {"twice", "through", "other"} <= set(g.functions)
    scalar_fn = "fn (Tensor[(3), float64]) -> float64"
    for name in ("twice", "through"):
        assert rly.astext(g[name].checked_type_) == scalar_fn
    x = np.array([1.0, 2.0, 3.0])
    assert float(runtime.evaluate(g, x, entry="through")) == 28.0
    value, (dx,) = runtime.evaluate(g, x)
    assert float(value) == 14.0
    np.testing.assert_array_equal(dx, 2 * x)
    # the printed module is accepted again, with the same types
    again = passes.InferType()(rly.parse(rly.astext(g), "<again>"))
    assert rly.astext(again["twice"].checked_type_) == scalar_fn


def test_jvp_keeps_globals_that_call_the_entry_and_recursion_stays_intact() -> None:
    mod = rly.parse(HEADER + """
def @main(%x: float64, %n: int32) -> float64 {
  if (%n <= 0) { %x } else { multiply(%x, @main(%x, %n - 1)) }
}
def @cube(%x: float64) -> float64 { @main(%x, 2) }""", "<rec>")
    j = passes.jvp(mod)
    g = passes.gradient(mod)
    two = np.array(2.0)
    for out in (j, g):
        assert float(runtime.evaluate(out, two, entry="cube")) == 8.0
    _, (dx, _) = runtime.evaluate(g, two, np.array(2, "int32"))
    assert float(dx) == 12.0


# ----------------------------------------------------------------------------- command line
def _rly(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from relay_ir.cli import main
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_globals(tmp_path) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "two.rly"
    path.write_text(HEADER + "def @main(%x: float32) -> float32 { %x }\n"
                    "def @f(%x: float32) -> float32 { add(%x, 1f) }\n")
    return str(path)


@pytest.mark.parametrize("argv", [
    ["opt", "{f}", "--entry", "nosuch"],
    ["opt", "{f}", "--entry", "nosuch", "--passes", "dce"],
    ["grad", "{f}", "--entry", "nosuch"],
    ["grad", "{f}", "--entry", "nosuch", "--forward"],
    ["run", "{f}", "--entry", "nosuch", "1.0"],
    ["viz", "{f}", "-o", "{f}.dot", "--entry", "nosuch"],
])
def test_an_unknown_entry_is_a_usage_error_listing_the_globals(capsys, two_globals,  # type: ignore
                                                               argv) -> None:
    code, out, err = _rly(capsys, *[a.format(f=two_globals) for a in argv])
    assert (code, out) == (2, "")
    assert err.strip() == f"{two_globals}: there is no global function @nosuch (globals: @main, @f)"


def test_opt_entry_and_unknown_pass_names(capsys, two_globals) -> None:  # type: ignore
    code, out, _ = _rly(capsys, "opt", two_globals, "--entry", "f")
    assert code == 0 and "def @f(" in out and "@main" not in out
    code, out, err = _rly(capsys, "opt", two_globals, "--passes", "dce,foo")
    assert (code, out) == (2, "") and "unknown pass 'foo'" in err and "fold-constant" in err


@pytest.mark.parametrize("dims,col,caret", [("-1, 3", 23, "^~"), ("3, - 2", 26, "^"),
                                            ("2 - 5", 25, "^")])
def test_negative_dims_are_parse_errors_with_a_caret(capsys, tmp_path, dims, col,  # type: ignore
                                                     caret) -> None:
    path = tmp_path / "neg.rly"
    path.write_text(HEADER + f"def @main(%x: Tensor[({dims}), float32]) {{ %x }}\n")
    code, out, err = _rly(capsys, "check", str(path))
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith(f"{path}:2:{col}: parse error: negative dimension `-")
    assert "write `?`" in lines[0]
    assert lines[2] == "     | " + " " * (col - 1) + caret
    with pytest.raises(rly.ParseError, match="negative dimension `-1`"):
        rly.parse_type("Tensor[(-1), float32]")


def test_grad_prelude_prints_only_the_files_definitions(capsys, tmp_path) -> None:  # type: ignore
    src = tmp_path / "m.rly"
    src.write_text(HEADER + """def @main(%x: float32) -> float32 {
  let %l = Cons(%x, Cons(multiply(%x, %x), Nil));
  @foldl(fn (%a: float32, %b: float32) -> float32 { add(%a, %b) }, 0f,
         @map(fn (%v: float32) -> float32 { multiply(%v, 3f) }, %l))
}
""")
    code, out, _ = _rly(capsys, "grad", str(src), "--prelude")
    assert code == 0
    heads = sorted(line.split("(")[0].split("[")[0] for line in out.splitlines()
                   if line.startswith(("def ", "type ")))
    assert heads == ["def @foldl_grad", "def @main", "def @main_grad", "def @map_grad"]
    g = tmp_path / "g.rly"
    g.write_text(out)
    # 3x + 3x^2 at 2 and its derivative 3 + 6x
    assert _rly(capsys, "run", str(g), "2", "--prelude") == (0, "(18f, (15f,))\n", "")


# ----------------------------------------------------------------------------- docs and demo
def test_readme_operator_count_is_the_registry_size() -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path
    from relay_ir.op import list_ops
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    m = re.search(r"(\d+) operators with Relay's names.*?\(counted by `python -c \"([^\"]+)\"`\)",
                  readme, re.S)
    assert m is not None, "the README states the operator count and the command that counts"
    assert int(m.group(1)) == len(list_ops())
    ran = subprocess.run([sys.executable, "-c", m.group(2)], capture_output=True, text=True,
                         check=True)
    assert ran.stdout.strip() == m.group(1)


def test_piped_demo_output_has_no_progress_bar_fragments(capsys) -> None:  # type: ignore
    import sys
    from relay_ir import demo
    demo.train(1, out=sys.stdout)        # progress on (the default); the output is captured
    out, err = capsys.readouterr()
    assert "epoch  1/1  loss " in out
    assert "%|" not in out + err and "\r" not in out + err


def test_architecture_picture_draws_every_command_and_no_future_executor() -> None:
    import re
    from pathlib import Path
    from relay_ir.cli import COMMANDS
    docs = Path(__file__).resolve().parents[1] / "docs"
    dot = (docs / "architecture.dot").read_text(encoding="utf-8")
    svg = (docs / "architecture.svg").read_text(encoding="utf-8")
    label = re.search(r'cli \[label="([^"]+)"\]', dot)
    assert label is not None
    drawn = set(re.findall(r"[a-z]+", label.group(1).replace("\\n", " "))) - {"rly"}
    assert drawn == set(COMMANDS)
    # the SVG is rendered from this .dot: every text line of the CLI label is in it
    svg_text = {t.replace("&#45;", "-") for t in re.findall(r">([^<>]+)</text>", svg)}
    for line in label.group(1).split("\\n"):
        assert line in svg_text
    assert "(next)" not in dot and "(next)" not in svg


def test_run_of_a_module_file_refuses_an_unknown_entry(capsys, tmp_path) -> None:  # type: ignore
    src = tmp_path / "m.rly"
    src.write_text(HEADER + "def @main(%x: Tensor[(3), float32]) { add(%x, %x) }\n")
    so = str(tmp_path / "m.so")
    assert _rly(capsys, "build", str(src), "-o", so)[0] == 0
    code, out, err = _rly(capsys, "run", so, "--entry", "nosuch", "[1.0, 2.0, 3.0]")
    assert (code, out) == (2, "")
    assert err.strip() == f"{so}: there is no global function @nosuch (globals: @main)"
