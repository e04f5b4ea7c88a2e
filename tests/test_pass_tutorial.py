"""The code of docs/pass_tutorial.md, kept here so it cannot rot.

Every ```python block of the tutorial is also executed in order by
:func:`test_tutorial_blocks_run_and_print_what_the_doc_shows`, and what it prints is compared
with the ```text block that follows it.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

import relay_ir as rly
from relay_ir.expr import Call, Expr, Function
from relay_ir.functor import ExprMutator
from relay_ir.module import IRModule
from relay_ir.op import get_op
from relay_ir.passes import FunctionPass, PassContext, Sequential, get_pass
from relay_ir.passes.instrument import WellFormedCheck
from relay_ir.passes.pattern import is_constant, is_op, rewrite, wildcard

from util_diff import assert_same_results

DOC = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "pass_tutorial.md")

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = power(%x, 2f);
  %1 = power(%0, 2f);
  add(%1, %x)
}
"""

EXPECTED = """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %x0 = multiply(%x, %x);
  let %x1 = multiply(%x0, %x0);
  let %x2 = add(%x1, %x);
  %x2
}
"""


# ----------------------------------------------------------------------------- way 1: visitor
class _SquareToMultiply(ExprMutator):
    """power(x, 2) => multiply(x, x)."""

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)          # children first (already rewritten)
        if (isinstance(new, Call) and new.op is get_op("power")
                and isinstance(new.args[1], rly.Constant)
                and np.all(new.args[1].data == 2)):
            x = new.args[0]
            return Call(get_op("multiply"), (x, x), span=new.span)
        return new


@dataclass(frozen=True)
class SquareToMultiply(FunctionPass):
    """Strength reduction: ``power(x, 2) => multiply(x, x)``."""

    name: ClassVar[str] = "square-to-multiply"
    opt_level: ClassVar[int] = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return _SquareToMultiply().visit(func)


# ----------------------------------------------------------------------------- way 2: pattern
SQUARE = is_op("power")(wildcard("x"), is_constant(2.0))   # power(x, 2) -> multiply(x, x)


def _square_to_multiply(pre: Expr, post: Expr, b) -> Expr:
    return Call(get_op("multiply"), (b["x"], b["x"]), span=post.span)


@dataclass(frozen=True)
class SquareToMultiplyPattern(FunctionPass):
    """Strength reduction, as a pattern rewrite: ``power(x, 2) => multiply(x, x)``."""

    name: ClassVar[str] = "square-to-multiply-pattern"
    opt_level: ClassVar[int] = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return rewrite([(SQUARE, _square_to_multiply)], func)


def _pipeline(custom) -> Sequential:
    return Sequential((get_pass("to-anf"), custom))


# ----------------------------------------------------------------------------- tests
def test_visitor_pass_in_a_pipeline():
    mod = rly.parse(PROGRAM)
    with PassContext(opt_level=2, instruments=[WellFormedCheck()]):
        out = _pipeline(SquareToMultiply())(mod)
    assert rly.astext(out).strip() == EXPECTED.strip()
    rly.assert_structural_equal(out, rly.parse(EXPECTED), map_free_vars=True)
    assert_same_results(mod, out)


def test_pattern_pass_in_a_pipeline():
    mod = rly.parse(PROGRAM)
    with PassContext(opt_level=2, instruments=[WellFormedCheck()]):
        out = _pipeline(SquareToMultiplyPattern())(mod)
    rly.assert_structural_equal(out, rly.parse(EXPECTED), map_free_vars=True)
    assert_same_results(mod, out)


def test_both_ways_agree_and_respect_opt_level():
    mod = rly.parse(PROGRAM)
    a = _pipeline(SquareToMultiply())(mod)
    b = _pipeline(SquareToMultiplyPattern())(mod)
    rly.assert_structural_equal(a, b)
    # opt_level 0 skips both custom passes (their level is 1); to-anf (level 0) still runs
    with PassContext(opt_level=0):
        c = _pipeline(SquareToMultiply())(mod)
    assert "power" in rly.astext(c) and "multiply" not in rly.astext(c)


def test_power_of_three_is_left_alone():
    mod = rly.parse(PROGRAM.replace("2f", "3f"))
    for p in (SquareToMultiply(), SquareToMultiplyPattern()):
        out = p(mod)
        assert out is mod


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```(python|text)\n(.*?)```", text, flags=re.S)


def test_tutorial_blocks_run_and_print_what_the_doc_shows():
    with open(DOC, encoding="utf-8") as f:
        blocks = _blocks(f.read())
    assert sum(1 for kind, _ in blocks if kind == "python") >= 3
    ns: dict = {"__name__": "tutorial"}
    last_output = None
    checked = 0
    for kind, body in blocks:
        if kind == "python":
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(body, DOC, "exec", dont_inherit=True), ns)  # noqa: S102 - our doc
            last_output = buf.getvalue()
        elif last_output is not None:
            # a ```text block right after a python block is that block's expected output
            assert last_output.strip() == body.strip(), (last_output, body)
            checked += 1
            last_output = None
    assert checked >= 2
