"""Pass manager: contexts, Sequential, required/disabled passes, instruments, the registry."""
from __future__ import annotations

import glob
import io
import os
from dataclasses import dataclass
from typing import ClassVar

import pytest

import relay_ir as rly
from relay_ir.errors import WellFormednessError
from relay_ir.expr import Function, Let, Var
from relay_ir.module import IRModule
from relay_ir.passes import (PASS_REGISTRY, Pass, PassContext, PassInfo, Sequential, get_pass,
                             module_pass, parse_pipeline, run_pass)
from relay_ir.passes.instrument import PassInstrument, PrintIRAfter, Timing, WellFormedCheck
from relay_ir.well_formed import check

HDR = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = HDR + """
def @main(%x: float32) {
  let %dead = add(%x, 1f);
  let %k = add(2f, 3f);
  multiply(%x, %k)
}"""


class Recorder(PassInstrument):
    """Records every hook call."""

    def __init__(self, skip: str = "") -> None:
        self.events: list[str] = []
        self.skip = skip

    def enter_pass_ctx(self) -> None:
        self.events.append("enter")

    def exit_pass_ctx(self) -> None:
        self.events.append("exit")

    def should_run(self, mod: IRModule, info: object) -> bool:
        return getattr(info, "name") != self.skip

    def run_before_pass(self, mod: IRModule, info: object) -> None:
        self.events.append("before " + getattr(info, "name"))

    def run_after_pass(self, mod: IRModule, info: object) -> None:
        self.events.append("after " + getattr(info, "name"))


def names_run(rec: Recorder) -> list[str]:
    return [e[len("before "):] for e in rec.events if e.startswith("before ")]


def test_context_stack_and_inherited_instruments() -> None:
    outer = PassContext.current()
    assert any(isinstance(i, WellFormedCheck) for i in outer.instruments)  # conftest fixture
    with PassContext(opt_level=3, config={"k": 1}) as ctx:
        assert PassContext.current() is ctx
        assert ctx.instruments == outer.instruments  # none given: inherited
        with PassContext(instruments=[]) as inner:
            assert PassContext.current() is inner and inner.instruments == ()
        assert PassContext.current() is ctx
    assert PassContext.current() is outer


def test_sequential_levels_disabled_and_required() -> None:
    mod = rly.parse(SRC)
    seq = parse_pipeline("dce,fold-constant,cse")
    rec = Recorder()
    with PassContext(opt_level=2, instruments=[rec]):
        seq(mod)
    assert names_run(rec) == ["sequential", "dce", "fold-constant"]  # cse is level 3
    assert rec.events[0] == "enter" and rec.events[-1] == "exit"

    rec = Recorder()
    with PassContext(opt_level=2, disabled_pass=["dce"], required_pass=["cse"],
                     instruments=[rec]):
        out = seq(mod)
    assert names_run(rec) == ["sequential", "fold-constant", "cse"]
    assert "%dead" in rly.astext(out) and "5f" in rly.astext(out)

    rec = Recorder()
    with PassContext(opt_level=0, instruments=[rec]):
        assert seq(mod) is mod  # every pass skipped: the very same module
    assert names_run(rec) == ["sequential"]


def test_required_passes_run_first_and_only_when_needed() -> None:
    mod = rly.parse(SRC)
    rec = Recorder()
    seq = Sequential((get_pass("simplify-expr"), get_pass("dce"), get_pass("simplify-expr")))
    with PassContext(instruments=[rec]):
        out = seq(mod)
    # dce changed the module, so infer-type runs again before the second simplify-expr
    assert names_run(rec) == ["sequential", "infer-type", "simplify-expr", "dce", "infer-type",
                              "simplify-expr"]
    rec = Recorder()
    seq = Sequential((get_pass("simplify-expr"), get_pass("simplify-expr")))
    with PassContext(instruments=[rec]):
        seq(mod)
    # nothing to simplify: the module is unchanged and its types are still fresh
    assert names_run(rec) == ["sequential", "infer-type", "simplify-expr", "simplify-expr"]
    assert out["main"].params[0].type_annotation is not None
    rec = Recorder()
    with PassContext(instruments=[rec]):
        get_pass("simplify-expr")(mod)  # called directly: requirements still run
    assert names_run(rec) == ["infer-type", "simplify-expr"]


def test_should_run_skips_a_pass() -> None:
    mod = rly.parse(SRC)
    rec = Recorder(skip="dce")
    with PassContext(instruments=[rec]):
        out = parse_pipeline("dce")(mod)
    assert "%dead" in rly.astext(out)
    assert names_run(rec) == ["sequential"]


