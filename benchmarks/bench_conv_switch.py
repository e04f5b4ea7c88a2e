"""Single 1x1 convolutions (``relu(conv2d(x, w) + b)``, weights bound) built with a
``runtime.schedules`` switch at its "before" and "after" values, called interleaved.

Prints each side's best and median GFLOP/s and whether the outputs are bitwise equal. Kernels
are compiled into an in-memory cache per side (the disk cache's key does not hold the
switches). Each layer runs in the layout the model runs it in (blocked by channels when
``runtime.target_lowering.NCHWC`` is on: ``bench_models._blocked_layer``). Default layers: ResNet-50's stride-1 1x1 convolutions handled by conv-gemm and its
first strided one.

Run: ``.venv/bin/python benchmarks/bench_conv_switch.py --threads 2 --switch
PACK_PANELS=False:True [--layers "ci,co,hw,stride;..."] [--rounds 30]``
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

LAYERS = "64,64,56,1;64,256,56,1;256,64,56,1;128,512,28,1;512,128,28,1;256,128,56,2"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--switch", required=True, help="NAME=before:after (Python literals)")
    ap.add_argument("--layers", default=LAYERS, help="ci,co,hw,stride;... (square inputs)")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_models as B
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)     # NOTE: bench_models sets 2 on import
    import relay_ir as rly
    from relay_ir import runtime
    from relay_ir.runtime import schedules
    from relay_ir.runtime.kernel_cache import KernelCache
    key, _, vals = args.switch.partition("=")
    before, _, after = vals.partition(":")
    if not hasattr(schedules, key):
        raise SystemExit(f"--switch: runtime.schedules has no {key!r}")
    saved = getattr(schedules, key)
    rng = np.random.default_rng(1)
    print(f"{args.threads} threads, {args.switch}, best / median of {args.rounds} (GFLOP/s)\n")
    print("| layer | before best | median | after best | median | bitwise equal |")
    print("|---|---|---|---|---|---|")
    for spec in args.layers.split(";"):
        ci, co, hw, st = map(int, spec.split(","))
        src = B.CONV_SRC.format(n=1, c=ci, h=hw, w=hw, o=co, ci=ci, kh=1, kw=1, s=st, p=0, g=1)
        params = {"k": (rng.standard_normal((co, ci, 1, 1)) * 0.1).astype(np.float32),
                  "b": rng.standard_normal((co, 1, 1)).astype(np.float32)}
        x = rng.standard_normal((1, ci, hw, hw)).astype(np.float32)
        # NOTE: the layout the model runs the layer in (blocked with conv-nchwc)
        src, params, x = B._blocked_layer(src, params, x,
                                          B.M.Conv("l", (1, ci, hw, hw), co, 1, st, 0, 1))
        exes = {}
        for side, v in (("before", before), ("after", after)):
            setattr(schedules, key, ast.literal_eval(v))
            exes[side] = runtime.build(rly.parse(src), "llvm", params=params,
                                       cache=KernelCache(use_disk=False))
        setattr(schedules, key, saved)
        same = np.array_equal(exes["before"](x), exes["after"](x))
        t = B._race({k: (lambda e=e: e(x)) for k, e in exes.items()}, args.rounds)
        oh = (hw - 1) // st + 1
        fl = 2 * ci * co * oh * oh
        cells = " | ".join(f"{fl / min(v) / 1e9:.1f} | {fl / float(np.median(v)) / 1e9:.1f}"
                           for v in t.values())
        print(f"| {ci}->{co}, {hw}x{hw}, stride {st} | {cells} | {same} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
