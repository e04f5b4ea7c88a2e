"""Fuzzing and scale: only ParseError escapes, and huge / deep programs parse iteratively."""
from __future__ import annotations

import os
import random
import re


from relay_ir.errors import ParseError
from relay_ir.expr import Call, Constant, Let, Tuple, Var
from relay_ir.parser import parse, parse_expr, parse_type
from util_scale import shallow_stack, sizes

DATA = os.path.join(os.path.dirname(__file__), "data")
H = '#[version = "0.0.5"]\n'

SEEDS = [
    H + "def @main(%x: float32) -> float32 { let %y = add(%x, 1f); %y * 2f }",
    "free_var %x: Tensor[(1, 3), float32]; sum(%x, axis=[1], keepdims=True)",
    "%0 = (); %1 = 1; (%0, %0, %1,).2",
    "fn [A, n](%x: A, %y: Tensor[(n, 2*n + 1), int8]) -> A { if (True) { %x } else { %x } }",
    "let %r = ref(1i64); ref_write(%r, -2i64); ref_read(%r)",
    "match? (1, 2) { (%a, _) => %a, _ => { (); 0 } }",
    'fn (%x, Primitive=1, Composite="x") { /* c /* n */ */ %x // l\n }',
    "meta[relay.Constant][0]\n#[metadata]\n"
    '{"relay.Constant": [{"dtype": "int32", "shape": [1], "data": "AQAAAA=="}]}',
]
TOKENS = ["(", ")", "{", "}", "[", "]", ",", ";", "=", "=>", "->", ".", ":", "%x", "%0", "@f",
          "let", "fn", "if", "else", "match", "match?", "type", "def", "1", "1.5", "-1", "2f",
          "inff", "True", "_", "add", "Cons", "Tensor", "#[", "/*", "*/", "//", '"', "meta",
          "meta[relay.Constant][0]", "free_var", "ref", "+", "-", "*", "/", "<=", "==", "?",
          "\n", "\r", "\u00e9", "$", "%", "@", "#", "0.1", "i64", "f16", "\\"]


def _samples() -> list[str]:
    out = list(SEEDS)
    for name in sorted(os.listdir(DATA)):
        if name.endswith(".rly"):
            with open(os.path.join(DATA, name)) as f:
                out.append(f.read())
    return out


def _mutate(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        n = len(text)
        i = rng.randrange(n + 1)
        if kind == 0 and n:  # delete characters
            j = min(n, i + rng.randint(1, 4))
            text = text[:i] + text[j:]
        elif kind == 1:  # insert a token
            text = text[:i] + rng.choice(TOKENS) + text[i:]
        elif kind == 2 and n > 2:  # swap two characters
            i = min(i, n - 2)
            text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
        elif kind == 3:  # delete / duplicate / swap whole tokens
            toks = re.findall(r"\s+|[%@]?\w+|.", text)
            if len(toks) > 1:
                a, b = rng.randrange(len(toks)), rng.randrange(len(toks))
                op = rng.randrange(3)
                if op == 0:
                    del toks[a]
                elif op == 1:
                    toks.insert(a, toks[b])
                else:
                    toks[a], toks[b] = toks[b], toks[a]
                text = "".join(toks)
        elif kind == 4 and n:  # replace a character
            text = text[:i] + rng.choice("(){}[],;=.%@:-+*/<>!?_0aZ \n\"#") + text[i + 1:]
        else:  # truncate
            text = text[:i]
    return text


def _check(fn, text: str) -> None:
    try:
        fn(text)
    except ParseError as e:
        assert "internal parser error" not in e.message, (text, e.message)
        assert e.span is None or e.span.line >= 1
        str(e)  # rendering the caret never fails


def test_fuzz_only_parse_errors_escape():
    rng = random.Random(1234)
    samples = _samples()
    count = 0
    for _ in range(3000):
        base = rng.choice(samples)
        text = _mutate(rng, base)
        if text.lstrip().startswith("#[version"):
            _check(parse, text)
            _check(parse_expr, text)
        else:
            _check(parse_expr, text)
            _check(parse, H + text)
        count += 1
    assert count == 3000


def test_fuzz_types():
    rng = random.Random(99)
    seeds = ["Tensor[(1, ?, n), float32]", "fn (int32, (int32,)) -> List[A]", "ref(_)",
             "fn [A](A) -> A", "(int32, Tensor[(2), bool])"]
    for _ in range(600):
        _check(parse_type, _mutate(rng, rng.choice(seeds)))


def test_random_bytes():
    rng = random.Random(7)
    alphabet = "(){}[],;=.%@:-+*/<>!?_0123456789abcfimnlrtx \n\t\"#$\u00e9"
    for _ in range(600):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        _check(parse_expr, text)


# ----------------------------------------------------------------------------- scale
@sizes(3_000, 100_000)
def test_long_let_chain(n):
    text = "free_var %x0: float32;\n" + "".join(
        f"let %x{i + 1} = (%x{i},);\n" for i in range(n)) + f"%x{n}"
    with shallow_stack():
        e = parse_expr(text)
    depth = 0
    first = e
    while isinstance(e, Let):
        prev = e
        e = e.body
        depth += 1
    assert depth == n
    assert e is prev.var and prev.var.name_hint == f"x{n}"
    assert first.value.fields[0].name_hint == "x0"
    assert first.body.value.fields[0] is first.var


@sizes(3_000, 100_000)
def test_long_graph_chain(n):
    lines = [H, "def @main(%x: float32) {", "%0 = add(%x, 1f);"]
    lines += [f"%{i} = add(%{i - 1}, 1f);" for i in range(1, n)]
    lines += [f"%{n - 1}", "}"]
    with shallow_stack():
        m = parse("\n".join(lines))
    body = m["main"].body
    steps = 0
    while isinstance(body, Call):
        body = body.args[0]
        steps += 1
    assert steps == n and body is m["main"].params[0]


def test_deeply_nested_expressions():
    d = 5000
    e = parse_expr("free_var %x: float32;" + "add(" * d + "%x" + ", 1f)" * d)
    steps = 0
    while isinstance(e, Call):
        e = e.args[0]
        steps += 1
    assert steps == d and isinstance(e, Var)
    p = parse_expr("(" * d + "7" + ")" * d)
    assert isinstance(p, Constant) and int(p.data) == 7
    t = parse_expr("(" * d + "7," + ")" * d)
    depth = 0
    while isinstance(t, Tuple):
        t = t.fields[0]
        depth += 1
    assert depth == 1  # only the innermost parentheses hold a comma
    b = parse_expr("1" + " + 1" * d)
    steps = 0
    while isinstance(b, Call):
        b = b.args[0]
        steps += 1
    assert steps == d
    f = parse_expr("fn () {" * 2000 + "1" + "}" * 2000)
    assert f.params == ()
