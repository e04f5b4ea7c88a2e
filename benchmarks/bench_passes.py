"""Benchmark: the default optimization pipeline vs parsing of the same text.

Program ``mixed-N``: ``def @main(%x: Tensor[(4), float32])`` with N bindings in graph form,
cycling through five kinds so that every stage of the pipeline has work:

* ``%i = add(%(i-1), %x)``              -- kept;
* ``%i = multiply(%(i-1), 1f)``         -- simplify-expr removes it (x*1 -> x);
* ``%i = add(%(i-1), add(1f, 2f))``     -- fold-constant folds the inner add;
* ``%i = negative(%(i-1))`` twice over the same input, summed -- cse shares them.

For each N (10k, 30k, 100k by default) it prints the median of ``--repeat`` runs of
``rly.parse(text)`` and of ``relay_ir.passes.optimize(mod)`` (opt_level 2), the time of the
pipeline per 1,000 bindings (constant when growth is linear) and the ratio optimize/parse.
``--per-pass`` also prints the pass manager's timing table for the largest size. Run::

    .venv/bin/python benchmarks/bench_passes.py                    # 10k, 30k, 100k
    .venv/bin/python benchmarks/bench_passes.py --sizes 2000 --repeat 1   # quick
    .venv/bin/python benchmarks/bench_passes.py --gc-compare 30000       # GC share
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import relay_ir as rly
from relay_ir.passes import PassContext, optimize

HEADER = '#[version = "0.0.5"]\n'


def mixed_program(n: int) -> str:
    """A ``main`` with ``n`` graph bindings of the five kinds in the module docstring."""
    lines = [HEADER + "def @main(%x: Tensor[(4), float32]) {", "  %0 = add(%x, %x);"]
    i, k = 1, 0
    while i < n:
        p = f"%{i - 1}"
        if k == 0:
            lines.append(f"  %{i} = add({p}, %x);")
        elif k == 1:
            lines.append(f"  %{i} = multiply({p}, 1f);")
        elif k == 2:
            lines.append(f"  %{i} = add({p}, add(1f, 2f));")
        elif i + 1 < n:
            lines.append(f"  %{i} = negative({p});")
            lines.append(f"  %{i + 1} = add(%{i}, negative({p}));")
            i += 1
        else:
            lines.append(f"  %{i} = negative({p});")
        i += 1
        k = (k + 1) % 4
    lines += [f"  %{n - 1}", "}"]
    return "\n".join(lines) + "\n"


def measure(text: str, repeat: int) -> tuple[float, float, int, int]:
    """Median seconds of parse and optimize; bindings before and after."""
    from relay_ir.traversal import flatten_lets
    parse_t: list[float] = []
    opt_t: list[float] = []
    before = after = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        mod = rly.parse(text)
        t1 = time.perf_counter()
        out = optimize(mod, opt_level=2)
        t2 = time.perf_counter()
        parse_t.append(t1 - t0)
        opt_t.append(t2 - t1)
        after = len(flatten_lets(out["main"].body)[0])
    before = text.count(" = ")
    return statistics.median(parse_t), statistics.median(opt_t), before, after


def gc_compare(n: int) -> int:
    """Seconds of three passes on ``mixed-n`` with Python's cyclic GC enabled and disabled."""
    import gc
    from relay_ir.passes import get_pass
    mod = get_pass("to-anf")(rly.parse(mixed_program(n)))
    print(f"mixed-{n} after to-anf; seconds with gc on / gc off")
    for name in ("partial-eval", "dead-ref-elim", "lambda-lift"):
        t0 = time.perf_counter()
        get_pass(name)(mod)
        t1 = time.perf_counter()
        gc.disable()
        try:
            get_pass(name)(mod)
        finally:
            gc.enable()
        t2 = time.perf_counter()
        print(f"{name:<14} {t1 - t0:>8.3f} {t2 - t1:>8.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 30_000, 100_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-pass", action="store_true", help="per-pass timing, largest size")
    ap.add_argument("--gc-compare", type=int, default=0, metavar="N",
                    help="only time partial-eval, dead-ref-elim and lambda-lift on mixed-N "
                         "(after to-anf) with the garbage collector on and off")
    args = ap.parse_args(argv)
    if args.gc_compare:
        return gc_compare(args.gc_compare)
    print(f"python {platform.python_version()}, recursion limit {sys.getrecursionlimit()}, "
          f"repeat {args.repeat} (median)")
    print(f"{'program':<14} {'bindings':>9} {'after':>7} {'parse s':>9} {'optimize s':>11} "
          f"{'opt ms/1k':>10} {'opt/parse':>10}")
    for n in args.sizes:
        text = mixed_program(n)
        p, o, before, after = measure(text, args.repeat)
        print(f"{'mixed-' + str(n):<14} {before:>9} {after:>7} {p:>9.3f} {o:>11.3f} "
              f"{1000 * o / n * 1000:>10.1f} {o / p:>10.2f}")
    if args.per_pass and args.sizes:
        from relay_ir.passes.instrument import Timing
        timing = Timing()
        mod = rly.parse(mixed_program(max(args.sizes)))
        with PassContext(opt_level=2, instruments=[timing]):
            optimize(mod, opt_level=2)
        print(timing.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
