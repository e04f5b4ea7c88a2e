"""The compiled executor (runtime.build on whole programs) side by side with its peers, one run.

Parts (workloads of /work/shared/WORKLOADS.md):

* **Per-call overhead** of a one-kernel program, ``exp`` on a (4,) float32 vector: the raw TVM
  kernel call (prebuilt tvm tensors), ``runtime.build`` (the Relax VM executor) of the
  straight-line program, the same kernel behind an ``if``, and a module file loaded back.
  Goal: at most 10 us above the kernel.
* **Dispatch**: a 10,000-step tail-recursive loop whose iteration calls one small kernel
  (``tanh`` on a (4,) float32 vector) against the same loop without it (an idle iteration:
  the counter's compare and decrement, the ``if``, the tail call), per iteration, on the
  compiled executor (``runtime.build``: TVM's Relax VM). Goal
  (issue 21): at most 1 us per iteration in all, the kernel call at most 0.3 us above idle.
* **W6**: d/dx of sum_{i<1000} sin(x*i)*0.001 at x = 0.5, written as a 1000-step recursive
  loop over float32 scalars; ``passes.gradient`` compiled, against the interpreter on the same
  program, jax.jit(jax.grad) and PyTorch eager (0-d tensors + autograd.grad).
* **W5**: binary TreeLSTM, H = 128, 64 random trees of 8-32 leaves, forward + backward
  (gradients of the loss wrt the 7 parameters) per tree at batch 1; the gradient program
  compiled, against the interpreter and PyTorch eager (recursion in Python, autograd.grad).
  Goal: at most 0.7x PyTorch eager.
* **Symbolic**: one fused group compiled for a static shape against
  the same group compiled once with a symbolic first dimension (``Tensor[(n, K), float32]``:
  one kernel for every n, the output shape computed in the bytecode) called at the same shape,
  small and large, for an elementwise chain and for dense+bias+relu.
* **Corpus**: compiled vs interpreted on every example program (examples/*.rly) with random
  inputs.

Every figure is the median over ``--rounds`` interleaved rounds of the best of ``--repeat``
calls. jax and torch are optional (``pip install -e .[bench]``); missing ones are reported.

Run: ``.venv/bin/python benchmarks/bench_executor.py [--rounds 3] [--repeat 5]``
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import relay_ir as rly  # noqa: E402
from relay_ir import passes, runtime  # noqa: E402
from relay_ir.passes import InferType  # noqa: E402
from bench_compile import best  # noqa: E402  (same folder)

HDR = '#[version = "0.0.5"]\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def per_call(fn: Callable[[], Any], inner: int, repeat: int) -> float:
    """Best seconds per call, timing ``inner`` calls at a time."""
    def many() -> None:
        for _ in range(inner):
            fn()
    return best(many, repeat) / inner


class Table:
    """Rows measured over rounds; printed as a markdown table."""

    def __init__(self, title: str, unit: str):
        self.title = title
        self.unit = unit
        self.rows: dict[str, list[float]] = {}
        self.notes: dict[str, str] = {}

    def add(self, name: str, seconds: float, note: str = "") -> None:
        """Record one round's figure for ``name``."""
        self.rows.setdefault(name, []).append(seconds)
        if note:
            self.notes[name] = note

    def skip(self, name: str, why: str) -> None:
        """A row that could not run."""
        self.rows.setdefault(name, [])
        self.notes[name] = why

    def median(self, name: str) -> float | None:
        """The median of ``name``'s rounds (None when it did not run)."""
        v = self.rows.get(name)
        return statistics.median(v) if v else None

    def show(self, ref: str | None = None) -> str:
        """The table as markdown (ratio column against row ``ref``)."""
        scale = {"us": 1e6, "ms": 1e3}[self.unit]
        lines = [f"### {self.title}", "",
                 f"| implementation | median {self.unit} | min {self.unit} | "
                 f"x {ref or '-'} | notes |", "|---|---|---|---|---|"]
        r = self.median(ref) if ref else None
        for name, vals in self.rows.items():
            if not vals:
                lines.append(f"| {name} | - | - | - | {self.notes.get(name, '')} |")
                continue
            m = statistics.median(vals)
            ratio = f"{m / r:.2f}" if r else "-"
            lines.append(f"| {name} | {m * scale:.4g} | {min(vals) * scale:.4g} | {ratio} | "
                         f"{self.notes.get(name, '')} |")
        return "\n".join(lines)


