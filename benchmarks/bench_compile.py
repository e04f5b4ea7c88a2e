"""Compiled kernels (runtime.build) side by side with numpy, jax.jit and PyTorch, in one run.

Workloads (/work/shared/WORKLOADS.md):

* W1 fused elementwise: y = tanh(x*1.5 + 0.25) * sigmoid(x) - 0.5*x on 4M float32 (a new
  array per call). Goal: relay_ir <= 0.5x jax.jit's time.
* W3 dense + bias + relu, 1024^3 float32 (y = relu(X @ W + b), W in x out). Goal: <= 1.0x
  jax.jit.
* Fusion on vs off (``opt_level=2`` vs ``opt_level=0``: one kernel per operator) on W1 and on
  the W2 MLP forward (784-512-512-10, batch 64, logits).
* Compile time of the W2 MLP forward, build + first result: cold (empty cache directory,
  nothing in memory), cached in memory (a second build in the process) and cached on disk (a
  new cache object over the same directory, as in a new process).

relay_ir gets its inputs as numpy allocates them (16-byte aligned at best): contiguous arrays
of any alignment are passed to the kernels zero-copy.

Every implementation runs in the same process, interleaved over ``--rounds`` rounds; a
round's figure is the best of ``--repeat`` calls and the table shows the median over rounds.
jax and torch are optional (``pip install -e .[bench]``); missing ones are reported as such.

Run: ``.venv/bin/python benchmarks/bench_compile.py [--rounds 5] [--repeat 10]``
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import numpy as np

os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402
from relay_ir.runtime import kernel_cache as kc  # noqa: E402

HDR = '#[version = "0.0.5"]\n'
N1 = 4 * 2 ** 20

W1_SRC = HDR + f"""
def @main(%x: Tensor[({N1}), float32]) {{
  %0 = add(multiply(%x, 1.5f), 0.25f);
  %1 = multiply(tanh(%0), sigmoid(%x));
  subtract(%1, multiply(%x, 0.5f))
}}"""

W3_SRC = HDR + """
def @main(%x: Tensor[(1024, 1024), float32], %w: Tensor[(1024, 1024), float32],
          %b: Tensor[(1024), float32]) {
  nn.relu(add(nn.matmul(%x, %w), %b))
}"""

W2_SRC = HDR + """
def @main(%x: Tensor[(64, 784), float32], %w1: Tensor[(784, 512), float32],
          %b1: Tensor[(512), float32], %w2: Tensor[(512, 512), float32],
          %b2: Tensor[(512), float32], %w3: Tensor[(512, 10), float32],
          %b3: Tensor[(10), float32]) {
  %0 = nn.relu(add(nn.matmul(%x, %w1), %b1));
  %1 = nn.relu(add(nn.matmul(%0, %w2), %b2));
  add(nn.matmul(%1, %w3), %b3)
}"""


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Best seconds per call over ``repeat`` calls (after the caller's warm-up)."""
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def w1_data() -> tuple[np.ndarray]:
    return (np.random.default_rng(0).standard_normal(N1, dtype=np.float32),)


def w3_data() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 1024), dtype=np.float32)
    w = rng.standard_normal((1024, 1024), dtype=np.float32) / 32
    b = rng.standard_normal(1024, dtype=np.float32)
    return x, w, b


def w2_data() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    out: list[np.ndarray] = []
    for fi, fo in [(784, 512), (512, 512), (512, 10)]:
        bound = 1 / np.sqrt(fi)
        out.append(rng.uniform(-bound, bound, (fi, fo)).astype(np.float32))
        out.append(rng.uniform(-bound, bound, (fo,)).astype(np.float32))
    x = rng.standard_normal((64, 784), dtype=np.float32)
    return (x, *out)


# ----------------------------------------------------------------------------- peers
def np_w1(x: np.ndarray) -> np.ndarray:
    return np.tanh(x * np.float32(1.5) + np.float32(0.25)) * (
        np.float32(1) / (np.float32(1) + np.exp(-x))) - np.float32(0.5) * x


def np_w3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(x @ w + b, 0)


def np_w2(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray,
          w3: np.ndarray, b3: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ w1 + b1, 0)
    h = np.maximum(h @ w2 + b2, 0)
    return h @ w3 + b3


