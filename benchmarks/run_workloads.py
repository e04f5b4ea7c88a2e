"""Run W1-W8 (WORKLOADS.md): relay_ir and every installed peer in one process, interleaved.

For each workload every implementation is set up once (its ``first_call_ms`` is set-up plus
the first call: parse, differentiate, optimize, compile or jit), then the implementations take
turns for ``--rounds`` rounds; in each round each runs ``repeat`` calls and its round figure is
the median of them. A table per workload shows the median over rounds, min and max, the
check value (which must agree), and the ratio relay_ir / best peer (peers: numpy, JAX,
PyTorch; closed-form references without AD are shown but not counted). W8 starts a fresh
process per measurement (``--w8-procs`` each) and times the first W2 step, with cold and warm
caches (relay_ir's kernel cache directory, jax's persistent cache, inductor's cache).

Run: ``.venv/bin/python benchmarks/run_workloads.py [--rounds 3] [--only W1,W2] [--no-w8]``
(``make bench``). Peers: ``pip install -e .[bench]`` (``make bench-peers``); without them
numpy is the only peer.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import workloads as wl  # noqa: E402


def machine_line() -> str:
    """CPU model, cores, Python, numpy/jax/torch/tvm versions, date."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    vers = [f"numpy {np.__version__}"]
    for pkg in ("jax", "torch", "tvm"):
        if wl.have(pkg):
            try:
                vers.append(f"{pkg} {__import__(pkg).__version__}")
            except Exception:  # pragma: no cover - a broken install is reported, not fatal
                vers.append(f"{pkg} (import failed)")
    load = os.getloadavg()[0]
    return (f"{cpu}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}, "
            f"{', '.join(vers)}; load average {load:.1f}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def fmt(v: float) -> str:
    """Three significant digits, no exponent for the usual ranges."""
    if v == 0 or not np.isfinite(v):
        return str(v)
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def run_workload(w: wl.Workload, rounds: int) -> dict[str, Any]:
    """Set up every implementation, then interleave them over ``rounds``; a result record."""
    scale = 1e6 if w.unit == "us" else 1e3
    impls = w.impls()
    calls: dict[str, Any] = {}
    rows: dict[str, dict[str, Any]] = {}
    for im in impls:
        row: dict[str, Any] = {"kind": im.kind, "note": im.note, "times": []}
        rows[im.name] = row
        try:
            t0 = time.perf_counter()
            call = im.make()
            res = call()
            row["first_call_ms"] = (time.perf_counter() - t0) * 1e3
            row["check"] = im.check(res)
            calls[im.name] = call
        except Exception as e:  # NOTE: a failing peer is reported in its row, not fatal
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    div = wl.NTREES if w.key == "W5" else 1
    for _ in range(rounds):
        for name, call in calls.items():
            ts = []
            for _ in range(w.repeat):
                t0 = time.perf_counter()
                call()
                ts.append(time.perf_counter() - t0)
            rows[name]["times"].append(statistics.median(ts) * scale / div)
    for row in rows.values():
        if row["times"]:
            row["median"] = statistics.median(row["times"])
            row["min"], row["max"] = min(row["times"]), max(row["times"])
    ours = [r["median"] for r in rows.values() if r["kind"] == "relay_ir" and "median" in r]
    peers = {n: r["median"] for n, r in rows.items() if r["kind"] == "peer" and "median" in r}
    rec: dict[str, Any] = {"key": w.key, "title": w.title, "unit": w.unit, "goal": w.goal,
                           "rows": rows, "rounds": rounds, "repeat": w.repeat}
    if ours and peers:
        best = min(peers, key=peers.get)  # type: ignore[arg-type]
        rec["best_peer"] = best
        rec["ratio"] = min(ours) / peers[best]
        # NOTE: on a loaded machine the best round of each is steadier than the median
        rec["ratio_min"] = min(r["min"] for r in rows.values()
                               if r["kind"] == "relay_ir" and "min" in r) / \
            min(r["min"] for r in rows.values() if r["kind"] == "peer" and "min" in r)
    checks = [r["check"] for r in rows.values() if "check" in r]
    if checks:
        ref = checks[0]
        rec["checks_agree"] = all(abs(c - ref) <= 1e-4 * max(1.0, abs(ref)) for c in checks)
    return rec


def print_table(rec: dict[str, Any]) -> None:
    """One markdown table for a workload record."""
    u = rec["unit"]
    print(f"\n### {rec['key']} {rec['title']}\n")
    print(f"| implementation | median {u} | min {u} | max {u} | first_call_ms | check | notes |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rec["rows"].items():
        tag = {"relay_ir": "**", "reference": "_"}.get(r["kind"], "")
        label = f"{tag}{name}{tag}"
        if "error" in r:
            print(f"| {label} |  |  |  |  |  | {r['error']} |")
            continue
        note = "; ".join(n for n in (r["note"], "reference, not counted"
                                     if r["kind"] == "reference" else "") if n)
        print(f"| {label} | {fmt(r.get('median', float('nan')))} | {fmt(r.get('min', 0))} | "
              f"{fmt(r.get('max', 0))} | {fmt(r['first_call_ms'])} | {r['check']:.7g} | "
              f"{note} |")
    if "ratio" in rec:
        goal = rec["goal"]
        met = "met" if goal is None or rec["ratio"] <= goal else "MISSED"
        print(f"\nrelay_ir / best peer ({rec['best_peer']}): **{rec['ratio']:.2f}x** "
              f"(goal <= {goal}: {met}; best rounds: {rec['ratio_min']:.2f}x); "
              f"check values agree: {rec.get('checks_agree')}")


# ----------------------------------------------------------------------------- W8
def w8_variants() -> list[tuple[str, str]]:
    """(variant, cache) pairs: cache is 'cold' (fresh dir per process) or 'warm' (primed)."""
    out = [("relay_ir", "cold"), ("relay_ir", "warm")]
    if wl.have("jax"):
        out += [("jax", "cold"), ("jax-warm", "warm")]
    if wl.have("torch"):
        out += [("torch-eager", "cold"), ("torch-compile", "cold"), ("torch-compile", "warm")]
    return out


def _child_env(variant: str, cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    # NOTE: Python's bytecode cache on, as on a usual install: pip compiles the peers' modules
    # at install time, while an editable relay_ir under PYTHONDONTWRITEBYTECODE=1 (set on the
    # development machine) recompiled its modules in every process (~70 ms of W8 warm)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["RELAY_IR_CACHE_DIR"] = os.path.join(cache_dir, "relay_ir")
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir, "inductor")
    env["W8_CACHE"] = os.path.join(cache_dir, "jax")
    return env


def run_w8(procs: int) -> dict[str, Any]:
    """Fresh processes per variant; median of the first-step times."""
    rows: dict[str, Any] = {}
    for variant, cache in w8_variants():
        name = f"{variant} ({cache} cache)"
        firsts, seconds, setups, walls, check, err = [], [], [], [], None, ""
        warm_dir = tempfile.mkdtemp(prefix="w8_warm_")
        try:
            for i in range(procs + (1 if cache == "warm" else 0)):
                # NOTE: a warm cache is primed by one uncounted run in the same directory
                d = warm_dir if cache == "warm" else tempfile.mkdtemp(prefix="w8_cold_")
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--w8-child",
                                    variant], env=_child_env(variant, d), capture_output=True,
                                   text=True, timeout=900)
                wall = time.perf_counter() - t0
                if cache == "cold":
                    shutil.rmtree(d, ignore_errors=True)
                if r.returncode != 0:
                    err = (r.stderr.strip().splitlines() or ["?"])[-1][:160]
                    break
                if cache == "warm" and i == 0:
                    continue               # NOTE: the priming run is not counted
                res = json.loads(r.stdout.strip().splitlines()[-1])
                firsts.append(res["first_ms"])
                seconds.append(res["second_ms"])
                setups.append(res["setup_s"])
                walls.append(wall)
                check = res["check"]
        finally:
            shutil.rmtree(warm_dir, ignore_errors=True)
        rows[name] = {"kind": "relay_ir" if variant.startswith("relay_ir") else "peer",
                      "first": firsts, "second": seconds, "setup": setups, "wall": walls,
                      "check": check, "error": err}
    return rows


