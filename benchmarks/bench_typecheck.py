"""Benchmark: type inference vs parsing of the same text.

Programs:

* ``chain-N``: ``def @main(%x: Tensor[(4), float32])`` with N let bindings
  ``let %tI = add(%t(I-1), %x);`` (N = 10k, 30k, 100k by default);
* ``mlp-200``: a 200-layer MLP, each layer ``nn.relu(nn.bias_add(nn.dense(%h, %wI), %bI))``
  with every weight and bias a parameter of ``@main`` (dense 64x64, batch 8).

For each, the median of ``--repeat`` runs of ``rly.parse(text)`` and of ``InferType()(mod)``,
the ratio infer/parse, and the time per binding (linear growth shows as a constant per-binding
time). Run::

    .venv/bin/python benchmarks/bench_typecheck.py            # 10k, 30k, 100k + MLP
    .venv/bin/python benchmarks/bench_typecheck.py --sizes 1000 --repeat 1   # quick
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import relay_ir as rly
from relay_ir.passes import InferType

HEADER = '#[version = "0.0.5"]\n'


def chain_program(n: int) -> str:
    """A ``main`` with ``n`` let bindings of ``add``."""
    lines = [HEADER + "def @main(%x: Tensor[(4), float32]) {", "  let %t0 = add(%x, %x);"]
    lines += [f"  let %t{i} = add(%t{i - 1}, %x);" for i in range(1, n)]
    lines += [f"  %t{n - 1}", "}"]
    return "\n".join(lines) + "\n"


def mlp_program(layers: int, width: int = 64, batch: int = 8) -> str:
    """A ``layers``-deep MLP (dense + bias_add + relu per layer)."""
    params = [f"%x: Tensor[({batch}, {width}), float32]"]
    for i in range(layers):
        params.append(f"%w{i}: Tensor[({width}, {width}), float32]")
        params.append(f"%b{i}: Tensor[({width}), float32]")
    lines = [HEADER + "def @main(" + ", ".join(params) + ") {"]
    prev = "%x"
    for i in range(layers):
        lines.append(f"  let %d{i} = nn.dense({prev}, %w{i});")
        lines.append(f"  let %a{i} = nn.bias_add(%d{i}, %b{i});")
        lines.append(f"  let %h{i} = nn.relu(%a{i});")
        prev = f"%h{i}"
    lines += [f"  {prev}", "}"]
    return "\n".join(lines) + "\n"


def measure(text: str, repeat: int) -> tuple[float, float]:
    """Median seconds of parse and of InferType over ``repeat`` runs."""
    parse_t: list[float] = []
    infer_t: list[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mod = rly.parse(text)
        t1 = time.perf_counter()
        typed = InferType()(mod)
        t2 = time.perf_counter()
        assert typed["main"].checked_type is not None
        parse_t.append(t1 - t0)
        infer_t.append(t2 - t1)
    return statistics.median(parse_t), statistics.median(infer_t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 30_000, 100_000])
    ap.add_argument("--mlp-layers", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"python {platform.python_version()}, recursion limit {sys.getrecursionlimit()}, "
          f"repeat {args.repeat} (median)")
    print(f"{'program':<12} {'bindings':>9} {'parse s':>9} {'infer s':>9} {'infer/parse':>12} "
          f"{'infer us/binding':>17}")
    rows = [(f"chain-{n // 1000}k", n, chain_program(n)) for n in args.sizes]
    if args.mlp_layers:
        rows.append((f"mlp-{args.mlp_layers}", 3 * args.mlp_layers,
                     mlp_program(args.mlp_layers)))
    for name, n, text in rows:
        p, i = measure(text, args.repeat)
        print(f"{name:<12} {n:>9} {p:>9.3f} {i:>9.3f} {i / p:>12.2f} {1e6 * i / n:>17.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
