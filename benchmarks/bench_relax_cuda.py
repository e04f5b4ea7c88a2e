"""The relax executor's cuda pieces measurable without a GPU (``runtime.relax_cuda``).

1. The depth counter: a 600-deep non-tail recursion (``@sum``) on the CPU with the tensor
   counter (the CPU's) and with the static counter the cuda bytecode uses
   (``relax_vm.STATIC_DEPTH = True``), side by side, interleaved: median of ``--repeat`` runs
   of 20 calls each.
2. Building the ADT/recursion/dense/softmax program of ``tests/test_relax_cuda.py`` for cuda
   (``runtime.build``, kernels compiled to CUDA C; the kernel cache keeps CUDA in memory, so
   every build compiles) and ``nvcc -cubin`` of its kernels (what a GPU machine does at load
   time with ``TVM_CUDA_COMPILE_MODE=nvcc``).

    cd benchmarks && ../.venv/bin/python bench_relax_cuda.py [--repeat 15]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    import numpy as np

    import relay_ir as rly
    from relay_ir import runtime
    from relay_ir.runtime import relax_vm
    from test_relax_cuda import PROGRAM, SUM
    exes = {}
    for static in (False, True):
        relax_vm.STATIC_DEPTH = static
        exes[static] = runtime.build(rly.parse(SUM), executor="relax")
    relax_vm.STATIC_DEPTH = None
    n = np.array(600, "int64")
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(a.repeat):
        for static in (False, True):
            e = exes[static]
            t = time.perf_counter()
            for _ in range(20):
                e(n)
            times[static].append((time.perf_counter() - t) / 20)
    for static in (False, True):
        m = statistics.median(times[static])
        print(f"depth counter {'static' if static else 'tensor'}: {m * 1e6:.0f} us per "
              f"600-deep run ({m * 1e6 / 600:.2f} us a call)")
    t = time.perf_counter()
    exe = runtime.build(rly.parse(PROGRAM), target="cuda", executor="relax")
    print(f"build for cuda: {time.perf_counter() - t:.2f} s, {exe.num_compiled()} kernels")
    if shutil.which("nvcc"):
        import tvm
        t = time.perf_counter()
        with exe.target:
            for src in exe.kernel_sources():
                tvm.support.nvcc.compile_cuda(src, target_format="cubin", compiler="nvcc")
        print(f"nvcc -cubin of the {exe.num_compiled()} kernels: "
              f"{time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