def jax_impls() -> dict[str, Callable[..., Any]]:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}

    @jax.jit
    def w1(x: Any) -> Any:
        return jnp.tanh(x * 1.5 + 0.25) * jax.nn.sigmoid(x) - 0.5 * x

    @jax.jit
    def w3(x: Any, w: Any, b: Any) -> Any:
        return jax.nn.relu(x @ w + b)

    @jax.jit
    def w2(x: Any, w1_: Any, b1: Any, w2_: Any, b2: Any, w3_: Any, b3: Any) -> Any:
        h = jax.nn.relu(x @ w1_ + b1)
        h = jax.nn.relu(h @ w2_ + b2)
        return h @ w3_ + b3

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any) -> Any:
            return f(*a).block_until_ready()
        return run
    return {"w1": wrap(w1), "w3": wrap(w3), "w2": wrap(w2), "_put": jax.device_put}


def torch_impls() -> dict[str, Callable[..., Any]]:
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(len(os.sched_getaffinity(0)))

    def w1(x: Any) -> Any:
        return torch.tanh(x * 1.5 + 0.25) * torch.sigmoid(x) - 0.5 * x

    def w3(x: Any, w: Any, b: Any) -> Any:
        return torch.relu(torch.addmm(b, x, w))

    def w2(x: Any, w1_: Any, b1: Any, w2_: Any, b2: Any, w3_: Any, b3: Any) -> Any:
        h = torch.relu(torch.addmm(b1, x, w1_))
        h = torch.relu(torch.addmm(b2, h, w2_))
        return torch.addmm(b3, h, w3_)

    def nograd(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any) -> Any:
            with torch.no_grad():
                return f(*a)
        return run
    return {"w1": nograd(w1), "w3": nograd(w3), "w2": nograd(w2),
            "_put": torch.from_numpy}


# ----------------------------------------------------------------------------- runs
def _add_peers(impls: dict[str, Callable[[], Any]], jx: dict, th: dict, name: str,
               args: Sequence[np.ndarray]) -> None:
    """Add the installed peers' ``name`` (jax.jit, torch eager) on their own copies of ``args``."""
    for peers, label in ((jx, "jax.jit"), (th, "torch eager")):
        if peers:
            xs = [peers["_put"](a) for a in args]
            impls[label] = lambda f=peers[name], xs=xs: f(*xs)


def side_by_side(impls: dict[str, Callable[[], Any]], rounds: int, repeat: int
                 ) -> dict[str, float]:
    """Median over rounds of the best-of-repeat time of each implementation (interleaved)."""
    for f in impls.values():
        f()
    per: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(rounds):
        for k, f in impls.items():
            per[k].append(best(f, repeat))
    return {k: statistics.median(v) for k, v in per.items()}


