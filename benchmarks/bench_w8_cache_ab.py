"""W8 warm with and without the pipeline caches, against jax.jit warm: fresh processes, alternated.

Each child is W8's (``run_workloads.py --w8-child``): import, then time parsing W2, its
gradient, optimize, build and the first step, with a warm kernel cache. ``caches``: the
whole-build and optimize caches on (the default); ``no caches``: ``RELAY_IR_BUILD_CACHE=0
RELAY_IR_OPT_CACHE=0`` (what main did); ``jax-warm``: jax.jit with its persistent cache
primed (when jax is installed). All directories are primed by one uncounted run each, then
``--rounds`` rounds run every variant once, in turn.

Run: ``.venv/bin/python benchmarks/bench_w8_cache_ab.py [--rounds 7]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(BENCH, "run_workloads.py")


def child(variant: str, cache_dir: str, caches: bool) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)      # NOTE: as run_workloads' W8 children
    env["RELAY_IR_CACHE_DIR"] = os.path.join(cache_dir, "relay_ir")
    env["W8_CACHE"] = os.path.join(cache_dir, "jax")
    env["RELAY_IR_BUILD_CACHE"] = env["RELAY_IR_OPT_CACHE"] = "1" if caches else "0"
    r = subprocess.run([sys.executable, RUNNER, "--w8-child", variant], env=env,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{variant}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    sys.path.insert(0, BENCH)
    import workloads as wl
    variants = [("caches", "relay_ir", True), ("no caches", "relay_ir", False)]
    if wl.have("jax"):
        variants.append(("jax-warm", "jax-warm", False))
    d = tempfile.mkdtemp(prefix="w8_ab_")
    try:
        for _, v, c in variants:                  # prime every directory (not counted)
            child(v, d, c)
        child("relay_ir", d, True)
        res: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        checks = {}
        for _ in range(args.rounds):
            for name, v, c in variants:
                r = child(v, d, c)
                res[name].append(r["first_ms"])
                checks[name] = r["check"]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("| variant | median first-step ms | min | max | check |")
    print("|---|---:|---:|---:|---|")
    for name, v in res.items():
        print(f"| {name} | {statistics.median(v):.0f} | {min(v):.0f} | {max(v):.0f} | "
              f"{checks[name]:.7g} |")
    if "jax-warm" in res:
        j = statistics.median(res["jax-warm"])
        for name in ("caches", "no caches"):
            print(f"{name} / jax-warm: {statistics.median(res[name]) / j:.2f}x")


if __name__ == "__main__":
    main()
