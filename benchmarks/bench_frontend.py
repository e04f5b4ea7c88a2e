"""The Python frontend's budget (issue 24): translate + gradient + optimize + build of a
50-line Python function, and the compiled gradient of a Python-written MLP loss against the
same model written in examples/mlp_train.rly.

    .venv/bin/python benchmarks/bench_frontend.py
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

import relay_ir as rly
from relay_ir import passes, runtime
from relay_ir.frontend import from_python, value_and_grad

ROOT = pathlib.Path(__file__).resolve().parent.parent


def mlp_loss(x, y, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, 0.0)
    z = h @ w2 + b2
    m = np.max(z, axis=1, keepdims=True)
    logp = z - m - np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def fifty_lines(x, w, n):
    a = np.tanh(x @ w)
    b = a * 2.0 + 1.0
    c = np.exp(-b * b)
    d = c / (1.0 + np.sum(c))
    e = np.maximum(d, 0.01)
    f = np.log(e)
    g = f * f - e
    h = np.sum(g, axis=1)
    k = np.mean(h)
    s = 0.0
    for i in range(n):
        s = s + k * float(i)
        if s > 10.0:
            s = s * 0.5
    t = s * k
    u = np.tanh(a) @ w.T
    v = np.sum(u * x)
    q = v + t
    r = q * q
    if r > 1.0:
        r = np.sqrt(r)
    else:
        r = r + 1.0
    a2 = np.sin(x) * np.cos(x)
    b2 = np.sum(a2 * a2)
    c2 = b2 + r
    d2 = np.exp(-c2 * 0.001)
    e2 = d2 * c2
    f2 = e2 + np.mean(x)
    g2 = f2 * 0.5
    h2 = g2 + np.max(x)
    i2 = h2 - np.min(w)
    j2 = i2 * i2
    k2 = np.sqrt(j2 + 1.0)
    m2 = k2 + np.sum(np.abs(w))
    n2 = m2 / 3.0
    o2 = n2 + 0.25
    return o2


SAME_MATH_RLY = """#[version = "0.0.5"]
def @main(%x: Tensor[(32, 64), float32], %y: Tensor[(32, 10), float32],
          %w1: Tensor[(64, 64), float32], %b1: Tensor[(64), float32],
          %w2: Tensor[(64, 10), float32], %b2: Tensor[(10), float32]) -> float32 {
  let %h = maximum(add(nn.matmul(%x, %w1), %b1), 0f);
  let %z = add(nn.matmul(%h, %w2), %b2);
  let %m = max(%z, axis=[1], keepdims=True);
  let %d = subtract(%z, %m);
  let %logp = subtract(%d, log(sum(exp(%d), axis=[1], keepdims=True)));
  negative(mean(sum(multiply(%logp, %y), axis=[1])))
}
"""


def rly_step(text=None):
    mod = rly.parse(text or (ROOT / "examples" / "mlp_train.rly").read_text())
    g = passes.optimize(passes.gradient(mod, entry="main", wrt=("w1", "b1", "w2", "b2")))
    return runtime.build(g)


def timeit(f, n=300):
    f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64)).astype("float32")
    y = np.eye(10, dtype="float32")[rng.integers(0, 10, 32)]
    params = [rng.standard_normal(s).astype("float32") * 0.1 for s in
              [(64, 64), (64,), (64, 10), (10,)]]
    # warm the kernel cache, then time a fresh translation + gradient + optimize + build
    for _ in range(2):
        t = time.perf_counter()
        vg = value_and_grad(fifty_lines, argnums=(0, 1))
        xs, ws = x[:4, :8], params[0][:8, :8]
        vg(xs, ws, 5)
        t50 = time.perf_counter() - t
    print(f"50-line function: from_python+gradient+optimize+build {t50:.3f} s")
    py = value_and_grad(mlp_loss, argnums=(2, 3, 4, 5))
    py(x, y, *params)
    exe = rly_step()
    same = rly_step(SAME_MATH_RLY)
    # NOTE: interleaved rounds, best of each: the machine is shared, single runs are noisy
    runs: dict[str, list[float]] = {"py": [], "rly": [], "same": []}
    for _ in range(7):
        runs["py"].append(timeit(lambda: py(x, y, *params), 100))
        runs["rly"].append(timeit(lambda: exe(x, y, *params), 100))
        runs["same"].append(timeit(lambda: same(x, y, *params), 100))
    t_py, t_rly, t_same = (min(runs[k]) for k in ("py", "rly", "same"))
    print(f"MLP loss gradient: python {t_py * 1e3:.3f} ms, examples/mlp_train.rly "
          f"{t_rly * 1e3:.3f} ms (ratio {t_py / t_rly:.2f}), the same math in .rly "
          f"{t_same * 1e3:.3f} ms (ratio {t_py / t_same:.2f})")
    v_py = py(x, y, *params)[0]
    v_rly = exe(x, y, *params)[0]
    print(f"values: python {float(v_py):.6f}, .rly {float(v_rly):.6f}")


if __name__ == "__main__":
    main()
