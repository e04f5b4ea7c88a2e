"""The operator reference: ``docs/ops.md``, ``python -m relay_ir.op.reference`` and ``rly ops``.

Every fact is read from the registry here too, so the document and the command cannot drift
from the operators they describe.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import relay_ir as rly
from relay_ir.cli import main
from relay_ir.expr import Call, Function
from relay_ir.op import get_opdef, list_ops
from relay_ir.op import reference as R
from relay_ir.printer import _attr_value

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ops.md"


def rly_ops(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["ops", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_docs_ops_md_is_the_generators_output() -> None:
    r = subprocess.run([sys.executable, "-m", "relay_ir.op.reference"], capture_output=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr.decode()
    text = DOC.read_text(encoding="utf-8")
    assert r.stdout.decode("utf-8") == text, (
        f"docs/ops.md is stale: regenerate it with `{R.REGENERATE}`")
    assert text.startswith("# Operator reference\n") and "do not edit" in text.splitlines()[2]


def test_markdown_flag_prints_the_document(capsys) -> None:
    code, out, _ = rly_ops(capsys, "--markdown")
    assert code == 0 and out == DOC.read_text(encoding="utf-8")


def test_every_registered_operator_has_an_entry(capsys) -> None:
    text = DOC.read_text(encoding="utf-8")
    ops = list_ops()
    assert f"{len(ops)} operators in " in text
    code, listing, _ = rly_ops(capsys)
    assert code == 0
    listed = {m.group(1) for m in re.finditer(r"^  (\S+)\s", listing, re.M)}
    assert listed == {d.name for d in ops}
    assert listing.rstrip().endswith(f"{len(ops)} operators; `rly ops NAME` prints one "
                                     "operator's entry (all of them: docs/ops.md)")
    for d in ops:
        assert f"\n### `{d.name}`\n" in text, d.name
        code, out, err = rly_ops(capsys, d.name)
        assert code == 0 and err == ""
        head = out.splitlines()[0]
        assert head.startswith(d.name + "(") and f"\n```\n{head}\n```\n" in text, d.name
        assert f"fusion pattern: {d.pattern.name.lower().replace('_', '-')}" in out
        # every attribute with its registered default as .rly text (or "required")
        required = R.required_attrs(d)
        for f in d.attrs:
            shown = "required" if f.name in required else _attr_value(f.default)
            assert re.search(rf"^    {f.name}: [A-Za-z ]+ = {re.escape(shown)}( |$)", out, re.M), (
                d.name, f.name)


def test_every_entry_states_a_type_rule_and_describes_its_attributes() -> None:
    for d in list_ops():
        assert len(R.arg_names(d, strict=True)) == d.num_inputs  # named in ARG_NAMES if need be
    for e in R.entries():
        assert e.type_rule and not e.type_rule.startswith("(no"), e.name
        assert e.family in R.FAMILIES, e.name
        assert [a.name for a in e.attrs if not a.doc] == [], e.name


def test_families_follow_the_defining_modules() -> None:
    fam = {e.name: e.family for e in R.entries()}
    assert fam["add"] == "tensor" and fam["sum"] == "reduce" and fam["reshape"] == "transform"
    assert fam["take"] == "indexing" and fam["nn.dense"] == "nn" and fam["nn.conv2d"] == "conv"
    assert fam["annotation.checkpoint"] == "annotation" and fam["on_device"] == "annotation"
    assert {n for n, f in fam.items() if f == "dyn"} == {n for n in fam if n.startswith("dyn.")}


@pytest.mark.parametrize("name", ["nn.batch_matmul", "nn.matmul"])
def test_transpose_b_default_is_the_registrys(capsys, name: str) -> None:
    default = get_opdef(name).attr_field("transpose_b").default
    shown = "True" if default else "False"
    code, out, _ = rly_ops(capsys, name)
    assert code == 0
    assert f"transpose_b={shown})" in out.splitlines()[0]
    assert f"    transpose_b: bool = {shown}  -- " in out
    section = DOC.read_text(encoding="utf-8").split(f"\n### `{name}`\n")[1].split("\n### ")[0]
    assert f"| `transpose_b` | bool | `{shown}` |" in section


def test_the_two_matmuls_differ_in_transpose_b(capsys) -> None:
    _, bmm, _ = rly_ops(capsys, "nn.batch_matmul")
    _, mm, _ = rly_ops(capsys, "nn.matmul")
    assert bmm.splitlines()[0] == ('nn.batch_matmul(tensor_a, tensor_b, out_dtype="", '
                                   'transpose_a=False, transpose_b=True)')
    assert mm.splitlines()[0] == ('nn.matmul(tensor_a, tensor_b, units=None, out_dtype="", '
                                  'transpose_a=False, transpose_b=False)')


def test_signatures_are_rly_text_with_the_default_attributes() -> None:
    for e in R.entries():
        head = f"{e.name}({', '.join(e.args)}"
        assert e.signature.startswith(head), e.name
        # the arguments become parameters of a function around the call, as written
        params = ", ".join("%" + a for a in e.args)
        # required attributes show their type (`newshape=<list of int>`): left out here
        rest = re.sub(r"(, )?\b\w+=<[^>]*>", "", e.signature[len(head):])
        call_text = f"{e.name}({params}{rest}".replace("(, ", "(")
        fn = rly.parse_expr(f"fn ({params}) {{ {call_text} }}")
        assert isinstance(fn, Function) and isinstance(fn.body, Call), e.name
        d = get_opdef(e.name)
        assert dict(fn.body.attrs.items()) == dict(d.default_attrs.items()), e.name


REQUIRED_CASES = [  # (call on %x: Tensor[(2, 3), float32], the attribute it lacks)
    ("reshape(%x)", "newshape"), ("strided_slice(%x, end=[1])", "begin"),
    ("split(%x)", "indices_or_sections"), ("nn.pad(%x, 0f)", "pad_width"),
    ("cast(%x)", "dtype"), ("clip(%x, a_min=0f)", "a_max"), ("zeros(dtype=\"int32\")", "shape"),
]


@pytest.mark.parametrize("body, attr", REQUIRED_CASES)
def test_required_attributes_are_marked_and_are_required(capsys, tmp_path, body: str,
                                                          attr: str) -> None:
    f = tmp_path / "p.rly"
    f.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 3), float32]) { '
                 + body + " }\n")
    assert main(["check", str(f)]) == 1
    assert f"needs a {attr} attribute" in capsys.readouterr().err
    name = body.split("(")[0]
    code, out, _ = rly_ops(capsys, name)
    assert code == 0 and re.search(rf"(\(|, ){attr}=<[a-z ]+>[,)]", out.splitlines()[0])
    assert re.search(rf"^    {attr}: [a-z ]+ = required  -- ", out, re.M)
    section = DOC.read_text(encoding="utf-8").split(f"\n### `{name}`\n")[1].split("\n### ")[0]
    assert f"| `{attr}` | " in section and re.search(rf"\| `{attr}` \| [a-z ]+ \| required \|",
                                                     section)


def test_entry_shows_host_reason_and_non_differentiable(capsys) -> None:
    code, out, _ = rly_ops(capsys, "dyn.reshape")
    assert code == 0 and f"backend:        host only: {get_opdef('dyn.reshape').host_only}" in out
    assert "dyn.reshape(data, newshape, allowzero=False)\n" in out
    code, out, _ = rly_ops(capsys, "argmax")
    assert code == 0 and "differentiable: no: marked non-differentiable" in out
    code, out, _ = rly_ops(capsys, "nn.relu")
    assert "reverse mode: `relu(x)`: `g` where `x > 0`, else zero." in out
    assert "type rule:      `nn.relu(x: T) : T`." in out


def test_unknown_operator_is_a_usage_error_with_suggestions(capsys) -> None:
    r = subprocess.run([sys.executable, "-m", "relay_ir.cli", "ops", "nosuch"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert "there is no operator `nosuch` (did you mean " in r.stderr
    assert "Traceback" not in r.stderr
    code, out, err = rly_ops(capsys, "batch_matmul")
    assert code == 2 and out == "" and "did you mean nn.batch_matmul" in err
    code, _, err = rly_ops(capsys, "nn.batchmatmul")
    assert code == 2 and "nn.batch_matmul" in err
    code, _, err = rly_ops(capsys, "qqqqqqqq")
    assert code == 2 and "`rly ops` lists every operator" in err
    code, _, err = rly_ops(capsys, "nn.dense", "--markdown")
    assert code == 2 and "give no NAME" in err