# ============================================================================ per-call overhead
ONE_KERNEL = HDR + "def @main(%x: Tensor[(4), float32]) { exp(%x) }"
ONE_KERNEL_VM = HDR + """
def @main(%x: Tensor[(4), float32], %c: bool) { if (%c) { exp(%x) } else { %x } }"""


def overhead(rounds: int, repeat: int) -> Table:
    """Per-call cost of the executors around one tiny kernel."""
    import tvm
    from relay_ir.runtime.executor import as_aligned
    t = Table("Per-call overhead: one kernel, exp on Tensor[(4), float32]", "us")
    mod = rly.parse(ONE_KERNEL)
    exe = runtime.build(mod)
    x = as_aligned(np.float32([0.1, 0.2, 0.3, 0.4]))
    exe(x)
    (rec,) = exe._backend.kernels.values()         # NOTE: runtime internals
    kern = rec.module[rec.symbol]
    tx = tvm.runtime.tensor(x)
    to = tvm.runtime.empty((4,), "float32")
    vm_exe = runtime.build(rly.parse(ONE_KERNEL_VM))
    c = np.bool_(True)
    vm_exe(x, c)
    path = os.path.join(tempfile.mkdtemp(), "one.so")
    vm_exe.export_library(path)
    loaded = runtime.load_module(path)
    loaded(x, c)
    np_exp = (lambda: np.exp(x))
    for _ in range(rounds):
        t.add("TVM kernel alone (prebuilt tvm tensors)", per_call(lambda: kern(tx, to), 2000,
                                                                  repeat))
        t.add("runtime.build, straight-line", per_call(lambda: exe(x), 2000, repeat))
        t.add("runtime.build, compiled executor (exp behind an if)",
              per_call(lambda: vm_exe(x, c), 2000, repeat))
        t.add("module file loaded back (runtime.load_module)",
              per_call(lambda: loaded(x, c), 2000, repeat))
        t.add("numpy np.exp (reference)", per_call(np_exp, 2000, repeat))
    return t


# ============================================================================ symbolic shapes
SYM_CHAIN = """
def @main(%x: Tensor[(DIM, 256), float32]) { tanh(add(multiply(%x, 2f), 1f)) }"""
SYM_DENSE = """
def @main(%x: Tensor[(DIM, 256), float32], %w: Tensor[(128, 256), float32],
          %b: Tensor[(128), float32]) { nn.relu(add(nn.dense(%x, %w), %b)) }"""


def symbolic(rounds: int, repeat: int) -> Table:
    """A static-shape kernel against the one symbolic kernel, same group, same shape."""
    t = Table("Symbolic shapes (executor='relax'): static kernel vs one symbolic kernel, per "
              "call", "us")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 256)).astype("float32")
    b = rng.standard_normal(128).astype("float32")
    runs = []
    for gname, src in (("tanh(2x+1)", SYM_CHAIN), ("dense+bias+relu", SYM_DENSE)):
        for n in (4, 4096):
            x = rng.standard_normal((n, 256)).astype("float32")
            args = (x,) if "dense" not in gname else (x, w, b)
            for kind, dim in (("static", str(n)), ("symbolic n", "n"), ("symbolic ?", "?")):
                text = HDR + src.replace("DIM", dim).replace("@main(", "@main[n](" if dim == "n"
                                                             else "@main(")
                exe = runtime.build(rly.parse(text), executor="relax")
                modes = {k.dyn.mode if k.dyn else "static" for k in exe._backend.kernels.values()}
                assert modes == ({"static"} if kind == "static" else {"symbolic"}), modes
                want = runtime.evaluate(rly.parse(text), *args)
                np.testing.assert_allclose(exe(*args), want, rtol=1e-4, atol=1e-4)
                runs.append((f"{gname}, n={n}: {kind}", exe, args, 200 if n == 4 else 10))
    for _ in range(rounds):
        for name, exe, args, inner in runs:
            t.add(name, per_call(lambda: exe(*args), inner, repeat))
    return t


