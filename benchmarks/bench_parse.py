"""Parse and print throughput on a generated 100,000-line program, beside CPython's ast.parse.

    .venv/bin/python benchmarks/bench_parse.py [--lines 100000] [--repeat 3] [--profile]

The Relay program is one ``def`` whose body is a long chain of graph bindings
(``%N = add(...)``) and let bindings with a realistic mix of operators, attributes, constants,
tuples and projections; it is written in canonical form, so printing the parsed module must
give the input text back (checked). The Python program has the same number of lines, one
assignment per line with the same calls. Each figure is the best of ``--repeat`` runs, all
taken in this one process. ``--profile`` prints the parser's hot spots.
"""
from __future__ import annotations

import argparse
import ast
import gc
import os
import platform
import sys
import time
from typing import Callable

sys.setrecursionlimit(1000)  # NOTE: the default; nothing here may need more

HEADER = '#[version = "0.0.5"]'


def _op_text(kind: int, prev: str, sigil: str, scale: str, minus_one: str) -> str:
    """Operation ``kind`` (0-7) of the generated programs applied to ``prev``; ``sigil`` is
    ``%`` in Relay text and empty in Python."""
    x, w, b = (sigil + v for v in "xwb")
    return {
        0: f"add({prev}, {x})",
        1: f"multiply({prev}, {scale})",
        2: f"nn.relu({prev})",
        3: f"nn.dense({prev}, {w}, units=4)",
        4: f"nn.bias_add({prev}, {b})",
        5: f"tanh({prev})",
        6: f"nn.softmax({prev}, axis=0)",
        7: f"subtract({prev}, {minus_one})",
    }[kind]


def relay_program(n_lines: int) -> str:
    """A canonical Relay module of exactly ``n_lines`` lines."""
    body: list[str] = []
    prev = "%x"
    temp = 0
    let = 0
    k = 0
    budget = n_lines - 4  # header, `def` line, result line, closing brace
    while len(body) < budget:
        room = budget - len(body)
        kind = k % 8
        k += 1
        if kind == 7 and room >= 2:
            body.append(f"%{temp} = ({prev}, %x);")
            body.append(f"%{temp + 1} = %{temp}.0;")
            prev = f"%{temp + 1}"
            temp += 2
            continue
        if kind in (2, 5):
            body.append(f"let %v{let} = {_op_text(kind, prev, '%', '', '')};")
            prev = f"%v{let}"
            let += 1
            continue
        expr = _op_text(kind, prev, "%", f"{0.5 + (k % 5) * 0.25:g}f", "-1f")
        body.append(f"%{temp} = {expr};")
        prev = f"%{temp}"
        temp += 1
    lines = [HEADER,
             "def @main(%x: Tensor[(4, 4), float32], %w: Tensor[(4, 4), float32], "
             "%b: Tensor[(4), float32]) -> Tensor[(4, 4), float32] {"]
    lines += ["  " + b for b in body]
    lines += [f"  add({prev}, %x)", "}"]
    return "\n".join(lines) + "\n"


def python_program(n_lines: int) -> str:
    """The same computation as Python source, ``n_lines`` lines."""
    body: list[str] = []
    prev = "x"
    k = 0
    budget = n_lines - 2
    while len(body) < budget:
        kind = k % 8
        k += 1
        name = f"t{len(body)}"
        if kind == 7 and budget - len(body) >= 2:
            body.append(f"    {name} = ({prev}, x)")
            body.append(f"    t{len(body)} = {name}[0]")
            prev = f"t{len(body) - 1}"
            continue
        expr = _op_text(kind, prev, "", repr(0.5 + (k % 5) * 0.25), "-1.0")
        body.append(f"    {name} = {expr}")
        prev = name
    return "def main(x, w, b):\n" + "\n".join(body) + f"\n    return add({prev}, x)\n"


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Best wall time of ``repeat`` runs (garbage collection off while timing) and a result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            out = fn()
            dt = time.perf_counter() - t0
        finally:
            gc.enable()
        best = min(best, dt)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="show the parser's hot spots")
    args = ap.parse_args(argv)

    import relay_ir as rly

    rtext = relay_program(args.lines)
    ptext = python_program(args.lines)
    assert rtext.count("\n") == args.lines and ptext.count("\n") == args.lines

    t_ast, _ = best_of(lambda: ast.parse(ptext), args.repeat)
    t_parse, mod = best_of(lambda: rly.parse(rtext, "bench.rly"), args.repeat)
    t_print, out = best_of(lambda: rly.astext(mod), args.repeat)
    if out != rtext:
        print("warning: printed text differs from the (canonical) input", file=sys.stderr)

    n = args.lines
    print(f"# bench_parse: {n:,} lines; best of {args.repeat}; Python {platform.python_version()}"
          f" on {platform.machine()} ({os.cpu_count()} CPUs); recursion limit "
          f"{sys.getrecursionlimit()}")
    print(f"| {'stage':<34} | {'seconds':>8} | {'lines/s':>10} | {'x ast.parse time':>16} |")
    print(f"|{'-' * 36}|{'-' * 10}|{'-' * 12}|{'-' * 18}|")
    rows = [("CPython ast.parse (Python source)", t_ast),
            ("rly.parse (parse + IR)", t_parse),
            ("rly.astext (print)", t_print)]
    for name, t in rows:
        print(f"| {name:<34} | {t:>8.3f} | {n / t:>10,.0f} | {t / t_ast:>16.2f} |")
    print(f"print/parse time ratio: {t_print / t_parse:.2f} (below 1 means printing is faster)")
    print(f"round trip exact: {out == rtext}")

    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        rly.parse(rtext, "bench.rly")
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