def compile_times(rounds: int) -> dict[str, float]:
    """W2 forward: build + first result, cold / memory-cached / disk-cached (median)."""
    args = tuple(w2_data())
    mod = rly.parse(W2_SRC)
    out: dict[str, list[float]] = {"cold": [], "memory": [], "disk": [], "schedule": [],
                                   "compile": [], "export": []}
    for _ in range(rounds):
        d = tempfile.mkdtemp(prefix="relay_ir_bench_cache_")
        try:
            cache = kc.KernelCache(directory=d)
            t0 = time.perf_counter()
            runtime.build(mod, cache=cache)(*args)
            out["cold"].append(time.perf_counter() - t0)
            out["schedule"].append(cache.stats.schedule_s)
            out["compile"].append(cache.stats.compile_s)
            out["export"].append(cache.stats.export_s)
            t0 = time.perf_counter()
            runtime.build(mod, cache=cache)(*args)
            out["memory"].append(time.perf_counter() - t0)
            fresh = kc.KernelCache(directory=d)
            t0 = time.perf_counter()
            runtime.build(mod, cache=fresh)(*args)
            out["disk"].append(time.perf_counter() - t0)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return {k: statistics.median(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--compile-rounds", type=int, default=3, dest="compile_rounds")
    args = ap.parse_args(argv)
    import tvm
    from relay_ir.runtime.lower_tvm import resolve_target
    print(f"# relay_ir bench_compile  {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"# python {platform.python_version()}, numpy {np.__version__}, tvm {tvm.__version__},"
          f" target {resolve_target('llvm')}, TVM_NUM_THREADS="
          f"{os.environ.get('TVM_NUM_THREADS')}, load {os.getloadavg()[0]:.2f}")
    jx, th = jax_impls(), torch_impls()
    if jx:
        import jax
        print(f"# jax {jax.__version__}")
    else:
        print("# jax: not installed")
    if th:
        import torch
        print(f"# torch {torch.__version__}")
    else:
        print("# torch: not installed")

    # ---------------------------------------------------------------- W1
    (x,) = w1_data()
    w1_fused = runtime.build(rly.parse(W1_SRC))
    w1_unfused = runtime.build(rly.parse(W1_SRC), opt_level=0)
    ref = np_w1(x)
    check = float(np.asarray(w1_fused(x), dtype=np.float64).sum())
    np.testing.assert_allclose(w1_fused(x), ref, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(w1_unfused(x), ref, rtol=2e-5, atol=2e-6)
    impls: dict[str, Callable[[], Any]] = {
        "relay_ir fused (1 kernel)": lambda: w1_fused(x),
        f"relay_ir unfused ({w1_unfused.num_kernels()} kernels)": lambda: w1_unfused(x),
        "numpy": lambda: np_w1(x)}
    _add_peers(impls, jx, th, "w1", (x,))
    t1 = side_by_side(impls, args.rounds, args.repeat)
    print(f"\n## W1 fused elementwise, 4M float32 (check {check:.1f})")
    _table(t1, "jax.jit", bytes_moved=8 * N1)

    # ---------------------------------------------------------------- W3
    x3 = tuple(w3_data())
    w3 = runtime.build(rly.parse(W3_SRC))
    np.testing.assert_allclose(w3(*x3), np_w3(*x3), rtol=1e-4, atol=1e-3)
    check3 = float(np.asarray(w3(*x3), dtype=np.float64).sum())
    impls = {"relay_ir (1 kernel)": lambda: w3(*x3), "numpy": lambda: np_w3(*x3)}
    _add_peers(impls, jx, th, "w3", x3)
    t3 = side_by_side(impls, args.rounds, max(3, args.repeat // 2))
    print(f"\n## W3 dense+bias+relu 1024^3 float32 (check {check3:.1f})")
    _table(t3, "jax.jit", flops=2 * 1024 ** 3)

    # ---------------------------------------------------------------- W2 forward
    x2 = tuple(w2_data())
    w2_fused = runtime.build(rly.parse(W2_SRC))
    w2_unfused = runtime.build(rly.parse(W2_SRC), opt_level=0)
    np.testing.assert_allclose(w2_fused(*x2), np_w2(*x2), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w2_unfused(*x2), np_w2(*x2), rtol=1e-4, atol=1e-4)
    impls = {f"relay_ir fused ({w2_fused.num_kernels()} kernels)": lambda: w2_fused(*x2),
             f"relay_ir unfused ({w2_unfused.num_kernels()} kernels)": lambda: w2_unfused(*x2),
             "numpy": lambda: np_w2(*x2)}
    _add_peers(impls, jx, th, "w2", x2)
    t2 = side_by_side(impls, args.rounds, args.repeat)
    print("\n## W2 MLP forward 784-512-512-10, batch 64")
    _table(t2, "jax.jit", flops=2 * 64 * (784 * 512 + 512 * 512 + 512 * 10))

    # ---------------------------------------------------------------- compile times
    ct = compile_times(args.compile_rounds)
    print("\n## Compile time, W2 MLP forward (build + first result, 3 kernels)")
    print("| cache state | median ms |\n|---|---:|")
    for k, label in (("cold", "cold (empty cache dir, empty memory)"),
                     ("schedule", "  of which: scheduling"),
                     ("compile", "  of which: tvm.compile (one call)"),
                     ("export", "  of which: export_library + checksums (disk entry)"),
                     ("memory", "cached in memory (second build)"),
                     ("disk", "cached on disk (fresh cache object)")):
        print(f"| {label} | {ct[k] * 1e3:.1f} |")
    return 0


def _table(times: dict[str, float], ref: str, bytes_moved: int = 0, flops: int = 0) -> None:
    head = "| implementation | median ms |"
    sep = "|---|---:|"
    if bytes_moved:
        head += " GB/s |"
        sep += "---:|"
    if flops:
        head += " GFLOP/s |"
        sep += "---:|"
    if ref in times:
        head += f" x {ref} |"
        sep += "---:|"
    print(head)
    print(sep)
    for k, t in times.items():
        row = f"| {k} | {t * 1e3:.3f} |"
        if bytes_moved:
            row += f" {bytes_moved / t / 1e9:.1f} |"
        if flops:
            row += f" {flops / t / 1e9:.1f} |"
        if ref in times:
            row += f" {t / times[ref]:.2f} |"
        print(row)


if __name__ == "__main__":
    sys.exit(main())