# ============================================================================ dispatch
DISPATCH_IDLE = HDR + """
def @loop(%i: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (%i > 0i64) { @loop(%i - 1i64, %x) } else { %x }
}
def @main(%n: int64, %x: Tensor[(4), float32]) -> Tensor[(4), float32] { @loop(%n, %x) }
"""
DISPATCH_KERNEL = DISPATCH_IDLE.replace("@loop(%i - 1i64, %x)", "@loop(%i - 1i64, tanh(%x))")
DISPATCH_N = 10_000


def dispatch(rounds: int, repeat: int) -> Table:
    """Per-iteration cost of a loop with and without one small kernel call."""
    t = Table(f"Dispatch: a {DISPATCH_N:,}-step tail-recursive loop, per iteration", "us")
    n = np.array(DISPATCH_N, "int64")
    x = np.float32([0.1, 0.2, 0.3, 0.4])
    want = x.copy()
    for _ in range(DISPATCH_N):
        want = np.tanh(want)
    runs = []
    for label, kw in (("compiled executor (Relax VM)", {}),):
        for kind, src in (("idle iteration", DISPATCH_IDLE),
                          ("one-kernel iteration", DISPATCH_KERNEL)):
            exe = runtime.build(rly.parse(src), **kw)
            got = exe(n, x)
            np.testing.assert_allclose(got, want if "kernel" in kind else x, rtol=1e-3)
            runs.append((f"{label}: {kind}", exe))
    for _ in range(rounds):
        for name, exe in runs:
            t.add(name, best(lambda: exe(n, x), repeat) / DISPATCH_N)
    return t


# ============================================================================ W6
W6_SRC = HDR + """
def @loop(%x: float32, %i: int32, %acc: float32) -> float32 {
  if (%i == 1000) { %acc } else {
    @loop(%x, %i + 1, %acc + sin(%x * cast(%i, dtype="float32")) * 0.001f)
  }
}
def @main(%x: float32) -> float32 { @loop(%x, 0, 0f) }
"""


