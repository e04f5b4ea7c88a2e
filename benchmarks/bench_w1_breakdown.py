"""Where W1's time goes: the whole call against its parts, side by side in one process.

W1 (``tanh(x*1.5+0.25)*sigmoid(x) - 0.5*x``, 4M float32, x as numpy allocates it) is timed as
a whole call of the executable (``exe(x)``, as users call it) with the VM's release of large
results on (the shipped runner) and off (``RELEASE_BYTES`` out of reach: the VM holds the
previous result, so two output buffers take turns), and against its parts:

* ``kernel, fixed output``: the fused kernel alone on a preallocated output (no allocation,
  no argument or result path);
* ``kernel, in L2``: the same kernel compiled for 256K elements, called 16 times on an input
  that stays in L2 (the arithmetic alone: no memory traffic beyond L2), per 4M elements;
* ``relu kernel, fixed output``: a kernel moving the same bytes (16 MB in, 16 MB out) with
  almost no arithmetic (the memory floor of W1 on this machine);
* ``exe(16 elements)``: the per-call cost of the executor (argument, VM, result);
* the alignment rows: numpy puts a 16 MB array 16 or 48 bytes past a 64-byte boundary (so
  does ``np.empty_like``, the fixed output above; the header line prints both offsets), the
  VM's output is 64-byte aligned: the kernel with x as allocated and a 64-aligned output, and
  ``exe`` on a 64-byte-aligned copy of x;
* ``jax.jit``: the peer of the issue's goal (when jax is installed; its speed is bimodal from
  one process to the next, see benchmarks/RESULTS.md).

Every variant runs ``--repeat`` calls per round (after one untimed call), rounds interleaved
with the order rotating from round to round; the table shows the median
of the round medians and the best round, in ms (us for the per-call row).

Run: ``TVM_BIND_THREADS=0 .venv/bin/python benchmarks/bench_w1_breakdown.py [--rounds 20]``
(``TVM_NUM_THREADS=1`` for one thread; ``--mcpu haswell`` builds every relay_ir variant for an
AVX2 target instead of this machine's CPU). The script turns the whole-build cache off
(``RELAY_IR_BUILD_CACHE=0``): a cache hit returns a loaded module, which has no kernel table
to take the fused kernel from.
"""
from __future__ import annotations

import argparse
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
from relay_ir.runtime import relax_vm  # noqa: E402

BODY = ("let %t = tanh(add(multiply(%x, 1.5f), 0.25f));"
        " subtract(multiply(%t, sigmoid(%x)), multiply(%x, 0.5f))")
L2_N = 1 << 18


MCPU: list[str] = []
X_OFFSET: list[int] = []


def _exe(body: str, n: int) -> Any:
    target: Any = {"kind": "llvm", "mcpu": MCPU[0]} if MCPU else "llvm"
    return runtime.build(rly.parse(W.HDR + f"def @main(%x: Tensor[({n}), float32]) {{ {body} }}"),
                         target=target)


def _kernel(exe: Any) -> Any:
    kerns = list(exe._backend.kernels.values())
    assert len(kerns) == 1, "one fused kernel expected"
    return kerns[0].module[kerns[0].symbol]


def _aligned64(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` starting on a 64-byte boundary."""
    buf = np.empty(a.size + 16, a.dtype)
    start = (-buf.ctypes.data % 64) // a.itemsize
    out = buf[start:start + a.size]
    out[:] = a
    return out


def variants() -> dict[str, tuple[Callable[[], Any], float, Callable[[], None]]]:
    """name -> (call, scale to report per call, set-up before the round)."""
    import tvm_ffi
    wrap = tvm_ffi.from_dlpack
    x = W.w1_data()
    exe = _exe(BODY, W.N1)
    k = _kernel(exe)
    out = np.empty_like(x)
    X_OFFSET.extend([x.ctypes.data % 64, out.ctypes.data % 64])
    xt, ot = wrap(x, require_alignment=0), wrap(out, require_alignment=0)
    relu_k = _kernel(_exe("nn.relu(%x)", W.N1))
    small = x[:L2_N].copy()
    k_l2 = _kernel(_exe(BODY, L2_N))
    st, so = wrap(small, require_alignment=0), wrap(np.empty_like(small), require_alignment=0)
    reps = W.N1 // L2_N
    x64 = _aligned64(x)
    o64 = _aligned64(out)
    xt64, ot64 = wrap(x64, require_alignment=0), wrap(o64, require_alignment=0)
    exe16 = _exe(BODY, 16)
    x16 = x[:16].copy()

    def on() -> None:
        relax_vm.RELEASE_BYTES = 1 << 20

    def off() -> None:
        relax_vm.RELEASE_BYTES = 1 << 62

    def l2() -> None:
        for _ in range(reps):
            k_l2(st, so)

    def per_call() -> None:
        for _ in range(100):
            exe16(x16)

    out_v: dict[str, tuple[Callable[[], Any], float, Callable[[], None]]] = {
        "exe(x), VM releases large results (new)": (lambda: exe(x), 1e3, on),
        "exe(x), VM holds the last result (old)": (lambda: exe(x), 1e3, off),
        "kernel, fixed output": (lambda: k(xt, ot), 1e3, on),
        "kernel, in L2 (per 4M elements)": (l2, 1e3, on),
        "kernel, x as allocated, output 64-aligned (as in exe)": (lambda: k(xt, ot64), 1e3, on),
        "kernel, x and output 64-aligned": (lambda: k(xt64, ot64), 1e3, on),
        "exe(64-byte-aligned copy of x)": (lambda: exe(x64), 1e3, on),
        "relu kernel, fixed output (memory floor)": (lambda: relu_k(xt, ot), 1e3, on),
        "exe(16 elements), us per call": (per_call, 1e6 / 100, on),
    }
    if W.have("jax"):
        jit = next(im for im in W.w1_impls() if im.name == "jax.jit")
        out_v["jax.jit"] = (jit.make(), 1e3, on)
    return out_v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--mcpu", default="", help="LLVM cpu to build for (default: this machine's)")
    args = ap.parse_args()
    # NOTE: the kernels are taken from a freshly built executable's kernel table
    os.environ["RELAY_IR_BUILD_CACHE"] = "0"
    if args.mcpu:
        MCPU.append(args.mcpu)
    vs = variants()
    times: dict[str, list[float]] = {n: [] for n in vs}
    names = list(vs)
    for r in range(args.rounds):
        # NOTE: the order rotates every round: the variant after jax.jit (which evicts the
        # caches) would otherwise always be the same one
        for name in names[r % len(names):] + names[:r % len(names)]:
            call, scale, setup = vs[name]
            setup()
            call()
            ts = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                call()
                ts.append(time.perf_counter() - t0)
            times[name].append(statistics.median(ts) * scale)
    relax_vm.RELEASE_BYTES = 1 << 20
    print(f"x at {X_OFFSET[0]} mod 64 bytes (fixed output: {X_OFFSET[1]}); threads: "
          f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', 'all')}, "
          f"{len(os.sched_getaffinity(0))} cores; mcpu {args.mcpu or 'this machine'}; "
          f"load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("\n| variant | median of round medians | best round |\n|---|---:|---:|")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v):.3f} | {min(v):.3f} |")


if __name__ == "__main__":
    main()
