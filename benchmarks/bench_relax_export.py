"""Export and load of Relax VM module files (``runtime.relax_export``, issue 21).

For each example model: ``export_library`` time with kernels held in memory (compiled by this
process: linked as they are) and with kernels loaded from the disk cache (compiled again from
their scheduled TIR), the file size, ``runtime.load_module`` time, plain
``tvm.runtime.load_module`` + ``relax.VirtualMachine`` time, and one call of the built and of
the loaded module (the built one running its kernels from the disk cache's libraries, as
usual). Medians of ``--repeat`` runs, side by side in one process.

    cd benchmarks && ../.venv/bin/python bench_relax_export.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _median(f, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    import tvm
    from tvm import relax

    import relay_ir as rly
    from relay_ir import runtime
    from relay_ir.runtime.kernel_cache import KernelCache
    from util_diff import random_inputs
    work = tempfile.mkdtemp(prefix="bench_relax_export_")
    disk = KernelCache(os.path.join(work, "cache"))
    print("| model | kernels | export, kernels in memory (ms) | export, kernels from the disk "
          "cache (ms) | file (KiB) | runtime.load_module (ms) | plain TVM load + VM (ms) | "
          "call, built (us) | call, loaded (us) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("mlp", "convnet"):
        mod = rly.parse(open(os.path.join(ROOT, "examples", name + ".rly")).read())
        args = random_inputs(mod, seed=1)
        path = os.path.join(work, name + ".so")
        mem = runtime.build(mod, executor="relax", cache=KernelCache(use_disk=False))
        t_mem = _median(lambda: mem.export_library(path), a.repeat)
        runtime.build(mod, executor="relax", cache=disk)      # fill the disk cache
        disk.clear_memory()
        from_disk = runtime.build(mod, executor="relax", cache=disk)
        t_disk = _median(lambda: from_disk.export_library(path), a.repeat)
        size = os.path.getsize(path) / 1024
        t_load = _median(lambda: runtime.load_module(path), a.repeat)

        # NOTE: a fresh path per load: dlopen of a path already loaded returns that library
        import shutil
        copies = []
        for i in range(a.repeat):
            copies.append(os.path.join(work, f"{name}-{i}.so"))
            shutil.copy(path, copies[-1])
        todo = list(copies)

        def plain() -> None:
            relax.VirtualMachine(tvm.runtime.load_module(todo.pop()), tvm.cpu())
        t_plain = _median(plain, a.repeat)
        loaded = runtime.load_module(path)
        for f in (from_disk, loaded):
            f(*args)
        n = 200
        t_built = _median(lambda: [from_disk(*args) for _ in range(n)], a.repeat) / n
        t_loaded = _median(lambda: [loaded(*args) for _ in range(n)], a.repeat) / n
        print(f"| {name} | {mem.num_compiled()} | {t_mem * 1e3:.0f} | {t_disk * 1e3:.0f} | "
              f"{size:.0f} | {t_load * 1e3:.1f} | {t_plain * 1e3:.1f} | {t_built * 1e6:.1f} | "
              f"{t_loaded * 1e6:.1f} |")


if __name__ == "__main__":
    main()
