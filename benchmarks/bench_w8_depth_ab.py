"""W8 warm, the depth library cached or compiled: fresh processes, alternated.

Each child imports relay_ir, builds W2's step from the warm kernel cache and runs it once
(W8's "first" figure); "old" makes the child compile the depth library as before the cache.
Run: ``.venv/bin/python benchmarks/bench_w8_depth_ab.py``.
"""
import os
import json
import statistics
import subprocess
import sys
BENCH = os.path.dirname(os.path.abspath(__file__))
CHILD = r'''
import sys, time, json
t0 = time.perf_counter()
sys.path.insert(0, BENCH)
import tvm, relay_ir
from relay_ir import demo, runtime
from relay_ir.runtime import executor, relax_vm
import workloads as wl
if sys.argv[1] == "old":
    relax_vm._cached_depth_module = relax_vm._depth_module
t1 = time.perf_counter()
step = wl.w2_relay_step(); step()
print(json.dumps({"first_ms": (time.perf_counter() - t1) * 1e3}))
'''
res = {"old": [], "new": []}
for _ in range(6):
    for mode in ("new", "old"):
        r = subprocess.run([sys.executable, "-c", CHILD.replace("BENCH", repr(BENCH)), mode],
                           capture_output=True, text=True)
        res[mode].append(json.loads(r.stdout.strip().splitlines()[-1])["first_ms"])
for k, v in res.items():
    print(k, f"median {statistics.median(v):.0f} ms min {min(v):.0f}", [round(x) for x in v])