def w6(rounds: int, repeat: int) -> tuple[Table, dict[str, float]]:
    """Grad of the 1000-step scalar loop."""
    t = Table("W6: grad of the 1000-step scalar loop (one call = df/dx at x = 0.5)", "us")
    checks: dict[str, float] = {}
    g = passes.gradient(InferType()(rly.parse(W6_SRC)), "main")
    t0 = time.perf_counter()
    exe = runtime.build(g)
    build_s = time.perf_counter() - t0
    x = np.float32(0.5)
    checks["relay_ir compiled"] = float(exe(x)[1][0])
    checks["relay_ir interpreter"] = float(runtime.evaluate(g, x)[1][0])
    peers: list[tuple[str, Callable[[], Any], str]] = []
    try:
        import jax
        import jax.numpy as jnp

        def f(xx: Any) -> Any:
            acc = 0.0
            for i in range(1000):
                acc = acc + jnp.sin(xx * i) * 0.001
            return acc
        t1 = time.perf_counter()
        jg = jax.jit(jax.grad(f))
        xj = jnp.float32(0.5)
        checks["jax.jit(grad)"] = float(jg(xj).block_until_ready())
        jit_s = time.perf_counter() - t1
        peers.append(("jax.jit(jax.grad)", lambda: jg(xj).block_until_ready(),
                      f"compile + first call {jit_s * 1e3:.0f} ms"))
    except ImportError:
        t.skip("jax.jit(jax.grad)", "jax not installed")
    try:
        import torch

        def tgrad() -> Any:
            xt = torch.tensor(0.5, dtype=torch.float32, requires_grad=True)
            acc = torch.zeros((), dtype=torch.float32)
            for i in range(1000):
                acc = acc + torch.sin(xt * i) * 0.001
            return torch.autograd.grad(acc, xt)[0]
        checks["torch eager"] = float(tgrad())
        peers.append(("torch eager 0-d tensors + autograd.grad", tgrad, ""))
    except ImportError:
        t.skip("torch eager 0-d tensors + autograd.grad", "torch not installed")
    relax_name = "relay_ir executor='relax' (same program)"
    try:
        relax_exe = runtime.build(g, executor="relax")
        checks["relay_ir relax"] = float(relax_exe(x)[1][0])
    except rly.DiagnosticError as e:
        relax_exe = None
        t.skip(relax_name, e.message.split(" (build")[0])
    for _ in range(rounds):
        t.add("relay_ir compiled (runtime.build of passes.gradient)",
              best(lambda: exe(x), repeat), f"build {build_s:.1f} s")
        if relax_exe is not None:
            t.add(relax_name, best(lambda: relax_exe(x), repeat))
        t.add("relay_ir interpreter (same program)", best(lambda: runtime.evaluate(g, x),
                                                          repeat))
        for name, fn, note in peers:
            t.add(name, best(fn, repeat), note)
    return t, checks


