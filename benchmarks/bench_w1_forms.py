"""W1's fused kernel with relay_ir's float32 sigmoid and tanh against the previous TOPI-based
forms, interleaved in one process.

Each variant builds W1 (``tanh(x*1.5+0.25) * sigmoid(x) - 0.5*x``) with some operators' computes
swapped for the previous forms (``fast_math_accuracy._previous_form``: ``1 / (1 + fast_exp(-x))``
with TOPI's ``fast_exp``, and TOPI's ``fast_tanh``) and times the kernel alone: on 4M float32
with a fixed output, and compiled for 256K elements, 16 calls on an input that stays in L2 (per
4M elements). Rounds interleave the variants; the table shows the median of the round medians
and the best round, in ms, and the largest difference from the first variant's output.

Run: ``TVM_BIND_THREADS=0 .venv/bin/python benchmarks/bench_w1_forms.py [--rounds 9]
[--mcpu haswell] [--bounds] [--asm]`` (``--mcpu``: build for that LLVM CPU instead of this
machine's; AVX2 CPUs: haswell, znver3; ``--bounds`` adds two variants with wrong values that
bound what the divisions cost: sigmoid's, then tanh's too, replaced by a multiplication;
``--asm`` prints, per variant, the instructions of the kernel's vector loop per 16 elements
instead of timing).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fast_math_accuracy as FMA  # noqa: E402
import workloads as W  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402
from relay_ir.op import _REGISTRY, get_opdef  # noqa: E402
from relay_ir.runtime.kernel_cache import KernelCache  # noqa: E402

BODY = ("let %t = tanh(add(multiply(%x, 1.5f), 0.25f));"
        " subtract(multiply(%t, sigmoid(%x)), multiply(%x, 0.5f))")
L2_N = 1 << 18


def _no_division(name: str) -> Any:
    """The relay_ir form with its division replaced by a multiplication (wrong values)."""
    from relay_ir.op import _te as T

    def sigmoid(x: Any) -> Any:
        u = T.clamp_keep_nan(x, -89.5, 87.0)
        p, tb = T._exp_reduce(u, negate=True)
        return T._f32(0.5) * (T._f32(0.5) + p * T._pow2_bits(tb, bias=126))

    def tanh(x: Any) -> Any:
        xc = T.clamp_keep_nan(x, -T._TANH_CLAMP, T._TANH_CLAMP)
        s = xc * xc
        return T.clamp_keep_nan(xc * T._horner(T._TANH_NUM, s) * T._horner(T._TANH_DEN, s),
                                -1.0, 1.0)
    fn = sigmoid if name == "sigmoid" else tanh
    return lambda attrs, inputs, out_type: T.elemwise(fn, inputs[0])


def _previous(name: str) -> Any:
    form = FMA._previous_form(name)
    return lambda attrs, inputs, out_type: form(inputs[0])


VARIANTS = {
    "previous sigmoid and tanh (TOPI-based)": ("sigmoid", "tanh"),
    "relay_ir sigmoid, previous tanh": ("tanh",),
    "relay_ir sigmoid and tanh (now)": (),
}


BOUNDS = {
    "bound: sigmoid's division -> multiply (wrong values)": ("!sigmoid",),
    "bound: both divisions -> multiply (wrong values)": ("!sigmoid", "!tanh"),
}


def _kernel(n: int, swaps: tuple[str, ...], mcpu: str, asm: bool = False) -> Any:
    """W1's kernel with the computes named in ``swaps`` replaced: ``name`` by the previous
    form, ``!name`` by the division-free bound (``asm``: the kernel's assembly text)."""
    names = [k.lstrip("!") for k in swaps]
    orig = {k: get_opdef(k) for k in names}
    for k in swaps:
        name = k.lstrip("!")
        form = _no_division(name) if k.startswith("!") else _previous(name)
        _REGISTRY[name] = dataclasses.replace(orig[name], compute=form)
    try:
        target: Any = {"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm"
        cache = KernelCache(use_disk=False) if asm else None
        exe = runtime.build(rly.parse(W.HDR + f"def @main(%x: Tensor[({n}), float32]) "
                                      f"{{ {BODY} }}"), target=target, cache=cache)
    finally:
        _REGISTRY.update(orig)
    if asm:
        return "\n".join(m.inspect_source("s") for m in cache.modules.values())
    kerns = list(exe._backend.kernels.values())
    assert len(kerns) == 1, "one fused kernel expected"
    return kerns[0].module[kerns[0].symbol]


def loop_counts(asm: str) -> tuple[float, float, float, int]:
    """(instructions, multiplies and FMAs, divisions) per 16 elements in the kernel's vector
    loop (the basic block holding the divisions, up to its backward branch), and the number
    of elements one trip handles."""
    lines = asm.splitlines()
    fmas = [i for i, ln in enumerate(lines) if "vfmadd" in ln]
    start = max(i for i in range(fmas[0]) if re.match(r"^\.LBB\w*:", lines[i]))
    end = next(i for i in range(fmas[0], len(lines)) if re.match(r"^\s+j", lines[i]))
    ins = [ln.split()[0] for ln in lines[start + 1:end + 1]
           if ln.strip() and not ln.strip().startswith((".", "#"))]
    reg = "zmm" if "zmm" in "\n".join(lines[start:end]) else "ymm"
    # NOTE: stores to the output; those to the stack are register spills
    stores = sum(1 for ln in lines[start:end]
                 if re.search(rf"vmovups\s+%{reg}\d+,\s*-?\w*\(", ln) and "%rsp" not in ln)
    per_trip = stores * (16 if reg == "zmm" else 8)
    scale = 16 / per_trip
    fma = sum(1 for i in ins if i.startswith(("vfmadd", "vfmsub", "vfnmadd", "vfnmsub", "vmulps")))
    return len(ins) * scale, fma * scale, ins.count("vdivps") * scale, per_trip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--mcpu", default="")
    ap.add_argument("--bounds", action="store_true")
    ap.add_argument("--asm", action="store_true")
    args = ap.parse_args()
    if args.asm:
        print(f"mcpu {args.mcpu or 'this machine'}; W1's vector loop, per 16 elements\n")
        print("| variant | instructions | multiplies/FMAs | divisions | elements per trip |\n"
              "|---|---:|---:|---:|---:|")
        for n, p in {**VARIANTS, **(BOUNDS if args.bounds else {})}.items():
            ins, fma, div, trip = loop_counts(_kernel(4096, p, args.mcpu, asm=True))
            print(f"| {n} | {ins:.1f} | {fma:.1f} | {div:.1f} | {trip} |")
        return
    # NOTE: the kernels are taken from a freshly built executable's kernel table
    os.environ["RELAY_IR_BUILD_CACHE"] = "0"
    import tvm_ffi
    wrap = tvm_ffi.from_dlpack
    x = W.w1_data()
    out = np.empty_like(x)
    xt, ot = wrap(x, require_alignment=0), wrap(out, require_alignment=0)
    small = x[:L2_N].copy()
    st, so = wrap(small, require_alignment=0), wrap(np.empty_like(small), require_alignment=0)
    variants = {**VARIANTS, **(BOUNDS if args.bounds else {})}
    ks = {n: (_kernel(W.N1, p, args.mcpu), _kernel(L2_N, p, args.mcpu))
          for n, p in variants.items()}
    full: dict[str, list[float]] = {n: [] for n in ks}
    l2: dict[str, list[float]] = {n: [] for n in ks}
    outs: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for n, (k, k_l2) in ks.items():
            k(xt, ot)
            outs[n] = out.copy()
            ts = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                k(xt, ot)
                ts.append(time.perf_counter() - t0)
            full[n].append(statistics.median(ts) * 1e3)
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(W.N1 // L2_N):
                    k_l2(st, so)
                ts.append(time.perf_counter() - t0)
            l2[n].append(statistics.median(ts) * 1e3)
    first = outs[next(iter(outs))]
    print(f"mcpu {args.mcpu or 'this machine'}; TVM_NUM_THREADS="
          f"{os.environ.get('TVM_NUM_THREADS', 'all')}, {len(os.sched_getaffinity(0))} cores; "
          f"load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("\n| variant | 4M, fixed output: median (best) | in L2, per 4M: median (best) | "
          "max diff |\n|---|---:|---:|---:|")
    for n in ks:
        print(f"| {n} | {statistics.median(full[n]):.3f} ({min(full[n]):.3f}) | "
              f"{statistics.median(l2[n]):.3f} ({min(l2[n]):.3f}) | "
              f"{float(np.abs(outs[n] - first).max()):.3g} |")


if __name__ == "__main__":
    main()
