"""runtime.tune on a few kernels: MetaSchedule's best candidate against relay_ir's own schedule.

Each workload is tuned with ``--trials`` candidates in a fresh kernel cache and tuning log
(a temporary directory), and the report table is printed: the default and tuned kernel times
(median, in this process, same inputs) and which one the cache kept.

Run: ``.venv/bin/python benchmarks/bench_tune.py [--trials 32] [--only dense,conv3x3,softmax]``
(needs the ``tune`` extra).
"""
from __future__ import annotations

import argparse
import tempfile
import time

import relay_ir as rly
from relay_ir import runtime
from relay_ir.runtime.kernel_cache import KernelCache

HDR = '#[version = "0.0.5"]\n'
WORKLOADS = {
    "dense": HDR + """def @main(%x: Tensor[(128, 512), float32], %w: Tensor[(512, 512), float32]) {
  nn.relu(nn.dense(%x, %w))
}""",
    "conv3x3": HDR + """def @main(%x: Tensor[(1, 64, 56, 56), float32],
          %w: Tensor[(64, 64, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
}""",
    "softmax": HDR + """def @main(%x: Tensor[(256, 1024), float32]) {
  nn.softmax(%x)
}""",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    args = ap.parse_args()
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            report = runtime.tune(rly.parse(WORKLOADS[name]), trials=args.trials,
                                  log=d + "/log", cache=KernelCache(d + "/cache"))
            print(f"== {name} ({args.trials} trials, {time.perf_counter() - t0:.0f} s)")
            print(report.table(), flush=True)


if __name__ == "__main__":
    main()