# ============================================================================ W5
def w5(rounds: int, repeat: int) -> tuple[Table, dict[str, float]]:
    """TreeLSTM forward + backward per tree: W5 as benchmarks/workloads.py defines it (trees,
    parameters, program and the PyTorch peer)."""
    import workloads as wl
    t = Table("W5: TreeLSTM H=128, fwd + bwd per tree (64 trees of 8-32 leaves, batch 1)",
              "ms")
    checks: dict[str, float] = {}
    trees, params = wl.w5_trees(), wl.w5_params()
    g = passes.gradient(InferType()(rly.parse(wl.w5_source())), "main")
    t0 = time.perf_counter()
    exe = runtime.build(g)
    build_s = time.perf_counter() - t0
    eye5 = np.eye(5, dtype="float32")
    data = [(wl._to_adt(g, tr), eye5[lab]) for tr, lab in trees]
    from relay_ir.runtime.executor import as_aligned
    aparams = [as_aligned(p) for p in params]

    def compiled_pass() -> float:
        return sum(float(exe(tr, lab, *aparams)[0]) for tr, lab in data)

    def interp_pass() -> float:
        return sum(float(runtime.evaluate(g, tr, lab, *params)[0]) for tr, lab in data)
    relax_name = "relay_ir executor='relax' (same program)"
    t1 = time.perf_counter()
    try:
        relax_exe = runtime.build(g, executor="relax")
    except rly.DiagnosticError as e:
        relax_exe = None
        t.skip(relax_name, e.message.split(" (build")[0])
    relax_s = time.perf_counter() - t1

    def relax_pass() -> float:
        return sum(float(relax_exe(tr, lab, *aparams)[0]) for tr, lab in data)
    if relax_exe is not None:
        checks["relay_ir relax"] = relax_pass()
    checks["relay_ir compiled"] = compiled_pass()
    checks["relay_ir interpreter"] = interp_pass()
    peers: list[tuple[str, Callable[[], Any]]] = []
    torch_impl = next((i for i in wl.w5_impls() if i.name.startswith("torch")), None)
    if torch_impl is None:
        t.skip("torch eager (Python recursion, autograd.grad)", "torch not installed")
    else:
        import torch
        torch_run = torch_impl.make()

        def torch_pass() -> float:
            return torch_impl.check(torch_run())
        checks["torch eager"] = torch_pass()
        peers.append(("torch eager (Python recursion, autograd.grad)", torch_pass))

        def torch_pass_1thread() -> float:
            n = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return torch_pass()
            finally:
                torch.set_num_threads(n)
        peers.append(("torch eager, torch.set_num_threads(1)", torch_pass_1thread))
    for _ in range(rounds):
        t.add("relay_ir compiled (runtime.build of passes.gradient)",
              best(compiled_pass, repeat) / len(data), f"build {build_s:.1f} s")
        if relax_exe is not None:
            t.add(relax_name, best(relax_pass, repeat) / len(data), f"build {relax_s:.1f} s")
        t.add("relay_ir interpreter (same program)", best(interp_pass, max(1, repeat // 2))
              / len(data))
        for name, fn in peers:
            t.add(name, best(fn, repeat) / len(data))
    return t, checks


# ============================================================================ corpus
def corpus(rounds: int, repeat: int) -> Table:
    """Compiled vs interpreted on every example program."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from util_diff import random_inputs
    t = Table("Corpus: examples/*.rly, compiled (runtime.build) vs interpreted, per call",
              "us")
    progs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.rly"))):
        text = open(path, encoding="utf-8").read()
        try:
            mod = rly.parse(text, path)
        except rly.DiagnosticError:
            mod = rly.parse(text, path, prelude=True)
        args = tuple(np.abs(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
                     for a in random_inputs(mod, seed=0))
        exe = runtime.build(mod)
        exe(*args)
        runtime.evaluate(mod, *args)
        kind = f"{exe.num_kernels()} kernels"
        progs.append((os.path.basename(path), mod, exe, args, kind))
    for _ in range(rounds):
        for name, mod, exe, args, kind in progs:
            t.add(f"{name} compiled ({kind})", per_call(lambda: exe(*args), 20, repeat))
            t.add(f"{name} interpreted", per_call(lambda: runtime.evaluate(mod, *args), 20,
                                                  repeat))
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="overhead,dispatch,symbolic,w6,w5,corpus")
    a = ap.parse_args()
    import tvm
    print(f"# bench_executor: {platform.processor() or platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} cores, TVM {tvm.__version__}, "
          f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    only = a.only.split(",")
    if "overhead" in only:
        t = overhead(a.rounds, a.repeat)
        print(t.show("TVM kernel alone (prebuilt tvm tensors)"), "\n")
        k = t.median("TVM kernel alone (prebuilt tvm tensors)") or 0
        for row in ("runtime.build, straight-line",
                    "runtime.build, compiled executor (exp behind an if)"):
            m = t.median(row)
            if m is not None:
                print(f"{row}: {(m - k) * 1e6:.2f} us above the kernel")
        print()
    if "dispatch" in only:
        t = dispatch(a.rounds, a.repeat)
        print(t.show(), "\n")
        for label in ("compiled executor (Relax VM)",):
            idle = t.median(f"{label}: idle iteration")
            one = t.median(f"{label}: one-kernel iteration")
            if idle is not None and one is not None:
                print(f"{label}: the kernel call {(one - idle) * 1e6:.2f} us above an idle "
                      f"iteration ({one * 1e6:.2f} us per iteration in all)")
        print()
    if "symbolic" in only:
        print(symbolic(a.rounds, a.repeat).show(), "\n")
    if "w6" in only:
        t, checks = w6(a.rounds, a.repeat)
        print(t.show("torch eager 0-d tensors + autograd.grad"), "\n")
        print("check values (df/dx):", {k: round(v, 6) for k, v in checks.items()}, "\n")
    if "w5" in only:
        t, checks = w5(a.rounds, a.repeat)
        print(t.show("torch eager (Python recursion, autograd.grad)"), "\n")
        print("check values (loss sum over 64 trees):",
              {k: round(v, 4) for k, v in checks.items()}, "\n")
    if "corpus" in only:
        print(corpus(a.rounds, a.repeat).show(), "\n")


if __name__ == "__main__":
    main()
