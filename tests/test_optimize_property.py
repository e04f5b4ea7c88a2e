"""Property: ``optimize(m)`` prints text that re-parses, type-checks and computes the same values.

Checked on every example (examples/*.rly), every program of the test suite that has a
``@main`` (tests/data/*.rly and the Relay texts embedded in tests/test_*.py, collected with
``ast``; programs that do not parse, type-check or take generated inputs are skipped and
counted), and at least 200 well-typed generated modules per run (``typed_modules`` below:
lets, closures, higher-order generic globals, recursion, ``if``, ``match`` over a generic list
ADT, references, tuples, broadcasting ops).

For each program ``m`` with inputs ``args``: ``t = astext(optimize(m))`` parses,
``InferType`` accepts it, and ``evaluate(parse(t), *args)`` equals ``evaluate(m, *args)``
(a program that fails at run time must fail after optimization too).
"""
from __future__ import annotations

import ast
import glob
import os
import random
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay_ir as rly
from relay_ir import passes
from relay_ir.errors import DiagnosticError
from relay_ir.expr import (Call, Clause, Expr, Function, If, Let, Match, PatternConstructor,
                           PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                           RefWrite, Tuple, TupleGetItem, Var, const)
from relay_ir.module import IRModule
from relay_ir.op._rules import make_call
from relay_ir.passes import InferType
from relay_ir.runtime import evaluate
from relay_ir.runtime.values import ADTValue
from relay_ir.ty import FuncType, TensorType, TupleType, Type, TypeCall

from util_diff import assert_values_close, random_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HDR = '#[version = "0.0.5"]\n'


# Suite programs that never return, on purpose (type-inference tests of endless tail
# recursion): they are optimized, printed, re-parsed and re-checked, but not run. (Written
# without their "def ", or this file's own program collection would take them in.)
ENDLESS = ("@main(%x: float32) -> float32 { @main(%x) }",)

DEPTH = 20_000   # NOTE: frame limit of every run: endless non-tail recursions fail fast


def never_returns(text: str) -> bool:
    return any("def " + body in text for body in ENDLESS)


def check_optimize_roundtrip(mod: IRModule, args: tuple, what: str, run: bool = True) -> None:
    """optimize -> astext -> parse -> InferType -> evaluate equals evaluate of ``mod`` (with
    ``run=False``, everything but the evaluation)."""
    want: Any = None
    failed: DiagnosticError | None = None
    if run:
        try:
            want = evaluate(mod, *args, max_depth=DEPTH)
        except DiagnosticError as e:
            failed = e
    out = passes.optimize(mod)
    text = rly.astext(out)
    try:
        again = InferType()(rly.parse(text, f"optimized {what}"))
    except DiagnosticError as e:
        raise AssertionError(f"{what}: the optimized program does not re-check: {e}\n"
                             f"{text}") from None
    if not run:
        return
    if failed is not None:
        try:
            evaluate(again, *args, max_depth=DEPTH)
        except DiagnosticError:
            return
        # NOTE: the frame limit may stop the original and not the optimized program (a
        # recursion turned into a loop); any other failure must remain
        assert "recursion too deep" in failed.message, \
            f"{what}: the original fails ({failed.message}) but the optimized program runs"
        return
    got = evaluate(again, *args, max_depth=DEPTH)
    assert_values_close(want, got, what=f"{what} (optimized)")


