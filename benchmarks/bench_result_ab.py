"""The executor's call path before and after a change of ``runtime/relax_vm.py``, side by side.

``--old FILE`` is a previous version of ``runtime/relax_vm.py`` (e.g. ``git show
a58f4de:runtime/relax_vm.py > /tmp/relax_vm_old.py``); each program is built once and linked
twice, by the old and the current ``RelaxExecutable`` (the same kernels, through the kernel
cache), and the two are called in turns: the per-call cost of small programs (one result, a
3-tuple) and W1's whole call (4M float32, numpy's own input). Figures: the median of the round
medians and the best round (us per call for the small programs, ms for W1).

Run: ``.venv/bin/python benchmarks/bench_result_ab.py --old /tmp/relax_vm_old.py [--rounds 15]``
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads as W  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402

W1_16 = W.W1_SRC.replace(str(W.N1), "16")
TUPLE3 = W.HDR + """def @main(%x: Tensor[(16), float32]) {
  (add(%x, 1f), multiply(%x, 2f), exp(%x))
}"""


def _old_module(path: str) -> Any:
    sys.dont_write_bytecode = True
    spec = importlib.util.spec_from_file_location("relax_vm_old", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="a previous runtime/relax_vm.py")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    old_mod = _old_module(args.old)
    x16 = W.w1_data()[:16].copy()
    x = W.w1_data()
    cases: dict[str, tuple[Callable[[], Any], float, int]] = {}
    for label, src, arg, scale, reps in (("W1, 16 elements (us/call)", W1_16, x16, 1e6, 2000),
                                         ("3-tuple, 16 elements (us/call)", TUPLE3, x16, 1e6,
                                          2000),
                                         ("W1, 4M elements (ms/call)", W.W1_SRC, x, 1e3, 10)):
        new = runtime.build(rly.parse(src), target="llvm")
        old = old_mod.RelaxExecutable(new._backend.exe)
        a, b = new(arg), old(arg)
        same = all(np.array_equal(p, q) for p, q in zip(a if isinstance(a, tuple) else (a,),
                                                        b if isinstance(b, tuple) else (b,)))
        assert same, label
        del a, b
        cases[f"{label}: new"] = ((lambda e=new, v=arg: e(v)), scale, reps)
        cases[f"{label}: old"] = ((lambda e=old, v=arg: e(v)), scale, reps)
    times: dict[str, list[float]] = {n: [] for n in cases}
    for _ in range(args.rounds):
        for name, (call, scale, reps) in cases.items():
            call()
            if reps > 100:
                t0 = time.perf_counter()
                for _ in range(reps):
                    call()
                times[name].append((time.perf_counter() - t0) / reps * scale)
            else:
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    call()
                    ts.append(time.perf_counter() - t0)
                times[name].append(statistics.median(ts) * scale)
    print(f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', 'all')}; load average "
          f"{os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("\n| case | median of round medians | best round |\n|---|---:|---:|")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v):.3g} | {min(v):.3g} |")


if __name__ == "__main__":
    main()
