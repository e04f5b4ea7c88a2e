"""Float32 transcendental kernels: GB/s of exp, tanh, sigmoid, erf, gelu and the W1 chain.

Each expression is compiled alone (one fused kernel over 4M float32, input as numpy allocates
it, a fresh output per call) with relay_ir's default fast math (vectorized polynomial forms)
and with ``fast_math=False`` (TVM's exact forms: ``exp``/``erf`` become scalar libm calls),
next to torch eager (when installed) and numpy where it has the function, interleaved in one
loop. GB/s counts 8 bytes per element (one read, one write).

Run: ``.venv/bin/python benchmarks/bench_transcendental.py [--threads 2] [--rounds 15]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

if __name__ == "__main__":
    _n = "2"
    for _i, _a in enumerate(sys.argv):
        if _a == "--threads" and _i + 1 < len(sys.argv):
            _n = sys.argv[_i + 1]
    for _v in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = _n

import numpy as np  # noqa: E402

import relay_ir as rly  # noqa: E402
from relay_ir import runtime  # noqa: E402
from relay_ir.runtime.kernel_cache import KernelCache  # noqa: E402

N = 1 << 22
EXPRS = {
    "exp": "exp(%x)",
    "tanh": "tanh(%x)",
    "sigmoid": "sigmoid(%x)",
    "erf": "erf(%x)",
    "gelu (erf)": "nn.gelu(%x)",
    "gelu (tanh)": 'nn.gelu(%x, approximate="tanh")',
    "W1 tanh(1.5x+.25)*sigmoid(x)-.5x": "subtract(multiply(tanh(add(multiply(%x, 1.5f), 0.25f)), "
                                        "sigmoid(%x)), multiply(0.5f, %x))",
    "relu (memory bound)": "nn.relu(%x)",
}


def _peers(name: str) -> dict[str, Callable[[np.ndarray], Any]]:
    out: dict[str, Callable[[np.ndarray], Any]] = {}
    npf = {"exp": np.exp, "tanh": np.tanh, "relu (memory bound)": lambda x: np.maximum(x, 0)}
    if name in npf:
        out["numpy"] = npf[name]
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return out
    tf = {"exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
          "gelu (erf)": F.gelu, "gelu (tanh)": lambda t: F.gelu(t, approximate="tanh"),
          "W1 tanh(1.5x+.25)*sigmoid(x)-.5x":
              lambda t: torch.tanh(t * 1.5 + 0.25) * torch.sigmoid(t) - 0.5 * t,
          "relu (memory bound)": torch.relu}
    f = tf[name]

    def run(x: np.ndarray, f: Any = f) -> Any:
        with torch.inference_mode():
            return f(torch.from_numpy(x))
    out["torch eager"] = run
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        print("(torch not installed)")
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32) * 3
    print(f"## bench_transcendental: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{args.threads} threads, 4M float32, load average {os.getloadavg()[0]:.1f}\n")
    print("| expression | relay_ir ms | GB/s | fast_math=False ms | numpy ms | torch eager ms "
          "| x torch | max diff vs torch / max torch |")
    print("|---|---|---|---|---|---|---|---|")
    for name, body in EXPRS.items():
        src = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[({N}), float32]) {{ {body} }}'
        fs: dict[str, Callable[[np.ndarray], Any]] = {
            "fast": runtime.build(rly.parse(src), "llvm", cache=KernelCache(use_disk=False)),
            "exact": runtime.build(rly.parse(src), "llvm", fast_math=False,
                                   cache=KernelCache(use_disk=False))}
        fs.update(_peers(name))
        outs = {k: np.asarray(f(x)) for k, f in fs.items()}
        ts: dict[str, list[float]] = {k: [] for k in fs}
        for _ in range(args.rounds):
            for k, f in fs.items():
                t = time.perf_counter()
                f(x)
                ts[k].append(time.perf_counter() - t)
        med = {k: float(np.median(v)) for k, v in ts.items()}

        def ms(k: str) -> str:
            return f"{1e3 * med[k]:.2f}" if k in med else "-"
        tor = med.get("torch eager")
        ref = outs.get("torch eager")
        diff = (f"{float(np.abs(outs['fast'] - ref).max() / np.abs(ref).max()):.1e}"
                if ref is not None else "-")
        print(f"| {name} | {ms('fast')} | {8 * N / med['fast'] / 1e9:.1f} | {ms('exact')} | "
              f"{ms('numpy')} | {ms('torch eager')} | "
              f"{med['fast'] / tor if tor else float('nan'):.2f} | {diff} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
