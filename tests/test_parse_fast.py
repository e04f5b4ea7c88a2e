"""The parser's fast path (relay_ir/_fastparse.py) against Lark's own driver.

For every program reachable here -- sample files, the texts in the parser test modules, lexer
corner cases, thousands of fuzz mutations and hypothesis-generated programs -- parsing with the
fast path and with ``USE_FAST_PATH = False`` must give the same outcome: isomorphic IR (same
node types, fields, spans on every node, the same sharing of nodes and binders) or the same
ParseError (message and span). Typical valid programs must actually take the fast path.
"""
from __future__ import annotations

import ast
import dataclasses
import enum
import glob
import os
import random
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import relay_ir as rly
import relay_ir.parser as P
from relay_ir._fastparse import STATS
from relay_ir.errors import ParseError
from relay_ir.expr import Call, Expr, Let
from relay_ir.module import IRModule
from relay_ir.span import SourceFile, Span
from relay_ir.traversal import post_order

import strategies
from test_parse_fuzz import SEEDS, _mutate, _samples
from util_scale import shallow_stack, sizes

H = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.rly"))
               + glob.glob(os.path.join(ROOT, "examples", "*.rly"))
               + glob.glob(os.path.join(ROOT, "relay_ir", "std", "*.rly")))


# ----------------------------------------------------------------------------- comparison
def _assert_isomorphic(a: Any, b: Any) -> None:
    """``a`` and ``b`` are the same IR: types, fields, spans, and sharing (a bijection)."""
    pairs: dict[int, tuple[Any, Any]] = {}
    rev: dict[int, Any] = {}
    stack: list[tuple[Any, Any, str]] = [(a, b, "root")]
    while stack:
        x, y, path = stack.pop()
        assert type(x) is type(y), f"{path}: {type(x).__name__} vs {type(y).__name__}"
        if x is None or isinstance(x, (str, int, float, bool, enum.Enum)):
            assert x == y or (x != x and y != y), f"{path}: {x!r} vs {y!r}"
            continue
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, path
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), path
            continue
        if isinstance(x, SourceFile):
            assert (x.name, x.text) == (y.name, y.text), path
            continue
        if isinstance(x, Span):
            assert (x.line, x.column, x.end_line, x.end_column) == \
                (y.line, y.column, y.end_line, y.end_column), f"{path}: span {x} vs {y}"
            stack.append((x.source, y.source, path + ".source"))
            continue
        seen = pairs.get(id(x))
        if seen is not None:
            assert seen[1] is y, f"{path}: sharing differs"
            continue
        assert id(y) not in rev, f"{path}: sharing differs (two nodes map to one)"
        pairs[id(x)] = (x, y)
        rev[id(y)] = x
        if isinstance(x, (tuple, list)):
            assert len(x) == len(y), f"{path}: length {len(x)} vs {len(y)}"
            stack.extend((p, q, f"{path}[{i}]") for i, (p, q) in enumerate(zip(x, y)))
        elif isinstance(x, IRModule):
            for name in ("functions", "global_vars", "type_definitions", "constructors",
                         "attrs"):
                stack.append((dict(getattr(x, name)), dict(getattr(y, name)), f"{path}.{name}"))
            stack.append((x.source, y.source, f"{path}.source"))
        elif isinstance(x, Mapping):
            kx, ky = list(x.keys()), list(y.keys())
            assert kx == ky, f"{path}: keys {kx} vs {ky}"
            assert all(isinstance(k, str) for k in kx), path
            stack.extend((x[k], y[k], f"{path}[{k!r}]") for k in kx)
            if hasattr(x, "type_key"):
                assert x.type_key == y.type_key, path
        elif dataclasses.is_dataclass(x):
            for f in dataclasses.fields(x):
                if f.name == "uid":  # a global creation counter; identity is the bijection
                    continue
                stack.append((getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}"))
        else:
            raise AssertionError(f"{path}: cannot compare {type(x).__name__}")


def _assert_spans_match(a: Any, b: Any) -> None:
    """Walk every expression of both results in parallel and compare their spans."""
    if isinstance(a, IRModule):
        roots = [(a[n], b[n]) for n in a.functions]
    else:
        roots = [(a, b)] if isinstance(a, Expr) else []
    for ra, rb in roots:
        na, nb = list(post_order(ra)), list(post_order(rb))
        assert len(na) == len(nb)
        for x, y in zip(na, nb):
            assert type(x) is type(y)
            sx, sy = x.span, y.span
            assert (sx is None) == (sy is None)
            if sx is not None:
                assert (sx.line, sx.column, sx.end_line, sx.end_column) == \
                    (sy.line, sy.column, sy.end_line, sy.end_column)


def _outcome(fn: Callable, text: str, fast: bool, **kw: Any) -> tuple[str, Any]:
    saved = P.USE_FAST_PATH
    P.USE_FAST_PATH = fast
    try:
        return "ok", fn(text, **kw)
    except ParseError as e:
        return "error", e
    finally:
        P.USE_FAST_PATH = saved


def check_same(fn: Callable, text: str, **kw: Any) -> str:
    """Parse ``text`` both ways; assert the same outcome. Returns "fast", "fallback" or "error"."""
    if kw.get("prelude"):
        from relay_ir.prelude import prelude_module
        prelude_module()  # parsed (and cached) once, outside the counted parses
    before = dict(STATS)
    kind_f, fast = _outcome(fn, text, True, **kw)
    took_fast = STATS["fast"] > before["fast"]
    # every parse that reaches the grammar goes one way or the other (header and comment
    # errors are raised before)
    assert took_fast or STATS["fallback"] > before["fallback"] or kind_f == "error"
    after_fast = dict(STATS)
    kind_s, slow = _outcome(fn, text, False, **kw)
    assert STATS == after_fast, "USE_FAST_PATH = False still used the fast driver"
    assert kind_f == kind_s, (text, kind_f, kind_s, slow if kind_s == "error" else fast)
    if kind_f == "error":
        assert fast.message == slow.message, (text, fast.message, slow.message)
        assert (fast.span is None) == (slow.span is None)
        if fast.span is not None:
            assert (fast.span.line, fast.span.column, fast.span.end_line,
                    fast.span.end_column) == (slow.span.line, slow.span.column,
                                              slow.span.end_line, slow.span.end_column)
        assert str(fast) == str(slow)
        return "error"
    if isinstance(fast, (IRModule, Expr)):
        rly.assert_structural_equal(fast, slow, map_free_vars=True)
    _assert_spans_match(fast, slow)
    _assert_isomorphic(fast, slow)
    return "fast" if took_fast else "fallback"


def check_text_everywhere(text: str) -> list[str]:
    """Run a text through every entry point that could accept it."""
    out = [check_same(rly.parse_expr, text), check_same(rly.parse_type, text)]
    if text.lstrip().startswith("#["):
        out.append(check_same(rly.parse, text))
    else:
        out.append(check_same(rly.parse, H + text))
    return out


# ----------------------------------------------------------------------------- files
@pytest.mark.parametrize("path", FILES, ids=[os.path.relpath(p, ROOT) for p in FILES])
def test_files_take_the_fast_path(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    results = [check_same(rly.parse, text, prelude=prelude) for prelude in (False, True)]
    assert "fast" in results  # with or without the prelude, the file is valid
    assert "fallback" not in results


def test_prelude_flag_and_init_module() -> None:
    base = rly.parse(H + "type List[A] { Cons(A, List[A]), Nil }\n"
                         "def @one() -> int32 { 1 }")
    assert check_same(rly.parse, H + "def @main() { (Cons(@one(), Nil), @one()) }",
                      init_module=base) == "fast"
    assert check_same(rly.parse, H + "def @main() -> int32 { @length(Cons(1, Nil)) }",
                      prelude=True) == "fast"
    assert check_same(rly.parse_expr, "Cons(1, Nil())", init_module=base) == "fast"


# ----------------------------------------------------------------------------- test texts
def _test_module_strings() -> list[str]:
    """Every string constant in the parser/printer test modules (programs and fragments)."""
    out: set[str] = set()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("test_parser.py", "test_parse_errors.py", "test_parse_fuzz.py",
                 "test_printer.py", "test_roundtrip.py", "test_pattern.py",
                 "test_text_hardening.py"):
        path = os.path.join(here, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and 0 < len(node.value) < 5000:
                out.add(node.value)
    return sorted(out)


def test_texts_from_the_parser_tests() -> None:
    texts = _test_module_strings()
    assert len(texts) > 200
    kinds: dict[str, int] = {"fast": 0, "fallback": 0, "error": 0}
    for text in texts:
        for k in check_text_everywhere(text):
            kinds[k] += 1
    assert kinds["fast"] > 150, kinds
    assert kinds["error"] > 150, kinds


LEXER_CASES = [
    # keywords against identifiers and op names
    "free_var %define: int32; %define", "free_var %x: int32; letx(%x)", "fnord(1)",
    "let %let = 1; %let", "let %x = 1; %x", "free_var %matchx: int32; %matchx",
    "match (1) { _ => 2 }", "match? (1) { _ => 2 }", "match?(1) { _ => 2 }",
    "matchx(1)", "match_(1)", "free_var %x: Tensor[(1,), float32]; %x",
    "free_var %x: (Tensor[(1,), float32], int32); %x.1", "if (True) { 1 } else { 2 }",
    "if(False){1}else{2}", "ref_read(ref(1))", "let %r = ref(1); ref_write(%r, 2)",
    "nn.relu(1f)", "nn.conv2d", "True", "False", "(True, False,)",
    # variables and graph variables
    "%0 = 1; %1 = (%0, %0); %1", "%00 = 1; %00", "free_var %x0: int32; %x0",
    "free_var %x/y: int32; %x/y", "%0 = 1; %0.0",
    # numbers, glued minus, suffixes, inf
    "-1", "--1", "-1i64", "1e3f", "1.5e+3f64", "1.5e-3f16", "2.f", "0.5f32", "1i16",
    "inff", "-inff", "inff16", "-inff64", "(inff, -1f, 2f)", "add(1f, -1f)", "1 -1",
    "1 - 1", "1-1", "1 --1", "2*3+4/5-6", "1 < 2", "1 <= 2", "1 == 2", "1 != 2", "1>=2",
    "(1, -2)", "(1,-2)", "1.", "1e", "1x", "1i8", "0x10",
    # metadata references
    'meta[relay.Constant][0]\n#[metadata]\n{"relay.Constant": [{"dtype": "int32", '
    '"shape": [2], "data": "AQAAAAIAAAA="}]}',
    "meta", "meta[relay.Constant]", "free_var %x: Tensor[(meta[x][0]), int32]; %x",
    # whitespace, comments, strings over several lines
    "\n\n  1  \n", "\t(1,\t2)\t", "(1,\r\n 2)\r\n", "(1,\r 2)", "/* a */ 1 /* b /* c */ d */",
    "// line\n1 // end", "1 /* unclosed", "1 */", "/**/1/**/", "/* x\n y */ (1,\n 2)",
    'fn (%x, s="a\nb") {\n %x }', 'fn (%x, s="a\nb", t="c") { %x }', 'fn (%x, s="") { %x }',
    'sum(1f, axis=[0], keepdims=True, exclude=False)', 'strided_slice(1f, begin=[0], end=[1])',
    '#[version = "0.0.5"]\n1', '#[version = "0.0.4"]\n1', "#[metadata]\n{}", "#[foo]",
    # types
    "Tensor[(1, ?, 3), float32]", "fn [A](A) -> A", "fn (int32, (int32,)) -> (int32, int32)",
    "ref(int32)", "_", "(int32)", "()", "fn [n](Tensor[(n, 2*n + 1, n - 1), int8]) -> int8",
    "fn [n, m](Tensor[(n*m, -n), int8]) -> int8", "List[int32]", "bool", "uint8", "float16",
    # empty and odd input
    "", " ", "\n", ";", "()", "(", ")", "{}", "{ 1 }", "fn () { 1 }", "@f", "%", "@", "#",
    "\u00e9", "1 $ 2",
]


def test_lexer_corner_cases() -> None:
    kinds: dict[str, int] = {"fast": 0, "fallback": 0, "error": 0}
    for text in LEXER_CASES:
        for k in check_text_everywhere(text):
            kinds[k] += 1
    assert kinds["fast"] > 60, kinds


def test_spans_after_multiline_tokens_and_crlf() -> None:
    text = (H + "def @main(%x: float32) {\r\n  /* a\r\n  b */ let %y = add(%x, 1f);\r\n"
            "  %0 = sum(%y, axis=[0]);\n  %0\n}\n")
    assert check_same(rly.parse, text) == "fast"
    e_text = 'fn (%x, s="one\ntwo") {\n  add(%x,\n    1f)\n}'
    assert check_same(rly.parse_expr, e_text) == "fast"
    f = rly.parse_expr(e_text)
    body = f.body
    assert isinstance(body, Call)
    assert (body.span.line, body.span.column, body.span.end_line, body.span.end_column) == \
        (3, 3, 4, 8)
    assert (f.span.line, f.span.column, f.span.end_line, f.span.end_column) == (1, 1, 5, 2)


# ----------------------------------------------------------------------------- fuzzing
def test_fuzzed_programs_agree() -> None:
    rng = random.Random(20261121)
    samples = _samples() + list(SEEDS)
    for path in FILES:
        with open(path, encoding="utf-8") as f:
            samples.append(f.read())
    kinds: dict[str, int] = {"fast": 0, "fallback": 0, "error": 0}
    for _ in range(2500):
        text = _mutate(rng, rng.choice(samples))
        if text.lstrip().startswith("#["):
            kinds[check_same(rly.parse, text)] += 1
            kinds[check_same(rly.parse_expr, text)] += 1
        else:
            kinds[check_same(rly.parse_expr, text)] += 1
            kinds[check_same(rly.parse, H + text)] += 1
    assert kinds["fast"] > 200 and kinds["error"] > 1000, kinds


def test_fuzzed_types_agree() -> None:
    rng = random.Random(5)
    seeds = ["Tensor[(1, ?, n), float32]", "fn (int32, (int32,)) -> List[A]", "ref(_)",
             "fn [A](A) -> A", "(int32, Tensor[(2), bool])", "fn [n](Tensor[(n + 1,), int8])"
             " -> Tensor[(2*n,), int8]"]
    kinds: dict[str, int] = {"fast": 0, "fallback": 0, "error": 0}
    for _ in range(500):
        kinds[check_same(rly.parse_type, _mutate(rng, rng.choice(seeds)))] += 1
    assert kinds["fast"] > 50, kinds


# ----------------------------------------------------------------------------- generated
@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(strategies.modules())
def test_generated_modules_agree(mod: IRModule) -> None:
    assert check_same(rly.parse, rly.astext(mod)) == "fast"


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(strategies.exprs())
def test_generated_exprs_agree(e: Expr) -> None:
    # NOTE: "error" is accepted: whether every printed expression re-parses is the round-trip
    # tests' business; here both paths must agree either way.
    assert check_same(rly.parse_expr, rly.astext(e)) in ("fast", "error")


@settings(max_examples=100, deadline=None, database=None)
@given(strategies.types())
def test_generated_types_agree(t: Any) -> None:
    assert check_same(rly.parse_type, rly.astext(t)) == "fast"


# ----------------------------------------------------------------------------- scale
@sizes(3_000, 20_000)
def test_long_chains_take_the_fast_path_without_recursion(n: int) -> None:
    lines = [H, "def @main(%x: float32) {", "%0 = add(%x, 1f);"]
    lines += [f"%{i} = multiply(%{i - 1}, 2f);" for i in range(1, n)]
    lines += [f"%{n - 1}", "}"]
    before = STATS["fast"]
    with shallow_stack():
        m = rly.parse("\n".join(lines))
    assert STATS["fast"] == before + 1
    body, steps = m["main"].body, 0
    while isinstance(body, Call):
        body = body.args[0]
        steps += 1
    assert steps == n and body is m["main"].params[0]
    text = "free_var %x0: float32;\n" + "".join(
        f"let %x{i + 1} = (%x{i},);\n" for i in range(n)) + f"%x{n}"
    with shallow_stack():
        e = rly.parse_expr(text)
    assert STATS["fast"] == before + 2
    depth = 0
    while isinstance(e, Let):
        e = e.body
        depth += 1
    assert depth == n
    d = 3000
    with shallow_stack():
        nested = rly.parse_expr("fn () {" * d + "(" * d + "1" + ")" * d + "}" * d)
    assert STATS["fast"] == before + 3
    assert nested.params == ()


def test_errors_fall_back_to_lark() -> None:
    before = dict(STATS)
    with pytest.raises(ParseError, match="has not been previously declared"):
        rly.parse_expr("let %x = 1;\n%z")
    with pytest.raises(ParseError, match="expected a local variable"):
        rly.parse_expr("let x = 1; ()")
    assert STATS["fallback"] == before["fallback"] + 2
    assert STATS["fast"] == before["fast"]


def test_parameter_attributes_and_dtype_aliases_take_the_fast_path() -> None:
    vd = ('#[metadata]\n{"VirtualDevice": [{"device_type_int": 1, "virtual_device_id": 0, '
          '"memory_scope": ""}]}')
    text = (H + "def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float], "
            "%y {}: int, %z: _, virtual_device=meta[VirtualDevice][0]) { %x }\n" + vd)
    assert check_same(rly.parse, text) == "fast"
    assert check_same(rly.parse_expr, "let %_ : _ = (); ()") == "fast"
    assert check_same(rly.parse_expr, "fn (%x {a=1}: Tensor[(2), float33]) { %x }") == "error"


def test_state_lexers_are_larks_scanners() -> None:
    """The fast path writes each state's regex from Lark's terminals without building Lark's
    scanner (one regex compile instead of two): the same alternation, flags and keyword
    remaps as Lark's scanner, for every one of Lark's per-state lexers."""
    import re

    from relay_ir._fastparse import _lexer_source
    frontend = P._lark().parser
    lexers = getattr(frontend.lexer, "lexer", frontend.lexer).lexers
    seen: set[int] = set()
    for bl in lexers.values():
        if id(bl) in seen:
            continue
        seen.add(id(bl))
        pattern, flags, callbacks = _lexer_source(bl, from_scanner=False)
        lark_pattern, lark_flags, lark_callbacks = _lexer_source(bl, from_scanner=True)
        assert pattern == lark_pattern
        assert re.compile(pattern, flags).flags == lark_flags
        assert set(callbacks) == set(lark_callbacks)
        for name, cb in callbacks.items():
            assert [(t.name, t.pattern.value) for t in cb.scanner.terminals] == \
                [(t.name, t.pattern.value) for t in lark_callbacks[name].scanner.terminals]
    assert len(seen) > 50