def test_parse_pipeline_and_unknown_names() -> None:
    seq = parse_pipeline(" to-anf, dce ,fold-constant ")
    assert [p.name for p in seq.passes] == ["to-anf", "dce", "fold-constant"]
    with pytest.raises(ValueError, match="unknown pass 'nope'.*known passes: .*dce"):
        parse_pipeline("dce,nope")


def test_pass_options_are_fields() -> None:
    p = get_pass("dce", inline_once=True)
    assert p.inline_once is True and p.info == PassInfo("dce", 1, ())
    with pytest.raises(Exception):
        p.inline_once = False  # type: ignore[misc]  # frozen


def test_timing_and_print_after() -> None:
    mod = rly.parse(SRC)
    timing = Timing()
    buf = io.StringIO()
    with PassContext(instruments=[timing, PrintIRAfter(["dce"], file=buf)]):
        parse_pipeline("to-anf,dce,fold-constant")(mod)
    totals = timing.totals()
    assert set(totals) == {"to-anf", "dce", "fold-constant"}
    assert all(n == 1 and s >= 0 for n, s in totals.values())
    table = timing.table()
    assert table.splitlines()[0].split() == ["pass", "runs", "time", "(ms)", "share"]
    assert table.splitlines()[-1].startswith("total") and "100.0%" in table
    text = buf.getvalue()
    assert text.startswith("// after pass dce\n") and "%dead" not in text
    assert text.count("// after pass") == 1


@dataclass(frozen=True)
class _DuplicateBinder(Pass):
    """A broken pass: ``let x = e; b => let x = e; let x = e; b`` (binds x twice)."""

    name: ClassVar[str] = "broken"
    opt_level: ClassVar[int] = 0

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        fn = mod["main"]
        body = fn.body
        assert isinstance(body, Let)
        return mod.with_function("main", Function(fn.params, Let(body.var, body.value, body)))


def test_well_formed_check_names_the_pass() -> None:
    mod = rly.parse(SRC)
    with pytest.raises(WellFormednessError, match="after pass `broken`: variable %dead is bound "
                                                  "more than once"):
        _DuplicateBinder()(mod)
    with PassContext(instruments=[]):
        _DuplicateBinder()(mod)  # unchecked when the instrument is off


def test_module_pass_decorator_and_input_never_mutated() -> None:
    @module_pass("drop-main-body", opt_level=1)
    def drop(mod: IRModule, ctx: PassContext) -> IRModule:
        """``def @main(..) { b } => def @main(..) { x }``."""
        fn = mod["main"]
        return mod.with_function("main", Function(fn.params, fn.params[0]))

    mod = rly.parse(SRC)
    before = rly.astext(mod)
    out = drop()(mod)
    assert rly.astext(mod) == before
    assert rly.astext(out).count("let") == 0
    assert drop.name == "drop-main-body" and drop.opt_level == 1


def example_modules() -> list[tuple[str, IRModule]]:
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.rly")) +
                       glob.glob(os.path.join(ROOT, "examples", "*.rly"))):
        with open(path) as fh:
            out.append((os.path.basename(path), rly.parse(fh.read(), path)))
    return out


CORE = ["to-anf", "to-gnf", "dce", "fold-constant", "inline", "cse", "simplify-expr"]


@pytest.mark.parametrize("name", sorted(PASS_REGISTRY))
def test_registry_every_pass_is_complete_and_well_formed(name: str) -> None:
    p = get_pass(name)
    cls = type(p)
    assert cls.name == name
    assert isinstance(cls.opt_level, int) and 0 <= cls.opt_level <= 4
    doc = cls.__doc__ or ""
    assert doc.strip() and ("=>" in doc or "->" in doc), f"{name}: docstring has no rule"
    mods = example_modules()
    assert len(mods) >= 5
    with PassContext(instruments=[WellFormedCheck(check_input=True)]):
        for fname, mod in mods:
            before = rly.astext(mod)
            out = p(mod)
            check(out)
            assert rly.astext(mod) == before, f"{name} mutated {fname}"


def test_core_passes_registered_with_levels() -> None:
    levels = {n: get_pass(n).opt_level for n in CORE}
    assert levels == {"to-anf": 0, "to-gnf": 0, "dce": 1, "inline": 1, "fold-constant": 2,
                      "simplify-expr": 2, "cse": 3}
    assert get_pass("simplify-expr").required == ("infer-type",)


