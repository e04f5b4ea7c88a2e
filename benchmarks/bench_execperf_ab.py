"""In-process A/B of the execperf kernel changes on a workload (CPU time, interleaved).

Builds the relay_ir implementation of W2 or W4a (``workloads.py``) four times: with the new
serial threshold and one-term matmul compute ("new"), with the old serial rule (sum over
blocks), with the old matmul compute (a one-element reduction), and with both old; then times
the four interleaved for ``ROUNDS`` rounds (env, default 15) and prints medians and minima.

Run: ``ROUNDS=25 .venv/bin/python benchmarks/bench_execperf_ab.py W4a``.
"""
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import relay_ir.op.nn as nn_mod  # noqa: E402
import workloads as wl  # noqa: E402
from as_main import old_matmul_T, sum_volume  # noqa: E402
from relay_ir.runtime import schedules  # noqa: E402


orig = dict(wv=schedules.work_volume, sb=schedules.SERIAL_BELOW, T=nn_mod.T)
fakeT = old_matmul_T(orig["T"])


def setmode(serial_old, k1_old):
    schedules.work_volume = sum_volume if serial_old else orig["wv"]
    schedules.SERIAL_BELOW = orig["sb"] + 1 if serial_old else orig["sb"]
    nn_mod.T = fakeT if k1_old else orig["T"]


which = sys.argv[1]
impl = {"W2": lambda: wl.w2_impls()[0], "W4a": lambda: wl.w4_impls(1)[0]}[which]()
variants = {"new": (False, False), "old-serial": (True, False), "old-k1": (False, True), "old-both": (True, True)}
runs = {}
for name, mode in variants.items():
    setmode(*mode); runs[name] = impl.make(); runs[name]()
setmode(False, False)
res = {k: [] for k in runs}
for _ in range(int(os.environ.get("ROUNDS", "15"))):
    for k, f in runs.items():
        c = time.process_time(); f(); res[k].append(time.process_time() - c)
for k, v in res.items():
    print(which, k, f"median {statistics.median(v)*1e3:.2f} ms min {min(v)*1e3:.2f}")