# ----------------------------------------------------------------------------- programs
def _strings_with_main(path: str) -> list[str]:
    """The string literals of a test module that define ``@main`` (header added if missing)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                "def @main" in node.value:
            s = node.value
            out.append(s if s.lstrip().startswith("#[version") else HDR + s)
    return out


def _suite_programs() -> list[tuple[str, str]]:
    progs = []
    for p in sorted(glob.glob(os.path.join(ROOT, "examples", "*.rly"))) + \
            sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.rly"))):
        with open(p, encoding="utf-8") as fh:
            progs.append((os.path.relpath(p, ROOT), fh.read()))
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "test_*.py"))):
        for i, text in enumerate(_strings_with_main(p)):
            progs.append((f"{os.path.relpath(p, ROOT)}#{i}", text))
    return progs


def _load(text: str, name: str) -> IRModule | None:
    """The program typed, with or without the prelude; None if it is not a valid program."""
    for prelude in (False, True):
        try:
            mod = rly.parse(text, name, prelude=prelude)
            InferType()(mod)
            return mod
        except DiagnosticError:
            continue
    return None


def test_every_example_and_suite_program() -> None:
    checked, skipped, endless = [], [], []
    for name, text in _suite_programs():
        mod = _load(text, name)
        if mod is None or "main" not in mod:
            skipped.append(name)
            continue
        try:
            args = random_inputs(mod, seed=1)
        except ValueError:  # NOTE: ADT / function / reference parameters: no generated inputs
            skipped.append(name)
            continue
        if never_returns(text):
            check_optimize_roundtrip(mod, args, name, run=False)
            endless.append(name)
            continue
        check_optimize_roundtrip(mod, args, name)
        checked.append(name)
    assert len(endless) == len(ENDLESS), endless
    examples = [n for n in checked if n.startswith("examples")]
    assert len(examples) == len(glob.glob(os.path.join(ROOT, "examples", "*.rly")))
    assert len(checked) >= 100, (len(checked), skipped)


# ----------------------------------------------------------------------------- generated
LIB = HDR + """
type L[A] { C(A, L[A]), N }
def @fold[A, B](%f: fn (A, B) -> A, %acc: A, %xs: L[B]) -> A {
  match (%xs) { C(%x, %r) => @fold(%f, %f(%acc, %x), %r), N => %acc }
}
def @length[T](%xs: L[T]) -> int32 { @fold(fn (%a: int32, %x: T) { %a + 1 }, 0, %xs) }
def @map[A, B](%f: fn (A) -> B, %xs: L[A]) -> L[B] {
  match (%xs) { C(%x, %r) => C(%f(%x), @map(%f, %r)), N => N }
}
def @apply[A](%f: fn (A) -> A, %x: A) -> A { %f(%x) }
def @loop(%i: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {
  if (%i <= 0) { %acc } else { @loop(%i - 1, add(multiply(%acc, 0.5f), 1f)) }
}
"""

F2 = TensorType((2,), "float32")
FS = TensorType((), "float32")
I32 = TensorType((), "int32")
BOOL = TensorType((), "bool")
SIMPLE = ("F2", "FS", "I", "B")


class _Draw:
    """``draw(strategy)`` for the few strategies the generator uses, from a seeded RNG.

    NOTE: one hypothesis draw (the seed) per module instead of hundreds of small draws keeps
    generation ~10x cheaper, so 200 modules fit in a few seconds.
    """

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def __call__(self, spec: tuple) -> Any:
        kind = spec[0]
        if kind == "bool":
            return self.rng.random() < 0.5
        if kind == "int":
            return self.rng.randint(spec[1], spec[2])
        if kind == "pick":
            return self.rng.choice(spec[1])
        if kind == "ints":
            return [self.rng.randint(spec[1], spec[2]) for _ in range(spec[3])]
        raise ValueError(kind)


def _bool() -> tuple:
    return ("bool",)


def _int(lo: int, hi: int) -> tuple:
    return ("int", lo, hi)


def _pick(items: Any) -> tuple:
    return ("pick", list(items))


class _Gen:
    """Draws well-typed expressions of a given type tag over the library module ``LIB``."""

    def __init__(self, draw: Callable, lib: IRModule):
        self.draw = draw
        self.lib = lib
        self.gv = lib.global_vars
        self.C = lib.get_constructor("C")
        self.N = lib.get_constructor("N")
        self.LF = TypeCall(lib.type_definitions["L"].header, (FS,))
        self.helpers: list[tuple[Any, list[str], str]] = []  # (GlobalVar, param tags, ret tag)

    def ty(self, tag: Any) -> Type:
        if isinstance(tag, tuple):
            if tag[0] == "fn":
                return FuncType((self.ty(tag[1]),), self.ty(tag[2]))
            return TupleType((self.ty(tag[1]), self.ty(tag[2])))
        return {"F2": F2, "FS": FS, "I": I32, "B": BOOL, "LF": self.LF}[tag]

    def var(self, name: str, tag: Any) -> Var:
        annotate = self.draw(_bool())
        return Var(name, self.ty(tag) if annotate else None)

    def const(self, tag: str) -> Expr:
        d = self.draw
        if tag == "F2":
            vals = d(("ints", -4, 4, 2))
            return const(np.asarray(vals, "float32") / 2)
        if tag == "FS":
            return const(d(_int(-4, 4)) / 2, "float32")
        if tag == "I":
            return const(d(_int(-3, 5)), "int32")
        return const(d(_bool()), "bool")

    def leaf(self, tag: Any, env: list[tuple[Var, Any]]) -> Expr:
        cands = [v for v, t in env if t == tag]
        if cands and self.draw(_bool()):
            return self.draw(_pick(cands))
        if tag in SIMPLE:
            return self.const(tag)
        if tag == "LF":  # NOTE: never a bare `N`: `@length(N)` leaves its type open
            return Call(self.C, (self.const("FS"), Call(self.N, ())))
        if tag[0] == "tup":
            return Tuple((self.leaf(tag[1], env), self.leaf(tag[2], env)))
        p = Var("p", self.ty(tag[1]))
        return Function((p,), self.leaf(tag[2], env + [(p, tag[1])]))

    def gen(self, tag: Any, env: list[tuple[Var, Any]], depth: int) -> Expr:
        d = self.draw
        if depth <= 0:
            return self.leaf(tag, env)
        kinds = ["leaf", "let", "let", "if", "proj", "closure", "ref", "match", "tmatch", "op",
                 "op"]
        if tag in ("F2", "FS", "I"):
            kinds.extend(("apply", "share", "rec", "effect"))
        if any(r == tag for _, _, r in self.helpers):
            kinds.append("helper")
        kind = d(_pick(kinds))
        sub = depth - 1
        if kind == "leaf":
            return self.leaf(tag, env)
        if kind == "let":
            t2 = d(_pick(SIMPLE + ("LF", ("tup", "F2", "I"), ("fn", "FS", "FS"))))
            v = self.var(d(_pick(["a", "b", "v", "x"])), t2)
            value = self.gen(t2, env, sub)
            return Let(v, value, self.gen(tag, env + [(v, t2)], sub))
        if kind == "if":
            return If(self.gen("B", env, sub), self.gen(tag, env, sub), self.gen(tag, env, sub))
        if kind == "proj":
            other = d(_pick(SIMPLE))
            first = d(_bool())
            a, b = self.gen(tag, env, sub), self.gen(other, env, 0)
            return TupleGetItem(Tuple((a, b) if first else (b, a)), 0 if first else 1)
        if kind == "closure":
            t2 = d(_pick(SIMPLE))
            p = self.var("p", t2)
            fn = Function((p,), self.gen(tag, env + [(p, t2)], sub))
            if d(_bool()):
                return Call(fn, (self.gen(t2, env, sub),))
            f = Var("f")
            return Let(f, fn, Call(f, (self.gen(t2, env, sub),)))
        if kind == "ref":
            r = Var("r")
            w = Var("w")
            return Let(r, RefCreate(self.gen(tag, env, sub)),
                       Let(w, RefWrite(r, self.gen(tag, env, sub)), RefRead(r)))
        if kind == "match":
            h, t = self.var("h", "FS"), self.var("t", "LF")
            arms = [Clause(PatternConstructor(self.C, (PatternVar(h), PatternVar(t))),
                           self.gen(tag, env + [(h, "FS"), (t, "LF")], sub))]
            if d(_bool()):
                arms.append(Clause(PatternConstructor(self.N, ()), self.gen(tag, env, sub)))
            else:
                arms.append(Clause(PatternWildcard(), self.gen(tag, env, sub)))
            return Match(self.gen("LF", env, sub), tuple(arms))
        if kind == "share":  # a pure node used twice (graph form)
            e = self.op(tag, env, 0)
            return make_call("add", e, e)
        if kind == "rec":  # a recursive let-bound closure
            rec, i = Var("rec"), Var("i", I32)
            step = make_call("add", Call(rec, (make_call("subtract", i, const(1)),)),
                             self.gen(tag, env + [(i, "I")], sub))
            fn = Function((i,), If(make_call("less_equal", i, const(0)),
                                   self.gen(tag, env + [(i, "I")], sub), step), self.ty(tag))
            count = [v for v, t in env if t == "I" and v.name_hint == "n"]
            n = d(_pick(count)) if count and d(_bool()) else const(d(_int(0, 3)))
            return Let(rec, fn, Call(rec, (n,)))
        if kind == "effect":  # a closure writing a reference, called on one branch
            r, f, w, y = Var("r"), Var("f"), Var("w"), Var("y")
            p = Var("p", self.ty(tag))
            body = Let(w, RefWrite(r, self.gen(tag, env + [(p, tag)], sub)),
                       self.gen(tag, env + [(p, tag)], sub))
            call = If(self.gen("B", env, sub), Call(f, (self.gen(tag, env, sub),)),
                      self.gen(tag, env, sub))
            out = make_call("add", RefRead(r), y) if d(_bool()) else RefRead(r)
            return Let(r, RefCreate(self.gen(tag, env, sub)),
                       Let(f, Function((p,), body), Let(y, call, out)))
        if kind == "tmatch":
            a, b = self.var("a", tag), self.var("b", "I")
            data = Tuple((self.gen(tag, env, sub), self.gen("I", env, sub)))
            return Match(data, (Clause(PatternTuple((PatternVar(a), PatternVar(b))),
                                       self.gen(tag, env + [(a, tag), (b, "I")], sub)),))
        if kind == "apply":
            p = Var("p", self.ty(tag))
            fn = Function((p,), self.gen(tag, env + [(p, tag)], sub))
            return Call(self.gv["apply"], (fn, self.gen(tag, env, sub)))
        if kind == "helper":
            gv, ptags, _ = d(_pick([h for h in self.helpers if h[2] == tag]))
            return Call(gv, tuple(self.gen(t, env, sub) for t in ptags))
        return self.op(tag, env, sub)

    def op(self, tag: Any, env: list[tuple[Var, Any]], sub: int) -> Expr:
        d = self.draw
        g = self.gen
        if tag == "F2":
            k = d(_pick(["bin", "bin", "bcast", "un", "loop", "map_sum"]))
            if k == "bin":
                return make_call(d(_pick(["add", "subtract", "multiply", "maximum"])),
                                 g("F2", env, sub), g("F2", env, sub))
            if k == "bcast":
                return make_call(d(_pick(["add", "multiply"])),
                                 g("FS", env, sub), g("F2", env, sub))
            if k == "un":
                return make_call(d(_pick(["negative", "tanh", "abs"])),
                                 g("F2", env, sub))
            if k == "loop":
                count = d(_pick([v for v, t in env if t == "I" and v.name_hint == "n"]
                                          or [const(2)]))
                if d(_bool()):
                    count = const(d(_int(0, 3)))
                return Call(self.gv["loop"], (count, g("F2", env, sub)))
            return make_call("add", g("F2", env, sub), g("FS", env, sub))
        if tag == "FS":
            k = d(_pick(["bin", "sum", "cast", "fold"]))
            if k == "bin":
                return make_call(d(_pick(["add", "subtract", "multiply", "minimum"])),
                                 g("FS", env, sub), g("FS", env, sub))
            if k == "sum":
                return make_call("sum", g("F2", env, sub))
            if k == "cast":
                return make_call("cast", g("I", env, sub), dtype="float32")
            a, x = Var("a", FS), Var("x", FS)
            fn = Function((a, x), make_call("add", a, x))
            return Call(self.gv["fold"], (fn, g("FS", env, sub), g("LF", env, sub)))
        if tag == "I":
            k = d(_pick(["bin", "length"]))
            if k == "bin":
                return make_call(d(_pick(["add", "subtract"])),
                                 g("I", env, sub), g("I", env, sub))
            return Call(self.gv["length"], (g("LF", env, sub),))
        if tag == "B":
            k = d(_pick(["cmp_f", "cmp_i", "not"]))
            if k == "not":
                return make_call("logical_not", g("B", env, sub))
            t = "FS" if k == "cmp_f" else "I"
            return make_call(d(_pick(["less", "greater_equal", "equal"])),
                             g(t, env, sub), g(t, env, sub))
        if tag == "LF":
            if d(_bool()):
                return Call(self.C, (g("FS", env, sub), g("LF", env, sub)))
            p = Var("p", FS)
            fn = Function((p,), g("FS", env + [(p, "FS")], sub))
            return Call(self.gv["map"], (fn, g("LF", env, sub)))
        if tag[0] == "tup":
            return Tuple((g(tag[1], env, sub), g(tag[2], env, sub)))
        p = Var("p", self.ty(tag[1]))  # NOTE: an unused closure needs its parameter's type
        return Function((p,), g(tag[2], env + [(p, tag[1])], sub))


_LIB_CACHE: list[IRModule] = []


def _lib() -> IRModule:
    if not _LIB_CACHE:
        _LIB_CACHE.append(rly.parse(LIB, "lib"))
    return _LIB_CACHE[0]


def typed_module(seed: int, depth: int = 3) -> tuple[IRModule, tuple]:
    """A well-typed module (LIB + helpers + ``@main``) and inputs for ``@main``, from ``seed``."""
    draw = _Draw(seed)
    lib = _lib()
    gen = _Gen(draw, lib)
    mod = lib
    for i in range(draw(_int(0, 2))):
        ptags = [draw(_pick(SIMPLE)) for _ in range(draw(_int(1, 2)))]
        ret = draw(_pick(SIMPLE))
        params = [Var(f"q{j}", gen.ty(t)) for j, t in enumerate(ptags)]
        body = gen.gen(ret, list(zip(params, ptags)), depth - 1)
        name = f"h{i}"
        mod = mod.with_function(name, Function(tuple(params), body, gen.ty(ret)))
        gen.helpers.append((mod.get_global_var(name), ptags, ret))
    gen.gv = mod.global_vars
    ptags = ["F2", "FS", "I", "B", "LF"]
    names = ["x", "s", "n", "b", "xs"]
    params = [Var(nm, gen.ty(t)) for nm, t in zip(names, ptags)]
    ret = draw(_pick(SIMPLE + (("tup", "F2", "I"), ("tup", "FS", "B"))))
    body = gen.gen(ret, list(zip(params, ptags)), depth)
    mod = mod.with_function("main", Function(tuple(params), body))
    rng = np.random.default_rng(seed)
    items = [np.asarray(v, "float32") for v in rng.integers(-4, 5, draw(_int(0, 4))) / 2]
    xs: Any = ADTValue(gen.N, ())
    for it in reversed(items):
        xs = ADTValue(gen.C, (it, xs))
    args = (rng.standard_normal(2).astype("float32"),
            np.asarray(rng.standard_normal(), "float32"),
            np.asarray(rng.integers(-1, 5), "int32"),
            np.asarray(bool(rng.integers(0, 2))),
            xs)
    return mod, args


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32 - 1))
def test_generated_modules(seed: int) -> None:
    mod, args = typed_module(seed)
    check_optimize_roundtrip(mod, args, f"generated module (seed {seed})")


def test_the_check_catches_a_wrong_optimizer(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = rly.parse(HDR + "def @main(%s: float32) { add(%s, 1f) }")
    args = (np.asarray(2.0, "float32"),)
    check_optimize_roundtrip(mod, args, "right")
    wrong = rly.parse(HDR + "def @main(%s: float32) { %s }")
    monkeypatch.setattr(passes, "optimize", lambda m: wrong)
    with pytest.raises(AssertionError):
        check_optimize_roundtrip(mod, args, "wrong")