def test_optimize_pipeline_levels() -> None:
    from relay_ir import passes
    from util_diff import assert_same_results
    mod = rly.parse(SRC)
    rec = Recorder()
    with PassContext(instruments=[rec]):
        out2 = passes.optimize(mod)
    ran = names_run(rec)
    assert "cse" not in ran and "dce" in ran and "fold-constant" in ran
    # to-anf runs first, so types are inferred once for simplify-expr; partial-eval requires
    # them too, after fold-constant and inline rebuilt the module: inferred again
    assert ran.count("infer-type") == 2
    assert ran.index("infer-type", ran.index("inline")) < ran.index("partial-eval")
    rec = Recorder()
    with PassContext(instruments=[rec]):
        out0 = passes.optimize(mod, opt_level=0)
    assert set(names_run(rec)) == {"sequential", "infer-type", "to-anf"}
    expected = rly.parse(HDR + """
def @main(%x: float32) -> float32 {
  let %a = multiply(%x, 5f);
  %a
}""")
    rly.assert_structural_equal(passes.InferType()(out2), passes.InferType()(expected),
                                map_free_vars=True)
    assert_same_results(mod, out2)
    assert_same_results(mod, out0)
    assert isinstance(out0["main"].body, Let)


def test_optimize_returns_its_own_recent_result_as_it_is() -> None:
    # runtime.build optimizes its input: a module the user optimized with the same options is
    # not run through the pipeline again; other options, or another config, run it
    from relay_ir import passes
    mod = rly.parse(SRC)
    out = passes.optimize(mod)
    rec = Recorder()
    with PassContext(instruments=[rec]):
        assert passes.optimize(out) is out
    assert names_run(rec) == []
    for options, config in (({"opt_level": 3}, {}), ({}, {"partial-eval.unroll_budget": 0}),
                            ({"fuel": 10}, {})):
        rec = Recorder()
        with PassContext(instruments=[rec], config=config):
            again = passes.optimize(out, **options)
        assert again is not out and "partial-eval" in names_run(rec), (options, config)
    assert passes.optimize(rly.parse(SRC)) is not out   # equal text, another object: run


@pytest.mark.parametrize("key,bad", [("partial-eval.unroll_budget", "lots"),
                                     ("partial-eval.unroll_budget", -1),
                                     ("partial-eval.unroll_budget", 2.5),
                                     ("fuse-ops.max_depth", 0), ("fuse-ops.max_depth", None)])
def test_integer_options_of_the_wrong_form_name_their_key(key: str, bad: object) -> None:
    from relay_ir import passes
    from relay_ir.errors import ConfigError
    from relay_ir.passes.fuse_ops import fuse_ops
    mod = rly.parse(SRC)
    with PassContext(config={key: bad}):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
            fuse_ops(passes.optimize(mod)) if key.startswith("fuse") else passes.optimize(mod)
    assert repr(bad) in err.value.message
    with PassContext(config={key: "7"}):      # an integer written as text is taken
        assert PassContext.current().config_int(key, 1) == 7


def test_run_pass_rejects_non_modules() -> None:
    with pytest.raises(TypeError, match="expects an IRModule"):
        run_pass(get_pass("dce"), Var("x"), PassContext.current())  # type: ignore[arg-type]


def test_function_pass_decorator_maps_over_globals_and_reads_config() -> None:
    from relay_ir.passes import function_pass

    seen: list[object] = []

    @function_pass("rename-params", opt_level=0)
    def rename(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        """``fn (%x) { b } => fn (%x') { b[x := x'] }`` (fresh parameters)."""
        seen.append(ctx.config.get("suffix"))
        from relay_ir.passes._analysis import Renamer
        return Renamer(fn.params).visit(fn)  # type: ignore[return-value]

    mod = rly.parse(HDR + """
def @f(%a: float32) -> float32 { %a }
def @main(%x: float32) -> float32 { @f(%x) }""")
    with PassContext(config={"suffix": "2"}):
        out = rename()(mod)
    assert list(out.functions) == ["f", "main"] and seen == ["2", "2"]
    assert out["f"].params[0] is not mod["f"].params[0]
    rly.assert_structural_equal(out, mod)


def test_well_formed_check_on_inputs() -> None:
    x = Var("x")
    bad = IRModule({"main": Function((x,), Var("free"))})
    with PassContext(instruments=[WellFormedCheck(check_input=True)]):
        with pytest.raises(WellFormednessError, match="before pass `dce`: variable %free"):
            get_pass("dce")(bad)