def print_w8(rows: dict[str, Any]) -> None:
    """The W8 table and the cold / warm ratios against jax.jit and torch.compile."""
    print("\n### W8 time to first result of the W2 step, fresh process per measurement\n")
    print("| implementation | median first ms | min | max | second step ms | "
          "import+setup s | process s | check | notes |")
    print("|---|---|---|---|---|---|---|---|---|")
    med = {}
    for name, r in rows.items():
        if not r["first"]:
            print(f"| {name} |  |  |  |  |  |  |  | {r['error']} |")
            continue
        med[name] = statistics.median(r["first"])
        print(f"| {name} | {fmt(med[name])} | {fmt(min(r['first']))} | {fmt(max(r['first']))} "
              f"| {fmt(statistics.median(r['second']))} | {statistics.median(r['setup']):.2f} | "
              f"{statistics.median(r['wall']):.2f} | {r['check']:.7g} | {len(r['first'])} "
              f"processes |")
    for cache in ("cold", "warm"):
        ours = med.get(f"relay_ir ({cache} cache)")
        peers = {n: v for n, v in med.items() if n.endswith(f"({cache} cache)")
                 and (n.startswith("jax") or n.startswith("torch-compile"))}
        if ours and peers:
            best = min(peers, key=peers.get)  # type: ignore[arg-type]
            ratio = ours / peers[best]
            print(f"\nW8 {cache}: relay_ir / best compiling peer ({best}): **{ratio:.2f}x** "
                  f"(goal <= 1.0: {'met' if ratio <= 1.0 else 'MISSED'})")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments; run the selected workloads; print tables (and JSON with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated keys, e.g. W1,W4a,W8")
    ap.add_argument("--no-w8", action="store_true")
    ap.add_argument("--executor", default="", choices=["", "relax"],
                    help="relay_ir's compiled executor: the default one, or relax (Relax VM)")
    ap.add_argument("--w8-procs", type=int, default=3)
    ap.add_argument("--json", default="", help="also write the records to this file")
    ap.add_argument("--peers", default="",
                    help="comma-separated peers to use among the installed (numpy,jax,torch)")
    ap.add_argument("--profile", default="",
                    help="time every kernel call of relay_ir's compiled W2, W4a, W4b or W7 step")
    ap.add_argument("--w8-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.peers:
        wl.ALLOWED_PEERS = {p.strip() for p in args.peers.split(",")}
    wl.EXECUTOR = args.executor
    if args.w8_child:
        print(json.dumps(wl.w8_child(args.w8_child)))
        return 0
    if args.profile:
        exe, call_args = wl.relay_step(args.profile)
        exe(*call_args)                   # NOTE: plan and load the kernels first
        t0 = time.perf_counter()
        for _ in range(10):
            exe(*call_args)
        print(f"{args.profile}: {(time.perf_counter() - t0) * 100:.2f} ms per step, "
              f"{exe.num_kernels()} fused groups; by fused group (ms per step, kernels timed "
              f"alone):")
        for label, n, ms in wl.profile_kernels(exe, call_args):
            print(f"  {ms:8.3f} ms  x{n:<4d} {label}")
        return 0
    only = {k.strip() for k in args.only.split(",") if k.strip()}
    print(f"machine: {machine_line()}")
    print(f"command: {' '.join([os.path.relpath(sys.argv[0])] + (argv or sys.argv[1:]))}")
    peers = ["numpy"] + [p for p in ("jax", "torch") if wl.have(p)]
    print(f"peers: {', '.join(peers)}")
    records = []
    for w in wl.workloads():
        if only and w.key not in only and w.key.rstrip("ab") not in only:
            continue
        rec = run_workload(w, args.rounds)
        print_table(rec)
        sys.stdout.flush()
        records.append(rec)
    if not args.no_w8 and (not only or "W8" in only):
        rows = run_w8(args.w8_procs)
        print_w8(rows)
        records.append({"key": "W8", "rows": rows})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
